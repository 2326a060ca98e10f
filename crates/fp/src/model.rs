//! The one source of truth: what the kernel is configured to do, as far as the fast path
//! cares. Pure code: events in, state out; `plan` derives what each port runs from it.

use std::collections::{BTreeMap, BTreeSet};

use crate::filter::FilterPlan;
use crate::kernel::family::AF_INET;
use crate::kernel::forward_hooks::ForwardHooks;
use crate::kernel::routes::{NexthopChange, Recount, RouteChange, RouteCounts, RouteLedger};
use crate::kernel::taps::Taps;

/// A link as the fast path sees it: the kernel's link message, and the receive offloads that
/// ethtool reports beside it (`kernel::reader::KernelReader::offloads`), which no link event carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Link {
    /// What RTM_NEWLINK says of it; its fields read through `Link` (Deref).
    pub link: wirespeed_netlink::route::Link,
    /// Large receive offload is on (ethtool `rx-lro`): the driver merges segments into skbs
    /// that the forwarding path drops (`skb_warn_if_lro`).
    pub lro: bool,
    /// A received frame's VLAN tag may sit in the skb's metadata instead of the data, where
    /// XDP does not see it: every veth (its peer's sender keeps the tag there), and any device
    /// with rx-vlan-offload (`rx-vlan-hw-parse`, `rx-vlan-stag-hw-parse`).
    pub strips_vlan: bool,
}

pub use wirespeed_netlink::route::BridgeAttrs;

impl From<wirespeed_netlink::route::Link> for Link {
    /// The offloads unread (off) until `KernelReader::offloads` reads them.
    fn from(link: wirespeed_netlink::route::Link) -> Link {
        Link {
            link,
            lro: false,
            strips_vlan: false,
        }
    }
}

impl std::ops::Deref for Link {
    type Target = wirespeed_netlink::route::Link;

    fn deref(&self) -> &Self::Target {
        &self.link
    }
}

/// A bridge port as the bridge sees it (the AF_BRIDGE link dump).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgePort {
    pub index: u32,
    pub bridge: u32,
    pub mtu: u32,
    /// STP state (BR_STATE_*: 3 is forwarding).
    pub state: u8,
    /// VLAN id -> BRIDGE_VLAN_INFO_* flags.
    pub vlans: BTreeMap<u16, u16>,
    /// VLANs whose own STP state is not forwarding (`bridge vlan set ... state`, with user
    /// space STP), and that state.
    pub vlan_states: BTreeMap<u16, u8>,
    /// Port features the bridge module does not implement (isolated, locked, ...).
    pub unsupported: Vec<&'static str>,
}

pub const BR_STATE_FORWARDING: u8 = 3;
pub const BRIDGE_VLAN_INFO_PVID: u16 = 1 << 1;
pub const BRIDGE_VLAN_INFO_UNTAGGED: u16 = 1 << 2;

/// One FDB entry: (bridge, vid, MAC) -> port ifindex, 0 when the MAC is local to the bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FdbKey {
    pub bridge: u32,
    pub vid: u16,
    pub mac: [u8; 6],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbEntry {
    pub key: FdbKey,
    pub port: u32,
}

/// Which hook bridge ports get.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BridgeHook {
    /// TC where a port of the bridge is a veth (its frames end in a container) or a tap (a
    /// VM's), else XDP.
    #[default]
    Auto,
    Xdp,
    Tc,
}

/// The br_ports map value: what the program needs to know about a served port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrPortVal {
    pub bridge: u32,
    pub mtu: u32,
    pub pvid: u16,
    pub state: u8,
    pub vlan_filtering: bool,
    /// BR_CHECK_* bits: br_netfilter validates these families' headers.
    pub ip_check: u8,
    /// One frame per FDB entry goes to the kernel this often (0: never), which refreshes the
    /// kernel's ageing clock of the entry (fp_bridge.h, struct br_fdb_val).
    pub fdb_refresh_ns: u64,
}

pub use crate::consts::{BR_CHECK_IPV4, BR_CHECK_IPV6};

/// A policy routing rule, as far as telling the kernel's defaults from the rest goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleKey {
    pub family: u8,
    pub priority: u32,
    pub table: u32,
    /// One of the kernel's default rules (local, main, default lookups without selectors), or
    /// a rule that matches no lookup the fast path makes (a VRF's: `netlink::FRA_L3MDEV`).
    pub default: bool,
    /// bpf_fib_lookup evaluates this rule as the kernel's input path does, given the
    /// packet's ports (netlink::parse_rule): the routers may stay on beside it.
    pub helper_exact: bool,
    /// It selects by protocol or ports (fib_rules_require_fldissect).
    pub looks_at_ports: bool,
    pub detail: String,
}

/// What the watcher saw. Route, address and neighbour changes need no plan change: the
/// program asks the kernel's FIB and neighbour tables directly (bpf_fib_lookup), so they
/// take effect in the fast path the moment the kernel applies them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    LinkNew(Link),
    LinkDel(u32),
    Rules {
        family: u8,
    },
    Netconf,
    Route(RouteChange),
    /// A nexthop object was added, replaced or deleted: the FIB's answers for routes through
    /// it change without a route event.
    Nexthop(NexthopChange),
    Addr,
    /// An IPv4 or IPv6 neighbour's state (None: another family, or a proxy entry).
    Neigh(Option<crate::kernel::neigh::NeighState>),
    Nft,
    /// A bridge port's state or VLANs changed: resynced from a dump.
    Bridge,
    Fdb {
        add: bool,
        entry: FdbEntry,
    },
    /// A device's XDP features as the kernel reports them (netdev genetlink); None: the
    /// device is gone.
    XdpFeatures {
        ifindex: u32,
        features: Option<u64>,
    },
    /// A qdisc, class, filter or chain changed: resynced from a dump.
    Tc,
}

impl Event {
    pub fn kind(&self) -> &'static str {
        match self {
            Event::LinkNew(_) => "link",
            Event::LinkDel(_) => "link",
            Event::Rules { .. } => "rule",
            Event::Netconf => "netconf",
            Event::Route(_) => "route",
            Event::Nexthop(_) => "nexthop",
            Event::Addr => "addr",
            Event::Neigh(_) => "neigh",
            Event::Nft => "nftables",
            Event::Bridge => "bridge",
            Event::Fdb { .. } => "fdb",
            Event::XdpFeatures { .. } => "xdp-features",
            Event::Tc => "tc",
        }
    }
}

/// What of the namespace's xfrm state can touch a forwarded packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XfrmState {
    /// `out` and `fwd` policies by selector family: [IPv4, IPv6].
    pub policies: [usize; 2],
    /// The `fwd` or `out` default policy blocks what no policy matches.
    pub default_block: bool,
}

impl XfrmState {
    /// Why family `v6` (false: IPv4) must be forwarded by the kernel, if it must.
    pub fn hands_off(&self, v6: bool) -> Option<String> {
        if self.default_block {
            return Some(
                "an xfrm default policy blocks forwarded packets that no policy matches".into(),
            );
        }
        let n = self.policies[usize::from(v6)];
        (n > 0).then(|| {
            format!(
                "{n} IPsec (xfrm) out/fwd policies, which the kernel applies to forwarded packets"
            )
        })
    }
}

/// What tc does on one port, as far as the fast path must step aside for it (`tc.rs` reads it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortTc {
    /// Why this port's received packets must meet tc ingress (None: nothing there).
    pub ingress: Option<String>,
    /// Why packets sent out of this port must go through `dev_queue_xmit`.
    pub egress: Option<String>,
}

/// Per-interface and global sysctls that decide whether forwarding may be fast-pathed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sysctls {
    /// net.ipv4.conf.<if>.forwarding
    pub v4_forwarding: BTreeMap<String, bool>,
    /// max(net.ipv4.conf.all.rp_filter, net.ipv4.conf.<if>.rp_filter)
    pub rp_filter: BTreeMap<String, u32>,
    /// net.ipv6.conf.all.forwarding
    pub v6_forwarding: bool,
    /// Interfaces with net.ipv6.conf.<if>.disable_ipv6 set: the kernel drops every IPv6
    /// packet they receive (ip6_rcv_core), which the FIB helper does not check.
    pub v6_disabled: BTreeSet<String>,
    /// net.ipv6.conf.all.proxy_ndp: NDP messages to a proxied address are delivered locally.
    pub proxy_ndp: bool,
    /// The sysctls that change with no event, as last read: net.ipv4 and net.ipv6
    /// fib_multipath_hash_policy (0 hashes addresses and the IPv6 flow label, which the fast
    /// path gives the FIB helper; see `plan`), net.ipv4
    /// ip_forward_update_priority (0: a forwarded packet keeps its priority) and
    /// ip_forward_use_pmtu (1: forwarding honours learned path MTUs), br_netfilter's.
    pub unevented: Unevented,
}

/// The sysctls that change without an event (the sysctl hook sees their writes; the daemon
/// also polls them): `None` where this kernel has no such switch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unevented {
    /// net.ipv4 and net.ipv6 fib_multipath_hash_policy (0 where absent).
    pub multipath_hash_policy: [u32; 2],
    pub ip_forward_update_priority: Option<u32>,
    pub ip_forward_use_pmtu: Option<u32>,
    /// net.bridge.bridge-nf-call-{iptables,ip6tables,arptables}, -filter-{vlan,pppoe}-tagged
    /// (absent until br_netfilter is loaded).
    pub bridge_nf: [Option<u32>; 5],
}

/// What the operator chose when starting the daemon (`fp run`'s flags): fixed for its life.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Interfaces to serve by name; None: every eligible one.
    pub only: Option<Vec<String>>,
    pub bridge_hook: BridgeHook,
    /// `fp run --no-route-cache`.
    pub no_route_cache: bool,
    /// `fp run --assume-no-selinux-labels`.
    pub assume_no_selinux_labels: bool,
    /// Benchmarks only (daemon::Config::unbound_xdp).
    pub unbound_xdp: bool,
}

/// The model owns its state: events change it through `apply`, full reads of the kernel
/// through `replace_*`, and everything else reads it through accessors.
#[derive(Debug, Default)]
pub struct Model {
    links: BTreeMap<u32, Link>,
    /// Policy rules beyond the kernel's defaults, per family: while there are any, the route
    /// caches are off (a rule may look at the source or the ports) and the routers pass the
    /// helper what the rules look at.
    custom_rules_v4: usize,
    custom_rules_v6: usize,
    /// Of those, the rules the FIB helper cannot evaluate as the kernel does (fwmark, ...):
    /// while there are any, the family goes to the kernel.
    kernel_rules_v4: usize,
    kernel_rules_v6: usize,
    /// IPv4 rules that select by protocol or ports (the kernel's source check then swaps
    /// the ports, in the kernels that do).
    port_rules_v4: usize,
    sysctls: Sysctls,
    filter: FilterPlan,
    /// Interfaces to serve by name; None: every eligible one.
    only: Option<Vec<String>>,
    bridge_ports: BTreeMap<u32, BridgePort>,
    fdb: BTreeMap<FdbKey, u32>,
    bridge_hook: BridgeHook,
    /// Why bridged traffic must stay in the kernel whatever the bridge (br_netfilter, bridge
    /// or netdev nftables tables); None: it may be fast-pathed.
    bridge_kernel: Option<String>,
    /// net.bridge.bridge-nf-call-iptables / -ip6tables: br_netfilter validates the headers
    /// of bridged IPv4 / IPv6 frames.
    br_nf_v4: bool,
    br_nf_v6: bool,
    /// XDP features per ifindex (netdev genetlink). None: this kernel does not report them
    /// (before Linux 6.3), so no device is known to take XDP-redirected frames.
    xdp_features: Option<BTreeMap<u32, u64>>,
    /// Per family, the routes the route cache cannot stand for, and those whose next hop the
    /// FIB picks by a flow hash, all tables (routes::RouteLedger): while a family has any of
    /// the first, every packet of it asks the FIB.
    routes: RouteLedger,
    /// The route cache is switched off (`fp run --no-route-cache`).
    no_route_cache: bool,
    /// This namespace's IPv4 addresses: a forwarded packet from one of them is the kernel's.
    local_v4: BTreeSet<[u8; 4]>,
    /// The IPsec policies a forwarded packet may meet: while a family has any, the kernel
    /// forwards it.
    xfrm: XfrmState,
    /// Ports with tc classifiers or a qdisc of their own, by ifindex.
    tc: BTreeMap<u32, PortTc>,
    /// Served ports with tcx programs that are not ours, by ifindex: (at ingress, at egress).
    /// tcx links come with no event: polled.
    tcx_others: BTreeMap<u32, (u32, u32)>,
    /// Why no sysctl hook sees the multipath hash policies change (None: one does): then
    /// a family with multipath routes is the kernel's, its policy never read stale.
    hash_policy_unwatched: Option<String>,
    /// Packet sockets that see the ports' frames (tcpdump, DHCP clients): polled.
    taps: Taps,
    /// Ports whose driver refused a device-bound XDP program in native mode (the data path
    /// says; a link event of the port clears it, to try again).
    xdp_native_refused: BTreeSet<u32>,
    /// IPVS's and SELinux's FORWARD hooks: polled.
    forward_hooks: ForwardHooks,
    /// The operator says no SELinux secmark, NetLabel or labeled IPsec is in use
    /// (`fp run --assume-no-selinux-labels`).
    assume_no_selinux_labels: bool,
    /// Benchmarks only (daemon::Config::unbound_xdp): XDP programs are never device-bound.
    unbound_xdp: bool,
}

impl Model {
    pub fn new(settings: Settings) -> Model {
        let Settings {
            only,
            bridge_hook,
            no_route_cache,
            assume_no_selinux_labels,
            unbound_xdp,
        } = settings;
        Model {
            only,
            bridge_hook,
            no_route_cache,
            assume_no_selinux_labels,
            unbound_xdp,
            ..Model::default()
        }
    }

    /// Applies one event; returns true when the plan may have changed.
    pub fn apply(&mut self, ev: &Event) -> bool {
        match ev {
            Event::LinkNew(l) => {
                let changed = self.links.get(&l.index) != Some(l);
                self.links.insert(l.index, l.clone());
                // A link going down flushes the IPv4 routes through it, with no route event.
                if !l.up {
                    self.routes.routes_may_be_flushed();
                }
                // Its peer's MTU may have changed too: native XDP is tried again.
                let refused = self.xdp_native_refused.remove(&l.index);
                changed || refused
            }
            Event::LinkDel(i) => {
                self.routes.routes_may_be_flushed();
                self.links.remove(i).is_some()
            }
            // Resynced by the watcher (rule dumps, sysctls, ruleset), which then sets fields.
            Event::Rules { .. } | Event::Netconf | Event::Nft | Event::Tc => true,
            // The program asks the kernel's FIB (through its route cache, which the watcher
            // invalidates on every event), so routes change no plan, unless one turns a
            // family's route cache off; one that may turn it back on asks for a dump
            // (routes.recount), which the watcher makes.
            Event::Route(c) => self.routes.route(c),
            Event::Nexthop(c) => {
                self.routes.nexthop(c);
                false
            }
            Event::Addr => {
                // An address deleted flushes the IPv4 routes through it, with no route event.
                self.routes.routes_may_be_flushed();
                false
            }
            Event::Neigh(_) => false,
            Event::Bridge => true,
            Event::Fdb { add, entry } => {
                if *add {
                    self.fdb.insert(entry.key, entry.port);
                } else {
                    self.fdb.remove(&entry.key);
                }
                false
            }
            Event::XdpFeatures { ifindex, features } => {
                let known = self.xdp_features.get_or_insert_with(BTreeMap::new);
                match features {
                    Some(f) => known.insert(*ifindex, *f) != Some(*f),
                    None => known.remove(ifindex).is_some(),
                }
            }
        }
    }

    /// Whether the route counts must be read again (after `apply`): see `routes::Recount`.
    pub fn take_route_recount(&mut self) -> Recount {
        self.routes.take_recount()
    }

    /// Every link, from a dump (offloads read).
    pub fn replace_links(&mut self, links: Vec<Link>) {
        self.links = links.into_iter().map(|l| (l.index, l)).collect();
    }

    /// Every device's XDP features; None: the kernel does not report them.
    pub fn replace_xdp_features(&mut self, features: Option<BTreeMap<u32, u64>>) {
        self.xdp_features = features;
    }

    /// The bridge ports and the FDB, from dumps.
    pub fn replace_bridge(&mut self, ports: BTreeMap<u32, BridgePort>, fdb: Vec<FdbEntry>) {
        self.bridge_ports = ports;
        self.fdb = fdb.into_iter().map(|e| (e.key, e.port)).collect();
    }

    /// Both families' route counts and the nexthop groups, from dumps.
    pub fn replace_route_counts(
        &mut self,
        groups: Option<BTreeSet<u32>>,
        v4: RouteCounts,
        v6: RouteCounts,
    ) {
        self.routes.set(groups, v4, v6);
    }

    pub fn replace_local_v4(&mut self, addrs: BTreeSet<[u8; 4]>) {
        self.local_v4 = addrs;
    }

    pub fn replace_tc(&mut self, tc: BTreeMap<u32, PortTc>) {
        self.tc = tc;
    }

    pub fn replace_xfrm(&mut self, xfrm: XfrmState) {
        self.xfrm = xfrm;
    }

    /// The sysctls as read; br_netfilter's IP header checks follow its switches.
    pub fn replace_sysctls(&mut self, sysctls: Sysctls) {
        let on = |i: usize| sysctls.unevented.bridge_nf[i] == Some(1);
        self.br_nf_v4 = on(0);
        self.br_nf_v6 = on(1);
        self.sysctls = sysctls;
    }

    /// Other owners' tcx programs (polled); returns whether they changed.
    pub fn replace_tcx_others(&mut self, tcx: BTreeMap<u32, (u32, u32)>) -> bool {
        replace(&mut self.tcx_others, tcx)
    }

    /// The packet sockets (polled); returns whether they changed.
    pub fn replace_taps(&mut self, taps: Taps) -> bool {
        replace(&mut self.taps, taps)
    }

    /// IPVS's and SELinux's FORWARD hooks (polled); returns whether they changed.
    pub fn replace_forward_hooks(&mut self, hooks: ForwardHooks) -> bool {
        replace(&mut self.forward_hooks, hooks)
    }

    /// The ports whose driver refused native XDP, as the data path reports them.
    pub fn replace_xdp_native_refused(&mut self, refused: BTreeSet<u32>) {
        self.xdp_native_refused = refused;
    }

    /// Why bridged traffic must stay in the kernel (None: it may be fast-pathed).
    pub fn set_bridge_kernel(&mut self, why: Option<String>) {
        self.bridge_kernel = why;
    }

    /// Why no sysctl hook watches the multipath hash policies (None: one does).
    pub fn set_hash_policy_unwatched(&mut self, why: Option<String>) {
        self.hash_policy_unwatched = why;
    }

    /// The filter's plan, which the ruleset reader keeps in step with nftables, iptables
    /// and ipset (`ruleset::Ruleset`).
    pub fn filter_mut(&mut self) -> &mut FilterPlan {
        &mut self.filter
    }

    pub fn links(&self) -> &BTreeMap<u32, Link> {
        &self.links
    }

    pub fn filter(&self) -> &FilterPlan {
        &self.filter
    }

    pub fn fdb(&self) -> &BTreeMap<FdbKey, u32> {
        &self.fdb
    }

    pub fn bridge_ports(&self) -> &BTreeMap<u32, BridgePort> {
        &self.bridge_ports
    }

    pub fn sysctls(&self) -> &Sysctls {
        &self.sysctls
    }

    pub fn tcx_others(&self) -> &BTreeMap<u32, (u32, u32)> {
        &self.tcx_others
    }

    pub fn forward_hooks(&self) -> &ForwardHooks {
        &self.forward_hooks
    }

    pub fn xdp_native_refused(&self) -> &BTreeSet<u32> {
        &self.xdp_native_refused
    }

    pub fn assume_no_selinux_labels(&self) -> bool {
        self.assume_no_selinux_labels
    }

    pub fn hash_policy_unwatched(&self) -> Option<&str> {
        self.hash_policy_unwatched.as_deref()
    }

    /// Counts the policy rules of one family, from a dump.
    pub fn replace_rules(&mut self, family: u8, rules: &[RuleKey]) {
        let custom = rules.iter().filter(|r| !r.default).count();
        let kernel = rules
            .iter()
            .filter(|r| !r.default && !r.helper_exact)
            .count();
        if family == AF_INET {
            self.custom_rules_v4 = custom;
            self.kernel_rules_v4 = kernel;
            self.port_rules_v4 = rules
                .iter()
                .filter(|r| !r.default && r.looks_at_ports)
                .count();
        } else {
            self.custom_rules_v6 = custom;
            self.kernel_rules_v6 = kernel;
        }
    }
}

pub mod features;
pub mod plan;

/// Sets `slot` to `new`; returns whether it changed.
fn replace<T: PartialEq>(slot: &mut T, new: T) -> bool {
    let changed = *slot != new;
    *slot = new;
    changed
}

#[cfg(test)]
mod tests;
