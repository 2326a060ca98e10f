//! `wirespeed serve` driven from outside, as a user would: the release binary on loopback,
//! checked with curl, with raw sockets and with `wirespeed bench`. Every serve test runs on
//! both engines.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wirespeed_sys::process;
use wirespeed_sys::signal::Signal;

const ENGINES: [&str; 2] = ["epoll", "uring"];

struct Server {
    child: Child,
    addr: SocketAddr,
    stderr: BufReader<std::process::ChildStderr>,
    /// What it said up to and including its listening line.
    said: String,
}

impl Server {
    fn start(app: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
            .args(["serve", app, "--listen", "127.0.0.1:0", "--cpus", "0"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wirespeed serve");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut said = String::new();
        while !said.contains("listening on ") {
            if stderr.read_line(&mut said).unwrap() == 0 {
                panic!("no listening line: {said:?}");
            }
        }
        let addr = said
            .split("listening on ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .unwrap()
            .parse()
            .unwrap();
        Server {
            child,
            addr,
            stderr,
            said,
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// SIGINT, then the exit status and the summary line.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        let _ = process::kill(self.child.id(), Signal::Interrupt);
        let status = self.child.wait().unwrap();
        let mut rest = String::new();
        self.stderr.read_to_string(&mut rest).unwrap();
        (status, rest)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Status, headers, body.
type Response = (u16, Vec<(String, String)>, Vec<u8>);

/// Reads one response (status line, headers, Content-Length body).
fn read_response(r: &mut impl BufRead) -> Option<Response> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let code: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((code, headers, body))
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> &'a str {
    h.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("missing header {name}"))
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes()
}

fn reads_to_eof(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn curl_sees_plaintext_and_json_with_the_required_headers() {
    for engine in ENGINES {
        let srv = Server::start("http", &["--engine", engine]);
        for (path, ctype, body) in [
            ("plaintext", "text/plain", "Hello, World!"),
            ("json", "application/json", r#"{"message":"Hello, World!"}"#),
        ] {
            let out = Command::new("curl")
                .args([
                    "-sS",
                    "-i",
                    "--http1.1",
                    &format!("http://{}/{path}", srv.addr),
                ])
                .output()
                .expect("curl (apt install curl)");
            assert!(
                out.status.success(),
                "curl failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            let (head, got_body) = text.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with("HTTP/1.1 200 OK"), "{engine}: {head}");
            assert!(head.contains("\r\nServer: wirespeed"), "{engine}: {head}");
            assert!(
                head.contains(&format!("\r\nContent-Type: {ctype}")),
                "{engine}: {head}"
            );
            assert!(
                head.contains(&format!("\r\nContent-Length: {}", body.len())),
                "{engine}: {head}"
            );
            let date = head
                .lines()
                .find(|l| l.starts_with("Date: "))
                .expect("Date header");
            // IMF-fixdate: "Date: Sun, 06 Nov 1994 08:49:37 GMT"
            assert_eq!(date.len(), "Date: ".len() + 29, "{date}");
            assert!(date.ends_with(" GMT"), "{date}");
            assert_eq!(got_body, body, "{engine}");
        }
        let (status, summary) = srv.stop();
        assert!(status.success(), "{engine}: exit {status:?}");
        assert!(
            summary.contains("connections 2, requests 2, errors 0"),
            "{engine}: {summary}"
        );
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    for engine in ENGINES {
        let srv = Server::start("http", &["--engine", engine]);
        let mut s = srv.connect();
        let mut batch = Vec::new();
        let paths = ["/plaintext", "/json", "/missing", "/plaintext", "/json"];
        for p in paths {
            batch.extend(get(p));
        }
        // One write for all of them, and again split at awkward places.
        s.write_all(&batch).unwrap();
        for (i, chunk) in batch.chunks(7).enumerate() {
            s.write_all(chunk).unwrap();
            if i % 5 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let mut r = BufReader::new(s);
        for round in 0..2 {
            for p in paths {
                let (code, h, body) = read_response(&mut r)
                    .unwrap_or_else(|| panic!("{engine}: no response for {p}"));
                match p {
                    "/plaintext" => assert_eq!(
                        (code, body.as_slice()),
                        (200, &b"Hello, World!"[..]),
                        "{engine} round {round}"
                    ),
                    "/json" => {
                        assert_eq!(code, 200);
                        assert_eq!(header(&h, "content-type"), "application/json");
                        assert_eq!(body, br#"{"message":"Hello, World!"}"#);
                    }
                    _ => assert_eq!(code, 404, "{engine}"),
                }
            }
        }
    }
}

#[test]
fn bad_requests_get_400_431_and_the_connection_closes() {
    for engine in ENGINES {
        let srv = Server::start("http", &["--engine", engine]);

        let mut s = srv.connect();
        s.write_all(b"\x16\x03\x01garbage that is not http\r\n\r\n")
            .unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        assert_eq!(read_response(&mut r).map(|x| x.0), Some(400), "{engine}");
        assert!(reads_to_eof(&mut s), "{engine}: 400 did not close");

        // A good request before the bad one in the same write is still answered.
        let mut s = srv.connect();
        let mut two = get("/plaintext");
        two.extend_from_slice(b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: nope\r\n\r\n");
        s.write_all(&two).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        assert_eq!(read_response(&mut r).map(|x| x.0), Some(200));
        assert_eq!(read_response(&mut r).map(|x| x.0), Some(400));

        let mut s = srv.connect();
        let mut big = b"GET /plaintext HTTP/1.1\r\nHost: t\r\nX-Big: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 9000));
        big.extend_from_slice(b"\r\n\r\n");
        s.write_all(&big).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        assert_eq!(read_response(&mut r).map(|x| x.0), Some(431), "{engine}");
        assert!(reads_to_eof(&mut s), "{engine}: 431 did not close");

        let mut s = srv.connect();
        s.write_all(&get("/nothing-here")).unwrap();
        s.write_all(&get("/plaintext")).unwrap();
        let mut r = BufReader::new(s);
        assert_eq!(read_response(&mut r).map(|x| x.0), Some(404));
        assert_eq!(
            read_response(&mut r).map(|x| x.0),
            Some(200),
            "{engine}: 404 must keep the connection"
        );

        let (_, summary) = srv.stop();
        assert!(
            summary.contains("400: 2, 431: 1, 404: 1"),
            "{engine}: {summary}"
        );
    }
}

#[test]
fn idle_connections_are_closed() {
    for engine in ENGINES {
        let srv = Server::start("http", &["--engine", engine, "--idle-timeout", "300ms"]);
        let mut silent = srv.connect();
        let mut talker = srv.connect();
        talker.write_all(&get("/plaintext")).unwrap();
        let start = Instant::now();
        assert!(
            reads_to_eof(&mut silent),
            "{engine}: idle connection not closed"
        );
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(250),
            "{engine}: closed too early ({waited:?})"
        );
        // Half a request counts as idle too once it stalls.
        let mut half = srv.connect();
        half.write_all(b"GET /plaintext HTTP/1.1\r\nHo").unwrap();
        assert!(
            reads_to_eof(&mut half),
            "{engine}: stalled request not closed"
        );
        let (_, summary) = srv.stop();
        assert!(summary.contains("idle-closed 3"), "{engine}: {summary}");
    }
}

#[test]
fn a_misbehaving_client_does_not_affect_the_others() {
    for engine in ENGINES {
        let srv = Server::start("http", &["--engine", engine, "--idle-timeout", "5s"]);
        let addr = srv.addr;
        let mut bad = Vec::new();
        // Garbage, stalls mid-request, disconnects mid-request, sends a huge header slowly,
        // never reads its responses.
        for kind in 0..25 {
            bad.push(std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                match kind % 5 {
                    0 => {
                        let _ = s.write_all(&[0xff; 3000]);
                    }
                    1 => {
                        let _ = s.write_all(b"GET /plaintext HTTP/1.1\r\nHost:");
                        std::thread::sleep(Duration::from_millis(800));
                    }
                    2 => {
                        let _ = s.write_all(b"GET /plaintext HT");
                        let _ = s.shutdown(Shutdown::Both);
                    }
                    3 => {
                        for _ in 0..50 {
                            if s.write_all(
                                b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
                            )
                            .is_err()
                            {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                    _ => {
                        // Pipelines thousands of requests and never reads.
                        let reqs = get("/plaintext").repeat(2000);
                        s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
                        let _ = s.write_all(&reqs);
                        std::thread::sleep(Duration::from_millis(800));
                    }
                }
            }));
        }
        // Meanwhile, good clients keep getting every answer.
        let good: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let s = TcpStream::connect(addr).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut w = s.try_clone().unwrap();
                    let mut r = BufReader::new(s);
                    for _ in 0..300 {
                        w.write_all(&get("/plaintext")).unwrap();
                        let (code, _, body) = read_response(&mut r).expect("good client starved");
                        assert_eq!((code, body.as_slice()), (200, &b"Hello, World!"[..]));
                    }
                })
            })
            .collect();
        for g in good {
            g.join().expect("a good client failed");
        }
        for b in bad {
            let _ = b.join();
        }
        let (status, _) = srv.stop();
        assert!(status.success(), "{engine}");
    }
}

#[test]
fn past_max_conns_new_connections_get_503() {
    for engine in ENGINES {
        let srv = Server::start("http", &["--engine", engine, "--max-conns", "2"]);
        let mut held: Vec<TcpStream> = (0..2).map(|_| srv.connect()).collect();
        for s in &mut held {
            s.write_all(&get("/plaintext")).unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            assert_eq!(read_response(&mut r).map(|x| x.0), Some(200));
        }
        let extra = srv.connect();
        let mut r = BufReader::new(extra);
        assert_eq!(read_response(&mut r).map(|x| x.0), Some(503), "{engine}");
        drop(held);
        // Slots free up again once the held connections go.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut s = srv.connect();
            s.write_all(&get("/plaintext")).unwrap();
            let mut r = BufReader::new(s);
            if read_response(&mut r).map(|x| x.0) == Some(200) {
                break;
            }
            assert!(Instant::now() < deadline, "{engine}: slots never freed");
            std::thread::sleep(Duration::from_millis(20));
        }
        let (_, summary) = srv.stop();
        assert!(
            summary.contains("refused 1") || summary.contains("refused 2"),
            "{engine}: {summary}"
        );
    }
}

#[test]
fn fixed_mode_answers_every_read() {
    for engine in ENGINES {
        let srv = Server::start("http", &["--engine", engine, "--fixed"]);
        let mut s = srv.connect();
        let mut r = BufReader::new(s.try_clone().unwrap());
        for _ in 0..50 {
            s.write_all(b"anything at all").unwrap();
            let (code, _, body) = read_response(&mut r).unwrap();
            assert_eq!((code, body.as_slice()), (200, &b"Hello, World!"[..]));
        }
    }
}

#[test]
fn echo_returns_every_byte() {
    for engine in ENGINES {
        let srv = Server::start("echo", &["--engine", engine]);
        let s = srv.connect();
        let mut w = s.try_clone().unwrap();
        let data: Vec<u8> = (0..4_000_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let send = data.clone();
        let writer = std::thread::spawn(move || {
            w.write_all(&send).unwrap();
            w.shutdown(Shutdown::Write).unwrap();
        });
        let mut back = Vec::new();
        let mut s = s;
        s.read_to_end(&mut back).unwrap();
        writer.join().unwrap();
        assert!(
            back == data,
            "{engine}: echo corrupted ({} of {} bytes)",
            back.len(),
            data.len()
        );
    }
}

/// bench's exit status says whether it measured anything: 0 against a server, 1 with one line
/// on stderr saying why when nothing completed (here a closed port).
#[test]
fn bench_fails_in_one_line_when_nothing_completed() {
    let bench = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_wirespeed"))
            .args(["bench", "http", url, "-c", "1", "--cpus", "0"])
            .args(["--warmup", "0s", "-d", "300ms"])
            .output()
            .expect("run wirespeed bench")
    };
    let srv = Server::start("http", &[]);
    let ok = bench(&format!("http://{}/plaintext", srv.addr));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    drop(srv);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let out = bench(&format!("http://{addr}/"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let said: Vec<&str> = stderr.lines().collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].starts_with("wirespeed: bench: no request completed")
            && said[0].contains("every connect failed"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 reqs"),
        "the figures are still printed"
    );
}

#[test]
fn clear_errors_for_bad_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["serve", "http", "--cpus", "9999"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CPU 9999 is not available"), "{err}");
    assert_eq!(
        err.trim().lines().count(),
        1,
        "error should be one line: {err}"
    );

    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let out = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args([
            "serve",
            "http",
            "--cpus",
            "0",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("another process holds the port"),
        "{err}"
    );
}

/// `--idle-sleep-us` only acts on AF_XDP shards: with the kernel stack serve says so in one
/// line, and serves as usual.
#[test]
fn idle_sleep_on_the_kernel_stack_is_said_to_do_nothing() {
    let srv = Server::start("http", &["--idle-sleep-us", "20"]);
    let told = "--idle-sleep-us applies to --stack xdp only";
    assert_eq!(srv.said.matches(told).count(), 1, "{}", srv.said);
    let mut s = srv.connect();
    s.write_all(&get("/plaintext")).unwrap();
    let (code, _, body) = read_response(&mut BufReader::new(s)).unwrap();
    assert_eq!((code, body.as_slice()), (200, &b"Hello, World!"[..]));
}
