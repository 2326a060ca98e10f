//! The reassembly queues' unit tests (a child module of `frag_queues`, kept with the
//! crate's other tests): through IPv4's family, then what IPv6's does differently.

use super::*;
use crate::ipv6_frag::{V6Key, V6};
use crate::reassembly::{Reassembly, V4};
use crate::Config;
use wirespeed_wire::{checksum, IpProtocol, Ipv4Addr, Ipv4Packet, Ipv4Repr, Ipv6Addr};

const QUEUE_COST: usize = Queues::<V4>::QUEUE_COST;

const SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const FROM: (MacAddr, bool) = (MacAddr([2, 0, 0, 0, 0, 1]), true);
const T0: Instant = Instant::from_millis(1000);

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

/// A fragment of datagram `ident` from `src`: `bytes` at offset `off`.
fn frag_from(src: Ipv4Addr, ident: u16, off: usize, more: bool, bytes: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 20 + bytes.len()];
    let ip = Ipv4Repr {
        src,
        dst: DST,
        protocol: IpProtocol::Udp,
        payload_len: bytes.len(),
        ttl: 64,
        ident,
        dont_frag: false,
        dscp_ecn: 0,
    };
    ip.emit(&mut b).unwrap();
    let word = (off / 8) as u16 | if more { 0x2000 } else { 0 };
    b[6..8].copy_from_slice(&word.to_be_bytes());
    b[20..].copy_from_slice(bytes);
    refill(&mut b);
    b
}

fn frag(ident: u16, off: usize, more: bool, bytes: &[u8]) -> Vec<u8> {
    frag_from(SRC, ident, off, more, bytes)
}

fn refill(b: &mut [u8]) {
    b[10..12].fill(0);
    let c = checksum::checksum(&b[..20]);
    b[10..12].copy_from_slice(&c.to_be_bytes());
}

struct Harness {
    r: Queues<V4>,
    stats: Stats,
}

impl Harness {
    fn new() -> Harness {
        Harness::with(|_| {})
    }

    fn with(tweak: impl FnOnce(&mut Config)) -> Harness {
        let mut cfg = Config::new(MacAddr([2, 0, 0, 0, 0, 2]), DST, 24);
        tweak(&mut cfg);
        Harness {
            r: Reassembly::new(&cfg).v4,
            stats: Stats::default(),
        }
    }

    /// Feeds a fragment; the datagram it completed, if any.
    fn put(&mut self, f: &[u8]) -> Option<Vec<u8>> {
        self.put_from(f, FROM)
    }

    fn put_from(&mut self, f: &[u8], from: (MacAddr, bool)) -> Option<Vec<u8>> {
        let p = Ipv4Packet::new_checked(f).unwrap();
        let d = self.r.input(T0, &V4::fragment(&p), from, &mut self.stats)?;
        let v = d.bytes().to_vec();
        self.r.recycle(d);
        Some(v)
    }

    /// Nothing held, nothing charged.
    fn assert_empty(&self) {
        assert!(self.r.index.is_empty() && self.r.peers.is_empty());
        assert_eq!((self.r.mem, self.r.head, self.r.tail), (0, NIL, NIL));
    }
}

/// The datagram is whole, unfragmented, checksummed, and carries `payload`.
fn assert_datagram(d: &[u8], ident: u16, payload: &[u8]) {
    let p = Ipv4Packet::new_checked(d).unwrap();
    let ip = Ipv4Repr::parse(&p).expect("a whole datagram with a good checksum");
    assert_eq!((ip.src, ip.dst, ip.ident), (SRC, DST, ident));
    assert_eq!(p.payload(), payload);
    assert_eq!(d.len(), 20 + payload.len());
}

#[test]
fn in_order_and_reversed_give_the_same_datagram() {
    let mut h = Harness::new();
    let d = data(40);
    let f = |id| {
        [
            frag(id, 0, true, &d[..16]),
            frag(id, 16, true, &d[16..32]),
            frag(id, 32, false, &d[32..]),
        ]
    };
    let [a, b, c] = f(1);
    assert!(h.put(&a).is_none() && h.put(&b).is_none());
    assert_datagram(&h.put(&c).unwrap(), 1, &d);
    let [a, b, c] = f(2);
    assert!(h.put(&c).is_none() && h.put(&b).is_none());
    assert_datagram(&h.put(&a).unwrap(), 2, &d);
    assert_eq!(h.stats.ip_frag_reassembled, 2);
    h.assert_empty();
}

#[test]
fn a_duplicate_is_dropped_and_its_queue_kept() {
    let mut h = Harness::new();
    let d = data(24);
    let first = frag(1, 0, true, &d[..16]);
    let last = frag(1, 16, false, &d[16..]);
    assert!(h.put(&first).is_none() && h.put(&first).is_none());
    assert_eq!(h.stats.ip_frag_duplicate, 1);
    assert_datagram(&h.put(&last).unwrap(), 1, &d);
    h.assert_empty();
}

#[test]
fn a_fragment_over_two_is_a_duplicate_only_where_they_came_in_order() {
    // In order, [0,8) and [8,16) form one run, and [0,16) lies inside it.
    let mut h = Harness::new();
    let d = data(24);
    h.put(&frag(1, 0, true, &d[..8]));
    h.put(&frag(1, 8, true, &d[8..16]));
    h.put(&frag(1, 0, true, &d[..16]));
    assert_eq!(h.stats.ip_frag_duplicate, 1);
    assert_datagram(&h.put(&frag(1, 16, false, &d[16..])).unwrap(), 1, &d);
    // Out of order they are two runs, and [0,16) overlaps both: the queue goes.
    h.put(&frag(2, 8, true, &d[8..16]));
    h.put(&frag(2, 0, true, &d[..8]));
    h.put(&frag(2, 0, true, &d[..16]));
    assert_eq!(h.stats.ip_frag_overlap_dropped, 1);
    h.assert_empty();
}

#[test]
fn an_overlap_drops_the_whole_queue() {
    let mut h = Harness::new();
    let d = data(32);
    // Past the highest fragment but starting inside it (Linux's tail check).
    h.put(&frag(1, 0, true, &d[..16]));
    h.put(&frag(1, 8, true, &d[8..24]));
    assert_eq!(h.stats.ip_frag_overlap_dropped, 1);
    h.assert_empty();
    // Inside what is held, across a hole's edge (Linux's tree search).
    h.put(&frag(2, 16, false, &d[16..]));
    h.put(&frag(2, 8, true, &d[8..24]));
    assert_eq!(h.stats.ip_frag_overlap_dropped, 2);
    h.assert_empty();
    // The rest of datagram 1 now starts a queue of its own, which never completes.
    assert!(h.put(&frag(1, 16, false, &d[16..])).is_none());
}

#[test]
fn a_tiny_first_fragment_is_taken() {
    let mut h = Harness::new();
    let d = data(60);
    assert!(h.put(&frag(1, 0, true, &d[..8])).is_none());
    assert_datagram(&h.put(&frag(1, 8, false, &d[8..])).unwrap(), 1, &d);
}

#[test]
fn lengths_are_judged_as_linux_judges_them() {
    let mut h = Harness::new();
    let d = data(40);
    // A fragment with MF is cut to a multiple of 8; the cut bytes are not data.
    h.put(&frag(1, 0, true, &d[..13]));
    let whole = h.put(&frag(1, 8, false, &d[8..20])).unwrap();
    assert_datagram(&whole, 1, &d[..20]);
    // Cut to nothing: the queue goes.
    h.put(&frag(2, 0, true, &d[..5]));
    assert_eq!(h.stats.ip_frag_malformed, 1);
    // A second last fragment with another end.
    h.put(&frag(3, 16, false, &d[16..24]));
    h.put(&frag(3, 16, false, &d[16..32]));
    // Data past the last fragment.
    h.put(&frag(4, 16, false, &d[16..24]));
    h.put(&frag(4, 24, true, &d[24..32]));
    // A last fragment ending before data already held.
    h.put(&frag(5, 0, true, &d[..32]));
    h.put(&frag(5, 16, false, &d[16..24]));
    // An empty last fragment.
    h.put(&frag(6, 16, false, &[]));
    assert_eq!(h.stats.ip_frag_malformed, 5);
    h.assert_empty();
}

#[test]
fn a_datagram_over_65535_bytes_is_dropped_when_whole() {
    let mut h = Harness::new();
    let d = data(65544);
    h.put(&frag(1, 0, true, &d[..32768]));
    h.put(&frag(1, 32768, true, &d[32768..65528]));
    assert!(h.put(&frag(1, 65528, false, &d[65528..])).is_none());
    assert_eq!(h.stats.ip_frag_malformed, 1);
    h.assert_empty();
}

#[test]
fn not_ect_mixed_with_ect_is_dropped_and_ce_is_kept() {
    let mut h = Harness::new();
    let d = data(16);
    let tos = |mut f: Vec<u8>, t: u8| {
        f[1] = t;
        refill(&mut f);
        f
    };
    h.put(&tos(frag(1, 0, true, &d[..8]), 2)); // ECT(0)
    h.put(&frag(1, 8, false, &d[8..])); // not-ECT
    assert_eq!(h.stats.ip_frag_malformed, 1);
    h.put(&tos(frag(2, 0, true, &d[..8]), 2));
    let whole = h.put(&tos(frag(2, 8, false, &d[8..]), 3)).unwrap(); // CE
    assert_datagram(&whole, 2, &d);
    assert_eq!(whole[1] & 3, 3);
}

#[test]
fn a_timeout_answers_only_when_the_first_fragment_came() {
    let mut h = Harness::new();
    let d = data(24);
    let first = frag(1, 0, true, &d[..8]);
    h.put(&first);
    h.put(&frag(2, 16, false, &d[16..]));
    h.put_from(&frag(3, 0, true, &d[..8]), (FROM.0, false));
    let due = T0.add(Duration::from_secs(30));
    assert_eq!(h.r.next_deadline(), Some(due));
    let before = T0.add(Duration::from_millis(29_999));
    assert!(h.r.expire(before, &mut h.stats).is_none());
    let Some(Timeout::Answer(q)) = h.r.expire(due, &mut h.stats) else {
        panic!("the first fragment came: answer")
    };
    assert_eq!(
        (q.bytes(), q.src_mac, q.to_host),
        (&first[..], FROM.0, true)
    );
    h.r.recycle(q);
    // No first fragment, or one sent to a group address: no answer.
    assert!(matches!(
        h.r.expire(due, &mut h.stats),
        Some(Timeout::Quiet)
    ));
    assert!(matches!(
        h.r.expire(due, &mut h.stats),
        Some(Timeout::Quiet)
    ));
    assert!(h.r.expire(due, &mut h.stats).is_none());
    assert_eq!(h.stats.ip_frag_timeout, 3);
    h.assert_empty();
}

#[test]
fn over_the_memory_bound_every_fragment_is_refused_until_queues_time_out() {
    let mut h = Harness::with(|c| c.ipfrag_high_thresh = 8 * QUEUE_COST);
    let d = data(16);
    let mut id = 0;
    while h.stats.ip_frag_mem_exceeded == 0 {
        id += 1;
        h.put(&frag(id, 0, true, &d[..8]));
    }
    assert!(h.r.mem > 8 * QUEUE_COST && (2..=8).contains(&id));
    // Even the fragment that would complete a queue.
    assert!(h.put(&frag(1, 8, false, &d[8..])).is_none());
    assert_eq!(h.stats.ip_frag_mem_exceeded, 2);
    while h
        .r
        .expire(T0.add(Duration::from_secs(30)), &mut h.stats)
        .is_some()
    {}
    h.assert_empty();
    h.put(&frag(1, 0, true, &d[..8]));
    assert_datagram(&h.put(&frag(1, 8, false, &d[8..])).unwrap(), 1, &d);
}

/// Queue 1 takes its first half, then `others` fragments from the same source (and as
/// many from another) go to other queues before its second half comes.
fn distance(others: u16) -> (Harness, Option<Vec<u8>>) {
    let mut h = Harness::new();
    let d = data(16);
    h.put(&frag(1, 0, true, &d[..8]));
    for id in 0..others {
        h.put(&frag(100 + id, 0, true, &d[..8]));
        h.put(&frag_from(
            Ipv4Addr::new(198, 18, 0, 9),
            id,
            0,
            true,
            &d[..8],
        ));
    }
    let got = h.put(&frag(1, 8, false, &d[8..]));
    (h, got)
}

#[test]
fn a_queue_its_source_left_behind_restarts_empty() {
    let (h, got) = distance(63);
    assert!(got.is_some() && h.stats.ip_frag_too_far == 0);
    let (mut h, got) = distance(64);
    assert!(got.is_none() && h.stats.ip_frag_too_far == 1);
    // Restarted with the fragment that found it behind, and a fresh deadline.
    let d = data(16);
    assert_datagram(&h.put(&frag(1, 0, true, &d[..8])).unwrap(), 1, &d);
    assert_eq!(h.stats.ip_frag_reassembled, 1);
}

#[test]
fn reassembly_off_drops_every_fragment() {
    let mut h = Harness::with(|c| c.ipfrag_high_thresh = 0);
    h.put(&frag(1, 0, true, &data(8)));
    assert_eq!(h.stats.ip_fragments_dropped, 1);
    h.assert_empty();
}

const SRC6: Ipv6Addr = Ipv6Addr([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
const DST6: Ipv6Addr = Ipv6Addr([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
/// Where the fragment header is in [`frag6`]'s fragments: behind a hop-by-hop header,
/// whose next header field (byte 40) names it.
const FRAG_AT: usize = 48;

/// An IPv6 fragment of datagram 7 (traffic class `tc`): a hop-by-hop header (PadN), the
/// fragment header (next header UDP), then `bytes` at offset `off`.
fn frag6(off: usize, more: bool, tc: u8, bytes: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    (b[0], b[1]) = (0x60 | tc >> 4, tc << 4);
    (b[6], b[7]) = (0, 64);
    b[8..24].copy_from_slice(&SRC6.0);
    b[24..40].copy_from_slice(&DST6.0);
    b.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
    let word = off as u16 | more as u16;
    b.extend_from_slice(&[17, 0]);
    b.extend_from_slice(&word.to_be_bytes());
    b.extend_from_slice(&7u32.to_be_bytes());
    b.extend_from_slice(bytes);
    let plen = (b.len() - 40) as u16;
    b[4..6].copy_from_slice(&plen.to_be_bytes());
    b
}

/// The queues' view of a [`frag6`] fragment, as `Stack::ipv6_fragment` makes it.
fn view6(b: &[u8]) -> Fragment<'_, V6Key> {
    let word = u16::from_be_bytes([b[FRAG_AT + 2], b[FRAG_AT + 3]]);
    Fragment {
        key: V6Key {
            src: SRC6,
            dst: DST6,
            ident: 7,
        },
        head: &b[..FRAG_AT + 8],
        data: &b[FRAG_AT + 8..],
        offset: (word & !7) as u32,
        more: word & 1 != 0,
        ecn: (b[1] >> 4) & 3,
        next_header_at: 40,
    }
}

struct Harness6 {
    r: Queues<V6>,
    stats: Stats,
}

impl Harness6 {
    fn new() -> Harness6 {
        let cfg = Config::new(MacAddr([2, 0, 0, 0, 0, 2]), DST, 24);
        Harness6 {
            r: Reassembly::new(&cfg).v6,
            stats: Stats::default(),
        }
    }

    fn put(&mut self, f: &[u8]) -> Option<(Vec<u8>, usize, usize)> {
        let d = self.r.input(T0, &view6(f), FROM, &mut self.stats)?;
        let v = (d.bytes().to_vec(), d.head_len, d.next_header_at);
        self.r.recycle(d);
        Some(v)
    }
}

#[test]
fn an_ipv6_datagram_is_the_unfragmentable_part_and_the_data() {
    let mut h = Harness6::new();
    let d = data(40);
    // ECT(0), then CE last fragment first.
    let first = frag6(0, true, 0x02, &d[..16]);
    assert!(h.put(&frag6(16, false, 0x03, &d[16..])).is_none());
    let (whole, head_len, nh_at) = h.put(&first).unwrap();
    // The fixed header and the hop-by-hop header; its next header field names UDP now, the
    // fragment header is gone, and the payload length covers 8 + 40 bytes.
    assert_eq!((head_len, nh_at), (48, 40));
    assert_eq!(&whole[8..40], &first[8..40]);
    assert_eq!(&whole[40..48], &[17, 0, 1, 4, 0, 0, 0, 0]);
    assert_eq!(&whole[4..6], &48u16.to_be_bytes());
    assert_eq!(&whole[48..], &d[..]);
    // CE in the traffic class (its low two bits are byte 1's bits 4 and 5).
    assert_eq!((whole[0], whole[1] >> 4), (0x60, 0x03));
    assert_eq!(h.stats.ip6_frag_reassembled, 1);
    assert_eq!(h.stats.ip_frag_reassembled, 0);
}

#[test]
fn an_ipv6_queue_lasts_60_seconds_and_is_keyed_by_the_destination_too() {
    let mut h = Harness6::new();
    let d = data(16);
    h.put(&frag6(0, true, 0, &d[..8]));
    // Another destination: another queue, though source and ident are the same.
    let mut other = frag6(8, false, 0, &d[8..]);
    other[39] = 9;
    let mut v = view6(&other);
    v.key.dst.0[15] = 9;
    assert!(h.r.input(T0, &v, FROM, &mut h.stats).is_none());
    assert_eq!(h.r.index.len(), 2);
    assert_eq!(h.r.next_deadline(), Some(T0.add(Duration::from_secs(60))));
}

#[test]
fn an_ipv6_payload_over_65535_bytes_is_dropped_when_whole() {
    // 65535 bytes of data fit a fragment offset, but not behind 8 bytes of hop-by-hop.
    let mut h = Harness6::new();
    let d = data(65535);
    h.put(&frag6(0, true, 0, &d[..32768]));
    h.put(&frag6(32768, true, 0, &d[32768..65528]));
    assert!(h.put(&frag6(65528, false, 0, &d[65528..])).is_none());
    assert_eq!(h.stats.ip6_frag_malformed, 1);
    assert_eq!(h.stats.ip_frag_malformed, 0);
    // Not-ECT mixed with ECT(1): dropped too.
    h.put(&frag6(0, true, 0x01, &d[..8]));
    assert!(h.put(&frag6(8, false, 0, &d[8..16])).is_none());
    assert_eq!(h.stats.ip6_frag_malformed, 2);
}
