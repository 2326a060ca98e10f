//! The bypass stack: our TCP/IP stack on a device we take over, one driver queue and one
//! [`socket::BypassStack`] per shard.
//!
//! This module is the one place that knows how a device is taken over, for servers and
//! clients alike (`crate::Stack::bypass` calls it); the socket code above it
//! ([`crate::TcpListener`], [`crate::TcpStream`]) does not know which device it runs on.
//!
//! - [`Device::Xdp`]: the flow-bifurcation XDP program on the interface (only the served
//!   address's ports, ARP for it and optionally ICMP go to us; the kernel keeps the rest) and
//!   one AF_XDP socket per rx queue: shard i owns queue i (it also transmits there), and the
//!   queues beyond the shard count go round to the shards, receive only (queue q to shard
//!   q mod shards), since the device spreads flows over all of its queues and an XDP program
//!   cannot hand a frame to another queue's socket. Outside a `ws-*` lab namespace the
//!   attach needs [`AttachScope::AnyNamespace`] (the operator's `--allow-host`).
//! - [`Device::Dpdk`]: the EAL started with the operator's arguments (once per process), the
//!   one port it found, one queue per shard. Needs the cargo feature `dpdk`. The operator names
//!   the device in the EAL arguments (a vdev, or a PCI device bound to vfio-pci), which is the
//!   explicit choice: nothing is attached to any other interface.
//!
//! [`open`] runs on the main thread before the shards start; `crate::Stack` hands the shards
//! out in shard order and keeps the [`Bypass`] alive while they run (for AF_XDP it holds the
//! attached program).

pub mod socket;

use std::net::{IpAddr, Ipv4Addr};

use wirespeed_nic::rss::RssModel;
use wirespeed_nic::{
    AnyQueue, AttachScope, Bifurcation, BifurcationConfig, BusyPoll, InterfaceInfo, XskConfig,
    XskSocket,
};

pub use socket::Ipv6Subnet;
use socket::{DropCause, RxSteering, StackConfig};

/// The bypass stack's counters (`--metrics` exports each under its name).
pub use wirespeed_tcpip::Stats as BypassStats;

/// Congestion control of the bypass stack's connections, by Linux's names (`reno`, `cubic`).
pub use wirespeed_tcpip::CongestionAlgorithm;

/// The device the bypass stack takes over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// AF_XDP sockets on every rx queue of `iface`, behind the bifurcation program.
    Xdp { iface: String, scope: AttachScope },
    /// A DPDK port. `eal_args` are the EAL's arguments without the program name, e.g.
    /// `--no-huge -m 256 --no-pci --vdev=net_af_packet0,iface=eth1`; the EAL must find
    /// exactly one port.
    Dpdk { eal_args: Vec<String> },
}

/// What to bring up.
#[derive(Debug, Clone)]
pub struct BypassConfig {
    pub device: Device,
    /// The address our stack answers for (not one of the kernel's own), and its prefix.
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: Option<Ipv4Addr>,
    /// An IPv6 address our stack answers for beside `ip` (dual stack), not one of the
    /// kernel's own either.
    pub ipv6: Option<Ipv6Subnet>,
    /// One driver queue (and one stack) per shard.
    pub shards: usize,
    /// TCP ports whose frames belong to our stack: the served ports of a server, the local
    /// port range of a client. AF_XDP steers only these to us.
    pub tcp_ports: Vec<u16>,
    /// Whether ICMP to `ip` comes to our stack (it answers pings).
    pub icmp: bool,
    /// Connections per shard's stack.
    pub max_connections: usize,
    /// A listener's backlog: half-open and not yet accepted connections; past it a SYN is
    /// answered with a SYN cookie (the kernel's `listen()` backlog, somaxconn's role).
    pub backlog: u32,
    /// Local ports of the connections this side opens (None: the stack's default range).
    pub ephemeral_ports: Option<(u16, u16)>,
    /// This side opens connections (a client): with more than one shard, each must know which
    /// queue its replies arrive on, so an unpredictable RSS is refused.
    pub opens_connections: bool,
    /// How the process names itself in its one-line messages, e.g. `wirespeed serve`.
    pub log_prefix: &'static str,
    /// AF_XDP: busy poll each socket's queue for this many microseconds (`SO_BUSY_POLL`,
    /// `SO_PREFER_BUSY_POLL`): the shard's own wakeup syscalls run the queue's NAPI, so its
    /// receive work runs on the shard's CPU and not in an interrupt or a NAPI thread (where the
    /// kernel can: not in copy mode on Linux 6.13+, `XskSocket::busy_poll_impossible`). 0: off.
    pub busy_poll_us: u32,
    /// The shards sleep in io_uring when idle (`--engine uring` with `--idle-sleep-us`): where
    /// a socket cannot busy-poll its queue, the ring then polls the queue's NAPI by ID while
    /// the shard waits (`wirespeed_rt::busy_poll_napi`).
    pub waits_in_io_uring: bool,
    /// Congestion control of every connection on our stack (`tcpip::Config::congestion_control`).
    pub congestion_control: CongestionAlgorithm,
}

/// One shard's part: its driver queue, the rx queues it serves besides, and its stack's
/// configuration.
#[derive(Debug)]
pub(crate) struct ShardDevice {
    pub(crate) queue: AnyQueue,
    pub(crate) rx_only: Vec<AnyQueue>,
    pub(crate) stack: StackConfig,
}

/// Errors of the bring-up, each one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum BypassError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Nic(#[from] wirespeed_nic::Error),
}

/// The device, taken over. Dropping it detaches the XDP program (AF_XDP); a DPDK port stops
/// when its last queue is dropped.
#[derive(Debug)]
pub(crate) struct Bypass {
    /// One per shard, in shard order; take them out with `std::mem::take`.
    pub(crate) shards: Vec<ShardDevice>,
    /// What runs where, for the start line, e.g. `AF_XDP on eth1` or `DPDK port net_ring0`.
    pub(crate) description: String,
    /// The interface frames arrive on, for one-line messages: `eth1`, an af_packet vdev's
    /// kernel interface, or a DPDK port's name.
    pub(crate) iface: String,
    /// Facts the operator should see once at start (copy-mode fallbacks).
    pub(crate) notes: Vec<String>,
    _program: Option<Bifurcation>,
}

/// Takes the device over: one queue (and stack configuration) per shard.
pub(crate) fn open(cfg: &BypassConfig) -> Result<Bypass, BypassError> {
    if cfg.shards == 0 {
        return Err(BypassError::Config(
            "the bypass stack needs at least one shard".into(),
        ));
    }
    let mut bypass = match &cfg.device {
        Device::Xdp { iface, scope } => open_xdp(cfg, iface, *scope),
        Device::Dpdk { eal_args } => open_dpdk(cfg, eal_args),
    }?;
    bypass
        .description
        .push_str(&format!(", congestion control {}", cfg.congestion_control));
    Ok(bypass)
}

/// Says on stderr why the bypass stack drops traffic: one line per cause (per new MTU, for a
/// changed one) for the whole process, however many shards see it.
pub(crate) fn tell_drop_cause_once(prefix: &str, cause: DropCause, iface: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static TOLD: AtomicU32 = AtomicU32::new(0);
    static MTU_TOLD: AtomicU32 = AtomicU32::new(0);
    let new = match cause {
        DropCause::LinkMtuChanged { mtu, .. } => MTU_TOLD.swap(mtu, Ordering::Relaxed) != mtu,
        _ => TOLD.fetch_or(cause.bit(), Ordering::Relaxed) & cause.bit() == 0,
    };
    if new {
        eprintln!("{prefix}: {}", cause.explain(iface));
    }
}

fn stack_config(cfg: &BypassConfig, mac: [u8; 6], mtu: usize) -> StackConfig {
    let mut s = StackConfig::new(cfg.ip, cfg.prefix_len, mac, mtu);
    s.gateway = cfg.gateway;
    s.ipv6 = cfg.ipv6;
    s.max_connections = cfg.max_connections;
    s.ephemeral_ports = cfg.ephemeral_ports;
    s.congestion_control = cfg.congestion_control;
    s
}

/// Whether the kernel owns `ip` in this namespace: one of its interfaces holds it. When the
/// list cannot be read, the answer is the cautious one (yes: only the served ports are
/// steered).
fn kernel_owns(ip: IpAddr) -> bool {
    wirespeed_sys::socket::interface_addresses().map_or(true, |all| all.contains(&ip))
}

fn refuse_unpredictable_rss(
    cfg: &BypassConfig,
    model: &RssModel,
    device: &str,
) -> Result<(), BypassError> {
    if let (RssModel::Unknown(why), true) = (model, cfg.opens_connections && cfg.shards > 1) {
        return Err(BypassError::Config(format!(
            "{} shards opening connections need a predictable rx queue per connection, and {device}: {why}; use one shard (--threads 1)",
            cfg.shards
        )));
    }
    Ok(())
}

/// The fewest receive chunks a receive-only socket gets: 8 NAPI polls of 64 frames.
const RX_ONLY_MIN_FRAMES: u32 = 512;

/// AF_XDP on `iface`: the bifurcating program, then one socket per rx queue, the first
/// `cfg.shards` a shard's own and the others receive-only beside them.
fn open_xdp(cfg: &BypassConfig, iface: &str, scope: AttachScope) -> Result<Bypass, BypassError> {
    let info = InterfaceInfo::query(iface)?;
    if cfg.shards as u32 > info.rx_queues {
        return Err(BypassError::Config(format!(
            "{iface} has {} rx queue(s) but {} shards were asked for: use at most {} CPUs/threads",
            info.rx_queues, cfg.shards, info.rx_queues
        )));
    }
    let model = RssModel::for_interface(iface)?;
    refuse_unpredictable_rss(cfg, &model, iface)?;
    let (bcfg, kernel_owned) = bifurcation_config(cfg, &info);
    let mut program = Bifurcation::load(&bcfg)?;
    program.attach(iface, scope)?;
    let mut base = stack_config(cfg, info.mac, info.mtu as usize);
    // A software device (veth, macvlan, ...) hands on the partial checksums of a local sender
    // with checksum offload; hardware never does (docs/TCPIP.md).
    base.accept_partial_checksums = info.partial_checksums_possible();
    let mut notes: Vec<String> = steering_note(cfg, &kernel_owned).into_iter().collect();
    let mut description = format!("AF_XDP on {iface}");
    if info.rx_queues as usize > cfg.shards {
        description.push_str(&format!(
            ", rx queues 0-{} on {} shard(s)",
            info.rx_queues - 1,
            cfg.shards
        ));
    }
    let queues = open_queues(cfg, iface, &info, &mut program, &base, &model)?;
    notes.extend(queues.notes);
    description.push_str(&busy_poll_description(
        cfg,
        queues.busy_poll,
        &queues.napi_ids,
    ));
    description.push_str(&queues.checksums);
    Ok(Bypass {
        shards: queues.shards,
        description,
        iface: iface.to_string(),
        notes,
        _program: Some(program),
    })
}

/// What the bifurcating program steers to the stack, and the served addresses the kernel
/// owns too (then only the served ports come to us).
fn bifurcation_config(
    cfg: &BypassConfig,
    info: &InterfaceInfo,
) -> (BifurcationConfig, Vec<IpAddr>) {
    let mut bcfg = BifurcationConfig::new(cfg.ip);
    bcfg.served_ipv6 = cfg.ipv6.map(|v6| v6.addr);
    // The stack answers for its link-local address too: the EUI-64 of the MAC it sends from,
    // the kernel's own on this interface, which would take what is sent to it otherwise. It
    // is not weighed in `steer_all` below: the kernel always holds it.
    bcfg.served_ipv6_link_local = cfg.ipv6.map(|_| {
        let mac = wirespeed_tcpip::MacAddr(info.mac);
        std::net::Ipv6Addr::from(wirespeed_tcpip::Ipv6Addr::link_local_eui64(mac))
    });
    bcfg.tcp_ports = cfg.tcp_ports.clone();
    bcfg.steer_icmp = cfg.icmp;
    // The kernel must own neither address for the stack to answer as a host does: one
    // program decides for both families.
    let kernel_owned: Vec<IpAddr> = std::iter::once(IpAddr::V4(cfg.ip))
        .chain(cfg.ipv6.map(|v6| IpAddr::V6(v6.addr)))
        .filter(|&a| kernel_owns(a))
        .collect();
    bcfg.steer_all = kernel_owned.is_empty();
    bcfg.steer_fragments = bcfg.steer_all && cfg.shards == 1;
    (bcfg, kernel_owned)
}

/// What the operator should know of the steering: the kernel answers for an address it
/// owns too, or fragments are left to it under several shards.
fn steering_note(cfg: &BypassConfig, kernel_owned: &[IpAddr]) -> Option<String> {
    if !kernel_owned.is_empty() {
        let owned: Vec<String> = kernel_owned.iter().map(|a| a.to_string()).collect();
        Some(format!(
            "the kernel owns {} too: only the served ports come to our stack, and the kernel \
             answers the rest (give --ip an address the kernel does not own to have ours answer \
             everything, as a host does)",
            owned.join(" and ")
        ))
    } else if cfg.shards > 1 {
        Some(format!(
            "IPv4 fragments to {} are not taken with {} shards (RSS may hash a datagram's \
             fragments to another shard than its flow's); run one shard to have them reassembled",
            cfg.ip, cfg.shards
        ))
    } else {
        None
    }
}

/// The sockets of every rx queue, registered with the program, and what they report.
struct XdpQueues {
    shards: Vec<ShardDevice>,
    notes: Vec<String>,
    /// Busy polling as queue 0's socket took it: its time in µs, or why it cannot work.
    busy_poll: Result<u32, String>,
    /// How TCP checksums are completed, for the description.
    checksums: String,
    /// The NAPI IDs of queues whose socket cannot busy-poll them.
    napi_ids: Vec<u32>,
}

/// Opens a socket on each rx queue of `iface` and registers it with `program`: queue N
/// below `cfg.shards` is shard N's own, the others go receive-only to shard N mod shards.
fn open_queues(
    cfg: &BypassConfig,
    iface: &str,
    info: &InterfaceInfo,
    program: &mut Bifurcation,
    base: &StackConfig,
    model: &RssModel,
) -> Result<XdpQueues, BypassError> {
    let (xsk, rx_only_xsk) = xsk_configs(cfg, info.mtu);
    let mut queues = XdpQueues {
        shards: Vec::with_capacity(cfg.shards),
        notes: Vec::new(),
        busy_poll: Ok(0),
        checksums: String::new(),
        napi_ids: Vec::new(),
    };
    for queue in 0..info.rx_queues {
        let own = (queue as usize) < cfg.shards;
        let socket = XskSocket::open(iface, queue, if own { &xsk } else { &rx_only_xsk })?;
        if let (Some(why), true) = (socket.fallback(), own) {
            queues
                .notes
                .push(format!("queue {queue}: copy mode ({why})"));
        }
        // What the kernel took, not what was asked for, and whether it can act on it.
        if queue == 0 {
            queues.busy_poll = match socket.busy_poll_impossible() {
                Some(why) => Err(why.to_string()),
                None => Ok(socket.busy_poll_us()),
            };
            queues.checksums = match socket.tx_checksum_software() {
                None => ", TCP checksums completed by the kernel/NIC".to_string(),
                Some(why) => format!(", TCP checksums in software ({why})"),
            };
        }
        queues.napi_ids.extend(socket.queue_napi_id());
        if !socket.busy_poll_missing().is_empty() {
            queues.notes.push(format!(
                "queue {queue}: busy polling without {} (the kernel refused them)",
                socket.busy_poll_missing().join(", ")
            ));
        }
        program.register(&socket)?;
        if !own {
            let shard: &mut ShardDevice = &mut queues.shards[queue as usize % cfg.shards];
            shard.rx_only.push(AnyQueue::from(socket));
            if let Some(s) = shard.stack.rx_steering.as_mut() {
                s.queues.push(queue);
            }
            continue;
        }
        let mut stack = base.clone();
        stack.rx_steering = Some(RxSteering {
            model: model.clone(),
            queues: vec![queue],
        });
        queues.shards.push(ShardDevice {
            queue: AnyQueue::from(socket),
            rx_only: Vec::new(),
            stack,
        });
    }
    Ok(queues)
}

/// The socket configurations for an interface of MTU `mtu`: a shard's own queue's, and a
/// receive-only queue's.
fn xsk_configs(cfg: &BypassConfig, mtu: u32) -> (XskConfig, XskConfig) {
    // Chunks sized for the interface's MTU: one 2048-byte chunk per frame up to a 1778-byte
    // MTU; above, 4096-byte chunks, chained for frames longer than one (XDP_USE_SG).
    let mut xsk = XskConfig::for_mtu(mtu);
    if cfg.busy_poll_us > 0 {
        xsk.busy_poll = Some(BusyPoll {
            usecs: cfg.busy_poll_us,
            ..BusyPoll::default()
        });
    }
    // Receive-only sockets send nothing: the fewest transmit chunks that hold two frames.
    // Under RSS each carries its share of the flows, so a quarter of a shard's receive
    // chunks (8 NAPI polls of 64 frames) is room enough, and a 64-queue NIC under one shard
    // pins 63 x 1-2 MiB of UMEM (2 or 4 KiB chunks) rather than 63 x 4-8 MiB.
    let rx_only_xsk = XskConfig {
        rx_frames: (xsk.rx_frames / 4).max(RX_ONLY_MIN_FRAMES),
        tx_frames: 8,
        ..xsk.clone()
    };
    (xsk, rx_only_xsk)
}

/// The description's busy-poll part: the socket's, the io_uring's NAPI polling in its
/// place, or why there is none.
fn busy_poll_description(
    cfg: &BypassConfig,
    busy_poll: Result<u32, String>,
    napi_ids: &[u32],
) -> String {
    let ids = napi_ids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let whose = if napi_ids.len() > 1 {
        "queues' NAPIs"
    } else {
        "queue's NAPI"
    };
    match busy_poll {
        Err(why) if napi_ids.is_empty() => format!(", no busy poll ({why})"),
        Err(why) if cfg.waits_in_io_uring => format!(
            ", busy poll {} us of the {whose} {ids} from each shard's io_uring while it waits (not through the socket: {why})",
            cfg.busy_poll_us
        ),
        Err(why) => format!(
            ", no busy poll ({why}; with --engine uring and --idle-sleep-us a waiting shard polls the queue's NAPI by ID)"
        ),
        Ok(0) => String::new(),
        Ok(us) => format!(", busy poll {us} us"),
    }
}

#[cfg(not(feature = "dpdk"))]
fn open_dpdk(_cfg: &BypassConfig, _eal_args: &[String]) -> Result<Bypass, BypassError> {
    Err(BypassError::Config(
        "this wirespeed was built without DPDK: build it with `--features dpdk` (as `make` does)"
            .into(),
    ))
}

#[cfg(feature = "dpdk")]
fn open_dpdk(cfg: &BypassConfig, eal_args: &[String]) -> Result<Bypass, BypassError> {
    use wirespeed_nic::dpdk::{DpdkPort, DpdkPortConfig, Eal};

    let shards = u16::try_from(cfg.shards)
        .map_err(|_| BypassError::Config(format!("{} shards is too many", cfg.shards)))?;
    let mut argv = vec!["wirespeed"];
    argv.extend(eal_args.iter().map(String::as_str));
    let eal = Eal::init(&argv)?;
    let name = match DpdkPort::available(&eal).as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(BypassError::Config(
                "the DPDK EAL found no port: name one in --dpdk-args (--vdev=net_af_packet0,iface=IF, or a PCI device bound to vfio-pci)".into(),
            ))
        }
        many => {
            return Err(BypassError::Config(format!(
                "the DPDK EAL found {} ports ({}): leave exactly one in --dpdk-args",
                many.len(),
                many.join(", ")
            )))
        }
    };
    // An af_packet vdev spreads flows over its queues with the kernel's packet fanout hash,
    // which we cannot predict; other ports' RSS is not modelled yet either.
    let model = RssModel::Unknown(format!(
        "DPDK port {name}: its rx queue choice is not modelled"
    ));
    refuse_unpredictable_rss(cfg, &model, &name)?;
    let pcfg = DpdkPortConfig {
        rx_queues: shards,
        tx_queues: shards,
        ..DpdkPortConfig::default()
    };
    let mut port = DpdkPort::start(&eal, &name, &pcfg)?;
    let mac = port.mac()?;
    // DPDK ports start with the Ethernet MTU; the mbufs hold a 1500-byte frame.
    let mtu = 1500;
    let kernel_iface = af_packet_interface(eal_args, &name);
    // A net_af_packet port reads a kernel interface: where that is a software device (a veth,
    // ...), a local sender's TCP/UDP checksums arrive partial (TX offload on, the default),
    // as they would at XDP; any other port (a PCI NIC) gets complete ones, and a wrong
    // checksum is dropped (docs/TCPIP.md).
    let partial_checksums = match &kernel_iface {
        Some(iface) => InterfaceInfo::query(iface)?.partial_checksums_possible(),
        None => false,
    };
    let mut base = stack_config(cfg, mac, mtu);
    base.accept_partial_checksums = partial_checksums;
    let mut shards_out = Vec::with_capacity(cfg.shards);
    for queue in 0..shards {
        let mut stack = base.clone();
        stack.rx_steering = Some(RxSteering {
            model: model.clone(),
            queues: vec![u32::from(queue)],
        });
        shards_out.push(ShardDevice {
            queue: AnyQueue::from(port.queue(queue)?),
            rx_only: Vec::new(),
            stack,
        });
    }
    let description = match &kernel_iface {
        Some(iface) => format!("DPDK port {name} (af_packet on {iface})"),
        None => format!("DPDK port {name}"),
    };
    Ok(Bypass {
        shards: shards_out,
        description,
        iface: kernel_iface.unwrap_or(name),
        notes: Vec::new(),
        _program: None,
    })
}

/// The kernel interface under DPDK port `port` when it is a net_af_packet vdev given as
/// `--vdev=net_af_packetN,iface=IF,...` or `--vdev net_af_packetN,iface=IF,...`.
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
fn af_packet_interface(eal_args: &[String], port: &str) -> Option<String> {
    let mut vdevs = Vec::new();
    let mut args = eal_args.iter();
    while let Some(a) = args.next() {
        if let Some(v) = a.strip_prefix("--vdev=") {
            vdevs.push(v.to_string());
        } else if a == "--vdev" {
            vdevs.extend(args.next().cloned());
        }
    }
    vdevs.iter().find_map(|v| {
        let mut parts = v.split(',');
        let name = parts.next()?;
        if name != port || !name.starts_with("net_af_packet") {
            return None;
        }
        parts.find_map(|kv| kv.strip_prefix("iface=").map(str::to_string))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_kernel_interface_under_an_af_packet_vdev_is_read_from_the_eal_arguments() {
        let a = args("--no-huge -m 256 --vdev=net_ring0 --vdev=net_af_packet0,iface=wp0,qpairs=1");
        assert_eq!(
            af_packet_interface(&a, "net_af_packet0").as_deref(),
            Some("wp0")
        );
        assert_eq!(af_packet_interface(&a, "net_ring0"), None);
        let a = args("--vdev net_af_packet1,qpairs=2,iface=eth1");
        assert_eq!(
            af_packet_interface(&a, "net_af_packet1").as_deref(),
            Some("eth1")
        );
        assert_eq!(af_packet_interface(&a, "net_af_packet0"), None);
    }

    #[test]
    fn zero_shards_is_refused_before_touching_any_device() {
        let cfg = BypassConfig {
            device: Device::Xdp {
                iface: "does-not-exist".into(),
                scope: AttachScope::LabOnly,
            },
            ip: Ipv4Addr::new(198, 18, 0, 2),
            ipv6: None,
            prefix_len: 24,
            gateway: None,
            shards: 0,
            tcp_ports: vec![8080],
            icmp: true,
            max_connections: 16,
            backlog: 64,
            ephemeral_ports: None,
            opens_connections: false,
            log_prefix: "test",
            busy_poll_us: 0,
            waits_in_io_uring: false,
            congestion_control: CongestionAlgorithm::Cubic,
        };
        let err = open(&cfg).unwrap_err();
        assert!(err.to_string().contains("at least one shard"), "{err}");
    }

    #[test]
    fn a_client_with_several_shards_needs_a_predictable_rss() {
        let mut cfg = BypassConfig {
            device: Device::Dpdk { eal_args: vec![] },
            ip: Ipv4Addr::new(198, 18, 0, 2),
            ipv6: None,
            prefix_len: 24,
            gateway: None,
            shards: 2,
            tcp_ports: vec![],
            icmp: false,
            max_connections: 16,
            backlog: 64,
            ephemeral_ports: None,
            opens_connections: true,
            log_prefix: "test",
            busy_poll_us: 0,
            waits_in_io_uring: false,
            congestion_control: CongestionAlgorithm::Cubic,
        };
        let unknown = RssModel::Unknown("veth".into());
        let err = refuse_unpredictable_rss(&cfg, &unknown, "wp0").unwrap_err();
        assert!(err.to_string().contains("use one shard"), "{err}");
        cfg.opens_connections = false;
        assert!(refuse_unpredictable_rss(&cfg, &unknown, "wp0").is_ok());
        cfg.opens_connections = true;
        cfg.shards = 1;
        assert!(refuse_unpredictable_rss(&cfg, &unknown, "wp0").is_ok());
    }
}
