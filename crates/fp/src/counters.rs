//! Why packets were fast-pathed or handed to the kernel: mirrors `enum fp_reason` in
//! bpf/fp_consts.h (same order).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Forwarded,
    DroppedFilter,
    PassNotIp,
    PassVlan,
    PassNotHost,
    PassBadHeader,
    PassIpOptions,
    PassFragment,
    PassTtl,
    PassMartian,
    PassDisabled,
    PassNotFwded,
    PassUnreachable,
    PassNoNeigh,
    PassFragNeeded,
    PassFwdDisabled,
    PassSameIf,
    PassNoTxPort,
    PassFilter,
    PassFibOther,
    Bridged,
    PassBridge,
    ForwardedCached,
    PassGso,
    PassCsumPartial,
}

impl Reason {
    pub const ALL: [Reason; 25] = [
        Reason::Forwarded,
        Reason::DroppedFilter,
        Reason::PassNotIp,
        Reason::PassVlan,
        Reason::PassNotHost,
        Reason::PassBadHeader,
        Reason::PassIpOptions,
        Reason::PassFragment,
        Reason::PassTtl,
        Reason::PassMartian,
        Reason::PassDisabled,
        Reason::PassNotFwded,
        Reason::PassUnreachable,
        Reason::PassNoNeigh,
        Reason::PassFragNeeded,
        Reason::PassFwdDisabled,
        Reason::PassSameIf,
        Reason::PassNoTxPort,
        Reason::PassFilter,
        Reason::PassFibOther,
        Reason::Bridged,
        Reason::PassBridge,
        Reason::ForwardedCached,
        Reason::PassGso,
        Reason::PassCsumPartial,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reason::Forwarded => "forwarded",
            Reason::DroppedFilter => "dropped_filter",
            Reason::PassNotIp => "pass_not_ip",
            Reason::PassVlan => "pass_vlan",
            Reason::PassNotHost => "pass_not_host",
            Reason::PassBadHeader => "pass_bad_header",
            Reason::PassIpOptions => "pass_ip_options",
            Reason::PassFragment => "pass_fragment",
            Reason::PassTtl => "pass_ttl",
            Reason::PassMartian => "pass_martian",
            Reason::PassDisabled => "pass_disabled",
            Reason::PassNotFwded => "pass_not_fwded",
            Reason::PassUnreachable => "pass_unreachable",
            Reason::PassNoNeigh => "pass_no_neigh",
            Reason::PassFragNeeded => "pass_frag_needed",
            Reason::PassFwdDisabled => "pass_fwd_disabled",
            Reason::PassSameIf => "pass_same_if",
            Reason::PassNoTxPort => "pass_no_tx_port",
            Reason::PassFilter => "pass_filter",
            Reason::PassFibOther => "pass_fib_other",
            Reason::Bridged => "bridged",
            Reason::PassBridge => "pass_bridge",
            Reason::ForwardedCached => "forwarded_cached",
            Reason::PassGso => "pass_gso",
            Reason::PassCsumPartial => "pass_csum_partial",
        }
    }

    /// True when the fast path finished the packet itself (forwarded or dropped).
    pub fn fast_pathed(self) -> bool {
        matches!(
            self,
            Reason::Forwarded | Reason::ForwardedCached | Reason::DroppedFilter | Reason::Bridged
        )
    }
}

/// Packet counts per reason, summed over CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters(pub [u64; Reason::ALL.len()]);

impl Counters {
    pub fn get(&self, r: Reason) -> u64 {
        self.0[r as usize]
    }

    /// Redirected by the router, on the FIB's answer or the route cache's.
    pub fn forwarded(&self) -> u64 {
        self.get(Reason::Forwarded) + self.get(Reason::ForwardedCached)
    }

    pub fn fast_pathed(&self) -> u64 {
        Reason::ALL
            .iter()
            .filter(|r| r.fast_pathed())
            .map(|r| self.get(*r))
            .sum()
    }

    pub fn passed(&self) -> u64 {
        Reason::ALL
            .iter()
            .filter(|r| !r.fast_pathed())
            .map(|r| self.get(*r))
            .sum()
    }

    /// Non-zero counts by name, for status output.
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        Reason::ALL
            .iter()
            .map(|r| (r.name(), self.get(*r)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}
