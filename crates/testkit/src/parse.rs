//! Reading the frames tests receive: the few fields a test compares, or None for any other
//! frame.

use std::net::Ipv4Addr;

use crate::frame::{ETH_P_ARP, ETH_P_IP};

/// Parses Ethernet + IPv4 + UDP: (source, source port, destination port, payload), or None.
pub fn parse_udp(frame: &[u8]) -> Option<(Ipv4Addr, u16, u16, Vec<u8>)> {
    if frame.len() < 14 + 20 + 8 || frame[12..14] != ETH_P_IP.to_be_bytes() || frame[23] != 17 {
        return None;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let src = Ipv4Addr::new(frame[26], frame[27], frame[28], frame[29]);
    let u = frame.get(14 + ihl..)?;
    let len = usize::from(u16::from_be_bytes([u[4], u[5]]));
    Some((
        src,
        u16::from_be_bytes([u[0], u[1]]),
        u16::from_be_bytes([u[2], u[3]]),
        u.get(8..len)?.to_vec(),
    ))
}

/// Parses an ARP request: (sender MAC, sender address, target address), or None.
pub fn parse_arp_request(frame: &[u8]) -> Option<([u8; 6], Ipv4Addr, Ipv4Addr)> {
    if frame.len() < 14 + 28 || frame[12..14] != ETH_P_ARP.to_be_bytes() || frame[20..22] != [0, 1]
    {
        return None;
    }
    let a = &frame[14..];
    let sha: [u8; 6] = a[8..14].try_into().ok()?;
    Some((
        sha,
        Ipv4Addr::new(a[14], a[15], a[16], a[17]),
        Ipv4Addr::new(a[24], a[25], a[26], a[27]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{arp_packet, ethernet, udp_frame};

    #[test]
    fn a_udp_frame_and_an_arp_request_read_back() {
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let f = udp_frame([2; 6], [4; 6], a, b, 7, 9, b"hi");
        assert_eq!(parse_udp(&f), Some((a, 7, 9, b"hi".to_vec())));
        assert!(crate::csum::udp_checksum_ok(&f));
        let r = ethernet(
            [0xff; 6],
            [4; 6],
            ETH_P_ARP,
            &arp_packet(1, [4; 6], a, [0; 6], b),
        );
        assert_eq!(parse_arp_request(&r), Some(([4; 6], a, b)));
        assert_eq!(parse_udp(&r), None);
    }
}
