//! common's integration tests (CRDs, examples, field names). Each file under `tests/` is a module of this one test binary (one link instead of 4; every
//! binary statically links the whole dependency graph). Run one file's tests with its module name as the filter:
//! `cargo test -p common --test integration -- <file>::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod bcs_field_names;
mod crd_descriptions;
mod crds_fresh;
#[cfg(feature = "runtime")] // the Event publisher is part of the operators' runtime
mod event_series;
mod examples;
mod exec_provider;
mod rollback_policy;
