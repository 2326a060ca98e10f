//! Connections held through a fault: opened from both clients to each mode's VIP, driven with
//! paced `CONFIG GET bind` requests (the answer names the real), and split by what ECMP did to
//! each (on the faulted node, moved between the others, untouched).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use super::ecmp::route_nodes;
use super::{ns, rip, want, Cluster, Mode, BACKENDS, MODES, PORT};
use crate::lb_common::clients::connect;

/// How long a connection waits between an answer and its next request.
pub const PACE: Duration = Duration::from_millis(300);
/// A request answered this late needed a retransmission (TCP's minimum RTO): the fault
/// delayed it. Unfaulted ones take milliseconds, or tens of them on a loaded host.
const DELAYED: Duration = Duration::from_millis(200);
/// Held connections per mode and client (two clients).
pub const PER_CLIENT: usize = 300;

/// One held connection and what happened to it.
pub struct Conn {
    pub stream: TcpStream,
    pub mode: Mode,
    pub client: usize,
    pub sport: u16,
    pub backend: usize,
    /// The node ECMP sends it to before the fault and after the paths settled.
    pub before: usize,
    pub after: usize,
    pub sent: Option<Instant>,
    pub next: Instant,
    pub reply: Vec<u8>,
    pub failed: Option<String>,
    pub wrong_real: bool,
    /// The longest a request waited for its answer.
    pub longest: Duration,
    /// When the last request it had answered was sent: a connection survives a fault when a
    /// request sent after the paths changed is answered (one in flight before may still be).
    pub last: Option<Instant>,
    /// When the last of its requests that the fault delayed was answered, and that from the
    /// fault.
    pub late: Option<Instant>,
    pub again: Option<Duration>,
}

pub const ASK: &[u8] = b"CONFIG GET bind\r\n";

/// Which real a `CONFIG GET bind` reply came from: the one whose RIP is a bound address.
pub fn backend_of_reply(reply: &str) -> Option<usize> {
    let words: Vec<&str> = reply.split_whitespace().collect();
    (0..BACKENDS).find(|&j| words.contains(&rip(j).to_string().as_str()))
}

/// Source ports the held connections take, each once in a test: a node keeps a connection's
/// entry after the connection ends elsewhere, and a new connection on the same 5-tuple that ECMP
/// later moves to that node meets the old entry's real (docs/LB.md, "A cluster lab").
static NEXT_PORT: AtomicU16 = AtomicU16::new(20000);

/// Opens `n` connections to `target` from `src` in namespace `ns`, each from a port not used
/// before and answered once: with its real. A connect that fails is tried again from another
/// port, at most twice, and counted: after a full-NAT node restarts, its new connections can
/// meet ports the reals still hold for the connections lost with it.
pub fn hold(
    ns: &str,
    src: IpAddr,
    target: SocketAddr,
    n: usize,
) -> (Vec<(TcpStream, usize)>, usize) {
    wirespeed_sys::netns::in_netns(ns, move || {
        let mut retried = 0;
        let held = (0..n)
            .map(|i| {
                let mut s = (0..3)
                    .find_map(|attempt| {
                        retried += usize::from(attempt > 0);
                        let port = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
                        connect(target, Some(SocketAddr::new(src, port))).ok()
                    })
                    .unwrap_or_else(|| {
                        panic!("held connection {i} to {target}: 3 connects failed")
                    });
                s.write_all(ASK).unwrap();
                let mut reply = Vec::new();
                let mut buf = [0u8; 512];
                while reply.windows(2).filter(|w| w == b"\r\n").count() < 5 {
                    let got = s.read(&mut buf).unwrap_or(0);
                    assert!(got > 0, "held connection {i} to {target}: no answer");
                    reply.extend_from_slice(&buf[..got]);
                }
                let real = backend_of_reply(&String::from_utf8_lossy(&reply));
                (s, real.expect("an answer that names its real"))
            })
            .collect();
        (held, retried)
    })
    .expect("setns")
}

/// 600 connections per mode (300 from each client), each answered once.
pub fn hold_all() -> Vec<Conn> {
    let mut conns = vec![];
    for m in MODES {
        for cl in 0..2 {
            let target = SocketAddr::new(m.vip(), PORT);
            let (held, retried) = hold(&ns(&format!("c{cl}")), m.client(cl), target, PER_CLIENT);
            if retried > 0 {
                println!("  {} from c{cl}: {retried} connects tried again", m.name());
            }
            for (stream, backend) in held {
                let sport = stream.local_addr().unwrap().port();
                stream.set_nonblocking(true).unwrap();
                conns.push(Conn {
                    stream,
                    mode: m,
                    client: cl,
                    sport,
                    backend,
                    before: usize::MAX,
                    after: usize::MAX,
                    sent: None,
                    next: Instant::now(),
                    reply: vec![],
                    failed: None,
                    wrong_real: false,
                    longest: Duration::ZERO,
                    last: Some(Instant::now()),
                    late: None,
                    again: None,
                });
            }
        }
    }
    conns
}

/// Sends a request on every live connection each `PACE` after its last answer and reads the
/// answers, until `until` (checked each loop) says stop.
pub fn drive(conns: &mut [Conn], mut until: impl FnMut(&[Conn]) -> bool) {
    let mut buf = [0u8; 512];
    loop {
        let now = Instant::now();
        for k in conns.iter_mut() {
            if k.failed.is_none() && k.sent.is_none() && now >= k.next {
                match k.stream.write(ASK) {
                    Ok(n) if n == ASK.len() => k.sent = Some(now),
                    Ok(_) => k.failed = Some("short write".into()),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => k.failed = Some(format!("send: {e}")),
                }
            }
        }
        let waiting: Vec<usize> = (0..conns.len())
            .filter(|&i| conns[i].failed.is_none() && conns[i].sent.is_some())
            .collect();
        let fds: Vec<_> = waiting
            .iter()
            .map(|&i| Some(conns[i].stream.as_fd()))
            .collect();
        let readable = wirespeed_sys::bpf::poll_readable(&fds, Duration::from_millis(20));
        drop(fds);
        for (&i, _) in waiting.iter().zip(readable).filter(|(_, r)| *r) {
            let k = &mut conns[i];
            match k.stream.read(&mut buf) {
                Ok(0) => k.failed = Some("closed".into()),
                Ok(n) => k.reply.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => k.failed = Some(format!("receive: {e}")),
            }
            if k.reply.windows(2).filter(|w| w == b"\r\n").count() >= 5 {
                let now = Instant::now();
                let text = String::from_utf8_lossy(&k.reply).into_owned();
                if backend_of_reply(&text) != Some(k.backend) {
                    k.wrong_real = true;
                }
                let sent = k.sent.take().unwrap();
                let waited = now - sent;
                if waited > DELAYED {
                    k.late = Some(now);
                }
                k.longest = k.longest.max(waited);
                k.last = Some(sent);
                k.next = now + PACE;
                k.reply.clear();
            }
        }
        if until(conns) {
            return;
        }
    }
}

/// The connections of one mode, split by what ECMP did to them.
#[derive(Default, Debug)]
pub struct Split {
    pub on_node: usize,
    pub moved: usize,
    pub untouched: usize,
    /// Lost (reset, closed, or answered by another real), by split.
    pub lost_on_node: usize,
    pub lost_moved: usize,
    pub lost_untouched: usize,
    pub longest: Duration,
    /// From the fault until the last delayed request of a connection kept was answered.
    pub again: Duration,
    /// Connections kept that had a request delayed.
    pub delayed: usize,
}

pub fn split(conns: &[Conn], mode: Mode, faulted: usize) -> Split {
    let mut s = Split::default();
    for k in conns.iter().filter(|k| k.mode == mode) {
        let lost = k.failed.is_some() || k.wrong_real || k.last.is_none();
        let (count, lost_count) = if k.before == faulted {
            (&mut s.on_node, &mut s.lost_on_node)
        } else if k.after != k.before {
            (&mut s.moved, &mut s.lost_moved)
        } else {
            (&mut s.untouched, &mut s.lost_untouched)
        };
        *count += 1;
        *lost_count += usize::from(lost);
        if !lost {
            s.longest = s.longest.max(k.longest);
            s.again = s.again.max(k.again.unwrap_or_default());
            s.delayed += usize::from(k.again.is_some());
        }
    }
    s
}

/// A mode's connections split by whether their real was `real`, and the others by what ECMP
/// did to them (node `faulted` died).
#[derive(Default, Debug)]
pub struct ByReal {
    pub on_real: usize,
    pub lost_on_real: usize,
    pub moved: usize,
    pub lost_moved: usize,
    pub untouched: usize,
    pub lost_untouched: usize,
}

pub fn by_real(conns: &[Conn], mode: Mode, faulted: usize, real: usize) -> ByReal {
    let mut r = ByReal::default();
    for k in conns.iter().filter(|k| k.mode == mode) {
        let lost = usize::from(k.failed.is_some() || k.wrong_real || k.last.is_none());
        if k.backend == real {
            r.on_real += 1;
            r.lost_on_real += lost;
        } else if k.before == faulted || k.after != k.before {
            r.moved += 1;
            r.lost_moved += lost;
        } else {
            r.untouched += 1;
            r.lost_untouched += lost;
        }
    }
    r
}

/// What one fault did: printed, then checked by the caller.
pub fn report(
    fault: &str,
    conns: &[Conn],
    faulted: usize,
    withdrawn: Option<Duration>,
) -> Vec<Split> {
    let w = withdrawn.map_or("-".into(), |w| format!("{:.2} s", w.as_secs_f64()));
    println!("{fault}: paths changed after {w}");
    // Why the connections of modes that keep them were lost, for the few there are.
    let lost = conns
        .iter()
        .filter(|k| k.mode.survives_moves() && (k.failed.is_some() || k.wrong_real));
    for k in lost.take(5) {
        println!(
            "  lost: {} from c{} port {} (node {} then {}, real {}): {}",
            k.mode.name(),
            k.client,
            k.sport,
            k.before,
            k.after,
            k.backend,
            k.failed.as_deref().unwrap_or("answered by another real")
        );
    }
    MODES
        .iter()
        .map(|&m| {
            let s = split(conns, m, faulted);
            let total = s.on_node + s.moved + s.untouched;
            let kept = total - s.lost_on_node - s.lost_moved - s.lost_untouched;
            println!(
                "  {:<8} kept {kept}/{total}: on the node {} (lost {}), moved between the others {} (lost {}), untouched {} (lost {}); longest wait {:.2} s; {} delayed, the last answered {:.2} s after the fault",
                m.name(),
                s.on_node,
                s.lost_on_node,
                s.moved,
                s.lost_moved,
                s.untouched,
                s.lost_untouched,
                s.longest.as_secs_f64(),
                s.delayed,
                s.again.as_secs_f64()
            );
            s
        })
        .collect()
}

/// Runs a fault against held connections: holds fresh connections, records each one's node,
/// calls `fault`, drives the connections until the paths reach `after_nodes` and every
/// connection has answered since (or `limit` passes), and splits the result.
pub fn run_fault(
    c: &mut Cluster,
    fault: &str,
    after_nodes: &[usize],
    limit: Duration,
    act: impl FnOnce(&mut Cluster),
) -> (Vec<Conn>, Option<Duration>) {
    let mut conns = hold_all();
    let before = route_nodes(&conns);
    for (k, n) in conns.iter_mut().zip(before) {
        k.before = n;
    }
    let t = Instant::now();
    act(c);
    let mut changed = None;
    let mut last_check = Instant::now() - Duration::from_secs(1);
    drive(&mut conns, |conns| {
        if changed.is_none() && last_check.elapsed() >= Duration::from_millis(50) {
            last_check = Instant::now();
            if MODES
                .iter()
                .all(|&m| c.paths(m.vip()) == want(m, after_nodes))
            {
                changed = Some(t.elapsed());
            }
        }
        // Done when every connection has answered since, or 6 s after the change: a
        // connection that has not answered by then is lost (docs/LB.md, "A cluster lab").
        let settled = changed.is_some_and(|w| t.elapsed() > w + PACE * 3);
        let given_up = changed.is_some_and(|w| t.elapsed() > w + Duration::from_secs(6));
        let all_answered = conns.iter().all(|k| {
            k.failed.is_some() || k.last.is_some_and(|l| l > t + changed.unwrap_or_default())
        });
        (settled && all_answered) || given_up || t.elapsed() > limit
    });
    for k in conns.iter_mut() {
        if k.last.is_some_and(|l| l < t + changed.unwrap_or_default()) && k.failed.is_none() {
            k.failed = Some("no answer since the paths changed".into());
        }
    }
    let after = route_nodes(&conns);
    for (k, n) in conns.iter_mut().zip(after) {
        k.after = n;
        k.again = k.late.map(|l| l - t);
    }
    println!("{fault}: {:.1} s", t.elapsed().as_secs_f64());
    (conns, changed)
}
