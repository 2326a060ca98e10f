//! Health checks: TCP connect, HTTP GET, Redis PING, each with an interval, a timeout, rise
//! and fall. One scheduler thread runs them at a fixed rate; each probe runs on its own
//! short-lived thread and reports back, so a slow real never delays another's probe or
//! verdict and nothing here ever holds up the control socket. A change of verdict goes to the
//! daemon as a [`HealthEvent`] that wakes its loop, which re-plans at once.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
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
    /// When the next probe starts. Probes run at a fixed rate from the first one (the next
    /// is due one interval after the last was due, not after it ended), so a verdict never
    /// drifts later than `fall` (or `rise`) intervals after the change it reports.
    due: Instant,
    /// A probe of this target is running (its result comes back on the channel).
    in_flight: bool,
}

/// The checker thread. Dropping it stops the thread.
pub struct Checker {
    targets: Arc<Mutex<Vec<Target>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The longest the scheduler sleeps, so that new targets and a stop are seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// A probe's result, sent back by its thread.
struct Outcome {
    key: (ServiceKey, SocketAddr),
    check: HealthCheck,
    ok: bool,
}

impl Checker {
    /// Starts the checker; `on_change` is called with every change of verdict, from the
    /// checker's thread, and stops the checker by returning false.
    pub fn start(
        on_change: impl FnMut(HealthEvent) -> bool + Send + 'static,
    ) -> std::io::Result<Checker> {
        let targets = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (targets.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("lb health".into())
            .spawn(move || run(t, s, on_change))?;
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

/// The scheduler: starts each due probe on its own short-lived thread and takes results as
/// they come, so a real that times out never delays another real's probe or verdict.
fn run(
    targets: Arc<Mutex<Vec<Target>>>,
    stop: Arc<AtomicBool>,
    mut on_change: impl FnMut(HealthEvent) -> bool,
) {
    let mut tracked: HashMap<(ServiceKey, SocketAddr), Tracked> = HashMap::new();
    let (done_tx, done) = mpsc::channel::<Outcome>();
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
                    in_flight: false,
                });
            }
        }
        for (key, t) in tracked.iter_mut() {
            if t.in_flight || t.due > now {
                continue;
            }
            let (key, check, tx) = (*key, t.target.check.clone(), done_tx.clone());
            let started = std::thread::Builder::new()
                .name("lb probe".into())
                .spawn(move || {
                    let ok = probe(&check.kind, key.1, check.timeout);
                    let _ = tx.send(Outcome { key, check, ok });
                });
            // A thread that cannot start counts as a failed probe of this round.
            if started.is_err() {
                let _ = done_tx.send(Outcome {
                    key,
                    check: t.target.check.clone(),
                    ok: false,
                });
            }
            t.in_flight = true;
            // The next probe is one interval after this one was due; a schedule that fell
            // behind (a probe slower than the interval) restarts from now.
            t.due += t.target.check.interval;
            if t.due <= now {
                t.due = now + t.target.check.interval;
            }
        }
        let next_due = tracked
            .values()
            .filter(|t| !t.in_flight)
            .map(|t| t.due)
            .min()
            .unwrap_or(now + MAX_SLEEP);
        let wait = next_due
            .saturating_duration_since(Instant::now())
            .min(MAX_SLEEP);
        let Ok(first) = done.recv_timeout(wait) else {
            continue;
        };
        for out in std::iter::once(first).chain(done.try_iter()) {
            // A target replaced or removed while its probe ran: the result is stale.
            let Some(t) = tracked.get_mut(&out.key) else {
                continue;
            };
            if t.target.check != out.check {
                continue;
            }
            t.in_flight = false;
            let Some(health) = t.verdict.observe(out.ok, out.check.rise, out.check.fall) else {
                continue;
            };
            let ev = HealthEvent {
                service: out.key.0,
                real: out.key.1,
                health,
            };
            if !on_change(ev) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Proto;
    use std::net::TcpListener;

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
        let checker = Checker::start(move |ev| tx.send(ev).is_ok()).unwrap();
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
