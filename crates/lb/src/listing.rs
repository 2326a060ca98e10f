//! What `-L` shows ([`ListView`], which the daemon sends and `--json` prints) and its text in
//! ipvsadm's exact layout.

use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::ipvsadm::{self, ListOptions};
use crate::model::{Counters, Health, HealthCheck, Mode, Scheduler, ServiceKey, Tunnel};

/// Per-second rates over the daemon's last two counter samples (`--rate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rates {
    pub cps: u64,
    pub in_pps: u64,
    pub out_pps: u64,
    pub in_bps: u64,
    pub out_bps: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealView {
    pub addr: SocketAddr,
    pub mode: Mode,
    /// Tunnel mode's encapsulation (`-L` prints `Tunnel` for both, as ipvsadm does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<Tunnel>,
    /// As configured; a real that is down gets no new connections whatever its weight.
    pub weight: u32,
    pub health: Health,
    /// ipvsadm's ActiveConn (open TCP connections) and InActConn (closed TCP ones and UDP
    /// flows), counted when listed from the data path's connection entries (docs/LB.md).
    pub active_conns: u64,
    pub inact_conns: u64,
    pub stats: Counters,
    pub rate: Rates,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceView {
    pub key: ServiceKey,
    pub scheduler: Scheduler,
    /// Entries in the service's lookup table: the ring size for `mh`, the sequence's length
    /// for `rr` and `wrr`; 0 while no real takes new connections.
    #[serde(default)]
    pub ring_size: u32,
    /// The lookup table as its reals' addresses, hashed ([`crate::plan::table_digest`]): equal
    /// on two nodes whose tables agree. Empty in a listing from a version without it.
    #[serde(default)]
    pub table_digest: String,
    pub laddrs: Vec<IpAddr>,
    pub toa: bool,
    pub check: Option<HealthCheck>,
    pub stats: Counters,
    pub rate: Rates,
    pub reals: Vec<RealView>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListView {
    pub ring_size: u32,
    pub services: Vec<ServiceView>,
    /// Configured but not carrying traffic, with the fix (a full-NAT service without local
    /// addresses).
    pub warnings: Vec<String>,
    /// The interfaces the daemon's data path runs on (what `doctor` checks).
    #[serde(default)]
    pub ifaces: Vec<String>,
    /// An `lb announce` has watched since the daemon started: the node announces its VIPs
    /// (what `doctor` checks the modes and blackhole routes of a cluster for).
    #[serde(default)]
    pub announcing: bool,
    /// The BGP sessions `lb announce` last reported, if it has (what `doctor` names when one
    /// is not up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<crate::session::Reported>,
}

impl ListView {
    /// Only the service `-t|-u VIP:PORT` named, if one was.
    pub fn only(mut self, service: Option<&ServiceKey>) -> ListView {
        if let Some(k) = service {
            self.services.retain(|s| s.key == *k);
            let name = k.to_string();
            self.warnings.retain(|w| w.starts_with(&name));
        }
        self
    }
}

/// ipvsadm's counter column: 9 wide, scaled to K/M/G/T past 8 digits unless `exact`.
fn largenum(out: &mut String, n: u64, exact: bool) {
    if exact {
        let digits = n.to_string();
        let width = if digits.len() <= 8 {
            9
        } else {
            digits.len() + 1
        };
        let _ = write!(out, "{digits:>width$}");
        return;
    }
    let _ = match n {
        0..100_000_000 => write!(out, "{n:>9}"),
        100_000_000..1_000_000_000 => write!(out, "{:>8}K", n / 1000),
        1_000_000_000..100_000_000_000 => write!(out, "{:>8}M", n / 1_000_000),
        100_000_000_000..100_000_000_000_000 => write!(out, "{:>8}G", n / 1_000_000_000),
        _ => write!(out, "{:>8}T", n / 1_000_000_000_000),
    };
}

fn service_name(key: &ServiceKey) -> String {
    format!("{}  {}", key.proto.ipvs_name(), key.vip)
}

pub(crate) fn health_word(h: Health) -> &'static str {
    match h {
        Health::Unchecked => "unchecked",
        Health::Up => "up",
        Health::Down => "down",
    }
}

/// `-L -n` (and `--stats`, `--rate`) as ipvsadm prints it. A service with a health check gets
/// one more word at the end of each real's line: `up`, `down` or `unchecked`.
pub fn format_list(view: &ListView, opts: &ListOptions) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "IP Virtual Server version 1.2.1 (size={})",
        view.ring_size
    );
    let five = |out: &mut String, c: [u64; 5]| {
        for n in c {
            largenum(out, n, opts.exact);
        }
    };
    if opts.stats || opts.rate {
        let cols = if opts.stats {
            ["Conns", "InPkts", "OutPkts", "InBytes", "OutBytes"]
        } else {
            ["CPS", "InPPS", "OutPPS", "InBPS", "OutBPS"]
        };
        let _ = writeln!(
            out,
            "{:<33} {:>8} {:>8} {:>8} {:>8} {:>8}\n  -> RemoteAddress:Port",
            "Prot LocalAddress:Port", cols[0], cols[1], cols[2], cols[3], cols[4]
        );
    } else {
        out.push_str("Prot LocalAddress:Port Scheduler Flags\n");
        out.push_str("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n");
    }
    for s in &view.services {
        let name = service_name(&s.key);
        if opts.stats {
            let _ = write!(out, "{name:<33}");
            let c = s.stats;
            five(
                &mut out,
                [c.conns, c.in_pkts, c.out_pkts, c.in_bytes, c.out_bytes],
            );
        } else if opts.rate {
            let _ = write!(out, "{name:<33}");
            let r = s.rate;
            five(&mut out, [r.cps, r.in_pps, r.out_pps, r.in_bps, r.out_bps]);
        } else {
            let _ = write!(out, "{name} {}", s.scheduler.name());
        }
        out.push('\n');
        for r in &s.reals {
            let dname = r.addr.to_string();
            if opts.stats {
                let _ = write!(out, "  -> {dname:<28}");
                let c = r.stats;
                five(
                    &mut out,
                    [c.conns, c.in_pkts, c.out_pkts, c.in_bytes, c.out_bytes],
                );
            } else if opts.rate {
                let q = r.rate;
                let _ = write!(
                    out,
                    "  -> {dname:<28} {:>8} {:>8} {:>8}",
                    q.cps, q.in_pps, q.out_pps
                );
                largenum(&mut out, q.in_bps, opts.exact);
                largenum(&mut out, q.out_bps, opts.exact);
            } else {
                let _ = write!(
                    out,
                    "  -> {dname:<28} {:<7} {:<6} {:<10} {:<10}",
                    r.mode.ipvs_name(),
                    r.weight,
                    r.active_conns,
                    r.inact_conns
                );
                if s.check.is_some() {
                    let _ = write!(out, " {}", health_word(r.health));
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The configuration in the ipvsadm-save format (numeric), with our extensions.
pub fn format_save(view: &ListView) -> String {
    let mut out = String::new();
    for s in &view.services {
        let svc = format!("{} {}", s.key.proto.flag(), s.key.vip);
        out.push_str(&format!("-A {svc} -s {}", s.scheduler.name()));
        if let Some(c) = &s.check {
            out.push_str(&format!(
                " --check {} --check-interval {} --check-timeout {} --rise {} --fall {}",
                ipvsadm::format_check(&c.kind),
                ipvsadm::format_duration(c.interval),
                ipvsadm::format_duration(c.timeout),
                c.rise,
                c.fall
            ));
        }
        if !s.toa {
            out.push_str(" --no-toa");
        }
        out.push('\n');
        for z in &s.laddrs {
            out.push_str(&format!("--add-laddr -z {z} {svc}\n"));
        }
        for r in &s.reals {
            out.push_str(&format!(
                "-a {svc} -r {} {} -w {}{}\n",
                r.addr,
                r.mode.flag(),
                r.weight,
                r.tunnel.map(Tunnel::save_args).unwrap_or_default()
            ));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{CheckKind, Proto};
    use std::time::Duration;

    pub(crate) fn sample_view() -> ListView {
        let key = ServiceKey {
            proto: Proto::Tcp,
            vip: "198.18.0.10:6379".parse().unwrap(),
        };
        let real = |a: &str, mode, weight, health, conns| RealView {
            addr: a.parse().unwrap(),
            mode,
            tunnel: None,
            weight,
            health,
            active_conns: 0,
            inact_conns: 0,
            stats: Counters {
                conns,
                in_pkts: conns * 10,
                out_pkts: 0,
                in_bytes: conns * 1_000_000,
                out_bytes: 0,
            },
            rate: Rates {
                cps: conns / 100,
                in_pps: conns / 10,
                out_pps: 0,
                in_bps: conns * 10_000,
                out_bps: 0,
            },
        };
        ListView {
            ring_size: 65537,
            services: vec![ServiceView {
                key,
                scheduler: Scheduler::Mh,
                ring_size: 0,
                table_digest: String::new(),
                laddrs: vec![],
                toa: true,
                check: Some(HealthCheck {
                    kind: CheckKind::Redis,
                    interval: Duration::from_secs(2),
                    timeout: Duration::from_secs(1),
                    rise: 2,
                    fall: 3,
                }),
                stats: Counters {
                    conns: 3000,
                    in_pkts: 30000,
                    out_pkts: 0,
                    in_bytes: 3_000_000_000,
                    out_bytes: 0,
                },
                rate: Rates {
                    cps: 30,
                    in_pps: 300,
                    out_pps: 0,
                    in_bps: 30_000_000,
                    out_bps: 0,
                },
                reals: vec![
                    real("198.18.100.1:6379", Mode::Dr, 1, Health::Up, 1000),
                    real("198.18.100.2:6379", Mode::Dr, 2, Health::Down, 2000),
                ],
            }],
            warnings: vec![],
            ifaces: vec![],
            announcing: false,
            bgp: None,
        }
    }

    #[test]
    fn list_numeric_is_ipvsadms_layout() {
        let text = format_list(&sample_view(), &ListOptions::default());
        let want = "IP Virtual Server version 1.2.1 (size=65537)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  198.18.0.10:6379 mh
  -> 198.18.100.1:6379            Route   1      0          0          up
  -> 198.18.100.2:6379            Route   2      0          0          down
";
        assert_eq!(text, want);
    }

    #[test]
    fn list_stats_scales_like_ipvsadm_unless_exact() {
        let opts = ListOptions {
            stats: true,
            ..Default::default()
        };
        let want = "IP Virtual Server version 1.2.1 (size=65537)
Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  198.18.0.10:6379                 3000    30000        0    3000M        0
  -> 198.18.100.1:6379                1000    10000        0    1000M        0
  -> 198.18.100.2:6379                2000    20000        0    2000M        0
";
        assert_eq!(format_list(&sample_view(), &opts), want);
        let exact = ListOptions {
            stats: true,
            exact: true,
            ..Default::default()
        };
        let text = format_list(&sample_view(), &exact);
        assert!(
            text.contains("TCP  198.18.0.10:6379                 3000    30000        0 3000000000        0\n"),
            "{text}"
        );
    }

    #[test]
    fn list_rate_layout() {
        let opts = ListOptions {
            rate: true,
            ..Default::default()
        };
        let want = "IP Virtual Server version 1.2.1 (size=65537)
Prot LocalAddress:Port                 CPS    InPPS   OutPPS    InBPS   OutBPS
  -> RemoteAddress:Port
TCP  198.18.0.10:6379                   30      300        0 30000000        0
  -> 198.18.100.1:6379                  10      100        0 10000000        0
  -> 198.18.100.2:6379                  20      200        0 20000000        0
";
        assert_eq!(format_list(&sample_view(), &opts), want);
    }

    #[test]
    fn only_keeps_the_named_service() {
        let v = sample_view();
        let other = ServiceKey {
            proto: Proto::Udp,
            vip: "198.18.0.10:53".parse().unwrap(),
        };
        assert!(v.clone().only(Some(&other)).services.is_empty());
        let k = v.services[0].key;
        assert_eq!(v.clone().only(Some(&k)).services.len(), 1);
    }
}
