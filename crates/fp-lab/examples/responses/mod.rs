//! The daemon's response time per configuration command: kernel event received -> data path
//! updated, as the daemon records it (docs/BENCHMARKS.md, section 6).

use wirespeed_fp::model::BridgeHook;
use wirespeed_lab::Netns;

use crate::pct;
use wirespeed_fp_lab::line::RunningDaemon;

/// Route, address, rule, link, ipset and iptables commands on the `line` lab's DUT.
pub fn routed(dut: &Netns) {
    // Response time: kernel event received -> data path updated, as the daemon records it.
    println!();
    println!("| command | n | median us | p99 us | of it reading the ruleset, median us | daemon action |");
    println!("|---|---|---|---|---|---|");
    let d = RunningDaemon::start(dut, None);
    d.wait_for("attached", |s| s.ports.len() == 2);
    let ip = |args: &[&str]| {
        dut.ip(args).unwrap();
    };
    let alternate = |i: usize, a: &[&str], b: &[&str]| ip(if i.is_multiple_of(2) { a } else { b });
    responses(&d, "ip route add/del", "route", 50, &|i| {
        alternate(
            i,
            &["route", "add", "198.19.100.0/24", "via", "198.18.1.2"],
            &["route", "del", "198.19.100.0/24"],
        )
    });
    // The window in which a new address of ours is not yet a local source to the router.
    responses(&d, "ip addr add/del", "addr", 20, &|i| {
        alternate(
            i,
            &["addr", "add", "198.18.7.1/32", "dev", "d1"],
            &["addr", "del", "198.18.7.1/32", "dev", "d1"],
        )
    });
    responses(&d, "ip rule add/del", "rule", 20, &|i| {
        alternate(
            i,
            &[
                "rule",
                "add",
                "to",
                "198.19.3.0/24",
                "table",
                "100",
                "pref",
                "100",
            ],
            &["rule", "del", "pref", "100"],
        )
    });
    responses(&d, "ip link set d1 down/up", "link", 10, &|i| {
        alternate(
            i,
            &["link", "set", "d1", "down"],
            &["link", "set", "d1", "up"],
        )
    });
    responses(&d, "ipset add (polled)", "ipset", 20, &|i| {
        dut.exec("ipset", &["add", "blk", &format!("198.18.150.{i}")])
            .unwrap();
    });
    responses(&d, "iptables -A/-D FORWARD", "nftables", 20, &|i| {
        let op = if i % 2 == 0 { "-A" } else { "-D" };
        dut.exec(
            "iptables-nft",
            &[op, "FORWARD", "-d", "198.19.44.1/32", "-j", "DROP"],
        )
        .unwrap();
    });
    drop(d);
}

/// Bridge commands on the bridge lab's DUT.
pub fn bridged(dut: &Netns) {
    let d = RunningDaemon::start_with(dut, None, BridgeHook::Xdp);
    d.wait_for("bridge attached", |s| s.ports.len() == 2);
    let bridge = |args: &[&str]| {
        dut.exec("bridge", args).unwrap();
    };
    responses(&d, "bridge fdb add/del (static)", "fdb", 50, &|i| {
        let op = if i % 2 == 0 { "add" } else { "del" };
        bridge(&[
            "fdb",
            op,
            "02:cc:00:00:00:01",
            "dev",
            "d1",
            "master",
            "static",
        ]);
    });
    responses(
        &d,
        "bridge link set state learning/forwarding",
        "bridge",
        20,
        &|i| {
            let state = if i % 2 == 0 { "2" } else { "3" };
            bridge(&["link", "set", "dev", "d1", "state", state]);
        },
    );
}

/// Runs `command(i)` `n` times and prints the daemon's response time to the event of kind
/// `kind` each caused (median, p99) and what it did.
pub fn responses(d: &RunningDaemon, label: &str, kind: &str, n: usize, command: &dyn Fn(usize)) {
    let mut us = Vec::new();
    let mut read_us = Vec::new();
    let mut actions = std::collections::BTreeSet::new();
    for i in 0..n {
        let before = d.status().map(|s| s.response_count).unwrap_or(0);
        command(i);
        let s = d.wait_for(label, |s| {
            s.responses
                .iter()
                .take(s.response_count.saturating_sub(before))
                .any(|r| r.events.contains(kind))
        });
        if let Some(r) = s
            .responses
            .iter()
            .take(s.response_count - before)
            .find(|r| r.events.contains(kind))
        {
            us.push(r.micros);
            read_us.push(r.ruleset_read_micros);
            actions.insert(r.action.clone());
        }
    }
    report(label, &mut us, &mut read_us, &actions);
}

pub fn report(
    label: &str,
    us: &mut [f64],
    read_us: &mut [f64],
    actions: &std::collections::BTreeSet<String>,
) {
    let acts: Vec<&str> = actions.iter().map(String::as_str).collect();
    let read = pct(read_us, 0.5);
    println!(
        "| {label} | {} | {:.1} | {:.1} | {} | {} |",
        us.len(),
        pct(us, 0.5),
        pct(us, 0.99),
        if read > 0.0 {
            format!("{read:.1}")
        } else {
            "-".into()
        },
        acts.join(", ")
    );
}
