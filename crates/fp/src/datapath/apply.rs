//! The loader's side of reconcile: executes the actions against the programs, their links and
//! maps, and keeps what is in place (the ports' programs, the plan and FDB last applied).

use std::collections::{BTreeMap, BTreeSet};

use crate::datapath::attach::{self, Attachment};
use crate::datapath::loader::{BridgeMaps, Program, SharedMaps};
use crate::datapath::reconcile::{Action, Actions, Current};
use crate::datapath::stats::{Counters, PortCounters};
use crate::error::{Error, Result};
use crate::filter::classify::Tables;
use crate::filter::FilterPlan;
use crate::model::features::Features;
use crate::model::plan::{Plan, PortPlan};
use crate::model::FdbKey;

/// Programs kept loaded per port after being swapped out, with their filter tables: swapping
/// back (a rule deleted again, a link flapping) is then a link update, not a verifier run.
const SPARE_PROGRAMS: usize = 4;

/// One served interface: the program attached, its filter tables, its spares.
/// What one run of the actions changed in the data path: the last port change made, else
/// whether maps were written; the daemon adds a route cache dropped. `fp status` names it for
/// each response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    None,
    Maps,
    RouteCache,
    Detach,
    Swap,
    Attach,
}

impl Applied {
    /// As `fp status` shows it.
    pub fn name(self) -> &'static str {
        match self {
            Applied::None => "none",
            Applied::Maps => "maps",
            Applied::RouteCache => "route cache",
            Applied::Detach => "detach",
            Applied::Swap => "swap",
            Applied::Attach => "attach",
        }
    }
}

pub struct Port {
    pub name: String,
    pub prog: Program,
    pub att: Attachment,
    pub tables: Option<Tables>,
    counters: PortCounters,
    spare: Vec<(Program, Option<Tables>)>,
    pub swaps: u64,
}

impl Port {
    /// The port's counts across every program that served it.
    pub fn counters(&self) -> Counters {
        self.counters
            .total(self.prog.counters().unwrap_or_default())
    }
}

/// What the fast path holds in the kernel.
pub struct DataPlane {
    /// The bridge module's tables and the sysctl gate, shared by every port's program.
    shared: SharedMaps,
    ports: BTreeMap<u32, Port>,
    /// The ports' program features, as reconcile reads them.
    features: BTreeMap<u32, Features>,
    applied: Plan,
    applied_filter: FilterPlan,
    applied_fdb: BTreeMap<FdbKey, u32>,
    /// Ports whose driver refused a device-bound program in native mode: the plan must not
    /// ask XDP of them where a VLAN tag may hide in metadata (`Model::xdp_ingress`).
    native_refused: BTreeSet<u32>,
}

impl DataPlane {
    pub fn new() -> Result<DataPlane> {
        // One program's shared maps become everyone's (loading the program verifies it too).
        let shared = Program::load(&Features::default())?.maps.share()?;
        Ok(DataPlane {
            shared,
            ports: BTreeMap::new(),
            features: BTreeMap::new(),
            applied: Plan::default(),
            applied_filter: FilterPlan::default(),
            native_refused: BTreeSet::new(),
            applied_fdb: BTreeMap::new(),
        })
    }

    pub fn current(&self) -> Current<'_> {
        Current {
            plan: &self.applied,
            filter: &self.applied_filter,
            fdb: &self.applied_fdb,
            ports: &self.features,
        }
    }

    /// The tcx programs that are not ours on each of `ifindexes`: (at ingress, at egress).
    pub fn tcx_others(&self, ifindexes: impl Iterator<Item = u32>) -> BTreeMap<u32, (u32, u32)> {
        ifindexes
            .filter_map(|idx| {
                let (ingress, egress) = attach::tcx_counts(idx).ok()?;
                let own = self.ports.get(&idx).map_or(0, |p| p.att.own_tcx_ingress());
                let others = ingress.saturating_sub(own);
                (others > 0 || egress > 0).then_some((idx, (others, egress)))
            })
            .collect()
    }

    pub fn ports(&self) -> impl Iterator<Item = (&u32, &Port)> {
        self.ports.iter()
    }

    pub fn applied_plan(&self) -> &Plan {
        &self.applied
    }

    pub fn bridge_maps(&self) -> &BridgeMaps {
        &self.shared.bridge
    }

    /// The STALE next hops every port's program reads (`neigh`).
    pub fn neigh_maps(&self) -> &crate::kernel::neigh::NeighMaps {
        &self.shared.neigh
    }

    /// Ports whose driver refused a device-bound XDP program in native mode.
    pub fn native_refused(&self) -> &BTreeSet<u32> {
        &self.native_refused
    }

    /// Forgets that `ifindex` refused native XDP (its link changed: its peer's MTU, say).
    pub fn retry_native(&mut self, ifindex: u32) {
        self.native_refused.remove(&ifindex);
    }

    /// The maps every port's program shares.
    pub fn shared(&self) -> &SharedMaps {
        &self.shared
    }

    /// The sysctl gate every port's program reads (`sysctl_hook`).
    pub fn sysctl_gate(&self) -> &libbpf_rs::MapHandle {
        &self.shared.sysctl_gate
    }

    /// Runs `actions`; returns what it did (the last port change made, else whether maps
    /// were written) and reports each failure to `error`, going on with the next action.
    ///
    /// A program load waits for the verifier, seconds on a busy host. So a port whose swap
    /// loads one stands by first (the kernel takes its every frame), and the loads run after
    /// every quick action: no port acts on the old state for longer than the map writes.
    pub fn execute(&mut self, actions: Actions, error: &mut dyn FnMut(String)) -> Applied {
        let mut what = if actions.applied.is_some() {
            Applied::Maps
        } else {
            Applied::None
        };
        let (loads, quick): (Vec<Action>, Vec<Action>) = actions
            .list
            .into_iter()
            .partition(|a| self.loads_a_program(a));
        for action in &loads {
            if let Action::Swap { port: pp, .. } = action {
                if let Some(port) = self.ports.get(&pp.ifindex) {
                    if let Err(e) = port.prog.stand_by() {
                        error(format!("{}: {e}", pp.name));
                    }
                }
            }
        }
        for action in quick.into_iter().chain(loads) {
            match action {
                Action::SetFdb { key, port } => {
                    what = Applied::Maps;
                    if let Err(e) = self.shared.bridge.set_fdb(&key, port) {
                        error(e.to_string());
                    }
                    self.applied_fdb.insert(key, port);
                }
                Action::DelFdb { key } => {
                    what = Applied::Maps;
                    self.shared.bridge.del_fdb(&key);
                    self.applied_fdb.remove(&key);
                }
                Action::SetBridgeVlan {
                    ifindex,
                    vid,
                    flags,
                } => {
                    if let Err(e) = self.shared.bridge.set_vlan(ifindex, vid, flags) {
                        error(e.to_string());
                    }
                }
                Action::SetBridgePort { ifindex, port } => {
                    if let Err(e) = self.shared.bridge.set_port(ifindex, &port) {
                        error(e.to_string());
                    }
                }
                Action::DelBridgePort { ifindex } => self.shared.bridge.del_port(ifindex),
                Action::DelBridgeVlan { ifindex, vid } => self.shared.bridge.del_vlan(ifindex, vid),
                Action::Detach { ifindex } => {
                    // Dropping the port closes its link: the kernel detaches the program.
                    self.ports.remove(&ifindex);
                    self.features.remove(&ifindex);
                    what = Applied::Detach;
                }
                Action::Update { port, tables } => {
                    if let Err(e) = self.update(&port, tables) {
                        error(format!("{}: {e}", port.name));
                    }
                }
                Action::Swap { port, tables } => match self.swap(&port, tables) {
                    Ok(()) => what = Applied::Swap,
                    Err(e) => error(format!("{}: {e}", port.name)),
                },
                Action::Attach { port, tables } => match self.attach(&port, tables) {
                    Ok(()) => what = Applied::Attach,
                    Err(e) => error(format!("{}: {e}", port.name)),
                },
            }
        }
        if let Some((plan, filter)) = actions.applied {
            self.applied = plan;
            self.applied_filter = filter;
        }
        what
    }

    /// Whether `action` loads a program: an attach, or a swap that no spare program serves.
    fn loads_a_program(&self, action: &Action) -> bool {
        match action {
            Action::Attach { .. } => true,
            Action::Swap { port: pp, .. } => self.ports.get(&pp.ifindex).is_some_and(|port| {
                !port
                    .spare
                    .iter()
                    .any(|(p, _)| p.features.serves(&pp.features))
            }),
            _ => false,
        }
    }

    fn update(&mut self, pp: &PortPlan, tables: Option<Tables>) -> Result<()> {
        let Some(port) = self.ports.get_mut(&pp.ifindex) else {
            return Ok(());
        };
        let f = pp.features;
        port.prog.set_ctl(&f, pp.switches())?;
        port.prog.set_tx_ports(&pp.tx_ports)?;
        port.prog.set_local_v4(&pp.local_v4)?;
        if port.tables != tables {
            if let Some(t) = &tables {
                port.prog.write_filter_over(port.tables.as_ref(), t)?;
            }
            port.tables = tables;
        }
        Ok(())
    }

    fn swap(&mut self, pp: &PortPlan, tables: Option<Tables>) -> Result<()> {
        let Some(port) = self.ports.get_mut(&pp.ifindex) else {
            return Ok(());
        };
        let f = pp.features;
        let hit = port.spare.iter().position(|(p, _)| p.features.serves(&f));
        let (prog, old_tables) = match hit {
            Some(i) => port.spare.swap_remove(i),
            None => (
                Program::load_shared(&f.to_load(), Some(&self.shared))?,
                None,
            ),
        };
        prog.set_ctl(&f, pp.switches())?;
        prog.set_tx_ports(&pp.tx_ports)?;
        prog.set_local_v4(&pp.local_v4)?;
        if let Some(t) = &tables {
            if old_tables.as_ref() != Some(t) {
                prog.write_filter_over(old_tables.as_ref(), t)?;
            }
        }
        port.att.replace(&prog)?;
        port.counters.swapped(
            port.prog.counters().unwrap_or_default(),
            prog.counters().unwrap_or_default(),
        );
        self.features.insert(pp.ifindex, prog.features);
        let old = std::mem::replace(&mut port.prog, prog);
        let old_tables = std::mem::replace(&mut port.tables, tables);
        port.spare.push((old, old_tables));
        if port.spare.len() > SPARE_PROGRAMS {
            port.spare.remove(0);
        }
        port.swaps += 1;
        Ok(())
    }

    fn attach(&mut self, pp: &PortPlan, tables: Option<Tables>) -> Result<()> {
        let (idx, f) = (pp.ifindex, pp.features);
        if !f.tc {
            attach::remove_stale_xdp(idx);
        }
        let prog = Program::load_shared(&f.to_load(), Some(&self.shared))?;
        prog.set_ctl(&f, pp.switches())?;
        prog.set_tx_ports(&pp.tx_ports)?;
        prog.set_local_v4(&pp.local_v4)?;
        if let Some(t) = &tables {
            prog.write_filter(t)?;
        }
        let att = if f.tc {
            Attachment::tc(&prog, idx)?
        } else {
            match Attachment::xdp(&prog, idx) {
                Err(Error::NativeXdpRefused { .. }) => {
                    // Not an error to report: the next plan runs this port elsewhere.
                    self.native_refused.insert(idx);
                    return Ok(());
                }
                other => other?,
            }
        };
        self.features.insert(idx, prog.features);
        self.ports.insert(
            idx,
            Port {
                name: pp.name.clone(),
                prog,
                att,
                tables,
                counters: PortCounters::default(),
                spare: Vec::new(),
                swaps: 0,
            },
        );
        Ok(())
    }

    /// Starts a new route-cache generation in every attached program; returns the failures.
    pub fn invalidate_routes(&self) -> Vec<String> {
        self.ports
            .values()
            .filter_map(|p| p.prog.invalidate_routes().err())
            .map(|e| format!("route cache: {e}"))
            .collect()
    }

    /// Detaches every program: the kernel carries all traffic again.
    pub fn detach_all(&mut self) {
        self.ports.clear();
        self.features.clear();
    }
}
