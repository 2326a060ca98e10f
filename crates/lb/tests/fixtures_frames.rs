//! Frames the data path must not forward as they came (issue 46): a corrupt IPv4 header,
//! a frame for another host's MAC, a martian address, a TTL that is spent. Each case runs
//! through BPF_PROG_TEST_RUN in every mode it concerns (DR, tunnel, NAT, full-NAT with TOA),
//! v4 and where it applies v6, and checks the verdict, the frame and the reason counted.

mod common;

use common::*;
use wirespeed_lb::datapath::{Reason, XdpDataPlane, XDP_PASS, XDP_REDIRECT};
use wirespeed_lb::model::{Mode, Plan, PlannedReal, PlannedService, Proto, Scheduler, ServiceKey};

const VIP4: &str = "198.18.100.1";
const VIP6: &str = "fd00:100::1";
const CLIENT4: &str = "198.18.50.5";
const CLIENT6: &str = "fd00:50::5";

const MODES: [Mode; 4] = [Mode::Dr, Mode::Tunnel, Mode::Nat, Mode::FullNat];

/// TCP VIP:80 (mh) to one real of `mode` on the real-side link, port 8080; full-NAT from
/// the load balancer's address there, with TOA.
fn plan(mode: Mode, v6: bool) -> Plan {
    let (vip, real, laddr) = if v6 {
        (VIP6, "fd00:2::10", "fd00:2::1")
    } else {
        (VIP4, "198.18.2.10", "198.18.2.1")
    };
    let full_nat = mode == Mode::FullNat;
    Plan {
        ring_size: RING,
        services: vec![PlannedService {
            key: ServiceKey {
                proto: Proto::Tcp,
                vip: sa(vip, 80),
            },
            scheduler: Scheduler::Mh,
            lookup: vec![0; RING as usize],
            laddrs: if full_nat {
                vec![ip(laddr)]
            } else {
                Vec::new()
            },
            toa: full_nat,
        }],
        reals: vec![Some(PlannedReal {
            service: 0,
            addr: sa(real, 8080),
            mode,
            tunnel: Default::default(),
        })],
    }
}

/// A lab namespace tag (namespace names are at most 15 characters).
fn tag(prefix: &str, mode: Mode, v6: bool) -> String {
    let m = match mode {
        Mode::Dr => "d",
        Mode::Tunnel => "t",
        Mode::Nat => "n",
        Mode::FullNat => "f",
    };
    format!("{prefix}{m}{}", if v6 { 6 } else { 4 })
}

/// The addresses of a client and the VIP of the family.
fn ends(v6: bool) -> (&'static str, &'static str) {
    if v6 {
        (CLIENT6, VIP6)
    } else {
        (CLIENT4, VIP4)
    }
}

/// Runs `input` and requires that it goes to the kernel exactly as it came.
fn passes_unchanged(dp: &XdpDataPlane, lab: &Lab, input: &[u8], what: &str) {
    let (v, out) = dp.test_run(input, lab.in_idx).unwrap();
    assert_eq!(v, XDP_PASS, "{what}: verdict");
    assert_eq!(
        out, input,
        "{what}: the frame must reach the kernel as it came"
    );
}

/// Runs `input` and requires that it is forwarded (to the real, towards the client).
fn forwarded(dp: &XdpDataPlane, lab: &Lab, input: &[u8], what: &str) -> Vec<u8> {
    let (v, out) = dp.test_run(input, lab.in_idx).unwrap();
    assert_eq!(v, XDP_REDIRECT, "{what}: verdict");
    verify_checksums(&out);
    out
}

const IP4_CSUM: usize = 14 + 10;

#[test]
fn a_corrupt_ipv4_header_goes_to_the_kernel_untranslated_in_every_mode() {
    for mode in MODES {
        with_lab(
            &tag("cs", mode, false),
            cfg(),
            plan(mode, false),
            move |lab, dp| {
                // IPv4 only: an IPv6 header has no checksum.
                let (client, vip) = ends(false);
                let good = lab.client_tcp(client, vip, 40000, SYN);
                let right = u16::from_be_bytes([good[IP4_CSUM], good[IP4_CSUM + 1]]);
                for (i, bad) in [0x1234u16, 0, 0xffff].into_iter().enumerate() {
                    let mut f = lab.client_tcp(client, vip, 40001 + i as u16, SYN);
                    assert_ne!(
                        u16::from_be_bytes([f[IP4_CSUM], f[IP4_CSUM + 1]]),
                        bad,
                        "the fixture's own checksum is not the bad one"
                    );
                    assert_ne!(right, bad);
                    f[IP4_CSUM..IP4_CSUM + 2].copy_from_slice(&bad.to_be_bytes());
                    passes_unchanged(dp, &lab, &f, &format!("{mode:?} SYN, check {bad:#06x}"));
                }
                // An echo request to the VIP with a corrupt header is not answered.
                let echo = L4::Icmp {
                    ty: 8,
                    code: 0,
                    rest: [0x12, 0x34, 0, 1],
                    payload: b"abcdefgh".to_vec(),
                };
                let mut f = frame(lab.in_mac, ROUTER_MAC, ip(client), ip(vip), &echo);
                f[IP4_CSUM] ^= 0x40;
                passes_unchanged(dp, &lab, &f, &format!("{mode:?} echo"));
                assert_eq!(count(dp, Reason::PassBadCsum), 4, "{mode:?}");
                // The same SYN with its right checksum is forwarded: the case is the checksum.
                forwarded(dp, &lab, &good, &format!("{mode:?} good SYN"));
            },
        );
    }
}
