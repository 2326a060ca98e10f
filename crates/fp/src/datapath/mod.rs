//! The XDP/TC data path: the fast-path object loaded and specialized ([`loader`]), attached
//! ([`attach`]), the actions that make it match the plan ([`reconcile`]) executed against it
//! ([`apply`]), its counters read back ([`stats`], [`rule_counters`]). See docs/FASTPATH.md,
//! "How it works".

pub mod apply;
pub mod attach;
pub mod loader;
pub mod reconcile;
pub mod rule_counters;
pub mod stats;
pub mod test_run;
