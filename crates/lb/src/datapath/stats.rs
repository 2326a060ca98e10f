//! Counters: per service, per real slot and per reason, summed over CPUs; and zeroing them.

use libbpf_rs::{MapCore, MapFlags};

use super::loader::{bpf, Program};
use super::maps::zero_percpu;
use crate::bpf::types;
use crate::model::{Counters, Plan, Stats};
use crate::Result;

include!(concat!(env!("OUT_DIR"), "/reasons.rs"));

fn u64_at(b: &[u8], i: usize) -> u64 {
    b.get(i * 8..i * 8 + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

fn sum_counters(prog: &Program, map: &libbpf_rs::MapHandle, key: u32) -> Result<Counters> {
    let mut c = Counters::default();
    let per_cpu = map
        .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
        .map_err(bpf("read counters"))?
        .unwrap_or_default();
    let _ = prog;
    for v in per_cpu {
        c += Counters {
            conns: u64_at(&v, 0),
            in_pkts: u64_at(&v, 1),
            out_pkts: u64_at(&v, 2),
            in_bytes: u64_at(&v, 3),
            out_bytes: u64_at(&v, 4),
        };
    }
    Ok(c)
}

/// How many packets (or events) of `reason`, summed over CPUs.
pub fn reason_count(prog: &Program, reason: Reason) -> Result<u64> {
    let per_cpu = prog
        .maps
        .reasons
        .lookup_percpu(&(reason as u32).to_ne_bytes(), MapFlags::ANY)
        .map_err(bpf("read reasons"))?
        .unwrap_or_default();
    Ok(per_cpu.iter().map(|v| u64_at(v, 0)).sum())
}

/// The counters of `plan`'s services and real slots, and every reason with a count.
pub fn read(prog: &Program, plan: &Plan) -> Result<Stats> {
    let mut s = Stats::default();
    for id in 0..plan.services.len() as u32 {
        s.services
            .push(sum_counters(prog, &prog.maps.svc_stats, id)?);
    }
    for slot in 0..plan.reals.len() as u32 {
        s.reals
            .push(sum_counters(prog, &prog.maps.real_stats, slot)?);
    }
    for r in Reason::ALL {
        s.reasons
            .push((r.name().to_string(), reason_count(prog, r)?));
    }
    Ok(s)
}

/// Zeroes every counter (`-Z`).
pub fn zero(prog: &Program) -> Result<()> {
    let size = std::mem::size_of::<types::lb_counters>();
    for id in 0..prog.shape.max_services {
        zero_percpu(prog, &prog.maps.svc_stats, id, size)?;
    }
    for slot in 0..prog.shape.max_reals {
        zero_percpu(prog, &prog.maps.real_stats, slot, size)?;
    }
    for r in Reason::ALL {
        zero_percpu(prog, &prog.maps.reasons, r as u32, 8)?;
    }
    Ok(())
}
