//! IPsec (xfrm) state that the kernel's forwarding path consults, read over NETLINK_XFRM.
//!
//! A forwarded packet meets xfrm twice: `ip_forward`/`ip6_forward` check it against the
//! `fwd` policies (`xfrm4_policy_check`), and `xfrm_route_forward` looks it up in the `out`
//! policies, which may encrypt it or block it. Where no policy matches, the direction's
//! default policy (`ip xfrm policy setdefault`, Linux 5.16+) may block it. The fast path
//! evaluates none of this, so while any such policy exists for a family, that family's
//! forwarding is the kernel's (docs/FASTPATH.md, "IPsec"). States alone change nothing that
//! is forwarded: without a policy no packet is bundled, and decapsulation is local delivery.

use crate::error::Result;
use crate::kernel::netlink::Socket;
use crate::model::XfrmState;

pub const NETLINK_XFRM: i32 = 6;
/// XFRMNLGRP_POLICY: policies added, updated, deleted, expired or flushed, and default
/// policies set (xfrm_notify_userpolicy).
pub const XFRMNLGRP_POLICY: u32 = 4;

const XFRM_MSG_NEWPOLICY: u16 = 0x13;
const XFRM_MSG_GETPOLICY: u16 = 0x15;
const XFRM_MSG_GETDEFAULT: u16 = 0x28;

const XFRM_POLICY_OUT: u8 = 1;
const XFRM_POLICY_FWD: u8 = 2;
const XFRM_USERPOLICY_BLOCK: u8 = 1;

/// The selector's family is a u16 here (struct xfrm_selector).
const AF_INET: u16 = libc::AF_INET as u16;
const AF_INET6: u16 = libc::AF_INET6 as u16;

/// struct xfrm_userpolicy_info: the selector's family and the policy's direction.
const INFO_SEL_FAMILY: usize = 40;
const INFO_DIR: usize = 160;
const INFO_LEN: usize = 168;

/// The (selector family, direction) of one XFRM_MSG_NEWPOLICY payload.
pub fn parse_policy(payload: &[u8]) -> Option<(u16, u8)> {
    if payload.len() < INFO_LEN {
        return None;
    }
    let family = u16::from_ne_bytes([payload[INFO_SEL_FAMILY], payload[INFO_SEL_FAMILY + 1]]);
    Some((family, payload[INFO_DIR]))
}

/// Counts the policies a forwarded packet may meet. A selector of another family (none is
/// accepted today) counts for both.
pub fn count_policies<'a>(payloads: impl IntoIterator<Item = &'a [u8]>) -> [usize; 2] {
    let mut n = [0, 0];
    for (family, dir) in payloads.into_iter().filter_map(parse_policy) {
        if dir != XFRM_POLICY_OUT && dir != XFRM_POLICY_FWD {
            continue; // in: local delivery; socket policies: the socket's own packets
        }
        match family {
            AF_INET => n[0] += 1,
            AF_INET6 => n[1] += 1,
            _ => {
                n[0] += 1;
                n[1] += 1;
            }
        }
    }
    n
}

/// Whether a struct xfrm_userpolicy_default (in, fwd, out) blocks forwarded packets.
pub fn parse_default(payload: &[u8]) -> bool {
    payload.get(1) == Some(&XFRM_USERPOLICY_BLOCK) || payload.get(2) == Some(&XFRM_USERPOLICY_BLOCK)
}

/// Reads the namespace's policies and default policies.
pub fn read(s: &mut Socket) -> Result<XfrmState> {
    let dump = s.dump(XFRM_MSG_GETPOLICY, &[])?;
    let policies = count_policies(
        dump.iter()
            .filter(|(t, _)| *t == XFRM_MSG_NEWPOLICY)
            .map(|(_, p)| p.as_slice()),
    );
    // Kernels before 5.16 have no default policies (the request fails): nothing is blocked.
    let default_block = s
        .get(XFRM_MSG_GETDEFAULT, &[0u8; 4])
        .map(|r| {
            r.iter()
                .any(|(t, p)| *t == XFRM_MSG_GETDEFAULT && parse_default(p))
        })
        .unwrap_or(false);
    Ok(XfrmState {
        policies,
        default_block,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(family: u16, dir: u8) -> Vec<u8> {
        let mut p = vec![0u8; INFO_LEN];
        p[INFO_SEL_FAMILY..INFO_SEL_FAMILY + 2].copy_from_slice(&family.to_ne_bytes());
        p[INFO_DIR] = dir;
        p
    }

    #[test]
    fn only_out_and_fwd_policies_count_and_by_their_selectors_family() {
        let ps = [
            policy(AF_INET, XFRM_POLICY_FWD),
            policy(AF_INET, 0),
            policy(AF_INET6, XFRM_POLICY_OUT),
            policy(AF_INET6, XFRM_POLICY_OUT + 3), // a socket policy
            policy(0, XFRM_POLICY_FWD),
        ];
        assert_eq!(count_policies(ps.iter().map(|p| p.as_slice())), [2, 2]);
        assert_eq!(parse_policy(&[0u8; INFO_LEN - 1]), None);
    }

    #[test]
    fn a_blocking_fwd_or_out_default_hands_both_families_off() {
        assert!(parse_default(&[0, XFRM_USERPOLICY_BLOCK, 2]));
        assert!(parse_default(&[2, 2, XFRM_USERPOLICY_BLOCK]));
        assert!(!parse_default(&[XFRM_USERPOLICY_BLOCK, 2, 2]));
        assert!(!parse_default(&[]));
        let s = XfrmState {
            policies: [0, 0],
            default_block: true,
        };
        assert!(s.hands_off(false).is_some() && s.hands_off(true).is_some());
        let s = XfrmState {
            policies: [0, 3],
            default_block: false,
        };
        assert!(s.hands_off(false).is_none());
        assert!(s.hands_off(true).unwrap().starts_with("3 IPsec"));
    }
}
