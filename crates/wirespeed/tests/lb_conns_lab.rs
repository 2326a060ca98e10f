//! ActiveConn and InActConn of `wirespeed lb -L -n` with real connections: the `lb` lab of
//! lb_lab.rs (same builders, lb_common/), full-NAT to the 4 redis backends, connections held
//! open from a client, some closed, and the listing read as a user reads it.
//!
//! Run: flock /tmp/ws-priv.lock nice -n 5 cargo test --profile ci -p wirespeed --features
//! wirespeed/dpdk,wirespeed-net/dpdk,wirespeed-nic/dpdk --test lb_conns_lab -- --test-threads=1

#[allow(dead_code)]
mod lb_common;

use std::time::Duration;

use lb_common::clients;
use lb_common::{
    configure, hostport, lb_rng, mode_lab, rip4, vip, wait_for, ALL, BACKENDS, REDIS, VIP4,
};

/// (ActiveConn, InActConn) of each backend's line in `-L -n`.
fn listed(text: &str) -> [(u64, u64); BACKENDS] {
    let mut out = [(0, 0); BACKENDS];
    for (j, o) in out.iter_mut().enumerate() {
        let addr = hostport(rip4(j).into(), REDIS);
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(addr.as_str()))
            .unwrap_or_else(|| panic!("no line for {addr} in {text}"));
        let w: Vec<&str> = line.split_whitespace().collect();
        *o = (w[4].parse().unwrap(), w[5].parse().unwrap());
    }
    out
}

#[test]
fn listing_counts_held_connections_active_and_closed_ones_inactive() {
    let mut rng = lb_rng("lbcn");
    let (lab, _pids) = mode_lab("lbcn", "-b", &mut rng);
    let service = vip(VIP4, REDIS);
    configure(&lab, "-b", service, "wrr", &[], &[1; BACKENDS]);
    // The warm-up's connections close (with a reset): inactive from then on.
    clients::warm_up(&lab, "c0", service, &ALL);
    let before = listed(&lab.lb_ok(&["-L", "-n"]));
    assert!(
        before.iter().all(|&(a, _)| a == 0),
        "no connection is open yet: {before:?}"
    );

    let mut held = clients::hold(&lab.ns_name("c1"), service, 24);
    let mut want = [0u64; BACKENDS];
    for h in &held {
        want[h.backend] += 1;
    }
    let now = listed(&lab.lb_ok(&["-L", "-n"]));
    println!("lbcn: held per backend {want:?}; listed {now:?}");
    for j in 0..BACKENDS {
        assert_eq!(now[j], (want[j], before[j].1), "b{j}: {now:?}");
    }

    // Close 10 (each with a reset, as the lab's client does): they turn inactive. The resets
    // cross the load balancer as the sockets close, so the listing is read until it agrees
    // (bounded: a data path that never marks them fails).
    let closed: Vec<_> = held.drain(..10).collect();
    let mut gone = [0u64; BACKENDS];
    for h in &closed {
        gone[h.backend] += 1;
    }
    drop(closed);
    let expect: Vec<(u64, u64)> = (0..BACKENDS)
        .map(|j| (want[j] - gone[j], before[j].1 + gone[j]))
        .collect();
    let mut last = [(0, 0); BACKENDS];
    let agreed = wait_for(Duration::from_secs(10), || {
        last = listed(&lab.lb_ok(&["-L", "-n"]));
        (last.to_vec() == expect).then_some(())
    });
    println!("lbcn: after closing 10, listed {last:?}, expected {expect:?}");
    assert!(agreed.is_some(), "listed {last:?}, expected {expect:?}");

    // `--json` says the same.
    let json: serde_json::Value =
        serde_json::from_str(&lab.lb_ok(&["-L", "-n", "--json"])).unwrap();
    assert_eq!(sum_of(&json, "active_conns"), 14, "{json}");
    drop(held);
}

/// The sum of every number named `field` anywhere in `v`.
fn sum_of(v: &serde_json::Value, field: &str) -> u64 {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, x)| {
                if k == field {
                    x.as_u64().unwrap_or(0)
                } else {
                    sum_of(x, field)
                }
            })
            .sum(),
        serde_json::Value::Array(a) => a.iter().map(|x| sum_of(x, field)).sum(),
        _ => 0,
    }
}
