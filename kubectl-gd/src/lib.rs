//! `kubectl gd`: a kubectl plugin answering "what is this GameDeployment rollout waiting for?" and acting on it.
//!
//! Functional core, imperative shell, as in the operators: [`snapshot`] holds the observed objects, [`tree`] builds
//! the view from them, [`rollout`] judges where the rollout stands, [`actions`] decides the writes of each action
//! and [`render`] draws the tree — all pure and tested without a cluster; `plan` forecasts a change with the
//! operator's own planner (`gamedeployment_operator::forecast`). `cluster` reads (once or by watching) and writes;
//! [`commands`] wires them to the command line in [`cli`].
//!
//! # Layering
//!
//! Top to bottom; a module uses only modules on lines below its own, never one on its own line or above
//! (`tests/e2e/tests/dependency_direction.rs` reads this list and checks it against the code):
//!
//! 1. [`commands`] — the command line's entry point, over everything below;
//! 2. [`complete`], `plan` — shell completion (which reads the cluster for names), the forecast of a change;
//! 3. [`cli`], `cluster`, [`render`], `takeover` — the flags, the reads and writes, the drawing of a tree, the
//!    takeover report;
//! 4. [`actions`], [`tree`] — the writes each action decides, the view;
//! 5. [`rollout`] — the verdict, which both the view and the actions show;
//! 6. [`snapshot`] — the observed objects, which every view reads.

// Every public item says what it is for: warned here, denied by CI (clippy and `cargo doc` run with `-D warnings` in
// scripts/test).
#![warn(missing_docs)]

pub mod actions;
pub mod cli;
pub(crate) mod cluster;
pub mod commands;
pub mod complete;
pub(crate) mod plan;
pub mod render;
pub mod rollout;
pub mod snapshot;
pub(crate) mod takeover;
pub mod tree;
