//! The daemon's control socket: a unix stream socket (mode 0600 in a 0700 directory), one
//! JSON request per line, one JSON reply per line; except `WatchAnnounceable`, after which
//! the daemon keeps the connection and sends a reply each time the set changes.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::io;
use crate::ipvsadm::Command;
use crate::listing::ListView;
use crate::{Error, Result};

/// Where the daemon listens unless `--socket` or `WIRESPEED_LB_SOCKET` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/wirespeed/lb.sock";

/// `--socket`, else `$WIRESPEED_LB_SOCKET`, else [`DEFAULT_SOCKET`].
pub fn socket_path(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    match std::env::var_os("WIRESPEED_LB_SOCKET") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// One ipvsadm command.
    Command(Command),
    /// `restore`: commands with their line numbers, applied all or none, as one plan.
    Batch(Vec<(usize, Command)>),
    /// The whole configuration with counters (what `save` and `doctor` read).
    View,
    /// `lb drain` (true) and `lb drain --undo` (false): withdraw every VIP while forwarding.
    Drain(bool),
    /// `lb announce`: the addresses to announce now, then again at each change, on this
    /// connection until either end closes it (docs/LB.md, "Several nodes: announcing over
    /// BGP").
    WatchAnnounceable,
    /// `lb announce`: ExaBGP's BGP sessions as it last heard of them, sent at each change and
    /// every few seconds on a connection of its own (docs/LB.md, "Doctor").
    Sessions(Vec<crate::session::Session>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Done; what still keeps traffic from flowing, with its fix.
    Done {
        warnings: Vec<String>,
    },
    List(ListView),
    /// The addresses this node may announce now (VIPs and full-NAT local addresses).
    Announceable(Vec<std::net::IpAddr>),
    /// One line that says what to do.
    Error(String),
}

/// The daemon's end of the socket. Dropping it removes the socket file.
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
}

impl Server {
    /// Binds `path`, creating its directory (mode 0700) if needed. A socket file that no
    /// daemon answers on is a stale one and is replaced; one that answers is an error.
    pub fn bind(path: &Path) -> Result<Server> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(io(format!("create {}", dir.display())))?;
            }
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(Error::Invalid(format!(
                    "a load-balancer daemon already listens on {}; stop it first or give another --socket",
                    path.display()
                )));
            }
            std::fs::remove_file(path)
                .map_err(io(format!("remove the stale socket {}", path.display())))?;
        }
        // Bound and made 0600 under a temporary name, then renamed: the path appears only
        // once the socket listens, so a client that sees it can connect at once.
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}", std::process::id()));
        let tmp = std::path::PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let listener =
            UnixListener::bind(&tmp).map_err(io(format!("listen on {}", tmp.display())))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(io(format!("chmod 0600 {}", tmp.display())))?;
        std::fs::rename(&tmp, path).map_err(io(format!(
            "rename {} to {}",
            tmp.display(),
            path.display()
        )))?;
        listener
            .set_nonblocking(true)
            .map_err(io("make the control socket non-blocking"))?;
        Ok(Server {
            listener,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A waiting client, if there is one.
    pub fn accept(&self) -> Option<UnixStream> {
        let (s, _) = self.listener.accept().ok()?;
        s.set_nonblocking(false).ok()?;
        // A client that connects and says nothing must not hold the socket for ever.
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        Some(s)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How the daemon answers a request: once, or with replies as they come until the sender
/// hangs up (a watch).
pub enum Answer {
    Once(Reply),
    Stream(mpsc::Receiver<Reply>),
}

fn send_reply(out: &mut UnixStream, reply: &Reply) -> bool {
    let mut text = serde_json::to_string(reply)
        .unwrap_or_else(|e| format!("{{\"Error\":\"could not encode the reply: {e}\"}}"));
    text.push('\n');
    out.write_all(text.as_bytes()).is_ok()
}

/// Serves one client: each line a request, each answered by `handle` with one line.
pub fn serve_client(stream: UnixStream, mut handle: impl FnMut(Request) -> Reply) {
    serve_watching_client(stream, |req| Answer::Once(handle(req)));
}

/// [`serve_client`], where an answer may also be a stream of lines that ends the connection
/// when it ends (`WatchAnnounceable`).
pub fn serve_watching_client(stream: UnixStream, mut handle: impl FnMut(Request) -> Answer) {
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let answer = match serde_json::from_str::<Request>(&line) {
            Ok(req) => handle(req),
            Err(e) => Answer::Once(Reply::Error(format!(
                "the daemon did not understand the request ({e}); are the client and daemon the same wirespeed version?"
            ))),
        };
        match answer {
            Answer::Once(reply) => {
                if !send_reply(&mut out, &reply) {
                    return;
                }
            }
            Answer::Stream(replies) => {
                // A watcher that stops reading must not hold the daemon's sender for ever.
                let _ = out.set_write_timeout(Some(Duration::from_secs(5)));
                for reply in replies {
                    if !send_reply(&mut out, &reply) {
                        return;
                    }
                }
                return;
            }
        }
    }
}

fn connect(path: &Path) -> Result<UnixStream> {
    UnixStream::connect(path).map_err(|e| {
        Error::Invalid(format!(
            "no load-balancer daemon answers on {} ({e}); start one with `wirespeed lb run --iface IF`{}",
            path.display(),
            if path == Path::new(DEFAULT_SOCKET) {
                ""
            } else {
                " --socket PATH"
            }
        ))
    })
}

fn send_request(stream: &UnixStream, path: &Path, req: &Request) -> Result<()> {
    let mut out = stream
        .try_clone()
        .map_err(io("clone the control connection"))?;
    let mut text = serde_json::to_string(req)
        .map_err(|e| Error::Invalid(format!("could not encode the request: {e}")))?;
    text.push('\n');
    out.write_all(text.as_bytes())
        .map_err(io(format!("send to {}", path.display())))
}

fn parse_reply(line: &str) -> Result<Reply> {
    serde_json::from_str(line).map_err(|e| {
        Error::Invalid(format!(
            "the daemon's reply is not understood ({e}); are the client and daemon the same wirespeed version?"
        ))
    })
}

/// Sends a watching request and returns the replies as they come; the iterator ends when the
/// daemon closes the connection.
pub fn subscribe(path: &Path, req: &Request) -> Result<impl Iterator<Item = Result<Reply>>> {
    let stream = connect(path)?;
    send_request(&stream, path, req)?;
    let what = path.display().to_string();
    Ok(BufReader::new(stream).lines().map(move |line| {
        line.map_err(io(format!("read from {what}")))
            .and_then(|l| parse_reply(&l))
    }))
}

/// Sends one request to the daemon at `path` and returns its reply.
pub fn request(path: &Path, req: &Request) -> Result<Reply> {
    let stream = connect(path)?;
    send_request(&stream, path, req)?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(io(format!("read the reply from {}", path.display())))?;
    if line.is_empty() {
        return Err(Error::Invalid(format!(
            "the daemon on {} closed the connection without a reply; see its output",
            path.display()
        )));
    }
    parse_reply(&line)
}
