//! `wirespeed showdown --role server|client`: the showdown between two hosts, for users with
//! real NICs. The server host runs `--role server --listen ADDR:PORT`; the load host runs
//! `--role client --peer ADDR:PORT`, which says over a control connection (one JSON object
//! per line) which row runs next:
//!
//! - `{"start":{"row":N,"bpf":true}}`: the server applies the row's settings to the interface
//!   holding ADDR (the tuned profile: only on a lab address or with `--allow-host`), starts
//!   the row's server on ADDR:8080 and prepares its probe; it answers `started` (the command
//!   line, the settings, the data address) or `refused` (one line: why);
//! - `"begin"` / `"end"`: the probe's snapshots at the edges of the measured interval (`end`
//!   answers the probe's report);
//! - `"stop"`: the row's server stops and the interface's settings are written back.
//!
//! The client drives the load from its own host and writes the same table, JSON and charts
//! as the lab showdown. Rows that take over an interface (bypass, load balancer) stay in the
//! one-machine lab.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use wirespeed_lab::napi;
use wirespeed_lab::state;
use wirespeed_lab::topo::{cpu_mask, LabSpec, Profile, Topology};
use wirespeed_probe::{Probe, ProbeOpts, ProbeReport};

use crate::client::{drive, ServerProbe};
use crate::interrupt::check_interrupt;
use crate::plan::{RoundPlan, RoundRun, NGINX_DIR, PORT, SERVER_CPU};
use crate::rows::{ladder, Placement, RowSpec, Server};
use crate::server::{server_command, spawn_until_listening, ServerProc};

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Request {
    Start { row: usize, bpf: bool },
    Begin,
    End,
    Stop,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Reply {
    Started {
        server: String,
        settings: Vec<String>,
        data: SocketAddr,
    },
    Done,
    Report(Box<ProbeReport>),
    Refused(String),
}

/// Rows that cannot run between two hosts, and why.
pub(crate) fn lab_only(spec: &RowSpec) -> Option<String> {
    if spec.shards > 1 {
        return Some("runs only in the one-machine lab (two hosts run one shard)".into());
    }
    matches!(
        spec.server,
        Server::WirespeedXdp { .. } | Server::LoadBalancer { .. }
    )
    .then(|| "runs only in the one-machine lab (it takes over a lab interface)".into())
}

/// The lab's addresses (198.18.0.0/15, fd00::/8): an interface holding one belongs to a lab,
/// whose settings the showdown may change without `--allow-host`.
fn is_lab_addr(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            o[0] == 198 && o[1] & 0xfe == 18
        }
        IpAddr::V6(a) => a.octets()[0] == 0xfd,
    }
}

/// Why the server must not change the interface's settings for a row, if it must not.
fn host_change_refused(
    row: usize,
    spec: &RowSpec,
    iface: &str,
    ip: IpAddr,
    allow_host: bool,
) -> Option<String> {
    (spec.profile == Profile::Tuned && !is_lab_addr(ip) && !allow_host).then(|| {
        format!(
            "row {row} ({}) changes {iface}'s settings (tuned profile): restart the server with --allow-host to allow that (they are written back after each row)",
            spec.name
        )
    })
}

/// The interface holding `ip`, from `ip -o addr show`.
fn iface_of(ip: IpAddr) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(["-o", "addr", "show"])
        .output()
        .context("run `ip -o addr show`")?;
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        // "2: eth0    inet 198.18.0.2/24 brd ..." (the name may carry "@peer")
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 3 && f[3].split('/').next().and_then(|a| a.parse().ok()) == Some(ip) {
            return Ok(f[1].split('@').next().unwrap_or(f[1]).to_string());
        }
    }
    bail!("no interface on this host holds {ip}: --listen takes one of this host's addresses")
}

/// The tuned profile's settings applied to a real interface (the values the lab's tuned
/// profile uses), each recorded by the lab's host state before it is changed and written back
/// on drop, or by `wirespeed lab down --all` after a crash.
///
/// The lab's `napi` receive model stands in for what is done here to a NIC: its queues'
/// interrupts go to the server's CPU (IRQ affinity), so each queue's softirq runs where the
/// server does. An interface without interrupts of its own (a veth, in the two-namespace
/// test) gets what the lab gives it: threaded NAPI pinned to the server's CPU, TSO off.
struct HostTuning {
    notes: Vec<String>,
    /// The NAPI threads this made (virtual interfaces only): the server's receive work.
    napi_threads: Vec<u32>,
}

/// Who the server host's changes belong to in the lab's host state.
const HOST_OWNER: &str = "showdown-host";

/// The interrupts of `iface`'s device (MSI/MSI-X vectors), ascending; empty for a virtual one.
fn device_irqs(iface: &str) -> Vec<u32> {
    let dir = Path::new("/sys/class/net")
        .join(iface)
        .join("device/msi_irqs");
    let mut irqs: Vec<u32> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    irqs.sort_unstable();
    irqs
}

/// The tuned profile's sysfs and /proc writes for `iface` with the server on `cpus`, and the
/// ethtool features it turns on or off.
fn tuned_writes(iface: &str, cpus: &[usize], notes: &mut Vec<String>) -> HostWrites {
    let mut lab = LabSpec::new(HOST_OWNER, Topology::Pair);
    lab.profile = Profile::Tuned;
    // This host is the server, so it is moderated as the lab's tuned rows moderate theirs.
    lab.gro_flush_timeout_ns = crate::rows::MODERATION_GRO_FLUSH_TIMEOUT_NS;
    lab.napi_defer_hard_irqs = crate::rows::MODERATION_DEFER_HARD_IRQS;
    let dev = Path::new("/sys/class/net").join(iface);
    let mut w = HostWrites {
        features: vec![("gro", "on")],
        files: vec![
            (
                dev.join("gro_flush_timeout"),
                lab.gro_flush_timeout_ns.to_string(),
            ),
            (
                dev.join("napi_defer_hard_irqs"),
                lab.napi_defer_hard_irqs.to_string(),
            ),
        ],
        busy_poll_us: lab.busy_poll_us,
    };
    let irqs = device_irqs(iface);
    if irqs.is_empty() {
        // No interrupts to steer: the lab's model, NAPI in threads pinned like an IRQ.
        w.features.push(("tso", "off"));
        w.files.push((dev.join("threaded"), "1".into()));
    } else {
        for (i, irq) in irqs.iter().enumerate() {
            w.files.push((
                PathBuf::from(format!("/proc/irq/{irq}/smp_affinity_list")),
                cpus[i % cpus.len().max(1)].to_string(),
            ));
        }
        if Command::new("pidof")
            .arg("irqbalance")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            notes.push(
                "irqbalance is running and may move the interrupts back: stop it for the run"
                    .into(),
            );
        }
    }
    let mut queues: Vec<String> = std::fs::read_dir(dev.join("queues"))
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    queues.sort();
    for q in queues {
        if let Some(n) = q.strip_prefix("tx-").and_then(|n| n.parse::<usize>().ok()) {
            let cpu = cpus[n % cpus.len().max(1)];
            w.files.push((
                dev.join("queues").join(&q).join("xps_cpus"),
                cpu_mask(&[cpu]),
            ));
        }
    }
    w
}

/// What the tuned profile changes on a host.
struct HostWrites {
    /// ethtool features (short name) and the state they are set to.
    features: Vec<(&'static str, &'static str)>,
    files: Vec<(PathBuf, String)>,
    busy_poll_us: u32,
}

impl HostTuning {
    fn apply(iface: &str, cpus: &[usize]) -> HostTuning {
        let mut t = HostTuning {
            notes: vec![],
            napi_threads: vec![],
        };
        let l = match state::lock() {
            Ok(l) => l,
            Err(e) => {
                t.notes.push(format!("not tuned: {e}"));
                return t;
            }
        };
        let w = tuned_writes(iface, cpus, &mut t.notes);
        for (feature, want) in &w.features {
            t.notes.push(
                match state::set_host_feature(&l, HOST_OWNER, iface, feature, want) {
                    Ok(_) => format!("{iface} {feature} {want}"),
                    Err(e) => format!("{iface} {feature}: not applied ({e})"),
                },
            );
        }
        let napi_before: Vec<u32> = napi::napi_threads().iter().map(|n| n.pid).collect();
        for (path, value) in &w.files {
            t.notes
                .push(match state::set_host_file(&l, HOST_OWNER, path, value) {
                    Ok(old) => format!("{}={value} (was {old})", path.display()),
                    Err(e) => format!("{}: not applied ({e})", path.display()),
                });
        }
        let busy_poll = w.busy_poll_us.to_string();
        t.notes.push(
            match state::set_host_sysctl(&l, HOST_OWNER, "net.core.busy_poll", &busy_poll) {
                Ok(old) => format!("/proc/sys/net/core/busy_poll={busy_poll} (was {old})"),
                Err(e) => format!("/proc/sys/net/core/busy_poll: not applied ({e})"),
            },
        );
        for n in napi::napi_threads() {
            if n.dev == iface && !napi_before.contains(&n.pid) {
                let cpu = cpus[t.napi_threads.len() % cpus.len().max(1)];
                t.napi_threads.push(n.pid);
                t.notes.push(match napi::pin(n.pid, cpu) {
                    Ok(()) => format!("napi {} (pid {}) on CPU {cpu}", n.id, n.pid),
                    Err(e) => format!("napi {} (pid {}): not pinned ({e})", n.id, n.pid),
                });
            }
        }
        t
    }
}

impl Drop for HostTuning {
    fn drop(&mut self) {
        let restored = state::lock().and_then(|l| state::release_host(&l, HOST_OWNER));
        if let Err(e) = restored {
            eprintln!("showdown server: could not write the interface's settings back: {e} (`wirespeed lab down --all` restores them)");
        }
    }
}

/// One JSON object per line over a TCP stream, read with a timeout so that SIGINT is seen.
struct Lines {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Lines {
    fn new(stream: TcpStream) -> anyhow::Result<Lines> {
        stream.set_read_timeout(Some(Duration::from_millis(200)))?;
        stream.set_nodelay(true)?;
        Ok(Lines {
            stream,
            buf: vec![],
        })
    }

    fn send<T: Serialize>(&mut self, msg: &T) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(msg)?;
        line.push('\n');
        self.stream.write_all(line.as_bytes())?;
        Ok(())
    }

    /// The next message, or None when the peer closed the connection.
    fn recv<T: DeserializeOwned>(&mut self) -> anyhow::Result<Option<T>> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(serde_json::from_slice(&line).with_context(|| {
                    format!("bad control message {:?}", String::from_utf8_lossy(&line))
                })?));
            }
            check_interrupt()?;
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// A row running on the server host. Dropped in field order: the probe, the server, then
/// the interface's settings written back.
struct RowOnHost {
    probe: Option<Probe>,
    _server: ServerProc,
    _tuning: Option<HostTuning>,
}

struct Host {
    ip: IpAddr,
    iface: String,
    allow_host: bool,
    log: PathBuf,
}

impl Host {
    fn start(&self, row: usize, bpf: bool) -> anyhow::Result<(RowOnHost, Reply)> {
        let spec = row
            .checked_sub(1)
            .and_then(|i| ladder().into_iter().nth(i))
            .with_context(|| {
                format!(
                    "no row {row} in this server's ladder: run the same wirespeed on both hosts"
                )
            })?;
        if let Some(why) = lab_only(&spec) {
            bail!("row {row} ({}) {why}", spec.name);
        }
        if let Some(why) = host_change_refused(row, &spec, &self.iface, self.ip, self.allow_host) {
            bail!(why);
        }
        if matches!(spec.server, Server::Nginx) && crate::server::which("nginx").is_none() {
            bail!("row {row}: nginx is not installed on the server host");
        }
        let mut settings = vec![format!(
            "server host: interface {}, server CPU {SERVER_CPU}, profile {}",
            self.iface,
            spec.profile.name()
        )];
        let tuning =
            (spec.profile == Profile::Tuned).then(|| HostTuning::apply(&self.iface, &[SERVER_CPU]));
        if let Some(t) = &tuning {
            settings.extend(t.notes.iter().cloned());
        }
        let data = SocketAddr::new(self.ip, PORT);
        let cpus = SERVER_CPU.to_string();
        let (cmd, line) = server_command(
            &spec,
            &cpus,
            &data.to_string(),
            Path::new(NGINX_DIR),
            &|p| Command::new(p),
        )?;
        let logf = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("open {}", self.log.display()))?;
        let server = spawn_until_listening(cmd, &line, data, &self.log, logf, &|| {
            TcpStream::connect_timeout(&data, Duration::from_millis(200)).is_ok()
        })?;
        let probe = Probe::prepare(&ProbeOpts {
            pid: server.pid(),
            cpus: Some(vec![SERVER_CPU]),
            bpf,
            // A NIC's NAPI polls in softirq, which the probe counts on the server's CPU; a
            // virtual interface's threads (tuned rows) are counted by pid.
            receive_threads: tuning.as_ref().map_or(vec![], |t| t.napi_threads.clone()),
        })?;
        Ok((
            RowOnHost {
                probe: Some(probe),
                _server: server,
                _tuning: tuning,
            },
            Reply::Started {
                server: line,
                settings,
                data,
            },
        ))
    }

    /// One client's session: rows one after another until it hangs up.
    fn session(&self, mut lines: Lines) -> anyhow::Result<()> {
        let mut current: Option<RowOnHost> = None;
        while let Some(req) = lines.recv::<Request>()? {
            let reply = match req {
                Request::Start { row, bpf } => {
                    current = None;
                    match self.start(row, bpf) {
                        Ok((r, reply)) => {
                            eprintln!("  row {row} started");
                            current = Some(r);
                            reply
                        }
                        Err(e) => Reply::Refused(format!("{e:#}")),
                    }
                }
                Request::Begin => match current.as_mut().and_then(|r| r.probe.as_mut()) {
                    Some(p) => p
                        .begin()
                        .map_or_else(|e| Reply::Refused(e.to_string()), |()| Reply::Done),
                    None => Reply::Refused("no row is running: send start first".into()),
                },
                Request::End => match current.as_mut().and_then(|r| r.probe.take()) {
                    Some(p) => p.end().map_or_else(
                        |e| Reply::Refused(e.to_string()),
                        |r| Reply::Report(Box::new(r)),
                    ),
                    None => Reply::Refused(
                        "no row is being measured: send start and begin first".into(),
                    ),
                },
                Request::Stop => {
                    current = None;
                    Reply::Done
                }
            };
            lines.send(&reply)?;
        }
        Ok(())
    }
}

/// `--role server`: serves clients one at a time until SIGINT/SIGTERM.
pub(crate) fn serve(listen: SocketAddr, allow_host: bool) -> anyhow::Result<()> {
    let ip = listen.ip();
    let host = Host {
        ip,
        iface: iface_of(ip)?,
        allow_host,
        log: std::env::temp_dir().join("wirespeed-showdown-server.log"),
    };
    let listener = TcpListener::bind(listen).with_context(|| format!("listen on {listen}"))?;
    listener.set_nonblocking(true)?;
    let changes = if is_lab_addr(ip) {
        "a lab address: the tuned rows change its settings and write them back"
    } else if allow_host {
        "--allow-host: the tuned rows change its settings and write them back after each row"
    } else {
        "the tuned rows are refused (they would change its settings; --allow-host allows that)"
    };
    eprintln!(
        "showdown server: control on {listen}; rows' servers on {ip}:{PORT}, interface {} ({changes}); logs in {}; stop with Ctrl-C",
        host.iface,
        host.log.display()
    );
    loop {
        if check_interrupt().is_err() {
            eprintln!("showdown server: stopped");
            return Ok(());
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                stream.set_nonblocking(false)?;
                eprintln!("showdown server: client {peer}");
                match Lines::new(stream).and_then(|l| host.session(l)) {
                    Ok(()) => eprintln!("showdown server: client {peer} done"),
                    Err(e) => eprintln!("showdown server: client {peer}: {e:#}"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e).context("accept a control connection"),
        }
    }
}

/// `--role client`: the control connection to the server host.
pub(crate) struct Control {
    lines: Lines,
    peer: SocketAddr,
}

impl Control {
    pub(crate) fn connect(peer: SocketAddr) -> anyhow::Result<Control> {
        let stream = TcpStream::connect_timeout(&peer, Duration::from_secs(5)).with_context(|| {
            format!("reach the showdown server at {peer} (is `wirespeed showdown --role server --listen {peer}` running there?)")
        })?;
        Ok(Control {
            lines: Lines::new(stream)?,
            peer,
        })
    }

    fn ask(&mut self, req: &Request) -> anyhow::Result<Reply> {
        self.lines.send(req)?;
        match self.lines.recv::<Reply>()? {
            Some(Reply::Refused(why)) => bail!("the server host: {why}"),
            Some(reply) => Ok(reply),
            None => bail!(
                "the showdown server at {} closed the control connection",
                self.peer
            ),
        }
    }

    /// One round of row `row` on the server host.
    pub(crate) fn round(
        &mut self,
        row: usize,
        spec: &RowSpec,
        plan: &RoundPlan,
    ) -> anyhow::Result<RoundRun> {
        let Reply::Started {
            server,
            settings,
            data,
        } = self.ask(&Request::Start { row, bpf: plan.bpf })?
        else {
            bail!("the server host answered start out of turn");
        };
        let IpAddr::V4(addr) = data.ip() else {
            bail!("the load generator speaks IPv4: give the server an IPv4 --listen address");
        };
        let figures = drive(spec, plan, &Placement::for_shards(1), addr, None, self);
        let stopped = self.ask(&Request::Stop);
        let figures = figures?;
        stopped?;
        Ok(RoundRun {
            figures,
            server: format!("{server} (on {})", self.peer.ip()),
            settings,
            // The server host's interface keeps its own MTU (--mtu is the lab's).
            mtu: None,
        })
    }
}

impl ServerProbe for Control {
    fn begin(&mut self) -> anyhow::Result<()> {
        match self.ask(&Request::Begin)? {
            Reply::Done => Ok(()),
            other => bail!("the server host answered begin with {other:?}"),
        }
    }

    fn end(&mut self) -> anyhow::Result<ProbeReport> {
        match self.ask(&Request::End)? {
            Reply::Report(r) => Ok(*r),
            other => bail!("the server host answered end with {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_interfaces_need_allow_host_for_the_tuned_rows() {
        let ladder = ladder();
        let tuned = ladder
            .iter()
            .position(|s| s.profile == Profile::Tuned)
            .unwrap();
        let untuned = ladder
            .iter()
            .position(|s| s.profile != Profile::Tuned)
            .unwrap();
        let host: IpAddr = "192.0.2.7".parse().unwrap();
        let lab: IpAddr = "198.19.3.2".parse().unwrap();
        let why = host_change_refused(tuned + 1, &ladder[tuned], "eth1", host, false).unwrap();
        assert!(why.contains("--allow-host") && why.contains("eth1") && !why.contains('\n'));
        assert!(host_change_refused(tuned + 1, &ladder[tuned], "eth1", host, true).is_none());
        assert!(host_change_refused(tuned + 1, &ladder[tuned], "eth0", lab, false).is_none());
        assert!(host_change_refused(untuned + 1, &ladder[untuned], "eth1", host, false).is_none());
        assert!(is_lab_addr("198.18.0.1".parse().unwrap()));
        assert!(!is_lab_addr("198.20.0.1".parse().unwrap()));
        assert!(is_lab_addr("fd00::2".parse().unwrap()));
        assert!(!is_lab_addr("2001:db8::2".parse().unwrap()));
    }

    #[test]
    fn control_messages_are_one_json_line_each() {
        let line = serde_json::to_string(&Request::Start { row: 2, bpf: true }).unwrap();
        assert_eq!(line, r#"{"start":{"row":2,"bpf":true}}"#);
        assert_eq!(serde_json::to_string(&Request::Stop).unwrap(), r#""stop""#);
        let r: Reply = serde_json::from_str(r#"{"refused":"why"}"#).unwrap();
        assert!(matches!(r, Reply::Refused(w) if w == "why"));
        assert_eq!(cpu_mask(&[1]), "2");
        assert_eq!(cpu_mask(&[0, 3]), "9");
    }
}
