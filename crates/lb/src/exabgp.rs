//! `wirespeed lb announce`: the process ExaBGP runs (docs/LB.md, "Several nodes: announcing
//! over BGP"). It follows the daemon's announceable set and prints ExaBGP 4.2's text API
//! commands (`announce route 198.18.100.1/32 next-hop self`, `withdraw route ...`), one per
//! line, flushed. BGP itself is ExaBGP's.
//!
//! The set comes as a stream on the control socket (`Request::WatchAnnounceable`): the daemon
//! sends it when it changes, so a withdrawal reaches ExaBGP within the daemon's 50 ms loop
//! rather than a poll interval later, and a closed socket is the daemon's death, seen at once.
//! When the daemon goes away everything announced is withdrawn; on reconnecting, the routes
//! are reconciled with the daemon's set (`announce::follow`, shared with FRR's speaker).

use std::collections::BTreeSet;
use std::io::Write;
use std::net::IpAddr;

use crate::announce::{changes, host_prefix, Change, Failure, Speaker};
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
pub fn command(change: Change, nh: &NextHops) -> String {
    let (verb, a) = match change {
        Change::Announce(a) => ("announce", a),
        Change::Withdraw(a) => ("withdraw", a),
    };
    format!("{verb} route {} next-hop {}", host_prefix(a), nh.of(a))
}

/// ExaBGP as the speaker: our commands go to its process pipe, `out` (our stdout), and what it
/// announces is what we told it, so the changes are reckoned from memory.
pub struct Exabgp<W> {
    out: W,
    nh: NextHops,
    announced: BTreeSet<IpAddr>,
}

impl<W: Write> Exabgp<W> {
    pub fn new(out: W, nh: NextHops) -> Exabgp<W> {
        Exabgp {
            out,
            nh,
            announced: BTreeSet::new(),
        }
    }

    /// The commands that turn what is announced into `wanted`, which is then taken as done.
    pub fn reconcile(&mut self, wanted: &BTreeSet<IpAddr>) -> Vec<String> {
        let out = changes(&self.announced, wanted)
            .into_iter()
            .map(|c| command(c, &self.nh))
            .collect();
        self.announced = wanted.clone();
        out
    }
}

impl<W: Write> Speaker for Exabgp<W> {
    fn apply(&mut self, wanted: &BTreeSet<IpAddr>) -> std::result::Result<Vec<String>, Failure> {
        for l in self.reconcile(wanted) {
            writeln!(self.out, "{l}")
                .and_then(|()| self.out.flush())
                .map_err(|e| {
                    Failure::Gone(Error::Invalid(format!(
                        "ExaBGP stopped reading our commands ({e})"
                    )))
                })?;
        }
        Ok(Vec::new())
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
            command(Change::Announce("198.18.100.1".parse().unwrap()), &nh),
            "announce route 198.18.100.1/32 next-hop self"
        );
        assert_eq!(
            command(Change::Withdraw("fd00::100".parse().unwrap()), &nh),
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
        let mut r = Exabgp::new(Vec::new(), NextHops::default());
        r.apply(&set(&["198.18.100.1", "198.18.100.2"])).unwrap();
        r.apply(&set(&["198.18.100.1", "198.18.100.2"])).unwrap();
        r.apply(&set(&["198.18.100.2", "198.18.100.3"])).unwrap();
        r.apply(&BTreeSet::new()).unwrap();
        assert!(r.reconcile(&BTreeSet::new()).is_empty());
        assert_eq!(
            String::from_utf8(r.out).unwrap(),
            "announce route 198.18.100.1/32 next-hop self\n\
             announce route 198.18.100.2/32 next-hop self\n\
             withdraw route 198.18.100.1/32 next-hop self\n\
             announce route 198.18.100.3/32 next-hop self\n\
             withdraw route 198.18.100.2/32 next-hop self\n\
             withdraw route 198.18.100.3/32 next-hop self\n"
        );
    }
}
