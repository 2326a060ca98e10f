//! UDP sockets: bound ports with a bounded datagram receive ring.

use crate::ring::Ring;
use crate::stack::Stack;
use crate::{Error, EventKind, Handle, Result, UdpId};
use wirespeed_wire::checksum::TransportChecksum;
use wirespeed_wire::{ipv4, udp, IpProtocol, Ipv4Addr, Ipv4Repr, UdpPacket, UdpRepr};

const RECORD_HEADER: usize = 8;

pub(crate) struct UdpSocket {
    pub(crate) gen: u32,
    pub(crate) in_use: bool,
    pub(crate) port: u16,
    pub(crate) rx: Ring,
    pub(crate) ev_mask: u8,
}

impl Stack {
    /// Binds a UDP socket to `port` on the stack's address.
    pub fn udp_bind(&mut self, port: u16) -> Result<UdpId> {
        if port == 0 {
            return Err(Error::InvalidInput);
        }
        if self.udp_ports.contains_key(&port) {
            return Err(Error::AddrInUse);
        }
        let idx = match self.udp.iter().position(|s| !s.in_use) {
            Some(i) => i,
            None => {
                self.udp.push(UdpSocket {
                    gen: 0,
                    in_use: false,
                    port: 0,
                    rx: Ring::new(self.cfg.udp_recv_buffer),
                    ev_mask: 0,
                });
                self.udp.len() - 1
            }
        };
        let s = &mut self.udp[idx];
        s.gen = s.gen.wrapping_add(1);
        s.in_use = true;
        s.port = port;
        s.rx.clear();
        s.ev_mask = 0;
        self.udp_ports.insert(port, idx as u32);
        Ok(UdpId {
            idx: idx as u32,
            gen: s.gen,
        })
    }

    fn udp_socket(&mut self, id: UdpId) -> Result<&mut UdpSocket> {
        match self.udp.get_mut(id.idx as usize) {
            Some(s) if s.in_use && s.gen == id.gen => Ok(s),
            _ => Err(Error::InvalidHandle),
        }
    }

    /// Closes the socket; queued datagrams are discarded.
    pub fn udp_close(&mut self, id: UdpId) -> Result<()> {
        let s = self.udp_socket(id)?;
        s.in_use = false;
        s.gen = s.gen.wrapping_add(1);
        let port = s.port;
        self.udp_ports.remove(&port);
        Ok(())
    }

    /// Takes the next datagram: copies up to `buf.len()` bytes (the rest of a longer datagram
    /// is discarded, as with recvfrom) and returns (bytes copied, source address, port).
    pub fn udp_recv_from(&mut self, id: UdpId, buf: &mut [u8]) -> Result<(usize, Ipv4Addr, u16)> {
        let s = self.udp_socket(id)?;
        let mut hdr = [0u8; RECORD_HEADER];
        if s.rx.peek_at(0, &mut hdr) < RECORD_HEADER {
            return Err(Error::WouldBlock);
        }
        let len = u16::from_be_bytes([hdr[0], hdr[1]]) as usize;
        let ip = Ipv4Addr([hdr[2], hdr[3], hdr[4], hdr[5]]);
        let port = u16::from_be_bytes([hdr[6], hdr[7]]);
        let n = len.min(buf.len());
        s.rx.peek_at(RECORD_HEADER, &mut buf[..n]);
        s.rx.consume(RECORD_HEADER + len);
        Ok((n, ip, port))
    }

    /// Sends one datagram. It is queued (or parked for ARP) and leaves on the next
    /// `transmit`; `WouldBlock` when the queue is full.
    pub fn udp_send_to(
        &mut self,
        id: UdpId,
        dst: Ipv4Addr,
        dst_port: u16,
        data: &[u8],
    ) -> Result<()> {
        let src_port = self.udp_socket(id)?.port;
        if dst_port == 0 || dst == Ipv4Addr::UNSPECIFIED {
            return Err(Error::InvalidInput);
        }
        if ipv4::HEADER_LEN + udp::HEADER_LEN + data.len() > self.cfg.mtu {
            return Err(Error::MessageTooLong);
        }
        let ip = self.ip_repr(dst, IpProtocol::Udp, udp::HEADER_LEN + data.len());
        let e = self.eth_len;
        let src = self.cfg.ipv4;
        let ok = self.send_ip_frame(dst, |buf| {
            let u = e + ipv4::HEADER_LEN;
            let end = u + udp::HEADER_LEN + data.len();
            if buf.len() < end {
                return 0;
            }
            let _ = ip.emit(&mut buf[e..]);
            buf[u + udp::HEADER_LEN..end].copy_from_slice(data);
            let _ = UdpRepr { src_port, dst_port }.emit(&mut buf[u..], data.len(), src, dst);
            end
        });
        if ok {
            Ok(())
        } else {
            Err(Error::WouldBlock)
        }
    }

    pub(crate) fn udp_input(&mut self, ip: &Ipv4Repr, data: &[u8]) {
        let pkt = match UdpPacket::new_checked(data) {
            Ok(p) => p,
            Err(_) => {
                self.stats.udp_malformed += 1;
                return;
            }
        };
        match pkt.checksum_state(ip.src, ip.dst) {
            TransportChecksum::Complete => {}
            TransportChecksum::Partial if self.cfg.accept_partial_checksums => {
                self.stats.udp_rx_csum_partial += 1;
            }
            TransportChecksum::Partial => {
                self.stats.udp_bad_checksum += 1;
                self.stats.udp_bad_checksum_partial += 1;
                return;
            }
            TransportChecksum::Bad => {
                self.stats.udp_bad_checksum += 1;
                return;
            }
        }
        let repr = UdpRepr::parse_unverified(&pkt);
        let Some(&idx) = self.udp_ports.get(&repr.dst_port) else {
            self.stats.udp_no_socket += 1;
            return;
        };
        let s = &mut self.udp[idx as usize];
        let payload = pkt.payload();
        if s.rx.free() < RECORD_HEADER + payload.len() {
            self.stats.udp_rx_buffer_full += 1;
            return;
        }
        let mut hdr = [0u8; RECORD_HEADER];
        hdr[0..2].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        hdr[2..6].copy_from_slice(&ip.src.0);
        hdr[6..8].copy_from_slice(&repr.src_port.to_be_bytes());
        s.rx.push(&hdr);
        s.rx.push(payload);
        let handle = Handle::Udp(UdpId { idx, gen: s.gen });
        let mut mask = s.ev_mask;
        self.push_event(handle, EventKind::Readable, &mut mask);
        self.udp[idx as usize].ev_mask = mask;
    }
}
