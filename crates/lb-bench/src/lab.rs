//! The `lb` lab as lb_bench uses it: one client, 4 backends, the load balancer's namespace
//! between them, and the addresses every row uses.

use std::net::Ipv4Addr;
use std::sync::Arc;

use wirespeed_lab::napi;
use wirespeed_lab::topo::{self, Lab, LabSpec, Topology};

use super::frames::Addressing;
use super::opts::Opts;
use super::{Mode, ServicePorts, Setup};
use crate::{Error, Result};
use wirespeed_xdpgen::{Gen, Link};

const BACKENDS: usize = 4;
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 200, 1);
const LADDR_NET: Ipv4Addr = Ipv4Addr::new(198, 18, 201, 0);
const LADDRS: u8 = 16;
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 10, 1);
const TCP_PORT: u16 = 80;
const UDP_PORT: u16 = 53;
/// NAT and full-NAT translate the port too, so the checks see that they did.
const REAL_TCP_PORT: u16 = 8080;
const REAL_UDP_PORT: u16 = 5353;

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: what.into(),
        source,
    }
}

fn lab_err(e: wirespeed_lab::Error) -> Error {
    Error::Invalid(format!("lab: {e}"))
}

fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .filter_map(|x| u8::from_str_radix(x, 16).ok())
        .collect();
    v.try_into()
        .map_err(|_| Error::Invalid(format!("bad MAC address `{}`", s.trim())))
}

/// The `lb` lab as lb_bench uses it.
pub(super) struct Bench {
    pub(super) lab: Lab,
    pub(super) lb_ns: String,
    pub(super) backend_ns: Vec<String>,
    pub(super) client_ns: String,
    /// Addressing with the reals on the VIP's ports (DR, tunnel).
    pub(super) same_ports: Addressing,
    ifaces: Vec<String>,
    /// The NAPI kthreads that were there before the lab: never ours to pin.
    napi_before: Vec<u32>,
}

impl Bench {
    pub(super) fn up(opts: &Opts) -> Result<Bench> {
        let _ = topo::down(&opts.lab);
        let napi_before = napi::napi_threads().into_iter().map(|t| t.pid).collect();
        let mut spec = LabSpec::new(&opts.lab, Topology::Lb);
        spec.clients = 1;
        spec.backends = BACKENDS;
        // Two queues per veth: with the generator on two CPUs, each CPU's frames go to a
        // backend's rx queue of their own (a veth picks the queue by the sending CPU), so the
        // lab shares no ring between them.
        spec.queues = 2;
        let lab = Lab::up(&spec).map_err(lab_err)?;
        let ns = |role: &str| -> Result<&wirespeed_lab::netns::Netns> {
            lab.ns(role)
                .ok_or_else(|| Error::Invalid(format!("the lb lab has no {role}")))
        };
        let mac = |role: &str, dev: &str| -> Result<[u8; 6]> {
            parse_mac(
                &ns(role)?
                    .exec("cat", &[&format!("/sys/class/net/{dev}/address")])
                    .map_err(lab_err)?,
            )
        };
        let lb = ns("lb")?;
        // The veths take XDP_TX and redirected frames only while the receiving end runs NAPI:
        // GRO on, as the load balancer's docs ask of its interfaces and their peers.
        let mut ifaces = vec![];
        for i in 0..=BACKENDS {
            let dev = format!("eth{i}");
            lb.exec("ethtool", &["-K", &dev, "gro", "on"])
                .map_err(lab_err)?;
            ifaces.push(dev);
        }
        let mut peers = vec!["c0".to_string()];
        peers.extend((0..BACKENDS).map(|j| format!("b{j}")));
        for p in &peers {
            ns(p)?
                .exec("ethtool", &["-K", "eth0", "gro", "on"])
                .map_err(lab_err)?;
        }
        for key in [
            "net.ipv4.conf.all.rp_filter",
            "net.ipv4.conf.default.rp_filter",
        ] {
            lb.sysctl(key, "0").map_err(lab_err)?;
        }
        // The sinks answer no ARP: the load balancer (and the kernel, for nftables) knows the
        // backends' and the client's MACs from the start.
        let mut reals = vec![];
        for j in 0..BACKENDS {
            let addr = Ipv4Addr::new(198, 18, 100 + j as u8, 1);
            let bmac = mac(&format!("b{j}"), "eth0")?;
            let lmac = mac("lb", &format!("eth{}", j + 1))?;
            lb.ip(&[
                "neigh",
                "replace",
                &addr.to_string(),
                "lladdr",
                &fmt_mac(bmac),
                "dev",
                &format!("eth{}", j + 1),
                "nud",
                "permanent",
            ])
            .map_err(lab_err)?;
            reals.push((addr, bmac, lmac));
        }
        let client_mac = mac("c0", "eth0")?;
        lb.ip(&[
            "neigh",
            "replace",
            &CLIENT.to_string(),
            "lladdr",
            &fmt_mac(client_mac),
            "dev",
            "eth0",
            "nud",
            "permanent",
        ])
        .map_err(lab_err)?;
        let same_ports = Addressing {
            client_mac,
            lb_mac: mac("lb", "eth0")?,
            vip: VIP,
            tcp_port: TCP_PORT,
            udp_port: UDP_PORT,
            reals,
            real_tcp_port: TCP_PORT,
            real_udp_port: UDP_PORT,
            laddr_net: LADDR_NET,
            laddrs: LADDRS,
            client_net: Ipv4Addr::new(198, 18, 10, 0),
            real_net: (Ipv4Addr::new(198, 18, 100, 0), 22),
        };
        Ok(Bench {
            lb_ns: lb.name().to_string(),
            backend_ns: (0..BACKENDS)
                .map(|j| ns(&format!("b{j}")).map(|n| n.name().to_string()))
                .collect::<Result<_>>()?,
            client_ns: ns("c0")?.name().to_string(),
            lab,
            same_ports,
            ifaces,
            napi_before,
        })
    }

    /// Where the backends' receive work runs. A NIC hands a transmitted frame to the wire and
    /// the receiver is another machine; a veth instead runs its peer's receive (NAPI poll,
    /// XDP, the sink) on the CPU that sent the frame, the DUT's core, which then pays for the
    /// receiver too (about 100 ns a frame here). With `Some(cpu)` the backends' veths poll in
    /// threaded NAPI pinned to `cpu`, so the DUT's core pays what it pays on a NIC: the
    /// transmit (the hand-over into the veth's ring). `None` puts the work back on the
    /// sender's CPU (for runs that use every CPU). Returns the kthreads pinned.
    pub(super) fn backends_receive_on(&self, cpu: Option<usize>) -> Result<usize> {
        // The receiver also moderates its "interrupts" as a NIC does: a poll that found
        // work keeps the sender's notifications masked and polls again from a timer on its
        // own CPU (20 µs later, up to 100 times while idle). Without it the receiver drains
        // its ring, sleeps, and every few packets the sender pays a cross-CPU wakeup (an IPI,
        // a VM exit here), which a NIC's transmit never pays: nftables' skbs, sent one by
        // one, paid it about 1 µs a packet.
        let (on, defer, flush) = if cpu.is_some() {
            ("1", "100", "20000")
        } else {
            ("0", "0", "0")
        };
        for ns in &self.backend_ns {
            std::process::Command::new("ip")
                .args(["netns", "exec", ns, "sh", "-c"])
                .arg(format!(
                    "echo {defer} > /sys/class/net/eth0/napi_defer_hard_irqs && \
                     echo {flush} > /sys/class/net/eth0/gro_flush_timeout && \
                     echo {on} > /sys/class/net/eth0/threaded"
                ))
                .status()
                .ok()
                .filter(|s| s.success())
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "could not set threaded NAPI on {ns}'s eth0 (this kernel may lack it)"
                    ))
                })?;
        }
        let Some(cpu) = cpu else {
            return Ok(0);
        };
        // The lab's threads are the `napi/eth0-*` ones that were not there before it.
        let mut pinned = 0;
        for t in napi::napi_threads() {
            if self.napi_before.contains(&t.pid) || t.dev != "eth0" {
                continue;
            }
            pinned += usize::from(napi::pin(t.pid, cpu).is_ok());
        }
        if pinned < self.backend_ns.len() {
            return Err(Error::Invalid(format!(
                "pinned {pinned} backend NAPI threads to CPU {cpu}, want at least {}",
                self.backend_ns.len()
            )));
        }
        Ok(pinned)
    }

    /// The addressing a row of `mode` uses: NAT and full-NAT move the port as well.
    pub(super) fn addressing(&self, mode: Mode) -> Addressing {
        let mut a = self.same_ports.clone();
        if matches!(mode, Mode::Nat | Mode::FullNat) {
            a.real_tcp_port = REAL_TCP_PORT;
            a.real_udp_port = REAL_UDP_PORT;
        }
        a
    }

    pub(super) fn setup(&self, mode: Mode, toa: bool) -> Setup {
        let a = self.addressing(mode);
        Setup {
            ifaces: self.ifaces.clone(),
            mode,
            vip: VIP,
            services: vec![
                ServicePorts {
                    proto: 6,
                    vport: a.tcp_port,
                    rport: a.real_tcp_port,
                },
                ServicePorts {
                    proto: 17,
                    vport: a.udp_port,
                    rport: a.real_udp_port,
                },
            ],
            reals: a.reals.iter().map(|r| r.0).collect(),
            laddrs: a.laddrs(),
            toa,
            new_conns_per_sec_per_cpu: 100_000_000,
        }
    }

    /// Attaches the counting sink to every backend.
    pub(super) fn sinks(&self, gen: &Arc<Gen>) -> Result<Vec<Link>> {
        self.backend_ns
            .iter()
            .map(|ns| {
                let g = gen.clone();
                wirespeed_sys::netns::in_netns(ns, move || -> Result<Link> {
                    let ifindex =
                        wirespeed_sys::packet::if_index("eth0").map_err(io("backend interface"))?;
                    Ok(g.attach_sink(ifindex)?)
                })
                .map_err(io("enter a backend's namespace"))?
            })
            .collect()
    }
}

fn fmt_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
