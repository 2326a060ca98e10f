//! UDP sockets: bound ports with a bounded datagram receive ring.
//!
//! Like TCP, this module does not know the stack: input hands back the event to report,
//! and the stack frames outgoing datagrams with [`emit_datagram`].

use crate::ring::Ring;
use crate::util::FlowHashBuilder;
use crate::{Config, Error, Event, EventKind, Handle, IpHeader, Result, Stats, UdpId};
use std::collections::HashMap;
use wirespeed_wire::checksum::TransportChecksum;
use wirespeed_wire::{udp, IpAddress, IpRepr, Ipv4Addr, Ipv6Addr, UdpPacket, UdpRepr};

/// Each queued datagram is preceded by its length (2 bytes), source port (2), source
/// address family (1: 4 or 6) and address (16, an IPv4 one in the first 4).
const RECORD_HEADER: usize = 21;

pub(crate) struct UdpSocket {
    gen: u32,
    in_use: bool,
    port: u16,
    rx: Ring,
    ev_mask: u8,
}

/// The UDP sockets of one stack.
pub(crate) struct Udp {
    sockets: Vec<UdpSocket>,
    ports: HashMap<u16, u32, FlowHashBuilder>,
}

impl Udp {
    pub(crate) fn new(cfg: &Config) -> Udp {
        Udp {
            sockets: Vec::new(),
            ports: HashMap::with_hasher(FlowHashBuilder { seed: cfg.secret }),
        }
    }

    pub(crate) fn bind(&mut self, port: u16, recv_buffer: usize) -> Result<UdpId> {
        if port == 0 {
            return Err(Error::InvalidInput);
        }
        if self.ports.contains_key(&port) {
            return Err(Error::AddrInUse);
        }
        let idx = match self.sockets.iter().position(|s| !s.in_use) {
            Some(i) => i,
            None => {
                self.sockets.push(UdpSocket {
                    gen: 0,
                    in_use: false,
                    port: 0,
                    rx: Ring::new(recv_buffer),
                    ev_mask: 0,
                });
                self.sockets.len() - 1
            }
        };
        let s = &mut self.sockets[idx];
        s.gen = s.gen.wrapping_add(1);
        s.in_use = true;
        s.port = port;
        s.rx.clear();
        s.ev_mask = 0;
        self.ports.insert(port, idx as u32);
        Ok(UdpId {
            idx: idx as u32,
            gen: s.gen,
        })
    }

    fn socket(&mut self, id: UdpId) -> Result<&mut UdpSocket> {
        match self.sockets.get_mut(id.idx as usize) {
            Some(s) if s.in_use && s.gen == id.gen => Ok(s),
            _ => Err(Error::InvalidHandle),
        }
    }

    /// The local port of a bound socket.
    pub(crate) fn port(&mut self, id: UdpId) -> Result<u16> {
        Ok(self.socket(id)?.port)
    }

    pub(crate) fn close(&mut self, id: UdpId) -> Result<()> {
        let s = self.socket(id)?;
        s.in_use = false;
        s.gen = s.gen.wrapping_add(1);
        let port = s.port;
        self.ports.remove(&port);
        Ok(())
    }

    pub(crate) fn recv_from(
        &mut self,
        id: UdpId,
        buf: &mut [u8],
    ) -> Result<(usize, IpAddress, u16)> {
        let s = self.socket(id)?;
        let mut hdr = [0u8; RECORD_HEADER];
        if s.rx.peek_at(0, &mut hdr) < RECORD_HEADER {
            return Err(Error::WouldBlock);
        }
        let len = u16::from_be_bytes([hdr[0], hdr[1]]) as usize;
        let port = u16::from_be_bytes([hdr[2], hdr[3]]);
        let mut a = [0u8; 16];
        a.copy_from_slice(&hdr[5..21]);
        let ip = match hdr[4] {
            6 => IpAddress::V6(Ipv6Addr(a)),
            _ => IpAddress::V4(Ipv4Addr([a[0], a[1], a[2], a[3]])),
        };
        let n = len.min(buf.len());
        s.rx.peek_at(RECORD_HEADER, &mut buf[..n]);
        s.rx.consume(RECORD_HEADER + len);
        Ok((n, ip, port))
    }

    /// Clears `bit` from a socket's pending events once the application took that event.
    pub(crate) fn event_taken(&mut self, u: UdpId, bit: u8) {
        if let Some(x) = self.sockets.get_mut(u.idx as usize) {
            if x.gen == u.gen {
                x.ev_mask &= !bit;
            }
        }
    }

    /// One UDP datagram addressed to the stack (`data`: the IPv4 payload): delivered (with
    /// the event to report, if one is not pending already), or for no socket.
    pub(crate) fn input(
        &mut self,
        cfg: &Config,
        stats: &mut Stats,
        ip: &IpHeader,
        data: &[u8],
    ) -> UdpInput {
        match self.deliver(cfg, stats, ip, data) {
            Ok(Some(ev)) => UdpInput::Event(ev),
            Ok(None) => UdpInput::Taken,
            Err(NoSocket) => UdpInput::NoSocket,
        }
    }

    fn deliver(
        &mut self,
        cfg: &Config,
        stats: &mut Stats,
        ip: &IpHeader,
        data: &[u8],
    ) -> std::result::Result<Option<Event>, NoSocket> {
        let checked = if ip.src.is_v6() {
            UdpPacket::new_checked_ipv6(data)
        } else {
            UdpPacket::new_checked(data)
        };
        let pkt = match checked {
            Ok(p) => p,
            Err(_) => {
                stats.udp_malformed += 1;
                return Ok(None);
            }
        };
        match pkt.checksum_state(ip.src, ip.dst) {
            TransportChecksum::Complete => {}
            TransportChecksum::Partial if cfg.accept_partial_checksums => {
                stats.udp_rx_csum_partial += 1;
            }
            TransportChecksum::Partial => {
                stats.udp_bad_checksum += 1;
                stats.udp_bad_checksum_partial += 1;
                return Ok(None);
            }
            TransportChecksum::Bad => {
                stats.udp_bad_checksum += 1;
                return Ok(None);
            }
        }
        let repr = UdpRepr::parse_unverified(&pkt);
        let Some(&idx) = self.ports.get(&repr.dst_port) else {
            stats.udp_no_socket += 1;
            return Err(NoSocket);
        };
        let s = &mut self.sockets[idx as usize];
        let payload = pkt.payload();
        if s.rx.free() < RECORD_HEADER + payload.len() {
            stats.udp_rx_buffer_full += 1;
            return Ok(None);
        }
        let mut hdr = [0u8; RECORD_HEADER];
        hdr[0..2].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        hdr[2..4].copy_from_slice(&repr.src_port.to_be_bytes());
        let src = ip.src.as_bytes();
        hdr[4] = if ip.src.is_v6() { 6 } else { 4 };
        hdr[5..5 + src.len()].copy_from_slice(src);
        s.rx.push(&hdr);
        s.rx.push(payload);
        let kind = EventKind::Readable;
        if s.ev_mask & kind.bit() != 0 {
            return Ok(None);
        }
        s.ev_mask |= kind.bit();
        Ok(Some(Event {
            handle: Handle::Udp(UdpId { idx, gen: s.gen }),
            kind,
        }))
    }
}

/// What became of a datagram: an event to report, taken (or dropped) quietly, or for a port
/// no socket is bound to (Linux answers ICMP port unreachable, the stack's caller decides).
pub(crate) enum UdpInput {
    Event(Event),
    Taken,
    NoSocket,
}

/// The datagram's port has no socket, checked after its checksum (as `__udp4_lib_rcv`).
struct NoSocket;

/// Writes the IP header `ip` and a UDP datagram carrying `data` at `l3` (the Ethernet
/// header's length) into `buf`. Returns the frame length, 0 when `buf` is too short.
pub(crate) fn emit_datagram(
    buf: &mut [u8],
    l3: usize,
    ip: &IpRepr,
    ports: (u16, u16),
    data: &[u8],
) -> usize {
    let u = l3 + ip.header_len();
    let end = u + udp::HEADER_LEN + data.len();
    if buf.len() < end {
        return 0;
    }
    let _ = ip.emit(&mut buf[l3..]);
    buf[u + udp::HEADER_LEN..end].copy_from_slice(data);
    let (src, dst): (IpAddress, IpAddress) = match ip {
        IpRepr::V4(r) => (r.src.into(), r.dst.into()),
        IpRepr::V6(r) => (r.src.into(), r.dst.into()),
    };
    let _ = UdpRepr {
        src_port: ports.0,
        dst_port: ports.1,
    }
    .emit(&mut buf[u..], data.len(), src, dst);
    end
}
