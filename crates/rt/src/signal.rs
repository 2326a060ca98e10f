//! SIGINT/SIGTERM handling without a signal handler.
//!
//! The thread that starts the runtime blocks the two signals (the shards inherit the mask) and
//! reads them from a signalfd (`wirespeed_sys::signal`), so no code runs in signal context.
//! The first signal asks every shard to stop; a second one exits at once.

use std::time::Duration;

use wirespeed_sys::signal::Signals;

use crate::error::Error;
use crate::smp::Mesh;

/// How often `wait_until` looks at `done()` between signals.
const POLL: Duration = Duration::from_millis(50);

pub(crate) struct Watcher {
    signals: Signals,
}

impl Watcher {
    pub(crate) fn install() -> Result<Watcher, Error> {
        let signals = Signals::termination().map_err(|source| Error::Io {
            what: "block SIGINT/SIGTERM (signalfd)",
            err: source,
        })?;
        Ok(Watcher { signals })
    }

    /// Waits for signals until `done()` holds, looking at it every 50 ms.
    pub(crate) fn wait_until(&self, mesh: &Mesh, done: impl Fn() -> bool) {
        let mut signals = 0;
        while !done() {
            // A read error leaves the loop to `done()`, as a quiet 50 ms would.
            while let Ok(Some(_)) = self.signals.wait(Some(POLL)) {
                signals += 1;
                if signals == 1 {
                    mesh.request_shutdown();
                } else {
                    eprintln!("second signal: exiting now");
                    std::process::exit(130);
                }
                if done() {
                    return;
                }
            }
        }
    }
}
