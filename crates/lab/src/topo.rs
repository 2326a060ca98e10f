//! Named lab topologies (`pair`, `line`, `lb`, `lb-cluster`) and tuning profiles (`default`,
//! `nic`, `tuned`).
//!
//! A lab called NAME owns the namespaces `ws-NAME-ROLE`. Each link is a veth pair with one
//! /24 from 198.18.0.0/15 and one /64 from fd00::/8; a forwarding node (the `line` DUT, the
//! `lb`, the `lb-cluster` router) takes `.254` / `::fe` on each of its links and the leaf takes
//! `.1` / `::1` and routes everything through it. `lb-cluster` also has two shared segments,
//! bridges on its router (the rack's switches): the lb nodes' uplinks are ports of `rack`, and
//! their second arms and the reals are ports of `reals`, so that every node reaches every real
//! in one hop, as DR needs, and can lose its reals' side alone. Every change that is not
//! confined to a lab namespace is recorded in [`crate::state`] before it is made.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::netns::{add_addr, Netns, Veth};
pub use crate::plan::Topology;
use crate::plan::{bridge_subnet, plan, LinkPlan, RACK};
use crate::state::{self, LabRecord};
pub use crate::state::{Iface, Node};
use crate::{sh, Error, Result, NAME_PREFIX};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Changes nothing beyond links and addresses.
    Default,
    /// An untuned NIC as the receive model stands it in: with `napi`, each veth queue gets
    /// the NAPI a NIC queue has (GRO on, TSO off, threaded) and the qdisc a NIC gets (the
    /// kernel's default) on the kernel's default CPUs, as
    /// a NIC's interrupt lands wherever its default affinity puts it; nothing is pinned,
    /// deferred or busy-polled. With `rps` or `sender` it is `default`.
    Nic,
    /// GRO, the kernel's default qdisc, each queue's receive on its node's CPU (threaded NAPI
    /// pinned, or RPS: see [`RxModel`]), XPS, epoll busy polling (`net.core.busy_poll`, host-wide, restored); NAPI
    /// deferral (interrupt moderation) only when [`LabSpec::napi_defer_hard_irqs`] is set.
    Tuned,
}

impl Profile {
    pub fn parse(s: &str) -> Result<Profile> {
        match s {
            "default" => Ok(Profile::Default),
            "nic" => Ok(Profile::Nic),
            "tuned" => Ok(Profile::Tuned),
            _ => Err(Error::Invalid(format!(
                "unknown profile `{s}` (default, nic, tuned)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Nic => "nic",
            Profile::Tuned => "tuned",
        }
    }
}

/// How the tuned profile stands in for a NIC's receive queues on a veth, where by default a
/// packet's whole receive runs in the sender's softirq, on the sender's CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RxModel {
    /// Each veth queue's NAPI polls in a kthread of its own (threaded NAPI) pinned to the
    /// node's CPU, as IRQ affinity pins a NIC queue's interrupt; the sender only queues the
    /// packet and, unless the NAPI is already scheduled or deferred, wakes that thread.
    /// NAPI deferral and busy polling then act on it as on a NIC's queue.
    Napi,
    /// `Napi`, and in the untuned (`nic`) profile too each queue's thread stays on its node's
    /// CPUs, as a host's interrupts stay on that host: the server's receive never borrows
    /// the load generator's CPU, nor the other way round.
    NapiHost,
    /// RPS to the node's CPUs: the sender's softirq hands every packet over to the node's CPU
    /// with an inter-processor interrupt.
    Rps,
    /// The veth's default: the receive stays on the sender's CPU.
    Sender,
}

impl RxModel {
    pub fn parse(s: &str) -> Result<RxModel> {
        match s {
            "napi" => Ok(RxModel::Napi),
            "napi-host" => Ok(RxModel::NapiHost),
            "rps" => Ok(RxModel::Rps),
            "sender" => Ok(RxModel::Sender),
            _ => Err(Error::Invalid(format!(
                "unknown receive model `{s}` (napi, napi-host, rps, sender)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RxModel::Napi => "napi",
            RxModel::NapiHost => "napi-host",
            RxModel::Rps => "rps",
            RxModel::Sender => "sender",
        }
    }

    /// Each queue's NAPI polls in a thread of its own.
    pub fn threaded_napi(self) -> bool {
        matches!(self, RxModel::Napi | RxModel::NapiHost)
    }
}

/// What to build.
#[derive(Clone, Debug)]
pub struct LabSpec {
    /// 1 to 6 characters of [a-z0-9]; namespaces are `ws-NAME-ROLE`.
    pub name: String,
    pub topology: Topology,
    /// rx and tx queues per veth end.
    pub queues: u32,
    pub profile: Profile,
    /// `lb` and `lb-cluster` only.
    pub clients: usize,
    pub backends: usize,
    /// `lb-cluster` only: the load-balancer nodes.
    pub lb_nodes: usize,
    /// Role -> CPUs that should process its packets (RPS/XPS in the tuned profile). Roles
    /// not listed use the topology's default (client side CPU 0, server side CPU 1).
    pub cpus: BTreeMap<String, Vec<usize>>,
    /// net.core.busy_poll in the tuned profile (µs): poll, select and epoll busy-poll the
    /// queue before they sleep. `net.core.busy_read` stays as it is: it makes every
    /// non-blocking read that finds nothing poll the queue, which an event loop does once per
    /// request (docs/INSTRUMENTS.md has the measurement).
    pub busy_poll_us: u32,
    /// The tuned profile's NAPI gro_flush_timeout (ns) and napi_defer_hard_irqs, which is how
    /// interrupt moderation acts on a veth queue: the sender no longer wakes a deferred NAPI,
    /// its timer (or the application's busy poll) does. 0 leaves the kernel's default (no
    /// deferral).
    pub gro_flush_timeout_ns: u64,
    pub napi_defer_hard_irqs: u32,
    /// The roles whose veths get that deferral; empty: every node. The showdown moderates the
    /// server's queue only: the load generator's host is the same in every row.
    pub napi_defer_roles: Vec<String>,
    /// Where the tuned profile runs each node's receive.
    pub rx_model: RxModel,
}

impl LabSpec {
    pub fn new(name: &str, topology: Topology) -> LabSpec {
        LabSpec {
            name: name.to_string(),
            topology,
            queues: 1,
            profile: Profile::Default,
            clients: 1,
            backends: 2,
            lb_nodes: 3,
            cpus: BTreeMap::new(),
            busy_poll_us: 50,
            gro_flush_timeout_ns: 0,
            napi_defer_hard_irqs: 0,
            napi_defer_roles: Vec::new(),
            rx_model: RxModel::Napi,
        }
    }
}

fn ncpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn default_cpus(role: &str) -> Vec<usize> {
    let server_side = matches!(role, "s" | "dut" | "lb" | "rt");
    vec![if server_side { 1 % ncpus() } else { 0 }]
}

/// A CPU mask as sysfs takes it (rps_cpus, xps_cpus): comma-separated 32-bit hex words.
pub fn cpu_mask(cpus: &[usize]) -> String {
    // The kernel takes comma-separated 32-bit hex words, most significant first.
    let max = cpus.iter().copied().max().unwrap_or(0);
    let mut words = vec![0u32; max / 32 + 1];
    for &c in cpus {
        words[c / 32] |= 1 << (c % 32);
    }
    words
        .iter()
        .rev()
        .map(|w| format!("{w:x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// What a lab about to be built will hold: its nodes, each in a namespace of its own with
/// the CPUs the spec gives its role; interfaces are added as the links are made.
fn new_record(spec: &LabSpec, roles: &[(String, bool)]) -> LabRecord {
    let nodes: Vec<Node> = roles
        .iter()
        .map(|(role, _)| Node {
            role: role.clone(),
            ns: format!("{NAME_PREFIX}{}-{role}", spec.name),
            ifaces: vec![],
            cpus: spec
                .cpus
                .get(role)
                .cloned()
                .unwrap_or_else(|| default_cpus(role)),
        })
        .collect();
    LabRecord {
        name: spec.name.clone(),
        topology: spec.topology.name().into(),
        profile: spec.profile.name().into(),
        namespaces: nodes.iter().map(|n| n.ns.clone()).collect(),
        nodes,
        daemons: vec![],
        run_dir: None,
    }
}

/// A lab that exists while this value lives (unless [`Lab::keep`] is called).
#[derive(Debug)]
pub struct Lab {
    record: LabRecord,
    namespaces: Vec<Netns>,
    kept: bool,
    /// What the profile did and what it could not do on this kernel.
    pub tuning: Vec<String>,
    /// Role -> the pids of its interfaces' NAPI threads (threaded NAPI only): the node's
    /// receive work, which a probe charges to the node as a NIC host's CPU would pay it.
    napi_threads: BTreeMap<String, Vec<u32>>,
}

/// A veth hands a TSO-capable sender's TCP skb to its peer's backlog on the sender's CPU,
/// never to the peer's NAPI (only skbs a veth could not have aggregated anyway take that path).
/// A NIC segments in hardware and its receiver's queue takes every frame; so the sending side
/// segments (GSO, in software) and every frame meets the receiving queue's NAPI.
fn tso_off(ns: &Netns, role: &str, dev: &str) -> String {
    match ns.exec("ethtool", &["-K", dev, "tso", "off"]) {
        Ok(_) => format!("{role}:{dev} tso off (gso on)"),
        Err(e) => format!("{role}:{dev} tso: not turned off ({e}); TCP stays on the sender's CPU"),
    }
}

/// A NIC comes up with the kernel's default qdisc (`net.core.default_qdisc`, under `mq` when
/// it has several TX queues); a veth comes up with none (`noqueue`), so when its peer's
/// receive ring (256 frames) is full it drops the frame, which a NIC's qdisc would have held,
/// and a lost response waits some 200 ms for TCP's tail-loss probe. With a qdisc the veth
/// stops its queue instead until the peer drains (the qdisc counts it in `requeues`).
fn nic_qdisc(ns: &Netns, role: &str, dev: &str, queues: u32) -> String {
    let kind = if queues > 1 {
        "mq".to_string()
    } else {
        std::fs::read_to_string("/proc/sys/net/core/default_qdisc")
            .map(|k| k.trim().to_string())
            .unwrap_or_else(|_| "pfifo_fast".to_string())
    };
    match ns.exec("tc", &["qdisc", "replace", "dev", dev, "root", &kind]) {
        Ok(_) => format!("{role}:{dev} qdisc {kind}"),
        Err(e) => format!("{role}:{dev} qdisc: not applied ({e}); a full peer ring drops frames"),
    }
}

/// A bridge of the rack's on `node`, up, with the node's address on its subnet. Spanning tree
/// stays off (the kernel's default), so a port forwards as soon as it is up.
fn add_bridge(ns: &Netns, node: &mut Node, bridge: &str, host: u32) -> Result<()> {
    ns.ip(&["link", "add", bridge, "type", "bridge"])?;
    let subnet = bridge_subnet(bridge);
    let v4 = format!("198.18.{subnet}.{host}/24");
    let v6 = format!("fd00:{subnet:x}::{host:x}/64");
    add_addr(ns, bridge, &v4)?;
    add_addr(ns, bridge, &v6)?;
    ns.ip(&["link", "set", bridge, "up"])?;
    let peer = if bridge == RACK {
        "lb nodes"
    } else {
        "lb nodes, backends"
    };
    node.ifaces.push(Iface {
        name: bridge.to_string(),
        v4,
        v6,
        peer: peer.to_string(),
    });
    Ok(())
}

pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 6
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(Error::Invalid(format!(
            "lab name `{name}` must be 1 to 6 characters of a-z0-9"
        )));
    }
    Ok(())
}

impl Lab {
    /// Builds the topology and applies the profile. On error everything made so far is undone.
    pub fn up(spec: &LabSpec) -> Result<Lab> {
        validate_name(&spec.name)?;
        let (roles, links) = plan(spec.topology, spec.clients, spec.backends, spec.lb_nodes);
        let mut record = new_record(spec, &roles);
        {
            let l = state::lock()?;
            if state::load_lab(&spec.name)?.is_some() {
                return Err(Error::Invalid(format!(
                    "lab `{}` is already up: run `wirespeed lab down {}` first",
                    spec.name, spec.name
                )));
            }
            // Recorded before anything exists, so a crash at any later point is recoverable.
            state::save_lab(&l, &record)?;
        }
        let mut lab = Lab {
            record: record.clone(),
            namespaces: vec![],
            kept: false,
            tuning: vec![],
            napi_threads: BTreeMap::new(),
        };
        let built = (|| -> Result<()> {
            for n in &record.nodes {
                let ns = Netns::create(&n.ns)?;
                // Link-local addresses still in DAD make the first forwarded IPv6 packets
                // vanish; lab addresses are unique by construction.
                ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
                ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
                lab.namespaces.push(ns);
            }
            lab.connect(&mut record, &links, spec.queues)?;
            for (i, (_, forwards)) in roles.iter().enumerate() {
                if *forwards {
                    lab.namespaces[i].sysctl("net.ipv4.ip_forward", "1")?;
                    lab.namespaces[i].sysctl("net.ipv6.conf.all.forwarding", "1")?;
                }
            }
            lab.record = record.clone();
            {
                let l = state::lock()?;
                state::save_lab(&l, &lab.record)?;
            }
            match spec.profile {
                Profile::Tuned => lab.tune(spec)?,
                Profile::Nic if spec.rx_model.threaded_napi() => lab.untuned_nic(spec)?,
                Profile::Nic | Profile::Default => {}
            }
            Ok(())
        })();
        match built {
            Ok(()) => Ok(lab),
            Err(e) => {
                drop(lab);
                Err(e)
            }
        }
    }

    /// The bridges, then each link of the plan: a veth pair, its addresses (the hub's end on
    /// a bridge of its), and a leaf's default routes through the first link it was given.
    fn connect(&self, record: &mut LabRecord, links: &[LinkPlan], queues: u32) -> Result<()> {
        let mut bridges: Vec<(usize, &str)> = vec![];
        for l in links {
            if let Some(b) = l.bridge.filter(|b| !bridges.contains(&(l.b, *b))) {
                bridges.push((l.b, b));
                add_bridge(&self.namespaces[l.b], &mut record.nodes[l.b], b, l.b_host)?;
            }
        }
        // A leaf routes through the link it was given first (a node's uplink).
        let mut routed = vec![false; record.nodes.len()];
        let mut next_if = vec![0usize; record.nodes.len()];
        for l in links {
            let (ia, ib) = (
                format!("eth{}", next_if[l.a]),
                format!("eth{}", next_if[l.b]),
            );
            next_if[l.a] += 1;
            next_if[l.b] += 1;
            Veth::create(
                &self.namespaces[l.a],
                &ia,
                &self.namespaces[l.b],
                &ib,
                queues,
            )?;
            let mut ends = vec![(l.a, &ia, l.a_host, l.b)];
            if let Some(bridge) = l.bridge {
                self.namespaces[l.b].ip(&["link", "set", &ib, "master", bridge])?;
            } else {
                ends.push((l.b, &ib, l.b_host, l.a));
            }
            for (idx, ifname, host, peer) in ends {
                let v4 = format!("198.18.{}.{host}/24", l.subnet);
                let v6 = format!("fd00:{:x}::{:x}/64", l.subnet, host);
                add_addr(&self.namespaces[idx], ifname, &v4)?;
                add_addr(&self.namespaces[idx], ifname, &v6)?;
                let peer_role = record.nodes[peer].role.clone();
                record.nodes[idx].ifaces.push(Iface {
                    name: ifname.clone(),
                    v4,
                    v6,
                    peer: peer_role,
                });
            }
            if l.b_host == 254 && !routed[l.a] {
                routed[l.a] = true;
                let ns = &self.namespaces[l.a];
                ns.ip(&[
                    "route",
                    "add",
                    "default",
                    "via",
                    &format!("198.18.{}.254", l.subnet),
                ])?;
                ns.ip(&[
                    "-6",
                    "route",
                    "add",
                    "default",
                    "via",
                    &format!("fd00:{:x}::fe", l.subnet),
                ])?;
            }
        }
        Ok(())
    }

    fn tune(&mut self, spec: &LabSpec) -> Result<()> {
        let mut notes = vec![format!("receive model: {}", spec.rx_model.name())];
        // One lab at a time: the NAPI threads a device gets are told apart from the others'
        // by what appeared while it was switched to threaded mode.
        let l = state::lock()?;
        for (node, ns) in self.record.nodes.iter().zip(&self.namespaces) {
            let m = cpu_mask(&node.cpus);
            for ifc in &node.ifaces {
                let dev = &ifc.name;
                // GRO on a veth also turns on its NAPI instance, which the knobs below act on.
                match ns.exec("ethtool", &["-K", dev, "gro", "on"]) {
                    Ok(_) => notes.push(format!("{}:{dev} gro on", node.role)),
                    Err(e) => notes.push(format!("{}:{dev} gro: not applied ({e})", node.role)),
                }
                notes.push(nic_qdisc(ns, &node.role, dev, spec.queues));
                let mut writes = vec![];
                let moderated =
                    spec.napi_defer_roles.is_empty() || spec.napi_defer_roles.contains(&node.role);
                if spec.napi_defer_hard_irqs > 0 && moderated {
                    writes.push((
                        format!("/sys/class/net/{dev}/gro_flush_timeout"),
                        spec.gro_flush_timeout_ns.to_string(),
                    ));
                    writes.push((
                        format!("/sys/class/net/{dev}/napi_defer_hard_irqs"),
                        spec.napi_defer_hard_irqs.to_string(),
                    ));
                } else {
                    notes.push(format!("{}:{dev} NAPI deferral off", node.role));
                }
                for q in 0..spec.queues.max(1) {
                    if spec.rx_model == RxModel::Rps {
                        writes.push((
                            format!("/sys/class/net/{dev}/queues/rx-{q}/rps_cpus"),
                            m.clone(),
                        ));
                    }
                    // A single-queue veth refuses XPS (it has nothing to choose between).
                    if spec.queues > 1 {
                        let xcpu = node.cpus[q as usize % node.cpus.len()];
                        writes.push((
                            format!("/sys/class/net/{dev}/queues/tx-{q}/xps_cpus"),
                            cpu_mask(&[xcpu]),
                        ));
                    }
                }
                for (path, value) in writes {
                    // sysfs under `ip netns exec` shows the namespace's own devices.
                    match ns.exec("sh", &["-c", &format!("echo {value} > {path}")]) {
                        Ok(_) => notes.push(format!("{}:{path}={value}", node.role)),
                        Err(e) => notes.push(format!("{}:{path}: not applied ({e})", node.role)),
                    }
                }
                if spec.rx_model.threaded_napi() {
                    notes.push(tso_off(ns, &node.role, dev));
                    let (note, pids) = crate::napi::threaded(
                        ns,
                        &node.role,
                        dev,
                        crate::napi::Placement::OnePerQueue(&node.cpus),
                    );
                    notes.push(note);
                    self.napi_threads
                        .entry(node.role.clone())
                        .or_default()
                        .extend(pids);
                }
            }
            // A packet socket (tcpdump, a leftover capture) puts every skb through a tap.
            let packet = ns.exec("cat", &["/proc/net/packet"]).unwrap_or_default();
            let n = packet.lines().count().saturating_sub(1);
            notes.push(format!("{}: {n} packet sockets", node.role));
        }
        let v = spec.busy_poll_us.to_string();
        let key = "net.core.busy_poll";
        state::set_host_sysctl(&l, &self.record.name, key, &v)?;
        notes.push(format!("host {key}={v} (recorded, restored on down)"));
        self.tuning = notes;
        Ok(())
    }

    /// The `nic` profile with a threaded-NAPI model: every queue gets a NAPI thread, on the
    /// kernel's default CPUs (`napi`) or on its node's CPUs (`napi-host`), none pinned to one
    /// CPU of its own.
    fn untuned_nic(&mut self, spec: &LabSpec) -> Result<()> {
        let host = spec.rx_model == RxModel::NapiHost;
        let mut notes = vec![if host {
            "receive model: napi-host, untuned (threads on their node's CPUs)".into()
        } else {
            "receive model: napi, untuned (threads on the default CPUs)".into()
        }];
        let _l = state::lock()?;
        for (node, ns) in self.record.nodes.iter().zip(&self.namespaces) {
            for ifc in &node.ifaces {
                let dev = &ifc.name;
                match ns.exec("ethtool", &["-K", dev, "gro", "on"]) {
                    Ok(_) => notes.push(format!("{}:{dev} gro on", node.role)),
                    Err(e) => notes.push(format!("{}:{dev} gro: not applied ({e})", node.role)),
                }
                notes.push(tso_off(ns, &node.role, dev));
                notes.push(nic_qdisc(ns, &node.role, dev, spec.queues));
                let placement = if host {
                    crate::napi::Placement::Among(&node.cpus)
                } else {
                    crate::napi::Placement::Default
                };
                let (note, pids) = crate::napi::threaded(ns, &node.role, dev, placement);
                notes.push(note);
                self.napi_threads
                    .entry(node.role.clone())
                    .or_default()
                    .extend(pids);
            }
        }
        self.tuning = notes;
        Ok(())
    }

    /// The pids of `role`'s NAPI threads (empty unless the profile made NAPI threaded).
    pub fn napi_threads(&self, role: &str) -> &[u32] {
        self.napi_threads.get(role).map_or(&[], Vec::as_slice)
    }

    pub fn name(&self) -> &str {
        &self.record.name
    }

    pub fn record(&self) -> &LabRecord {
        &self.record
    }

    /// Records the daemons the lab started and their directory (removed on down).
    pub fn set_daemons(
        &mut self,
        run_dir: std::path::PathBuf,
        daemons: Vec<crate::daemon::Daemon>,
    ) -> Result<()> {
        self.record.run_dir = Some(run_dir);
        self.record.daemons = daemons;
        let l = state::lock()?;
        state::save_lab(&l, &self.record)
    }

    pub fn node(&self, role: &str) -> Option<&Node> {
        self.record.nodes.iter().find(|n| n.role == role)
    }

    pub fn ns(&self, role: &str) -> Option<&Netns> {
        let i = self.record.nodes.iter().position(|n| n.role == role)?;
        self.namespaces.get(i)
    }

    /// Leaves the lab up after this value drops (`wirespeed lab up`); `lab down` removes it.
    pub fn keep(mut self) -> LabRecord {
        self.kept = true;
        self.record.clone()
    }

    /// Removes the lab now and reports what host-wide values were restored.
    pub fn down(mut self) -> Result<Vec<String>> {
        self.kept = true; // drop must not do it twice
        let names = std::mem::take(&mut self.namespaces);
        teardown(&self.record.name, names)
    }
}

fn teardown(name: &str, namespaces: Vec<Netns>) -> Result<Vec<String>> {
    drop(namespaces);
    if let Some(dir) = state::load_lab(name).ok().flatten().and_then(|r| r.run_dir) {
        let _ = std::fs::remove_dir_all(dir);
    }
    let l = state::lock()?;
    let restored = state::release_host(&l, name);
    state::remove_lab(&l, name);
    restored
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.kept {
            let names = std::mem::take(&mut self.namespaces);
            let _ = teardown(&self.record.name, names);
        } else {
            for ns in std::mem::take(&mut self.namespaces) {
                let _ = ns.keep();
            }
        }
    }
}

/// `lab down NAME`: removes a lab left up by `lab up`.
pub fn down(name: &str) -> Result<Vec<String>> {
    validate_name(name)?;
    let rec = state::load_lab(name)?;
    let namespaces = match rec {
        Some(r) => r.namespaces.iter().map(|n| Netns::adopt(n)).collect(),
        None => {
            // No record: still remove namespaces that carry this lab's prefix.
            let prefix = format!("{NAME_PREFIX}{name}-");
            list_namespaces()?
                .into_iter()
                .filter(|n| n.starts_with(&prefix))
                .map(|n| Netns::adopt(&n))
                .collect()
        }
    };
    teardown(name, namespaces)
}

/// `lab down --all`: every recorded lab, every host-wide value, every `ws-*` namespace.
pub fn down_all() -> Result<Vec<String>> {
    let mut report = vec![];
    for name in state::lab_names() {
        match down(&name) {
            Ok(r) => report.push(format!(
                "lab {name} down{}",
                if r.is_empty() {
                    String::new()
                } else {
                    format!(", restored {}", r.join(" "))
                }
            )),
            Err(e) => report.push(format!("lab {name}: {e}")),
        }
    }
    {
        let l = state::lock()?;
        for r in state::restore_all_host(&l)? {
            report.push(format!("restored {r}"));
        }
    }
    for ns in list_namespaces()? {
        if ns.starts_with(NAME_PREFIX) {
            drop(Netns::adopt(&ns));
            report.push(format!("deleted namespace {ns}"));
        }
    }
    Ok(report)
}

/// Names from `ip netns list`.
pub fn list_namespaces() -> Result<Vec<String>> {
    Ok(sh("ip", &["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Labs with a state file.
pub fn list() -> Result<Vec<LabRecord>> {
    Ok(state::lab_names()
        .iter()
        .filter_map(|n| state::load_lab(n).ok().flatten())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_names() {
        assert_eq!(cpu_mask(&[0]), "1");
        assert_eq!(cpu_mask(&[1]), "2");
        assert_eq!(cpu_mask(&[0, 33]), "2,1");
        assert!(validate_name("sd1").is_ok());
        assert!(validate_name("toolong").is_err());
        assert!(validate_name("A").is_err());
        assert!(validate_name("").is_err());
    }
}
