//! SIGINT/SIGTERM during a showdown: read between steps, so an interrupted showdown still
//! takes its lab down and writes the host's settings back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use anyhow::bail;
use wirespeed_sys::signal::Signals;

/// SIGINT/SIGTERM, blocked on the main thread before any other thread starts and read from a
/// signalfd between steps, so an interrupted showdown still takes its lab down. The servers it
/// starts unblock them again (`unblock_signals`), so they stop on SIGINT as usual.
static SIGNALS: OnceLock<Signals> = OnceLock::new();
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Keeps `signals` (SIGINT and SIGTERM, already blocked by the caller) to be read between
/// steps.
pub(crate) fn keep(signals: Signals) {
    let _ = SIGNALS.set(signals);
}

pub(crate) fn check_interrupt() -> anyhow::Result<()> {
    if let Some(Ok(Some(_))) = SIGNALS.get().map(Signals::take) {
        INTERRUPTED.store(true, Ordering::SeqCst);
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted; the lab was taken down and host settings restored");
    }
    Ok(())
}
