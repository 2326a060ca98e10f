//! The load engine against an in-test HTTP server on loopback.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wirespeed_load::http::{build_request, HttpParser, Target};
use wirespeed_load::{self as load, LoadSpec};

/// A thread-per-connection HTTP server. When `stall_after` is set, the first response
/// after that moment starts a `stall` window during which no connection answers.
struct TestServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl TestServer {
    fn start(stall_after: Option<Duration>, stall: Duration, chunked: bool) -> TestServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let t0 = Instant::now();
        let stall_until: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
        std::thread::spawn(move || {
            for s in l.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut s) = s else { continue };
                let stall_until = stall_until.clone();
                let stop3 = stop2.clone();
                std::thread::spawn(move || {
                    s.set_nodelay(true).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(200)))
                        .unwrap();
                    let mut buf = Vec::new();
                    let mut tmp = [0u8; 4096];
                    let resp: &[u8] = if chunked {
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nHello\r\n8\r\n, World!\r\n0\r\n\r\n"
                    } else {
                        b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nHello, World!"
                    };
                    while !stop3.load(Ordering::Relaxed) {
                        let n = match s.read(&mut tmp) {
                            Ok(0) => return,
                            Ok(n) => n,
                            Err(_) => continue,
                        };
                        buf.extend_from_slice(&tmp[..n]);
                        let mut out = Vec::new();
                        while let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..i + 4);
                            out.extend_from_slice(resp);
                        }
                        if let Some(after) = stall_after {
                            let wait = {
                                let mut g = stall_until.lock().unwrap();
                                if g.is_none() && t0.elapsed() >= after {
                                    *g = Some(Instant::now() + stall);
                                }
                                g.map(|u| u.saturating_duration_since(Instant::now()))
                            };
                            if let Some(w) = wait {
                                std::thread::sleep(w);
                            }
                        }
                        if s.write_all(&out).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        TestServer { addr, stop }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

fn spec(addr: SocketAddr, conns: usize, depth: usize, rate: Option<f64>, dur_ms: u64) -> LoadSpec {
    let t = Target::parse(&format!("http://{addr}/plaintext")).unwrap();
    LoadSpec {
        addr,
        connections: conns,
        threads: 1,
        cpus: None,
        warmup: Duration::from_millis(200),
        duration: Duration::from_millis(dur_ms),
        depth,
        rate,
        timeout: Duration::from_secs(2),
        request: build_request("GET", &t, &[]).unwrap(),
        live: false,
        phase: None,
        engine: load::Engine::Epoll,
    }
}

const ENGINES: [load::Engine; 2] = [load::Engine::Epoll, load::Engine::Uring];

#[test]
fn closed_loop_counts_pipelined_and_chunked_responses() {
    for ((chunked, depth), engine) in [(false, 1), (true, 4)]
        .into_iter()
        .flat_map(|c| ENGINES.map(|e| (c, e)))
    {
        let srv = TestServer::start(None, Duration::ZERO, chunked);
        let mut s = spec(srv.addr, 4, depth, None, 500);
        s.engine = engine;
        let r = load::run(&s, HttpParser::default()).unwrap();
        assert_eq!(
            r.engine, engine,
            "io_uring must be available on the test machines"
        );
        assert!(r.requests > 100, "only {} requests", r.requests);
        assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
        assert_eq!(r.hist.len(), r.requests);
    }
}

#[test]
fn connect_errors_are_counted_not_fatal() {
    // A port nobody listens on: bind, learn the port, close.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let r = load::run(&spec(addr, 2, 1, None, 300), HttpParser::default()).unwrap();
    assert_eq!(r.requests, 0);
    assert!(r.errors.connect > 0, "{:?}", r.errors);
}

#[test]
fn open_loop_shows_a_server_stall_that_closed_loop_hides() {
    for engine in ENGINES {
        stall_case(engine);
    }
}

fn stall_case(engine: load::Engine) {
    let stall = Duration::from_millis(100);
    // The stall starts 0.8 s after the server does, inside the 1.5 s measured window.
    let closed = {
        let srv = TestServer::start(Some(Duration::from_millis(800)), stall, false);
        let mut s = spec(srv.addr, 4, 1, None, 1500);
        s.engine = engine;
        load::run(&s, HttpParser::default()).unwrap()
    };
    let open = {
        let srv = TestServer::start(Some(Duration::from_millis(800)), stall, false);
        load::run(
            &spec(srv.addr, 4, 1, Some(2000.0), 1500),
            HttpParser::default(),
        )
        .unwrap()
    };
    let (cp99, op99) = (closed.hist.quantile_ns(0.99), open.hist.quantile_ns(0.99));
    eprintln!(
        "{engine:?} closed: {} req, p99 {} us, max {} us; open: {} req, p99 {} us, max {} us",
        closed.requests,
        cp99 / 1000,
        closed.hist.max_ns() / 1000,
        open.requests,
        op99 / 1000,
        open.hist.max_ns() / 1000
    );
    // Both loops saw the stall ...
    assert!(closed.hist.max_ns() >= 90_000_000 && open.hist.max_ns() >= 90_000_000);
    // ... but only the open loop charges it to every request that was due during it.
    assert!(
        op99 >= 30_000_000,
        "open-loop p99 {op99} ns misses the stall"
    );
    assert!(
        cp99 < 30_000_000,
        "closed-loop p99 {cp99} ns should not show a single stall"
    );
    assert!(
        open.requests >= 2000,
        "open loop sent {} requests",
        open.requests
    );
}

fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn echo_pingpong_and_stream() {
    use wirespeed_load::echo::{message, EchoParser};
    let addr = echo_server();
    for ((conns, depth), engine) in [(8, 1), (2, 32)]
        .into_iter()
        .flat_map(|c| ENGINES.map(|e| (c, e)))
    {
        let mut s = spec(addr, conns, depth, None, 400);
        s.engine = engine;
        s.request = message(512);
        let r = load::run(&s, EchoParser::new(512)).unwrap();
        assert!(r.requests > 100, "{} messages", r.requests);
        assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
        // Every completed message was written and read back in full.
        assert!(r.bytes_read >= r.requests * 512 - 512 * (conns * depth) as u64);
    }
}
