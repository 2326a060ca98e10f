//! What the kernel's forwarding path consults beyond routes, neighbours, bridges and nftables,
//! with the fast path attached, answered as Linux alone answers: the forwarding counters,
//! IPsec (xfrm) policies and default policies, IPv6 disabled on the ingress port, a route's
//! own MTU, tc classifiers on a port's ingress and egress and an egress qdisc, a next hop gone
//! STALE (the router at XDP, then at TC), packet sockets (tcpdump, a DHCP client's), route realms and a user's local route, and a multipath hash policy written under traffic. Each is set with the
//! commands a user types (`ip xfrm`, `tc`, `sysctl`). docs/FASTPATH.md, "What the forwarding
//! path consults".

use wirespeed_fp::status::Status;
use wirespeed_fp_lab::line::*;
use wirespeed_lab::Netns;

fn run(ns: &Netns, cmd: &str) {
    let mut words = cmd.split(' ');
    let program = words.next().unwrap();
    let args: Vec<&str> = words.collect();
    ns.exec(program, &args)
        .unwrap_or_else(|e| panic!("{cmd} in {}: {e:?}", ns.name()));
}

fn noted(s: &Status, port: &str, text: &str) -> bool {
    s.ports
        .iter()
        .any(|p| p.name == port && p.notes.iter().any(|n| n.contains(text)))
}

fn hooks(s: &Status) -> Vec<String> {
    s.ports.iter().map(|p| p.hook.clone()).collect()
}

/// The kernel's IP MIBs that a forwarded packet counts in, as `nstat` reads them, for one
/// family: /proc/net/snmp `Ip:` and /proc/net/netstat `IpExt:` for IPv4, /proc/net/snmp6
/// for IPv6 (there `Ip6` before each name).
/// The last, InDelivers, is not compared: a packet the DUT receives for itself in a window
/// (a neighbour or router solicitation) counts in InReceives too, and the window is measured
/// again.
const MIBS: [&str; 10] = [
    "InReceives",
    "ForwDatagrams",
    "OutTransmits",
    "InOctets",
    "OutOctets",
    "InNoECTPkts",
    "InECT1Pkts",
    "InECT0Pkts",
    "InCEPkts",
    "InDelivers",
];

/// Reads `MIBS` for family `v6` in `ns`.
fn ip_mibs(ns: &Netns, v6: bool) -> [u64; 10] {
    let mut values = std::collections::BTreeMap::new();
    if v6 {
        for l in ns.exec("cat", &["/proc/net/snmp6"]).unwrap().lines() {
            let mut f = l.split_whitespace();
            if let (Some(k), Some(v)) = (f.next(), f.next()) {
                let k = k
                    .strip_prefix("Ip6")
                    .unwrap_or(k)
                    .replace("OutForw", "Forw");
                values.insert(k, v.parse::<u64>().unwrap_or(0));
            }
        }
    } else {
        for file in ["/proc/net/snmp", "/proc/net/netstat"] {
            let text = ns.exec("cat", &[file]).unwrap();
            for group in ["Ip: ", "IpExt: "] {
                let mut lines = text.lines().filter(|l| l.starts_with(group));
                if let (Some(names), Some(nums)) = (lines.next(), lines.next()) {
                    for (k, v) in names.split(' ').zip(nums.split(' ')).skip(1) {
                        values.insert(k.to_string(), v.parse().unwrap_or(0));
                    }
                }
            }
        }
    }
    MIBS.map(|k| {
        *values
            .get(k)
            .unwrap_or_else(|| panic!("no {k} (IPv6: {v6})"))
    })
}

fn minus(a: [u64; 10], b: [u64; 10]) -> [u64; 10] {
    std::array::from_fn(|i| a[i] - b[i])
}

/// The fast path's share of `MIBS` for family `v6`, both ports (status `mib_v4`/`mib_v6`).
fn ours(s: &Status, v6: bool) -> [u64; 10] {
    let mut sum = [0; 10];
    for p in &s.ports {
        let m = if v6 { p.mib_v6 } else { p.mib_v4 };
        let add = [
            m.packets, m.packets, m.packets, m.octets, m.octets, m.no_ect, m.ect1, m.ect0, m.ce, 0,
        ];
        for (s, a) in sum.iter_mut().zip(add) {
            *s += a;
        }
    }
    sum
}

/// Sum of the packets both ports fast-pathed.
fn fast(s: &Status) -> u64 {
    forwarded(s, "d0") + forwarded(s, "d1")
}

/// Pings `dst` until the fast path forwards a packet (bounded): a sysctl gate closed by a
/// write stays closed until the daemon has read the value back, a poll period or two.
fn until_fast(lab: &Line, d: &RunningDaemon, dst: &str) {
    let before = fast(&d.status().unwrap());
    for _ in 0..40 {
        assert!(ping_once(&lab.src, dst), "{dst} unreachable");
        std::thread::sleep(std::time::Duration::from_millis(250));
        if fast(&d.status().unwrap()) > before {
            return;
        }
    }
    panic!(
        "{dst}: nothing fast-pathed in 40 pings; last status {:?}",
        d.status()
    );
}

/// A next hop gone STALE with an address nobody answers to any more (its host's NIC was
/// swapped, say). Linux's first forwarded packet moves the entry to DELAY, a unicast probe
/// fails it, and a later packet resolves the neighbour afresh; the FIB helper alone would
/// send to the dead address for as long as the entry stood. The sysctls shorten the
/// kernel's waits (DELAY 1 s, one probe, 100 ms).
fn stale_next_hop_is_probed(lab: &Line, d: &RunningDaemon, hop: &str, dst: &str) {
    let fam = if hop.contains(':') { "ipv6" } else { "ipv4" };
    // The sink's own resolution of the DUT would refresh the DUT's entry (a request from it
    // carries its address): pinned while this runs.
    let dut = if hop.contains(':') {
        "fd00:b::1"
    } else {
        "198.18.1.1"
    };
    let mac = lab.dut.exec("cat", &["/sys/class/net/d1/address"]).unwrap();
    run(
        &lab.sink,
        &format!(
            "ip neigh replace {dut} lladdr {} dev s0 nud permanent",
            mac.trim()
        ),
    );
    let knobs = [
        ("delay_first_probe_time", "1", "5"),
        ("ucast_solicit", "1", "3"),
        ("retrans_time_ms", "100", "1000"),
    ];
    for (k, short, _) in knobs {
        lab.dut
            .sysctl(&format!("net.{fam}.neigh.d1.{k}"), short)
            .unwrap();
    }
    // Unconfirmed for a while, the entry may be STALE already: counted from REACHABLE.
    let real = lab
        .sink
        .exec("cat", &["/sys/class/net/s0/address"])
        .unwrap();
    run(
        &lab.dut,
        &format!(
            "ip neigh replace {hop} lladdr {} dev d1 nud reachable",
            real.trim()
        ),
    );
    let before = fresh(d).stale_neighbours;
    run(
        &lab.dut,
        &format!("ip neigh replace {hop} lladdr 02:00:00:00:00:99 dev d1 nud stale"),
    );
    d.wait_for(&format!("{hop} STALE"), |s| s.stale_neighbours > before);
    // Lost, as under Linux alone: it goes to the address the entry holds.
    let _ = ping_once(&lab.src, dst);
    let entry = lab
        .dut
        .exec("ip", &["neigh", "show", hop, "dev", "d1"])
        .unwrap();
    assert!(
        !entry.contains("STALE"),
        "{hop}: a forwarded packet left its next hop STALE: {entry}"
    );
    assert!(
        (0..10).any(|_| ping_once(&lab.src, dst)),
        "{hop}: the next hop was never resolved again: {}",
        lab.dut.exec("ip", &["neigh", "show", "dev", "d1"]).unwrap()
    );
    for (k, _, default) in knobs {
        lab.dut
            .sysctl(&format!("net.{fam}.neigh.d1.{k}"), default)
            .unwrap();
    }
    run(&lab.sink, &format!("ip neigh del {dut} dev s0"));
}

/// A counter of `ns`'s /proc/net/snmp line `group` (`Ip`, `Icmp`, ...), by name.
fn snmp(ns: &Netns, group: &str, name: &str) -> u64 {
    let snmp = ns.exec("cat", &["/proc/net/snmp"]).unwrap();
    let prefix = format!("{group}: ");
    let mut lines = snmp.lines().filter(|l| l.starts_with(&prefix));
    let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
    let at = names.split(' ').position(|n| n == name).unwrap();
    values.split(' ').nth(at).unwrap().parse().unwrap()
}

/// Packets routed to realm `realm` (/proc/net/rt_acct: 256 realms of o_bytes, o_packets,
/// i_bytes, i_packets, 32-bit each; the kernel's, across namespaces).
fn realm_packets(ns: &Netns, realm: usize) -> u32 {
    let out = ns.command("cat").arg("/proc/net/rt_acct").output().unwrap();
    let at = realm * 16 + 4;
    u32::from_ne_bytes(out.stdout[at..at + 4].try_into().unwrap())
}

/// Route realms, which the kernel accounts packet by packet (rt_acct); and a local route of
/// the user's, after which the kernel checks every source in full and drops one that routes
/// back as local, rp_filter or not (`fib_has_custom_local_routes`, never cleared).
fn realms_and_local_routes(lab: &Line, d: &RunningDaemon) {
    run(&lab.sink, "ip addr add 198.19.81.1/32 dev lo");
    run(
        &lab.dut,
        "ip route add 198.19.81.0/24 via 198.18.1.2 realm 5",
    );
    d.wait_for("IPv4 to the kernel under a realm", |s| {
        noted(s, "d0", "router4 -> kernel: 1 routes with a realm")
    });
    let before = realm_packets(&lab.dut, 5);
    run(&lab.src, "ping -q -c 5 -i 0.01 -W 1 198.19.81.1");
    let counted = realm_packets(&lab.dut, 5).wrapping_sub(before);
    assert!(counted >= 5, "realm 5 counted {counted} of 5 requests");
    run(&lab.dut, "ip route del 198.19.81.0/24");
    d.wait_for("IPv4 back without realms", |s| !noted(s, "d0", "realm"));

    // A source the DUT routes to no one in particular: forwarded, until a local route of the
    // user's covers it. Its echo requests are counted where they land.
    run(&lab.src, "ip addr add 198.19.80.5/32 dev lo");
    let echoes = |n: usize| {
        let before = snmp(&lab.sink, "Icmp", "InEchos");
        let _ = lab.src.exec(
            "ping",
            &[
                "-q",
                "-c",
                &n.to_string(),
                "-i",
                "0.01",
                "-W",
                "1",
                "-I",
                "198.19.80.5",
                "198.19.3.1",
            ],
        );
        snmp(&lab.sink, "Icmp", "InEchos") - before
    };
    assert_eq!(echoes(3), 3, "a source with no route back is forwarded");
    run(&lab.dut, "ip route add local 198.19.80.0/24 dev lo");
    d.wait_for("the full source check", |s| {
        noted(s, "d0", "router4: a local route of a user's")
    });
    assert_eq!(echoes(3), 0, "a source routed back as local was forwarded");
    run(&lab.dut, "ip route del local 198.19.80.0/24 dev lo");
    assert_eq!(echoes(3), 3, "the source routed nowhere again");
}

/// A stateful forward chain, as a home router has: what comes in on d0 is let out, and only
/// replies come back. Linux tracks the request, so its reply is `established`; the reply
/// alone, unseen by conntrack, would be dropped. And with conntrack on at all (any rule
/// using it, on any chain), Linux tracks every forwarded packet (`conntrack -L`).
fn conntrack_sees_every_forwarded_packet(lab: &Line, d: &RunningDaemon) {
    run(&lab.dut, "nft add table inet fw");
    run(
        &lab.dut,
        "nft add chain inet fw through { type filter hook forward priority 0 ; policy drop ; }",
    );
    run(&lab.dut, "nft add rule inet fw through iifname d0 accept");
    run(
        &lab.dut,
        "nft add rule inet fw through ct state established,related accept",
    );
    d.wait_for("both families to the kernel under conntrack", |s| {
        noted(s, "d0", "router4 -> kernel: conntrack")
            && noted(s, "d0", "router6 -> kernel: conntrack")
    });
    assert!(
        ping(&lab.src, "198.19.3.1") && ping(&lab.src, "fd00:c::1"),
        "replies a stateful forward chain lets back"
    );
    run(&lab.dut, "nft delete table inet fw");
    d.wait_for("both families back without conntrack", |s| {
        !noted(s, "d0", "conntrack")
    });
}

/// An IPv6 device's MTU written through its sysctl (`net.ipv6.conf.d1.mtu`), which changes
/// what forwarding lets through (ip6_forward reads it) with no event: a length the route cache
/// let through before must not pass after. Each run asks a host of its own, since the source
/// keeps the path MTU it learns.
fn ipv6_mtu_without_an_event(lab: &Line, d: &RunningDaemon, host: &str) {
    // 1,352 bytes of payload: a 1,400-byte packet, which IPv6 routers never fragment.
    let big = || {
        let out = lab
            .src
            .command("ping")
            .args(["-6", "-M", "do", "-s", "1352", "-c1", "-W1", host])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success(), text)
    };
    let before = fast(&d.status().unwrap());
    assert!(big().0 && big().0, "1,400 bytes through an MTU of 1,500");
    d.wait_for("the large packets fast-pathed", |s| fast(s) > before);
    lab.dut.sysctl("net.ipv6.conf.d1.mtu", "1300").unwrap();
    let (ok, text) = big();
    assert!(
        !ok && text.contains("mtu=1300"),
        "1,400 bytes forwarded past an MTU of 1,300: {text}"
    );
    lab.dut.sysctl("net.ipv6.conf.d1.mtu", "1500").unwrap();
}

/// ip_forward_use_pmtu, written under traffic: from the write on, IPv4 is the kernel's (its
/// forwarding then honours path MTUs it learns, with no event), before any poll could see it.
fn use_pmtu_at_once(lab: &Line, d: &RunningDaemon) {
    let s = fresh(d);
    lab.dut.sysctl("net.ipv4.ip_forward_use_pmtu", "1").unwrap();
    run(&lab.src, "ping -q -c 20 -i 0.002 -W 1 198.19.3.1");
    assert_eq!(
        fast(&fresh(d)),
        fast(&s),
        "packets fast-pathed right after ip_forward_use_pmtu was set"
    );
    d.wait_for("IPv4 to the kernel under ip_forward_use_pmtu", |s| {
        noted(s, "d0", "router4 -> kernel: ip_forward_use_pmtu on")
    });
    lab.dut.sysctl("net.ipv4.ip_forward_use_pmtu", "0").unwrap();
    d.wait_for("IPv4 back", |s| !noted(s, "d0", "ip_forward_use_pmtu"));
    until_fast(lab, d, "198.19.3.1");
}

/// Packet sockets on the DUT's ports see what they see under Linux alone: a capture
/// (`tcpdump -i d1`, a socket of every protocol) gets each frame d1 receives before tc ingress
/// and each one it sends, and a socket bound to IPv4 on d0 (a DHCP client's) each IPv4 frame
/// d0 receives after the rx_handler. An XDP program runs before all of them, and an XDP
/// redirect sends past them.
fn taps_see_what_they_see_under_linux(lab: &Line, d: &RunningDaemon, hook: &str) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut capture = lab
        .dut
        .command("timeout")
        .args(["15", "tcpdump", "-i", "d1", "-n", "-l", "-c", "10"])
        .arg("icmp and host 198.19.3.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(capture.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "tcpdump did not start"
        );
    }
    if hook == "xdp (native)" {
        d.wait_for("the routers at TC under the capture", |s| {
            noted(s, "d0", "router at TC: egress d1 has 1 packet captures")
        });
    }
    run(&lab.src, "ping -q -c 5 -i 0.05 -W 1 198.19.3.1");
    let out = capture.wait_with_output().unwrap();
    let seen = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(
        seen, 10,
        "tcpdump on d1 saw {seen} of 5 requests and 5 replies"
    );
    d.wait_for("the capture gone", |s| !noted(s, "d0", "packet captures"));

    // A socket bound to IPv4 on d0, counting the echo requests it gets (SOCK_DGRAM: from the
    // IP header on); it stops at 5 or after 10 s.
    let count = r#"import socket, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
s.bind(("d0", 0x0800)); s.settimeout(0.2); print("ready", flush=True)
n, end = 0, time.time() + 10
while n < 5 and time.time() < end:
    try: p = s.recv(2048)
    except socket.timeout: continue
    n += p[9] == 1 and p[16:20] == bytes([198, 19, 3, 1])
print(n, flush=True)
"#;
    let mut socket = lab
        .dut
        .command("python3")
        .args(["-c", count])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(socket.stdout.take().unwrap());
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    d.wait_for("IPv4 on d0 to the kernel under the socket", |s| {
        noted(s, "d0", "router4 -> kernel: 1 packet sockets bound to IPv4")
    });
    run(&lab.src, "ping -q -c 5 -i 0.05 -W 1 198.19.3.1");
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "5",
        "a socket bound to IPv4 on d0 saw {} of 5 requests",
        line.trim()
    );
    socket.wait().unwrap();
    d.wait_for("IPv4 back on d0", |s| {
        !noted(s, "d0", "packet sockets") && s.ports.iter().all(|p| p.hook == hook)
    });
}

/// One eBPF instruction as the kernel reads it: opcode, registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | u64::from(src << 4 | dst) << 8
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

/// A sender that puts a VLAN tag into skb metadata, as a VLAN device over a veth or a
/// VLAN-filtering bridge's tagged egress does: a tc egress classifier on the source's v0
/// pushing VID 10 onto IPv4 packets to 198.19.7.1 (`bpf_skb_vlan_push`; the veth's tx-vlan
/// offload keeps the tag out of the data). The classifier lives as long as the device.
fn tag_in_metadata_from_the_source(lab: &Line) {
    let ns = lab.src.name().to_string();
    let r = spawn_in_ns(&ns, move || {
        let dst = u32::from_ne_bytes([198, 19, 7, 1]) as i32;
        let prog = [
            insn(0x61, 2, 1, 16, 0),      // r2 = skb->protocol
            insn(0x55, 2, 0, 13, 0x0008), // not IPv4 (network order): out
            insn(0xbf, 6, 1, 0, 0),       // r6 = skb
            insn(0xb7, 2, 0, 0, 30),      // r2 = 30, the destination address's offset
            insn(0xbf, 3, 10, 0, 0),      // r3 = fp - 4
            insn(0x07, 3, 0, 0, -4),
            insn(0xb7, 4, 0, 0, 4),      // r4 = 4
            insn(0x85, 0, 0, 0, 26),     // bpf_skb_load_bytes(skb, 30, fp - 4, 4)
            insn(0x55, 0, 0, 6, 0),      // failed: out
            insn(0x61, 1, 10, -4, 0),    // r1 = the destination
            insn(0x55, 1, 0, 4, dst),    // another: out
            insn(0xbf, 1, 6, 0, 0),      // r1 = skb
            insn(0xb7, 2, 0, 0, 0x0081), // r2 = htons(ETH_P_8021Q)
            insn(0xb7, 3, 0, 0, 10),     // r3 = VID 10
            insn(0x85, 0, 0, 0, 18),     // bpf_skb_vlan_push
            insn(0xb7, 0, 0, 0, 0),      // out: TC_ACT_OK
            insn(0x95, 0, 0, 0, 0),
        ];
        let fd = wirespeed_sys::bpf::load_insns(
            libbpf_rs::libbpf_sys::BPF_PROG_TYPE_SCHED_CLS,
            c"ws_tag",
            &prog,
            0,
        )
        .map_err(|e| format!("load the tagging classifier: {e}"))?;
        let ifindex = wirespeed_sys::packet::if_index("v0").map_err(|e| e.to_string())?;
        let mut hook = libbpf_rs::TcHookBuilder::new(std::os::fd::AsFd::as_fd(&fd))
            .ifindex(ifindex as i32)
            .replace(true)
            .handle(1)
            .priority(1)
            .hook(libbpf_rs::TC_EGRESS);
        hook.create().map_err(|e| format!("clsact on v0: {e}"))?;
        hook.attach()
            .map_err(|e| format!("attach to v0 egress: {e}"))?;
        Ok::<(), String>(())
    })
    .join()
    .unwrap();
    r.unwrap_or_else(|e| panic!("{e} in {ns}"));
}

/// A frame whose VLAN tag its device keeps in metadata reaches the router port d0, which
/// has no VLAN device: Linux drops it (`__netif_receive_skb_core`: PACKET_OTHERHOST for a
/// non-zero VID), where XDP, shown the frame without its tag, would have forwarded it.
fn a_tag_in_metadata_is_the_kernels(lab: &Line, d: &RunningDaemon) {
    let vlan = |s: &Status| {
        s.ports
            .iter()
            .find(|p| p.name == "d0")
            .and_then(|p| p.reasons.get("pass_vlan").copied())
            .unwrap_or(0)
    };
    let before = vlan(&fresh(d));
    assert!(
        !ping_once(&lab.src, "198.19.7.1"),
        "a frame tagged VID 10 in metadata was forwarded"
    );
    d.wait_for("the tagged frame counted", |s| vlan(s) > before);
    assert!(ping(&lab.src, "198.19.3.1"), "an untagged destination");
}

/// iptables-legacy, written under traffic: its table is replaced by one setsockopt, which
/// no event reports. From the write on, IPv4 is the kernel's (the write hook closes the gate
/// before the kernel applies it), so the rule that drops 198.19.3.1 is never bypassed. The
/// table stays for the namespace's life: run last.
fn legacy_iptables_at_once(lab: &Line, d: &RunningDaemon) {
    let s = fresh(d);
    run(
        &lab.dut,
        "iptables-legacy -A FORWARD -d 198.19.3.1/32 -j DROP",
    );
    let out = lab.src.exec(
        "ping",
        &["-q", "-c", "20", "-i", "0.002", "-W", "1", "198.19.3.1"],
    );
    assert!(out.is_err(), "a legacy DROP rule was bypassed: {out:?}");
    assert_eq!(
        fast(&fresh(d)),
        fast(&s),
        "packets fast-pathed right after an iptables-legacy table was written"
    );
    d.wait_for("IPv4 to the kernel under iptables-legacy", |s| {
        noted(s, "d0", "router4 -> kernel: iptables-legacy tables present")
    });
    assert!(ping(&lab.src, "198.19.4.1"), "a destination the rule skips");
}

/// The write hooks see every setsockopt on the host and change none: an option whose
/// handler writes into the caller's buffer still does. IPV6_FLOWLABEL_MGR returns the flow
/// label the kernel chose (what `ping -F 0` sends, and the kernel's custom_multipath_hash.sh
/// hashes by): with the hook handing the kernel its own copy, the caller read back 0.
fn setsockopt_write_backs_reach_the_caller(ns: &Netns) {
    let code = r#"import ctypes, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
req = ctypes.create_string_buffer(32)
# in6_flowlabel_req: dst, label 0, IPV6_FL_A_GET, IPV6_FL_S_EXCL, IPV6_FL_F_CREATE
struct.pack_into("16sIBBHHHI", req, 0, socket.inet_pton(socket.AF_INET6, "fd00:c::1"), 0, 0, 1, 1, 0, 0, 0)
rc = libc.setsockopt(s.fileno(), 41, 32, req, 32)
print(rc, struct.unpack_from("!I", req, 16)[0])
"#;
    let out = ns.exec("python3", &["-c", code]).unwrap();
    let mut f = out.split_whitespace();
    let (rc, label) = (f.next().unwrap(), f.next().unwrap());
    assert_eq!(rc, "0", "IPV6_FLOWLABEL_MGR refused: {out}");
    assert_ne!(
        label, "0",
        "the flow label the kernel chose never reached the caller"
    );
}

/// `hook` is what the routers run at without tc of their own ("xdp (native)" or "tc
/// (ingress)").
fn each_consulted_state(lab: &Line, d: &RunningDaemon, hook: &str) {
    let at_hook = |s: &Status| s.ports.len() == 2 && hooks(s).iter().all(|h| h == hook);
    d.wait_for(&format!("both ports at {hook}"), at_hook);
    assert!(ping(&lab.src, "198.19.3.1") && ping(&lab.src, "fd00:c::1"));
    taps_see_what_they_see_under_linux(lab, d, hook);
    a_tag_in_metadata_is_the_kernels(lab, d);
    stale_next_hop_is_probed(lab, d, "198.18.1.2", "198.19.3.1");
    stale_next_hop_is_probed(lab, d, "fd00:b::2", "fd00:c::1");
    conntrack_sees_every_forwarded_packet(lab, d);
    let host = if hook == "xdp (native)" {
        "fd00:c::10"
    } else {
        "fd00:c::11"
    };
    ipv6_mtu_without_an_event(lab, d, host);

    // IPsec: a policy that blocks forwarded packets (one that required encryption would be
    // bypassed the same way). Linux drops them and counts them in IPInDiscards.
    run(
        &lab.dut,
        "ip xfrm policy add dst 198.19.3.0/24 dir fwd action block",
    );
    run(
        &lab.dut,
        "ip -6 xfrm policy add dst fd00:c::/64 dir fwd action block",
    );
    d.wait_for("both families to the kernel under xfrm policies", |s| {
        noted(s, "d0", "router4 -> kernel: 1 IPsec (xfrm)")
            && noted(s, "d0", "router6 -> kernel: 1 IPsec (xfrm)")
    });
    assert!(
        !ping_once(&lab.src, "198.19.3.1"),
        "an xfrm block policy was bypassed (IPv4)"
    );
    assert!(
        !ping_once(&lab.src, "fd00:c::1"),
        "an xfrm block policy was bypassed (IPv6)"
    );
    assert!(ping(&lab.src, "198.19.4.1"), "a prefix no policy selects");
    run(&lab.dut, "ip xfrm policy flush");
    d.wait_for("both families back after the flush", |s| {
        !noted(s, "d0", "IPsec") && at_hook(s)
    });
    let before = fast(&d.status().unwrap());
    assert!(ping(&lab.src, "198.19.3.1") && ping(&lab.src, "fd00:c::1"));
    d.wait_for("fast-pathed again", |s| fast(s) > before);
    // A default policy (Linux 5.16+) blocks what no policy matches.
    run(&lab.dut, "ip xfrm policy setdefault fwd block");
    d.wait_for("to the kernel under a blocking default", |s| {
        noted(s, "d1", "xfrm default policy blocks")
    });
    assert!(
        !ping_once(&lab.src, "198.19.3.1"),
        "a blocking default policy was bypassed"
    );
    run(&lab.dut, "ip xfrm policy setdefault fwd accept");
    d.wait_for("back under an accepting default", |s| {
        !noted(s, "d1", "xfrm default") && at_hook(s)
    });

    // IPv6 disabled on the ingress port (disable_ipv6, which takes the port's IPv6 addresses
    // with it): Linux drops every IPv6 packet d0 receives, which the FIB helper does not ask.
    lab.dut
        .sysctl("net.ipv6.conf.d0.disable_ipv6", "1")
        .unwrap();
    d.wait_for("IPv6 to the kernel on d0", |s| {
        noted(s, "d0", "router6 -> kernel: IPv6 disabled on d0")
    });
    assert!(
        !ping_once(&lab.src, "fd00:c::1"),
        "IPv6 forwarded from a port where it is disabled"
    );
    lab.dut
        .sysctl("net.ipv6.conf.d0.disable_ipv6", "0")
        .unwrap();
    run(&lab.dut, "ip addr add fd00:a::2/64 dev d0 nodad");
    d.wait_for("IPv6 back on d0", |s| {
        !noted(s, "d0", "disable_ipv6") && at_hook(s)
    });
    assert!(ping(&lab.src, "fd00:c::1"));

    // A route with an MTU of its own: the kernel's forwarding honours it (frag needed for a
    // DF packet over it), the FIB helper checks only a locked one. Each DF ping goes to a host
    // of its own: the source keeps what it learns of a path per destination.
    let h = if hook == "xdp (native)" { 1 } else { 3 };
    run(
        &lab.dut,
        "ip route replace 198.19.70.0/24 via 198.18.1.2 mtu 1400",
    );
    d.wait_for("IPv4 over 1400 bytes to the kernel", |s| {
        noted(
            s,
            "d0",
            "router4: packets over 1400 bytes -> kernel: 1 routes",
        )
    });
    // 1,422 bytes of payload: a 1,450-byte packet, DF set.
    let big = |host: u32| {
        let out = lab
            .src
            .command("ping")
            .args(["-M", "do", "-s", "1422", "-c1", "-W1"])
            .arg(format!("198.19.70.{host}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success(), text)
    };
    let (ok, text) = big(h);
    assert!(
        !ok && text.contains("mtu = 1400"),
        "a route's MTU was skipped: {text}"
    );
    assert!(
        ping(&lab.src, "198.19.70.1"),
        "a packet within the route's MTU"
    );
    run(&lab.dut, "ip route del 198.19.70.0/24");
    d.wait_for("no route MTU left", |s| !noted(s, "d0", "packets over"));
    run(&lab.dut, "ip route add 198.19.70.0/24 via 198.18.1.2");
    let (ok, text) = big(h + 1);
    assert!(ok, "1,450 bytes through the device's MTU of 1,500: {text}");

    // tc on ingress: a classifier on d0 that diverts one destination (mirred into a veth
    // whose peer is down, where it is dropped). It runs after XDP and after tcx programs, so
    // d0 is left to the kernel while its clsact qdisc is there, before the classifier comes.
    run(&lab.dut, "tc qdisc add dev d0 clsact");
    run(
        &lab.dut,
        "tc filter add dev d0 ingress protocol ip prio 1 u32 match ip dst 198.19.4.1/32 action mirred egress redirect dev dz",
    );
    d.wait_for("d0 to the kernel under its ingress filter", |s| {
        noted(
            s,
            "d0",
            "router4 -> kernel: a clsact qdisc (its ingress classifiers",
        )
    });
    assert!(
        !ping_once(&lab.src, "198.19.4.1"),
        "an ingress tc filter was bypassed"
    );
    assert!(
        ping(&lab.src, "198.19.5.1"),
        "a destination the filter skips"
    );
    run(&lab.dut, "tc qdisc del dev d0 clsact");
    d.wait_for("d0 back without its filter", |s| {
        !noted(s, "d0", "clsact") && at_hook(s)
    });

    // tc on egress: the same classifier on d1's egress. A TC redirect passes through it; an
    // XDP redirect would not, so the routers run at TC while it is there.
    run(&lab.dut, "tc qdisc add dev d1 clsact");
    run(
        &lab.dut,
        "tc filter add dev d1 egress protocol ip prio 1 u32 match ip dst 198.19.5.1/32 action mirred egress redirect dev dz",
    );
    // At TC already (the TC phase), the data path has nothing to change for it.
    d.wait_for("routers at TC under d1's egress filter", |s| {
        hooks(s).iter().all(|h| h == "tc (ingress)")
            && (hook != "xdp (native)"
                || noted(
                    s,
                    "d0",
                    "egress d1 has a clsact qdisc (its egress classifiers",
                ))
    });
    assert!(
        !ping_once(&lab.src, "198.19.5.1"),
        "an egress tc filter was bypassed"
    );
    let before = fast(&d.status().unwrap());
    assert!(
        ping(&lab.src, "198.19.4.1"),
        "a destination the filter skips"
    );
    d.wait_for("the rest fast-pathed at TC", |s| fast(s) > before);
    run(&lab.dut, "tc qdisc del dev d1 clsact");
    d.wait_for("routers back without the egress filter", |s| {
        !noted(s, "d0", "clsact") && at_hook(s)
    });

    // An egress qdisc that drops everything (a FIFO of no packets, which the kernel never
    // bypasses): forwarded packets meet it at TC, never from XDP.
    run(&lab.dut, "tc qdisc add dev d1 root pfifo limit 0");
    d.wait_for("routers at TC under d1's qdisc", |s| {
        hooks(s).iter().all(|h| h == "tc (ingress)")
            && (hook != "xdp (native)" || noted(s, "d0", "egress d1 has an egress qdisc pfifo"))
    });
    assert!(
        !ping_once(&lab.src, "198.19.5.1"),
        "an egress qdisc was bypassed"
    );
    run(&lab.dut, "tc qdisc del dev d1 root");
    d.wait_for("routers back without the qdisc", |s| {
        !noted(s, "d0", "qdisc") && at_hook(s)
    });
    assert!(ping(&lab.src, "198.19.5.1"));
}

#[test]
fn the_router_answers_xfrm_tc_and_the_hash_policy_as_linux_does() {
    let lab = line("k");
    // A veth whose peer is down: a packet redirected into dz is dropped. Not served.
    run(&lab.dut, "ip link add dz type veth peer name dzp");
    run(&lab.dut, "ip link set dz up");
    for h in 1..=4 {
        run(&lab.sink, &format!("ip addr add 198.19.70.{h}/32 dev lo"));
    }
    for h in ["fd00:c::10", "fd00:c::11"] {
        run(&lab.sink, &format!("ip addr add {h}/128 dev lo"));
    }
    tag_in_metadata_from_the_source(&lab);
    assert!(
        !ping_once(&lab.src, "198.19.7.1"),
        "Linux alone forwarded a frame tagged in metadata"
    );
    // The counters a user reads (nstat): what Linux alone counts, and with the fast path
    // attached the kernel's count plus the fast path's (status mib_v4/mib_v6), one family at
    // a time, for 20 pings, ECN-capable ones (ECT(0)) for IPv4. docs/FASTPATH.md, "Counters".
    let pings = |dst: &str, n: usize| {
        let mut args = vec!["-q", "-c", "", "-i", "0.01", "-W", "1"];
        let n = n.to_string();
        args[2] = &n;
        if dst.contains(':') {
            args.insert(0, "-6");
        } else {
            args.extend(["-Q", "2"]);
        }
        args.push(dst);
        lab.src
            .exec("ping", &args)
            .unwrap_or_else(|e| panic!("ping {dst}: {e:?}"));
    };
    // Measures `window` for family `v6` until the DUT delivered nothing to itself in it
    // (at most 5 times): (the kernel's MIBs, the fast path's).
    let quiet = |v6: bool, d: Option<&RunningDaemon>, window: &dyn Fn()| {
        for _ in 0..5 {
            let fp = || d.map(|d| ours(&fresh(d), v6)).unwrap_or_default();
            let (kernel_before, fp_before) = (ip_mibs(&lab.dut, v6), fp());
            window();
            let (kernel, fp) = (
                minus(ip_mibs(&lab.dut, v6), kernel_before),
                minus(fp(), fp_before),
            );
            if kernel[9] == 0 {
                return (kernel, fp);
            }
        }
        panic!("the DUT kept receiving packets for itself");
    };
    let mut linux = Vec::new();
    for dst in ["198.19.9.1", "fd00:c::1"] {
        let v6 = dst.contains(':');
        pings(dst, 1); // neighbours resolved, on both sides
        linux.push(quiet(v6, None, &|| pings(dst, 20)).0);
    }
    for l in &linux {
        assert_eq!(
            l[..3],
            [40, 40, 40],
            "Linux alone: 20 requests and 20 replies received, forwarded and sent: {l:?}"
        );
    }
    let mut d = RunningDaemon::start(&lab.dut, Some(vec!["d0".into(), "d1".into()]));
    d.wait_for("both ports attached", |s| s.ports.len() == 2);
    setsockopt_write_backs_reach_the_caller(&lab.src);
    for (dst, linux) in ["198.19.9.1", "fd00:c::1"].into_iter().zip(linux) {
        let v6 = dst.contains(':');
        let (kernel, fp) = quiet(v6, Some(&d), &|| pings(dst, 20));
        let sum: [u64; 10] = std::array::from_fn(|i| kernel[i] + fp[i]);
        assert_eq!(
            sum, linux,
            "{dst}: {MIBS:?}: the kernel counted {kernel:?}, the fast path {fp:?}"
        );
        assert!(fp[1] > 0, "{dst}: nothing fast-pathed");
    }
    each_consulted_state(&lab, &d, "xdp (native)");

    // The multipath hash policy, which changes with no event. Written under traffic, no
    // packet after the write is hashed by the fast path on the old policy: the sysctl hook
    // closes the gate before the kernel applies the write.
    run(
        &lab.dut,
        "ip route add 198.19.60.0/24 nexthop via 198.18.1.2 nexthop via 198.18.1.2",
    );
    run(&lab.sink, "ip addr add 198.19.60.1/32 dev lo");
    d.wait_for("route cache off for the multipath route", |s| {
        noted(s, "d0", "route cache off: 1 IPv4 multipath")
    });
    let before = fast(&d.status().unwrap());
    assert!(ping(&lab.src, "198.19.60.1"));
    d.wait_for("multipath fast-pathed under policy 0", |s| fast(s) > before);
    let s = fresh(&d);
    lab.dut
        .sysctl("net.ipv4.fib_multipath_hash_policy", "1")
        .unwrap();
    // At once, before any poll could have seen the write.
    run(&lab.src, "ping -q -c 20 -i 0.002 -W 1 198.19.60.1");
    let after = fresh(&d);
    assert_eq!(
        fast(&after),
        fast(&s),
        "packets fast-pathed right after the hash policy changed"
    );
    d.wait_for("IPv4 to the kernel under policy 1", |s| {
        noted(s, "d0", "hashed by fib_multipath_hash_policy 1")
    });
    lab.dut
        .sysctl("net.ipv4.fib_multipath_hash_policy", "0")
        .unwrap();
    d.wait_for("IPv4 back under policy 0", |s| {
        !noted(s, "d0", "fib_multipath_hash_policy")
    });
    until_fast(&lab, &d, "198.19.60.1");
    run(&lab.dut, "ip route del 198.19.60.0/24");
    realms_and_local_routes(&lab, &d);
    use_pmtu_at_once(&lab, &d);

    // The same at TC: the outer peers without NAPI (GRO off, the kernel's default).
    for (ns, dev) in [(&lab.src, "v0"), (&lab.sink, "s0")] {
        ns.exec("ethtool", &["-K", dev, "gro", "off"]).unwrap();
    }
    each_consulted_state(&lab, &d, "tc (ingress)");
    legacy_iptables_at_once(&lab, &d);
    d.stop();
}
