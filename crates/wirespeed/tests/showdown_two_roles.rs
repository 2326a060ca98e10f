//! `wirespeed showdown --role server|client` between two lab namespaces standing in for two
//! hosts: the server role in the `s` namespace of a `pair` lab, the client role in `c`, one
//! short round of an untuned row and a tuned one, end to end (control connection, the row's
//! server, the load, the server's probe, the reports). Root.

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use wirespeed_lab::topo::{Lab, LabSpec, Topology};
use wirespeed_sys::{process, signal::Signal};

const BIN: &str = env!("CARGO_BIN_EXE_wirespeed");

/// The server role, stopped with SIGINT on drop (it writes the interface's settings back).
struct ServerRole(Child);

impl Drop for ServerRole {
    fn drop(&mut self) {
        let _ = process::kill(self.0.id(), Signal::Interrupt);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn client_and_server_roles_run_rows_between_two_namespaces() {
    assert!(
        process::is_root(),
        "this test builds network namespaces: run it as root"
    );
    let mut spec = LabSpec::new("sd2", Topology::Pair);
    spec.cpus.insert("c".into(), vec![0]);
    spec.cpus.insert("s".into(), vec![1]);
    let lab = Lab::up(&spec).expect("lab up");
    let (c, s) = (lab.ns("c").unwrap(), lab.ns("s").unwrap());
    let server_ip = lab.node("s").unwrap().addr4().unwrap();
    let control: SocketAddr = (server_ip, 7070).into();
    let iface = &lab.node("s").unwrap().ifaces[0].name;
    let threaded_path = format!("/sys/class/net/{iface}/threaded");
    let threaded_before = s.exec("cat", &[&threaded_path]).unwrap();
    let tso_before = s.exec("ethtool", &["-k", iface]).unwrap();

    let log = std::env::temp_dir().join(format!("ws-sd2-server-{}.log", std::process::id()));
    let server = ServerRole(
        s.command(BIN)
            .args(["showdown", "--role", "server", "--listen"])
            .arg(control.to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the server role"),
    );
    let t = Instant::now();
    while !c
        .run(move || TcpStream::connect_timeout(&control, Duration::from_millis(200)).is_ok())
        .unwrap()
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the server role did not listen on {control}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let out_dir = std::env::temp_dir().join(format!("ws-sd2-out-{}", std::process::id()));
    // Row 2 (tuned kernel) brings its base row 1 (untuned); row 7 (bypass) is lab-only.
    let client = c
        .command(BIN)
        .args(["showdown", "--role", "client", "--peer"])
        .arg(control.to_string())
        .args([
            "--rows", "2,7", "--rounds", "1", "--warmup", "200ms", "-d", "1s",
        ])
        .args(["-c", "32", "--no-bpf", "--out"])
        .arg(&out_dir)
        .output()
        .expect("run the client role");
    drop(server);
    let server_log = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        client.status.success(),
        "client: {}\nserver: {server_log}",
        String::from_utf8_lossy(&client.stderr)
    );

    // What a user sees (with --nocapture).
    eprintln!(
        "{}{}{server_log}",
        String::from_utf8_lossy(&client.stderr),
        String::from_utf8_lossy(&client.stdout)
    );
    let json = std::fs::read_to_string(out_dir.join("showdown.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let numbers: Vec<u64> = rows.iter().map(|r| r["row"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [1, 2, 7]);
    for r in &rows[..2] {
        assert!(r.get("skipped").is_none(), "{r}");
        assert!(r["rps"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["rounds"].as_array().unwrap().len(), 1);
        // The server host measured its own CPU over the interval.
        assert!(r["server_cpu_pct"].as_f64().unwrap() > 0.0, "{r}");
        let server = r["server"].as_str().unwrap();
        assert!(server.contains("--listen") && server.contains(&server_ip.to_string()));
    }
    // A veth has no interrupts to steer: its queue's NAPI polls in a thread pinned to the
    // server's CPU, as the lab's napi model does.
    let settings = rows[1]["profile_settings"].to_string();
    assert!(
        settings.contains("threaded=1 (was 0)") && settings.contains("on CPU 1"),
        "row 2's settings: {settings}"
    );
    assert!(rows[2]["skipped"]
        .as_str()
        .unwrap()
        .contains("one-machine lab"));
    assert!(out_dir.join("showdown.md").exists() && out_dir.join("showdown.svg").exists());
    let _ = std::fs::remove_dir_all(&out_dir);

    // The server wrote the interface's settings back after the tuned row.
    assert_eq!(s.exec("cat", &[&threaded_path]).unwrap(), threaded_before);
    assert_eq!(s.exec("ethtool", &["-k", iface]).unwrap(), tso_before);
    lab.down().unwrap();
}
