//! HTTP/1.1 load: target parsing, the pre-serialized request and a minimal response parser
//! (status, header end, Content-Length or chunked). Pure code, unit-tested without a network.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::{Error, Result};
use crate::{Outcome, ParseError, Progress, ResponseParser};

/// A parsed `http://host:port/path` target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    /// The Host header value as written in the URL.
    pub host: String,
    pub path: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target> {
        let bad = |why: &str| Error::Invalid(format!("bad URL `{url}`: {why}"));
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// is supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let with_port = if authority.starts_with('[') {
            if authority.contains("]:") {
                authority.to_string()
            } else {
                format!("{authority}:80")
            }
        } else if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| bad(&e.to_string()))?
            .next()
            .ok_or_else(|| bad("host does not resolve"))?;
        Ok(Target {
            addr,
            host: authority.to_string(),
            path: path.to_string(),
        })
    }
}

/// Serializes the one request every connection sends, once.
pub fn build_request(method: &str, target: &Target, headers: &[String]) -> Result<Vec<u8>> {
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(Error::Invalid(format!("bad method `{method}`")));
    }
    let mut r = format!("{method} {} HTTP/1.1\r\n", target.path);
    let has = |name: &str| {
        headers.iter().any(|h| {
            h.split(':')
                .next()
                .is_some_and(|n| n.trim().eq_ignore_ascii_case(name))
        })
    };
    if !has("host") {
        r.push_str(&format!("Host: {}\r\n", target.host));
    }
    for h in headers {
        if !h.contains(':') || h.contains('\r') || h.contains('\n') {
            return Err(Error::Invalid(format!(
                "bad header `{h}` (want `Name: value`)"
            )));
        }
        r.push_str(h.trim());
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    Ok(r.into_bytes())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Head,
    Body { left: u64 },
    ChunkSize,
    ChunkData { left: u64 },
    ChunkDataEnd,
    Trailer,
}

/// Resumable HTTP/1.1 response parser. Bodies are skipped, never buffered.
#[derive(Clone, Debug)]
pub struct HttpParser {
    st: St,
    ok: bool,
}

impl Default for HttpParser {
    fn default() -> Self {
        HttpParser {
            st: St::Head,
            ok: true,
        }
    }
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n")
}

fn parse_u64(b: &[u8], radix: u32) -> Option<u64> {
    let s = std::str::from_utf8(b).ok()?.trim();
    if s.is_empty() {
        return None;
    }
    u64::from_str_radix(s, radix).ok()
}

impl HttpParser {
    fn outcome(&self) -> Outcome {
        if self.ok {
            Outcome::Ok
        } else {
            Outcome::Non2xx
        }
    }

    fn head(&mut self, buf: &[u8]) -> std::result::Result<Progress, ParseError> {
        let Some(end) = find_head_end(buf) else {
            return Ok(Progress {
                consumed: 0,
                done: None,
            });
        };
        let head = &buf[..end + 4];
        if head.len() < 12 || !head.starts_with(b"HTTP/1.") {
            return Err(ParseError("status line"));
        }
        let status = parse_u64(&head[9..12], 10).ok_or(ParseError("status code"))?;
        self.ok = (200..300).contains(&status);
        let mut length = None;
        let mut chunked = false;
        let first = find_crlf(head).unwrap_or(head.len());
        for line in head[first..].split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            if name.eq_ignore_ascii_case(b"content-length") {
                length = Some(parse_u64(value, 10).ok_or(ParseError("content-length"))?);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                chunked = value.windows(7).any(|w| w.eq_ignore_ascii_case(b"chunked"));
            }
        }
        let no_body = (100..200).contains(&status) || status == 204 || status == 304;
        let consumed = head.len();
        if chunked {
            self.st = St::ChunkSize;
            return Ok(Progress {
                consumed,
                done: None,
            });
        }
        match length {
            Some(n) if n > 0 && !no_body => {
                self.st = St::Body { left: n };
                Ok(Progress {
                    consumed,
                    done: None,
                })
            }
            Some(_) => Ok(Progress {
                consumed,
                done: Some(self.outcome()),
            }),
            None if no_body => Ok(Progress {
                consumed,
                done: Some(self.outcome()),
            }),
            // A body delimited by close cannot be pipelined or kept alive.
            None => Err(ParseError(
                "response has neither Content-Length nor chunked encoding",
            )),
        }
    }
}

impl ResponseParser for HttpParser {
    fn advance(&mut self, buf: &[u8]) -> std::result::Result<Progress, ParseError> {
        match self.st {
            St::Head => self.head(buf),
            St::Body { left } => {
                let take = (buf.len() as u64).min(left);
                let left = left - take;
                if left == 0 {
                    self.st = St::Head;
                    Ok(Progress {
                        consumed: take as usize,
                        done: Some(self.outcome()),
                    })
                } else {
                    self.st = St::Body { left };
                    Ok(Progress {
                        consumed: take as usize,
                        done: None,
                    })
                }
            }
            St::ChunkSize => {
                let Some(i) = find_crlf(buf) else {
                    return Ok(Progress {
                        consumed: 0,
                        done: None,
                    });
                };
                let line = &buf[..i];
                let hex = line.split(|&b| b == b';').next().unwrap_or(line);
                let n = parse_u64(hex, 16).ok_or(ParseError("chunk size"))?;
                self.st = if n == 0 {
                    St::Trailer
                } else {
                    St::ChunkData { left: n }
                };
                Ok(Progress {
                    consumed: i + 2,
                    done: None,
                })
            }
            St::ChunkData { left } => {
                let take = (buf.len() as u64).min(left);
                let left = left - take;
                self.st = if left == 0 {
                    St::ChunkDataEnd
                } else {
                    St::ChunkData { left }
                };
                Ok(Progress {
                    consumed: take as usize,
                    done: None,
                })
            }
            St::ChunkDataEnd => {
                if buf.len() < 2 {
                    return Ok(Progress {
                        consumed: 0,
                        done: None,
                    });
                }
                if &buf[..2] != b"\r\n" {
                    return Err(ParseError("chunk terminator"));
                }
                self.st = St::ChunkSize;
                Ok(Progress {
                    consumed: 2,
                    done: None,
                })
            }
            St::Trailer => {
                let Some(i) = find_crlf(buf) else {
                    return Ok(Progress {
                        consumed: 0,
                        done: None,
                    });
                };
                if i == 0 {
                    self.st = St::Head;
                    Ok(Progress {
                        consumed: 2,
                        done: Some(self.outcome()),
                    })
                } else {
                    Ok(Progress {
                        consumed: i + 2,
                        done: None,
                    })
                }
            }
        }
    }

    fn reset(&mut self) {
        *self = HttpParser::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `step` bytes, as recv would, and collects outcomes.
    fn run(input: &[u8], step: usize) -> std::result::Result<Vec<Outcome>, ParseError> {
        let mut p = HttpParser::default();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for piece in input.chunks(step) {
            buf.extend_from_slice(piece);
            let mut pos = 0;
            loop {
                let pr = p.advance(&buf[pos..])?;
                pos += pr.consumed;
                if let Some(o) = pr.done {
                    out.push(o);
                } else if pr.consumed == 0 || pos == buf.len() {
                    break;
                }
            }
            buf.drain(..pos);
        }
        Ok(out)
    }

    const PLAIN: &[u8] = b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 13\r\n\r\nHello, World!";

    #[test]
    fn content_length_any_split() {
        let mut two = PLAIN.to_vec();
        two.extend_from_slice(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
        two.extend_from_slice(PLAIN);
        for step in [1, 2, 3, 7, 50, 1000] {
            assert_eq!(
                run(&two, step).unwrap(),
                vec![Outcome::Ok, Outcome::Non2xx, Outcome::Ok],
                "step {step}"
            );
        }
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nHello\r\n8\r\n, World!\r\n0\r\nX-T: 1\r\n\r\n";
        let mut two = r.to_vec();
        two.extend_from_slice(PLAIN);
        for step in [1, 4, 9, 1000] {
            assert_eq!(
                run(&two, step).unwrap(),
                vec![Outcome::Ok, Outcome::Ok],
                "step {step}"
            );
        }
    }

    #[test]
    fn no_body_statuses_and_errors() {
        assert_eq!(
            run(b"HTTP/1.1 204 No Content\r\n\r\n", 100).unwrap(),
            vec![Outcome::Ok]
        );
        assert!(run(b"HTTP/1.1 200 OK\r\n\r\nbody", 100).is_err());
        assert!(run(b"SSH-2.0-OpenSSH\r\n\r\n", 100).is_err());
        assert!(run(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", 100).is_err());
        assert!(run(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            100
        )
        .is_err());
    }

    #[test]
    fn targets_and_requests() {
        let t = Target::parse("http://127.0.0.1:8080/plaintext").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(t.path, "/plaintext");
        assert_eq!(
            Target::parse("http://[::1]/").unwrap().addr,
            "[::1]:80".parse().unwrap()
        );
        assert_eq!(Target::parse("http://127.0.0.1:81").unwrap().path, "/");
        assert!(Target::parse("https://127.0.0.1/").is_err());
        let req = build_request("GET", &t, &["Accept: */*".into()]).unwrap();
        assert_eq!(
            req,
            b"GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept: */*\r\n\r\n"
        );
        assert!(build_request("get", &t, &[]).is_err());
        assert!(build_request("GET", &t, &["nocolon".into()]).is_err());
    }
}
