//! lb_bench's frames: minimum-size TCP (SYN, ACK) and UDP frames from many clients to the VIP,
//! what a correctly forwarded frame looks like at the backends for each mode (as sink
//! expectations), and the full check of one sample frame.

use std::net::Ipv4Addr;

use super::{Mode, Traffic};
use wirespeed_wire::checksum;
use wirespeed_xdpgen::{Expect, Gen};

/// Ethernet + IPv4 offsets of the fields the checks read.
const ETHERTYPE: usize = 12;
const IP: usize = 14;
const IP_PROTO: usize = IP + 9;
const IP_SRC: usize = IP + 12;
const IP_DST: usize = IP + 16;
const L4: usize = IP + 20;
/// The acknowledgement number of every measured TCP ACK: the backends' SYN-ACKs, when they
/// answer while connections are primed, carry this minus one (Gen::answer_syns).
pub const ACK_NUMBER: u32 = 0x2000_0001;

/// One frame's addresses, as the client sends it.
#[derive(Clone, Copy, Debug)]
pub struct Flow {
    pub src: Ipv4Addr,
    pub sport: u16,
}

/// Where frames go and come from in the lab.
#[derive(Clone, Debug)]
pub struct Addressing {
    pub client_mac: [u8; 6],
    /// The load balancer's client-side interface.
    pub lb_mac: [u8; 6],
    pub vip: Ipv4Addr,
    /// The VIP's port for `traffic`'s protocol.
    pub tcp_port: u16,
    pub udp_port: u16,
    /// Reals, by backend: address, the MAC of its interface, and the MAC of the load
    /// balancer's interface facing it.
    pub reals: Vec<(Ipv4Addr, [u8; 6], [u8; 6])>,
    /// The reals' ports (NAT and full-NAT translate to them; DR and tunnel keep the VIP's).
    pub real_tcp_port: u16,
    pub real_udp_port: u16,
    /// Full-NAT's local addresses: the first `laddrs` hosts of this /24.
    pub laddr_net: Ipv4Addr,
    pub laddrs: u8,
    /// The clients' /24.
    pub client_net: Ipv4Addr,
    /// The backends' addresses share this prefix (a /22 for 4 backends).
    pub real_net: (Ipv4Addr, u8),
}

impl Addressing {
    /// Full-NAT's local addresses.
    pub fn laddrs(&self) -> Vec<Ipv4Addr> {
        let n = self.laddr_net.octets();
        (1..=self.laddrs)
            .map(|h| Ipv4Addr::new(n[0], n[1], n[2], h))
            .collect()
    }

    fn is_laddr(&self, a: Ipv4Addr) -> bool {
        let (o, n) = (a.octets(), self.laddr_net.octets());
        o[..3] == n[..3] && (1..=self.laddrs).contains(&o[3])
    }
}

/// A 60-byte frame (64 on the wire) from `flow` to the VIP.
pub fn frame(a: &Addressing, traffic: Traffic, flow: Flow) -> [u8; Gen::FRAME_LEN] {
    let mut f = [0u8; Gen::FRAME_LEN];
    f[0..6].copy_from_slice(&a.lb_mac);
    f[6..12].copy_from_slice(&a.client_mac);
    f[ETHERTYPE..ETHERTYPE + 2].copy_from_slice(&[0x08, 0x00]);
    let (proto, l4_len, dport) = match traffic {
        Traffic::Udp => (17u8, 26usize, a.udp_port),
        Traffic::TcpSyn | Traffic::TcpAck => (6, 20, a.tcp_port),
    };
    f[IP] = 0x45;
    f[IP + 2..IP + 4].copy_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    f[IP + 6] = 0x40; // DF, as a TCP stack sends
    f[IP + 8] = 64;
    f[IP_PROTO] = proto;
    f[IP_SRC..IP_SRC + 4].copy_from_slice(&flow.src.octets());
    f[IP_DST..IP_DST + 4].copy_from_slice(&a.vip.octets());
    let ip_csum = checksum::checksum(&f[IP..IP + 20]);
    f[IP + 10..IP + 12].copy_from_slice(&ip_csum.to_be_bytes());
    f[L4..L4 + 2].copy_from_slice(&flow.sport.to_be_bytes());
    f[L4 + 2..L4 + 4].copy_from_slice(&dport.to_be_bytes());
    let csum_at = match traffic {
        Traffic::Udp => {
            f[L4 + 4..L4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            L4 + 6
        }
        Traffic::TcpSyn | Traffic::TcpAck => {
            let syn = traffic == Traffic::TcpSyn;
            // seq, ack, data offset 5, flags, window
            f[L4 + 4..L4 + 8].copy_from_slice(&0x1000_0000u32.to_be_bytes());
            if !syn {
                f[L4 + 8..L4 + 12].copy_from_slice(&ACK_NUMBER.to_be_bytes());
            }
            f[L4 + 12] = 5 << 4;
            f[L4 + 13] = if syn { 0x02 } else { 0x10 };
            f[L4 + 14..L4 + 16].copy_from_slice(&64240u16.to_be_bytes());
            L4 + 16
        }
    };
    let (src, dst) = (&f[IP_SRC..IP_SRC + 4], &f[IP_DST..IP_DST + 4]);
    let l4_csum = checksum::transport(src, dst, proto, &f[L4..L4 + l4_len]);
    f[csum_at..csum_at + 2].copy_from_slice(&l4_csum.to_be_bytes());
    f
}

/// `n` flows: sources spread over the clients' /24 (.1 to .200), each with its own port
/// above `port_base`.
pub fn flows(a: &Addressing, n: usize, port_base: u16) -> Vec<Flow> {
    let net = a.client_net.octets();
    (0..n)
        .map(|i| Flow {
            src: Ipv4Addr::new(net[0], net[1], net[2], 1 + (i % 200) as u8),
            sport: port_base.wrapping_add(i as u16),
        })
        .collect()
}

/// What the VIP's traffic looks like after the load balancer (or nftables) under `mode`:
/// `mode` is the translation actually in use (nftables DNAT looks like NAT).
pub fn expectations(a: &Addressing, mode: Mode, traffic: Traffic) -> Vec<Expect> {
    let (proto, vport, rport) = match traffic {
        Traffic::Udp => (17u8, a.udp_port, a.real_udp_port),
        _ => (6, a.tcp_port, a.real_tcp_port),
    };
    let net_mask = |bits: u8| (u32::MAX << (32 - bits as u32)).to_be_bytes();
    let reals = Expect::masked(IP_DST as u16, a.real_net.0.octets(), net_mask(a.real_net.1));
    let clients = Expect::masked(IP_SRC as u16, a.client_net.octets(), net_mask(24));
    let ipv4 = Expect::bytes(ETHERTYPE as u16, &[0x08, 0x00]);
    let port = |p: u16| Expect::bytes(L4 as u16 + 2, &p.to_be_bytes());
    match mode {
        Mode::Dr => vec![
            ipv4,
            Expect::bytes(IP_PROTO as u16, &[proto]),
            clients,
            Expect::bytes(IP_DST as u16, &a.vip.octets()),
            port(vport),
        ],
        Mode::Tunnel => vec![
            ipv4,
            Expect::bytes(IP_PROTO as u16, &[4]),
            reals,
            // the inner header, 20 bytes further on
            Expect::bytes(IP_PROTO as u16 + 20, &[proto]),
            Expect::masked(IP_SRC as u16 + 20, a.client_net.octets(), net_mask(24)),
            Expect::bytes(IP_DST as u16 + 20, &a.vip.octets()),
            Expect::bytes(L4 as u16 + 22, &vport.to_be_bytes()),
        ],
        Mode::Nat => vec![
            ipv4,
            Expect::bytes(IP_PROTO as u16, &[proto]),
            clients,
            reals,
            port(rport),
        ],
        Mode::FullNat => vec![
            ipv4,
            Expect::bytes(IP_PROTO as u16, &[proto]),
            Expect::masked(IP_SRC as u16, a.laddr_net.octets(), net_mask(24)),
            reals,
            port(rport),
        ],
    }
}

fn addr(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

fn hex(f: &[u8]) -> String {
    f.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks one frame taken at a backend in full: MACs of a real and of the load balancer's
/// interface facing it, the mode's addresses and ports, and every checksum recomputed. The
/// error says what is wrong and shows the frame.
pub fn check_sample(a: &Addressing, mode: Mode, traffic: Traffic, f: &[u8]) -> Result<(), String> {
    let bad = |why: String| Err(format!("{why}; frame {}", hex(f)));
    if f.len() < L4 + 8 {
        return bad(format!("{} bytes is too short", f.len()));
    }
    let (dst_mac, src_mac) = (&f[0..6], &f[6..12]);
    let Some(real) = a.reals.iter().position(|r| r.1 == dst_mac) else {
        return bad("destination MAC is no backend's".into());
    };
    if src_mac != a.reals[real].2 {
        return bad(format!(
            "source MAC is not the load balancer's interface toward backend {real}"
        ));
    }
    if f[ETHERTYPE..ETHERTYPE + 2] != [0x08, 0x00] {
        return bad("not IPv4".into());
    }
    let (outer, inner) = if mode == Mode::Tunnel {
        if f[IP_PROTO] != 4 {
            return bad(format!("outer protocol {} is not IPIP (4)", f[IP_PROTO]));
        }
        (IP, IP + 20)
    } else {
        (IP, IP)
    };
    for at in [outer, inner] {
        if f[at] != 0x45 {
            return bad(format!(
                "IPv4 header at {at} is not 20 bytes without options"
            ));
        }
        if checksum::checksum(&f[at..at + 20]) != 0 {
            return bad(format!("IPv4 header checksum at {at} is wrong"));
        }
    }
    let total = u16::from_be_bytes([f[inner + 2], f[inner + 3]]) as usize;
    let l4 = inner + 20;
    if total < 28 || inner + total > f.len() {
        return bad(format!("IPv4 total length {total} does not fit the frame"));
    }
    if mode == Mode::Tunnel {
        let outer_total = u16::from_be_bytes([f[outer + 2], f[outer + 3]]) as usize;
        if outer_total != total + 20 {
            return bad(format!(
                "outer length {outer_total} is not inner length {total} + 20"
            ));
        }
        if addr(&f[outer + 16..outer + 20]) != a.reals[real].0 {
            return bad("outer destination is not the backend the frame went to".into());
        }
    }
    let proto = f[inner + 9];
    let (want_proto, vport, rport) = match traffic {
        Traffic::Udp => (17u8, a.udp_port, a.real_udp_port),
        _ => (6, a.tcp_port, a.real_tcp_port),
    };
    if proto != want_proto {
        return bad(format!("protocol {proto}, expected {want_proto}"));
    }
    let (src, dst) = (
        addr(&f[inner + 12..inner + 16]),
        addr(&f[inner + 16..inner + 20]),
    );
    let dport = u16::from_be_bytes([f[l4 + 2], f[l4 + 3]]);
    let in_clients = src.octets()[..3] == a.client_net.octets()[..3];
    let (want_src_ok, want_dst, want_dport) = match mode {
        Mode::Dr | Mode::Tunnel => (in_clients, a.vip, vport),
        Mode::Nat => (in_clients, a.reals[real].0, rport),
        Mode::FullNat => (a.is_laddr(src), a.reals[real].0, rport),
    };
    if !want_src_ok {
        return bad(format!("source {src} is wrong for {}", mode.name()));
    }
    if dst != want_dst || dport != want_dport {
        return bad(format!(
            "destination {dst}:{dport}, expected {want_dst}:{want_dport} for {}",
            mode.name()
        ));
    }
    let l4_len = total - 20;
    let (src, dst) = (&f[inner + 12..inner + 16], &f[inner + 16..inner + 20]);
    let csum = u16::from_be_bytes([
        f[l4 + if proto == 17 { 6 } else { 16 }],
        f[l4 + if proto == 17 { 7 } else { 17 }],
    ]);
    let skip_udp = proto == 17 && csum == 0;
    if !skip_udp && checksum::transport(src, dst, proto, &f[l4..l4 + l4_len]) != 0 {
        return bad(format!("{} checksum is wrong", traffic.name()));
    }
    if proto == 6 {
        let flags = f[l4 + 13];
        let want = if traffic == Traffic::TcpSyn {
            0x02
        } else {
            0x10
        };
        if flags & 0x17 != want {
            return bad(format!("TCP flags {flags:#04x}, expected {want:#04x}"));
        }
        // TOA (kind 254, DPVS's layout: port, IPv4 address) when full-NAT adds it: the
        // client's address must be in it.
        let doff = (f[l4 + 12] >> 4) as usize * 4;
        let mut o = l4 + 20;
        while o + 1 < l4 + doff && o + 1 < f.len() {
            match f[o] {
                0 => break,
                1 => o += 1,
                254 if f[o + 1] == 8 && o + 8 <= f.len() => {
                    let client = addr(&f[o + 4..o + 8]);
                    if client.octets()[..3] != a.client_net.octets()[..3] {
                        return bad(format!("TOA carries {client}, not a client address"));
                    }
                    o += 8;
                }
                _ => o += (f[o + 1] as usize).max(2),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed_testkit::csum;

    fn addressing() -> Addressing {
        Addressing {
            client_mac: [2, 0, 0, 0, 0, 1],
            lb_mac: [2, 0, 0, 0, 0, 2],
            vip: Ipv4Addr::new(198, 18, 200, 1),
            tcp_port: 80,
            udp_port: 53,
            reals: (0..4)
                .map(|j| {
                    (
                        Ipv4Addr::new(198, 18, 100 + j, 1),
                        [2, 0, 0, 0, 1, j],
                        [2, 0, 0, 0, 2, j],
                    )
                })
                .collect(),
            real_tcp_port: 8080,
            real_udp_port: 5353,
            laddr_net: Ipv4Addr::new(198, 18, 201, 0),
            laddrs: 16,
            client_net: Ipv4Addr::new(198, 18, 10, 0),
            real_net: (Ipv4Addr::new(198, 18, 100, 0), 22),
        }
    }

    fn flow() -> Flow {
        Flow {
            src: Ipv4Addr::new(198, 18, 10, 7),
            sport: 40000,
        }
    }

    /// What NAT (or full-NAT, with `src`) makes of `f` for real 2, checksums recomputed.
    fn translated(a: &Addressing, f: &[u8], src: Option<Ipv4Addr>) -> Vec<u8> {
        let mut o = f.to_vec();
        o[0..6].copy_from_slice(&a.reals[2].1);
        o[6..12].copy_from_slice(&a.reals[2].2);
        if let Some(s) = src {
            o[IP_SRC..IP_SRC + 4].copy_from_slice(&s.octets());
        }
        o[IP_DST..IP_DST + 4].copy_from_slice(&a.reals[2].0.octets());
        let port = if o[IP_PROTO] == 17 { 5353u16 } else { 8080 };
        o[L4 + 2..L4 + 4].copy_from_slice(&port.to_be_bytes());
        o[IP + 10..IP + 12].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&o[IP..IP + 20]);
        o[IP + 10..IP + 12].copy_from_slice(&c.to_be_bytes());
        let total = u16::from_be_bytes([o[IP + 2], o[IP + 3]]) as usize;
        let at = if o[IP_PROTO] == 17 { L4 + 6 } else { L4 + 16 };
        o[at..at + 2].copy_from_slice(&[0, 0]);
        let (src, dst) = (&o[IP_SRC..IP_SRC + 4], &o[IP_DST..IP_DST + 4]);
        let c = checksum::transport(src, dst, o[IP_PROTO], &o[L4..IP + total]);
        o[at..at + 2].copy_from_slice(&c.to_be_bytes());
        o
    }

    #[test]
    fn frames_are_minimum_size_with_right_checksums() {
        let a = addressing();
        for t in Traffic::ALL {
            let f = frame(&a, t, flow());
            assert_eq!(f.len(), 60);
            // Checked by the test kit's own sum, not by wire's, which built them; the
            // padding to 60 bytes is no part of the IP packet.
            let total = u16::from_be_bytes([f[IP + 2], f[IP + 3]]) as usize;
            assert_eq!(csum::check_frame(&f[..IP + total]), Ok(()), "{t:?}");
        }
        assert_eq!(flows(&a, 4096, 1024).len(), 4096);
    }

    #[test]
    fn the_sample_check_takes_right_translations_and_refuses_wrong_ones() {
        let a = addressing();
        for t in Traffic::ALL {
            let f = frame(&a, t, flow());
            let nat = translated(&a, &f, None);
            assert_eq!(check_sample(&a, Mode::Nat, t, &nat), Ok(()));
            let full = translated(&a, &f, Some(Ipv4Addr::new(198, 18, 201, 3)));
            assert_eq!(check_sample(&a, Mode::FullNat, t, &full), Ok(()));
            // NAT's output is not full-NAT's, nor DR's
            assert!(check_sample(&a, Mode::FullNat, t, &nat).is_err());
            assert!(check_sample(&a, Mode::Dr, t, &nat).is_err());
            // a broken checksum
            let mut bad = nat.clone();
            bad[L4] ^= 1;
            assert!(check_sample(&a, Mode::Nat, t, &bad)
                .unwrap_err()
                .contains("checksum"));
            // the frame as sent, untranslated
            assert!(check_sample(&a, Mode::Nat, t, &f).is_err());
        }
    }

    #[test]
    fn expectations_match_what_the_check_takes() {
        let a = addressing();
        let f = frame(&a, Traffic::TcpAck, flow());
        let full = translated(&a, &f, Some(Ipv4Addr::new(198, 18, 201, 3)));
        let matches = |frame: &[u8], e: &[Expect]| {
            e.iter().all(|w| {
                let o = w.offset as usize;
                (0..4).all(|i| frame[o + i] & w.mask[i] == w.value[i])
            })
        };
        assert!(matches(
            &full,
            &expectations(&a, Mode::FullNat, Traffic::TcpAck)
        ));
        assert!(!matches(
            &full,
            &expectations(&a, Mode::Nat, Traffic::TcpAck)
        ));
        assert!(!matches(
            &f,
            &expectations(&a, Mode::FullNat, Traffic::TcpAck)
        ));
        assert!(matches(
            &translated(&a, &f, None),
            &expectations(&a, Mode::Nat, Traffic::TcpAck)
        ));
        assert!(super::super::nft::ruleset(&a, Mode::FullNat)
            .contains("snat to 198.18.201.1-198.18.201.16"));
        assert!(!super::super::nft::ruleset(&a, Mode::Nat).contains("snat"));
    }
}
