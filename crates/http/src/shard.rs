//! What one shard of `wirespeed serve` runs: the accept loop, one task per connection (HTTP,
//! or echo), the `--max-conns` limit, a graceful stop on SIGINT/SIGTERM, and the shard's
//! summary. Written against the stack-independent socket API.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use serde::Serialize;
use wirespeed_net::{TcpListener, TcpStream};
use wirespeed_rt::Either;

use crate::date::DateCache;
use crate::metrics::ShardStats;
use crate::server;

/// What the shard serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum App {
    /// HTTP/1.1 (`server::Config::fixed` picks the canned-response mode).
    Http,
    /// Every byte received is sent back.
    Echo,
}

/// What one shard did; summed into the exit line.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ShardSummary {
    pub cpu: usize,
    pub connections: u64,
    pub requests: u64,
    pub bad_request: u64,
    pub headers_too_large: u64,
    pub not_found: u64,
    pub other_errors: u64,
    pub idle_closed: u64,
    pub refused: u64,
    /// Accepted connections whose SO_INCOMING_CPU was this shard's CPU.
    pub local_connections: u64,
    pub bytes_echoed: u64,
}

impl ShardSummary {
    /// Adds `o`'s counts (not its CPU).
    pub fn add(&mut self, o: &ShardSummary) {
        self.connections += o.connections;
        self.requests += o.requests;
        self.bad_request += o.bad_request;
        self.headers_too_large += o.headers_too_large;
        self.not_found += o.not_found;
        self.other_errors += o.other_errors;
        self.idle_closed += o.idle_closed;
        self.refused += o.refused;
        self.local_connections += o.local_connections;
        self.bytes_echoed += o.bytes_echoed;
    }

    /// Requests answered with an error status, or lost to one.
    pub fn errors(&self) -> u64 {
        self.bad_request + self.headers_too_large + self.not_found + self.other_errors
    }
}

struct ShardState {
    stats: ShardStats,
    date: DateCache,
    local: Cell<u64>,
    echoed: Cell<u64>,
}

const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

/// Accepts on `listener` until the runtime's shutdown signal, serving each connection as
/// `app`; at most `max_conns` at once (HTTP answers the rest 503, echo closes them). Counts
/// into `stats` (this shard's, which `--metrics` reads).
pub async fn serve(
    listener: TcpListener,
    cfg: server::Config,
    app: App,
    max_conns: usize,
    stats: ShardStats,
) -> ShardSummary {
    let state = Rc::new(ShardState {
        stats,
        date: DateCache::default(),
        local: Cell::new(0),
        echoed: Cell::new(0),
    });
    let ticker = state.clone();
    let _date_task = wirespeed_rt::spawn(async move {
        let mut every_second = wirespeed_rt::interval(Duration::from_secs(1));
        loop {
            every_second.tick().await;
            ticker.date.refresh();
        }
    });
    let cfg = Rc::new(cfg);
    loop {
        let conn = match wirespeed_rt::select(wirespeed_rt::shutdown_signal(), listener.accept())
            .await
        {
            Either::Left(()) => break,
            Either::Right(Ok(c)) => c,
            Either::Right(Err(e)) => {
                // EMFILE and friends: back off briefly instead of spinning on the error.
                if matches!(e.raw_os_error(), Some(EMFILE) | Some(ENFILE)) {
                    eprintln!("wirespeed serve: accept: {e} (raise the fd limit with ulimit -n)");
                }
                wirespeed_rt::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if conn.incoming_cpu() == Some(wirespeed_rt::cpu()) {
            state.local.set(state.local.get() + 1);
        }
        let st = state.clone();
        if st.stats.open.get() >= max_conns as u64 {
            wirespeed_rt::spawn(async move {
                match app {
                    App::Http => server::refuse(conn, &st.date, &st.stats).await,
                    App::Echo => st.stats.refused.set(st.stats.refused.get() + 1),
                }
            });
            continue;
        }
        st.stats.open.bump();
        let cfg = cfg.clone();
        wirespeed_rt::spawn(async move {
            match app {
                App::Http => server::serve_connection(conn, &cfg, &st.date, &st.stats).await,
                App::Echo => echo_connection(conn, &cfg, &st).await,
            }
            st.stats.open.drop_one();
        });
    }
    // Graceful stop: no new connections; give open ones a moment to finish their exchange.
    drop(listener);
    let deadline = wirespeed_rt::now() + Duration::from_millis(500);
    while state.stats.open.get() > 0 && wirespeed_rt::now() < deadline {
        wirespeed_rt::sleep(Duration::from_millis(10)).await;
    }
    let s = &state.stats;
    ShardSummary {
        cpu: wirespeed_rt::cpu(),
        connections: s.connections.get() + s.refused.get(),
        requests: s.requests.get(),
        bad_request: s.bad_request.get(),
        headers_too_large: s.headers_too_large.get(),
        not_found: s.not_found.get(),
        other_errors: s.other_errors.get(),
        idle_closed: s.idle_closed.get(),
        refused: s.refused.get(),
        local_connections: state.local.get(),
        bytes_echoed: state.echoed.get(),
    }
}

async fn echo_connection(mut conn: TcpStream, cfg: &server::Config, st: &ShardState) {
    st.stats.connections.set(st.stats.connections.get() + 1);
    let mut buf = vec![0u8; 64 * 1024];
    let mut idle = wirespeed_rt::sleep(cfg.idle_timeout);
    loop {
        let n = match wirespeed_rt::race(&mut idle, conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            Err(_) => {
                st.stats.idle_closed.set(st.stats.idle_closed.get() + 1);
                return;
            }
            _ => return,
        };
        match wirespeed_rt::race(&mut idle, conn.write_all(&buf[..n])).await {
            Ok(Ok(())) => {}
            _ => return,
        }
        st.echoed.set(st.echoed.get() + n as u64);
        st.stats.requests.set(st.stats.requests.get() + 1);
        idle.reset(wirespeed_rt::now() + cfg.idle_timeout);
    }
}
