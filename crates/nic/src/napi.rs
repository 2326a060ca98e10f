//! Which NAPI instance polls a receive queue, from the kernel's "netdev" generic-netlink family
//! (Linux 6.8+ for queues and NAPIs). A copy-mode AF_XDP socket has no NAPI ID of its own on
//! Linux 6.13+ (`xsk::busy_poll`), but the queue's NAPI can still be busy-polled by ID, from an
//! io_uring that tracks it statically (`IO_URING_NAPI_STATIC_ADD_ID`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_QUEUE_GET: u8 = 10;
const NETDEV_CMD_NAPI_GET: u8 = 11;
const NETDEV_A_QUEUE_ID: u16 = 1;
const NETDEV_A_QUEUE_IFINDEX: u16 = 2;
const NETDEV_A_QUEUE_TYPE: u16 = 3;
const NETDEV_A_QUEUE_NAPI_ID: u16 = 4;
const NETDEV_QUEUE_TYPE_RX: u32 = 0;
const NETDEV_A_NAPI_IFINDEX: u16 = 1;
const NETDEV_A_NAPI_ID: u16 = 2;
const NLMSG_HDR: usize = 16;
const GENL_HDR: usize = 4;

/// The NAPI ID of receive queue `queue` of interface `ifindex`; None when the kernel names
/// none. Drivers that link queues to NAPIs (most NIC drivers) answer the queue query; a veth
/// does not, so its NAPIs are taken in ID order, which is queue order: a veth adds one per
/// receive queue, in order, and IDs are handed out in the order NAPIs are enabled.
pub fn rx_queue_napi_id(ifindex: u32, queue: u32) -> io::Result<Option<u32>> {
    let sock = Genl::open()?;
    let family = sock.netdev_family()?;
    let rx_queues = sock.dump(
        family,
        NETDEV_CMD_QUEUE_GET,
        NETDEV_A_QUEUE_IFINDEX,
        ifindex,
    )?;
    let linked = rx_queues.iter().find_map(|a| {
        let is_ours = attr_u32(a, NETDEV_A_QUEUE_TYPE) == Some(NETDEV_QUEUE_TYPE_RX)
            && attr_u32(a, NETDEV_A_QUEUE_ID) == Some(queue);
        is_ours
            .then(|| attr_u32(a, NETDEV_A_QUEUE_NAPI_ID))
            .flatten()
    });
    if linked.is_some() {
        return Ok(linked);
    }
    let napis = sock.dump(family, NETDEV_CMD_NAPI_GET, NETDEV_A_NAPI_IFINDEX, ifindex)?;
    Ok(nth_napi_in_id_order(&napis, ifindex, queue))
}

/// From a NAPI dump's messages (attributes after the genl header): the `queue`-th NAPI ID of
/// `ifindex`, counting in ID order.
fn nth_napi_in_id_order(napis: &[Vec<u8>], ifindex: u32, queue: u32) -> Option<u32> {
    let mut ids: Vec<u32> = napis
        .iter()
        .filter(|a| attr_u32(a, NETDEV_A_NAPI_IFINDEX) == Some(ifindex))
        .filter_map(|a| attr_u32(a, NETDEV_A_NAPI_ID))
        .collect();
    ids.sort_unstable();
    ids.get(queue as usize).copied()
}

/// The first attribute `ty` in `attrs` (len u16, type u16, payload, padded to 4) as a u32.
fn attr_u32(attrs: &[u8], ty: u16) -> Option<u32> {
    let mut i = 0;
    while i + 4 <= attrs.len() {
        let len = u16::from_ne_bytes([attrs[i], attrs[i + 1]]) as usize;
        let t = u16::from_ne_bytes([attrs[i + 2], attrs[i + 3]]) & 0x3fff;
        if len < 4 || i + len > attrs.len() {
            return None;
        }
        if t == ty {
            let v = attrs.get(i + 4..i + 8)?;
            return Some(u32::from_ne_bytes([v[0], v[1], v[2], v[3]]));
        }
        i += (len + 3) & !3;
    }
    None
}

fn push_attr(buf: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    buf.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

struct Genl(OwnedFd);

impl Genl {
    fn open() -> io::Result<Genl> {
        crate::iface::netlink_socket(libc::NETLINK_GENERIC).map(Genl)
    }

    fn netdev_family(&self) -> io::Result<u16> {
        let mut attrs = Vec::new();
        push_attr(&mut attrs, CTRL_ATTR_FAMILY_NAME, b"netdev\0");
        let replies = self.request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 0, &attrs)?;
        replies
            .iter()
            .find_map(|a| attr_u32(a, CTRL_ATTR_FAMILY_ID).map(|id| id as u16))
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no netdev netlink family"))
    }

    /// A dump of `cmd` filtered by the u32 attribute `key` = `value`.
    fn dump(&self, family: u16, cmd: u8, key: u16, value: u32) -> io::Result<Vec<Vec<u8>>> {
        let mut attrs = Vec::new();
        push_attr(&mut attrs, key, &value.to_ne_bytes());
        self.request(family, cmd, libc::NLM_F_DUMP as u16, &attrs)
    }

    /// Sends one request and collects the attributes of every answer up to NLMSG_DONE (or the
    /// single answer of a plain request).
    fn request(&self, family: u16, cmd: u8, flags: u16, attrs: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        let len = NLMSG_HDR + GENL_HDR + attrs.len();
        let mut req = Vec::with_capacity(len);
        req.extend_from_slice(&(len as u32).to_ne_bytes());
        req.extend_from_slice(&family.to_ne_bytes());
        req.extend_from_slice(&(libc::NLM_F_REQUEST as u16 | flags).to_ne_bytes());
        req.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        req.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel's
        req.extend_from_slice(&[cmd, 1, 0, 0]); // genlmsghdr: cmd, version
        req.extend_from_slice(attrs);
        // SAFETY: sends req's bytes on our socket (the kernel is the default destination).
        let sent = unsafe { libc::send(self.0.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        if sent != req.len() as isize {
            return Err(io::Error::last_os_error());
        }
        let dump = flags & libc::NLM_F_DUMP as u16 != 0;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            // SAFETY: receives into buf, which outlives the call, at most buf.len() bytes.
            let n =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut msgs = &buf[..n as usize];
            while msgs.len() >= NLMSG_HDR {
                let mlen = u32::from_ne_bytes(msgs[0..4].try_into().unwrap()) as usize;
                let ty = u16::from_ne_bytes([msgs[4], msgs[5]]);
                if mlen < NLMSG_HDR || mlen > msgs.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "malformed netlink answer",
                    ));
                }
                match ty as i32 {
                    libc::NLMSG_DONE => return Ok(out),
                    libc::NLMSG_ERROR => {
                        let errno = i32::from_ne_bytes(msgs[16..20].try_into().unwrap_or([0; 4]));
                        if errno != 0 {
                            return Err(io::Error::from_raw_os_error(-errno));
                        }
                        return Ok(out);
                    }
                    _ => out.push(msgs.get(NLMSG_HDR + GENL_HDR..mlen).unwrap_or(&[]).to_vec()),
                }
                msgs = &msgs[mlen.next_multiple_of(4).min(msgs.len())..];
            }
            if !dump {
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn napi(ifindex: u32, id: u32) -> Vec<u8> {
        let mut a = Vec::new();
        push_attr(&mut a, NETDEV_A_NAPI_IFINDEX, &ifindex.to_ne_bytes());
        push_attr(&mut a, NETDEV_A_NAPI_ID, &id.to_ne_bytes());
        a
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
    fn attributes_are_found_past_padding_and_truncation_is_refused() {
        let mut a = Vec::new();
        push_attr(&mut a, 9, b"abc"); // padded to 8
        push_attr(&mut a, NETDEV_A_NAPI_ID, &77u32.to_ne_bytes());
        assert_eq!(attr_u32(&a, NETDEV_A_NAPI_ID), Some(77));
        assert_eq!(attr_u32(&a[..a.len() - 1], NETDEV_A_NAPI_ID), None);
        assert_eq!(attr_u32(&a, 1), None);
    }
}
