//! `wirespeed lb doctor --peer` as a user runs it: this node's daemon and the peer's are
//! stand-ins (the daemon's command handling over a data plane that keeps nothing, answering on
//! unix sockets), and the peer is given as its socket or as a file of its `-L -n --json`.
//! Nothing is attached and no namespace is made, so it runs unprivileged.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wirespeed_lb::control::{self, Reply, Request, Server};
use wirespeed_lb::daemon::Daemon;
use wirespeed_lb::ipvsadm::parse_args;
use wirespeed_lb::model::{DataPlane, Plan, Stats};

/// Takes every plan and counts nothing.
struct NoDataPath;

impl DataPlane for NoDataPath {
    fn apply(&mut self, _plan: &Plan) -> wirespeed_lb::Result<()> {
        Ok(())
    }
    fn stats(&self) -> wirespeed_lb::Result<Stats> {
        Ok(Stats::default())
    }
    fn zero(&mut self) -> wirespeed_lb::Result<()> {
        Ok(())
    }
}

/// A daemon given `commands`, answering on `socket` until `stop`.
fn stand_in(socket: PathBuf, commands: &[&str], stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let mut daemon = Daemon::new(NoDataPath, 65537).unwrap();
    for c in commands {
        let words: Vec<&str> = c.split_whitespace().collect();
        let reply = daemon.handle(Request::Command(parse_args(&words).unwrap()));
        assert_eq!(reply, Reply::Done { warnings: vec![] }, "{c}");
    }
    let server = Server::bind(&socket).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match server.accept() {
                Some(client) => control::serve_client(client, |req| daemon.handle(req)),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    })
}

fn doctor(socket: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["lb", "doctor", "--socket"])
        .arg(socket)
        .args(args)
        .output()
        .expect("run wirespeed lb doctor")
}

const SERVICE: &str = "-A -t 198.18.100.1:80 -s mh";
const REALS: [&str; 3] = [
    "-a -t 198.18.100.1:80 -r 198.18.2.10:8080 -g -w 1",
    "-a -t 198.18.100.1:80 -r 198.18.2.11:8080 -g -w 2",
    "-a -t 198.18.100.1:80 -r 198.18.2.12:8080 -g -w 3",
];

#[test]
fn doctor_peer_names_each_difference_and_agrees_with_a_node_built_in_another_order() {
    let dir = std::env::temp_dir().join(format!("ws-lb-doctor-peer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let stop = Arc::new(AtomicBool::new(false));
    let (here, same, other) = (
        dir.join("here.sock"),
        dir.join("same.sock"),
        dir.join("other.sock"),
    );
    let here_cmds = [SERVICE, REALS[0], REALS[1], REALS[2]];
    // The same reals added in reverse; another node with one weight changed.
    let same_cmds = [SERVICE, REALS[2], REALS[1], REALS[0]];
    let other_cmds = [
        SERVICE,
        REALS[0],
        "-a -t 198.18.100.1:80 -r 198.18.2.11:8080 -g -w 3",
        REALS[2],
    ];
    let servers = [
        stand_in(here.clone(), &here_cmds, stop.clone()),
        stand_in(same.clone(), &same_cmds, stop.clone()),
        stand_in(other.clone(), &other_cmds, stop.clone()),
    ];

    let agree = doctor(&here, &["--peer", same.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&agree.stdout);
    assert_eq!(
        agree.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&agree.stderr)
    );
    assert_eq!(
        text,
        "doctor: the peer agrees on 1 service, ring size 65537\n"
    );

    // The peer as a file of its listing, as an operator copies it between hosts.
    let listing = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["lb", "-L", "-n", "--json", "--socket"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(listing.status.success());
    let listing_text = String::from_utf8(listing.stdout).unwrap();
    assert!(listing_text.contains("\"table_digest\""), "{listing_text}");
    let file = dir.join("other.json");
    std::fs::write(&file, &listing_text).unwrap();
    let differ = doctor(&here, &["--peer", file.to_str().unwrap()]);
    assert_eq!(differ.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&differ.stdout),
        "service TCP 198.18.100.1:80: real 198.18.2.11:8080 weight 2 here, 3 on the peer: wirespeed lb -e -t 198.18.100.1:80 -r 198.18.2.11:8080 -w 3 here, or -w 2 on the peer\n"
    );
    let json = doctor(&here, &["--peer", other.to_str().unwrap(), "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let found: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(found.as_array().map(Vec::len), Some(1), "{found}");
    assert!(found[0]["fix"]
        .as_str()
        .unwrap()
        .starts_with("wirespeed lb -e"));

    let refused = doctor(
        &here,
        &["--peer", file.to_str().unwrap(), "--real", "198.18.100.1"],
    );
    assert_eq!(
        refused.status.code(),
        Some(2),
        "clap refuses --peer with --real"
    );

    stop.store(true, Ordering::Relaxed);
    for s in servers {
        s.join().unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
