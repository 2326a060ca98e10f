//! The twin labs: two identical veth pairs, each between a peer namespace (where the harness
//! injects and captures) and a DUT namespace. Same interface names, MACs and addresses:
//!
//! ```text
//!  twin A:  ws-cf<T>pa [p0 02:77:73:00:00:01] <-> [d0 02:77:73:00:00:02] ws-cf<T>da
//!           wirespeed serve http --stack xdp --ip 198.18.0.2/15 --gateway 198.18.0.1
//!                                            --ip fd00::2/64 --gateway fd00::1
//!  twin B:  ws-cf<T>pb [p0 02:77:73:00:00:01] <-> [d0 02:77:73:00:00:02] ws-cf<T>db
//!           Linux: 198.18.0.2/15 and fd00::2/64 on d0, default via 198.18.0.1 and via
//!           fd00::1, std TcpListeners on 198.18.0.2:8080, [fd00::2]:8080 and
//!           [fe80::77:73ff:fe00:2%d0]:8080 (every address ours answers on)
//! ```
//!
//! Veths at the kernel's defaults; the peers own no address (crafted sources are nobody's,
//! so the peer kernels neither answer nor reset; the peers' IPv6 is off, so their kernels
//! send nothing of their own either). Everything is removed on drop.

use std::net::{Ipv6Addr, SocketAddrV6, TcpListener};
use std::path::{Path, PathBuf};

use wirespeed_lab::Netns;
use wirespeed_sys::packet::PacketSocket;

use crate::craft::{
    ip6_text, DUT_IP, DUT_IP6, DUT_LL6, DUT_MAC, GATEWAY, GATEWAY6, HTTP_PORT, PEER_MAC,
    PREFIX6_LEN, PREFIX_LEN,
};
use crate::responder::Responder;
use crate::serve::ServeProcess;
use crate::Error;

/// Twin B's sysctls the report shows (the kernel's defaults in a new namespace, except the
/// per-device IPv4 settings, which a new namespace copies from the host's; rp_filter is set
/// to the kernel's default 0 so the host's choice does not change the reference).
pub const SHOWN_SYSCTLS: [&str; 21] = [
    "net.ipv4.tcp_ecn",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_dsack",
    "net.ipv4.tcp_challenge_ack_limit",
    "net.ipv4.tcp_invalid_ratelimit",
    "net.ipv4.icmp_echo_ignore_broadcasts",
    "net.ipv4.conf.all.rp_filter",
    "net.ipv4.conf.all.accept_source_route",
    "net.ipv4.conf.all.arp_ignore",
    "net.ipv4.conf.all.arp_accept",
    "net.ipv6.auto_flowlabels",
    "net.ipv6.flowlabel_reflect",
    "net.ipv6.icmp.echo_ignore_multicast",
    "net.ipv6.icmp.ratelimit",
    "net.ipv6.conf.d0.accept_source_route",
    "net.ipv6.conf.d0.seg6_enabled",
    "net.ipv6.conf.d0.accept_ra",
    "net.ipv6.conf.d0.dad_transmits",
];

/// Where the twins run and with what.
#[derive(Debug, Clone)]
pub struct TwinConfig {
    /// The `wirespeed` binary for twin A.
    pub wirespeed: PathBuf,
    /// The CPU of twin A's one shard.
    pub serve_cpu: usize,
}

/// One twin's namespaces (peer first: dropped last).
pub(crate) struct Pair {
    pub(crate) peer: Netns,
    pub(crate) dut: Netns,
}

/// Both twins, up and serving.
pub struct Twins {
    serve: Option<ServeProcess>,
    responder: Option<Responder>,
    responder6: Option<Responder>,
    responder_ll: Option<Responder>,
    // Namespaces last: the processes and sockets in them go first.
    a: Pair,
    b: Pair,
    /// Twin B's settings, as `SHOWN_SYSCTLS` reads.
    pub linux_settings: Vec<(String, String)>,
}

impl Twins {
    pub fn up(cfg: &TwinConfig) -> Result<Twins, Error> {
        if !wirespeed_sys::process::is_root() {
            return Err(Error::Setup(
                "the twins are network namespaces with XDP: run as root (e.g. sudo)".into(),
            ));
        }
        if !cfg.wirespeed.exists() {
            return Err(Error::Setup(format!(
                "{} does not exist: build it (`cargo build --release`) or pass --wirespeed PATH",
                cfg.wirespeed.display()
            )));
        }
        let tag = std::process::id() % 100_000;
        let a = pair(tag, 'a')?;
        let b = pair(tag, 'b')?;
        for p in [&a, &b] {
            // The peer end only carries the harness's frames: no IPv6 of its own (no
            // link-local address, DAD, router solicitations or MLD reports beside a DUT's).
            p.peer
                .sysctl("net.ipv6.conf.p0.disable_ipv6", "1")
                .map_err(lab)?;
        }
        linux_dut(&b.dut)?;
        let linux_settings = SHOWN_SYSCTLS
            .iter()
            .map(|k| {
                let v = b
                    .dut
                    .exec("sysctl", &["-n", k])
                    .unwrap_or_else(|e| e.to_string());
                (k.to_string(), v.trim().to_string())
            })
            .collect();
        let listener = b
            .dut
            .run(|| TcpListener::bind((std::net::Ipv4Addr::from(DUT_IP), HTTP_PORT)))
            .map_err(lab)?
            .map_err(|e| Error::Setup(format!("twin B: listen on 198.18.0.2:{HTTP_PORT}: {e}")))?;
        let responder = Responder::start(listener)
            .map_err(|e| Error::Setup(format!("twin B responder: {e}")))?;
        let serve = serve(&a.dut, &cfg.wirespeed, cfg.serve_cpu)?;
        // Twin B's IPv6 address is usable (and can be bound) once its duplicate address
        // detection is over; our stack's is checked by the run's IPv6 preflight.
        wait_dad(&b.dut)?;
        let listener6 = b
            .dut
            .run(|| TcpListener::bind((std::net::Ipv6Addr::from(DUT_IP6), HTTP_PORT)))
            .map_err(lab)?
            .map_err(|e| Error::Setup(format!("twin B: listen on [fd00::2]:{HTTP_PORT}: {e}")))?;
        let responder6 = Responder::start(listener6)
            .map_err(|e| Error::Setup(format!("twin B responder: {e}")))?;
        // Ours listens on the port on every address it has, its link-local one included.
        let listener_ll = b
            .dut
            .run(|| {
                let scope = wirespeed_sys::packet::if_index("d0")?;
                let at = SocketAddrV6::new(Ipv6Addr::from(DUT_LL6), HTTP_PORT, 0, scope);
                TcpListener::bind(at)
            })
            .map_err(lab)?
            .map_err(|e| Error::Setup(format!("twin B: listen on its link-local address: {e}")))?;
        let responder_ll = Responder::start(listener_ll)
            .map_err(|e| Error::Setup(format!("twin B responder: {e}")))?;
        Ok(Twins {
            serve: Some(serve),
            responder: Some(responder),
            responder6: Some(responder6),
            responder_ll: Some(responder_ll),
            a,
            b,
            linux_settings,
        })
    }

    /// A packet socket on the peer end of twin A (`'a'`) or B (`'b'`).
    pub fn peer_socket(&self, twin: char) -> Result<PacketSocket, Error> {
        let ns = if twin == 'a' {
            &self.a.peer
        } else {
            &self.b.peer
        };
        ns.run(|| PacketSocket::bind("p0"))
            .map_err(lab)?
            .map_err(|e| Error::Setup(format!("AF_PACKET on {}/p0: {e}", ns.name())))
    }

    /// What `wirespeed serve` said so far (for errors and the report).
    pub fn serve_log(&self) -> String {
        self.serve.as_ref().map(|s| s.said()).unwrap_or_default()
    }

    /// Stops twin A's server and returns everything it said (its exit summary included).
    pub fn stop_serve(&mut self) -> String {
        self.serve
            .take()
            .map(ServeProcess::stop)
            .unwrap_or_default()
    }
}

impl Drop for Twins {
    fn drop(&mut self) {
        drop(self.serve.take());
        drop(self.responder.take());
        drop(self.responder6.take());
        drop(self.responder_ll.take());
    }
}

pub(crate) fn lab(e: wirespeed_lab::Error) -> Error {
    Error::Setup(e.to_string())
}

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// One twin's namespaces and veth, MACs set, links up.
pub(crate) fn pair(tag: u32, twin: char) -> Result<Pair, Error> {
    let peer = Netns::create(&format!("ws-cf{tag}p{twin}")).map_err(lab)?;
    let dut = Netns::create(&format!("ws-cf{tag}d{twin}")).map_err(lab)?;
    let (dm, pm) = (mac(DUT_MAC), mac(PEER_MAC));
    dut.ip(&[
        "link",
        "add",
        "d0",
        "address",
        &dm,
        "type",
        "veth",
        "peer",
        "name",
        "p0",
        "address",
        &pm,
        "netns",
        peer.name(),
    ])
    .map_err(lab)?;
    dut.ip(&["link", "set", "d0", "up"]).map_err(lab)?;
    peer.ip(&["link", "set", "p0", "up"]).map_err(lab)?;
    Ok(Pair { peer, dut })
}

/// Twin B's DUT: Linux owns the address, with the default route and rp_filter at 0.
fn linux_dut(dut: &Netns) -> Result<(), Error> {
    let cidr = format!("198.18.0.2/{PREFIX_LEN}");
    dut.ip(&["addr", "add", &cidr, "dev", "d0"]).map_err(lab)?;
    let gw = std::net::Ipv4Addr::from(GATEWAY).to_string();
    dut.ip(&["route", "add", "default", "via", &gw])
        .map_err(lab)?;
    for dev in ["all", "default", "d0"] {
        dut.sysctl(&format!("net.ipv4.conf.{dev}.rp_filter"), "0")
            .map_err(lab)?;
    }
    let cidr6 = format!("{}/{PREFIX6_LEN}", ip6_text(DUT_IP6));
    dut.ip(&["-6", "addr", "add", &cidr6, "dev", "d0"])
        .map_err(lab)?;
    dut.ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        &ip6_text(GATEWAY6),
        "dev",
        "d0",
    ])
    .map_err(lab)?;
    Ok(())
}

/// Waits until twin B's addresses on d0 are no longer tentative (duplicate address
/// detection: about a second).
fn wait_dad(dut: &Netns) -> Result<(), Error> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let shown = dut.ip(&["-6", "addr", "show", "dev", "d0"]).map_err(lab)?;
        if shown.contains("dadfailed") {
            return Err(Error::Setup(format!(
                "twin B: duplicate address detection failed: {shown}"
            )));
        }
        if !shown.contains("tentative") && shown.contains("fd00::2/") {
            return Ok(());
        }
        if std::time::Instant::now() > until {
            return Err(Error::Setup(format!(
                "twin B: IPv6 addresses still tentative after 10 s: {shown}"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Starts `wirespeed serve http --stack xdp` in twin A's DUT namespace and waits until it
/// listens.
fn serve(dut: &Netns, bin: &Path, cpu: usize) -> Result<ServeProcess, Error> {
    let cidr = format!("198.18.0.2/{PREFIX_LEN}");
    let gw = std::net::Ipv4Addr::from(GATEWAY).to_string();
    let cidr6 = format!("{}/{PREFIX6_LEN}", ip6_text(DUT_IP6));
    let gw6 = ip6_text(GATEWAY6);
    let listen = format!("198.18.0.2:{HTTP_PORT}");
    let cpu = cpu.to_string();
    let args = [
        "serve",
        "http",
        "--stack",
        "xdp",
        "--iface",
        "d0",
        "--cpus",
        &cpu,
        "--ip",
        &cidr,
        "--gateway",
        &gw,
        "--ip",
        &cidr6,
        "--gateway",
        &gw6,
        "--listen",
        &listen,
        "--idle-sleep-us",
        "200",
    ];
    ServeProcess::start(dut, bin, &args).map_err(|e| Error::Setup(format!("twin A: {e}")))
}
