//! The per-shard stack: frame dispatch (Ethernet, ARP, IPv4; IPv6 in `ipv6.rs`), the frame
//! queues, next-hop resolution (ARP here, NDP in `ndp.rs`), events. It owns TCP ([`Tcp`]) and UDP ([`Udp`]), calls them, and
//! carries out what they return: control segments to queue, events to report. Neither
//! calls back into the stack.

use crate::addr6::Addrs6;
use crate::frame_queue::FrameQueue;
use crate::icmp::unreachable;
use crate::neighbour::{Learned, NeighbourCache, MAX_TRIES};
use crate::tcp::{Actions, CtrlSegment, Ctx, OutputReady, Tcp};
use crate::udp::{Udp, UdpInput};
use crate::{wall_clock_ms, Config, Event, Handle, Instant, IpHeader, Stats, TxSink};
use std::collections::VecDeque;
use wirespeed_wire::icmpv4::error_type;
use wirespeed_wire::ip_options_echo::{self, EchoedOptions};
use wirespeed_wire::tcp::{fill_checksum, fill_partial_checksum};
use wirespeed_wire::{
    arp, ethernet, ip_options, ipv4, ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetFrame,
    EthernetRepr, IpAddress, IpProtocol, IpRepr, Ipv4Addr, Ipv4Packet, Ipv4Repr, MacAddr,
};

/// Frames the stack can queue outside connections (ARP, NDP, ICMP, RSTs, SYN cookies, UDP).
const CTRL_FRAMES: usize = 256;
/// IGMP's protocol number: Linux has a handler for it (no "protocol unreachable").
const IGMP: u8 = 2;
/// Frames parked until ARP or NDP resolves their next hop.
const PENDING_FRAMES: usize = 32;

/// A per-shard TCP/IP stack. See the crate documentation for how to drive it.
pub struct Stack {
    pub(crate) cfg: Config,
    /// The MTU the stack was made with: its frame buffers hold that much, so
    /// [`Stack::set_mtu`] never goes above it.
    mtu_limit: usize,
    pub(crate) stats: Stats,
    pub(crate) now: Instant,
    pub(crate) eth_len: usize,
    pub(crate) neigh: NeighbourCache,
    pub(crate) ctrl: FrameQueue,
    pub(crate) pending: FrameQueue,
    pub(crate) events: VecDeque<Event>,
    pub(crate) tcp: Tcp,
    pub(crate) udp: Udp,
    /// What the last TCP call asked for; emptied by `apply_actions` right after it.
    actions: Actions,
    pub(crate) ip_ident: u16,
    pub(crate) icmp_budget: crate::icmp::ErrorBudget,
    pub(crate) icmp_peer_limits: crate::icmp::PeerLimits,
    /// IPv4 reassembly queues (`reassembly.rs`).
    pub(crate) frag: crate::reassembly::Reassembly,
    /// Our IPv6 link-local address and the DAD of both (`addr6.rs`, `ndp.rs`).
    pub(crate) addrs6: Addrs6,
}

impl Stack {
    /// Creates a stack; tables are sized from `cfg.max_connections` up front.
    pub fn new(mut cfg: Config) -> Stack {
        cfg.mtu = cfg.mtu.clamp(576, 9000);
        cfg.prefix_len = cfg.prefix_len.min(32);
        if cfg.ephemeral_ports.0 == 0 || cfg.ephemeral_ports.0 > cfg.ephemeral_ports.1 {
            cfg.ephemeral_ports = (32768, 60999);
        }
        cfg.send_buffer = cfg.send_buffer.clamp(1024, 1 << 30);
        cfg.recv_buffer = cfg.recv_buffer.clamp(1024, 1 << 30);
        cfg.udp_recv_buffer = cfg.udp_recv_buffer.clamp(2048, 1 << 30);
        let eth_len = ethernet::HEADER_LEN
            + if cfg.vlan_id.is_some() {
                ethernet::VLAN_TAG_LEN
            } else {
                0
            };
        let frame_len = eth_len + cfg.mtu;
        Stack {
            neigh: NeighbourCache::new(cfg.secret ^ 0xa5a5),
            ctrl: FrameQueue::new(CTRL_FRAMES, frame_len),
            pending: FrameQueue::new(PENDING_FRAMES, frame_len),
            events: VecDeque::with_capacity(1024),
            tcp: Tcp::new(&cfg),
            udp: Udp::new(&cfg),
            actions: Actions::with_capacity(64),
            ip_ident: cfg.secret as u16,
            icmp_budget: Default::default(),
            icmp_peer_limits: crate::icmp::PeerLimits::new(cfg.secret ^ 0x1c3b),
            frag: crate::reassembly::Reassembly::new(&cfg),
            addrs6: Addrs6::new(&cfg),
            stats: Stats::default(),
            now: Instant::ZERO,
            eth_len,
            mtu_limit: cfg.mtu,
            cfg,
        }
    }

    /// Follows a change of the link's MTU: connections opened from now on offer and use an
    /// MSS for `mtu`, at most the MTU the stack was made with (its buffers' size), at least
    /// 576. Open connections keep the MSS they agreed. Returns the MTU now in use.
    pub fn set_mtu(&mut self, mtu: usize) -> usize {
        self.cfg.mtu = mtu.clamp(576, self.mtu_limit);
        self.cfg.mtu
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters, including one per drop reason.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Size the buffers handed out by a [`TxSink`] must have.
    pub fn max_frame_len(&self) -> usize {
        self.eth_len + self.cfg.mtu
    }

    /// Adds a permanent neighbour entry (no ARP or NDP needed for `ip`; e.g. the gateway of
    /// a benchmark link). Returns false when the neighbour cache is full.
    pub fn neighbour_add_static(&mut self, ip: impl Into<IpAddress>, mac: MacAddr) -> bool {
        let (ip, now) = (ip.into(), self.now);
        let learned = self.neigh.insert(ip, mac, Instant::NEVER, now);
        self.neighbour_learned(ip, mac, learned)
    }

    /// Bytes of TCP send and receive buffers held, by connections and spare; a half-open
    /// connection holds none (docs/TCPIP.md, "Memory under attack").
    pub fn tcp_buffer_bytes(&self) -> usize {
        self.tcp.buffer_bytes()
    }

    /// Number of TCP connections held (all states).
    pub fn connection_count(&self) -> usize {
        self.tcp.connection_count()
    }

    /// Processes one received Ethernet frame. Malformed frames are counted and dropped.
    pub fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.now = self.now.max(now);
        self.stats.rx_frames += 1;
        let eth = match EthernetFrame::new_checked(frame) {
            Ok(f) => f,
            Err(_) => {
                self.stats.eth_truncated += 1;
                return;
            }
        };
        if eth.vlan_id() != self.cfg.vlan_id {
            self.stats.eth_vlan_mismatch += 1;
            return;
        }
        // Group addresses (broadcast, multicast) are taken as a device without a multicast
        // filter takes them; TCP then refuses what was not sent to us alone.
        let dst = eth.dst();
        let to_host = dst == self.cfg.mac;
        if !to_host && !dst.is_multicast() {
            self.stats.eth_not_for_us += 1;
            return;
        }
        let src_mac = eth.src();
        match eth.ethertype() {
            EtherType::Arp => self.arp_input(eth.payload()),
            EtherType::Ipv4 => self.ipv4_input(src_mac, to_host, eth.payload()),
            EtherType::Ipv6 if self.cfg.ipv6.is_some() => {
                self.ipv6_input(src_mac, to_host, eth.payload())
            }
            EtherType::Ipv6 => self.stats.ipv6_unsupported += 1,
            _ => self.stats.eth_unknown_type += 1,
        }
    }

    /// IPv4 input (`to_host`: the frame was sent to our MAC alone): the checks in Linux's
    /// order (martians at the route lookup, then options, then the protocol's own).
    pub(crate) fn ipv4_input(&mut self, src_mac: MacAddr, to_host: bool, data: &[u8]) {
        let pkt = match Ipv4Packet::new_checked(data) {
            Ok(p) => p,
            Err(wirespeed_wire::Error::Truncated) => {
                self.stats.ip_truncated += 1;
                return;
            }
            Err(_) => {
                self.stats.ip_malformed += 1;
                return;
            }
        };
        // Fragments too: checked like any datagram, then queued for reassembly below.
        let ip = match Ipv4Repr::parse_fragment(&pkt) {
            Ok(r) => r,
            Err(wirespeed_wire::Error::Checksum) => {
                self.stats.ip_bad_checksum += 1;
                return;
            }
            Err(_) => {
                self.stats.ip_malformed += 1;
                return;
            }
        };
        if src_mac.is_multicast() || martian_source(ip.src) || ip.src == self.cfg.ipv4 {
            self.stats.ip_bad_source += 1;
            return;
        }
        if ip.dst != self.cfg.ipv4 {
            self.stats.ip_not_for_us += 1;
            return;
        }
        // Linux takes its subnet's broadcast address as a source (a broadcast route, not a
        // martian) and answers it at that route's neighbour, the link's broadcast address.
        let src_mac = if self.subnet_broadcast() == Some(ip.src) {
            MacAddr::BROADCAST
        } else {
            src_mac
        };
        let header = &data[..pkt.header_len()];
        match ip_options::check(&header[ipv4::HEADER_LEN..]) {
            ip_options::Verdict::Accept => {}
            ip_options::Verdict::SourceRouted => {
                self.stats.ip_source_routed += 1;
                return;
            }
            ip_options::Verdict::ParameterProblem(at) => {
                self.stats.ip_bad_options += 1;
                if to_host {
                    let dgram = &data[..pkt.total_len()];
                    let (ty, word) = (error_type::PARAMETER_PROBLEM, (at as u32) << 24);
                    self.send_icmp_error(src_mac, &ip, dgram, ty, 0, word);
                }
                return;
            }
        }
        if pkt.is_fragment() {
            return self.ipv4_fragment(src_mac, to_host, &pkt);
        }
        let payload = pkt.payload();
        // Linux answers only along a route back, and opens no connection without one.
        let answerable = self.next_hop(ip.src.into()).is_some();
        let hdr = IpHeader {
            src: ip.src.into(),
            dst: ip.dst.into(),
            ecn: ip.dscp_ecn & 3,
        };
        match ip.protocol {
            IpProtocol::Tcp if !to_host => self.stats.tcp_not_host_mac += 1,
            IpProtocol::Tcp | IpProtocol::Icmp if !answerable => self.stats.ip_no_route_back += 1,
            IpProtocol::Tcp => {
                let opts = self.echo_options(&header[ipv4::HEADER_LEN..]);
                self.with_tcp(|tcp, cx| {
                    cx.reply_opts = opts;
                    tcp.input(cx, src_mac, &hdr, payload)
                })
            }
            IpProtocol::Udp => match self.udp.input(&self.cfg, &mut self.stats, &hdr, payload) {
                UdpInput::Event(ev) => self.events.push_back(ev),
                UdpInput::NoSocket if to_host && answerable => {
                    let dgram = &data[..pkt.total_len()];
                    self.send_unreachable(src_mac, &ip, dgram, unreachable::PORT);
                }
                UdpInput::NoSocket | UdpInput::Taken => {}
            },
            IpProtocol::Icmp => {
                let opts = self.echo_options(&header[ipv4::HEADER_LEN..]);
                self.icmp_input(src_mac, &ip, opts, payload)
            }
            // IGMP: Linux's igmp_rcv takes a unicast query and answers nothing.
            IpProtocol::Unknown(IGMP) => self.stats.ip_unknown_protocol += 1,
            _ => {
                // No handler: Linux's ip_protocol_deliver_rcu answers protocol unreachable.
                self.stats.ip_unknown_protocol += 1;
                if to_host && answerable {
                    let dgram = &data[..pkt.total_len()];
                    self.send_unreachable(src_mac, &ip, dgram, unreachable::PROTOCOL);
                }
            }
        }
    }

    /// ARP input, with Linux's `arp_process` checks: a target that is multicast or loopback
    /// is ignored; a probe (sender 0.0.0.0, RFC 5227) for our address is answered and
    /// teaches nothing; a sender that is our own address or a martian one is neither
    /// answered nor learned (Linux checks it as a route source).
    fn arp_input(&mut self, data: &[u8]) {
        let pkt = match ArpPacket::new_checked(data) {
            Ok(p) => p,
            Err(_) => {
                self.stats.arp_malformed += 1;
                return;
            }
        };
        let a = match ArpRepr::parse(&pkt) {
            Ok(a) => a,
            Err(_) => {
                self.stats.arp_unsupported += 1;
                return;
            }
        };
        // Linux's arp_process does not look at the sender's MAC: a group address is answered.
        if a.target_ip.is_multicast() || a.target_ip.0[0] == 127 {
            self.stats.arp_malformed += 1;
            return;
        }
        if a.sender_ip == Ipv4Addr::UNSPECIFIED {
            if a.operation == ArpOperation::Request && a.target_ip == self.cfg.ipv4 {
                self.send_arp_reply(a.sender_mac, Ipv4Addr::UNSPECIFIED);
            }
            return;
        }
        if martian_source(a.sender_ip) || a.sender_ip == self.cfg.ipv4 {
            self.stats.arp_bad_sender += 1;
            return;
        }
        let for_us = a.target_ip == self.cfg.ipv4;
        let now = self.now;
        // RFC 826: refresh an entry we already have; create one only when addressed to us.
        let sender = IpAddress::V4(a.sender_ip);
        if for_us || self.neigh.contains(sender) {
            let expires = now.add(self.cfg.arp_timeout);
            let learned = self.neigh.insert(sender, a.sender_mac, expires, now);
            self.neighbour_learned(sender, a.sender_mac, learned);
        }
        if for_us && a.operation == ArpOperation::Request {
            self.send_arp_reply(a.sender_mac, a.sender_ip);
        }
    }

    /// Answers a request for our address from `mac`, which asked as `ip`.
    fn send_arp_reply(&mut self, mac: MacAddr, ip: Ipv4Addr) {
        let reply = ArpRepr {
            operation: ArpOperation::Reply,
            sender_mac: self.cfg.mac,
            sender_ip: self.cfg.ipv4,
            target_mac: mac,
            target_ip: ip,
        };
        let eth = self.eth_repr(mac, EtherType::Arp);
        if self
            .ctrl
            .push_with(ip.into(), |buf| emit_arp(buf, &eth, &reply))
        {
            self.stats.arp_replies_sent += 1;
        } else {
            self.stats.ctrl_queue_full += 1;
        }
    }

    /// Follows what the neighbour cache did with `ip` at `mac` (from ARP, NDP or a static
    /// entry); false when the cache was full. A neighbour that moved sends every connection
    /// through resolution again before its next segment (docs/TCPIP.md, "Neighbours that
    /// move").
    pub(crate) fn neighbour_learned(&mut self, ip: IpAddress, mac: MacAddr, l: Learned) -> bool {
        match l {
            Learned::CacheFull => {
                self.stats.arp_cache_full += 1;
                return false;
            }
            Learned::Moved => {
                self.stats.neighbour_moved += 1;
                self.tcp.neighbour_moved();
            }
            Learned::Entered => {}
        }
        self.neighbour_resolved(ip, mac);
        true
    }

    /// A connection to `remote` times out unanswered: asks the link again for its next hop's
    /// MAC, which stays in use meanwhile, so that a neighbour that moved without a gratuitous
    /// ARP is found (docs/TCPIP.md, "Neighbours that move"). Once a second per neighbour.
    fn recheck_next_hop(&mut self, remote: IpAddress) {
        let Some(hop) = self.next_hop(remote) else {
            return;
        };
        let now = self.now;
        if !self.neigh.resolving.contains_key(&hop)
            && self.neigh.may_recheck(hop, now)
            && self.neigh.start_resolving(hop, now, self.cfg.arp_retry)
        {
            self.stats.neighbour_rechecks += 1;
            self.solicit(hop);
        }
    }

    /// A next hop resolved: release parked frames and connections waiting for it.
    pub(crate) fn neighbour_resolved(&mut self, ip: IpAddress, mac: MacAddr) {
        // Rare path (once per resolution): copying through a Vec keeps the borrows simple.
        for _ in 0..self.pending.len() {
            let Some((frame, hop)) = self.pending.front() else {
                break;
            };
            let mut f = frame.to_vec();
            self.pending.pop();
            let copy = |f: &[u8], buf: &mut [u8]| {
                let n = f.len().min(buf.len());
                buf[..n].copy_from_slice(&f[..n]);
                n
            };
            if hop == ip {
                f[0..6].copy_from_slice(&mac.0);
                if !self.ctrl.push_with(hop, |buf| copy(&f, buf)) {
                    self.stats.ctrl_queue_full += 1;
                }
            } else {
                self.pending.push_with(hop, |buf| copy(&f, buf));
            }
        }
        self.tcp.neighbour_resolved();
    }

    /// Our subnet's directed broadcast address (none on a /31 or /32).
    pub(crate) fn subnet_broadcast(&self) -> Option<Ipv4Addr> {
        let host_bits = 32 - u32::from(self.cfg.prefix_len.min(32));
        (host_bits >= 2)
            .then(|| Ipv4Addr::from_u32(self.cfg.ipv4.to_u32() | ((1u32 << host_bits) - 1)))
    }

    /// The next hop for `dst`: itself on-link (for IPv6 also every link-local address),
    /// else the gateway (None: unroutable).
    pub(crate) fn next_hop(&self, dst: IpAddress) -> Option<IpAddress> {
        match dst {
            IpAddress::V4(d) if d.same_subnet(self.cfg.ipv4, self.cfg.prefix_len) => Some(dst),
            IpAddress::V4(_) => self.cfg.gateway.map(IpAddress::V4),
            IpAddress::V6(d) => {
                let ours = self.cfg.ipv6?;
                if d.is_link_local() || d.same_prefix(ours, self.cfg.ipv6_prefix_len) {
                    Some(dst)
                } else {
                    self.cfg.ipv6_gateway.map(IpAddress::V6)
                }
            }
        }
    }

    /// Looks up the MAC of `hop`, starting resolution (and queueing an ARP request or a
    /// neighbour solicitation) on a miss.
    pub(crate) fn resolve(&mut self, hop: IpAddress) -> Option<MacAddr> {
        match hop {
            IpAddress::V4(Ipv4Addr::BROADCAST) => return Some(MacAddr::BROADCAST),
            IpAddress::V6(a) if a.is_multicast() => return Some(a.multicast_mac()),
            _ => {}
        }
        let now = self.now;
        if let Some(m) = self.neigh.lookup(hop, now) {
            return Some(m);
        }
        if self.neigh.start_resolving(hop, now, self.cfg.arp_retry) {
            self.solicit(hop);
        }
        None
    }

    /// Asks the link for `hop`'s MAC: ARP or a neighbour solicitation.
    fn solicit(&mut self, hop: IpAddress) {
        match hop {
            IpAddress::V4(a) => self.send_arp_request(a),
            IpAddress::V6(a) => self.send_neighbour_solicitation(a),
        }
    }

    fn send_arp_request(&mut self, ip: Ipv4Addr) {
        let req = ArpRepr {
            operation: ArpOperation::Request,
            sender_mac: self.cfg.mac,
            sender_ip: self.cfg.ipv4,
            target_mac: MacAddr::ZERO,
            target_ip: ip,
        };
        let eth = self.eth_repr(MacAddr::BROADCAST, EtherType::Arp);
        if self
            .ctrl
            .push_with(ip.into(), |buf| emit_arp(buf, &eth, &req))
        {
            self.stats.arp_requests_sent += 1;
        } else {
            self.stats.ctrl_queue_full += 1;
        }
    }

    /// Retries or abandons neighbour resolutions that are due.
    fn neighbour_poll(&mut self, now: Instant) {
        if self.neigh.resolving.is_empty() {
            return;
        }
        let mut retry = [IpAddress::default(); 8];
        let mut n = 0;
        let mut gave_up = false;
        let retry_every = self.cfg.arp_retry;
        self.neigh.resolving.retain(|&ip, r| {
            if r.next_try > now {
                return true;
            }
            if r.tries >= MAX_TRIES {
                gave_up = true;
                return false;
            }
            if n < retry.len() {
                retry[n] = ip;
                n += 1;
                r.tries += 1;
                r.next_try = now.add(retry_every);
            }
            true
        });
        for &ip in &retry[..n] {
            self.solicit(ip);
        }
        if gave_up {
            // Drop parked frames whose resolution was abandoned.
            for _ in 0..self.pending.len() {
                let Some((frame, hop)) = self.pending.front() else {
                    break;
                };
                if self.neigh.resolving.contains_key(&hop) {
                    let f = frame.to_vec();
                    self.pending.pop();
                    self.pending.push_with(hop, |buf| {
                        let n = f.len().min(buf.len());
                        buf[..n].copy_from_slice(&f[..n]);
                        n
                    });
                } else {
                    self.pending.pop();
                    self.stats.arp_pending_dropped += 1;
                }
            }
        }
    }

    pub(crate) fn eth_repr(&self, dst: MacAddr, ethertype: EtherType) -> EthernetRepr {
        EthernetRepr {
            dst,
            src: self.cfg.mac,
            vlan_id: self.cfg.vlan_id,
            ethertype,
        }
    }

    /// The header of a datagram we send from `src` to `dst`.
    pub(crate) fn ip_repr(
        &mut self,
        src: IpAddress,
        dst: IpAddress,
        protocol: IpProtocol,
        payload_len: usize,
    ) -> IpRepr {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        IpRepr::new(src, dst, protocol, payload_len, 0, self.ip_ident)
    }

    /// Queues a frame for `dst` built by `fill(buf, l2_len)` (which returns the total length),
    /// parking it until ARP resolves the next hop when needed.
    pub(crate) fn send_ip_frame(
        &mut self,
        dst: IpAddress,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> bool {
        let Some(hop) = self.next_hop(dst) else {
            return false;
        };
        let ethertype = if dst.is_v6() {
            EtherType::Ipv6
        } else {
            EtherType::Ipv4
        };
        match self.resolve(hop) {
            Some(mac) => {
                let eth = self.eth_repr(mac, ethertype);
                let ok = self.ctrl.push_with(hop, |buf| {
                    let _ = eth.emit(buf);
                    fill(buf)
                });
                if !ok {
                    self.stats.ctrl_queue_full += 1;
                }
                ok
            }
            None => {
                let eth = self.eth_repr(MacAddr::ZERO, ethertype);
                let ok = self.pending.push_with(hop, |buf| {
                    let _ = eth.emit(buf);
                    fill(buf)
                });
                if !ok {
                    self.stats.arp_pending_dropped += 1;
                }
                ok
            }
        }
    }

    /// Runs due timers and writes every pending frame into `sink` until it has no room.
    /// Returns the number of frames written.
    pub fn transmit<S: TxSink + ?Sized>(&mut self, now: Instant, sink: &mut S) -> usize {
        self.now = self.now.max(now);
        let now = self.now;
        let before = self.stats.tx_frames;
        self.with_tcp(|tcp, cx| tcp.run_timers(cx, now));
        self.neighbour_poll(now);
        self.dad_poll(now);
        self.expire_fragments(now);
        while let Some((frame, _)) = self.ctrl.front() {
            let mut too_small = false;
            let ok = sink.tx_frame(&mut |buf: &mut [u8]| {
                if buf.len() < frame.len() {
                    too_small = true;
                    return 0;
                }
                buf[..frame.len()].copy_from_slice(frame);
                frame.len()
            });
            if !ok {
                self.stats.tx_sink_full += 1;
                return (self.stats.tx_frames - before) as usize;
            }
            if too_small {
                self.stats.tx_buffer_too_small += 1;
            } else {
                self.stats.tx_frames += 1;
            }
            self.ctrl.pop();
        }
        let list = self.tcp.take_output_list();
        let mut stopped_at = list.len();
        for (i, &(idx, gen)) in list.iter().enumerate() {
            match self.tcp.output_ready(idx, gen) {
                OutputReady::Skip => continue,
                OutputReady::Ready => {}
                OutputReady::Unrouted(remote) => {
                    let Some(hop) = self.next_hop(remote) else {
                        self.with_tcp(|tcp, cx| tcp.abort_unroutable(cx, idx));
                        continue;
                    };
                    match self.resolve(hop) {
                        Some(mac) => self.tcp.set_peer_mac(idx, mac),
                        None => {
                            self.tcp.wait_for_arp(idx);
                            continue;
                        }
                    }
                }
            }
            if !self.with_tcp(|tcp, cx| tcp.output(cx, idx, sink)) {
                self.tcp.output_blocked(idx, gen);
                stopped_at = i;
                break;
            }
        }
        self.tcp.return_output_list(list, stopped_at);
        (self.stats.tx_frames - before) as usize
    }

    /// When [`Stack::transmit`] should next be called: now (the last time seen) when output
    /// is pending, the earliest timer otherwise, `None` when idle. Early wake-ups are
    /// harmless.
    pub fn poll_at(&self) -> Option<Instant> {
        if !self.ctrl.is_empty() || self.tcp.has_output() {
            return Some(self.now);
        }
        let t = self.tcp.next_timer();
        let a = self
            .neigh
            .next_deadline()
            .into_iter()
            .chain(self.frag.next_deadline())
            .chain(self.dad_deadline())
            .min();
        match (t, a) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }

    /// Runs `f` on TCP with what it needs from the stack, then carries out the actions it
    /// left: control segments into the control queue (or parked for ARP), events into the
    /// event queue. Applied after every call, so frames and events keep their order.
    pub(crate) fn with_tcp<R>(&mut self, f: impl FnOnce(&mut Tcp, &mut Ctx<'_>) -> R) -> R {
        let link_local = self.usable_link_local();
        let mut cx = Ctx {
            cfg: &self.cfg,
            stats: &mut self.stats,
            now: self.now,
            ip_ident: &mut self.ip_ident,
            out: &mut self.actions,
            ecn: ipv4::ecn::NOT_ECT,
            link_local,
            reply_opts: Ok(EchoedOptions::NONE),
        };
        let r = f(&mut self.tcp, &mut cx);
        if !self.actions.is_empty() {
            self.apply_actions();
        }
        r
    }

    fn apply_actions(&mut self) {
        for i in 0..self.actions.segments.len() {
            let seg = self.actions.segments[i];
            self.queue_tcp_ctrl(&seg);
        }
        self.actions.segments.clear();
        self.events.extend(self.actions.events.drain(..));
        for i in 0..self.actions.suspects.len() {
            let remote = self.actions.suspects[i];
            self.recheck_next_hop(remote);
        }
        self.actions.suspects.clear();
    }

    /// Queues a payload-less TCP segment outside any connection's output (RST, SYN cookie,
    /// keepalive probe); `mac: None` resolves the next hop first.
    fn queue_tcp_ctrl(&mut self, seg: &CtrlSegment) {
        let (src, dst, mac, repr) = (seg.src, seg.dst, seg.mac, seg.repr);
        let ip = self.ip_repr(src, dst, IpProtocol::Tcp, repr.header_len());
        let mut opts = [0u8; ip_options_echo::MAX_LEN];
        let opts_len = seg.ip_opts.len();
        // The wall clock only for options that carry a time (a SYN flood's cookies have none).
        match src {
            IpAddress::V4(a) if opts_len > 0 => seg.ip_opts.write(&mut opts, a, wall_clock_ms()),
            _ => {}
        }
        let e = self.eth_len;
        let offload = self.cfg.tx_checksum_offload;
        let ethertype = ip.ethertype();
        let build = move |buf: &mut [u8]| -> usize {
            let t = e + ip.header_len() + opts_len;
            let end = t + repr.header_len();
            if buf.len() < end {
                return 0;
            }
            let _ = ip.emit_with_options(&mut buf[e..], &opts[..opts_len]);
            let _ = repr.emit(&mut buf[t..]);
            if offload {
                fill_partial_checksum(&mut buf[t..end], src, dst);
            } else {
                fill_checksum(&mut buf[t..end], src, dst);
            }
            end
        };
        match mac {
            Some(m) => {
                let eth = self.eth_repr(m, ethertype);
                if !self.ctrl.push_with(dst, |buf| {
                    let _ = eth.emit(buf);
                    build(buf)
                }) {
                    self.stats.ctrl_queue_full += 1;
                }
            }
            None => {
                self.send_ip_frame(dst, build);
            }
        }
    }

    /// Takes the next readiness event.
    pub fn pop_event(&mut self) -> Option<Event> {
        let ev = self.events.pop_front()?;
        let bit = ev.kind.bit();
        match ev.handle {
            Handle::Udp(u) => self.udp.event_taken(u, bit),
            h => self.tcp.event_taken(h, bit),
        }
        Some(ev)
    }

    /// Drains the readiness events queued since the last call. Each socket has at most one
    /// queued event of each kind; an event means "try the operation again", not a promise.
    pub fn drain_events(&mut self) -> impl Iterator<Item = Event> + '_ {
        std::iter::from_fn(move || self.pop_event())
    }

    /// Frames waiting for the next `transmit` outside connections (for tests and metrics).
    pub fn queued_frames(&self) -> usize {
        self.ctrl.len()
    }
}

fn emit_arp(buf: &mut [u8], eth: &EthernetRepr, a: &ArpRepr) -> usize {
    let e = eth.header_len();
    if buf.len() < e + arp::PACKET_LEN {
        return 0;
    }
    let _ = eth.emit(buf);
    let _ = a.emit(&mut buf[e..]);
    // Pad to the Ethernet minimum so strict receivers accept it.
    let len = (e + arp::PACKET_LEN).max(60);
    buf[e + arp::PACKET_LEN..len].fill(0);
    len
}

/// A [`TxSink`] that collects frames into owned vectors (tests, tools, simulations).
#[derive(Debug, Default)]
pub struct VecSink {
    pub frames: Vec<Vec<u8>>,
    /// Accept at most this many frames (None: unlimited).
    pub limit: Option<usize>,
    scratch: Vec<u8>,
}

impl VecSink {
    pub fn new() -> Self {
        VecSink {
            frames: Vec::new(),
            limit: None,
            scratch: vec![0u8; 9018 + 4],
        }
    }
}

impl TxSink for VecSink {
    fn tx_frame(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> bool {
        if self.limit.is_some_and(|l| self.frames.len() >= l) {
            return false;
        }
        if self.scratch.is_empty() {
            self.scratch = vec![0u8; 9018 + 4];
        }
        let len = fill(&mut self.scratch).min(self.scratch.len());
        if len > 0 {
            self.frames.push(self.scratch[..len].to_vec());
        }
        true
    }
}

/// Sources Linux's route lookup calls martian whatever the routes: 0.0.0.0 (the rest of
/// 0/8 is unicast since Linux 5.3), loopback (127/8, `route_localnet` off), multicast and
/// the limited broadcast.
fn martian_source(a: Ipv4Addr) -> bool {
    a == Ipv4Addr::UNSPECIFIED || a.0[0] == 127 || a.is_multicast() || a == Ipv4Addr::BROADCAST
}
