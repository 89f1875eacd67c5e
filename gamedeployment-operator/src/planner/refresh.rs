//! Refresh: a pod's own progress, whatever the rollout does — in-place updates advance (grace period over →
//! images patched; new containers running → back in service, or to `Updated` for a post-inplace hook), a
//! grace period towards a revision that is no longer the target is cancelled, and new pods get
//! `InPlaceUpdateReady=True`. Runs even while paused and in passes that scaled. Also schedules the next look at
//! the pods for time-based work (grace periods, hot patches settling, `minReadySeconds`).

use super::hooks;
use super::plan_draft::Draft;
use super::settings::{PodInfo, Settings};
use super::update::inplace::{self, Progress};
use crate::action::{Action, PatchReason, PodChange, PodWrite};
use crate::lifecycle::{self, Handler, LifecycleState};
use common::keys;

/// Advances in-place updates and the readiness gate, for pods nothing else touched this pass.
pub(super) fn plan(settings: &Settings<'_>, infos: &[PodInfo<'_>], draft: &mut Draft) {
    for info in infos {
        if draft.is_touched(info.name) {
            continue;
        }
        let change = match &info.progress {
            Progress::Grace(grace) => {
                let annotation = common::pod::annotation(info.pod, keys::INPLACE_UPDATE_GRACE).unwrap_or_default();
                if grace.revision != settings.update_revision {
                    Some(inplace::cancel_grace(info.pod, annotation, settings.now))
                } else if inplace::grace_ends_at(grace).is_some_and(|end| end <= settings.now) {
                    finish_grace(settings, info, annotation)
                } else {
                    None
                }
            }
            Progress::Done => Some(hooks::complete_in_place(settings, info, draft)),
            Progress::Patched(_) | Progress::HotPatching { .. } => None,
            Progress::Idle => {
                if info.state.is_preparing() {
                    None
                } else if info.state == LifecycleState::Updated {
                    // Back to Normal once the post-inplace hook passed *and* the inPlaceUpdate handler is back on
                    // the pod (both, concurrently); meanwhile `KruisePodReady` returns to True (CloneSet).
                    let post = hooks::post_in_place(settings, info, draft);
                    if lifecycle::holds_return(settings.gd, Handler::InPlaceUpdate, info.pod) {
                        kruise_ready(settings, info)
                    } else {
                        post.or_else(|| kruise_ready(settings, info))
                    }
                } else if info.state == LifecycleState::Updating {
                    // `Updating` with nothing recorded: nothing to wait for.
                    Some(hooks::complete_in_place(settings, info, draft))
                } else if info.state == LifecycleState::PreparingNormal {
                    // A new pod: in service first (readiness gate), then Normal once the preNormal handler matches.
                    inplace::mark_ready(info.pod, settings.now).or_else(|| {
                        (!lifecycle::holds_return(settings.gd, Handler::PreNormal, info.pod)).then(|| PodChange {
                            pod: info.pod_ref(),
                            reason: PatchReason::Lifecycle,
                            writes: vec![PodWrite::Object(lifecycle::set_state_ops(
                                LifecycleState::Normal,
                                settings.now,
                            ))],
                            summary: "the preNormal lifecycle handler matches".into(),
                        })
                    })
                } else {
                    inplace::mark_ready(info.pod, settings.now).or_else(|| kruise_ready(settings, info))
                }
            }
        };
        if let Some(change) = change {
            draft.touch(info.name);
            draft.actions.push(Action::PatchPod(change));
        }
    }
}

/// `KruisePodReady` back to True on a pod no longer held (markPodNotReady).
fn kruise_ready(settings: &Settings<'_>, info: &PodInfo<'_>) -> Option<PodChange> {
    let ops = lifecycle::kruise_ready_ops(info.pod, true, None, settings.now)?;
    Some(PodChange {
        pod: info.pod_ref(),
        reason: PatchReason::ReadinessGate,
        writes: vec![PodWrite::Status(ops)],
        summary: format!("{} condition set True", lifecycle::KRUISE_POD_READY),
    })
}

fn finish_grace(settings: &Settings<'_>, info: &PodInfo<'_>, annotation: &str) -> Option<PodChange> {
    let from = info.revision?;
    let old = settings.templates.get(from)?;
    let new = settings.templates.get(&settings.update_revision)?;
    let mut change = inplace::diff(old, new).ok()?;
    lifecycle::leave_handler_labels(settings.gd, &mut change.labels_from, &mut change.labels_to);
    let step = inplace::Step {
        pod: info.pod,
        from_revision: from,
        to_revision: &settings.update_revision,
        change: &change,
        now: settings.now,
    };
    Some(inplace::finish_grace(&step, annotation))
}

/// Look again when a grace period ends, a hot patch stops counting as in progress, or a Ready pod becomes
/// available (`minReadySeconds`).
pub(super) fn requeue(settings: &Settings<'_>, infos: &[PodInfo<'_>], draft: &mut Draft) {
    for info in infos {
        match &info.progress {
            Progress::Grace(grace) => {
                if let Some(end) = inplace::grace_ends_at(grace) {
                    draft.requeue_at(settings.now, end);
                }
            }
            Progress::HotPatching { deadline } => draft.requeue_at(settings.now, *deadline),
            _ => {}
        }
        if settings.min_ready_seconds > 0
            && info.ready
            && !info.available
            && let Some(at) = common::pod::available_at(info.pod, settings.min_ready_seconds)
        {
            draft.requeue_at(settings.now, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, gd};
    use crate::planner::settings::builder::{NEW, Pass};

    #[test]
    fn new_pods_get_the_readiness_gate_and_touched_pods_are_left_alone() {
        let mut pod = fixtures::pod("game-new").serving(NEW, "game:1", 10).build();
        if let Some(conditions) = pod.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions.retain(|c| c.type_ != keys::IN_PLACE_UPDATE_READY);
        }
        let pass = Pass::new(gd(2, "InplaceUpdate")).updated(1).pod(pod);
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let mut draft = Draft::default();
        plan(&settings, &infos, &mut draft);
        assert_eq!(draft.actions.len(), 1);
        assert!(
            matches!(&draft.actions[0], Action::PatchPod(c) if c.reason == PatchReason::ReadinessGate && c.pod.name == "game-new")
        );

        let mut draft = Draft::default();
        draft.touch("game-new");
        plan(&settings, &infos, &mut draft);
        assert!(draft.actions.is_empty());
    }

    #[test]
    fn looks_again_when_a_ready_pod_becomes_available() {
        let mut g = gd(1, "InplaceUpdate");
        g.spec.min_ready_seconds = 30;
        let mut pass = Pass::new(g).pod(fixtures::pod("game-n0").serving(NEW, "game:1", 990).build());
        pass.now = 1_000;
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let mut draft = Draft::default();
        requeue(&settings, &infos, &mut draft);
        assert_eq!(draft.requeue_after(), Some(std::time::Duration::from_secs(20)));
    }
}
