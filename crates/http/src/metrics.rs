//! `serve --metrics`: every shard counts into its own [`Stats`] (only it writes them), and a
//! task on shard 0 answers `/metrics` on the kernel stack, reading each shard's counters at
//! scrape time. No thread and no lock: the request path does what it did with plain cells.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use wirespeed_metrics::request::{self, MAX_REQUEST};
use wirespeed_metrics::{Counter, Kind, Writer};
use wirespeed_rt::io::Socket;
use wirespeed_rt::Either;

use crate::server::Stats;

/// A scraper that has not sent its request, or not taken the answer, in this long is closed.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The counters of every shard, indexed by shard, and the names of the stack's counters.
#[derive(Clone, Debug)]
pub struct ServeStats {
    shards: Arc<[Stats]>,
    stack_names: &'static [&'static str],
}

impl ServeStats {
    /// `stack`: the names of the bypass stack's counters each shard publishes (none on the
    /// kernel stack).
    pub fn new(shards: usize, stack: &'static [&'static str]) -> ServeStats {
        let shard = || Stats {
            stack: stack.iter().map(|_| Counter::default()).collect(),
            ..Stats::default()
        };
        ServeStats {
            shards: (0..shards).map(|_| shard()).collect(),
            stack_names: stack,
        }
    }

    /// Shard `i`'s counters, for that shard to write.
    pub fn shard(&self, i: usize) -> ShardStats {
        assert!(i < self.shards.len(), "shard {i} of {}", self.shards.len());
        ShardStats {
            all: self.shards.clone(),
            me: i,
        }
    }

    /// The exposition: every shard's counters as they are now, labelled `shard`.
    pub fn render(&self) -> String {
        let mut w = Writer::new();
        let shards: Vec<(String, &Stats)> = self
            .shards
            .iter()
            .enumerate()
            .map(|(i, s)| (i.to_string(), s))
            .collect();
        type Get = fn(&Stats) -> u64;
        let counters: [(&str, Kind, &str, Get); 5] = [
            (
                "wirespeed_serve_requests_total",
                Kind::Counter,
                "Requests answered (HTTP), or reads echoed (echo), by shard.",
                |s| s.requests.get(),
            ),
            (
                "wirespeed_serve_connections_total",
                Kind::Counter,
                "Connections accepted and served, by shard (refused ones not included).",
                |s| s.connections.get(),
            ),
            (
                "wirespeed_serve_connections_refused_total",
                Kind::Counter,
                "Connections refused past --max-conns (HTTP: 503), by shard.",
                |s| s.refused.get(),
            ),
            (
                "wirespeed_serve_connections_idle_closed_total",
                Kind::Counter,
                "Connections closed after --idle-timeout without traffic, by shard.",
                |s| s.idle_closed.get(),
            ),
            (
                "wirespeed_serve_open_connections",
                Kind::Gauge,
                "Connections open now, by shard.",
                |s| s.open.get(),
            ),
        ];
        for (name, kind, help, get) in counters {
            w.family(name, kind, help);
            for (i, s) in &shards {
                w.sample(&[("shard", i)], get(s));
            }
        }
        w.family(
            "wirespeed_serve_errors_total",
            Kind::Counter,
            "Requests answered with an error, by shard and kind: bad_request (400), \
             headers_too_large (431), not_found (404), other (405, and errors that lost the request).",
        );
        for (i, s) in &shards {
            for (kind, n) in [
                ("bad_request", s.bad_request.get()),
                ("headers_too_large", s.headers_too_large.get()),
                ("not_found", s.not_found.get()),
                ("other", s.other_errors.get()),
            ] {
                w.sample(&[("shard", i), ("kind", kind)], n);
            }
        }
        self.render_stack(&mut w, &shards);
        w.finish()
    }

    /// The bypass stack's counters, one family labelled by shard and counter (each
    /// `tcpip::Stats` field, docs/TCPIP.md), as the shards last published them.
    fn render_stack(&self, w: &mut Writer, shards: &[(String, &Stats)]) {
        if self.stack_names.is_empty() {
            return;
        }
        w.family(
            "wirespeed_serve_stack_events_total",
            Kind::Counter,
            "The bypass stack's counters (frames, segments, and every drop and answer by \
             reason), by shard and counter; published every 250 ms.",
        );
        for (i, s) in shards {
            for (name, c) in self.stack_names.iter().zip(s.stack.iter()) {
                w.sample(&[("shard", i), ("counter", name)], c.get());
            }
        }
    }
}

/// One shard's handle on its own counters.
#[derive(Clone, Debug)]
pub struct ShardStats {
    all: Arc<[Stats]>,
    me: usize,
}

impl ShardStats {
    /// Copies the stack's counters in (`values` in the order of the names given to
    /// `ServeStats::new`); only this shard may call it.
    pub fn publish_stack(&self, values: impl Iterator<Item = u64>) {
        for (c, v) in self.stack.iter().zip(values) {
            c.set(v);
        }
    }
}

impl std::ops::Deref for ShardStats {
    type Target = Stats;
    fn deref(&self) -> &Stats {
        &self.all[self.me]
    }
}

/// Binds `addr` for `/metrics` (before the shards start, so that an error is reported at once).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Answers scrapers on `listener` until the runtime's shutdown signal; run it as a task on
/// one shard (shard 0). Each connection is a task on the same shard.
pub async fn serve(listener: TcpListener, stats: ServeStats) {
    let listener = match Socket::register(OwnedFd::from(listener)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wirespeed serve: --metrics: {e}");
            return;
        }
    };
    loop {
        match wirespeed_rt::select(wirespeed_rt::shutdown_signal(), listener.accept()).await {
            Either::Left(()) => return,
            Either::Right(Ok(fd)) => {
                let stats = stats.clone();
                wirespeed_rt::spawn(async move {
                    if let Ok(conn) = Socket::register(fd) {
                        let _ = wirespeed_rt::timeout(SCRAPE_TIMEOUT, answer(&conn, &stats)).await;
                    }
                });
            }
            // Out of fds and the like: try again shortly rather than spin.
            Either::Right(Err(_)) => wirespeed_rt::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn answer(conn: &Socket, stats: &ServeStats) {
    let mut input = Vec::new();
    let mut buf = [0u8; 2048];
    let req = loop {
        match conn.recv(&mut buf).await {
            Ok(n) if n > 0 => input.extend_from_slice(&buf[..n]),
            _ => return,
        }
        if let Some(r) = request::parse(&input) {
            break r;
        }
        if input.len() > MAX_REQUEST {
            break request::Request::Bad;
        }
    };
    let out = request::respond(req, || stats.render());
    if conn.send_all(&out).await.is_ok() {
        let _ = conn.shutdown(std::net::Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shard_is_labelled_and_written_by_its_own_handle() {
        let stats = ServeStats::new(2, &["tcp_listen_dropped", "rx_frames"]);
        let (s0, s1) = (stats.shard(0), stats.shard(1));
        s1.publish_stack([3, 40].into_iter());
        std::thread::scope(|sc| {
            sc.spawn(|| (0..5).for_each(|_| s0.requests.bump()));
            sc.spawn(|| {
                (0..7).for_each(|_| s1.requests.bump());
                s1.not_found.bump();
                s1.open.bump();
            });
        });
        let text = stats.render();
        for line in [
            "wirespeed_serve_requests_total{shard=\"0\"} 5",
            "wirespeed_serve_requests_total{shard=\"1\"} 7",
            "wirespeed_serve_errors_total{shard=\"1\",kind=\"not_found\"} 1",
            "wirespeed_serve_errors_total{shard=\"0\",kind=\"not_found\"} 0",
            "wirespeed_serve_open_connections{shard=\"1\"} 1",
            "wirespeed_serve_stack_events_total{shard=\"1\",counter=\"tcp_listen_dropped\"} 3",
            "wirespeed_serve_stack_events_total{shard=\"1\",counter=\"rx_frames\"} 40",
            "wirespeed_serve_stack_events_total{shard=\"0\",counter=\"rx_frames\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
