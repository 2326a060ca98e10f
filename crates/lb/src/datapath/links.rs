//! The attached interfaces as the kernel reports them, followed through rtnetlink's link
//! events instead of asked on every turn: whether each is up with its carrier, and its own
//! MAC, which the program must know to take the frames sent to it (docs/LB.md, "Frames for
//! another host" and "What is announced").

use wirespeed_netlink::route::{self, RTM_DELLINK, RTM_NEWLINK, RTNLGRP_LINK};
use wirespeed_netlink::{messages, Socket, NETLINK_ROUTE};

use crate::error::Error;
use crate::Result;

/// One attached interface as last reported.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Port {
    name: String,
    ifindex: u32,
    /// IFF_UP and IFF_LOWER_UP; false once the interface is deleted.
    up: bool,
    mac: [u8; 6],
}

/// An attached interface's new own MAC (`ip link set IF address ...`, a bond's failover).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MacChange {
    pub name: String,
    pub ifindex: u32,
    pub mac: [u8; 6],
}

/// The link event subscription and the state it keeps.
pub struct LinkWatch {
    events: Socket,
    buf: Vec<u8>,
    ports: Vec<Port>,
    /// MACs that changed before the first `follow` (since the caller read them).
    pending: Vec<MacChange>,
}

fn nl(what: &str) -> impl FnOnce(wirespeed_netlink::Error) -> Error + '_ {
    move |e| Error::DataPath(format!("{what}: {e}"))
}

impl LinkWatch {
    /// Subscribes to link events, then reads the state of each of `ports` (name, ifindex, the
    /// MAC the program was given): a change between the two is then an event still queued,
    /// and the queued events, taken in order, end at the kernel's current state.
    pub fn open(ports: &[(String, u32, [u8; 6])]) -> Result<LinkWatch> {
        let events = Socket::open(NETLINK_ROUTE).map_err(nl("netlink socket for link events"))?;
        events
            .join(RTNLGRP_LINK)
            .map_err(nl("subscribe to link events"))?;
        let mut w = LinkWatch {
            events,
            buf: vec![0u8; 64 * 1024],
            ports: ports
                .iter()
                .map(|(name, ifindex, mac)| Port {
                    name: name.clone(),
                    ifindex: *ifindex,
                    up: false,
                    mac: *mac,
                })
                .collect(),
            pending: Vec::new(),
        };
        w.pending = w.reread()?;
        Ok(w)
    }

    /// Reads every interface's state with one request each, on a socket of its own (replies
    /// on the subscribed one would be mixed with events).
    fn reread(&mut self) -> Result<Vec<MacChange>> {
        let mut query = Socket::open(NETLINK_ROUTE).map_err(nl("netlink socket"))?;
        let mut links = Vec::new();
        for p in &self.ports {
            match route::get_link(&mut query, p.ifindex) {
                Ok(l) => links.extend(l),
                // Deleted: the kernel answers ENODEV; it is down.
                Err(wirespeed_netlink::Error::Refused { .. }) => {}
                Err(e) => return Err(nl("read an interface")(e)),
            }
        }
        let mut changes = Vec::new();
        for p in &mut self.ports {
            let link = links.iter().find(|l| l.index == p.ifindex);
            changes.extend(p.take(link, true));
        }
        Ok(changes)
    }

    /// Takes the queued events (without blocking) and returns the MACs that changed. An
    /// overflowed queue lost events, so every interface is read again.
    pub fn follow(&mut self) -> Result<Vec<MacChange>> {
        let mut changes = std::mem::take(&mut self.pending);
        loop {
            let n = match self.events.recv(&mut self.buf) {
                Ok(Some(0)) => {
                    changes.extend(self.reread()?);
                    continue;
                }
                Ok(Some(n)) => n,
                Ok(None) => return Ok(changes),
                Err(e) => return Err(nl("read link events")(e)),
            };
            for m in messages(&self.buf[..n]) {
                let deleted = match m.ty {
                    RTM_NEWLINK => false,
                    RTM_DELLINK => true,
                    _ => continue,
                };
                let Some(link) = route::parse_link(m.payload) else {
                    continue;
                };
                if let Some(p) = self.ports.iter_mut().find(|p| p.ifindex == link.index) {
                    changes.extend(p.take(Some(&link), !deleted));
                }
            }
        }
    }

    /// The interfaces down, without their carrier, or deleted, by name.
    pub fn down(&self) -> Vec<String> {
        self.ports
            .iter()
            .filter(|p| !p.up)
            .map(|p| p.name.clone())
            .collect()
    }
}

impl Port {
    /// Takes what the kernel reported (`link` None, or `exists` false: no such interface);
    /// returns the new MAC if it changed.
    fn take(&mut self, link: Option<&route::Link>, exists: bool) -> Option<MacChange> {
        let Some(link) = link.filter(|_| exists) else {
            self.up = false;
            return None;
        };
        self.up = link.up;
        let mac = link.mac.filter(|m| *m != self.mac)?;
        self.mac = mac;
        Some(MacChange {
            name: self.name.clone(),
            ifindex: self.ifindex,
            mac,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port() -> Port {
        Port {
            name: "eth0".into(),
            ifindex: 7,
            up: true,
            mac: [2, 0, 0, 0, 0, 1],
        }
    }

    fn link(up: bool, mac: [u8; 6]) -> route::Link {
        route::Link {
            index: 7,
            name: "eth0".into(),
            up,
            mac: Some(mac),
            ..route::Link::default()
        }
    }

    #[test]
    fn a_new_mac_is_reported_once_and_carrier_follows_each_event() {
        let mut p = port();
        assert_eq!(p.take(Some(&link(false, [2, 0, 0, 0, 0, 1])), true), None);
        assert!(!p.up, "carrier lost");
        let change = p.take(Some(&link(true, [2, 0, 0, 0, 0, 9])), true);
        assert_eq!(
            change,
            Some(MacChange {
                name: "eth0".into(),
                ifindex: 7,
                mac: [2, 0, 0, 0, 0, 9]
            })
        );
        assert!(p.up);
        assert_eq!(p.take(Some(&link(true, [2, 0, 0, 0, 0, 9])), true), None);
    }

    #[test]
    fn a_deleted_interface_is_down_and_keeps_its_mac() {
        let mut p = port();
        assert_eq!(p.take(Some(&link(true, [2, 0, 0, 0, 0, 9])), false), None);
        assert!(!p.up);
        assert_eq!(p.mac, [2, 0, 0, 0, 0, 1]);
        assert_eq!(p.take(None, true), None);
        assert!(!p.up);
    }
}
