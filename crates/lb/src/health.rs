//! Health checks: TCP connect, HTTP GET, Redis PING, each with an interval, a timeout, rise
//! and fall. One scheduler thread runs them; the probes that fall due together run at once,
//! one short-lived thread each, so a slow real never delays another's verdict and nothing
//! here ever holds up the control socket. A change of verdict goes to the daemon as a
//! [`HealthEvent`], which re-plans at once.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::model::{CheckKind, Health, HealthCheck, ServiceKey};

/// One real to check, with its service's check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub service: ServiceKey,
    pub real: SocketAddr,
    pub check: HealthCheck,
}

/// A real's verdict changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthEvent {
    pub service: ServiceKey,
    pub real: SocketAddr,
    pub health: Health,
}

/// Runs one probe; true when the real answered as a healthy one does.
pub fn probe(kind: &CheckKind, addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return false;
    }
    let _ = s.set_read_timeout(Some(left));
    let _ = s.set_write_timeout(Some(left));
    match kind {
        CheckKind::Tcp => true,
        CheckKind::Http { path } => {
            let host = match addr {
                SocketAddr::V4(a) => a.ip().to_string(),
                SocketAddr::V6(a) => format!("[{}]", a.ip()),
            };
            let req = format!(
                "GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: wirespeed-lb-check\r\n\r\n"
            );
            if s.write_all(req.as_bytes()).is_err() {
                return false;
            }
            // "HTTP/1.x NNN": the status is the 3 digits after the first space.
            let head = read_until(&mut s, 16, deadline);
            let text = String::from_utf8_lossy(&head);
            text.starts_with("HTTP/1.")
                && matches!(
                    text.split(' ').nth(1).and_then(|c| c.chars().next()),
                    Some('2' | '3')
                )
        }
        CheckKind::Redis => {
            if s.write_all(b"PING\r\n").is_err() {
                return false;
            }
            read_until(&mut s, 7, deadline).starts_with(b"+PONG\r\n")
        }
    }
}

/// Reads until `want` bytes arrived, the peer closed, or the deadline passed.
fn read_until(s: &mut TcpStream, want: usize, deadline: Instant) -> Vec<u8> {
    let mut buf = vec![0u8; want];
    let mut got = 0;
    while got < want && Instant::now() < deadline {
        match s.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    buf.truncate(got);
    buf
}

/// Rise/fall over consecutive results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub health: Health,
    successes: u32,
    failures: u32,
}

impl Default for Verdict {
    fn default() -> Self {
        Verdict {
            health: Health::Unchecked,
            successes: 0,
            failures: 0,
        }
    }
}

impl Verdict {
    /// Takes one result; returns the new health when it changed. Until a first conclusion
    /// the real is `Unchecked` (and keeps its weight): `rise` successes make it up, `fall`
    /// failures down.
    pub fn observe(&mut self, ok: bool, rise: u32, fall: u32) -> Option<Health> {
        if ok {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
        } else {
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
        }
        let next = if ok && self.successes >= rise {
            Health::Up
        } else if !ok && self.failures >= fall {
            Health::Down
        } else {
            return None;
        };
        if next == self.health {
            return None;
        }
        self.health = next;
        Some(next)
    }
}

struct Tracked {
    target: Target,
    verdict: Verdict,
    due: Instant,
}

/// The checker thread. Dropping it stops the thread.
pub struct Checker {
    targets: Arc<Mutex<Vec<Target>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How often the scheduler thread wakes to see what fell due.
const TICK: Duration = Duration::from_millis(20);

impl Checker {
    pub fn start(events: Sender<HealthEvent>) -> std::io::Result<Checker> {
        let targets = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (targets.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("lb health".into())
            .spawn(move || run(t, s, events))?;
        Ok(Checker {
            targets,
            stop,
            thread: Some(thread),
        })
    }

    /// Replaces what is checked. A target that stays (same service, real and check) keeps
    /// its verdict and its schedule.
    pub fn set_targets(&self, targets: Vec<Target>) {
        *self.targets.lock().unwrap_or_else(|p| p.into_inner()) = targets;
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(targets: Arc<Mutex<Vec<Target>>>, stop: Arc<AtomicBool>, events: Sender<HealthEvent>) {
    let mut tracked: HashMap<(ServiceKey, SocketAddr), Tracked> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        {
            let wanted = targets.lock().unwrap_or_else(|p| p.into_inner()).clone();
            tracked.retain(|k, t| {
                wanted
                    .iter()
                    .any(|w| (w.service, w.real) == *k && w.check == t.target.check)
            });
            for w in wanted {
                tracked.entry((w.service, w.real)).or_insert(Tracked {
                    target: w,
                    verdict: Verdict::default(),
                    due: now,
                });
            }
        }
        let due: Vec<Target> = tracked
            .values()
            .filter(|t| t.due <= now)
            .map(|t| t.target.clone())
            .collect();
        if due.is_empty() {
            std::thread::sleep(TICK);
            continue;
        }
        let results: Vec<bool> = std::thread::scope(|scope| {
            let handles: Vec<_> = due
                .iter()
                .map(|t| scope.spawn(|| probe(&t.check.kind, t.real, t.check.timeout)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(false))
                .collect()
        });
        for (t, ok) in due.iter().zip(results) {
            let Some(tr) = tracked.get_mut(&(t.service, t.real)) else {
                continue;
            };
            tr.due = now + t.check.interval;
            if let Some(health) = tr.verdict.observe(ok, t.check.rise, t.check.fall) {
                if events
                    .send(HealthEvent {
                        service: t.service,
                        real: t.real,
                        health,
                    })
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Proto;
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A fake server on 127.0.0.1 that answers each connection with `reply` after reading
    /// one request, until `stop` is set; then it closes its listener.
    fn serve(reply: &'static [u8], stop: Arc<AtomicBool>) -> (SocketAddr, JoinHandle<()>) {
        serve_on(TcpListener::bind("127.0.0.1:0").unwrap(), reply, stop)
    }

    fn serve_on(
        l: TcpListener,
        reply: &'static [u8],
        stop: Arc<AtomicBool>,
    ) -> (SocketAddr, JoinHandle<()>) {
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                        let mut buf = [0u8; 512];
                        let _ = s.read(&mut buf);
                        let _ = s.write_all(reply);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        (addr, h)
    }

    /// A loopback port with nothing listening on it.
    fn closed_port() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }

    const T: Duration = Duration::from_secs(2);

    #[test]
    fn probes_tell_a_healthy_server_from_a_wrong_or_absent_one() {
        let stop = Arc::new(AtomicBool::new(false));
        let (redis, h1) = serve(b"+PONG\r\n", stop.clone());
        let (http_ok, h2) = serve(b"HTTP/1.0 301 Moved\r\n\r\n", stop.clone());
        let (http_bad, h3) = serve(b"HTTP/1.1 503 Busy\r\n\r\n", stop.clone());
        let (not_redis, h4) = serve(b"-ERR no\r\n", stop.clone());
        let closed = closed_port();
        assert!(probe(&CheckKind::Redis, redis, T));
        assert!(!probe(&CheckKind::Redis, not_redis, T));
        assert!(!probe(&CheckKind::Redis, closed, T));
        let path = CheckKind::Http { path: "/".into() };
        assert!(probe(&path, http_ok, T));
        assert!(!probe(&path, http_bad, T));
        assert!(probe(&CheckKind::Tcp, http_bad, T));
        assert!(!probe(&CheckKind::Tcp, closed, T));
        stop.store(true, Ordering::Relaxed);
        for h in [h1, h2, h3, h4] {
            h.join().unwrap();
        }
    }

    #[test]
    fn rise_and_fall_count_consecutive_results() {
        let mut v = Verdict::default();
        assert_eq!(v.observe(true, 2, 3), None);
        assert_eq!(v.observe(true, 2, 3), Some(Health::Up));
        assert_eq!(v.observe(true, 2, 3), None);
        assert_eq!(v.observe(false, 2, 3), None);
        assert_eq!(v.observe(false, 2, 3), None);
        assert_eq!(
            v.observe(true, 2, 3),
            None,
            "a success breaks the run of failures"
        );
        assert_eq!(v.observe(false, 2, 3), None);
        assert_eq!(v.observe(false, 2, 3), None);
        assert_eq!(v.observe(false, 2, 3), Some(Health::Down));
        assert_eq!(v.observe(false, 2, 3), None);
        assert_eq!(v.observe(true, 2, 3), None);
        assert_eq!(v.observe(true, 2, 3), Some(Health::Up));
    }

    #[test]
    fn checker_takes_a_stopped_redis_out_and_brings_it_back() {
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, server) = serve(b"+PONG\r\n", stop.clone());
        let (tx, rx) = mpsc::channel();
        let checker = Checker::start(tx).unwrap();
        let service = ServiceKey {
            proto: Proto::Tcp,
            vip: "198.18.0.10:6379".parse().unwrap(),
        };
        checker.set_targets(vec![Target {
            service,
            real: addr,
            check: HealthCheck {
                kind: CheckKind::Redis,
                interval: Duration::from_millis(50),
                timeout: Duration::from_millis(500),
                rise: 2,
                fall: 2,
            },
        }]);
        let wait = Duration::from_secs(20);
        let ev = rx.recv_timeout(wait).expect("no verdict");
        assert_eq!((ev.real, ev.health), (addr, Health::Up));
        // The fake redis stops answering (its listener closes): the real goes down.
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        let ev = rx.recv_timeout(wait).expect("no down verdict");
        assert_eq!((ev.real, ev.health), (addr, Health::Down));
        // A redis on the same port again: it comes back.
        let stop = Arc::new(AtomicBool::new(false));
        let (_, back) = serve_on(TcpListener::bind(addr).unwrap(), b"+PONG\r\n", stop.clone());
        let ev = rx.recv_timeout(wait).expect("no up verdict");
        assert_eq!((ev.real, ev.health), (addr, Health::Up));
        drop(checker);
        stop.store(true, Ordering::Relaxed);
        back.join().unwrap();
    }
}
