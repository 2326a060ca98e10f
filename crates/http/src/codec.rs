//! Request parsing (httparse) and response writing. No I/O, no allocation per request.

/// Largest header section we accept; past it the answer is 431.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
/// Largest request body we accept (the benchmark routes take none); past it the answer is 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
const MAX_HEADERS: usize = 64;

/// A complete request at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The path without the query string.
    pub path: &'a str,
    pub keep_alive: bool,
    /// Bytes the request occupies in the buffer: headers and body.
    pub len: usize,
}

/// Why a request cannot be served; each maps to a status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    BadRequest,
    HeadersTooLarge,
    BodyTooLarge,
    /// Transfer-Encoding on a request: we do not decode chunked bodies.
    NotImplemented,
}

impl Reject {
    pub fn status(self) -> Status {
        match self {
            Reject::BadRequest => Status::BadRequest,
            Reject::HeadersTooLarge => Status::HeadersTooLarge,
            Reject::BodyTooLarge => Status::PayloadTooLarge,
            Reject::NotImplemented => Status::NotImplemented,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse<'a> {
    Complete(Request<'a>),
    /// More bytes are needed.
    Partial,
    Invalid(Reject),
}

fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Parses the request at the start of `buf`.
pub fn parse_request(buf: &[u8]) -> Parse<'_> {
    // Uninitialized: httparse writes only the headers it finds, so a pipelined batch does not
    // zero 64 header slots per request (docs/ARCHITECTURE.md, "A request on the kernel stack").
    let mut headers =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let header_len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() > MAX_HEADER_BYTES {
                Parse::Invalid(Reject::HeadersTooLarge)
            } else {
                Parse::Partial
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Parse::Invalid(Reject::HeadersTooLarge),
        Err(_) => return Parse::Invalid(Reject::BadRequest),
    };
    if header_len > MAX_HEADER_BYTES {
        return Parse::Invalid(Reject::HeadersTooLarge);
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Parse::Invalid(Reject::BadRequest);
    };
    let mut keep_alive = version == 1;
    let mut content_length: Option<usize> = None;
    let mut host = false;
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("connection") {
            if has_token(h.value, "close") {
                keep_alive = false;
            } else if has_token(h.value, "keep-alive") {
                keep_alive = true;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .map(str::trim)
                .and_then(|s| {
                    // Digits only: "+5" or "0x10" are not lengths.
                    s.bytes()
                        .all(|b| b.is_ascii_digit())
                        .then(|| s.parse::<usize>().ok())
                        .flatten()
                });
            match (v, content_length) {
                (None, _) => return Parse::Invalid(Reject::BadRequest),
                (Some(a), Some(b)) if a != b => return Parse::Invalid(Reject::BadRequest),
                (Some(a), _) => content_length = Some(a),
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Parse::Invalid(Reject::NotImplemented);
        } else if name.eq_ignore_ascii_case("host") {
            host = true;
        }
    }
    // RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400.
    if version == 1 && !host {
        return Parse::Invalid(Reject::BadRequest);
    }
    let body = content_length.unwrap_or(0);
    if body > MAX_BODY_BYTES {
        return Parse::Invalid(Reject::BodyTooLarge);
    }
    let len = header_len + body;
    if buf.len() < len {
        return Parse::Partial;
    }
    let path = target.split('?').next().unwrap_or(target);
    Parse::Complete(Request {
        method,
        path,
        keep_alive,
        len,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    HeadersTooLarge,
    NotImplemented,
    ServiceUnavailable,
}

impl Status {
    pub fn line(self) -> &'static [u8] {
        match self {
            Status::Ok => b"HTTP/1.1 200 OK\r\n",
            Status::BadRequest => b"HTTP/1.1 400 Bad Request\r\n",
            Status::NotFound => b"HTTP/1.1 404 Not Found\r\n",
            Status::MethodNotAllowed => b"HTTP/1.1 405 Method Not Allowed\r\n",
            Status::PayloadTooLarge => b"HTTP/1.1 413 Content Too Large\r\n",
            Status::HeadersTooLarge => b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
            Status::NotImplemented => b"HTTP/1.1 501 Not Implemented\r\n",
            Status::ServiceUnavailable => b"HTTP/1.1 503 Service Unavailable\r\n",
        }
    }

    pub fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::BadRequest => 400,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::PayloadTooLarge => 413,
            Status::HeadersTooLarge => 431,
            Status::NotImplemented => 501,
            Status::ServiceUnavailable => 503,
        }
    }
}

pub const SERVER_NAME: &[u8] = b"wirespeed";

/// Appends a whole response: status line, Server, Date, Content-Type, Content-Length, an
/// optional `Connection: close`, and the body.
pub fn write_response(
    out: &mut Vec<u8>,
    status: Status,
    date: &[u8],
    content_type: &[u8],
    body: &[u8],
    close: bool,
) {
    out.extend_from_slice(status.line());
    out.extend_from_slice(b"Server: ");
    out.extend_from_slice(SERVER_NAME);
    out.extend_from_slice(b"\r\nDate: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\nContent-Type: ");
    out.extend_from_slice(content_type);
    out.extend_from_slice(b"\r\nContent-Length: ");
    let mut digits = [0u8; 20];
    out.extend_from_slice(format_usize(body.len(), &mut digits));
    if close {
        out.extend_from_slice(b"\r\nConnection: close");
    }
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

fn format_usize(mut v: usize, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8]) -> Request<'_> {
        match parse_request(buf) {
            Parse::Complete(r) => r,
            other => panic!("expected complete, got {other:?}"),
        }
    }

    #[test]
    fn simple_get_and_keep_alive_rules() {
        let r = complete(b"GET /plaintext?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(
            (r.method, r.path, r.keep_alive, r.len),
            ("GET", "/plaintext", true, 40)
        );
        assert!(!complete(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!complete(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(complete(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
    }

    #[test]
    fn partial_and_pipelined() {
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nHost: a\r\n"),
            Parse::Partial
        );
        let two = b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n";
        let first = complete(two);
        assert_eq!(first.path, "/a");
        assert_eq!(complete(&two[first.len..]).path, "/b");
    }

    #[test]
    fn bodies_are_consumed() {
        let req = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET";
        let r = complete(req);
        assert_eq!(&req[r.len..], b"GET");
        assert_eq!(parse_request(&req[..req.len() - 5]), Parse::Partial);
    }

    #[test]
    fn rejects() {
        let bad = |b: &[u8]| match parse_request(b) {
            Parse::Invalid(r) => r,
            other => panic!(
                "expected reject for {:?}, got {other:?}",
                String::from_utf8_lossy(b)
            ),
        };
        assert_eq!(bad(b"\x00\x01garbage\r\n\r\n"), Reject::BadRequest);
        assert_eq!(bad(b"GET / HTTP/1.1\r\n\r\n"), Reject::BadRequest); // no Host
        assert_eq!(
            bad(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"),
            Reject::BadRequest
        );
        assert_eq!(
            bad(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            Reject::BadRequest
        );
        assert_eq!(
            bad(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Reject::NotImplemented
        );
        assert_eq!(
            bad(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999\r\n\r\n"),
            Reject::BodyTooLarge
        );
        let mut big = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_HEADER_BYTES));
        assert_eq!(bad(&big), Reject::HeadersTooLarge); // partial but already too big
        big.extend_from_slice(b"\r\n\r\n");
        assert_eq!(bad(&big), Reject::HeadersTooLarge);
        let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..100 {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(bad(&many), Reject::HeadersTooLarge);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic generator: every prefix of many mutated requests.
        let base = b"GET /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc".to_vec();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut m = base.clone();
            for _ in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let i = (seed as usize) % m.len();
                m[i] = (seed >> 32) as u8;
            }
            for end in 0..=m.len() {
                let _ = parse_request(&m[..end]);
            }
        }
    }

    #[test]
    fn response_bytes() {
        let mut out = Vec::new();
        write_response(
            &mut out,
            Status::Ok,
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            b"text/plain",
            b"Hello, World!",
            false,
        );
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nServer: wirespeed\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!"
        );
    }
}
