use super::*;
use crate::model::{CheckKind, HealthCheck, Proto, Real, Scheduler, ServiceKey, Tunnel};
use std::net::SocketAddr;

const VIP: &str = "198.18.100.1";
const HOLD: Duration = Duration::from_secs(3);

fn real(addr: &str, weight: u32, health: Health) -> Real {
    Real {
        addr: addr.parse().unwrap(),
        mode: Mode::Dr,
        tunnel: Tunnel::Ipip,
        weight,
        health,
    }
}

fn service(vip: &str, reals: Vec<Real>, checked: bool) -> Service {
    Service {
        key: ServiceKey {
            proto: Proto::Tcp,
            vip: SocketAddr::new(vip.parse().unwrap(), 80),
        },
        scheduler: Scheduler::Mh,
        reals,
        laddrs: Vec::new(),
        toa: false,
        check: checked.then(|| HealthCheck {
            kind: CheckKind::Tcp,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            rise: 1,
            fall: 1,
        }),
    }
}

fn node(services: &[Service]) -> NodeState<'_> {
    NodeState {
        attached: true,
        links_up: true,
        plan_applied: true,
        draining: false,
        services,
    }
}

fn addrs(list: &[&str]) -> BTreeSet<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

#[test]
fn a_vip_with_a_live_real_on_a_healthy_node_is_servable() {
    let s = [service(
        VIP,
        vec![real("198.18.1.1:80", 1, Health::Unchecked)],
        false,
    )];
    assert_eq!(servable(&node(&s)), addrs(&[VIP]));
}

#[test]
fn each_node_condition_alone_takes_every_vip_away() {
    let s = [service(
        VIP,
        vec![real("198.18.1.1:80", 1, Health::Unchecked)],
        false,
    )];
    let detached = NodeState {
        attached: false,
        ..node(&s)
    };
    let link_down = NodeState {
        links_up: false,
        ..node(&s)
    };
    let unapplied = NodeState {
        plan_applied: false,
        ..node(&s)
    };
    let draining = NodeState {
        draining: true,
        ..node(&s)
    };
    for (what, state) in [
        ("detached", detached),
        ("a link down", link_down),
        ("unapplied", unapplied),
        ("draining", draining),
    ] {
        assert!(servable(&state).is_empty(), "{what}");
    }
}

#[test]
fn a_vip_needs_a_real_with_weight_that_is_not_down() {
    let cases = [
        (vec![], false),
        (vec![real("198.18.1.1:80", 0, Health::Unchecked)], false),
        (vec![real("198.18.1.1:80", 1, Health::Down)], false),
        (
            vec![
                real("198.18.1.1:80", 0, Health::Up),
                real("198.18.1.2:80", 1, Health::Down),
            ],
            false,
        ),
        (
            vec![
                real("198.18.1.1:80", 0, Health::Up),
                real("198.18.1.2:80", 2, Health::Unchecked),
            ],
            true,
        ),
    ];
    for (reals, want) in cases {
        let s = [service(VIP, reals.clone(), false)];
        assert_eq!(
            servable(&node(&s)).contains(&VIP.parse().unwrap()),
            want,
            "{reals:?}"
        );
    }
}

#[test]
fn a_checked_vip_waits_for_every_first_verdict_and_needs_an_up_real() {
    let waiting = [service(
        VIP,
        vec![
            real("198.18.1.1:80", 1, Health::Up),
            real("198.18.1.2:80", 1, Health::Unchecked),
        ],
        true,
    )];
    assert!(servable(&node(&waiting)).is_empty());
    let judged = [service(
        VIP,
        vec![
            real("198.18.1.1:80", 1, Health::Up),
            real("198.18.1.2:80", 1, Health::Down),
        ],
        true,
    )];
    assert_eq!(servable(&node(&judged)), addrs(&[VIP]));
    let all_down = [service(
        VIP,
        vec![real("198.18.1.1:80", 1, Health::Down)],
        true,
    )];
    assert!(servable(&node(&all_down)).is_empty());
}

#[test]
fn one_live_service_on_a_vip_is_enough_and_a_waiting_check_holds_it_back() {
    let mut udp = service(
        VIP,
        vec![real("198.18.1.1:53", 1, Health::Unchecked)],
        false,
    );
    udp.key.proto = Proto::Udp;
    let empty = service(VIP, vec![], false);
    let s = [empty, udp.clone()];
    assert_eq!(servable(&node(&s)), addrs(&[VIP]));
    let unjudged = service(VIP, vec![real("198.18.1.2:80", 1, Health::Unchecked)], true);
    let s = [udp, unjudged];
    assert!(servable(&node(&s)).is_empty());
}

#[test]
fn a_full_nat_real_without_a_local_address_of_its_family_is_not_live() {
    let mut r = real("198.18.1.1:80", 1, Health::Unchecked);
    r.mode = Mode::FullNat;
    let mut s = service(VIP, vec![r], false);
    assert!(servable(&node(std::slice::from_ref(&s))).is_empty());
    s.laddrs = vec!["fd00::1".parse().unwrap()];
    assert_eq!(
        servable(&node(std::slice::from_ref(&s))),
        addrs(&["fd00::1"])
    );
    s.laddrs.push("198.18.5.1".parse().unwrap());
    assert_eq!(
        servable(&node(std::slice::from_ref(&s))),
        addrs(&["fd00::1", "198.18.5.1", VIP])
    );
}

#[test]
fn local_addresses_stay_while_draining_and_go_when_detached_or_a_link_is_down() {
    let mut s = service("fd00::100", vec![], false);
    s.laddrs = vec!["198.18.5.1".parse().unwrap()];
    let s = [s];
    let draining = NodeState {
        draining: true,
        ..node(&s)
    };
    assert_eq!(servable(&draining), addrs(&["198.18.5.1"]));
    let detached = NodeState {
        attached: false,
        ..node(&s)
    };
    assert!(servable(&detached).is_empty());
    let link_down = NodeState {
        links_up: false,
        ..node(&s)
    };
    assert!(servable(&link_down).is_empty(), "the reals' side lost");
}

#[test]
fn an_address_is_announced_after_the_hold_down_and_withdrawn_at_once() {
    let s = [service(
        VIP,
        vec![real("198.18.1.1:80", 1, Health::Unchecked)],
        false,
    )];
    let t0 = Instant::now();
    let mut a = Announcer::new(HOLD);
    assert!(!a.update(t0, &node(&s)));
    assert!(a.announced().is_empty());
    assert_eq!(a.next_due(), Some(t0 + HOLD));
    assert!(!a.update(t0 + HOLD - Duration::from_millis(1), &node(&s)));
    assert!(a.update(t0 + HOLD, &node(&s)));
    assert_eq!(a.announced(), &addrs(&[VIP]));
    assert_eq!(a.next_due(), None);
    let draining = NodeState {
        draining: true,
        ..node(&s)
    };
    assert!(a.update(t0 + HOLD + Duration::from_millis(1), &draining));
    assert!(a.announced().is_empty(), "withdrawn without waiting");
}

#[test]
fn a_flapping_real_never_reaches_the_route_and_a_slow_one_is_bounded() {
    let up = [service(
        VIP,
        vec![real("198.18.1.1:80", 1, Health::Up)],
        true,
    )];
    let down = [service(
        VIP,
        vec![real("198.18.1.1:80", 1, Health::Down)],
        true,
    )];
    let t0 = Instant::now();
    let run = |period: Duration| {
        let mut a = Announcer::new(HOLD);
        let mut updates = 0;
        let mut t = Duration::ZERO;
        // 60 s, fed every 50 ms as the daemon's loop does; the real changes every `period`.
        while t < Duration::from_secs(60) {
            let state = if (t.as_millis() / period.as_millis()).is_multiple_of(2) {
                &up
            } else {
                &down
            };
            updates += usize::from(a.update(t0 + t, &node(state)));
            t += Duration::from_millis(50);
        }
        updates
    };
    assert_eq!(run(Duration::from_secs(1)), 0, "faster than the hold-down");
    // Up for 10 s then down for 10 s: one announcement and one withdrawal per 20 s.
    assert_eq!(run(Duration::from_secs(10)), 6);
}

#[test]
fn host_prefixes_are_32_and_128() {
    assert_eq!(host_prefix(VIP.parse().unwrap()), "198.18.100.1/32");
    assert_eq!(host_prefix("fd00::1".parse().unwrap()), "fd00::1/128");
}

#[test]
fn an_unjudged_real_keeps_a_vip_back_but_does_not_withdraw_an_announced_one() {
    let judged = vec![real("198.18.1.1:80", 1, Health::Up)];
    let mut joined = judged.clone();
    joined.push(real("198.18.1.2:80", 1, Health::Unchecked));
    let before = [service(VIP, judged, true)];
    let after = [service(VIP, joined, true)];
    let t0 = Instant::now();
    let mut a = Announcer::new(HOLD);
    a.update(t0, &node(&before));
    assert!(a.update(t0 + HOLD, &node(&before)));
    assert!(!a.update(t0 + HOLD * 2, &node(&after)), "a real joined");
    assert_eq!(a.announced(), &addrs(&[VIP]));
    // Withdrawn for another reason, it comes back only once every real is judged.
    let draining = NodeState {
        draining: true,
        ..node(&after)
    };
    assert!(a.update(t0 + HOLD * 3, &draining));
    a.update(t0 + HOLD * 4, &node(&after));
    assert!(!a.update(t0 + HOLD * 6, &node(&after)));
    assert!(a.announced().is_empty());
    assert_eq!(keepable(&node(&after)), addrs(&[VIP]));
    assert!(servable(&node(&after)).is_empty());
}

#[test]
fn changes_withdraw_first() {
    assert_eq!(
        changes(
            &addrs(&["198.18.100.1", "198.18.100.2"]),
            &addrs(&["198.18.100.2", "198.18.100.3", "fd00::1"])
        ),
        [
            Change::Withdraw("198.18.100.1".parse().unwrap()),
            Change::Announce("198.18.100.3".parse().unwrap()),
            Change::Announce("fd00::1".parse().unwrap()),
        ]
    );
    assert!(changes(&addrs(&[VIP]), &addrs(&[VIP])).is_empty());
}

/// Fails twice, then takes the set, then is gone; resyncs at once.
struct Flaky(Vec<BTreeSet<IpAddr>>);

impl Speaker for Flaky {
    fn apply(&mut self, wanted: &BTreeSet<IpAddr>) -> std::result::Result<Vec<String>, Failure> {
        self.0.push(wanted.clone());
        match self.0.len() {
            1 | 2 => Err(Failure::Retry("bgpd is down: start it".into())),
            3 => Ok(vec!["took it".into()]),
            _ => Err(Failure::Gone(Error::Invalid("gone".into()))),
        }
    }

    fn resync(&self) -> Option<Duration> {
        Some(Duration::from_millis(10))
    }
}

#[test]
fn follow_withdraws_without_a_daemon_retries_a_failed_apply_and_resyncs() {
    let socket = std::env::temp_dir().join(format!("ws-no-daemon-{}.sock", std::process::id()));
    let mut speaker = Flaky(Vec::new());
    let mut logged = Vec::new();
    let end = follow(&socket, &mut speaker, Duration::from_millis(10), &mut |m| {
        logged.push(m.to_string())
    });
    assert!(matches!(end, Err(Error::Invalid(m)) if m == "gone"));
    assert!(speaker.0.iter().all(|s| s.is_empty()));
    assert!(logged[0].contains("withdrawing everything"), "{logged:?}");
    assert_eq!(
        logged[1..],
        [
            "bgpd is down: start it; retrying every 10ms",
            "the speaker took the routes now",
            "took it"
        ]
    );
}
