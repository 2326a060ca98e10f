//! The XDP data path as this crate measures it: the bench's setup turned into services, a plan
//! (Maglev, equal weights) and an attached `XdpDataPlane`, for lb_bench and the showdown's LB
//! rows.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::{Balancer, Mode, Running, Setup};
use wirespeed_lb::datapath::{AttachConfig, XdpDataPlane};
use wirespeed_lb::model::{self, DataPlane, Health, Proto, Real, Scheduler, Service, ServiceKey};

/// Tunnel mode's outer sources: the flow hash picks the host part, so a real's RSS spreads
/// the tunnelled flows as Katran's do.
const TUNNEL_SRC: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 202, 0), 24);

/// `wirespeed lb`'s XDP data path, attached and configured for one setup.
pub struct XdpBalancer;

struct Attached(XdpDataPlane);

impl Running for Attached {
    fn reasons(&self) -> Vec<(String, u64)> {
        self.0
            .stats()
            .map(|s| s.reasons.into_iter().filter(|(_, n)| *n > 0).collect())
            .unwrap_or_default()
    }
}

fn bench_err(e: impl std::fmt::Display) -> crate::Error {
    crate::Error::Invalid(format!("wirespeed lb: {e}"))
}

/// The setup as ipvsadm would configure it: one service per port, every backend a real of
/// weight 1 in the setup's mode, Maglev.
fn services(setup: &Setup) -> Vec<Service> {
    let mode = match setup.mode {
        Mode::Dr => model::Mode::Dr,
        Mode::Tunnel => model::Mode::Tunnel,
        Mode::Nat => model::Mode::Nat,
        Mode::FullNat => model::Mode::FullNat,
    };
    setup
        .services
        .iter()
        .map(|p| Service {
            key: ServiceKey {
                proto: if p.proto == 17 {
                    Proto::Udp
                } else {
                    Proto::Tcp
                },
                vip: SocketAddr::new(IpAddr::V4(setup.vip), p.vport),
            },
            scheduler: Scheduler::Mh,
            reals: setup
                .reals
                .iter()
                .map(|r| Real {
                    addr: SocketAddr::new(IpAddr::V4(*r), p.rport),
                    mode,
                    tunnel: Default::default(),
                    weight: 1,
                    health: Health::Unchecked,
                })
                .collect(),
            laddrs: if mode == model::Mode::FullNat {
                setup.laddrs.iter().map(|a| IpAddr::V4(*a)).collect()
            } else {
                vec![]
            },
            toa: setup.toa && mode == model::Mode::FullNat && p.proto == 6,
            check: None,
        })
        .collect()
}

impl Balancer for XdpBalancer {
    fn describe(&self) -> String {
        "wirespeed lb (XDP, Maglev 65537)".into()
    }

    fn start(&self, setup: &Setup) -> crate::Result<Box<dyn Running>> {
        let cfg = AttachConfig {
            ifaces: setup.ifaces.clone(),
            new_conns_per_sec_per_cpu: setup.new_conns_per_sec_per_cpu,
            tunnel_src_v4: Some(TUNNEL_SRC),
            ..AttachConfig::default()
        };
        let plan =
            wirespeed_lb::plan::build(&services(setup), cfg.ring_size, None).map_err(bench_err)?;
        let mut dp = XdpDataPlane::attach(&cfg).map_err(bench_err)?;
        dp.apply(&plan).map_err(bench_err)?;
        Ok(Box::new(Attached(dp)))
    }
}
