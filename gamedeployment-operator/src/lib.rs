//! The GameDeployment operator: a thin [`controller`] observes and executes, a pure [`planner`] decides, and every
//! pod deletion and in-place or hot-patch update the planner wants is first put to the [`gate`].
//!
//! One pass reads observe → plan → execute: [`controller`] (caches corrected by `controller::stale_cache`) →
//! [`planner::plan`] (settings, canary, diffs, scale, update, refresh, housekeeping, status; the in-place lifecycle
//! in `planner::update::inplace`) → [`action`]s → `controller::execute`.
//!
//! # Layering
//!
//! Dependencies run one way, and no module uses one above it:
//!
//! 1. [`controller`] (and `main.rs`) — may use everything below; beside it [`forecast`] (`kubectl gd plan`: the
//!    planner run pass after pass over a simulated cluster), which may use everything below but never the
//!    controller, and which nothing below uses;
//! 2. [`planner`] — never the controller or the forecast (its tests run on `forecast::cluster`, the simulated
//!    cluster);
//! 3. [`action`] — what the planner asks for; uses only the gate's vocabulary;
//! 4. [`gate`] — [`gate::verdict()`], `gate::attempt`, `gate::deadline`, `gate::gitops_control`; never the planner,
//!    the controller or [`action`];
//! 5. leaves, which use only each other and `common`: [`ownership`] which pods are ours, [`revision`]
//!    ControllerRevisions, [`lifecycle`] the pod state label and lifecycle handlers, [`priority`] pod ordering,
//!    [`patch`] JSON-patch building blocks, [`hookrun_keys`] the keys that sign HookRun stamps, [`memo`] what passes
//!    derive per UID, forgotten once unused, [`metrics`],
//!    [`webhook`] the admission webhooks (which read only [`ownership`]).
//!
//! `fixtures` (test builders) is compiled for tests only. Within a folder, a module's children may use their
//! parent's items; siblings never form a circle.

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
