//! What a program is built with (its load-time constants) and what a device can do (its XDP
//! features): the vocabulary shared by the model, the loader and the netlink watcher. It sits
//! below all three so that the model depends on neither the loader nor netlink.

use serde::Serialize;

/// The load-time constants of one program: which modules exist in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Features {
    pub router_v4: bool,
    pub router_v6: bool,
    pub filter_v4: bool,
    pub filter_v6: bool,
    pub policy_drop_v4: bool,
    pub policy_drop_v6: bool,
    /// Filter fields some rule constrains (classify::FIELD_*): the others cost no lookup.
    pub filter_fields: u8,
    /// The bridge module: this port belongs to a Linux bridge.
    pub bridge: bool,
    /// The program runs at TC ingress (fp_tc) instead of XDP (fp_xdp).
    pub tc: bool,
    /// At XDP, the device's driver may have taken a frame's VLAN tag off (a veth, a NIC
    /// with rx-vlan-offload): the program asks it (fp_xdp_vlan, bound to the device), and a
    /// frame that came tagged is the kernel's.
    pub vlan_meta: bool,
    /// MAC of the interface the program serves; frames to other MACs go to the kernel.
    #[serde(skip)]
    pub mac: [u8; 6],
    /// The interface's index, a constant in the program (0: read from the context).
    #[serde(skip)]
    pub ifindex: u32,
}

/// Which families' routers answer repeat destinations from their route cache (fp_maps.h):
/// a run-time switch in the ctl value, not a load-time constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RouteCache {
    pub v4: bool,
    pub v6: bool,
}

impl RouteCache {
    /// Both families on, or both off.
    pub const fn both(on: bool) -> RouteCache {
        RouteCache { v4: on, v6: on }
    }
}

/// Which families have policy rules beyond the kernel's defaults, all of them ones the FIB
/// helper evaluates (fp_ctl.policy_rules_v4/v6): the routers then ask as the kernel's input
/// path does, ports and all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PolicyRules {
    pub v4: bool,
    pub v6: bool,
    /// Some IPv4 rule selects by protocol or ports.
    pub v4_ports: bool,
}

/// Which families' fragments conntrack may reassemble before the kernel routes them
/// (fp_ctl.reassembly_v4/v6): the routers then hand every fragment of that family to the
/// kernel, which holds it until its datagram is whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Reassembly {
    pub v4: bool,
    pub v6: bool,
}

/// Which families have multipath routes (fp_ctl.multipath_v4/v6): while a family's sysctl
/// gate is closed (a hash policy written, not yet read back: `sysctl_hook`), its packets are
/// the kernel's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Multipath {
    pub v4: bool,
    pub v6: bool,
}

/// The run-time switches of one program (its `fp_ctl` value, beside the filter's own, which
/// come from its Features): what the kernel must decide and which shortcuts the routers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switches {
    /// Hand every IPv4 / IPv6 packet to the kernel.
    pub off_v4: bool,
    pub off_v6: bool,
    pub route_cache: RouteCache,
    /// Check each IPv4 source as rp_filter does (strict or loose).
    pub rp_filter_v4: bool,
    pub policy_rules: PolicyRules,
    pub reassembly: Reassembly,
    pub multipath: Multipath,
    /// The smallest unlocked MTU of an IPv4 route (0: none): longer packets go to the kernel.
    pub route_mtu_v4: u32,
    /// net.ipv6.conf.all.proxy_ndp: NDP messages go to the kernel.
    pub proxy_ndp: bool,
    /// Check every IPv4 source as the kernel's full check does (a user's local route).
    pub source_check_v4: bool,
    /// net.ipv4.ip_forward_update_priority is 0: the TC router leaves skb->priority alone.
    pub keep_priority: bool,
}

impl Default for Switches {
    /// Both families fast-pathed, both route caches on, no source check.
    fn default() -> Switches {
        Switches {
            off_v4: false,
            off_v6: false,
            route_cache: RouteCache::both(true),
            rp_filter_v4: false,
            policy_rules: PolicyRules::default(),
            reassembly: Reassembly::default(),
            multipath: Multipath::default(),
            route_mtu_v4: 0,
            proxy_ndp: false,
            source_check_v4: false,
            keep_priority: false,
        }
    }
}

/// Every filter field (classify::FIELD_*).
pub const FIELDS_ALL: u8 = {
    use crate::consts::*;
    FIELD_SRC | FIELD_DST | FIELD_PROTO | FIELD_SPORT | FIELD_DPORT | FIELD_OIF
};

impl Features {
    /// Whether a program loaded with these features can run `want` through run-time
    /// switches alone: the same modules and hook, with at least the filter code `want` needs.
    pub fn serves(&self, want: &Features) -> bool {
        self.router_v4 == want.router_v4
            && self.router_v6 == want.router_v6
            && self.bridge == want.bridge
            && self.tc == want.tc
            && self.vlan_meta == want.vlan_meta
            && self.mac == want.mac
            && self.ifindex == want.ifindex
            && (self.filter_v4 || !want.filter_v4)
            && (self.filter_v6 || !want.filter_v6)
            && self.filter_fields & want.filter_fields == want.filter_fields
    }

    /// What to compile for `self`: a filter with every field in, so that rules using other
    /// fields later need no new program; policies are run-time values.
    pub fn to_load(&self) -> Features {
        let mut f = *self;
        if f.filter_v4 || f.filter_v6 {
            f.filter_fields = FIELDS_ALL;
        }
        f.policy_drop_v4 = false;
        f.policy_drop_v6 = false;
        f
    }

    pub fn modules(&self) -> Vec<&'static str> {
        let mut m = Vec::new();
        if self.bridge {
            m.push("bridge");
        }
        if self.router_v4 {
            m.push("router4");
        }
        if self.router_v6 {
            m.push("router6");
        }
        if self.filter_v4 {
            m.push("filter4");
        }
        if self.filter_v6 {
            m.push("filter6");
        }
        m
    }
}

/// enum netdev_xdp_act: the driver implements ndo_xdp_xmit (takes XDP-redirected frames).
pub use wirespeed_netlink::netdev::XDP_ACT_NDO_XMIT as NETDEV_XDP_ACT_NDO_XMIT;

/// The driver hands an XDP program a frame's VLAN tag when it took it off
/// (NETDEV_XDP_RX_METADATA_VLAN_TAG, from NETDEV_A_DEV_XDP_RX_METADATA_FEATURES; Linux 6.8+):
/// kept above the XDP action bits, which use the low 32, so that one word per device says
/// what the device does for XDP.
pub const XDP_RX_VLAN_TAG: u64 = 1 << 32;
