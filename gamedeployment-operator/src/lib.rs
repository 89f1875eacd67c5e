//! The GameDeployment operator: a pure [`planner`] decides, a thin [`controller`] executes.
//!
//! Dependencies run one way: [`controller`] → [`planner`] (which owns its steps: settings, diffs, scale, update,
//! canary, hooks, refresh, housekeeping, status) → leaf modules that depend on nothing above them
//! ([`ownership`] which pods are ours, [`revision`] ControllerRevisions, [`gate`] the single check before any
//! pod deletion or update, [`lifecycle`] the pod state label, [`priority`] pod ordering, [`patch`] JSON-patch
//! building blocks, [`action`] what the planner asks for) → `common`. [`expectations`] (stale-cache
//! protection) and [`metrics`] serve the controller.

pub(crate) mod action;
pub mod controller;
#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod gate;
pub mod hookrun_keys;
pub(crate) mod lifecycle;
pub mod metrics;
pub(crate) mod ownership;
pub(crate) mod patch;
pub(crate) mod planner;
pub(crate) mod priority;
pub(crate) mod revision;
pub mod webhook;
