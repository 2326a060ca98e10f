//! The routed rows of the line lab: the frames each sends and the configuration each adds on
//! top of the previous rows' (they build on each other, in order).

use std::io::Write;

use wirespeed_lab::Netns;
use wirespeed_testkit::frame as pkt;
use wirespeed_xdpgen::Gen;

pub type Frame = [u8; Gen::FRAME_LEN];

/// What the routed rows send besides the one flow: the flow with a partial checksum, as a
/// middle fragment, and to 4,096 destinations.
pub struct Frames {
    pub partial: Frame,
    pub fragment: Frame,
    pub spread: Vec<Frame>,
}

impl Frames {
    /// From the one flow's frame `one` (198.18.0.1 -> 198.19.7.1, UDP) and its MACs.
    pub fn new(one: &[u8], dut_mac: [u8; 6], src_mac: [u8; 6]) -> Frames {
        // Frames to 4,096 destinations over the 50 prefixes, sent round robin: each
        // destination comes back only after all the others, more of them than the route cache
        // has slots.
        let spread = (0..Gen::MAX_FRAMES)
            .map(|n| {
                let dst = [198, 19, (n % 50) as u8, (1 + n / 50) as u8];
                let f = pkt::ipv4(
                    dut_mac,
                    src_mac,
                    [198, 18, 0, 1],
                    dst,
                    64,
                    &[],
                    &super::udp18(),
                );
                f.as_slice().try_into().expect("60-byte frame")
            })
            .collect();
        // The same flow as a local sender with checksum offload (a veth's default) hands it
        // over: the UDP checksum field holds only the pseudo-header sum (CHECKSUM_PARTIAL). An
        // XDP redirect would deliver it corrupt, so the XDP router passes it marked, and the TC
        // stage behind it routes the skb.
        let mut partial = one.to_vec();
        let (src, dst) = ([198u16 << 8 | 18, 1], [198u16 << 8 | 19, 7 << 8 | 1]);
        let udp_len = (partial.len() - 14 - 20) as u64;
        let mut sum: u64 =
            src.iter().chain(dst.iter()).map(|w| *w as u64).sum::<u64>() + 17 + udp_len;
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        partial[40..42].copy_from_slice(&(sum as u16).to_be_bytes());
        // The same flow's datagrams cut by their sender: a middle fragment (offset 1,480, more
        // to come), which carries no ports. Linux forwards it as it is, without conntrack.
        let mut fragment = one.to_vec();
        pkt::make_ipv4_fragment(&mut fragment, 185, true);
        Frames {
            partial: partial.as_slice().try_into().expect("60-byte frame"),
            fragment: fragment.as_slice().try_into().expect("60-byte frame"),
            spread,
        }
    }
}

/// One routed row: its name, whether the fast path keeps its route cache, the frames the
/// generator cycles through (none: the one flow), and the configuration it adds.
pub struct Row<'a> {
    pub name: &'static str,
    pub route_cache: bool,
    pub frames: &'a [Frame],
    pub setup: fn(&Netns),
}

pub fn rows(frames: &Frames) -> Vec<Row<'_>> {
    let row = |name, route_cache, frames, setup| Row {
        name,
        route_cache,
        frames,
        setup,
    };
    let none: &[Frame] = &[];
    vec![
        row("router (50 prefixes)", true, none, |_| {}),
        row(
            "router at XDP, partial UDP checksums (TC stage)",
            true,
            std::slice::from_ref(&frames.partial),
            |_| {},
        ),
        row(
            "router, IPv4 fragments",
            true,
            std::slice::from_ref(&frames.fragment),
            |_| {},
        ),
        row("router, route cache off", false, none, |_| {}),
        row(
            "router, ECMP route (the sysctl gate read)",
            true,
            none,
            ecmp_route,
        ),
        row(
            "router, a tc classifier on d0's ingress (to the kernel)",
            true,
            none,
            tc_classifier,
        ),
        row(
            "router, 4,096 destinations round robin",
            true,
            &frames.spread,
            no_tc_classifier,
        ),
        row(
            "router, rp_filter 2 (loose: Debian's default)",
            true,
            none,
            loose_rp_filter,
        ),
        row(
            "router, a policy rule (from 198.18.0.0/24), rp_filter 2",
            true,
            none,
            policy_rule,
        ),
        row(
            "gateway (100 iptables rules)",
            true,
            none,
            hundred_iptables_rules,
        ),
        row("gateway (one ipset, 100 members)", true, none, one_ipset),
    ]
}

/// The flow's route with two next hops (the same one twice): every packet asks the FIB, and
/// reads the sysctl gate that a hash policy write closes (docs/FASTPATH.md, "ECMP").
fn ecmp_route(dut: &Netns) {
    let hops = ["nexthop", "via", "198.18.1.2"];
    let mut args = vec!["route", "replace", "198.19.7.0/24"];
    args.extend(hops);
    args.extend(hops);
    dut.ip(&args).unwrap();
}

/// A tc classifier of the user's on d0's ingress (it matches everything and only counts): it
/// runs after XDP, so d0's packets are the kernel's.
fn tc_classifier(dut: &Netns) {
    dut.ip(&["route", "replace", "198.19.7.0/24", "via", "198.18.1.2"])
        .unwrap();
    for cmd in [
        "qdisc add dev d0 clsact",
        "filter add dev d0 ingress protocol all prio 1 u32 match u32 0 0",
    ] {
        dut.exec("tc", &cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
}

fn no_tc_classifier(dut: &Netns) {
    dut.exec("tc", &["qdisc", "del", "dev", "d0", "clsact"])
        .unwrap();
}

/// Debian's default (sysctl.d/50-default.conf), which new namespaces inherit: the router
/// checks each packet's source with a second FIB lookup. Before the gateway rows, which set
/// it back to 0 and build on each other's rules (the ipset is what the response times poll).
fn loose_rp_filter(dut: &Netns) {
    rp_filter(dut, "2");
}

fn rp_filter(dut: &Netns, value: &str) {
    for dev in ["d0", "d1"] {
        dut.sysctl(&format!("net.ipv4.conf.{dev}.rp_filter"), value)
            .unwrap();
    }
}

/// A source-based policy rule (table 100 is empty, so every lookup falls through to main):
/// the router stays on, with its caches off and the source checked as the kernel does with
/// custom rules. Before, IPv4 went to the kernel (about 1.0x).
fn policy_rule(dut: &Netns) {
    dut.ip(&[
        "rule",
        "add",
        "from",
        "198.18.0.0/24",
        "table",
        "100",
        "pref",
        "100",
    ])
    .unwrap();
}

fn hundred_iptables_rules(dut: &Netns) {
    let _ = dut.ip(&["rule", "del", "pref", "100"]);
    rp_filter(dut, "0");
    let mut rules = String::from("*filter\n:FORWARD ACCEPT [0:0]\n");
    for x in 0..100 {
        rules.push_str(&format!(
            "-A FORWARD -s 198.18.{}.{}/32 -d 198.19.{}.0/24 -j DROP\n",
            100 + x / 200,
            x % 200 + 1,
            x % 50
        ));
    }
    rules.push_str("COMMIT\n");
    restore(dut.command("iptables-nft-restore"), &rules);
}

fn one_ipset(dut: &Netns) {
    dut.exec("iptables-nft", &["-F", "FORWARD"]).unwrap();
    let mut members = String::from("create blk hash:ip family inet\n");
    for x in 0..100 {
        members.push_str(&format!(
            "add blk 198.18.{}.{}\n",
            100 + x / 200,
            x % 200 + 1
        ));
    }
    let mut ipset = dut.command("ipset");
    ipset.arg("restore");
    restore(ipset, &members);
    let rule = "-A FORWARD -m set --match-set blk src -j DROP";
    dut.exec("iptables-nft", &rule.split(' ').collect::<Vec<_>>())
        .unwrap();
}

/// Runs a `*-restore` command with `input` on its standard input.
fn restore(mut cmd: std::process::Command, input: &str) {
    let mut c = cmd.stdin(std::process::Stdio::piped()).spawn().unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    assert!(c.wait().unwrap().success());
}
