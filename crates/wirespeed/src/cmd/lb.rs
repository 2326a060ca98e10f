//! `wirespeed lb`: the L4 load balancer. `run` is the daemon; every other form is an ipvsadm
//! command line (`-A`, `-a`, `-L -n --stats`, ...) sent to it over its unix socket; `save`
//! and `restore` speak the ipvsadm-save format; `doctor` says why packets are not forwarded,
//! or where this node's tables disagree with a peer's; `announce` drives a BGP speaker (ExaBGP
//! as its process, or the node's FRR through vtysh) and `drain` withdraws this node's VIPs.

use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context};
use wirespeed_lb::control::{self, Reply, Request};
use wirespeed_lb::daemon::{self, Daemon, RunConfig};
use wirespeed_lb::datapath::{AttachConfig, XdpDataPlane};
use wirespeed_lb::decap::{Decap, DecapConfig, XdpMode};
use wirespeed_lb::doctor::{self, Host, RealModes};
use wirespeed_lb::ipvsadm::{self, Command};
use wirespeed_lb::listing;
use wirespeed_lb::peer;

const IPVSADM_HELP: &str = "\
ipvsadm's command line, sent to the running daemon:
  -A|-E -t|-u VIP:PORT [-s mh|rr|wrr] [--check tcp|http[:/PATH]|redis
        [--check-interval 2s] [--check-timeout 1s] [--rise 2] [--fall 3]] [--no-toa]
  -E -t|-u VIP:PORT --no-check               drop the service's health check
  -D -t|-u VIP:PORT
  -a|-e -t|-u VIP:PORT -r RIP[:PORT] [-g|-i|-m|-b] [-w 0-65535]
        [--tun-type ipip|gue --tun-port PORT [--tun-csum|--tun-nocsum]]   (with -i)
  -d -t|-u VIP:PORT -r RIP[:PORT]
  --add-laddr|--del-laddr -z ADDR -t|-u VIP:PORT   full-NAT local addresses (DPVS)
  -L|-l [-n] [--stats|--rate] [--exact] [--json] [-t|-u VIP:PORT]
  -Z     zero the counters        -C     remove every service
Defaults: -s mh, -g, -w 1. IPv6 as [ADDR]:PORT. Long forms as ipvsadm (--add-service,
--tcp-service, --scheduler, --real-server, --gatewaying, --ipip, --masquerading, --fullnat,
--weight, --list, --numeric, --zero, --clear). --socket PATH (or $WIRESPEED_LB_SOCKET) names
the daemon's socket (default /run/wirespeed/lb.sock). See docs/LB.md.";

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, after_help = IPVSADM_HELP)]
pub struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// An ipvsadm command line (see below).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "IPVSADM ARGS"
    )]
    ipvsadm: Vec<String>,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// The daemon: attach the data path to the interfaces, hold the tables, run the health
    /// checks, answer commands on the socket until SIGINT/SIGTERM; then withdraw every VIP,
    /// forward for --drain seconds more, and detach.
    Run {
        /// Interface the data path runs on (repeat for more).
        #[arg(long = "iface", required = true)]
        ifaces: Vec<String>,
        /// Control socket (default $WIRESPEED_LB_SOCKET or /run/wirespeed/lb.sock).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Maglev table size per service; a prime, at least 100 times the reals of a service.
        #[arg(long, default_value_t = 65537)]
        ring_size: u32,
        /// Connection-table entries per CPU.
        #[arg(long, default_value_t = 1 << 18)]
        conns_per_cpu: u32,
        /// New connection entries per CPU per second before flows are scheduled by hash alone
        /// (Katran's guard); 0: no guard.
        #[arg(long, default_value_t = 125_000)]
        new_conn_rate: u32,
        /// Seconds a TCP connection may stay in its handshake (SYN seen, not yet proven by the
        /// client) before its entries and full-NAT port may be reused; below 900, the idle
        /// time of an established one. A SYN flood churns only these entries.
        #[arg(long, value_name = "S", default_value_t = wirespeed_lb::datapath::HALF_OPEN_TIMEOUT_S)]
        half_open_timeout: u32,
        /// Tunnel outer source prefix, e.g. 198.18.200.0/24 or fd00:200::/96; the flow hash
        /// fills the host bits so the real's RSS spreads tunnelled flows (repeat for v4 and v6).
        #[arg(long)]
        tunnel_src: Vec<String>,
        /// Allow attaching outside a lab namespace.
        #[arg(long)]
        allow_host: bool,
        /// Print the startup line as JSON.
        #[arg(long)]
        json: bool,
        /// Serve Prometheus metrics at http://ADDR:PORT/metrics (docs/METRICS.md), e.g.
        /// 127.0.0.1:9102.
        #[arg(long, value_name = "ADDR:PORT")]
        metrics: Option<std::net::SocketAddr>,
        /// Seconds a VIP must stay servable (attached, applied, not draining, a live real,
        /// its checks judged) before `lb announce` announces it, so a flapping real does not
        /// flap the route; it is withdrawn at once (docs/LB.md, "Several nodes").
        #[arg(long, value_name = "S", default_value_t = wirespeed_lb::announce::DEFAULT_HOLD_DOWN.as_secs_f64())]
        announce_hold_down: f64,
        /// At SIGINT/SIGTERM: seconds to go on forwarding with every VIP withdrawn, so routers
        /// move new flows elsewhere before the data path detaches; 0: detach at once.
        #[arg(long, value_name = "S", default_value_t = 5.0)]
        drain: f64,
    },
    /// Announce what this node can serve, as it changes, through a BGP speaker: by default as
    /// ExaBGP's process (`run` in exabgp.conf), printing `announce route`/`withdraw route`
    /// lines; with --speaker frr, beside the node's FRR, adding and removing `network`
    /// statements through vtysh. Everything is withdrawn while the daemon is gone, and
    /// reconciled when it is back (docs/LB.md, "Several nodes: announcing over BGP"). Once it
    /// has connected, the daemon counts the node part of a cluster: -A, -E, -a, -e and
    /// restore warn about services whose connections do not survive a move to another node,
    /// and doctor checks them (docs/LB.md, "Modes in a cluster"). With `neighbor-changes;` in
    /// exabgp.conf's api block, it reports ExaBGP's BGP sessions to the daemon, and doctor
    /// names one that is not up.
    Announce {
        /// Control socket of the daemon.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Who speaks BGP: exabgp (this process is ExaBGP's: commands on stdout, its answers
        /// on stdin; no BFD, so a silent node goes at the hold timer) or frr (the node's FRR
        /// bgpd, driven through vtysh; with BFD on the session a silent node goes in well
        /// under a second).
        #[arg(long, value_enum, default_value = "exabgp")]
        speaker: Speaker,
        /// ExaBGP: the routes' next hop, `self` (ExaBGP's address on the session) or an
        /// address, at most one per family (repeat, or comma-separate). IPv6 VIPs over an IPv4
        /// session need an IPv6 address here. FRR sets the next hop itself.
        #[arg(long, value_delimiter = ',', default_value = "self")]
        next_hop: Vec<String>,
        /// FRR: the AS of the node's `router bgp`, where the VIPs' `network` statements go
        /// (needed with --speaker frr).
        #[arg(long, value_name = "ASN")]
        asn: Option<u32>,
        /// FRR: the directory of bgpd's vty sockets (bgpd's --vty_socket), for vtysh; FRR's
        /// default when not given.
        #[arg(long, value_name = "DIR")]
        vty_socket: Option<PathBuf>,
        /// FRR: the route-map our `network` statements carry; it marks them ours (only those
        /// are withdrawn) and may set attributes; made as `permit 10` if bgpd has none.
        #[arg(long, value_name = "NAME", default_value = wirespeed_lb::frr::DEFAULT_ROUTE_MAP)]
        route_map: String,
    },
    /// Withdraw every VIP this node announces while it keeps forwarding (established flows
    /// finish here, new ones go to the other nodes); --undo announces them again.
    Drain {
        /// Control socket of the daemon.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// End the drain.
        #[arg(long)]
        undo: bool,
    },
    /// On a tunnel-mode real whose kernel has no tunl0/sit0/ip6tnl0: strip the load
    /// balancer's IPIP, 6in4, IP6IP6 and 4in6 headers, and GUE's on the GUE ports, in XDP from
    /// packets to the VIPs and hand the inner packets to the kernel, until SIGINT/SIGTERM;
    /// then print the counters.
    Decap {
        /// Interface the tunnelled packets arrive on (repeat for more).
        #[arg(long = "iface", required = true)]
        ifaces: Vec<String>,
        /// VIPs to decapsulate for, comma-separated (the addresses on this real's lo).
        #[arg(long = "vip", required = true, value_delimiter = ',')]
        vips: Vec<std::net::IpAddr>,
        /// Outer destinations to accept (this host's addresses), comma-separated; default: any.
        #[arg(long = "outer-dst", value_delimiter = ',')]
        outer_dsts: Vec<std::net::IpAddr>,
        /// UDP ports whose datagrams are GUE (the reals' --tun-port), comma-separated.
        #[arg(long = "gue-port", value_delimiter = ',', default_values_t = [wirespeed_lb::decap::DEFAULT_GUE_PORT])]
        gue_ports: Vec<u16>,
        /// Allow attaching outside a lab namespace.
        #[arg(long)]
        allow_host: bool,
        /// Print the attach lines and the counters as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the configuration in the ipvsadm-save format (with our extensions).
    Save {
        /// Control socket of the daemon.
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Read the ipvsadm-save format on stdin and apply it as one change (all lines or none).
    Restore {
        /// Control socket of the daemon.
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Why packets are not forwarded: on the load balancer (next hops, neighbours, XDP on the
    /// interfaces, full-NAT local addresses, MTU; on a node that announces, services whose
    /// connections a move to another node breaks and VIPs without a blackhole route), or with
    /// --real on a real server; with --peer, whether another load balancer behind the same
    /// ECMP route would pick the same reals.
    Doctor {
        /// Control socket of the daemon (load-balancer side).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Check this host as a real server of these VIPs (comma-separated).
        #[arg(long, value_delimiter = ',')]
        real: Option<Vec<std::net::IpAddr>>,
        /// With --real: how the load balancer reaches this real (dr, tunnel; comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "dr")]
        mode: Vec<String>,
        /// With --real: the real is a GUE tunnel real on these UDP ports (the load balancer's
        /// --tun-port, comma-separated): check that something decapsulates GUE on them.
        #[arg(long = "gue-port", value_delimiter = ',')]
        gue_ports: Vec<u16>,
        /// With --real: run the checks inside this network namespace (a lab's real).
        #[arg(long)]
        netns: Option<String>,
        /// Instead of the host checks, compare this daemon's services, schedulers, reals,
        /// weights, health, ring size and table digests with another load balancer's, which
        /// must agree behind one ECMP route: its control socket, or a file holding its
        /// `wirespeed lb -L -n --json`.
        #[arg(long, value_name = "SOCKET|FILE", conflicts_with_all = ["real", "mode", "netns", "gue_ports"])]
        peer: Option<PathBuf>,
        /// Print the problems as JSON.
        #[arg(long)]
        json: bool,
    },
}

static STOP: AtomicBool = AtomicBool::new(false);

/// Takes `--socket PATH` out of an ipvsadm command line.
fn split_socket(args: &[String]) -> anyhow::Result<(Option<PathBuf>, Vec<String>)> {
    let mut socket = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--socket" {
            socket = Some(PathBuf::from(it.next().context("--socket needs a PATH")?));
        } else if let Some(p) = a.strip_prefix("--socket=") {
            socket = Some(PathBuf::from(p));
        } else {
            rest.push(a.clone());
        }
    }
    Ok((socket, rest))
}

fn ask(socket: Option<PathBuf>, req: &Request) -> anyhow::Result<Reply> {
    let path = control::socket_path(socket.as_deref());
    let reply = control::request(&path, req)?;
    if let Reply::Error(e) = &reply {
        bail!("{e}");
    }
    Ok(reply)
}

fn print_warnings(w: &[String]) {
    for w in w {
        eprintln!("wirespeed lb: warning: {w}");
    }
}

fn parse_prefix(s: &str) -> anyhow::Result<(std::net::IpAddr, u8)> {
    let (a, l) = s
        .split_once('/')
        .with_context(|| format!("--tunnel-src `{s}` must look like 198.18.200.0/24"))?;
    let addr: std::net::IpAddr = a
        .parse()
        .with_context(|| format!("--tunnel-src: `{a}` is not an IP address"))?;
    let max = if addr.is_ipv4() { 32 } else { 96 };
    let len: u8 = l
        .parse()
        .ok()
        .filter(|l| *l <= max)
        .with_context(|| format!("--tunnel-src: prefix length `{l}` must be 0-{max}"))?;
    Ok((addr, len))
}

/// `doctor --peer`: every difference from the peer's listing, one line each; exit 1 on any.
fn doctor_peer(socket: Option<PathBuf>, peer: &std::path::Path, json: bool) -> anyhow::Result<()> {
    let here = match ask(socket, &Request::View)? {
        Reply::List(view) => view,
        _ => bail!("the daemon answered `doctor` with something else than its configuration"),
    };
    let there = peer::peer_view(peer)?;
    let differences = peer::compare(&here, &there);
    if json {
        println!("{}", serde_json::to_string_pretty(&differences)?);
    } else if differences.is_empty() {
        let n = here.services.len();
        println!(
            "doctor: the peer agrees on {n} service{}, ring size {}",
            if n == 1 { "" } else { "s" },
            here.ring_size
        );
    } else {
        for d in &differences {
            println!("{d}");
        }
    }
    if !differences.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

fn doctor(
    socket: Option<PathBuf>,
    real: Option<Vec<std::net::IpAddr>>,
    mode: Vec<String>,
    gue_ports: &[u16],
    netns: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let host = Host { netns };
    let problems = match real {
        Some(vips) => {
            let mut modes = RealModes::default();
            for m in &mode {
                match m.as_str() {
                    "dr" => modes.dr = true,
                    "tunnel" => modes.tunnel = true,
                    other => bail!("--mode `{other}` is not dr or tunnel"),
                }
            }
            if gue_ports.is_empty() {
                doctor::check_real(&vips, modes, &host)
            } else if modes
                != (RealModes {
                    dr: false,
                    tunnel: true,
                })
            {
                bail!("--gue-port is for a GUE tunnel real: give --mode tunnel alone");
            } else {
                doctor::check_real_gue(&vips, gue_ports, &host)
            }
        }
        None => {
            if !gue_ports.is_empty() {
                bail!(
                    "--gue-port goes with --real (the load balancer's side knows its reals' ports)"
                );
            }
            if host.netns.is_some() {
                bail!("--netns goes with --real; on the load balancer run doctor where the daemon runs");
            }
            match ask(socket, &Request::View)? {
                Reply::List(view) => {
                    let mut problems = doctor::check_lb(&view, &host);
                    problems.extend(wirespeed_lb::cluster::check_node(&view, &host));
                    problems
                }
                _ => {
                    bail!("the daemon answered `doctor` with something else than its configuration")
                }
            }
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&problems)?);
    } else if problems.is_empty() {
        println!("doctor: no problem found");
    } else {
        for p in &problems {
            println!("{p}");
        }
    }
    if !problems.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

/// `lb decap`: attach, report one line per interface, wait for SIGINT/SIGTERM, print the
/// counters; dropping the decapsulator detaches it.
fn decap(cfg: DecapConfig, json: bool) -> anyhow::Result<()> {
    let signals = super::block_termination()?;
    let d = Decap::attach(&cfg)?;
    for (iface, mode) in d.attached() {
        if json {
            println!("{}", serde_json::json!({"iface": iface, "mode": mode}));
        } else if mode == XdpMode::Native {
            println!("wirespeed lb decap: decapsulating on {iface} (native XDP)");
        } else {
            println!("wirespeed lb decap: decapsulating on {iface} (generic XDP: its driver refused native mode, so packets pay for an skb first)");
        }
    }
    super::wait_for_termination(&signals)?;
    let counters = d.counters()?;
    drop(d);
    if json {
        let map: serde_json::Map<String, serde_json::Value> = counters
            .iter()
            .map(|(n, c)| (n.to_string(), (*c).into()))
            .collect();
        println!("{}", serde_json::json!({"stopped": true, "counters": map}));
    } else {
        let line: Vec<String> = counters
            .iter()
            .filter(|(_, c)| *c > 0)
            .map(|(n, c)| format!("{n}={c}"))
            .collect();
        println!(
            "wirespeed lb decap: stopped, detached; {}",
            if line.is_empty() {
                "no packets".to_string()
            } else {
                line.join(" ")
            }
        );
    }
    Ok(())
}

/// Seconds from a flag, as a duration; one line saying what to give otherwise.
fn seconds(flag: &str, s: f64) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(s)
        .map_err(|_| anyhow::anyhow!("--{flag} {s}: give seconds, 0 or more, e.g. 3"))
}

/// Who speaks BGP for `lb announce`.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
enum Speaker {
    Exabgp,
    Frr,
}

/// `lb announce`: ExaBGP reads our stdout and writes its acknowledgements, and with
/// `neighbor-changes` its sessions' changes, to our stdin. Those are read (a full pipe would
/// stall ExaBGP), a rejected command is reported, the sessions are reported to the daemon, and
/// the end of stdin (ExaBGP gone) ends the process.
fn announce(socket: Option<PathBuf>, next_hop: &[String]) -> anyhow::Result<()> {
    let nh = wirespeed_lb::exabgp::NextHops::parse(next_hop)?;
    let path = control::socket_path(socket.as_deref());
    // ExaBGP's lines about its sessions go to the daemon for doctor (docs/LB.md, "Doctor").
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let report_to = path.clone();
    std::thread::Builder::new()
        .name("bgp sessions".into())
        .spawn(move || {
            wirespeed_lb::session::report(&report_to, &lines, wirespeed_lb::session::REPORT_EVERY)
        })
        .context("start the reporter of ExaBGP's sessions")?;
    std::thread::Builder::new()
        .name("exabgp acks".into())
        .spawn(move || {
            use std::io::BufRead;
            for line in std::io::stdin().lock().lines() {
                match line {
                    Ok(l) if l.starts_with("error") => {
                        eprintln!("wirespeed lb announce: ExaBGP rejected a command: {l}")
                    }
                    Ok(l) => {
                        let _ = lines_tx.send(l);
                    }
                    Err(_) => break,
                }
            }
            std::process::exit(0);
        })
        .context("start the reader of ExaBGP's acknowledgements")?;
    let mut exabgp = wirespeed_lb::exabgp::Exabgp::new(std::io::stdout().lock(), nh);
    wirespeed_lb::announce::follow(
        &path,
        &mut exabgp,
        std::time::Duration::from_secs(1),
        &mut |m| eprintln!("wirespeed lb announce: {m}"),
    )?;
    Ok(())
}

/// The FRR speaker, shared between the loop and the thread that withdraws at SIGTERM: the
/// lock keeps an announcement from landing after that withdrawal.
struct SharedFrr(std::sync::Arc<std::sync::Mutex<wirespeed_lb::frr::Frr>>);

impl wirespeed_lb::announce::Speaker for SharedFrr {
    fn apply(
        &mut self,
        wanted: &std::collections::BTreeSet<std::net::IpAddr>,
    ) -> Result<Vec<String>, wirespeed_lb::announce::Failure> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .apply(wanted)
    }

    fn resync(&self) -> Option<std::time::Duration> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).resync()
    }
}

/// `lb announce --speaker frr`: runs beside the node's FRR until SIGINT/SIGTERM, which
/// withdraw our networks before exiting: an `lb announce` that is not running holds no
/// route up, since nothing would withdraw it when the daemon dies.
fn announce_frr(
    socket: Option<PathBuf>,
    asn: u32,
    vty_socket: Option<PathBuf>,
    route_map: &str,
) -> anyhow::Result<()> {
    use wirespeed_lb::announce::{Failure, Speaker};
    let path = control::socket_path(socket.as_deref());
    let frr = std::sync::Arc::new(std::sync::Mutex::new(wirespeed_lb::frr::Frr::new(
        asn, route_map, vty_socket,
    )));
    let stopper = frr.clone();
    super::stop_on_signal("lb announce stop", move |_| {
        let mut frr = stopper.lock().unwrap_or_else(|e| e.into_inner());
        let failed = match frr.apply(&Default::default()) {
            Ok(done) => {
                for l in done {
                    eprintln!("wirespeed lb announce: {l}");
                }
                std::process::exit(0);
            }
            Err(Failure::Retry(m)) => m,
            Err(Failure::Gone(e)) => e.to_string(),
        };
        eprintln!("wirespeed lb announce: stopping, could not withdraw our networks: {failed}");
        std::process::exit(1);
    })?;
    wirespeed_lb::announce::follow(
        &path,
        &mut SharedFrr(frr),
        std::time::Duration::from_secs(1),
        &mut |m| eprintln!("wirespeed lb announce: {m}"),
    )?;
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.cmd {
        None => ipvsadm_command(&args.ipvsadm),
        Some(Cmd::Save { socket }) => match ask(socket, &Request::View)? {
            Reply::List(view) => {
                print!("{}", wirespeed_lb::listing::format_save(&view));
                Ok(())
            }
            _ => bail!("the daemon answered `save` with something else than its configuration"),
        },
        Some(Cmd::Restore { socket }) => restore(socket),
        Some(Cmd::Announce {
            socket,
            speaker,
            next_hop,
            asn,
            vty_socket,
            route_map,
        }) => match speaker {
            Speaker::Exabgp => {
                if asn.is_some() || vty_socket.is_some() {
                    bail!("--asn and --vty-socket are FRR's: give --speaker frr, or leave them out for ExaBGP");
                }
                announce(socket, &next_hop)
            }
            Speaker::Frr => {
                if next_hop != ["self"] {
                    bail!("--next-hop is ExaBGP's: FRR's bgpd sets the next hop itself (or a `set ipv6 next-hop` in the --route-map)");
                }
                let Some(asn) = asn else {
                    bail!("--speaker frr needs --asn: the AS of `router bgp` in the node's FRR, e.g. --asn 65001");
                };
                announce_frr(socket, asn, vty_socket, &route_map)
            }
        },
        Some(Cmd::Drain { socket, undo }) => drain(socket, undo),
        Some(Cmd::Doctor {
            socket,
            peer: Some(peer),
            json,
            ..
        }) => doctor_peer(socket, &peer, json),
        Some(Cmd::Doctor {
            socket,
            real,
            mode,
            gue_ports,
            netns,
            peer: None,
            json,
        }) => doctor(socket, real, mode, &gue_ports, netns, json),
        Some(Cmd::Decap {
            ifaces,
            vips,
            outer_dsts,
            gue_ports,
            allow_host,
            json,
        }) => decap(
            DecapConfig {
                ifaces,
                vips,
                outer_dsts,
                gue_ports,
                allow_host,
            },
            json,
        ),
        Some(Cmd::Run {
            ifaces,
            socket,
            ring_size,
            conns_per_cpu,
            new_conn_rate,
            half_open_timeout,
            tunnel_src,
            allow_host,
            json,
            metrics,
            announce_hold_down,
            drain,
        }) => {
            let hold_down = seconds("announce-hold-down", announce_hold_down)?;
            let drain = seconds("drain", drain)?;
            let mut cfg = AttachConfig {
                ifaces,
                ring_size,
                conns_per_cpu,
                new_conns_per_sec_per_cpu: new_conn_rate,
                half_open_timeout_s: half_open_timeout,
                allow_host,
                ..AttachConfig::default()
            };
            for p in &tunnel_src {
                match parse_prefix(p)? {
                    (std::net::IpAddr::V4(a), l) => cfg.tunnel_src_v4 = Some((a, l)),
                    (std::net::IpAddr::V6(a), l) => cfg.tunnel_src_v6 = Some((a, l)),
                }
            }
            let run_cfg = RunConfig {
                metrics,
                drain,
                ..RunConfig::new(control::socket_path(socket.as_deref()))
            };
            run_daemon(&cfg, &run_cfg, hold_down, json)
        }
    }
}

/// `wirespeed lb` with ipvsadm's arguments: the command goes to the daemon, and its answer
/// (a listing, warnings) is printed.
fn ipvsadm_command(ipvsadm: &[String]) -> anyhow::Result<()> {
    let (socket, argv) = split_socket(ipvsadm)?;
    if argv.is_empty() {
        bail!("no command given: try `wirespeed lb -L -n`, or `wirespeed lb --help`");
    }
    let cmd = ipvsadm::parse_args(&argv)?;
    let opts = match &cmd {
        Command::List(o) => Some(o.clone()),
        _ => None,
    };
    let new_real = match &cmd {
        Command::AddReal { real, .. } => Some(real.addr.ip()),
        _ => None,
    };
    match ask(socket, &Request::Command(cmd))? {
        Reply::List(view) => {
            let opts = opts.unwrap_or_default();
            if opts.json {
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                print!("{}", listing::format_list(&view, &opts));
                print_warnings(&view.warnings);
            }
        }
        Reply::Done { warnings } => {
            print_warnings(&warnings);
            // Said here, where the daemon runs, so a user who never runs doctor
            // still reads it (docs/LB.md, "Doctor").
            if let Some(rip) = new_real {
                let path: Vec<String> = doctor::check_path_to_real(rip)
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                print_warnings(&path);
            }
        }
        Reply::Error(e) => bail!("{e}"),
        Reply::Announceable(_) => {
            bail!("the daemon answered an ipvsadm command with its announceable addresses; are the client and daemon the same wirespeed version?")
        }
    }
    Ok(())
}

/// `lb restore`: ipvsadm-restore's input on stdin goes to the daemon as one batch.
fn restore(socket: Option<PathBuf>) -> anyhow::Result<()> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("read the configuration from stdin")?;
    let cmds = ipvsadm::parse_restore(&text)?;
    if let Reply::Done { warnings } = ask(socket, &Request::Batch(cmds))? {
        print_warnings(&warnings);
    }
    Ok(())
}

/// `lb drain` (`--undo`: its end).
fn drain(socket: Option<PathBuf>, undo: bool) -> anyhow::Result<()> {
    ask(socket, &Request::Drain(!undo))?;
    if undo {
        eprintln!("wirespeed lb: drain ended: VIPs with a live real are announced again after the hold-down");
    } else {
        eprintln!("wirespeed lb: draining: every VIP withdrawn, forwarding goes on; end it with `wirespeed lb drain --undo`");
    }
    Ok(())
}

/// `lb run`: attaches the data path to `cfg.ifaces` and runs the daemon until
/// SIGINT/SIGTERM, then drains and detaches (docs/OPERATING.md, "Stop").
fn run_daemon(
    cfg: &AttachConfig,
    run_cfg: &RunConfig,
    hold_down: std::time::Duration,
    json: bool,
) -> anyhow::Result<()> {
    let ifaces = &cfg.ifaces;
    // Blocked before any thread starts, so that every thread inherits the mask and
    // SIGINT/SIGTERM reach only the signalfd; a watcher turns the first into STOP.
    super::stop_on_signal("lb signals", |signals| {
        STOP.store(true, Ordering::Relaxed);
        // A second one cuts the drain short (docs/OPERATING.md, "Stop"); the
        // kernel detaches the links as the process exits.
        if let Ok(Some(_)) = signals.wait(None) {
            eprintln!("wirespeed lb: second signal: exiting now, before the end of the drain");
            std::process::exit(1);
        }
    })?;
    let dp = XdpDataPlane::attach(cfg)?;
    let read = |k: &str| {
        let path = format!("/proc/sys/{}", k.replace('.', "/"));
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    };
    for p in wirespeed_lb::doctor::check_forwarding(ifaces, true, false, read) {
        eprintln!(
            "wirespeed lb: warning: {} (IPv4 VIPs): {}",
            p.problem, p.fix
        );
    }
    let mut d = Daemon::new(dp, cfg.ring_size)?;
    d.set_ifaces(ifaces.clone());
    d.set_announce_hold_down(hold_down);
    let (path, metrics) = (&run_cfg.socket, run_cfg.metrics);
    if json {
        println!(
            "{}",
            serde_json::json!({"running": true, "ifaces": ifaces, "socket": path, "ring_size": cfg.ring_size, "metrics": metrics})
        );
    } else {
        eprintln!(
            "wirespeed lb: running on {}; commands on {}{}",
            ifaces.join(", "),
            path.display(),
            metrics.map_or(String::new(), |a| format!(
                "; metrics on http://{a}/metrics"
            ))
        );
    }
    daemon::run(&mut d, run_cfg, &STOP)?;
    // Dropping the daemon drops the data plane, whose links detach the program.
    drop(d);
    eprintln!("wirespeed lb: stopped, detached");
    Ok(())
}
