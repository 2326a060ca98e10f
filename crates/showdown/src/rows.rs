//! The showdown's rows: what each one runs (lab profile, server, workload), which row it is
//! compared with, and the seed's figure for the same step. Running them is `runner.rs`.

use crate::results::{Showdown, Workload};
use crate::seed::{self, SeedRatio};
use wirespeed_lab::topo::Profile;

/// How a row's server is started in the server namespace.
#[derive(Clone, Debug)]
pub(crate) enum Server {
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

/// The bypass rows' shard sleeps on its AF_XDP socket after this long without work, so the
/// kernel's receive thread for its queue (which copies frames into the socket) can run on the
/// server's CPU instead of beside the load generator. Measured against spinning (0) in
/// docs/INSTRUMENTS.md.
pub(crate) const BYPASS_IDLE_SLEEP_US: u32 = 20;

/// The tuned rows' interrupt moderation on the server's queue: a deferred NAPI is run by its
/// 200 µs timer or by the server's own busy poll instead of being woken by every packet. At
/// 20 µs the timer wakes the queue's thread 50,000 times a second and the tuned rows lost
/// (docs/INSTRUMENTS.md).
pub const MODERATION_DEFER_HARD_IRQS: u32 = 2;
pub const MODERATION_GRO_FLUSH_TIMEOUT_NS: u64 = 200_000;

pub(crate) const ECHO_SIZE: usize = 512;
pub(crate) const PINGPONG_CONNECTIONS: usize = 64;
pub(crate) const STREAM_CONNECTIONS: usize = 4;
pub(crate) const STREAM_DEPTH: usize = 64;

#[derive(Clone, Debug)]
pub(crate) struct RowSpec {
    pub(crate) name: &'static str,
    pub(crate) profile: Profile,
    pub(crate) server: Server,
    pub(crate) workload: Workload,
    /// The row whose figures this one is compared with (1-based).
    pub(crate) base_row: usize,
    /// The seed's figure for the same step over the seed's own base, where it has one.
    pub(crate) seed: Option<SeedRatio>,
    /// The server's shards, each on a CPU and a queue of its own, against as many load
    /// generator threads ([`Placement`]): 1 but in the scaling rows.
    pub(crate) shards: usize,
}

fn http(name: &'static str, profile: Profile, server: Server, seed: Option<SeedRatio>) -> RowSpec {
    RowSpec {
        name,
        profile,
        server,
        workload: Workload::Http,
        base_row: 1,
        seed,
        shards: 1,
    }
}

/// Where a row runs on this machine: the load generator's CPUs, then one CPU per server
/// shard after them. One shard is the ladder's placement: load generator on CPU 0, server on
/// CPU 1. The lab gives the veth one queue per shard, and pins queue q's NAPI thread (tuned)
/// and its XPS to each side's q-th CPU, as RSS and IRQ affinity spread a NIC's queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) client: Vec<usize>,
    pub(crate) server: Vec<usize>,
}

impl Placement {
    pub(crate) fn for_shards(shards: usize) -> Placement {
        let shards = shards.max(1);
        Placement {
            client: (0..shards).collect(),
            server: (shards..2 * shards).collect(),
        }
    }

    /// The server's CPUs as a `--cpus` list.
    pub(crate) fn server_list(&self) -> String {
        cpu_list(&self.server)
    }

    pub(crate) fn client_list(&self) -> String {
        cpu_list(&self.client)
    }
}

fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Why a row cannot run on a machine with `ncpus` CPUs: its placement needs more.
pub(crate) fn too_few_cpus(spec: &RowSpec, ncpus: usize) -> Option<String> {
    let need = 2 * spec.shards;
    (need > ncpus).then(|| {
        format!(
            "needs {need} CPUs ({} for the server's shards, as many for the load generator); this machine has {ncpus}",
            spec.shards
        )
    })
}

/// The scaling rows' shard counts beyond one (rows 4 and 7 are the one-shard pair).
pub(crate) const SCALING_SHARDS: [usize; 3] = [2, 4, 8];

/// The scaling rows (14 on): for each count in [`SCALING_SHARDS`], the tuned kernel server of
/// row 4 on that many shards (compared with row 4, one shard) and the bypass server of row 7
/// on as many (compared with the kernel row of its width). HTTP with `--connections` per
/// shard, so each shard sees the one-shard rows' load.
fn scaling(first_row: usize, kernel: &RowSpec, bypass: &RowSpec) -> Vec<RowSpec> {
    const NAMES: [[&str; 2]; 3] = [
        [
            "tuned kernel + busy poll, 2 shards (vs row 4)",
            "bypass, 2 shards (vs the kernel's 2)",
        ],
        [
            "tuned kernel + busy poll, 4 shards (vs row 4)",
            "bypass, 4 shards (vs the kernel's 4)",
        ],
        [
            "tuned kernel + busy poll, 8 shards (vs row 4)",
            "bypass, 8 shards (vs the kernel's 8)",
        ],
    ];
    SCALING_SHARDS
        .iter()
        .zip(NAMES)
        .enumerate()
        .flat_map(|(i, (&shards, [k, b]))| {
            let kernel_row = first_row + 2 * i;
            [
                RowSpec {
                    name: k,
                    workload: Workload::HttpScaling,
                    base_row: 4,
                    seed: None,
                    shards,
                    ..kernel.clone()
                },
                RowSpec {
                    name: b,
                    workload: Workload::HttpScaling,
                    base_row: kernel_row,
                    seed: None,
                    shards,
                    ..bypass.clone()
                },
            ]
        })
        .collect()
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

/// The seed ladder (rows 1-6), the bypass stack (7), Photon's echo table (8-11), the L4
/// load balancer against nftables (12-13), and the scaling rows (14-19, [`scaling`]).
pub(crate) fn ladder() -> Vec<RowSpec> {
    let mut rows = http_rows();
    rows.extend(echo_rows());
    rows.extend(load_balancer_rows());
    let widths = scaling(rows.len() + 1, &rows[3], &rows[6]);
    rows.extend(widths);
    rows
}

/// Rows 1-7: seed 000's HTTP ladder, io_uring, nginx and our stack.
fn http_rows() -> Vec<RowSpec> {
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
    ]
}

/// Rows 8-11: Photon's echo table.
fn echo_rows() -> Vec<RowSpec> {
    vec![
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
            shards: 1,
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
            shards: 1,
        },
        RowSpec {
            name: "echo stream 512 B: kernel (epoll, busy poll)",
            profile: Profile::Nic,
            server: echo_kernel(),
            workload: Workload::EchoStream,
            base_row: 10,
            seed: Some(seed::ECHO_STREAM_KERNEL),
            shards: 1,
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
            shards: 1,
        },
    ]
}

/// Rows 12-13: the L4 load balancer.
fn load_balancer_rows() -> Vec<RowSpec> {
    vec![
        // The L4 load balancer (docs/LB.md, "Benchmark"): full-NAT pps, on the DUT, against nftables. The
        // DPVS seed gives no kernel figure to divide DPVS's by, so these rows have no seed
        // ratio (crate::seed).
        RowSpec {
            name: "L4 LB full-NAT 64 B TCP pps: nftables DNAT+SNAT",
            profile: Profile::Default,
            server: Server::LoadBalancer { xdp: false },
            workload: Workload::LbFullNatPps,
            base_row: 12,
            seed: None,
            shards: 1,
        },
        RowSpec {
            name: "L4 LB full-NAT 64 B TCP pps: wirespeed lb (vs row 12)",
            profile: Profile::Default,
            server: Server::LoadBalancer { xdp: true },
            workload: Workload::LbFullNatPps,
            base_row: 12,
            seed: None,
            shards: 1,
        },
    ]
}

/// The chosen rows (1-based) and the base row each is compared with, and its base in turn:
/// without its base, a row's ratio would be taken against row 1, another workload.
pub(crate) fn with_base_rows(ladder: &[RowSpec], mut rows: Vec<usize>) -> Vec<usize> {
    rows.sort_unstable();
    rows.dedup();
    loop {
        let before = rows.len();
        let bases: Vec<usize> = rows
            .iter()
            .filter_map(|r| ladder.get(r.checked_sub(1)?))
            .map(|s| s.base_row)
            .collect();
        rows.extend(bases);
        rows.sort_unstable();
        rows.dedup();
        if rows.len() == before {
            return rows;
        }
    }
}

/// Fills what results from before a field existed lack, from the ladder row of the same
/// name: the workload and the seed's ratio (the seed's figure is the step's, not the run's).
/// A row the ladder no longer has is named by its base row and name: the HTTP ladder is
/// compared with row 1, and the load balancer's rows say so in their names. The load
/// balancer's rows from before `pps` existed held it in `rps`.
pub(crate) fn fill_from_ladder(sd: &mut Showdown) {
    let ladder = ladder();
    for row in sd.rows.iter_mut() {
        let spec = ladder.iter().find(|s| s.name == row.name);
        if row.workload.is_none() {
            row.workload = Some(match spec {
                Some(spec) => spec.workload,
                None if row.base_row <= 1 => Workload::Http,
                None if row.name.contains("LB") => Workload::LbFullNatPps,
                None if row.name.contains("stream") => Workload::EchoStream,
                None => Workload::EchoPingPong,
            });
        }
        if row.packet_rate() && row.pps.is_none() {
            for r in row.rounds.iter_mut() {
                r.pps = Some(std::mem::take(&mut r.rps));
            }
            row.pps = Some(std::mem::take(&mut row.rps));
        }
        let Some(seed) = spec.and_then(|s| s.seed) else {
            continue;
        };
        if row.seed_ratio.is_none() {
            row.seed_ratio = Some(seed.ratio);
            row.seed_source = Some(seed.source.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{RoundFigures, Row};

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
    fn a_chosen_row_brings_its_base_row_and_that_rows_base() {
        let ladder = ladder();
        assert_eq!(with_base_rows(&ladder, vec![9, 2]), [1, 2, 8, 9]);
        assert_eq!(with_base_rows(&ladder, vec![13, 0, 99]), [0, 12, 13, 99]);
        // The bypass on 4 shards: the kernel's 4 shards, its one-shard row 4, row 1.
        assert_eq!(with_base_rows(&ladder, vec![17, 17]), [1, 4, 16, 17]);
    }

    #[test]
    fn scaling_rows_widen_rows_4_and_7_and_compare_like_with_like() {
        let ladder = ladder();
        assert_eq!(ladder.len(), 19);
        let (kernel, bypass) = (&ladder[3], &ladder[6]);
        assert_eq!((kernel.shards, bypass.shards), (1, 1));
        for (i, &shards) in SCALING_SHARDS.iter().enumerate() {
            let k = &ladder[13 + 2 * i];
            let b = &ladder[14 + 2 * i];
            assert_eq!((k.shards, b.shards), (shards, shards));
            assert!(k.name.contains(&format!("{shards} shards")), "{}", k.name);
            assert_eq!(k.base_row, 4, "{}", k.name);
            assert_eq!(b.base_row, 14 + 2 * i, "{}: its kernel row", b.name);
            assert_eq!(format!("{:?}", k.server), format!("{:?}", kernel.server));
            assert_eq!(format!("{:?}", b.server), format!("{:?}", bypass.server));
            assert_eq!((k.profile, b.profile), (kernel.profile, bypass.profile));
        }
        assert!(ladder[..13].iter().all(|s| s.shards == 1));
        assert_eq!(ladder[3].workload, Workload::Http);
        assert!(ladder[13..]
            .iter()
            .all(|s| s.workload == Workload::HttpScaling));
    }

    #[test]
    fn a_row_takes_a_cpu_per_shard_on_each_side_or_says_what_it_lacks() {
        assert_eq!(
            Placement::for_shards(1),
            Placement {
                client: vec![0],
                server: vec![1]
            }
        );
        let four = Placement::for_shards(4);
        assert_eq!(
            (four.client_list(), four.server_list()),
            ("0,1,2,3".into(), "4,5,6,7".into())
        );
        let ladder = ladder();
        assert_eq!(too_few_cpus(&ladder[6], 2), None);
        let eight = &ladder[17];
        assert_eq!(too_few_cpus(eight, 16), None);
        let why = too_few_cpus(eight, 2).unwrap();
        assert!(
            why.contains("needs 16 CPUs") && why.contains("has 2"),
            "{why}"
        );
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
        assert_eq!(sd.rows[0].workload, Some(Workload::Http));
        assert_eq!(sd.rows[0].seed_ratio, Some(seed::HTTP_OS_TUNED.ratio));
        assert!(sd.rows[0]
            .seed_source
            .as_deref()
            .unwrap()
            .contains("726,154"));
        assert_eq!(sd.rows[1].workload, Some(Workload::LbFullNatPps));
        assert_eq!(sd.rows[1].seed_ratio, None);
    }

    #[test]
    fn older_results_name_unknown_rows_by_base_row_and_name_and_move_pps_out_of_rps() {
        // As older results read: no workload (or an empty one), the LB row's pps in rps.
        let row = |row: usize, name: &str, base_row: usize, rps: f64| Row {
            row,
            name: name.into(),
            base_row,
            rps,
            rounds: vec![RoundFigures {
                rps,
                ..Default::default()
            }],
            ..Default::default()
        };
        let old = Showdown {
            rows: vec![
                row(1, "an old kernel row", 1, 100.0),
                row(8, "echo stream: old", 8, 50.0),
                row(12, "L4 LB: old", 12, 2e6),
            ],
            ..Default::default()
        };
        let mut v = serde_json::to_value(&old).unwrap();
        for (i, r) in v["rows"].as_array_mut().unwrap().iter_mut().enumerate() {
            let r = r.as_object_mut().unwrap();
            r.remove("workload");
            if i == 1 {
                r.insert("workload".into(), "".into());
            }
        }
        let mut sd: Showdown = serde_json::from_value(v).unwrap();
        fill_from_ladder(&mut sd);
        let kinds: Vec<_> = sd.rows.iter().map(|r| r.workload).collect();
        assert_eq!(
            kinds,
            [
                Some(Workload::Http),
                Some(Workload::EchoStream),
                Some(Workload::LbFullNatPps)
            ]
        );
        let lb = &sd.rows[2];
        assert_eq!((lb.rps, lb.pps), (0.0, Some(2e6)));
        assert_eq!((lb.rounds[0].rps, lb.rounds[0].pps), (0.0, Some(2e6)));
        assert_eq!(sd.rows[0].pps, None);
        let v = serde_json::to_value(&sd.rows[2]).unwrap();
        assert_eq!(v["workload"], "lb-fullnat-pps");
        assert_eq!(v["pps"], 2e6);
    }
}
