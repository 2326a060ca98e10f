//! Data-path fixtures through BPF_PROG_TEST_RUN, Katran-style: an input frame gives an
//! expected verdict and output frame, per mode and feature. The FIB the program asks is a
//! real one, in a lab namespace (see common::lab); every output frame's checksums are
//! recomputed from scratch.

mod common;

use std::net::{IpAddr, SocketAddr};

use common::*;
use wirespeed_lb::datapath::{
    stats::reason_count, AttachConfig, Reason, XdpDataPlane, XDP_DROP, XDP_PASS, XDP_REDIRECT,
    XDP_TX,
};
use wirespeed_lb::model::{
    DataPlane, Mode, Plan, PlannedReal, PlannedService, Proto, Scheduler, ServiceKey,
};

const RING: u32 = 7;
const VIP4: &str = "198.18.100.1";
const VIP6: &str = "fd00:100::1";
const CLIENT4: &str = "198.18.50.5";
const CLIENT6: &str = "fd00:50::5";

fn cfg() -> AttachConfig {
    AttachConfig {
        ring_size: RING,
        max_services: 8,
        max_reals: 16,
        conns_per_cpu: 1024,
        new_conns_per_sec_per_cpu: 0,
        ..AttachConfig::default()
    }
}

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(common::ip(ip), port)
}

fn service(proto: Proto, vip: SocketAddr, sched: Scheduler, lookup: Vec<u32>) -> PlannedService {
    PlannedService {
        key: ServiceKey { proto, vip },
        scheduler: sched,
        lookup,
        laddrs: Vec::new(),
        toa: false,
    }
}

fn real(service: u32, addr: SocketAddr, mode: Mode) -> Option<PlannedReal> {
    Some(PlannedReal {
        service,
        addr,
        mode,
    })
}

/// A one-service plan: TCP VIP:80 (mh over the given slots, repeated to fill the ring) to
/// reals of `mode` at `addrs` (port 8080).
fn one_service(vip: &str, mode: Mode, addrs: &[&str], slots: &[u32]) -> Plan {
    let lookup = (0..RING as usize).map(|i| slots[i % slots.len()]).collect();
    Plan {
        ring_size: RING,
        services: vec![service(Proto::Tcp, sa(vip, 80), Scheduler::Mh, lookup)],
        reals: addrs.iter().map(|a| real(0, sa(a, 8080), mode)).collect(),
    }
}

fn count(dp: &XdpDataPlane, r: Reason) -> u64 {
    reason_count(dp.program(), r).unwrap()
}

/// Runs `f` inside the lab's namespace, pinned to CPU 0, with the program loaded.
fn with_lab(
    tag: &str,
    cfg: AttachConfig,
    plan: Plan,
    f: impl FnOnce(Lab, &mut XdpDataPlane) + Send + 'static,
) {
    let (ns, lab) = lab(tag);
    ns.run(move || {
        pin(0);
        let mut dp = XdpDataPlane::load(&cfg).unwrap();
        dp.apply(&plan).unwrap();
        f(lab, &mut dp);
    })
    .unwrap();
}

#[test]
fn dr_v4_rewrites_only_the_macs() {
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
    with_lab("dr4", cfg(), plan, |lab, dp| {
        let l4 = tcp(40000, 80, SYN);
        let input = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &l4);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        let expect = frame(REAL_MACS[0], lab.out_mac, ip(CLIENT4), ip(VIP4), &l4);
        assert_eq!(out, expect);
        verify_checksums(&out);
        assert_eq!(count(dp, Reason::FwdDr), 1);
    });
}
