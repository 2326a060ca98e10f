//! Randomized differential test across configurations: a seeded generator builds topologies
//! with plain `ip`, `ethtool`, `iptables-nft`, `ipset` and `bridge` commands (no lab tuning:
//! every device feature is either left at the kernel's default or drawn), runs the same
//! traffic through Linux alone and then through Linux plus the fast-path daemon, and compares
//! what arrives end to end. See docs/FASTPATH.md, "Differential testing across
//! configurations".
//!
//! `WS_FP_CONFIGS` (default 100) configurations; `WS_FP_SEED` the first one's seed (default
//! random, printed). Configuration `i` uses seed `WS_FP_SEED + i`, so a divergence replays
//! alone with `WS_FP_SEED=<its seed> WS_FP_CONFIGS=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use wirespeed_fp::daemon::Config;
use wirespeed_fp::status::Status;
use wirespeed_fp_lab::line::{ip_batch, spawn_in_ns, RunningDaemon};
use wirespeed_lab::Netns;
use wirespeed_testkit::rng::Rng;

const REPLAY: &str =
    "cargo test --profile ci -p wirespeed-fp-lab --test random_topologies -- --nocapture";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// src - dut - sink, routed
    Line,
    /// src - dut - two sinks, routed
    TwoSinks,
    /// a bridge br0 in the dut with a port into each pod (src and one or two sinks)
    Bridge,
}

/// A trivial XDP_PASS program on the far end of a DUT veth, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerXdp {
    None,
    /// Native mode: the veth then runs NAPI, so XDP redirects into its peer are delivered.
    Native,
    /// Generic mode: it does not give the veth NAPI.
    Generic,
}

/// The DUT's neighbour entry for the far end (routed shapes), set before each run; in the
/// bridge shape, the FDB entry for the far end's MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Neigh {
    /// none: the first packet resolves it (bridge: flooded until learned)
    Absent,
    /// `nud reachable` (bridge: learned from a ping before the run)
    Resolved,
    /// `nud stale`, the right MAC (bridge: the same as Absent, FDB entries do not go stale)
    Stale,
    /// `nud permanent` (bridge: a static FDB entry)
    Permanent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    None,
    /// iptables-nft / ip6tables-nft FORWARD drops of the sinks' "filtered" prefixes
    Prefixes,
    /// the same prefixes in an ipset (hash:net), matched by `-m set`
    Ipset,
}

#[derive(Debug, Clone, Copy)]
struct Features {
    gro: bool,
    tx_csum: bool,
    tso: bool,
}

/// One veth pair: `d{i}` in the DUT, `eth0` in the far namespace (i = 0: the source).
#[derive(Debug, Clone)]
struct Link {
    dut_end: Features,
    far_end: Features,
    far_xdp: PeerXdp,
    dut_mtu: u32,
    far_mtu: u32,
    queues: u32,
    neigh: Neigh,
}

#[derive(Debug, Clone)]
struct Topo {
    seed: u64,
    shape: Shape,
    links: Vec<Link>,
    filter: Filter,
    udp_sizes: Vec<usize>,
    tcp_bytes: usize,
    /// The DUT's net.ipv4.conf.all.rp_filter: 2 is Debian's default, which every new
    /// namespace there inherits.
    rp_filter: u32,
    /// Routed shapes: a source-specific IPv6 route on the DUT, a blackhole for part of sink
    /// 1's prefix from the run's probe sources only (on the /64 itself, a `from` route made
    /// the plain route unreachable for every source). The FIB's answer then depends on the
    /// source, which a route cache keyed by destination cannot stand for.
    v6_source_route: bool,
    /// Two sinks: a multipath route over both, for IPv4 and IPv6, with the DUT's
    /// fib_multipath_hash_policy (both families) set to this value (0, the default: addresses
    /// and, for IPv6, flow label and next header; 1: the five-tuple). Linux picks one next
    /// hop per flow by a hash; the fast path must pick the same one, or a flow changes path
    /// when the daemon starts or stops, or when one of its packets goes to the kernel.
    multipath: Option<u8>,
    /// How the multipath routes are written: next hops inline, or a nexthop object that is a
    /// group (hash-threshold or resilient); or, instead, a route through a nexthop object
    /// with one next hop (the first sink), which has no hash to take and stays fast under
    /// every policy.
    multipath_form: MultipathForm,
    /// With the multipath routes: policy rules that send some of the multipath flows to table
    /// 100, which routes the multipath prefixes through sink 2 alone (a bit each, POLICY_RULES).
    /// All but the fwmark rule are ones the FIB helper evaluates; the sixth checks that the
    /// source check asks as the kernel does, from the egress port; the last two are a VRF's
    /// rule, plain and inverted.
    policy_rules: u8,
    /// What the kernel's forwarding path consults beyond routes and the filter.
    consulted: Consulted,
}

/// State the kernel's forwarding path consults beyond routes, neighbours and the filter
/// (docs/FASTPATH.md, "What the forwarding path consults"), drawn after everything else so
/// that an older seed draws the rest as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Consulted {
    /// Routed: an IPsec policy that blocks sink 1's filtered prefix (and part of the
    /// multipath prefix), both families.
    xfrm: Xfrm,
    /// A qdisc of the user's at one DUT port's egress: (link, what follows `root`).
    egress_qdisc: Option<(usize, &'static str)>,
    /// A tc classifier on one DUT port that matches everything and only counts (u32, no
    /// action): (link, on ingress rather than egress).
    classifier: Option<(usize, bool)>,
    /// Routed: a lightweight tunnel on one of sink 1's routes.
    encap: Encap,
    /// Routed: sink 1's prefix with an MTU of its own.
    route_mtu: Option<u32>,
    /// With the multipath routes: the hash policy written to the other value right before
    /// the multipath flows (each run starts from the drawn one).
    flip_hash_policy: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Xfrm {
    None,
    FwdBlock,
    OutBlock,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encap {
    None,
    /// `encap ip` on sink 1's main prefix: metadata for a tunnel device, and past a veth the
    /// packet leaves unchanged.
    Ip,
    /// `encap seg6` on sink 1's filtered prefix: IPv6 with a segment routing header around
    /// it, which the sink does not take.
    Seg6,
}

const QDISCS: [&str; 4] = [
    "pfifo limit 1000",
    "bfifo limit 4000000",
    "tbf rate 10gbit burst 4mb latency 100ms",
    "htb default 0",
];

fn draw_consulted(r: &mut Rng, shape: Shape, links: usize, multipath: bool) -> Consulted {
    let routed = shape != Shape::Bridge;
    Consulted {
        xfrm: if routed && r.percent(25) {
            r.pick(&[Xfrm::FwdBlock, Xfrm::OutBlock])
        } else {
            Xfrm::None
        },
        egress_qdisc: r.percent(25).then(|| (r.below(links), r.pick(&QDISCS))),
        classifier: r.percent(20).then(|| (r.below(links), r.percent(50))),
        encap: if routed && r.percent(25) {
            match r.pick(&[Encap::Ip, Encap::Seg6]) {
                // The draw is made either way, so the rest of a seed's topology replays the
                // same on a kernel with seg6 and on one without.
                Encap::Seg6 if !seg6_routes() => Encap::None,
                e => e,
            }
        } else {
            Encap::None
        },
        route_mtu: (routed && r.percent(20)).then(|| r.pick(&[1280, 1400])),
        flip_hash_policy: multipath && r.percent(50),
    }
}

/// Whether this kernel builds `encap seg6` routes (CONFIG_IPV6_SEG6_LWTUNNEL; some builds leave
/// it out and answer "lwt encapsulation type not supported"). Asked once, of the kernel itself,
/// in a scratch namespace; without it a drawn seg6 route is left out, as the test says.
fn seg6_routes() -> bool {
    static BUILDS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *BUILDS.get_or_init(|| {
        let ns = Netns::create(&format!("ws-r{}q", std::process::id() % 100000)).unwrap();
        let words = |cmd: &'static str| cmd.split(' ').collect::<Vec<_>>();
        sh_in(&ns, "ip", &words("link add q0 type veth peer name q1"));
        sh_in(&ns, "ip", &words("link set q0 up"));
        let seg6 = "route add 198.19.101.0/24 encap seg6 mode encap segs fd00:1::2 dev q0";
        ns.exec("ip", &words(seg6)).is_ok()
    })
}

/// The rules `Topo::policy_rules` draws from, one per bit: (IPv4 rules, IPv6 rules).
const POLICY_RULES: [(&str, &str); 8] = [
    (
        "rule add ipproto udp sport 41001-41002 table 100 pref 100",
        "-6 rule add ipproto udp sport 41001-41002 table 100 pref 100",
    ),
    (
        "rule add to 198.19.200.4/30 table 100 pref 101",
        "-6 rule add to fd00:e::4/126 table 100 pref 101",
    ),
    (
        "rule add from 198.18.0.0/24 dport 7003 sport 41004 table 100 pref 102",
        "-6 rule add from fd00::/64 dport 7003 sport 41004 table 100 pref 102",
    ),
    (
        "rule add iif d0 sport 41003 to 198.19.200.0/29 table 100 pref 103",
        "-6 rule add iif d0 sport 41003 to fd00:e::/125 table 100 pref 103",
    ),
    // A mark: the family goes to the kernel.
    (
        "rule add fwmark 7 table 100 pref 104",
        "-6 rule add fwmark 7 table 100 pref 104",
    ),
    // Only the source check of a packet to a multipath address forwarded out d1 comes from
    // d1 (the kernel's fib_validate_source asks from the egress port): table 101 sends the
    // source's prefix out d2, which strict rp_filter refuses.
    (
        "rule add iif d1 from 198.19.200.0/24 table 101 pref 105",
        "",
    ),
    // A VRF's rule, as the kernel adds it with the first VRF device: it matches no flow the
    // fast path routes, which keeps its route caches.
    ("rule add l3mdev pref 98", "-6 rule add l3mdev pref 98"),
    // Inverted, it matches all of them and then has no table to look in.
    (
        "rule add not l3mdev pref 97",
        "-6 rule add not l3mdev pref 97",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MultipathForm {
    Inline,
    Group,
    ResilientGroup,
    SingleHopObject,
}

const MTUS: [u32; 8] = [1280, 1400, 1500, 1500, 1500, 2000, 4000, 9000];

fn draw_features(r: &mut Rng) -> Features {
    let tx_csum = r.percent(60);
    Features {
        gro: r.percent(50),
        tx_csum,
        // TSO needs TX checksumming; the kernel turns it off with it.
        tso: tx_csum && r.percent(60),
    }
}

fn draw(seed: u64) -> Topo {
    let mut r = Rng::new(seed);
    let shape = r.pick(&[Shape::Line, Shape::Line, Shape::TwoSinks, Shape::Bridge]);
    let sinks = match shape {
        Shape::Line => 1,
        Shape::TwoSinks => 2,
        Shape::Bridge => 1 + r.below(2),
    };
    let mut links = (0..=sinks)
        .map(|_| {
            let mtu = r.pick(&MTUS);
            // Now and then the two ends of a pair disagree: the kernel drops what the
            // receiving end's MTU does not fit. Only the far end is ever the smaller: with a
            // larger one, Linux forwards a GSO skb that a single frame of the same segment
            // size would not pass, so a TCP transfer survives or stalls depending on whether
            // a retransmission was needed (no path MTU discovery across a veth's drop), and
            // the two runs could not be compared.
            let far_mtu = if r.percent(10) {
                r.pick(&MTUS).min(mtu)
            } else {
                mtu
            };
            Link {
                dut_end: draw_features(&mut r),
                far_end: draw_features(&mut r),
                far_xdp: r.pick(&[
                    PeerXdp::None,
                    PeerXdp::None,
                    PeerXdp::Native,
                    PeerXdp::Generic,
                ]),
                dut_mtu: mtu,
                far_mtu,
                queues: r.pick(&[1, 1, 2, 4]),
                neigh: r.pick(&[
                    Neigh::Absent,
                    Neigh::Resolved,
                    Neigh::Stale,
                    Neigh::Permanent,
                ]),
            }
        })
        .collect::<Vec<Link>>();
    if shape == Shape::Bridge {
        // One MTU for every port, for the same reason: the bridge drops a frame larger than
        // the egress port's MTU but forwards a GSO skb, with no error either way.
        let port_mtu = links[0].dut_mtu;
        for l in &mut links {
            l.far_mtu = l.far_mtu.min(port_mtu);
            l.dut_mtu = port_mtu;
        }
    }
    let filter = if shape == Shape::Bridge {
        // FORWARD rules see bridged frames only with br_netfilter, which this suite leaves
        // alone (it is global to the machine).
        Filter::None
    } else {
        r.pick(&[Filter::None, Filter::Prefixes, Filter::Ipset])
    };
    let mut sizes = vec![16, 200, 1000, 1400, 1472, 2000, 3000, 8000];
    let mut udp_sizes = Vec::new();
    for _ in 0..3 {
        udp_sizes.push(sizes.remove(r.below(sizes.len())));
    }
    udp_sizes.sort();
    let mut t = Topo {
        seed,
        shape,
        links,
        filter,
        udp_sizes,
        tcp_bytes: r.pick(&[64 << 10, 256 << 10, 1 << 20]),
        // Drawn last, so that an older seed draws everything else as it did.
        rp_filter: r.pick(&[0, 0, 1, 2]),
        v6_source_route: r.percent(30) && shape != Shape::Bridge,
        multipath: (r.percent(50) && shape == Shape::TwoSinks).then(|| r.pick(&[0, 1])),
        multipath_form: r.pick(&[
            MultipathForm::Inline,
            MultipathForm::Group,
            MultipathForm::ResilientGroup,
            MultipathForm::SingleHopObject,
        ]),
        policy_rules: if r.percent(50) {
            let rules = r.below(1 << POLICY_RULES.len()) as u8;
            // The fwmark rule hands the families to the kernel, where the others are not
            // the fast path's: in one draw in eight.
            if r.percent(75) {
                rules & !(1 << 4)
            } else {
                rules
            }
        } else {
            0
        },
        consulted: Consulted {
            xfrm: Xfrm::None,
            egress_qdisc: None,
            classifier: None,
            encap: Encap::None,
            route_mtu: None,
            flip_hash_policy: false,
        },
    };
    t.consulted = draw_consulted(&mut r, t.shape, t.links.len(), t.multipath.is_some());
    t
}

fn features(f: Features) -> String {
    let onoff = |b: bool| if b { "on" } else { "off" };
    format!(
        "gro {} tx-csum {} tso {}",
        onoff(f.gro),
        onoff(f.tx_csum),
        onoff(f.tso)
    )
}

/// The configuration in a few lines, as printed with a divergence.
fn describe(t: &Topo) -> String {
    let mut s = format!(
        "{:?}, filter {:?}, UDP sizes {:?}, TCP {} bytes, rp_filter {}, IPv6 source route {}, multipath hash policy {:?} ({:?})
",
        t.shape,
        t.filter,
        t.udp_sizes,
        t.tcp_bytes,
        t.rp_filter,
        t.v6_source_route,
        t.multipath,
        t.multipath_form
    );
    for (v4, v6) in policy_rules(t) {
        s.push_str(&format!("    ip {v4}; ip {v6}\n"));
    }
    for cmd in consulted_commands(t) {
        s.push_str(&format!("    {cmd}\n"));
    }
    if t.consulted.flip_hash_policy {
        s.push_str("    the hash policy flipped before the multipath flows\n");
    }
    for (i, l) in t.links.iter().enumerate() {
        let far = if i == 0 {
            "src".to_string()
        } else {
            format!("sink{i}")
        };
        s.push_str(&format!(
            "    d{i} (mtu {}, {}) <-> {far} eth0 (mtu {}, {}, XDP {:?}); {} queues; DUT neighbour {:?}\n",
            l.dut_mtu,
            features(l.dut_end),
            l.far_mtu,
            features(l.far_end),
            l.far_xdp,
            l.queues,
            l.neigh
        ));
    }
    s
}

fn mac(ns_role: u8, link: usize) -> String {
    format!("02:57:53:{ns_role:02x}:{link:02x}:01")
}

/// The namespaces of one configuration, deleted on drop (with everything in them).
struct Lab {
    src: Netns,
    dut: Netns,
    sinks: Vec<Netns>,
}

impl Lab {
    fn far(&self, i: usize) -> &Netns {
        if i == 0 {
            &self.src
        } else {
            &self.sinks[i - 1]
        }
    }
    fn all(&self) -> impl Iterator<Item = &Netns> {
        [&self.src, &self.dut].into_iter().chain(self.sinks.iter())
    }
}

/// Writes a sysctl from a thread inside `ns` (net.* sysctls are per namespace).
fn sysctl(ns: &Netns, key: &str, value: &str) {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let value = value.to_string();
    spawn_in_ns(ns.name(), move || std::fs::write(&path, value))
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("sysctl {key}: {e}"));
}

fn sh_in(ns: &Netns, program: &str, args: &[&str]) {
    if let Err(e) = ns.exec(program, args) {
        panic!("{program} {args:?} in {}: {e}", ns.name());
    }
}

fn pipe_in(ns: &Netns, program: &str, args: &[&str], input: &str) {
    let mut c = ns
        .command(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    assert!(c.wait().unwrap().success(), "{program} failed: {input}");
}

/// Loads a two-instruction XDP_PASS program and attaches it to `dev` in `ns`, in the mode
/// drawn; the attachment lives as long as the device.
fn attach_xdp_pass(ns: &Netns, dev: &str, mode: PeerXdp) {
    let flags = match mode {
        PeerXdp::None => return,
        PeerXdp::Native => libbpf_rs::XdpFlags::DRV_MODE,
        PeerXdp::Generic => libbpf_rs::XdpFlags::SKB_MODE,
    };
    let dev = dev.to_string();
    let ns_name = ns.name().to_string();
    let r = spawn_in_ns(ns.name(), move || {
        // r0 = XDP_PASS (2); exit. (code, regs, off, imm little-endian in one u64 each)
        let insns: [u64; 2] = [0x0000_0002_0000_00b7, 0x95];
        // Frags-aware, so it attaches to a veth of any MTU.
        let prog = wirespeed_sys::bpf::load_xdp_insns(
            c"ws_pass",
            &insns,
            libbpf_rs::libbpf_sys::BPF_F_XDP_HAS_FRAGS,
        )
        .map_err(|e| format!("load XDP_PASS: {e}"))?;
        let ifindex = wirespeed_sys::packet::if_index(&dev).map_err(|e| e.to_string())?;
        // The attachment holds its own reference to the program; ours closes on return.
        libbpf_rs::Xdp::new(prog.as_fd())
            .attach(ifindex as i32, flags)
            .map_err(|e| format!("attach XDP_PASS to {dev}: {e}"))?;
        Ok::<(), String>(())
    })
    .join()
    .unwrap();
    r.unwrap_or_else(|e| panic!("{e} in {ns_name}"));
}

// Addresses. Routed: link i is 198.18.i.0/24 and fd00:i::/64, the DUT .1, the far end .2.
// Sink i holds on lo, per run p (host p + 1, so the two runs never share the source's PMTU
// cache): 198.19.i.h and fd00:c<i>::h (allowed), 198.19.(100 + i).h and fd00:d<i>::h
// (dropped when a filter is drawn). Bridged: everything in 198.18.50.0/24 and fd00:50::/64,
// sink i at .(10 i + h).

fn target(t: &Topo, sink: usize, run: usize, v6: bool, filtered: bool) -> String {
    let h = run + 1;
    match (t.shape, v6, filtered) {
        (Shape::Bridge, false, _) => format!("198.18.50.{}", 10 * sink + h),
        (Shape::Bridge, true, _) => format!("fd00:50::{}", 10 * sink + h),
        (_, false, false) => format!("198.19.{sink}.{h}"),
        (_, false, true) => format!("198.19.{}.{h}", 100 + sink),
        (_, true, false) => format!("fd00:c{sink}::{h}"),
        (_, true, true) => format!("fd00:d{sink}::{h}"),
    }
}

/// The multipath routes on the DUT: added once the sinks' ends are up, since a nexthop object
/// needs its device's carrier.
fn multipath_routes(t: &Topo, lab: &Lab) {
    // The multipath prefixes, and prefixes behind the source (which refuses them) for the
    // ICMP errors that come back through them.
    let mut batch = String::new();
    let group = |id: u32, hops: [&str; 2], resilient: bool| {
        format!(
            "nexthop add id {} via {} dev d1\nnexthop add id {} via {} dev d2\n\
             nexthop add id {id} group {}/{}{}\n",
            id + 1,
            hops[0],
            id + 2,
            hops[1],
            id + 1,
            id + 2,
            if resilient {
                " type resilient buckets 32"
            } else {
                ""
            }
        )
    };
    match t.multipath_form {
        MultipathForm::Inline => batch.push_str(
            "route add 198.19.200.0/24 nexthop via 198.18.1.2 nexthop via 198.18.2.2\n\
             route add fd00:e::/64 nexthop via fd00:1::2 nexthop via fd00:2::2\n",
        ),
        MultipathForm::SingleHopObject => batch.push_str(
            "nexthop add id 41 via 198.18.1.2 dev d1\nnexthop add id 61 via fd00:1::2 dev d1\n\
             route add 198.19.200.0/24 nhid 41\nroute add fd00:e::/64 nhid 61\n",
        ),
        form => {
            let resilient = form == MultipathForm::ResilientGroup;
            batch.push_str(&group(40, ["198.18.1.2", "198.18.2.2"], resilient));
            batch.push_str(&group(60, ["fd00:1::2", "fd00:2::2"], resilient));
            batch.push_str("route add 198.19.200.0/24 nhid 40\nroute add fd00:e::/64 nhid 60\n");
        }
    }
    batch.push_str("route add 198.19.77.0/24 via 198.18.0.2\nroute add fd00:77::/64 via fd00::2\n");
    if !policy_rules(t).is_empty() {
        batch.push_str(
            "route add 198.19.200.0/24 via 198.18.2.2 table 100\n\
             route add fd00:e::/64 via fd00:2::2 table 100\n\
             route add 198.18.0.0/24 via 198.18.2.2 table 101\n",
        );
    }
    for (v4, _) in policy_rules(t) {
        batch.push_str(v4);
        batch.push('\n');
    }
    ip_batch(&lab.dut, &batch);
    // (`ip -batch` takes no `-6`)
    for (_, v6) in policy_rules(t).into_iter().filter(|(_, v6)| !v6.is_empty()) {
        lab.dut
            .ip(&v6.split(' ').collect::<Vec<_>>())
            .unwrap_or_else(|e| panic!("ip {v6}: {e:?}"));
    }
}

/// The policy rules a configuration draws (only with the multipath routes, whose flows show
/// where each rule sent them).
fn policy_rules(t: &Topo) -> Vec<(&'static str, &'static str)> {
    if t.multipath.is_none() {
        return Vec::new();
    }
    POLICY_RULES
        .iter()
        .enumerate()
        .filter(|(i, _)| t.policy_rules & (1 << i) != 0)
        .map(|(_, r)| *r)
        .collect()
}

fn build(t: &Topo) -> Lab {
    wirespeed_lab::require_root();
    let id = std::process::id() % 100000;
    let src = Netns::create(&format!("ws-r{id}s")).unwrap();
    let dut = Netns::create(&format!("ws-r{id}d")).unwrap();
    let sinks = (1..t.links.len())
        .map(|i| Netns::create(&format!("ws-r{id}k{i}")).unwrap())
        .collect();
    let lab = Lab { src, dut, sinks };
    for ns in lab.all() {
        // Addresses are added with nodad; this covers the link-local ones.
        sysctl(ns, "net.ipv6.conf.all.accept_dad", "0");
        sysctl(ns, "net.ipv6.conf.default.accept_dad", "0");
    }
    // ICMP errors are rate-limited per destination with a token bucket that both runs drain:
    // off, the second run gets the same errors as the first. The source sends some too (the
    // multipath probes' "prohibited").
    for ns in [&lab.dut, &lab.src] {
        sysctl(ns, "net.ipv4.icmp_ratelimit", "0");
        sysctl(ns, "net.ipv6.icmp.ratelimit", "0");
    }

    let bridged = t.shape == Shape::Bridge;
    let mut dut_batch = String::new();
    if bridged {
        dut_batch.push_str("link add br0 type bridge\nlink set br0 up\n");
    }
    for (i, l) in t.links.iter().enumerate() {
        let far = lab.far(i).name();
        let q = l.queues;
        dut_batch.push_str(&format!(
            "link add d{i} address {} mtu {} numtxqueues {q} numrxqueues {q} type veth peer name eth0 netns {far} address {} mtu {} numtxqueues {q} numrxqueues {q}\n",
            mac(0xd, i),
            l.dut_mtu,
            mac(0xf, i),
            l.far_mtu
        ));
        if bridged {
            dut_batch.push_str(&format!("link set d{i} master br0\n"));
        } else {
            dut_batch.push_str(&format!(
                "addr add 198.18.{i}.1/24 dev d{i}\naddr add fd00:{i}::1/64 dev d{i} nodad\n"
            ));
        }
        dut_batch.push_str(&format!("link set d{i} up\n"));
    }
    if bridged {
        dut_batch
            .push_str("addr add 198.18.50.254/24 dev br0\naddr add fd00:50::fe/64 dev br0 nodad\n");
    } else {
        for i in 1..t.links.len() {
            for (v4, v6) in [(i, format!("c{i}")), (100 + i, format!("d{i}"))] {
                dut_batch.push_str(&format!(
                    "route add 198.19.{v4}.0/24 via 198.18.{i}.2\nroute add fd00:{v6}::/64 via fd00:{i}::2\n"
                ));
            }
        }
        if t.v6_source_route {
            dut_batch.push_str("route add blackhole fd00:c1::/96 from fd00::10/127\n");
        }
    }
    ip_batch(&lab.dut, &dut_batch);
    if let Some(policy) = t.multipath {
        for family in ["ipv4", "ipv6"] {
            sysctl(
                &lab.dut,
                &format!("net.{family}.fib_multipath_hash_policy"),
                &policy.to_string(),
            );
        }
        // The source routes 198.19.77.0/24 and fd00:77::/64 to `prohibit`: it answers what
        // the sinks send there with "administratively prohibited", from its own address.
        sysctl(&lab.src, "net.ipv4.ip_forward", "1");
        sysctl(&lab.src, "net.ipv6.conf.all.forwarding", "1");
        ip_batch(
            &lab.src,
            "route add prohibit 198.19.77.0/24\nroute add prohibit fd00:77::/64\n",
        );
        // The kernel hashes an ICMPv6 error by the packet it quotes, flow label included, and
        // a connected socket's automatic label is random: both runs must quote the same.
        for ns in &lab.sinks {
            sysctl(ns, "net.ipv6.auto_flowlabels", "0");
        }
    }
    if !bridged {
        sysctl(&lab.dut, "net.ipv4.ip_forward", "1");
        sysctl(&lab.dut, "net.ipv6.conf.all.forwarding", "1");
    }
    sysctl(
        &lab.dut,
        "net.ipv4.conf.all.rp_filter",
        &t.rp_filter.to_string(),
    );

    for i in 0..t.links.len() {
        let ns = lab.far(i);
        let mut b = String::from("link set eth0 up\n");
        if bridged {
            let hosts: Vec<usize> = if i == 0 {
                vec![1]
            } else {
                vec![10 * i + 1, 10 * i + 2]
            };
            for h in hosts {
                b.push_str(&format!(
                    "addr add 198.18.50.{h}/24 dev eth0\naddr add fd00:50::{h}/64 dev eth0 nodad\n"
                ));
            }
        } else {
            b.push_str(&format!(
                "addr add 198.18.{i}.2/24 dev eth0\naddr add fd00:{i}::2/64 dev eth0 nodad\n\
                 route add default via 198.18.{i}.1\nroute add ::/0 via fd00:{i}::1\n"
            ));
            if i == 0 {
                // one source address per run, for the "unroutable" probes (IPv6: deprecated,
                // so that nothing else picks it)
                for h in [10, 11] {
                    b.push_str(&format!(
                        "addr add 198.18.0.{h}/24 dev eth0\n\
                         addr add fd00:0::{h}/64 dev eth0 nodad preferred_lft 0\n"
                    ));
                }
            }
            if i > 0 && t.multipath.is_some() {
                for h in 1..=MULTIPATH_HOSTS {
                    b.push_str(&format!(
                        "addr add 198.19.200.{h}/32 dev lo\naddr add fd00:e::{h}/128 dev lo\n"
                    ));
                }
            }
            if i > 0 {
                for h in 1..=2 {
                    b.push_str(&format!(
                        "addr add 198.19.{i}.{h}/32 dev lo\naddr add 198.19.{}.{h}/32 dev lo\n\
                         addr add fd00:c{i}::{h}/128 dev lo\naddr add fd00:d{i}::{h}/128 dev lo\n",
                        100 + i
                    ));
                }
            }
        }
        ip_batch(ns, &b);
    }

    if t.multipath.is_some() {
        multipath_routes(t, &lab);
    }

    let onoff = |b: bool| if b { "on" } else { "off" };
    for (i, l) in t.links.iter().enumerate() {
        for (ns, dev, f) in [
            (&lab.dut, format!("d{i}"), l.dut_end),
            (lab.far(i), "eth0".to_string(), l.far_end),
        ] {
            sh_in(
                ns,
                "ethtool",
                &[
                    "-K",
                    &dev,
                    "gro",
                    onoff(f.gro),
                    "tx",
                    onoff(f.tx_csum),
                    "tso",
                    onoff(f.tso),
                ],
            );
        }
        attach_xdp_pass(lab.far(i), "eth0", l.far_xdp);
    }

    match t.filter {
        Filter::None => {}
        Filter::Prefixes => {
            let mut v4 = String::from("*filter\n:FORWARD ACCEPT [0:0]\n");
            let mut v6 = v4.clone();
            for i in 1..t.links.len() {
                v4.push_str(&format!("-A FORWARD -d 198.19.{}.0/24 -j DROP\n", 100 + i));
                v6.push_str(&format!("-A FORWARD -d fd00:d{i}::/64 -j DROP\n"));
            }
            v4.push_str("COMMIT\n");
            v6.push_str("COMMIT\n");
            pipe_in(&lab.dut, "iptables-nft-restore", &[], &v4);
            pipe_in(&lab.dut, "ip6tables-nft-restore", &[], &v6);
        }
        Filter::Ipset => {
            let mut set = String::from(
                "create wsblock4 hash:net family inet\ncreate wsblock6 hash:net family inet6\n",
            );
            for i in 1..t.links.len() {
                set.push_str(&format!(
                    "add wsblock4 198.19.{}.0/24\nadd wsblock6 fd00:d{i}::/64\n",
                    100 + i
                ));
            }
            pipe_in(&lab.dut, "ipset", &["restore"], &set);
            let rules = |set: &str| {
                format!(
                    "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -m set --match-set {set} dst -j DROP\nCOMMIT\n"
                )
            };
            pipe_in(&lab.dut, "iptables-nft-restore", &[], &rules("wsblock4"));
            pipe_in(&lab.dut, "ip6tables-nft-restore", &[], &rules("wsblock6"));
        }
    }
    for cmd in consulted_commands(t) {
        let words: Vec<&str> = cmd.split(' ').collect();
        sh_in(&lab.dut, words[0], &words[1..]);
    }
    lab
}

/// The commands that set up `t.consulted` on the DUT, as a user types them.
fn consulted_commands(t: &Topo) -> Vec<String> {
    let c = &t.consulted;
    let mut out = Vec::new();
    let dir = match c.xfrm {
        Xfrm::None => None,
        Xfrm::FwdBlock => Some("fwd"),
        Xfrm::OutBlock => Some("out"),
    };
    if let Some(dir) = dir {
        let mut dsts = vec!["198.19.101.0/30", "fd00:d1::/126"];
        if t.multipath.is_some() {
            dsts.extend(["198.19.200.0/30", "fd00:e::/126"]);
        }
        for dst in dsts {
            out.push(format!(
                "ip xfrm policy add dst {dst} dir {dir} action block"
            ));
        }
    }
    let mtu = c.route_mtu.map(|m| format!(" mtu {m}")).unwrap_or_default();
    match c.encap {
        Encap::Ip => out.push(format!(
            "ip route replace 198.19.1.0/24 encap ip id 1 dst 198.18.1.2 via 198.18.1.2 dev d1{mtu}"
        )),
        Encap::Seg6 => {
            out.push(
                "ip route replace 198.19.101.0/24 encap seg6 mode encap segs fd00:1::2 dev d1"
                    .into(),
            );
        }
        Encap::None => {}
    }
    if c.encap != Encap::Ip && c.route_mtu.is_some() {
        out.push(format!(
            "ip route replace 198.19.1.0/24 via 198.18.1.2{mtu}"
        ));
    }
    if let Some((i, qdisc)) = c.egress_qdisc {
        out.push(format!("tc qdisc add dev d{i} root {qdisc}"));
    }
    if let Some((i, ingress)) = c.classifier {
        out.push(format!("tc qdisc add dev d{i} clsact"));
        out.push(format!(
            "tc filter add dev d{i} {} protocol all prio 1 u32 match u32 0 0",
            if ingress { "ingress" } else { "egress" }
        ));
    }
    out
}

/// Puts the neighbour and FDB state back to what was drawn, so that both runs start alike.
fn prepare_run(t: &Topo, lab: &Lab) {
    for ns in lab.all() {
        ip_batch(ns, "neigh flush all\n");
    }
    if let (Some(policy), true) = (t.multipath, t.consulted.flip_hash_policy) {
        set_hash_policy(lab, policy);
    }
    if t.shape == Shape::Bridge {
        sh_in(
            &lab.dut,
            "ip",
            &["link", "set", "br0", "type", "bridge", "fdb_flush"],
        );
        for (i, l) in t.links.iter().enumerate() {
            match l.neigh {
                Neigh::Permanent => sh_in(
                    &lab.dut,
                    "bridge",
                    &[
                        "fdb",
                        "replace",
                        &mac(0xf, i),
                        "dev",
                        &format!("d{i}"),
                        "master",
                        "static",
                    ],
                ),
                // A frame from the far end teaches the bridge where it is.
                Neigh::Resolved => {
                    let _ = lab.far(i).exec("ping", &["-c1", "-W0.3", "198.18.50.254"]);
                }
                Neigh::Absent | Neigh::Stale => {}
            }
        }
        return;
    }
    let mut b = String::new();
    for (i, l) in t.links.iter().enumerate() {
        let state = match l.neigh {
            Neigh::Absent => continue,
            Neigh::Resolved => "reachable",
            Neigh::Stale => "stale",
            Neigh::Permanent => "permanent",
        };
        for addr in [format!("198.18.{i}.2"), format!("fd00:{i}::2")] {
            b.push_str(&format!(
                "neigh replace {addr} lladdr {} dev d{i} nud {state}\n",
                mac(0xf, i)
            ));
        }
    }
    if !b.is_empty() {
        ip_batch(&lab.dut, &b);
    }
}

fn set_hash_policy(lab: &Lab, policy: u8) {
    for family in ["ipv4", "ipv6"] {
        sysctl(
            &lab.dut,
            &format!("net.{family}.fib_multipath_hash_policy"),
            &policy.to_string(),
        );
    }
}

/// What one probe saw, as a comparable string.
type Observed = BTreeMap<String, String>;

/// Starts `ping` in `ns`; `ping_result` reads what it saw.
fn ping_start(ns: &Netns, dst: &str, extra: &[&str], count: u32) -> std::process::Child {
    let count = count.to_string();
    // Probes that get no answer wait out -W; they run side by side, so a run waits once.
    let mut args = vec!["-c", &count, "-i", "0.02", "-W", "0.3"];
    if dst.contains(':') {
        args.insert(0, "-6");
    }
    args.extend_from_slice(extra);
    args.push(dst);
    ns.command("ping")
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a `ping` saw: replies, their TTLs and its error lines (sequence numbers removed).
fn ping_result(child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let mut replies = 0;
    let mut ttls = BTreeSet::new();
    let mut errors = BTreeSet::new();
    for line in text.lines() {
        if line.contains(" bytes from ") && line.contains("ttl=") {
            replies += 1;
            if let Some(ttl) = line.split("ttl=").nth(1).and_then(|s| s.split(' ').next()) {
                ttls.insert(ttl.to_string());
            }
        } else if line.starts_with("From ") || line.starts_with("ping: ") {
            let words: Vec<&str> = line
                .split(' ')
                .filter(|w| !w.starts_with("icmp_seq="))
                .collect();
            errors.insert(words.join(" "));
        }
    }
    format!("replies {replies} ttl {ttls:?} errors {errors:?}")
}

fn pattern(len: usize, salt: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(salt) >> 7) as u8)
        .collect()
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn in_ns<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
    spawn_in_ns(ns.name(), f).join().unwrap()
}

/// A UDP socket bound to `addr` in `ns`. A failed bind names the namespace's UDP sockets, so
/// that a port found taken says by what.
fn bind_udp(ns: &Netns, addr: SocketAddr) -> UdpSocket {
    in_ns(ns, move || UdpSocket::bind(addr)).unwrap_or_else(|e| {
        let held = ns
            .command("ss")
            .args(["-Huanp"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| format!("(ss: {e})"));
        panic!(
            "bind {addr} in {}: {e}; its UDP sockets:\n{held}",
            ns.name()
        )
    })
}

/// A receiving socket on `dst`:`port` in `sink` (reads time out after 300 ms of silence) and
/// a sending socket of the same family in `src`.
fn udp_pair(src: &Netns, sink: &Netns, dst: &str, port: u16) -> (UdpSocket, UdpSocket, SocketAddr) {
    let ip: IpAddr = dst.parse().unwrap();
    let to = SocketAddr::new(ip, port);
    let rx = bind_udp(sink, to);
    rx.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let any: SocketAddr = if ip.is_ipv6() {
        "[::]:0".parse().unwrap()
    } else {
        "0.0.0.0:0".parse().unwrap()
    };
    let tx = bind_udp(src, any);
    (tx, rx, to)
}

/// Datagrams of each drawn size, 5 of each: per size, how many arrived intact and how many
/// did not.
fn udp(t: &Topo, src: &Netns, sink: &Netns, dst: &str) -> String {
    let (tx, rx, to) = udp_pair(src, sink, dst, 7001);
    for &size in &t.udp_sizes {
        for n in 0..5u64 {
            let mut d = pattern(size, n + size as u64);
            d[0] = n as u8;
            let _ = tx.send_to(&d, to);
        }
    }
    let mut got: BTreeMap<usize, (u32, u32)> = BTreeMap::new();
    let mut buf = vec![0u8; 65536];
    let expected = 5 * t.udp_sizes.len();
    let mut received = 0;
    // (stops as soon as everything arrived; otherwise after 300 ms of silence)
    while received < expected {
        let Ok(n) = rx.recv(&mut buf) else { break };
        received += 1;
        let e = got.entry(n).or_default();
        let seq = buf[0] as u64;
        let mut want = pattern(n, seq + n as u64);
        want[0] = seq as u8;
        if t.udp_sizes.contains(&n) && want == buf[..n] {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
    }
    format!("intact/corrupt by size {got:?}")
}

/// UDP super-datagrams as a QUIC stack sends them (UDP_SEGMENT: one send, cut into segments
/// of one size by GSO, on the way or at the egress): 6 segments of 1,000 bytes, 4 of 1,200
/// (both fit the smallest MTU drawn), then 3 of 1,400, which do not fit the smaller ones: the
/// sender refuses them, or a router answers "fragmentation needed" / "packet too big". Per
/// size, how many segments arrived intact and how many did not, and the sender's errors.
///
/// A size whose packets are longer than the sink's MTU (`sink_mtu`, where it is below its
/// link partner's) is not sent: Linux delivers such packets only while they travel as one
/// GSO skb (a veth takes a GSO skb of any length, and GRO at the DUT may merge segments into
/// one), which no wire does, and a fast path that forwards each segment at XDP, as a NIC
/// would carry it, sees them dropped at the sink's veth. docs/FASTPATH.md, "Known limits".
fn udp_gso(src: &Netns, sink: &Netns, dst: &str, sink_mtu: Option<u32>) -> String {
    let (tx, rx, to) = udp_pair(src, sink, dst, 7004);
    let mut sent = Vec::new();
    let mut errors = Vec::new();
    let ip_header = if dst.contains(':') { 40 } else { 20 };
    for (segment, count) in [(1000usize, 6usize), (1200, 4), (1400, 3)] {
        if sink_mtu.is_some_and(|mtu| segment + 8 + ip_header > mtu as usize) {
            errors.push(format!(
                "{segment} x {count}: longer than the sink's smaller MTU, not sent"
            ));
            continue;
        }
        // linux/udp.h: UDP_SEGMENT at SOL_UDP.
        wirespeed_sys::socket::set_int_option(&tx, libc::SOL_UDP, 103, segment as i32).unwrap();
        let data = pattern(segment * count, segment as u64);
        match tx.send_to(&data, to) {
            Ok(_) => sent.extend(data.chunks(segment).map(<[u8]>::to_vec)),
            Err(e) => errors.push(format!("{segment} x {count}: {e}")),
        }
    }
    let mut got: BTreeMap<usize, (u32, u32)> = BTreeMap::new();
    let mut buf = vec![0u8; 65536];
    let mut received = 0;
    while received < sent.len() {
        let Ok(n) = rx.recv(&mut buf) else { break };
        received += 1;
        let e = got.entry(n).or_default();
        if sent.iter().any(|s| s[..] == buf[..n]) {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
    }
    format!("intact/corrupt by size {got:?}, send errors {errors:?}")
}

/// A bulk TCP transfer: bytes received and whether they are the bytes sent.
fn tcp(t: &Topo, src: &Netns, sink: &Netns, dst: &str) -> String {
    let ip: IpAddr = dst.parse().unwrap();
    let to = SocketAddr::new(ip, 7002);
    let listener = in_ns(sink, move || TcpListener::bind(to)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let data = pattern(t.tcp_bytes, t.seed);
    let want = fnv(&data);
    let client = spawn_in_ns(src.name(), move || -> std::io::Result<()> {
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(1))?;
        s.set_write_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(&data)?;
        s.shutdown(Shutdown::Write)
    });
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut conn = None;
    while Instant::now() < deadline {
        match listener.accept() {
            Ok((s, _)) => {
                conn = Some(s);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let mut got = Vec::new();
    if let Some(mut s) = conn {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = vec![0u8; 65536];
        let stop = Instant::now() + Duration::from_secs(5);
        while Instant::now() < stop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    }
    let _ = client.join();
    format!("{} bytes, intact {}", got.len(), fnv(&got) == want)
}

/// Addresses both sinks hold on lo in the multipath prefix (198.19.200.0/24, fd00:e::/64).
const MULTIPATH_HOSTS: u16 = 8;
/// Source ports of the multipath flows: fixed, so that both runs send the same five-tuples.
const MULTIPATH_PORTS: [u16; 4] = [41001, 41002, 41003, 41004];

/// One datagram per flow (each multipath address from each source port): for each sink, the
/// flows that reached it. Both runs send the same flows, so Linux's next hop for each flow
/// is what the fast path must match.
fn multipath(lab: &Lab, v6: bool) -> String {
    let any = move |port: u16| -> SocketAddr {
        if v6 {
            SocketAddr::new("::".parse().unwrap(), port)
        } else {
            SocketAddr::new("0.0.0.0".parse().unwrap(), port)
        }
    };
    let sinks: Vec<UdpSocket> = (1..=2)
        .map(|i| {
            let rx = bind_udp(lab.far(i), any(7003));
            rx.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            rx
        })
        .collect();
    let mut sent = 0;
    for port in MULTIPATH_PORTS {
        let tx = bind_udp(&lab.src, any(port));
        for h in 1..=MULTIPATH_HOSTS {
            let dst: IpAddr = if v6 {
                format!("fd00:e::{h}").parse().unwrap()
            } else {
                format!("198.19.200.{h}").parse().unwrap()
            };
            let flow = format!("{h}:{port}");
            if tx
                .send_to(flow.as_bytes(), SocketAddr::new(dst, 7003))
                .is_ok()
            {
                sent += 1;
            }
        }
    }
    let mut out = String::new();
    let mut received = 0;
    for (i, rx) in sinks.iter().enumerate() {
        let mut flows = BTreeSet::new();
        let mut buf = [0u8; 64];
        // (each sink reads until 300 ms of silence)
        while received < sent {
            let Ok(n) = rx.recv(&mut buf) else { break };
            received += 1;
            flows.insert(String::from_utf8_lossy(&buf[..n]).to_string());
        }
        out.push_str(&format!("sink{}: {flows:?}; ", i + 1));
    }
    out.push_str(&format!("{received} of {sent} arrived; "));
    out.push_str(&multipath_icmp_errors(lab, v6));
    out
}

/// ICMP errors through the multipath route: each sink sends from each multipath address to a
/// prefix the source refuses, and the source's "administratively prohibited" comes back through
/// the DUT. The kernel hashes an ICMP error by the packet it quotes (here from the multipath
/// address to 198.19.77.1), not by its own header (from the source); the sink that sent the
/// datagram sees the error (EACCES) only if the error took the path back to it.
fn multipath_icmp_errors(lab: &Lab, v6: bool) -> String {
    let refused: IpAddr = if v6 {
        "fd00:77::1".parse().unwrap()
    } else {
        "198.19.77.1".parse().unwrap()
    };
    let mut socks = Vec::new();
    for i in 1..=2usize {
        for h in 1..=MULTIPATH_HOSTS {
            let from: IpAddr = if v6 {
                format!("fd00:e::{h}").parse().unwrap()
            } else {
                format!("198.19.200.{h}").parse().unwrap()
            };
            let s = in_ns(lab.far(i), move || -> std::io::Result<UdpSocket> {
                let s = UdpSocket::bind(SocketAddr::new(from, 41010 + i as u16))?;
                s.connect(SocketAddr::new(refused, 7009))?;
                Ok(s)
            })
            .unwrap();
            let _ = s.send(b"prohibited");
            socks.push((i, h, s));
        }
    }
    let mut reached = Vec::new();
    for (i, h, s) in socks {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut buf = [0u8; 16];
        if let Err(e) = s.recv(&mut buf) {
            if e.kind() != std::io::ErrorKind::WouldBlock
                && e.kind() != std::io::ErrorKind::TimedOut
            {
                reached.push(format!("{h} at sink{i}: {:?}", e.kind()));
            }
        }
    }
    format!("ICMP errors back at the sender: {reached:?}")
}

/// The sum of every InCsumErrors counter of a namespace (IP, ICMP, UDP, TCP, both families).
fn csum_errors(ns: &Netns) -> u64 {
    in_ns(ns, || {
        let mut sum = 0;
        let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap_or_default();
        let lines: Vec<&str> = snmp.lines().collect();
        for pair in lines.chunks(2) {
            if let [names, values] = pair {
                for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
                    if n == "InCsumErrors" {
                        sum += v.parse::<u64>().unwrap_or(0);
                    }
                }
            }
        }
        let snmp6 = std::fs::read_to_string("/proc/thread-self/net/snmp6").unwrap_or_default();
        for line in snmp6.lines() {
            let mut w = line.split_whitespace();
            if let (Some(n), Some(v)) = (w.next(), w.next()) {
                if n.ends_with("InCsumErrors") {
                    sum += v.parse::<u64>().unwrap_or(0);
                }
            }
        }
        sum
    })
}

/// The traffic of one run, and what the source and sinks saw of it.
fn traffic(t: &Topo, lab: &Lab, run: usize) -> Observed {
    let mut o = Observed::new();
    let csum_before: u64 = lab.all().map(csum_errors).sum();
    let routed = t.shape != Shape::Bridge;
    let hdr = |v6: bool| if v6 { 48 } else { 28 };
    let big = |v6: bool| (t.links[0].far_mtu - hdr(v6)).to_string();
    // The plain pings first: they resolve the neighbours the others need. Started at once,
    // the big ones would overflow the queue of packets waiting for a neighbour (ENOBUFS).
    let mut pings = Vec::new();
    for i in 1..t.links.len() {
        for v6 in [false, true] {
            let fam = if v6 { "v6" } else { "v4" };
            let dst = target(t, i, run, v6, false);
            pings.push((
                format!("sink{i} {fam} ping"),
                ping_start(&lab.src, &dst, &[], 3),
            ));
        }
    }
    step("pings", || {
        for (k, child) in pings.drain(..) {
            o.insert(k, ping_result(child));
        }
    });
    // Then the others, all at once.
    for i in 1..t.links.len() {
        for v6 in [false, true] {
            let fam = if v6 { "v6" } else { "v4" };
            let dst = target(t, i, run, v6, false);
            let key = |what: &str| format!("sink{i} {fam} {what}");
            if routed {
                let f = target(t, i, run, v6, true);
                pings.push((
                    key("ping filtered prefix"),
                    ping_start(&lab.src, &f, &[], 1),
                ));
            }
            // Two echoes: the errors are compared as a set, so one error lost on the way
            // (CI saw a Linux run without it, once in 200, which its replay did not repeat)
            // does not make a difference of its own.
            pings.push((
                key("ping ttl 1"),
                ping_start(&lab.src, &dst, &["-t", "1"], 2),
            ));
            // As big as the source's link allows, DF set: the DUT answers "fragmentation
            // needed" / "packet too big" where the egress MTU is smaller. Before UDP and TCP,
            // so that they start from the path MTU the source learned.
            pings.push((
                key("ping DF max size"),
                ping_start(&lab.src, &dst, &["-M", "do", "-s", &big(v6)], 1),
            ));
        }
    }
    if routed {
        // From an address of this run's own: the DUT limits "unreachable" errors per
        // destination with a token bucket that every ICMP error to it drains (route.c,
        // ip_error), and icmp_ratelimit does not turn that one off.
        let from4 = format!("198.18.0.{}", 10 + run);
        let from6 = format!("fd00:0::{}", 10 + run);
        pings.push((
            "v4 ping unroutable".into(),
            ping_start(&lab.src, "198.19.250.1", &["-I", &from4], 1),
        ));
        pings.push((
            "v6 ping unroutable".into(),
            ping_start(&lab.src, "fd00:ffff::1", &["-I", &from6], 1),
        ));
    }
    let started = Instant::now();
    for (k, child) in pings {
        let r = ping_result(child);
        if verbose() {
            println!("  [{:>5} ms] {k}: {r}", started.elapsed().as_millis());
        }
        o.insert(k, r);
    }
    for i in 1..t.links.len() {
        let sink = lab.far(i);
        for v6 in [false, true] {
            let fam = if v6 { "v6" } else { "v4" };
            let dst = target(t, i, run, v6, false);
            let key = |what: &str| format!("sink{i} {fam} {what}");
            o.insert(key("udp"), step("udp", || udp(t, &lab.src, sink, &dst)));
            let link = &t.links[i];
            let smaller_mtu = (link.far_mtu < link.dut_mtu).then_some(link.far_mtu);
            o.insert(
                key("udp gso"),
                step("udp gso", || udp_gso(&lab.src, sink, &dst, smaller_mtu)),
            );
            o.insert(key("tcp"), step("tcp", || tcp(t, &lab.src, sink, &dst)));
        }
    }
    if routed && t.v6_source_route {
        // Pings from the main source, then from one the blackhole matches, which Linux
        // drops, back to back on one CPU: the second meets the next hop the first had the
        // FIB answer (the caches are per CPU) if a cache stood for this route.
        let dst = target(t, 1, run, true, false);
        let from6 = format!("fd00:0::{}", 10 + run);
        for (what, from) in [("main source", None), ("blackholed source", Some(&from6))] {
            let mut args = vec![
                "-c", "0", "ping", "-6", "-c", "3", "-i", "0.02", "-W", "0.3",
            ];
            if let Some(from) = from {
                args.extend(["-I", from.as_str()]);
            }
            args.push(&dst);
            let child = lab
                .src
                .command("taskset")
                .args(&args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            o.insert(
                format!("sink1 v6 ping past the source-specific blackhole, {what}"),
                ping_result(child),
            );
        }
    }
    if let Some(policy) = t.multipath {
        if t.consulted.flip_hash_policy {
            // The flows follow at once: the fast path must hash them by the new policy
            // (its sysctl hook), or leave them to the kernel.
            set_hash_policy(lab, 1 - policy);
        }
        for v6 in [false, true] {
            let fam = if v6 { "v6" } else { "v4" };
            o.insert(
                format!("{fam} multipath: the sink each flow reached"),
                step("multipath", || multipath(lab, v6)),
            );
        }
    }
    let csum_after: u64 = lab.all().map(csum_errors).sum();
    o.insert(
        "checksum errors counted".into(),
        (csum_after - csum_before).to_string(),
    );
    o
}

struct Outcome {
    /// probe, Linux alone, with the fast path
    diffs: Vec<(String, String, String)>,
    fast_pathed: u64,
    passed: u64,
    daemon_errors: Vec<String>,
}

fn verbose() -> bool {
    std::env::var_os("WS_FP_VERBOSE").is_some()
}

/// With WS_FP_VERBOSE set, prints how long each step took.
fn step<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let r = f();
    if verbose() {
        println!("  [{:>5} ms] {what}", t0.elapsed().as_millis());
    }
    r
}

fn run_config(t: &Topo) -> Outcome {
    let lab = step("build", || build(t));
    step("prepare", || prepare_run(t, &lab));
    let linux = traffic(t, &lab, 0);
    // The harness must see Linux forward: a broken lab is no divergence.
    let basic = linux.get("sink1 v4 ping").cloned().unwrap_or_default();
    assert!(
        basic.starts_with("replies 3"),
        "Linux alone did not forward (harness broken?): {basic}"
    );

    let ports = t.links.len();
    let mut d = step("daemon start", || {
        RunningDaemon::start_config(&lab.dut, Config::default())
    });
    step("ports attached", || {
        d.wait_for("every DUT port attached", |s: &Status| {
            s.ports.len() >= ports && s.nft_rule_events.unchecked == 0
        })
    });
    step("prepare", || prepare_run(t, &lab));
    let fp = traffic(t, &lab, 1);
    // The status file is rewritten every 500 ms while running, and once more, with the final
    // counters, when the daemon stops.
    step("daemon stop", || d.stop());
    let s = d.status().unwrap_or_default();
    if verbose() {
        for (k, a) in &linux {
            println!(
                "  {k}:\n    linux: {a}\n    fp:    {}",
                fp.get(k).cloned().unwrap_or_default()
            );
        }
        for p in &s.ports {
            println!(
                "  port {} {}: {:?} {:?}",
                p.name, p.hook, p.reasons, p.notes
            );
        }
    }
    let mut diffs: Vec<_> = linux
        .iter()
        .filter_map(|(k, a)| {
            let b = fp.get(k).cloned().unwrap_or_default();
            (a != &b).then(|| (k.clone(), a.clone(), b))
        })
        .collect();
    let rules = policy_rules(t);
    if !rules.is_empty() && t.policy_rules & (1 << 4) == 0 {
        // Every rule drawn is one the FIB helper evaluates: no family goes to the kernel for
        // them (the flows agree either way; this checks that the routers stayed on).
        let handed: Vec<String> = s
            .ports
            .iter()
            .flat_map(|p| &p.notes)
            .filter(|n| n.contains("policy rules with a selector"))
            .cloned()
            .collect();
        if !handed.is_empty() {
            diffs.push((
                "policy rules the helper evaluates".into(),
                "routers stay on".into(),
                handed.join("; "),
            ));
        }
    }
    if t.multipath.is_some() && t.multipath_form == MultipathForm::SingleHopObject {
        // One next hop, no hash to take: whatever the policy, no family goes to the kernel
        // for it, and IPv4's route cache stays on (the flows agree either way; this checks
        // that they were fast-pathed from the cache).
        let handed: Vec<String> = s
            .ports
            .iter()
            .flat_map(|p| &p.notes)
            .filter(|n| n.contains("multipath routes hashed by") || n.contains("IPv4 multipath"))
            .cloned()
            .collect();
        if !handed.is_empty() {
            diffs.push((
                "single-hop nexthop object".into(),
                "routers stay on".into(),
                handed.join("; "),
            ));
        }
    }
    drop(d);
    step("teardown", || drop(lab));
    Outcome {
        diffs,
        fast_pathed: s.ports.iter().map(|p| p.fast_pathed).sum(),
        passed: s.ports.iter().map(|p| p.passed).sum(),
        daemon_errors: s.errors.clone(),
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not `{v}`"))
    })
}

#[test]
fn linux_and_fast_path_agree_on_random_configurations() {
    wirespeed_lab::require_root();
    let first = env_u64("WS_FP_SEED").unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        Rng::new(t.as_nanos() as u64 ^ std::process::id() as u64).next_u64() >> 16
    });
    let count = env_u64("WS_FP_CONFIGS").unwrap_or(100);
    println!("random_topologies: {count} configurations from seed {first} (WS_FP_SEED={first})");
    if !seg6_routes() {
        println!(
            "random_topologies: this kernel builds no `encap seg6` route (CONFIG_IPV6_SEG6_LWTUNNEL \
             is off): configurations that draw one leave it out"
        );
    }
    let started = Instant::now();
    let (mut fast, mut passed) = (0u64, 0u64);
    let mut failures: Vec<String> = Vec::new();
    let mut by_shape: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for n in 0..count {
        let seed = first.wrapping_add(n);
        let t = draw(seed);
        let r = std::panic::catch_unwind(|| run_config(&t));
        match r {
            Ok(o) => {
                fast += o.fast_pathed;
                passed += o.passed;
                let e = by_shape.entry(format!("{:?}", t.shape)).or_default();
                e.0 += o.fast_pathed;
                e.1 += o.passed;
                if !o.diffs.is_empty() || !o.daemon_errors.is_empty() {
                    let mut m = format!(
                        "DIVERGENCE seed {seed}: {}  replay: WS_FP_SEED={seed} WS_FP_CONFIGS=1 {REPLAY}\n",
                        describe(&t)
                    );
                    for (k, a, b) in &o.diffs {
                        m.push_str(&format!("  {k}:\n    linux: {a}\n    fp:    {b}\n"));
                    }
                    for e in &o.daemon_errors {
                        m.push_str(&format!("  daemon error: {e}\n"));
                    }
                    println!("{m}");
                    failures.push(m);
                }
            }
            Err(p) => {
                let why = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let m = format!(
                    "HARNESS ERROR seed {seed}: {why}\n  {}  replay: WS_FP_SEED={seed} WS_FP_CONFIGS=1 {REPLAY}\n",
                    describe(&t)
                );
                println!("{m}");
                failures.push(m);
            }
        }
        if (n + 1) % 20 == 0 || n + 1 == count {
            println!(
                "random_topologies: {}/{count} configurations, {} failing, {:.0} s",
                n + 1,
                failures.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    let share = |f: u64, p: u64| 100.0 * f as f64 / (f + p).max(1) as f64;
    println!(
        "random_topologies: seed {first}, {count} configurations, {} failing, {:.0} s; fast path: {fast} packets forwarded, {passed} passed to the kernel ({:.1}% fast-pathed)",
        failures.len(),
        started.elapsed().as_secs_f64(),
        share(fast, passed)
    );
    for (shape, (f, p)) in &by_shape {
        println!(
            "random_topologies:   {shape}: {f} fast-pathed, {p} passed ({:.1}%)",
            share(*f, *p)
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {count} configurations diverged (seed {first}); each is printed above with its replay command",
        failures.len()
    );
}
