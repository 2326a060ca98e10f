//! The transmission control block: everything one connection remembers.

use super::congestion::CongestionAlgorithm;
use super::controller::Congestion;
use super::{flow_key, FlowKey, DEFAULT_MSS, MAX_OOO, MAX_SACKED, SACK_BLOCKS_SENT};
use crate::ring::Ring;
use crate::{Config, ConnId, Error, Instant};
use wirespeed_wire::ip_options_echo::EchoedOptions;
use wirespeed_wire::{IpAddress, MacAddr, SeqNumber};

/// The smallest segment [`Tcb::seg_limit`] cuts to, however small the peer's window.
const MIN_SEGMENT: u32 = 64;

/// Connection states (RFC 9293). LISTEN is not here: listeners are separate objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpState {
    Closed,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

impl TcpState {
    /// Synchronized states in which data we sent may still await its ACK: an ACK advancing
    /// SND.UNA means something here (FIN_WAIT_2 and TIME_WAIT have nothing left in flight).
    pub(crate) fn awaits_acks(self) -> bool {
        matches!(
            self,
            TcpState::Established
                | TcpState::CloseWait
                | TcpState::FinWait1
                | TcpState::Closing
                | TcpState::LastAck
        )
    }
}

/// Who holds a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Not yet accepted: in a listener's SYN_RCVD set or accept queue.
    Listener(u32),
    /// The application holds a `ConnId`.
    User,
    /// The application closed its handle; the stack finishes the connection and frees it.
    Released,
}

/// What `Stack::tcp_info` reports for one connection; byte counts unscaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    pub state: TcpState,
    pub mss: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    /// Sent and not yet acknowledged.
    pub in_flight: u32,
    /// In the send buffer: in flight plus not yet sent.
    pub send_buffered: u32,
    /// The peer's receive window as we last learned it.
    pub peer_window: u32,
    pub receive_window: u32,
    /// Received in order, not yet read by the application.
    pub receive_buffered: u32,
    pub srtt_us: u32,
    /// The congestion control algorithm (`Config::congestion_control`).
    pub congestion: CongestionAlgorithm,
    pub rto_us: u32,
    /// Probing a zero window.
    pub persist: bool,
    pub in_recovery: bool,
    /// Consecutive retransmission timeouts.
    pub retries: u8,
}

pub(crate) struct Tcb {
    pub(crate) gen: u32,
    pub(crate) in_use: bool,
    pub(crate) state: TcpState,
    pub(crate) owner: Owner,
    pub(crate) error: Option<Error>,
    pub(crate) remote_ip: IpAddress,
    /// The connection is on our IPv6 link-local address (its SYN came to it, or we opened
    /// it to a link-local address), not the address of `remote_ip`'s family: `local_ip`.
    pub(crate) to_link_local: bool,
    pub(crate) remote_port: u16,
    pub(crate) local_port: u16,
    /// The next hop's MAC, taken at neighbour epoch `mac_epoch` (`Tcb::mac_at`); epoch 0,
    /// which `Tcp::neigh_epoch` never is, while there is none.
    peer_mac: MacAddr,
    mac_epoch: u16,
    /// IPv4 options on every segment: a passive open's SYN's record route and timestamp,
    /// echoed (Linux's child socket keeps `ireq_opt`); none on an active open. Boxed: rare,
    /// and the block stays within its cache lines.
    pub(crate) ip_opts: Option<Box<EchoedOptions>>,

    // Send side: `send` holds bytes from snd_una on (unacked, then unsent).
    pub(crate) iss: SeqNumber,
    pub(crate) snd_una: SeqNumber,
    pub(crate) snd_nxt: SeqNumber,
    pub(crate) snd_max: SeqNumber,
    /// The length of the latest segment of new data (its FIN counted), which ends at SND.MAX:
    /// with SND.UNA inside it, one segment is unacknowledged (Linux's packets_out == 1), for
    /// the loss probe's timeout.
    pub(crate) snd_last_len: u16,
    /// Set only through [`Tcb::set_snd_wnd`], which keeps `max_snd_wnd`.
    pub(crate) snd_wnd: u32,
    /// The largest window the peer has offered (RFC 9293's Max(SND.WND)); bounds our segments.
    pub(crate) max_snd_wnd: u32,
    /// Bytes of ours the peer has acknowledged (Linux's `bytes_acked`): with `max_snd_wnd`,
    /// how far behind SND.UNA an ACK may be (RFC 5961 5.2).
    pub(crate) bytes_acked: u64,
    pub(crate) snd_wl1: SeqNumber,
    pub(crate) snd_wl2: SeqNumber,
    pub(crate) snd_wscale: u8,
    pub(crate) send: Ring,
    /// The application is done writing: a FIN follows the buffered data.
    pub(crate) fin_queued: bool,
    pub(crate) mss: u32,
    /// Congestion window and slow-start threshold, by the stack's algorithm.
    pub(crate) cc: Congestion,
    pub(crate) dupacks: u8,
    pub(crate) in_recovery: bool,
    pub(crate) recover: SeqNumber,
    pub(crate) retransmit_one: bool,
    /// SACK scoreboard: ranges above SND.UNA the peer reported holding, sorted.
    pub(crate) sacked: [(SeqNumber, SeqNumber); MAX_SACKED],
    pub(crate) sacked_len: u8,
    /// Next sequence the SACK-driven hole retransmission considers (this recovery episode).
    pub(crate) rexmit_next: SeqNumber,
    /// Retransmit the next un-SACKed hole (RFC 6675 NextSeg rule 1) on the next output.
    pub(crate) retransmit_hole: bool,

    // RTT estimation (RFC 6298), microseconds.
    pub(crate) srtt: u32,
    pub(crate) rttvar: u32,
    pub(crate) rto: u32,
    pub(crate) rtt_seq: SeqNumber,
    pub(crate) rtt_at: Instant,
    pub(crate) rtt_active: bool,
    pub(crate) retries: u8,

    // Receive side: `recv` holds in-order bytes not yet read; out-of-order bytes sit past
    // its end at their sequence offset, described by `ooo`.
    pub(crate) irs: SeqNumber,
    pub(crate) rcv_nxt: SeqNumber,
    pub(crate) rcv_wscale: u8,
    pub(crate) recv: Ring,
    pub(crate) ooo: [(SeqNumber, SeqNumber); MAX_OOO],
    pub(crate) ooo_len: u8,
    /// Start of the most recently received out-of-order segment (reported first in SACK).
    pub(crate) ooo_last: SeqNumber,
    /// The last out-of-order range ends with the peer's FIN, a sequence number with no byte in
    /// the ring (Linux queues it out of order): taken once the data before it is in.
    pub(crate) ooo_fin: bool,
    /// A duplicate range to report once as the first SACK block of the next ACK (RFC 2883
    /// D-SACK), so the sender learns its retransmission was spurious and undoes the
    /// congestion response (Linux does so for a tail loss probe only with a D-SACK).
    pub(crate) dsack: Option<(SeqNumber, SeqNumber)>,
    pub(crate) fin_received: bool,
    pub(crate) last_adv_wnd: u32,
    /// Right edge of the window last advertised.
    pub(crate) rcv_adv: SeqNumber,
    /// RCV.NXT when we last sent an ACK (the left edge of the window the peer knows).
    pub(crate) rcv_wup: SeqNumber,

    // Options.
    pub(crate) ts_enabled: bool,
    pub(crate) ts_recent: u32,
    pub(crate) ts_offset: u32,
    pub(crate) sack_ok: bool,
    /// ECN negotiated (RFC 3168): new data goes ECT(0).
    pub(crate) ecn: bool,
    /// A CE mark was taken: our segments carry ECE until the peer's CWR.
    pub(crate) ecn_echo: bool,
    /// The window was reduced for an ECN echo: the next new data carries CWR.
    pub(crate) ecn_cwr: bool,
    /// No second reduction for an echo until SND.UNA reaches this (one per window).
    pub(crate) ecn_recover: SeqNumber,
    /// Offer window scaling in our SYN / SYN-ACK.
    pub(crate) offer_wscale: bool,

    // Timers; `rto_at` doubles as the persist timer while `persist` is set.
    pub(crate) rto_at: Instant,
    /// Tail loss probe (RFC 8985 section 7, simplified): when ACKs stop for about two RTTs
    /// with data in flight (`Tcb::pto_us`), resend the segment at SND.UNA. That repairs the
    /// first hole at once (a lost tail, or a retransmission lost again in recovery), or makes
    /// the receiver SACK what it has, instead of waiting out the RTO and going back N. One
    /// per stall, as Linux's `tlp_high_seq` allows.
    pub(crate) tlp_at: Instant,
    pub(crate) tlp_probes: u8,
    pub(crate) persist: bool,
    pub(crate) persist_backoff: u8,
    /// The persist timer ran out on a small open window: the next output sends what fits,
    /// past silly-window avoidance (once).
    pub(crate) sws_override: bool,
    pub(crate) delack_at: Instant,
    pub(crate) keep_at: Instant,
    pub(crate) keep_probes: u8,
    pub(crate) heap_at: Instant,

    pub(crate) ack_now: bool,
    /// Extra duplicate ACKs owed: RFC 5681 wants one per out-of-order segment, and several
    /// may arrive between two `transmit` calls.
    pub(crate) dup_acks_owed: u8,
    pub(crate) unacked_segs: u8,
    pub(crate) in_dirty: bool,
    pub(crate) ev_mask: u8,
}

impl Tcb {
    /// The next hop's MAC while no neighbour has moved since it was taken (`epoch` is
    /// `Tcp::neigh_epoch`); None sends the connection's next segment through resolution
    /// again (docs/TCPIP.md, "Neighbours that move").
    pub(crate) fn mac_at(&self, epoch: u16) -> Option<MacAddr> {
        (self.mac_epoch == epoch).then_some(self.peer_mac)
    }

    pub(crate) fn set_mac(&mut self, mac: MacAddr, epoch: u16) {
        self.peer_mac = mac;
        self.mac_epoch = epoch;
    }

    pub(crate) fn forget_mac(&mut self) {
        self.mac_epoch = 0;
    }

    /// The IPv4 options this connection's segments carry.
    pub(crate) fn ip_options(&self) -> EchoedOptions {
        self.ip_opts.as_deref().copied().unwrap_or_default()
    }

    pub(crate) fn empty() -> Tcb {
        Tcb {
            gen: 0,
            in_use: false,
            state: TcpState::Closed,
            owner: Owner::Released,
            error: None,
            remote_ip: IpAddress::default(),
            to_link_local: false,
            remote_port: 0,
            local_port: 0,
            peer_mac: MacAddr::ZERO,
            mac_epoch: 0,
            ip_opts: None,
            iss: SeqNumber(0),
            snd_una: SeqNumber(0),
            snd_nxt: SeqNumber(0),
            snd_max: SeqNumber(0),
            snd_last_len: 0,
            snd_wnd: 0,
            max_snd_wnd: 0,
            bytes_acked: 0,
            snd_wl1: SeqNumber(0),
            snd_wl2: SeqNumber(0),
            snd_wscale: 0,
            send: Ring::from_box(Box::new([])),
            fin_queued: false,
            mss: DEFAULT_MSS as u32,
            cc: Congestion::new(CongestionAlgorithm::Reno),
            dupacks: 0,
            in_recovery: false,
            recover: SeqNumber(0),
            retransmit_one: false,
            sacked: [(SeqNumber(0), SeqNumber(0)); MAX_SACKED],
            sacked_len: 0,
            rexmit_next: SeqNumber(0),
            retransmit_hole: false,
            srtt: 0,
            rttvar: 0,
            rto: 1_000_000,
            rtt_seq: SeqNumber(0),
            rtt_at: Instant::ZERO,
            rtt_active: false,
            retries: 0,
            irs: SeqNumber(0),
            rcv_nxt: SeqNumber(0),
            rcv_wscale: 0,
            recv: Ring::from_box(Box::new([])),
            ooo: [(SeqNumber(0), SeqNumber(0)); MAX_OOO],
            ooo_len: 0,
            ooo_last: SeqNumber(0),
            ooo_fin: false,
            dsack: None,
            fin_received: false,
            last_adv_wnd: 0,
            rcv_adv: SeqNumber(0),
            rcv_wup: SeqNumber(0),
            ts_enabled: false,
            ts_recent: 0,
            ts_offset: 0,
            sack_ok: false,
            ecn: false,
            ecn_echo: false,
            ecn_cwr: false,
            ecn_recover: SeqNumber(0),
            offer_wscale: false,
            rto_at: Instant::NEVER,
            tlp_at: Instant::NEVER,
            tlp_probes: 0,
            persist: false,
            persist_backoff: 0,
            sws_override: false,
            delack_at: Instant::NEVER,
            keep_at: Instant::NEVER,
            keep_probes: 0,
            heap_at: Instant::NEVER,
            ack_now: false,
            dup_acks_owed: 0,
            unacked_segs: 0,
            in_dirty: false,
            ev_mask: 0,
        }
    }

    pub(crate) fn next_deadline(&self) -> Instant {
        self.rto_at
            .min(self.delack_at)
            .min(self.keep_at)
            .min(self.tlp_at)
    }

    /// Which of our addresses the connection is on.
    pub(crate) fn local_ip(&self, cfg: &Config) -> IpAddress {
        match self.remote_ip {
            IpAddress::V4(_) => IpAddress::V4(cfg.ipv4),
            IpAddress::V6(_) if self.to_link_local => {
                cfg.ipv6_link_local().unwrap_or_default().into()
            }
            IpAddress::V6(_) => cfg.ipv6.unwrap_or_default().into(),
        }
    }

    pub(crate) fn key(&self) -> FlowKey {
        flow_key(
            self.remote_ip,
            self.to_link_local,
            self.remote_port,
            self.local_port,
        )
    }

    /// Sequence number of our FIN (valid when `fin_queued`).
    pub(crate) fn fin_seq(&self) -> SeqNumber {
        self.snd_una.add(self.send.len())
    }

    pub(crate) fn fin_sent(&self) -> bool {
        self.fin_queued && self.snd_max.gt(self.fin_seq())
    }

    /// Takes the peer's window (unscaled bytes) from a segment we accepted.
    pub(crate) fn set_snd_wnd(&mut self, window: u32) {
        self.snd_wnd = window;
        self.max_snd_wnd = self.max_snd_wnd.max(window);
    }

    /// The largest segment we send: the MSS, but no more than half the largest window the
    /// peer has offered once that window is above the default MSS (as Linux's sender bounds
    /// its own). A receiver whose whole window is about one of our segments otherwise gets
    /// one segment per round trip at best, and a Linux receiver without window scaling
    /// rounds its window down to a multiple of the largest segment it has seen: when its
    /// receive buffer's accounting puts the window under that size, it offers zero and never
    /// reopens, since only arriving data would grow it (docs/TCPIP.md, "Segment size").
    ///
    /// The MSS allows for the timestamp option only: a segment that also carries SACK blocks
    /// is shorter by their length, as Linux's tcp_current_mss makes it, or the frame outgrows
    /// the MTU and the link drops it (docs/TCPIP.md, "Segment size").
    pub(crate) fn seg_limit(&self) -> u32 {
        let mss = self.mss.saturating_sub(self.sack_option_len()).max(1);
        let bound = if self.max_snd_wnd > u32::from(DEFAULT_MSS) {
            self.max_snd_wnd / 2
        } else {
            self.max_snd_wnd
        };
        if bound == 0 {
            mss
        } else {
            mss.min(bound.max(MIN_SEGMENT))
        }
    }

    /// How many SACK blocks our next segment carries: a D-SACK block and the out-of-order
    /// ranges we hold, at most [`SACK_BLOCKS_SENT`].
    pub(crate) fn sack_blocks_out(&self) -> usize {
        if !self.sack_ok {
            return 0;
        }
        (self.dsack.is_some() as usize + self.ooo_len as usize).min(SACK_BLOCKS_SENT)
    }

    /// The bytes of SACK option our next segment carries: two NOPs, kind and length, and 8
    /// bytes a block (RFC 2018 3), as `TcpOptions::emit` writes it.
    pub(crate) fn sack_option_len(&self) -> u32 {
        match self.sack_blocks_out() {
            0 => 0,
            n => 4 + 8 * n as u32,
        }
    }

    /// Window to advertise, unscaled bytes.
    pub(crate) fn rcv_window(&self) -> u32 {
        self.recv.free().min(u32::MAX as usize) as u32
    }

    pub(crate) fn handle(&self, idx: u32) -> ConnId {
        ConnId { idx, gen: self.gen }
    }

    pub(crate) fn flight(&self) -> u32 {
        self.snd_max.diff(self.snd_una).max(0) as u32
    }

    /// At most one segment is unacknowledged (Linux's packets_out <= 1): SND.UNA is within
    /// the latest one sent.
    pub(crate) fn one_segment_out(&self) -> bool {
        self.snd_una
            .ge(self.snd_max.sub(self.snd_last_len as usize))
    }
}
