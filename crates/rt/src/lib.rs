//! Thread-per-core runtime.
//!
//! One *shard* per selected CPU: a pinned OS thread that runs a single-threaded executor, a
//! timer heap and one kernel I/O engine (epoll or io_uring). Tasks never move between shards;
//! shards talk only through [`smp::submit_to`], which rides on single-producer rings with no
//! lock and no read-modify-write atomics.
//!
//! ```no_run
//! use wirespeed_rt::{Runtime, EngineKind};
//! Runtime::builder()
//!     .cpus(vec![0, 1])
//!     .engine(EngineKind::Epoll)
//!     .run(|| async {
//!         wirespeed_rt::sleep(std::time::Duration::from_millis(10)).await;
//!         println!("hello from shard {}", wirespeed_rt::shard_id());
//!     })
//!     .unwrap();
//! ```
//!
//! Wakers must be woken on the shard that owns the task. Everything in this crate does so;
//! work that finishes on another thread must come back through [`smp::submit_to`].

mod error;
mod executor;
pub mod io;
mod shard;
pub mod signal;
pub mod smp;
pub mod sync;
pub mod sys;
mod time;

pub use error::Error;
pub use executor::{select, spawn, yield_now, Either, JoinHandle};
pub use io::EngineKind;
pub use shard::{
    add_poller, add_poller_with_wakeup, busy_poll_napi, cpu, engine_kind, idle_sleep_us, poll_us,
    shard_count, shard_id, shutdown_requested, shutdown_signal, Polled, Runtime, RuntimeBuilder,
    ShutdownHandle,
};
pub use time::{interval, now, race, sleep, sleep_until, timeout, Elapsed, Interval, Sleep};
