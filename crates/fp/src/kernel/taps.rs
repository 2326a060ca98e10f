//! Packet sockets that see a port's frames: what tcpdump, DHCP and LLDP clients hold
//! (`/proc/net/packet`, polled: packet sockets send no event).
//!
//! The kernel hands a received frame to sockets bound to every protocol (ETH_P_ALL, on the
//! port or on any device) before tc ingress, and to sockets bound to one protocol after the
//! rx_handler; a frame it transmits reaches the ETH_P_ALL ones through `dev_queue_xmit`. An
//! XDP program runs before all of them, and an XDP redirect transmits past them; a TC
//! redirect is seen by the ETH_P_ALL ones on both ports, never by the others. So a port with a
//! capture on it runs at TC and takes no XDP redirects, and a routed port with a socket bound
//! to IPv4 or IPv6 leaves that family to the kernel. docs/FASTPATH.md, "What the forwarding
//! path consults" (taps).

use std::collections::BTreeMap;

const ETH_P_ALL: u16 = 0x0003;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;

/// Running packet sockets on one device (ifindex 0: bound to none, so on every device).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapCount {
    /// Bound to every protocol (ETH_P_ALL): they see frames in and out.
    pub all: u32,
    /// Bound to IPv4 or IPv6 alone: they see the frames of that family the port receives and
    /// the kernel does not consume first (a bridge's rx_handler does; a router does not).
    pub ipv4: u32,
    pub ipv6: u32,
}

/// The packet sockets of this namespace that receive, by the ifindex they are bound to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taps(pub BTreeMap<u32, TapCount>);

impl Taps {
    /// Parses `/proc/net/packet` (`packet_seq_show`: sk RefCnt Type Proto Iface R Rmem User
    /// Inode; Proto in hex, host order; R: hooked into the kernel's lists). Lines it cannot read
    /// are skipped: an unreadable line is no socket of a kind we know.
    pub fn parse(text: &str) -> Taps {
        let mut taps = BTreeMap::new();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(proto), Some(iface), Some(running)) = (f.get(3), f.get(4), f.get(5)) else {
                continue;
            };
            let (Ok(proto), Ok(iface)) = (u16::from_str_radix(proto, 16), iface.parse::<i64>())
            else {
                continue;
            };
            // -1: its device is gone; not running: its device is down or it never bound.
            if *running != "1" || iface < 0 {
                continue;
            }
            let c: &mut TapCount = taps.entry(iface as u32).or_default();
            match proto {
                ETH_P_ALL => c.all += 1,
                ETH_P_IP => c.ipv4 += 1,
                ETH_P_IPV6 => c.ipv6 += 1,
                _ => {}
            }
        }
        taps.retain(|_, c| *c != TapCount::default());
        Taps(taps)
    }

    /// This namespace's packet sockets (the calling thread's: the daemon's threads may sit in
    /// other namespaces). None read: no packet sockets (a kernel without AF_PACKET).
    pub fn read() -> Taps {
        std::fs::read_to_string("/proc/thread-self/net/packet")
            .map(|t| Taps::parse(&t))
            .unwrap_or_default()
    }

    /// The sockets that see port `ifindex`'s frames: its own and those bound to no device.
    pub fn on(&self, ifindex: u32) -> TapCount {
        let (own, any) = (self.0.get(&ifindex), self.0.get(&0));
        let (own, any) = (
            own.copied().unwrap_or_default(),
            any.copied().unwrap_or_default(),
        );
        TapCount {
            all: own.all + any.all,
            ipv4: own.ipv4 + any.ipv4,
            ipv6: own.ipv6 + any.ipv6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC: &str = "\
sk               RefCnt Type Proto  Iface R Rmem   User   Inode
000000009ff62f6e 3      3    0003   3     1 0      0      18533 
00000000b71b8ec2 3      2    0003   0     1 0      0      16839 
00000000aaaaaaaa 3      2    0800   4     1 0      0      16840 
00000000bbbbbbbb 3      3    86dd   4     0 0      0      16841 
00000000cccccccc 3      3    88cc   4     1 0      0      16842 
00000000dddddddd 3      3    0003   7     1 0      0      16843 
00000000eeeeeeee 3      3    0003   -1    0 0      0      16844 
garbage
";

    #[test]
    fn reads_running_sockets_by_device_and_protocol() {
        let t = Taps::parse(PROC);
        // tcpdump -i on ifindex 3 and 7, tcpdump -i any, a DHCP client on 4; the IPv6 socket
        // on 4 is not running, LLDP (0x88cc) sees no IP frame, the last one lost its device.
        assert_eq!(
            t.0.keys().copied().collect::<Vec<_>>(),
            vec![0, 3, 4, 7],
            "{t:?}"
        );
        assert_eq!(
            t.on(3),
            TapCount {
                all: 2,
                ..TapCount::default()
            }
        );
        assert_eq!(
            t.on(4),
            TapCount {
                all: 1,
                ipv4: 1,
                ipv6: 0
            }
        );
        assert_eq!(t.on(9).all, 1, "tcpdump -i any sees every device");
    }

    #[test]
    fn an_empty_table_is_no_taps() {
        let t = Taps::parse("sk               RefCnt Type Proto  Iface R Rmem   User   Inode\n");
        assert_eq!(t, Taps::default());
        assert_eq!(t.on(1), TapCount::default());
    }
}
