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
    /// The longest frame to receive or send, in bytes, when that is more than one chunk
    /// holds (`frame_size - 256`): the socket then binds with `XDP_USE_SG` and chains chunks
    /// (a received frame is gathered into one buffer of this size; a longer one is dropped
    /// and counted in `Stats::rx_oversized`). None: one chunk per frame, no copy.
    pub max_frame: Option<u32>,
    /// Ask the kernel to complete transmitted TCP checksums (AF_XDP TX metadata), where it
    /// does so exactly on every device; see `offload.rs`. Whether it took:
    /// [`XskSocket::tx_checksum_software`](super::XskSocket::tx_checksum_software).
    pub tx_checksum_offload: bool,
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
            max_frame: None,
            tx_checksum_offload: true,
        }
    }
}

/// Bytes the kernel keeps in front of each received frame in a chunk (`XDP_PACKET_HEADROOM`).
const RX_HEADROOM: u32 = 256;

/// Descriptors the kernel takes for one frame in copy mode (`MAX_SKB_FRAGS`).
const MAX_CHUNKS_PER_FRAME: u32 = 17;

impl XskConfig {
    /// A socket for an interface with this MTU: 2048-byte chunks up to a 1778-byte MTU (one
    /// chunk per frame, as before jumbo frames), 4096-byte chunks above, and multi-buffer
    /// frames above 3826 bytes (a 9000-byte MTU takes three chunks per frame).
    pub fn for_mtu(mtu: u32) -> XskConfig {
        let frame = mtu + 14;
        let mut cfg = XskConfig::default();
        if frame > cfg.frame_size - RX_HEADROOM {
            cfg.frame_size = 4096;
        }
        if frame > cfg.frame_size - RX_HEADROOM {
            cfg.max_frame = Some(frame);
        }
        cfg
    }

    /// Chunks in one transmit run when frames span several chunks (multi-buffer), else None.
    /// A run also holds the TX metadata in front of its frame, which shortens every piece
    /// of it by as much (`offload.rs`, `TxRuns::pieces`).
    pub(super) fn chunks_per_frame(&self) -> Option<u32> {
        match self.max_frame {
            Some(max) if max > self.frame_size - RX_HEADROOM => {
                Some(max.div_ceil(self.frame_size - super::offload::TX_METADATA_LEN))
            }
            _ => None,
        }
    }

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
        if let Some(per) = self.chunks_per_frame() {
            if per > MAX_CHUNKS_PER_FRAME || per * 2 > self.tx_frames {
                return Err(Error::Config(format!(
                    "max_frame {} needs {per} chunks of {} bytes per frame: at most \
                     {MAX_CHUNKS_PER_FRAME}, and tx_frames {} must hold two such frames",
                    self.max_frame.unwrap_or(0),
                    self.frame_size,
                    self.tx_frames
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mtu_picks_the_chunk_size_and_multi_buffer_only_when_needed() {
        let shape = |mtu| {
            let c = XskConfig::for_mtu(mtu);
            (c.frame_size, c.max_frame, c.chunks_per_frame())
        };
        assert_eq!(
            shape(1500),
            (2048, None, None),
            "the 1500 path is unchanged"
        );
        assert_eq!(shape(1778), (2048, None, None));
        assert_eq!(shape(1779), (4096, None, None));
        assert_eq!(shape(3826), (4096, None, None));
        assert_eq!(shape(3827), (4096, Some(3841), Some(1)));
        assert_eq!(shape(9000), (4096, Some(9014), Some(3)));
        assert!(XskConfig::for_mtu(9000).validate().is_ok());
    }

    #[test]
    fn a_max_frame_beyond_the_kernels_chain_or_the_tx_pool_is_refused() {
        let too_long = XskConfig {
            frame_size: 4096,
            max_frame: Some(18 * 4096),
            ..XskConfig::default()
        };
        assert!(matches!(too_long.validate(), Err(Error::Config(_))));
        let small_pool = XskConfig {
            tx_frames: 8,
            max_frame: Some(9014),
            ..XskConfig::default()
        };
        assert!(matches!(small_pool.validate(), Err(Error::Config(_))));
        let within_a_chunk = XskConfig {
            max_frame: Some(1500),
            ..XskConfig::default()
        };
        assert_eq!(
            within_a_chunk.chunks_per_frame(),
            None,
            "no chaining needed"
        );
    }
}
