//! A `wirespeed serve` process in a lab namespace: started, waited for until it listens, its
//! stderr kept, stopped with SIGINT (so that it prints its exit summary) on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wirespeed_lab::Netns;
use wirespeed_sys::signal::Signal;

/// The `wirespeed` binary beside the running program's directory: target/release/wirespeed
/// for target/release/examples/<example>.
pub fn default_wirespeed() -> std::path::PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("wirespeed")))
        .unwrap_or_else(|| std::path::PathBuf::from("target/release/wirespeed"))
}

pub struct ServeProcess {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl ServeProcess {
    /// Runs `bin args` in `ns` and returns once it says "listening on"; an exit before that
    /// is an error carrying what it said.
    pub fn start(ns: &Netns, bin: &Path, args: &[&str]) -> Result<ServeProcess, String> {
        let mut child = ns
            .command(&bin.display().to_string())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let mut err = BufReader::new(child.stderr.take().expect("piped"));
        let mut seen = String::new();
        let mut line = String::new();
        loop {
            line.clear();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.wait();
                let said = seen.trim().replace('\n', " | ");
                return Err(format!("`wirespeed {}` exited: {said}", args.join(" ")));
            }
            seen.push_str(&line);
            if line.contains("listening on") {
                break;
            }
        }
        let log = Arc::new(Mutex::new(seen));
        let kept = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if let Ok(mut l) = kept.lock() {
                    l.push_str(&line);
                }
                line.clear();
            }
        });
        Ok(ServeProcess { child, log })
    }

    /// The process id (`ip netns exec` execs it: the server itself).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it said on stderr so far.
    pub fn said(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Stops it and returns everything it said, its exit summary included.
    pub fn stop(self) -> String {
        let log = self.log.clone();
        drop(self);
        std::thread::sleep(Duration::from_millis(50));
        log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = wirespeed_sys::process::kill(self.child.id(), Signal::Interrupt);
        let _ = self.child.wait();
    }
}
