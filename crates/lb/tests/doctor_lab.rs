//! `wirespeed lb doctor` in a lab: a load balancer and a real server in two namespaces joined
//! by a veth, set up with plain `ip` commands. A real with nothing set up gives the expected
//! lines; after running the commands they print, the real gives none. On the load balancer,
//! the daemon's own neighbour refresh resolves what doctor said was missing.
//!
//! Needs root; run under the lab lock:
//! `flock /tmp/ws-priv.lock cargo test --profile ci -p wirespeed-lb --test doctor_lab -- --test-threads=1`

use std::net::IpAddr;

use wirespeed_lab::netns::{add_addr, Netns, Veth};
use wirespeed_lab::require_root;
use wirespeed_lb::control::{Reply, Request};
use wirespeed_lb::daemon::{refresh_neighbours, Daemon};
use wirespeed_lb::doctor::{check_lb, check_real, Host, Problem, RealModes};
use wirespeed_lb::ipvsadm::parse_args;
use wirespeed_lb::model::{DataPlane, Plan, Stats};

struct Lab {
    lb: Netns,
    real: Netns,
    _veth: Veth,
}

fn lab(tag: &str) -> Lab {
    require_root();
    let lb = Netns::create(&format!("ws-dr{tag}-lb")).unwrap();
    let real = Netns::create(&format!("ws-dr{tag}-r")).unwrap();
    let veth = Veth::create(&lb, "lbc0", &real, "eth0", 1).unwrap();
    add_addr(&lb, "lbc0", "198.18.60.1/24").unwrap();
    add_addr(&real, "eth0", "198.18.60.2/24").unwrap();
    Lab {
        lb,
        real,
        _veth: veth,
    }
}

fn run_fix(p: &Problem) {
    let out = std::process::Command::new("sh")
        .args(["-c", &p.fix])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        p.fix,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn lines(ps: &[Problem]) -> Vec<String> {
    ps.iter().map(|p| p.to_string()).collect()
}

#[test]
fn a_bare_dr_real_gets_its_fixes_and_then_none() {
    let lab = lab("a");
    let ns = lab.real.name().to_string();
    // A distribution's strict default, which DR and tunnel reals must relax.
    lab.real.sysctl("net.ipv4.conf.all.rp_filter", "1").unwrap();
    lab.real
        .sysctl("net.ipv4.conf.eth0.rp_filter", "1")
        .unwrap();
    let vip: IpAddr = "198.18.60.100".parse().unwrap();
    let host = Host {
        netns: Some(ns.clone()),
    };
    let dr = RealModes {
        dr: true,
        tunnel: false,
    };
    let found = check_real(&[vip], dr, &host);
    let x = format!("ip netns exec {ns}");
    let want = vec![
        format!("VIP 198.18.60.100 is not on lo, so the real drops its packets: {x} ip addr add 198.18.60.100/32 dev lo"),
        format!("arp_ignore is below 1 on eth0 (DR: the real must not answer ARP for the VIP): {x} sysctl -w net.ipv4.conf.all.arp_ignore=1"),
        format!("arp_announce is below 2 on eth0 (DR: the real must not announce the VIP): {x} sysctl -w net.ipv4.conf.all.arp_announce=2"),
        format!("rp_filter is strict on lo (all=1, lo=0; the kernel uses the larger): {x} sysctl -w net.ipv4.conf.all.rp_filter=0"),
        format!("rp_filter is strict on eth0 (all=1, eth0=1; the kernel uses the larger): {x} sysctl -w net.ipv4.conf.all.rp_filter=0; {x} sysctl -w net.ipv4.conf.eth0.rp_filter=0"),
    ];
    assert_eq!(lines(&found), want);
    for p in &found {
        run_fix(p);
    }
    assert_eq!(check_real(&[vip], dr, &host), vec![]);

    // Tunnel mode also needs the decapsulation device. This lab's kernel may lack ipip, so
    // the test checks the line, not its fix.
    let tunnel = RealModes {
        dr: false,
        tunnel: true,
    };
    let tunl0_up = lab
        .real
        .ip(&["-j", "link", "show", "tunl0"])
        .is_ok_and(|s| s.contains("\"UP\""));
    let found = lines(&check_real(&[vip], tunnel, &host));
    // Without the module (this lab's kernel, many container hosts) the fix is our XDP
    // decapsulator; crates/wirespeed/tests/lb_tunnel.rs runs it.
    if !tunl0_up {
        let want = if wirespeed_lb::doctor::kernel_has_module("ipip") {
            format!("tunl0 is not up, so IPIP packets to the VIP are not decapsulated: {x} modprobe ipip; {x} ip link set tunl0 up")
        } else {
            format!("no tunl0 (this kernel has no ipip module) and no decap program on the ingress, so tunnelled packets to the VIP are not decapsulated: {x} wirespeed lb decap --iface eth0 --vip 198.18.60.100")
        };
        assert!(found.contains(&want), "{found:?}");
    }
    // Replies advertise the device's MSS (1460) unless the route lowers it for the tunnel.
    lab.real
        .ip(&[
            "route",
            "add",
            "default",
            "via",
            "198.18.60.1",
            "dev",
            "eth0",
        ])
        .unwrap();
    let mss = format!("replies via eth0 advertise MSS 1460, but a tunnelled segment fits 1440 (20-byte outer header on MTU 1500): {x} ip route change default via 198.18.60.1 dev eth0 advmss 1440");
    let found = check_real(&[vip], tunnel, &host);
    let p = found
        .iter()
        .find(|p| p.to_string() == mss)
        .unwrap_or_else(|| panic!("{:?}", lines(&found)));
    run_fix(p);
    assert!(!lines(&check_real(&[vip], tunnel, &host)).contains(&mss));
    // A v6 VIP on a real with no global IPv6 address arrives over 6in4 (sit0).
    let v6vip: IpAddr = "fd00::60:100".parse().unwrap();
    let found = lines(&check_real(&[v6vip], tunnel, &host));
    assert!(
        found.contains(&format!(
            "VIP fd00::60:100 is not on lo, so the real drops its packets: {x} ip addr add fd00::60:100/128 dev lo"
        )),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|l| l.starts_with("sit0 is not up") || l.starts_with("no sit0")),
        "{found:?}"
    );
}

struct NoDataPath;

impl DataPlane for NoDataPath {
    fn apply(&mut self, _: &Plan) -> wirespeed_lb::Result<()> {
        Ok(())
    }
    fn stats(&self) -> wirespeed_lb::Result<Stats> {
        Ok(Stats::default())
    }
    fn zero(&mut self) -> wirespeed_lb::Result<()> {
        Ok(())
    }
}

#[test]
fn the_lb_side_finds_missing_neighbours_gateways_and_laddrs() {
    let lab = lab("b");
    let ns = lab.lb.name().to_string();
    lab.lb
        .ip(&["route", "add", "198.18.61.0/24", "via", "198.18.60.2"])
        .unwrap();
    let mut d = Daemon::new(NoDataPath, 251).unwrap();
    for line in [
        "-A -t 198.18.0.10:80",
        "-a -t 198.18.0.10:80 -r 198.18.60.2 -g",
        "-a -t 198.18.0.10:80 -r 198.18.61.5 -g",
        "-A -t 198.18.0.11:80",
        "-a -t 198.18.0.11:80 -r 198.18.60.2 -b",
    ] {
        let words: Vec<&str> = line.split_whitespace().collect();
        let r = d.handle(Request::Command(parse_args(&words).unwrap()));
        assert!(matches!(r, Reply::Done { .. }), "{line}: {r:?}");
    }
    let view = d.view().unwrap();
    let host = Host {
        netns: Some(ns.clone()),
    };
    let found = lines(&check_lb(&view, &host));
    let want = vec![
        "TCP 198.18.0.11:80: full-NAT reals need an IPv4 local address before they get traffic: wirespeed lb --add-laddr -z 198.18.0.100 -t 198.18.0.11:80".to_string(),
        format!("no neighbour for 198.18.60.2 on lbc0: ip netns exec {ns} ping -c1 198.18.60.2"),
        "DR real 198.18.61.5 is behind gateway 198.18.60.2 on lbc0, not on the load balancer's L2: put 198.18.61.5 on lbc0's subnet, or forward to it by tunnel: wirespeed lb -e -t 198.18.0.10:80 -r 198.18.61.5:80 -i".to_string(),
    ];
    assert_eq!(found, want);
    // The daemon's own refresh (an empty datagram to the discard port) resolves it.
    let targets = d.neighbour_targets();
    assert!(targets.contains(&"198.18.60.2".parse().unwrap()));
    lab.lb.run(move || refresh_neighbours(&targets)).unwrap();
    let mut left = found.clone();
    for _ in 0..100 {
        left = lines(&check_lb(&view, &host));
        if !left.iter().any(|l| l.starts_with("no neighbour")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(left, vec![want[0].clone(), want[2].clone()]);
}

#[test]
fn an_interface_whose_veth_peer_has_no_napi_gets_the_gro_fix() {
    let lab = lab("c");
    let peer_ns = lab.real.name().to_string();
    lab.real
        .exec("ethtool", &["-K", "eth0", "gro", "off"])
        .unwrap();
    let view = wirespeed_lb::listing::ListView {
        ring_size: 251,
        ifaces: vec!["lbc0".into()],
        ..Default::default()
    };
    // The XDP features come from the kernel of the namespace the check runs in: the load
    // balancer's, as `doctor` runs where the daemon runs. (Linux 6.3+ reports them; the
    // data path needs them too, to refuse such an interface at attach.)
    let check = |view: wirespeed_lb::listing::ListView| {
        lab.lb
            .run(move || lines(&check_lb(&view, &Host { netns: None })))
            .unwrap()
    };
    let found = check(view.clone());
    let want = format!(
        "lbc0 takes no XDP frames: its veth peer runs no NAPI: ip netns exec {peer_ns} ethtool -K eth0 gro on"
    );
    assert_eq!(found, vec![want]);
    run_fix(&Problem {
        problem: String::new(),
        fix: found[0].rsplit_once(": ").unwrap().1.to_string(),
    });
    assert_eq!(check(view), Vec::<String>::new());
}
