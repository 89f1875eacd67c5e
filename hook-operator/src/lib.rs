//! The hook operator: runs `HookRun`s (measure, judge, decide) for `tkex.tencent.com/v1alpha1`.
//!
//! Pure decisions live in [`engine`] and [`schedule`]; [`dispatch`] runs measurements as bounded async
//! tasks; [`controller`] is the Kubernetes shell, [`local`] the in-memory one used by `check` and the
//! benchmark.

pub mod budget;
pub mod check;
pub mod cli;
pub mod controller;
pub mod dispatch;
pub mod engine;
pub mod evaluate;
pub mod fuzz;
pub mod gc;
pub mod hostile;
pub mod isolation;
pub mod jsonpath;
pub mod local;
pub mod measure;
pub mod metrics;
pub mod providers;
pub mod redact;
pub mod schedule;
pub mod settings;
pub mod shards;
pub mod syntax;
pub mod template;
pub mod text;
pub mod validate;

/// Unit tests count evaluation memory like the binaries do (see [`budget::Counting`]).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: budget::Counting<std::alloc::System> = budget::Counting(std::alloc::System);
