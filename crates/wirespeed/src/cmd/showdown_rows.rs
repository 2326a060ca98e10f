//! The showdown's rows: what each one runs (lab profile, server, workload), which row it is
//! compared with, and the seed's figure for the same step. Running them is `showdown.rs`.

use wirespeed_bench::showdown::Showdown;
use wirespeed_bench::showdown_seed::{self as seed, SeedRatio};
use wirespeed_lab::topo::Profile;

/// How a row's server is started in the server namespace.
#[derive(Clone, Debug)]
pub(super) enum Server {
    /// `wirespeed serve http|echo --stack kernel ...`
    Wirespeed {
        app: &'static str,
        engine: &'static str,
        poll_us: u32,
        busy_poll_us: u32,
        locality: &'static str,
    },
    /// nginx, one worker (master_process off), access_log off; the distribution's build.
    Nginx,
    /// `wirespeed serve http|echo --stack xdp`: our TCP/IP stack on an AF_XDP socket on the
    /// server namespace's interface, answering for its own address ([`bypass_addr`]) beside
    /// the kernel's.
    WirespeedXdp {
        app: &'static str,
        /// `--busy-poll-us` (0: off): the shard busy-polls its queue's NAPI itself.
        busy_poll_us: u32,
    },
    /// No server: the load balancer's rows forward packets (`xdp`: `wirespeed lb`, else
    /// nftables DNAT+SNAT).
    LoadBalancer { xdp: bool },
}

/// What the client sends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Workload {
    /// GET /plaintext, `--connections` connections, one request in flight each.
    Http,
    /// 512-byte messages, each sent when the previous one came back (Photon's ping-pong).
    EchoPingPong,
    /// 512-byte messages, many in flight on few connections (Photon's streaming).
    EchoStream,
    /// 64-byte TCP segments of 4,096 established connections through a full-NAT load
    /// balancer to 4 reals (lb_bench's rows; req/s is packets/s).
    LbFullNatPps,
}

impl Workload {
    /// As the results name it (`Row::workload`; the charts group rows by it).
    pub(super) fn name(self) -> &'static str {
        match self {
            Workload::Http => "http",
            Workload::EchoPingPong => "echo-pingpong",
            Workload::EchoStream => "echo-stream",
            Workload::LbFullNatPps => "lb-fullnat-pps",
        }
    }
}

/// The bypass rows' shard sleeps on its AF_XDP socket after this long without work, so the
/// kernel's receive thread for its queue (which copies frames into the socket) can run on the
/// server's CPU instead of beside the load generator. Measured against spinning (0) in
/// docs/INSTRUMENTS.md.
pub(super) const BYPASS_IDLE_SLEEP_US: u32 = 20;

/// The tuned rows' interrupt moderation on the server's queue: a deferred NAPI is run by its
/// 200 µs timer or by the server's own busy poll instead of being woken by every packet. At
/// 20 µs the timer wakes the queue's thread 50,000 times a second and the tuned rows lost
/// (docs/INSTRUMENTS.md).
pub(super) const MODERATION_DEFER_HARD_IRQS: u32 = 2;
pub(super) const MODERATION_GRO_FLUSH_TIMEOUT_NS: u64 = 200_000;

pub(super) const ECHO_SIZE: usize = 512;
pub(super) const PINGPONG_CONNECTIONS: usize = 64;
pub(super) const STREAM_CONNECTIONS: usize = 4;
pub(super) const STREAM_DEPTH: usize = 64;

#[derive(Clone, Debug)]
pub(super) struct RowSpec {
    pub(super) name: &'static str,
    pub(super) profile: Profile,
    pub(super) server: Server,
    pub(super) workload: Workload,
    /// The row whose figures this one is compared with (1-based).
    pub(super) base_row: usize,
    /// The seed's figure for the same step over the seed's own base, where it has one.
    pub(super) seed: Option<SeedRatio>,
}

fn http(name: &'static str, profile: Profile, server: Server, seed: Option<SeedRatio>) -> RowSpec {
    RowSpec {
        name,
        profile,
        server,
        workload: Workload::Http,
        base_row: 1,
        seed,
    }
}

/// The echo servers' busy polling, kernel and bypass alike (Photon's table busy-polls both).
const ECHO_BUSY_POLL_US: u32 = 50;

fn echo_kernel() -> Server {
    Server::Wirespeed {
        app: "echo",
        engine: "epoll",
        poll_us: 100,
        busy_poll_us: ECHO_BUSY_POLL_US,
        locality: "cbpf",
    }
}

/// The seed ladder (rows 1-6), the bypass stack (7), Photon's echo table (8-11), and the L4
/// load balancer against nftables (12-13).
pub(super) fn ladder() -> Vec<RowSpec> {
    let ws = |engine, poll_us, busy_poll_us, locality| Server::Wirespeed {
        app: "http",
        engine,
        poll_us,
        busy_poll_us,
        locality,
    };
    vec![
        // Row 1 is an untuned NIC, not the veth default: a veth's default receive runs inside
        // the sender's syscall, on the sender's CPU and at the sender's expense, which no NIC
        // does (docs/INSTRUMENTS.md, receive models).
        http(
            "untuned kernel",
            Profile::Nic,
            ws("epoll", 0, 0, "none"),
            Some(seed::HTTP_UNTUNED),
        ),
        http(
            "tuned kernel",
            Profile::Tuned,
            ws("epoll", 0, 0, "none"),
            Some(seed::HTTP_OS_TUNED),
        ),
        http(
            "+ perfect locality",
            Profile::Tuned,
            ws("epoll", 0, 0, "cbpf"),
            Some(seed::HTTP_PERFECT_LOCALITY),
        ),
        http(
            "+ busy poll (epoll)",
            Profile::Tuned,
            ws("epoll", 100, 50, "cbpf"),
            Some(seed::HTTP_BUSY_POLL),
        ),
        // Seed 000 ran neither io_uring nor nginx.
        http(
            "io_uring",
            Profile::Tuned,
            ws("uring", 100, 50, "cbpf"),
            None,
        ),
        http("nginx (1 worker)", Profile::Tuned, Server::Nginx, None),
        http(
            "bypass: our stack on AF_XDP",
            Profile::Nic,
            Server::WirespeedXdp {
                app: "http",
                busy_poll_us: 0,
            },
            Some(seed::HTTP_BYPASS),
        ),
        // The bypass rows run untuned: the tuned profile's knobs (XPS, NAPI deferral,
        // busy_read) act on the kernel's receive path, which frames that XDP takes away never
        // reach. So row 7 is compared with row 1, the same untuned NIC, and the echo pairs
        // run on that NIC too: on the veth default a kernel sender's 64 KiB TSO segments
        // cross the link whole at any MTU, which no NIC's wire carries.
        // Photon's echo table: the busy-polled kernel server against the bypass stack, each
        // pair compared with its own kernel row.
        RowSpec {
            name: "echo ping-pong 512 B: kernel (epoll, busy poll)",
            profile: Profile::Nic,
            server: echo_kernel(),
            workload: Workload::EchoPingPong,
            base_row: 8,
            seed: Some(seed::ECHO_PINGPONG_KERNEL),
        },
        RowSpec {
            name: "echo ping-pong 512 B: bypass (vs row 8)",
            profile: Profile::Nic,
            server: Server::WirespeedXdp {
                app: "echo",
                busy_poll_us: ECHO_BUSY_POLL_US,
            },
            workload: Workload::EchoPingPong,
            base_row: 8,
            seed: Some(seed::ECHO_PINGPONG_BYPASS),
        },
        RowSpec {
            name: "echo stream 512 B: kernel (epoll, busy poll)",
            profile: Profile::Nic,
            server: echo_kernel(),
            workload: Workload::EchoStream,
            base_row: 10,
            seed: Some(seed::ECHO_STREAM_KERNEL),
        },
        RowSpec {
            name: "echo stream 512 B: bypass (vs row 10)",
            profile: Profile::Nic,
            server: Server::WirespeedXdp {
                app: "echo",
                busy_poll_us: ECHO_BUSY_POLL_US,
            },
            workload: Workload::EchoStream,
            base_row: 10,
            seed: Some(seed::ECHO_STREAM_BYPASS),
        },
        // The L4 load balancer (issue 17): full-NAT pps, on the DUT, against nftables. The
        // DPVS seed gives no kernel figure to divide DPVS's by, so these rows have no seed
        // ratio (showdown_seed).
        RowSpec {
            name: "L4 LB full-NAT 64 B TCP pps: nftables DNAT+SNAT",
            profile: Profile::Default,
            server: Server::LoadBalancer { xdp: false },
            workload: Workload::LbFullNatPps,
            base_row: 12,
            seed: None,
        },
        RowSpec {
            name: "L4 LB full-NAT 64 B TCP pps: wirespeed lb (vs row 12)",
            profile: Profile::Default,
            server: Server::LoadBalancer { xdp: true },
            workload: Workload::LbFullNatPps,
            base_row: 12,
            seed: None,
        },
    ]
}

/// The chosen rows (1-based) and the base row each is compared with: without its base, a
/// row's ratio would be taken against row 1, another workload.
pub(super) fn with_base_rows(ladder: &[RowSpec], mut rows: Vec<usize>) -> Vec<usize> {
    let bases: Vec<usize> = rows
        .iter()
        .filter_map(|r| ladder.get(r.checked_sub(1)?))
        .map(|s| s.base_row)
        .collect();
    rows.extend(bases);
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// Fills what results from before a field existed lack, from the ladder row of the same
/// name: the workload and the seed's ratio (the seed's figure is the step's, not the run's).
pub(super) fn fill_from_ladder(sd: &mut Showdown) {
    let ladder = ladder();
    for row in sd.rows.iter_mut() {
        let Some(spec) = ladder.iter().find(|s| s.name == row.name) else {
            continue;
        };
        if row.workload.is_empty() {
            row.workload = spec.workload.name().into();
        }
        if row.seed_ratio.is_none() {
            if let Some(seed) = spec.seed {
                row.seed_ratio = Some(seed.ratio);
                row.seed_source = Some(seed.source.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed_bench::showdown::Row;

    #[test]
    fn seed_ratios_sit_on_the_steps_the_seeds_ran() {
        let ladder = ladder();
        let seeded: Vec<usize> = ladder
            .iter()
            .enumerate()
            .filter(|(_, s)| s.seed.is_some())
            .map(|(i, _)| i + 1)
            .collect();
        // Not io_uring (5), nginx (6) or the load balancer (12, 13): no seed ran them.
        assert_eq!(seeded, [1, 2, 3, 4, 7, 8, 9, 10, 11]);
        // A seeded row's base row is its seed's base: 1.00x on both sides.
        for s in ladder.iter().filter(|s| s.seed.is_some()) {
            let base = &ladder[s.base_row - 1];
            assert_eq!(base.seed.map(|b| b.ratio), Some(1.0), "{}", s.name);
        }
    }

    #[test]
    fn a_chosen_row_brings_its_base_row() {
        let ladder = ladder();
        assert_eq!(with_base_rows(&ladder, vec![9, 2]), [1, 2, 8, 9]);
        assert_eq!(with_base_rows(&ladder, vec![13, 0, 99]), [0, 12, 13, 99]);
    }

    #[test]
    fn rendering_older_results_fills_the_seed_and_workload_by_row_name() {
        let ladder = ladder();
        let mut sd = Showdown {
            rows: [1, 12]
                .into_iter()
                .map(|n| Row {
                    row: n + 1,
                    name: ladder[n].name.into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        fill_from_ladder(&mut sd);
        assert_eq!(sd.rows[0].workload, "http");
        assert_eq!(sd.rows[0].seed_ratio, Some(seed::HTTP_OS_TUNED.ratio));
        assert!(sd.rows[0]
            .seed_source
            .as_deref()
            .unwrap()
            .contains("726,154"));
        assert_eq!(sd.rows[1].workload, "lb-fullnat-pps");
        assert_eq!(sd.rows[1].seed_ratio, None);
    }
}
