//! The Linux alternative on a kernel without IPVS: nftables DNAT to the same reals through a
//! `jhash` map (plus SNAT to the local address for full-NAT), kernel forwarding on.

use super::frames::Addressing;
use super::Mode;
use crate::{Error, Result};

/// The table lb_bench owns in the load balancer's namespace.
const TABLE: &str = "lb_bench";

/// The ruleset for `mode`: DNAT of the VIP's TCP and UDP ports to the reals (hashed on the
/// client's address and port, as Maglev spreads flows), and for full-NAT SNAT of what goes to
/// the reals to the local address.
pub fn ruleset(a: &Addressing, mode: Mode) -> String {
    let map = |port: u16| {
        a.reals
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{i} : {} . {port}", r.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let n = a.reals.len();
    let mut s = format!(
        "table ip {TABLE} {{\n  chain pre {{\n    type nat hook prerouting priority dstnat; policy accept;\n\
         \x20   ip daddr {vip} tcp dport {tp} dnat ip addr . port to jhash ip saddr . tcp sport mod {n} map {{ {tmap} }}\n\
         \x20   ip daddr {vip} udp dport {up} dnat ip addr . port to jhash ip saddr . udp sport mod {n} map {{ {umap} }}\n  }}\n",
        vip = a.vip,
        tp = a.tcp_port,
        up = a.udp_port,
        tmap = map(a.real_tcp_port),
        umap = map(a.real_udp_port),
    );
    if mode == Mode::FullNat {
        let l = a.laddrs();
        let range = match (l.first(), l.last()) {
            (Some(f), Some(t)) if f != t => format!("{f}-{t}"),
            (Some(f), _) => f.to_string(),
            _ => a.laddr_net.to_string(),
        };
        s.push_str(&format!(
            "  chain post {{\n    type nat hook postrouting priority srcnat; policy accept;\n\
             \x20   ip daddr {}/{} snat to {range}\n  }}\n",
            a.real_net.0, a.real_net.1
        ));
    }
    s.push_str("}\n");
    s
}

/// Loads `ruleset` into namespace `ns` (replacing lb_bench's table).
pub fn load(ns: &str, ruleset: &str) -> Result<()> {
    remove(ns);
    run_nft(ns, &["-f", "-"], Some(ruleset))
}

/// Removes lb_bench's table from `ns`, if there.
pub fn remove(ns: &str) {
    let _ = run_nft(ns, &["delete", "table", "ip", TABLE], None);
}

fn run_nft(ns: &str, args: &[&str], stdin: Option<&str>) -> Result<()> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Io {
            what: "run nft (install nftables)".into(),
            source,
        })?;
    if let Some(mut input) = c.stdin.take() {
        let _ = input.write_all(stdin.unwrap_or("").as_bytes());
    }
    let out = c.wait_with_output().map_err(|source| Error::Io {
        what: "wait for nft".into(),
        source,
    })?;
    if !out.status.success() {
        return Err(Error::Invalid(format!(
            "nft {} in {ns} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
