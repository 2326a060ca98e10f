//! Which rx queue a flow lands on, where the driver can tell.
//!
//! A shard that opens a connection wants the replies on its own queue, so it picks a local
//! port whose receive hash maps to that queue ([`pick_local_port`]).
//!
//! - Hardware NICs hash the 4-tuple with Toeplitz under a key, and look the hash up in an
//!   indirection table (`ethtool -x IF` shows both). [`RssModel::Toeplitz`] predicts that.
//! - **veth has no RSS.** A frame arrives on the rx queue whose number is the tx queue the
//!   *peer* picked to send it, and the peer picks with its own XPS map (by sending CPU) or with
//!   `skb_get_hash` (seeded at random per boot), so nothing on our side can predict it from the
//!   4-tuple: [`RssModel::for_interface`] says [`RssModel::Unknown`]. In the lab, pin the
//!   peer's senders and set its XPS (`/sys/class/net/IF/queues/tx-N/xps_cpus`) so that queue
//!   N's traffic comes from CPU N; a connection's replies then come back on the queue of the
//!   CPU the peer's flow runs on. Where the queue is unknown the lead's code must not rely on
//!   the port choice and should hand a misdelivered flow to its owner shard by message.

use std::net::Ipv4Addr;

use crate::{iface, Error, Result};

/// The key most drivers use by default (Microsoft's RSS verification key), 40 bytes.
pub const DEFAULT_TOEPLITZ_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// An IPv4 4-tuple as the receiving NIC sees it: `src` is the remote end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FourTuple {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// The Toeplitz hash of `input` under `key` (bits beyond the key's end count as zero).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let key_bit = |i: usize| -> u32 {
        key.get(i / 8)
            .map_or(0, |b| u32::from(b >> (7 - i % 8)) & 1)
    };
    let mut window = (0..32).fold(0u32, |w, i| (w << 1) | key_bit(i));
    let mut hash = 0u32;
    for (byte_index, byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | key_bit(byte_index * 8 + bit + 32);
        }
    }
    hash
}

/// The TCP/UDP-over-IPv4 input: source address, destination address, source port,
/// destination port, all in network order.
pub fn ipv4_l4_input(t: &FourTuple) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0..4].copy_from_slice(&t.src.octets());
    b[4..8].copy_from_slice(&t.dst.octets());
    b[8..10].copy_from_slice(&t.src_port.to_be_bytes());
    b[10..12].copy_from_slice(&t.dst_port.to_be_bytes());
    b
}

/// What we know about an interface's receive steering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RssModel {
    /// Toeplitz over the 4-tuple, then `indirection[hash % len]`.
    Toeplitz { key: Vec<u8>, indirection: Vec<u32> },
    /// Everything lands on one queue.
    Single,
    /// The queue cannot be predicted from the 4-tuple; the string says why.
    Unknown(String),
}

impl RssModel {
    /// The model for `ifname` in the calling thread's network namespace. Today this
    /// recognises veth (unknown: see the module docs); other drivers are reported unknown
    /// until their key and table are read (`ethtool -x`) and passed to
    /// [`RssModel::Toeplitz`] by the caller.
    pub fn for_interface(ifname: &str) -> Result<RssModel> {
        let driver = driver_name(ifname)?;
        Ok(match driver.as_str() {
            "veth" => RssModel::Unknown(
                "veth: the rx queue is the peer's tx queue (its XPS or flow hash), not a hash we can compute".into(),
            ),
            "" => RssModel::Unknown(format!("`{ifname}` reports no driver")),
            other => RssModel::Unknown(format!(
                "driver `{other}`: read its key and indirection table with `ethtool -x {ifname}`"
            )),
        })
    }

    /// The rx queue `t` lands on, or None when it cannot be told.
    pub fn queue_for(&self, t: &FourTuple) -> Option<u32> {
        match self {
            RssModel::Toeplitz { key, indirection } if !indirection.is_empty() => {
                let h = toeplitz(key, &ipv4_l4_input(t));
                indirection.get(h as usize % indirection.len()).copied()
            }
            RssModel::Single => Some(0),
            _ => None,
        }
    }
}

/// A local port in `ports` such that the replies of the connection
/// `local:port <-> remote:remote_port` arrive on rx queue `queue`; the search starts at
/// `start` (pass a per-shard cursor to spread connections) and wraps. None when the model
/// cannot tell, or no port in the range maps to the queue.
pub fn pick_local_port(
    model: &RssModel,
    queue: u32,
    local: Ipv4Addr,
    remote: Ipv4Addr,
    remote_port: u16,
    ports: std::ops::RangeInclusive<u16>,
    start: u16,
) -> Option<u16> {
    let (lo, hi) = (*ports.start(), *ports.end());
    if lo > hi {
        return None;
    }
    let span = u32::from(hi - lo) + 1;
    let offset = u32::from(start.clamp(lo, hi) - lo);
    (0..span)
        .map(|i| lo + ((offset + i) % span) as u16)
        .find(|&port| {
            let replies = FourTuple {
                src: remote,
                dst: local,
                src_port: remote_port,
                dst_port: port,
            };
            model.queue_for(&replies) == Some(queue)
        })
}

/// The interface's driver name (`ethtool -i`), or "" for devices without one (lo).
pub fn driver_name(ifname: &str) -> Result<String> {
    const ETHTOOL_GDRVINFO: u32 = 0x3;
    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        version: [u8; 32],
        fw_version: [u8; 32],
        bus_info: [u8; 32],
        erom_version: [u8; 32],
        reserved2: [u8; 12],
        n_priv_flags: u32,
        n_stats: u32,
        testinfo_len: u32,
        eedump_len: u32,
        regdump_len: u32,
    }
    // SAFETY: all-zero is a valid DrvInfo (integers and byte arrays).
    let mut info: DrvInfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    let sock = iface::control_socket()?;
    let mut ifr = iface::ifreq(ifname)?;
    ifr.ifr_ifru.ifru_data = &mut info as *mut DrvInfo as *mut libc::c_char;
    match iface::ioctl(&sock, iface::SIOCETHTOOL, &mut ifr, ifname, "ethtool -i") {
        Ok(()) => {}
        Err(Error::Os { source, .. }) if source.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            return Ok(String::new())
        }
        Err(e) => return Err(e),
    }
    let end = info
        .driver
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(info.driver.len());
    Ok(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> FourTuple {
        FourTuple {
            src: src.into(),
            dst: dst.into(),
            src_port: sport,
            dst_port: dport,
        }
    }

    /// Microsoft's RSS verification suite (IPv4 rows): the published hashes for the default key.
    #[test]
    fn toeplitz_matches_the_published_verification_vectors() {
        let cases = [
            (
                tuple([66, 9, 149, 187], 2794, [161, 142, 100, 80], 1766),
                0x323e_8fc2,
                0x51cc_c178,
            ),
            (
                tuple([199, 92, 111, 2], 14230, [65, 69, 140, 83], 4739),
                0xd718_262a,
                0xc626_b0ea,
            ),
            (
                tuple([24, 19, 198, 95], 12898, [12, 22, 207, 184], 38024),
                0xd2d0_a5de,
                0x5c2b_394a,
            ),
            (
                tuple([38, 27, 205, 30], 48228, [209, 142, 163, 6], 2217),
                0x8298_9176,
                0xafc7_327f,
            ),
            (
                tuple([153, 39, 163, 191], 44251, [202, 188, 127, 2], 1303),
                0x5d18_09c5,
                0x10e8_28a2,
            ),
        ];
        for (t, ip_only, with_ports) in cases {
            let input = ipv4_l4_input(&t);
            assert_eq!(
                toeplitz(&DEFAULT_TOEPLITZ_KEY, &input[..8]),
                ip_only,
                "{t:?} addresses only"
            );
            assert_eq!(
                toeplitz(&DEFAULT_TOEPLITZ_KEY, &input),
                with_ports,
                "{t:?} with ports"
            );
        }
    }

    #[test]
    fn picks_ports_that_land_on_the_wanted_queue() {
        let model = RssModel::Toeplitz {
            key: DEFAULT_TOEPLITZ_KEY.to_vec(),
            indirection: (0..128).map(|i| i % 4).collect(),
        };
        let local = Ipv4Addr::new(198, 18, 0, 10);
        let remote = Ipv4Addr::new(198, 18, 0, 2);
        for queue in 0..4 {
            let port =
                pick_local_port(&model, queue, local, remote, 80, 32768..=60999, 40000).unwrap();
            assert!((32768..=60999).contains(&port));
            let replies = FourTuple {
                src: remote,
                dst: local,
                src_port: 80,
                dst_port: port,
            };
            assert_eq!(model.queue_for(&replies), Some(queue));
        }
        assert_eq!(
            pick_local_port(&model, 9, local, remote, 80, 32768..=60999, 0),
            None,
            "no such queue"
        );
        let unknown = RssModel::Unknown("veth".into());
        assert_eq!(
            pick_local_port(&unknown, 0, local, remote, 80, 1..=10, 1),
            None
        );
        assert_eq!(
            pick_local_port(&RssModel::Single, 0, local, remote, 80, 5..=10, 7),
            Some(7)
        );
    }

    #[test]
    fn loopback_is_unknown_and_missing_interfaces_are_errors() {
        assert!(matches!(
            RssModel::for_interface("lo").unwrap(),
            RssModel::Unknown(_)
        ));
        assert!(matches!(
            RssModel::for_interface("ws-none-such"),
            Err(Error::NoSuchInterface(_))
        ));
    }
}
