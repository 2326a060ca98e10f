//! Benchmark traffic: a generator that transmits one frame over and over from inside the
//! kernel (BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES, XDP_TX), and a counting XDP sink.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::error::{bpf, io, Error, Result};
use crate::gen_bpf::GenSkelBuilder;
use crate::loader::Attachment;

const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

pub struct Gen {
    tx: OwnedFd,
    sink: OwnedFd,
    count: MapHandle,
}

impl Gen {
    /// Frames are minimum-size: exactly this many bytes.
    pub const FRAME_LEN: usize = 60;

    pub fn load(frame: &[u8; Self::FRAME_LEN]) -> Result<Gen> {
        let mut storage = MaybeUninit::uninit();
        let open = GenSkelBuilder::default()
            .open(&mut storage)
            .map_err(bpf("open gen object"))?;
        open.maps.rodata_data.frame = *frame;
        let skel = open.load().map_err(bpf("load gen programs"))?;
        Ok(Gen {
            tx: skel
                .progs
                .gen_tx
                .as_fd()
                .try_clone_to_owned()
                .map_err(io("dup gen_tx"))?,
            sink: skel
                .progs
                .sink_drop
                .as_fd()
                .try_clone_to_owned()
                .map_err(io("dup sink_drop"))?,
            count: MapHandle::try_from(&skel.maps.sink_count).map_err(bpf("dup sink_count"))?,
        })
    }

    /// Attaches the counting sink at XDP on `ifindex` (calling thread's namespace).
    pub fn attach_sink(&self, ifindex: u32) -> Result<Attachment> {
        Attachment::xdp_fd(self.sink.as_fd(), ifindex)
    }

    /// Frames the sink has counted so far.
    pub fn sink_count(&self) -> Result<u64> {
        let v = self
            .count
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(bpf("read sink count"))?;
        Ok(v.unwrap_or_default()
            .iter()
            .map(|c| u64::from_ne_bytes(c[..8].try_into().unwrap_or([0; 8])))
            .sum())
    }

    /// Transmits `frame` out of `ifindex` (calling thread's namespace) for `dur`, in runs of
    /// `repeat`. Returns the frames handed to the interface. Bounded by `dur`.
    pub fn blast(&self, frame: &[u8], ifindex: u32, dur: Duration) -> Result<u64> {
        let ctx: [u32; 6] = [0, frame.len() as u32, 0, ifindex, 0, 0];
        let repeat: u32 = 1 << 16;
        let mut sent = 0u64;
        let start = Instant::now();
        while start.elapsed() < dur {
            // SAFETY: zeroed is a valid bpf_test_run_opts; the pointers outlive the call.
            let mut opts: libbpf_rs::libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
            opts.sz = std::mem::size_of_val(&opts) as _;
            opts.data_in = frame.as_ptr().cast();
            opts.data_size_in = frame.len() as u32;
            opts.ctx_in = ctx.as_ptr().cast();
            opts.ctx_size_in = std::mem::size_of_val(&ctx) as u32;
            opts.repeat = repeat as i32;
            opts.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
            opts.batch_size = 64;
            // SAFETY: valid program fd and opts as above.
            let rc = unsafe {
                libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(self.tx.as_raw_fd(), &mut opts)
            };
            if rc == -libc::EINTR {
                // a signal cut the run short; how far it got is unknown, so it is not counted
                continue;
            }
            if rc != 0 {
                return Err(Error::Io {
                    what: "BPF_PROG_RUN (live frames)".into(),
                    err: std::io::Error::from_raw_os_error(-rc),
                });
            }
            sent += repeat as u64;
        }
        Ok(sent)
    }
}
