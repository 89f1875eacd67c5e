//! The GameDeployment operator: a pure [`planner`] decides, a thin [`controller`] executes.
//!
//! Domain modules: [`ownership`] (which pods are ours), [`revision`] (ControllerRevisions), [`scale`],
//! [`update`] (one submodule per strategy), [`gate`] (the single check before any pod deletion or update),
//! [`lifecycle`] (the pod state label), [`priority`] (pod ordering), [`status`], [`expectations`] (stale-cache
//! protection), [`metrics`].

pub mod action;
pub mod canary;
pub mod controller;
pub mod expectations;
pub mod gate;
pub mod hooks;
pub mod lifecycle;
pub mod metrics;
pub mod ownership;
pub mod patch;
pub mod planner;
pub mod priority;
pub mod revision;
pub mod scale;
pub mod status;
pub mod update;
