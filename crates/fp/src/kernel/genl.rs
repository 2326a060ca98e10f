//! The netdev family's device messages as model events: the kernel's own answer to "will an
//! XDP redirect into this device be delivered?" (`wirespeed_netlink::netdev`), with the VLAN
//! tag metadata folded into the one features word ([`XDP_RX_VLAN_TAG`]).

use wirespeed_netlink::netdev::{self, Dev, XDP_RX_METADATA_VLAN_TAG};

use crate::error::Result;
use crate::kernel::netlink::Socket;
use crate::model::features::XDP_RX_VLAN_TAG;
use crate::model::Event;

pub use wirespeed_netlink::netdev::NetdevFamily;
pub use wirespeed_netlink::NETLINK_GENERIC;

/// A device from the netdev family -> an XDP-features event.
pub fn event(dev: Dev) -> Event {
    Event::XdpFeatures {
        ifindex: dev.ifindex,
        features: dev.features.map(|f| {
            let vlan = f.rx_metadata & XDP_RX_METADATA_VLAN_TAG != 0;
            f.act | if vlan { XDP_RX_VLAN_TAG } else { 0 }
        }),
    }
}

/// A netdev family message (dump reply or notification) -> an XDP-features event. `None` for
/// other commands or a message without an ifindex.
pub fn parse_netdev_msg(family: u16, msg_ty: u16, payload: &[u8]) -> Option<Event> {
    netdev::parse_dev(family, msg_ty, payload).map(event)
}

/// Resolves the netdev family. Err when the kernel has none (before Linux 6.3): then no
/// device's XDP features are known.
pub fn netdev_family(s: &mut Socket) -> Result<NetdevFamily> {
    Ok(netdev::family(s)?)
}

/// Dumps every device's XDP features in this namespace.
pub fn dump_xdp_features(s: &mut Socket, family: &NetdevFamily) -> Result<Vec<Event>> {
    Ok(netdev::dump_devs(s, family)?
        .into_iter()
        .map(event)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::features::NETDEV_XDP_ACT_NDO_XMIT;
    use wirespeed_netlink::netdev::XdpFeatures;

    #[test]
    fn a_driver_that_hands_xdp_its_vlan_tags_says_so_in_the_features_word() {
        let dev = |rx_metadata| Dev {
            ifindex: 4,
            features: Some(XdpFeatures {
                act: NETDEV_XDP_ACT_NDO_XMIT | 0x3,
                rx_metadata,
            }),
        };
        let features = |e| match e {
            Event::XdpFeatures { features, .. } => features,
            _ => unreachable!(),
        };
        let xmit = NETDEV_XDP_ACT_NDO_XMIT | 0x3;
        assert_eq!(features(event(dev(0))), Some(xmit));
        assert_eq!(features(event(dev(1))), Some(xmit));
        assert_eq!(
            features(event(dev(XDP_RX_METADATA_VLAN_TAG | 1))),
            Some(xmit | XDP_RX_VLAN_TAG)
        );
        let gone = Dev {
            ifindex: 4,
            features: None,
        };
        assert_eq!(features(event(gone)), None);
    }
}
