//! The differential harness: the same generated frames through a lab twice, once through the
//! kernel alone and once with the fast path, and a comparison of what arrived where.
//! Generation and comparison are pure; `PacketSocket` is the AF_PACKET edge.

use std::collections::BTreeMap;
use std::io;

use wirespeed_testkit::frame::{self as pkt, L4};

/// Addresses the generator aims at, by what the DUT should do with them.
#[derive(Debug, Clone)]
pub struct Targets {
    pub dut_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub src4: [u8; 4],
    pub src6: [u8; 16],
    /// routed through the DUT
    pub routed4: Vec<[u8; 4]>,
    pub routed6: Vec<[u8; 16]>,
    /// no route in the DUT
    pub unknown4: Vec<[u8; 4]>,
    /// source of the IPv4 frames to unknown destinations: the kernel's "unreachable" token
    /// bucket is per source and shared with every ICMP error to that address, so mixing them
    /// with time-exceeded errors would make the count depend on timing.
    pub unknown_src4: [u8; 4],
    pub unknown6: Vec<[u8; 16]>,
    /// the DUT's own addresses, broadcasts, multicast
    pub special4: Vec<[u8; 4]>,
    pub special6: Vec<[u8; 16]>,
}

/// A small deterministic generator (xorshift64*), so a run can be repeated from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// `n` frames of many shapes: both families; UDP/TCP/ICMP; sizes from minimum to past the
/// egress MTU; TTL/hop-limit edges; IPv4 options and IPv6 hop-by-hop; fragments, DF, bad
/// checksums, padding; routed, unknown and special destinations; ports a filter may match.
pub fn generate(t: &Targets, seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    const TTLS: [u8; 7] = [0, 1, 2, 3, 64, 64, 255];
    const PORTS: [u16; 8] = [22, 53, 80, 443, 4000, 5000, 8080, 9];
    for _ in 0..n {
        // up to 1423 bytes of payload: every frame fits a 1500-byte MTU at the source
        let sizes = [0usize, 6, 18, 100, 512, 1300, 1380, 1420];
        let payload_len = *r.pick(&sizes) + r.below(4) as usize;
        let payload: Vec<u8> = (0..payload_len).map(|i| (i as u8) ^ (r.0 as u8)).collect();
        let sport = 1024 + r.below(60000) as u16;
        let dport = *r.pick(&PORTS);
        let l4 = match r.below(3) {
            0 => L4::Udp {
                sport,
                dport,
                payload,
            },
            1 => pkt::tcp_syn(sport, dport, payload),
            _ => L4::Echo { payload },
        };
        let ttl = *r.pick(&TTLS);
        let class = r.below(10);
        if r.below(2) == 0 {
            let (src, dst) = match class {
                0..=5 => (t.src4, *r.pick(&t.routed4)),
                6 | 7 => (t.unknown_src4, *r.pick(&t.unknown4)),
                _ => (t.src4, *r.pick(&t.special4)),
            };
            let options: &[u8] = if r.below(12) == 0 { &[1, 1, 1, 0] } else { &[] };
            let mut f = pkt::ipv4(t.dut_mac, t.src_mac, src, dst, ttl, options, &l4);
            match r.below(16) {
                0 => f[24] ^= 0x5a,                      // bad header checksum
                1 => f.extend_from_slice(&[0, 0, 0, 0]), // link-layer padding
                2 => {
                    // first fragment (MF): flags byte, checksum fixed up
                    f[20] |= 0x20;
                    pkt::fix_ipv4_csum(&mut f);
                }
                3 => {
                    // DF off: too big for the egress MTU means the kernel fragments
                    f[20] &= !0x40;
                    pkt::fix_ipv4_csum(&mut f);
                }
                // A middle and a last fragment (the bytes behind the IP header are payload)
                4 => pkt::make_ipv4_fragment(&mut f, 185, true),
                5 => pkt::make_ipv4_fragment(&mut f, 185, false),
                _ => {}
            }
            out.push(f);
        } else {
            let dst = match class {
                0..=5 => *r.pick(&t.routed6),
                6 | 7 => *r.pick(&t.unknown6),
                _ => *r.pick(&t.special6),
            };
            let hbh = r.below(12) == 0;
            let mut f = pkt::ipv6(t.dut_mac, t.src_mac, t.src6, dst, ttl, hbh, &l4);
            // A quarter of the rest behind a fragment header: first, middle or last (from
            // draws already made, so a seed draws what it drew before).
            if !hbh && payload_len % 4 == 3 {
                let (offset, more) = [(0, true), (185, true), (185, false)][sport as usize % 3];
                pkt::make_ipv6_fragment(&mut f, offset, more);
            }
            out.push(f);
        }
    }
    out
}

/// What a capture point saw, normalized so that two runs compare byte for byte: frames the
/// kernel originates carry an IPv4 ID from a randomized generator, which is masked (with the
/// header checksum that covers it). Neighbour discovery, MLD and router solicitations are
/// link housekeeping, not traffic under test: dropped, as are IGMP reports. Non-IP frames (ARP) likewise, and
/// the kernel's timer-limited IPv4 net/host unreachable errors (see below).
pub fn normalize(frame: &[u8], originated_by: &[[u8; 4]]) -> Option<Vec<u8>> {
    if frame.len() < 14 {
        return None;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let mut f = frame.to_vec();
    match ethertype {
        pkt::ETH_P_IP if f.len() >= 34 => {
            let src: [u8; 4] = f[26..30].try_into().ok()?;
            // IGMP membership reports: the kernel's own timers, like MLD below.
            if f[23] == 2 && originated_by.contains(&src) {
                return None;
            }
            if originated_by.contains(&src) {
                // Net/host unreachable from the routing code passes a per-source token
                // bucket that every ICMP error to that source drains too (ip_error): which
                // of them are sent depends on timing, not on the data path. Left out.
                let ihl = ((f[14] & 0x0f) as usize) * 4;
                if f[23] == 1
                    && f.get(14 + ihl) == Some(&3)
                    && matches!(f.get(15 + ihl), Some(0) | Some(1))
                {
                    return None;
                }
                f[18] = 0;
                f[19] = 0;
                f[24] = 0;
                f[25] = 0;
            }
            Some(f)
        }
        pkt::ETH_P_IPV6 if f.len() >= 54 => {
            // ICMPv6 right after the header, or after a hop-by-hop header (MLD reports)
            let icmp_type = match f[20] {
                58 => f.get(54).copied(),
                0 if f.get(54) == Some(&58) => f.get(54 + 8 * (f[55] as usize + 1)).copied(),
                _ => None,
            };
            if icmp_type.is_some_and(|ty| ty >= 130) {
                return None;
            }
            Some(f)
        }
        // Tagged: the kernel originates none, so nothing to mask.
        0x8100 | 0x88a8 => Some(f),
        _ => None,
    }
}

/// Frames per capture point, as a multiset.
pub type Capture = BTreeMap<(String, Vec<u8>), usize>;

/// Frames in one capture and not the other (both directions), with their point.
pub fn divergences(a: &Capture, b: &Capture) -> Vec<(String, Vec<u8>, usize, usize)> {
    let mut out = Vec::new();
    for (k, n) in a {
        let m = b.get(k).copied().unwrap_or(0);
        if *n != m {
            out.push((k.0.clone(), k.1.clone(), *n, m));
        }
    }
    for (k, m) in b {
        if !a.contains_key(k) {
            out.push((k.0.clone(), k.1.clone(), 0, *m));
        }
    }
    out
}

/// A raw AF_PACKET socket bound to one interface of the calling thread's namespace: the
/// differential tests' way to inject frames and collect what comes out.
pub struct PacketSocket {
    sock: wirespeed_sys::packet::PacketSocket,
}

impl PacketSocket {
    pub fn open(ifname: &str) -> io::Result<PacketSocket> {
        let sock = wirespeed_sys::packet::PacketSocket::bind(ifname)?;
        // Whole batches are injected before any is drained; failure only means smaller
        // buffers.
        let _ = sock.force_buffer_sizes(32 << 20);
        Ok(PacketSocket { sock })
    }

    /// Sends one frame, waiting while the device queue is full (ENOBUFS).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            match self.sock.send(frame) {
                Ok(_) => return Ok(()),
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOBUFS)
                        || e.kind() == io::ErrorKind::WouldBlock =>
                {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Every frame received (not sent) so far, without blocking. A VLAN tag the kernel
    /// moved into metadata (PACKET_AUXDATA) is put back after the MAC addresses, so a tag
    /// pushed, popped or kept shows in the bytes compared.
    pub fn drain(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        while let Ok(Some(r)) = self.sock.recv(&mut buf, std::time::Duration::ZERO) {
            if r.kind.is_outgoing() {
                continue;
            }
            let mut frame = buf[..r.len].to_vec();
            if let Some(tag) = r.vlan {
                if frame.len() >= 12 {
                    let mut bytes = tag.tpid.to_be_bytes().to_vec();
                    bytes.extend_from_slice(&tag.tci.to_be_bytes());
                    frame.splice(12..12, bytes);
                }
            }
            out.push(frame);
        }
        out
    }
}

/// What the L2 generator aims at, for a bridge between `src` and `sink`.
#[derive(Debug, Clone)]
pub struct L2Targets {
    /// MACs the bridge knows on the source's port and on the sink's (static entries).
    pub src_macs: Vec<[u8; 6]>,
    pub sink_macs: Vec<[u8; 6]>,
    /// The bridge's own MAC: local delivery.
    pub bridge_mac: [u8; 6],
    /// IP frames inside: the generator of `generate` with these targets.
    pub ip: Targets,
}

/// `n` frames for a bridge: known, unknown, group, local and same-port destinations; known
/// and unknown sources; untagged, 802.1Q (VID 0, 1, 10, 4095), 802.1ad and QinQ tags; the
/// IP payloads of `generate`.
pub fn generate_l2(t: &L2Targets, seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut r = Rng::new(seed ^ 0xb41d_6e00);
    let inner = generate(&t.ip, seed, n);
    let unknown = [0x02, 0x55, 0x00, 0x00, 0x00, 0x01];
    inner
        .into_iter()
        .map(|mut f| {
            let dst = match r.below(16) {
                0..=8 => *r.pick(&t.sink_macs),
                9 => unknown,
                10 => [0xff; 6],
                11 => [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03],
                12 => t.bridge_mac,
                13 => *r.pick(&t.src_macs),
                14 => [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e], // link-local group: never forwarded
                _ => *r.pick(&t.sink_macs),
            };
            let src = match r.below(12) {
                0 => unknown,
                1 => *r.pick(&t.sink_macs), // a "moved" station
                _ => *r.pick(&t.src_macs),
            };
            f[..6].copy_from_slice(&dst);
            f[6..12].copy_from_slice(&src);
            let tag: Option<Vec<u8>> = match r.below(10) {
                0 => Some(vec![0x81, 0x00, 0x00, 0x0a]),
                1 => Some(vec![0x81, 0x00, 0xa0, 0x0a]), // priority 5
                2 => Some(vec![0x81, 0x00, 0x00, 0x00]), // priority tag only
                3 => Some(vec![0x81, 0x00, 0x0f, 0xff]),
                4 => Some(vec![0x88, 0xa8, 0x00, 0x14]),
                5 => Some(vec![0x81, 0x00, 0x00, 0x14, 0x81, 0x00, 0x00, 0x0a]), // QinQ
                _ => None,
            };
            if let Some(tag) = tag {
                f.splice(12..12, tag);
            }
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets() -> Targets {
        let mut a6 = [0u8; 16];
        a6[0] = 0xfd;
        Targets {
            dut_mac: [2; 6],
            src_mac: [4; 6],
            src4: [198, 18, 0, 1],
            src6: a6,
            routed4: vec![[198, 19, 0, 1]],
            routed6: vec![a6],
            unknown4: vec![[198, 19, 200, 1]],
            unknown_src4: [198, 18, 0, 3],
            unknown6: vec![a6],
            special4: vec![[198, 18, 0, 2]],
            special6: vec![a6],
        }
    }

    #[test]
    fn generation_is_repeatable_and_varied() {
        let a = generate(&targets(), 7, 500);
        assert_eq!(a, generate(&targets(), 7, 500));
        assert!(
            a.iter().any(|f| f[12..14] == [0x08, 0x00])
                && a.iter().any(|f| f[12..14] == [0x86, 0xdd])
        );
        assert!(a.iter().any(|f| f.len() < 70) && a.iter().any(|f| f.len() > 1420));
    }

    #[test]
    fn normalization_masks_kernel_ids_and_drops_housekeeping() {
        let f = pkt::ipv4(
            [2; 6],
            [4; 6],
            [198, 18, 0, 2],
            [198, 18, 0, 1],
            64,
            &[],
            &L4::Echo { payload: vec![] },
        );
        let n = normalize(&f, &[[198, 18, 0, 2]]).unwrap();
        assert_eq!(&n[18..20], &[0, 0]);
        assert_eq!(normalize(&f, &[]).unwrap(), f);
        assert!(normalize(&pkt::arp([4; 6], [198, 18, 0, 1]), &[]).is_none());
        let mut ns = pkt::ipv6(
            [2; 6],
            [4; 6],
            [0xfd; 16],
            [0xfd; 16],
            255,
            false,
            &L4::Echo {
                payload: vec![0; 20],
            },
        );
        ns[54] = 135;
        assert!(normalize(&ns, &[]).is_none());
    }

    #[test]
    fn divergences_count_both_ways() {
        let mut a = Capture::new();
        let mut b = Capture::new();
        a.insert(("s0".into(), vec![1]), 2);
        b.insert(("s0".into(), vec![1]), 1);
        b.insert(("v0".into(), vec![2]), 1);
        assert_eq!(divergences(&a, &b).len(), 2);
        assert!(divergences(&a, &a).is_empty());
    }
}
