//! The service manager's readiness protocol (sd_notify): one datagram of `KEY=VALUE` lines to
//! the socket named in `$NOTIFY_SOCKET`. systemd sets the variable for a `Type=notify` unit and
//! starts the units that depend on it only after `READY=1`; `STOPPING=1` tells it that a stop
//! is under way; `STATUS=` is the line `systemctl status` shows.
//!
//! Without the variable (run by hand, under Kubernetes) every call is a no-op. No unsafe: std's
//! `UnixDatagram` sends to a path, and to an abstract socket (`@name`) through
//! `SocketAddrExt::from_abstract_name`.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable that names the service manager's socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Sends `state` (newline-separated `KEY=VALUE` lines) to the socket named by `$NOTIFY_SOCKET`.
/// Returns `Ok(false)` when the variable is unset or empty (no service manager is listening),
/// `Ok(true)` once the datagram is sent.
pub fn notify(state: &str) -> io::Result<bool> {
    notify_if_set(std::env::var_os(NOTIFY_SOCKET).as_deref(), state)
}

fn notify_if_set(socket: Option<&OsStr>, state: &str) -> io::Result<bool> {
    match socket {
        Some(socket) if !socket.is_empty() => {
            notify_to(socket, state)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The daemon is serving: its programs are attached and its control interfaces answer.
/// `status` is one line for `systemctl status`.
pub fn ready(status: &str) -> io::Result<bool> {
    notify(&ready_state(status))
}

fn ready_state(status: &str) -> String {
    format!("READY=1\nSTATUS={}", one_line(status))
}

/// The daemon stops cleanly (detaching its programs); `status` says so in one line.
pub fn stopping(status: &str) -> io::Result<bool> {
    notify(&stopping_state(status))
}

fn stopping_state(status: &str) -> String {
    format!("STOPPING=1\nSTATUS={}", one_line(status))
}

/// Sends `state` to `socket`: a filesystem path, or an abstract name written `@name`.
pub fn notify_to(socket: &OsStr, state: &str) -> io::Result<()> {
    let bytes = socket.as_bytes();
    let addr = match bytes.first() {
        Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..])?,
        Some(b'/') => SocketAddr::from_pathname(socket)?,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{NOTIFY_SOCKET}={} is neither an absolute path nor an @abstract name",
                    socket.to_string_lossy()
                ),
            ))
        }
    };
    let sock = UnixDatagram::unbound()?;
    let sent = sock.send_to_addr(state.as_bytes(), &addr)?;
    if sent != state.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "the service manager's socket took part of the notification",
        ));
    }
    Ok(())
}

/// A STATUS= value must not break the line protocol.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn recv(sock: &UnixDatagram) -> String {
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ws-notify-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn sends_to_a_path_socket() {
        let dir = temp_dir("path");
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        notify_to(path.as_os_str(), "READY=1\nSTATUS=up").unwrap();
        assert_eq!(recv(&listener), "READY=1\nSTATUS=up");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        let name = format!("ws-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        notify_to(OsStr::new(&format!("@{name}")), "STOPPING=1").unwrap();
        assert_eq!(recv(&listener), "STOPPING=1");
    }

    #[test]
    fn refuses_a_relative_name() {
        let e = notify_to(OsStr::new("notify.sock"), "READY=1").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_missing_socket_is_an_error() {
        let dir = temp_dir("missing");
        let path = dir.join("nobody-listens.sock");
        assert!(notify_to(path.as_os_str(), "READY=1").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_status_stays_on_one_line() {
        assert_eq!(one_line("a\nb\rc"), "a b c");
    }

    #[test]
    fn only_a_named_socket_is_notified() {
        let dir = temp_dir("env");
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        assert!(!notify_if_set(None, "READY=1").unwrap());
        assert!(!notify_if_set(Some(OsStr::new("")), "READY=1").unwrap());
        let named = Some(path.as_os_str());
        assert!(notify_if_set(named, &ready_state("attached on\neth0")).unwrap());
        assert_eq!(recv(&listener), "READY=1\nSTATUS=attached on eth0");
        assert!(notify_if_set(named, &stopping_state("detaching")).unwrap());
        assert_eq!(recv(&listener), "STOPPING=1\nSTATUS=detaching");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
