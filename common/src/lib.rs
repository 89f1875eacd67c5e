//! Shared by the gamedeployment-operator and the hook-operator: the `tkex.tencent.com/v1alpha1` API types and
//! the pure logic both need (int-or-percent arithmetic, label/annotation keys, pod predicates, durations).
//!
//! # Layering
//!
//! Top to bottom; a module uses only modules on lines below its own, never one on its own line or above
//! (`tests/e2e/tests/dependency_direction.rs` reads this list and checks it against the code):
//!
//! 1. [`crd`], [`hookrun`], `runtime`, [`server_state`] — the CRDs as installed, the HookRuns the operators make,
//!    the operators' shared process machinery (feature `runtime`), the server-state label;
//! 2. [`api`], [`pod`] — the API types, pod predicates;
//! 3. [`cached_pod`], [`duration`], [`hint`], [`intstr`], [`keys`], [`lean_meta`] — leaves: the cached pod, Go
//!    durations, hints, int-or-percent arithmetic, label and annotation keys, the lean object metadata;
//! 4. [`interned`] — one shared copy of each string that repeats between cached pods.

// Every public item says what it is for: warned here, denied by CI (clippy and `cargo doc` run with `-D warnings` in
// scripts/test).
#![warn(missing_docs)]

pub mod api;
pub mod cached_pod;
pub mod crd;
pub mod duration;
pub mod hint;
pub mod hookrun;
pub mod interned;
pub mod intstr;
pub mod keys;
pub mod lean_meta;
pub mod pod;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod server_state;
