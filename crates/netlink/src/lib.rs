//! Netlink for every crate: framing, a socket, rtnetlink links, generic netlink and netdev.
//!
//! The socket is non-blocking, for dumps and multicast events alike; [`route`] has the
//! rtnetlink message types and links, [`genl`] the generic-netlink controller and [`netdev`]
//! its "netdev" family (XDP features, queue to NAPI).
//!
//! Hand-written rather than on netlink-packet-route/netlink-sys: their 0.21/0.8 releases
//! have no nexthop, netconf or bridge-VLAN messages (which the fast path watches), and no
//! crate has the netdev family. Parsing is pure and unit-tested on byte fixtures; only
//! [`Socket`] does I/O.
#![deny(unsafe_code)]

pub mod genl;
pub mod netdev;
pub mod route;
mod socket;

pub use socket::Socket;

/// Netlink protocols (`socket(AF_NETLINK, SOCK_RAW, protocol)`).
pub const NETLINK_ROUTE: i32 = 0;
pub const NETLINK_NETFILTER: i32 = 12;
pub const NETLINK_GENERIC: i32 = 16;

pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLM_F_REQUEST: u16 = 1;
pub const NLM_F_ACK: u16 = 4;
pub const NLM_F_REPLACE: u16 = 0x100;
pub const NLM_F_DUMP: u16 = 0x300;
/// struct nlmsghdr.
pub const NLMSG_HDRLEN: usize = 16;

#[derive(Debug, thiserror::Error)]
// The cause is part of the message, not a `source`, so a printed chain says it once.
pub enum Error {
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    /// The kernel answered a request with an error (`NLMSG_ERROR`).
    #[error("netlink: request {request} failed: {err}")]
    Refused { request: u16, err: std::io::Error },
    #[error("netlink: {0}")]
    Netlink(String),
}

impl Error {
    /// The OS error inside, for callers whose errors carry an `io::Error`.
    pub fn into_io(self) -> std::io::Error {
        match self {
            Error::Io { err, .. } | Error::Refused { err, .. } => err,
            Error::Netlink(what) => std::io::Error::other(what),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// One netlink message: type and payload (after the 16-byte header).
#[derive(Debug)]
pub struct Msg<'a> {
    pub ty: u16,
    pub flags: u16,
    pub payload: &'a [u8],
}

/// Splits a datagram into messages; stops at the first malformed one.
pub fn messages(buf: &[u8]) -> Vec<Msg<'_>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + NLMSG_HDRLEN <= buf.len() {
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap_or([0; 4])) as usize;
        let ty = u16::from_ne_bytes([buf[off + 4], buf[off + 5]]);
        let flags = u16::from_ne_bytes([buf[off + 6], buf[off + 7]]);
        if len < NLMSG_HDRLEN || off + len > buf.len() {
            break;
        }
        out.push(Msg {
            ty,
            flags,
            payload: &buf[off + NLMSG_HDRLEN..off + len],
        });
        off += (len + 3) & !3;
    }
    out
}

/// Iterates the rtattrs in `buf`: (type without flag bits, value).
pub fn attrs(buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= buf.len() {
        let len = u16::from_ne_bytes([buf[off], buf[off + 1]]) as usize;
        let ty = u16::from_ne_bytes([buf[off + 2], buf[off + 3]]) & 0x3fff;
        if len < 4 || off + len > buf.len() {
            break;
        }
        out.push((ty, &buf[off + 4..off + len]));
        off += (len + 3) & !3;
    }
    out
}

/// The value of the first attribute `ty` among `a`.
pub fn find<'a>(a: &[(u16, &'a [u8])], ty: u16) -> Option<&'a [u8]> {
    a.iter().find(|(t, _)| *t == ty).map(|(_, v)| *v)
}

/// An attribute's value as a u32 (host byte order).
pub fn u32_of(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

/// An attribute's value as a u64 (host byte order).
pub fn u64_of(v: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?))
}

/// An attribute's value as a string, up to its NUL.
pub fn cstr(v: &[u8]) -> String {
    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// One netlink attribute, padded to 4 bytes: for requests, and for test fixtures.
pub fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&ty.to_ne_bytes());
    a.extend_from_slice(v);
    while a.len() % 4 != 0 {
        a.push(0);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_found_past_padding_and_truncation_stops_the_walk() {
        let a = [attr(9, b"abc"), attr(2, &77u32.to_ne_bytes())].concat();
        let parsed = attrs(&a);
        assert_eq!(find(&parsed, 2).and_then(u32_of), Some(77));
        assert_eq!(find(&parsed, 9).map(cstr).as_deref(), Some("abc"));
        assert_eq!(find(&attrs(&a[..a.len() - 1]), 2), None);
        assert_eq!(find(&parsed, 1), None);
    }

    #[test]
    fn a_datagram_splits_into_messages_and_a_short_one_ends_it() {
        let msg = |ty: u16, body: &[u8]| {
            let mut m = ((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes().to_vec();
            m.extend_from_slice(&ty.to_ne_bytes());
            m.extend_from_slice(&[0; 10]);
            m.extend_from_slice(body);
            m
        };
        let d = [msg(16, &[1, 2, 3, 4]), msg(NLMSG_DONE, &[])].concat();
        let m = messages(&d);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].ty, m[0].payload), (16, &[1u8, 2, 3, 4][..]));
        assert_eq!(messages(&d[..d.len() - 1]).len(), 1);
    }
}
