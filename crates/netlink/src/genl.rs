//! The generic-netlink controller (`nlctrl`): a family's id and multicast groups by name.
//! A generic-netlink message is a netlink message whose type is the family id, whose payload
//! starts with `genlmsghdr { cmd, version, reserved }`, then attributes.

use crate::{attrs, cstr, find, u32_of, Error, Result, Socket};

pub const GENL_ID_CTRL: u16 = 0x10;
/// struct genlmsghdr.
pub const GENL_HDRLEN: usize = 4;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_MCAST_GROUPS: u16 = 7;
const CTRL_ATTR_MCAST_GRP_NAME: u16 = 1;
const CTRL_ATTR_MCAST_GRP_ID: u16 = 2;

/// A request's payload: the genlmsghdr for `cmd` (version 1), then `attrs`.
pub fn request(cmd: u8, attrs: &[u8]) -> Vec<u8> {
    let mut p = vec![cmd, 1, 0, 0];
    p.extend_from_slice(attrs);
    p
}

/// A generic-netlink family as this kernel numbers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub id: u16,
    /// Its multicast groups: (name, id).
    pub groups: Vec<(String, u32)>,
}

impl Family {
    /// The id of the multicast group `name`.
    pub fn group(&self, name: &str) -> Option<u32> {
        self.groups
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| *id)
    }
}

/// Finds the family `name` among a CTRL_CMD_GETFAMILY dump's replies (payloads after the
/// netlink header).
pub fn parse_family(replies: &[(u16, Vec<u8>)], name: &str) -> Option<Family> {
    replies.iter().find_map(|(_, p)| {
        let a = attrs(p.get(GENL_HDRLEN..)?);
        if find(&a, CTRL_ATTR_FAMILY_NAME).map(cstr).as_deref() != Some(name) {
            return None;
        }
        let id = u16::from_ne_bytes(find(&a, CTRL_ATTR_FAMILY_ID)?.get(..2)?.try_into().ok()?);
        let groups = find(&a, CTRL_ATTR_MCAST_GROUPS)
            .map(attrs)
            .unwrap_or_default()
            .iter()
            .filter_map(|(_, g)| {
                let ga = attrs(g);
                let name = cstr(find(&ga, CTRL_ATTR_MCAST_GRP_NAME)?);
                Some((name, u32_of(find(&ga, CTRL_ATTR_MCAST_GRP_ID)?)?))
            })
            .collect();
        Some(Family { id, groups })
    })
}

/// Resolves the family `name`; Err when this kernel has none.
pub fn family(s: &mut Socket, name: &str) -> Result<Family> {
    // CTRL_ATTR_FAMILY_NAME would filter; a dump of all families is as cheap and needs no
    // attribute.
    let replies = s.dump(GENL_ID_CTRL, &request(CTRL_CMD_GETFAMILY, &[]))?;
    parse_family(&replies, name)
        .ok_or_else(|| Error::Netlink(format!("no {name} generic-netlink family")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr;

    #[test]
    fn a_family_and_its_groups_are_found_among_others() {
        let group = |name: &str, id: u32| {
            attr(
                1,
                &[
                    attr(CTRL_ATTR_MCAST_GRP_NAME, format!("{name}\0").as_bytes()),
                    attr(CTRL_ATTR_MCAST_GRP_ID, &id.to_ne_bytes()),
                ]
                .concat(),
            )
        };
        let family = |name: &str, id: u16, groups: Vec<u8>| {
            request(
                1,
                &[
                    attr(CTRL_ATTR_FAMILY_ID, &id.to_ne_bytes()),
                    attr(CTRL_ATTR_FAMILY_NAME, format!("{name}\0").as_bytes()),
                    attr(CTRL_ATTR_MCAST_GROUPS, &groups),
                ]
                .concat(),
            )
        };
        let replies = vec![
            (GENL_ID_CTRL, family("ethtool", 20, group("monitor", 5))),
            (
                GENL_ID_CTRL,
                family(
                    "netdev",
                    27,
                    [group("page-pool", 9), group("mgmt", 8)].concat(),
                ),
            ),
        ];
        let netdev = parse_family(&replies, "netdev").unwrap();
        assert_eq!(netdev.id, 27);
        assert_eq!(netdev.group("mgmt"), Some(8));
        assert_eq!(netdev.group("page-pool"), Some(9));
        assert_eq!(netdev.group("other"), None);
        assert_eq!(parse_family(&replies[..1], "netdev"), None);
        // Truncated or garbage replies are skipped, never a panic.
        assert_eq!(parse_family(&[(GENL_ID_CTRL, vec![1, 2])], "netdev"), None);
    }
}
