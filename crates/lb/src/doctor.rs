//! `wirespeed lb doctor`: the reasons, from the peers' issue trackers, that packets are not
//! forwarded, each found and printed as one line with the command that fixes it. On the load
//! balancer it checks the reals' next hops and neighbours, the interfaces' XDP transmit,
//! full-NAT local addresses and the MTU left after encapsulation; with `--real` it checks a
//! real server: the VIP on `lo`, ARP for DR, rp_filter, decapsulation devices, and for a
//! GUE real something that takes GUE on its ports.

use std::net::IpAddr;
use std::process::Command;

use serde::Serialize;
use serde_json::Value;

use crate::listing::ListView;
use crate::model::Mode;

/// One problem and the command that fixes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub problem: String,
    pub fix: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.problem, self.fix)
    }
}

/// Where the checks look: this host, or a network namespace of it (a lab's real server).
pub struct Host {
    pub netns: Option<String>,
}

impl Host {
    fn command(&self, argv: &[&str]) -> Command {
        let mut c;
        match &self.netns {
            Some(ns) => {
                c = Command::new("ip");
                c.args(["netns", "exec", ns]).args(argv);
            }
            None => {
                c = Command::new(argv[0]);
                c.args(&argv[1..]);
            }
        }
        c
    }

    /// stdout of a command that succeeded, else `None`.
    fn output(&self, argv: &[&str]) -> Option<String> {
        let out = self.command(argv).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub(crate) fn ip_json(&self, args: &[&str]) -> Value {
        let mut argv = vec!["ip", "-j"];
        argv.extend_from_slice(args);
        self.output(&argv)
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Array(Vec::new()))
    }

    /// A value under /proc/sys, by its sysctl name.
    fn sysctl(&self, key: &str) -> Option<i64> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        self.output(&["cat", &path])?.trim().parse().ok()
    }

    /// A fix as the user runs it: inside the namespace when the checks ran in one.
    pub(crate) fn fix(&self, cmd: &str) -> String {
        match &self.netns {
            Some(ns) => cmd
                .split("; ")
                .map(|c| format!("ip netns exec {ns} {c}"))
                .collect::<Vec<_>>()
                .join("; "),
            None => cmd.to_string(),
        }
    }

    /// Links with their flags: (name, up, mtu, kind).
    fn links(&self) -> Vec<(String, bool, u64, String)> {
        let v = self.ip_json(&["-d", "link", "show"]);
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|l| {
                        let name = l["ifname"].as_str().unwrap_or("").to_string();
                        let up = l["flags"]
                            .as_array()
                            .is_some_and(|f| f.iter().any(|x| x == "UP"));
                        let mtu = l["mtu"].as_u64().unwrap_or(0);
                        let kind = l["linkinfo"]["info_kind"]
                            .as_str()
                            .unwrap_or("")
                            .to_string();
                        (name, up, mtu, kind)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The devices with an XDP program named `decap` attached, with its program id.
    fn decap_programs(&self) -> Vec<(String, u32)> {
        let v = self.ip_json(&["link", "show"]);
        let mut out = Vec::new();
        for l in v.as_array().into_iter().flatten() {
            let Some(name) = l["ifname"].as_str() else {
                continue;
            };
            let xdp = &l["xdp"];
            let progs = std::iter::once(&xdp["prog"]).chain(
                xdp["attached"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| &a["prog"]),
            );
            for p in progs {
                if p["name"] == "decap" {
                    if let Some(id) = p["id"].as_u64() {
                        out.push((name.to_string(), id as u32));
                    }
                }
            }
        }
        out
    }

    /// The UDP ports the kernel's fou takes as GUE (`ip fou show`: `port 6080 gue`).
    fn fou_gue_ports(&self) -> Vec<u16> {
        self.output(&["ip", "fou", "show"])
            .unwrap_or_default()
            .lines()
            .filter(|l| l.split_whitespace().any(|w| w == "gue"))
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                w.find(|x| *x == "port")?;
                w.next()?.parse().ok()
            })
            .collect()
    }

    /// The devices with an XDP program named `decap` (`wirespeed lb decap`) attached.
    fn decap_devices(&self) -> Vec<String> {
        let v = self.ip_json(&["link", "show"]);
        v.as_array()
            .into_iter()
            .flatten()
            .filter(|l| {
                let xdp = &l["xdp"];
                xdp["prog"]["name"] == "decap"
                    || xdp["attached"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|p| p["prog"]["name"] == "decap"))
            })
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect()
    }

    /// The addresses on `dev` (every device when `None`), with their device.
    pub(crate) fn addrs(&self, dev: Option<&str>) -> Vec<(String, IpAddr)> {
        let v = match dev {
            Some(d) => self.ip_json(&["addr", "show", "dev", d]),
            None => self.ip_json(&["addr", "show"]),
        };
        let mut out = Vec::new();
        for l in v.as_array().into_iter().flatten() {
            let name = l["ifname"].as_str().unwrap_or("").to_string();
            for a in l["addr_info"].as_array().into_iter().flatten() {
                if let Some(ip) = a["local"].as_str().and_then(|s| s.parse().ok()) {
                    out.push((name.clone(), ip));
                }
            }
        }
        out
    }
}

/// What the load balancer's daemon needs from the host: the next hop of every real and its
/// neighbour, XDP transmit on its interfaces, full-NAT local addresses, and room for the
/// encapsulation on the way to tunnel reals.
pub fn check_lb(view: &ListView, host: &Host) -> Vec<Problem> {
    let mut out = Vec::new();
    for w in &view.warnings {
        let (problem, fix) = w
            .rsplit_once(": wirespeed")
            .map(|(p, f)| (p.to_string(), format!("wirespeed{f}")))
            .unwrap_or((w.clone(), String::new()));
        out.push(Problem { problem, fix });
    }
    let links = host.links();
    let mtu_of = |dev: &str| links.iter().find(|l| l.0 == dev).map(|l| l.2);
    let ingress_mtu = view.ifaces.iter().filter_map(|i| mtu_of(i)).max();
    let mut seen = Vec::new();
    let mut real_devs: Vec<String> = Vec::new();
    for s in &view.services {
        for r in &s.reals {
            let rip = r.addr.ip();
            if seen.contains(&(rip, r.mode)) {
                continue;
            }
            seen.push((rip, r.mode));
            let route = host.ip_json(&["route", "get", &rip.to_string()]);
            let Some(route) = route.as_array().and_then(|a| a.first()) else {
                out.push(Problem {
                    problem: format!("no route to real {rip}"),
                    fix: host.fix(&format!("ip route add {rip} via GATEWAY dev IF")),
                });
                continue;
            };
            let dev = route["dev"].as_str().unwrap_or("?").to_string();
            if !real_devs.contains(&dev) {
                real_devs.push(dev.clone());
            }
            let gateway: Option<IpAddr> = route["gateway"].as_str().and_then(|g| g.parse().ok());
            if r.mode == Mode::Dr {
                if let Some(gw) = gateway {
                    out.push(Problem {
                        problem: format!(
                            "DR real {rip} is behind gateway {gw} on {dev}, not on the load balancer's L2"
                        ),
                        fix: format!(
                            "put {rip} on {dev}'s subnet, or forward to it by tunnel: wirespeed lb -e -t {} -r {} -i",
                            s.key.vip, r.addr
                        ),
                    });
                }
            }
            let hop = gateway.unwrap_or(rip);
            let neigh = host.ip_json(&["neigh", "show", "to", &hop.to_string(), "dev", &dev]);
            let resolved = neigh.as_array().into_iter().flatten().any(|n| {
                n["lladdr"].is_string()
                    && !n["state"]
                        .as_array()
                        .is_some_and(|st| st.iter().any(|x| x == "FAILED" || x == "INCOMPLETE"))
            });
            if !resolved {
                out.push(Problem {
                    problem: format!("no neighbour for {hop} on {dev}"),
                    fix: host.fix(&format!("ping -c1 {hop}")),
                });
            }
            if r.mode == Mode::Tunnel {
                let overhead = u64::from(r.tunnel.unwrap_or_default().overhead(rip.is_ipv4()));
                if let (Some(inner), Some(egress)) = (ingress_mtu, mtu_of(&dev)) {
                    if egress < inner + overhead {
                        out.push(Problem {
                            problem: format!(
                                "tunnel to {rip} via {dev} (MTU {egress}) adds {overhead} bytes: clients' full-size packets ({inner}) are answered with ICMP too-big"
                            ),
                            fix: host.fix(&format!("ip link set {dev} mtu {}", inner + overhead)),
                        });
                    }
                }
            }
        }
    }
    out.extend(check_xdp_xmit(&view.ifaces, host, &links));
    out.extend(check_veth_rx_queues(&real_devs, host, &links));
    // Reals behind one next hop share its neighbour problem: say it once.
    let mut unique: Vec<Problem> = Vec::new();
    for p in out {
        if !unique.contains(&p) {
            unique.push(p);
        }
    }
    unique
}

/// A veth whose peer runs no NAPI cannot transmit XDP frames (XDP_TX, redirect): the fix is
/// GRO on the peer, in the peer's namespace. Read from the kernel's netdev XDP features.
fn check_xdp_xmit(
    ifaces: &[String],
    host: &Host,
    links: &[(String, bool, u64, String)],
) -> Vec<Problem> {
    let Some(features) = xdp_features() else {
        return Vec::new();
    };
    let detail = host.ip_json(&["-d", "link", "show"]);
    let mut out = Vec::new();
    for name in ifaces {
        let Some(l) = detail
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["ifname"] == name.as_str())
        else {
            out.push(Problem {
                problem: format!("the daemon's interface {name} is gone"),
                fix: "restart the daemon: wirespeed lb run --iface IF".to_string(),
            });
            continue;
        };
        let ifindex = l["ifindex"].as_u64().unwrap_or(0) as u32;
        let xmit = features
            .iter()
            .find(|(i, _)| *i == ifindex)
            .and_then(|(_, f)| *f)
            .is_some_and(|f| f & wirespeed_fp::features::NETDEV_XDP_ACT_NDO_XMIT != 0);
        let is_veth = links.iter().any(|x| &x.0 == name && x.3 == "veth");
        if xmit || !is_veth {
            continue;
        }
        out.push(Problem {
            problem: format!("{name} takes no XDP frames: its veth peer runs no NAPI"),
            fix: gro_fix(l, host),
        });
    }
    out
}

/// What `-a` warns about on the host where it runs (the daemon's): the way to real `rip`
/// is a veth whose peer has more than one RX queue ([`check_veth_rx_queues`]).
pub fn check_path_to_real(rip: IpAddr) -> Vec<Problem> {
    let host = Host { netns: None };
    let route = host.ip_json(&["route", "get", &rip.to_string()]);
    let Some(dev) = route
        .as_array()
        .and_then(|a| a.first())
        .and_then(|r| r["dev"].as_str())
    else {
        return Vec::new();
    };
    check_veth_rx_queues(&[dev.to_string()], &host, &host.links())
}

/// A veth queues each XDP frame on its peer's RX queue numbered by the sending CPU, where a
/// NIC's RSS keeps a flow on one queue. The data path may handle one connection's segments on
/// two CPUs (a veth's flow runs on its sender's CPU), so with more than one RX queue on the
/// real's side the real's kernel can process its handshake ACK and first data at once on two
/// CPUs; Linux 6.18 then sometimes answers the ACK with a reset (the first data completed
/// the handshake, and the ACK's lookup found neither the request nor the new socket). Seen
/// in the lb lab, about once in 200,000 connections: docs/LB.md.
fn check_veth_rx_queues(
    devs: &[String],
    host: &Host,
    links: &[(String, bool, u64, String)],
) -> Vec<Problem> {
    let mut out = Vec::new();
    for dev in devs {
        if !links.iter().any(|l| &l.0 == dev && l.3 == "veth") {
            continue;
        }
        let detail = host.ip_json(&["-d", "link", "show", "dev", dev]);
        let Some(link) = detail.as_array().and_then(|a| a.first()) else {
            continue;
        };
        let (ns, peer) = veth_peer(link, host);
        if peer == "PEER" {
            continue;
        }
        let peer_host = Host { netns: ns.clone() };
        let Some(n) = peer_host
            .output(&["ethtool", "-l", &peer])
            .and_then(|t| current_rx_channels(&t))
        else {
            continue;
        };
        if n > 1 {
            // A veth with an XDP program needs an RX queue per peer TX queue: this side's
            // TX goes to one first (the real may run `lb decap`).
            let peer_fix = format!("ethtool -L {peer} rx 1");
            out.push(Problem {
                problem: format!(
                    "veth {dev} to reals has a peer {peer} with {n} RX queues, so one connection's segments can reach the real on two CPUs at once (its kernel may reset the connection)"
                ),
                fix: format!(
                    "{}; {}",
                    host.fix(&format!("ethtool -L {dev} tx 1")),
                    match ns {
                        Some(ns) => format!("ip netns exec {ns} {peer_fix}"),
                        None => peer_fix,
                    }
                ),
            });
        }
    }
    out
}

/// The RX channels in use, from `ethtool -l`: the "RX:" line under "Current hardware
/// settings".
pub fn current_rx_channels(text: &str) -> Option<u64> {
    let current = text.split("Current hardware settings:").nth(1)?;
    current
        .lines()
        .find_map(|l| l.trim().strip_prefix("RX:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The command that turns GRO on at a veth's peer (which gives the peer NAPI, so the veth
/// takes XDP frames), with the peer's name and namespace where they can be found.
fn gro_fix(link: &Value, host: &Host) -> String {
    match veth_peer(link, host) {
        (Some(ns), peer) => format!("ip netns exec {ns} ethtool -K {peer} gro on"),
        (None, peer) => format!("ethtool -K {peer} gro on"),
    }
}

/// [`gro_fix`] for veth `ifname` of this thread's namespace: what `lb run` prints when it
/// refuses the interface.
pub fn veth_gro_fix(ifname: &str) -> String {
    let host = Host { netns: None };
    let detail = host.ip_json(&["-d", "link", "show", "dev", ifname]);
    let link = detail
        .as_array()
        .and_then(|a| a.first())
        .cloned()
        .unwrap_or(Value::Null);
    gro_fix(&link, &host)
}

/// The namespace (by name, when it has one) and name of a veth's peer.
fn veth_peer(link: &Value, host: &Host) -> (Option<String>, String) {
    let peer_index = link["link_index"].as_u64();
    let Some(nsid) = link["link_netnsid"].as_u64() else {
        // Same namespace.
        let name = peer_index
            .and_then(|i| {
                host.ip_json(&["link", "show"])
                    .as_array()?
                    .iter()
                    .find(|l| l["ifindex"].as_u64() == Some(i))
                    .and_then(|l| l["ifname"].as_str().map(str::to_string))
            })
            .unwrap_or_else(|| "PEER".into());
        return (host.netns.clone(), name);
    };
    let ns = host
        .ip_json(&["netns", "list-id"])
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["nsid"].as_u64() == Some(nsid))
        .and_then(|n| n["name"].as_str().map(str::to_string));
    let Some(ns) = ns else {
        return (Some("NS".into()), "PEER".into());
    };
    let inner = Host {
        netns: Some(ns.clone()),
    };
    let name = peer_index
        .and_then(|i| {
            inner
                .ip_json(&["link", "show"])
                .as_array()?
                .iter()
                .find(|l| l["ifindex"].as_u64() == Some(i))
                .and_then(|l| l["ifname"].as_str().map(str::to_string))
        })
        .unwrap_or_else(|| "PEER".into());
    (Some(ns), name)
}

/// The kernel's XDP features by ifindex (Linux 6.3+); `None` when it cannot say.
fn xdp_features() -> Option<Vec<(u32, Option<u64>)>> {
    use wirespeed_fp::{genl, model::Event, netlink};
    let mut s = netlink::Socket::open(genl::NETLINK_GENERIC).ok()?;
    let family = genl::netdev_family(&mut s).ok()?;
    let events = genl::dump_xdp_features(&mut s, &family).ok()?;
    Some(
        events
            .into_iter()
            .filter_map(|e| match e {
                Event::XdpFeatures { ifindex, features } => Some((ifindex, features)),
                _ => None,
            })
            .collect(),
    )
}

/// How the load balancer reaches a real, for the real-side checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RealModes {
    pub dr: bool,
    pub tunnel: bool,
}

/// What a real server of `vips` needs: each VIP on `lo`; for DR, ARP that neither answers
/// nor announces the VIP; rp_filter not strict where the packets arrive (the kernel uses the
/// larger of `all` and the device); for tunnel, the decapsulation device up and an advertised
/// MSS that leaves room for the outer header.
pub fn check_real(vips: &[IpAddr], modes: RealModes, host: &Host) -> Vec<Problem> {
    check_real_with(vips, modes, 0, host)
}

/// [`check_real`] for a GUE tunnel real on `ports` (the load balancer's `--tun-port`s): the
/// MSS must leave room for the UDP header too, and something must take GUE on each port
/// ([`check_gue`]).
pub fn check_real_gue(vips: &[IpAddr], ports: &[u16], host: &Host) -> Vec<Problem> {
    let modes = RealModes {
        dr: false,
        tunnel: true,
    };
    let mut out = check_real_with(vips, modes, 8, host);
    out.extend(check_gue(vips, ports, host));
    out
}

/// `extra`: bytes the encapsulation adds beyond the outer IP header (GUE's UDP header).
fn check_real_with(vips: &[IpAddr], modes: RealModes, extra: u64, host: &Host) -> Vec<Problem> {
    let mut out = Vec::new();
    let on_lo: Vec<IpAddr> = host.addrs(Some("lo")).into_iter().map(|a| a.1).collect();
    for vip in vips {
        if !on_lo.contains(vip) {
            let len = if vip.is_ipv4() { 32 } else { 128 };
            out.push(Problem {
                problem: format!("VIP {vip} is not on lo, so the real drops its packets"),
                fix: host.fix(&format!("ip addr add {vip}/{len} dev lo")),
            });
        }
    }
    let links = host.links();
    let addrs = host.addrs(None);
    // The devices packets arrive on: up, not lo, with an address of the family.
    let ingress = |v4: bool| -> Vec<String> {
        links
            .iter()
            .filter(|l| l.1 && l.0 != "lo" && l.3 != "ipip" && l.3 != "ip6tnl" && l.3 != "sit")
            .filter(|l| {
                addrs
                    .iter()
                    .any(|(d, a)| *d == l.0 && a.is_ipv4() == v4 && !is_link_local(a))
            })
            .map(|l| l.0.clone())
            .collect()
    };
    let any_v4 = vips.iter().any(|v| v.is_ipv4());
    if modes.dr && any_v4 {
        for (key, want) in [("arp_ignore", 1), ("arp_announce", 2)] {
            let all = host
                .sysctl(&format!("net.ipv4.conf.all.{key}"))
                .unwrap_or(0);
            let short: Vec<String> = ingress(true)
                .into_iter()
                .filter(|d| {
                    all.max(
                        host.sysctl(&format!("net.ipv4.conf.{d}.{key}"))
                            .unwrap_or(0),
                    ) < want
                })
                .collect();
            if !short.is_empty() {
                out.push(Problem {
                    problem: format!(
                        "{key} is below {want} on {} (DR: the real must not {} the VIP)",
                        short.join(", "),
                        if key == "arp_ignore" {
                            "answer ARP for"
                        } else {
                            "announce"
                        }
                    ),
                    fix: host.fix(&format!("sysctl -w net.ipv4.conf.all.{key}={want}")),
                });
            }
        }
    }
    if any_v4 && (modes.dr || modes.tunnel) {
        let mut devs = vec!["lo".to_string()];
        if modes.tunnel && links.iter().any(|l| l.0 == "tunl0") {
            devs.push("tunl0".into());
        }
        devs.extend(ingress(true));
        let all = host.sysctl("net.ipv4.conf.all.rp_filter").unwrap_or(0);
        for d in devs {
            let dev = host
                .sysctl(&format!("net.ipv4.conf.{d}.rp_filter"))
                .unwrap_or(0);
            if all.max(dev) == 1 {
                let mut fixes = Vec::new();
                if all == 1 {
                    fixes.push("sysctl -w net.ipv4.conf.all.rp_filter=0".to_string());
                }
                if dev == 1 {
                    fixes.push(format!("sysctl -w net.ipv4.conf.{d}.rp_filter=0"));
                }
                out.push(Problem {
                    problem: format!(
                        "rp_filter is strict on {d} (all={all}, {d}={dev}; the kernel uses the larger)"
                    ),
                    fix: host.fix(&fixes.join("; ")),
                });
            }
        }
    }
    if modes.tunnel {
        out.extend(check_tunnel_mss(vips, host, &links, &addrs, extra));
        let mut ingress_all = ingress(true);
        for d in ingress(false) {
            if !ingress_all.contains(&d) {
                ingress_all.push(d);
            }
        }
        out.extend(check_decap(vips, host, &links, &addrs, &ingress_all));
    }
    out
}

/// The GUE ports a loaded `decap` program serves, read from its `gue_ports` map
/// (bpf/decap.bpf.c), by program id as `ip -j link show` reports it. Needs the rights to read
/// BPF objects (root); unreadable counts as serving none.
fn decap_gue_ports(prog_id: u32) -> Vec<u16> {
    use libbpf_rs::MapCore;
    let opts = libbpf_rs::query::ProgInfoQueryOptions::default().include_map_ids(true);
    let Some(prog) =
        libbpf_rs::query::ProgInfoIter::with_query_opts(opts).find(|p| p.id == prog_id)
    else {
        return Vec::new();
    };
    for id in prog.map_ids {
        let Ok(map) = libbpf_rs::MapHandle::from_map_id(id) else {
            continue;
        };
        if map.name() == std::ffi::OsStr::new("gue_ports") {
            return map
                .keys()
                .filter_map(|k| k.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]])))
                .collect();
        }
    }
    Vec::new()
}

/// A GUE real (`lb doctor --real VIP --mode tunnel --gue-port PORT`): something must take GUE
/// on each of
/// `ports` (the load balancer's `--tun-port`): a `wirespeed lb decap` program serving the port
/// on every ingress device (its `gue_ports` map, read by program id), or the kernel's fou
/// (`ip fou show`). The fix is fou where the kernel has it, else the decapsulator.
pub fn check_gue(vips: &[IpAddr], ports: &[u16], host: &Host) -> Vec<Problem> {
    let links = host.links();
    let addrs = host.addrs(None);
    let ingress: Vec<String> = links
        .iter()
        .filter(|l| l.1 && l.0 != "lo" && l.3 != "ipip" && l.3 != "ip6tnl" && l.3 != "sit")
        .filter(|l| addrs.iter().any(|(d, a)| *d == l.0 && !is_link_local(a)))
        .map(|l| l.0.clone())
        .collect();
    let decaps = host.decap_programs();
    let fou = host.fou_gue_ports();
    let served_by_decap = |port: u16| {
        !ingress.is_empty()
            && ingress.iter().all(|dev| {
                decaps
                    .iter()
                    .any(|(d, id)| d == dev && decap_gue_ports(*id).contains(&port))
            })
    };
    let missing: Vec<u16> = ports
        .iter()
        .copied()
        .filter(|p| !fou.contains(p) && !served_by_decap(*p))
        .collect();
    if missing.is_empty() {
        return Vec::new();
    }
    let list = |sep: &str| {
        missing
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(sep)
    };
    let running = if decaps.is_empty() {
        String::new()
    } else {
        " (the decap program running takes other ports: stop it first)".to_string()
    };
    let fix = if kernel_has_module("fou") {
        let adds: Vec<String> = missing
            .iter()
            .map(|p| format!("ip fou add port {p} gue"))
            .collect();
        format!("modprobe fou; {}", adds.join("; "))
    } else {
        let ifaces = if ingress.is_empty() {
            "--iface IF".to_string()
        } else {
            ingress
                .iter()
                .map(|d| format!("--iface {d}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let vips: Vec<String> = vips.iter().map(|v| v.to_string()).collect();
        format!(
            "wirespeed lb decap {ifaces} --vip {} --gue-port {}",
            vips.join(","),
            list(",")
        )
    };
    vec![Problem {
        problem: format!(
            "nothing takes GUE on UDP port {} (no fou port, no decap program serving it on every ingress device{running}), so GUE packets to the VIP are not decapsulated",
            list(", ")
        ),
        fix: host.fix(&fix),
    }]
}

/// The decapsulation of a tunnel real: a `wirespeed lb decap` program (XDP, named `decap`) on
/// every ingress device decapsulates all four encapsulations; otherwise the kernel's device
/// for each: `tunl0` for IPv4 VIPs, for IPv6 VIPs `ip6tnl0` (6in6) or, on a real without a
/// global IPv6 address, `sit0` (6in4). A device the kernel can make gets `modprobe` and `ip
/// link set up`; those it cannot (no module: many container hosts) get `wirespeed lb decap`.
fn check_decap(
    vips: &[IpAddr],
    host: &Host,
    links: &[(String, bool, u64, String)],
    addrs: &[(String, IpAddr)],
    ingress: &[String],
) -> Vec<Problem> {
    let decap_on = host.decap_devices();
    if !ingress.is_empty() && ingress.iter().all(|d| decap_on.contains(d)) {
        return Vec::new();
    }
    let has_v6 = addrs
        .iter()
        .any(|(d, a)| d != "lo" && a.is_ipv6() && !is_link_local(a));
    let mut needed = Vec::new();
    if vips.iter().any(|v| v.is_ipv4()) {
        needed.push(("tunl0", "ipip", "IPIP packets to the VIP are"));
    }
    if vips.iter().any(|v| v.is_ipv6()) {
        // 6in6 arrives on ip6tnl0; 6in4 (a v4 real of a v6 VIP) on sit0.
        needed.push(if has_v6 {
            (
                "ip6tnl0",
                "ip6_tunnel",
                "tunnelled packets to the IPv6 VIP are",
            )
        } else {
            ("sit0", "sit", "tunnelled packets to the IPv6 VIP are")
        });
    }
    let up = |name: &str| links.iter().any(|l| l.0 == name && l.1);
    let mut out = Vec::new();
    let mut lacking = Vec::new();
    for (dev, module, what) in needed {
        if up(dev) {
            continue;
        }
        if kernel_has_module(module) {
            out.push(Problem {
                problem: format!("{dev} is not up, so {what} not decapsulated"),
                fix: host.fix(&format!("modprobe {module}; ip link set {dev} up")),
            });
        } else {
            lacking.push((dev, module));
        }
    }
    if !lacking.is_empty() {
        let ifaces: Vec<String> = ingress
            .iter()
            .filter(|d| !decap_on.contains(d))
            .map(|d| format!("--iface {d}"))
            .collect();
        let ifaces = if ifaces.is_empty() {
            "--iface IF".to_string()
        } else {
            ifaces.join(" ")
        };
        let vips: Vec<String> = vips.iter().map(|v| v.to_string()).collect();
        let devs: Vec<&str> = lacking.iter().map(|l| l.0).collect();
        let modules: Vec<&str> = lacking.iter().map(|l| l.1).collect();
        out.push(Problem {
            problem: format!(
                "no {} (this kernel has no {} module) and no decap program on the ingress, so tunnelled packets to the VIP are not decapsulated",
                devs.join(", "),
                modules.join(", ")
            ),
            fix: host.fix(&format!(
                "wirespeed lb decap {ifaces} --vip {}",
                vips.join(",")
            )),
        });
    }
    out
}

/// Whether this kernel can make a tunnel device: its module is loaded or built in (it shows
/// under /sys/module), or installed for the running kernel.
pub fn kernel_has_module(module: &str) -> bool {
    if std::path::Path::new(&format!("/sys/module/{module}")).exists() {
        return true;
    }
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let dir = format!("/lib/modules/{}", release.trim());
    let ko = format!("/{module}.ko");
    ["modules.dep", "modules.builtin"].iter().any(|f| {
        std::fs::read_to_string(format!("{dir}/{f}")).is_ok_and(|text| {
            text.lines()
                .any(|l| l.split(':').next().is_some_and(|p| p.contains(&ko)))
        })
    })
}

/// A tunnelled packet is the client's packet plus the outer header, so the client's segments
/// must leave room for it. The real advertises the MSS of its route back to the client (its
/// device MTU less the IP and TCP headers, unless the route sets `advmss`); when that is more
/// than what fits in the tunnel, the client's full-size segments get ICMP too-big from the
/// load balancer, and stall where ICMP is filtered. Checked on the default route, per family.
fn check_tunnel_mss(
    vips: &[IpAddr],
    host: &Host,
    links: &[(String, bool, u64, String)],
    addrs: &[(String, IpAddr)],
    extra: u64,
) -> Vec<Problem> {
    let mut out = Vec::new();
    for v4 in [true, false] {
        if !vips.iter().any(|v| v.is_ipv4() == v4) {
            continue;
        }
        // The outer header: IPv4 (IPIP, 20) for a v4 VIP; for a v6 VIP IPv6 (40), or IPv4
        // (6in4, 20) on a real without a global IPv6 address.
        let has_v6 = addrs
            .iter()
            .any(|(d, a)| d != "lo" && a.is_ipv6() && !is_link_local(a));
        let outer = if v4 || !has_v6 { 20 } else { 40 } + extra;
        let headers = if v4 { 40 } else { 60 };
        let fam = if v4 { "-4" } else { "-6" };
        let routes = host.ip_json(&[fam, "route", "show", "default"]);
        let Some(route) = routes.as_array().and_then(|a| a.first()) else {
            continue;
        };
        let (Some(dev), Some(gw)) = (route["dev"].as_str(), route["gateway"].as_str()) else {
            continue;
        };
        let Some(mtu) = links.iter().find(|l| l.0 == dev).map(|l| l.2) else {
            continue;
        };
        let advmss = route["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|m| m["advmss"].as_u64());
        let advertised = advmss.unwrap_or(mtu.saturating_sub(headers));
        let fits = mtu.saturating_sub(outer + headers);
        if advertised > fits {
            let six = if v4 { "" } else { " -6" };
            out.push(Problem {
                problem: format!(
                    "replies via {dev} advertise MSS {advertised}, but a tunnelled segment fits {fits} ({outer}-byte outer header on MTU {mtu})"
                ),
                fix: host.fix(&format!(
                    "ip{six} route change default via {gw} dev {dev} advmss {fits}"
                )),
            });
        }
    }
    out
}

fn is_link_local(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.is_link_local(),
        IpAddr::V6(v) => (v.segments()[0] & 0xffc0) == 0xfe80,
    }
}

#[cfg(test)]
mod tests {
    use super::current_rx_channels;

    #[test]
    fn rx_channels_are_read_from_the_current_settings_not_the_maximum() {
        let text = "Channel parameters for eth0:\nPre-set maximums:\nRX:\t\t2\nTX:\t\t2\nOther:\t\tn/a\nCombined:\tn/a\nCurrent hardware settings:\nRX:\t\t1\nTX:\t\t2\nOther:\t\tn/a\nCombined:\tn/a\n";
        assert_eq!(current_rx_channels(text), Some(1));
        let nic = "Pre-set maximums:\nRX:\t\tn/a\nCombined:\t8\nCurrent hardware settings:\nRX:\t\tn/a\nCombined:\t4\n";
        assert_eq!(current_rx_channels(nic), None);
        assert_eq!(current_rx_channels(""), None);
    }
}
