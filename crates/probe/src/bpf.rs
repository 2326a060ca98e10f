//! Loader for bpf/probe.bpf.c: syscall counts and packet locality of one process.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use wirespeed_load::{Error, Result};

#[allow(
    clippy::all,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    unused,
    unsafe_code // the generated skeleton: the one place outside sys/rt/nic that may hold unsafe
)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/probe.skel.rs"));
}

mod names {
    include!(concat!(env!("OUT_DIR"), "/syscall_names.rs"));
    include!(concat!(env!("OUT_DIR"), "/probe_consts.rs"));
}

/// The name of syscall number `nr` on this architecture.
pub fn syscall_name(nr: usize) -> String {
    match names::SYSCALL_NAMES.get(nr) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => format!("syscall_{nr}"),
    }
}

/// What the BPF side counted.
#[derive(Debug, Default, Clone)]
pub struct BpfCounts {
    pub syscalls: BTreeMap<String, u64>,
    /// rx_local, rx_remote, tx_local, tx_remote
    pub locality: Option<[u64; 4]>,
    pub locality_error: Option<String>,
}

impl BpfCounts {
    /// The counts accumulated since `earlier`.
    pub fn since(mut self, earlier: Option<&BpfCounts>) -> BpfCounts {
        let Some(e) = earlier else { return self };
        for (k, v) in self.syscalls.iter_mut() {
            *v = v.saturating_sub(*e.syscalls.get(k).unwrap_or(&0));
        }
        self.syscalls.retain(|_, v| *v > 0);
        if let (Some(l), Some(l0)) = (self.locality.as_mut(), e.locality) {
            for (a, b) in l.iter_mut().zip(l0) {
                *a = a.saturating_sub(b);
            }
        }
        self
    }
}

fn bpf_err(what: &str) -> impl FnOnce(libbpf_rs::Error) -> Error + '_ {
    move |e| {
        Error::Invalid(format!(
            "BPF probe {what}: {e} (needs root and a kernel with BTF)"
        ))
    }
}

/// Attached probes; dropping the session detaches them.
pub struct Session {
    skel: skel::ProbeSkel<'static>,
    /// Why the locality programs are not loaded, when they are not.
    locality_error: Option<String>,
}

/// The programs, in the order of `enable` below.
const PROGS: [&str; 4] = ["count_syscall", "rx_locality", "tx_producer", "tx_locality"];

fn open_and_load(pid: i32, enable: [bool; 4]) -> Result<skel::ProbeSkel<'static>> {
    // The skeleton borrows its object storage for its whole life. A probe session is made a
    // handful of times per process, so leaking these few bytes keeps the borrow simple and
    // sound.
    let slot: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
        Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = skel::ProbeSkelBuilder::default()
        .open(slot)
        .map_err(bpf_err("open"))?;
    open.maps.rodata_data.target_tgid = pid as u32;
    open.progs.count_syscall.set_autoload(enable[0]);
    open.progs.rx_locality.set_autoload(enable[1]);
    open.progs.tx_producer.set_autoload(enable[2]);
    open.progs.tx_locality.set_autoload(enable[3]);
    let mut skel = open.load().map_err(bpf_err("load"))?;
    skel.attach().map_err(bpf_err("attach"))?;
    Ok(skel)
}

impl Session {
    /// Loads the programs specialized for `pid` and attaches them. When the locality
    /// programs cannot load here (fentry/tp_btf refused), syscall counting still runs.
    pub fn start(pid: i32) -> Result<Session> {
        if let Ok(only) = std::env::var("WS_PROBE_ONLY") {
            // Diagnostics: load one program alone to see which one a kernel refuses.
            let enable = PROGS.map(|p| p == only);
            return Ok(Session {
                skel: open_and_load(pid, enable)?,
                locality_error: None,
            });
        }
        match open_and_load(pid, [true; 4]) {
            Ok(skel) => Ok(Session {
                skel,
                locality_error: None,
            }),
            Err(e) => {
                let skel = open_and_load(pid, [true, false, false, false])?;
                Ok(Session {
                    skel,
                    locality_error: Some(format!("locality probes unavailable: {e}")),
                })
            }
        }
    }

    fn sum_percpu(map: &dyn MapCore, key: u32) -> Result<u64> {
        let vals = map
            .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
            .map_err(bpf_err("read map"))?;
        Ok(vals
            .unwrap_or_default()
            .iter()
            .map(|v| {
                v.get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_ne_bytes)
            })
            .sum())
    }

    /// Reads the counters (they keep running).
    pub fn counts(&self) -> Result<BpfCounts> {
        let mut c = BpfCounts::default();
        for nr in 0..names::MAX_SYSCALLS as u32 {
            let n = Self::sum_percpu(&self.skel.maps.syscalls, nr)?;
            if n > 0 {
                c.syscalls.insert(syscall_name(nr as usize), n);
            }
        }
        if self.locality_error.is_none() {
            let mut l = [0u64; 4];
            for (i, slot) in l.iter_mut().enumerate() {
                *slot = Self::sum_percpu(&self.skel.maps.locality, i as u32)?;
            }
            c.locality = Some(l);
        }
        c.locality_error = self.locality_error.clone();
        Ok(c)
    }
}
