use super::*;
use crate::listing::{format_save, ListView, Rates, RealView, ServiceView};
use crate::model::{Counters, Health};
use crate::table::Table;

fn p(s: &str) -> Result<Command> {
    let words: Vec<&str> = s.split_whitespace().collect();
    parse_args(&words)
}

fn key(proto: Proto, s: &str) -> ServiceKey {
    ServiceKey {
        proto,
        vip: s.parse().unwrap(),
    }
}

#[test]
fn service_commands_short_and_long() {
    let k = key(Proto::Tcp, "198.18.0.10:80");
    for line in [
        "-A -t 198.18.0.10:80 -s rr",
        "--add-service --tcp-service 198.18.0.10:80 --scheduler rr",
        "--add-service --tcp-service=198.18.0.10:80 --scheduler=rr",
    ] {
        assert_eq!(
            p(line).unwrap(),
            Command::AddService(ServiceSpec {
                key: k,
                scheduler: Some(Scheduler::Rr),
                check: None,
                no_check: false,
                no_toa: false,
            }),
            "{line}"
        );
    }
    let Command::EditService(s) = p("-E -u [fd00::10]:53 --no-toa").unwrap() else {
        panic!()
    };
    assert_eq!(s.key, key(Proto::Udp, "[fd00::10]:53"));
    assert!(s.no_toa && s.scheduler.is_none());
    assert_eq!(p("-D -t 198.18.0.10:80").unwrap(), Command::DelService(k));
    assert_eq!(
        p("--delete-service -t 198.18.0.10:80").unwrap(),
        Command::DelService(k)
    );
}

#[test]
fn real_commands_and_forwarding_methods() {
    let k = key(Proto::Tcp, "198.18.0.10:80");
    let cases = [
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1",
            "198.18.1.1:0",
            None,
            None,
        ),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1:8080 -g -w 3",
            "198.18.1.1:8080",
            Some(Mode::Dr),
            Some(3),
        ),
        (
            "--add-server -t 198.18.0.10:80 --real-server 198.18.1.1 --ipip --weight 0",
            "198.18.1.1:0",
            Some(Mode::Tunnel),
            Some(0),
        ),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 --masquerading",
            "198.18.1.1:0",
            Some(Mode::Nat),
            None,
        ),
        (
            "-a -t 198.18.0.10:80 -r [fd00::1]:80 -b",
            "[fd00::1]:80",
            Some(Mode::FullNat),
            None,
        ),
        (
            "-a -t 198.18.0.10:80 -r fd00::1 --fullnat",
            "[fd00::1]:0",
            Some(Mode::FullNat),
            None,
        ),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 -m",
            "198.18.1.1:0",
            Some(Mode::Nat),
            None,
        ),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 -i",
            "198.18.1.1:0",
            Some(Mode::Tunnel),
            None,
        ),
    ];
    for (line, addr, mode, weight) in cases {
        assert_eq!(
            p(line).unwrap(),
            Command::AddReal {
                service: k,
                real: RealSpec {
                    addr: addr.parse().unwrap(),
                    mode,
                    weight,
                    tunnel: TunnelSpec::default(),
                }
            },
            "{line}"
        );
    }
    assert!(matches!(
        p("-e -t 198.18.0.10:80 -r 198.18.1.1 -w 0").unwrap(),
        Command::EditReal {
            real: RealSpec {
                weight: Some(0),
                ..
            },
            ..
        }
    ));
    assert_eq!(
        p("-d -t 198.18.0.10:80 -r 198.18.1.1:80").unwrap(),
        Command::DelReal {
            service: k,
            addr: "198.18.1.1:80".parse().unwrap()
        }
    );
}

#[test]
fn list_zero_clear_and_laddr() {
    assert_eq!(p("-L -n").unwrap(), Command::List(ListOptions::default()));
    assert_eq!(p("-Ln").unwrap(), Command::List(ListOptions::default()));
    assert_eq!(p("-ln").unwrap(), Command::List(ListOptions::default()));
    assert_eq!(
        p("--list --numeric --stats --exact --json -t 198.18.0.10:80").unwrap(),
        Command::List(ListOptions {
            stats: true,
            rate: false,
            exact: true,
            json: true,
            service: Some(key(Proto::Tcp, "198.18.0.10:80")),
        })
    );
    assert!(matches!(
        p("-L -n --rate").unwrap(),
        Command::List(ListOptions { rate: true, .. })
    ));
    assert_eq!(p("-Z").unwrap(), Command::Zero(None));
    assert_eq!(
        p("--zero -u 198.18.0.10:53").unwrap(),
        Command::Zero(Some(key(Proto::Udp, "198.18.0.10:53")))
    );
    assert_eq!(p("-C").unwrap(), Command::Clear);
    assert_eq!(p("--clear").unwrap(), Command::Clear);
    assert_eq!(
        p("--add-laddr -z 198.18.0.100 -t 198.18.0.10:80").unwrap(),
        Command::AddLaddr {
            service: key(Proto::Tcp, "198.18.0.10:80"),
            addr: "198.18.0.100".parse().unwrap()
        }
    );
    assert_eq!(
        p("--del-laddr -z [fd00::100] -t [fd00::10]:80").unwrap(),
        Command::DelLaddr {
            service: key(Proto::Tcp, "[fd00::10]:80"),
            addr: "fd00::100".parse().unwrap()
        }
    );
}

#[test]
fn health_check_extension() {
    let Command::AddService(s) = p(
        "-A -t 198.18.0.10:80 --check http:/health --check-interval 500ms --check-timeout 200ms --rise 1 --fall 2",
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        s.check,
        Some(HealthCheck {
            kind: CheckKind::Http {
                path: "/health".into()
            },
            interval: Duration::from_millis(500),
            timeout: Duration::from_millis(200),
            rise: 1,
            fall: 2,
        })
    );
    let Command::AddService(s) = p("-A -t 198.18.0.10:6379 --check redis").unwrap() else {
        panic!()
    };
    let c = s.check.unwrap();
    assert_eq!(c.kind, CheckKind::Redis);
    assert_eq!(
        (c.interval, c.timeout, c.rise, c.fall),
        (
            DEFAULT_CHECK_INTERVAL,
            DEFAULT_CHECK_TIMEOUT,
            DEFAULT_RISE,
            DEFAULT_FALL
        )
    );
    let Command::EditService(s) = p("-E -t 198.18.0.10:80 --no-check").unwrap() else {
        panic!()
    };
    assert!(s.no_check && s.check.is_none());
    assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
    assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
    for d in ["1m", "2s", "250ms"] {
        assert_eq!(format_duration(parse_duration(d).unwrap()), d);
    }
}

#[test]
fn gue_tunnel_options_in_ipvsadms_spelling() {
    let real = |line: &str| match p(line).unwrap() {
        Command::AddReal { real, .. } | Command::EditReal { real, .. } => real,
        other => panic!("{line}: {other:?}"),
    };
    let r = real("-a -t 198.18.0.10:80 -r 198.18.1.1 -i --tun-type gue --tun-port 6080");
    assert_eq!(r.mode, Some(Mode::Tunnel));
    assert_eq!(
        r.tunnel,
        TunnelSpec {
            kind: Some(TunnelKind::Gue),
            port: Some(6080),
            csum: None
        }
    );
    let r = real(
        "-a -t 198.18.0.10:80 -r 198.18.1.1 --ipip --tun-type=gue --tun-port=7000 --tun-nocsum",
    );
    assert_eq!(
        r.tunnel,
        TunnelSpec {
            kind: Some(TunnelKind::Gue),
            port: Some(7000),
            csum: Some(false)
        }
    );
    let r = real("-e -t 198.18.0.10:80 -r 198.18.1.1 --tun-csum");
    assert_eq!(r.tunnel.csum, Some(true));
    assert_eq!(r.tunnel.kind, None);
    let r = real("-a -t 198.18.0.10:80 -r 198.18.1.1 -i --tun-type ipip");
    assert_eq!(r.tunnel.kind, Some(TunnelKind::Ipip));
    let r = real("-a -t 198.18.0.10:80 -r 198.18.1.1 -i");
    assert!(!r.tunnel.is_given());
}

#[test]
fn bad_input_gives_one_line_errors() {
    let cases = [
        ("", "no command given"),
        ("-A", "-A needs -t|-u VIP:PORT"),
        ("-A -t 198.18.0.10", "is not VIP:PORT"),
        ("-A -t 198.18.0.10:0", "1-65535"),
        ("-A -t 198.18.0.10:70000", "is not VIP:PORT"),
        ("-A -t 198.18.0.10:80 -s wlc", "not one of mh, rr, wrr"),
        ("-A -a -t 198.18.0.10:80", "more than one command"),
        ("-a -t 198.18.0.10:80", "needs -r RIP[:PORT]"),
        ("-a -t 198.18.0.10:80 -r 198.18.1.1 -w 65536", "0-65535"),
        ("-a -t 198.18.0.10:80 -r 198.18.1.1 -w -1", "0-65535"),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 -g -m",
            "two forwarding methods",
        ),
        ("-a -t 198.18.0.10:80 -r 198.18.1.1:0", "port 0"),
        ("-a -t 198.18.0.10:80 -r host.example", "is not RIP[:PORT]"),
        ("-A -t 198.18.0.10:80 -r 198.18.1.1", "do not go with -A"),
        ("-L --stats --rate", "two listings"),
        ("-L -s mh", "do not go with -L"),
        ("-A -t 198.18.0.10:80 --rise 2", "need --check"),
        ("-A -t 198.18.0.10:80 --check icmp", "not one of tcp"),
        (
            "-A -t 198.18.0.10:80 --check tcp --check-interval 1s --check-timeout 2s",
            "longer than",
        ),
        (
            "-A -t 198.18.0.10:80 --check tcp --check-interval 0s",
            "more than zero",
        ),
        ("-A -t 198.18.0.10:80 --check tcp --fall 0", "1-1000"),
        ("--add-laddr -t 198.18.0.10:80", "needs -z ADDR"),
        ("--add-laddr -z nope -t 198.18.0.10:80", "not an IP address"),
        ("-C -t 198.18.0.10:80", "takes no service"),
        ("-L --bogus", "unknown option `--bogus`"),
        ("-A -t", "-t needs VIP:PORT"),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 -i --tun-type gre",
            "give ipip (the default) or gue",
        ),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 -i --tun-type gue --tun-port 0",
            "1-65535",
        ),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 -i --tun-type gue --tun-port x",
            "1-65535",
        ),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 -i --tun-csum --tun-nocsum",
            "contradict",
        ),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 -i --tun-remcsum",
            "not built",
        ),
        (
            "-a -t 198.18.0.10:80 -r 198.18.1.1 -i --tun-type",
            "needs ipip or gue",
        ),
        ("-A -t 198.18.0.10:80 --tun-type gue", "do not go with -A"),
        (
            "-d -t 198.18.0.10:80 -r 198.18.1.1 --tun-port 6080",
            "do not go with -d",
        ),
    ];
    for (line, want) in cases {
        let e = p(line).expect_err(line).to_string();
        assert!(e.contains(want), "{line}: {e}");
        assert!(!e.contains('\n'), "{line}: {e}");
    }
}

#[test]
fn random_argv_never_panics() {
    let words = [
        "-A",
        "-E",
        "-D",
        "-a",
        "-e",
        "-d",
        "-L",
        "-Z",
        "-C",
        "-t",
        "-u",
        "-s",
        "-r",
        "-w",
        "-g",
        "-i",
        "-m",
        "-b",
        "-n",
        "-z",
        "--stats",
        "--rate",
        "--json",
        "--check",
        "--rise",
        "--fall",
        "--check-interval",
        "198.18.0.10:80",
        "[fd00::1]:80",
        "198.18.1.1",
        "mh",
        "wrr",
        "7",
        "0",
        "-1",
        "70000",
        "tcp",
        "http:/x",
        "redis",
        "1s",
        "",
        "-",
        "--",
        "-Lnx",
        "--x=y",
        "[",
        "]:80",
        "::",
        "-Ln",
        "--add-laddr",
        "--tcp-service=1.2.3.4:5",
        "é",
        "--no-toa",
    ];
    // A small xorshift: deterministic, so a failure reproduces.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = (x % 8) as usize;
        let argv: Vec<&str> = (0..n)
            .map(|i| words[((x >> (i * 7)) % words.len() as u64) as usize])
            .collect();
        if let Err(e) = parse_args(&argv) {
            assert!(!e.to_string().contains('\n'), "{argv:?}: {e}");
        }
    }
}

/// A listing built from a table, as the daemon sends it (no counters).
fn view_of(table: &Table) -> ListView {
    ListView {
        ring_size: 65537,
        services: table
            .services
            .iter()
            .map(|s| ServiceView {
                key: s.key,
                scheduler: s.scheduler,
                ring_size: 0,
                table_digest: String::new(),
                laddrs: s.laddrs.clone(),
                toa: s.toa,
                check: s.check.clone(),
                stats: Counters::default(),
                rate: Rates::default(),
                reals: s
                    .reals
                    .iter()
                    .map(|r| RealView {
                        addr: r.addr,
                        mode: r.mode,
                        tunnel: (r.mode == Mode::Tunnel).then_some(r.tunnel),
                        weight: r.weight,
                        health: Health::Unchecked,
                        active_conns: 0,
                        inact_conns: 0,
                        stats: Counters::default(),
                        rate: Rates::default(),
                    })
                    .collect(),
            })
            .collect(),
        warnings: vec![],
        ifaces: vec![],
        announcing: false,
        bgp: None,
    }
}

fn apply(table: &mut Table, cmd: &Command) {
    match cmd {
        Command::AddService(s) => table.add_service(s).unwrap(),
        Command::AddReal { service, real } => {
            table.add_real(service, real).unwrap();
        }
        Command::AddLaddr { service, addr } => table.add_laddr(service, *addr).unwrap(),
        other => panic!("not in a save: {other:?}"),
    }
}

const SAVED: &str = "\
-A -t 198.18.0.10:6379 -s mh --check redis --check-interval 2s --check-timeout 1s --rise 2 --fall 3
-a -t 198.18.0.10:6379 -r 198.18.100.1:6379 -g -w 1
-a -t 198.18.0.10:6379 -r 198.18.100.2:6379 -g -w 2
-A -t 198.18.0.11:80 -s wrr --check http:/health --check-interval 500ms --check-timeout 200ms --rise 1 --fall 2 --no-toa
--add-laddr -z 198.18.0.100 -t 198.18.0.11:80
--add-laddr -z fd00::100 -t 198.18.0.11:80
-a -t 198.18.0.11:80 -r 198.18.100.3:8080 -b -w 0
-a -t 198.18.0.11:80 -r 198.18.100.5:80 -b -w 5
-A -u [fd00::10]:53 -s rr
-a -u [fd00::10]:53 -r 198.18.100.4:53 -i -w 1
-a -u [fd00::10]:53 -r [fd00::5]:53 -m -w 1
-a -u [fd00::10]:53 -r [fd00::6]:53 -i -w 1 --tun-type gue --tun-port 6080 --tun-csum
-A -t 198.18.0.12:80 -s mh
-a -t 198.18.0.12:80 -r 198.18.100.6:80 -i -w 1 --tun-type gue --tun-port 6081 --tun-nocsum
-a -t 198.18.0.12:80 -r 198.18.100.7:80 -i -w 2 --tun-type gue --tun-port 6080 --tun-csum
";

#[test]
fn save_restore_save_round_trips() {
    let mut table = Table::default();
    for (_, cmd) in parse_restore(SAVED).unwrap() {
        apply(&mut table, &cmd);
    }
    let saved = format_save(&view_of(&table));
    assert_eq!(saved, SAVED);
    let mut again = Table::default();
    for (_, cmd) in parse_restore(&saved).unwrap() {
        apply(&mut again, &cmd);
    }
    assert_eq!(again, table);
}

#[test]
fn restore_skips_comments_and_names_the_bad_line() {
    let text = "# saved by hand\n\n-A -t 198.18.0.10:80 -s mh\n  \n-a -t 198.18.0.10:80 -r 198.18.1.1 -x\n";
    let e = parse_restore(text).unwrap_err().to_string();
    assert!(e.starts_with("line 5: unknown option `-x`"), "{e}");
    let e = parse_restore("-A -t 198.18.0.10:80\n-L -n\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("line 2:"), "{e}");
    let ok = parse_restore("# x\n-A -t 198.18.0.10:80\n").unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].0, 2);
}

#[test]
fn a_gue_real_lists_as_tunnel_and_its_json_names_type_and_port() {
    let mut table = Table::default();
    let text = "-A -t 198.18.0.12:80 -s mh
-a -t 198.18.0.12:80 -r 198.18.100.6:80 -i -w 1 --tun-type gue --tun-port 6081
-a -t 198.18.0.12:80 -r 198.18.100.7:80 -i -w 1
-a -t 198.18.0.12:80 -r 198.18.100.8:80 -g -w 1
";
    for (_, cmd) in parse_restore(text).unwrap() {
        apply(&mut table, &cmd);
    }
    let view = view_of(&table);
    let listed = crate::listing::format_list(&view, &ListOptions::default());
    assert!(
        listed.contains("  -> 198.18.100.6:80              Tunnel  1 "),
        "{listed}"
    );
    let json: serde_json::Value = serde_json::to_value(&view).unwrap();
    let reals = &json["services"][0]["reals"];
    assert_eq!(
        reals[0]["tunnel"],
        serde_json::json!({"type": "gue", "port": 6081, "csum": false})
    );
    assert_eq!(reals[1]["tunnel"], serde_json::json!({"type": "ipip"}));
    assert!(reals[2].get("tunnel").is_none(), "{}", reals[2]);
}
