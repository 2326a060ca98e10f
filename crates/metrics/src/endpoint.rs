//! `/metrics` for a daemon with its own loop (fp, lb): a non-blocking listener and its few
//! open connections, served by [`Endpoint::serve`] whenever the loop comes round. No thread,
//! no lock: the exposition is rendered on the daemon's thread from what it already reads.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use crate::request::{self, MAX_REQUEST};

/// Scrapers connected at once; more are closed at once (a Prometheus needs one).
const MAX_CONNS: usize = 16;
/// A connection that has not sent its request, or not taken the answer, in this long is closed.
const CONN_TIMEOUT: Duration = Duration::from_secs(10);

struct Conn {
    stream: TcpStream,
    since: Instant,
    input: Vec<u8>,
    /// The response once the request is read, and how much of it went out.
    output: Option<(Vec<u8>, usize)>,
}

pub struct Endpoint {
    listener: TcpListener,
    conns: Vec<Conn>,
}

impl Endpoint {
    /// Listens on `addr` (port 0: any free port; see [`local_addr`](Endpoint::local_addr)).
    pub fn bind(addr: SocketAddr) -> std::io::Result<Endpoint> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Endpoint {
            listener,
            conns: Vec::new(),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The sockets to wait on for input: the listener and the connections still reading.
    pub fn poll_fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        std::iter::once(self.listener.as_fd()).chain(
            self.conns
                .iter()
                .filter(|c| c.output.is_none())
                .map(|c| c.stream.as_fd()),
        )
    }

    /// Accepts waiting scrapers, reads what they sent, answers complete requests
    /// (`render` makes the exposition, at most once per call) and closes finished
    /// connections. Never blocks.
    pub fn serve(&mut self, render: &mut dyn FnMut() -> String) {
        let now = Instant::now();
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if self.conns.len() >= MAX_CONNS || stream.set_nonblocking(true).is_err() {
                        continue; // dropped: closed
                    }
                    let _ = stream.set_nodelay(true);
                    self.conns.push(Conn {
                        stream,
                        since: now,
                        input: Vec::new(),
                        output: None,
                    });
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // WouldBlock, or a connection that failed before we took it.
                Err(_) => break,
            }
        }
        let mut exposition: Option<String> = None;
        self.conns.retain_mut(|c| {
            if now.duration_since(c.since) > CONN_TIMEOUT {
                return false;
            }
            if c.output.is_none() {
                match read_request(c) {
                    Step::Wait => return true,
                    Step::Close => return false,
                    Step::Answer(req) => {
                        let body = || exposition.get_or_insert_with(&mut *render).clone();
                        c.output = Some((request::respond(req, body), 0));
                    }
                }
            }
            write_response(c)
        });
    }
}

enum Step {
    Wait,
    Close,
    Answer(request::Request),
}

fn read_request(c: &mut Conn) -> Step {
    let mut buf = [0u8; 2048];
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) => return Step::Close,
            Ok(n) => {
                c.input.extend_from_slice(&buf[..n]);
                if let Some(req) = request::parse(&c.input) {
                    return Step::Answer(req);
                }
                if c.input.len() > MAX_REQUEST {
                    return Step::Answer(request::Request::Bad);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Wait,
            Err(_) => return Step::Close,
        }
    }
}

/// Sends what the socket takes; false once the response is out (or the peer is gone).
fn write_response(c: &mut Conn) -> bool {
    let Some((out, sent)) = &mut c.output else {
        return true;
    };
    while *sent < out.len() {
        match c.stream.write(&out[*sent..]) {
            Ok(0) => return false,
            Ok(n) => *sent += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
    // Done: the close follows the response (Connection: close).
    let _ = c.stream.shutdown(std::net::Shutdown::Write);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the endpoint's loop on this thread while `client` talks to it on another.
    fn exchange(ep: &mut Endpoint, request: &'static [u8], body: &str) -> String {
        let addr = ep.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            // In two parts: the endpoint must wait for the rest.
            s.write_all(&request[..5]).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(&request[5..]).unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            text
        });
        let mut renders = 0;
        while !client.is_finished() {
            ep.serve(&mut || {
                renders += 1;
                body.to_string()
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(renders <= 1);
        client.join().unwrap()
    }

    #[test]
    fn answers_metrics_and_404() {
        let mut ep = Endpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let text = exchange(
            &mut ep,
            b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
            "up 1\n",
        );
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nup 1\n"), "{text}");
        let text = exchange(&mut ep, b"GET /other HTTP/1.1\r\n\r\n", "up 1\n");
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
        assert!(ep.conns.is_empty());
    }
}
