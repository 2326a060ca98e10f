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

/// `198.18.0.1/24` into the address and the prefix length.
pub fn parse_ip_prefix(ip: &str) -> anyhow::Result<(Ipv4Addr, u8)> {
    let (addr, len) = ip
        .split_once('/')
        .context("--ip must look like 198.18.0.1/24")?;
    Ok((
        addr.parse()
            .with_context(|| format!("--ip: `{addr}` is not an IPv4 address"))?,
        len.parse()
            .ok()
            .filter(|l| *l <= 32)
            .with_context(|| format!("--ip: bad prefix length `{len}`"))?,
    ))
}
