//! `wirespeed lb` as a user runs it: the daemon (`lb run`) on a veth in a lab namespace with
//! the XDP data path attached, ipvsadm commands through its socket, `-L -n` in ipvsadm's
//! layout, `save` -> `-C` -> `restore` -> `save` giving the same text, `doctor` exiting 1 on a
//! problem, and SIGTERM removing the socket and detaching the program.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use wirespeed_lab::netns::{add_addr, Veth};
use wirespeed_lab::Netns;

struct DaemonProcess(Child);

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn lb(ns: &Netns, socket: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.name()])
        .arg(env!("CARGO_BIN_EXE_wirespeed"))
        .arg("lb")
        .args(args)
        .env("WIRESPEED_LB_SOCKET", socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn wirespeed lb");
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn ok(ns: &Netns, socket: &Path, args: &[&str]) -> String {
    let out = lb(ns, socket, args, None);
    assert!(
        out.status.success(),
        "wirespeed lb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn xdp_attached(ns: &Netns, dev: &str) -> bool {
    ns.ip(&["-d", "link", "show", dev])
        .unwrap()
        .contains("prog/xdp")
}

#[test]
fn the_daemon_takes_ipvsadm_commands_saves_restores_and_stops_cleanly() {
    wirespeed_lab::require_root();
    let lbns = Netns::create("ws-lbcli-lb").unwrap();
    let peer = Netns::create("ws-lbcli-c").unwrap();
    let _veth = Veth::create(&lbns, "lb0", &peer, "c0", 1).unwrap();
    add_addr(&lbns, "lb0", "198.18.70.1/24").unwrap();
    add_addr(&peer, "c0", "198.18.70.2/24").unwrap();
    // The veth peer needs NAPI for the program's XDP_TX/redirect; the daemon checks it.
    peer.exec("ethtool", &["-K", "c0", "gro", "on"]).unwrap();
    let dir = PathBuf::from(format!("/tmp/ws-lbcli-{}", std::process::id()));
    let socket = dir.join("lb.sock");

    let out = lb(&lbns, &socket, &["-L", "-n"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("start one with `wirespeed lb run --iface IF`"),
        "{err}"
    );

    let child = Command::new("ip")
        .args(["netns", "exec", lbns.name()])
        .arg(env!("CARGO_BIN_EXE_wirespeed"))
        .args([
            "lb",
            "run",
            "--iface",
            "lb0",
            "--ring-size",
            "251",
            "--drain",
            "0",
            "--socket",
        ])
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn wirespeed lb run");
    let mut daemon = DaemonProcess(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the daemon never opened its socket"
        );
        assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(xdp_attached(&lbns, "lb0"));

    for cmd in [
        "-A -t 198.18.0.10:80 -s mh",
        "-a -t 198.18.0.10:80 -r 198.18.70.2 -g -w 1",
        "-a -t 198.18.0.10:80 -r 198.18.70.3:8080 -m -w 2",
        "-A -u [fd00::10]:53 -s rr",
        "-a -u [fd00::10]:53 -r [fd00::70:4] -i",
    ] {
        ok(&lbns, &socket, &cmd.split(' ').collect::<Vec<_>>());
    }
    let out = lb(&lbns, &socket, &["-A", "-t", "198.18.0.10:80"], None);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "wirespeed: Service already exists: TCP 198.18.0.10:80; change it with -E or remove it with -D\n"
    );
    let list = ok(&lbns, &socket, &["-Ln"]);
    assert_eq!(
        list,
        "IP Virtual Server version 1.2.1 (size=251)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  198.18.0.10:80 mh
  -> 198.18.70.2:80               Route   1      0          0         \n  -> 198.18.70.3:8080             Masq    2      0          0         \nUDP  [fd00::10]:53 rr
  -> [fd00::70:4]:53              Tunnel  1      0          0         \n"
    );
    let saved = ok(&lbns, &socket, &["save"]);
    assert_eq!(
        saved,
        "-A -t 198.18.0.10:80 -s mh
-a -t 198.18.0.10:80 -r 198.18.70.2:80 -g -w 1
-a -t 198.18.0.10:80 -r 198.18.70.3:8080 -m -w 2
-A -u [fd00::10]:53 -s rr
-a -u [fd00::10]:53 -r [fd00::70:4]:53 -i -w 1
"
    );
    ok(&lbns, &socket, &["-C"]);
    assert!(ok(&lbns, &socket, &["save"]).is_empty());
    let out = lb(&lbns, &socket, &["restore"], Some(&saved));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ok(&lbns, &socket, &["save"]), saved);

    // Nothing answers at 198.18.70.3 or fd00::70:4: doctor says so and exits 1.
    let out = lb(&lbns, &socket, &["doctor"], None);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("no neighbour for 198.18.70.3 on lb0: ping -c1 198.18.70.3"),
        "{text}"
    );

    // SIGTERM: the daemon detaches and removes its socket.
    let pid = daemon.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = daemon.0.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!socket.exists());
    assert!(!xdp_attached(&lbns, "lb0"));
    let _ = std::fs::remove_dir(&dir);
}
