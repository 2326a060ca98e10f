//! `wirespeed lab up|down|exec|list`: lab topologies in network namespaces (see crates/lab).

use std::collections::BTreeMap;

use anyhow::Context;
use wirespeed_lab::lb_cluster;
use wirespeed_lab::topo::{self, Lab, LabSpec, Profile, Topology};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Build a topology: pair (c <-> s), line (src <-> dut <-> snk), lb (cN <-> lb <-> bN),
    /// lb-cluster (cN <-> rt; lbN's eth0 on rt's rack bridge, lbN's eth1 and rN on rt's reals
    /// bridge; FRR on rt, `lb run` and ExaBGP on every lbN: docs/LB.md, "A cluster lab").
    Up(UpArgs),
    /// Remove a lab and restore every host-wide setting it changed.
    Down {
        /// Lab name (as given to `lab up --name`).
        name: Option<String>,
        /// Every recorded lab, every recorded host-wide setting and every ws-* namespace
        /// (recovery after a crash).
        #[arg(long)]
        all: bool,
    },
    /// Run a command inside one node of a lab: `lab exec NAME ROLE -- CMD ARGS...`.
    Exec {
        name: String,
        role: String,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Show the labs that are up.
    List {
        /// The lab records as JSON (nodes, addresses, daemons with their pids and logs).
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct UpArgs {
    /// pair, line, lb or lb-cluster
    topology: String,
    /// 1-6 characters of a-z0-9; namespaces are ws-NAME-ROLE.
    #[arg(long, default_value = "lab")]
    name: String,
    /// rx/tx queues per veth end.
    #[arg(long, default_value_t = 1)]
    queues: u32,
    /// default (changes nothing), nic (an untuned NIC: with --rx-model napi, GRO on, TSO off,
    /// threaded NAPI on the default CPUs) or tuned (GRO, threaded NAPI pinned
    /// to each node's CPU, XPS, busy poll).
    #[arg(long, default_value = "default")]
    profile: String,
    /// Tuned and nic profiles: where each node's receive runs. napi (each queue's NAPI in a thread
    /// pinned to the node's CPU, as IRQ affinity pins a NIC queue; nic: on the default CPUs),
    /// napi-host (the same; nic: on the node's CPUs), rps (RPS hand-over by IPI), sender (the
    /// veth default: on the sending CPU).
    #[arg(long, default_value = "napi")]
    rx_model: String,
    /// lb, lb-cluster: number of client namespaces [default: lb 1, lb-cluster 2].
    #[arg(long)]
    clients: Option<usize>,
    /// lb, lb-cluster: number of backend namespaces [default: lb 2, lb-cluster 4].
    #[arg(long)]
    backends: Option<usize>,
    /// lb-cluster: number of load-balancer nodes (1-8).
    #[arg(long, default_value_t = 3)]
    lb_nodes: usize,
    /// lb-cluster: each node's `lb run --announce-hold-down`, seconds.
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    announce_hold_down: f64,
    /// lb-cluster: each node's `lb run --drain`, seconds.
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    drain: f64,
    /// CPUs that process a role's packets, e.g. --cpus s=1 --cpus c=0 (tuned profile).
    #[arg(long = "cpus")]
    cpus: Vec<String>,
    /// Busy-poll time in µs for net.core.busy_poll: poll, select and epoll busy-poll the queue
    /// before they sleep (tuned profile).
    #[arg(long, default_value_t = 50)]
    busy_poll_us: u32,
    /// Stay in the foreground and take the lab down on Ctrl-C / SIGTERM.
    #[arg(long)]
    hold: bool,
}

fn print_lab(r: &wirespeed_lab::state::LabRecord) {
    println!("lab {} ({}, profile {})", r.name, r.topology, r.profile);
    for n in &r.nodes {
        let addrs: Vec<String> = n
            .ifaces
            .iter()
            .map(|i| format!("{} {} {} -> {}", i.name, i.v4, i.v6, i.peer))
            .collect();
        println!(
            "  {:<4} {:<15} cpus {:?}  {}",
            n.role,
            n.ns,
            n.cpus,
            addrs.join("; ")
        );
    }
}

/// Blocks until SIGINT or SIGTERM arrives; no handler runs, the signal is read from a signalfd.
fn wait_for_signal() -> anyhow::Result<()> {
    super::wait_for_termination(&super::block_termination()?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.action {
        Action::Up(a) => {
            let mut spec = LabSpec::new(&a.name, Topology::parse(&a.topology)?);
            spec.queues = a.queues;
            spec.profile = Profile::parse(&a.profile)?;
            spec.rx_model = wirespeed_lab::RxModel::parse(&a.rx_model)?;
            let cluster = spec.topology == Topology::LbCluster;
            spec.clients = a.clients.unwrap_or(if cluster { 2 } else { 1 });
            spec.backends = a.backends.unwrap_or(if cluster { 4 } else { 2 });
            spec.lb_nodes = a.lb_nodes;
            spec.busy_poll_us = a.busy_poll_us;
            let mut cpus = BTreeMap::new();
            for c in &a.cpus {
                let (role, list) = c
                    .split_once('=')
                    .with_context(|| format!("--cpus `{c}`: want ROLE=LIST, e.g. s=1"))?;
                cpus.insert(role.to_string(), wirespeed_load::cpu::parse_cpu_list(list)?);
            }
            spec.cpus = cpus;
            let mut lab = Lab::up(&spec).with_context(|| format!("lab up {}", a.name))?;
            if cluster {
                let opts = lb_cluster::ClusterOptions {
                    exe: std::env::current_exe().context("find the wirespeed binary")?,
                    hold_down_s: a.announce_hold_down,
                    drain_s: a.drain,
                };
                for line in lb_cluster::start(&mut lab, &opts)? {
                    println!("  {line}");
                }
            }
            print_lab(lab.record());
            for t in &lab.tuning {
                println!("  tuned: {t}");
            }
            if a.hold {
                println!("holding; Ctrl-C takes the lab down");
                wait_for_signal()?;
                for r in lab.down()? {
                    println!("restored {r}");
                }
            } else {
                lab.keep();
                println!("`wirespeed lab down {}` removes it", a.name);
            }
            Ok(())
        }
        Action::Down { name, all } => {
            if all {
                for line in topo::down_all()? {
                    println!("{line}");
                }
                return Ok(());
            }
            let name = name.context("give a lab name or --all")?;
            for r in topo::down(&name)? {
                println!("restored {r}");
            }
            Ok(())
        }
        Action::Exec { name, role, cmd } => {
            topo::validate_name(&name)?;
            let ns = format!("{}{name}-{role}", wirespeed_lab::NAME_PREFIX);
            let status = std::process::Command::new("ip")
                .args(["netns", "exec", &ns])
                .args(&cmd)
                .status()
                .with_context(|| format!("run {:?} in {ns}", cmd))?;
            std::process::exit(status.code().unwrap_or(1));
        }
        Action::List { json } => {
            let labs = topo::list()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&labs)?);
                return Ok(());
            }
            if labs.is_empty() {
                println!("no labs up");
            }
            for r in &labs {
                print_lab(r);
            }
            let stray: Vec<String> = topo::list_namespaces()?
                .into_iter()
                .filter(|n| {
                    n.starts_with(wirespeed_lab::NAME_PREFIX)
                        && !labs.iter().any(|l| l.namespaces.contains(n))
                })
                .collect();
            if !stray.is_empty() {
                println!(
                    "other ws-* namespaces (tests, or a crash; `lab down --all` removes them): {}",
                    stray.join(" ")
                );
            }
            Ok(())
        }
    }
}
