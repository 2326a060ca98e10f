//! Flow bifurcation: the XDP program (bpf/bifurcate.bpf.c) and its loader.
//!
//! The program sends to the AF_XDP socket of the rx queue a frame arrived on only:
//! - IPv4 TCP/UDP to the served address and a served port (ports live in a map, so they can be
//!   added and removed while attached);
//! - ARP whose target address is the served address (the bypass stack answers for it);
//! - optionally ICMP to the served address.
//!
//! Everything else, and anything truncated, fragmented or not IPv4, is `XDP_PASS`: the kernel
//! keeps serving the interface's own addresses (management, other applications). A frame that
//! is ours but arrives on a queue with no socket registered passes too.
//!
//! It is loaded as an `xdp.frags` program, so the interface keeps an MTU above one page
//! (jumbo frames, a multi-buffer AF_XDP socket behind it); headers are read from the frame's
//! linear part only, and a frame whose headers are not all there passes.
//!
//! The served address and the feature switches are read-only data fixed before load, so the
//! verifier removes the code of switched-off features.

use std::mem::{ManuallyDrop, MaybeUninit};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::{Error, Result, XskSocket};

#[allow(clippy::all, missing_docs, unsafe_op_in_unsafe_fn)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/bifurcate.skel.rs"));
}
use skel::{BifurcateSkel, BifurcateSkelBuilder};

/// XDP verdicts, as `BPF_PROG_TEST_RUN` reports them.
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_REDIRECT: u32 = 4;

/// Upper bounds compiled into the program's maps (bpf/maps.h).
pub const MAX_QUEUES: u32 = 256;
pub const MAX_SERVED_PORTS: usize = 1024;

/// A transport protocol whose ports can be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    fn number(self) -> u32 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
        }
    }
}

/// What to steer. Fixed at load, except the ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BifurcationConfig {
    pub served_ipv4: Ipv4Addr,
    pub tcp_ports: Vec<u16>,
    pub udp_ports: Vec<u16>,
    /// Steer TCP at all (when false, TCP always passes and `tcp_ports` is ignored).
    pub steer_tcp: bool,
    pub steer_udp: bool,
    /// Steer ARP whose target is the served address.
    pub steer_arp: bool,
    /// Steer all ICMP to the served address (the stack answers echo requests).
    pub steer_icmp: bool,
}

impl BifurcationConfig {
    /// TCP, UDP and ARP on, ICMP off, no ports yet.
    pub fn new(served_ipv4: Ipv4Addr) -> BifurcationConfig {
        BifurcationConfig {
            served_ipv4,
            tcp_ports: Vec::new(),
            udp_ports: Vec::new(),
            steer_tcp: true,
            steer_udp: true,
            steer_arp: true,
            steer_icmp: false,
        }
    }
}

/// Where [`Bifurcation::attach`] may attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachScope {
    /// Only inside a `ws-*` lab network namespace (what tests and benchmarks use).
    LabOnly,
    /// Any interface, the host's own included: an operator asked for it (`--allow-host`).
    AnyNamespace,
}

impl AttachScope {
    /// `AnyNamespace` when the operator passed `--allow-host`.
    pub fn allow_host(allow: bool) -> AttachScope {
        if allow {
            AttachScope::AnyNamespace
        } else {
            AttachScope::LabOnly
        }
    }
}

/// Per-verdict frame counts summed over CPUs (see `enum verdict_counter` in bpf/maps.h).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerdictCounters {
    pub redirected: u64,
    pub passed_other: u64,
    pub passed_no_socket: u64,
    pub passed_malformed: u64,
}

/// The loaded program, its maps, and (once attached) its XDP link. Detaches on drop.
pub struct Bifurcation {
    // Drop order (see Drop): link, then skeleton, then the object storage it borrows.
    link: Option<Link>,
    skel: ManuallyDrop<BifurcateSkel<'static>>,
    storage: NonNull<MaybeUninit<OpenObject>>,
    attached_to: Option<String>,
}

// SAFETY: libbpf objects have no thread affinity; the skeleton itself is Send, and the storage
// pointer is owned by this value alone.
unsafe impl Send for Bifurcation {}

impl std::fmt::Debug for Bifurcation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bifurcation")
            .field("attached_to", &self.attached_to)
            .finish_non_exhaustive()
    }
}

impl Bifurcation {
    /// Specializes and loads the program (needs CAP_BPF), and fills the port map. It is not
    /// attached anywhere yet: see [`Bifurcation::attach`].
    pub fn load(cfg: &BifurcationConfig) -> Result<Bifurcation> {
        let storage = NonNull::from(Box::leak(Box::new(MaybeUninit::<OpenObject>::uninit())));
        // SAFETY: the storage stays allocated until Drop (or the error path below), after the
        // skeleton that borrows it is gone.
        let object: &'static mut MaybeUninit<OpenObject> = unsafe { &mut *storage.as_ptr() };
        let skel = match Bifurcation::open_and_load(object, cfg) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: the failed skeleton was dropped inside open_and_load; nothing
                // borrows the storage any more.
                drop(unsafe { Box::from_raw(storage.as_ptr()) });
                return Err(e);
            }
        };
        let mut b = Bifurcation {
            link: None,
            skel: ManuallyDrop::new(skel),
            storage,
            attached_to: None,
        };
        for &p in &cfg.tcp_ports {
            b.add_port(Protocol::Tcp, p)?;
        }
        for &p in &cfg.udp_ports {
            b.add_port(Protocol::Udp, p)?;
        }
        Ok(b)
    }

    fn open_and_load(
        object: &'static mut MaybeUninit<OpenObject>,
        cfg: &BifurcationConfig,
    ) -> Result<BifurcateSkel<'static>> {
        let open = BifurcateSkelBuilder::default()
            .open(object)
            .map_err(Error::bpf("open bifurcation program"))?;
        let ro = &mut *open.maps.rodata_data;
        // The program compares with the header field, which is in network order.
        ro.served_ipv4 = u32::from_ne_bytes(cfg.served_ipv4.octets());
        ro.steer_tcp = u8::from(cfg.steer_tcp);
        ro.steer_udp = u8::from(cfg.steer_udp);
        ro.steer_arp = u8::from(cfg.steer_arp);
        ro.steer_icmp = u8::from(cfg.steer_icmp);
        open.load()
            .map_err(Error::bpf("load bifurcation program (needs root/CAP_BPF)"))
    }

    /// Attaches to `ifname` as a bpf_link (native XDP where the driver has it, else generic).
    /// With [`AttachScope::LabOnly`] only from a thread inside a `ws-*` lab network namespace:
    /// tests and benchmarks never touch the host's own interfaces. [`AttachScope::AnyNamespace`]
    /// is the operator's explicit choice (`--allow-host`) to run on a real interface.
    pub fn attach(&mut self, ifname: &str, scope: AttachScope) -> Result<()> {
        let ns = match (crate::netns::current_lab_namespace(), scope) {
            (Ok(ns), _) => ns,
            (Err(_), AttachScope::AnyNamespace) => "(host)".to_string(),
            (Err(reason), AttachScope::LabOnly) => {
                return Err(Error::NotInLab {
                    ifname: ifname.to_string(),
                    reason,
                })
            }
        };
        let index = crate::xsk::ifindex(ifname)?;
        let link = self
            .skel
            .progs
            .xdp_bifurcate
            .attach_xdp(index as i32)
            .map_err(Error::bpf(format!(
                "attach XDP to `{ifname}` in namespace `{ns}`"
            )))?;
        self.link = Some(link);
        self.attached_to = Some(ifname.to_string());
        Ok(())
    }

    /// Detaches from the interface (dropping the value does it too).
    pub fn detach(&mut self) {
        self.link = None;
        self.attached_to = None;
    }

    pub fn attached_to(&self) -> Option<&str> {
        self.attached_to.as_deref()
    }

    /// Starts steering `port` (takes effect at once, also while attached).
    pub fn add_port(&mut self, proto: Protocol, port: u16) -> Result<()> {
        let key = port_key(proto, port);
        self.skel
            .maps
            .served_ports
            .update(&key.to_ne_bytes(), &[1], MapFlags::ANY)
            .map_err(Error::bpf(format!(
                "serve {proto:?} port {port} (at most {MAX_SERVED_PORTS} ports)"
            )))
    }

    pub fn remove_port(&mut self, proto: Protocol, port: u16) -> Result<()> {
        let key = port_key(proto, port);
        self.skel
            .maps
            .served_ports
            .delete(&key.to_ne_bytes())
            .map_err(Error::bpf(format!("stop serving {proto:?} port {port}")))
    }

    /// Makes `socket` the destination of the frames steered on the rx queue it is bound to.
    /// Refused when the program is attached to another interface than the socket's.
    pub fn register(&mut self, socket: &XskSocket) -> Result<()> {
        if let Some(attached) = &self.attached_to {
            if attached != socket.ifname() {
                return Err(Error::Config(format!(
                    "socket is bound to `{}` but the program is attached to `{attached}`",
                    socket.ifname()
                )));
            }
        }
        self.register_fd(socket.queue(), socket)
    }

    /// Puts any AF_XDP socket in the slot of rx queue `queue`. The caller must make sure the
    /// socket is bound to that queue of this interface: the program's redirect succeeds
    /// whenever the slot is filled, and the kernel then drops (does not pass) every frame
    /// whose queue does not match the socket's. Prefer [`Bifurcation::register`].
    pub fn register_fd(&mut self, queue: u32, socket: &impl AsRawFd) -> Result<()> {
        let fd: RawFd = socket.as_raw_fd();
        self.skel
            .maps
            .xsks
            .update(
                &queue.to_ne_bytes(),
                &(fd as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(Error::bpf(format!(
                "register AF_XDP socket for queue {queue} (at most {MAX_QUEUES})"
            )))
    }

    /// Stops steering queue `queue` (its frames go to the kernel).
    pub fn unregister(&mut self, queue: u32) -> Result<()> {
        self.skel
            .maps
            .xsks
            .delete(&queue.to_ne_bytes())
            .map_err(Error::bpf(format!("unregister queue {queue}")))
    }

    /// The program's verdict counters, summed over CPUs.
    pub fn counters(&self) -> Result<VerdictCounters> {
        let mut sums = [0u64; 4];
        for (i, sum) in sums.iter_mut().enumerate() {
            let per_cpu = self
                .skel
                .maps
                .verdicts
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .map_err(Error::bpf("read verdict counters"))?
                .unwrap_or_default();
            *sum = per_cpu
                .iter()
                .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
                .map(u64::from_ne_bytes)
                .sum();
        }
        Ok(VerdictCounters {
            redirected: sums[0],
            passed_other: sums[1],
            passed_no_socket: sums[2],
            passed_malformed: sums[3],
        })
    }

    /// Runs the program once over `frame` with `BPF_PROG_TEST_RUN` (rx queue 0) and returns
    /// its verdict ([`XDP_PASS`], [`XDP_REDIRECT`], ...). For tests and diagnostics. The
    /// kernel wants at least an Ethernet header's worth of bytes.
    pub fn test_run(&self, frame: &[u8]) -> Result<u32> {
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            ..Default::default()
        };
        let out = self
            .skel
            .progs
            .xdp_bifurcate
            .test_run(input)
            .map_err(Error::bpf("BPF_PROG_TEST_RUN"))?;
        Ok(out.return_value)
    }
}

fn port_key(proto: Protocol, port: u16) -> u32 {
    (proto.number() << 16) | u32::from(port)
}

impl Drop for Bifurcation {
    fn drop(&mut self) {
        self.link = None;
        // SAFETY: dropped exactly once, here, before the storage it borrows is freed.
        unsafe { ManuallyDrop::drop(&mut self.skel) };
        // SAFETY: allocated by Box in `load`; the skeleton that borrowed it is gone.
        drop(unsafe { Box::from_raw(self.storage.as_ptr()) });
    }
}
