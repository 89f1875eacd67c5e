//! The hook operator: runs `HookRun`s (measure, judge, decide) for `tkex.tencent.com/v1alpha1`.

pub mod evaluate;
pub mod jsonpath;
pub mod template;
pub mod text;
