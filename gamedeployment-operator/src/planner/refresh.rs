//! Refresh: a pod's own progress, whatever the rollout does — in-place updates advance
//! ([`inplace::advance()`]: grace period over → images patched; new containers running → back in service, or to
//! `Updated` for a post-inplace hook; a grace period towards a revision that is no longer the target is
//! cancelled), and new pods get `InPlaceUpdateReady=True`. Runs even while paused and in passes that scaled. Also
//! schedules the next look at the pods for time-based work (grace periods, hot patches settling,
//! `minReadySeconds`).

use super::plan_draft::Draft;
use super::settings::{PodInfo, Settings};
use super::update::inplace::{self, Progress, Turn, lifecycle_patches};
use crate::action::{Action, PodChange};
use crate::lifecycle::{self, Handler, LifecycleState};

/// Advances in-place updates and the readiness gate, for pods nothing else touched this pass.
pub(super) fn plan(settings: &Settings<'_>, infos: &[PodInfo<'_>], draft: &mut Draft) {
    for info in infos {
        if draft.is_touched(info.name) {
            continue;
        }
        let change = match inplace::advance(settings, info, draft) {
            Turn::InPlace(change) => change,
            Turn::NotInPlace => ready_or_normal(settings, info),
        };
        if let Some(change) = change {
            draft.touch(info.name);
            draft.actions.push(Action::PatchPod(change));
        }
    }
}

/// A pod in no in-place update: a new pod goes in service (readiness gate), then to `Normal` once the preNormal
/// handler matches; any other pod gets its readiness gate or `KruisePodReady` back to True.
fn ready_or_normal(settings: &Settings<'_>, info: &PodInfo<'_>) -> Option<PodChange> {
    if info.state.is_preparing() {
        None
    } else if info.state == LifecycleState::PreparingNormal {
        inplace::mark_ready(info.pod, settings.now).or_else(|| {
            (!lifecycle::holds_return(settings.gd, Handler::PreNormal, info.pod))
                .then(|| lifecycle_patches::to_normal(info, settings.now, "the preNormal lifecycle handler matches"))
        })
    } else if info.gate_not_true {
        inplace::mark_ready(info.pod, settings.now).or_else(|| lifecycle_patches::kruise_ready(settings, info))
    } else {
        // Every readiness gate's condition is True: nothing to put back in service.
        None
    }
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
    use crate::action::PatchReason;
    use crate::fixtures::{self, gd};
    use crate::planner::settings::builder::{NEW, Pass};
    use common::keys;

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
