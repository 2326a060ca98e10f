//! How a showdown row's server starts: our server on the kernel stack or the bypass stack,
//! or nginx, pinned to the row's server CPUs (`Placement`), and stopped when dropped.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use wirespeed_lab::topo::Lab;
use wirespeed_sys::process;
use wirespeed_sys::signal::{CommandExt as _, Signal};

use crate::interrupt::check_interrupt;
use crate::plan::PORT;
use crate::rows::{RowSpec, Server, BYPASS_IDLE_SLEEP_US};

/// The binary that starts the rows' servers: this process's own (`wirespeed showdown`), or in
/// this crate's unit tests (whose process is the test harness,
/// `target/PROFILE/deps/wirespeed_showdown-HASH`) the `wirespeed` that cargo built beside them.
fn wirespeed_exe() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    if !cfg!(test) {
        return Ok(exe);
    }
    let built = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("wirespeed"))
        .filter(|bin| bin.is_file())
        .context("no wirespeed binary beside the test harness: build it first (`cargo build -p wirespeed`, with the same profile)")?;
    Ok(built)
}

/// A running server process, stopped (SIGINT, then SIGKILL) on drop.
pub(crate) struct ServerProc {
    pub(crate) child: Child,
}

impl ServerProc {
    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = process::kill(self.child.id(), Signal::Interrupt);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_conf(dir: &Path, listen: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir.join("logs"))?;
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\nmaster_process off;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/logs/error.log;\n\
             events {{ worker_connections 4096; }}\nhttp {{\n  access_log off;\n  keepalive_requests 100000000;\n  \
             client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n  fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp;\n  \
             scgi_temp_path {d}/tmp;\n  server {{\n    listen {listen};\n    location /plaintext {{ default_type text/plain; return 200 \"Hello, World!\"; }}\n  \
             }}\n}}\n",
            d = dir.display()
        ),
    )?;
    std::fs::create_dir_all(dir.join("tmp"))?;
    Ok(conf)
}

/// The command line of a row whose server is ours on the kernel stack or nginx, on `cpus` (a
/// `--cpus` list: one shard on each), listening on `listen`, made with `command` (in the lab: `ip netns exec` into the server namespace; on
/// a server host: plainly). The bypass and load balancer rows are lab-only (`start_server`).
pub(crate) fn server_command(
    spec: &RowSpec,
    cpus: &str,
    listen: &str,
    workdir: &Path,
    command: &dyn Fn(&str) -> Command,
) -> anyhow::Result<(Command, String)> {
    Ok(match &spec.server {
        Server::Wirespeed {
            app,
            engine,
            poll_us,
            busy_poll_us,
            locality,
        } => {
            let exe = wirespeed_exe()?;
            let args: Vec<String> = vec![
                "serve".into(),
                app.to_string(),
                "--stack".into(),
                "kernel".into(),
                "--cpus".into(),
                cpus.to_string(),
                "--listen".into(),
                listen.to_string(),
                "--engine".into(),
                engine.to_string(),
                "--poll-us".into(),
                poll_us.to_string(),
                "--busy-poll-us".into(),
                busy_poll_us.to_string(),
                "--locality".into(),
                locality.to_string(),
            ];
            let mut c = command(exe.to_str().context("binary path")?);
            c.args(&args);
            (c, format!("wirespeed {}", args.join(" ")))
        }
        Server::Nginx => {
            let conf = nginx_conf(workdir, listen)?;
            let mut c = command("taskset");
            c.args(["-c", cpus, "nginx", "-c"])
                .arg(&conf)
                .arg("-p")
                .arg(workdir);
            (
                c,
                format!("taskset -c {cpus} nginx (1 worker, master_process off, access_log off)"),
            )
        }
        Server::WirespeedXdp { .. } | Server::LoadBalancer { .. } => bail!(
            "row `{}` takes over a lab interface: it runs only in the one-machine lab",
            spec.name
        ),
    })
}

/// Starts the row's server on `cpus` (on the lab as its profile left it).
pub(crate) fn start_server(
    spec: &RowSpec,
    cpus: &str,
    lab: &Lab,
    log: &Path,
    workdir: &Path,
) -> anyhow::Result<(ServerProc, String)> {
    let ns = lab.ns("s").context("lab has no server node")?;
    let addr = serve_addr(spec, lab)?;
    let listen = format!("{addr}:{PORT}");
    let logf = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("open {}", log.display()))?;
    let (cmd, line) = match &spec.server {
        Server::Wirespeed { .. } | Server::Nginx => {
            server_command(spec, cpus, &listen, workdir, &|prog| ns.command(prog))?
        }
        Server::WirespeedXdp { app, busy_poll_us } => {
            let exe = wirespeed_exe()?;
            let iface = lab
                .node("s")
                .and_then(|n| n.ifaces.first())
                .map(|i| i.name.clone())
                .context("server interface")?;
            // The same devices as the kernel rows: the profile turned the client's TSO off
            // (and the kernel keeps a veth's TSO off while XDP runs on its peer), its checksum
            // offload stays on, so our stack takes its partial checksums as on any veth, and
            // leaves its own to the kernel through AF_XDP TX metadata where it can.
            let args: Vec<String> = vec![
                "serve".into(),
                app.to_string(),
                "--stack".into(),
                "xdp".into(),
                "--iface".into(),
                iface,
                "--ip".into(),
                format!("{addr}/24"),
                "--cpus".into(),
                cpus.to_string(),
                "--listen".into(),
                listen.clone(),
                "--busy-poll-us".into(),
                busy_poll_us.to_string(),
                "--idle-sleep-us".into(),
                BYPASS_IDLE_SLEEP_US.to_string(),
                // Beside the log: each shard's stack counters, read by the tests.
                "--summary-json".into(),
                log.with_extension("json").display().to_string(),
            ];
            let mut c = ns.command(exe.to_str().context("binary path")?);
            c.args(&args);
            (c, format!("wirespeed {}", args.join(" ")))
        }
        Server::LoadBalancer { .. } => {
            bail!("the load balancer rows start no server (run_row measures them)")
        }
    };
    // Ready when a connection from the client namespace succeeds.
    let target: SocketAddr = listen.parse()?;
    let client = lab.ns("c").context("lab has no client node")?;
    let server = spawn_until_listening(cmd, &line, target, log, logf, &|| {
        client
            .run(move || TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_ok())
            .unwrap_or(false)
    })?;
    Ok((server, line))
}

/// Starts `cmd` (the server `line`, logging to `logf`) and waits until `ready` (a connection
/// to `listen` succeeds), for 10 s at most.
pub(crate) fn spawn_until_listening(
    mut cmd: Command,
    line: &str,
    listen: SocketAddr,
    log: &Path,
    logf: File,
    ready: &dyn Fn() -> bool,
) -> anyhow::Result<ServerProc> {
    let child = cmd
        .unblock_signals()
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .with_context(|| format!("start `{line}`"))?;
    let mut server = ServerProc { child };
    let t = Instant::now();
    loop {
        check_interrupt()?;
        if ready() {
            break;
        }
        if let Ok(Some(st)) = server.child.try_wait() {
            bail!(
                "`{line}` exited with {st} before listening; see {}",
                log.display()
            );
        }
        if t.elapsed() > Duration::from_secs(10) {
            bail!(
                "`{line}` did not accept connections on {listen} within 10 s; see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // ip netns exec and taskset exec the server, so this pid is the server's.
    Ok(server)
}

/// The address the bypass stack serves: the server's subnet, host 100.
fn bypass_addr(kernel_addr: std::net::Ipv4Addr) -> std::net::Ipv4Addr {
    let o = kernel_addr.octets();
    std::net::Ipv4Addr::new(o[0], o[1], o[2], 100)
}

/// Where the row's server answers.
pub(crate) fn serve_addr(spec: &RowSpec, lab: &Lab) -> anyhow::Result<std::net::Ipv4Addr> {
    let kernel = lab
        .node("s")
        .and_then(|n| n.addr4())
        .context("server address")?;
    Ok(match spec.server {
        Server::WirespeedXdp { .. } => bypass_addr(kernel),
        _ => kernel,
    })
}

pub(crate) fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.is_file())
}

/// Why a row cannot run in this machine's lab before it starts: nginx not installed.
pub(crate) fn nginx_missing(spec: &RowSpec) -> Option<String> {
    (matches!(spec.server, Server::Nginx) && which("nginx").is_none())
        .then(|| "nginx is not installed (make deps installs it)".into())
}
