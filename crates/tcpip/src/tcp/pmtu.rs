//! Path MTU discovery (RFC 1191, RFC 8201): an ICMP "fragmentation needed" or ICMPv6 "packet
//! too big" about one of our segments shrinks its connection's MSS, and what is in flight goes
//! again in the smaller size, as Linux's `tcp_v4_err`/`tcp_v6_err`, `tcp_v*_mtu_reduced` and
//! `tcp_simple_retransmit` do (docs/TCPIP.md, "Path MTU").

use super::{flow_key, is_link_local, Ctx, Tcp, TcpState};
use wirespeed_wire::{ip, IpAddress, SeqNumber};

/// Linux's `tcp_min_snd_mss`: the MSS never goes below it, whatever the ICMP says.
const MIN_SND_MSS: u32 = 48;

/// The start of one of our segments, as an ICMP error quotes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuotedSegment {
    /// Our address it went from, and the peer's it went to.
    pub(crate) local: IpAddress,
    pub(crate) remote: IpAddress,
    pub(crate) local_port: u16,
    pub(crate) remote_port: u16,
    pub(crate) seq: SeqNumber,
}

impl Tcp {
    /// The path of `q` carries datagrams of at most `mtu` bytes (already bounded below by the
    /// family's minimum).
    pub(crate) fn path_mtu_reduced(&mut self, cx: &mut Ctx<'_>, q: &QuotedSegment, mtu: u32) {
        let key = flow_key(
            q.remote,
            is_link_local(q.local),
            q.remote_port,
            q.local_port,
        );
        let Some(&idx) = self.demux.get(&key) else {
            cx.stats.icmp_no_connection += 1;
            return;
        };
        let t = &mut self.conns[idx as usize];
        // A half-open connection is Linux's request socket, which takes no PMTU
        // (`tcp_req_err`); nor does TIME_WAIT.
        if matches!(
            t.state,
            TcpState::SynReceived | TcpState::TimeWait | TcpState::Closed
        ) {
            cx.stats.icmp_no_connection += 1;
            return;
        }
        // Only about a segment in flight (RFC 5927 4.1; Linux's OUTOFWINDOWICMPS).
        if q.seq.lt(t.snd_una) || q.seq.gt(t.snd_max) {
            cx.stats.icmp_out_of_window += 1;
            return;
        }
        let headers = (ip::header_len_for(q.remote) + 20) as u32;
        let ext = t.ip_opts.as_deref().map_or(0, |o| o.len()) as u32;
        let ts = if t.ts_enabled { 12 } else { 0 };
        let mss = (mtu.saturating_sub(headers + ext)).max(MIN_SND_MSS) - ts;
        if mss >= t.mss {
            return;
        }
        t.mss = mss;
        cx.stats.tcp_pmtu_reductions += 1;
        if t.flight() == 0 || t.state == TcpState::SynSent {
            return;
        }
        // tcp_simple_retransmit: everything in flight was sent too large; send it again from
        // SND.UNA. The window is left alone: no more data is in the network, only smaller
        // units of it.
        t.snd_nxt = t.snd_una;
        t.recover = t.snd_max;
        t.in_recovery = false;
        t.dupacks = 0;
        t.sacked_len = 0;
        t.retransmit_hole = false;
        t.rtt_active = false;
        let gen = t.gen;
        self.mark_dirty(idx, gen);
    }
}
