//! The GameDeployment operator: a thin [`controller`] observes and executes, a pure [`planner`] decides, and every
//! pod deletion and in-place or hot-patch update the planner wants is first put to the [`gate`].
//!
//! One pass reads observe → plan → execute: [`controller`] (caches corrected by `controller::stale_cache`) →
//! [`planner::plan`] (settings, canary, diffs, scale, update, refresh, housekeeping, status; the in-place lifecycle
//! in `planner::update::inplace`) → [`action`]s → `controller::execute`.
//!
//! # Layering
//!
//! Dependencies run one way. Top to bottom; a module uses only modules on lines below its own, never one on its own
//! line or above (`tests/e2e/tests/dependency_direction.rs` reads this list and checks it against the code; `main.rs`
//! sits above it all):
//!
//! 1. [`forecast`] — `kubectl gd plan`: the planner and the controller's executor run pass after pass over a
//!    simulated cluster; nothing below uses it (the planner's tests run on `forecast::cluster`, test code is not
//!    counted);
//! 2. [`controller`] — observes, and executes what the planner decided;
//! 3. `planner` — decides;
//! 4. `action` — what the planner asks for, in the gate's vocabulary;
//! 5. `gate`, `priority`, `revision`, [`webhook`] — [`gate::verdict()`], `gate::attempt`, `gate::deadline`,
//!    `gate::gitops_control`; pod ordering; ControllerRevisions; the admission webhooks;
//! 6. `lifecycle` — the pod state label and lifecycle handlers;
//! 7. [`hookrun_keys`], `memo`, [`metrics`], `ownership`, `patch` — leaves: the keys that sign HookRun stamps, what
//!    passes derive per UID (forgotten once unused), the metrics, which pods are ours, JSON-patch building blocks.
//!
//! `fixtures` (test builders) is compiled for tests only. Within a folder, a module's children may use their
//! parent's items, and siblings never form a circle (the same test).

// Every public item says what it is for: warned here, denied by CI (clippy and `cargo doc` run with `-D warnings` in
// scripts/test).
#![warn(missing_docs)]

pub(crate) mod action;
pub mod controller;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod forecast;
pub(crate) mod gate;
pub mod hookrun_keys;
pub(crate) mod lifecycle;
pub(crate) mod memo;
pub mod metrics;
pub(crate) mod ownership;
pub(crate) mod patch;
pub(crate) mod planner;
pub(crate) mod priority;
pub(crate) mod revision;
pub mod webhook;

/// The planner's entry point with an explicit pod-facts cache, for `plan-bench` (a pass from scratch beside one with
/// the facts of earlier passes).
pub use planner::{FactsCache, Observed, Plan, plan_with_facts};
