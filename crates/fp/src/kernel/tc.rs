//! Traffic control that the kernel runs around a forwarded packet, read over rtnetlink.
//!
//! On receive, tc ingress classifiers run after XDP and after tcx programs (ours among them),
//! so whatever the fast path forwards skips them: a port with an `ingress` or `clsact` qdisc,
//! which holds such classifiers, is left to the kernel. On transmit, an XDP redirect goes
//! straight to the driver (`ndo_xdp_xmit`), past the egress classifiers and the qdisc, where
//! a TC redirect (`bpf_redirect`) enters `dev_queue_xmit` and meets both, as the kernel's own
//! forwarding does: a port with a `clsact` qdisc or a qdisc the kernel did not attach by
//! itself takes no XDP redirects. docs/FASTPATH.md, "What the forwarding path consults".

use std::collections::BTreeMap;

use crate::error::Result;
use crate::kernel::netlink::{self, Socket, RTM_NEWQDISC};
use crate::model::PortTc;

const RTM_GETQDISC: u16 = 38;

const TCA_KIND: u16 = 1;
/// The parent of the `ingress` and `clsact` qdiscs (TC_H_INGRESS, TC_H_CLSACT).
const TC_H_INGRESS: u32 = 0xffff_fff1;
const TCMSG_LEN: usize = 20;

/// One qdisc as a dump reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    pub ifindex: u32,
    pub handle: u32,
    pub parent: u32,
    pub kind: String,
}

/// struct tcmsg: (ifindex, handle, parent), then the attributes.
fn tcmsg(payload: &[u8]) -> Option<(u32, u32, u32, &[u8])> {
    let word = |at: usize| {
        Some(u32::from_ne_bytes(
            payload.get(at..at + 4)?.try_into().ok()?,
        ))
    };
    Some((word(4)?, word(8)?, word(12)?, payload.get(TCMSG_LEN..)?))
}

pub fn parse_qdisc(payload: &[u8]) -> Option<Qdisc> {
    let (ifindex, handle, parent, rest) = tcmsg(payload)?;
    let kind = netlink::attrs(rest)
        .into_iter()
        .find(|(t, _)| *t == TCA_KIND)
        .map(|(_, v)| {
            String::from_utf8_lossy(v)
                .trim_end_matches('\0')
                .to_string()
        })?;
    Some(Qdisc {
        ifindex,
        handle,
        parent,
        kind,
    })
}

fn handle_name(h: u32) -> String {
    format!("{:x}:", h >> 16)
}

/// Each port's tc state from its qdiscs. An `ingress` or `clsact` qdisc counts, whether it
/// holds classifiers yet or not: `tc filter add` returns before the daemon can step aside
/// (the kernel's router.sh adds a filter and sends at once; with the fast path at XDP, its
/// first packets skipped the new filter), while the qdisc comes first, with its own event.
/// The kernel attaches its default qdiscs with handle 0 (`attach_default_qdiscs`: noqueue,
/// or mq over the default qdisc); one a user adds gets a handle of its own.
pub fn port_states(qdiscs: &[Qdisc]) -> BTreeMap<u32, PortTc> {
    let mut out: BTreeMap<u32, PortTc> = BTreeMap::new();
    for q in qdiscs {
        let port = out.entry(q.ifindex).or_default();
        if q.parent == TC_H_INGRESS {
            let article = if q.kind == "ingress" { "an" } else { "a" };
            port.ingress = Some(format!(
                "{article} {} qdisc (its ingress classifiers run after an XDP or tcx program)",
                q.kind
            ));
            if q.kind == "clsact" {
                port.egress.get_or_insert(
                    "a clsact qdisc (its egress classifiers run in dev_queue_xmit)".into(),
                );
            }
        } else if q.handle != 0 {
            port.egress.get_or_insert(format!(
                "an egress qdisc {} (handle {})",
                q.kind,
                handle_name(q.handle)
            ));
        }
    }
    out.retain(|_, t| *t != PortTc::default());
    out
}

/// Reads every port's tc state: one qdisc dump.
pub fn read(s: &mut Socket) -> Result<BTreeMap<u32, PortTc>> {
    let qdiscs: Vec<Qdisc> = s
        .dump(RTM_GETQDISC, &[0u8; TCMSG_LEN])?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWQDISC)
        .filter_map(|(_, p)| parse_qdisc(p))
        .collect();
    Ok(port_states(&qdiscs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(ifindex: u32, handle: u32, parent: u32, kind: &str) -> Qdisc {
        Qdisc {
            ifindex,
            handle,
            parent,
            kind: kind.into(),
        }
    }

    #[test]
    fn default_qdiscs_leave_a_port_alone() {
        let qs = [
            q(2, 0, 0xffff_ffff, "noqueue"),
            q(3, 0, 0xffff_ffff, "mq"),
            q(3, 0, 0x0001, "fq_codel"),
        ];
        assert!(port_states(&qs).is_empty());
    }

    #[test]
    fn a_clsact_or_ingress_qdisc_and_a_users_qdisc_are_seen_on_their_side() {
        let qs = [
            q(2, 0xffff_0000, TC_H_INGRESS, "clsact"),
            q(3, 0xffff_0000, TC_H_INGRESS, "ingress"),
            q(4, 0x8001_0000, 0xffff_ffff, "tbf"),
        ];
        let got = port_states(&qs);
        assert!(got[&2]
            .ingress
            .as_ref()
            .unwrap()
            .starts_with("a clsact qdisc"));
        assert!(got[&2]
            .egress
            .as_ref()
            .unwrap()
            .starts_with("a clsact qdisc"));
        assert!(got[&3]
            .ingress
            .as_ref()
            .unwrap()
            .starts_with("an ingress qdisc"));
        assert_eq!(got[&3].egress, None);
        assert_eq!(
            got[&4].egress.as_deref(),
            Some("an egress qdisc tbf (handle 8001:)")
        );
        assert_eq!(got[&4].ingress, None);
    }

    #[test]
    fn a_qdisc_message_is_read_and_garbage_is_not() {
        let mut p = vec![0u8; TCMSG_LEN];
        p[4..8].copy_from_slice(&7u32.to_ne_bytes());
        p[8..12].copy_from_slice(&0x8001_0000u32.to_ne_bytes());
        p[12..16].copy_from_slice(&0xffff_ffffu32.to_ne_bytes());
        p.extend_from_slice(&netlink::attr(TCA_KIND, b"tbf\0"));
        assert_eq!(parse_qdisc(&p), Some(q(7, 0x8001_0000, 0xffff_ffff, "tbf")));
        assert_eq!(parse_qdisc(&p[..TCMSG_LEN]), None);
        assert_eq!(parse_qdisc(&[1, 2, 3]), None);
    }
}
