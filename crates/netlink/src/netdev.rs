//! The "netdev" generic-netlink family (Linux 6.3+): each device's XDP features, among them
//! whether the driver accepts frames redirected from XDP ([`XDP_ACT_NDO_XMIT`]; a veth sets
//! it only while its peer runs NAPI), and (Linux 6.8+) which NAPI instance polls a queue.

use crate::genl::{self, GENL_HDRLEN};
use crate::{attr, attrs, find, u32_of, u64_of, Error, Result, Socket, NETLINK_GENERIC};

/// enum netdev_xdp_act: the driver implements ndo_xdp_xmit (takes XDP-redirected frames).
pub const XDP_ACT_NDO_XMIT: u64 = 1 << 2;
/// enum netdev_xdp_rx_metadata: the driver hands XDP a VLAN tag it took off.
pub const XDP_RX_METADATA_VLAN_TAG: u64 = 1 << 2;

const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_CMD_DEV_ADD_NTF: u8 = 2;
const NETDEV_CMD_DEV_DEL_NTF: u8 = 3;
const NETDEV_CMD_DEV_CHANGE_NTF: u8 = 4;
const NETDEV_CMD_QUEUE_GET: u8 = 10;
const NETDEV_CMD_NAPI_GET: u8 = 11;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NETDEV_A_DEV_XDP_RX_METADATA_FEATURES: u16 = 5;
const NETDEV_A_QUEUE_ID: u16 = 1;
const NETDEV_A_QUEUE_IFINDEX: u16 = 2;
const NETDEV_A_QUEUE_TYPE: u16 = 3;
const NETDEV_A_QUEUE_NAPI_ID: u16 = 4;
const NETDEV_QUEUE_TYPE_RX: u32 = 0;
const NETDEV_A_NAPI_IFINDEX: u16 = 1;
const NETDEV_A_NAPI_ID: u16 = 2;

/// The netdev family as this kernel numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetdevFamily {
    pub id: u16,
    /// The "mgmt" multicast group: device added, removed, XDP features changed.
    pub mgmt_group: u32,
}

/// Resolves the netdev family. Err when the kernel has none (before Linux 6.3): then no
/// device's XDP features are known.
pub fn family(s: &mut Socket) -> Result<NetdevFamily> {
    genl::family(s, "netdev")
        .ok()
        .and_then(|f| {
            Some(NetdevFamily {
                id: f.id,
                mgmt_group: f.group("mgmt")?,
            })
        })
        .ok_or_else(|| {
            Error::Netlink(
                "no netdev generic-netlink family (Linux < 6.3): XDP features unknown".into(),
            )
        })
}

/// What a device can do for XDP (NETDEV_A_DEV_XDP_FEATURES and ..._XDP_RX_METADATA_FEATURES).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpFeatures {
    /// enum netdev_xdp_act bits.
    pub act: u64,
    /// enum netdev_xdp_rx_metadata bits.
    pub rx_metadata: u64,
}

/// One device from a dump or a notification; `features` is None when it was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dev {
    pub ifindex: u32,
    pub features: Option<XdpFeatures>,
}

/// A netdev family message (dump reply or notification) -> the device it describes. `None`
/// for another family's message, other commands or a message without an ifindex.
pub fn parse_dev(family: u16, msg_ty: u16, payload: &[u8]) -> Option<Dev> {
    if msg_ty != family {
        return None;
    }
    let cmd = *payload.first()?;
    let a = attrs(payload.get(GENL_HDRLEN..)?);
    let ifindex = u32_of(find(&a, NETDEV_A_DEV_IFINDEX)?)?;
    let u64_attr = |ty| find(&a, ty).and_then(u64_of).unwrap_or(0);
    let features = XdpFeatures {
        act: u64_attr(NETDEV_A_DEV_XDP_FEATURES),
        rx_metadata: u64_attr(NETDEV_A_DEV_XDP_RX_METADATA_FEATURES),
    };
    match cmd {
        NETDEV_CMD_DEV_GET | NETDEV_CMD_DEV_ADD_NTF | NETDEV_CMD_DEV_CHANGE_NTF => Some(Dev {
            ifindex,
            features: Some(features),
        }),
        NETDEV_CMD_DEV_DEL_NTF => Some(Dev {
            ifindex,
            features: None,
        }),
        _ => None,
    }
}

/// Dumps every device of this namespace.
pub fn dump_devs(s: &mut Socket, family: &NetdevFamily) -> Result<Vec<Dev>> {
    Ok(s.dump(family.id, &genl::request(NETDEV_CMD_DEV_GET, &[]))?
        .iter()
        .filter_map(|(t, p)| parse_dev(family.id, *t, p))
        .collect())
}

/// The NAPI ID of receive queue `queue` of interface `ifindex`; None when the kernel names
/// none. Drivers that link queues to NAPIs (most NIC drivers) answer the queue query; a veth
/// does not, so its NAPIs are taken in ID order, which is queue order: a veth adds one per
/// receive queue, in order, and IDs are handed out in the order NAPIs are enabled.
pub fn rx_queue_napi_id(ifindex: u32, queue: u32) -> Result<Option<u32>> {
    let mut s = Socket::open(NETLINK_GENERIC)?;
    let family = family(&mut s)?;
    let mut dump = |cmd: u8, key: u16| -> Result<Vec<Vec<u8>>> {
        let req = genl::request(cmd, &attr(key, &ifindex.to_ne_bytes()));
        Ok(s.dump(family.id, &req)?
            .into_iter()
            .filter(|(t, _)| *t == family.id)
            .map(|(_, p)| p.get(GENL_HDRLEN..).unwrap_or_default().to_vec())
            .collect())
    };
    let rx_queues = dump(NETDEV_CMD_QUEUE_GET, NETDEV_A_QUEUE_IFINDEX)?;
    let linked = rx_queues.iter().find_map(|a| {
        let a = attrs(a);
        let is_ours = find(&a, NETDEV_A_QUEUE_TYPE).and_then(u32_of) == Some(NETDEV_QUEUE_TYPE_RX)
            && find(&a, NETDEV_A_QUEUE_ID).and_then(u32_of) == Some(queue);
        is_ours
            .then(|| find(&a, NETDEV_A_QUEUE_NAPI_ID).and_then(u32_of))
            .flatten()
    });
    if linked.is_some() {
        return Ok(linked);
    }
    let napis = dump(NETDEV_CMD_NAPI_GET, NETDEV_A_NAPI_IFINDEX)?;
    Ok(nth_napi_in_id_order(&napis, ifindex, queue))
}

/// From a NAPI dump's messages (attributes after the genl header): the `queue`-th NAPI ID of
/// `ifindex`, counting in ID order.
fn nth_napi_in_id_order(napis: &[Vec<u8>], ifindex: u32, queue: u32) -> Option<u32> {
    let mut ids: Vec<u32> = napis
        .iter()
        .map(|a| attrs(a))
        .filter(|a| find(a, NETDEV_A_NAPI_IFINDEX).and_then(u32_of) == Some(ifindex))
        .filter_map(|a| find(&a, NETDEV_A_NAPI_ID).and_then(u32_of))
        .collect();
    ids.sort_unstable();
    ids.get(queue as usize).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn napi(ifindex: u32, id: u32) -> Vec<u8> {
        [
            attr(NETDEV_A_NAPI_IFINDEX, &ifindex.to_ne_bytes()),
            attr(NETDEV_A_NAPI_ID, &id.to_ne_bytes()),
        ]
        .concat()
    }

    #[test]
    fn a_queue_without_a_link_takes_its_devices_napis_in_id_order() {
        // As a 2-queue veth's dump lists them: newest first, and another device's among them.
        let dump = [napi(3, 8202), napi(4, 9000), napi(3, 8201)];
        assert_eq!(nth_napi_in_id_order(&dump, 3, 0), Some(8201));
        assert_eq!(nth_napi_in_id_order(&dump, 3, 1), Some(8202));
        assert_eq!(nth_napi_in_id_order(&dump, 3, 2), None);
        assert_eq!(nth_napi_in_id_order(&dump, 5, 0), None);
    }

    #[test]
    fn xdp_features_come_from_dumps_and_notifications() {
        let dev = |cmd: u8, ifindex: u32, act: u64| {
            genl::request(
                cmd,
                &[
                    attr(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes()),
                    attr(NETDEV_A_DEV_XDP_FEATURES, &act.to_ne_bytes()),
                ]
                .concat(),
            )
        };
        let xmit = XDP_ACT_NDO_XMIT | 0x3;
        let present = |act, rx_metadata| Dev {
            ifindex: 4,
            features: Some(XdpFeatures { act, rx_metadata }),
        };
        for cmd in [
            NETDEV_CMD_DEV_GET,
            NETDEV_CMD_DEV_ADD_NTF,
            NETDEV_CMD_DEV_CHANGE_NTF,
        ] {
            assert_eq!(
                parse_dev(27, 27, &dev(cmd, 4, xmit)),
                Some(present(xmit, 0))
            );
        }
        assert_eq!(
            parse_dev(27, 27, &dev(NETDEV_CMD_DEV_DEL_NTF, 4, 0)),
            Some(Dev {
                ifindex: 4,
                features: None
            })
        );
        // Another family's message, an unknown command, no ifindex: nothing.
        assert_eq!(parse_dev(27, 28, &dev(NETDEV_CMD_DEV_GET, 4, xmit)), None);
        assert_eq!(parse_dev(27, 27, &dev(9, 4, xmit)), None);
        let mut msg = dev(NETDEV_CMD_DEV_GET, 4, xmit);
        msg.extend_from_slice(&attr(
            NETDEV_A_DEV_XDP_RX_METADATA_FEATURES,
            &(XDP_RX_METADATA_VLAN_TAG | 1).to_ne_bytes(),
        ));
        assert_eq!(
            parse_dev(27, 27, &msg),
            Some(present(xmit, XDP_RX_METADATA_VLAN_TAG | 1))
        );
        assert_eq!(
            parse_dev(27, 27, &genl::request(NETDEV_CMD_DEV_GET, &[])),
            None
        );
        assert_eq!(parse_dev(27, 27, &[]), None);
    }
}
