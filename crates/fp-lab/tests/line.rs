//! The router in a `line` lab: 50 prefixes forwarded through the fast path, and
//! configuration changes (route add/del, multipath and its hash policy, nexthop objects, policy
//! rules the FIB helper evaluates and one it cannot,
//! link down) taking effect.

use wirespeed_fp::status::Status;
use wirespeed_fp_lab::line::*;

#[test]
fn routes_fifty_prefixes_and_follows_changes() {
    let lab = line("l");
    assert!(
        ping(&lab.src, "fd00:c::1"),
        "IPv6 unreachable through the kernel alone"
    );
    let mut d = RunningDaemon::start(&lab.dut, None);
    let s = d.wait_for("d0 and d1 attached", |s| s.ports.len() == 2);
    for p in &s.ports {
        assert!(
            p.modules.contains(&"router4".to_string())
                && p.modules.contains(&"router6".to_string())
                && p.maps.get("route_cache_v4_slots") == Some(&1024),
            "{p:?}"
        );
    }

    for x in 0..PREFIXES {
        assert!(
            ping(&lab.src, &format!("198.19.{x}.1")),
            "prefix {x} unreachable"
        );
    }
    assert!(ping(&lab.src, "fd00:c::1"), "IPv6 unreachable");
    // The source's entry on the DUT starts STALE (learned from its ARP request): the first
    // replies to it, one per 100 ms, are the kernel's, which drives the entry
    // (docs/FASTPATH.md, "Neighbours").
    let fast_or_driven = |s: &Status, port: &str| {
        let p = s.ports.iter().find(|p| p.name == port);
        forwarded(s, port)
            + p.and_then(|p| p.reasons.get("pass_neigh_stale"))
                .copied()
                .unwrap_or(0)
    };
    d.wait_for("requests and replies fast-pathed", |s| {
        fast_or_driven(s, "d0") >= PREFIXES as u64 && fast_or_driven(s, "d1") >= PREFIXES as u64
    });

    // route del / add: the program asks the kernel FIB through its route cache, which the
    // daemon invalidates on each route event; a change applies once the daemon answered it.
    // Runs `change`, then waits for the daemon's response to an event of `kind` (not to one
    // of the pings before, say a neighbour's).
    let answered = |d: &RunningDaemon, kind: &str, change: &dyn Fn()| {
        let seen = d.status().map(|s| s.response_count).unwrap_or(0);
        change();
        d.wait_for(&format!("{kind} event answered"), |s| {
            s.responses
                .iter()
                .take(s.response_count.saturating_sub(seen))
                .any(|r| r.events.contains(kind))
        });
    };
    answered(&d, "route", &|| {
        lab.dut.ip(&["route", "del", "198.19.7.0/24"]).unwrap();
    });
    assert!(
        !ping_once(&lab.src, "198.19.7.1"),
        "deleted route still forwarded"
    );
    lab.dut
        .ip(&["route", "add", "198.19.7.0/24", "via", "198.18.1.2"])
        .unwrap();
    assert!(ping(&lab.src, "198.19.7.1"));
    let s = d.wait_for("route events recorded", |s| {
        s.responses.iter().any(|r| r.events.contains("route"))
    });
    assert!(s.response_count > 1);

    // A multipath route: the flow's hash picks the next hop, which a cache keyed by the
    // destination cannot stand for, so the cache is off while one exists.
    let cache_off = |s: &Status| {
        s.ports.iter().all(|p| {
            p.notes.iter().any(|n| n.contains("route cache off"))
                && !p.maps.contains_key("route_cache_v4_slots")
        })
    };
    assert!(!cache_off(&d.status().unwrap()));
    lab.dut
        .ip(&[
            "route",
            "replace",
            "198.19.7.0/24",
            "nexthop",
            "via",
            "198.18.1.2",
            "nexthop",
            "via",
            "198.18.1.2",
        ])
        .unwrap();
    d.wait_for("route cache off", cache_off);
    let before = forwarded(&d.status().unwrap(), "d0");
    assert!(
        ping(&lab.src, "198.19.7.1"),
        "multipath route not forwarded"
    );
    d.wait_for("multipath fast-pathed", |s| forwarded(s, "d0") > before);
    // A hash policy other than 0 may pick from what the FIB helper is not given: IPv4 goes
    // to the kernel while a multipath route exists. The policy changes without an event;
    // the daemon reads it when idle.
    let policy_note = "router4 -> kernel: 1 multipath routes hashed by fib_multipath_hash_policy 1";
    let v4_to_kernel = |s: &Status| {
        s.ports
            .iter()
            .all(|p| p.notes.iter().any(|n| n.starts_with(policy_note)))
    };
    lab.dut
        .sysctl("net.ipv4.fib_multipath_hash_policy", "1")
        .unwrap();
    d.wait_for("IPv4 to the kernel under hash policy 1", v4_to_kernel);
    let s = d.status().unwrap();
    let passed = |s: &Status| {
        s.ports
            .iter()
            .find(|p| p.name == "d0")
            .and_then(|p| p.reasons.get("pass_disabled").copied())
            .unwrap_or(0)
    };
    let (fast, kernel) = (forwarded(&s, "d0"), passed(&s));
    assert!(
        ping(&lab.src, "198.19.7.1"),
        "multipath route not forwarded by the kernel"
    );
    let s = d.wait_for("ping passed to the kernel", |s| passed(s) > kernel);
    assert_eq!(forwarded(&s, "d0"), fast, "fast-pathed under hash policy 1");
    // Through a nexthop object with one next hop there is no hash to take: IPv4 stays fast
    // under policy 1, and the route cache stands for the route.
    let ip = |args: &str| {
        lab.dut
            .ip(&args.split(' ').collect::<Vec<_>>())
            .unwrap_or_else(|e| panic!("ip {args}: {e:?}"))
    };
    ip("nexthop add id 71 via 198.18.1.2 dev d1");
    ip("route replace 198.19.7.0/24 nhid 71");
    let v4_fast_and_cached = |s: &Status| {
        s.ports.iter().all(|p| {
            !p.notes
                .iter()
                .any(|n| n.starts_with(policy_note) || n.contains("IPv4 multipath"))
                && p.maps.get("route_cache_v4_slots") == Some(&1024)
        })
    };
    d.wait_for(
        "IPv4 fast and its route cache on through a single-hop nexthop object",
        v4_fast_and_cached,
    );
    // FRR installs every route through a nexthop object: the daemon counts such routes from
    // their events, without dumping the table, which costs milliseconds per thousand routes.
    let dumps = d.status().unwrap().route_dumps;
    answered(&d, "route", &|| {
        ip("route add 198.19.120.0/24 nhid 71");
    });
    answered(&d, "route", &|| {
        ip("route del 198.19.120.0/24");
    });
    assert_eq!(
        d.status().unwrap().route_dumps,
        dumps,
        "a route through a single-hop nexthop object was counted with a dump of every route"
    );
    let cached = |s: &Status| {
        s.ports
            .iter()
            .find(|p| p.name == "d0")
            .and_then(|p| p.reasons.get("forwarded_cached").copied())
            .unwrap_or(0)
    };
    let before = cached(&d.status().unwrap());
    // Several echoes: the caches are per CPU, and the first on each CPU asks the FIB.
    lab.src
        .exec("ping", &["-c", "6", "-i", "0.1", "-W", "1", "198.19.7.1"])
        .expect("nexthop object not forwarded");
    d.wait_for("nexthop object fast-pathed from the route cache", |s| {
        cached(s) > before
    });
    // Deleting the object deletes its IPv4 routes with no route event (`ip monitor` shows
    // only the nexthop's): the nexthop event must drop the cached answer, or the fast path
    // goes on forwarding a destination the kernel no longer routes.
    answered(&d, "nexthop", &|| {
        ip("nexthop del id 71");
    });
    assert!(
        !ping_once(&lab.src, "198.19.7.1"),
        "198.19.7.0/24 forwarded after its nexthop object and so its route were deleted (a \
         stale route-cache answer)"
    );
    // A replace comes with route events for the routes through the object.
    ip("nexthop add id 71 via 198.18.1.9 dev d1");
    ip("route add 198.19.7.0/24 nhid 71");
    assert!(
        !ping_once(&lab.src, "198.19.7.1"),
        "forwarded through 198.18.1.9, which does not exist"
    );
    ip("nexthop replace id 71 via 198.18.1.2 dev d1");
    let before = forwarded(&d.status().unwrap(), "d0");
    assert!(
        ping(&lab.src, "198.19.7.1"),
        "nexthop object not forwarded after a replace"
    );
    d.wait_for("nexthop object fast-pathed", |s| {
        forwarded(s, "d0") > before
    });
    // A group object counts as multipath even with one member: a resilient group moves its
    // buckets without any event.
    ip("nexthop add id 72 group 71");
    lab.dut
        .ip(&["route", "replace", "198.19.7.0/24", "nhid", "72"])
        .unwrap();
    d.wait_for("IPv4 to the kernel through a group object", v4_to_kernel);
    lab.dut
        .sysctl("net.ipv4.fib_multipath_hash_policy", "0")
        .unwrap();
    d.wait_for("IPv4 fast-pathed again under hash policy 0", |s| {
        !s.ports
            .iter()
            .any(|p| p.notes.iter().any(|n| n.starts_with(policy_note)))
    });
    lab.dut
        .ip(&["route", "replace", "198.19.7.0/24", "via", "198.18.1.2"])
        .unwrap();
    lab.dut.ip(&["nexthop", "del", "id", "72"]).unwrap();
    lab.dut.ip(&["nexthop", "del", "id", "71"]).unwrap();
    d.wait_for("route cache on again", |s| !cache_off(s));
    assert!(ping(&lab.src, "198.19.7.1"));

    // IPv6 has its own cache, which a source-specific route (`from`: the answer depends on
    // the source) turns off, as a multipath one does; IPv4's stays on.
    let v6_cache_off = |s: &Status| {
        s.ports.iter().all(|p| {
            p.notes
                .iter()
                .any(|n| n.contains("IPv6 multipath, nexthop-group or source-specific"))
                && !p.maps.contains_key("route_cache_v6_slots")
                && p.maps.contains_key("route_cache_v4_slots")
        })
    };
    let s = d.status().unwrap();
    assert!(
        s.ports
            .iter()
            .all(|p| p.maps.get("route_cache_v6_slots") == Some(&1024)),
        "{:?}",
        s.ports
    );
    let from_route = [
        "-6",
        "route",
        "add",
        "fd00:d::/64",
        "from",
        "fd00:a::/64",
        "via",
        "fd00:b::2",
    ];
    lab.dut.ip(&from_route).unwrap();
    d.wait_for("IPv6 route cache off", v6_cache_off);
    let before = forwarded(&d.status().unwrap(), "d0");
    assert!(ping(&lab.src, "fd00:c::1"), "IPv6 unreachable, cache off");
    d.wait_for("IPv6 fast-pathed, cache off", |s| {
        forwarded(s, "d0") > before
    });
    lab.dut
        .ip(&["-6", "route", "del", "fd00:d::/64", "from", "fd00:a::/64"])
        .unwrap();
    d.wait_for("IPv6 route cache on again", |s| {
        s.ports
            .iter()
            .all(|p| p.maps.get("route_cache_v6_slots") == Some(&1024))
    });
    assert!(ping(&lab.src, "fd00:c::1"));

    // A policy rule the FIB helper evaluates (a destination selector): the router stays on
    // and applies it, with the route cache off (a rule may look at the source or ports).
    ip("route add unreachable 198.19.3.0/24 table 100");
    ip("rule add to 198.19.3.0/24 table 100 pref 100");
    let rules_cache_off = |s: &Status| {
        s.ports.iter().all(|p| {
            p.modules.contains(&"router4".to_string())
                && p.notes
                    .iter()
                    .any(|n| n.contains("route cache off: 1 IPv4 policy rules"))
                && !p.maps.contains_key("route_cache_v4_slots")
        })
    };
    d.wait_for("router4 on beside the rule, its cache off", rules_cache_off);
    assert!(!ping_once(&lab.src, "198.19.3.1"), "policy rule ignored");
    let before = forwarded(&d.status().unwrap(), "d0");
    assert!(ping(&lab.src, "198.19.4.1"), "no route past the rule");
    d.wait_for("fast-pathed beside the rule", |s| {
        forwarded(s, "d0") > before
    });
    // One the helper cannot see as the kernel does (a mark): the family goes to the kernel.
    ip("rule add fwmark 7 table 100 pref 99");
    d.wait_for("router4 off for a fwmark rule", |s| {
        s.ports.iter().all(|p| {
            !p.modules.contains(&"router4".to_string())
                && p.notes.iter().any(|n| {
                    n.starts_with("router4 -> kernel: 1 IPv4 policy rules with a selector")
                })
        })
    });
    assert!(!ping_once(&lab.src, "198.19.3.1"), "policy rule ignored");
    assert!(ping(&lab.src, "198.19.4.1"), "kernel path broken");
    d.wait_for("kernel path counted", |s| {
        s.ports
            .iter()
            .any(|p| p.reasons.get("pass_disabled").copied().unwrap_or(0) > 0)
    });
    ip("rule del pref 99");
    d.wait_for("router4 back", rules_cache_off);
    ip("rule del pref 100");
    d.wait_for("route cache on again without rules", |s| !cache_off(s));
    let before = forwarded(&d.status().unwrap(), "d0");
    assert!(ping(&lab.src, "198.19.3.1"));
    d.wait_for("fast path again", |s| forwarded(s, "d0") > before);

    // A VRF's rule, which the kernel adds to both families with the first VRF device (this
    // kernel has no VRF driver, so the test adds it as the driver does): it matches only
    // flows under a VRF, and no served port is, so both routers and their route caches stay
    // on and the rule changes no answer.
    answered(&d, "rule", &|| {
        ip("rule add l3mdev pref 1000");
        ip("-6 rule add l3mdev pref 1000");
    });
    let caches_on = |s: &Status| {
        s.ports.iter().all(|p| {
            p.modules.contains(&"router4".to_string())
                && p.modules.contains(&"router6".to_string())
                && p.maps.get("route_cache_v4_slots") == Some(&1024)
                && p.maps.get("route_cache_v6_slots") == Some(&1024)
        })
    };
    d.wait_for("routers and caches on beside a VRF's rule", caches_on);
    let before = forwarded(&d.status().unwrap(), "d0");
    assert!(ping(&lab.src, "198.19.3.1") && ping(&lab.src, "fd00:c::1"));
    d.wait_for("fast-pathed beside a VRF's rule", |s| {
        forwarded(s, "d0") >= before + 2
    });
    // Inverted, it matches every lookup the fast path makes, in the helper as in the kernel,
    // and then has no table to look in (a VRF's rule takes its table from the VRF), so the
    // lookup goes on to the next rule in both. The routers stay on with the policy rules'
    // machinery (their caches off) and forward as before.
    answered(&d, "rule", &|| {
        ip("rule add not l3mdev pref 1001");
    });
    d.wait_for(
        "router4 on beside an inverted VRF rule, its cache off",
        rules_cache_off,
    );
    let before = forwarded(&d.status().unwrap(), "d0");
    assert!(ping(&lab.src, "198.19.3.1"));
    d.wait_for("fast-pathed beside an inverted VRF rule", |s| {
        forwarded(s, "d0") > before
    });
    ip("rule del pref 1001");
    ip("rule del pref 1000");
    ip("-6 rule del pref 1000");

    // Link down: the port stays attached but stops being a redirect target; back up, it is
    // one again and traffic flows.
    let d1_down = |s: &Status| {
        s.ports
            .iter()
            .any(|p| p.name == "d1" && p.notes.iter().any(|n| n.contains("link down")))
    };
    lab.dut.ip(&["link", "set", "d1", "down"]).unwrap();
    d.wait_for("d1 not a tx port", |s| d1_down(s) && s.ports.len() == 2);
    assert!(!ping_once(&lab.src, "198.19.1.1"));
    lab.dut.ip(&["link", "set", "d1", "up"]).unwrap();
    d.wait_for("d1 a tx port again", |s| !d1_down(s) && s.ports.len() == 2);
    // The kernel flushed the routes through d1 when it went down; put one back.
    lab.dut
        .ip(&["route", "replace", "198.19.1.0/24", "via", "198.18.1.2"])
        .unwrap();
    let mut ok = false;
    for _ in 0..5 {
        if ping(&lab.src, "198.19.1.1") {
            ok = true;
            break;
        }
    }
    assert!(ok, "no traffic after link up");

    d.stop();
    let link = lab.dut.ip(&["link", "show", "d0"]).unwrap();
    assert!(
        !link.contains("xdp"),
        "program left attached after stop: {link}"
    );
    assert!(ping(&lab.src, "198.19.1.1"), "kernel path after stop");
}
