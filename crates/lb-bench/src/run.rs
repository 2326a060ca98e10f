//! Running lb_bench: the lab, the rows, the alternation.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::frames::{self, Addressing};
use super::lab::Bench;
use super::opts::Opts;
use super::{median, nft, redis, Balancer, Mode, PpsRow, Report, Running, Scaling, Traffic};
use crate::{Error, Result};
use wirespeed_load::stats::Ratio;
use wirespeed_xdpgen::{Gen, Link};

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: what.into(),
        source,
    }
}

fn lab_err(e: wirespeed_lab::Error) -> Error {
    Error::Invalid(format!("lab: {e}"))
}

/// One measurement's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    /// Frames that reached a backend translated right, per second.
    pps: f64,
    /// Frames the generator ran, per second.
    offered: f64,
    /// Frames at the sinks that were not translated right, per second.
    wrong: f64,
    /// Busy share of the CPUs the generators ran on (1.0: all of them all the time).
    busy: f64,
}

/// Runs `f` on a new thread pinned to `cpu` (in the calling thread's namespace).
fn on_cpu<T: Send + 'static>(
    cpu: usize,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    std::thread::spawn(move || {
        wirespeed_load::cpu::pin_current_thread(cpu)?;
        f()
    })
    .join()
    .map_err(|_| Error::Invalid(format!("the thread on CPU {cpu} panicked")))?
}

/// Runs the generator on each of `cpus` (threads in the calling thread's namespace, frames
/// arriving on `ifindex`) and counts at the sinks over `secs` after `warm`.
fn measure(gen: &Arc<Gen>, ifindex: u32, cpus: &[usize], opts: &Opts) -> Result<Sample> {
    let total = opts.warmup + opts.duration + Duration::from_millis(200);
    let frame = [0u8; Gen::FRAME_LEN];
    let handles: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            let g = gen.clone();
            std::thread::spawn(move || -> Result<u64> {
                wirespeed_load::cpu::pin_current_thread(cpu)?;
                Ok(g.receive(&frame, ifindex, total)?)
            })
        })
        .collect();
    std::thread::sleep(opts.warmup);
    let (r0, m0, c0, t0, j0) = (
        gen.received()?,
        gen.sink_matched()?,
        gen.sink_count()?,
        Instant::now(),
        wirespeed_load::cpu::jiffies_per_cpu(),
    );
    std::thread::sleep(opts.duration);
    let (r1, m1, c1, t1, j1) = (
        gen.received()?,
        gen.sink_matched()?,
        gen.sink_count()?,
        Instant::now(),
        wirespeed_load::cpu::jiffies_per_cpu(),
    );
    for h in handles {
        h.join()
            .map_err(|_| Error::Invalid("generator thread panicked".into()))??;
    }
    let dt = (t1 - t0).as_secs_f64();
    let busy = cpus
        .iter()
        .filter_map(|&c| Some((j1.get(c)?, j0.get(c)?)))
        .map(|(a, b)| (a.0 - b.0) as f64 / (a.1 - b.1).max(1) as f64)
        .sum::<f64>()
        / cpus.len().max(1) as f64;
    Ok(Sample {
        pps: (m1 - m0) as f64 / dt,
        offered: (r1 - r0) as f64 / dt,
        wrong: ((c1 - c0).saturating_sub(m1 - m0)) as f64 / dt,
        busy,
    })
}

/// Which side of a row runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Lb,
    Nft,
}

/// A pps row.
#[derive(Clone, Copy)]
struct RowSpec {
    mode: Mode,
    traffic: Traffic,
    /// Every frame from a new source (new connections per second).
    distinct: bool,
    /// Flows of this row use source ports from here, so no row meets another's conntrack
    /// entries (a SYN_SENT entry makes a later ACK invalid).
    port_base: u16,
}

impl RowSpec {
    fn name(&self) -> String {
        if self.distinct {
            format!(
                "{} new connections (SYNs from new sources)",
                self.mode.name()
            )
        } else {
            format!("{} {}", self.mode.name(), self.traffic.name())
        }
    }
}

/// What the measuring thread owns.
struct Ctx<'a> {
    bench: &'a Bench,
    gen: Arc<Gen>,
    eth0: u32,
    balancer: Option<&'a dyn Balancer>,
    opts: &'a Opts,
}

impl Ctx<'_> {
    /// [`measure`] on `cpus`; on one CPU the backends' receive runs on the other CPU (see
    /// [`Bench::backends_receive_on`]), on all of them it stays with the sender.
    fn measure(&self, cpus: &[usize]) -> Result<Sample> {
        let apart = (cpus.len() == 1).then_some(self.opts.other_cpu);
        self.bench.backends_receive_on(apart)?;
        measure(&self.gen, self.eth0, cpus, self.opts)
    }

    fn balancer(&self) -> Result<&dyn Balancer> {
        self.balancer
            .ok_or_else(|| Error::Invalid("no balancer to measure".into()))
    }

    fn frames(&self, a: &Addressing, row: &RowSpec, traffic: Traffic) -> Vec<[u8; Gen::FRAME_LEN]> {
        if row.distinct {
            let mut base = frames::frame(
                a,
                traffic,
                frames::Flow {
                    src: Ipv4Addr::new(198, 18, 10, 0),
                    sport: 0,
                },
            );
            // the generator fills in source octet and port (see Gen::distinct_sources)
            base[29] = 0;
            return vec![base];
        }
        frames::flows(a, self.opts.flows, row.port_base)
            .into_iter()
            .map(|f| frames::frame(a, traffic, f))
            .collect()
    }

    /// One side of one round of `row`: set up, prime, check a sample, measure, tear down.
    fn side(&self, row: &RowSpec, side: Side) -> Result<(Sample, Vec<(String, u64)>)> {
        let a = self.bench.addressing(row.mode);
        let running: Option<Box<dyn Running>> = match side {
            Side::Lb => Some(
                self.balancer()?
                    .start(&self.bench.setup(row.mode, self.opts.toa))?,
            ),
            Side::Nft => {
                nft::load(&self.bench.lb_ns, &nft::ruleset(&a, row.mode))?;
                None
            }
        };
        let result = self.prepare(row, side, &a, &[]).and_then(|()| {
            let s = self.measure(&[self.opts.dut_cpu])?;
            if s.wrong > 0.01 * s.pps.max(1.0) {
                return Err(Error::Invalid(format!(
                    "{}: {:.0} frames/s reached the backends translated wrong ({:.0}/s right)",
                    row.name(),
                    s.wrong,
                    s.pps
                )));
            }
            Ok(s)
        });
        let reasons = running.as_ref().map(|r| r.reasons()).unwrap_or_default();
        drop(running);
        if side == Side::Nft {
            nft::remove(&self.bench.lb_ns);
        }
        match result {
            Ok(s) => Ok((s, reasons)),
            Err(e) if reasons.is_empty() => Err(e),
            Err(e) => Err(Error::Invalid(format!(
                "{e}; the balancer's pass/drop reasons: {reasons:?}"
            ))),
        }
    }

    /// Primes connection state, loads the row's frames and expectations, and checks one
    /// forwarded frame in full.
    fn prepare(
        &self,
        row: &RowSpec,
        side: Side,
        a: &Addressing,
        windows: &[(usize, u32, u32)],
    ) -> Result<()> {
        let gen = &self.gen;
        let dut = self.opts.dut_cpu;
        gen.distinct_sources(None)?;
        gen.set_windows(windows)?;
        // Established connections: the balancer sees their SYNs first, each on the CPU that
        // carries the flow (its connection table is that CPU's); nftables picks up mid-stream
        // connections by itself. For NAT and full-NAT the backends answer each SYN, as a
        // server would: a balancer may keep a connection half-open until the client's ACK
        // acknowledges the real's SYN-ACK (docs/LB.md, "Half-open connections").
        if row.traffic == Traffic::TcpAck && side == Side::Lb {
            let answer = matches!(row.mode, Mode::Nat | Mode::FullNat);
            if answer {
                gen.answer_syns(Some(frames::ACK_NUMBER - 1))?;
            }
            let syns = self.frames(a, row, Traffic::TcpSyn);
            gen.set_frames(&syns)?;
            let primers: Vec<(usize, u32)> = if windows.is_empty() {
                vec![(dut, syns.len() as u32)]
            } else {
                windows.iter().map(|w| (w.0, w.2)).collect()
            };
            for (cpu, n) in primers {
                let (g, f, eth0) = (gen.clone(), syns[0], self.eth0);
                on_cpu(cpu, move || Ok(g.receive_count(&f, eth0, n)?))?;
            }
            if answer {
                // The answers cross two veths in softirq after the runs return.
                std::thread::sleep(Duration::from_millis(50));
                gen.answer_syns(None)?;
            }
        }
        let frames = self.frames(a, row, row.traffic);
        gen.set_frames(&frames)?;
        if row.distinct {
            gen.distinct_sources(Some(50))?;
        }
        let expect_mode = match side {
            Side::Lb => row.mode,
            Side::Nft => row.mode.linux(),
        };
        gen.expect(&frames::expectations(a, expect_mode, row.traffic))?;
        gen.arm_sample()?;
        let (g, f, eth0) = (gen.clone(), frames[0], self.eth0);
        on_cpu(dut, move || Ok(g.receive_count(&f, eth0, 64)?))?;
        let who = match side {
            Side::Lb => "the balancer",
            Side::Nft => "nftables",
        };
        let sample = gen.sample()?.ok_or_else(|| {
            Error::Invalid(format!(
                "{}: no frame reached a backend through {who}",
                row.name()
            ))
        })?;
        frames::check_sample(a, expect_mode, row.traffic, &sample).map_err(|why| {
            Error::Invalid(format!(
                "{}: {who} forwarded a wrong frame: {why}",
                row.name()
            ))
        })
    }

    fn row(&self, row: &RowSpec) -> Result<PpsRow> {
        let name = row.name();
        let (mut lb, mut nf) = (vec![], vec![]);
        let mut out = PpsRow {
            name: name.clone(),
            ..Default::default()
        };
        for round in 1..=self.opts.rounds {
            let (l, reasons) = self.side(row, Side::Lb)?;
            let (n, _) = self.side(row, Side::Nft)?;
            eprintln!(
                "  {name} round {round}/{}: LB {:.3} Mpps, nft {:.3} Mpps ({:.2}x); delivered {:.0}% / {:.0}%",
                self.opts.rounds,
                l.pps / 1e6,
                n.pps / 1e6,
                l.pps / n.pps.max(1.0),
                100.0 * l.pps / l.offered.max(1.0),
                100.0 * n.pps / n.offered.max(1.0)
            );
            out.lb_reasons = reasons;
            lb.push(l);
            nf.push(n);
        }
        let pps = |v: &[Sample]| v.iter().map(|s| s.pps).collect::<Vec<_>>();
        let ns = |v: &[Sample]| {
            median(
                &v.iter()
                    .map(|s| s.busy * 1e9 / s.pps.max(1.0))
                    .collect::<Vec<_>>(),
            )
        };
        let delivered = |v: &[Sample]| {
            median(
                &v.iter()
                    .map(|s| 100.0 * s.pps / s.offered.max(1.0))
                    .collect::<Vec<_>>(),
            )
        };
        out.lb_pps = pps(&lb);
        out.nft_pps = pps(&nf);
        out.lb_pps_median = median(&out.lb_pps);
        out.nft_pps_median = median(&out.nft_pps);
        out.ratio = Ratio::of(
            lb.iter()
                .zip(&nf)
                .map(|(l, n)| l.pps / n.pps.max(1.0))
                .collect(),
        );
        out.lb_ns_per_packet = ns(&lb);
        out.nft_ns_per_packet = ns(&nf);
        out.lb_delivered_pct = delivered(&lb);
        out.nft_delivered_pct = delivered(&nf);
        Ok(out)
    }

    /// The balancer alone on 1 CPU, then on 2, round by round.
    fn scaling(&self) -> Result<Scaling> {
        let row = RowSpec {
            mode: Mode::FullNat,
            traffic: Traffic::TcpAck,
            distinct: false,
            port_base: 1024 + 14 * 4096,
        };
        let a = self.bench.addressing(row.mode);
        let mut out = Scaling {
            name: format!("{} on 2 CPUs vs 1", row.name()),
            ..Default::default()
        };
        let both = [self.opts.dut_cpu, self.opts.other_cpu];
        for round in 1..=self.opts.rounds {
            let running = self
                .balancer()?
                .start(&self.bench.setup(row.mode, self.opts.toa))?;
            // Each CPU its own half of the flows, primed there, as RSS would spread them; the
            // 1-CPU run carries the DUT CPU's half alone.
            let half = (self.opts.flows / 2) as u32;
            self.prepare(
                &row,
                Side::Lb,
                &a,
                &[
                    (self.opts.dut_cpu, 0, half),
                    (self.opts.other_cpu, half, half),
                ],
            )?;
            let two = self.measure(&both)?;
            let one = self.measure(&[self.opts.dut_cpu])?;
            drop(running);
            self.gen.set_windows(&[])?;
            eprintln!(
                "  {} round {round}/{}: 1 CPU {:.3} Mpps, 2 CPUs {:.3} Mpps ({:.2}x)",
                out.name,
                self.opts.rounds,
                one.pps / 1e6,
                two.pps / 1e6,
                two.pps / one.pps.max(1.0)
            );
            out.one_cpu_pps.push(one.pps);
            out.two_cpu_pps.push(two.pps);
        }
        out.ratio = Ratio::of(
            out.two_cpu_pps
                .iter()
                .zip(&out.one_cpu_pps)
                .map(|(t, o)| t / o.max(1.0))
                .collect(),
        );
        Ok(out)
    }

    /// The instrument's own cost (frames run into an XDP drop on the DUT's interface), then
    /// the floor of an XDP forwarder here (MACs set, redirected to backend 0, counted at its
    /// sink): ns per packet of the DUT's core, each.
    fn baseline(&self) -> Result<(f64, f64)> {
        self.gen.expect(&[])?;
        self.gen.set_frames(&[])?;
        self.gen.set_windows(&[])?;
        self.gen.distinct_sources(None)?;
        let link = self.gen.attach_sink(self.eth0)?;
        let s = self.measure(&[self.opts.dut_cpu])?;
        drop(link);
        let a = &self.bench.same_ports;
        let out = wirespeed_sys::packet::if_index("eth1").map_err(io("the lb's eth1"))?;
        let link = self
            .gen
            .attach_forwarder(self.eth0, out, a.reals[0].1, a.reals[0].2)?;
        let f = self.measure(&[self.opts.dut_cpu])?;
        drop(link);
        Ok((s.busy * 1e9 / s.pps.max(1.0), f.busy * 1e9 / f.pps.max(1.0)))
    }
}

fn shell(cmd: &str) -> String {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Builds the `lb` lab, loads the generator, attaches the sinks, and runs `f` on a thread in
/// the load balancer's namespace; takes the lab down after, whatever `f` returned.
fn with_lab<T: Send + 'static>(
    opts: &Opts,
    balancer: Option<Arc<dyn Balancer>>,
    f: impl FnOnce(&Ctx, Vec<Link>) -> Result<T> + Send + 'static,
) -> Result<T> {
    eprintln!("lb_bench: building the lb lab `{}`", opts.lab);
    let bench = Arc::new(Bench::up(opts)?);
    let gen = Arc::new(Gen::load(&[0u8; Gen::FRAME_LEN])?);
    let sinks = bench.sinks(&gen)?;
    let lb_ns = bench.lb_ns.clone();
    let (b, o) = (bench.clone(), opts.clone());
    let result = wirespeed_sys::netns::in_netns(&lb_ns, move || -> Result<T> {
        let eth0 = wirespeed_sys::packet::if_index("eth0").map_err(io("the lb's eth0"))?;
        let ctx = Ctx {
            bench: &b,
            gen,
            eth0,
            balancer: balancer.as_deref(),
            opts: &o,
        };
        f(&ctx, sinks)
    })
    .map_err(io("enter the load balancer's namespace"))
    .and_then(|r| r);
    let bench =
        Arc::try_unwrap(bench).map_err(|_| Error::Invalid("the lab is still in use".into()))?;
    bench.lab.down().map_err(lab_err)?;
    result
}

/// Figures of one side of one row (the showdown's LB rows).
#[derive(Clone, Copy, Debug, Default)]
pub struct SideFigures {
    /// Frames that reached a backend translated right, per second.
    pub pps: f64,
    /// The DUT core's busy share (0 to 1).
    pub busy: f64,
    /// CPU time per packet on the DUT's core: busy x 1e9 / pps.
    pub ns_per_packet: f64,
}

/// One measurement of one side on a lab of its own: `balancer` (None: nftables) in `mode`
/// with `traffic`, checked as lb_bench checks it. The showdown's LB rows run this.
pub fn measure_once(
    opts: &Opts,
    balancer: Option<Arc<dyn Balancer>>,
    mode: Mode,
    traffic: Traffic,
) -> Result<SideFigures> {
    let side = if balancer.is_some() {
        Side::Lb
    } else {
        Side::Nft
    };
    with_lab(opts, balancer, move |ctx, _sinks| {
        let row = RowSpec {
            mode,
            traffic,
            distinct: false,
            port_base: 1024,
        };
        let (s, _) = ctx.side(&row, side)?;
        Ok(SideFigures {
            pps: s.pps,
            busy: s.busy,
            ns_per_packet: s.busy * 1e9 / s.pps.max(1.0),
        })
    })
}

/// Runs lb_bench: builds the `lb` lab, measures every wanted row with `balancer` and with
/// nftables alternately, and takes the lab down. Progress goes to stderr.
pub fn run(opts: &Opts, balancer: Arc<dyn Balancer>) -> Result<Report> {
    let mut report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: shell("date -u +%Y-%m-%dT%H:%M:%SZ"),
        uname_r: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        commit: shell("git rev-parse --short HEAD 2>/dev/null"),
        balancer: balancer.describe(),
        method: "on the DUT: BPF_PROG_RUN live frames arrive on the balancer's client-side veth \
                 on the DUT's CPU in its namespace; XDP sinks on the 4 backends count the frames \
                 translated right, receiving on the other CPU (threaded NAPI), as a NIC's \
                 receiver is another machine; the balancer and nftables alternate round by round"
            .into(),
        warmup_s: opts.warmup.as_secs_f64(),
        duration_s: opts.duration.as_secs_f64(),
        rounds: opts.rounds,
        dut_cpu: opts.dut_cpu,
        other_cpu: opts.other_cpu,
        flows: opts.flows,
        ..Default::default()
    };
    let measured = with_lab(opts, Some(balancer), |ctx, sinks| {
        let o = ctx.opts;
        let mut r = Report::default();
        if o.wanted("instrument baseline") {
            match ctx.baseline() {
                Ok((alone, forward)) => {
                    eprintln!(
                        "  instrument alone {alone:.0} ns/packet, bare XDP forward {forward:.0} ns/packet"
                    );
                    r.baseline_ns_per_packet = Some(alone);
                    r.forward_floor_ns_per_packet = Some(forward);
                }
                Err(e) => r.failed.push(format!("instrument baseline: {e}")),
            }
        }
        let mut specs = vec![];
        for mode in Mode::ALL {
            for traffic in Traffic::ALL {
                specs.push(RowSpec {
                    mode,
                    traffic,
                    distinct: false,
                    port_base: 1024 + specs.len() as u16 * 4096,
                });
            }
        }
        for spec in &specs {
            if !o.wanted(&spec.name()) {
                continue;
            }
            match ctx.row(spec) {
                Ok(row) => r.rows.push(row),
                Err(e) => {
                    eprintln!("  FAILED {e}");
                    r.failed.push(e.to_string());
                }
            }
        }
        let cps = RowSpec {
            mode: Mode::FullNat,
            traffic: Traffic::TcpSyn,
            distinct: true,
            port_base: 0,
        };
        if o.wanted(&cps.name()) {
            match ctx.row(&cps) {
                Ok(row) => r.new_connections = Some(row),
                Err(e) => {
                    eprintln!("  FAILED {e}");
                    r.failed.push(e.to_string());
                }
            }
        }
        if o.wanted("full-NAT TCP ACK on 2 CPUs vs 1") {
            match ctx.scaling() {
                Ok(s) => r.scaling = Some(s),
                Err(e) => {
                    eprintln!("  FAILED 2 CPUs vs 1: {e}");
                    r.failed.push(format!("2 CPUs vs 1: {e}"));
                }
            }
        }
        // The sinks answer nothing; real clients need them gone. Real traffic keeps the
        // veths' default: the receive on the sending CPU.
        ctx.bench.backends_receive_on(None)?;
        drop(sinks);
        if o.wanted("redis") {
            for mode in [Mode::FullNat, Mode::Dr] {
                match redis::compare(ctx.bench, ctx.balancer()?, mode, o) {
                    Ok(row) => r.redis.push(row),
                    Err(e) => {
                        eprintln!("  FAILED redis {}: {e}", mode.name());
                        r.failed
                            .push(format!("redis-benchmark {}: {e}", mode.name()));
                    }
                }
            }
        }
        Ok(r)
    });
    let m = measured?;
    report.baseline_ns_per_packet = m.baseline_ns_per_packet;
    report.forward_floor_ns_per_packet = m.forward_floor_ns_per_packet;
    report.rows = m.rows;
    report.new_connections = m.new_connections;
    report.scaling = m.scaling;
    report.redis = m.redis;
    report.failed = m.failed;
    Ok(report)
}
