//! Updating: which pods move to the update revision this pass, within the budget, and how (one submodule per
//! strategy).
//!
//! - how many: `diffs.update`, old pods beyond the partition (pods named in `podsToDelete` or held by scaling
//!   this pass are left out);
//! - which: [`batch`] takes candidates in [`crate::priority::update_sequence`] (with the CloneSet
//!   `priorityStrategy` / `scatterStrategy`) — pods already held by a gate first
//!   (they are re-checked, not chosen again), then unavailable pods (updating them costs nothing), then the
//!   least valuable available pods, each available pod paying one of the unavailable budget, so our own actions
//!   never take availability below `replicas − maxUnavailable`;
//! - a pod in an in-place grace period towards the update revision already counts as taken.
//!
//! Paused GameDeployments and `OnDelete` start no update (in-place updates already started still finish).

pub(crate) mod inplace;
pub(crate) mod ondelete;
mod rolling;

use common::api::GameDeploymentUpdateStrategyType as Strategy;

use super::diffs::Diffs;
use super::plan_draft::Draft;
use super::settings::{PodInfo, Settings, count, count_where};
use crate::action::{Action, PlannedEvent};
use crate::gate::{DeleteCause, GateKind};
use crate::lifecycle::LifecycleState;
use crate::priority;
use inplace::Progress;

/// The pods this pass's update batch takes, in order: at most `diffs.update` (less the old pods another step
/// already acted on), each available one paying one of `diffs.budget`. Pods in a grace period towards the update
/// revision count as taken but are not returned (they are on their way already). The one place that decides
/// which pods a batch takes.
pub(crate) fn batch<'i, 'a>(
    settings: &Settings<'_>,
    diffs: &Diffs,
    infos: &'i [PodInfo<'a>],
    draft: &Draft,
) -> Vec<&'i PodInfo<'a>> {
    let candidates: Vec<&'i PodInfo<'a>> =
        infos.iter().filter(|i| !i.updated && !i.specified && !i.quarantined && !draft.is_touched(i.name)).collect();
    let elsewhere = count_where(infos, |i| !i.updated && !i.specified && !i.quarantined) - count(candidates.len());
    let need = diffs.update_after(elsewhere);
    let mut chosen = Vec::new();
    if need == 0 {
        return chosen;
    }
    // Default order, then `priorityStrategy` / `scatterStrategy`, held pods first (`crate::priority`).
    let pods: Vec<&common::cached_pod::Pod> = candidates.iter().map(|i| i.pod).collect();
    let all: Vec<&common::cached_pod::Pod> = infos.iter().map(|i| i.pod).collect();
    let order = priority::update_sequence(&pods, &all, &settings.gd.spec.update_strategy);
    let candidates: Vec<&'i PodInfo<'a>> = order.into_iter().map(|i| candidates[i]).collect();
    let mut budget = diffs.budget;
    let mut taken = 0;
    for info in candidates {
        if taken >= need {
            break;
        }
        match &info.progress {
            Progress::Grace(grace) if grace.revision == settings.update_revision => {
                taken += 1;
                continue;
            }
            Progress::Idle => {}
            // Finishing an update to another revision first; it is unavailable already.
            _ => continue,
        }
        if !info.state.is_preparing() && info.update_available() {
            if budget <= 0 {
                continue;
            }
            budget -= 1;
        }
        taken += 1;
        chosen.push(info);
    }
    chosen
}

/// Plans this pass's updates.
pub(crate) fn plan(settings: &Settings<'_>, diffs: &Diffs, infos: &[PodInfo<'_>], draft: &mut Draft) {
    if settings.paused || settings.strategy == Strategy::OnDelete {
        return;
    }
    let mut changes = Changes::default();
    for info in batch(settings, diffs, infos, draft) {
        draft.touch(info.name);
        draft.batch.push(info.name.to_string());
        update_pod(settings, info, &mut changes, draft);
    }
}

/// `InPlaceOnly` (as CloneSet, which answers "find Pod … update strategy is InPlaceOnly but can not update
/// in-place"): the old pods whose change to the update revision cannot be made in place, and why — for
/// `FailedUpdate`. Looked at on every pass (not only the pods of this pass's batch), so the condition does not come
/// and go with the update budget; those pods are left as they are.
pub(crate) fn in_place_only_problem(settings: &Settings<'_>, infos: &[PodInfo<'_>]) -> Option<String> {
    if !settings.in_place_only {
        return None;
    }
    let mut changes = Changes::default();
    let mut refused: Vec<(&str, String)> = Vec::new();
    for info in infos.iter().filter(|i| !i.updated && !i.specified) {
        let reason = match info.revision {
            Some(from) => changes.from(settings, from).err(),
            None => Some("it has no controller-revision-hash label (it was adopted)".to_string()),
        };
        if let Some(reason) = reason {
            refused.push((info.name, reason));
        }
    }
    let (first, reason) = refused.first()?;
    let more = match refused.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Some(format!(
        "spec.updateStrategy.type is InPlaceOnly but pod {first}{more} cannot be updated in place to revision {}: \
         {reason}; such pods are not recreated: change only container images and pod metadata, or set the type to \
         InPlaceIfPossible to recreate them",
        settings.update_revision
    ))
}

/// The in-place change from each pod revision to the update revision, computed once per pass and revision (the
/// templates are compared through JSON; a batch holds up to thousands of pods of the same revision).
#[derive(Default)]
struct Changes<'s>(std::collections::HashMap<&'s str, Result<inplace::TemplateChange, String>>);

impl<'s> Changes<'s> {
    fn from(&mut self, settings: &Settings<'_>, from: &'s str) -> Result<inplace::TemplateChange, String> {
        self.0
            .entry(from)
            .or_insert_with(|| {
                let new_template =
                    settings.templates.get(&settings.update_revision).unwrap_or(&settings.gd.spec.template);
                match settings.templates.get(from) {
                    Some(old) => inplace::diff(old, new_template),
                    None => Err(format!("its revision {from} no longer exists, so the change cannot be computed")),
                }
            })
            .clone()
    }
}

/// Moves one pod with the GameDeployment's strategy.
fn update_pod<'a>(settings: &Settings<'_>, info: &PodInfo<'a>, changes: &mut Changes<'a>, draft: &mut Draft) {
    let hot_patch = match settings.strategy {
        // `settings.strategy` is the BCS strategy the type behaves as; CloneSet's names are listed for the compiler.
        Strategy::RollingUpdate | Strategy::ReCreate => {
            return rolling::replace(settings, info, DeleteCause::RollingUpdate, draft);
        }
        Strategy::OnDelete => return,
        Strategy::InplaceUpdate | Strategy::InPlaceIfPossible | Strategy::InPlaceOnly => false,
        Strategy::HotPatchUpdate => true,
    };
    let planned =
        match info.revision {
            Some(from) => changes.from(settings, from).map(|change| (from, change)),
            None => Err("it has no controller-revision-hash label (it was adopted), so the change cannot be computed"
                .to_string()),
        };
    let (from, mut change) = match planned {
        Ok(planned) => planned,
        // `InPlaceOnly`: refused, not recreated ([`in_place_only_problem`] says why in `FailedUpdate`).
        Err(_) if settings.in_place_only => return,
        Err(reason) => return fallback(settings, info, &reason, draft),
    };
    inplace::lifecycle_patches::leave_handler_labels(settings.gd, &mut change.labels_from, &mut change.labels_to);
    let step = inplace::Step {
        pod: info.pod,
        from_revision: from,
        to_revision: &settings.update_revision,
        change: &change,
        now: settings.now,
    };
    let kind = if hot_patch { GateKind::HotPatchUpdate } else { GateKind::InPlaceUpdate };
    let modified: Vec<String> = change.images.keys().cloned().collect();
    if draft.pass_gate_with(settings, info, kind, &modified) {
        let change = if hot_patch {
            inplace::hot_patch::update(&step)
        } else {
            inplace::start_to(&step, settings.grace_seconds, ending(settings))
        };
        draft.actions.push(Action::PatchPod(change));
    }
}

/// A change that cannot be made in place: recreate the pod (through the delete gate) and say why, once.
fn fallback(settings: &Settings<'_>, info: &PodInfo<'_>, reason: &str, draft: &mut Draft) {
    if info.state != LifecycleState::PreparingDelete {
        draft.events.push(
            PlannedEvent::warning(
                "InPlaceUpdateNotPossible",
                format!("pod {}: {reason}; recreating it from revision {}", info.name, settings.update_revision),
            )
            .about_pod(&info.pod_ref()),
        );
    }
    rolling::replace(settings, info, DeleteCause::RecreateFallback, draft);
}

/// Whether an in-place update may put its pod straight back to `Normal` (completing it is then one write, see
/// [`inplace::Ending`]): not while something waits for the `Updating` / `Updated` states — a post-inplace hook or
/// an `inPlaceUpdate` lifecycle handler.
fn ending(settings: &Settings<'_>) -> inplace::Ending {
    let gd = settings.gd;
    let post_hook = gd.spec.post_inplace_update_strategy.as_ref().is_some_and(|s| s.hook.is_some());
    let handler = crate::lifecycle::handler(gd, crate::lifecycle::Handler::InPlaceUpdate).is_some();
    if post_hook || handler { inplace::Ending::Updating } else { inplace::Ending::Normal }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::fixtures::{self, gd};
    use crate::planner::diffs;
    use crate::planner::settings::builder::{OLD, Pass};

    fn pass(strategy: &str) -> Pass {
        let mut g = gd(4, strategy);
        g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
        Pass::new(g).old(3).pod(fixtures::pod("game-sick").serving(OLD, "game:0", 10).not_ready().build())
    }

    #[test]
    fn a_batch_takes_unavailable_pods_free_then_available_ones_within_the_budget() {
        let pass = pass("InplaceUpdate");
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        let names: Vec<&str> = batch(&settings, &diffs, &infos, &Draft::default()).iter().map(|i| i.name).collect();
        // Budget: 3 available − (4 − 1) = 0 … so only the unavailable pod goes.
        assert_eq!(names, ["game-sick"]);
    }

    #[test]
    fn held_pods_are_taken_first_and_cost_nothing() {
        let mut pass = pass("InplaceUpdate");
        pass.pods[0] =
            fixtures::pod("game-o0").serving(OLD, "game:0", 10).state(LifecycleState::PreparingUpdate).build();
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        let names: Vec<&str> = batch(&settings, &diffs, &infos, &Draft::default()).iter().map(|i| i.name).collect();
        assert_eq!(names, ["game-o0", "game-sick"]);
    }

    #[test]
    fn pods_another_step_acted_on_are_skipped() {
        let pass = pass("RollingUpdate");
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        let mut draft = Draft::default();
        draft.touch("game-sick");
        assert!(batch(&settings, &diffs, &infos, &draft).is_empty(), "no budget left for available pods");
    }

    #[test]
    fn paused_and_on_delete_start_nothing() {
        for (strategy, paused) in [("InplaceUpdate", true), ("OnDelete", false)] {
            let mut pass = pass(strategy);
            pass.gd.spec.update_strategy.paused = paused;
            let settings = pass.settings();
            let infos = pass.infos(&settings);
            let diffs = diffs::compute(&settings, &infos);
            let mut draft = Draft::default();
            plan(&settings, &diffs, &infos, &mut draft);
            assert!(draft.actions.is_empty(), "{strategy}: {:?}", draft.actions);
        }
    }

    #[test]
    fn rolling_update_deletes_and_in_place_patches() {
        for (strategy, delete) in [("RollingUpdate", true), ("InplaceUpdate", false)] {
            let pass = pass(strategy);
            let settings = pass.settings();
            let infos = pass.infos(&settings);
            let diffs = diffs::compute(&settings, &infos);
            let mut draft = Draft::default();
            plan(&settings, &diffs, &infos, &mut draft);
            assert_eq!(draft.actions.len(), 1, "{strategy}");
            assert_eq!(matches!(draft.actions[0], Action::DeletePod { .. }), delete, "{strategy}");
        }
    }
}
