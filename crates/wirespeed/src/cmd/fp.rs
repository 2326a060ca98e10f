//! `wirespeed fp`: the transparent fast path. `run` watches the kernel's networking
//! configuration and keeps a specialized XDP program on each interface; `status` shows what
//! each interface runs and what its packets did.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context};
use wirespeed_fp::daemon::{self, Config, Daemon};
use wirespeed_fp::model::BridgeHook;
use wirespeed_fp::status;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// Watch links, addresses, routes, rules, neighbours, sysctls and nftables; keep the
    /// fast path in step until SIGINT/SIGTERM, then detach cleanly.
    Run {
        /// Serve only these interfaces (comma-separated); default: every eligible one.
        #[arg(long, value_delimiter = ',')]
        interfaces: Option<Vec<String>>,
        /// Status file (default: one per network namespace under /run/wirespeed/fp).
        #[arg(long)]
        status: Option<PathBuf>,
        /// Allow attaching in the host's own network namespace (off: lab namespaces only).
        #[arg(long)]
        allow_host: bool,
        /// Hook for bridge ports: `auto` puts a bridge's ports at TC ingress when one of
        /// them is a veth (its frames end in a container, where an XDP redirect would need a
        /// program on the peer), a tap (a VM's TSO super-frames are forwarded whole only at
        /// TC) or takes no XDP-redirected frames, else at XDP; `xdp` and `tc` force one.
        #[arg(long, value_enum, default_value_t = BridgeHookArg::Auto)]
        bridge_hook: BridgeHookArg,
        /// Ask the kernel's FIB for every IPv4 packet instead of answering repeat
        /// destinations (and, with rp_filter on, repeat sources) from the route cache. The
        /// cache forwards on the old answer from a
        /// route, neighbour or link change until the daemon has seen its event (the
        /// response time `fp status` shows); without it the fast path is exact at every
        /// packet, and slower.
        #[arg(long)]
        no_route_cache: bool,
        /// Serve Prometheus metrics at http://ADDR:PORT/metrics (docs/METRICS.md), e.g.
        /// 127.0.0.1:9101.
        #[arg(long, value_name = "ADDR:PORT")]
        metrics: Option<std::net::SocketAddr>,
        /// Say that no SELinux secmark rule (in any namespace), NetLabel labeling or labeled
        /// IPsec is in use. Where the policy has network_peer_controls, SELinux checks
        /// forwarded packets only where one is, which fp cannot read: without this flag it
        /// leaves forwarding to the kernel there.
        #[arg(long)]
        assume_no_selinux_labels: bool,
    },
    /// Per interface: hook, modules, map sizes, packets fast-pathed vs passed and why, and
    /// the response time from kernel event to updated data path.
    Status {
        /// Print the status as JSON (with `running`: whether the daemon is alive).
        #[arg(long)]
        json: bool,
        /// Status file to read (default: this network namespace's, as `fp run` writes it).
        #[arg(long)]
        status: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BridgeHookArg {
    Auto,
    Xdp,
    Tc,
}

static STOP: AtomicBool = AtomicBool::new(false);

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.cmd {
        Cmd::Run {
            interfaces,
            status,
            allow_host,
            bridge_hook,
            no_route_cache,
            metrics,
            assume_no_selinux_labels,
        } => {
            if daemon::lab_netns().is_none() && !allow_host {
                bail!(
                    "refusing to attach outside a lab namespace: run it as \
                     `ip netns exec ws-NAME wirespeed fp run`, or pass --allow-host"
                );
            }
            // Blocked here, on the main thread before any other starts, so that every thread
            // inherits the mask and SIGINT/SIGTERM reach only the signalfd; a watcher thread
            // turns the first one (or a failure to read them) into the daemon's stop flag.
            super::stop_on_signal("fp signals", |_| STOP.store(true, Ordering::Relaxed))?;
            let cfg = Config {
                only: interfaces,
                status_path: status.unwrap_or_else(status::default_status_path),
                bridge_hook: match bridge_hook {
                    BridgeHookArg::Auto => BridgeHook::Auto,
                    BridgeHookArg::Xdp => BridgeHook::Xdp,
                    BridgeHookArg::Tc => BridgeHook::Tc,
                },
                route_cache: !no_route_cache,
                metrics,
                assume_no_selinux_labels,
                unbound_xdp: false,
            };
            eprintln!(
                "wirespeed fp: running; status in {}{}",
                cfg.status_path.display(),
                metrics.map_or(String::new(), |a| format!(
                    "; metrics on http://{a}/metrics"
                ))
            );
            let daemon = Daemon::new(cfg).context("start the fast-path daemon")?;
            if !daemon.knows_xdp_features() {
                eprintln!(
                    "wirespeed fp: this kernel does not say which devices take XDP-redirected \
                     frames (netdev generic netlink, Linux 6.3+): every port is served at TC \
                     ingress, whose redirect every device takes"
                );
            }
            // docs/FASTPATH.md, "Sysctls without events": what is lost without the hooks.
            if let Some(why) = daemon.write_hooks_missing() {
                eprintln!(
                    "wirespeed fp: {why}: sysctl and iptables-legacy writes are seen only by \
                     polling (up to {} ms late), an ebtables-legacy write not at all, and \
                     multipath routes go to the kernel (they attach where cgroup2 is mounted, or \
                     with CAP_SYS_ADMIN to mount it)",
                    5 * daemon::POLL_PERIOD.as_millis()
                );
            }
            daemon.run(&STOP).context("fast-path daemon")?;
            Ok(())
        }
        Cmd::Status { json, status } => {
            let path = status.unwrap_or_else(status::default_status_path);
            let s = status::read_status_file(&path).with_context(|| {
                format!(
                    "no fast-path status at {} (is `wirespeed fp run` running here?)",
                    path.display()
                )
            })?;
            let alive = s.running && wirespeed_sys::process::alive(s.pid);
            if json {
                let mut v = serde_json::to_value(&s)?;
                v["running"] = serde_json::Value::Bool(alive);
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            // The file says what the daemon last wrote; whether it still runs is asked now.
            let s = status::Status {
                running: alive,
                ..s
            };
            print!("{s}");
            Ok(())
        }
    }
}
