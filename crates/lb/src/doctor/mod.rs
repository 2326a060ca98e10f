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

mod real;
pub use real::{check_gue, check_real, check_real_gue, kernel_has_module, RealModes};

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
    pub(crate) fn sysctl(&self, key: &str) -> Option<i64> {
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
    out.extend(check_links_running(
        &view.ifaces,
        &host.ip_json(&["link", "show"]),
    ));
    out.extend(check_xdp_xmit(&view.ifaces, host, &links));
    let families = view.services.iter().map(|s| s.key.vip.is_ipv4());
    let (v4, v6) = families.fold((false, false), |(a, b), v4| (a || v4, b || !v4));
    let forwarding = check_forwarding(&view.ifaces, v4, v6, |k| host.sysctl(k));
    out.extend(forwarding.into_iter().map(|p| Problem {
        fix: host.fix(&p.fix),
        ..p
    }));
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

/// An interface of the data path that is down, or up without its carrier (`ip link show` JSON:
/// no `LOWER_UP`), forwards nothing; the daemon announces nothing while one is (docs/LB.md,
/// "Several nodes: announcing over BGP").
pub fn check_links_running(ifaces: &[String], links: &serde_json::Value) -> Vec<Problem> {
    let mut out = Vec::new();
    for name in ifaces {
        let Some(l) = links
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["ifname"] == name.as_str())
        else {
            continue;
        };
        let flag = |f: &str| {
            l["flags"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == f))
        };
        let problem = if !flag("UP") {
            format!("{name} is down, so this node announces nothing")
        } else if !flag("LOWER_UP") {
            format!("{name} has no carrier (its cable or veth peer is down), so this node announces nothing")
        } else {
            continue;
        };
        let fix = if flag("UP") {
            format!("bring up what {name} is plugged into")
        } else {
            format!("ip link set {name} up")
        };
        out.push(Problem { problem, fix });
    }
    out
}

/// The kernel answers the data path's FIB lookup "forwarding disabled" on an interface that
/// does not forward its family (bpf_ipv4_fib_lookup, bpf_ipv6_fib_lookup), so every packet to
/// a VIP of that family goes to the kernel, which drops it: the lookup is what forwards.
pub fn check_forwarding(
    ifaces: &[String],
    v4: bool,
    v6: bool,
    sysctl: impl Fn(&str) -> Option<i64>,
) -> Vec<Problem> {
    let mut out = Vec::new();
    for name in ifaces {
        for (used, family) in [(v4, "ipv4"), (v6, "ipv6")] {
            let key = format!("net.{family}.conf.{name}.forwarding");
            if used && sysctl(&key) == Some(0) {
                out.push(Problem {
                    problem: format!(
                        "{name} does not forward {family}, so the data path cannot look up a next hop and sends the VIPs' packets to the kernel"
                    ),
                    fix: format!("sysctl -w {key}=1"),
                });
            }
        }
    }
    out
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
            .is_some_and(|f| f & wirespeed_netlink::netdev::XDP_ACT_NDO_XMIT != 0);
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
    use wirespeed_netlink::{netdev, Socket, NETLINK_GENERIC};
    let mut s = Socket::open(NETLINK_GENERIC).ok()?;
    let family = netdev::family(&mut s).ok()?;
    let devs = netdev::dump_devs(&mut s, &family).ok()?;
    Some(
        devs.into_iter()
            .map(|d| (d.ifindex, d.features.map(|f| f.act)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::{check_forwarding, check_links_running, current_rx_channels};

    #[test]
    fn an_interface_that_does_not_forward_a_family_a_vip_uses_is_named_with_its_sysctl() {
        let off = |k: &str| Some(i64::from(!k.contains("ipv4")));
        let ifaces = ["eth0".to_string()];
        let p = check_forwarding(&ifaces, true, true, off);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].fix, "sysctl -w net.ipv4.conf.eth0.forwarding=1");
        assert!(check_forwarding(&ifaces, false, true, off).is_empty());
        assert!(check_forwarding(&ifaces, true, true, |_| Some(1)).is_empty());
        // An unreadable value is not a problem to report.
        assert!(check_forwarding(&ifaces, true, true, |_| None).is_empty());
    }

    #[test]
    fn an_interface_down_or_without_carrier_is_named() {
        // As `ip -j link show` writes them: eth1's veth peer is down, eth2 was set down.
        let links: serde_json::Value = serde_json::from_str(
            r#"[{"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"]},
                {"ifname":"eth1","flags":["NO-CARRIER","BROADCAST","MULTICAST","UP"]},
                {"ifname":"eth2","flags":["BROADCAST","MULTICAST"]}]"#,
        )
        .unwrap();
        let names = |i: &[&str]| i.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_links_running(&names(&["eth0"]), &links).is_empty());
        let p = check_links_running(&names(&["eth0", "eth1", "eth2"]), &links);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].problem.starts_with("eth1 has no carrier"), "{p:?}");
        assert_eq!(p[1].fix, "ip link set eth2 up");
    }

    #[test]
    fn rx_channels_are_read_from_the_current_settings_not_the_maximum() {
        let text = "Channel parameters for eth0:\nPre-set maximums:\nRX:\t\t2\nTX:\t\t2\nOther:\t\tn/a\nCombined:\tn/a\nCurrent hardware settings:\nRX:\t\t1\nTX:\t\t2\nOther:\t\tn/a\nCombined:\tn/a\n";
        assert_eq!(current_rx_channels(text), Some(1));
        let nic = "Pre-set maximums:\nRX:\t\tn/a\nCombined:\t8\nCurrent hardware settings:\nRX:\t\tn/a\nCombined:\t4\n";
        assert_eq!(current_rx_channels(nic), None);
        assert_eq!(current_rx_channels(""), None);
    }
}
