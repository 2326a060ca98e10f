//! What `lb run --metrics` exports: the numbers `wirespeed lb -L -n --stats --json` shows (the
//! daemon's [`ListView`]: per service and per real, summed over CPUs from the data path's
//! per-CPU maps at scrape time), each real's health, and the data path's reasons.
//! docs/METRICS.md lists the series.

use wirespeed_metrics::{Kind, Writer};

use crate::listing::{ListView, RealView, ServiceView};
use crate::model::{Counters, Health, Proto};

fn proto(p: Proto) -> &'static str {
    match p {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    }
}

/// The class of a reason, from its name's prefix (`enum lb_reason` in bpf/lb_consts.h):
/// forwarded, passed to the kernel, dropped, or an event counted on top of one of those.
fn class(reason: &str) -> &'static str {
    if reason.starts_with("fwd_") {
        "forward"
    } else if reason.starts_with("pass_") {
        "pass"
    } else if reason.starts_with("drop_") {
        "drop"
    } else {
        "event"
    }
}

struct Labels {
    protocol: &'static str,
    vip: String,
}

/// Renders the exposition from a view and the reasons (as `Stats::reasons` holds them); an
/// error reading either is said in a comment, with the families that could be read.
pub fn render(
    view: Result<&ListView, String>,
    reasons: Result<&[(String, u64)], String>,
) -> String {
    let mut w = Writer::new();
    let mut errors = String::new();
    match view {
        Ok(v) => services(&mut w, &v.services),
        Err(e) => errors.push_str(&format!("# could not read the services: {e}\n")),
    }
    match reasons {
        Ok(rs) => {
            w.family(
                "wirespeed_lb_packets_by_reason_total",
                Kind::Counter,
                "What the data path did, by reason: class=\"forward\" sent to a real (or a reply \
                 back), \"pass\" handed to the kernel, \"drop\" dropped, \"event\" counted on top \
                 of one of those (ICMP answered, TOA added, rate limited).",
            );
            for (r, n) in rs {
                w.sample(&[("reason", r), ("class", class(r))], *n);
            }
        }
        Err(e) => errors.push_str(&format!("# could not read the reasons: {e}\n")),
    }
    let mut text = w.finish();
    text.push_str(&errors);
    text
}

fn services(w: &mut Writer, services: &[ServiceView]) {
    let labels: Vec<Labels> = services
        .iter()
        .map(|s| Labels {
            protocol: proto(s.key.proto),
            vip: s.key.vip.to_string(),
        })
        .collect();
    fn svc(l: &Labels) -> [(&'static str, &str); 2] {
        [("protocol", l.protocol), ("vip", l.vip.as_str())]
    }
    type Get = fn(&Counters) -> (u64, u64);
    let traffic: [(&str, &str, Get); 2] = [
        ("packets", "Packets", |c| (c.in_pkts, c.out_pkts)),
        ("bytes", "Bytes", |c| (c.in_bytes, c.out_bytes)),
    ];
    w.family(
        "wirespeed_lb_service_connections_total",
        Kind::Counter,
        "Connections scheduled to the service's reals.",
    );
    for (s, l) in services.iter().zip(&labels) {
        w.sample(&svc(l), s.stats.conns);
    }
    for (what, help, get) in traffic {
        w.family(
            &format!("wirespeed_lb_service_{what}_total"),
            Kind::Counter,
            &format!("{help} of the service: direction=\"in\" from clients, \"out\" replies through the balancer (NAT, full-NAT)."),
        );
        for (s, l) in services.iter().zip(&labels) {
            let (i, o) = get(&s.stats);
            w.sample(&[svc(l)[0], svc(l)[1], ("direction", "in")], i);
            w.sample(&[svc(l)[0], svc(l)[1], ("direction", "out")], o);
        }
    }
    /// A real, its service's labels and its address as a label value.
    type RealLabels<'a> = (&'a RealView, [(&'static str, &'a str); 2], String);
    let reals: Vec<RealLabels> = services
        .iter()
        .zip(&labels)
        .flat_map(|(s, l)| s.reals.iter().map(move |r| (r, svc(l), r.addr.to_string())))
        .collect();
    let each =
        |w: &mut Writer, name: &str, kind: Kind, help: &str, v: &dyn Fn(&RealView) -> u64| {
            w.family(name, kind, help);
            for (r, s, addr) in &reals {
                w.sample(&[s[0], s[1], ("real", addr)], v(r));
            }
        };
    each(
        w,
        "wirespeed_lb_real_connections_total",
        Kind::Counter,
        "Connections scheduled to the real.",
        &|r| r.stats.conns,
    );
    for (what, help, get) in traffic {
        w.family(
            &format!("wirespeed_lb_real_{what}_total"),
            Kind::Counter,
            &format!("{help} to the real (in) and from it through the balancer (out)."),
        );
        for (r, s, addr) in &reals {
            let (i, o) = get(&r.stats);
            w.sample(&[s[0], s[1], ("real", addr), ("direction", "in")], i);
            w.sample(&[s[0], s[1], ("real", addr), ("direction", "out")], o);
        }
    }
    each(
        w,
        "wirespeed_lb_real_active_connections",
        Kind::Gauge,
        "The real's active connections (ipvsadm's ActiveConn).",
        &|r| r.active_conns,
    );
    each(
        w,
        "wirespeed_lb_real_inactive_connections",
        Kind::Gauge,
        "The real's inactive connections (ipvsadm's InActConn).",
        &|r| r.inact_conns,
    );
    each(
        w,
        "wirespeed_lb_real_up",
        Kind::Gauge,
        "1 unless the service's health check says the real is down (0); unchecked reals are 1.",
        &|r| u64::from(r.health != Health::Down),
    );
    each(
        w,
        "wirespeed_lb_real_weight",
        Kind::Gauge,
        "The real's configured weight.",
        &|r| u64::from(r.weight),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::Rates;
    use crate::model::{Mode, Scheduler, ServiceKey};

    fn real(addr: &str, conns: u64, health: Health) -> RealView {
        RealView {
            addr: addr.parse().unwrap(),
            mode: Mode::Nat,
            tunnel: None,
            weight: 3,
            health,
            active_conns: conns / 2,
            inact_conns: 1,
            stats: Counters {
                conns,
                in_pkts: 10 * conns,
                out_pkts: 9 * conns,
                in_bytes: 1000 * conns,
                out_bytes: 900 * conns,
            },
            rate: Rates::default(),
        }
    }

    #[test]
    fn view_becomes_series() {
        let view = ListView {
            services: vec![ServiceView {
                key: ServiceKey {
                    proto: Proto::Tcp,
                    vip: "[fd00::10]:80".parse().unwrap(),
                },
                scheduler: Scheduler::Mh,
                ring_size: 0,
                table_digest: String::new(),
                laddrs: vec![],
                toa: false,
                check: None,
                stats: Counters {
                    conns: 6,
                    ..Counters::default()
                },
                rate: Rates::default(),
                reals: vec![
                    real("[fd00::1:2]:8080", 4, Health::Up),
                    real("[fd00::1:3]:8080", 2, Health::Down),
                ],
            }],
            ..ListView::default()
        };
        let reasons = vec![("fwd_nat".to_string(), 60), ("drop_no_real".to_string(), 2)];
        let text = render(Ok(&view), Ok(&reasons));
        let l = "protocol=\"tcp\",vip=\"[fd00::10]:80\"";
        for line in [
            format!("wirespeed_lb_service_connections_total{{{l}}} 6"),
            format!("wirespeed_lb_real_connections_total{{{l},real=\"[fd00::1:2]:8080\"}} 4"),
            format!("wirespeed_lb_real_packets_total{{{l},real=\"[fd00::1:3]:8080\",direction=\"out\"}} 18"),
            format!("wirespeed_lb_real_bytes_total{{{l},real=\"[fd00::1:2]:8080\",direction=\"in\"}} 4000"),
            format!("wirespeed_lb_real_active_connections{{{l},real=\"[fd00::1:2]:8080\"}} 2"),
            format!("wirespeed_lb_real_up{{{l},real=\"[fd00::1:2]:8080\"}} 1"),
            format!("wirespeed_lb_real_up{{{l},real=\"[fd00::1:3]:8080\"}} 0"),
            "wirespeed_lb_packets_by_reason_total{reason=\"fwd_nat\",class=\"forward\"} 60".into(),
            "wirespeed_lb_packets_by_reason_total{reason=\"drop_no_real\",class=\"drop\"} 2".into(),
        ] {
            assert!(text.lines().any(|x| x == line), "{line} missing in\n{text}");
        }
        // Each family once, its samples together.
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        let helps = text.lines().filter(|l| l.starts_with("# HELP")).count();
        assert_eq!((types, helps), (11, 11));
    }

    #[test]
    fn read_errors_are_comments() {
        let text = render(Err("map gone".into()), Ok(&[]));
        assert!(text.ends_with("# could not read the services: map gone\n"));
        assert!(text.contains("# TYPE wirespeed_lb_packets_by_reason_total counter\n"));
    }
}
