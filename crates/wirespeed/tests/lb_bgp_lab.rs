//! A load-balancer node announcing its VIP over BGP (docs/LB.md, "Several nodes: announcing
//! over BGP"), with each speaker: Debian's ExaBGP running `wirespeed lb announce` as its
//! process, and the node's own FRR (zebra, bgpd, bfdd) beside `lb announce --speaker frr`. The
//! node peers over a veth with FRR in a router namespace; the test reads the router's BGP
//! table with vtysh while the node's state changes, and times a silent node (all its traffic
//! dropped): the hold timer's 3 s with ExaBGP, BFD's 300 ms with FRR.
//!
//! Run: flock /tmp/ws-priv.lock cargo test --profile ci -p wirespeed --test lb_bgp_lab --
//! --test-threads=1 --nocapture (root; needs the exabgp, frr and nftables packages,
//! scripts/install-deps.sh).

#[allow(dead_code)]
mod lb_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lb_common::{bin, ok, output, wait_for, Procs};
use wirespeed_sys::signal::Signal;

const LB_NS: &str = "ws-bgp-lb";
const RT_NS: &str = "ws-bgp-rt";
const LB_ADDR: &str = "198.18.0.1";
const RT_ADDR: &str = "198.18.0.2";
const VIP: &str = "198.18.100.1";
const SERVICE: &str = "198.18.100.1:80";
const HOLD_DOWN: Duration = Duration::from_secs(2);
const DRAIN: Duration = Duration::from_secs(2);
/// BGP's hold time on both sides (`timers 1 3`, ExaBGP's `hold-time 3`).
const HOLD_TIME: Duration = Duration::from_secs(3);
/// The BFD profile both FRRs use: 100 ms intervals, down after 3 missed.
const BFD_PROFILE: &str = "bfd\n profile fast\n  receive-interval 100\n  transmit-interval 100\n  \
                           detect-multiplier 3\n exit\nexit\n";

/// The two namespaces and the directory of configs, sockets and logs; removed on drop, after
/// the processes (declared after this, so dropped first).
struct Site {
    dir: PathBuf,
}

impl Site {
    fn up() -> Site {
        wirespeed_lab::require_root();
        for ns in [LB_NS, RT_NS] {
            let _ = output(Command::new("ip").args(["netns", "del", ns]));
            ok(Command::new("ip").args(["netns", "add", ns]));
        }
        let ip = |ns: &str, args: &[&str]| ok(Command::new("ip").args(["-n", ns]).args(args));
        ok(Command::new("ip").args([
            "link", "add", "bgp-lb", "netns", LB_NS, "type", "veth", "peer", "name", "bgp-rt",
            "netns", RT_NS,
        ]));
        ip(
            LB_NS,
            &["addr", "add", &format!("{LB_ADDR}/30"), "dev", "bgp-lb"],
        );
        ip(
            RT_NS,
            &["addr", "add", &format!("{RT_ADDR}/30"), "dev", "bgp-rt"],
        );
        for (ns, dev) in [(LB_NS, "bgp-lb"), (RT_NS, "bgp-rt")] {
            ip(ns, &["link", "set", "lo", "up"]);
            ip(ns, &["link", "set", dev, "up"]);
        }
        // The fix `lb run` prints for a veth whose peer runs no NAPI (docs/LB.md, "Daemon").
        ok(Command::new("ip").args([
            "netns", "exec", RT_NS, "ethtool", "-K", "bgp-rt", "gro", "on",
        ]));
        let dir = std::env::temp_dir().join(format!("ws-lb-bgp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Site { dir }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("run/lb.sock")
    }

    /// The router's FRR: configs, logs and vty sockets.
    fn router(&self) -> PathBuf {
        self.dir.join("rt")
    }

    /// The node's FRR, for the FRR speaker.
    fn node_frr(&self) -> PathBuf {
        self.dir.join("lb")
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// Every log of the site, for failure messages.
    fn logs(&self) -> String {
        let mut out = String::new();
        for d in [self.dir.clone(), self.router(), self.node_frr()] {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            names.sort();
            for p in names
                .iter()
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
            {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                out += &format!("--- {}\n{text}", p.display());
            }
        }
        out
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        for ns in [LB_NS, RT_NS] {
            let _ = output(Command::new("ip").args(["netns", "del", ns]));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The router's bgpd.conf: eBGP with the node, `timers 1 3`, with BFD when `bfd`.
fn router_bgpd(bfd: bool) -> String {
    format!(
        "router bgp 65000\n bgp router-id {RT_ADDR}\n no bgp ebgp-requires-policy\n \
         neighbor {LB_ADDR} remote-as 65001\n neighbor {LB_ADDR} timers 1 3\n{}\
         address-family ipv4 unicast\n  neighbor {LB_ADDR} activate\n exit-address-family\n",
        if bfd {
            format!(" neighbor {LB_ADDR} bfd profile fast\n")
        } else {
            String::new()
        }
    )
}

/// bgpd alone (no zebra: the test reads BGP's own table), its vty socket in `dir`.
fn start_bgpd(procs: &mut Procs, ns: &str, dir: &Path, bgpd_conf: &str, listen: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let conf = dir.join("bgpd.conf");
    std::fs::write(&conf, bgpd_conf).unwrap();
    let d = dir.display().to_string();
    procs.spawn(
        "bgpd",
        ns,
        "/usr/lib/frr/bgpd",
        &[
            "-Z",
            "-S",
            "-P",
            "0",
            "-l",
            listen,
            "-f",
            &conf.display().to_string(),
            "-i",
            &format!("{d}/bgpd.pid"),
            "--vty_socket",
            &d,
        ],
        &dir.join("bgpd.log"),
    );
}

/// FRR's zebra, bfdd and bgpd in `ns`, with BFD's profile "fast". Each has its own pid file,
/// vty socket, zebra socket (-z) and bfdd control socket under `dir`, so FRRs in several
/// namespaces do not meet in /var/run/frr. They run as user frr: zebra and bfdd have no -S,
/// and as root they refuse to start, root not being in the frrvty group.
fn start_frr(procs: &mut Procs, ns: &str, dir: &Path, bgpd_conf: &str) {
    std::fs::create_dir_all(dir).unwrap();
    ok(Command::new("chown").args(["frr:frr", &dir.display().to_string()]));
    let d = dir.display().to_string();
    let zserv = format!("{d}/zserv.api");
    for (name, text) in [
        ("zebra", String::new()),
        ("bfdd", BFD_PROFILE.to_string()),
        ("bgpd", bgpd_conf.to_string()),
    ] {
        std::fs::write(dir.join(format!("{name}.conf")), text).unwrap();
    }
    let common = |name: &str| -> Vec<String> {
        [
            "-u",
            "frr",
            "-g",
            "frr",
            "-P",
            "0",
            "-f",
            &format!("{d}/{name}.conf"),
            "-i",
            &format!("{d}/{name}.pid"),
            "--vty_socket",
            &d,
            "-z",
            &zserv,
        ]
        .map(String::from)
        .to_vec()
    };
    let spawn = |procs: &mut Procs, name: &str, extra: &[&str]| {
        let mut args = common(name);
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        procs.spawn(
            name,
            ns,
            &format!("/usr/lib/frr/{name}"),
            &args,
            &dir.join(format!("{name}.log")),
        );
    };
    spawn(procs, "zebra", &[]);
    // bgpd and bfdd retry a missing zebra only after seconds: start them once it listens.
    assert!(
        wait_for(Duration::from_secs(10), || Path::new(&zserv)
            .exists()
            .then_some(()))
        .is_some(),
        "zebra in {ns} made no {zserv}: {}",
        std::fs::read_to_string(dir.join("zebra.log")).unwrap_or_default()
    );
    spawn(procs, "bfdd", &["--bfdctl", &format!("{d}/bfdd.sock")]);
    spawn(procs, "bgpd", &[]);
}

/// ExaBGP with `wirespeed lb announce` as its process, expecting the router in `peer_as` and
/// telling the process of its sessions (`neighbor-changes;`, docs/LB.md, "Doctor"); run as
/// root (its default drops to nobody, which may not open the daemon's 0600 socket), no CLI
/// pipes.
fn start_exabgp(site: &Site, procs: &mut Procs, peer_as: u32) -> u32 {
    let conf = site.dir.join("exabgp.conf");
    std::fs::write(
        &conf,
        format!(
            "process lb {{\n    run {} lb announce --socket {};\n    encoder text;\n}}\n\
             neighbor {RT_ADDR} {{\n    router-id {LB_ADDR};\n    local-address {LB_ADDR};\n    \
             local-as 65001;\n    peer-as {peer_as};\n    hold-time 3;\n    \
             family {{\n        ipv4 unicast;\n    }}\n    \
             api {{\n        processes [ lb ];\n        neighbor-changes;\n    }}\n}}\n",
            bin(),
            site.socket().display()
        ),
    )
    .unwrap();
    procs.spawn(
        "exabgp",
        LB_NS,
        "env",
        &[
            "exabgp.daemon.user=root",
            "exabgp.daemon.drop=false",
            "exabgp.api.cli=false",
            "exabgp.log.destination=stdout",
            "exabgp",
            &conf.display().to_string(),
        ],
        &site.dir.join("exabgp.log"),
    )
}

fn start_daemon(site: &Site, procs: &mut Procs) -> u32 {
    let pid = procs.spawn(
        "wirespeed lb run",
        LB_NS,
        bin(),
        &[
            "lb",
            "run",
            "--iface",
            "bgp-lb",
            "--socket",
            &site.socket().display().to_string(),
            "--announce-hold-down",
            &HOLD_DOWN.as_secs_f64().to_string(),
            "--drain",
            &DRAIN.as_secs_f64().to_string(),
        ],
        &site.dir.join("lb-run.log"),
    );
    let up = wait_for(Duration::from_secs(20), || {
        lb(site, &["-L", "-n"]).status.success().then_some(())
    });
    assert!(
        up.is_some(),
        "lb run did not answer: {}",
        site.log("lb-run.log")
    );
    pid
}

fn lb(site: &Site, args: &[&str]) -> std::process::Output {
    output(
        Command::new(bin())
            .arg("lb")
            .args(args)
            .args(["--socket", &site.socket().display().to_string()]),
    )
}

fn lb_ok(site: &Site, args: &[&str]) {
    let out = lb(site, args);
    assert!(
        out.status.success(),
        "wirespeed lb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cmd` to one FRR daemon of the instance whose vty sockets are in `dir`, its JSON answer.
fn vtysh(dir: &Path, daemon: &str, cmd: &str) -> serde_json::Value {
    let out = output(Command::new("vtysh").args([
        "--vty_socket",
        &dir.display().to_string(),
        "-d",
        daemon,
        "-c",
        cmd,
    ]));
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// Whether the router's BGP table holds a valid path to the VIP.
fn routed(site: &Site) -> bool {
    let v = vtysh(
        &site.router(),
        "bgpd",
        &format!("show bgp ipv4 unicast {VIP}/32 json"),
    );
    v["paths"]
        .as_array()
        .is_some_and(|p| p.iter().any(|p| p["valid"] == true))
}

/// Waits for the route to be (`want`) or not be there; the time it took.
fn until_routed(site: &Site, want: bool, what: &str) -> Duration {
    let t = Instant::now();
    let seen = wait_for(Duration::from_secs(15), || {
        (routed(site) == want).then_some(())
    });
    assert!(
        seen.is_some(),
        "{what}: the router's table {} {VIP}/32 after 15 s\n{}",
        if want { "lacks" } else { "still has" },
        site.logs()
    );
    t.elapsed()
}

/// Waits for the router's session with the node, and its BFD session when `bfd`.
fn until_established(site: &Site, bfd: bool) {
    let up = wait_for(Duration::from_secs(30), || {
        let v = vtysh(
            &site.router(),
            "bgpd",
            &format!("show bgp neighbors {LB_ADDR} json"),
        );
        let bgp = v[LB_ADDR]["bgpState"] == "Established";
        let bfd_up = !bfd
            || vtysh(
                &site.router(),
                "bfdd",
                &format!("show bfd peer {LB_ADDR} json"),
            )["status"]
                == "up";
        (bgp && bfd_up).then_some(())
    });
    assert!(up.is_some(), "no BGP session: {}", site.logs());
}

fn add_service(site: &Site) {
    lb_ok(site, &["-A", "-t", SERVICE]);
}

fn add_real(site: &Site) -> Instant {
    let t = Instant::now();
    lb_ok(site, &["-a", "-t", SERVICE, "-r", RT_ADDR, "-g"]);
    t
}

/// A service with no real is not announced; its first real is, after the hold-down.
fn announced_after_the_hold_down(site: &Site) {
    add_service(site);
    std::thread::sleep(HOLD_DOWN + Duration::from_millis(500));
    assert!(!routed(site), "announced a VIP that has no real");
    let added = add_real(site);
    until_routed(site, true, "a live real");
    let after = added.elapsed();
    assert!(
        after >= HOLD_DOWN,
        "announced {after:?} after the real came, before the hold-down"
    );
    println!("announced {after:.1?} after the real came (hold-down {HOLD_DOWN:?})");
}

fn withdrawn_by_drain(site: &Site) {
    let w = until_routed(site, false, {
        lb_ok(site, &["drain"]);
        "lb drain"
    });
    println!("lb drain withdrew it in {w:.1?}");
    lb_ok(site, &["drain", "--undo"]);
    until_routed(site, true, "lb drain --undo");
}

/// SIGKILL of the daemon withdraws; a new one is followed without restarting `lb announce`.
fn withdrawn_by_sigkill(site: &Site, procs: &mut Procs, daemon: u32) -> u32 {
    procs.stop(daemon, Signal::Kill);
    let w = until_routed(site, false, "SIGKILL of lb run");
    println!("SIGKILL of lb run withdrew it in {w:.1?}");
    let daemon = start_daemon(site, procs);
    add_service(site);
    add_real(site);
    until_routed(site, true, "a restarted daemon");
    daemon
}

/// Drops every packet in and out of the node, which stays up and says nothing (a hung kernel,
/// a cut link beyond a switch), and times the router's table losing the VIP. The kernel has
/// no matchall classifier or gact action, so nftables' hooks do the dropping.
fn silent_node(site: &Site) -> Duration {
    ok(Command::new("ip").args([
        "netns",
        "exec",
        LB_NS,
        "nft",
        "add table inet silent; \
         add chain inet silent in { type filter hook input priority -400; policy drop; }; \
         add chain inet silent out { type filter hook output priority -400; policy drop; }",
    ]));
    until_routed(site, false, "a silent node")
}

#[test]
fn exabgp_announces_the_vip_only_while_this_node_can_serve_it() {
    let started = Instant::now();
    let site = Site::up();
    let mut procs = Procs::default();
    start_bgpd(
        &mut procs,
        RT_NS,
        &site.router(),
        &router_bgpd(false),
        RT_ADDR,
    );
    let daemon = start_daemon(&site, &mut procs);
    start_exabgp(&site, &mut procs, 65000);
    until_established(&site, false);
    assert!(!routed(&site), "announced with no service");

    announced_after_the_hold_down(&site);
    withdrawn_by_drain(&site);

    lb_ok(&site, &["-d", "-t", SERVICE, "-r", RT_ADDR]);
    let w = until_routed(&site, false, "deleting the last real");
    println!("deleting the last real withdrew it in {w:.1?}");
    add_real(&site);
    until_routed(&site, true, "the real back");

    let daemon = withdrawn_by_sigkill(&site, &mut procs, daemon);

    let term = Instant::now();
    wirespeed_sys::process::kill(daemon, Signal::Terminate).unwrap();
    let withdrawn = wait_for(Duration::from_secs(10), || {
        (!routed(&site)).then(|| (term.elapsed(), procs.exited(daemon).is_none()))
    });
    let (w, alive) = withdrawn.expect("SIGTERM did not withdraw the VIP");
    assert!(alive, "the route went only when lb run exited: no drain");
    let exited = wait_for(Duration::from_secs(10), || procs.exited(daemon))
        .expect("lb run did not exit after its drain");
    let gone = term.elapsed();
    assert!(exited.success(), "lb run exited with {exited}");
    assert!(
        gone >= DRAIN,
        "lb run exited {gone:?} after SIGTERM, before its drain"
    );
    println!("SIGTERM: withdrawn in {w:.1?}, exited after {gone:.1?} (drain {DRAIN:?})");

    start_daemon(&site, &mut procs);
    add_service(&site);
    add_real(&site);
    until_routed(&site, true, "a daemon after SIGTERM");
    let w = silent_node(&site);
    println!(
        "silent node: withdrawn in {:.1} s (ExaBGP, no BFD: hold time {} s)",
        w.as_secs_f64(),
        HOLD_TIME.as_secs()
    );
    assert!(w < Duration::from_secs(10), "the hold timer took {w:?}");
    println!("lb_bgp_lab: {:.1} s", started.elapsed().as_secs_f64());
}

/// `lb announce --speaker frr` beside the node's FRR; the router needs nothing of us.
fn start_frr_announce(site: &Site, procs: &mut Procs) -> u32 {
    procs.spawn(
        "wirespeed lb announce --speaker frr",
        LB_NS,
        bin(),
        &[
            "lb",
            "announce",
            "--speaker",
            "frr",
            "--asn",
            "65001",
            "--vty-socket",
            &site.node_frr().display().to_string(),
            "--socket",
            &site.socket().display().to_string(),
        ],
        &site.dir.join("lb-announce.log"),
    )
}

#[test]
fn frr_announces_the_vip_and_bfd_withdraws_a_silent_node_in_under_a_second() {
    let started = Instant::now();
    let site = Site::up();
    let mut procs = Procs::default();
    start_frr(&mut procs, RT_NS, &site.router(), &router_bgpd(true));
    // bgpd announces a `network` only while zebra has a route to it: the blackhole route every
    // node has for each VIP (docs/LB.md, "Modes in a cluster").
    ok(Command::new("ip").args([
        "-n",
        LB_NS,
        "route",
        "add",
        "blackhole",
        &format!("{VIP}/32"),
    ]));
    start_frr(
        &mut procs,
        LB_NS,
        &site.node_frr(),
        &format!(
            "router bgp 65001\n bgp router-id {LB_ADDR}\n no bgp ebgp-requires-policy\n \
             neighbor {RT_ADDR} remote-as 65000\n neighbor {RT_ADDR} timers 1 3\n \
             neighbor {RT_ADDR} bfd profile fast\n"
        ),
    );
    let daemon = start_daemon(&site, &mut procs);
    let announce = start_frr_announce(&site, &mut procs);
    until_established(&site, true);
    assert!(!routed(&site), "announced with no service");

    announced_after_the_hold_down(&site);
    withdrawn_by_drain(&site);
    withdrawn_by_sigkill(&site, &mut procs, daemon);

    // A SIGKILL'd lb announce leaves its network in bgpd; the next one removes it, since the
    // daemon no longer wants it, and a SIGTERM'd one withdraws before it exits.
    procs.stop(announce, Signal::Kill);
    lb_ok(&site, &["-d", "-t", SERVICE, "-r", RT_ADDR]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(routed(&site), "withdrawn with no lb announce");
    let announce = start_frr_announce(&site, &mut procs);
    let w = until_routed(&site, false, "a restarted lb announce");
    println!("a restarted lb announce withdrew the stale network in {w:.1?}");
    add_real(&site);
    until_routed(&site, true, "the real back");
    let term = Instant::now();
    procs.stop(announce, Signal::Terminate);
    until_routed(&site, false, "SIGTERM of lb announce");
    println!(
        "SIGTERM of lb announce withdrew it in {:.1?}",
        term.elapsed()
    );
    start_frr_announce(&site, &mut procs);
    until_routed(&site, true, "lb announce back");

    let w = silent_node(&site);
    println!(
        "silent node: withdrawn in {:.1} s (FRR, BFD 100 ms x3; hold time {} s)",
        w.as_secs_f64(),
        HOLD_TIME.as_secs()
    );
    assert!(
        w < Duration::from_secs(2),
        "BFD took {w:?} to withdraw a silent node, no better than the hold timer"
    );
    println!("lb_bgp_lab (FRR): {:.1} s", started.elapsed().as_secs_f64());
}

/// `lb doctor` where the daemon runs: its exit status and lines.
fn doctor(site: &Site) -> (Option<i32>, String) {
    let out = output(Command::new("ip").args([
        "netns",
        "exec",
        LB_NS,
        bin(),
        "lb",
        "doctor",
        "--socket",
        &site.socket().display().to_string(),
    ]));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// Waits for doctor's line about the session to the router to contain `want` (or, with
/// `None`, for there to be none); doctor's last output.
fn until_doctor_says(site: &Site, want: Option<&str>) -> (Option<i32>, String) {
    let mut last = (None, String::new());
    let seen = wait_for(Duration::from_secs(15), || {
        last = doctor(site);
        let line = last
            .1
            .lines()
            .find(|l| l.contains(&format!("BGP session to {RT_ADDR}")));
        match (want, line) {
            (Some(w), Some(l)) => l.contains(w).then_some(()),
            (None, None) => Some(()),
            _ => None,
        }
    });
    assert!(
        seen.is_some(),
        "doctor never said {want:?} of the session; it said:\n{}\nexabgp: {}\nbgpd: {}",
        last.1,
        site.log("exabgp.log"),
        site.logs()
    );
    last
}

#[test]
fn doctor_names_a_bgp_session_that_a_wrong_asn_keeps_down() {
    let started = Instant::now();
    let site = Site::up();
    let mut procs = Procs::default();
    start_bgpd(
        &mut procs,
        RT_NS,
        &site.router(),
        &router_bgpd(false),
        RT_ADDR,
    );
    start_daemon(&site, &mut procs);

    // ExaBGP expects the router in AS 65099; the router's OPEN says 65000.
    let exabgp = start_exabgp(&site, &mut procs, 65099);
    let (code, text) =
        until_doctor_says(&site, Some("ExaBGP sent OPEN message error, bad peer AS"));
    print!("a wrong peer-as, doctor says:\n{text}");
    assert_eq!(code, Some(1));
    assert!(
        text.contains("set peer-as in exabgp.conf's neighbor"),
        "{text}"
    );

    // The right ASN: the session comes up and the line goes.
    procs.stop(exabgp, Signal::Terminate);
    start_exabgp(&site, &mut procs, 65000);
    let established = wait_for(Duration::from_secs(15), || {
        let v = vtysh(
            &site.router(),
            "bgpd",
            &format!("show bgp neighbors {LB_ADDR} json"),
        );
        (v[LB_ADDR]["bgpState"] == "Established").then_some(())
    });
    assert!(established.is_some(), "{}", site.log("exabgp.log"));
    let (code, text) = until_doctor_says(&site, None);
    print!("the right peer-as, doctor says:\n{text}");
    assert_eq!(code, Some(0), "{text}");
    let listed = lb(&site, &["-L", "-n", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    println!("-L --json's bgp: {}", listed["bgp"]);
    assert_eq!(listed["bgp"]["sessions"][0]["state"], "up", "{listed}");

    // The router expects this node in another AS: it is the one to send the notification.
    let vtysh_conf = output(Command::new("vtysh").args([
        "--vty_socket",
        &site.router().display().to_string(),
        "-d",
        "bgpd",
        "-c",
        "configure terminal",
        "-c",
        "router bgp 65000",
        "-c",
        &format!("neighbor {LB_ADDR} remote-as 65002"),
    ]));
    assert!(vtysh_conf.status.success(), "{vtysh_conf:?}");
    let (code, text) = until_doctor_says(
        &site,
        Some("the router sent OPEN message error, bad peer AS"),
    );
    print!("a wrong remote-as on the router, doctor says:\n{text}");
    assert_eq!(code, Some(1));
    assert!(
        text.contains("set local-as in exabgp.conf's neighbor"),
        "{text}"
    );
    println!(
        "lb_bgp_lab (doctor): {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
