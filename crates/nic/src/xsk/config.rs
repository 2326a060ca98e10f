//! How an AF_XDP socket is set up: bind mode, busy polling, ring and UMEM sizes.

use crate::{Error, Result};

/// How the socket binds to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindMode {
    /// The kernel copies frames between the driver's buffers and the UMEM. Works on every
    /// driver with XDP (veth included).
    Copy,
    /// The driver DMAs into the UMEM. Fails with [`Error::ZeroCopyUnsupported`] where the
    /// driver cannot (veth cannot).
    ZeroCopy,
    /// Zero-copy where the driver can, else copy; [`XskSocket::fallback`](super::XskSocket::fallback) says why it fell back.
    #[default]
    PreferZeroCopy,
}

/// Busy-poll socket options (`SO_BUSY_POLL`, `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`).
/// With them, the shard's own `recvfrom`/`sendto` wakeups run the driver's NAPI instead of
/// interrupts (pair it with the interface's `napi_defer_hard_irqs` and `gro_flush_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// Microseconds the kernel may busy poll in one syscall.
    pub usecs: u32,
    /// Packets one busy-poll round may process.
    pub budget: u16,
    /// Fail the open when the kernel lacks an option (otherwise a missing option is reported
    /// through [`XskSocket::busy_poll_missing`](super::XskSocket::busy_poll_missing) and ignored).
    pub required: bool,
}

impl Default for BusyPoll {
    fn default() -> Self {
        BusyPoll {
            usecs: 20,
            budget: 64,
            required: false,
        }
    }
}

/// Shape of one AF_XDP socket.
#[derive(Debug, Clone)]
pub struct XskConfig {
    /// Bytes per UMEM chunk: 2048 or 4096 (aligned mode needs a power of two).
    pub frame_size: u32,
    /// Chunks for receiving; also the size of the fill and rx rings (a power of two).
    pub rx_frames: u32,
    /// Chunks for sending; also the size of the tx and completion rings (a power of two).
    pub tx_frames: u32,
    pub mode: BindMode,
    /// Ask the kernel to say when it needs a syscall (saves one per burst when it does not).
    pub need_wakeup: bool,
    pub busy_poll: Option<BusyPoll>,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            frame_size: 2048,
            rx_frames: 2048,
            tx_frames: 2048,
            mode: BindMode::default(),
            need_wakeup: true,
            busy_poll: None,
        }
    }
}

impl XskConfig {
    pub(super) fn validate(&self) -> Result<()> {
        if self.frame_size != 2048 && self.frame_size != 4096 {
            return Err(Error::Config(format!(
                "frame_size {} must be 2048 or 4096",
                self.frame_size
            )));
        }
        for (name, v) in [("rx_frames", self.rx_frames), ("tx_frames", self.tx_frames)] {
            if !v.is_power_of_two() || !(8..=1 << 16).contains(&v) {
                return Err(Error::Config(format!(
                    "{name} {v} must be a power of two in 8..=65536"
                )));
            }
        }
        Ok(())
    }
}
