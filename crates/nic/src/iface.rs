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
    let os = |what: &str| Error::Os {
        what: format!("{what} (rtnetlink, link kind of `{ifname}`)"),
        err: std::io::Error::last_os_error(),
    };
    let sock = netlink_socket(libc::NETLINK_ROUTE).map_err(|_| os("socket"))?;

    // nlmsghdr + ifinfomsg, host byte order as netlink wants.
    let mut req = [0u8; NLMSG_HDR + IFINFO];
    req[0..4].copy_from_slice(&((NLMSG_HDR + IFINFO) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&libc::RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[NLMSG_HDR] = libc::AF_UNSPEC as u8;
    req[NLMSG_HDR + 4..NLMSG_HDR + 8].copy_from_slice(&(index as i32).to_ne_bytes());
    // SAFETY: sends req's bytes on our socket (the kernel is the default destination).
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent != req.len() as isize {
        return Err(os("send RTM_GETLINK"));
    }
    let mut buf = vec![0u8; 32 * 1024];
    // SAFETY: receives into buf, which outlives the call, at most buf.len() bytes.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(os("recv RTM_NEWLINK"));
    }
    let (kind, flags) = parse_link_kind(&buf[..n as usize]).map_err(|source| Error::Os {
        what: format!("rtnetlink, link kind of `{ifname}`"),
        err: source,
    })?;
    Ok((kind, flags & libc::IFF_LOOPBACK as u32 != 0))
}

const NLMSG_HDR: usize = 16;
/// struct ifinfomsg.
const IFINFO: usize = 16;

/// From an `RTM_NEWLINK` answer: the link kind and the interface flags.
fn parse_link_kind(msg: &[u8]) -> std::io::Result<(Option<String>, u32)> {
    const IFLA_LINKINFO: u16 = 18;
    const IFLA_INFO_KIND: u16 = 1;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed answer");
    let u16_at = |b: &[u8], i: usize| b.get(i..i + 2).map(|x| u16::from_ne_bytes([x[0], x[1]]));
    let u32_at = |b: &[u8], i: usize| {
        b.get(i..i + 4)
            .map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
    };
    let len = u32_at(msg, 0).ok_or_else(bad)? as usize;
    let ty = u16_at(msg, 4).ok_or_else(bad)?;
    let msg = msg.get(..len).ok_or_else(bad)?;
    if ty == libc::NLMSG_ERROR as u16 {
        let errno = u32_at(msg, NLMSG_HDR).ok_or_else(bad)? as i32;
        return Err(std::io::Error::from_raw_os_error(-errno));
    }
    if ty != libc::RTM_NEWLINK {
        return Err(bad());
    }
    let flags = u32_at(msg, NLMSG_HDR + 8).ok_or_else(bad)?;
    // Walks rtattrs (len u16, type u16, payload, padded to 4) in `b`; calls `f` per attribute.
    fn attrs(b: &[u8], mut f: impl FnMut(u16, &[u8])) {
        let mut i = 0;
        while i + 4 <= b.len() {
            let len = u16::from_ne_bytes([b[i], b[i + 1]]) as usize;
            let ty = u16::from_ne_bytes([b[i + 2], b[i + 3]]) & 0x3fff; // no NESTED/BYTEORDER bits
            if len < 4 || i + len > b.len() {
                return;
            }
            f(ty, &b[i + 4..i + len]);
            i += (len + 3) & !3;
        }
    }
    let mut kind = None;
    attrs(
        msg.get(NLMSG_HDR + IFINFO..).unwrap_or(&[]),
        |ty, linkinfo| {
            if ty == IFLA_LINKINFO {
                attrs(linkinfo, |ty, v| {
                    if ty == IFLA_INFO_KIND {
                        let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
                        kind = Some(String::from_utf8_lossy(&v[..end]).into_owned());
                    }
                });
            }
        },
    );
    Ok((kind, flags))
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

/// A netlink socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_GENERIC`, ...).
pub(crate) fn netlink_socket(protocol: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: plain socket(2); owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

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

    /// An `RTM_NEWLINK` answer as the kernel builds it: header, ifinfomsg, IFLA_IFNAME, then
    /// IFLA_LINKINFO holding IFLA_INFO_KIND "veth" (NLA_F_NESTED set, as the kernel does).
    #[test]
    fn the_link_kind_is_read_from_a_newlink_answer() {
        fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
            let mut a = Vec::new();
            a.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
            a.extend_from_slice(&ty.to_ne_bytes());
            a.extend_from_slice(payload);
            while a.len() % 4 != 0 {
                a.push(0);
            }
            a
        }
        let mut body = vec![0u8; IFINFO];
        body[8..12].copy_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
        body.extend(attr(3, b"b0\0"));
        body.extend(attr(18 | 0x8000, &attr(1, b"veth\0")));
        let mut msg = Vec::new();
        msg.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&libc::RTM_NEWLINK.to_ne_bytes());
        msg.extend_from_slice(&[0u8; 10]);
        msg.extend(body);
        let (kind, flags) = parse_link_kind(&msg).unwrap();
        assert_eq!(kind.as_deref(), Some("veth"));
        assert_eq!(flags, libc::IFF_UP as u32);
        // Without IFLA_LINKINFO (a hardware device): no kind. Truncated: an error, no panic.
        let plain_len = NLMSG_HDR + IFINFO + 8;
        let mut plain = msg[..plain_len].to_vec();
        plain[0..4].copy_from_slice(&(plain_len as u32).to_ne_bytes());
        assert_eq!(parse_link_kind(&plain).unwrap().0, None);
        assert!(parse_link_kind(&msg[..10]).is_err());
    }

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
