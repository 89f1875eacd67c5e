//! kube-sim's kubelet, admission and drain tests against a running server. Each file under `tests/` is a module of this one test binary (one link instead of 7; every
//! binary statically links the whole dependency graph). Run one file's tests with its module name as the filter:
//! `cargo test -p kube-sim --test cluster -- <file>::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod kubelet_support;

mod admission;
mod kubelet_drain;
mod kubelet_endpoints;
mod kubelet_faults;
mod kubelet_kubectl;
mod kubelet_lifecycle;
mod kubelet_logs;
mod kubelet_processes;
mod kubelet_scale;
mod workloads;
