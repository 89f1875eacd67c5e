//! The hook operator: runs `HookRun`s (measure, judge, decide) for `tkex.tencent.com/v1alpha1`.
//!
//! The modules follow a round through the operator:
//!
//! - observe: [`controller`] is the Kubernetes shell, [`local`] the in-memory one used by `check` and the
//!   benchmark;
//! - plan: [`engine`] decides a round as a pure function (with [`engine::schedule`] and [`engine::validate`]);
//! - execute: [`dispatch`] runs the round's measurements as bounded async tasks, [`measure`] takes one with the
//!   [`providers`], and the answer is judged under [`isolation`] by the [`conditions`].
//!
//! Around them: the flags ([`cli`], [`settings`]), the [`metrics`], message helpers (`text`) and the hostile
//! inputs the tests and `hook-fuzz` share ([`testing`]). What a provider saw, and how an answer's bytes are read, is
//! the [`answer`], which the providers and the evaluation workers share.
//!
//! # Layering
//!
//! Top to bottom; a module uses only modules on lines below its own, never one on its own line or above
//! (`tests/e2e/tests/dependency_direction.rs` reads this list and checks it against the code):
//!
//! 1. [`controller`], [`local`], [`testing`] — the Kubernetes shell, the in-memory one, the hostile inputs;
//! 2. [`cli`], [`dispatch`] — the flags, the bounded measurement tasks;
//! 3. [`engine`], [`measure`] — a round's decisions, one measurement;
//! 4. [`providers`] — web, Prometheus and kubernetes measurements (they hold the evaluator);
//! 5. [`isolation`] — where tenant input is evaluated, and its bounds;
//! 6. [`answer`] — what a provider saw, and how an answer's bytes are read;
//! 7. [`conditions`] — the expressions, their budget, JSONPath and templates;
//! 8. [`metrics`], [`readiness`], [`settings`], `text` — leaves.

// Every public item says what it is for: warned here, denied by CI (clippy and `cargo doc` run with `-D warnings` in
// scripts/test).
#![warn(missing_docs)]

pub mod answer;
pub mod cli;
pub mod conditions;
pub mod controller;
pub mod dispatch;
pub mod engine;
pub mod isolation;
pub mod local;
pub mod measure;
pub mod metrics;
pub mod providers;
pub mod readiness;
pub mod settings;
pub mod testing;
pub(crate) mod text;

/// Unit tests count evaluation memory like the binaries do (see [`conditions::budget::Counting`]).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: conditions::budget::Counting<std::alloc::System> = conditions::budget::Counting(std::alloc::System);
