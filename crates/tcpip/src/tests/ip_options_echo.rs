//! Answers carry the request's record-route and timestamp options, echoed as Linux echoes
//! them (docs/TCPIP.md, "IP options"), and ICMP timestamp requests are answered.

use super::input_rules::{answer, datagram, listening, Crafted};
use super::*;

/// The options area of the IPv4 datagram in frame `f`.
fn ip_options_of(f: &[u8]) -> Vec<u8> {
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    f[14 + 20..14 + ip.header_len()].to_vec()
}

/// Record route with room for three entries, pointer at the first.
const RR3: [u8; 15] = [7, 15, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// Record route whose second entry would run past its end: Linux answers nothing.
const RR_UNECHOABLE: [u8; 9] = [7, 9, 4, 0, 0, 0, 0, 0, 0];

fn icmp_message(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![ty, 0, 0, 0, 0x12, 0x34, 0, 1];
    m.extend_from_slice(body);
    let c = checksum::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// `datagram` with IP options: the frame rebuilt with `opts` (a multiple of 4) after the
/// fixed header.
fn with_options(frame: &[u8], opts: &[u8]) -> Vec<u8> {
    let mut f = frame[..34].to_vec();
    f.extend_from_slice(opts);
    f.extend_from_slice(&frame[34..]);
    let ip = &mut f[14..14 + 20 + opts.len()];
    ip[0] = 0x40 | ((20 + opts.len()) / 4) as u8;
    let total = (frame.len() - 14 + opts.len()) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f
}

#[test]
fn a_timestamp_request_gets_a_timestamp_reply() {
    let mut s = listening(false);
    let req = datagram(MAC_B, 1, &icmp_message(13, &[0, 0, 0, 42, 9, 9, 9, 9]));
    let out = answer(&mut s, &req);
    assert_eq!(out.len(), 1);
    let ip = Ipv4Packet::new_checked(&out[0][14..]).unwrap();
    let m = ip.payload();
    // Type 14, code 0, the identifier and sequence kept, 12 bytes of times whatever the
    // request's length; the originate time copied, receive and transmit the same.
    assert_eq!(m.len(), 20);
    assert_eq!((m[0], m[1], &m[4..8]), (14, 0, &[0x12, 0x34, 0, 1][..]));
    assert_eq!(&m[8..12], &[0, 0, 0, 42]);
    assert_eq!(m[12..16], m[16..20]);
    assert!(u32::from_be_bytes(m[12..16].try_into().unwrap()) < 86_400_000);
    assert_eq!(checksum::checksum(m), 0);
    assert_eq!(s.stats().icmp_timestamp_replies, 1);
    // Without its 4-byte originate time, a request is malformed.
    let short = datagram(MAC_B, 1, &icmp_message(13, &[0, 0, 0]));
    assert!(answer(&mut s, &short).is_empty());
    assert_eq!(s.stats().icmp_malformed, 1);
}

#[test]
fn an_echo_reply_carries_the_record_route_with_our_address_twice() {
    let mut s = listening(false);
    let mut opts = RR3.to_vec();
    opts.push(0);
    let req = with_options(&datagram(MAC_B, 1, &icmp_message(8, b"ping")), &opts);
    let out = answer(&mut s, &req);
    assert_eq!(out.len(), 1);
    let mut want = vec![7, 15, 12];
    want.extend_from_slice(&IP_B.0);
    want.extend_from_slice(&IP_B.0);
    want.extend_from_slice(&[0, 0, 0, 0, 0]);
    assert_eq!(ip_options_of(&out[0]), want);
    let ip = Ipv4Packet::new_checked(&out[0][14..]).unwrap();
    assert_eq!(ip.payload()[0], 0, "an echo reply");
    assert_eq!(checksum::checksum(&out[0][14..14 + 36]), 0);
}

#[test]
fn a_connection_carries_its_syns_options_on_every_segment() {
    let mut c = config(1);
    c.gateway = Some(IP_A);
    let mut s = Stack::new(c);
    let l = s.tcp_listen(80, 8).unwrap();
    let syn = Crafted {
        ip_options: &RR3,
        tcp_options: &[2, 4, 0x05, 0xb4],
        ..Default::default()
    };
    let out = answer(&mut s, &syn.frame());
    assert_eq!(tcp_flags_of(&out[0]), flags::SYN | flags::ACK);
    let echoed = ip_options_of(&out[0]);
    assert_eq!((echoed.len(), &echoed[..3]), (16, &[7, 15, 12][..]));
    // The MSS we offer is the link's; the one we send with leaves room for the options.
    let (synack, _) = parse_out(&out[0]);
    assert_eq!(synack.options.mss, Some(1460));
    let iss = synack.seq.0;
    let now = Instant::from_millis(1000);
    s.receive(now, &segment(1000, 80, 501, Some(iss + 1), flags::ACK, &[]));
    let c = s.tcp_accept(l).unwrap();
    s.tcp_send(c, &[7u8; 3000]).unwrap();
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    assert!(!sink.frames.is_empty());
    for f in &sink.frames {
        assert_eq!(ip_options_of(f), echoed);
        assert!(
            parse_out(f).1.len() <= 1460 - 16,
            "{}",
            parse_out(f).1.len()
        );
        assert!(f.len() <= 14 + 1500);
    }
}

#[test]
fn options_that_cannot_be_echoed_silence_an_rst_but_not_a_syn_ack() {
    let mut s = listening(false);
    let to_closed = Crafted {
        ip_options: &RR_UNECHOABLE,
        dport: 81,
        ..Default::default()
    };
    assert!(answer(&mut s, &to_closed.frame()).is_empty());
    assert_eq!(s.stats().ip_options_unechoable, 1);
    let syn = Crafted {
        ip_options: &RR_UNECHOABLE,
        ..Default::default()
    };
    let out = answer(&mut s, &syn.frame());
    assert_eq!(tcp_flags_of(&out[0]), flags::SYN | flags::ACK);
    assert!(ip_options_of(&out[0]).is_empty());
}

fn tcp_flags_of(f: &[u8]) -> u8 {
    parse_out(f).0.flags
}
