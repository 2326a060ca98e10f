//! Loads bpf/lb.bpf.c with its load-time constants and map sizes, creates the per-CPU
//! connection tables, and keeps owned handles to the program and its maps (never pinned:
//! when the daemon dies, the kernel detaches the program).

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use super::{AttachConfig, ModeSet, IDLE_TCP_S};
use crate::bpf::{types, LbSkelBuilder, OpenLbMaps, OpenLbSkel};
use crate::consts::{FLOW_FWD, MAX_FRAGS, MAX_IFACES, MAX_LADDRS, PORT_LO, PORT_RANGE};
use crate::error::Error;
use crate::Result;

/// XDP verdicts, as a test run returns them.
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;

pub(crate) fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
    let what = what.into();
    move |e| Error::DataPath(format!("{what}: {e}"))
}

/// Whether a key of the `rev` map is a forward entry's: `lb_flow.pad[0]` is LB_FLOW_FWD.
pub fn is_forward_key(k: &[u8]) -> bool {
    k.get(std::mem::offset_of!(types::lb_flow, pad)) == Some(&FLOW_FWD)
}

/// The maps of the loaded program.
pub struct Maps {
    pub services: MapHandle,
    pub lookup: MapHandle,
    pub reals: MapHandle,
    pub laddrs: MapHandle,
    pub conns: MapHandle,
    pub rev: MapHandle,
    pub half_open: MapHandle,
    pub udp_flows: MapHandle,
    pub rr_cursor: MapHandle,
    pub port_cursor: MapHandle,
    pub rate: MapHandle,
    pub svc_stats: MapHandle,
    pub real_stats: MapHandle,
    pub reasons: MapHandle,
    /// The own MAC of each served interface, by ifindex (a frame to another MAC is the
    /// kernel's).
    pub if_macs: MapHandle,
    /// The connection table of each CPU (also held by `conns`).
    pub conn_tables: Vec<MapHandle>,
}

/// What the program was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub ring_size: u32,
    pub max_services: u32,
    pub max_reals: u32,
    pub nr_cpus: u32,
    pub modes: ModeSet,
    /// AttachConfig::half_open_timeout_s: how long the listing counts a half-open connection.
    pub half_open_timeout_s: u32,
}

/// A loaded (verified) program, attached nowhere by itself.
pub struct Program {
    fd: OwnedFd,
    pub maps: Maps,
    pub shape: Shape,
}

fn handle(map: &libbpf_rs::MapMut<'_>, name: &str) -> Result<MapHandle> {
    MapHandle::try_from(map).map_err(bpf(format!("dup map {name}")))
}

fn check_cfg(cfg: &AttachConfig) -> Result<()> {
    let bad = |m: String| Err(Error::Invalid(m));
    if cfg.ring_size < 2 {
        return bad(format!(
            "ring size {} is too small: use a prime such as 65537",
            cfg.ring_size
        ));
    }
    if cfg.max_services == 0 || cfg.max_reals == 0 || cfg.conns_per_cpu == 0 {
        return bad("max services, max reals and connections per CPU must be at least 1".into());
    }
    if (cfg.max_services as u64) * (cfg.ring_size as u64) > u32::MAX as u64 / 2 {
        return bad(format!(
            "{} services x ring size {} is too many lookup slots: lower --max-services",
            cfg.max_services, cfg.ring_size
        ));
    }
    if cfg.half_open_timeout_s == 0 || cfg.half_open_timeout_s >= IDLE_TCP_S {
        return bad(format!(
            "half-open timeout {} s: use 1 to {} s (below the established idle time)",
            cfg.half_open_timeout_s,
            IDLE_TCP_S - 1
        ));
    }
    if let Some((_, len)) = cfg.tunnel_src_v4 {
        if len > 32 {
            return bad(format!("tunnel source prefix /{len} is not an IPv4 prefix"));
        }
    }
    if let Some((_, len)) = cfg.tunnel_src_v6 {
        if len > 96 {
            return bad(format!(
                "tunnel source prefix /{len}: use /96 or shorter (the flow hash fills the last 32 bits)"
            ));
        }
    }
    Ok(())
}

/// Writes the program's load-time constants (bpf/lb_consts.h): sizes, modes, families,
/// tunnel source prefixes.
fn set_constants(ro: &mut types::rodata, cfg: &AttachConfig, nr_cpus: u32, tx_redirect: bool) {
    let m = cfg.modes;
    ro.cfg_ring_size = cfg.ring_size;
    ro.cfg_max_services = cfg.max_services;
    ro.cfg_max_reals = cfg.max_reals;
    ro.cfg_nr_cpus = nr_cpus;
    ro.cfg_new_conns_per_sec = cfg.new_conns_per_sec_per_cpu;
    ro.cfg_half_open_s = cfg.half_open_timeout_s;
    ro.cfg_modes =
        (m.dr as u8) | (m.tunnel as u8) << 1 | (m.nat as u8) << 2 | (m.full_nat as u8) << 3;
    ro.cfg_v4 = m.v4 as u8;
    ro.cfg_tx_redirect = tx_redirect as u8;
    ro.cfg_v6 = m.v6 as u8;
    if let Some((a, len)) = cfg.tunnel_src_v4 {
        ro.cfg_tun_src_v4 = a.octets();
        ro.cfg_tun_src_v4_len = len;
    }
    if let Some((a, len)) = cfg.tunnel_src_v6 {
        ro.cfg_tun_src_v6 = a.octets();
        // A /0 prefix still means "derive from the hash": the length only says
        // whether a prefix is configured.
        ro.cfg_tun_src_v6_len = len.max(1);
    }
}

/// Sizes every map of the opened object for `cfg` on `nr_cpus` CPUs.
fn size_maps(om: &mut OpenLbMaps<'_>, cfg: &AttachConfig, nr_cpus: u32) -> Result<()> {
    let services = cfg.max_services;
    let sizes: [(&str, u32); 14] = [
        // Service entries plus one address-only entry per VIP (echo).
        ("services", services * 2),
        ("lookup", services * cfg.ring_size),
        ("reals", cfg.max_reals),
        ("laddrs", services * MAX_LADDRS),
        ("conns", nr_cpus),
        // A forward entry per connection and a reply entry per NAT connection: TCP in
        // `rev`, UDP in `udp_flows`.
        (
            "rev",
            cfg.conns_per_cpu.saturating_mul(nr_cpus).saturating_mul(2),
        ),
        (
            "udp_flows",
            cfg.conns_per_cpu.saturating_mul(nr_cpus).saturating_mul(2),
        ),
        // Half-open connections: as many as one CPU's table holds, per CPU (a forward
        // and, for NAT, a reply entry each).
        ("half_open", cfg.conns_per_cpu.saturating_mul(nr_cpus)),
        ("rr_cursor", services),
        ("nh_cache", cfg.max_reals),
        ("svc_stats", services),
        ("real_stats", cfg.max_reals),
        ("port_cursor", 1),
        // Fragmented datagrams in flight (each CPU has its own LRU list of them): 1,024
        // per CPU, at least LB_MAX_FRAGS.
        ("frags", nr_cpus.saturating_mul(1024).max(MAX_FRAGS)),
    ];
    for (name, n) in sizes {
        let map = match name {
            "services" => &mut om.services,
            "lookup" => &mut om.lookup,
            "reals" => &mut om.reals,
            "laddrs" => &mut om.laddrs,
            "conns" => &mut om.conns,
            "rev" => &mut om.rev,
            "half_open" => &mut om.half_open,
            "udp_flows" => &mut om.udp_flows,
            "rr_cursor" => &mut om.rr_cursor,
            "nh_cache" => &mut om.nh_cache,
            "svc_stats" => &mut om.svc_stats,
            "real_stats" => &mut om.real_stats,
            "frags" => &mut om.frags,
            _ => &mut om.port_cursor,
        };
        map.set_max_entries(n)
            .map_err(bpf(format!("size map {name}")))?;
    }
    Ok(())
}

impl Maps {
    /// Creates one LRU connection table of `conns_per_cpu` entries per CPU and installs
    /// each in the `conns` array at its CPU's index.
    fn create_conn_tables(&mut self, nr_cpus: u32, conns_per_cpu: u32) -> Result<()> {
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        for cpu in 0..nr_cpus {
            let table = MapHandle::create(
                MapType::LruHash,
                Some(format!("lb_conn{cpu}")),
                std::mem::size_of::<types::lb_flow>() as u32,
                std::mem::size_of::<types::lb_conn>() as u32,
                conns_per_cpu,
                &opts,
            )
            .map_err(bpf(format!("create the connection table of CPU {cpu}")))?;
            let inner_fd = table.as_fd().as_raw_fd() as u32;
            self.conns
                .update(&cpu.to_ne_bytes(), &inner_fd.to_ne_bytes(), MapFlags::ANY)
                .map_err(bpf(format!("install the connection table of CPU {cpu}")))?;
            self.conn_tables.push(table);
        }
        Ok(())
    }
}

/// The entries of a map keyed as `rev`: (reply entries, forward entries).
fn replies_and_forwards(map: &MapHandle) -> (usize, usize) {
    let (mut replies, mut forwards) = (0, 0);
    for k in map.keys() {
        if is_forward_key(&k) {
            forwards += 1;
        } else {
            replies += 1;
        }
    }
    (replies, forwards)
}

/// Set, the load prints the verifier's statistics of the program (instructions processed,
/// states) on stderr: how near the verifier's limit of a million instructions it is
/// (docs/LB.md, "Data path").
pub const VERIFIER_STATS_ENV: &str = "WIRESPEED_LB_VERIFIER_STATS";

/// Asks the kernel for the verifier's statistics of `lb_xdp` and has libbpf's log of them
/// printed.
fn print_verifier_stats(open: &mut OpenLbSkel<'_>) {
    open.progs.lb_xdp.set_log_level(4);
    libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, |_, msg| {
        for line in msg.lines().filter(|l| l.starts_with("processed ")) {
            eprintln!("wirespeed lb: verifier: {line}");
        }
    })));
}

impl Program {
    /// Opens the object, writes the constants and map sizes, loads it, and fills the
    /// connection-table array with one fresh LRU table per CPU.
    pub fn load(cfg: &AttachConfig) -> Result<Program> {
        Self::load_for(cfg, false)
    }

    /// As `load`; with `tx_redirect` frames go back out of their ingress port by redirect
    /// instead of XDP_TX (for veths, whose XDP_TX wakes a peer only if it runs XDP).
    pub fn load_for(cfg: &AttachConfig, tx_redirect: bool) -> Result<Program> {
        check_cfg(cfg)?;
        let nr_cpus = libbpf_rs::num_possible_cpus().map_err(bpf("count possible CPUs"))? as u32;
        let mut storage = MaybeUninit::uninit();
        let mut open = LbSkelBuilder::default()
            .open(&mut storage)
            .map_err(bpf("open lb object"))?;
        set_constants(open.maps.rodata_data, cfg, nr_cpus, tx_redirect);
        size_maps(&mut open.maps, cfg, nr_cpus)?;
        if std::env::var_os(VERIFIER_STATS_ENV).is_some() {
            print_verifier_stats(&mut open);
        }
        let skel = open.load().map_err(bpf("load lb program (verifier)"))?;
        let fd = skel
            .progs
            .lb_xdp
            .as_fd()
            .try_clone_to_owned()
            .map_err(crate::error::io("dup program fd"))?;
        let s = &skel.maps;
        let mut maps = Maps {
            services: handle(&s.services, "services")?,
            lookup: handle(&s.lookup, "lookup")?,
            reals: handle(&s.reals, "reals")?,
            laddrs: handle(&s.laddrs, "laddrs")?,
            conns: handle(&s.conns, "conns")?,
            rev: handle(&s.rev, "rev")?,
            half_open: handle(&s.half_open, "half_open")?,
            udp_flows: handle(&s.udp_flows, "udp_flows")?,
            rr_cursor: handle(&s.rr_cursor, "rr_cursor")?,
            port_cursor: handle(&s.port_cursor, "port_cursor")?,
            rate: handle(&s.rate, "rate")?,
            svc_stats: handle(&s.svc_stats, "svc_stats")?,
            real_stats: handle(&s.real_stats, "real_stats")?,
            reasons: handle(&s.reasons, "reasons")?,
            if_macs: handle(&s.if_macs, "if_macs")?,
            conn_tables: Vec::new(),
        };
        maps.create_conn_tables(nr_cpus, cfg.conns_per_cpu)?;
        Ok(Program {
            fd,
            maps,
            shape: Shape {
                ring_size: cfg.ring_size,
                max_services: cfg.max_services,
                max_reals: cfg.max_reals,
                nr_cpus,
                modes: cfg.modes,
                half_open_timeout_s: cfg.half_open_timeout_s,
            },
        })
    }

    /// Tells the program the own MAC of interface `ifindex`: only frames sent to it are
    /// forwarded or answered there (others are the kernel's, `pass_not_our_mac`).
    pub fn set_if_mac(&self, ifindex: u32, mac: [u8; 6]) -> Result<()> {
        let mut v = [0u8; 8];
        v[..6].copy_from_slice(&mac);
        self.maps
            .if_macs
            .update(&ifindex.to_ne_bytes(), &v, MapFlags::ANY)
            .map_err(bpf(format!(
                "write the MAC of interface {ifindex} (at most {MAX_IFACES} interfaces)"
            )))
    }

    /// Tells the program the MAC of every interface of the calling thread's network
    /// namespace that has one: a program loaded for BPF_PROG_TEST_RUN serves them all.
    pub fn set_namespace_macs(&self) -> Result<()> {
        let mut route = wirespeed_netlink::Socket::open(libc::NETLINK_ROUTE)
            .map_err(|e| Error::DataPath(format!("netlink: {e}")))?;
        let links = wirespeed_netlink::route::dump_links(&mut route)
            .map_err(|e| Error::DataPath(format!("list interfaces: {e}")))?;
        for l in links {
            if let Some(mac) = l.mac {
                self.set_if_mac(l.index, mac)?;
            }
        }
        Ok(())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The full-NAT local ports CPU `cpu` hands out: `[start, end)`.
    pub fn port_share(&self, cpu: u32) -> (u32, u32) {
        let share = PORT_RANGE / self.shape.nr_cpus.max(1);
        (PORT_LO + cpu * share, PORT_LO + (cpu + 1) * share)
    }

    /// Entries in CPU `cpu`'s connection table.
    pub fn conn_count(&self, cpu: u32) -> usize {
        self.maps
            .conn_tables
            .get(cpu as usize)
            .map_or(0, |t| t.keys().count())
    }

    /// Reply entries of established flows, TCP and UDP (NAT and full-NAT connections as
    /// their replies name them).
    pub fn rev_count(&self) -> usize {
        self.established_keys()
            .filter(|k| !is_forward_key(k))
            .count()
    }

    /// Forward entries of established flows, TCP and UDP (the shared copies of connection
    /// entries).
    pub fn fwd_count(&self) -> usize {
        self.established_keys()
            .filter(|k| is_forward_key(k))
            .count()
    }

    /// UDP flows' entries: (reply entries, forward entries).
    pub fn udp_count(&self) -> (usize, usize) {
        replies_and_forwards(&self.maps.udp_flows)
    }

    fn established_keys(&self) -> impl Iterator<Item = Vec<u8>> + '_ {
        self.maps.rev.keys().chain(self.maps.udp_flows.keys())
    }

    /// Half-open connections' entries: (reply entries, forward entries).
    pub fn half_open_count(&self) -> (usize, usize) {
        replies_and_forwards(&self.maps.half_open)
    }

    /// Runs the program once on `frame` through BPF_PROG_TEST_RUN, as if received on
    /// `ingress_ifindex` in the calling thread's network namespace.
    pub fn test_run(&self, frame: &[u8], ingress_ifindex: u32) -> Result<(u32, Vec<u8>)> {
        let (verdict, out, _) = self.test_run_timed(frame, ingress_ifindex)?;
        Ok((verdict, out))
    }

    /// As [`Self::test_run`], with the kernel's time for the program's run in nanoseconds
    /// (`lb_prog_bench` sums them).
    pub fn test_run_timed(
        &self,
        frame: &[u8],
        ingress_ifindex: u32,
    ) -> Result<(u32, Vec<u8>, u32)> {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex
        let ctx: [u32; 6] = [0, frame.len() as u32, 0, ingress_ifindex, 0, 0];
        let ctx: Vec<u8> = ctx.iter().flat_map(|w| w.to_ne_bytes()).collect();
        // Room for what the program adds in front (tunnel, TOA, ICMP headers).
        let mut out = vec![0u8; frame.len() + 256];
        let r = wirespeed_sys::bpf::test_run_once(self.fd.as_fd(), frame, &ctx, &mut out, &mut [])
            .map_err(|e| Error::DataPath(format!("BPF_PROG_TEST_RUN: {e}")))?;
        out.truncate(r.len);
        Ok((r.verdict, out, r.duration_ns))
    }
}
