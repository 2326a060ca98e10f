//! Loads the precompiled fast-path object, specialized by its load-time constants, and fills
//! its maps (switches, egress ports, filter tables, the shared bridge tables). Where it runs
//! is `attach`.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::bpf::{types, FpMaps, FpSkelBuilder, OpenFpMaps};
use crate::datapath::stats::{Counters, Mib, Reason};
use crate::error::{bpf, io, Result};
use crate::kernel::neigh::NeighMaps;
use crate::model::features::{Features, Switches};
use wirespeed_sys::bpf::{bytes_of, from_bytes};

/// The maps of one loaded program, as owned handles.
pub struct Maps {
    pub tx_ports: MapHandle,
    pub counters: MapHandle,
    /// The forwarded packets' IP MIB counts, per family (`Counters::mib`).
    pub mib: MapHandle,
    pub filter_hits: MapHandle,
    pub f_src4: MapHandle,
    pub f_dst4: MapHandle,
    pub f_src6: MapHandle,
    pub f_dst6: MapHandle,
    pub f_proto: MapHandle,
    pub f_sport: MapHandle,
    pub f_dport: MapHandle,
    pub f_oif: MapHandle,
    pub f_defaults: MapHandle,
    pub f_actions: MapHandle,
    pub f_paused: MapHandle,
    pub ctl: MapHandle,
    pub local_v4: MapHandle,
    pub bridge: BridgeMaps,
    pub sysctl_gate: MapHandle,
    pub neigh: NeighMaps,
}

/// The maps of which one set serves every port's program (libbpf map reuse): the bridge
/// tables, the sysctl gate the sysctl hook closes (`sysctl_hook`) and the STALE next hops
/// (`neigh`).
pub struct SharedMaps {
    pub bridge: BridgeMaps,
    pub sysctl_gate: MapHandle,
    pub neigh: NeighMaps,
    /// The filter's rule counters (`rule_counters`).
    pub filter_hits: MapHandle,
}

impl Maps {
    /// Another handle set on this program's shared maps, for the next programs to reuse.
    pub fn share(&self) -> Result<SharedMaps> {
        Ok(SharedMaps {
            bridge: self.bridge.share()?,
            sysctl_gate: MapHandle::try_from(&self.sysctl_gate).map_err(bpf("dup sysctl_gate"))?,
            neigh: self.neigh.share()?,
            filter_hits: MapHandle::try_from(&self.filter_hits).map_err(bpf("dup f_hits"))?,
        })
    }
}

impl SharedMaps {
    /// What the filter counted in `slot`: packets and bytes, summed over CPUs.
    pub fn filter_hits(&self, slot: u32) -> (u64, u64) {
        let per_cpu = self
            .filter_hits
            .lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .unwrap_or_default();
        per_cpu
            .iter()
            .filter_map(|v| from_bytes::<types::filter_hits>(v))
            .fold((0, 0), |(p, b), h| (p + h.packets, b + h.bytes))
    }

    /// Clears `slot` on every CPU, before another rule counts in it.
    pub fn zero_filter_hits(&self, slot: u32) -> Result<()> {
        let zero = vec![vec![0u8; std::mem::size_of::<types::filter_hits>()]; num_possible_cpus()?];
        self.filter_hits
            .update_percpu(&slot.to_ne_bytes(), &zero, MapFlags::ANY)
            .map_err(bpf("zero f_hits"))
    }
}

fn num_possible_cpus() -> Result<usize> {
    libbpf_rs::num_possible_cpus().map_err(bpf("count the possible CPUs"))
}

/// The bridge module's tables. One set serves every port's program (libbpf map reuse): the
/// FDB is written once, whichever port a frame arrives on.
pub struct BridgeMaps {
    pub ports: MapHandle,
    pub vlans: MapHandle,
    pub fdb: MapHandle,
}

fn upd(map: &MapHandle, k: &[u8], v: &[u8], what: &str) -> Result<()> {
    map.update(k, v, MapFlags::ANY)
        .map_err(bpf(format!("update {what}")))
}

fn fdb_key(k: &crate::model::FdbKey) -> types::br_fdb_key {
    types::br_fdb_key {
        bridge: k.bridge,
        vid: k.vid,
        mac: k.mac,
    }
}

fn vlan_key(ifindex: u32, vid: u16) -> types::br_vlan_key {
    types::br_vlan_key {
        ifindex,
        vid,
        pad: 0,
    }
}

impl BridgeMaps {
    pub fn set_port(&self, ifindex: u32, p: &crate::model::BrPortVal) -> Result<()> {
        let v = types::br_port {
            bridge: p.bridge,
            mtu: p.mtu,
            pvid: p.pvid,
            state: p.state,
            vlan_filtering: p.vlan_filtering as u8,
            ip_check: p.ip_check,
            pad: [0; 3],
            fdb_refresh_ns: p.fdb_refresh_ns,
        };
        upd(
            &self.ports,
            &ifindex.to_ne_bytes(),
            bytes_of(&v),
            "br_ports",
        )
    }

    pub fn del_port(&self, ifindex: u32) {
        let _ = self.ports.delete(&ifindex.to_ne_bytes());
    }

    pub fn set_vlan(&self, ifindex: u32, vid: u16, flags: u16) -> Result<()> {
        upd(
            &self.vlans,
            bytes_of(&vlan_key(ifindex, vid)),
            &flags.to_ne_bytes(),
            "br_vlans",
        )
    }

    pub fn del_vlan(&self, ifindex: u32, vid: u16) {
        let _ = self.vlans.delete(bytes_of(&vlan_key(ifindex, vid)));
    }

    /// Writes an entry with its refresh times at 0: its next frame refreshes the kernel's.
    pub fn set_fdb(&self, k: &crate::model::FdbKey, port: u32) -> Result<()> {
        let v = types::br_fdb_val {
            port,
            ..Default::default()
        };
        upd(&self.fdb, bytes_of(&fdb_key(k)), bytes_of(&v), "br_fdb")
    }

    pub fn del_fdb(&self, k: &crate::model::FdbKey) {
        let _ = self.fdb.delete(bytes_of(&fdb_key(k)));
    }

    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.ports.keys().count(),
            self.vlans.keys().count(),
            self.fdb.keys().count(),
        )
    }

    /// Another handle set on the same maps.
    pub fn share(&self) -> Result<BridgeMaps> {
        let dup = |m: &MapHandle, n: &str| MapHandle::try_from(m).map_err(bpf(format!("dup {n}")));
        Ok(BridgeMaps {
            ports: dup(&self.ports, "br_ports")?,
            vlans: dup(&self.vlans, "br_vlans")?,
            fdb: dup(&self.fdb, "br_fdb")?,
        })
    }
}

/// A loaded (verified) program, not yet attached anywhere.
pub struct Program {
    fd: OwnedFd,
    /// A program at XDP: its fp_tc twin from the same object (every map shared), to attach
    /// at TC ingress behind it as the TC stage, which forwards the frames whose L4 checksum a
    /// local sender left partial (an XDP redirect would deliver them corrupt).
    tc_stage: Option<OwnedFd>,
    pub maps: Maps,
    pub features: Features,
    /// The fp_ctl value last written, so that a new route generation keeps the switches.
    ctl: std::sync::Mutex<types::fp_ctl>,
    /// Slots of the IPv4 route cache, per CPU.
    route_cache_slots: usize,
}

/// Route-cache generations, process-wide: a program never meets a generation it has cached
/// answers under once another has been written, even after it served as a spare.
static ROUTE_GEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

fn handle(map: &libbpf_rs::MapMut<'_>, name: &str) -> Result<MapHandle> {
    MapHandle::try_from(map).map_err(bpf(format!("dup map {name}")))
}

impl Program {
    /// Opens the object, writes the constants, loads it (the verifier drops the code of the
    /// modules switched off) and keeps owned handles to its program and maps.
    pub fn load(features: &Features) -> Result<Program> {
        Self::load_shared(features, None)
    }

    /// As `load`, with the maps of `shared` instead of fresh ones.
    pub fn load_shared(features: &Features, shared: Option<&SharedMaps>) -> Result<Program> {
        let mut storage = MaybeUninit::uninit();
        let mut open = FpSkelBuilder::default()
            .open(&mut storage)
            .map_err(bpf("open fp object"))?;
        if let Some(shared) = shared {
            reuse_shared(&mut open.maps, shared)?;
        }
        // Only the programs for this port's hooks are verified and loaded: XDP brings its TC
        // stage.
        let tc_stage = !features.tc;
        let vlan_meta = !features.tc && features.vlan_meta;
        open.progs.fp_xdp.set_autoload(!features.tc && !vlan_meta);
        open.progs.fp_xdp_vlan.set_autoload(vlan_meta);
        open.progs.fp_tc.set_autoload(features.tc || tc_stage);
        if vlan_meta {
            // Bound to its device: the only way to the driver's metadata kfuncs. Such a
            // program attaches in native mode alone and cannot be test-run. (SEC("xdp") sets
            // no other flag to keep.)
            let p = &mut open.progs.fp_xdp_vlan;
            p.set_ifindex(features.ifindex);
            p.set_flags(libbpf_rs::libbpf_sys::BPF_F_XDP_DEV_BOUND_ONLY);
        }
        let ro = &mut open.maps.rodata_data;
        ro.cfg_router_v4 = features.router_v4 as u8;
        ro.cfg_router_v6 = features.router_v6 as u8;
        ro.cfg_filter_v4 = features.filter_v4 as u8;
        ro.cfg_filter_v6 = features.filter_v6 as u8;
        ro.cfg_if_mac = features.mac;
        ro.cfg_ifindex = features.ifindex;
        ro.cfg_filter_fields = features.filter_fields;
        ro.cfg_bridge = features.bridge as u8;
        ro.cfg_tc_stage = tc_stage as u8;
        let skel = open.load().map_err(bpf("load fp program (verifier)"))?;
        let prog = if features.tc {
            skel.progs.fp_tc.as_fd()
        } else if vlan_meta {
            skel.progs.fp_xdp_vlan.as_fd()
        } else {
            skel.progs.fp_xdp.as_fd()
        };
        let fd = prog.try_clone_to_owned().map_err(io("dup program fd"))?;
        let tc_stage = if tc_stage {
            let stage = skel.progs.fp_tc.as_fd();
            Some(stage.try_clone_to_owned().map_err(io("dup program fd"))?)
        } else {
            None
        };
        let m = &skel.maps;
        let maps = Maps::of(m)?;
        // The skeleton (and its object) drops here; the program and maps live on through the
        // fds we hold and, once attached, through the link.
        let prog = Program {
            fd,
            tc_stage,
            maps,
            features: *features,
            ctl: std::sync::Mutex::new(types::fp_ctl::default()),
            route_cache_slots: m
                .route_cache_v4
                .info()
                .map_err(bpf("route_cache_v4 info"))?
                .info
                .max_entries as usize,
        };
        // Standalone use (tests, benchmarks): the filter runs as the features describe it,
        // the route cache on.
        prog.set_ctl(features, Switches::default())?;
        Ok(prog)
    }

    /// Sets the egress ports the router may redirect to (ifindexes), replacing the old set.
    pub fn set_tx_ports(&self, ifindexes: &[u32]) -> Result<()> {
        // struct bpf_devmap_val { u32 ifindex; u32 prog fd }
        replace_ifindex_set(&self.maps.tx_ports, "tx_ports", ifindexes, |idx| {
            let mut val = [0u8; 8];
            val[..4].copy_from_slice(&idx.to_ne_bytes());
            val
        })
    }

    /// Sets the namespace's IPv4 addresses for the router's local-source check: up to
    /// LOCAL_V4_INLINE in the ctl value, else all of them in the local_v4 hash, written
    /// before the ctl value points the program at it.
    pub fn set_local_v4(&self, addrs: &[[u8; 4]]) -> Result<()> {
        let map = &self.maps.local_v4;
        let old: Vec<Vec<u8>> = map.keys().collect();
        for k in &old {
            if !addrs.iter().any(|a| a[..] == k[..]) {
                let _ = map.delete(k);
            }
        }
        for a in addrs {
            map.update(a, &[1], MapFlags::ANY)
                .map_err(bpf(format!("add {a:?} to local_v4")))?;
        }
        let mut v = *self.ctl.lock().unwrap_or_else(|e| e.into_inner());
        let inline = v.local_v4.len();
        v.local_v4 = Default::default();
        if addrs.len() <= inline {
            for (slot, a) in v.local_v4.iter_mut().zip(addrs) {
                *slot = u32::from_ne_bytes(*a);
            }
            v.local_v4_n = addrs.len() as u8;
            v.local_v4_in_map = 0;
        } else {
            v.local_v4_n = 0;
            v.local_v4_in_map = 1;
        }
        self.write_ctl(v)
    }

    /// Sets the run-time switches: a family handed to the kernel, the filter as `want`
    /// describes it (on or off, fields, policies) within what this program compiled in, the
    /// route caches, and the IPv4 reverse-path filter. Every write starts a new route
    /// generation.
    pub fn set_ctl(&self, want: &Features, s: Switches) -> Result<()> {
        self.write_ctl(types::fp_ctl {
            off_v4: s.off_v4 as u32,
            off_v6: s.off_v6 as u32,
            filter_fields: want.filter_fields as u32,
            filter_v4: want.filter_v4 as u8,
            filter_v6: want.filter_v6 as u8,
            policy_drop_v4: want.policy_drop_v4 as u8,
            policy_drop_v6: want.policy_drop_v6 as u8,
            route_gen: 0, // set by write_ctl
            route_cache_v4: s.route_cache.v4 as u8,
            route_cache_v6: s.route_cache.v6 as u8,
            rp_filter_v4: s.rp_filter_v4 as u8,
            policy_rules_v4: s.policy_rules.v4 as u8
                + (s.policy_rules.v4 && s.policy_rules.v4_ports) as u8,
            policy_rules_v6: s.policy_rules.v6 as u8,
            reassembly_v4: s.reassembly.v4 as u8,
            reassembly_v6: s.reassembly.v6 as u8,
            multipath_v4: s.multipath.v4 as u8,
            multipath_v6: s.multipath.v6 as u8,
            route_mtu_v4: s.route_mtu_v4,
            proxy_ndp: s.proxy_ndp as u8,
            source_check_v4: s.source_check_v4 as u8,
            keep_priority: s.keep_priority as u8,
            ..self.kept_ctl()
        })
    }

    /// The last ctl value's local addresses (set_local_v4) and TC stage switch
    /// (set_tc_stage), the rest zero: kept by set_ctl.
    fn kept_ctl(&self) -> types::fp_ctl {
        let last = *self.ctl.lock().unwrap_or_else(|e| e.into_inner());
        types::fp_ctl {
            local_v4_n: last.local_v4_n,
            local_v4_in_map: last.local_v4_in_map,
            local_v4: last.local_v4,
            tc_stage: last.tc_stage,
            ..Default::default()
        }
    }

    /// Whether the XDP program marks partial-checksum frames for its TC stage: on only while
    /// the stage is attached, so that without it they go to the kernel counted as
    /// `pass_csum_partial`.
    pub fn set_tc_stage(&self, on: bool) -> Result<()> {
        let v = *self.ctl.lock().unwrap_or_else(|e| e.into_inner());
        self.write_ctl(types::fp_ctl {
            tc_stage: on as u8,
            ..v
        })
    }

    /// Hands every frame to the kernel until the next `set_ctl` (ctl.standby): while the
    /// port's successor waits for the verifier, no frame meets the state this one holds.
    pub fn stand_by(&self) -> Result<()> {
        let v = *self.ctl.lock().unwrap_or_else(|e| e.into_inner());
        self.write_ctl(types::fp_ctl { standby: 1, ..v })
    }

    /// This program's TC stage (a program at XDP), if it has one.
    pub fn tc_stage_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.tc_stage.as_ref().map(|fd| fd.as_fd())
    }

    /// Drops every cached FIB answer (a new route generation): after any change to routes,
    /// neighbours, links, addresses or forwarding settings.
    pub fn invalidate_routes(&self) -> Result<()> {
        let v = *self.ctl.lock().unwrap_or_else(|e| e.into_inner());
        self.write_ctl(v)
    }

    fn write_ctl(&self, mut v: types::fp_ctl) -> Result<()> {
        let mut last = self.ctl.lock().unwrap_or_else(|e| e.into_inner());
        v.route_gen = ROUTE_GEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.maps
            .ctl
            .update(&0u32.to_ne_bytes(), bytes_of(&v), MapFlags::ANY)
            .map_err(bpf("set fp_ctl"))?;
        *last = v;
        Ok(())
    }

    pub fn route_cache_slots(&self) -> usize {
        self.route_cache_slots
    }

    pub fn tx_port_count(&self) -> usize {
        self.maps.tx_ports.keys().count()
    }

    /// Packet counters summed over CPUs.
    pub fn counters(&self) -> Result<Counters> {
        let mut c = Counters::default();
        for r in Reason::ALL {
            let key = (r as u32).to_ne_bytes();
            if let Some(per_cpu) = self
                .maps
                .counters
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(bpf("read counters"))?
            {
                c.0[r as usize] = per_cpu
                    .iter()
                    .map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8])))
                    .sum();
            }
        }
        for v6 in [false, true] {
            let key = u32::from(v6).to_ne_bytes();
            let per_cpu = self
                .maps
                .mib
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(bpf("read mib"))?
                .unwrap_or_default();
            for cpu in &per_cpu {
                let Some(m) = from_bytes::<types::fp_mib>(cpu) else {
                    continue;
                };
                let values = [m.packets, m.octets, m.ecn[0], m.ecn[1], m.ecn[2], m.ecn[3]];
                for (k, v) in Mib::ALL.into_iter().zip(values) {
                    c.0[Counters::mib_slot(v6, k)] += v;
                }
            }
        }
        Ok(c)
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Makes a new program's maps the ones every port shares (filter hits, STALE neighbours, the
/// sysctl gate, the bridge tables) instead of its own.
fn reuse_shared(m: &mut OpenFpMaps, shared: &SharedMaps) -> Result<()> {
    let SharedMaps {
        bridge: b,
        sysctl_gate,
        neigh,
        filter_hits,
    } = shared;
    m.f_hits
        .reuse_fd(filter_hits.as_fd())
        .map_err(bpf("reuse f_hits"))?;
    m.neigh_stale
        .reuse_fd(neigh.stale.as_fd())
        .map_err(bpf("reuse neigh_stale"))?;
    m.neigh_stale_n
        .reuse_fd(neigh.count.as_fd())
        .map_err(bpf("reuse neigh_stale_n"))?;
    m.sysctl_gate
        .reuse_fd(sysctl_gate.as_fd())
        .map_err(bpf("reuse sysctl_gate"))?;
    m.br_ports
        .reuse_fd(b.ports.as_fd())
        .map_err(bpf("reuse br_ports"))?;
    m.br_vlans
        .reuse_fd(b.vlans.as_fd())
        .map_err(bpf("reuse br_vlans"))?;
    m.br_fdb
        .reuse_fd(b.fdb.as_fd())
        .map_err(bpf("reuse br_fdb"))?;
    Ok(())
}

impl Maps {
    /// Owned handles to a loaded skeleton's maps, which outlive it.
    fn of(m: &FpMaps) -> Result<Maps> {
        Ok(Maps {
            tx_ports: handle(&m.tx_ports, "tx_ports")?,
            counters: handle(&m.counters, "counters")?,
            mib: handle(&m.mib, "mib")?,
            filter_hits: handle(&m.f_hits, "f_hits")?,
            f_src4: handle(&m.f_src4, "f_src4")?,
            f_dst4: handle(&m.f_dst4, "f_dst4")?,
            f_src6: handle(&m.f_src6, "f_src6")?,
            f_dst6: handle(&m.f_dst6, "f_dst6")?,
            f_proto: handle(&m.f_proto, "f_proto")?,
            f_sport: handle(&m.f_sport, "f_sport")?,
            f_dport: handle(&m.f_dport, "f_dport")?,
            f_oif: handle(&m.f_oif, "f_oif")?,
            f_defaults: handle(&m.f_defaults, "f_defaults")?,
            f_actions: handle(&m.f_actions, "f_actions")?,
            f_paused: handle(&m.f_paused, "f_paused")?,
            ctl: handle(&m.ctl, "ctl")?,
            local_v4: handle(&m.local_v4, "local_v4")?,
            bridge: BridgeMaps {
                ports: handle(&m.br_ports, "br_ports")?,
                vlans: handle(&m.br_vlans, "br_vlans")?,
                fdb: handle(&m.br_fdb, "br_fdb")?,
            },
            sysctl_gate: handle(&m.sysctl_gate, "sysctl_gate")?,
            neigh: NeighMaps {
                stale: handle(&m.neigh_stale, "neigh_stale")?,
                count: handle(&m.neigh_stale_n, "neigh_stale_n")?,
            },
        })
    }
}

/// Makes the keys of `map` (ifindexes) exactly `ifindexes`, each with the value `value`
/// gives it: stale keys first, so the map never holds more than the old and new sets.
fn replace_ifindex_set<const N: usize>(
    map: &MapHandle,
    name: &str,
    ifindexes: &[u32],
    value: impl Fn(u32) -> [u8; N],
) -> Result<()> {
    let old: Vec<Vec<u8>> = map.keys().collect();
    for k in &old {
        let idx = u32::from_ne_bytes(k[..4].try_into().unwrap_or([0; 4]));
        if !ifindexes.contains(&idx) {
            let _ = map.delete(k);
        }
    }
    for idx in ifindexes {
        map.update(&idx.to_ne_bytes(), &value(*idx), MapFlags::ANY)
            .map_err(bpf(format!("add ifindex {idx} to {name}")))?;
    }
    Ok(())
}

fn rule_set(b: &crate::filter::Bits) -> Vec<u8> {
    bytes_of(&types::rule_set { w: *b }).to_vec()
}

fn clear(map: &MapHandle) {
    let keys: Vec<Vec<u8>> = map.keys().collect();
    for k in keys {
        let _ = map.delete(&k);
    }
}

impl Program {
    /// Writes the classifier tables into this program's maps, in place: the filter is paused
    /// (its packets go to the kernel) until every table is consistent again. `old`, the
    /// tables the maps hold now, turns the write into a diff: a rule added at the end or a
    /// set member changes a handful of entries, not the 512 protocol slots and every prefix.
    pub fn write_filter_over(
        &self,
        old: Option<&crate::filter::classify::Tables>,
        t: &crate::filter::classify::Tables,
    ) -> Result<()> {
        let pause = |v: u32| {
            self.maps
                .f_paused
                .update(&0u32.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
                .map_err(bpf("pause filter"))
        };
        let m = &self.maps;
        let maps = [
            (&m.f_src4, "f_src4"),
            (&m.f_dst4, "f_dst4"),
            (&m.f_src6, "f_src6"),
            (&m.f_dst6, "f_dst6"),
            (&m.f_proto, "f_proto"),
            (&m.f_sport, "f_sport"),
            (&m.f_dport, "f_dport"),
            (&m.f_oif, "f_oif"),
            (&m.f_defaults, "f_defaults"),
            (&m.f_actions, "f_actions"),
        ];
        pause(1)?;
        for (i, (map, name)) in maps.iter().enumerate() {
            // A table equal to what the map holds costs nothing (a set member added leaves
            // the 512 protocol slots alone).
            if old.is_some_and(|o| same_table(o, t, i)) {
                continue;
            }
            let array = matches!(*name, "f_proto" | "f_defaults" | "f_actions");
            if old.is_none() && !array {
                clear(map);
            }
            let (writes, deletes) = table_diff(old, t, i);
            for (k, v) in &writes {
                upd(map, k, v, name)?;
            }
            // Arrays keep their slots; hash and LPM entries no longer wanted go.
            for k in &deletes {
                let _ = map.delete(k);
            }
        }
        pause(0)
    }

    /// `write_filter_over` with no knowledge of the maps' contents: a full rewrite.
    pub fn write_filter(&self, t: &crate::filter::classify::Tables) -> Result<()> {
        self.write_filter_over(None, t)
    }
}

type Entry = (Vec<u8>, Vec<u8>);

/// Whether table `i` (in write_filter_over's order) is the same in `a` and `b`.
fn same_table(
    a: &crate::filter::classify::Tables,
    b: &crate::filter::classify::Tables,
    i: usize,
) -> bool {
    match i {
        0 => a.src4 == b.src4,
        1 => a.dst4 == b.dst4,
        2 => a.src6 == b.src6,
        3 => a.dst6 == b.dst6,
        4 => a.proto == b.proto,
        5 => a.sport == b.sport,
        6 => a.dport == b.dport,
        7 => a.oif == b.oif,
        8 => a.defaults == b.defaults,
        _ => a.actions == b.actions,
    }
}

/// The entries of `new` that `old` lacks or holds with another value, and the keys of `old`
/// that `new` lacks; compared on typed keys, serialized only where they differ (a set member
/// added to a 100-prefix table serializes one entry, not 200).
fn keyed_diff<K: Eq + std::hash::Hash + Copy, V: PartialEq>(
    old: Option<&[(K, V)]>,
    new: &[(K, V)],
    key: impl Fn(K) -> Vec<u8>,
    val: impl Fn(&V) -> Vec<u8>,
) -> (Vec<Entry>, Vec<Vec<u8>>) {
    let have: std::collections::HashMap<K, &V> =
        old.unwrap_or(&[]).iter().map(|(k, v)| (*k, v)).collect();
    let writes = new
        .iter()
        .filter(|(k, v)| have.get(k) != Some(&v))
        .map(|(k, v)| (key(*k), val(v)))
        .collect();
    let wanted: std::collections::HashSet<K> = new.iter().map(|(k, _)| *k).collect();
    let deletes = old
        .unwrap_or(&[])
        .iter()
        .filter(|(k, _)| !wanted.contains(k))
        .map(|(k, _)| key(*k))
        .collect();
    (writes, deletes)
}

/// Array slots of `new` that differ from `old` (all of them without `old`).
fn indexed_diff<V: PartialEq>(
    old: Option<&[V]>,
    new: &[V],
    val: impl Fn(&V) -> Vec<u8>,
) -> (Vec<Entry>, Vec<Vec<u8>>) {
    let writes = new
        .iter()
        .enumerate()
        .filter(|(i, v)| old.and_then(|o| o.get(*i)) != Some(*v))
        .map(|(i, v)| ((i as u32).to_ne_bytes().to_vec(), val(v)))
        .collect();
    (writes, Vec::new())
}

/// Map writes and deletes that turn table `i` (in write_filter_over's order) of `old` into
/// that of `t`.
fn table_diff(
    old: Option<&crate::filter::classify::Tables>,
    t: &crate::filter::classify::Tables,
    i: usize,
) -> (Vec<Entry>, Vec<Vec<u8>>) {
    let bits = rule_set;
    // LPM keys hold the address in network order.
    let lpm4 = |(a, len): (u32, u8)| {
        let k = types::lpm_v4 {
            prefixlen: len as u32,
            addr: a.to_be(),
        };
        bytes_of(&k).to_vec()
    };
    let lpm6 = |(a, len): (u128, u8)| {
        let k = types::lpm_v6 {
            prefixlen: len as u32,
            addr: a.to_be_bytes(),
        };
        bytes_of(&k).to_vec()
    };
    let port = |(proto, port): (u8, u16)| {
        let k = types::port_key {
            proto,
            pad: 0,
            port,
        };
        bytes_of(&k).to_vec()
    };
    match i {
        0 => keyed_diff(old.map(|o| &o.src4[..]), &t.src4, lpm4, bits),
        1 => keyed_diff(old.map(|o| &o.dst4[..]), &t.dst4, lpm4, bits),
        2 => keyed_diff(old.map(|o| &o.src6[..]), &t.src6, lpm6, bits),
        3 => keyed_diff(old.map(|o| &o.dst6[..]), &t.dst6, lpm6, bits),
        4 => indexed_diff(old.map(|o| &o.proto[..]), &t.proto, bits),
        5 => keyed_diff(old.map(|o| &o.sport[..]), &t.sport, port, bits),
        6 => keyed_diff(old.map(|o| &o.dport[..]), &t.dport, port, bits),
        7 => keyed_diff(
            old.map(|o| &o.oif[..]),
            &t.oif,
            |idx: u32| idx.to_ne_bytes().to_vec(),
            bits,
        ),
        8 => indexed_diff(old.map(|o| &o.defaults[..]), &t.defaults, bits),
        _ => indexed_diff(
            old.map(|o| &o.actions[..]),
            &t.actions,
            |&(verdict, slot): &(u32, u32)| {
                bytes_of(&types::rule_action { verdict, slot }).to_vec()
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::features::FIELDS_ALL;

    /// `MapBytes` (bytes_of) needs the generated types to have no implicit padding: each
    /// type's size is the sum of its fields'.
    #[test]
    fn map_types_are_their_fields_and_nothing_else() {
        use std::mem::size_of;
        assert_eq!(
            size_of::<types::fp_ctl>(),
            3 * 4 + 4 + 4 + 12 + 8 * 4 + 4 + 4
        );
        assert_eq!(
            size_of::<types::sysctl_gate>(),
            crate::consts::GATE_CLASSES * 4
        );
        assert_eq!(size_of::<types::br_port>(), 4 + 4 + 2 + 1 + 1 + 1 + 3 + 8);
        assert_eq!(size_of::<types::br_fdb_val>(), 4 + 4 + 8 + 8);
        assert_eq!(size_of::<types::br_vlan_key>(), 4 + 2 + 2);
        assert_eq!(size_of::<types::br_fdb_key>(), 4 + 2 + 6);
        assert_eq!(size_of::<types::lpm_v4>(), 4 + 4);
        assert_eq!(size_of::<types::lpm_v6>(), 4 + 16);
        assert_eq!(size_of::<types::port_key>(), 1 + 1 + 2);
        assert_eq!(size_of::<types::rule_set>(), 4 * 8);
    }

    #[test]
    fn a_program_with_more_filter_compiled_in_serves_a_smaller_filter() {
        let router = Features {
            router_v4: true,
            router_v6: true,
            ..Features::default()
        };
        let filtered = Features {
            filter_v4: true,
            filter_fields: 0b10,
            policy_drop_v4: true,
            ..router
        };
        let loaded = filtered.to_load();
        assert_eq!(loaded.filter_fields, FIELDS_ALL);
        assert!(!loaded.policy_drop_v4, "policies are run-time values");
        assert!(loaded.serves(&filtered));
        assert!(loaded.serves(&router), "a filter switched off at run time");
        assert!(loaded.serves(&Features {
            filter_fields: 0b1,
            ..filtered
        }));
        assert!(!router.serves(&filtered), "no filter code to switch on");
        assert!(!loaded.serves(&Features {
            filter_v6: true,
            ..filtered
        }));
        assert!(!loaded.serves(&Features {
            bridge: true,
            ..filtered
        }));
    }
}
