//! Counters: per service, per real slot and per reason, summed over CPUs; and zeroing them.
//! Connections per real slot (ipvsadm's ActiveConn and InActConn), counted from the shared
//! forward entries.

use std::collections::HashMap;
use std::os::fd::AsFd;

use libbpf_rs::{MapCore, MapFlags};

use super::loader::{bpf, Program};
use super::maps::zero_percpu;
use super::IDLE_TCP_S;
use crate::bpf::types;
use crate::consts::{IPPROTO_TCP, REV_CLOSED, REV_FNAT, REV_FWD};
use crate::error::Error;
use crate::model::{ConnCounts, Counters, Plan, Stats};
use crate::Result;
use wirespeed_sys::bpf::{from_bytes, map_walk_batch, monotonic_ns};

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

const NS: u64 = 1_000_000_000;
/// How long a connection counts after it was last seen: the data path's idle times
/// (cfg_idle_tcp_s, cfg_idle_udp_s in bpf/lb_consts.h), and for a closed TCP connection
/// IPVS's TIME_WAIT timeout (it lists closed connections as inactive that long).
const IDLE_TCP_NS: u64 = IDLE_TCP_S as u64 * NS;
const IDLE_UDP_NS: u64 = 300 * NS;
const CLOSED_NS: u64 = 120 * NS;
/// Entries a `BPF_MAP_LOOKUP_BATCH` call copies.
const WALK_BATCH: u32 = 4096;

/// One connection as the listing needs it: when it was last seen, whether it closed, and
/// whether it is still in its handshake (its entries in `half_open`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Seen {
    ns: u64,
    closed: bool,
    half_open: bool,
}

/// A connection as both its entries name it: client address and port, VIP and port,
/// protocol, and the full-NAT local port (0 for NAT).
type ConnKey = ([u8; 16], u16, [u8; 16], u16, u8, u16);

/// Whether a connection last seen at `seen` counts now, and as active or not: as ipvsadm
/// counts, active is an established TCP connection and inactive every other state (in its
/// handshake until `half_open_ns` passed, closed, UDP).
fn classify(proto: u8, seen: Seen, now: u64, half_open_ns: u64) -> Option<bool> {
    let age = now.saturating_sub(seen.ns);
    let tcp = proto == IPPROTO_TCP;
    let limit = match (tcp, seen.closed, seen.half_open) {
        (true, true, _) => CLOSED_NS,
        (true, false, true) => half_open_ns,
        (true, false, false) => IDLE_TCP_NS,
        (false, ..) => IDLE_UDP_NS,
    };
    (age <= limit).then_some(tcp && !seen.closed && !seen.half_open)
}

/// ActiveConn and InActConn per real slot (`slots` of them), counted now. Every connection has
/// one forward entry: in `half_open` from its SYN until the client proves the handshake, then
/// in the shared `rev` map (a UDP flow's goes into `udp_flows` at once), marked closed by a
/// client's FIN or RST. A NAT or full-NAT connection also has its reply entry beside it,
/// whose last-seen time the replies refresh and which the real's FIN or RST closes: the two
/// are joined, so that a connection whose real still answers stays active. Active:
/// established TCP, not closed, seen within the TCP idle time; inactive: in its handshake
/// (within the half-open timeout), closed TCP within IPVS's TIME_WAIT time of closing, and UDP
/// within its idle time; older entries are expired. One walk of each map in batches: the cost
/// is bounded by their sizes (docs/LB.md).
pub fn conn_counts(prog: &Program, slots: usize) -> Result<Vec<ConnCounts>> {
    let mut forward: Vec<(types::lb_flow, Seen, u32, u16)> = Vec::new();
    let mut replies: HashMap<ConnKey, Seen> = HashMap::new();
    for (map, half_open) in [
        (&prog.maps.rev, false),
        (&prog.maps.half_open, true),
        (&prog.maps.udp_flows, false),
    ] {
        walk_entries(map, half_open, &mut forward, &mut replies)?;
    }
    let now = monotonic_ns();
    let half_open_ns = prog.shape.half_open_timeout_s as u64 * NS;
    let mut out = vec![ConnCounts::default(); slots];
    for (k, mut seen, real, lport) in forward {
        let Some(c) = out.get_mut(real as usize) else {
            continue;
        };
        if let Some(r) = replies.get(&(k.src, k.sport, k.dst, k.dport, k.proto, lport)) {
            seen.ns = seen.ns.max(r.ns);
            seen.closed |= r.closed;
        }
        match classify(k.proto, seen, now, half_open_ns) {
            Some(true) => c.active += 1,
            Some(false) => c.inactive += 1,
            None => {}
        }
    }
    Ok(out)
}

/// The entries of `map` (`rev`, `half_open` or `udp_flows`): forward entries as (client flow,
/// seen, real slot, full-NAT local port) into `forward`, reply entries by connection into
/// `replies`.
fn walk_entries(
    map: &libbpf_rs::MapHandle,
    half_open: bool,
    forward: &mut Vec<(types::lb_flow, Seen, u32, u16)>,
    replies: &mut HashMap<ConnKey, Seen>,
) -> Result<()> {
    let key_size = std::mem::size_of::<types::lb_flow>();
    let value_size = std::mem::size_of::<types::lb_rev>();
    map_walk_batch(map.as_fd(), key_size, value_size, WALK_BATCH, |k, v| {
        let (Some(k), Some(v)) = (
            from_bytes::<types::lb_flow>(k),
            from_bytes::<types::lb_rev>(v),
        ) else {
            return;
        };
        let seen = Seen {
            ns: v.seen_ns,
            closed: v.flags & REV_CLOSED != 0,
            half_open,
        };
        if v.flags & REV_FWD != 0 {
            forward.push((k, seen, v.real, v.lport));
            return;
        }
        // A reply entry: RIP:RPORT -> CIP:CPORT (NAT) or LADDR:LPORT (full-NAT).
        let lport = if v.flags & REV_FNAT != 0 { k.dport } else { 0 };
        let key = (v.client, v.cport, v.vip, v.vport, k.proto, lport);
        // A client port reused for a new connection may leave an older reply entry: the
        // newest tells.
        let e = replies.entry(key).or_default();
        if seen.ns >= e.ns {
            *e = seen;
        }
    })
    .map(|_| ())
    .map_err(|e| Error::DataPath(format!("walk the connection entries: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_tcp_is_active_half_open_closed_tcp_and_udp_inactive_until_they_expire() {
        let now = 10_000 * NS;
        let half = 60 * NS;
        let seen = |ago: u64, closed, half_open| Seen {
            ns: now - ago,
            closed,
            half_open,
        };
        let c = |proto, s| classify(proto, s, now, half);
        assert_eq!(c(6, seen(NS, false, false)), Some(true));
        assert_eq!(c(6, seen(899 * NS, false, false)), Some(true));
        assert_eq!(c(6, seen(901 * NS, false, false)), None);
        // In its handshake: inactive (ipvsadm's SYN_RECV), until the half-open timeout.
        assert_eq!(c(6, seen(NS, false, true)), Some(false));
        assert_eq!(c(6, seen(59 * NS, false, true)), Some(false));
        assert_eq!(c(6, seen(61 * NS, false, true)), None);
        assert_eq!(c(6, seen(NS, true, true)), Some(false));
        assert_eq!(c(6, seen(NS, true, false)), Some(false));
        assert_eq!(c(6, seen(121 * NS, true, false)), None);
        assert_eq!(c(17, seen(NS, false, false)), Some(false));
        assert_eq!(c(17, seen(299 * NS, false, false)), Some(false));
        assert_eq!(c(17, seen(301 * NS, false, false)), None);
        // A time from after `now` (a clock read before the entry's write) counts as new.
        let future = Seen {
            ns: now + NS,
            closed: false,
            half_open: false,
        };
        assert_eq!(c(6, future), Some(true));
    }
}
