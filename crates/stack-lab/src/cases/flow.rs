//! Stateful cases: the harness opens a connection itself (each twin's ISN, timestamps and
//! window tracked on their own), drives it into a state, then sends one edge segment.
//!
//! Pure: the side runner (`side.rs`) supplies the wire through [`Wire`].

use serde::Serialize;

use super::{to_dut, to_dut6, Case, Script};
use crate::craft::{
    self, flag_letters, opt, Ip4, Ip6, Tcp, ACK, DUT_IP, DUT_IP6, FIN, PSH, RST, SYN, URG,
};
use crate::normalize::TcpSeen;
use crate::responder;
use wirespeed_testkit::rng::Rng;

/// Where the connection is when the edge segment goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Our SYN answered, the handshake's ACK not sent.
    SynRecv,
    /// Handshake complete, nothing sent.
    Established,
    /// Part of a request sent and acknowledged (the server's RCV.NXT moved).
    EstablishedData,
    /// A whole request sent; the response (the same length from both servers) received and
    /// not acknowledged.
    ResponseUnacked,
    /// We sent FIN; the server acknowledged it and its application closed: its FIN is
    /// unacknowledged (LAST_ACK).
    LastAck,
    /// As LastAck, then we acknowledged the server's FIN: the connection is gone.
    Closed,
}

const STATES: [State; 6] = [
    State::SynRecv,
    State::Established,
    State::EstablishedData,
    State::ResponseUnacked,
    State::LastAck,
    State::Closed,
];

/// The edge segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Edge {
    AllFlags,
    NoFlagsWithData,
    OldAck,
    AncientAck,
    AckOfUnsentData,
    DataBeyondWindow,
    OldData,
    PartlyOldData,
    RstExact,
    RstInWindow,
    RstBelowWindow,
    RstOutOfWindow,
    RstAckExact,
    SynInWindow,
    SynWithOurIsn,
    SynAck,
    Fin,
    FinAhead,
    Data,
    DataAhead,
    ZeroWindowProbe,
    KeepaliveByte,
    WindowZero,
    UrgentData,
    PawsOldTimestamp,
    DataWithoutTimestamp,
    ThreeDupAcks,
    AckOfPart,
    AckOfAll,
    BadChecksum,
}

const EDGES: [Edge; 30] = [
    Edge::AllFlags,
    Edge::NoFlagsWithData,
    Edge::OldAck,
    Edge::AncientAck,
    Edge::AckOfUnsentData,
    Edge::DataBeyondWindow,
    Edge::OldData,
    Edge::PartlyOldData,
    Edge::RstExact,
    Edge::RstInWindow,
    Edge::RstBelowWindow,
    Edge::RstOutOfWindow,
    Edge::RstAckExact,
    Edge::SynInWindow,
    Edge::SynWithOurIsn,
    Edge::SynAck,
    Edge::Fin,
    Edge::FinAhead,
    Edge::Data,
    Edge::DataAhead,
    Edge::ZeroWindowProbe,
    Edge::KeepaliveByte,
    Edge::WindowZero,
    Edge::UrgentData,
    Edge::PawsOldTimestamp,
    Edge::DataWithoutTimestamp,
    Edge::ThreeDupAcks,
    Edge::AckOfPart,
    Edge::AckOfAll,
    Edge::BadChecksum,
];

/// The options our SYN offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Offer {
    /// MSS, SACK-permitted, timestamps, window scale (as Linux).
    All,
    NoTimestamps,
    MssOnly,
    Nothing,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Flow {
    pub state: State,
    pub edge: Edge,
    pub offer: Offer,
    /// Our first TSval (the same on both twins).
    pub ts_base: u32,
}

pub fn generate(c: &mut Case, r: &mut Rng) {
    let flow = Flow {
        state: r.pick(&STATES),
        edge: r.pick(&EDGES),
        offer: r.pick(&[
            Offer::All,
            Offer::All,
            Offer::NoTimestamps,
            Offer::MssOnly,
            Offer::Nothing,
        ]),
        ts_base: r.u32() & 0x7fff_ffff,
    };
    c.what = format!(
        "{:?} in {:?} (SYN offered {:?})",
        flow.edge, flow.state, flow.offer
    );
    c.script = Script::Flow(flow);
}

/// Bytes a partial request carries: a valid prefix, so that neither server answers it.
pub const PARTIAL_REQUEST: &[u8] = b"GET /plaintext HTTP/1.1\r\nHost: w\r\n";
/// Data the edges send where the server's parser is between requests: the start of a
/// request line, valid from any of its first 5 bytes on (a partly old segment delivers only
/// its tail), so neither server answers nor rejects it.
const EDGE_DATA_NEW: &[u8] = b"GETSTUFF /";
/// Data the edges send after a partial request: another header line, never the blank line
/// that would end the request.
const EDGE_DATA_HEADER: &[u8] = b"X-Pad: 1\r\n";

/// One side's view of the connection.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Conn {
    pub peer_ip: [u8; 4],
    /// Over IPv6: our address (the connection is then to `DUT_IP6`).
    pub peer6: Option<[u8; 16]>,
    pub sport: u16,
    pub dport: u16,
    pub isn: u32,
    pub snd_nxt: u32,
    /// The next TSval we send; `ts` when both ends agreed to timestamps.
    pub ts_val: u32,
    pub ts: bool,
    pub dut_isn: Option<u32>,
    /// What we acknowledge: the server's next sequence number.
    pub rcv_nxt: u32,
    /// The highest acknowledgement the server sent.
    pub dut_ack: u32,
    pub dut_tsval: u32,
    pub dut_fin: bool,
    pub dut_rst: bool,
    /// A partial request was sent: the server's parser is inside its headers.
    pub mid_request: bool,
    /// The last acknowledgement we sent: the server's SND.UNA as it knows it.
    pub acked: u32,
}

impl Conn {
    pub fn new(c: &Case, f: &Flow) -> Conn {
        Conn {
            peer_ip: c.peer_ip,
            peer6: c.peer6,
            sport: c.sport,
            dport: c.dport,
            isn: c.our_isn,
            snd_nxt: c.our_isn,
            ts_val: f.ts_base,
            ..Conn::default()
        }
    }

    /// Takes in a segment the server sent on this connection.
    pub fn observe(&mut self, s: &TcpSeen) {
        if s.flags & RST != 0 {
            self.dut_rst = true;
            return;
        }
        if s.flags & SYN != 0 && self.dut_isn != Some(s.seq) {
            // The first SYN-ACK, or one with a new ISN: a new connection on these ports
            // (after the first closed), which is what is open now.
            self.dut_isn = Some(s.seq);
            self.rcv_nxt = s.seq;
            self.dut_ack = 0;
            self.dut_fin = false;
            self.ts = s.tsval.is_some();
        }
        let end = s
            .seq
            .wrapping_add(s.payload_len as u32)
            .wrapping_add(u32::from(s.flags & SYN != 0))
            .wrapping_add(u32::from(s.flags & FIN != 0));
        if after(end, self.rcv_nxt) {
            self.rcv_nxt = end;
        }
        if s.flags & FIN != 0 {
            self.dut_fin = true;
        }
        if s.flags & ACK != 0 && (self.dut_ack == 0 || after(s.ack, self.dut_ack)) {
            self.dut_ack = s.ack;
        }
        if let Some(v) = s.tsval {
            self.dut_tsval = v;
        }
    }

    /// A frame from us on this connection, with our timestamp when agreed.
    pub fn segment(&mut self, flags: u8, seq: u32, ack: u32, data: &[u8]) -> Vec<u8> {
        let newer = self.acked == 0 || after(ack, self.acked);
        if flags & ACK != 0 && flags & RST == 0 && !after(ack, self.rcv_nxt) && newer {
            self.acked = ack;
        }
        let options = if self.ts {
            self.ts_val = self.ts_val.wrapping_add(1);
            opt::ts(self.ts_val, self.dut_tsval)
        } else {
            Vec::new()
        };
        self.raw(flags, seq, ack, data, options, 64240)
    }

    fn raw(
        &self,
        flags: u8,
        seq: u32,
        ack: u32,
        data: &[u8],
        options: Vec<u8>,
        window: u16,
    ) -> Vec<u8> {
        let t = Tcp {
            sport: self.sport,
            dport: self.dport,
            seq,
            ack: if flags & ACK != 0 { ack } else { 0 },
            flags,
            window,
            urgent: if flags & URG != 0 {
                data.len() as u16
            } else {
                0
            },
            options,
            payload: data.to_vec(),
            doff: None,
        };
        match self.peer6 {
            Some(p) => {
                let h = Ip6::new(p, DUT_IP6, craft::PROTO_TCP);
                to_dut6(&h.packet(&t.segment6(p, DUT_IP6)))
            }
            None => {
                let h = Ip4::new(self.peer_ip, DUT_IP, craft::PROTO_TCP);
                to_dut(&h.packet(&t.segment(self.peer_ip, DUT_IP)))
            }
        }
    }

    /// Where our frames' TCP header starts (Ethernet and IP headers before it).
    fn tcp_at(&self) -> usize {
        14 + if self.peer6.is_some() { 40 } else { 20 }
    }

    /// Our SYN with the offered options.
    pub fn syn(&mut self, offer: Offer) -> Vec<u8> {
        let options = match offer {
            Offer::All => opt::linux_syn(1460, self.ts_val, 7),
            Offer::NoTimestamps => [opt::mss(1460), vec![1, 1, 4, 2], opt::ws(7)].concat(),
            Offer::MssOnly => opt::mss(1460),
            Offer::Nothing => Vec::new(),
        };
        self.snd_nxt = self.isn.wrapping_add(1);
        self.raw(SYN, self.isn, 0, &[], options, 64240)
    }

    /// Sends data at SND.NXT and advances it.
    fn send_data(&mut self, flags: u8, data: &[u8]) -> Vec<u8> {
        let f = self.segment(flags, self.snd_nxt, self.rcv_nxt, data);
        self.snd_nxt = self.snd_nxt.wrapping_add(data.len() as u32);
        f
    }
}

/// `a` is after `b` in sequence space.
pub fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// How the side runner sends and waits.
pub trait Wire {
    fn send(&mut self, frame: Vec<u8>);
    /// Receives (feeding the connection's segments into `conn`) until `done(conn)` holds;
    /// false when the setup time ran out first.
    fn wait(&mut self, conn: &mut Conn, done: &dyn Fn(&Conn) -> bool) -> bool;
    /// Receives for a short while, whatever comes (settling).
    fn settle(&mut self, conn: &mut Conn);
}

/// Drives the connection into `flow.state`; Err says which step got no answer.
pub fn setup(flow: &Flow, conn: &mut Conn, w: &mut dyn Wire) -> Result<(), String> {
    let syn = conn.syn(flow.offer);
    w.send(syn);
    if !w.wait(conn, &|c| c.dut_isn.is_some() || c.dut_rst) || conn.dut_rst {
        return Err("no SYN-ACK".into());
    }
    if flow.state == State::SynRecv {
        return Ok(());
    }
    let ack = conn.segment(ACK, conn.snd_nxt, conn.rcv_nxt, &[]);
    w.send(ack);
    match flow.state {
        State::EstablishedData => {
            let f = conn.send_data(PSH | ACK, PARTIAL_REQUEST);
            conn.mid_request = true;
            w.send(f);
            wait_acked(conn, w, "the partial request")?;
        }
        State::ResponseUnacked => {
            let f = conn.send_data(PSH | ACK, responder::REQUEST);
            w.send(f);
            wait_acked(conn, w, "the request")?;
            let want = conn
                .dut_isn
                .unwrap_or(0)
                .wrapping_add(1 + responder::RESPONSE_LEN as u32);
            if !w.wait(conn, &|c| !after(want, c.rcv_nxt)) {
                return Err("no response".into());
            }
        }
        State::LastAck | State::Closed => close_from_our_side(flow, conn, w)?,
        _ => {}
    }
    Ok(())
}

fn wait_acked(conn: &mut Conn, w: &mut dyn Wire, what: &str) -> Result<(), String> {
    let nxt = conn.snd_nxt;
    if w.wait(conn, &|c| !after(nxt, c.dut_ack)) {
        Ok(())
    } else {
        Err(format!("{what} was not acknowledged"))
    }
}

fn close_from_our_side(flow: &Flow, conn: &mut Conn, w: &mut dyn Wire) -> Result<(), String> {
    let fin = conn.segment(FIN | ACK, conn.snd_nxt, conn.rcv_nxt, &[]);
    conn.snd_nxt = conn.snd_nxt.wrapping_add(1);
    w.send(fin);
    wait_acked(conn, w, "our FIN")?;
    if !w.wait(conn, &|c| c.dut_fin) {
        return Err("the server sent no FIN".into());
    }
    if flow.state == State::Closed {
        let ack = conn.segment(ACK, conn.snd_nxt, conn.rcv_nxt, &[]);
        w.send(ack);
        w.settle(conn);
    }
    Ok(())
}

/// The edge segment(s), built from this side's view of the connection.
pub fn edge_frames(edge: Edge, conn: &mut Conn) -> Vec<Vec<u8>> {
    let (nxt, rcv) = (conn.snd_nxt, conn.rcv_nxt);
    // The server's SND.UNA: what we acknowledged last (its ISN + 1 after the handshake).
    let una = if conn.acked != 0 {
        conn.acked
    } else {
        conn.dut_isn.map_or(rcv, |i| i.wrapping_add(1))
    };
    let d = if conn.mid_request {
        EDGE_DATA_HEADER
    } else {
        EDGE_DATA_NEW
    };
    let frame = match edge {
        Edge::AllFlags => conn.segment(0xff, nxt, rcv, &[]),
        Edge::NoFlagsWithData => conn.segment(0, nxt, rcv, d),
        Edge::OldAck => conn.segment(ACK, nxt, conn.dut_isn.unwrap_or(rcv), &[]),
        Edge::AncientAck => conn.segment(ACK, nxt, rcv.wrapping_sub(0x4000_0000), &[]),
        Edge::AckOfUnsentData => conn.segment(ACK, nxt, rcv.wrapping_add(1000), &[]),
        Edge::DataBeyondWindow => conn.segment(PSH | ACK, nxt.wrapping_add(0x10_0000), rcv, d),
        Edge::OldData => conn.segment(PSH | ACK, nxt.wrapping_sub(d.len() as u32), rcv, d),
        Edge::PartlyOldData => conn.segment(PSH | ACK, nxt.wrapping_sub(4), rcv, d),
        Edge::RstExact => conn.segment(RST, nxt, 0, &[]),
        Edge::RstInWindow => conn.segment(RST, nxt.wrapping_add(100), 0, &[]),
        Edge::RstBelowWindow => conn.segment(RST, nxt.wrapping_sub(1), 0, &[]),
        Edge::RstOutOfWindow => conn.segment(RST, nxt.wrapping_add(0x4000_0000), 0, &[]),
        Edge::RstAckExact => conn.segment(RST | ACK, nxt, rcv, &[]),
        Edge::SynInWindow => conn.segment(SYN, nxt, 0, &[]),
        Edge::SynWithOurIsn => conn.segment(SYN, conn.isn, 0, &[]),
        Edge::SynAck => conn.segment(SYN | ACK, nxt, rcv, &[]),
        Edge::Fin => conn.segment(FIN | ACK, nxt, rcv, &[]),
        Edge::FinAhead => conn.segment(FIN | ACK, nxt.wrapping_add(100), rcv, &[]),
        Edge::Data => conn.segment(PSH | ACK, nxt, rcv, d),
        Edge::DataAhead => conn.segment(PSH | ACK, nxt.wrapping_add(100), rcv, d),
        Edge::ZeroWindowProbe => conn.segment(ACK, nxt.wrapping_sub(1), rcv, &[]),
        Edge::KeepaliveByte => conn.segment(ACK, nxt.wrapping_sub(1), rcv, b"k"),
        Edge::WindowZero => {
            let ts = conn
                .ts
                .then(|| opt::ts(conn.ts_val.wrapping_add(1), conn.dut_tsval));
            conn.ts_val = conn.ts_val.wrapping_add(1);
            conn.raw(ACK, nxt, rcv, &[], ts.unwrap_or_default(), 0)
        }
        Edge::UrgentData => conn.segment(URG | PSH | ACK, nxt, rcv, d),
        Edge::PawsOldTimestamp => {
            let old = conn
                .ts
                .then(|| opt::ts(conn.ts_val.wrapping_sub(0x1000_0000), conn.dut_tsval));
            conn.raw(PSH | ACK, nxt, rcv, d, old.unwrap_or_default(), 64240)
        }
        Edge::DataWithoutTimestamp => conn.raw(PSH | ACK, nxt, rcv, d, Vec::new(), 64240),
        Edge::ThreeDupAcks => {
            return (0..3).map(|_| conn.segment(ACK, nxt, una, &[])).collect();
        }
        Edge::AckOfPart => conn.segment(ACK, nxt, una.wrapping_add(10), &[]),
        Edge::AckOfAll => conn.segment(ACK, nxt, rcv, &[]),
        Edge::BadChecksum => {
            let mut f = conn.segment(PSH | ACK, nxt, rcv, d);
            let at = conn.tcp_at() + 16;
            f[at] ^= 0x40;
            f
        }
    };
    vec![frame]
}

/// The frame that ends whatever the case left open: an RST at the sequence number the
/// server expects (its last acknowledgement), which resets in every synchronized state and
/// drops a half-open connection. None when the server never answered with a SYN. (An RST
/// from the server does not mean it has nothing open: it answers a bad ACK on a half-open
/// connection with one and keeps the connection.)
pub fn cleanup(conn: &Conn) -> Option<Vec<u8>> {
    conn.dut_isn?;
    let seq = if conn.dut_ack != 0 {
        conn.dut_ack
    } else {
        conn.snd_nxt
    };
    Some(conn.raw(RST, seq, 0, &[], Vec::new(), 0))
}

/// Describes a frame we sent, for the JSON record (`S seq=p+0`).
pub fn describe_sent(f: &[u8], isn: u32) -> String {
    match crate::normalize::parse_tcp(f) {
        Some(s) => format!(
            "{} seq=p{:+} ack={:#x} len={}",
            flag_letters(s.flags),
            s.seq.wrapping_sub(isn) as i32,
            s.ack,
            s.payload_len
        ),
        None => format!("{} bytes", f.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(flags: u8, seq: u32, ack: u32, len: usize) -> TcpSeen {
        TcpSeen {
            flags,
            seq,
            ack,
            payload_len: len,
            tsval: Some(5),
            ..TcpSeen::default()
        }
    }

    #[test]
    fn the_connection_follows_what_the_server_sends() {
        let mut c = Conn {
            isn: 100,
            snd_nxt: 101,
            ..Conn::default()
        };
        c.observe(&seen(SYN | ACK, 5000, 101, 0));
        assert_eq!(
            (c.dut_isn, c.rcv_nxt, c.dut_ack, c.ts),
            (Some(5000), 5001, 101, true)
        );
        c.observe(&seen(PSH | ACK, 5001, 120, 10));
        c.observe(&seen(FIN | ACK, 5011, 121, 0));
        assert_eq!((c.rcv_nxt, c.dut_ack, c.dut_fin), (5012, 121, true));
        // An older segment moves nothing back.
        c.observe(&seen(ACK, 5001, 110, 0));
        assert_eq!((c.rcv_nxt, c.dut_ack), (5012, 121));
        let rst = cleanup(&c).unwrap();
        let s = crate::normalize::parse_tcp(&rst).unwrap();
        assert_eq!((s.flags, s.seq), (RST, 121));
    }

    #[test]
    fn edges_carry_timestamps_only_when_agreed() {
        let mut c = Conn {
            isn: 1,
            snd_nxt: 2,
            rcv_nxt: 9,
            dut_isn: Some(8),
            ..Conn::default()
        };
        let f = &edge_frames(Edge::Data, &mut c)[0];
        assert_eq!(f[14 + 20 + 12] >> 4, 5, "no options without timestamps");
        c.ts = true;
        let f = &edge_frames(Edge::Data, &mut c)[0];
        assert_eq!(f[14 + 20 + 12] >> 4, 8);
        assert_eq!(edge_frames(Edge::ThreeDupAcks, &mut c).len(), 3);
        assert!(after(1, 0) && after(0, u32::MAX) && !after(5, 5));
    }

    #[test]
    fn a_v6_connection_sends_ipv6_and_its_bad_checksum_is_bad() {
        let mut c = Conn {
            isn: 1,
            snd_nxt: 2,
            rcv_nxt: 9,
            dut_isn: Some(8),
            peer6: Some(craft::peer_ip6(3)),
            ..Conn::default()
        };
        let f = &edge_frames(Edge::Data, &mut c)[0];
        assert_eq!(u16::from_be_bytes([f[12], f[13]]), craft::ETH_IPV6);
        let s = crate::normalize::parse_tcp(f).unwrap();
        assert_eq!((s.seq, s.ack, s.payload_len), (2, 9, EDGE_DATA_NEW.len()));
        let good = crate::normalize::normalize(f, &crate::normalize::Bases::default());
        assert_eq!(good.get("tcp.csum"), Some("ok"));
        let bad = &edge_frames(Edge::BadChecksum, &mut c)[0];
        let bad = crate::normalize::normalize(bad, &crate::normalize::Bases::default());
        assert_eq!(bad.get("tcp.csum"), Some("bad"));
    }
}
