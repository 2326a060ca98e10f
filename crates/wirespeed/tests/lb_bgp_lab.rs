//! A load-balancer node announcing its VIP over BGP (docs/LB.md, "Several nodes: announcing
//! over BGP"): Debian's ExaBGP runs `wirespeed lb announce` as its process in an lb namespace
//! and peers over a veth with FRR's bgpd in a router namespace; the test reads the router's
//! BGP table with vtysh while the node's state changes.
//!
//! Run: flock /tmp/ws-priv.lock cargo test --profile ci -p wirespeed --test lb_bgp_lab --
//! --test-threads=1 (root; needs the exabgp and frr packages, scripts/install-deps.sh).

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

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
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

/// bgpd alone (no zebra: the test reads BGP's own table), its vty socket in the site's dir.
fn start_router(site: &Site, procs: &mut Procs) {
    let conf = site.dir.join("bgpd.conf");
    std::fs::write(
        &conf,
        format!(
            "router bgp 65000\n bgp router-id {RT_ADDR}\n no bgp ebgp-requires-policy\n \
             neighbor {LB_ADDR} remote-as 65001\n address-family ipv4 unicast\n  \
             neighbor {LB_ADDR} activate\n exit-address-family\n"
        ),
    )
    .unwrap();
    let d = site.dir.display().to_string();
    procs.spawn(
        "bgpd",
        RT_NS,
        "/usr/lib/frr/bgpd",
        &[
            "-Z",
            "-S",
            "-P",
            "0",
            "-l",
            RT_ADDR,
            "-f",
            &conf.display().to_string(),
            "-i",
            &format!("{d}/bgpd.pid"),
            "--vty_socket",
            &d,
        ],
        &site.dir.join("bgpd.log"),
    );
}

/// ExaBGP with `wirespeed lb announce` as its process; run as root (its default drops to
/// nobody, which may not open the daemon's 0600 socket), no CLI pipes.
fn start_exabgp(site: &Site, procs: &mut Procs) {
    let conf = site.dir.join("exabgp.conf");
    std::fs::write(
        &conf,
        format!(
            "process lb {{\n    run {} lb announce --socket {};\n    encoder text;\n}}\n\
             neighbor {RT_ADDR} {{\n    router-id {LB_ADDR};\n    local-address {LB_ADDR};\n    \
             local-as 65001;\n    peer-as 65000;\n    family {{\n        ipv4 unicast;\n    }}\n    \
             api {{\n        processes [ lb ];\n    }}\n}}\n",
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
    );
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

fn vtysh(dir: &Path, cmd: &str) -> serde_json::Value {
    let out = output(Command::new("vtysh").args([
        "--vty_socket",
        &dir.display().to_string(),
        "-d",
        "bgpd",
        "-c",
        cmd,
    ]));
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// Whether the router's BGP table holds a valid path to the VIP.
fn routed(site: &Site) -> bool {
    let v = vtysh(&site.dir, &format!("show bgp ipv4 unicast {VIP}/32 json"));
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
        "{what}: the router's table {} {VIP}/32 after 15 s\nexabgp: {}\nlb run: {}",
        if want { "lacks" } else { "still has" },
        site.log("exabgp.log"),
        site.log("lb-run.log")
    );
    t.elapsed()
}

fn add_service(site: &Site) {
    lb_ok(site, &["-A", "-t", SERVICE]);
}

fn add_real(site: &Site) -> Instant {
    let t = Instant::now();
    lb_ok(site, &["-a", "-t", SERVICE, "-r", RT_ADDR, "-g"]);
    t
}

#[test]
fn exabgp_announces_the_vip_only_while_this_node_can_serve_it() {
    let started = Instant::now();
    let site = Site::up();
    let mut procs = Procs::default();
    start_router(&site, &mut procs);
    let daemon = start_daemon(&site, &mut procs);
    start_exabgp(&site, &mut procs);
    let established = wait_for(Duration::from_secs(20), || {
        let v = vtysh(&site.dir, &format!("show bgp neighbors {LB_ADDR} json"));
        (v[LB_ADDR]["bgpState"] == "Established").then_some(())
    });
    assert!(
        established.is_some(),
        "no BGP session: {}\n{}",
        site.log("exabgp.log"),
        site.log("bgpd.log")
    );
    assert!(!routed(&site), "announced with no service");

    // A service without a real is not announced; its first real is, after the hold-down.
    add_service(&site);
    std::thread::sleep(HOLD_DOWN + Duration::from_millis(500));
    assert!(!routed(&site), "announced a VIP that has no real");
    let added = add_real(&site);
    until_routed(&site, true, "a live real");
    let after = added.elapsed();
    assert!(
        after >= HOLD_DOWN,
        "announced {after:?} after the real came, before the hold-down"
    );
    println!("announced {after:.1?} after the real came (hold-down {HOLD_DOWN:?})");

    let w = until_routed(&site, false, {
        lb_ok(&site, &["drain"]);
        "lb drain"
    });
    println!("lb drain withdrew it in {w:.1?}");
    lb_ok(&site, &["drain", "--undo"]);
    until_routed(&site, true, "lb drain --undo");

    lb_ok(&site, &["-d", "-t", SERVICE, "-r", RT_ADDR]);
    let w = until_routed(&site, false, "deleting the last real");
    println!("deleting the last real withdrew it in {w:.1?}");
    add_real(&site);
    until_routed(&site, true, "the real back");

    procs.stop(daemon, Signal::Kill);
    let w = until_routed(&site, false, "SIGKILL of lb run");
    println!("SIGKILL of lb run withdrew it in {w:.1?}");

    // A new daemon: lb announce reconnects by itself and announces what it now may.
    let daemon = start_daemon(&site, &mut procs);
    add_service(&site);
    add_real(&site);
    until_routed(&site, true, "a restarted daemon");

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
    println!("lb_bgp_lab: {:.1} s", started.elapsed().as_secs_f64());
}
