//! Running a loaded program once on a frame through BPF_PROG_TEST_RUN, as an XDP frame or an
//! skb: what the fixtures (crates/fp-lab/tests) drive the programs with.

use crate::datapath::loader::Program;
use crate::error::{io, Result};

/// What a test run's skb carries besides its data, in and out (`Program::test_run_skb_meta`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkbMeta {
    pub priority: u32,
    /// The receive timestamp, which forwarding clears (`skb_clear_tstamp`).
    pub tstamp: u64,
}

/// XDP verdicts, as returned by a test run.
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_REDIRECT: u32 = 4;
/// What the TC programs return for a packet they leave to the kernel, as a test run reports
/// it: tcx's TCX_NEXT (-1), so that the programs and classifiers behind them still run.
pub const TC_KERNEL: u32 = u32::MAX;
/// TC_ACT_REDIRECT: what a TC program's `bpf_redirect` returns.
pub const TC_REDIRECT: u32 = 7;

impl Program {
    /// Runs the program once on `frame` through BPF_PROG_TEST_RUN, as if received on
    /// `ingress_ifindex` (0: none) in the calling thread's network namespace. Returns the
    /// verdict and the frame as the program left it.
    pub fn test_run(&self, frame: &[u8], ingress_ifindex: u32) -> Result<(u32, Vec<u8>)> {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex
        let ctx: [u32; 6] = [0, frame.len() as u32, 0, ingress_ifindex, 0, 0];
        let mut out = vec![0u8; frame.len() + 256];
        let ctx: Vec<u8> = ctx.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let (verdict, len) = wirespeed_sys::bpf::test_run(self.fd(), frame, &ctx, &mut out)
            .map_err(io("BPF_PROG_TEST_RUN"))?;
        out.truncate(len);
        Ok((verdict, out))
    }

    /// Runs a TC program (loaded with `Features::tc`) once on `frame` through
    /// BPF_PROG_TEST_RUN, as an skb received on `ifindex` (0: none) in the calling thread's
    /// network namespace, a GSO skb when `gso_size` is not 0. Returns the verdict and the
    /// frame as the program left it.
    pub fn test_run_skb(
        &self,
        frame: &[u8],
        ifindex: u32,
        gso_size: u32,
    ) -> Result<(u32, Vec<u8>)> {
        use crate::bpf::types::__sk_buff;
        let mut ctx = vec![0u8; std::mem::size_of::<__sk_buff>()];
        let mut put = |at: usize, v: u32| ctx[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        put(std::mem::offset_of!(__sk_buff, ifindex), ifindex);
        put(std::mem::offset_of!(__sk_buff, ingress_ifindex), ifindex);
        put(std::mem::offset_of!(__sk_buff, gso_size), gso_size);
        let mut out = vec![0u8; frame.len() + 256];
        let (verdict, len) = wirespeed_sys::bpf::test_run(self.fd(), frame, &ctx, &mut out)
            .map_err(io("BPF_PROG_TEST_RUN (skb)"))?;
        out.truncate(len);
        Ok((verdict, out))
    }

    /// As `test_run_skb` (no GSO), with the skb's `meta` going in: the verdict and the
    /// `meta` the program left.
    pub fn test_run_skb_meta(
        &self,
        frame: &[u8],
        ifindex: u32,
        meta: SkbMeta,
    ) -> Result<(u32, SkbMeta)> {
        use crate::bpf::types::__sk_buff;
        let (prio, ts) = (
            std::mem::offset_of!(__sk_buff, priority),
            std::mem::offset_of!(__sk_buff, tstamp),
        );
        let mut ctx = vec![0u8; std::mem::size_of::<__sk_buff>()];
        let mut put = |at: usize, v: &[u8]| ctx[at..at + v.len()].copy_from_slice(v);
        put(
            std::mem::offset_of!(__sk_buff, ifindex),
            &ifindex.to_ne_bytes(),
        );
        put(
            std::mem::offset_of!(__sk_buff, ingress_ifindex),
            &ifindex.to_ne_bytes(),
        );
        put(prio, &meta.priority.to_ne_bytes());
        put(ts, &meta.tstamp.to_ne_bytes());
        let mut out = vec![0u8; frame.len() + 256];
        let mut ctx_out = vec![0u8; ctx.len()];
        let (verdict, _) =
            wirespeed_sys::bpf::test_run_ctx(self.fd(), frame, &ctx, &mut out, &mut ctx_out)
                .map_err(io("BPF_PROG_TEST_RUN (skb)"))?;
        let u32_at = |at: usize| u32::from_ne_bytes(ctx_out[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_ne_bytes(ctx_out[at..at + 8].try_into().unwrap());
        Ok((
            verdict,
            SkbMeta {
                priority: u32_at(prio),
                tstamp: u64_at(ts),
            },
        ))
    }

    /// Runs the TC stage once on `frame` through BPF_PROG_TEST_RUN (an skb with no metadata,
    /// as the test run builds it): its verdict, or None for a program without a stage.
    pub fn test_run_tc_stage(&self, frame: &[u8]) -> Result<Option<u32>> {
        let Some(stage) = self.tc_stage_fd() else {
            return Ok(None);
        };
        let mut out = vec![0u8; frame.len() + 256];
        let ctx = vec![0u8; std::mem::size_of::<crate::bpf::types::__sk_buff>()];
        let (verdict, _) = wirespeed_sys::bpf::test_run(stage, frame, &ctx, &mut out)
            .map_err(io("BPF_PROG_TEST_RUN (TC stage)"))?;
        Ok(Some(verdict))
    }
}
