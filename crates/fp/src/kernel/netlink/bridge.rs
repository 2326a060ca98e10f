//! The bridge as rtnetlink reports it (AF_BRIDGE messages): a port's STP state, VLANs and
//! flags, its VLANs' own STP states (RTM_NEWVLAN), and FDB entries. Parsing is pure, as in
//! the parent module; the dumps go through its `Socket`.

use super::*;

pub(super) const IFLA_BRPORT_STATE: u16 = 1;
pub(super) const IFLA_BRPORT_PROXYARP: u16 = 10;
pub(super) const IFLA_BRPORT_PROXYARP_WIFI: u16 = 12;
pub(super) const IFLA_BRPORT_NEIGH_SUPPRESS: u16 = 32;
pub(super) const IFLA_BRPORT_VLAN_TUNNEL: u16 = 29;
pub(super) const IFLA_BRPORT_BACKUP_PORT: u16 = 34;
pub(super) const IFLA_BRPORT_ISOLATED: u16 = 33;
pub(super) const IFLA_BRPORT_LOCKED: u16 = 39;
pub(super) const IFLA_BRPORT_MAB: u16 = 40;
pub(super) const IFLA_BRPORT_NEIGH_VLAN_SUPPRESS: u16 = 43;
const RTM_GETVLAN: u16 = 114;
pub(super) const BRIDGE_VLANDB_ENTRY: u16 = 1;
pub(super) const BRIDGE_VLANDB_ENTRY_INFO: u16 = 1;
pub(super) const BRIDGE_VLANDB_ENTRY_RANGE: u16 = 2;
pub(super) const BRIDGE_VLANDB_ENTRY_STATE: u16 = 3;
pub(super) const IFLA_BRIDGE_VLAN_INFO: u16 = 2;
pub(super) const BRIDGE_VLAN_INFO_RANGE_BEGIN: u16 = 1 << 3;
pub(super) const BRIDGE_VLAN_INFO_RANGE_END: u16 = 1 << 4;
const RTEXT_FILTER_BRVLAN: u32 = 1 << 1;
pub(super) const NDA_LLADDR: u16 = 2;
pub(super) const NDA_VLAN: u16 = 5;
pub(super) const NDA_MASTER: u16 = 9;
pub(super) const NUD_PERMANENT: u16 = 0x80;

/// An AF_BRIDGE RTM_NEWLINK payload (a port as its bridge sees it) -> BridgePort. None for
/// anything that is not a bridge port (the bridge device itself, other families).
pub fn parse_bridge_port(payload: &[u8]) -> Option<BridgePort> {
    if payload.len() < 16 || payload[0] != AF_BRIDGE {
        return None;
    }
    let index = u32::try_from(i32::from_ne_bytes(payload[4..8].try_into().ok()?)).ok()?;
    let mut port = BridgePort {
        index,
        ..BridgePort::default()
    };
    let mut range_start = None;
    for (ty, v) in attrs(&payload[16..]) {
        match ty {
            IFLA_MASTER => port.bridge = u32_of(v).unwrap_or(0),
            IFLA_MTU => port.mtu = u32_of(v).unwrap_or(0),
            IFLA_PROTINFO => {
                for (pty, pv) in attrs(v) {
                    let on = pv.first().is_some_and(|x| *x != 0);
                    match pty {
                        IFLA_BRPORT_STATE => port.state = pv.first().copied().unwrap_or(0),
                        IFLA_BRPORT_ISOLATED if on => port.unsupported.push("isolated"),
                        IFLA_BRPORT_VLAN_TUNNEL if on => port.unsupported.push("vlan tunnel"),
                        IFLA_BRPORT_LOCKED if on => port.unsupported.push("locked"),
                        IFLA_BRPORT_MAB if on => port.unsupported.push("MAC authentication"),
                        IFLA_BRPORT_BACKUP_PORT => port.unsupported.push("backup port"),
                        // The bridge may answer unicast ARP / neighbour solicitations itself.
                        IFLA_BRPORT_PROXYARP | IFLA_BRPORT_PROXYARP_WIFI if on => {
                            port.unsupported.push("proxy ARP")
                        }
                        IFLA_BRPORT_NEIGH_SUPPRESS if on => port.unsupported.push("neigh_suppress"),
                        IFLA_BRPORT_NEIGH_VLAN_SUPPRESS if on => {
                            port.unsupported.push("per-VLAN neigh_suppress")
                        }
                        _ => {}
                    }
                }
            }
            IFLA_AF_SPEC => {
                for (aty, av) in attrs(v) {
                    if aty != IFLA_BRIDGE_VLAN_INFO || av.len() < 4 {
                        continue;
                    }
                    let flags = u16::from_ne_bytes([av[0], av[1]]);
                    let vid = u16::from_ne_bytes([av[2], av[3]]) & 0x0fff;
                    let keep = flags & !(BRIDGE_VLAN_INFO_RANGE_BEGIN | BRIDGE_VLAN_INFO_RANGE_END);
                    if flags & BRIDGE_VLAN_INFO_RANGE_BEGIN != 0 {
                        range_start = Some(vid);
                    } else if flags & BRIDGE_VLAN_INFO_RANGE_END != 0 {
                        for v in range_start.take().unwrap_or(vid)..=vid {
                            port.vlans.insert(v, keep);
                        }
                    } else {
                        port.vlans.insert(vid, keep);
                    }
                }
            }
            _ => {}
        }
    }
    (port.bridge != 0 && port.bridge != index).then_some(port)
}

/// An AF_BRIDGE RTM_NEWNEIGH / RTM_DELNEIGH payload -> the bridge FDB entry. Entries that
/// are not the bridge's own (a device's "self" addresses) are None.
pub fn parse_fdb(payload: &[u8]) -> Option<FdbEntry> {
    if payload.len() < 12 || payload[0] != AF_BRIDGE {
        return None;
    }
    let ifindex = u32::try_from(i32::from_ne_bytes(payload[4..8].try_into().ok()?)).ok()?;
    let state = u16::from_ne_bytes([payload[8], payload[9]]);
    let (mut mac, mut vid, mut master) = (None, 0u16, None);
    for (ty, v) in attrs(&payload[12..]) {
        match ty {
            NDA_LLADDR if v.len() == 6 => mac = v.try_into().ok(),
            NDA_VLAN if v.len() >= 2 => vid = u16::from_ne_bytes([v[0], v[1]]) & 0x0fff,
            NDA_MASTER => master = u32_of(v),
            _ => {}
        }
    }
    let bridge = master.filter(|m| *m != 0)?;
    let local = state & NUD_PERMANENT != 0 || ifindex == bridge;
    Some(FdbEntry {
        key: FdbKey {
            bridge,
            vid,
            mac: mac?,
        },
        port: if local { 0 } else { ifindex },
    })
}

/// Dumps every bridge port's STP state and VLANs.
pub fn dump_bridge_ports(s: &mut Socket) -> Result<Vec<BridgePort>> {
    let mut req = vec![0u8; 16]; // ifinfomsg
    req[0] = AF_BRIDGE;
    req.extend_from_slice(&8u16.to_ne_bytes());
    req.extend_from_slice(&IFLA_EXT_MASK.to_ne_bytes());
    req.extend_from_slice(&RTEXT_FILTER_BRVLAN.to_ne_bytes());
    Ok(s.dump(RTM_GETLINK, &req)?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWLINK)
        .filter_map(|(_, p)| parse_bridge_port(p))
        .collect())
}

/// The VLANs of one RTM_NEWVLAN message (br_vlan_msg: family, pad, ifindex; then
/// BRIDGE_VLANDB_ENTRY attributes) that are not in the forwarding state: (ifindex, vid, state).
pub fn parse_vlan_states(payload: &[u8]) -> Vec<(u32, u16, u8)> {
    let mut out = Vec::new();
    let Some(ifindex) = payload.get(4..8).and_then(u32_of) else {
        return out;
    };
    for (ty, entry) in attrs(payload.get(8..).unwrap_or_default()) {
        if ty != BRIDGE_VLANDB_ENTRY {
            continue;
        }
        let (mut first, mut last, mut state) = (None, None, None);
        for (ety, v) in attrs(entry) {
            match ety {
                BRIDGE_VLANDB_ENTRY_INFO if v.len() >= 4 => {
                    first = Some(u16::from_ne_bytes([v[2], v[3]]) & 0x0fff)
                }
                BRIDGE_VLANDB_ENTRY_RANGE if v.len() >= 2 => {
                    last = Some(u16::from_ne_bytes([v[0], v[1]]) & 0x0fff)
                }
                BRIDGE_VLANDB_ENTRY_STATE => state = v.first().copied(),
                _ => {}
            }
        }
        if let (Some(first), Some(state)) = (first, state) {
            if state != crate::model::BR_STATE_FORWARDING {
                for vid in first..=last.unwrap_or(first).max(first) {
                    out.push((ifindex, vid, state));
                }
            }
        }
    }
    out
}

/// The per-VLAN STP states of every bridge port that are not forwarding (RTM_GETVLAN,
/// Linux 5.10+; a kernel without VLAN filtering has no such dump, and no per-VLAN state).
pub fn dump_vlan_states(s: &mut Socket) -> Vec<(u32, u16, u8)> {
    let req = [AF_BRIDGE, 0, 0, 0, 0, 0, 0, 0]; // br_vlan_msg, every device
    s.dump(RTM_GETVLAN, &req)
        .map(|msgs| {
            msgs.iter()
                .filter(|(t, _)| *t == RTM_NEWVLAN)
                .flat_map(|(_, p)| parse_vlan_states(p))
                .collect()
        })
        .unwrap_or_default()
}

/// Dumps every bridge's FDB.
pub fn dump_fdb(s: &mut Socket) -> Result<Vec<FdbEntry>> {
    let mut req = vec![0u8; 12]; // ndmsg
    req[0] = AF_BRIDGE;
    Ok(s.dump(RTM_GETNEIGH, &req)?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWNEIGH)
        .filter_map(|(_, p)| parse_fdb(p))
        .collect())
}
