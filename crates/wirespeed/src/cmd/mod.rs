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

/// The bypass device from the command line: `--stack dpdk --dpdk-args ARGS`, or `--stack xdp
/// --iface IF [--allow-host]`. Shared by serve and bench.
pub fn bypass_device(
    dpdk: bool,
    iface: Option<&str>,
    allow_host: bool,
    dpdk_args: Option<&str>,
) -> anyhow::Result<Device> {
    if dpdk {
        let args = dpdk_args.context(
            "--stack dpdk needs --dpdk-args \"EAL ARGS\" naming one port, e.g. \"--no-huge -m 256 --no-pci --vdev=net_af_packet0,iface=IF\"",
        )?;
        return Ok(Device::Dpdk {
            eal_args: args.split_whitespace().map(str::to_string).collect(),
        });
    }
    let iface =
        iface.context("--stack xdp needs --iface IF (the interface to take queues from)")?;
    Ok(Device::Xdp {
        iface: iface.to_string(),
        scope: AttachScope::allow_host(allow_host),
    })
}

/// `--congestion-control NAME`: Linux's names for the algorithms (`reno`, `cubic`); an unknown
/// name is one line that lists them.
pub fn parse_congestion_control(
    name: &str,
) -> Result<wirespeed_net::bypass::CongestionAlgorithm, String> {
    name.parse().map_err(|e| format!("{e}"))
}

/// The addresses our stack serves, from `--ip` given once or twice (one per family), and
/// the routers from `--gateway` (at most one per family).
pub fn parse_served_addresses(
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

/// The IPv4 router among `--gateway`'s.
pub fn ipv4_gateway(gateways: &[std::net::IpAddr]) -> Option<Ipv4Addr> {
    gateways.iter().find_map(|g| match g {
        std::net::IpAddr::V4(a) => Some(*a),
        std::net::IpAddr::V6(_) => None,
    })
}
