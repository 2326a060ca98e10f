//! One twin's runner: injects a case's frames on the peer's end of the veth (AF_PACKET),
//! answers the DUT's ARP requests for crafted addresses, and records every frame the DUT
//! sends in the case's window.
//!
//! A frame from the DUT belongs to the case when it is IPv4 to the case's peer address, or
//! ARP other than a request for a crafted address (those are answered with the peer's MAC
//! and counted as resolutions: Linux resolves a peer before it answers, our stack answers
//! to the sender's MAC). IPv6 alike: a frame to the case's IPv6 address, or in an IPv6 case
//! a neighbour advertisement (a DAD probe's answer goes to all nodes); a neighbour
//! solicitation for anything but the DUT's own addresses (the gateway, a crafted address) is
//! answered with an advertisement naming the peer's MAC and counted as a resolution, a
//! DUT's own DAD probe is left alone. Everything else unicast is a stray (a late frame of an
//! earlier case) and is counted, not compared; the kernels' IPv6 housekeeping (router
//! solicitations, MLD reports, their own DAD) is ignored.

use std::io;
use std::time::{Duration, Instant};

use wirespeed_sys::packet::PacketSocket;

use crate::cases::flow::{self, Conn, Flow, Wire};
use crate::cases::{Case, Script};
use crate::compare::Outcome;
use crate::craft::{self, DUT_IP, DUT_IP6, DUT_LL6, ETH_ARP, ETH_IPV4, ETH_IPV6, PEER_MAC};
use crate::normalize::{self, parse_tcp, Bases};

/// How long the harness waits after its cleanup RST (whatever comes is not compared).
const CLEANUP_WAIT: Duration = Duration::from_millis(3);
/// How long `Wire::settle` listens.
const SETTLE: Duration = Duration::from_millis(15);

/// What a received frame is to the current case.
enum Got {
    Mine(Vec<u8>),
    Resolution,
    Stray,
    Ignored,
}

pub struct Side {
    pub name: &'static str,
    sock: PacketSocket,
    window: Duration,
    setup_limit: Duration,
    buf: Vec<u8>,
    /// IPv4 frames that belonged to no case (late frames of earlier cases).
    pub strays: usize,
    /// The first of them, normalized, for the record.
    pub stray_sample: Vec<String>,
}

impl Side {
    /// `sock` is bound to the peer's end of this twin's veth.
    pub fn new(
        name: &'static str,
        sock: PacketSocket,
        window: Duration,
        setup_limit: Duration,
    ) -> Side {
        let _ = sock.force_buffer_sizes(4 << 20);
        Side {
            name,
            sock,
            window,
            setup_limit,
            buf: vec![0u8; 65536],
            strays: 0,
            stray_sample: Vec::new(),
        }
    }

    /// Runs one case and returns what the DUT sent.
    pub fn run(&mut self, case: &Case) -> io::Result<Outcome> {
        self.drain(case)?;
        match &case.script {
            Script::Frames(frames) => self.run_frames(case, frames),
            Script::Flow(f) => self.run_flow(case, f),
        }
    }

    fn send(&self, frame: &[u8]) -> io::Result<()> {
        for _ in 0..1000 {
            match self.sock.send(frame) {
                Ok(_) => return Ok(()),
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOBUFS)
                        || e.kind() == io::ErrorKind::WouldBlock =>
                {
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("the peer's veth stayed full for 100 ms"))
    }

    /// Takes whatever is queued before a case starts: strays, and ARP requests to answer.
    fn drain(&mut self, case: &Case) -> io::Result<()> {
        while let Some(got) = self.recv_one(case, Duration::ZERO)? {
            if let Got::Mine(_) = got {
                // A frame to this case's address before the case began: an earlier case
                // with the same address (the pool wrapped around).
                self.strays += 1;
            }
        }
        Ok(())
    }

    /// One frame, classified; None when nothing came in `timeout`.
    fn recv_one(&mut self, case: &Case, timeout: Duration) -> io::Result<Option<Got>> {
        let Some(r) = self.sock.recv(&mut self.buf, timeout)? else {
            return Ok(None);
        };
        if r.kind.is_outgoing() {
            return Ok(Some(Got::Ignored));
        }
        let f = self.buf[..r.len].to_vec();
        Ok(Some(self.classify(case, f)?))
    }

    fn classify(&mut self, case: &Case, f: Vec<u8>) -> io::Result<Got> {
        if f.len() < 14 {
            return Ok(Got::Ignored);
        }
        match u16::from_be_bytes([f[12], f[13]]) {
            ETH_ARP if f.len() >= 42 && f[20..22] == [0, 1] && f[38..42] != DUT_IP => {
                // sha at 22, spa at 28, tpa at 38: answer as the owner of tpa.
                let tpa: [u8; 4] = f[38..42].try_into().unwrap_or([0; 4]);
                let spa: [u8; 4] = f[28..32].try_into().unwrap_or([0; 4]);
                let sha: [u8; 6] = f[22..28].try_into().unwrap_or([0; 6]);
                let reply = craft::arp(2, PEER_MAC, tpa, sha, spa);
                self.send(&craft::eth(sha, PEER_MAC, ETH_ARP, &reply))?;
                Ok(Got::Resolution)
            }
            ETH_ARP => Ok(Got::Mine(f)),
            ETH_IPV4 if case.peer6.is_none() && f.len() >= 34 && f[30..34] == case.peer_ip => {
                Ok(Got::Mine(f))
            }
            ETH_IPV4 => Ok(self.stray(case, &f)),
            ETH_IPV6 if f.len() >= 54 => self.classify6(case, f),
            _ => Ok(Got::Ignored),
        }
    }

    fn stray(&mut self, case: &Case, f: &[u8]) -> Got {
        self.strays += 1;
        if self.stray_sample.len() < 20 {
            let r = normalize::normalize(f, &Bases::default());
            self.stray_sample
                .push(format!("case #{}: {}", case.index + 1, r.line()));
        }
        Got::Stray
    }

    /// An IPv6 frame from the DUT (at least the fixed header).
    fn classify6(&mut self, case: &Case, f: Vec<u8>) -> io::Result<Got> {
        let src: [u8; 16] = f[22..38].try_into().unwrap_or([0; 16]);
        let dst: [u8; 16] = f[38..54].try_into().unwrap_or([0; 16]);
        let icmp_type = (f[20] == craft::PROTO_ICMPV6)
            .then(|| f.get(54).copied())
            .flatten();
        if icmp_type == Some(135) && f.len() >= 54 + 24 {
            let target: [u8; 16] = f[62..78].try_into().unwrap_or([0; 16]);
            if src == [0; 16] || target == DUT_IP6 || target == DUT_LL6 {
                // A DUT's own duplicate address detection: never answered.
                return Ok(Got::Ignored);
            }
            // Answer as the owner of the target, to the solicitation's source.
            let mac: [u8; 6] = f[6..12].try_into().unwrap_or([0; 6]);
            let router = if target == craft::GATEWAY6 { 0x80 } else { 0 };
            let lla = craft::nd_lladdr(2, PEER_MAC);
            let na = craft::na(router | 0x60, target, &lla, target, src);
            let mut h = craft::Ip6::new(target, src, craft::PROTO_ICMPV6);
            h.hop_limit = 255;
            self.send(&craft::eth(mac, PEER_MAC, ETH_IPV6, &h.packet(&na)))?;
            return Ok(Got::Resolution);
        }
        if case.peer6 == Some(dst) || (case.peer6.is_some() && icmp_type == Some(136)) {
            return Ok(Got::Mine(f));
        }
        if dst[0] == 0xff {
            return Ok(Got::Ignored);
        }
        Ok(self.stray(case, &f))
    }

    /// Receives until `deadline`: the case's frames, and the resolutions answered.
    fn collect(&mut self, case: &Case, deadline: Instant) -> io::Result<(Vec<Vec<u8>>, usize)> {
        let mut mine = Vec::new();
        let mut resolutions = 0;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok((mine, resolutions));
            }
            match self.recv_one(case, deadline - now)? {
                Some(Got::Mine(f)) => mine.push(f),
                Some(Got::Resolution) => resolutions += 1,
                _ => {}
            }
        }
    }

    fn run_frames(&mut self, case: &Case, frames: &[Vec<u8>]) -> io::Result<Outcome> {
        for f in frames {
            self.send(f)?;
        }
        let (mine, resolutions) = self.collect(case, Instant::now() + self.window)?;
        let mut conn = stateless_conn(case);
        for f in &mine {
            observe(case, &mut conn, f);
        }
        let bases = Bases {
            our_isn: Some(case.our_isn),
            dut_isn: conn.dut_isn,
            our_ts: None,
            flow: false,
            flow6: case.flow6,
        };
        self.cleanup(case, &conn)?;
        Ok(outcome(&mine, &bases, resolutions))
    }

    fn run_flow(&mut self, case: &Case, f: &Flow) -> io::Result<Outcome> {
        let mut conn = Conn::new(case, f);
        let mut w = SideWire {
            side: self,
            case,
            setup: Vec::new(),
            sent: Vec::new(),
            resolutions: 0,
            error: None,
        };
        let setup = flow::setup(f, &mut conn, &mut w);
        if let Some(e) = w.error.take() {
            return Err(e);
        }
        let (setup_frames, mut sent, setup_res) = (w.setup, w.sent, w.resolutions);
        let bases = Bases {
            our_isn: Some(case.our_isn),
            dut_isn: conn.dut_isn,
            our_ts: Some(f.ts_base),
            flow: true,
            flow6: case.flow6,
        };
        let mut out = if let Err(e) = setup {
            Outcome {
                setup_error: Some(e),
                ..Outcome::default()
            }
        } else {
            for frame in flow::edge_frames(f.edge, &mut conn) {
                sent.push(flow::describe_sent(&frame, case.our_isn));
                self.send(&frame)?;
            }
            let (mine, res) = self.collect(case, Instant::now() + self.window)?;
            for frame in &mine {
                observe(case, &mut conn, frame);
            }
            outcome(&mine, &bases, res)
        };
        out.setup = setup_frames
            .iter()
            .map(|x| normalize::normalize(x, &bases))
            .collect();
        out.resolutions += setup_res;
        out.sent = sent;
        self.cleanup(case, &conn)?;
        Ok(out)
    }

    /// Resets whatever the case left open on the DUT (no reply is compared).
    fn cleanup(&mut self, case: &Case, conn: &Conn) -> io::Result<()> {
        if let Some(rst) = flow::cleanup(conn) {
            self.send(&rst)?;
            self.collect(case, Instant::now() + CLEANUP_WAIT)?;
        }
        Ok(())
    }
}

/// The connection a stateless case may have opened (our SYN's sequence number and port).
fn stateless_conn(case: &Case) -> Conn {
    Conn {
        peer_ip: case.peer_ip,
        peer6: case.peer6,
        sport: case.sport,
        dport: case.dport,
        isn: case.our_isn,
        snd_nxt: case.our_isn.wrapping_add(1),
        ..Conn::default()
    }
}

/// Feeds a DUT frame into the connection when it is one of its segments.
fn observe(case: &Case, conn: &mut Conn, f: &[u8]) {
    if let Some(s) = parse_tcp(f) {
        if s.sport == case.dport && s.dport == case.sport {
            conn.observe(&s);
        }
    }
}

fn outcome(mine: &[Vec<u8>], bases: &Bases, resolutions: usize) -> Outcome {
    Outcome {
        replies: mine
            .iter()
            .map(|f| normalize::normalize(f, bases))
            .collect(),
        raw: mine.iter().map(|f| hex(f)).collect(),
        resolutions,
        ..Outcome::default()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The wire a flow's setup runs on: this side's socket, its window for setup steps.
struct SideWire<'a> {
    side: &'a mut Side,
    case: &'a Case,
    setup: Vec<Vec<u8>>,
    sent: Vec<String>,
    resolutions: usize,
    /// The first socket error (the flow then fails; `run_flow` returns it).
    error: Option<io::Error>,
}

impl SideWire<'_> {
    /// Receives until `deadline` or `done`; true when `done` held.
    fn receive(
        &mut self,
        conn: &mut Conn,
        deadline: Instant,
        done: &dyn Fn(&Conn) -> bool,
    ) -> bool {
        while !done(conn) {
            let now = Instant::now();
            if now >= deadline || self.error.is_some() {
                return false;
            }
            match self.side.recv_one(self.case, deadline - now) {
                Ok(Some(Got::Mine(f))) => {
                    observe(self.case, conn, &f);
                    self.setup.push(f);
                }
                Ok(Some(Got::Resolution)) => self.resolutions += 1,
                Ok(_) => {}
                Err(e) => self.error = Some(e),
            }
        }
        true
    }
}

impl Wire for SideWire<'_> {
    fn send(&mut self, frame: Vec<u8>) {
        self.sent
            .push(flow::describe_sent(&frame, self.case.our_isn));
        if let Err(e) = self.side.send(&frame) {
            self.error.get_or_insert(e);
        }
    }

    fn wait(&mut self, conn: &mut Conn, done: &dyn Fn(&Conn) -> bool) -> bool {
        let deadline = Instant::now() + self.side.setup_limit;
        self.receive(conn, deadline, done)
    }

    fn settle(&mut self, conn: &mut Conn) {
        let deadline = Instant::now() + SETTLE;
        self.receive(conn, deadline, &|_| false);
    }
}
