//! Generic netlink: the "netdev" family (Linux >= 6.3) reports each device's XDP features, among
//! them whether the driver accepts frames redirected from XDP (NETDEV_XDP_ACT_NDO_XMIT). A veth
//! sets that bit only while its peer runs NAPI (an XDP program or GRO on the peer), so this is
//! the kernel's own answer to "will an XDP redirect into this device be delivered?".

use crate::error::{Error, Result};
use crate::features::XDP_RX_VLAN_TAG;
use crate::model::Event;
use crate::netlink::{attrs, cstr, u32_of, Socket};

pub const NETLINK_GENERIC: i32 = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_MCAST_GROUPS: u16 = 7;
const CTRL_ATTR_MCAST_GRP_NAME: u16 = 1;
const CTRL_ATTR_MCAST_GRP_ID: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_CMD_DEV_ADD_NTF: u8 = 2;
const NETDEV_CMD_DEV_DEL_NTF: u8 = 3;
const NETDEV_CMD_DEV_CHANGE_NTF: u8 = 4;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NETDEV_A_DEV_XDP_RX_METADATA_FEATURES: u16 = 5;
const NETDEV_XDP_RX_METADATA_VLAN_TAG: u64 = 1 << 2;

/// The netdev generic-netlink family as this kernel numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetdevFamily {
    pub id: u16,
    /// The "mgmt" multicast group: device added, removed, XDP features changed.
    pub mgmt_group: u32,
}

/// Finds the netdev family among a CTRL_CMD_GETFAMILY dump's replies (payloads after the
/// netlink header: genlmsghdr, then attributes).
pub fn parse_netdev_family(replies: &[(u16, Vec<u8>)]) -> Option<NetdevFamily> {
    for (_, p) in replies {
        let a = attrs(p.get(4..)?);
        let name = a.iter().find(|(t, _)| *t == CTRL_ATTR_FAMILY_NAME);
        if name.map(|(_, v)| cstr(v)).as_deref() != Some("netdev") {
            continue;
        }
        let id = a
            .iter()
            .find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID)
            .and_then(|(_, v)| Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?)))?;
        let groups = a.iter().find(|(t, _)| *t == CTRL_ATTR_MCAST_GROUPS)?.1;
        let mgmt_group = attrs(groups).iter().find_map(|(_, g)| {
            let ga = attrs(g);
            let name = ga.iter().find(|(t, _)| *t == CTRL_ATTR_MCAST_GRP_NAME)?;
            if cstr(name.1) != "mgmt" {
                return None;
            }
            u32_of(ga.iter().find(|(t, _)| *t == CTRL_ATTR_MCAST_GRP_ID)?.1)
        })?;
        return Some(NetdevFamily { id, mgmt_group });
    }
    None
}

/// A netdev family message (dump reply or notification) -> an XDP-features event. `None` for
/// other commands or a message without an ifindex.
pub fn parse_netdev_msg(family: u16, msg_ty: u16, payload: &[u8]) -> Option<Event> {
    if msg_ty != family {
        return None;
    }
    let cmd = *payload.first()?;
    let a = attrs(payload.get(4..)?);
    let ifindex = u32_of(a.iter().find(|(t, _)| *t == NETDEV_A_DEV_IFINDEX)?.1)?;
    let u64_attr = |ty| {
        a.iter()
            .find(|(t, _)| *t == ty)
            .and_then(|(_, v)| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
            .unwrap_or(0)
    };
    let mut features = u64_attr(NETDEV_A_DEV_XDP_FEATURES);
    if u64_attr(NETDEV_A_DEV_XDP_RX_METADATA_FEATURES) & NETDEV_XDP_RX_METADATA_VLAN_TAG != 0 {
        features |= XDP_RX_VLAN_TAG;
    }
    match cmd {
        NETDEV_CMD_DEV_GET | NETDEV_CMD_DEV_ADD_NTF | NETDEV_CMD_DEV_CHANGE_NTF => {
            Some(Event::XdpFeatures {
                ifindex,
                features: Some(features),
            })
        }
        NETDEV_CMD_DEV_DEL_NTF => Some(Event::XdpFeatures {
            ifindex,
            features: None,
        }),
        _ => None,
    }
}

/// Resolves the netdev family. Err when the kernel has none (before Linux 6.3): then no
/// device's XDP features are known.
pub fn netdev_family(s: &mut Socket) -> Result<NetdevFamily> {
    // genlmsghdr { cmd, version, reserved }, then CTRL_ATTR_FAMILY_NAME would filter; a dump
    // of all families is as cheap and needs no attribute.
    let replies = s.dump(GENL_ID_CTRL, &[CTRL_CMD_GETFAMILY, 1, 0, 0])?;
    parse_netdev_family(&replies).ok_or_else(|| {
        Error::Netlink(
            "no netdev generic-netlink family (Linux < 6.3): XDP features unknown".into(),
        )
    })
}

/// Dumps every device's XDP features in this namespace.
pub fn dump_xdp_features(s: &mut Socket, family: &NetdevFamily) -> Result<Vec<Event>> {
    Ok(s.dump(family.id, &[NETDEV_CMD_DEV_GET, 1, 0, 0])?
        .iter()
        .filter_map(|(t, p)| parse_netdev_msg(family.id, *t, p))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::NETDEV_XDP_ACT_NDO_XMIT;
    use crate::netlink::attr;

    fn genl(cmd: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![cmd, 1, 0, 0];
        for a in attrs {
            p.extend_from_slice(a);
        }
        p
    }

    #[test]
    fn the_netdev_family_and_its_mgmt_group_are_found_among_others() {
        let group = |name: &str, id: u32| {
            attr(
                1,
                &[
                    attr(CTRL_ATTR_MCAST_GRP_NAME, format!("{name}\0").as_bytes()),
                    attr(CTRL_ATTR_MCAST_GRP_ID, &id.to_ne_bytes()),
                ]
                .concat(),
            )
        };
        let family = |name: &str, id: u16, groups: Vec<u8>| {
            genl(
                1,
                &[
                    attr(CTRL_ATTR_FAMILY_ID, &id.to_ne_bytes()),
                    attr(CTRL_ATTR_FAMILY_NAME, format!("{name}\0").as_bytes()),
                    attr(CTRL_ATTR_MCAST_GROUPS, &groups),
                ],
            )
        };
        let replies = vec![
            (GENL_ID_CTRL, family("ethtool", 20, group("monitor", 5))),
            (
                GENL_ID_CTRL,
                family(
                    "netdev",
                    27,
                    [group("page-pool", 9), group("mgmt", 8)].concat(),
                ),
            ),
        ];
        assert_eq!(
            parse_netdev_family(&replies),
            Some(NetdevFamily {
                id: 27,
                mgmt_group: 8
            })
        );
        assert_eq!(parse_netdev_family(&replies[..1]), None);
        // Truncated or garbage replies are skipped, never a panic.
        assert_eq!(parse_netdev_family(&[(GENL_ID_CTRL, vec![1, 2])]), None);
    }

    #[test]
    fn xdp_features_come_from_dumps_and_notifications() {
        let dev = |cmd: u8, ifindex: u32, features: u64| {
            genl(
                cmd,
                &[
                    attr(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes()),
                    attr(NETDEV_A_DEV_XDP_FEATURES, &features.to_ne_bytes()),
                ],
            )
        };
        let xmit = NETDEV_XDP_ACT_NDO_XMIT | 0x3;
        for cmd in [
            NETDEV_CMD_DEV_GET,
            NETDEV_CMD_DEV_ADD_NTF,
            NETDEV_CMD_DEV_CHANGE_NTF,
        ] {
            assert_eq!(
                parse_netdev_msg(27, 27, &dev(cmd, 4, xmit)),
                Some(Event::XdpFeatures {
                    ifindex: 4,
                    features: Some(xmit)
                })
            );
        }
        assert_eq!(
            parse_netdev_msg(27, 27, &dev(NETDEV_CMD_DEV_DEL_NTF, 4, 0)),
            Some(Event::XdpFeatures {
                ifindex: 4,
                features: None
            })
        );
        // Another family's message, an unknown command, no ifindex: nothing.
        assert_eq!(
            parse_netdev_msg(27, 28, &dev(NETDEV_CMD_DEV_GET, 4, xmit)),
            None
        );
        assert_eq!(parse_netdev_msg(27, 27, &dev(9, 4, xmit)), None);
        // A driver that hands XDP the VLAN tags it strips.
        let mut msg = dev(NETDEV_CMD_DEV_GET, 4, xmit);
        msg.extend_from_slice(&attr(
            NETDEV_A_DEV_XDP_RX_METADATA_FEATURES,
            &(NETDEV_XDP_RX_METADATA_VLAN_TAG | 1).to_ne_bytes(),
        ));
        assert_eq!(
            parse_netdev_msg(27, 27, &msg),
            Some(Event::XdpFeatures {
                ifindex: 4,
                features: Some(xmit | XDP_RX_VLAN_TAG)
            })
        );
        assert_eq!(
            parse_netdev_msg(27, 27, &genl(NETDEV_CMD_DEV_GET, &[])),
            None
        );
        assert_eq!(parse_netdev_msg(27, 27, &[]), None);
    }
}
