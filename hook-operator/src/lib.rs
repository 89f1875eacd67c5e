//! The hook operator: runs `HookRun`s (measure, judge, decide) for `tkex.tencent.com/v1alpha1`.

pub mod engine;
pub mod evaluate;
pub mod jsonpath;
pub mod providers;
pub mod schedule;
pub mod settings;
pub mod template;
pub mod text;
pub mod validate;
