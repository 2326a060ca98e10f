//! The real servers: what each forwarding mode needs on them (the list `wirespeed lb doctor
//! --real` checks, which checks them after), and the servers themselves (Debian's
//! redis-server and nginx).

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use wirespeed_sys::signal::Signal;

use super::{bin, output, rip4, rip6, wait_for, LbLab, BACKENDS, VIP4, VIP6};

/// Prepares every backend for `mode` (`-g`, `-i`, `-m`, `-b`) as `wirespeed lb doctor --real`
/// asks: DR and tunnel reals hold the VIPs on `lo` and filter no reverse path (the packet
/// arrives from a client the real routes elsewhere); DR reals answer no ARP for the VIPs
/// (arp_ignore=1, arp_announce=2); tunnel reals decapsulate (the kernel's `tunl0`, `sit0`,
/// `ip6tnl0` where it has them, else `wirespeed lb decap`) and advertise an MSS that fits in
/// the tunnel. NAT and full-NAT reals need nothing. Then doctor must find no problem.
pub fn prepare(lab: &mut LbLab, mode: &str) {
    if mode != "-g" && mode != "-i" {
        return;
    }
    let vips = format!("{VIP4},{VIP6}");
    for j in 0..BACKENDS {
        let role = format!("b{j}");
        let ns = lab.ns_name(&role);
        lab.exec(
            &role,
            "ip",
            &["addr", "add", &format!("{VIP4}/32"), "dev", "lo"],
        );
        lab.exec(
            &role,
            "ip",
            &["-6", "addr", "add", &format!("{VIP6}/128"), "dev", "lo"],
        );
        for dev in ["all", "default", "lo", "eth0"] {
            lab.sysctl(&role, &format!("net.ipv4.conf.{dev}.rp_filter"), "0");
        }
        if mode == "-g" {
            for dev in ["all", "eth0"] {
                lab.sysctl(&role, &format!("net.ipv4.conf.{dev}.arp_ignore"), "1");
                lab.sysctl(&role, &format!("net.ipv4.conf.{dev}.arp_announce"), "2");
            }
        } else {
            let devices = ["tunl0", "sit0", "ip6tnl0"];
            let have = |dev: &str| {
                output(Command::new("ip").args(["-n", &ns, "link", "show", dev]))
                    .status
                    .success()
            };
            if devices.iter().all(|d| have(d)) {
                for dev in devices {
                    lab.exec(&role, "ip", &["link", "set", dev, "up"]);
                }
                lab.sysctl(&role, "net.ipv4.conf.tunl0.rp_filter", "0");
            } else {
                start_decap(lab, &role, &vips);
            }
            // The outer header takes 20 (IPv4) or 40 (IPv6) bytes of the veth's 1500: a
            // client's full-size segment would not fit, so the real advertises that much less
            // (the MSS doctor asks for; it assumes the larger IPv6 header for IPv6).
            let gw4 = format!("198.18.{}.254", 100 + j);
            let gw6 = format!("fd00:{:x}::fe", 100 + j);
            for (family, gw, mss) in [("-4", &gw4, "1440"), ("-6", &gw6, "1400")] {
                let route = [family, "route", "change", "default", "via", gw];
                lab.exec(
                    &role,
                    "ip",
                    &[&route[..], &["dev", "eth0", "advmss", mss]].concat(),
                );
            }
        }
        let doctor_mode = if mode == "-g" { "dr" } else { "tunnel" };
        let out = output(Command::new(bin()).args([
            "lb",
            "doctor",
            "--real",
            &vips,
            "--mode",
            doctor_mode,
            "--netns",
            &ns,
        ]));
        assert!(
            out.status.success(),
            "doctor --real on the prepared {role} ({doctor_mode}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `wirespeed lb decap --iface eth0 --vip VIPS` on `role`, the decapsulator for a kernel
/// without tunnel devices; waits until it has attached.
fn start_decap(lab: &mut LbLab, role: &str, vips: &str) {
    let ns = lab.ns_name(role);
    let log = lab.dir.0.join(format!("decap-{role}.log"));
    let pid = lab.procs.spawn(
        &format!("lb decap {role}"),
        &ns,
        bin(),
        &["lb", "decap", "--iface", "eth0", "--vip", vips],
        &log,
    );
    let attached = wait_for(Duration::from_secs(15), || {
        if lab.procs.exited(pid).is_some() {
            return Some(false);
        }
        let link = output(Command::new("ip").args(["-n", &ns, "-d", "link", "show", "eth0"]));
        String::from_utf8_lossy(&link.stdout)
            .contains("xdp")
            .then_some(true)
    });
    assert_eq!(
        attached,
        Some(true),
        "lb decap on {role} did not attach: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// redis-server on backend `j`, bound to `binds` (which must be local there), as the issue
/// runs it: no persistence, in the foreground. Waits until it answers PING on its RIP.
pub fn start_redis(lab: &mut LbLab, j: usize, binds: &[IpAddr]) -> u32 {
    let role = format!("b{j}");
    let dir = lab.dir.0.join(format!("redis-{role}"));
    std::fs::create_dir_all(&dir).expect("redis dir");
    let bind: Vec<String> = binds.iter().map(|a| a.to_string()).collect();
    let mut args: Vec<String> = vec!["--bind".into()];
    args.extend(bind);
    for a in [
        "--port",
        "6379",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--protected-mode",
        "no",
        "--logfile",
        "",
        "--dir",
    ] {
        args.push(a.into());
    }
    args.push(dir.display().to_string());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let ns = lab.ns_name(&role);
    let log = lab.dir.0.join(format!("redis-{role}.log"));
    let pid = lab.procs.spawn(
        &format!("redis-server {role}"),
        &ns,
        "redis-server",
        &argv,
        &log,
    );
    let rip = binds[0].to_string();
    let up = wait_for(Duration::from_secs(15), || {
        let o = output(Command::new("ip").args([
            "netns",
            "exec",
            &ns,
            "redis-cli",
            "-h",
            &rip,
            "-p",
            "6379",
            "ping",
        ]));
        String::from_utf8_lossy(&o.stdout)
            .contains("PONG")
            .then_some(())
    });
    assert!(
        up.is_some(),
        "redis-server on {role} did not answer: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    pid
}

/// The addresses redis binds on backend `j` for `mode`: the RIPs, and the VIPs where the real
/// holds them (DR, tunnel).
pub fn redis_binds(mode: &str, j: usize) -> Vec<IpAddr> {
    let mut b: Vec<IpAddr> = vec![rip4(j).into(), rip6(j).into()];
    if mode == "-g" || mode == "-i" {
        b.push(VIP4.into());
        b.push(VIP6.into());
    }
    b
}

/// Stops backend `j`'s redis-server (SIGKILL: a crash, not a shutdown).
pub fn kill(lab: &mut LbLab, pid: u32) {
    lab.procs.stop(pid, Signal::Kill);
}

/// nginx on backend `j`, on port 80 of every address, answering every request with the
/// backend's name (`b0\n`...), so a client sees which backend answered.
pub fn start_nginx(lab: &mut LbLab, j: usize) -> u32 {
    let role = format!("b{j}");
    let dir = lab.dir.0.join(format!("nginx-{role}"));
    std::fs::create_dir_all(&dir).expect("nginx dir");
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         keepalive_requests 1000000;\n  server {{\n    listen 80;\n    listen [::]:80 ipv6only=on;\n\
         default_type text/plain;\n    location / {{ return 200 \"{role}\\n\"; }}\n  }}\n}}\n"
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).expect("nginx.conf");
    let ns = lab.ns_name(&role);
    let log = lab.dir.0.join(format!("nginx-{role}.log"));
    let cp = conf_path.display().to_string();
    let err = format!("{d}/early-error.log");
    let prefix = format!("{d}/");
    let pid = lab.procs.spawn(
        &format!("nginx {role}"),
        &ns,
        "nginx",
        &["-e", &err, "-p", &prefix, "-c", &cp],
        &log,
    );
    let url = format!("http://{}/", rip4(j));
    let up = wait_for(Duration::from_secs(15), || {
        let o = output(Command::new("ip").args([
            "netns",
            "exec",
            &ns,
            "curl",
            "-s",
            "--max-time",
            "2",
            &url,
        ]));
        (String::from_utf8_lossy(&o.stdout).trim() == role).then_some(())
    });
    assert!(
        up.is_some(),
        "nginx on {role} did not answer: {} {}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
    );
    pid
}

/// Redis and nginx on every backend, bound as `mode` needs; the redis pids by backend.
pub fn start_backends(lab: &mut LbLab, mode: &str) -> Vec<u32> {
    let mut pids = vec![];
    for j in 0..BACKENDS {
        pids.push(start_redis(lab, j, &redis_binds(mode, j)));
        start_nginx(lab, j);
    }
    pids
}
