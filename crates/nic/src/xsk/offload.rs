//! TX checksum offload through AF_XDP TX metadata (`Documentation/networking/xsk-tx-metadata`).
//!
//! The UMEM is registered with `tx_metadata_len` bytes in front of every transmitted frame;
//! a descriptor flagged `XDP_TX_METADATA` points the kernel at a `struct xsk_tx_metadata`
//! there, whose `XDP_TXMD_FLAGS_CHECKSUM` request (`csum_start`, `csum_offset`) makes the
//! frame's skb `CHECKSUM_PARTIAL` in copy mode: the device's checksum offload completes it, or
//! the kernel does in software (`skb_checksum_help`) for a device without one, and a veth hands
//! it on unfinished as it does a local sender's. Either way the stack never sums a payload.
//!
//! A frame chained over chunks (`chain.rs`, MTU above 3826) lies contiguous in its run of
//! chunks, the metadata in front of its first descriptor. An aligned UMEM refuses that: the
//! kernel wants `tx_metadata_len` bytes in front of every descriptor *within its chunk*,
//! continuation descriptors included. So a multi-buffer socket in copy mode registers its
//! UMEM unaligned (`XDP_UMEM_UNALIGNED_CHUNK_FLAG`; its receive strip, `chain.rs`, needs that
//! too), where a descriptor may start anywhere and only has to stay within the UMEM and one
//! chunk's length; the kernel reads the metadata of a frame's first descriptor only. Received
//! descriptors then carry their offset in the top 16 bits of the address (`rx_addr` decodes
//! it) and the fill-ring address they came from in the low 48.
//!
//! Used only where the result is exact on every device: copy mode on Linux 6.18 and later,
//! where the generic transmit path honours the request for every driver (before it, drivers
//! that build skbs without a linear part, virtio-net among them, ignored it and would have
//! sent the partial sum). Zero-copy needs the driver's own metadata support, which is not
//! asked for yet: those sockets, and older kernels, checksum in software as before.

use std::os::fd::RawFd;

use super::XskSocket;
use crate::{Error, Result};

/// Bytes in front of each transmitted frame for its metadata: the kernel's struct is 24 bytes
/// since 6.15 (`flags`, the checksum request, `launch_time`); the length must be a multiple of 8.
pub(super) const TX_METADATA_LEN: u32 = 32;

/// Whether a socket's frames carry checksum requests, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TxChecksum {
    Offloaded,
    Software(String),
}

impl TxChecksum {
    /// Bytes in front of each transmitted frame.
    pub(super) fn head(&self) -> u32 {
        match self {
            TxChecksum::Offloaded => TX_METADATA_LEN,
            TxChecksum::Software(_) => 0,
        }
    }
}

impl XskSocket {
    /// Why transmitted frames carry full checksums instead of a request to complete them
    /// (`FrameIo::tx_checksum_offload`); None when they carry requests.
    pub fn tx_checksum_software(&self) -> Option<&str> {
        match &self.tx_checksum {
            TxChecksum::Offloaded => None,
            TxChecksum::Software(why) => Some(why),
        }
    }

    /// Bytes in front of a transmitted frame for its metadata (0 without offload).
    pub(super) fn tx_head(&self) -> u64 {
        u64::from(self.tx_checksum.head())
    }

    /// The descriptor options for a frame of `len` bytes at `frame_at` whose run or chunk
    /// starts at `base`: a checksum request in the metadata in front of it where it is TCP.
    pub(super) fn tx_options(&mut self, base: u64, frame_at: u64, len: usize) -> u32 {
        if self.tx_head() == 0 {
            return 0;
        }
        let area = self.umem_mut(base, (frame_at - base) as usize + len);
        let (meta, frame) = area.split_at_mut((frame_at - base) as usize);
        request(meta, frame)
    }
}

/// Registers `umem` (`len` bytes at `addr`, chunks of `chunk_size`) on socket `fd`, with room
/// for TX metadata when `wanted` and this kernel completes checksums for every device in this
/// bind mode; a kernel that refuses the metadata gets a registration without it. `unaligned`
/// (`XDP_UMEM_UNALIGNED_CHUNK_FLAG`) holds either way: a socket that chains frames over
/// chunks in copy mode needs it for both the metadata of its chained frames and the receive
/// strip (`chain.rs`).
pub(super) fn register_umem(
    fd: RawFd,
    addr: u64,
    len: u64,
    chunk_size: u32,
    wanted: bool,
    zero_copy: bool,
    unaligned: bool,
) -> Result<TxChecksum> {
    // Every field spelled out, so no padding byte reaches the kernel: kernels before 6.8 read
    // the first 28 bytes, later ones all 32.
    let plain = libc::xdp_umem_reg {
        addr,
        len,
        chunk_size,
        headroom: 0,
        flags: if unaligned {
            libc::XDP_UMEM_UNALIGNED_CHUNK_FLAG
        } else {
            0
        },
        tx_metadata_len: 0,
    };
    let register = |reg: &libc::xdp_umem_reg| wirespeed_sys::xsk::register_umem(&fd, reg);
    let os = |err| Error::Os {
        what: "register UMEM".into(),
        err,
    };
    let why_not = if !wanted {
        Some("not asked for".to_string())
    } else if zero_copy {
        Some("zero-copy: the driver's own TX metadata support is not checked".to_string())
    } else {
        kernel_lacks_copy_mode_offload(&kernel_release())
    };
    if let Some(why) = why_not {
        register(&plain).map_err(os)?;
        return Ok(TxChecksum::Software(why));
    }
    let with_metadata = libc::xdp_umem_reg {
        flags: libc::XDP_UMEM_TX_METADATA_LEN | plain.flags,
        tx_metadata_len: TX_METADATA_LEN,
        ..plain
    };
    match register(&with_metadata) {
        Ok(()) => Ok(TxChecksum::Offloaded),
        // A failed registration leaves the socket without a UMEM, so it can be retried.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            register(&plain).map_err(os)?;
            Ok(TxChecksum::Software(format!(
                "the kernel refused TX metadata ({e})"
            )))
        }
        Err(e) => Err(os(e)),
    }
}

/// A received descriptor's address as a UMEM offset. An unaligned UMEM gives the frame's
/// offset from its buffer in the top 16 bits (see the module docs); an aligned one leaves
/// them 0.
pub(super) fn rx_addr(raw: u64) -> u64 {
    (raw & libc::XSK_UNALIGNED_BUF_ADDR_MASK) + (raw >> libc::XSK_UNALIGNED_BUF_OFFSET_SHIFT)
}

pub(super) fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default()
}

/// None when the kernel `release` (e.g. "6.18.44-fc") completes copy-mode checksum requests
/// on every device; else why not.
fn kernel_lacks_copy_mode_offload(release: &str) -> Option<String> {
    if release_at_least(release, (6, 18)) {
        return None;
    }
    Some(format!(
        "kernel {:?} is older than 6.18, the first to complete copy-mode checksum requests on every device",
        release.trim()
    ))
}

/// Whether the kernel `release` (e.g. "6.18.44-fc") is at least `major.minor`; false when it
/// cannot be read.
pub(super) fn release_at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut numbers = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

/// Writes the checksum request for `frame` (the bytes at `desc->addr`) into the metadata area
/// `meta` in front of it, when the frame is IPv4 TCP; returns the descriptor's option bit.
pub(super) fn request(meta: &mut [u8], frame: &[u8]) -> u32 {
    let Some((start, offset)) = wirespeed_wire::tcp::checksum_offload_at(frame) else {
        return 0;
    };
    // struct xsk_tx_metadata: u64 flags, then the request's u16 csum_start, u16 csum_offset
    // (native byte order, as the kernel reads them).
    meta[0..8].copy_from_slice(&u64::from(libc::XDP_TXMD_FLAGS_CHECKSUM).to_ne_bytes());
    meta[8..10].copy_from_slice(&start.to_ne_bytes());
    meta[10..12].copy_from_slice(&offset.to_ne_bytes());
    libc::XDP_TX_METADATA
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_addresses_decode_the_unaligned_offset_and_leave_aligned_ones_alone() {
        assert_eq!(rx_addr(0x3000 + 256), 0x3000 + 256);
        // Unaligned: buffer 0x3000, frame 256 bytes into it (XDP_PACKET_HEADROOM).
        assert_eq!(rx_addr(0x3000 | (256 << 48)), 0x3000 + 256);
        assert_eq!(rx_addr(u64::MAX), (1 << 48) - 1 + 0xffff);
    }

    #[test]
    fn only_kernels_that_complete_copy_mode_requests_on_every_device_offload() {
        assert_eq!(kernel_lacks_copy_mode_offload("6.18.44-fc-v657\n"), None);
        assert_eq!(kernel_lacks_copy_mode_offload("6.18"), None);
        assert_eq!(kernel_lacks_copy_mode_offload("7.0.0"), None);
        for old in ["6.17.9", "6.1.0-28-amd64", "5.15.0", "", "unknown"] {
            assert!(kernel_lacks_copy_mode_offload(old).is_some(), "{old}");
        }
    }

    #[test]
    fn a_tcp_frame_gets_a_request_and_anything_else_none() {
        let mut frame = vec![0u8; 54];
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame[14] = 0x45;
        frame[23] = 6;
        frame[46] = 0x50;
        let mut meta = [0xaau8; TX_METADATA_LEN as usize];
        assert_eq!(request(&mut meta, &frame), libc::XDP_TX_METADATA);
        assert_eq!(
            u64::from_ne_bytes(meta[0..8].try_into().unwrap()),
            u64::from(libc::XDP_TXMD_FLAGS_CHECKSUM)
        );
        assert_eq!(u16::from_ne_bytes([meta[8], meta[9]]), 34);
        assert_eq!(u16::from_ne_bytes([meta[10], meta[11]]), 16);
        frame[12..14].copy_from_slice(&[0x08, 0x06]);
        let mut untouched = [0xaau8; TX_METADATA_LEN as usize];
        assert_eq!(request(&mut untouched, &frame), 0, "ARP: no request");
        assert_eq!(untouched, [0xaa; TX_METADATA_LEN as usize]);
    }
}
