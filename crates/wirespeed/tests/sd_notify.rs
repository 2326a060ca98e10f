//! The daemons as their systemd units run them: `fp run` and `lb run` in a lab namespace, with
//! nothing but the units' CapabilityBoundingSet (setpriv drops the rest) and `$NOTIFY_SOCKET`
//! pointing at a datagram socket this test holds. Each says READY=1 only once it really serves
//! (fp: programs attached and the status file written; lb: program attached and the control
//! socket answering), and on SIGTERM says STOPPING=1, detaches and exits 0.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wirespeed_fp::status::read_status_file;
use wirespeed_lab::topo::{Lab, LabSpec, Topology};
use wirespeed_lab::Netns;
use wirespeed_sys::process::kill;
use wirespeed_sys::signal::Signal;

/// The daemon's process, killed if a failed assertion leaves it running.
struct DaemonProcess(Child);

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The `+cap,+cap` list for setpriv from the fast path unit's CapabilityBoundingSet.
fn unit_capabilities() -> String {
    let unit =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/systemd/wirespeed-fp.service");
    let text = std::fs::read_to_string(unit).unwrap();
    let caps: Vec<String> = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit has a CapabilityBoundingSet")
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    caps.join(",")
}

/// The service manager's end: a datagram socket in a fresh directory.
struct NotifySocket {
    dir: PathBuf,
    sock: UnixDatagram,
}

impl NotifySocket {
    fn new(tag: &str) -> NotifySocket {
        let dir = std::env::temp_dir().join(format!("ws-notify-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = UnixDatagram::bind(dir.join("notify.sock")).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        NotifySocket { dir, sock }
    }

    fn path(&self) -> PathBuf {
        self.dir.join("notify.sock")
    }

    fn next(&self) -> String {
        let mut buf = [0u8; 512];
        let n = self
            .sock
            .recv(&mut buf)
            .expect("no notification from the daemon within 20 s");
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `wirespeed ARGS` in `ns`, as the unit starts it: bounding set limited, $NOTIFY_SOCKET set.
fn start_as_unit(ns: &Netns, notify: &NotifySocket, args: &[&str]) -> DaemonProcess {
    let bounding = format!("--bounding-set=-all,{}", unit_capabilities());
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "setpriv",
            &bounding,
            "--inh-caps=-all",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_wirespeed"))
        .args(args)
        .env("NOTIFY_SOCKET", notify.path())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the daemon under setpriv");
    DaemonProcess(child)
}

/// Interfaces of `ns` with an XDP program attached.
fn with_xdp(ns: &Netns) -> usize {
    let out = ns.ip(&["-o", "link", "show"]).expect("ip link show");
    out.lines()
        .filter(|l| l.contains(" xdp") || l.contains("prog/xdp"))
        .count()
}

fn stop(daemon: &mut DaemonProcess, notify: &NotifySocket, status_line: &str) {
    kill(daemon.0.id(), Signal::Terminate).unwrap();
    assert_eq!(notify.next(), format!("STOPPING=1\nSTATUS={status_line}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = daemon.0.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "exit after SIGTERM: {exit}");
}

fn lab_with_napi_peers(name: &str) -> Lab {
    let lab = Lab::up(&LabSpec::new(name, Topology::Line)).expect("lab up");
    // A veth delivers XDP-redirected frames only into a peer that runs NAPI (GRO on).
    for role in ["src", "snk"] {
        lab.ns(role)
            .unwrap()
            .exec("ethtool", &["-K", "eth0", "gro", "on"])
            .unwrap();
    }
    lab
}

#[test]
fn fp_run_says_ready_once_attached_and_stopping_on_sigterm() {
    wirespeed_lab::require_root();
    let name = format!("nf{}", std::process::id() % 10_000);
    let lab = lab_with_napi_peers(&name);
    let dut = lab.ns("dut").unwrap();
    let status = PathBuf::from(format!("/run/wirespeed/fp/test-{name}.json"));
    let _ = std::fs::remove_file(&status);
    let notify = NotifySocket::new("fp");
    let status_arg = status.to_str().unwrap();
    let mut daemon = start_as_unit(dut, &notify, &["fp", "run", "--status", status_arg]);

    assert_eq!(notify.next(), "READY=1\nSTATUS=fast path attached");
    // Ready means done: the status is written and the programs are on both ports already.
    let s = read_status_file(&status).expect("the status file at READY=1");
    assert!(s.running && s.ports.len() == 2, "{:?}", s.ports);
    assert_eq!(with_xdp(dut), 2, "programs attached at READY=1");

    stop(&mut daemon, &notify, "detaching the fast path");
    assert_eq!(with_xdp(dut), 0, "programs left attached after SIGTERM");
    let _ = std::fs::remove_file(&status);
}

#[test]
fn lb_run_says_ready_once_its_socket_answers_and_stopping_on_sigterm() {
    wirespeed_lab::require_root();
    let name = format!("nl{}", std::process::id() % 10_000);
    let lab = lab_with_napi_peers(&name);
    let dut = lab.ns("dut").unwrap();
    let notify = NotifySocket::new("lb");
    let socket = notify.dir.join("lb.sock");
    let mut daemon = start_as_unit(
        dut,
        &notify,
        &[
            "lb",
            "run",
            "--iface",
            "eth0",
            "--socket",
            socket.to_str().unwrap(),
            "--ring-size",
            "1021",
            "--conns-per-cpu",
            "1024",
            "--drain",
            "0",
        ],
    );

    assert_eq!(notify.next(), "READY=1\nSTATUS=load balancer attached");
    assert_eq!(with_xdp(dut), 1, "program attached at READY=1");
    let listing = Command::new("ip")
        .args(["netns", "exec", dut.name()])
        .arg(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["lb", "-L", "-n"])
        .env("WIRESPEED_LB_SOCKET", &socket)
        .output()
        .unwrap();
    assert!(
        listing.status.success(),
        "the control socket does not answer at READY=1: {}",
        String::from_utf8_lossy(&listing.stderr)
    );

    stop(&mut daemon, &notify, "detaching the load balancer");
    assert_eq!(with_xdp(dut), 0, "program left attached after SIGTERM");
    assert!(!socket.exists(), "the control socket outlived the daemon");
}
