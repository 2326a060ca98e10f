pub mod bench;
pub mod docs;
pub mod fp;
pub mod lab;
pub mod lb;
pub mod probe;
pub mod serve;
pub mod showdown;

use std::net::Ipv4Addr;

use anyhow::Context;
use wirespeed_net::bypass::Device;
use wirespeed_nic::AttachScope;
use wirespeed_sys::signal::Signals;

/// SIGINT and SIGTERM, blocked on the calling thread (and every thread it starts from now on)
/// and read from a signalfd, so no handler runs. Call it on the main thread before any other
/// thread starts, else a thread that does not block them may take the signal.
pub fn block_termination() -> anyhow::Result<Signals> {
    Signals::termination().context("block SIGINT and SIGTERM")
}

/// Waits until SIGINT or SIGTERM arrives on `signals`.
pub fn wait_for_termination(signals: &Signals) -> anyhow::Result<()> {
    signals.wait(None).context("wait for SIGINT or SIGTERM")?;
    Ok(())
}

/// [`block_termination`], then a thread named `name` that waits for the first SIGINT or
/// SIGTERM and runs `on_stop`, which gets the signals to wait for a second one.
pub fn stop_on_signal(
    name: &str,
    on_stop: impl FnOnce(&Signals) + Send + 'static,
) -> anyhow::Result<()> {
    let signals = block_termination()?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = signals.wait(None);
            on_stop(&signals);
        })
        .context("start the thread that waits for SIGINT and SIGTERM")?;
    Ok(())
}

/// The TCP/IP stack that carries the sockets.
#[derive(Clone, Copy, clap::ValueEnum, Debug, PartialEq, Eq)]
pub enum StackArg {
    /// The Linux TCP/IP stack, through epoll or io_uring (--engine).
    Kernel,
    /// Kernel bypass: our TCP/IP stack on an AF_XDP socket per rx queue of --iface (shard i
    /// owns queue i; queues beyond the shard count are shared out among the shards); an XDP
    /// program sends only --ip's traffic (serve: for the served port, and ARP for --ip) to
    /// the shards, everything else stays with the kernel.
    Xdp,
    /// Kernel bypass: our TCP/IP stack on a DPDK port (the one that --dpdk-args gives the
    /// EAL), one queue per shard. Needs a binary built with the `dpdk` feature.
    Dpdk,
}

/// The heading of [`BypassArgs`] in `--help` (per argument: a `next_help_heading` would also
/// cover the flags that follow the flattened group).
const STACK_HEADING: &str = "TCP/IP stack";

/// The stack flags that `serve` and `bench` share: which TCP/IP stack, and for ours
/// (`--stack xdp|dpdk`) the device, its addresses and congestion control.
#[derive(clap::Args, Clone)]
pub struct BypassArgs {
    /// The TCP/IP stack that carries the sockets: the kernel's, or ours over AF_XDP (needs
    /// --iface and --ip) or DPDK (needs --dpdk-args and --ip).
    #[arg(long, help_heading = STACK_HEADING, value_enum, default_value = "kernel")]
    pub stack: StackArg,
    /// --stack xdp: the interface whose rx queues our stack takes over, one per shard (serve:
    /// --cpus; bench: --threads); inside a ws-* lab namespace, or any interface with
    /// --allow-host.
    #[arg(long, help_heading = STACK_HEADING, value_name = "IF")]
    pub iface: Option<String>,
    /// --stack xdp: attach to any interface, the host's own included (off: only inside a
    /// ws-* lab namespace).
    #[arg(long, help_heading = STACK_HEADING)]
    pub allow_host: bool,
    /// --stack dpdk: the EAL's arguments, one string, e.g. `--no-huge -m 256 --no-pci
    /// --vdev=net_af_packet0,iface=eth1` or `-a 0000:3b:00.0`; they must name exactly one port.
    #[arg(long, help_heading = STACK_HEADING, value_name = "ARGS", allow_hyphen_values = true)]
    pub dpdk_args: Option<String>,
    /// --stack xdp|dpdk: our stack's address, with its prefix, e.g. 198.18.0.2/24 (serve
    /// answers for it, bench connects from it); give it twice for IPv6 too (dual stack: serve
    /// answers on both, bench loads IPv6 servers), e.g. --ip 198.18.0.2/24 --ip fd00::2/64.
    /// Give addresses the kernel does not own on that interface, so the two never compete.
    #[arg(long, help_heading = STACK_HEADING, value_name = "ADDR/LEN")]
    pub ip: Vec<String>,
    /// --stack xdp|dpdk: the next hop for destinations outside --ip's prefix; once per
    /// family.
    #[arg(long, help_heading = STACK_HEADING, value_name = "ADDR")]
    pub gateway: Vec<std::net::IpAddr>,
    /// --stack xdp|dpdk: congestion control of our stack's connections, by the names of
    /// Linux's net.ipv4.tcp_congestion_control: cubic (RFC 9438) or reno (NewReno, RFC 5681
    /// and RFC 6582). The default is cubic because it is Linux's default, so our stack and the
    /// kernel's compare like for like; the kernel stack follows that sysctl instead.
    #[arg(long, help_heading = STACK_HEADING, value_name = "NAME", default_value = "cubic", value_parser = parse_congestion_control)]
    pub congestion_control: wirespeed_net::bypass::CongestionAlgorithm,
}

impl BypassArgs {
    /// The bypass device: `--stack dpdk --dpdk-args ARGS`, or `--stack xdp --iface IF
    /// [--allow-host]`.
    pub fn device(&self) -> anyhow::Result<Device> {
        if self.stack == StackArg::Dpdk {
            let args = self.dpdk_args.as_deref().context(
                "--stack dpdk needs --dpdk-args \"EAL ARGS\" naming one port, e.g. \"--no-huge -m 256 --no-pci --vdev=net_af_packet0,iface=IF\"",
            )?;
            return Ok(Device::Dpdk {
                eal_args: args.split_whitespace().map(str::to_string).collect(),
            });
        }
        let iface = self
            .iface
            .as_deref()
            .context("--stack xdp needs --iface IF (the interface to take queues from)")?;
        Ok(Device::Xdp {
            iface: iface.to_string(),
            scope: AttachScope::allow_host(self.allow_host),
        })
    }

    /// The addresses our stack serves, from `--ip` given once or twice (one per family), and
    /// the IPv6 router from `--gateway`.
    pub fn addresses(
        &self,
    ) -> anyhow::Result<(Ipv4Addr, u8, Option<wirespeed_net::bypass::Ipv6Subnet>)> {
        parse_served_addresses(&self.ip, &self.gateway)
    }

    /// The IPv4 router among `--gateway`'s.
    pub fn ipv4_gateway(&self) -> Option<Ipv4Addr> {
        self.gateway.iter().find_map(|g| match g {
            std::net::IpAddr::V4(a) => Some(*a),
            std::net::IpAddr::V6(_) => None,
        })
    }
}

/// `--congestion-control NAME`: Linux's names for the algorithms (`reno`, `cubic`); an unknown
/// name is one line that lists them.
fn parse_congestion_control(
    name: &str,
) -> Result<wirespeed_net::bypass::CongestionAlgorithm, String> {
    name.parse().map_err(|e| format!("{e}"))
}

/// The addresses our stack serves, from `--ip` given once or twice (one per family), and
/// the routers from `--gateway` (at most one per family).
fn parse_served_addresses(
    ips: &[String],
    gateways: &[std::net::IpAddr],
) -> anyhow::Result<(Ipv4Addr, u8, Option<wirespeed_net::bypass::Ipv6Subnet>)> {
    use std::net::IpAddr;
    let mut v4 = None;
    let mut v6 = None;
    for ip in ips {
        let (addr, len) = ip
            .split_once('/')
            .with_context(|| format!("--ip `{ip}` must look like 198.18.0.1/24 or fd00::1/64"))?;
        let addr: IpAddr = addr
            .parse()
            .with_context(|| format!("--ip: `{addr}` is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= max)
            .with_context(|| format!("--ip: bad prefix length `{len}`"))?;
        let slot = match addr {
            IpAddr::V4(a) => v4.replace((a, len)).is_some(),
            IpAddr::V6(a) => v6.replace((a, len)).is_some(),
        };
        if slot {
            anyhow::bail!("--ip: give at most one IPv4 and one IPv6 address");
        }
    }
    let Some((ip, prefix_len)) = v4 else {
        anyhow::bail!(
            "--ip: give an IPv4 address too (ADDR/LEN); our stack does not serve IPv6 alone yet"
        );
    };
    let gateway6 = gateways.iter().find_map(|g| match g {
        IpAddr::V6(a) => Some(*a),
        IpAddr::V4(_) => None,
    });
    if gateway6.is_some() && v6.is_none() {
        anyhow::bail!("--gateway: an IPv6 router needs an IPv6 --ip");
    }
    let ipv6 = v6.map(|(addr, prefix_len)| wirespeed_net::bypass::Ipv6Subnet {
        addr,
        prefix_len,
        gateway: gateway6,
    });
    Ok((ip, prefix_len, ipv6))
}
