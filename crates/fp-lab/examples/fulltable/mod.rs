//! `fp_bench SECS ROUNDS routes`: the daemon's response to a route change on a router with a
//! full table installed as FRR installs one, every route through a nexthop object. 65,000
//! IPv4 /32s through one single-hop object, then the same with one more route through a
//! group (the route cache off, as on an ECMP router). The daemon counts the routes that turn
//! the route cache off from the events (docs/FASTPATH.md, "Counting those routes"); a dump of
//! the table costs tens of milliseconds at this size, so the figures show whether a change
//! made one.

use super::*;
use crate::responses::responses;

const ROUTES: u32 = 65_000;

pub fn run(dut: &wirespeed_lab::Netns) {
    let ip = |args: &[&str]| {
        dut.ip(args)
            .unwrap_or_else(|e| panic!("ip {}: {e:?}", args.join(" ")));
    };
    ip(&[
        "nexthop",
        "add",
        "id",
        "900",
        "via",
        "198.18.1.2",
        "dev",
        "d1",
    ]);
    ip(&[
        "nexthop",
        "add",
        "id",
        "901",
        "via",
        "198.18.1.2",
        "dev",
        "d1",
    ]);
    ip(&["nexthop", "add", "id", "902", "group", "900/901"]);
    let batch: String = (0..ROUTES)
        .map(|i| format!("route add 198.19.{}.{}/32 nhid 900\n", i >> 8, i & 255))
        .collect();
    let path = std::env::temp_dir().join(format!("ws-fulltable-{}.batch", std::process::id()));
    std::fs::write(&path, batch).expect("write the route batch");
    ip(&["-batch", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);

    let d = RunningDaemon::start(dut, None);
    d.wait_for("attached", |s| s.ports.len() == 2);
    println!();
    println!("{ROUTES} IPv4 routes through nexthop objects (`fp_bench 3 3 routes`):");
    println!();
    println!("| command | n | median us | p99 us | of it reading the ruleset, median us | daemon action |");
    println!("|---|---|---|---|---|---|");
    let alternate = |i: usize, nhid: &str| {
        if i.is_multiple_of(2) {
            ip(&["route", "add", "198.18.100.0/24", "nhid", nhid]);
        } else {
            ip(&["route", "del", "198.18.100.0/24"]);
        }
    };
    let dumps_before = d.status().unwrap().route_dumps;
    responses(
        &d,
        "ip route add/del ... nhid (single next hop)",
        "route",
        20,
        &|i| alternate(i, "900"),
    );
    ip(&["route", "add", "198.18.200.0/24", "nhid", "902"]);
    responses(
        &d,
        "the same through a group, beside a group route",
        "route",
        20,
        &|i| alternate(i, "902"),
    );
    let during = d.status().unwrap().route_dumps - dumps_before;
    // A deletion that leaves a count above zero asks for a dump within the recount period.
    std::thread::sleep(wirespeed_fp::daemon::ROUTE_RECOUNT_PERIOD + Duration::from_secs(1));
    let after = d.status().unwrap().route_dumps - dumps_before;
    println!();
    println!(
        "route table dumps: {during} while these 40 changes and the group route were answered, \
         {after} by one recount period after them"
    );
    drop(d);
    // Deleting the objects deletes the routes through them.
    for id in ["902", "901", "900"] {
        ip(&["nexthop", "del", "id", id]);
    }
}
