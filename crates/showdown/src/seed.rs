//! The seeds' own figures, which the showdown prints beside ours: each ladder step's figure over
//! the seed's own base (`seed_ratio` in the results). Every constant is copied from the seed
//! file named beside it (under /work/shared/seeds/), with the line it is on, so a reader can
//! check it.
//!
//! Seeds without a figure for a step give no ratio (docs/INSTRUMENTS.md, "`wirespeed
//! showdown`", its paragraph "The seeds' figures beside ours"): the Seastar seed has no
//! io_uring and no nginx
//! run; the DPVS seed reports DPVS's own pps (2.5M with debug build flags, 7M without),
//! not a kernel (LVS, nftables) figure to compare it with, so the load balancer's rows have
//! none either.

/// A seed's figure for one step, relative to the seed's own base.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeedRatio {
    pub ratio: f64,
    /// Which seed and which of its figures, e.g. the Seastar seed's "726,154 / 357,927 req/s".
    pub source: &'static str,
}

// Seed 000 (000_842f4c74850a66ec.txt, "Linux Kernel vs DPDK: HTTP Performance Showdown"):
// tcp_httpd on a 4-vCPU instance, 256 connections, wrk's `Requests/sec` of each step.

/// Unmodified AMI: "Requests/sec: 357927.16" (line 251). The base of the HTTP ladder.
pub const HTTP_UNTUNED_RPS: f64 = 357_927.16;
/// OS-level tuning (mitigations off, RSS/XPS, interrupt moderation and busy polling, no
/// packet sockets, GRO): "Requests/sec: 726153.58" (line 288).
pub const HTTP_OS_TUNED_RPS: f64 = 726_153.58;
/// Then SO_ATTACH_REUSEPORT_CBPF: "Requests/sec: 741286.62" (line 309).
pub const HTTP_CBPF_RPS: f64 = 741_286.62;
/// Then CBPF with the reactors' CPU order fixed, i.e. perfect locality: "Requests/sec:
/// 787768.20" (line 356).
pub const HTTP_CBPF_CPU_ORDER_RPS: f64 = 787_768.20;
/// Then epoll_pwait2 with a 100 µs timeout (busy polling takes effect): "Requests/sec:
/// 915053.04" (line 431).
pub const HTTP_EPOLL_PWAIT2_RPS: f64 = 915_053.04;
/// Then the task quota: "Requests/sec: 964121.54" (line 508).
pub const HTTP_TASK_QUOTA_RPS: f64 = 964_121.54;
/// Then recv instead of read: "Requests/sec: 982287.44" (line 535).
pub const HTTP_RECV_RPS: f64 = 982_287.44;
/// Then no batched flush: "Requests/sec: 1007771.89" (line 564).
pub const HTTP_NO_BATCHED_FLUSH_RPS: f64 = 1_007_771.89;
/// DPDK with write combining: "Requests/sec: 1515010.51" (line 220; 1190822.80 without, line
/// 185).
pub const HTTP_DPDK_RPS: f64 = 1_515_010.51;

// Seed 003 (003_597524833ec36460.txt, PhotonLibOS on F-Stack + DPDK): an echo server, one
// thread, 512-byte messages, 25G NIC; the table at line 122 (in Gb/s).

/// "Linux 6.x kernel + Photon coroutine 1.03Gb/s 2.60Gb/s": ping-pong (line 122).
pub const ECHO_KERNEL_PINGPONG_GBPS: f64 = 1.03;
/// Streaming, same line.
pub const ECHO_KERNEL_STREAM_GBPS: f64 = 2.60;
/// "F-Stack + DPDK + Photon coroutine 1.23Gb/s 3.74Gb/s": ping-pong (line 123).
pub const ECHO_BYPASS_PINGPONG_GBPS: f64 = 1.23;
/// Streaming, same line.
pub const ECHO_BYPASS_STREAM_GBPS: f64 = 3.74;

/// HTTP ladder steps, each over the untuned kernel.
pub const HTTP_UNTUNED: SeedRatio = SeedRatio {
    // The base over itself.
    ratio: 1.0,
    source: "seed 000: untuned kernel, 357,927 req/s (the base)",
};
pub const HTTP_OS_TUNED: SeedRatio = SeedRatio {
    ratio: HTTP_OS_TUNED_RPS / HTTP_UNTUNED_RPS,
    source: "seed 000: OS tuned, 726,154 / 357,927 req/s",
};
pub const HTTP_CBPF: SeedRatio = SeedRatio {
    ratio: HTTP_CBPF_RPS / HTTP_UNTUNED_RPS,
    source: "seed 000: + CBPF (CPU order unfixed), 741,287 / 357,927 req/s",
};
/// Our CBPF row pins shard i to the i-th CPU, so it is the seed's CBPF step with the CPU
/// order already fixed.
pub const HTTP_PERFECT_LOCALITY: SeedRatio = SeedRatio {
    ratio: HTTP_CBPF_CPU_ORDER_RPS / HTTP_UNTUNED_RPS,
    source: "seed 000: + CBPF with the CPU order fixed, 787,768 / 357,927 req/s",
};
pub const HTTP_BUSY_POLL: SeedRatio = SeedRatio {
    ratio: HTTP_EPOLL_PWAIT2_RPS / HTTP_UNTUNED_RPS,
    source: "seed 000: + epoll_pwait2 busy poll, 915,053 / 357,927 req/s",
};
pub const HTTP_TASK_QUOTA: SeedRatio = SeedRatio {
    ratio: HTTP_TASK_QUOTA_RPS / HTTP_UNTUNED_RPS,
    source: "seed 000: + task quota, 964,122 / 357,927 req/s",
};
pub const HTTP_RECV: SeedRatio = SeedRatio {
    ratio: HTTP_RECV_RPS / HTTP_UNTUNED_RPS,
    source: "seed 000: + recv instead of read, 982,287 / 357,927 req/s",
};
pub const HTTP_NO_BATCHED_FLUSH: SeedRatio = SeedRatio {
    ratio: HTTP_NO_BATCHED_FLUSH_RPS / HTTP_UNTUNED_RPS,
    source: "seed 000: + no batched flush, 1,007,772 / 357,927 req/s",
};
pub const HTTP_BYPASS: SeedRatio = SeedRatio {
    ratio: HTTP_DPDK_RPS / HTTP_UNTUNED_RPS,
    source: "seed 000: DPDK (write combining), 1,515,011 / 357,927 req/s",
};

/// Echo rows, each over the kernel row of its traffic type.
pub const ECHO_PINGPONG_KERNEL: SeedRatio = SeedRatio {
    ratio: 1.0,
    source: "seed 003 (Photon): kernel ping-pong, 1.03 Gb/s (the base)",
};
pub const ECHO_PINGPONG_BYPASS: SeedRatio = SeedRatio {
    ratio: ECHO_BYPASS_PINGPONG_GBPS / ECHO_KERNEL_PINGPONG_GBPS,
    source: "seed 003 (Photon): F-Stack+DPDK ping-pong, 1.23 / 1.03 Gb/s",
};
pub const ECHO_STREAM_KERNEL: SeedRatio = SeedRatio {
    ratio: 1.0,
    source: "seed 003 (Photon): kernel streaming, 2.60 Gb/s (the base)",
};
pub const ECHO_STREAM_BYPASS: SeedRatio = SeedRatio {
    ratio: ECHO_BYPASS_STREAM_GBPS / ECHO_KERNEL_STREAM_GBPS,
    source: "seed 003 (Photon): F-Stack+DPDK streaming, 3.74 / 2.60 Gb/s",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_match_what_the_seeds_say() {
        // Seed 000's own words: "a 103% gain" (OS tuned), "a 16% gain" (busy poll), DPDK's
        // lead "from 4.2x" (over the untuned kernel) "to 1.5x" (over the fully tuned one).
        assert!((HTTP_OS_TUNED.ratio - 2.03).abs() < 0.005);
        assert!((HTTP_EPOLL_PWAIT2_RPS / HTTP_CBPF_CPU_ORDER_RPS - 1.16).abs() < 0.005);
        assert!((HTTP_BYPASS.ratio - 4.2).abs() < 0.05);
        assert!((HTTP_DPDK_RPS / HTTP_NO_BATCHED_FLUSH_RPS - 1.5).abs() < 0.01);
        // Photon: "Ping-Pong +20%, Streaming +40%".
        assert!((ECHO_PINGPONG_BYPASS.ratio - 1.2).abs() < 0.01);
        assert!((ECHO_STREAM_BYPASS.ratio - 1.44).abs() < 0.01);
        assert_eq!(HTTP_UNTUNED.ratio, 1.0);
        // The ladder climbs step by step.
        let steps = [
            HTTP_UNTUNED,
            HTTP_OS_TUNED,
            HTTP_CBPF,
            HTTP_PERFECT_LOCALITY,
            HTTP_BUSY_POLL,
            HTTP_TASK_QUOTA,
            HTTP_RECV,
            HTTP_NO_BATCHED_FLUSH,
            HTTP_BYPASS,
        ];
        assert!(steps.windows(2).all(|w| w[0].ratio < w[1].ratio));
    }
}
