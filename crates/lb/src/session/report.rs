//! `lb announce`'s side (docs/LB.md, "Doctor"): ExaBGP's lines about its sessions, recorded
//! and sent to the daemon.

use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::{parse_line, unix_now, Sessions};
use crate::control::{self, Request};

/// `lb announce`'s reporter: reads ExaBGP's lines from `lines` and sends the daemon on
/// `socket` every session at each change and every `every`, until `lines` ends. A failed
/// send is dropped: the next one carries everything, and the follower logs a missing daemon.
pub fn report(socket: &Path, lines: &Receiver<String>, every: Duration) {
    let mut sessions = Sessions::default();
    loop {
        match lines.recv_timeout(every) {
            Ok(line) => {
                let Some((neighbor, event)) = parse_line(&line) else {
                    continue;
                };
                if !sessions.apply(neighbor, event, unix_now()) {
                    continue;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if !sessions.is_empty() {
            let _ = control::request(socket, &Request::Sessions(sessions.list()));
        }
    }
}
