//! The real servers: what each forwarding mode needs on them (the list `wirespeed lb doctor
//! --real` checks), the servers themselves (Debian's redis-server and nginx), and, where the
//! kernel has no tunnel devices, a decapsulator that stands in for them.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use wirespeed_sys::signal::Signal;

use super::{output, rip4, rip6, wait_for, LbLab, BACKENDS, VIP4, VIP6};

/// Prepares every backend for `mode` (`-g`, `-i`, `-m`, `-b`) the way `wirespeed lb doctor
/// --real` says: DR and tunnel reals hold the VIPs on `lo`, answer no ARP for them
/// (arp_ignore=1, arp_announce=2, DR) and filter no reverse path (the decapsulated or
/// MAC-rewritten packet arrives from a client the real routes elsewhere). Tunnel reals also
/// need their decapsulation devices up. NAT and full-NAT reals need nothing.
pub fn prepare(lab: &mut LbLab, mode: &str) {
    if mode != "-g" && mode != "-i" {
        return;
    }
    for j in 0..BACKENDS {
        let role = format!("b{j}");
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
            for kind in [Encap::Ipip, Encap::SixInFour, Encap::Ip6Ip6] {
                let dev = kind.device();
                let exists = output(Command::new("ip").args([
                    "-n",
                    &lab.ns_name(&role),
                    "link",
                    "show",
                    dev,
                ]))
                .status
                .success();
                if exists {
                    lab.exec(&role, "ip", &["link", "set", dev, "up"]);
                    if kind != Encap::Ip6Ip6 {
                        lab.sysctl(&role, &format!("net.ipv4.conf.{dev}.rp_filter"), "0");
                    }
                } else {
                    let ns = lab.ns_name(&role);
                    lab.decap.push(Decap::start(&ns, kind));
                }
            }
        }
    }
    let user: Vec<String> = lab
        .decap
        .iter()
        .map(|d| format!("{}:{:?}", d.ns, d.kind))
        .collect();
    if !user.is_empty() {
        println!(
            "{}: this kernel has no tunnel device for {}; the test decapsulates those in userspace",
            lab.name,
            user.join(" ")
        );
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encap {
    /// IPv4 in IPv4 (protocol 4): the kernel's `tunl0`.
    Ipip,
    /// IPv6 in IPv4 (protocol 41): `sit0`.
    SixInFour,
    /// IPv6 in IPv6 (next header 41): `ip6tnl0`.
    Ip6Ip6,
}

impl Encap {
    fn device(self) -> &'static str {
        match self {
            Encap::Ipip => "tunl0",
            Encap::SixInFour => "sit0",
            Encap::Ip6Ip6 => "ip6tnl0",
        }
    }
}

/// What a kernel tunnel device does on receive, for a kernel built without one: a raw socket
/// takes the encapsulated packets addressed to the real, and the inner packet is sent again
/// with its own header to the VIP, a local address, so the kernel loops it back and delivers
/// it to the server listening on the VIP. Replies leave the usual way, from the VIP.
pub struct Decap {
    pub ns: String,
    pub kind: Encap,
    stop: Arc<AtomicBool>,
    pub packets: Arc<AtomicU64>,
    thread: Option<JoinHandle<std::io::Result<std::io::Result<()>>>>,
}

impl Decap {
    pub fn start(ns: &str, kind: Encap) -> Decap {
        let stop = Arc::new(AtomicBool::new(false));
        let packets = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), packets.clone());
        // The sockets are made before this returns, so no encapsulated packet arrives before
        // someone listens for it.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = wirespeed_sys::netns::spawn_in(ns, move || {
            let r = decap_loop(kind, &s, &p, &ready_tx);
            let _ = ready_tx.send(());
            r
        })
        .expect("decapsulator thread");
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("decapsulator ready");
        Decap {
            ns: ns.to_string(),
            kind,
            stop,
            packets,
            thread: Some(thread),
        }
    }
}

impl Drop for Decap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn decap_loop(
    kind: Encap,
    stop: &AtomicBool,
    packets: &AtomicU64,
    ready: &std::sync::mpsc::Sender<()>,
) -> std::io::Result<()> {
    let (rx_domain, proto) = match kind {
        Encap::Ipip => (Domain::IPV4, 4),
        Encap::SixInFour => (Domain::IPV4, 41),
        Encap::Ip6Ip6 => (Domain::IPV6, 41),
    };
    let rx = Socket::new(rx_domain, Type::RAW, Some(Protocol::from(proto)))?;
    rx.set_read_timeout(Some(Duration::from_millis(100)))?;
    // IPPROTO_RAW: the packet carries its own IP header.
    let tx4 = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(255)))?;
    let tx6 = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::from(255)))?;
    let _ = ready.send(());
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let n = match (&rx).read(&mut buf) {
            Ok(n) => n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        // An IPv4 raw socket hands over the outer header too; an IPv6 one only the payload.
        let inner = if rx_domain == Domain::IPV4 {
            let ihl = usize::from(buf[0] & 0x0f) * 4;
            if n <= ihl {
                continue;
            }
            &buf[ihl..n]
        } else {
            &buf[..n]
        };
        let sent = match inner.first().map(|b| b >> 4) {
            Some(4) if inner.len() >= 20 => {
                let dst = Ipv4Addr::new(inner[16], inner[17], inner[18], inner[19]);
                tx4.send_to(inner, &SockAddr::from(SocketAddr::new(dst.into(), 0)))
            }
            Some(6) if inner.len() >= 40 => {
                let mut d = [0u8; 16];
                d.copy_from_slice(&inner[24..40]);
                let dst = Ipv6Addr::from(d);
                tx6.send_to(inner, &SockAddr::from(SocketAddr::new(dst.into(), 0)))
            }
            _ => continue,
        };
        if sent.is_ok() {
            packets.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
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
