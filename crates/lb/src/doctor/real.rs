//! `wirespeed lb doctor --real`: what a real server needs for the way the load balancer reaches
//! it. Every mode: each VIP on `lo` and no strict rp_filter where the packets arrive. DR: ARP
//! that neither answers nor announces the VIP. Tunnel: a device or program that decapsulates,
//! and an advertised MSS that leaves room for the outer header; GUE: something that takes GUE
//! on each port.

use std::net::IpAddr;

use super::{Host, Problem};

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
