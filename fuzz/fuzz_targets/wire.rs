//! Every parser in wirespeed-wire over arbitrary bytes: none may panic, and whatever parses
//! must emit again without error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirespeed_wire::*;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = EthernetFrame::new_checked(data) {
        let r = EthernetRepr::parse(&f);
        let mut out = [0u8; 18];
        r.emit(&mut out).unwrap();
        let _ = f.payload();
    }
    if let Ok(p) = ArpPacket::new_checked(data) {
        if let Ok(r) = ArpRepr::parse(&p) {
            r.emit(&mut [0u8; 28]).unwrap();
        }
    }
    if let Ok(p) = Ipv4Packet::new_checked(data) {
        let _ = (p.payload(), p.options_len(), p.frag_offset(), p.is_fragment());
        if let Ok(r) = Ipv4Repr::parse(&p) {
            r.emit(&mut [0u8; 20]).unwrap();
        }
    }
    if let Ok(p) = Ipv6Packet::new_checked(data) {
        let _ = (p.payload(), p.flow_label(), p.traffic_class());
        if let Ok(r) = Ipv6Repr::parse(&p) {
            r.emit(&mut [0u8; 40]).unwrap();
        }
        // The extension header walk: whatever it finds lies inside the payload.
        let payload = p.payload();
        if let ipv6_ext::ExtWalk::Upper { offset, .. } =
            ipv6_ext::walk_extension_headers(p.next_header(), payload, p.dst().is_multicast())
        {
            assert!(offset <= payload.len());
        }
    }
    let (s6, d6) = (Ipv6Addr([0xfd; 16]), Ipv6Addr::ALL_NODES);
    if let Ok(p) = icmpv6::Icmpv6Packet::new_checked(data) {
        // Checksums are not the point here: parse what verifies, and what does not.
        let _ = icmpv6::Icmpv6Repr::parse(&p, s6, d6);
        let mut fixed = data.to_vec();
        fixed[2] = 0;
        fixed[3] = 0;
        let c = checksum::transport(s6, d6, 58, &fixed);
        fixed[2..4].copy_from_slice(&c.to_be_bytes());
        if let Ok(fp) = icmpv6::Icmpv6Packet::new_checked(&fixed[..]) {
            if let Ok(r) = icmpv6::Icmpv6Repr::parse(&fp, s6, d6) {
                let mut out = vec![0u8; r.buffer_len()];
                r.emit(s6, d6, &mut out).unwrap();
            }
        }
    }
    if let Ok(p) = Icmpv4Packet::new_checked(data) {
        if let Ok(r) = Icmpv4Repr::parse(&p) {
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut out).unwrap();
        }
    }
    let a = Ipv4Addr::new(198, 18, 0, 1);
    let b = Ipv4Addr::new(198, 18, 0, 2);
    if let Ok(p) = UdpPacket::new_checked(data) {
        let _ = (p.payload(), UdpRepr::parse(&p, a, b));
    }
    if let Ok(p) = TcpPacket::new_checked(data) {
        let _ = (p.payload(), p.segment_len());
        // Parse options regardless of the checksum, then round-trip them.
        let o = TcpOptions::parse(p.options());
        let mut out = [0u8; 64];
        let n = o.emit(&mut out).unwrap();
        assert_eq!(n, o.len());
        let _ = TcpRepr::parse(&p, a, b);
    }
    let _ = checksum::checksum(data);
    let _ = toeplitz::hash(&toeplitz::MICROSOFT_KEY, data);
});
