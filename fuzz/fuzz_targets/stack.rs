//! Feeds sequences of arbitrary frames (and application calls) into a Stack that has a TCP
//! listener, a UDP socket and a connection in progress. Nothing may panic.
//!
//! Input: a series of records `[op][len_hi][len_lo][bytes...]`:
//! - op & 3 == 0: the bytes as a frame, as they are;
//! - op & 3 == 1: the bytes as a frame with its IPv4 header and TCP/UDP/ICMP checksums fixed
//!   (for IPv6: TCP/UDP/ICMPv6 right after the fixed header), so mutations reach the TCP
//!   state machine and neighbour discovery instead of dying at the checksum check; with
//!   op & 0x40, the TCP/UDP field is left partial (the pseudo-header sum only), as a veth
//!   peer with checksum offload sends it;
//! - op & 3 == 2: an application call chosen by the first byte (accept, send, recv, close,
//!   abort, shutdown, connect, UDP send);
//! - op & 3 == 3: advance the clock by (bytes as u16) ms, letting timers fire.
//!   The clock also advances (op >> 2) * 100 µs before every record.
//!
//! The stack takes partial checksums (as on a veth) when the first byte's top bit is set. It
//! is dual stack (198.18.0.2 and fd00::2); with the first byte's 0x20 bit, its IPv6 address
//! goes through duplicate address detection first (else it is usable at once). Application
//! calls reach the peer over IPv6 when their pick byte is odd.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirespeed_tcpip::{Config, ConnId, Instant, Stack};
use wirespeed_wire::{checksum, IpAddress, Ipv4Addr, Ipv6Addr, MacAddr};

const OUR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const OUR_IP6: Ipv6Addr = Ipv6Addr([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
const PEER_IP6: Ipv6Addr = Ipv6Addr([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);

/// IPv6: the TCP, UDP or ICMPv6 checksum of what follows the fixed header.
fn fix_checksums_v6(f: &mut [u8], partial: bool) {
    if f.len() < 54 {
        return;
    }
    let plen = u16::from_be_bytes([f[18], f[19]]) as usize;
    if f.len() < 54 + plen {
        return;
    }
    let mut a = [0u8; 16];
    a.copy_from_slice(&f[22..38]);
    let src = Ipv6Addr(a);
    a.copy_from_slice(&f[38..54]);
    let dst = Ipv6Addr(a);
    let proto = f[20];
    let seg = &mut f[54..54 + plen];
    let at = match proto {
        6 if seg.len() >= 20 => 16,
        17 if seg.len() >= 8 => 6,
        58 if seg.len() >= 4 => 2,
        _ => return,
    };
    seg[at] = 0;
    seg[at + 1] = 0;
    let c = if partial && proto != 58 {
        checksum::partial(src, dst, proto, seg.len() as u16)
    } else {
        checksum::transport(src, dst, proto, seg)
    };
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

fn fix_checksums(f: &mut [u8], partial: bool) {
    if f.len() >= 14 && f[12] == 0x86 && f[13] == 0xdd {
        return fix_checksums_v6(f, partial);
    }
    if f.len() < 34 || f[12] != 0x08 || f[13] != 0x00 {
        return;
    }
    let ihl = ((f[14] & 0x0f) as usize) * 4;
    if ihl < 20 || f.len() < 14 + ihl {
        return;
    }
    f[24] = 0;
    f[25] = 0;
    let c = checksum::checksum(&f[14..14 + ihl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let total = u16::from_be_bytes([f[16], f[17]]) as usize;
    if total < ihl || f.len() < 14 + total {
        return;
    }
    let src = Ipv4Addr([f[26], f[27], f[28], f[29]]);
    let dst = Ipv4Addr([f[30], f[31], f[32], f[33]]);
    let proto = f[23];
    let seg = &mut f[14 + ihl..14 + total];
    let at = match proto {
        6 if seg.len() >= 20 => 16,
        17 if seg.len() >= 8 => 6,
        1 if seg.len() >= 8 => 2,
        _ => return,
    };
    seg[at] = 0;
    seg[at + 1] = 0;
    let c = if proto == 1 {
        checksum::checksum(seg)
    } else if partial {
        checksum::partial(src, dst, proto, seg.len() as u16)
    } else {
        checksum::transport(src, dst, proto, seg)
    };
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

fuzz_target!(|data: &[u8]| {
    let mut cfg = Config::new(OUR_MAC, OUR_IP, 24);
    cfg.accept_partial_checksums = data.first().is_some_and(|b| b & 0x80 != 0);
    cfg.ipv6 = Some(OUR_IP6);
    cfg.ipv6_dad = data.first().is_some_and(|b| b & 0x20 != 0);
    cfg.send_buffer = 4096;
    cfg.recv_buffer = 4096;
    cfg.udp_recv_buffer = 4096;
    cfg.max_connections = 64;
    cfg.keepalive = Some(wirespeed_tcpip::Keepalive {
        idle: std::time::Duration::from_secs(5),
        interval: std::time::Duration::from_secs(1),
        probes: 2,
    });
    let mut s = Stack::new(cfg);
    let listener = s.tcp_listen(80, 2).unwrap();
    let udp = s.udp_bind(53).unwrap();
    let mut now = Instant::from_millis(1_000);
    let mut conns: Vec<ConnId> = Vec::new();
    if let Ok(c) = s.tcp_connect_from(now, PEER_IP, 8080, 40000) {
        conns.push(c);
    }
    let mut frame = vec![0u8; 2048];
    let mut scratch = [0u8; 1600];
    let mut rest = data;
    while rest.len() >= 3 {
        let op = rest[0];
        let len = (u16::from_be_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3).min(frame.len());
        let body = &rest[3..3 + len];
        rest = &rest[3 + len..];
        now = now.add_micros((op >> 2) as u64 * 100);
        match op & 3 {
            0 => s.receive(now, body),
            1 => {
                let f = &mut frame[..len];
                f.copy_from_slice(body);
                fix_checksums(f, op & 0x40 != 0);
                s.receive(now, f);
            }
            2 => {
                let which = body.first().copied().unwrap_or(0);
                let pick = body.get(1).copied().unwrap_or(0) as usize;
                let c = if conns.is_empty() { None } else { Some(conns[pick % conns.len()]) };
                let peer: IpAddress = if pick % 2 == 1 { PEER_IP6.into() } else { PEER_IP.into() };
                match (which % 8, c) {
                    (0, _) => {
                        if let Ok(c) = s.tcp_accept(listener) {
                            conns.push(c);
                        }
                    }
                    (1, Some(c)) => {
                        let _ = s.tcp_send(c, &body[body.len().min(2)..]);
                    }
                    (2, Some(c)) => {
                        let _ = s.tcp_recv(c, &mut scratch);
                    }
                    (3, Some(c)) => {
                        let _ = s.tcp_close(c);
                    }
                    (4, Some(c)) => {
                        let _ = s.tcp_abort(c);
                    }
                    (5, Some(c)) => {
                        let _ = s.tcp_shutdown(c);
                    }
                    (6, _) => {
                        let port = u16::from_be_bytes([pick as u8, which]);
                        if let Ok(c) = s.tcp_connect(now, peer, port.max(1), |p| p % 2 == 0) {
                            conns.push(c);
                        }
                    }
                    (7, _) => {
                        let _ = s.udp_send_to(udp, peer, 5353, &body[body.len().min(2)..]);
                        let _ = s.udp_recv_from(udp, &mut scratch);
                    }
                    _ => {}
                }
            }
            _ => {
                let ms = u16::from_be_bytes([body.first().copied().unwrap_or(0), body.get(1).copied().unwrap_or(0)]);
                now = now.add_micros(ms as u64 * 1000);
            }
        }
        let _ = s.drain_events().count();
        s.transmit(now, &mut |fill: &mut dyn FnMut(&mut [u8]) -> usize| {
            let _ = fill(&mut scratch);
            true
        });
        let _ = s.poll_at();
    }
});
