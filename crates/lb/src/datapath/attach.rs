//! Attaching the program: which interfaces may take it (lab namespaces only unless
//! allow_host; devices that can transmit XDP frames), and the BPF links that hold it there.

use std::os::fd::{BorrowedFd, OwnedFd};

use wirespeed_netlink::netdev::{self, XDP_ACT_NDO_XMIT};
use wirespeed_netlink::{route, Socket};

use super::loader::Program;
use super::AttachConfig;
use crate::error::Error;
use crate::Result;

const BPF_XDP: u32 = 37; // enum bpf_attach_type
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// An attachment through a BPF link: closing it (on drop) detaches the program.
pub struct Link {
    _link: OwnedFd,
    pub name: String,
    pub ifindex: u32,
}

impl Link {
    /// Attaches `prog` at XDP in driver (native) mode on `ifindex`.
    pub fn xdp(prog: &Program, name: &str, ifindex: u32) -> Result<Link> {
        let link = wirespeed_sys::bpf::link_create(prog.fd(), ifindex, BPF_XDP, XDP_FLAGS_DRV_MODE)
            .map_err(|e| {
                Error::DataPath(format!(
                    "attach XDP (driver mode) to {name}: {e} (does its driver support native XDP? `ip link show {name}`)"
                ))
            })?;
        Ok(Link {
            _link: link,
            name: name.to_string(),
            ifindex,
        })
    }

    /// Attaches any XDP program `prog` on `ifindex` with the XDP mode `flags` (the
    /// decapsulator's, which may fall back to generic mode).
    pub(crate) fn xdp_with_flags(
        prog: BorrowedFd<'_>,
        name: &str,
        ifindex: u32,
        flags: u32,
    ) -> std::io::Result<Link> {
        let link = wirespeed_sys::bpf::link_create(prog, ifindex, BPF_XDP, flags)?;
        Ok(Link {
            _link: link,
            name: name.to_string(),
            ifindex,
        })
    }
}

fn nl(what: &str) -> impl FnOnce(wirespeed_netlink::Error) -> Error + '_ {
    move |e| Error::DataPath(format!("{what}: {e}"))
}

/// An interface the program is to be attached to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub ifindex: u32,
    pub veth: bool,
    /// Its own MAC: the only destination MAC the program forwards or answers frames for.
    pub mac: [u8; 6],
}

/// The interfaces of `cfg`, or the one line that says what to fix.
pub fn check(cfg: &AttachConfig) -> Result<Vec<Iface>> {
    if cfg.ifaces.is_empty() {
        return Err(Error::Invalid("no interface: pass --iface IF".into()));
    }
    let ns = wirespeed_sys::netns::current_lab_namespace();
    if let Err(why) = &ns {
        if !cfg.allow_host {
            return Err(Error::Invalid(format!(
                "refusing to attach outside a lab namespace ({why}): run it as `ip netns exec ws-NAME wirespeed lb run ...`, or pass --allow-host"
            )));
        }
    }
    let mut route_sock = Socket::open(libc::NETLINK_ROUTE).map_err(nl("netlink"))?;
    let links = route::dump_links(&mut route_sock).map_err(nl("list interfaces"))?;
    let mut genl_sock = Socket::open(libc::NETLINK_GENERIC).map_err(nl("generic netlink"))?;
    let family = netdev::family(&mut genl_sock).map_err(nl("netdev family"))?;
    let features: Vec<(u32, Option<u64>)> = netdev::dump_devs(&mut genl_sock, &family)
        .map_err(nl("XDP features"))?
        .into_iter()
        .map(|d| (d.ifindex, d.features.map(|f| f.act)))
        .collect();
    let ns_name = ns.unwrap_or_else(|_| "the host".into());
    let mut out = Vec::new();
    for name in &cfg.ifaces {
        let Some(link) = links.iter().find(|l| &l.name == name) else {
            return Err(Error::Invalid(format!(
                "no interface {name} in {ns_name}: `ip link show` lists them"
            )));
        };
        let xmit = features
            .iter()
            .find(|(i, _)| *i == link.index)
            .and_then(|(_, f)| *f)
            .is_some_and(|f| f & XDP_ACT_NDO_XMIT != 0);
        if !xmit {
            return Err(Error::Invalid(if link.kind == "veth" {
                format!(
                    "{name} cannot send XDP frames: its veth peer runs no NAPI; run `{}` (or attach an XDP program to the peer)",
                    crate::doctor::veth_gro_fix(name)
                )
            } else {
                format!(
                    "{name} ({}) cannot send XDP frames (no ndo_xdp_xmit in its driver): use an interface whose driver can",
                    link.kind
                )
            }));
        }
        let Some(mac) = link.mac else {
            return Err(Error::Invalid(format!(
                "{name} ({}) has no Ethernet address: the load balancer serves Ethernet interfaces",
                link.kind
            )));
        };
        out.push(Iface {
            name: name.clone(),
            ifindex: link.index,
            veth: link.kind == "veth",
            mac,
        });
    }
    Ok(out)
}
