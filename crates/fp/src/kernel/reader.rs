//! Reads of kernel state that come as a whole (netlink dumps, sysctl files) into the model:
//! at start, after lost events, and where an event only says "something changed here".

use std::collections::BTreeMap;

use crate::error::Result;
use crate::kernel::genl::{self, NetdevFamily, NETLINK_GENERIC};
use crate::kernel::netlink::{self, Socket, NETLINK_ROUTE};
use crate::kernel::{tc, xfrm};
use crate::model::{Event, Link, Model, Sysctls, Unevented};
use wirespeed_sys::ethtool::FeatureNames;

/// The dump sockets.
pub struct KernelReader {
    dump: Socket,
    /// The netdev generic-netlink family and a socket to dump it (None: the kernel has no
    /// such family, so no device's XDP features are known).
    netdev: Option<(Socket, NetdevFamily)>,
    /// NETLINK_XFRM (None: a kernel without xfrm_user, where no policy can exist).
    xfrm: Option<Socket>,
    /// The kernel's offload feature names (`ethtool -k`), read once.
    feature_names: Option<FeatureNames>,
}

/// br_netfilter's switches beyond what the model keeps (`br_nf_v4`, `br_nf_v6`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrNetfilter {
    /// br_netfilter makes iptables (or arptables) see bridged frames.
    pub on: bool,
    /// ... tagged ones too.
    pub tagged: bool,
}

fn read_sysctl(path: &str) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl KernelReader {
    pub fn open() -> Result<KernelReader> {
        Ok(KernelReader {
            dump: Socket::open(NETLINK_ROUTE)?,
            netdev: Self::open_netdev(),
            xfrm: Socket::open(xfrm::NETLINK_XFRM).ok(),
            feature_names: None,
        })
    }

    fn open_netdev() -> Option<(Socket, NetdevFamily)> {
        let mut s = Socket::open(NETLINK_GENERIC).ok()?;
        let family = genl::netdev_family(&mut s).ok()?;
        Some((s, family))
    }

    /// The netdev family, when the kernel reports devices' XDP features.
    pub fn netdev_family(&self) -> Option<NetdevFamily> {
        self.netdev.as_ref().map(|(_, f)| *f)
    }

    /// Reads every device's XDP features: which ports take XDP-redirected frames.
    pub fn xdp_features(&mut self, model: &mut Model) -> Result<()> {
        let Some((s, family)) = &mut self.netdev else {
            model.replace_xdp_features(None);
            return Ok(());
        };
        let mut known = BTreeMap::new();
        for ev in genl::dump_xdp_features(s, family)? {
            if let Event::XdpFeatures {
                ifindex,
                features: Some(f),
            } = ev
            {
                known.insert(ifindex, f);
            }
        }
        model.replace_xdp_features(Some(known));
        Ok(())
    }

    pub fn links(&mut self, model: &mut Model) -> Result<()> {
        let mut links = netlink::dump_links(&mut self.dump)?;
        for l in &mut links {
            self.offloads(l);
        }
        model.replace_links(links);
        Ok(())
    }

    /// Reads the receive offloads of link `l` that change what the fast path may see
    /// (`Link::lro`, `Link::strips_vlan`); a link event carries none of them. Unread (the
    /// device already gone, a kernel without the calls), a tag may be hidden and LRO is off.
    pub fn offloads(&mut self, l: &mut Link) {
        if l.loopback || l.mac.is_none() {
            return;
        }
        if self.feature_names.is_none() {
            self.feature_names = FeatureNames::read(&l.name).ok();
        }
        let on = self
            .feature_names
            .as_ref()
            .and_then(|names| names.active(&l.name).ok());
        let has = |f: &str| on.as_ref().is_some_and(|on| on.contains(f));
        l.lro = has("rx-lro");
        l.strips_vlan = l.kind == "veth"
            || on.is_none()
            || has("rx-vlan-hw-parse")
            || has("rx-vlan-stag-hw-parse");
    }

    /// Bridge ports (state, VLANs) and the FDB.
    pub fn bridge(&mut self, model: &mut Model) -> Result<()> {
        let ports = netlink::dump_bridge_ports(&mut self.dump)?;
        let mut ports: BTreeMap<u32, _> = ports.into_iter().map(|p| (p.index, p)).collect();
        for (ifindex, vid, state) in netlink::dump_vlan_states(&mut self.dump) {
            if let Some(p) = ports.get_mut(&ifindex) {
                p.vlan_states.insert(vid, state);
            }
        }
        let fdb = netlink::dump_fdb(&mut self.dump)?;
        model.replace_bridge(ports, fdb);
        Ok(())
    }

    /// Recounts the routes the route caches cannot stand for and the multipath ones, both
    /// families.
    pub fn routes(&mut self, model: &mut Model) -> Result<()> {
        // Should the dump fail (a kernel without nexthop objects refuses it), every nexthop
        // object counts as a possible group.
        let groups = netlink::dump_nexthop_groups(&mut self.dump).ok();
        let v4 = netlink::count_routes(&mut self.dump, 2, groups.as_ref())?;
        let v6 = netlink::count_routes(&mut self.dump, 10, groups.as_ref())?;
        model.replace_route_counts(groups, v4, v6);
        Ok(())
    }

    pub fn addrs_v4(&mut self, model: &mut Model) -> Result<()> {
        model.replace_local_v4(netlink::dump_addrs_v4(&mut self.dump)?);
        Ok(())
    }

    /// Every port's qdiscs and tc classifiers.
    pub fn tc(&mut self, model: &mut Model) -> Result<()> {
        model.replace_tc(tc::read(&mut self.dump)?);
        Ok(())
    }

    /// The IPv4 and IPv6 neighbours that are STALE.
    pub fn stale_neighbours(
        &mut self,
    ) -> Result<std::collections::BTreeSet<crate::kernel::neigh::NeighKey>> {
        netlink::dump_stale_neighbours(&mut self.dump)
    }

    /// The IPsec policies and default policies.
    pub fn xfrm(&mut self, model: &mut Model) -> Result<()> {
        if let Some(s) = &mut self.xfrm {
            model.replace_xfrm(xfrm::read(s)?);
        }
        Ok(())
    }

    pub fn rules(&mut self, model: &mut Model, family: u8) -> Result<()> {
        let rules = netlink::dump_rules(&mut self.dump, family)?;
        model.replace_rules(family, &rules);
        Ok(())
    }
}

/// The sysctls that change without an event, read now.
pub fn read_unevented() -> Unevented {
    let br = |n: &str| read_sysctl(&format!("/proc/sys/net/bridge/bridge-nf-{n}"));
    Unevented {
        multipath_hash_policy: ["ipv4", "ipv6"].map(|f| {
            read_sysctl(&format!("/proc/sys/net/{f}/fib_multipath_hash_policy")).unwrap_or(0)
        }),
        ip_forward_update_priority: read_sysctl("/proc/sys/net/ipv4/ip_forward_update_priority"),
        ip_forward_use_pmtu: read_sysctl("/proc/sys/net/ipv4/ip_forward_use_pmtu"),
        bridge_nf: [
            br("call-iptables"),
            br("call-ip6tables"),
            br("call-arptables"),
            br("filter-vlan-tagged"),
            br("filter-pppoe-tagged"),
        ],
    }
}

/// Forwarding, rp_filter and br_netfilter switches, into the model.
pub fn read_sysctls(model: &mut Model) -> BrNetfilter {
    let mut s = Sysctls::default();
    let all_rp = read_sysctl("/proc/sys/net/ipv4/conf/all/rp_filter").unwrap_or(0);
    for l in model.links().values() {
        let base = format!("/proc/sys/net/ipv4/conf/{}", l.name);
        s.v4_forwarding.insert(
            l.name.clone(),
            read_sysctl(&format!("{base}/forwarding")) == Some(1),
        );
        let rp = read_sysctl(&format!("{base}/rp_filter"))
            .unwrap_or(0)
            .max(all_rp);
        s.rp_filter.insert(l.name.clone(), rp);
        let v6 = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", l.name);
        if read_sysctl(&v6) == Some(1) {
            s.v6_disabled.insert(l.name.clone());
        }
    }
    s.v6_forwarding = read_sysctl("/proc/sys/net/ipv6/conf/all/forwarding") == Some(1);
    s.proxy_ndp = read_sysctl("/proc/sys/net/ipv6/conf/all/proxy_ndp").unwrap_or(0) != 0;
    let u = read_unevented();
    s.unevented = u;
    model.replace_sysctls(s);
    let brnf = |i: usize| u.bridge_nf[i] == Some(1);
    BrNetfilter {
        on: brnf(0) || brnf(1) || brnf(2),
        // Tagged frames through the IP hooks: more than the header checks we mirror.
        tagged: brnf(3) || brnf(4),
    }
}
