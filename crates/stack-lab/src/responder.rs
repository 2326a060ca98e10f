//! Twin B's application: a tiny HTTP responder on a std `TcpListener` (Linux's own TCP), which
//! behaves as `wirespeed serve http` does for what the harness sends: it answers a complete
//! `GET /plaintext` with a response of the same length as ours, keeps waiting on a partial
//! request, and closes as soon as the peer's FIN (EOF) arrives.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The request the stateful cases send whole.
pub const REQUEST: &[u8] = b"GET /plaintext HTTP/1.1\r\nHost: w\r\n\r\n";

/// What `wirespeed serve http` answers to [`REQUEST`] (crates/http codec::write_response),
/// with a fixed date of the same length: the servers' sequence numbers move alike.
pub const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nServer: wirespeed\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
pub const RESPONSE_LEN: usize = RESPONSE.len();

/// The responder's threads; stopped (listener closed) on drop.
pub struct Responder {
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Responder {
    /// Serves on `listener` (bound by the caller inside the twin's namespace).
    pub fn start(listener: TcpListener) -> std::io::Result<Responder> {
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let accept = std::thread::Builder::new()
            .name("twin-b http".into())
            .spawn(move || accept_loop(&listener, &flag))?;
        Ok(Responder {
            stop,
            accept: Some(accept),
        })
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, peer)) => {
                let _ = std::thread::Builder::new()
                    .name(format!("twin-b {peer}"))
                    .spawn(move || serve(s, peer));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// One connection: answer each complete request, close on EOF or error.
fn serve(mut s: TcpStream, _peer: SocketAddr) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        while let Some(end) = find(&buf, b"\r\n\r\n") {
            if s.write_all(RESPONSE).is_err() {
                return;
            }
            buf.drain(..end + 4);
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_whole_requests_only_and_closes_on_eof() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let _r = Responder::start(l).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        c.write_all(&REQUEST[..10]).unwrap();
        let mut b = [0u8; 512];
        assert!(c.read(&mut b).is_err(), "a partial request gets no answer");
        c.write_all(&REQUEST[10..]).unwrap();
        let mut got = Vec::new();
        while got.len() < RESPONSE_LEN {
            let n = c.read(&mut b).unwrap();
            got.extend_from_slice(&b[..n]);
        }
        assert_eq!(got, RESPONSE);
        c.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(c.read(&mut b).unwrap(), 0, "closed after EOF");
    }
}
