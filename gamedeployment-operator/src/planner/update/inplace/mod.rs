//! The in-place lifecycle of a pod, in one folder: everything that changes a running pod without recreating it,
//! from the first write to its return to `Normal`.
//!
//! In the order a pod goes through it:
//! 1. [`step`]: what may change in place ([`diff`]), the update's writes ([`start_to`]: readiness False, then
//!    `Updating` and the images, or the grace period), its progress as the pod records it (`step::progress`), the end
//!    of a grace period and the completion;
//! 2. [`hot_patch`]: the single write of a `HotPatchUpdate` (images swapped, the pod stays in service);
//! 3. [`advance`](mod@advance): each pass's turn of a pod in the middle of an update (refresh's in-place half);
//! 4. [`post_hook`]: the post-inplace hook of an `Updated` pod;
//! 5. [`lifecycle_patches`]: the lifecycle writes around it (the handler labels an in-place patch leaves alone,
//!    `KruisePodReady` True again, back to `Normal`).
//!
//! The gate before step 1 is [`crate::gate`]; which pods start an update this pass is [`super`]'s choice.

pub(crate) mod advance;
pub(crate) mod hot_patch;
pub(crate) mod lifecycle_patches;
pub(crate) mod post_hook;
pub(crate) mod step;

pub(crate) use advance::{Turn, advance};
pub(crate) use step::{Ending, Progress, Step, TemplateChange, diff, grace_ends_at, mark_ready, start_to};
