//! What the stack needs to know about the interface it drives: index, MAC address, MTU,
//! number of rx queues (one shard per queue), and its link kind (whether frames can arrive
//! with partial checksums). Read with ioctls and one rtnetlink request in the calling
//! thread's network namespace; call once at startup, not per packet.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::{Error, Result};

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
    read_mtu(&control_socket()?, ifname)
}

fn read_mtu(sock: &OwnedFd, ifname: &str) -> Result<u32> {
    let mut ifr = ifreq(ifname)?;
    ioctl(sock, libc::SIOCGIFMTU, &mut ifr, ifname, "read MTU")?;
    // SAFETY: SIOCGIFMTU filled the mtu member of the union.
    Ok(unsafe { ifr.ifr_ifru.ifru_mtu }.max(0) as u32)
}

impl InterfaceInfo {
    pub fn query(ifname: &str) -> Result<InterfaceInfo> {
        let index = crate::xsk::ifindex(ifname)?;
        let sock = control_socket()?;

        let mut ifr = ifreq(ifname)?;
        ioctl(
            &sock,
            libc::SIOCGIFHWADDR,
            &mut ifr,
            ifname,
            "read MAC address",
        )?;
        // SAFETY: SIOCGIFHWADDR filled the hwaddr member of the union.
        let hw = unsafe { ifr.ifr_ifru.ifru_hwaddr };
        let mut mac = [0u8; 6];
        for (m, b) in mac.iter_mut().zip(hw.sa_data.iter()) {
            *m = *b as u8;
        }

        let mtu = read_mtu(&sock, ifname)?;
        let rx_queues = rx_queue_count(&sock, ifname)?;
        let driver = crate::rss::driver_name(ifname)?;
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

#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

fn rx_queue_count(sock: &OwnedFd, ifname: &str) -> Result<u32> {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let mut ifr = ifreq(ifname)?;
    ifr.ifr_ifru.ifru_data = &mut ch as *mut EthtoolChannels as *mut libc::c_char;
    match ioctl(sock, SIOCETHTOOL, &mut ifr, ifname, "ethtool -l") {
        Ok(()) => Ok((ch.rx_count + ch.combined_count).max(1)),
        Err(Error::Os { err: source, .. }) if source.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            Ok(1)
        }
        Err(e) => Err(e),
    }
}

pub(crate) const SIOCETHTOOL: libc::c_ulong = 0x8946;

pub(crate) fn control_socket() -> Result<OwnedFd> {
    // SAFETY: plain socket(2); owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(Error::os("socket for interface ioctls"));
    }
    // SAFETY: fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn ifreq(ifname: &str) -> Result<libc::ifreq> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(Error::NoSuchInterface(ifname.to_string()));
    }
    // SAFETY: all-zero is a valid ifreq (integers, arrays and a union of them).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(ifr)
}

pub(crate) fn ioctl(
    sock: &OwnedFd,
    request: libc::c_ulong,
    ifr: &mut libc::ifreq,
    ifname: &str,
    what: &str,
) -> Result<()> {
    // SAFETY: ifr is a valid ifreq naming the interface; any buffer it points at outlives the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request as _, ifr as *mut libc::ifreq) };
    if rc < 0 {
        let source = std::io::Error::last_os_error();
        if source.raw_os_error() == Some(libc::ENODEV) {
            return Err(Error::NoSuchInterface(ifname.to_string()));
        }
        return Err(Error::Os {
            what: format!("{what} of `{ifname}`"),
            err: source,
        });
    }
    Ok(())
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
