//! `wirespeed lb announce --speaker frr`: the node's own FRR (zebra, bgpd, bfdd) speaks BGP,
//! with BFD when the session asks for it, and `lb announce` runs beside it, adding and removing
//! `network` statements in its `router bgp` through vtysh (docs/LB.md, "Several nodes:
//! announcing over BGP"). The daemon's set comes by the same loop as ExaBGP's
//! (`announce::follow`).
//!
//! Our statements carry a route-map, `network 198.18.100.1/32 route-map wirespeed-lb`: it
//! marks them ours, so each change is reckoned against what bgpd has now (its running
//! config), and a restarted `lb announce` removes the ones a previous run left while the
//! node's other networks stay; the route-map may also set attributes. It is made as `permit
//! 10` when bgpd has none of that name. bgpd's config is read again every few seconds, so
//! routes a restarted bgpd lost come back.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use wirespeed_sys::signal::CommandExt;

use crate::announce::{changes, host_prefix, Change, Failure, Speaker};

/// The route-map that marks our `network` statements, unless `--route-map` says otherwise.
pub const DEFAULT_ROUTE_MAP: &str = "wirespeed-lb";

/// How often bgpd's config is read again while nothing changes: a bgpd restarted from its
/// config file has lost our statements.
pub const RESYNC: Duration = Duration::from_secs(5);

/// Runs vtysh with these commands (`-c` each) against bgpd; its output, or one line that says
/// what failed and what to do.
pub type Runner = Box<dyn FnMut(&[String]) -> Result<String, String> + Send>;

/// What bgpd has that concerns us, read from its running config.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Running {
    /// `router bgp ASN` (not a VRF's or a view's) is configured.
    pub router: bool,
    /// The route-map is defined.
    pub route_map: bool,
    /// Host routes under `router bgp ASN`, IPv4 or IPv6 unicast, with our route-map.
    pub ours: BTreeSet<IpAddr>,
}

/// Reads `show running-config`'s text for what is ours in `router bgp asn`.
pub fn parse_running(config: &str, asn: u32, route_map: &str) -> Running {
    let mut out = Running::default();
    let router = format!("router bgp {asn}");
    let mut in_router = false;
    // Networks outside an address-family block are IPv4 unicast's.
    let mut unicast = true;
    for line in config.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if !line.starts_with(' ') {
            in_router = line.trim_end() == router;
            out.router |= in_router;
            unicast = true;
            if words.len() >= 2 && words[0] == "route-map" && words[1] == route_map {
                out.route_map = true;
            }
            continue;
        }
        if !in_router {
            continue;
        }
        match words.as_slice() {
            ["address-family", afi, safi] => {
                unicast = matches!(*afi, "ipv4" | "ipv6") && *safi == "unicast"
            }
            ["exit-address-family"] => unicast = true,
            ["network", prefix, "route-map", rm] if unicast && *rm == route_map => {
                if let Some(a) = host_address(prefix) {
                    out.ours.insert(a);
                }
            }
            _ => {}
        }
    }
    out
}

/// The address of a /32 or /128 prefix.
fn host_address(prefix: &str) -> Option<IpAddr> {
    let (a, len) = prefix.split_once('/')?;
    let a: IpAddr = a.parse().ok()?;
    (len == if a.is_ipv4() { "32" } else { "128" }).then_some(a)
}

/// The vtysh commands for `changes`, in their order: into `router bgp asn`, each change in
/// its family's address-family, the route-map made first when `make_route_map`.
pub fn commands(
    asn: u32,
    route_map: &str,
    make_route_map: bool,
    changes: &[Change],
) -> Vec<String> {
    let mut out = vec!["configure terminal".to_string()];
    if make_route_map {
        out.push(format!("route-map {route_map} permit 10"));
        out.push("exit".into());
    }
    out.push(format!("router bgp {asn}"));
    let mut family: Option<bool> = None;
    for c in changes {
        let (a, line) = match *c {
            Change::Withdraw(a) => (a, format!("no network {}", host_prefix(a))),
            Change::Announce(a) => (
                a,
                format!("network {} route-map {route_map}", host_prefix(a)),
            ),
        };
        if family != Some(a.is_ipv4()) {
            if family.is_some() {
                out.push("exit-address-family".into());
            }
            let afi = if a.is_ipv4() { "ipv4" } else { "ipv6" };
            out.push(format!("address-family {afi} unicast"));
            family = Some(a.is_ipv4());
        }
        out.push(line);
    }
    if family.is_some() {
        out.push("exit-address-family".into());
    }
    out
}

/// The node's FRR as the speaker.
pub struct Frr {
    asn: u32,
    route_map: String,
    run: Runner,
}

impl Frr {
    /// Drives bgpd through `vtysh -d bgpd`, on the vty sockets in `vty_socket` (bgpd's
    /// `--vty_socket`; FRR's default directory when None).
    pub fn new(asn: u32, route_map: &str, vty_socket: Option<PathBuf>) -> Frr {
        Frr::with_runner(
            asn,
            route_map,
            Box::new(move |cmds| vtysh(vty_socket.as_deref(), cmds)),
        )
    }

    pub fn with_runner(asn: u32, route_map: &str, run: Runner) -> Frr {
        Frr {
            asn,
            route_map: route_map.to_string(),
            run,
        }
    }
}

impl Speaker for Frr {
    fn apply(&mut self, wanted: &BTreeSet<IpAddr>) -> Result<Vec<String>, Failure> {
        let config = (self.run)(&["show running-config".into()]).map_err(Failure::Retry)?;
        let have = parse_running(&config, self.asn, &self.route_map);
        let todo = changes(&have.ours, wanted);
        if todo.is_empty() {
            return Ok(Vec::new());
        }
        if !have.router {
            return Err(Failure::Retry(format!(
                "FRR's bgpd has no `router bgp {}`: configure the node's BGP session in FRR, or give --asn the AS of its `router bgp` (vtysh -c 'show running-config')",
                self.asn
            )));
        }
        let make = !have.route_map && todo.iter().any(|c| matches!(c, Change::Announce(_)));
        (self.run)(&commands(self.asn, &self.route_map, make, &todo)).map_err(Failure::Retry)?;
        Ok(todo
            .iter()
            .map(|c| match c {
                Change::Announce(a) => format!("FRR announces {}", host_prefix(*a)),
                Change::Withdraw(a) => format!("FRR withdrew {}", host_prefix(*a)),
            })
            .collect())
    }

    fn resync(&self) -> Option<Duration> {
        Some(RESYNC)
    }
}

/// `vtysh [--vty_socket DIR] -d bgpd -c CMD...`: stdout, or one line with vtysh's words and
/// what to do.
fn vtysh(vty_socket: Option<&std::path::Path>, cmds: &[String]) -> Result<String, String> {
    let mut c = Command::new("vtysh");
    if let Some(d) = vty_socket {
        c.arg("--vty_socket").arg(d);
    }
    c.args(["-d", "bgpd"]);
    for cmd in cmds {
        c.arg("-c").arg(cmd);
    }
    c.stdin(Stdio::null()).unblock_signals();
    let out = c.output().map_err(|e| {
        format!("cannot run vtysh ({e}): install FRR (its vtysh), or put vtysh on PATH")
    })?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(text);
    }
    let said: Vec<String> = text
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let said = said.join("; ");
    let said = said.trim_end_matches('.');
    let hint = if said.contains("failed to connect") {
        format!(
            "start FRR's bgpd, or give --vty-socket the directory of its vty sockets (its --vty_socket{})",
            if vty_socket.is_none() { "; FRR's default is /var/run/frr" } else { "" }
        )
    } else if said.contains("AS is") {
        "give --asn the AS of the node's `router bgp`".to_string()
    } else {
        "see bgpd's log and its config (vtysh -c 'show running-config')".to_string()
    };
    Err(format!(
        "vtysh -d bgpd -c '{}' failed ({}): {said}; {hint}",
        cmds.last().map_or("", |c| c.as_str()),
        out.status
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn set(list: &[&str]) -> BTreeSet<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    /// bgpd 8.4's `show running-config`, with one network of ours left by an earlier run, the
    /// node's own network, and networks of ours' shape elsewhere.
    const RUNNING: &str = "Building configuration...

Current configuration:
!
frr version 8.4.4
frr defaults traditional
!
router bgp 65001
 bgp router-id 198.18.0.1
 neighbor 198.18.0.2 remote-as 65000
 neighbor 198.18.0.2 bfd profile fast
 !
 address-family ipv4 unicast
  network 198.18.0.1/32
  network 198.18.100.1/32 route-map wirespeed-lb
  network 198.18.101.0/24 route-map wirespeed-lb
 exit-address-family
 !
 address-family ipv4 multicast
  network 198.18.100.7/32 route-map wirespeed-lb
 exit-address-family
 !
 address-family ipv6 unicast
  network fd00::100/128 route-map wirespeed-lb
  network fd00::101/128 route-map other
 exit-address-family
exit
!
router bgp 65001 vrf blue
 address-family ipv4 unicast
  network 198.18.100.9/32 route-map wirespeed-lb
 exit-address-family
exit
!
route-map wirespeed-lb permit 10
exit
!
end
";

    #[test]
    fn running_config_yields_our_host_networks_in_our_router_only() {
        let r = parse_running(RUNNING, 65001, DEFAULT_ROUTE_MAP);
        assert_eq!(
            r,
            Running {
                router: true,
                route_map: true,
                ours: set(&["198.18.100.1", "fd00::100"]),
            }
        );
        let other = parse_running(RUNNING, 65002, "other");
        assert!(!other.router && !other.route_map && other.ours.is_empty());
        assert_eq!(
            parse_running(RUNNING, 65001, "other").ours,
            set(&["fd00::101"])
        );
    }

    #[test]
    fn commands_withdraw_first_each_in_its_address_family() {
        let todo = changes(
            &set(&["198.18.100.1", "fd00::100"]),
            &set(&["198.18.100.2", "fd00::100", "fd00::200"]),
        );
        assert_eq!(
            commands(65001, "wirespeed-lb", true, &todo),
            [
                "configure terminal",
                "route-map wirespeed-lb permit 10",
                "exit",
                "router bgp 65001",
                "address-family ipv4 unicast",
                "no network 198.18.100.1/32",
                "network 198.18.100.2/32 route-map wirespeed-lb",
                "exit-address-family",
                "address-family ipv6 unicast",
                "network fd00::200/128 route-map wirespeed-lb",
                "exit-address-family",
            ]
        );
        let todo = changes(&set(&["fd00::100"]), &set(&["198.18.100.1"]));
        assert_eq!(
            commands(65001, "lb", false, &todo)[1..],
            [
                "router bgp 65001",
                "address-family ipv6 unicast",
                "no network fd00::100/128",
                "exit-address-family",
                "address-family ipv4 unicast",
                "network 198.18.100.1/32 route-map lb",
                "exit-address-family",
            ]
        );
    }

    /// A bgpd whose running config is `config`; the command lines it was given.
    fn fake(config: &str) -> (Frr, Arc<Mutex<Vec<Vec<String>>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (config, log) = (config.to_string(), seen.clone());
        let run: Runner = Box::new(move |cmds: &[String]| {
            log.lock().unwrap().push(cmds.to_vec());
            Ok(config.clone())
        });
        (Frr::with_runner(65001, DEFAULT_ROUTE_MAP, run), seen)
    }

    #[test]
    fn applying_reconciles_with_what_bgpd_has_now() {
        // A restarted lb announce: the earlier run's 198.18.100.1 goes, fd00::100 stays.
        let (mut frr, seen) = fake(RUNNING);
        let done = frr.apply(&set(&["fd00::100", "198.18.100.3"])).unwrap();
        assert_eq!(
            done,
            [
                "FRR withdrew 198.18.100.1/32",
                "FRR announces 198.18.100.3/32"
            ]
        );
        assert_eq!(
            seen.lock().unwrap().clone(),
            [
                vec!["show running-config".to_string()],
                commands(
                    65001,
                    DEFAULT_ROUTE_MAP,
                    false,
                    &[
                        Change::Withdraw("198.18.100.1".parse().unwrap()),
                        Change::Announce("198.18.100.3".parse().unwrap())
                    ]
                )
            ]
        );
        // Nothing to do: only the read.
        let (mut frr, seen) = fake(RUNNING);
        assert!(frr
            .apply(&set(&["198.18.100.1", "fd00::100"]))
            .unwrap()
            .is_empty());
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[test]
    fn applying_makes_the_route_map_and_needs_our_router() {
        let bare = "router bgp 65001\n bgp router-id 198.18.0.1\nexit\n";
        let (mut frr, seen) = fake(bare);
        frr.apply(&set(&["198.18.100.1"])).unwrap();
        assert_eq!(
            seen.lock().unwrap()[1][1],
            "route-map wirespeed-lb permit 10"
        );
        // Withdrawing everything from a bgpd without our router is nothing to do.
        let (mut frr, _) = fake("router bgp 65000\nexit\n");
        assert!(frr.apply(&BTreeSet::new()).unwrap().is_empty());
        match frr.apply(&set(&["198.18.100.1"])) {
            Err(Failure::Retry(m)) => assert!(m.contains("router bgp 65001"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_vtysh_failure_is_retried() {
        let run: Runner = Box::new(|_: &[String]| Err("vtysh failed".into()));
        let mut frr = Frr::with_runner(65001, DEFAULT_ROUTE_MAP, run);
        assert!(matches!(
            frr.apply(&set(&["198.18.100.1"])),
            Err(Failure::Retry(m)) if m == "vtysh failed"
        ));
        assert_eq!(frr.resync(), Some(RESYNC));
    }
}
