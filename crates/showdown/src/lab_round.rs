//! One round of one row in this machine's lab: a `pair` lab with the row's profile, the
//! row's server in it, the load from the client namespace, then the lab taken down.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use wirespeed_lab::topo::{Lab, LabSpec, Topology};
use wirespeed_probe::{Probe, ProbeOpts, ProbeReport};

use crate::client::{drive, ServerProbe};
use crate::interrupt::check_interrupt;
use crate::lb_rows;
use crate::plan::{RoundPlan, RoundRun, LAB, NGINX_DIR};
use crate::results::Workload;
use crate::rows::{Placement, RowSpec, Server};
use crate::server::{serve_addr, start_server};

/// How long each row and round is traced with the BPF probes, after its measured interval.
const TRACED_INTERVAL: Duration = Duration::from_secs(1);

pub(crate) fn run_row(spec: &RowSpec, plan: &RoundPlan, out: &Path) -> anyhow::Result<RoundRun> {
    run_row_at(spec, &Placement::for_shards(spec.shards), plan, out)
}

/// [`run_row`] on the CPUs of `at`, one veth queue per server CPU.
fn run_row_at(
    spec: &RowSpec,
    at: &Placement,
    plan: &RoundPlan,
    out: &Path,
) -> anyhow::Result<RoundRun> {
    check_interrupt()?;
    if let Server::LoadBalancer { xdp } = spec.server {
        let (figures, server) =
            lb_rows::round(xdp, at.server[0], at.client[0], plan.warmup, plan.duration)?;
        return Ok(RoundRun {
            figures,
            server,
            settings: vec![],
            mtu: None,
        });
    }
    let mut ls = LabSpec::new(LAB, Topology::Pair);
    ls.profile = spec.profile;
    ls.rx_model = plan.rx_model;
    ls.napi_defer_hard_irqs = plan.napi_defer_hard_irqs;
    ls.gro_flush_timeout_ns = plan.gro_flush_timeout_ns;
    ls.napi_defer_roles = vec!["s".into()];
    ls.queues = at.server.len() as u32;
    ls.cpus.insert("c".into(), at.client.clone());
    ls.cpus.insert("s".into(), at.server.clone());
    let lab = Lab::up(&ls).context("lab up")?;
    let mut settings = vec![format!(
        "lab {}: client CPUs {}, server CPUs {}, {} queue(s) per veth, profile {}",
        ls.topology.name(),
        at.client_list(),
        at.server_list(),
        ls.queues,
        ls.profile.name()
    )];
    settings.extend(lab.tuning.iter().cloned());
    if matches!(spec.workload, Workload::EchoPingPong | Workload::EchoStream) {
        set_mtu(&lab, plan.echo_mtu, &mut settings)?;
    }
    let mtu = link_mtu(&lab, "s");
    let (server, line) = start_server(
        spec,
        &at.server_list(),
        &lab,
        &out.join("showdown-server.log"),
        Path::new(NGINX_DIR),
    )?;

    let addr = serve_addr(spec, &lab)?;
    let client_ns = Some(format!("ws-{LAB}-c"));
    let probe_opts = |bpf| ProbeOpts {
        pid: server.pid(),
        cpus: Some(at.server.clone()),
        bpf,
        receive_threads: lab.napi_threads("s").to_vec(),
    };
    // The BPF probes run a program on every syscall and received packet of the machine:
    // about 3 µs per request on the syscall-bound rows (docs/INSTRUMENTS.md). So the
    // figures come from an untraced interval, and the syscall and locality figures from a
    // short traced one after it, on the same server.
    let mut probe = LocalProbe(Some(Probe::prepare(&probe_opts(false))?));
    let mut figures = drive(spec, plan, at, addr, client_ns.clone(), &mut probe)?;
    if plan.bpf {
        let traced_plan = RoundPlan {
            warmup: Duration::from_millis(200),
            duration: TRACED_INTERVAL,
            ..*plan
        };
        let mut traced = LocalProbe(Some(Probe::prepare(&probe_opts(true))?));
        let t = drive(spec, &traced_plan, at, addr, client_ns, &mut traced)?;
        figures.syscalls_per_req = t.syscalls_per_req;
        figures.locality_pct = t.locality_pct;
    }
    drop(server);
    lab.down()?;
    Ok(RoundRun {
        figures,
        server: line,
        settings,
        mtu,
    })
}

/// Sets `mtu` on both ends of the lab's link (before any server or XDP program is on it).
fn set_mtu(lab: &Lab, mtu: u32, settings: &mut Vec<String>) -> anyhow::Result<()> {
    for role in ["c", "s"] {
        let (Some(ns), Some(i)) = (lab.ns(role), lab.node(role).and_then(|n| n.ifaces.first()))
        else {
            bail!("lab has no `{role}` node");
        };
        ns.ip(&["link", "set", &i.name, "mtu", &mtu.to_string()])
            .with_context(|| format!("set MTU {mtu} on {role}:{}", i.name))?;
        settings.push(format!("{role}:{} mtu {mtu}", i.name));
    }
    Ok(())
}

/// The MTU of node `role`'s first interface, as the kernel reports it.
fn link_mtu(lab: &Lab, role: &str) -> Option<u32> {
    let name = &lab.node(role)?.ifaces.first()?.name;
    let text = lab.ns(role)?.ip(&["-o", "link", "show", name]).ok()?;
    let mut words = text.split_whitespace();
    words.find(|w| *w == "mtu")?;
    words.next()?.parse().ok()
}

/// A probe on a server in this machine's lab.
struct LocalProbe(Option<Probe>);

impl ServerProbe for LocalProbe {
    fn begin(&mut self) -> anyhow::Result<()> {
        Ok(self.0.as_mut().context("probe already ended")?.begin()?)
    }

    fn end(&mut self) -> anyhow::Result<ProbeReport> {
        Ok(self.0.take().context("probe already ended")?.end()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{ladder, MODERATION_DEFER_HARD_IRQS, MODERATION_GRO_FLUSH_TIMEOUT_NS};
    use wirespeed_lab::topo::{self, RxModel};

    /// The scaling rows' plumbing, on any machine: rows 14 and 15 (2 shards) with the two
    /// shards on CPUs 0 and 1 and the load generator on CPU 0, overlapping (a figure from
    /// this says nothing; that the lab gets two queues, the server two shards that both
    /// serve, and the load two threads' worth of connections, does).
    #[test]
    fn a_two_shard_row_runs_two_shards_on_two_queues() {
        assert!(
            wirespeed_lab::is_root(),
            "this test builds a lab: run it as root"
        );
        let _ = topo::down(LAB);
        let ladder = ladder();
        let out = std::env::temp_dir().join(format!("ws-showdown-test-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let plan = RoundPlan {
            connections: 8,
            rx_model: RxModel::Napi,
            napi_defer_hard_irqs: MODERATION_DEFER_HARD_IRQS,
            gro_flush_timeout_ns: MODERATION_GRO_FLUSH_TIMEOUT_NS,
            echo_mtu: 1500,
            warmup: Duration::from_millis(200),
            duration: Duration::from_millis(800),
            bpf: false,
        };
        let at = Placement {
            client: vec![0],
            server: vec![0, 1],
        };
        for row in [14, 15] {
            let spec = &ladder[row - 1];
            assert_eq!(spec.shards, 2, "{}", spec.name);
            // What start_server asks the bypass server to write at exit (--summary-json).
            let summary = out.join("showdown-server.json");
            let _ = std::fs::remove_file(&summary);
            let run = run_row_at(spec, &at, &plan, &out).unwrap();
            assert!(run.server.contains("--cpus 0,1"), "{}", run.server);
            assert!(
                run.settings[0].contains("server CPUs 0,1, 2 queue(s) per veth"),
                "{:?}",
                run.settings
            );
            let fig = &run.figures;
            assert!(fig.rps > 0.0 && fig.errors == 0, "row {row}: {fig:?}");
            if matches!(spec.server, Server::WirespeedXdp { .. }) {
                // Each shard's queue got frames: its stack's rx_frames in the exit summary.
                let text = std::fs::read_to_string(&summary).unwrap();
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                for shard in 0..2 {
                    let rx = v["stack"][shard]["rx_frames"].as_u64();
                    assert!(rx.is_some_and(|n| n > 0), "shard {shard} idle:\n{text}");
                }
            }
        }
        let _ = std::fs::remove_dir_all(&out);
    }
}
