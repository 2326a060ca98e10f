//! The XDP data path: bpf/lb.bpf.c loaded with its constants ([`loader`]), the plan written
//! into its maps ([`maps`]), its counters read back ([`stats`]), and its attachment to the
//! daemon's interfaces ([`attach`]). See docs/LB.md, "Data path".

pub mod attach;
pub mod links;
pub mod loader;
pub mod maps;
pub mod stats;

use std::net::{Ipv4Addr, Ipv6Addr};

pub use loader::{Program, XDP_DROP, XDP_PASS, XDP_REDIRECT, XDP_TX};
pub use stats::Reason;

/// The data path's idle time of an established TCP connection (cfg_idle_tcp_s in
/// bpf/lb_consts.h): its entries, and a full-NAT local port, may be reused after it.
pub const IDLE_TCP_S: u32 = 900;
/// The default AttachConfig::half_open_timeout_s: IPVS's SYN_RECV time.
pub const HALF_OPEN_TIMEOUT_S: u32 = 60;

use crate::model::{DataPlane, Plan, Stats};
use crate::Result;

/// Which forwarding methods and address families the program is built with: the verifier
/// drops the code of the others, and a plan that needs one is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeSet {
    pub dr: bool,
    pub tunnel: bool,
    pub nat: bool,
    pub full_nat: bool,
    pub v4: bool,
    pub v6: bool,
}

impl Default for ModeSet {
    fn default() -> Self {
        ModeSet {
            dr: true,
            tunnel: true,
            nat: true,
            full_nat: true,
            v4: true,
            v6: true,
        }
    }
}

/// How the data path is loaded and where it is attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachConfig {
    /// Interfaces the program runs on (VIP traffic in, and for NAT the reals' replies).
    pub ifaces: Vec<String>,
    /// Maglev table size (a prime); every plan must use it.
    pub ring_size: u32,
    pub max_services: u32,
    pub max_reals: u32,
    /// Entries of each CPU's connection table (the reverse table holds this many per CPU).
    pub conns_per_cpu: u32,
    /// Katran's guard: new connection entries per CPU per second; beyond it connections are
    /// scheduled by hash without an entry. 0: no guard.
    pub new_conns_per_sec_per_cpu: u32,
    /// Seconds a TCP connection may stay in its handshake before its entries (and a full-NAT
    /// local port) may be reused; shorter than the 900 s idle time of an established one.
    pub half_open_timeout_s: u32,
    /// Tunnel outer source prefix (the flow hash fills the host bits); None: the address
    /// the kernel's FIB chooses for the real.
    pub tunnel_src_v4: Option<(Ipv4Addr, u8)>,
    /// As tunnel_src_v4; prefixes up to /96 (the hash fills the last 32 bits).
    pub tunnel_src_v6: Option<(Ipv6Addr, u8)>,
    /// Allow interfaces outside a `ws-*` lab namespace.
    pub allow_host: bool,
    /// Modes and families compiled in.
    pub modes: ModeSet,
}

impl Default for AttachConfig {
    fn default() -> Self {
        AttachConfig {
            ifaces: Vec::new(),
            ring_size: 65537,
            max_services: 256,
            max_reals: 4096,
            conns_per_cpu: 1 << 16,
            new_conns_per_sec_per_cpu: 125_000,
            half_open_timeout_s: HALF_OPEN_TIMEOUT_S,
            tunnel_src_v4: None,
            tunnel_src_v6: None,
            allow_host: false,
            modes: ModeSet::default(),
        }
    }
}

/// The data path as the daemon drives it: one program, attached through BPF links to every
/// interface of the config (detached when this is dropped), and the plan its maps hold.
pub struct XdpDataPlane {
    prog: Program,
    links: Vec<attach::Link>,
    /// The attached interfaces' carrier and MAC, followed; None when attached nowhere.
    watch: Option<links::LinkWatch>,
    /// Reading the link events failed last turn (said once).
    link_events_failing: bool,
    applied: Option<Plan>,
}

impl XdpDataPlane {
    /// Loads the program and attaches it to `cfg.ifaces` (XDP driver mode), after checking
    /// each interface: it exists, it is in a lab namespace (unless allow_host), and it can
    /// transmit XDP frames.
    pub fn attach(cfg: &AttachConfig) -> Result<XdpDataPlane> {
        let ifaces = attach::check(cfg)?;
        let veth = ifaces.iter().any(|i| i.veth);
        let prog = Program::load_for(cfg, veth)?;
        // Subscribed before the MACs are read: a change from here on is seen.
        let ports: Vec<_> = ifaces
            .iter()
            .map(|i| (i.name.clone(), i.ifindex, i.mac))
            .collect();
        let mut watch = links::LinkWatch::open(&ports)?;
        let mut links = Vec::new();
        for i in ifaces {
            // The MAC first: until it is known, the interface's frames go to the kernel.
            prog.set_if_mac(i.ifindex, i.mac)?;
            links.push(attach::Link::xdp(&prog, &i.name, i.ifindex)?);
        }
        // A MAC that changed since `check` read it.
        for c in watch.follow()? {
            prog.set_if_mac(c.ifindex, c.mac)?;
        }
        Ok(XdpDataPlane {
            prog,
            links,
            watch: Some(watch),
            link_events_failing: false,
            applied: None,
        })
    }

    /// Loads the program without attaching it anywhere: for BPF_PROG_TEST_RUN fixtures. It
    /// serves every interface of the calling thread's network namespace (their MACs are
    /// written as an attach writes its interfaces').
    pub fn load(cfg: &AttachConfig) -> Result<XdpDataPlane> {
        let prog = Program::load(cfg)?;
        prog.set_namespace_macs()?;
        Ok(XdpDataPlane {
            prog,
            links: Vec::new(),
            watch: None,
            link_events_failing: false,
            applied: None,
        })
    }

    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// Interfaces attached, by name and ifindex.
    pub fn attached(&self) -> Vec<(String, u32)> {
        self.links
            .iter()
            .map(|l| (l.name.clone(), l.ifindex))
            .collect()
    }

    /// Runs the program once on `frame` (BPF_PROG_TEST_RUN) as if received on
    /// `ingress_ifindex`: the verdict and the frame as the program left it.
    pub fn test_run(&self, frame: &[u8], ingress_ifindex: u32) -> Result<(u32, Vec<u8>)> {
        self.prog.test_run(frame, ingress_ifindex)
    }
}

impl DataPlane for XdpDataPlane {
    fn apply(&mut self, plan: &Plan) -> Result<()> {
        maps::apply(&self.prog, self.applied.as_ref(), plan)?;
        self.applied = Some(plan.clone());
        Ok(())
    }

    fn stats(&self) -> Result<Stats> {
        let empty = Plan::default();
        stats::read(&self.prog, self.applied.as_ref().unwrap_or(&empty))
    }

    fn zero(&mut self) -> Result<()> {
        stats::zero(&self.prog)
    }

    fn conn_counts(&self) -> Result<Vec<crate::model::ConnCounts>> {
        let slots = self.applied.as_ref().map_or(0, |p| p.reals.len());
        stats::conn_counts(&self.prog, slots)
    }

    /// Asks the kernel, interface by interface: a deleted interface takes its link with it,
    /// and another program may have replaced ours.
    fn attached_everywhere(&self) -> bool {
        let Ok(id) = wirespeed_sys::bpf::prog_id(self.prog.fd()) else {
            return false;
        };
        self.links
            .iter()
            .all(|l| wirespeed_sys::bpf::xdp_query(l.ifindex).is_ok_and(|q| q.drv_prog_id == id))
    }

    /// Follows the interfaces' link events: a new MAC is written to the program at once (the
    /// frames sent to it are served, not left to the kernel), and the down ones are listed.
    fn links_down(&mut self) -> Vec<String> {
        let Some(watch) = self.watch.as_mut() else {
            return Vec::new();
        };
        match watch.follow() {
            Ok(changes) => {
                for c in changes {
                    let mac = wirespeed_wire::ethernet::MacAddr(c.mac);
                    match self.prog.set_if_mac(c.ifindex, c.mac) {
                        Ok(()) => eprintln!(
                            "wirespeed lb: {}'s MAC is now {mac}: frames sent to it are served",
                            c.name
                        ),
                        Err(e) => eprintln!(
                            "wirespeed lb: {}'s MAC is now {mac}, but {e}: frames sent to it go to the kernel until `lb run` restarts",
                            c.name
                        ),
                    }
                }
            }
            // Said once until the events read again; meanwhile the last state stands.
            Err(e) if !self.link_events_failing => {
                self.link_events_failing = true;
                eprintln!(
                    "wirespeed lb: {e}: interfaces taken as last seen (up or down, their MAC) until the events read again; restart `lb run` if no line says they do"
                );
                return watch.down();
            }
            Err(_) => return watch.down(),
        }
        if std::mem::take(&mut self.link_events_failing) {
            eprintln!("wirespeed lb: link events read again");
        }
        watch.down()
    }
}
