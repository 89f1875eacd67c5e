//! kubectl-gd's integration tests. Each file under `tests/` is a module of this one test binary (one link instead of 5; every
//! binary statically links the whole dependency graph). Run one file's tests with its module name as the filter:
//! `cargo test -p kubectl-gd --test integration -- <file>::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod crds;
mod fixtures;

mod actions;
mod chart_observability;
mod check;
mod plan;
mod tree;
mod watch_pty;
