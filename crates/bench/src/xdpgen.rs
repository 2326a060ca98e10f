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
    fwd: OwnedFd,
    fwd_to: MapHandle,
    count: MapHandle,
    matched: MapHandle,
    rx_count: MapHandle,
    expect: MapHandle,
    sample: MapHandle,
    vary: MapHandle,
    cursor: MapHandle,
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
            fwd: skel
                .progs
                .fwd_redirect
                .as_fd()
                .try_clone_to_owned()
                .map_err(io("dup fwd_redirect"))?,
            fwd_to: MapHandle::try_from(&skel.maps.fwd_to).map_err(bpf("dup fwd_to"))?,
            count: MapHandle::try_from(&skel.maps.sink_count).map_err(bpf("dup sink_count"))?,
            matched: MapHandle::try_from(&skel.maps.sink_match).map_err(bpf("dup sink_match"))?,
            rx_count: MapHandle::try_from(&skel.maps.rx_count).map_err(bpf("dup rx_count"))?,
            expect: MapHandle::try_from(&skel.maps.sink_expect).map_err(bpf("dup sink_expect"))?,
            sample: MapHandle::try_from(&skel.maps.sink_sample).map_err(bpf("dup sink_sample"))?,
            vary: MapHandle::try_from(&skel.maps.vary).map_err(bpf("dup vary"))?,
            cursor: MapHandle::try_from(&skel.maps.cursor).map_err(bpf("dup cursor"))?,
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

    /// Gives each listed CPU a window of the frame table to cycle through, `(cpu, first,
    /// len)`, as RSS gives each queue its own flows; every other CPU gets the whole table.
    /// None listed: every CPU the whole table.
    pub fn set_windows(&self, windows: &[(usize, u32, u32)]) -> Result<()> {
        let key = 0u32.to_ne_bytes();
        let mut values = self
            .cursor
            .lookup_percpu(&key, MapFlags::ANY)
            .map_err(bpf("read the generator's cursors"))?
            .unwrap_or_default();
        for (cpu, v) in values.iter_mut().enumerate() {
            let (first, len) = windows
                .iter()
                .find(|w| w.0 == cpu)
                .map_or((0, 0), |w| (w.1, w.2));
            if v.len() >= 12 {
                v[..4].copy_from_slice(&first.to_ne_bytes());
                v[4..8].copy_from_slice(&first.to_ne_bytes());
                v[8..12].copy_from_slice(&len.to_ne_bytes());
            }
        }
        self.cursor
            .update_percpu(&key, &values, MapFlags::ANY)
            .map_err(bpf("set the generator's windows"))
    }

    /// Attaches the bare forwarder at XDP on `ifindex`: every frame gets `dst` and `src` as
    /// its MACs and is redirected out of `out_ifindex`, nothing looked up (the floor of any
    /// XDP forwarder's cost).
    pub fn attach_forwarder(
        &self,
        ifindex: u32,
        out_ifindex: u32,
        dst: [u8; 6],
        src: [u8; 6],
    ) -> Result<Link> {
        let mut v = [0u8; 16];
        v[..4].copy_from_slice(&out_ifindex.to_ne_bytes());
        v[4..10].copy_from_slice(&dst);
        v[10..16].copy_from_slice(&src);
        self.fwd_to
            .update(&0u32.to_ne_bytes(), &v, MapFlags::ANY)
            .map_err(bpf("configure the forwarder"))?;
        Link::xdp(self.fwd.as_fd(), ifindex)
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
        percpu_sum(&self.count, "read sink count")
    }

    /// Frames the XDP sink has counted so far that looked as [`Gen::expect`] says (all of
    /// them while it says nothing). The TC sink does not count these.
    pub fn sink_matched(&self) -> Result<u64> {
        percpu_sum(&self.matched, "read sink match count")
    }

    /// Frames [`Gen::receive`] and [`Gen::receive_count`] have run so far, all CPUs.
    pub fn received(&self) -> Result<u64> {
        percpu_sum(&self.rx_count, "read the generator's count")
    }

    /// What a correct frame looks like at the XDP sink: at most [`Gen::MAX_EXPECT`] words.
    pub fn expect(&self, words: &[Expect]) -> Result<()> {
        if words.len() > Self::MAX_EXPECT {
            return Err(Error::Invalid(format!(
                "{} sink expectations: at most {}",
                words.len(),
                Self::MAX_EXPECT
            )));
        }
        let mut v = vec![0u8; 8 + 12 * Self::MAX_EXPECT];
        v[..4].copy_from_slice(&(words.len() as u32).to_ne_bytes());
        for (i, w) in words.iter().enumerate() {
            if w.offset as usize + 4 > Self::SAMPLE_SPAN {
                return Err(Error::Invalid(format!(
                    "sink expectation at byte {}: the sink looks at the first {} bytes",
                    w.offset,
                    Self::SAMPLE_SPAN
                )));
            }
            let at = 8 + 12 * i;
            v[at..at + 4].copy_from_slice(&(w.offset as u32).to_ne_bytes());
            v[at + 4..at + 8].copy_from_slice(&w.mask);
            v[at + 8..at + 12].copy_from_slice(&w.value);
        }
        self.expect
            .update(&0u32.to_ne_bytes(), &v, MapFlags::ANY)
            .map_err(bpf("write sink expectations"))
    }

    /// Most words [`Gen::expect`] takes (SINK_WORDS in xdpgen.bpf.c).
    pub const MAX_EXPECT: usize = 8;
    /// How much of a frame the sink looks at and samples (SINK_SPAN).
    pub const SAMPLE_SPAN: usize = 128;

    /// Makes the XDP sink keep the next frame it sees.
    pub fn arm_sample(&self) -> Result<()> {
        let v = vec![0u8; 8 + Self::SAMPLE_SPAN];
        self.sample
            .update(&0u32.to_ne_bytes(), &v, MapFlags::ANY)
            .map_err(bpf("arm the sink's sample"))
    }

    /// The frame the XDP sink kept since [`Gen::arm_sample`] (its first SAMPLE_SPAN bytes),
    /// if one arrived: the first IPv4 frame, or IPv6 one carrying TCP, UDP or a tunnel (the
    /// kernel's own neighbour discovery is not a sample).
    pub fn sample(&self) -> Result<Option<Vec<u8>>> {
        let v = self
            .sample
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(bpf("read the sink's sample"))?
            .unwrap_or_default();
        if v.len() < 8 {
            return Ok(None);
        }
        let len = u32::from_ne_bytes(v[..4].try_into().unwrap_or([0; 4])) as usize;
        if len == 0 {
            return Ok(None);
        }
        Ok(Some(
            v[8..8 + len.min(Self::SAMPLE_SPAN).min(v.len() - 8)].to_vec(),
        ))
    }

    /// With `Some(l4_checksum_offset)` (50: TCP, 40: UDP, over IPv4 without options), every
    /// frame run gets a source of its own: the IPv4 source's last octet (1..=250) and the L4
    /// source port (1024..65024) from a counter, checksums fixed. The frames must carry
    /// octet 0 and port 0, with checksums computed so. `None`: frames as given.
    pub fn distinct_sources(&self, l4_checksum_offset: Option<u32>) -> Result<()> {
        let (on, off) = match l4_checksum_offset {
            Some(o @ (40 | 50)) => (1u32, o),
            Some(o) => {
                return Err(Error::Invalid(format!(
                    "L4 checksum at byte {o}: the generator knows 40 (UDP) and 50 (TCP)"
                )))
            }
            None => (0, 0),
        };
        let mut v = [0u8; 8];
        v[..4].copy_from_slice(&on.to_ne_bytes());
        v[4..].copy_from_slice(&off.to_ne_bytes());
        self.vary
            .update(&0u32.to_ne_bytes(), &v, MapFlags::ANY)
            .map_err(bpf("set distinct sources"))
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

    /// As [`Gen::receive`], but exactly `n` frames in one run (priming connection state,
    /// checking a sample).
    pub fn receive_count(&self, frame: &[u8], ifindex: u32, n: u32) -> Result<()> {
        lab_only()?;
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
        let ctx: [u32; 6] = [0, frame.len() as u32, 0, ifindex, 0, 0];
        let ctx_bytes: Vec<u8> = ctx.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let r = loop {
            match wirespeed_sys::bpf::test_run_live(self.rx.as_fd(), frame, &ctx_bytes, n, 64) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        let _ = self.dut.delete(&key);
        r.map_err(io("BPF_PROG_RUN (live frames)"))
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

/// One word of what a correct frame looks like at the sink: `frame[offset..offset + 4] & mask
/// == value`, bytes in frame order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    pub offset: u16,
    pub mask: [u8; 4],
    pub value: [u8; 4],
}

impl Expect {
    /// `bytes` (1 to 4 of them) at `offset`, exactly.
    pub fn bytes(offset: u16, bytes: &[u8]) -> Expect {
        let (mut mask, mut value) = ([0u8; 4], [0u8; 4]);
        for (i, b) in bytes.iter().take(4).enumerate() {
            mask[i] = 0xff;
            value[i] = *b;
        }
        Expect {
            offset,
            mask,
            value,
        }
    }

    /// The 4 bytes at `offset` under `mask`.
    pub fn masked(offset: u16, value: [u8; 4], mask: [u8; 4]) -> Expect {
        let mut v = value;
        for (b, m) in v.iter_mut().zip(mask) {
            *b &= m;
        }
        Expect {
            offset,
            mask,
            value: v,
        }
    }
}

fn percpu_sum(map: &MapHandle, what: &str) -> Result<u64> {
    let v = map
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(bpf(what))?;
    Ok(v.unwrap_or_default()
        .iter()
        .map(|c| u64::from_ne_bytes(c[..8].try_into().unwrap_or([0; 8])))
        .sum())
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
