//! The HTTP/1.1 that a scraper speaks: one request per connection (the answer says
//! `Connection: close`), `GET` or `HEAD /metrics`, anything else 404 (another path), 405
//! (another method) or 400 (not HTTP). Request bodies are not read: a scrape has none.

use crate::text::CONTENT_TYPE;

/// A request head larger than this is refused (a scraper's is a few hundred bytes).
pub const MAX_REQUEST: usize = 8 * 1024;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics`, or `HEAD` (headers only). A query string is ignored.
    Metrics {
        head: bool,
    },
    NotFound {
        head: bool,
    },
    MethodNotAllowed,
    Bad,
}

/// Reads the request head at the start of `buf`: `None` while it is incomplete.
pub fn parse(buf: &[u8]) -> Option<Request> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() < MAX_REQUEST => None,
        Ok(httparse::Status::Partial) | Err(_) => Some(Request::Bad),
        Ok(httparse::Status::Complete(_)) => {
            let head = match req.method {
                Some("GET") => false,
                Some("HEAD") => true,
                _ => return Some(Request::MethodNotAllowed),
            };
            let path = req.path.unwrap_or("");
            let path = path.split_once('?').map_or(path, |(p, _)| p);
            Some(if path == "/metrics" {
                Request::Metrics { head }
            } else {
                Request::NotFound { head }
            })
        }
    }
}

/// The whole response to `req`; `render` (the exposition) runs only for `/metrics`.
pub fn respond(req: Request, render: impl FnOnce() -> String) -> Vec<u8> {
    let (status, content_type, body, head) = match req {
        Request::Metrics { head } => ("200 OK", CONTENT_TYPE, render(), head),
        Request::NotFound { head } => (
            "404 Not Found",
            "text/plain",
            "not found: the metrics are at /metrics\n".to_string(),
            head,
        ),
        Request::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET and HEAD\n".to_string(),
            false,
        ),
        Request::Bad => (
            "400 Bad Request",
            "text/plain",
            "bad request\n".to_string(),
            false,
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if matches!(req, Request::MethodNotAllowed) {
            "Allow: GET, HEAD\r\n"
        } else {
            ""
        }
    )
    .into_bytes();
    if !head {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrape_requests() {
        let get = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n";
        assert_eq!(parse(get), Some(Request::Metrics { head: false }));
        assert_eq!(parse(&get[..20]), None);
        assert_eq!(
            parse(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Some(Request::Metrics { head: true })
        );
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\n\r\n"),
            Some(Request::NotFound { head: false })
        );
        assert_eq!(
            parse(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Some(Request::MethodNotAllowed)
        );
        assert_eq!(parse(b"\x16\x03\x01 garbage\r\n\r\n"), Some(Request::Bad));
        let endless = vec![b'a'; MAX_REQUEST];
        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.extend_from_slice(&endless);
        assert_eq!(parse(&long), Some(Request::Bad));
    }

    #[test]
    fn responses() {
        let r = respond(Request::Metrics { head: false }, || "a 1\n".into());
        let text = String::from_utf8(r).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(text.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
        assert!(text.contains("Content-Length: 4\r\n"));
        assert!(text.ends_with("\r\n\r\na 1\n"));
        let r = respond(Request::Metrics { head: true }, || "a 1\n".into());
        let text = String::from_utf8(r).unwrap();
        assert!(text.contains("Content-Length: 4\r\n") && text.ends_with("\r\n\r\n"));
        let r = respond(Request::NotFound { head: false }, || unreachable!());
        assert!(r.starts_with(b"HTTP/1.1 404 Not Found\r\n"));
        let r = respond(Request::MethodNotAllowed, || unreachable!());
        assert!(String::from_utf8(r)
            .unwrap()
            .contains("Allow: GET, HEAD\r\n"));
    }
}
