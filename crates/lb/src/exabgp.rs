//! `wirespeed lb announce`: the process ExaBGP runs (docs/LB.md, "Several nodes: announcing
//! over BGP"). It follows the daemon's announceable set and prints ExaBGP 4.2's text API
//! commands (`announce route 198.18.100.1/32 next-hop self`, `withdraw route ...`), one per
//! line, flushed. BGP itself is ExaBGP's.
//!
//! The set comes as a stream on the control socket (`Request::WatchAnnounceable`): the daemon
//! sends it when it changes, so a withdrawal reaches ExaBGP within the daemon's 50 ms loop
//! rather than a poll interval later, and a closed socket is the daemon's death, seen at once.
//! When the daemon goes away everything announced is withdrawn; on reconnecting, the routes
//! are reconciled with the daemon's set.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use crate::announce::host_prefix;
use crate::control::{self, Reply, Request};
use crate::{Error, Result};

/// The next hop each family's routes carry: `self` (ExaBGP's own address on the session) or
/// an address. Over an IPv4 session an IPv6 route needs an IPv6 address here: ExaBGP's `self`
/// would put an IPv4 next hop in it, which the peer rejects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NextHops {
    pub v4: Option<IpAddr>,
    pub v6: Option<IpAddr>,
}

impl NextHops {
    /// `--next-hop` values: `self`, or at most one address of each family.
    pub fn parse(values: &[String]) -> Result<NextHops> {
        let mut out = NextHops::default();
        for v in values {
            if v == "self" {
                continue;
            }
            let a: IpAddr = v.parse().map_err(|_| {
                Error::Invalid(format!(
                    "--next-hop `{v}` is not `self` or an IP address; give e.g. self or 198.18.0.1"
                ))
            })?;
            let slot = if a.is_ipv4() {
                &mut out.v4
            } else {
                &mut out.v6
            };
            if slot.replace(a).is_some() {
                return Err(Error::Invalid(format!(
                    "--next-hop: give one address per family (a second one: {a})"
                )));
            }
        }
        Ok(out)
    }

    fn of(&self, a: IpAddr) -> String {
        let nh = if a.is_ipv4() { self.v4 } else { self.v6 };
        nh.map_or_else(|| "self".to_string(), |a| a.to_string())
    }
}

/// ExaBGP's command for one host route.
pub fn command(announce: bool, a: IpAddr, nh: &NextHops) -> String {
    format!(
        "{} route {} next-hop {}",
        if announce { "announce" } else { "withdraw" },
        host_prefix(a),
        nh.of(a)
    )
}

/// What this process has told ExaBGP to announce.
#[derive(Clone, Debug, Default)]
pub struct Routes {
    announced: BTreeSet<IpAddr>,
}

impl Routes {
    /// The commands that turn what is announced into `wanted`: withdrawals first, so a node
    /// losing an address stops attracting its traffic before anything else.
    pub fn reconcile(&mut self, wanted: &BTreeSet<IpAddr>, nh: &NextHops) -> Vec<String> {
        let mut out: Vec<String> = self
            .announced
            .difference(wanted)
            .map(|a| command(false, *a, nh))
            .collect();
        out.extend(
            wanted
                .difference(&self.announced)
                .map(|a| command(true, *a, nh)),
        );
        self.announced = wanted.clone();
        out
    }

    pub fn announced(&self) -> &BTreeSet<IpAddr> {
        &self.announced
    }
}

fn emit(out: &mut impl Write, lines: &[String]) -> Result<()> {
    for l in lines {
        writeln!(out, "{l}")
            .and_then(|()| out.flush())
            .map_err(|e| Error::Invalid(format!("ExaBGP stopped reading our commands ({e})")))?;
    }
    Ok(())
}

/// Follows the daemon on `socket` for ever, writing ExaBGP's commands to `out`; returns only
/// when `out` fails (ExaBGP is gone). `retry`: the wait between connection attempts.
pub fn follow(
    socket: &Path,
    nh: &NextHops,
    out: &mut impl Write,
    retry: Duration,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let mut routes = Routes::default();
    let mut was_down = false;
    loop {
        match control::subscribe(socket, &Request::WatchAnnounceable) {
            Ok(replies) => {
                log(&format!("following the daemon on {}", socket.display()));
                was_down = false;
                for reply in replies {
                    match reply {
                        Ok(Reply::Announceable(set)) => {
                            let set: BTreeSet<IpAddr> = set.into_iter().collect();
                            emit(out, &routes.reconcile(&set, nh))?;
                        }
                        Ok(Reply::Error(e)) => {
                            log(&e);
                            break;
                        }
                        Ok(other) => {
                            log(&format!("the daemon sent {other:?} where announceable addresses were due; are the client and daemon the same wirespeed version?"));
                            break;
                        }
                        Err(e) => {
                            log(&e.to_string());
                            break;
                        }
                    }
                }
                log("the daemon closed the connection: withdrawing everything, reconnecting");
            }
            Err(e) => {
                if !was_down {
                    log(&format!(
                        "{e}; withdrawing everything, retrying every {retry:?}"
                    ));
                    was_down = true;
                }
            }
        }
        emit(out, &routes.reconcile(&BTreeSet::new(), nh))?;
        std::thread::sleep(retry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(list: &[&str]) -> BTreeSet<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn commands_are_exabgp_text_api_host_routes() {
        let nh = NextHops::parse(&["self".into(), "fd00:18::1".into()]).unwrap();
        assert_eq!(
            command(true, "198.18.100.1".parse().unwrap(), &nh),
            "announce route 198.18.100.1/32 next-hop self"
        );
        assert_eq!(
            command(false, "fd00::100".parse().unwrap(), &nh),
            "withdraw route fd00::100/128 next-hop fd00:18::1"
        );
    }

    #[test]
    fn next_hops_take_self_and_one_address_per_family() {
        assert_eq!(NextHops::parse(&[]).unwrap(), NextHops::default());
        let nh = NextHops::parse(&["198.18.0.1".into(), "fd00::1".into()]).unwrap();
        assert_eq!(nh.v4, Some("198.18.0.1".parse().unwrap()));
        assert_eq!(nh.v6, Some("fd00::1".parse().unwrap()));
        assert!(NextHops::parse(&["198.18.0.1".into(), "198.18.0.2".into()]).is_err());
        assert!(NextHops::parse(&["router".into()]).is_err());
    }

    #[test]
    fn reconciling_withdraws_first_and_repeats_nothing() {
        let nh = NextHops::default();
        let mut r = Routes::default();
        assert_eq!(
            r.reconcile(&set(&["198.18.100.1", "198.18.100.2"]), &nh),
            [
                "announce route 198.18.100.1/32 next-hop self",
                "announce route 198.18.100.2/32 next-hop self"
            ]
        );
        assert!(r
            .reconcile(&set(&["198.18.100.1", "198.18.100.2"]), &nh)
            .is_empty());
        assert_eq!(
            r.reconcile(&set(&["198.18.100.2", "198.18.100.3"]), &nh),
            [
                "withdraw route 198.18.100.1/32 next-hop self",
                "announce route 198.18.100.3/32 next-hop self"
            ]
        );
        assert_eq!(r.reconcile(&BTreeSet::new(), &nh).len(), 2);
        assert!(r.announced().is_empty());
    }
}
