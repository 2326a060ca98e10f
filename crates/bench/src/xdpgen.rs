//! Benchmark traffic: a generator that transmits one frame over and over from inside the
//! kernel (BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES, XDP_TX), and a counting XDP sink.
//! fp_bench, lb_bench and the showdown's load-balancer row measure with it.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::{Error, Result};

#[allow(
    clippy::all,
    missing_docs,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    unused,
    unsafe_code // the generated skeleton: the one place outside sys/rt/nic that may hold unsafe
)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/xdpgen.skel.rs"));
}

use skel::XdpgenSkelBuilder;

/// A program attached to an interface through a bpf_link; detached when this drops.
#[derive(Debug)]
pub struct Link {
    _link: OwnedFd,
    pub ifindex: u32,
}

const BPF_XDP: u32 = 37; // enum bpf_attach_type
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;

impl Link {
    /// `prog` at XDP on `ifindex` (calling thread's namespace): native mode where the driver
    /// has it, else generic.
    fn xdp(prog: BorrowedFd<'_>, ifindex: u32) -> Result<Link> {
        lab_only()?;
        let link = wirespeed_sys::bpf::link_create(prog, ifindex, BPF_XDP, XDP_FLAGS_DRV_MODE)
            .or_else(|_| {
                wirespeed_sys::bpf::link_create(prog, ifindex, BPF_XDP, XDP_FLAGS_SKB_MODE)
            })
            .map_err(io(&format!(
                "attach XDP to ifindex {ifindex} (native and generic both refused)"
            )))?;
        Ok(Link {
            _link: link,
            ifindex,
        })
    }

    /// `prog` at TC ingress on `ifindex` through a tcx link, in front of any classifier.
    fn tc(prog: BorrowedFd<'_>, ifindex: u32) -> Result<Link> {
        lab_only()?;
        let link = wirespeed_sys::bpf::link_create(
            prog,
            ifindex,
            libbpf_rs::libbpf_sys::BPF_TCX_INGRESS,
            libbpf_rs::libbpf_sys::BPF_F_BEFORE,
        )
        .map_err(io(&format!("attach TC ingress (tcx) to ifindex {ifindex}")))?;
        Ok(Link {
            _link: link,
            ifindex,
        })
    }
}

pub struct Gen {
    tx: OwnedFd,
    rx: OwnedFd,
    sink: OwnedFd,
    sink_tc: OwnedFd,
    count: MapHandle,
    dut: MapHandle,
    frames: MapHandle,
    frame_count: MapHandle,
}

impl Gen {
    /// Frames are minimum-size: exactly this many bytes.
    pub const FRAME_LEN: usize = 60;

    pub fn load(frame: &[u8; Self::FRAME_LEN]) -> Result<Gen> {
        let mut storage = MaybeUninit::uninit();
        let open = XdpgenSkelBuilder::default()
            .open(&mut storage)
            .map_err(bpf("open gen object"))?;
        let mut padded = [0u8; 64];
        padded[..Self::FRAME_LEN].copy_from_slice(frame);
        for (w, b) in open
            .maps
            .rodata_data
            .frame_words
            .iter_mut()
            .zip(padded.chunks_exact(8))
        {
            *w = u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
        }
        let skel = open.load().map_err(bpf("load gen programs"))?;
        Ok(Gen {
            tx: skel
                .progs
                .gen_tx
                .as_fd()
                .try_clone_to_owned()
                .map_err(io("dup gen_tx"))?,
            rx: skel
                .progs
                .gen_rx
                .as_fd()
                .try_clone_to_owned()
                .map_err(io("dup gen_rx"))?,
            sink: skel
                .progs
                .sink_drop
                .as_fd()
                .try_clone_to_owned()
                .map_err(io("dup sink_drop"))?,
            sink_tc: skel
                .progs
                .sink_drop_tc
                .as_fd()
                .try_clone_to_owned()
                .map_err(io("dup sink_drop_tc"))?,
            count: MapHandle::try_from(&skel.maps.sink_count).map_err(bpf("dup sink_count"))?,
            dut: MapHandle::try_from(&skel.maps.dut).map_err(bpf("dup dut"))?,
            frames: MapHandle::try_from(&skel.maps.frames).map_err(bpf("dup frames"))?,
            frame_count: MapHandle::try_from(&skel.maps.frame_count)
                .map_err(bpf("dup frame_count"))?,
        })
    }

    /// Most frames `set_frames` takes (GEN_FRAMES in xdpgen.bpf.c).
    pub const MAX_FRAMES: usize = 4096;

    /// Makes the generator cycle through `frames` in order, one per run, instead of the frame
    /// it was loaded with; none: back to that one.
    pub fn set_frames(&self, frames: &[[u8; Self::FRAME_LEN]]) -> Result<()> {
        if frames.len() > Self::MAX_FRAMES {
            return Err(Error::Invalid(format!(
                "{} generator frames: at most {}",
                frames.len(),
                Self::MAX_FRAMES
            )));
        }
        // Switch the old table off first: a run never reads a half-written one.
        self.frame_count
            .update(&0u32.to_ne_bytes(), &0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(bpf("clear frame_count"))?;
        for (i, f) in frames.iter().enumerate() {
            let mut padded = [0u8; 64];
            padded[..Self::FRAME_LEN].copy_from_slice(f);
            self.frames
                .update(&(i as u32).to_ne_bytes(), &padded, MapFlags::ANY)
                .map_err(bpf("write generator frame"))?;
        }
        self.frame_count
            .update(
                &0u32.to_ne_bytes(),
                &(frames.len() as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(bpf("set frame_count"))
    }

    /// Attaches the counting sink at XDP on `ifindex` (calling thread's namespace).
    pub fn attach_sink(&self, ifindex: u32) -> Result<Link> {
        Link::xdp(self.sink.as_fd(), ifindex)
    }

    /// Attaches the counting sink at TC ingress on `ifindex` instead: the device then runs
    /// no NAPI unless GRO is on, as a veth is by default.
    pub fn attach_sink_tc(&self, ifindex: u32) -> Result<Link> {
        Link::tc(self.sink_tc.as_fd(), ifindex)
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
        self.run_live(self.tx.as_fd(), frame, ifindex, dur)
    }

    /// Makes `frame` arrive on `ifindex` (calling thread's namespace) for `dur`, as received
    /// there: the XDP program attached to it (if any) sees it first, then the kernel. The
    /// whole receive path runs on the calling thread's CPU. Returns the frames run.
    pub fn receive(&self, frame: &[u8], ifindex: u32, dur: Duration) -> Result<u64> {
        let key = 0u32.to_ne_bytes();
        match attached_xdp(self.rx.as_fd(), ifindex)? {
            Some(prog) => self
                .dut
                .update(&key, &prog.as_raw_fd().to_ne_bytes(), MapFlags::ANY)
                .map_err(bpf("put the DUT's program in the tail-call slot"))?,
            None => {
                let _ = self.dut.delete(&key);
            }
        }
        let n = self.run_live(self.rx.as_fd(), frame, ifindex, dur);
        let _ = self.dut.delete(&key);
        n
    }

    fn run_live(
        &self,
        prog: std::os::fd::BorrowedFd,
        frame: &[u8],
        ifindex: u32,
        dur: Duration,
    ) -> Result<u64> {
        lab_only()?;
        let ctx: [u32; 6] = [0, frame.len() as u32, 0, ifindex, 0, 0];
        // Each run sets up and tears down a page pool, and the teardown waits for an RCU
        // grace period: tens of milliseconds on this VM, long enough that 64 Ki-frame runs
        // left the generator idle 30-50% of the time and the offered load came in bursts.
        // So after a first short run measures the rate, one run covers the time left.
        let mut repeat: u32 = 1 << 16;
        let mut sent = 0u64;
        let start = Instant::now();
        while start.elapsed() < dur {
            let t = Instant::now();
            let ctx_bytes: Vec<u8> = ctx.iter().flat_map(|w| w.to_ne_bytes()).collect();
            match wirespeed_sys::bpf::test_run_live(prog, frame, &ctx_bytes, repeat, 64) {
                // a signal cut the run short; how far it got is unknown, so it is not counted
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(Error::Io {
                        what: "BPF_PROG_RUN (live frames)".into(),
                        source,
                    })
                }
                Ok(()) => {}
            }
            sent += repeat as u64;
            let rate = repeat as f64 / t.elapsed().as_secs_f64().max(1e-6);
            let left = dur.saturating_sub(start.elapsed()).as_secs_f64();
            repeat = (rate * left).clamp((1 << 16) as f64, (1u64 << 30) as f64) as u32;
        }
        Ok(sent)
    }
}

/// Benchmark traffic and sinks belong in lab namespaces only: never on the host's interfaces.
fn lab_only() -> Result<()> {
    wirespeed_sys::netns::current_lab_namespace()
        .map(|_| ())
        .map_err(|why| {
            Error::Invalid(format!(
                "the packet generator runs in lab namespaces only: {why}"
            ))
        })
}

/// The native-mode XDP program attached to `ifindex`, as an fd of our own. `any_prog` is any
/// program fd: libbpf-rs's query needs one, though it does not use it.
fn attached_xdp(any_prog: BorrowedFd<'_>, ifindex: u32) -> Result<Option<OwnedFd>> {
    let opts = libbpf_rs::Xdp::new(any_prog)
        .query(ifindex as i32, libbpf_rs::XdpFlags::empty())
        .map_err(bpf("query the XDP program"))?;
    if opts.drv_prog_id == 0 {
        return Ok(None);
    }
    libbpf_rs::Program::fd_from_id(opts.drv_prog_id)
        .map(Some)
        .map_err(bpf("open the attached XDP program"))
}

fn bpf(what: &str) -> impl FnOnce(libbpf_rs::Error) -> Error + '_ {
    move |err| Error::Io {
        what: what.into(),
        source: std::io::Error::other(err.to_string()),
    }
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: what.into(),
        source,
    }
}
