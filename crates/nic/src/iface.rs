//! What the stack needs to know about the interface it drives: index, MAC address, MTU and
//! number of rx queues (one shard per queue). Read with ioctls in the calling thread's network
//! namespace; call once at startup, not per packet.

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

        let mut ifr = ifreq(ifname)?;
        ioctl(&sock, libc::SIOCGIFMTU, &mut ifr, ifname, "read MTU")?;
        // SAFETY: SIOCGIFMTU filled the mtu member of the union.
        let mtu = unsafe { ifr.ifr_ifru.ifru_mtu }.max(0) as u32;

        let rx_queues = rx_queue_count(&sock, ifname)?;
        Ok(InterfaceInfo {
            name: ifname.to_string(),
            index,
            mac,
            mtu,
            rx_queues,
        })
    }
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
        Err(Error::Os { source, .. }) if source.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(1),
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
            source,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_a_zero_mac_one_queue_and_a_large_mtu() {
        let lo = InterfaceInfo::query("lo").unwrap();
        assert_eq!(lo.index, 1);
        assert_eq!(lo.mac, [0; 6]);
        assert!(lo.mtu >= 1500);
        assert_eq!(lo.rx_queues, 1);
        assert!(matches!(
            InterfaceInfo::query("ws-none-such"),
            Err(Error::NoSuchInterface(_))
        ));
    }
}
