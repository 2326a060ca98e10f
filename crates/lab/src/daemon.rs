//! Long-running processes a lab starts in its namespaces (`lb-cluster`'s routing and
//! load-balancer daemons): detached from the command that started them, their output in a log,
//! recorded in the lab's state so that a user or a test can find, stop and start them again.
//! `lab down` kills whatever runs in a lab's namespaces, recorded or not.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Daemon {
    pub role: String,
    /// What it is, e.g. `bgpd`, `lb run`, `exabgp`.
    pub what: String,
    pub pid: u32,
    /// The namespace it runs in.
    pub ns: String,
    /// Its command line (run as `ip netns exec NS ARGV...`).
    pub argv: Vec<String>,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `argv` in namespace `ns`, in a process group of its own (a Ctrl-C meant for the
    /// caller does not reach it), output appended to `log`.
    pub fn start(
        ns: &str,
        role: &str,
        what: &str,
        argv: &[String],
        log: PathBuf,
    ) -> Result<Daemon> {
        let io = |err| Error::Io {
            what: format!("open {}", log.display()),
            err,
        };
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io)?;
        let err = out.try_clone().map_err(io)?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(argv)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|err| Error::Spawn {
                cmd: format!("ip netns exec {ns} {}", argv.join(" ")),
                err,
            })?;
        Ok(Daemon {
            role: role.to_string(),
            what: what.to_string(),
            pid: child.id(),
            ns: ns.to_string(),
            argv: argv.to_vec(),
            log,
        })
    }

    /// The same command again (after it was stopped); the new process.
    pub fn restart(&self) -> Result<Daemon> {
        Daemon::start(
            &self.ns,
            &self.role,
            &self.what,
            &self.argv,
            self.log.clone(),
        )
    }

    /// Whether the process still runs (a zombie does not).
    pub fn alive(&self) -> bool {
        crate::netns::running(self.pid)
    }

    /// The last `lines` lines of its log, for an error message.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}
