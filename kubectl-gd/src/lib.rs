//! `kubectl gd`: a kubectl plugin answering "what is this GameDeployment rollout waiting for?" and acting on it.
//!
//! Functional core, imperative shell, as in the operators: [`tree`] builds the view from observed objects,
//! [`rollout`] judges where the rollout stands, [`actions`] decides the writes of each action and [`render`] draws
//! the tree — all pure and tested without a cluster; [`plan`] forecasts a change with the operator's own planner
//! (`gamedeployment_operator::forecast`). [`cluster`] reads (once or by watching) and writes;
//! [`commands`] wires them to the command line in [`cli`].

pub mod actions;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod complete;
pub mod plan;
pub mod render;
pub mod rollout;
pub mod takeover;
pub mod tree;
