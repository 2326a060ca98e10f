//! The HTTP/1.1 connection loop behind `wirespeed serve http`.
//!
//! One task per connection. Each read is parsed for as many pipelined requests as it holds,
//! the responses are appended to one buffer, and that buffer goes out in one write right away
//! (no batched flush across reads, which hurts at this load: docs/ARCHITECTURE.md, "A request
//! on the kernel stack", step 3). The
//! idle timer is one `Sleep` per connection, pushed back after every read and write.

use std::time::Duration;

use wirespeed_metrics::Counter;
use wirespeed_net::TcpStream;
use wirespeed_rt::{race, sleep};

use crate::codec::{self, parse_request, Parse, Reject, Status};
use crate::date::{DateCache, DATE_LEN};

#[derive(Debug, Clone)]
pub struct Config {
    /// Close a connection that has sent nothing (or not taken our bytes) for this long.
    pub idle_timeout: Duration,
    /// Answer every read with the canned plaintext response and parse nothing (the seed's
    /// tcp_httpd mode).
    pub fixed: bool,
}

/// Counters of one shard. Only that shard writes them (a relaxed load and store, no atomic
/// read-modify-write); `--metrics` reads every shard's from shard 0 at scrape time.
#[derive(Debug, Default)]
pub struct Stats {
    pub connections: Counter,
    pub requests: Counter,
    pub bad_request: Counter,
    pub headers_too_large: Counter,
    pub not_found: Counter,
    pub other_errors: Counter,
    pub idle_closed: Counter,
    pub refused: Counter,
    /// Connections open now (a gauge), refused ones excepted.
    pub open: Counter,
    /// The bypass stack's counters, in the order of `ServeStats::new`'s names, copied in by
    /// the shard (`ShardStats::publish_stack`); empty on the kernel stack.
    pub stack: Box<[Counter]>,
}

fn bump(c: &Counter) {
    c.bump();
}

const PLAINTEXT: &[u8] = b"Hello, World!";
const INITIAL_BUF: usize = 16 * 1024;
const MAX_BUF: usize = codec::MAX_HEADER_BYTES + codec::MAX_BODY_BYTES;

/// Serializes `{"message":"<msg>"}` into `dst`, escaping as JSON requires; returns the length.
/// Done per request, as the TechEmpower rules ask of the json test.
fn json_message(msg: &str, dst: &mut [u8; 128]) -> usize {
    let mut n = 0;
    let mut put = |b: &[u8]| {
        let end = (n + b.len()).min(dst.len());
        dst[n..end].copy_from_slice(&b[..end - n]);
        n = end;
    };
    put(b"{\"message\":\"");
    for &c in msg.as_bytes() {
        match c {
            b'"' => put(b"\\\""),
            b'\\' => put(b"\\\\"),
            0..=0x1f => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                put(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(c >> 4) as usize],
                    HEX[(c & 15) as usize],
                ]);
            }
            _ => put(&[c]),
        }
    }
    put(b"\"}");
    n
}

/// The keep-alive 200 answer to `GET /plaintext`, rendered again only when the Date changes:
/// a pipelined batch then appends each answer with one copy instead of building it field by
/// field (docs/ARCHITECTURE.md, "A request on the kernel stack", step 3).
#[derive(Default)]
struct Plaintext {
    date: [u8; DATE_LEN],
    response: Vec<u8>,
}

impl Plaintext {
    fn for_date(&mut self, date: &[u8; DATE_LEN]) -> &[u8] {
        if self.response.is_empty() || self.date != *date {
            self.date = *date;
            self.response.clear();
            codec::write_response(
                &mut self.response,
                Status::Ok,
                date,
                b"text/plain",
                PLAINTEXT,
                false,
            );
        }
        &self.response
    }
}

fn route(
    req: &codec::Request<'_>,
    out: &mut Vec<u8>,
    date: &[u8],
    plaintext: &[u8],
    stats: &Stats,
) {
    let close = !req.keep_alive;
    match (req.method, req.path) {
        ("GET", "/plaintext") if !close => out.extend_from_slice(plaintext),
        ("GET", "/plaintext") => {
            codec::write_response(out, Status::Ok, date, b"text/plain", PLAINTEXT, close)
        }
        ("GET", "/json") => {
            let mut body = [0u8; 128];
            let n = json_message("Hello, World!", &mut body);
            codec::write_response(
                out,
                Status::Ok,
                date,
                b"application/json",
                &body[..n],
                close,
            )
        }
        (_, "/plaintext" | "/json") => {
            bump(&stats.other_errors);
            codec::write_response(
                out,
                Status::MethodNotAllowed,
                date,
                b"text/plain",
                b"method not allowed\n",
                close,
            )
        }
        _ => {
            bump(&stats.not_found);
            codec::write_response(
                out,
                Status::NotFound,
                date,
                b"text/plain",
                b"not found\n",
                close,
            )
        }
    }
}

/// Writes a final error response and closes politely: FIN first, then a short drain of what
/// the client is still sending, so the kernel does not answer unread bytes with an RST that
/// could destroy the response before the client reads it.
async fn reject_and_close(stream: &mut TcpStream, out: &mut Vec<u8>, status: Status, date: &[u8]) {
    out.clear();
    codec::write_response(out, status, date, b"text/plain", b"", true);
    if stream.write_all(out).await.is_err() {
        return;
    }
    let _ = stream.shutdown_write();
    let mut sink = [0u8; 4096];
    let mut budget = 256 * 1024;
    let mut linger = sleep(Duration::from_secs(1));
    while budget > 0 {
        match race(&mut linger, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => budget -= n.min(budget),
            _ => break,
        }
    }
}

/// Serves one connection until the client closes, errs, idles out or is rejected.
pub async fn serve_connection(
    mut stream: TcpStream,
    cfg: &Config,
    date: &DateCache,
    stats: &Stats,
) {
    bump(&stats.connections);
    let mut buf = vec![0u8; INITIAL_BUF];
    let mut filled = 0;
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let mut plaintext = Plaintext::default();
    let mut idle = sleep(cfg.idle_timeout);
    loop {
        let n = match race(&mut idle, stream.read(&mut buf[filled..])).await {
            Err(_) => {
                bump(&stats.idle_closed);
                return;
            }
            Ok(Err(_)) | Ok(Ok(0)) => return,
            Ok(Ok(n)) => n,
        };
        idle.reset(wirespeed_rt::now() + cfg.idle_timeout);
        filled += n;
        let date_now = date.get();
        let canned = plaintext.for_date(&date_now);

        if cfg.fixed {
            out.extend_from_slice(canned);
            bump(&stats.requests);
            filled = 0;
        } else {
            let mut start = 0;
            let mut close = false;
            loop {
                match parse_request(&buf[start..filled]) {
                    Parse::Complete(req) => {
                        route(&req, &mut out, &date_now, canned, stats);
                        bump(&stats.requests);
                        start += req.len;
                        if !req.keep_alive {
                            close = true;
                            break;
                        }
                    }
                    Parse::Partial => break,
                    Parse::Invalid(reject) => {
                        match reject {
                            Reject::BadRequest => bump(&stats.bad_request),
                            Reject::HeadersTooLarge => bump(&stats.headers_too_large),
                            _ => bump(&stats.other_errors),
                        }
                        // Answer the good requests before the bad one, then reject.
                        if !out.is_empty() && race(&mut idle, stream.write_all(&out)).await.is_err()
                        {
                            return;
                        }
                        reject_and_close(&mut stream, &mut out, reject.status(), &date_now).await;
                        return;
                    }
                }
            }
            if close {
                if !out.is_empty() {
                    let _ = race(&mut idle, stream.write_all(&out)).await;
                }
                let _ = stream.shutdown_write();
                return;
            }
            buf.copy_within(start..filled, 0);
            filled -= start;
            if filled == buf.len() {
                if buf.len() >= MAX_BUF {
                    bump(&stats.headers_too_large);
                    reject_and_close(&mut stream, &mut out, Status::HeadersTooLarge, &date_now)
                        .await;
                    return;
                }
                buf.resize((buf.len() * 2).min(MAX_BUF), 0);
            }
        }

        if !out.is_empty() {
            match race(&mut idle, stream.write_all(&out)).await {
                Ok(Ok(())) => {}
                Err(_) => {
                    bump(&stats.idle_closed);
                    return;
                }
                Ok(Err(_)) => return,
            }
            idle.reset(wirespeed_rt::now() + cfg.idle_timeout);
            out.clear();
        }
    }
}

/// Refuses a connection past the shard's limit: one 503 and close.
pub async fn refuse(mut stream: TcpStream, date: &DateCache, stats: &Stats) {
    bump(&stats.refused);
    let mut out = Vec::with_capacity(256);
    codec::write_response(
        &mut out,
        Status::ServiceUnavailable,
        &date.get(),
        b"text/plain",
        b"",
        true,
    );
    let mut t = sleep(Duration::from_secs(1));
    let _ = race(&mut t, stream.write_all(&out)).await;
    let _ = stream.shutdown_write();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canned answer is byte for byte what `write_response` builds, and follows the Date.
    #[test]
    fn canned_plaintext_is_the_built_response_for_the_current_date() {
        let mut p = Plaintext::default();
        for secs in [784_111_777, 784_111_777, 784_111_778] {
            let date = crate::date::format_imf(secs);
            let mut built = Vec::new();
            codec::write_response(
                &mut built,
                Status::Ok,
                &date,
                b"text/plain",
                PLAINTEXT,
                false,
            );
            assert_eq!(p.for_date(&date), &built[..]);
        }
    }

    #[test]
    fn json_is_escaped() {
        let mut b = [0u8; 128];
        let n = json_message("Hello, World!", &mut b);
        assert_eq!(&b[..n], br#"{"message":"Hello, World!"}"#);
        let n = json_message("a\"b\\c\n", &mut b);
        assert_eq!(&b[..n], br#"{"message":"a\"b\\c\u000a"}"#);
    }
}
