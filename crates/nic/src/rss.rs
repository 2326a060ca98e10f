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

use std::net::IpAddr;

use crate::{iface, Result};

/// The key most drivers use by default (Microsoft's RSS verification key), 40 bytes.
pub use wirespeed_wire::toeplitz::MICROSOFT_KEY as DEFAULT_TOEPLITZ_KEY;

/// A 4-tuple as the receiving NIC sees it: `src` is the remote end; both addresses are of
/// one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FourTuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// The Toeplitz hash of `input` under `key` (bits beyond the key's end count as zero); one
/// implementation for the project, in `wirespeed-wire`.
pub use wirespeed_wire::toeplitz::hash as toeplitz;

/// The TCP/UDP hash input: source address, destination address, source port, destination
/// port, all in network order (12 bytes over IPv4, 36 over IPv6, as the RSS specification
/// has them). Returns the buffer and how much of it is used.
pub fn l4_input(t: &FourTuple) -> ([u8; 36], usize) {
    fn octets(a: IpAddr) -> ([u8; 16], usize) {
        let mut b = [0u8; 16];
        match a {
            IpAddr::V4(a) => {
                b[..4].copy_from_slice(&a.octets());
                (b, 4)
            }
            IpAddr::V6(a) => (a.octets(), 16),
        }
    }
    let ((src, n), (dst, _)) = (octets(t.src), octets(t.dst));
    let mut b = [0u8; 36];
    b[..n].copy_from_slice(&src[..n]);
    b[n..2 * n].copy_from_slice(&dst[..n]);
    b[2 * n..2 * n + 2].copy_from_slice(&t.src_port.to_be_bytes());
    b[2 * n + 2..2 * n + 4].copy_from_slice(&t.dst_port.to_be_bytes());
    (b, 2 * n + 4)
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
    /// The model for `ifname` in the calling thread's network namespace: veth is unknown
    /// (see the module docs); a driver that reports a Toeplitz key and indirection table
    /// (`ethtool -x`) gets [`RssModel::Toeplitz`], which assumes the NIC hashes TCP over the
    /// 4-tuple (the usual default; check `ethtool -n IF rx-flow-hash tcp4`); anything else is
    /// unknown.
    pub fn for_interface(ifname: &str) -> Result<RssModel> {
        let driver = iface::driver_name(ifname)?;
        if driver == "veth" {
            return Ok(RssModel::Unknown(
                "veth: the rx queue is the peer's tx queue (its XPS or flow hash), not a hash we can compute".into(),
            ));
        }
        Ok(match read_rss(ifname)? {
            Some(rss) if rss.hfunc == ETH_RSS_HASH_TOP && !rss.indirection.is_empty() => {
                RssModel::Toeplitz {
                    key: rss.key,
                    indirection: rss.indirection,
                }
            }
            Some(rss) => RssModel::Unknown(format!(
                "driver `{driver}` hashes with function {:#x}, not Toeplitz (or has no table)",
                rss.hfunc
            )),
            None => RssModel::Unknown(format!(
                "driver `{driver}` of `{ifname}` does not report its RSS table"
            )),
        })
    }

    /// The rx queue `t` lands on, or None when it cannot be told.
    pub fn queue_for(&self, t: &FourTuple) -> Option<u32> {
        match self {
            RssModel::Toeplitz { key, indirection } if !indirection.is_empty() => {
                let (input, len) = l4_input(t);
                let h = toeplitz(key, &input[..len]);
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
    local: IpAddr,
    remote: IpAddr,
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

/// `ETH_RSS_HASH_TOP`: the Toeplitz bit of `ethtool_rxfh.hfunc`.
pub const ETH_RSS_HASH_TOP: u8 = 1;

/// An interface's RSS configuration as `ethtool -x` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssTable {
    /// Hash function bit (`ETH_RSS_HASH_*`).
    pub hfunc: u8,
    pub key: Vec<u8>,
    pub indirection: Vec<u32>,
}

/// Size of `struct ethtool_rxfh` before its flexible `rss_config` array.
const RXFH_HEADER: usize = 24;

/// Decodes a filled `struct ethtool_rxfh` (header, then `indir_size` u32s, then `key_size`
/// key bytes), checking every length against the buffer.
fn parse_rxfh(buf: &[u8]) -> Option<RssTable> {
    let word = |i: usize| {
        buf.get(i..i + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let indir_size = word(8)? as usize;
    let key_size = word(12)? as usize;
    let hfunc = *buf.get(16)?;
    let indir_bytes = buf.get(RXFH_HEADER..RXFH_HEADER.checked_add(indir_size.checked_mul(4)?)?)?;
    let indirection = indir_bytes
        .chunks_exact(4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let key_start = RXFH_HEADER + indir_size * 4;
    let key = buf
        .get(key_start..key_start.checked_add(key_size)?)?
        .to_vec();
    Some(RssTable {
        hfunc,
        key,
        indirection,
    })
}

/// The interface's RSS key and indirection table (`ETHTOOL_GRSSH`), or None when the driver
/// does not report them (veth, lo).
pub fn read_rss(ifname: &str) -> Result<Option<RssTable>> {
    let rxfh = iface::supported(wirespeed_sys::iface::rxfh(ifname), ifname, "ethtool -x")?;
    Ok(rxfh.and_then(|bytes| parse_rxfh(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

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
            let (input, len) = l4_input(&t);
            let input = &input[..len];
            assert_eq!(
                toeplitz(&DEFAULT_TOEPLITZ_KEY, &input[..8]),
                ip_only,
                "{t:?} addresses only"
            );
            assert_eq!(
                toeplitz(&DEFAULT_TOEPLITZ_KEY, input),
                with_ports,
                "{t:?} with ports"
            );
        }
    }

    /// The suite's IPv6 rows.
    #[test]
    fn toeplitz_matches_the_published_ipv6_vectors() {
        let v6 = |s: &str| -> IpAddr { s.parse().unwrap() };
        let cases = [
            (
                "3ffe:2501:200:1fff::7",
                2794,
                "3ffe:2501:200:3::1",
                1766,
                0x2cc1_8cd5,
                0x4020_7d3d,
            ),
            (
                "3ffe:501:8::260:97ff:fe40:efab",
                14230,
                "ff02::1",
                4739,
                0x0f0c_461c,
                0xdde5_1bbf,
            ),
            (
                "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
                44251,
                "fe80::200:f8ff:fe21:67cf",
                38024,
                0x4b61_e985,
                0x02d1_feef,
            ),
        ];
        for (src, sport, dst, dport, ip_only, with_ports) in cases {
            let t = FourTuple {
                src: v6(src),
                dst: v6(dst),
                src_port: sport,
                dst_port: dport,
            };
            let (input, len) = l4_input(&t);
            assert_eq!(len, 36);
            assert_eq!(
                toeplitz(&DEFAULT_TOEPLITZ_KEY, &input[..32]),
                ip_only,
                "{src}"
            );
            assert_eq!(
                toeplitz(&DEFAULT_TOEPLITZ_KEY, &input[..36]),
                with_ports,
                "{src}"
            );
        }
    }

    #[test]
    fn picks_ports_that_land_on_the_wanted_queue() {
        let model = RssModel::Toeplitz {
            key: DEFAULT_TOEPLITZ_KEY.to_vec(),
            indirection: (0..128).map(|i| i % 4).collect(),
        };
        let local = IpAddr::from([198, 18, 0, 10]);
        let remote = IpAddr::from([198, 18, 0, 2]);
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
    fn rxfh_buffers_are_decoded_with_bounds_checks() {
        let mut buf = Vec::new();
        for w in [0x46u32, 0, 4, 3] {
            buf.extend_from_slice(&w.to_ne_bytes());
        }
        buf.extend_from_slice(&[ETH_RSS_HASH_TOP, 0, 0, 0, 0, 0, 0, 0]);
        for q in [0u32, 1, 0, 1] {
            buf.extend_from_slice(&q.to_ne_bytes());
        }
        buf.extend_from_slice(&[0xaa, 0xbb, 0xcc, 0]);
        let t = parse_rxfh(&buf).unwrap();
        assert_eq!(
            t,
            RssTable {
                hfunc: ETH_RSS_HASH_TOP,
                key: vec![0xaa, 0xbb, 0xcc],
                indirection: vec![0, 1, 0, 1]
            }
        );
        assert_eq!(parse_rxfh(&buf[..30]), None, "table cut short");
        assert_eq!(parse_rxfh(&buf[..10]), None, "header cut short");
    }

    #[test]
    fn loopback_is_unknown_and_missing_interfaces_are_errors() {
        assert_eq!(read_rss("lo").unwrap(), None);
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
