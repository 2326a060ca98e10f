//! The decapsulator for a tunnel-mode real (`wirespeed lb decap`): bpf/decap.bpf.c loaded
//! with the VIPs it serves, the outer destinations it accepts and its GUE ports, attached by BPF links to
//! the real's ingress interfaces (native XDP, generic only when native is refused), and its
//! counters read back. For hosts whose kernel has no tunl0/sit0/ip6tnl0. See docs/LB.md,
//! "Decapsulation on the real".

use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use serde::Serialize;

use crate::datapath::attach::Link;
use crate::error::Error;
use crate::Result;

#[allow(clippy::all, missing_docs, unused, unsafe_code, unsafe_op_in_unsafe_fn)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/decap.skel.rs"));
}

const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// Sizes of the `vips`, `outer_dsts` and `gue_ports` maps in bpf/decap.bpf.c.
pub const MAX_VIPS: usize = 1024;
pub const MAX_OUTER_DSTS: usize = 256;
pub const MAX_GUE_PORTS: usize = 16;
/// The GUE port `lb decap` listens on unless told otherwise (the one ipvsadm's examples use).
pub const DEFAULT_GUE_PORT: u16 = 6080;

/// The program's counters, in the order of `enum decap_reason` in bpf/decap.bpf.c (change
/// both together): four kinds of packets stripped, the reasons a frame passed unchanged, then
/// GUE stripped (by outer family).
pub const COUNTERS: [&str; 15] = [
    "decap_ipip",
    "decap_6in4",
    "decap_ip6ip6",
    "decap_4in6",
    "pass_not_ip",
    "pass_vlan",
    "pass_bad_header",
    "pass_ip_options",
    "pass_fragment",
    "pass_not_tunnel",
    "pass_not_local",
    "pass_not_vip",
    "pass_adjust",
    "decap_gue_v4",
    "decap_gue_v6",
];

fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
    let what = what.into();
    move |e| Error::DataPath(format!("{what}: {e}"))
}

/// The key of `vips` and `outer_dsts`: `struct decap_addr` {addr[16], family (4 or 6), pad[3]}.
fn addr_key(a: IpAddr) -> [u8; 20] {
    let mut k = [0u8; 20];
    match a {
        IpAddr::V4(v) => {
            k[..4].copy_from_slice(&v.octets());
            k[16] = 4;
        }
        IpAddr::V6(v) => {
            k[..16].copy_from_slice(&v.octets());
            k[16] = 6;
        }
    }
    k
}

/// How the program runs on an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// In the driver (native XDP).
    Native,
    /// Generic (SKB) mode: the driver refused native XDP.
    Generic,
}

/// What `wirespeed lb decap` is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecapConfig {
    pub ifaces: Vec<String>,
    /// Inner destinations to decapsulate for (the VIPs on this real's lo).
    pub vips: Vec<IpAddr>,
    /// Outer destinations accepted (this host's addresses); empty: any.
    pub outer_dsts: Vec<IpAddr>,
    /// UDP ports whose datagrams are GUE (`--gue-port`); empty: none.
    pub gue_ports: Vec<u16>,
    /// Allow attaching outside a `ws-*` lab namespace.
    pub allow_host: bool,
}

/// The loaded decapsulator, and its attachments (dropping it detaches the program).
pub struct Decap {
    prog: OwnedFd,
    counters: MapHandle,
    links: Vec<(Link, XdpMode)>,
}

impl Decap {
    /// Loads the program for `vips`, decapsulating only packets whose outer destination is
    /// one of `outer_dsts` (any when empty), and UDP datagrams to `gue_ports` as GUE.
    /// Attached nowhere.
    pub fn load(vips: &[IpAddr], outer_dsts: &[IpAddr], gue_ports: &[u16]) -> Result<Decap> {
        if vips.is_empty() {
            return Err(Error::Invalid(
                "no VIP: pass --vip VIP[,VIP...] (the addresses on this real's lo)".into(),
            ));
        }
        if vips.len() > MAX_VIPS || outer_dsts.len() > MAX_OUTER_DSTS {
            return Err(Error::Invalid(format!(
                "at most {MAX_VIPS} VIPs and {MAX_OUTER_DSTS} outer destinations"
            )));
        }
        if gue_ports.len() > MAX_GUE_PORTS || gue_ports.contains(&0) {
            return Err(Error::Invalid(format!(
                "--gue-port: give at most {MAX_GUE_PORTS} ports, each in 1-65535"
            )));
        }
        let mut storage = MaybeUninit::uninit();
        let open = skel::DecapSkelBuilder::default()
            .open(&mut storage)
            .map_err(bpf("open decap object"))?;
        open.maps.rodata_data.cfg_check_outer_dst = u8::from(!outer_dsts.is_empty());
        let skel = open.load().map_err(bpf("load decap program (verifier)"))?;
        for (map, addrs, what) in [
            (&skel.maps.vips, vips, "VIP"),
            (&skel.maps.outer_dsts, outer_dsts, "outer destination"),
        ] {
            for a in addrs {
                map.update(&addr_key(*a), &[1u8], MapFlags::ANY)
                    .map_err(bpf(format!("add {what} {a}")))?;
            }
        }
        for p in gue_ports {
            skel.maps
                .gue_ports
                .update(&p.to_be_bytes(), &[1u8], MapFlags::ANY)
                .map_err(bpf(format!("add GUE port {p}")))?;
        }
        let prog = skel
            .progs
            .decap
            .as_fd()
            .try_clone_to_owned()
            .map_err(crate::error::io("dup decap program fd"))?;
        let counters =
            MapHandle::try_from(&skel.maps.counters).map_err(bpf("dup decap counters map"))?;
        Ok(Decap {
            prog,
            counters,
            links: Vec::new(),
        })
    }

    /// Loads the program and attaches it to `cfg.ifaces`: refused outside a `ws-*` lab
    /// namespace unless `cfg.allow_host`, as `lb run` is.
    pub fn attach(cfg: &DecapConfig) -> Result<Decap> {
        if cfg.ifaces.is_empty() {
            return Err(Error::Invalid("no interface: pass --iface IF".into()));
        }
        if let Err(why) = wirespeed_sys::netns::current_lab_namespace() {
            if !cfg.allow_host {
                return Err(Error::Invalid(format!(
                    "refusing to attach outside a lab namespace ({why}): run it as `ip netns exec ws-NAME wirespeed lb decap ...`, or pass --allow-host"
                )));
            }
        }
        let mut d = Decap::load(&cfg.vips, &cfg.outer_dsts, &cfg.gue_ports)?;
        for (name, ifindex) in cfg.ifaces.iter().zip(ifindexes(&cfg.ifaces)?) {
            let native = Link::xdp_with_flags(d.prog.as_fd(), name, ifindex, XDP_FLAGS_DRV_MODE);
            let (link, mode) = match native {
                Ok(l) => (l, XdpMode::Native),
                Err(native_err) => {
                    let l = Link::xdp_with_flags(d.prog.as_fd(), name, ifindex, XDP_FLAGS_SKB_MODE)
                        .map_err(|e| {
                            Error::DataPath(format!(
                                "attach XDP to {name}: native mode: {native_err}; generic mode: {e} (is another XDP program attached? `ip link show {name}`)"
                            ))
                        })?;
                    (l, XdpMode::Generic)
                }
            };
            d.links.push((link, mode));
        }
        Ok(d)
    }

    /// The interfaces the program is attached to, with its mode on each.
    pub fn attached(&self) -> Vec<(&str, XdpMode)> {
        self.links
            .iter()
            .map(|(l, m)| (l.name.as_str(), *m))
            .collect()
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.prog.as_fd()
    }

    /// Every counter of `COUNTERS`, summed over CPUs.
    pub fn counters(&self) -> Result<Vec<(&'static str, u64)>> {
        let mut out = Vec::new();
        for (i, name) in COUNTERS.iter().enumerate() {
            let per_cpu = self
                .counters
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .map_err(bpf("read decap counters"))?
                .unwrap_or_default();
            let sum = per_cpu
                .iter()
                .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
                .map(u64::from_ne_bytes)
                .sum();
            out.push((*name, sum));
        }
        Ok(out)
    }

    /// One counter by its name in `COUNTERS` (0 for an unknown name).
    pub fn counter(&self, name: &str) -> Result<u64> {
        Ok(self
            .counters()?
            .into_iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, c)| c))
    }

    /// Runs the program once on `frame` through BPF_PROG_TEST_RUN: its verdict and the frame
    /// as it left it.
    pub fn test_run(&self, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex
        let ctx: [u32; 6] = [0, frame.len() as u32, 0, 0, 0, 0];
        let ctx: Vec<u8> = ctx.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let mut out = vec![0u8; frame.len() + 64];
        let (verdict, len) = wirespeed_sys::bpf::test_run(self.prog.as_fd(), frame, &ctx, &mut out)
            .map_err(|e| Error::DataPath(format!("BPF_PROG_TEST_RUN: {e}")))?;
        out.truncate(len);
        Ok((verdict, out))
    }
}

/// The ifindex of each interface, from netlink (which, unlike /sys/class/net, answers for the
/// calling thread's network namespace).
fn ifindexes(names: &[String]) -> Result<Vec<u32>> {
    let nl = |what: &'static str| {
        move |e: wirespeed_netlink::Error| Error::DataPath(format!("{what}: {e}"))
    };
    let mut route = wirespeed_netlink::Socket::open(libc::NETLINK_ROUTE).map_err(nl("netlink"))?;
    let links = wirespeed_netlink::route::dump_links(&mut route).map_err(nl("list interfaces"))?;
    names
        .iter()
        .map(|name| {
            links
                .iter()
                .find(|l| &l.name == name)
                .map(|l| l.index)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "no interface {name} here: `ip link show` lists them"
                    ))
                })
        })
        .collect()
}
