//! The per-interface plan: what each port runs (modules, hook, run-time switches, egress
//! ports) given the model of the kernel's state, and why, for status. Pure code: model in,
//! plan out.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::filter::FamilyFilter;
use crate::model::features::{
    Features, Multipath, PolicyRules, Reassembly, RouteCache, Switches, NETDEV_XDP_ACT_NDO_XMIT,
    XDP_RX_VLAN_TAG,
};
use crate::model::{
    BrPortVal, BridgeHook, BridgePort, Link, Model, BRIDGE_VLAN_INFO_PVID, BR_CHECK_IPV4,
    BR_CHECK_IPV6, BR_STATE_FORWARDING,
};

/// Why a policy rule hands its family to the kernel, for status.
const KERNEL_RULES: &str =
    "with a selector or action the FIB helper does not see as the kernel does (fwmark, uidrange, tos/dscp, tun_id, realms)";

/// The most local IPv4 addresses the router's map holds (LOCAL_V4_MAX in fp_maps.h); with
/// more, IPv4 goes to the kernel.
pub use crate::consts::LOCAL_V4_MAX;

/// What one interface should run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortPlan {
    pub ifindex: u32,
    pub name: String,
    pub features: Features,
    /// Families handed to the kernel at run time (a map flag, no program swap).
    pub off_v4: bool,
    pub off_v6: bool,
    /// Which routers answer from their route cache (fp_maps.h).
    pub route_cache: RouteCache,
    /// rp_filter is on for this port (strict or loose): the IPv4 router fast-paths a packet
    /// only if its source routes back out this port, and hands the rest to the kernel.
    pub rp_filter_v4: bool,
    /// Which families have policy rules (all of them ones the helper evaluates).
    pub policy_rules: PolicyRules,
    /// Which families' fragments conntrack may reassemble: those go to the kernel.
    pub reassembly: Reassembly,
    /// Which families have multipath routes (their packets wait for the sysctl gate).
    pub multipath: Multipath,
    /// IPv4 packets longer than this go to the kernel: a route's own MTU (0: none).
    pub route_mtu_v4: u32,
    /// NDP messages go to the kernel (proxy_ndp).
    pub proxy_ndp: bool,
    /// A user's local route was seen: every IPv4 source is checked as the kernel does.
    pub source_check_v4: bool,
    /// net.ipv4.ip_forward_update_priority is 0: a forwarded skb keeps its priority.
    pub keep_priority: bool,
    /// Egress ports this port's program may redirect to (ifindexes).
    pub tx_ports: Vec<u32>,
    /// The namespace's IPv4 addresses, for the router's local-source check.
    pub local_v4: Vec<[u8; 4]>,
    /// Why a module is off, and which hook forwards and why, for status.
    pub notes: Vec<String>,
}

impl PortPlan {
    /// The program's run-time switches for this plan.
    pub fn switches(&self) -> Switches {
        Switches {
            off_v4: self.off_v4,
            off_v6: self.off_v6,
            route_cache: self.route_cache,
            rp_filter_v4: self.rp_filter_v4,
            policy_rules: self.policy_rules,
            reassembly: self.reassembly,
            multipath: self.multipath,
            route_mtu_v4: self.route_mtu_v4,
            proxy_ndp: self.proxy_ndp,
            source_check_v4: self.source_check_v4,
            keep_priority: self.keep_priority,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub ports: BTreeMap<u32, PortPlan>,
    /// The bridge module's port table and VLAN membership ((port, vid) -> flags).
    pub bridge_ports: BTreeMap<u32, BrPortVal>,
    pub bridge_vlans: BTreeMap<(u32, u16), u16>,
}

impl Model {
    /// Why port `ifindex`'s received packets must meet tc ingress (tc.rs), if they must.
    fn tc_ingress(&self, ifindex: u32) -> Option<String> {
        if let Some(why) = self.tc.get(&ifindex).and_then(|t| t.ingress.clone()) {
            return Some(why);
        }
        match self.tcx_others.get(&ifindex) {
            Some(&(n, _)) if n > 0 => Some(format!(
                "{n} tcx programs of others at ingress (behind ours, they would not see what we forward)"
            )),
            _ => None,
        }
    }

    /// Why packets sent out of port `ifindex` must go through `dev_queue_xmit`, if they must.
    /// A capture also sees what the port receives only before XDP, so such a port runs at TC
    /// too: the one hook of its bridge or of every routed port follows from this.
    fn tc_egress(&self, ifindex: u32) -> Option<String> {
        if let Some(why) = self.tc.get(&ifindex).and_then(|t| t.egress.clone()) {
            return Some(why);
        }
        let captures = self.taps.on(ifindex).all;
        if captures > 0 {
            return Some(format!(
                "{captures} packet captures (sockets of every protocol, as tcpdump opens)"
            ));
        }
        match self.tcx_others.get(&ifindex) {
            Some(&(_, n)) if n > 0 => Some(format!("{n} tcx programs at egress")),
            _ => None,
        }
    }

    /// Why the bridge module must not forward for bridge port `l`, if it must not.
    fn bridge_off(&self, l: &Link, port: Option<&BridgePort>) -> Option<String> {
        if let Some(why) = &self.bridge_kernel {
            return Some(why.clone());
        }
        if let Some(why) = self.tc_ingress(l.index) {
            return Some(why);
        }
        let br = l.master.and_then(|m| self.links.get(&m))?;
        let attrs = br.bridge.unwrap_or_default();
        if attrs.mst {
            return Some("multiple spanning tree instances (per-VLAN port states)".into());
        }
        if attrs.vlan_filtering && attrs.vlan_stats {
            return Some("per-VLAN statistics on (vlan_stats_enabled)".into());
        }
        if attrs.vlan_filtering && attrs.vlan_protocol != 0x8100 {
            return Some(format!("VLAN protocol {:#06x}", attrs.vlan_protocol));
        }
        if !br.up {
            return Some("bridge down".into());
        }
        if br.promisc {
            return Some(format!(
                "{} is promiscuous (it gets a copy of every frame its ports forward)",
                br.name
            ));
        }
        let Some(port) = port else {
            return Some("no bridge port state yet".into());
        };
        // Forced to XDP, a port whose frames XDP cannot take as the kernel would is the
        // kernel's (auto moves its bridge to TC instead).
        if self.bridge_hook == BridgeHook::Xdp {
            if let Err(why) = self.xdp_ingress(l) {
                return Some(why);
            }
        }
        if !port.unsupported.is_empty() {
            return Some(port.unsupported.join(", "));
        }
        if port.state != BR_STATE_FORWARDING {
            return Some(format!("STP state {}", stp_state_name(port.state)));
        }
        None
    }

    /// Why bridge `bridge` runs at TC ingress; None: at XDP.
    fn bridge_tc_reason(&self, bridge: u32) -> Option<String> {
        match self.bridge_hook {
            BridgeHook::Tc => Some("--bridge-hook tc".into()),
            BridgeHook::Xdp => None,
            BridgeHook::Auto => self
                .links
                .values()
                .filter(|p| p.master == Some(bridge))
                .find_map(|p| {
                    if p.kind == "veth" {
                        Some(format!(
                            "port {} is a veth (its frames end in a container)",
                            p.name
                        ))
                    } else if p.kind == "tun" {
                        // A guest's TSO super-frames reach a tap's XDP program as skbs
                        // (generic XDP), copied whole into one buffer first and then left to
                        // the kernel, too large to redirect; at TC they are forwarded as
                        // they are.
                        Some(format!(
                            "port {} is a tap (its VM's TSO frames would take generic XDP)",
                            p.name
                        ))
                    } else {
                        let why = self.xdp_egress(p).err().or(self.xdp_ingress(p).err())?;
                        Some(format!("port {} {why}", p.name))
                    }
                }),
        }
    }

    /// Whether a frame redirected from XDP into `l` is delivered, or why not. The kernel's
    /// own answer: the device's NETDEV_XDP_ACT_NDO_XMIT bit. A veth sets it only while its
    /// peer runs NAPI (an XDP program or GRO on the peer); without it the kernel drops
    /// redirected frames silently. A TC redirect (an skb) is delivered into any device.
    pub fn xdp_egress(&self, l: &Link) -> Result<(), String> {
        // An XDP redirect goes to the driver, past the port's egress tc and qdisc (tc.rs).
        if let Some(why) = self.tc_egress(l.index) {
            return Err(format!("has {why}, which an XDP redirect would skip"));
        }
        let Some(known) = &self.xdp_features else {
            return Err(
                "takes no XDP frames: the kernel reports no XDP features (Linux < 6.3)".into(),
            );
        };
        match known.get(&l.index) {
            Some(f) if f & NETDEV_XDP_ACT_NDO_XMIT != 0 => Ok(()),
            _ if l.kind == "veth" => Err(
                "takes no XDP frames: its veth peer runs no NAPI (no XDP program, GRO off)".into(),
            ),
            _ => Err(format!(
                "takes no XDP frames: its driver ({}) has no ndo_xdp_xmit",
                if l.kind.is_empty() {
                    "physical"
                } else {
                    &l.kind
                }
            )),
        }
    }

    /// Whether an XDP program on `l` may take its received frames as the kernel would, or
    /// why not: a capture sees a frame before tc ingress, after XDP; and a driver that took a
    /// frame's VLAN tag off keeps it in metadata, which the program reads only where the
    /// driver hands it over (`bpf_xdp_metadata_rx_vlan_tag`): a frame it took for untagged
    /// would be forwarded where the kernel drops it or gives it to a VLAN device.
    pub fn xdp_ingress(&self, l: &Link) -> Result<(), String> {
        let captures = self.taps.on(l.index).all;
        if captures > 0 {
            return Err(format!(
                "has {captures} packet captures, which see its frames only where XDP does not take them"
            ));
        }
        if !l.strips_vlan || self.unbound_xdp {
            return Ok(());
        }
        if self.rx_vlan_tag(l) {
            if self.xdp_native_refused.contains(&l.index) {
                return Err(
                    "refuses native XDP (a veth whose peer's MTU is past a page), and generic XDP does not show VLAN tags in metadata"
                        .into(),
                );
            }
            return Ok(());
        }
        Err(if l.kind == "veth" {
            "may receive VLAN tags in metadata, which this kernel does not show XDP (Linux < 6.8)"
                .into()
        } else {
            format!(
                "strips VLAN tags (rx-vlan-offload), which its driver does not show XDP: `ethtool -K {} rxvlan off` lets it run at XDP",
                l.name
            )
        })
    }

    /// The driver hands XDP the VLAN tag it took off (netdev XDP RX metadata).
    fn rx_vlan_tag(&self, l: &Link) -> bool {
        self.xdp_features
            .as_ref()
            .and_then(|k| k.get(&l.index))
            .is_some_and(|f| f & XDP_RX_VLAN_TAG != 0)
    }

    fn plan_bridge_port(&self, l: &Link, bridge: u32, plan: &mut Plan) {
        let port = self.bridge_ports.get(&l.index);
        let mut notes = Vec::new();
        match self.bridge_off(l, port) {
            Some(why) => notes.push(format!("bridge -> kernel: {why}")),
            None => {
                let port = port.expect("bridge_off checks the port");
                let attrs = self
                    .links
                    .get(&bridge)
                    .and_then(|b| b.bridge)
                    .unwrap_or_default();
                let filtering = attrs.vlan_filtering;
                let mut ip_check = 0;
                if self.br_nf_v4 || attrs.nf_call_v4 {
                    ip_check |= BR_CHECK_IPV4;
                }
                if self.br_nf_v6 || attrs.nf_call_v6 {
                    ip_check |= BR_CHECK_IPV6;
                }
                let pvid = port
                    .vlans
                    .iter()
                    .find(|(_, f)| *f & BRIDGE_VLAN_INFO_PVID != 0)
                    .map(|(v, _)| *v)
                    .unwrap_or(0);
                plan.bridge_ports.insert(
                    l.index,
                    BrPortVal {
                        bridge,
                        mtu: l.mtu,
                        pvid,
                        state: port.state,
                        vlan_filtering: filtering,
                        ip_check,
                        fdb_refresh_ns: fdb_refresh_ns(attrs.ageing_cs),
                    },
                );
                // A VLAN whose own STP state is not forwarding is left out: the module then
                // hands its frames, in and out, to the kernel, which learns or drops them
                // (br_allowed_ingress, br_allowed_egress).
                if filtering {
                    for (vid, flags) in &port.vlans {
                        if !port.vlan_states.contains_key(vid) {
                            plan.bridge_vlans.insert((l.index, *vid), *flags);
                        }
                    }
                }
            }
        }
        if !l.up {
            notes.push("link down: not a redirect target".to_string());
        }
        let tc_reason = self.bridge_tc_reason(bridge);
        let tc = tc_reason.is_some();
        if let Some(why) = tc_reason {
            notes.push(format!("bridge at TC: {why}"));
        }
        let mut tx_ports = Vec::new();
        for p in self.links.values() {
            if p.master != Some(bridge) || !p.up || self.eligible(p).is_err() {
                continue;
            }
            match self.xdp_egress(p) {
                Err(why) if !tc => {
                    if p.index == l.index {
                        notes.push(format!(
                            "not an XDP redirect target ({why}): frames to it go to the kernel"
                        ));
                    }
                }
                _ => tx_ports.push(p.index),
            }
        }
        let f = Features {
            mac: l.mac.unwrap_or_default(),
            ifindex: l.index,
            bridge: true,
            tc,
            vlan_meta: !tc && l.strips_vlan && !self.unbound_xdp,
            ..Features::default()
        };
        plan.ports.insert(
            l.index,
            PortPlan {
                ifindex: l.index,
                name: l.name.clone(),
                features: f,
                off_v4: false,
                off_v6: false,
                route_cache: RouteCache::default(),
                rp_filter_v4: false,
                policy_rules: PolicyRules::default(),
                reassembly: Reassembly::default(),
                multipath: Multipath::default(),
                route_mtu_v4: 0,
                proxy_ndp: false,
                source_check_v4: false,
                keep_priority: false,
                local_v4: Vec::new(),
                tx_ports,
                notes,
            },
        );
    }

    fn eligible(&self, l: &Link) -> Result<(), &'static str> {
        if l.loopback || l.mac.is_none() {
            return Err("not an Ethernet interface");
        }
        if l.kind == "bridge" {
            return Err("a bridge device: its ports are served");
        }
        if l.kind == "vrf" {
            return Err("a VRF device: the kernel routes for it");
        }
        if l.switchdev {
            return Err("a switchdev port: its hardware may have forwarded a frame already");
        }
        if l.lro {
            return Err(
                "LRO on: the kernel drops what it would forward of its merged skbs (`ethtool -K <port> lro off`)",
            );
        }
        if self
            .links
            .values()
            .any(|u| u.claims_lower && u.lower == Some(l.index))
        {
            return Err(
                "an ipvlan, macsec or passthru macvlan on it claims its frames after XDP and tc",
            );
        }
        if let Some(m) = l.master {
            if self.links.get(&m).map(|b| b.kind.as_str()) != Some("bridge") {
                return Err("enslaved to a non-bridge master (bond, VRF, ...)");
            }
        }
        if let Some(only) = &self.only {
            if !only.contains(&l.name) {
                return Err("not selected");
            }
        }
        Ok(())
    }

    /// Why each family ([IPv4, IPv6]) of routed port `l` must be the kernel's, if it must:
    /// what the FIB helper cannot evaluate as the kernel does.
    fn families_to_kernel(&self, l: &Link) -> [Vec<String>; 2] {
        let mut why: [Vec<String>; 2] = Default::default();
        for (i, rules) in [self.kernel_rules_v4, self.kernel_rules_v6]
            .into_iter()
            .enumerate()
        {
            if rules > 0 {
                why[i].push(format!(
                    "{rules} IPv{} policy rules {KERNEL_RULES}",
                    4 + 2 * i
                ));
            }
        }
        if !self
            .sysctls
            .v4_forwarding
            .get(&l.name)
            .copied()
            .unwrap_or(false)
        {
            why[0].push("IPv4 forwarding disabled".into());
        }
        if self
            .sysctls
            .unevented
            .ip_forward_use_pmtu
            .is_some_and(|v| v != 0)
        {
            why[0].push(
                "ip_forward_use_pmtu on (forwarding then honours path MTUs the kernel learns, with no event)"
                    .into(),
            );
        }
        if self.routes.v4.realms > 0 {
            why[0].push(format!(
                "{} routes with a realm (the kernel accounts each packet to it, rt_acct)",
                self.routes.v4.realms
            ));
        }
        if self.local_v4.len() > LOCAL_V4_MAX {
            why[0].push(format!("more than {LOCAL_V4_MAX} local IPv4 addresses"));
        }
        if !self.sysctls.v6_forwarding {
            why[1].push("IPv6 forwarding disabled".into());
        }
        if self.sysctls.v6_disabled.contains(&l.name) {
            why[1].push(format!("IPv6 disabled on {} (disable_ipv6)", l.name));
        }
        if let Some(t) = self.tc_ingress(l.index) {
            why[0].push(t.clone());
            why[1].push(t);
        }
        let taps = self.taps.on(l.index);
        for (i, n) in [taps.ipv4, taps.ipv6].into_iter().enumerate() {
            if n > 0 {
                why[i].push(format!(
                    "{n} packet sockets bound to IPv{} see every such frame {} receives (/proc/net/packet)",
                    4 + 2 * i,
                    l.name
                ));
            }
        }
        for (i, family) in [(0, &self.filter.v4), (1, &self.filter.v6)] {
            if let Some(x) = self.xfrm.hands_off(i == 1) {
                why[i].push(x);
            }
            if let Some(h) = self
                .forward_hooks
                .hands_off(i == 1, self.assume_no_selinux_labels)
            {
                why[i].push(h);
            }
            if let FamilyFilter::Kernel(f) = family {
                why[i].push(f.clone());
            }
            // Conntrack's first user in a namespace starts it for every packet of the family,
            // forwarded ones too: each gets an entry (`conntrack -L`, the table's limit), its
            // fragments are reassembled, and a forward rule's `ct state` of a reply depends on
            // having seen the request.
            let conntrack = [&self.filter.reassembly_v4, &self.filter.reassembly_v6][i];
            if let Some(c) = conntrack {
                why[i].push(format!("conntrack tracks every forwarded packet ({c})"));
            }
            // Any hash policy but 0 can pick a next hop from what the FIB helper is not
            // given: policy 1 uses the hash an skb arrives with (a NIC's receive hash, or
            // across a veth the sending socket's random one) before its ports, 2 and 3 may
            // hash inner headers.
            let routes = [self.routes.v4.multipath, self.routes.v6.multipath][i];
            let policy = self.sysctls.unevented.multipath_hash_policy[i];
            match (&self.hash_policy_unwatched, routes, policy) {
                (_, 0, _) => {}
                (Some(w), _, 0) => why[i].push(format!(
                    "{routes} multipath routes, and {w} to see fib_multipath_hash_policy change"
                )),
                (None, _, 0) => {}
                _ => why[i].push(format!(
                    "{routes} multipath routes hashed by fib_multipath_hash_policy {policy} (only 0 is hashed as the kernel does)"
                )),
            }
        }
        why
    }

    /// What a routed port's status says besides the families handed over: what goes
    /// to the kernel packet by packet, and why the route caches are off.
    fn router_notes(&self, rp_filter_v4: bool) -> Vec<String> {
        let mut notes = Vec::new();
        if rp_filter_v4 {
            notes.push(
                "router4: rp_filter on: a source not routed back out this port goes to the kernel"
                    .into(),
            );
        }
        if self.routes.custom_local_v4 {
            notes.push(
                "router4: a local route of a user's was added (since then the kernel checks every source in full): a source not unicast-routed goes to the kernel"
                    .into(),
            );
        }
        if self.sysctls.proxy_ndp {
            notes.push(
                "router6: NDP messages -> kernel: proxy_ndp on (ip6_forward delivers those to a proxied address)"
                    .into(),
            );
        }
        if self.routes.v4.min_mtu > 0 {
            notes.push(format!(
                "router4: packets over {} bytes -> kernel: {} routes with an MTU of their own (the kernel's forwarding honours it, the FIB helper does not)",
                self.routes.v4.min_mtu, self.routes.v4.mtu_routes
            ));
        }
        if self.no_route_cache {
            notes.push("route cache off: --no-route-cache".into());
            return notes;
        }
        if self.routes.v4.uncacheable > 0 {
            notes.push(format!(
                "route cache off: {} IPv4 multipath or nexthop-group routes",
                self.routes.v4.uncacheable
            ));
        }
        if self.routes.v6.uncacheable > 0 {
            notes.push(format!(
                "route cache off: {} IPv6 multipath, nexthop-group or source-specific routes",
                self.routes.v6.uncacheable
            ));
        }
        for (family, rules) in [(4, self.custom_rules_v4), (6, self.custom_rules_v6)] {
            if rules > 0 {
                notes.push(format!(
                    "route cache off: {rules} IPv{family} policy rules (the answer may depend on the source or ports)"
                ));
            }
        }
        notes
    }

    pub fn plan(&self) -> Plan {
        let mut plan = Plan::default();
        // Routed ports: what the router may redirect to, and the hook it runs at. At XDP only
        // while every one of them takes XDP-redirected frames; otherwise at TC ingress, whose
        // redirect (an skb) every device takes. One hook for all, since any routed port may
        // be the egress of any other.
        let routed: Vec<&Link> = self
            .links
            .values()
            .filter(|l| l.master.is_none() && l.up && self.eligible(l).is_ok())
            .collect();
        let routed_tx: Vec<u32> = routed.iter().map(|l| l.index).collect();
        let router_tc = routed.iter().find_map(|l| match self.xdp_egress(l) {
            Err(why) => Some(format!("egress {} {why}", l.name)),
            Ok(()) => self
                .xdp_ingress(l)
                .err()
                .map(|why| format!("{} {why}", l.name)),
        });
        for l in self.links.values() {
            if self.eligible(l).is_err() {
                continue;
            }
            if let Some(bridge) = l.master {
                self.plan_bridge_port(l, bridge, &mut plan);
                continue;
            }
            // A down link keeps its program: it receives nothing while down, and an XDP
            // attachment survives admin down/up, so going down and coming back are a tx-port
            // map update (microseconds) instead of a detach and a verifier load (milliseconds).
            // It only stops being a redirect target; traffic routed to it goes to the kernel.
            let mut notes = Vec::new();
            if !l.up {
                notes.push("link down: not a redirect target".to_string());
            }
            let mut f = Features {
                mac: l.mac.unwrap_or_default(),
                ifindex: l.index,
                tc: router_tc.is_some(),
                vlan_meta: router_tc.is_none() && l.strips_vlan && !self.unbound_xdp,
                ..Features::default()
            };
            if let Some(why) = &router_tc {
                notes.push(format!("router at TC: {why}"));
            }

            // Compiled in: the routers always (switched at run time), the filter when a
            // chain is compiled. Switched off at run time: whatever the kernel must decide.
            f.router_v4 = true;
            f.router_v6 = true;
            for (family, on, drop) in [
                (&self.filter.v4, &mut f.filter_v4, &mut f.policy_drop_v4),
                (&self.filter.v6, &mut f.filter_v6, &mut f.policy_drop_v6),
            ] {
                if let FamilyFilter::Compiled { policy_drop, .. } = family {
                    (*on, *drop) = (true, *policy_drop);
                }
            }
            if f.filter_v4 || f.filter_v6 {
                f.filter_fields = self.filter.fields();
            }
            let to_kernel = self.families_to_kernel(l);
            for (family, whys) in [(4, &to_kernel[0]), (6, &to_kernel[1])] {
                for why in whys {
                    notes.push(format!("router{family} -> kernel: {why}"));
                }
            }
            let (off_v4, off_v6) = (!to_kernel[0].is_empty(), !to_kernel[1].is_empty());
            // Debian's and systemd's default (net.ipv4.conf.default.rp_filter = 2), which
            // every new namespace inherits: handing IPv4 to the kernel for it would leave most
            // users' routers without a fast path.
            let rp_filter_v4 = self.sysctls.rp_filter.get(&l.name).copied().unwrap_or(0) != 0;
            notes.extend(self.router_notes(rp_filter_v4));
            let reassembly = Reassembly {
                v4: self.filter.reassembly_v4.is_some(),
                v6: self.filter.reassembly_v6.is_some(),
            };
            let route_cache = RouteCache {
                v4: self.routes.v4.uncacheable == 0
                    && self.custom_rules_v4 == 0
                    && !self.no_route_cache,
                v6: self.routes.v6.uncacheable == 0
                    && self.custom_rules_v6 == 0
                    && !self.no_route_cache,
            };
            plan.ports.insert(
                l.index,
                PortPlan {
                    ifindex: l.index,
                    name: l.name.clone(),
                    features: f,
                    off_v4,
                    off_v6,
                    route_cache,
                    rp_filter_v4,
                    policy_rules: PolicyRules {
                        v4: self.custom_rules_v4 > 0,
                        v6: self.custom_rules_v6 > 0,
                        v4_ports: self.port_rules_v4 > 0,
                    },
                    reassembly,
                    multipath: Multipath {
                        v4: self.routes.v4.multipath > 0,
                        v6: self.routes.v6.multipath > 0,
                    },
                    route_mtu_v4: self.routes.v4.min_mtu,
                    proxy_ndp: self.sysctls.proxy_ndp,
                    source_check_v4: self.routes.custom_local_v4,
                    keep_priority: self.sysctls.unevented.ip_forward_update_priority == Some(0),
                    tx_ports: routed_tx.clone(),
                    local_v4: self.local_v4.iter().copied().collect(),
                    notes,
                },
            );
        }
        plan
    }
}

/// How often a frame goes to the kernel to refresh the FDB entries it touches: a tenth of
/// the ageing time, at most a second (so an entry whose station falls silent ages out at
/// most that much before it would under Linux alone); 0 where the bridge learns nothing.
pub fn fdb_refresh_ns(ageing_cs: u32) -> u64 {
    // A centisecond is 10 ms; a tenth of it, 1 ms.
    (u64::from(ageing_cs) * 1_000_000).min(1_000_000_000)
}

pub fn stp_state_name(state: u8) -> &'static str {
    match state {
        0 => "disabled",
        1 => "listening",
        2 => "learning",
        3 => "forwarding",
        4 => "blocking",
        _ => "unknown",
    }
}
