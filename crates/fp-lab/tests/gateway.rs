//! The filter in a `line` lab: 100 iptables(-nft) drop rules, then the same as one set;
//! rule add/del and set element add take effect.

use std::collections::BTreeMap;

use wirespeed_fp::status::Status;
use wirespeed_fp_lab::line::*;

fn dropped(s: &Status) -> u64 {
    s.ports
        .iter()
        .map(|p| p.reasons.get("dropped_filter").copied().unwrap_or(0))
        .sum()
}

fn filtered(s: &Status) -> bool {
    s.ports
        .iter()
        .all(|p| p.modules.contains(&"filter4".to_string()))
}

/// Runs `change` and waits (bounded) until the daemon's state shows it. Waiting for state,
/// not for an event, keeps a late event of the previous change from passing for this one.
fn apply(
    d: &RunningDaemon,
    what: &str,
    change: impl FnOnce(),
    done: impl Fn(&Status) -> bool,
) -> Status {
    let t = std::time::Instant::now();
    change();
    let r = d.wait_for(what, done);
    eprintln!(
        "TIMING {what} {:?} {:?}",
        t.elapsed(),
        r.responses.iter().take(3).collect::<Vec<_>>()
    );
    r
}

fn lpm_entries(s: &Status) -> usize {
    s.ports
        .first()
        .and_then(|p| p.maps.get("filter_lpm_entries"))
        .copied()
        .unwrap_or(0)
}

#[test]
fn hundred_iptables_rules_then_one_set() {
    let lab = line("g");
    let d = RunningDaemon::start(&lab.dut, None);
    d.wait_for("ports attached", |s| s.ports.len() == 2);

    // 100 rules: the first 25 drop prefixes we route, the other 75 never match.
    let mut rules = String::from("*filter\n:FORWARD ACCEPT [0:0]\n");
    for x in 0..25 {
        rules.push_str(&format!("-A FORWARD -d 198.19.{x}.1/32 -j DROP\n"));
    }
    for x in 0..75 {
        rules.push_str(&format!(
            "-A FORWARD -s 198.18.200.{x}/32 -p udp --dport 53 -j DROP\n"
        ));
    }
    rules.push_str("COMMIT\n");
    // The first rules compile the filter in: a new program, seconds in the verifier, during
    // which the running one stands by and the kernel takes this traffic.
    let mut traffic = lab
        .src
        .command("ping")
        .args(["-q", "-c", "2500", "-i", "0.002", "-W", "1", "198.19.30.1"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let s = apply(
        &d,
        "100 rules compiled",
        || {
            use std::io::Write;
            let mut c = lab
                .dut
                .command("iptables-nft-restore")
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            c.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
            assert!(c.wait().unwrap().success());
        },
        |s| s.filter_v4.contains("100 rules") && s.nft_rule_events.unchecked == 0,
    );
    let _ = traffic.kill();
    let _ = traffic.wait();
    assert!(filtered(&s), "{:?}", s.ports);
    assert!(s.filter_v4.contains("100 rules"), "{}", s.filter_v4);
    assert!(
        s.ports
            .iter()
            .any(|p| p.reasons.get("pass_standby").copied().unwrap_or(0) > 0),
        "no port stood by while its filter program was loaded: {:?}",
        s.ports
    );

    // (the first packets resolve neighbours through the kernel)
    assert!(ping(&lab.src, "198.19.30.1"), "allowed prefix unreachable");
    assert!(
        !ping_once(&lab.src, "198.19.3.1"),
        "dropped prefix reachable"
    );
    d.wait_for("drops and forwards counted", |s| {
        dropped(s) > 0 && forwarded(s, "d0") + forwarded(s, "d1") > 0
    });

    // Rule delete and add.
    apply(
        &d,
        "rule deleted",
        || {
            lab.dut
                .exec(
                    "iptables-nft",
                    &["-D", "FORWARD", "-d", "198.19.3.1/32", "-j", "DROP"],
                )
                .map(|_| ())
                .unwrap()
        },
        // and read back: a read overlapping the next command would take that command's
        // rule in, and its event would then no longer apply (a full read instead, which is
        // right but not what this test checks).
        |s| s.filter_v4.contains("99 rules") && s.nft_rule_events.unchecked == 0,
    );
    if !ping(&lab.src, "198.19.3.1") {
        let rs = lab
            .dut
            .exec("nft", &["list", "chain", "ip", "filter", "FORWARD"])
            .unwrap();
        panic!(
            "deleted rule still drops: {}\n{:#?}",
            &rs[..rs.len().min(400)],
            d.status().unwrap().ports
        );
    }
    apply(
        &d,
        "rule added",
        || {
            lab.dut
                .exec(
                    "iptables-nft",
                    &["-I", "FORWARD", "-d", "198.19.40.1/32", "-j", "DROP"],
                )
                .map(|_| ())
                .unwrap()
        },
        |s| s.filter_v4.contains("100 rules") && s.nft_rule_events.unchecked == 0,
    );
    assert!(
        !ping_once(&lab.src, "198.19.40.1"),
        "added rule not applied"
    );

    // Single rule changes are applied from the kernel's event, then read back and compared:
    // rules of every shape the decoder knows, and some it must leave to the read.
    let e0 = d.status().unwrap().nft_rule_events;
    assert!(
        e0.decoded >= 2,
        "-D and -I were not applied from their events: {e0:?}"
    );
    let shapes: [&[&str]; 9] = [
        &[
            "-A",
            "FORWARD",
            "-s",
            "198.18.9.0/20",
            "-p",
            "tcp",
            "--dport",
            "8080",
            "-i",
            "d0",
            "-j",
            "ACCEPT",
        ],
        &[
            "-I",
            "FORWARD",
            "3",
            "-d",
            "198.19.41.0/24",
            "-p",
            "udp",
            "--sport",
            "53",
            "-j",
            "DROP",
        ],
        &[
            "-A",
            "FORWARD",
            "!",
            "-d",
            "198.19.0.0/16",
            "-o",
            "d1",
            "-j",
            "DROP",
        ],
        &[
            "-I",
            "FORWARD",
            "-p",
            "icmp",
            "-s",
            "198.18.250.7",
            "-j",
            "ACCEPT",
        ],
        &[
            "-A",
            "FORWARD",
            "-p",
            "tcp",
            "--dport",
            "1000:2000",
            "-j",
            "DROP",
        ],
        &[
            "-A",
            "FORWARD",
            "-i",
            "d+",
            "-d",
            "198.19.42.1",
            "-j",
            "DROP",
        ],
        &[
            "-A",
            "FORWARD",
            "-m",
            "conntrack",
            "--ctstate",
            "INVALID",
            "-j",
            "DROP",
        ],
        &["-A", "FORWARD", "-d", "198.19.43.0/25", "-j", "RETURN"],
        &[
            "-A",
            "FORWARD",
            "-s",
            "198.18.128.0/17",
            "-d",
            "198.19.44.0/22",
            "-j",
            "ACCEPT",
        ],
    ];
    // Each change waits for the daemon's read-back (20 ms after it), so that no read can
    // overlap the next command: then every decodable change is applied from its event.
    for (n, rule) in shapes.iter().enumerate() {
        let count = 101 + n;
        apply(
            &d,
            "rule of another shape added and read back",
            || lab.dut.exec("iptables-nft", rule).map(|_| ()).unwrap(),
            |s| s.filter_v4.contains(&format!("{count} rules")) && s.nft_rule_events.unchecked == 0,
        );
    }
    for (n, rule) in shapes.iter().enumerate().rev() {
        let mut del: Vec<&str> = rule.to_vec();
        del[0] = "-D";
        if del[2] == "3" {
            del.remove(2); // the insert position
        }
        let count = 100 + n;
        apply(
            &d,
            "rule deleted and read back",
            || lab.dut.exec("iptables-nft", &del).map(|_| ()).unwrap(),
            |s| s.filter_v4.contains(&format!("{count} rules")) && s.nft_rule_events.unchecked == 0,
        );
    }
    let s = d.status().unwrap();
    let e = s.nft_rule_events;
    // Five of the nine shapes decode (a port range, an interface wildcard, conntrack and
    // RETURN do not); all nine deletions do.
    assert_eq!(
        e.decoded,
        e0.decoded + 14,
        "rule events applied from their decoding: {e:?}"
    );
    assert!(e.checks > e0.checks, "{e:?}");
    assert_eq!(
        e.mismatches, 0,
        "decoded rule events differ from the ruleset read back: {e:?} {:?}",
        s.errors
    );

    // The same policy as one nftables set (the kernel's own set type: add events included).
    apply(
        &d,
        "rules flushed",
        || {
            lab.dut
                .exec("iptables-nft", &["-F", "FORWARD"])
                .map(|_| ())
                .unwrap()
        },
        |s| s.filter_v4.starts_with("open"),
    );
    let mut elems: Vec<String> = (0..25).map(|x| format!("198.19.{x}.1")).collect();
    elems.extend((0..75).map(|x| format!("198.18.201.{x}")));
    let script = format!(
        "table inet gw {{\n set blk {{ type ipv4_addr; elements = {{ {} }} }}\n chain fw {{ type filter hook forward priority 0; policy accept;\n  ip daddr @blk drop\n }}\n}}\n",
        elems.join(", ")
    );
    let s = apply(
        &d,
        "set compiled",
        || {
            std::fs::write(
                std::env::temp_dir().join(format!("{}.nft", lab.dut.name())),
                &script,
            )
            .unwrap();
            lab.dut
                .exec(
                    "nft",
                    &[
                        "-f",
                        std::env::temp_dir()
                            .join(format!("{}.nft", lab.dut.name()))
                            .to_str()
                            .unwrap(),
                    ],
                )
                .unwrap();
        },
        |s| s.filter_v4.contains("1 rules"),
    );
    let _ = std::fs::remove_file(std::env::temp_dir().join(format!("{}.nft", lab.dut.name())));
    assert!(s.filter_v4.contains("1 rules"), "{}", s.filter_v4);
    assert!(!ping_once(&lab.src, "198.19.5.1"), "set member reachable");
    assert!(ping(&lab.src, "198.19.30.1"));
    let lpm_before = lpm_entries(&d.status().unwrap());
    apply(
        &d,
        "element added",
        || {
            lab.dut
                .exec(
                    "nft",
                    &["add", "element", "inet", "gw", "blk", "{ 198.19.30.1 }"],
                )
                .map(|_| ())
                .unwrap()
        },
        |s| lpm_entries(s) > lpm_before,
    );
    assert!(
        !ping_once(&lab.src, "198.19.30.1"),
        "added element not applied"
    );
    assert!(ping(&lab.src, "198.19.31.1"));

    // nft's own rules in the inet table (a named-set lookup, nfproto, both families) are
    // applied from their events too, and read back equal.
    let e1 = d.status().unwrap().nft_rule_events;
    let nft_rules: [&str; 3] = [
        "ip saddr 198.18.77.0/24 tcp dport 22 drop",
        "ip6 daddr fd00:77::/64 ip6 saddr != fd00:78::1 drop",
        "meta nfproto ipv4 ip saddr != @blk udp dport 9 accept",
    ];
    let mut handles = Vec::new();
    // Handled (a response recorded) and read back (nothing left unchecked).
    let settled = |before: usize| {
        move |s: &Status| s.response_count > before && s.nft_rule_events.unchecked == 0
    };
    for rule in nft_rules {
        let mut echo = String::new();
        let before = d.status().unwrap().response_count;
        apply(
            &d,
            "nft rule added and read back",
            || {
                let mut args = vec!["-e", "-a", "add", "rule", "inet", "gw", "fw"];
                args.extend(rule.split_whitespace());
                echo = lab.dut.exec("nft", &args).unwrap();
            },
            settled(before),
        );
        let handle = echo
            .split("# handle ")
            .nth(1)
            .and_then(|h| h.split_whitespace().next())
            .and_then(|h| h.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no handle in `{echo}`"));
        handles.push(handle);
    }
    for h in handles.iter().rev() {
        let before = d.status().unwrap().response_count;
        apply(
            &d,
            "nft rule deleted and read back",
            || {
                lab.dut
                    .exec(
                        "nft",
                        &[
                            "delete",
                            "rule",
                            "inet",
                            "gw",
                            "fw",
                            "handle",
                            &h.to_string(),
                        ],
                    )
                    .map(|_| ())
                    .unwrap()
            },
            settled(before),
        );
    }
    let s = d.status().unwrap();
    let e = s.nft_rule_events;
    assert_eq!(
        e.decoded,
        e1.decoded + 6,
        "nft rule events applied from their decoding: {e:?}"
    );
    assert_eq!(
        e.mismatches, 0,
        "decoded nft rule events differ from the read: {:?}",
        s.errors
    );
    assert!(
        !ping_once(&lab.src, "198.19.30.1"),
        "set member reachable after the rule edits"
    );
    assert!(ping(&lab.src, "198.19.31.1"));

    // The same once more as a kernel ipset behind iptables-nft `-m set`: polled, not evented.
    apply(
        &d,
        "nft table removed",
        || {
            lab.dut
                .exec("nft", &["delete", "table", "inet", "gw"])
                .map(|_| ())
                .unwrap()
        },
        |s| s.filter_v4.starts_with("open"),
    );
    let mut restore = String::from("create blk2 hash:ip family inet\n");
    for e in &elems {
        restore.push_str(&format!("add blk2 {e}\n"));
    }
    {
        use std::io::Write;
        let mut c = lab
            .dut
            .command("ipset")
            .arg("restore")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin
            .take()
            .unwrap()
            .write_all(restore.as_bytes())
            .unwrap();
        assert!(c.wait().unwrap().success());
    }
    let s = apply(
        &d,
        "ipset rule compiled",
        || {
            lab.dut
                .exec(
                    "iptables-nft",
                    &[
                        "-A",
                        "FORWARD",
                        "-m",
                        "set",
                        "--match-set",
                        "blk2",
                        "dst",
                        "-j",
                        "DROP",
                    ],
                )
                .map(|_| ())
                .unwrap()
        },
        |s| s.filter_v4.contains("1 rules"),
    );
    assert!(
        filtered(&s) && s.filter_v4.contains("1 rules"),
        "{}",
        s.filter_v4
    );
    let before = dropped(&s);
    assert!(!ping_once(&lab.src, "198.19.5.1"), "ipset member reachable");
    d.wait_for("dropped in the fast path", |s| dropped(s) > before);
    assert!(ping(&lab.src, "198.19.31.1"));
    let lpm_before = lpm_entries(&d.status().unwrap());
    apply(
        &d,
        "ipset add seen",
        || {
            lab.dut
                .exec("ipset", &["add", "blk2", "198.19.31.1"])
                .map(|_| ())
                .unwrap()
        },
        |s| lpm_entries(s) > lpm_before,
    );
    assert!(!ping_once(&lab.src, "198.19.31.1"), "ipset add not applied");
    let _ = lab.dut.exec("iptables-nft", &["-F", "FORWARD"]);
    let _ = lab.dut.exec("ipset", &["destroy", "blk2"]);
}

/// The kernel's counters of the `ip filter FORWARD` chain's rules in `ns`, by handle.
fn kernel_rule_counts(ns: &wirespeed_lab::Netns) -> BTreeMap<u64, (u64, u64)> {
    let mut out = BTreeMap::new();
    let json = ns
        .exec("nft", &["-j", "list", "chain", "ip", "filter", "FORWARD"])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    for item in v["nftables"].as_array().unwrap() {
        let Some(rule) = item.get("rule") else {
            continue;
        };
        for e in rule["expr"].as_array().unwrap() {
            if let Some(c) = e.get("counter") {
                out.insert(
                    rule["handle"].as_u64().unwrap(),
                    (c["packets"].as_u64().unwrap(), c["bytes"].as_u64().unwrap()),
                );
            }
        }
    }
    out
}

/// The fast path's share of the same counters (status `filter_counts`).
fn fast_rule_counts(s: &Status) -> BTreeMap<u64, (u64, u64)> {
    s.filter_counts
        .iter()
        .filter(|c| (c.rule.family.as_str(), c.rule.chain.as_str()) == ("ip", "FORWARD"))
        .map(|c| (c.rule.handle, (c.packets, c.bytes)))
        .collect()
}

fn since(
    after: &BTreeMap<u64, (u64, u64)>,
    before: &BTreeMap<u64, (u64, u64)>,
) -> BTreeMap<u64, (u64, u64)> {
    after
        .iter()
        .map(|(k, (p, b))| {
            let (p0, b0) = before.get(k).copied().unwrap_or_default();
            (*k, (p - p0, b - b0))
        })
        .collect()
}

/// The counters a user reads with `iptables -L -v` (every iptables-nft rule has one): what
/// Linux alone counts, and the kernel's count plus the fast path's with it attached (status
/// `filter_counts`), for 10 pings each to a destination a rule drops, one a rule accepts and one
/// the policy accepts. docs/FASTPATH.md, "Counters".
#[test]
fn rule_counters_add_up_to_what_linux_alone_counts() {
    let lab = line("r");
    for rule in [
        "-A FORWARD -d 198.19.3.1/32 -j DROP",
        "-A FORWARD -d 198.19.4.0/24 -j ACCEPT",
    ] {
        let args: Vec<&str> = rule.split(' ').collect();
        lab.dut.exec("iptables-nft", &args).unwrap();
    }
    let pings = || {
        for dst in ["198.19.3.1", "198.19.4.1", "198.19.5.1"] {
            let _ = lab
                .src
                .exec("ping", &["-q", "-c", "10", "-i", "0.01", "-W", "1", dst]);
        }
    };
    // Neighbours resolved on both sides, then Linux alone.
    assert!(ping(&lab.src, "198.19.4.1") && ping(&lab.src, "198.19.5.1"));
    let before = kernel_rule_counts(&lab.dut);
    pings();
    let linux = since(&kernel_rule_counts(&lab.dut), &before);
    let counted: Vec<u64> = linux.values().map(|c| c.0).collect();
    assert_eq!(counted, [10, 10], "Linux alone: {linux:?}");

    let mut d = RunningDaemon::start(&lab.dut, None);
    d.wait_for("the chain compiled", |s| {
        s.filter_v4.contains("2 rules") && s.ports.len() == 2
    });
    assert!(ping(&lab.src, "198.19.4.1") && ping(&lab.src, "198.19.5.1"));
    let (kernel_before, fast_before) = (kernel_rule_counts(&lab.dut), fast_rule_counts(&fresh(&d)));
    pings();
    let kernel = since(&kernel_rule_counts(&lab.dut), &kernel_before);
    let fast = since(&fast_rule_counts(&fresh(&d)), &fast_before);
    let sum: BTreeMap<u64, (u64, u64)> = linux
        .keys()
        .map(|k| {
            let (kp, kb) = kernel.get(k).copied().unwrap_or_default();
            let (fp, fb) = fast.get(k).copied().unwrap_or_default();
            (*k, (kp + fp, kb + fb))
        })
        .collect();
    assert_eq!(
        sum, linux,
        "the kernel counted {kernel:?}, the fast path {fast:?}"
    );
    assert!(
        fast.values().map(|c| c.0).sum::<u64>() > 0,
        "nothing judged by the fast path: {fast:?}"
    );
    d.stop();
}
