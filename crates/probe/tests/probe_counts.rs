//! Each probe's figure against an independent count of the same short run: `strace -c` for
//! syscalls, the child's own getrusage for CPU time and context switches, the child's own
//! count of successful receives for locality samples. Needs root (BPF).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wirespeed_probe::{self as probe, ProbeOpts};
use wirespeed_sys::process;

fn require_root() {
    assert!(
        process::is_root(),
        "this test needs root (BPF probes): run it as root, e.g. `sudo make test`"
    );
}

fn within(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

fn rusage() -> process::Usage {
    process::rusage()
}

fn cpu_s(ru: &process::Usage) -> f64 {
    ru.cpu().as_secs_f64()
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ws-probe-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn wait_file(p: &Path, limit: Duration) -> String {
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(p) {
            if s.ends_with('\n') {
                return s;
            }
        }
        assert!(t.elapsed() < limit, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The work each child does between "ready" (probe attached) and "done". Writes its own
/// counts into the done file.
#[test]
#[ignore]
fn child_workload() {
    let Ok(d) = std::env::var("WS_PROBE_CHILD_DIR") else {
        return;
    };
    let d = PathBuf::from(d);
    let mode = std::env::var("WS_PROBE_CHILD_MODE").unwrap();
    std::fs::write(d.join("pid"), format!("{}\n", std::process::id())).unwrap();
    wait_file(&d.join("go"), Duration::from_secs(20));
    let r0 = rusage();
    let counts = match mode.as_str() {
        "syscalls" => {
            for _ in 0..20_000 {
                // One getppid(2) each: std does not cache it.
                std::hint::black_box(std::os::unix::process::parent_id());
            }
            String::new()
        }
        "cpu" => {
            // 0.5 s of CPU, however long a busy machine takes to give it.
            let t = Instant::now();
            let mut x = 0u64;
            while cpu_s(&rusage()) - cpu_s(&r0) < 0.5 && t.elapsed() < Duration::from_secs(10) {
                for _ in 0..100_000 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            }
            for _ in 0..400 {
                std::thread::sleep(Duration::from_micros(200));
            }
            String::new()
        }
        "tcp" => {
            // Pinned to one CPU, both ends in this process over loopback: every packet is
            // handled on the CPU of the task that produces or consumes it.
            let _ = process::set_affinity(&[0]);
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            c.set_nodelay(true).unwrap();
            s.set_nodelay(true).unwrap();
            let mut buf = [0u8; 100];
            let mut recvs = 0u64;
            for _ in 0..2000 {
                c.write_all(&[1u8; 100]).unwrap();
                let mut got = 0;
                while got < 100 {
                    got += s.read(&mut buf[got..]).unwrap();
                    recvs += 1;
                }
                s.write_all(&buf).unwrap();
                let mut got = 0;
                while got < 100 {
                    got += c.read(&mut buf[got..]).unwrap();
                    recvs += 1;
                }
            }
            format!("{recvs}")
        }
        _ => unreachable!(),
    };
    let r1 = rusage();
    std::fs::write(
        d.join("done"),
        format!(
            "{} {} {} {}\n",
            cpu_s(&r1) - cpu_s(&r0),
            r1.voluntary_switches - r0.voluntary_switches,
            r1.involuntary_switches - r0.involuntary_switches,
            if counts.is_empty() {
                "0".into()
            } else {
                counts
            }
        ),
    )
    .unwrap();
    // Stay alive until the probe has read its last /proc snapshot.
    wait_file(&d.join("exit"), Duration::from_secs(20));
}

struct Child {
    dir: PathBuf,
    proc: std::process::Child,
    pid: i32,
}

fn spawn(mode: &str, strace_out: Option<&Path>) -> Child {
    let d = dir(mode);
    let exe = std::env::current_exe().unwrap();
    let args = [
        "--exact",
        "child_workload",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ];
    let mut cmd = match strace_out {
        Some(out) => {
            let mut c = std::process::Command::new("strace");
            c.args(["-f", "-c", "-e", "trace=getppid", "-o"])
                .arg(out)
                .arg(&exe)
                .args(args);
            c
        }
        None => {
            let mut c = std::process::Command::new(&exe);
            c.args(args);
            c
        }
    };
    let proc = cmd
        .env("WS_PROBE_CHILD_DIR", &d)
        .env("WS_PROBE_CHILD_MODE", mode)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn child (strace installed? run `make deps`)");
    let pid = wait_file(&d.join("pid"), Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    Child { dir: d, proc, pid }
}

/// Probes the child from "go" to "done" and returns the report and the child's own counts.
fn probe_child(mut c: Child) -> (probe::ProbeReport, Vec<f64>) {
    let opts = ProbeOpts {
        pid: c.pid,
        cpus: Some(vec![0]),
        bpf: true,
        receive_threads: vec![],
    };
    let dir = c.dir.clone();
    let mut own = vec![];
    let report = probe::measure(&opts, || {
        std::fs::write(dir.join("go"), "go\n").unwrap();
        own = wait_file(&dir.join("done"), Duration::from_secs(60))
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        None
    })
    .unwrap();
    std::fs::write(c.dir.join("exit"), "exit\n").unwrap();
    c.proc.wait().unwrap();
    let _ = std::fs::remove_dir_all(&c.dir);
    (report, own)
}

#[test]
fn syscall_counts_match_strace() {
    require_root();
    let out = std::env::temp_dir().join(format!("ws-strace-{}.txt", std::process::id()));
    let (report, _) = probe_child(spawn("syscalls", Some(&out)));
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    // strace -c: "% time seconds usecs/call calls [errors] syscall"
    let strace_calls: f64 = text
        .lines()
        .find(|l| l.trim_end().ends_with(" getppid"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no getppid line in strace output:\n{text}"));
    assert!(report.bpf_error.is_none(), "{:?}", report.bpf_error);
    let sc = report.syscalls.expect("syscall probe");
    let bpf = *sc.by_name.get("getppid").unwrap_or(&0) as f64;
    eprintln!("getppid: probe {bpf}, strace -c {strace_calls}");
    assert!(
        within(bpf, strace_calls, 0.10),
        "probe {bpf} vs strace {strace_calls}"
    );
    assert!(within(bpf, 20_000.0, 0.10));
}

#[test]
fn cpu_and_context_switches_match_getrusage() {
    require_root();
    let (report, own) = probe_child(spawn("cpu", None));
    let (cpu, vol) = (own[0], own[1]);
    // The figure the probe reports (user + sys + the softirq share it charges), not just its
    // user+sys part: the child does no networking, so getrusage must account for all of it.
    let probe_cpu = report.cpu.total_s;
    eprintln!(
        "cpu: probe {probe_cpu:.3}s vs getrusage {cpu:.3}s; voluntary: probe {} vs getrusage {vol}",
        report.ctx_switches.voluntary
    );
    // /proc counts in 10 ms ticks; 0.5 s of CPU keeps that well within the 10%.
    assert!(
        within(probe_cpu, cpu, 0.10),
        "probe {probe_cpu} vs rusage {cpu}"
    );
    // The probe window also holds the child's wait for "go" and its last sleep: a few more.
    let pv = report.ctx_switches.voluntary as f64;
    assert!(within(pv, vol, 0.10), "probe {pv} vs rusage {vol}");
}

#[test]
fn locality_samples_match_receives_and_are_local_on_one_cpu() {
    require_root();
    let (report, own) = probe_child(spawn("tcp", None));
    let recvs = own[3];
    assert!(report.bpf_error.is_none(), "{:?}", report.bpf_error);
    let l = report.locality.expect("locality probe");
    let rx = (l.rx_local + l.rx_remote) as f64;
    let tx = (l.tx_local + l.tx_remote) as f64;
    eprintln!("locality: rx {rx} samples vs {recvs} receives, tx {tx} samples; {l:?}");
    assert!(
        within(rx, recvs, 0.10),
        "rx samples {rx} vs receives {recvs}"
    );
    // 4000 sends, each one skb on loopback (the first send of each socket is not attributed).
    assert!(within(tx, 4000.0, 0.10), "tx samples {tx}");
    assert_eq!(l.rx_pct, Some(100.0));
    assert_eq!(l.tx_pct, Some(100.0));
}
