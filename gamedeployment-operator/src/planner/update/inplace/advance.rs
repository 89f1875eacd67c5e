//! One pass's turn of the pods in the middle of an in-place update (refresh's in-place half): a grace period ends
//! (images patched) or is cancelled (the target revision changed), new containers running complete the update
//! (back in service, or to `Updated` for the post-inplace hook), and an `Updated` pod returns to `Normal` once
//! its post-inplace hook and its `inPlaceUpdate` lifecycle handler let it.

use common::keys;

use super::{lifecycle_patches, post_hook, step};
use crate::action::PodChange;
use crate::lifecycle::{self, Handler, LifecycleState};
use crate::planner::plan_draft::Draft;
use crate::planner::settings::{PodInfo, Settings};
use step::Progress;

/// Whether a pod is in an in-place update, and if so its next write.
pub(crate) enum Turn {
    /// In an in-place update (or the `Updated` visit after one): this write, or none this pass.
    InPlace(Option<PodChange>),
    /// In no in-place update: the caller decides.
    NotInPlace,
}

/// The pod's in-place turn this pass.
pub(crate) fn advance(settings: &Settings<'_>, info: &PodInfo<'_>, draft: &mut Draft) -> Turn {
    let change = match &info.progress {
        Progress::Grace(grace) => {
            let annotation = common::pod::annotation(info.pod, keys::INPLACE_UPDATE_GRACE).unwrap_or_default();
            if grace.revision != settings.update_revision {
                Some(step::cancel_grace(info.pod, annotation, settings.now))
            } else if step::grace_ends_at(grace).is_some_and(|end| end <= settings.now) {
                finish_grace(settings, info, annotation)
            } else {
                None
            }
        }
        Progress::Done => Some(post_hook::complete_in_place(settings, info, draft)),
        Progress::Patched(_) | Progress::HotPatching { .. } => None,
        Progress::Idle if info.state == LifecycleState::Updated => {
            // Back to Normal once the post-inplace hook passed *and* the inPlaceUpdate handler is back on the pod
            // (both, concurrently); meanwhile `KruisePodReady` returns to True (CloneSet).
            let post = post_hook::post_in_place(settings, info, draft);
            if lifecycle::holds_return(settings.gd, Handler::InPlaceUpdate, info.pod) {
                lifecycle_patches::kruise_ready(settings, info)
            } else {
                post.or_else(|| lifecycle_patches::kruise_ready(settings, info))
            }
        }
        // `Updating` with nothing recorded: nothing to wait for.
        Progress::Idle if info.state == LifecycleState::Updating => {
            Some(post_hook::complete_in_place(settings, info, draft))
        }
        Progress::Idle => return Turn::NotInPlace,
    };
    Turn::InPlace(change)
}

fn finish_grace(settings: &Settings<'_>, info: &PodInfo<'_>, annotation: &str) -> Option<PodChange> {
    let from = info.revision?;
    let old = settings.templates.get(from)?;
    let new = settings.templates.get(&settings.update_revision)?;
    let mut change = step::diff(old, new).ok()?;
    lifecycle_patches::leave_handler_labels(settings.gd, &mut change.labels_from, &mut change.labels_to);
    let step = step::Step {
        pod: info.pod,
        from_revision: from,
        to_revision: &settings.update_revision,
        change: &change,
        now: settings.now,
    };
    Some(step::finish_grace(&step, annotation))
}
