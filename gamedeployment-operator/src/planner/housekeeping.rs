//! Housekeeping: what a pass tidies after scaling and updating — pods held for work no longer wanted go back to
//! `Normal`, `podsToDelete` entries of pods that are gone are pruned, and the revision history is truncated.
//! (HookRuns nobody waits for are removed by [`super::hooks::housekeeping`].)

use std::collections::BTreeSet;

use common::api::GameDeployment;
use common::cached_pod::Pod;
use common::keys;
use k8s_openapi::api::apps::v1::ControllerRevision;

use super::plan_draft::Draft;
use super::settings::{PodInfo, Settings};
use crate::action::{Action, PatchReason, PodChange, PodWrite};
use crate::lifecycle::{self, Handler, LifecycleState};
use crate::patch;
use crate::revision;
use serde_json::json;

/// A pod left in `PreparingDelete` / `PreparingUpdate` that this pass no longer wants to delete or update (the
/// replicas went back up, the template was rolled back to the pod's revision, the partition was raised) goes back
/// to `Normal`. Only the steps that ran can say a pod is no longer wanted: when the update step did not run this
/// pass (scaling acted first, or the rollout is paused), every old-revision pod it may still want keeps its
/// hold — otherwise a held pod would flap to `Normal` each time a replacement is created, and its running hook
/// would be thrown away.
pub(super) fn release_unneeded_holds(
    settings: &Settings<'_>,
    infos: &[PodInfo<'_>],
    update_ran: bool,
    draft: &mut Draft,
) {
    for info in infos {
        if !info.state.is_preparing() || draft.is_touched(info.name) || draft.is_held(info.name) {
            continue;
        }
        // A quarantined server (`Maintaining`) is wanted by nothing: it goes back even when the update step did not run.
        let update_may_want = !info.updated && !info.quarantined && (!update_ran || settings.paused);
        if update_may_want {
            continue;
        }
        draft.touch(info.name);
        let summary = format!("no longer needed in {}", info.state.as_str());
        draft.actions.push(back_to_normal(settings, info, Vec::new(), summary));
    }
}

/// The patch that takes a held pod back to `Normal` (its running hook is then removed by
/// [`super::hooks::housekeeping`]), with `extra` JSON-patch operations on the pod object.
pub(super) fn back_to_normal(
    settings: &Settings<'_>,
    info: &PodInfo<'_>,
    extra: Vec<serde_json::Value>,
    summary: String,
) -> Action {
    // With a preNormal handler the pod goes back through PreparingNormal (CloneSet), so the outside controller
    // that unregistered it registers it again before it counts as available.
    let back = if lifecycle::holds_return(settings.gd, Handler::PreNormal, info.pod) {
        LifecycleState::PreparingNormal
    } else {
        LifecycleState::Normal
    };
    let mut ops = patch::ensure_maps(info.pod);
    ops.extend(lifecycle::set_state_ops(back, settings.now));
    // Unlike BCS, the pod no longer advertises that it is being deleted.
    if common::pod::annotation(info.pod, keys::GAME_POD_DELETING).is_some() {
        ops.push(json!({"op": "remove", "path": patch::annotation_path(keys::GAME_POD_DELETING)}));
    }
    ops.extend(extra);
    let mut writes = vec![PodWrite::Object(ops)];
    if let Some(ops) = lifecycle::kruise_ready_ops(info.pod, true, None, settings.now) {
        writes.push(PodWrite::Status(ops));
    }
    Action::PatchPod(PodChange { pod: info.pod_ref(), reason: PatchReason::Lifecycle, writes, summary })
}

/// `podsToDelete` entries whose pod is gone are removed, as CloneSet does (BCS never prunes: a later pod that
/// happens to reuse a name would be deleted, BCS-G13).
pub(super) fn prune_pods_to_delete(gd: &GameDeployment, owned: &[&Pod], draft: &mut Draft) {
    // GitOps-clean: the list is Git's; names of pods that are gone stay there (they match nothing).
    if crate::gate::gitops_control::gitops_clean(gd) {
        return;
    }
    let Some(list) = gd.spec.scale_strategy.as_ref().map(|s| &s.pods_to_delete).filter(|l| !l.is_empty()) else {
        return;
    };
    let existing: BTreeSet<&str> = owned.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
    let remaining: Vec<String> = list.iter().filter(|n| existing.contains(n.as_str())).cloned().collect();
    if remaining.len() != list.len() {
        draft.actions.push(Action::PrunePodsToDelete { expected: list.clone(), remaining });
    }
}

/// Revisions beyond `revisionHistoryLimit`, never the current or update revision nor one a pod runs.
pub(super) fn truncate_history(
    settings: &Settings<'_>,
    owned: &[&Pod],
    revisions: &[&ControllerRevision],
    draft: &mut Draft,
) {
    // The distinct revisions first (borrowed), then owned: one String per revision, not per pod.
    let distinct: BTreeSet<&str> =
        owned.iter().filter_map(|p| common::pod::label(p, keys::CONTROLLER_REVISION_HASH)).collect();
    let mut live: BTreeSet<String> = distinct.into_iter().map(String::from).collect();
    live.insert(settings.update_revision.clone());
    live.insert(settings.template_revision.clone());
    live.insert(settings.current_revision.clone());
    let limit = settings.gd.spec.revision_history_limit.unwrap_or(common::api::DEFAULT_REVISION_HISTORY_LIMIT);
    for name in revision::history_to_delete(revisions, &live, limit) {
        draft.actions.push(Action::DeleteRevision { name });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, gd};
    use crate::planner::settings::builder::{NEW, OLD, Pass};

    #[test]
    fn unneeded_holds_go_back_to_normal_only_when_the_step_that_wants_them_ran() {
        let held = |revision, state| fixtures::pod("game-held").serving(revision, "game:0", 10).state(state).build();
        for (revision, state, paused, update_ran, released) in [
            (OLD, LifecycleState::PreparingDelete, false, true, true),
            (OLD, LifecycleState::PreparingUpdate, false, true, true),
            // Paused: the rollout is frozen, holds included.
            (OLD, LifecycleState::PreparingUpdate, true, true, false),
            (OLD, LifecycleState::PreparingDelete, true, true, false),
            // The update step did not run (scaling acted first): an old pod it may still want keeps its hold.
            (OLD, LifecycleState::PreparingDelete, false, false, false),
            (OLD, LifecycleState::PreparingUpdate, false, false, false),
            // An updated pod is only ever a scale-in victim: the scale step ran and no longer wants it.
            (NEW, LifecycleState::PreparingDelete, false, false, true),
        ] {
            let mut pass = Pass::new(gd(1, "InplaceUpdate")).pod(held(revision, state));
            pass.gd.spec.update_strategy.paused = paused;
            let settings = pass.settings();
            let infos = pass.infos(&settings);
            let mut draft = Draft::default();
            release_unneeded_holds(&settings, &infos, update_ran, &mut draft);
            assert_eq!(
                draft.actions.len(),
                usize::from(released),
                "{revision} {state:?} paused={paused} update_ran={update_ran}"
            );
        }
    }

    #[test]
    fn pods_to_delete_of_gone_pods_are_pruned() {
        let mut g = gd(1, "RollingUpdate");
        g.spec.scale_strategy = Some(common::api::GameDeploymentScaleStrategy {
            pods_to_delete: vec!["game-o0".into(), "gone".into()],
            create_batch: None,
            ..Default::default()
        });
        let pass = Pass::new(g).old(1);
        let pods: Vec<&Pod> = pass.pods.iter().collect();
        let mut draft = Draft::default();
        prune_pods_to_delete(&pass.gd, &pods, &mut draft);
        assert!(
            matches!(&draft.actions[..], [Action::PrunePodsToDelete { remaining, .. }] if *remaining == ["game-o0"])
        );
    }
}
