//! Updating: which pods move to the update revision this pass, within the budget, and how (one submodule per
//! strategy).
//!
//! - `need` = old pods − partition (pods named in `podsToDelete` or being deleted by scaling are left out);
//! - candidates in [`crate::priority::update_order`]: pods already held by a gate first (they are re-checked, not
//!   chosen again), then unavailable pods (updating them costs nothing), then the least valuable available pods;
//! - budget = available pods − (`replicas` − `maxUnavailable`): each available pod taken costs one, so our own
//!   actions never take availability below `replicas − maxUnavailable` (counting pods held, updating, or not yet
//!   replaced as unavailable);
//! - a pod in an in-place grace period towards the update revision already counts towards `need`.
//!
//! Paused GameDeployments and `OnDelete` start no update (in-place updates already started still finish).

pub mod hotpatch;
pub mod inplace;
pub mod ondelete;
pub mod rolling;

use common::api::GameDeploymentUpdateStrategyType as Strategy;

use crate::action::Action;
use crate::gate::{DeleteCause, GateKind};
use crate::planner::{Ctx, Draft, PlannedEvent, PodInfo};
use crate::priority;
use inplace::Progress;

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// How far the rollout is from its target, for status and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Need {
    /// Old pods beyond the partition.
    pub pods: i32,
}

/// Old pods that the rollout should move (beyond the partition).
pub(crate) fn need(ctx: &Ctx<'_>, infos: &[PodInfo<'_>]) -> Need {
    let old = count(infos.iter().filter(|i| !i.updated && !i.specified).count());
    Need { pods: (old - ctx.partition).max(0) }
}

/// Plans this pass's updates.
pub(crate) fn plan(ctx: &Ctx<'_>, infos: &[PodInfo<'_>], draft: &mut Draft) {
    if ctx.paused || ctx.strategy == Strategy::OnDelete {
        return;
    }
    let mut candidates: Vec<&PodInfo<'_>> =
        infos.iter().filter(|i| !i.updated && !i.specified && !draft.is_touched(i.name)).collect();
    let need = (count(candidates.len()) - ctx.partition).max(0);
    if need == 0 {
        return;
    }
    candidates.sort_by(|a, b| priority::update_order(a.pod, b.pod));
    let available = count(infos.iter().filter(|i| i.update_available()).count());
    let mut budget = (available - (ctx.replicas - ctx.max_unavailable)).max(0);
    let mut taken = 0;
    for info in candidates {
        if taken >= need {
            break;
        }
        match &info.progress {
            Progress::Grace(grace) if grace.revision == ctx.update_revision => {
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
        draft.touch(info.name);
        update_pod(ctx, info, draft);
    }
}

/// Moves one pod with the GameDeployment's strategy.
fn update_pod(ctx: &Ctx<'_>, info: &PodInfo<'_>, draft: &mut Draft) {
    let hot_patch = match ctx.strategy {
        Strategy::RollingUpdate => return rolling::replace(ctx, info, DeleteCause::RollingUpdate, draft),
        Strategy::OnDelete => return,
        Strategy::InplaceUpdate => false,
        Strategy::HotPatchUpdate => true,
    };
    let new_template = ctx.templates.get(&ctx.update_revision).unwrap_or(&ctx.gd.spec.template);
    let planned = match (info.revision, info.revision.and_then(|r| ctx.templates.get(r))) {
        (Some(from), Some(old)) => inplace::diff(old, new_template).map(|change| (from, change)),
        (Some(from), None) => Err(format!("its revision {from} no longer exists, so the change cannot be computed")),
        (None, _) => {
            Err("it has no controller-revision-hash label (it was adopted), so the change cannot be computed"
                .to_string())
        }
    };
    let (from, change) = match planned {
        Ok(planned) => planned,
        Err(reason) => return fallback(ctx, info, &reason, draft),
    };
    let step = inplace::Step {
        pod: info.pod,
        from_revision: from,
        to_revision: &ctx.update_revision,
        change: &change,
        now: ctx.now,
    };
    let kind = if hot_patch { GateKind::HotPatchUpdate } else { GateKind::InPlaceUpdate };
    let modified: Vec<String> = change.images.keys().cloned().collect();
    if draft.pass_gate_with(ctx, info, kind, &modified) {
        let change = if hot_patch { hotpatch::update(&step) } else { inplace::start(&step, ctx.grace_seconds) };
        draft.actions.push(Action::PatchPod(change));
    }
}

/// A change that cannot be made in place: recreate the pod (through the delete gate) and say why, once.
fn fallback(ctx: &Ctx<'_>, info: &PodInfo<'_>, reason: &str, draft: &mut Draft) {
    if info.state != crate::lifecycle::LifecycleState::PreparingDelete {
        draft.events.push(PlannedEvent::warning(
            "InPlaceUpdateNotPossible",
            format!("pod {}: {reason}; recreating it from revision {}", info.name, ctx.update_revision),
        ));
    }
    rolling::replace(ctx, info, DeleteCause::RecreateFallback, draft);
}
