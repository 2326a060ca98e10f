//! What the stack needs to know about the interface it drives: index, MAC address, MTU,
//! number of rx queues (one shard per queue), and its link kind (whether frames can arrive
//! with partial checksums). Read with ioctls and one rtnetlink request in the calling
//! thread's network namespace; call once at startup, not per packet.

use crate::{Error, Result};

/// The index of `ifname` in the calling thread's network namespace.
pub fn ifindex(ifname: &str) -> Result<u32> {
    wirespeed_sys::packet::if_index(ifname).map_err(|_| Error::NoSuchInterface(ifname.to_string()))
}

/// Facts about one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceInfo {
    pub name: String,
    pub index: u32,
    pub mac: [u8; 6],
    pub mtu: u32,
    /// Rx queues a socket can bind to (`ethtool -l`: rx plus combined channels; 1 when the
    /// driver does not say).
    pub rx_queues: u32,
    /// The driver (`ethtool -i`), "" for devices without one (lo).
    pub driver: String,
    /// The rtnetlink link kind (`IFLA_INFO_KIND`: "veth", "macvlan", "bridge", ...; what
    /// `ip -d link` prints after the flags), None for a hardware device, whose driver
    /// registers no kind.
    pub kind: Option<String>,
    /// The loopback device (`IFF_LOOPBACK`).
    pub loopback: bool,
}

/// The interface's MTU now (one ioctl on a fresh socket, in the calling thread's network
/// namespace): for following a change made while we run, not per packet.
pub fn mtu(ifname: &str) -> Result<u32> {
    wirespeed_sys::iface::mtu(ifname).map_err(os_error(ifname, "read MTU"))
}

impl InterfaceInfo {
    pub fn query(ifname: &str) -> Result<InterfaceInfo> {
        let index = ifindex(ifname)?;
        let mac =
            wirespeed_sys::iface::mac(ifname).map_err(os_error(ifname, "read MAC address"))?;
        let mtu = mtu(ifname)?;
        let rx_queues = rx_queue_count(ifname)?;
        let driver = driver_name(ifname)?;
        let (kind, loopback) = link_kind(index, ifname)?;
        Ok(InterfaceInfo {
            name: ifname.to_string(),
            index,
            mac,
            mtu,
            rx_queues,
            driver,
            kind,
            loopback,
        })
    }

    /// Whether received TCP/UDP frames can carry partial checksums: a sender on this host left
    /// the checksum to offload (`CHECKSUM_PARTIAL`, the default with tx-checksumming on) and
    /// nothing on the way completed it. See [`partial_checksums_possible`].
    pub fn partial_checksums_possible(&self) -> bool {
        partial_checksums_possible(self.kind.as_deref(), self.loopback)
    }
}

/// Whether a device of link kind `kind` can hand our XDP program frames with the sender's
/// checksum unfinished. A software device (one with a link kind: veth, macvlan, ipvlan,
/// bridge, ...) and loopback only ever carry frames that a host built in memory, and another
/// namespace's sender on this host leaves its checksums partial; such frames never cross a
/// wire. A hardware device (no link kind) receives only what crossed a wire, and a sender's
/// NIC completes the checksum before that. Checked by capture on a default veth and on a
/// macvlan over one (docs/TCPIP.md).
pub fn partial_checksums_possible(kind: Option<&str>, loopback: bool) -> bool {
    kind.is_some() || loopback
}

/// The interface's rtnetlink link kind (`IFLA_LINKINFO` / `IFLA_INFO_KIND`), and whether it is
/// the loopback device: one `RTM_GETLINK` request for `index`.
fn link_kind(index: u32, ifname: &str) -> Result<(Option<String>, bool)> {
    use wirespeed_netlink::{route, Socket, NETLINK_ROUTE};
    let os = |what: &str| {
        let what = format!("{what} (rtnetlink, link kind of `{ifname}`)");
        move |e: wirespeed_netlink::Error| Error::Os {
            what,
            err: e.into_io(),
        }
    };
    let mut sock = Socket::open(NETLINK_ROUTE).map_err(os("socket"))?;
    let link = route::get_link(&mut sock, index)
        .map_err(os("RTM_GETLINK"))?
        .ok_or_else(|| Error::Os {
            what: format!("rtnetlink, link kind of `{ifname}`"),
            err: std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed answer"),
        })?;
    Ok(((!link.kind.is_empty()).then_some(link.kind), link.loopback))
}

fn rx_queue_count(ifname: &str) -> Result<u32> {
    let channels = supported(wirespeed_sys::iface::channels(ifname), ifname, "ethtool -l")?;
    Ok(channels.map_or(1, |(rx, combined)| (rx + combined).max(1)))
}

/// The interface's driver name (`ethtool -i`), or "" for devices without one (lo).
pub fn driver_name(ifname: &str) -> Result<String> {
    let driver = supported(wirespeed_sys::iface::driver(ifname), ifname, "ethtool -i")?;
    Ok(driver.unwrap_or_default())
}

/// An ethtool call's answer; None when the driver does not implement the command.
pub(crate) fn supported<T>(r: std::io::Result<T>, ifname: &str, what: &str) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(os_error(ifname, what)(e)),
    }
}

/// An interface ioctl's error: ENODEV is an unknown interface.
fn os_error<'a>(ifname: &'a str, what: &'a str) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |err| {
        if err.raw_os_error() == Some(libc::ENODEV) {
            return Error::NoSuchInterface(ifname.to_string());
        }
        Error::Os {
            what: format!("{what} of `{ifname}`"),
            err,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_checksums_are_possible_on_software_devices_only() {
        for kind in ["veth", "macvlan", "ipvlan", "bridge"] {
            assert!(partial_checksums_possible(Some(kind), false), "{kind}");
        }
        assert!(partial_checksums_possible(None, true), "lo");
        assert!(!partial_checksums_possible(None, false), "a NIC");
    }

    #[test]
    fn loopback_has_a_zero_mac_one_queue_and_a_large_mtu() {
        let lo = InterfaceInfo::query("lo").unwrap();
        assert_eq!(lo.index, 1);
        assert_eq!(lo.mac, [0; 6]);
        assert!(lo.mtu >= 1500);
        assert_eq!(lo.rx_queues, 1);
        assert_eq!(lo.kind, None);
        assert!(lo.loopback && lo.partial_checksums_possible());
        assert!(matches!(
            InterfaceInfo::query("ws-none-such"),
            Err(Error::NoSuchInterface(_))
        ));
    }
}
