//! Reassembly must not allocate in steady state: once warm, UDP datagrams that each come in
//! three fragments, in order or reversed, are reassembled and read with no allocation. (The count is
//! this thread's, so the harness's own threads are not counted.)

use wirespeed_sys::alloc::CountingAlloc;
use wirespeed_tcpip::{Config, Instant, Ipv4Addr, MacAddr, Stack};
use wirespeed_testkit::frame::{eth, ip_packet_with, l4_bytes, make_ipv4_fragment, IpHeader, L4};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PAYLOAD: usize = 3000;

/// One fragment of datagram `ident` in an Ethernet frame: `bytes` at offset `off`.
fn fragment(ident: u16, off: usize, bytes: &[u8], more: bool) -> Vec<u8> {
    let h = IpHeader {
        ident,
        dont_frag: false,
        ..IpHeader::default()
    };
    let l4 = L4::Raw {
        proto: 17,
        payload: bytes.to_vec(),
    };
    let p = ip_packet_with(SRC.0.into(), DST.0.into(), &l4, &h);
    let mut f = eth(MAC_B.0, MAC_A.0, false, &p);
    make_ipv4_fragment(&mut f, (off / 8) as u16, more);
    f
}

/// A UDP datagram from SRC:5000 to DST:53 with `PAYLOAD` bytes, in three fragments.
fn datagram(ident: u16) -> [Vec<u8>; 3] {
    let payload = (0..PAYLOAD).map(|i| (i as u16 ^ ident) as u8).collect();
    let l4 = L4::Udp {
        sport: 5000,
        dport: 53,
        payload,
    };
    let (_, udp) = l4_bytes(SRC.0.into(), DST.0.into(), &l4);
    let n = udp.len();
    [(0, 1480), (1480, 2960), (2960, n)].map(|(a, b)| fragment(ident, a, &udp[a..b], b < n))
}

#[test]
fn no_allocation_per_fragmented_datagram_in_steady_state() {
    let mut s = Stack::new(Config::new(MAC_B, DST, 24));
    let sock = s.udp_bind(53).unwrap();
    let datagrams: Vec<[Vec<u8>; 3]> = (0..64).map(datagram).collect();
    let mut buf = vec![0u8; 4096];
    let mut now = Instant::from_millis(1);
    let mut round = |s: &mut Stack, i: usize| {
        now = now.add_micros(100);
        let d = &datagrams[i % datagrams.len()];
        for k in 0..3 {
            // Every other datagram comes last fragment first.
            let f = if i.is_multiple_of(2) {
                &d[k]
            } else {
                &d[2 - k]
            };
            s.receive(now, f);
        }
        let (n, ip, port) = s.udp_recv_from(sock, &mut buf).expect("reassembled");
        assert_eq!((n, ip, port), (PAYLOAD, SRC.into(), 5000));
        while s.pop_event().is_some() {}
    };
    for i in 0..100 {
        round(&mut s, i);
    }
    let before = ALLOC.allocations_on_this_thread();
    assert!(before > 0, "the counting allocator is in use");
    for i in 100..1100 {
        round(&mut s, i);
    }
    let allocs = ALLOC.allocations_on_this_thread() - before;
    assert_eq!(s.stats().ip_frag_reassembled, 1100);
    assert_eq!(
        allocs, 0,
        "{allocs} allocations for 1000 fragmented datagrams"
    );
}
