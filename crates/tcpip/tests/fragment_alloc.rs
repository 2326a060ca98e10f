//! Reassembly must not allocate in steady state: once warm, UDP datagrams that each come in
//! three fragments, in order or reversed, are reassembled and read with no allocation. (The count is
//! this thread's, so the harness's own threads are not counted.)

use wirespeed_sys::alloc::CountingAlloc;
use wirespeed_tcpip::wire::{checksum, EtherType, EthernetRepr, IpProtocol, Ipv4Repr};
use wirespeed_tcpip::{Config, Instant, Ipv4Addr, MacAddr, Stack};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PAYLOAD: usize = 3000;

/// One fragment of datagram `ident` in an Ethernet frame: `bytes` at offset `off`.
fn fragment(ident: u16, off: usize, bytes: &[u8], more: bool) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + bytes.len()];
    EthernetRepr {
        dst: MAC_B,
        src: MAC_A,
        vlan_id: None,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut f)
    .unwrap();
    Ipv4Repr {
        src: SRC,
        dst: DST,
        protocol: IpProtocol::Udp,
        payload_len: bytes.len(),
        ttl: 64,
        ident,
        dont_frag: false,
        dscp_ecn: 0,
    }
    .emit(&mut f[14..])
    .unwrap();
    let word = (off / 8) as u16 | if more { 0x2000 } else { 0 };
    f[20..22].copy_from_slice(&word.to_be_bytes());
    f[24..26].fill(0);
    let c = checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f[34..].copy_from_slice(bytes);
    f
}

/// A UDP datagram from SRC:5000 to DST:53 with `PAYLOAD` bytes, in three fragments.
fn datagram(ident: u16) -> [Vec<u8>; 3] {
    let mut udp = vec![0u8; 8 + PAYLOAD];
    udp[0..2].copy_from_slice(&5000u16.to_be_bytes());
    udp[2..4].copy_from_slice(&53u16.to_be_bytes());
    let len = udp.len() as u16;
    udp[4..6].copy_from_slice(&len.to_be_bytes());
    for (i, b) in udp[8..].iter_mut().enumerate() {
        *b = (i as u16 ^ ident) as u8;
    }
    let c = checksum::transport(SRC, DST, 17, &udp);
    udp[6..8].copy_from_slice(&if c == 0 { 0xffff } else { c }.to_be_bytes());
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
