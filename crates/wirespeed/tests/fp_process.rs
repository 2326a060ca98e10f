//! `wirespeed fp run` as a process in a `line` lab. SIGTERM detaches everything; SIGKILL (a
//! crash) must leave nothing attached either, because links are never pinned: the kernel
//! detaches the programs when it closes the dead process's files, and traffic goes on
//! through the kernel.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use wirespeed_fp::status::{read_status_file, Status};
use wirespeed_lab::topo::{Lab, LabSpec, Topology};
use wirespeed_lab::Netns;
use wirespeed_testkit::wait::wait_for_every;

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

fn start_daemon(dut: &Netns, status: &Path) -> DaemonProcess {
    let child = Command::new("ip")
        .args(["netns", "exec", dut.name()])
        .arg(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fp", "run", "--status"])
        .arg(status)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn wirespeed fp run");
    DaemonProcess(child)
}

/// Waits (bounded) for `pred`, then returns what satisfied it; panics with `what` otherwise.
fn wait_until<T>(what: &str, pred: impl FnMut() -> Option<T>) -> T {
    wait_for_every(Duration::from_secs(10), Duration::from_millis(20), pred)
        .unwrap_or_else(|| panic!("timed out waiting for: {what}"))
}

fn wait_for_status(status: &Path, what: &str, pred: impl Fn(&Status) -> bool) -> Status {
    wait_until(what, || read_status_file(status).ok().filter(|s| pred(s)))
}

fn fast_pathed(s: &Status) -> u64 {
    s.ports.iter().map(|p| p.fast_pathed).sum()
}

/// Interfaces of the DUT that have an XDP program attached, as `ip link` shows them.
fn with_xdp(dut: &Netns) -> Vec<String> {
    let out = dut.ip(&["-o", "link", "show"]).expect("ip link show");
    out.lines()
        .filter(|l| l.contains(" xdp") || l.contains("prog/xdp"))
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .collect()
}

fn pings(src: &Netns, dst: &str, count: u32) -> bool {
    let c = count.to_string();
    src.exec("ping", &["-c", &c, "-i", "0.01", "-W", "1", "-q", dst])
        .is_ok()
}

/// Starts the daemon, waits until it fast-paths the lab's pings, and returns it.
fn running_and_forwarding(lab: &Lab, status: &Path) -> DaemonProcess {
    let (src, dut) = (lab.ns("src").unwrap(), lab.ns("dut").unwrap());
    let _ = std::fs::remove_file(status);
    let child = start_daemon(dut, status);
    let s = wait_for_status(status, "both ports attached", |s| {
        s.running && s.ports.len() == 2
    });
    let before = fast_pathed(&s);
    assert_eq!(with_xdp(dut).len(), 2, "{:?}", with_xdp(dut));
    // The first packets resolve the neighbours through the kernel; the rest are fast-pathed.
    wait_until("pings fast-pathed", || {
        assert!(
            pings(src, "198.18.2.1", 5),
            "no answer while the daemon runs"
        );
        read_status_file(status)
            .ok()
            .filter(|s| fast_pathed(s) > before)
    });
    child
}

#[test]
fn killed_or_stopped_the_daemon_leaves_the_kernel_forwarding() {
    wirespeed_lab::require_root();
    let name = format!("fk{}", std::process::id() % 10_000);
    let lab = Lab::up(&LabSpec::new(&name, Topology::Line)).expect("lab up");
    // A veth delivers XDP-redirected frames only into a peer that runs NAPI (GRO on).
    for role in ["src", "snk"] {
        lab.ns(role)
            .unwrap()
            .exec("ethtool", &["-K", "eth0", "gro", "on"])
            .unwrap();
    }
    let (src, dut) = (lab.ns("src").unwrap(), lab.ns("dut").unwrap());
    let status = PathBuf::from(format!("/run/wirespeed/fp/test-{name}.json"));
    assert!(
        pings(src, "198.18.2.1", 3),
        "the lab forwards without the daemon"
    );

    // A crash: nothing runs the daemon's clean-up.
    let mut daemon = running_and_forwarding(&lab, &status);
    daemon.0.kill().unwrap();
    assert!(!daemon.0.wait().unwrap().success());
    wait_until("programs detached after SIGKILL", || {
        with_xdp(dut).is_empty().then_some(())
    });
    assert!(
        pings(src, "198.18.2.1", 20),
        "the kernel does not forward after the daemon was killed"
    );
    let stale = read_status_file(&status).expect("the killed daemon's status file");
    let report = Command::new("ip")
        .args(["netns", "exec", dut.name()])
        .arg(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fp", "status", "--json", "--status"])
        .arg(&status)
        .output()
        .unwrap();
    assert!(report.status.success());
    let v: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(v["pid"], stale.pid, "fp status read another file");
    assert_eq!(
        v["running"], false,
        "fp status calls a killed daemon running"
    );

    // A fresh start after the crash attaches again; SIGTERM then detaches and exits 0.
    let mut daemon = running_and_forwarding(&lab, &status);
    wirespeed_sys::process::kill(daemon.0.id(), wirespeed_sys::signal::Signal::Terminate).unwrap();
    let exit = daemon.0.wait().unwrap();
    assert!(exit.success(), "SIGTERM: {exit}");
    assert!(
        with_xdp(dut).is_empty(),
        "still attached after a clean stop: {:?}",
        with_xdp(dut)
    );
    let last = read_status_file(&status).expect("status after stop");
    assert!(!last.running, "a stopped daemon's status says running");
    assert!(
        pings(src, "198.18.2.1", 20),
        "the kernel does not forward after a clean stop"
    );
    let _ = std::fs::remove_file(&status);
    lab.down().unwrap();
}
