//! Deterministic tests: two stacks wired back to back through an in-memory link that can
//! lose, duplicate, reorder and delay frames (seeded PRNG, virtual clock), plus
//! hand-crafted frames.

use crate::tcp::CongestionControl;
use crate::util::XorShift;
use crate::Error;
use crate::*;
use std::time::Duration;
use wirespeed_testkit::frame as kit;
use wirespeed_wire::tcp::flags;
use wirespeed_wire::*;

/// A test whose body runs once per congestion control algorithm: `per_cc! { fn name(cc)
/// { ... } }` defines `name::reno` and `name::cubic`, with `cc` the algorithm; the body builds
/// its stacks with `Pair::new_cc(cc)` or `config_cc(side, cc)`.
macro_rules! per_cc {
    ($(#[$attr:meta])* fn $name:ident($cc:ident) $body:block) => {
        $(#[$attr])*
        mod $name {
            use super::*;

            fn body($cc: CongestionAlgorithm) $body

            #[test]
            fn reno() {
                body(CongestionAlgorithm::Reno)
            }

            #[test]
            fn cubic() {
                body(CongestionAlgorithm::Cubic)
            }
        }
    };
}

mod checksums;
mod frames;
mod input_rules;
mod ip_options_echo;
mod ipv6;
mod lifecycle;
mod neighbours;
mod pmtu;
mod recovery;
mod transfer;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// Sees every frame (sending side, bytes); returns false to drop it.
pub(crate) type FrameFilter = Box<dyn FnMut(usize, &[u8]) -> bool>;

#[derive(Default, Clone, Copy)]
pub(crate) struct Impair {
    /// Per-mille probabilities.
    pub loss: u32,
    pub dup: u32,
    pub reorder: u32,
}

pub(crate) struct Pair {
    pub st: [Stack; 2],
    pub now: Instant,
    /// (deliver at, sequence for stable order, destination side, frame)
    queue: Vec<(Instant, u64, usize, Vec<u8>)>,
    seq: u64,
    pub rng: XorShift,
    pub impair: Impair,
    pub delay_us: u64,
    /// Drop every frame (link cut).
    pub cut: bool,
    /// Inspect/filter frames: return false to drop. (side sending, frame)
    pub filter: Option<FrameFilter>,
    /// Rewrite frames as they leave (side sending, frame), after `filter`.
    pub rewrite: Option<FrameRewrite>,
    /// The link's MTU, when it has one: longer frames are dropped, as a veth drops them, and
    /// counted in `oversized`.
    pub mtu: Option<usize>,
    pub oversized: u64,
}

/// Changes a frame in flight (sending side, bytes).
pub(crate) type FrameRewrite = Box<dyn FnMut(usize, &mut [u8])>;

pub(crate) fn config(side: usize) -> Config {
    let (mac, ip) = if side == 0 {
        (MAC_A, IP_A)
    } else {
        (MAC_B, IP_B)
    };
    let mut c = Config::new(mac, ip, 24);
    c.secret = 0x1234_5678 + side as u64;
    c
}

/// [`config`] with the congestion control algorithm `cc`.
pub(crate) fn config_cc(side: usize, cc: CongestionAlgorithm) -> Config {
    let mut c = config(side);
    c.congestion_control = cc;
    c
}

impl Pair {
    pub fn new() -> Pair {
        Pair::with(config(0), config(1))
    }

    /// Two stacks whose connections use `cc`.
    pub fn new_cc(cc: CongestionAlgorithm) -> Pair {
        Pair::with(config_cc(0, cc), config_cc(1, cc))
    }

    pub fn with(a: Config, b: Config) -> Pair {
        Pair {
            st: [Stack::new(a), Stack::new(b)],
            now: Instant::from_millis(1000),
            queue: Vec::new(),
            seq: 0,
            rng: XorShift(0x9e37_79b9),
            impair: Impair::default(),
            delay_us: 50,
            cut: false,
            filter: None,
            rewrite: None,
            mtu: None,
            oversized: 0,
        }
    }

    fn chance(&mut self, permille: u32) -> bool {
        permille > 0 && (self.rng.next() % 1000) < permille as u64
    }

    fn enqueue(&mut self, from: usize, mut frame: Vec<u8>) {
        if self.cut {
            return;
        }
        if let Some(f) = self.filter.as_mut() {
            if !f(from, &frame) {
                return;
            }
        }
        if let Some(r) = self.rewrite.as_mut() {
            r(from, &mut frame);
        }
        if self.mtu.is_some_and(|mtu| frame.len() > 14 + mtu) {
            self.oversized += 1;
            return;
        }
        if self.chance(self.impair.loss) {
            return;
        }
        let copies = if self.chance(self.impair.dup) { 2 } else { 1 };
        for _ in 0..copies {
            let mut at = self.now.add_micros(self.delay_us);
            if self.chance(self.impair.reorder) {
                at = at.add_micros(self.delay_us * 3 + self.rng.next() % 500);
            }
            self.seq += 1;
            self.queue.push((at, self.seq, 1 - from, frame.clone()));
        }
    }

    /// Delivers due frames, lets `app` act, transmits; advances the virtual clock.
    /// Returns true when `app` reports done before `max` of virtual time passed.
    pub fn run(&mut self, max: Duration, mut app: impl FnMut(&mut Pair) -> bool) -> bool {
        let deadline = self.now.add(max);
        loop {
            self.queue.sort_by_key(|&(at, seq, _, _)| (at, seq));
            let due = self
                .queue
                .iter()
                .take_while(|(at, ..)| *at <= self.now)
                .count();
            let frames: Vec<_> = self.queue.drain(..due).collect();
            for (_, _, to, f) in frames {
                let now = self.now;
                self.st[to].receive(now, &f);
            }
            if app(self) {
                return true;
            }
            for side in 0..2 {
                let mut sink = VecSink::new();
                let now = self.now;
                self.st[side].transmit(now, &mut sink);
                for f in sink.frames {
                    self.enqueue(side, f);
                }
            }
            let mut next = self.queue.iter().map(|q| q.0).min();
            for s in &self.st {
                if let Some(t) = s.poll_at() {
                    next = Some(next.map_or(t, |n: Instant| n.min(t)));
                }
            }
            let next = next
                .unwrap_or(self.now.add_micros(1000))
                .max(self.now.add_micros(1));
            if next > deadline {
                // Stop at the deadline so a later phase starts at a predictable time.
                self.now = deadline;
                return false;
            }
            self.now = next;
        }
    }

    /// b listens on 80, a connects; returns (client on a, server on b, listener).
    pub fn connect(&mut self) -> (ConnId, ConnId, ListenerId) {
        let l = self.st[1].tcp_listen(80, 16).unwrap();
        let now = self.now;
        let c = self.st[0].tcp_connect(now, IP_B, 80, |_| true).unwrap();
        let mut server = None;
        let ok = self.run(Duration::from_secs(30), |p| {
            if server.is_none() {
                server = p.st[1].tcp_accept(l).ok();
            }
            server.is_some() && p.st[0].tcp_state(c) == Ok(TcpState::Established)
        });
        assert!(
            ok,
            "handshake did not complete: {:?}",
            self.st[0].tcp_state(c)
        );
        (c, server.unwrap(), l)
    }
}

/// Sends `total` bytes of a deterministic pattern from side `from` and checks them bit-exact
/// at the other side; both directions close afterwards.
fn transfer(p: &mut Pair, from: usize, tx: ConnId, rx: ConnId, total: usize, max: Duration) {
    transfer_within(p, from, tx, rx, total, max, |_| {});
}

/// [`transfer`] within 60 s of virtual time, with `each` run on every step.
fn transfer_with(
    p: &mut Pair,
    from: usize,
    tx: ConnId,
    rx: ConnId,
    total: usize,
    each: impl FnMut(&mut Pair),
) {
    transfer_within(p, from, tx, rx, total, Duration::from_secs(60), each);
}

fn transfer_within(
    p: &mut Pair,
    from: usize,
    tx: ConnId,
    rx: ConnId,
    total: usize,
    max: Duration,
    mut each: impl FnMut(&mut Pair),
) {
    let pattern = |i: usize| ((i as u64).wrapping_mul(2654435761) >> 7) as u8;
    let mut sent = 0usize;
    let mut received = 0usize;
    let mut chunk = vec![0u8; 32 * 1024];
    let mut buf = vec![0u8; 32 * 1024];
    let mut closed = false;
    let mut eof = false;
    let ok = p.run(max, |p| {
        each(p);
        while sent < total {
            let n = (total - sent).min(chunk.len());
            for (i, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern(sent + i);
            }
            match p.st[from].tcp_send(tx, &chunk[..n]) {
                Ok(k) => sent += k,
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        if sent == total && !closed {
            p.st[from].tcp_shutdown(tx).unwrap();
            closed = true;
        }
        loop {
            match p.st[1 - from].tcp_recv(rx, &mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    for (i, &b) in buf[..n].iter().enumerate() {
                        assert_eq!(b, pattern(received + i), "byte {} corrupted", received + i);
                    }
                    received += n;
                }
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("recv: {e}"),
            }
        }
        eof
    });
    assert!(
        ok,
        "transfer stalled: sent {sent}, received {received} of {total}"
    );
    assert_eq!(received, total);
}

/// Sends one short message from side 0 on `c` with its first `lost` transmissions dropped,
/// and runs until side 1 has read it all on `s`.
fn send_through_losses(p: &mut Pair, c: ConnId, s: ConnId, lost: usize) {
    let mut dropped = 0;
    p.filter = Some(Box::new(move |from, f| {
        if from == 0 && f.len() > 60 && dropped < lost {
            dropped += 1;
            return false;
        }
        true
    }));
    p.st[0].tcp_send(c, b"lost once").unwrap();
    let mut got = Vec::new();
    assert!(p.run(Duration::from_secs(10), |p| {
        let mut b = [0u8; 64];
        if let Ok(n) = p.st[1].tcp_recv(s, &mut b) {
            got.extend_from_slice(&b[..n]);
        }
        got == b"lost once"
    }));
}

/// A broadcast ARP message from A (MAC_A) as `sender_ip`, asking for `target_ip`, padded
/// to the 60-byte Ethernet minimum.
fn arp_frame(op: ArpOperation, sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Vec<u8> {
    arp_frame_from(op, MAC_A, sender_ip, target_ip)
}

/// A broadcast ARP message from `sender_mac`, which says it holds `sender_ip`.
fn arp_frame_from(
    op: ArpOperation,
    sender_mac: MacAddr,
    sender_ip: Ipv4Addr,
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    let a = kit::arp_packet(
        op.into(),
        sender_mac.0,
        sender_ip.into(),
        [0; 6],
        target_ip.into(),
    );
    let mut f = kit::ethernet(MacAddr::BROADCAST.0, sender_mac.0, kit::ETH_P_ARP, &a);
    f.resize(60, 0);
    f
}

/// A hand-built TCP segment from A to B.
fn segment(sport: u16, dport: u16, seq: u32, ack: Option<u32>, fl: u8, payload: &[u8]) -> Vec<u8> {
    let repr = TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq: SeqNumber(seq),
        ack: ack.map(SeqNumber),
        flags: fl,
        window: 65535,
        options: TcpOptions::default(),
    };
    frame(&repr, payload)
}

/// A SYN from the peer's port 1000 (ISN 500, window 65535) to our port 80 offering `options`.
fn peer_syn(options: TcpOptions) -> TcpRepr {
    TcpRepr {
        src_port: 1000,
        dst_port: 80,
        seq: SeqNumber(500),
        ack: None,
        flags: flags::SYN,
        window: 65535,
        options,
    }
}

/// A bare segment (no payload) from the peer's port 1000 to our port 80.
fn peer_segment(seq: u32, ack: Option<u32>, fl: u8, window: u16, options: TcpOptions) -> Vec<u8> {
    let repr = TcpRepr {
        src_port: 1000,
        dst_port: 80,
        seq: SeqNumber(seq),
        ack: ack.map(SeqNumber),
        flags: fl,
        window,
        options,
    };
    frame(&repr, &[])
}

/// `repr` and `payload` in an Ethernet/IPv4 frame from A to B (identification 1, DF),
/// checksummed.
fn frame(repr: &TcpRepr, payload: &[u8]) -> Vec<u8> {
    let l4 = kit::L4::Tcp(kit::Tcp::from_repr(repr, payload));
    ipv4_frame((MAC_A, IP_A), (MAC_B, IP_B), &ip_ident(1), &l4)
}

/// `l4` in an Ethernet/IPv4 frame from `src` to `dst` (MAC and IP each) with the header `h`.
fn ipv4_frame(
    src: (MacAddr, Ipv4Addr),
    dst: (MacAddr, Ipv4Addr),
    h: &kit::IpHeader,
    l4: &kit::L4,
) -> Vec<u8> {
    let p = kit::ip_packet_with(src.1 .0.into(), dst.1 .0.into(), l4, h);
    kit::eth(dst.0 .0, src.0 .0, false, &p)
}

/// An IPv4 header with DF set, TTL 64 and the identification `ident`.
fn ip_ident(ident: u16) -> kit::IpHeader {
    kit::IpHeader {
        ident,
        ..kit::IpHeader::default()
    }
}

/// A connection accepted on port 80 from a peer (port 1000, ISN 500) that offered SACK.
/// Returns it and our ISS.
fn accept_with_sack(s: &mut Stack, now: Instant) -> (ConnId, u32) {
    let l = s.tcp_listen(80, 4).unwrap();
    let repr = peer_syn(TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..Default::default()
    });
    s.receive(now, &frame(&repr, &[]));
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let iss = parse_out(&sink.frames[0]).0.seq.0;
    s.receive(now, &segment(1000, 80, 501, Some(iss + 1), flags::ACK, &[]));
    (s.tcp_accept(l).unwrap(), iss)
}

fn parse_out(f: &[u8]) -> (TcpRepr, Vec<u8>) {
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    let t = TcpPacket::new_checked(ip.payload()).unwrap();
    (
        TcpRepr::parse(&t, ip.src(), ip.dst()).unwrap(),
        t.payload().to_vec(),
    )
}

/// An RST with the exact expected sequence number, injected from the peer's address.
fn inject_rst(p: &mut Pair, side: usize, conn: ConnId) {
    let t = &p.st[side].tcp.conns[conn.idx as usize];
    let repr = TcpRepr {
        src_port: t.remote_port,
        dst_port: t.local_port,
        seq: t.rcv_nxt,
        ack: None,
        flags: flags::RST,
        window: 0,
        options: TcpOptions::default(),
    };
    let (from, to) = if side == 0 {
        ((MAC_B, IP_B), (MAC_A, IP_A))
    } else {
        ((MAC_A, IP_A), (MAC_B, IP_B))
    };
    let l4 = kit::L4::Tcp(kit::Tcp::from_repr(&repr, &[]));
    let f = ipv4_frame(from, to, &ip_ident(7), &l4);
    let now = p.now;
    p.st[side].receive(now, &f);
}

fn is_pure_ack(f: &[u8]) -> bool {
    f.len() >= 54
        && f[12..14] == [0x08, 0x00]
        && f[47] == flags::ACK
        && u16::from_be_bytes([f[16], f[17]]) as usize == 20 + ((f[46] >> 4) as usize) * 4
}

/// The TCP/UDP checksum field of an untagged IPv4 frame: its offset in the frame, and the
/// transport segment's (source, destination, protocol, length).
fn transport_checksum_field(f: &[u8]) -> Option<(usize, Ipv4Addr, Ipv4Addr, u8, u16)> {
    let ip = Ipv4Packet::new_checked(f.get(14..)?).ok()?;
    let at = 14 + ip.header_len();
    let len = ip.payload().len() as u16;
    match ip.protocol() {
        IpProtocol::Tcp => Some((at + 16, ip.src(), ip.dst(), 6, len)),
        IpProtocol::Udp => Some((at + 6, ip.src(), ip.dst(), 17, len)),
        _ => None,
    }
}

/// Leaves the frame's TCP/UDP checksum as a sender with checksum offload does before the
/// device completes it: the folded pseudo-header sum, not complemented.
fn make_partial(f: &mut [u8]) {
    if let Some((at, src, dst, proto, len)) = transport_checksum_field(f) {
        let partial = checksum::partial(src, dst, proto, len);
        f[at..at + 2].copy_from_slice(&partial.to_be_bytes());
    }
}

/// A checksum field that is neither complete nor partial.
fn corrupt_checksum(f: &mut [u8]) {
    if let Some((at, src, dst, proto, len)) = transport_checksum_field(f) {
        let partial = checksum::partial(src, dst, proto, len);
        let bad = (partial ^ 0x0100).max(1);
        f[at..at + 2].copy_from_slice(&bad.to_be_bytes());
    }
}

/// Every TCP/UDP frame the stack sends carries a complete checksum (we never rely on
/// offload), and its IPv4 header checksum verifies.
fn assert_fully_checksummed(f: &[u8]) {
    if f.len() < 14 + 20 || f[12..14] != [0x08, 0x00] {
        return; // not IPv4 (ARP)
    }
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    Ipv4Repr::parse(&ip).expect("IPv4 header checksum");
    let state = match ip.protocol() {
        IpProtocol::Tcp => TcpPacket::new_checked(ip.payload())
            .unwrap()
            .checksum_state(ip.src(), ip.dst()),
        IpProtocol::Udp => {
            let u = UdpPacket::new_checked(ip.payload()).unwrap();
            assert_ne!(u.checksum(), 0, "UDP sent without a checksum");
            u.checksum_state(ip.src(), ip.dst())
        }
        _ => return,
    };
    assert_eq!(state, checksum::TransportChecksum::Complete);
}

fn accepting_partial(side: usize) -> Config {
    let mut c = config(side);
    c.accept_partial_checksums = true;
    c
}
