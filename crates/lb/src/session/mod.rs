//! ExaBGP's BGP sessions, as `lb announce` hears of them (docs/LB.md, "Several nodes:
//! announcing over BGP"). With `neighbor-changes;` in a neighbor's `api` block, ExaBGP 4.2
//! writes `neighbor ADDR connected`, `neighbor ADDR up` and `neighbor ADDR down - REASON` to
//! its process. `lb announce` keeps each neighbour's latest state and why it last went down,
//! and reports them to the daemon at each change and every [`REPORT_EVERY`]; `lb doctor` names
//! a session that is not up, with what fixes it ([`check_sessions`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

// This file holds only the record, which control.rs and listing.rs carry; the reporter and
// doctor's check import those files, so they live in their own.
mod check;
mod report;
pub use check::check_sessions;
pub use report::report;

/// How often `lb announce` repeats its report when nothing changes: a daemon started after
/// ExaBGP learns the sessions within this, and a report much older than it means `lb announce`
/// (so ExaBGP) is gone.
pub const REPORT_EVERY: Duration = Duration::from_secs(5);

/// A report older than this is no longer believed.
pub const STALE_AFTER: Duration = Duration::from_secs(15);

/// The exabgp.conf line without which ExaBGP tells its process nothing of its sessions.
pub const CONF_LINE: &str = "neighbor-changes;";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// ExaBGP is opening a connection, or has one and waits for the OPEN exchange.
    Connecting,
    Up,
    Down,
}

/// Why a session went down.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// A BGP NOTIFICATION, `sent` by ExaBGP (it found the error) or received from the router;
    /// `detail` is ExaBGP's text after the code's and subcode's names, if any.
    Notification {
        sent: bool,
        code: u8,
        subcode: u8,
        detail: String,
    },
    /// The TCP connection could not be made or broke, in ExaBGP's words.
    Connection(String),
    /// Anything else, as ExaBGP wrote it.
    Other(String),
}

/// One line of ExaBGP's about a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Connected,
    Up,
    Down(Reason),
}

/// The neighbour and what happened, from a line ExaBGP 4.2's text encoder wrote to its
/// process; `None` for every other line (acknowledgements, `shutdown PID PPID`, blanks).
pub fn parse_line(line: &str) -> Option<(IpAddr, Event)> {
    let rest = line.trim_end().strip_prefix("neighbor ")?;
    let (addr, what) = rest.split_once(' ')?;
    let addr: IpAddr = addr.parse().ok()?;
    let event = match what {
        "connected" => Event::Connected,
        "up" => Event::Up,
        _ => Event::Down(parse_reason(
            what.strip_prefix("down")?.trim_start_matches([' ', '-']),
        )),
    };
    Some((addr, event))
}

/// ExaBGP's reasons: `peer reset, message [notification sent (2,2)] error[OPEN message error /
/// Bad Peer AS / ASN in OPEN (65000) did not match ASN expected (65099)]`, `peer reset,
/// message [closing connection] error[Broken TCP connection]`, `connection to ADDR:179 failed`.
fn parse_reason(text: &str) -> Reason {
    let Some(reset) = text.strip_prefix("peer reset, message [") else {
        return if text.starts_with("connection to ") {
            Reason::Connection(text.to_string())
        } else {
            Reason::Other(text.to_string())
        };
    };
    let (message, rest) = reset.split_once(']').unwrap_or((reset, ""));
    let error = rest
        .trim_start()
        .strip_prefix("error[")
        .and_then(|e| e.rsplit_once(']'))
        .map_or("", |(e, _)| e);
    let notification = [
        (true, "notification sent ("),
        (false, "notification received ("),
    ]
    .into_iter()
    .find_map(|(sent, p)| Some((sent, message.strip_prefix(p)?)));
    if let Some((sent, codes)) = notification {
        let codes = codes.trim_end_matches(')');
        if let Some((code, subcode)) = codes.split_once(',') {
            if let (Ok(code), Ok(subcode)) = (code.trim().parse(), subcode.trim().parse()) {
                // A received notification's data comes out garbled ("'utf-8' codec can't
                // decode ..."); only a text of the form "CODE / SUBCODE / DETAIL" has one.
                let detail = error.splitn(3, " / ").nth(2).unwrap_or("").to_string();
                return Reason::Notification {
                    sent,
                    code,
                    subcode,
                    detail,
                };
            }
        }
    }
    if message == "closing connection" {
        return Reason::Connection(error.to_string());
    }
    Reason::Other(text.to_string())
}

/// RFC 4271's names of a NOTIFICATION's code and subcode (with RFC 4486's Cease subcodes).
pub fn notification_name(code: u8, subcode: u8) -> String {
    let (name, subcodes): (&str, &[&str]) = match code {
        1 => (
            "message header error",
            &[
                "",
                "connection not synchronized",
                "bad message length",
                "bad message type",
            ],
        ),
        2 => (
            "OPEN message error",
            &[
                "",
                "unsupported version number",
                "bad peer AS",
                "bad BGP identifier",
                "unsupported optional parameter",
                "",
                "unacceptable hold time",
                "unsupported capability",
                "role mismatch",
            ],
        ),
        3 => (
            "UPDATE message error",
            &[
                "",
                "malformed attribute list",
                "unrecognized well-known attribute",
                "missing well-known attribute",
                "attribute flags error",
                "attribute length error",
                "invalid ORIGIN attribute",
                "",
                "invalid NEXT_HOP attribute",
                "optional attribute error",
                "invalid network field",
                "malformed AS_PATH",
            ],
        ),
        4 => ("hold timer expired", &[]),
        5 => ("finite state machine error", &[]),
        6 => (
            "cease",
            &[
                "",
                "maximum number of prefixes reached",
                "administrative shutdown",
                "peer de-configured",
                "administrative reset",
                "connection rejected",
                "other configuration change",
                "connection collision resolution",
                "out of resources",
                "hard reset",
            ],
        ),
        7 => ("ROUTE-REFRESH message error", &[]),
        _ => return format!("notification code {code} subcode {subcode}"),
    };
    match subcodes.get(usize::from(subcode)) {
        _ if subcode == 0 => name.to_string(),
        Some(s) if !s.is_empty() => format!("{name}, {s}"),
        _ => format!("{name}, subcode {subcode}"),
    }
}

/// One neighbour's session, as ExaBGP last reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub neighbor: IpAddr,
    pub state: State,
    /// When ExaBGP reported that state, in seconds since the UNIX epoch.
    pub since: u64,
    /// Why the session last went down; kept while it reconnects and once it is up again.
    pub last_down: Option<Reason>,
}

/// What `lb announce` last reported, as the daemon lists it (`-L --json`'s `bgp`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reported {
    /// Seconds since the report came.
    pub ago_s: u64,
    pub sessions: Vec<Session>,
}

/// `lb announce`'s record of the sessions.
#[derive(Clone, Debug, Default)]
pub struct Sessions {
    by_neighbor: BTreeMap<IpAddr, Session>,
}

impl Sessions {
    /// Records `event` at `now` (seconds since the UNIX epoch); true when anything changed.
    pub fn apply(&mut self, neighbor: IpAddr, event: Event, now: u64) -> bool {
        let new = !self.by_neighbor.contains_key(&neighbor);
        let s = self.by_neighbor.entry(neighbor).or_insert(Session {
            neighbor,
            state: State::Connecting,
            since: now,
            last_down: None,
        });
        let before = s.clone();
        let state = match event {
            Event::Connected => State::Connecting,
            Event::Up => State::Up,
            Event::Down(reason) => {
                s.last_down = Some(reason);
                State::Down
            }
        };
        if state != s.state {
            s.state = state;
            s.since = now;
        }
        new || *s != before
    }

    pub fn is_empty(&self) -> bool {
        self.by_neighbor.is_empty()
    }

    pub fn list(&self) -> Vec<Session> {
        self.by_neighbor.values().cloned().collect()
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    // Lines ExaBGP 4.2.21 wrote to its process (`encoder text`, `neighbor-changes;`).
    pub(crate) const BAD_PEER_AS_SENT: &str = "neighbor 198.18.0.2 down - peer reset, message [notification sent (2,2)] error[OPEN message error / Bad Peer AS / ASN in OPEN (65000) did not match ASN expected (65099)]";
    pub(crate) const BAD_PEER_AS_RECEIVED: &str = "neighbor 198.18.0.2 down - peer reset, message [notification received (2,2)] error['utf-8' codec can't decode byte 0xfd in position 0: invalid start byte]";
    pub(crate) const DECONFIGURED: &str = "neighbor 198.18.0.2 down - peer reset, message [notification received (6,3)] error[Cease / Peer De-configured]";
    pub(crate) const BROKEN_TCP: &str = "neighbor 198.18.0.6 down - peer reset, message [closing connection] error[Broken TCP connection]";

    fn addr(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn exabgp_lines_are_parsed() {
        let n = addr("198.18.0.2");
        assert_eq!(
            parse_line("neighbor 198.18.0.2 connected"),
            Some((n, Event::Connected))
        );
        assert_eq!(parse_line("neighbor 198.18.0.2 up\n"), Some((n, Event::Up)));
        assert_eq!(
            parse_line(BAD_PEER_AS_SENT),
            Some((
                n,
                Event::Down(Reason::Notification {
                    sent: true,
                    code: 2,
                    subcode: 2,
                    detail: "ASN in OPEN (65000) did not match ASN expected (65099)".into()
                })
            ))
        );
        assert_eq!(
            parse_line(BAD_PEER_AS_RECEIVED).unwrap().1,
            Event::Down(Reason::Notification {
                sent: false,
                code: 2,
                subcode: 2,
                detail: String::new()
            })
        );
        assert_eq!(
            parse_line(DECONFIGURED).unwrap().1,
            Event::Down(Reason::Notification {
                sent: false,
                code: 6,
                subcode: 3,
                detail: String::new()
            })
        );
        assert_eq!(
            parse_line(BROKEN_TCP),
            Some((
                addr("198.18.0.6"),
                Event::Down(Reason::Connection("Broken TCP connection".into()))
            ))
        );
        assert_eq!(
            parse_line("neighbor fd00::2 down - stop, message [shutdown]").unwrap(),
            (
                addr("fd00::2"),
                Event::Down(Reason::Other("stop, message [shutdown]".into()))
            )
        );
        for other in [
            "",
            "shutdown 30802 1",
            "done",
            "error",
            "neighbor 198.18.0.2 receive keepalive",
            "neighbor router up",
        ] {
            assert_eq!(parse_line(other), None, "{other:?}");
        }
    }

    #[test]
    fn notifications_have_their_rfc_names() {
        assert_eq!(notification_name(2, 2), "OPEN message error, bad peer AS");
        assert_eq!(notification_name(4, 0), "hold timer expired");
        assert_eq!(notification_name(6, 3), "cease, peer de-configured");
        assert_eq!(notification_name(2, 5), "OPEN message error, subcode 5");
        assert_eq!(notification_name(9, 1), "notification code 9 subcode 1");
    }

    #[test]
    fn sessions_keep_the_last_reason_through_reconnecting_and_change_only_on_news() {
        let n = addr("198.18.0.2");
        let mut s = Sessions::default();
        assert!(s.apply(n, Event::Connected, 100));
        let (_, down) = parse_line(BAD_PEER_AS_SENT).unwrap();
        assert!(s.apply(n, down.clone(), 101));
        assert!(s.apply(n, Event::Connected, 102));
        let list = s.list();
        assert_eq!(list[0].state, State::Connecting);
        assert_eq!(list[0].since, 102);
        assert!(matches!(
            list[0].last_down,
            Some(Reason::Notification { code: 2, .. })
        ));
        assert!(s.apply(n, down.clone(), 103));
        assert!(
            !s.apply(n, down, 104),
            "the same down again changes nothing"
        );
        assert_eq!(s.list()[0].since, 103);
        assert!(s.apply(n, Event::Up, 105));
        assert_eq!(s.list()[0].state, State::Up);
    }
}
