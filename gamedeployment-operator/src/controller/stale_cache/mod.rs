//! Stale-cache protection: the watch caches the controller observes through lag behind its own writes, so a pass
//! must not plan from a cache that does not show them yet.
//!
//! - [`write_expectations`]: pod creates, deletes and patches and revision creates the cache must show before the
//!   next pass of a GameDeployment may plan (the pass waits);
//! - [`hookrun_expectations`]: HookRuns the controller created or deleted, laid over the cached runs until the
//!   cache agrees (the pass plans from the corrected view).
//!
//! Both expire after `--expectations-timeout`, so a lost watch event never freezes a GameDeployment.

pub(crate) mod hookrun_expectations;
pub(crate) mod write_expectations;
