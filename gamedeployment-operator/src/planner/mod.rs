//! The planner: a pure function from what the operator observes (the GameDeployment, the namespace's pods, the
//! GameDeployment's ControllerRevisions, node deletion costs, the clock) to what it should do (a [`Plan`]).
//!
//! A pass runs these steps, in order:
//! 1. ownership — validate the selector, adopt matching orphans, release owned pods that stopped matching;
//! 2. revisions — find or create the revision of the current template (renumbering it on rollback);
//! 3. scale — `podsToDelete`, then create or delete pods towards `replicas` (+ surge), partition-aware;
//! 4. update — only if scaling did nothing this pass: move pods to the update revision within the budget;
//! 5. refresh — advance in-place updates (grace periods, completion) and the readiness gate of new pods;
//! 6. housekeeping — release pods held for work no longer wanted, prune `podsToDelete`, truncate history;
//! 7. status — counts, revisions, conditions (`FailedScale`, `FailedUpdate`, `Progressing`).
//!
//! Every deletion and every in-place / hot-patch update is first put to [`crate::gate::check`]. No pod is acted
//! on twice in one pass.

mod draft;
#[cfg(test)]
mod hook_tests;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::api::{GameDeployment, GameDeploymentStatus, GameDeploymentUpdateStrategyType};
use common::intstr::{self, Rounding};
use common::keys;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;

pub(crate) use draft::Draft;
pub use draft::{EventType, HeldPod, PlannedEvent};

use crate::action::{Action, PodRef};
use crate::gate::GateState;
use crate::lifecycle::{self, LifecycleState};
use crate::priority::DeletionCosts;
use crate::update::inplace::{self, Progress};
use crate::{ownership, revision, scale, status, update};

/// Everything a pass looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    pub gd: &'a GameDeployment,
    /// Every pod of the GameDeployment's namespace (orphans can be adopted; names must stay unique).
    pub pods: Vec<&'a Pod>,
    /// The ControllerRevisions the GameDeployment controls.
    pub revisions: Vec<&'a ControllerRevision>,
    /// `io.tencent.bcs.dev/node-deletion-cost` of each node that has one.
    pub node_costs: &'a BTreeMap<String, f64>,
    pub now: Timestamp,
    /// Seed for new instance ids (the caller passes a random one; tests a fixed one).
    pub seed: u64,
    /// The namespace's HookRuns (the gate reads those of this GameDeployment).
    pub hook_runs: &'a [common::api::HookRun],
    /// The namespace's HookTemplates.
    pub hook_templates: &'a [common::api::HookTemplate],
}

/// What to do, and the status the GameDeployment should show.
#[derive(Debug, Clone)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// The status computed from what was observed. The executor adds the outcome of the actions
    /// (`FailedScale` / `FailedUpdate`) before writing it — and writes it only if it differs.
    pub status: GameDeploymentStatus,
    pub events: Vec<PlannedEvent>,
    /// Pods a gate holds, with the reason.
    pub held: Vec<HeldPod>,
    /// When to look again even if nothing changes (grace periods, `minReadySeconds`).
    pub requeue_after: Option<Duration>,
}

/// The settings of one pass, resolved from the spec.
pub(crate) struct Ctx<'a> {
    pub gd: &'a GameDeployment,
    pub now: Timestamp,
    pub replicas: i32,
    /// Pods kept on the old revision (already capped at `replicas`).
    pub partition: i32,
    pub max_unavailable: i32,
    /// Extra pods allowed during a RollingUpdate (0 for the other strategies and while paused).
    pub max_surge: i32,
    pub create_batch: Option<i32>,
    pub strategy: GameDeploymentUpdateStrategyType,
    pub paused: bool,
    pub min_ready_seconds: i32,
    pub grace_seconds: i32,
    pub update_revision: String,
    pub current_revision: String,
    /// Template of every known revision, by name (the update revision's is the GameDeployment's template).
    pub templates: BTreeMap<String, PodTemplateSpec>,
    pub gate: GateState<'a>,
    pub costs: DeletionCosts<'a>,
    /// Whether the update settings resolved; if not, no pod is updated (FailedUpdate says why).
    pub update_settings_ok: bool,
}

/// One owned, active pod as the planner sees it.
#[derive(Debug, Clone)]
pub(crate) struct PodInfo<'a> {
    pub pod: &'a Pod,
    pub name: &'a str,
    pub revision: Option<&'a str>,
    /// Carries the update revision.
    pub updated: bool,
    pub state: LifecycleState,
    pub ready: bool,
    pub available: bool,
    pub progress: Progress,
    /// Named in `spec.scaleStrategy.podsToDelete`.
    pub specified: bool,
}

impl PodInfo<'_> {
    /// Available and nothing pending: taking it down costs update budget. A pod held by a gate, or being
    /// updated, already counts as unavailable (CloneSet semantics).
    pub fn update_available(&self) -> bool {
        // `Updated` (a post-inplace hook still running) serves like `Normal`: the post hook never blocks others.
        self.available
            && matches!(self.state, LifecycleState::Normal | LifecycleState::Updated)
            && self.progress.is_idle()
    }

    pub fn pod_ref(&self) -> PodRef {
        PodRef::of(self.pod)
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Decides what to do.
pub fn plan(observed: &Observed<'_>) -> Plan {
    let gd = observed.gd;
    let old_status = gd.status.clone().unwrap_or_default();
    let mut draft = Draft::default();

    // A GameDeployment being deleted is left to the garbage collector (pods, revisions and HookRuns carry its
    // ownerReference); acting on it would only race with it.
    if gd.metadata.deletion_timestamp.is_some() {
        return draft.finish(old_status);
    }

    // 1. Ownership.
    let selector = ownership::validate_selector(gd);
    let claim = ownership::claim(gd, &observed.pods, selector.is_ok());
    for pod in &claim.adopt {
        // An adopted pod is left alone for the rest of this pass: it was not ours when the pass began.
        draft.touch(pod.metadata.name.as_deref().unwrap_or(""));
        draft.actions.push(Action::AdoptPod(PodRef::of(pod)));
    }
    for pod in &claim.release {
        draft.actions.push(Action::ReleasePod(PodRef::of(pod)));
    }
    let owned: Vec<&Pod> = claim.owned.iter().chain(claim.adopt.iter()).copied().collect();

    // 2. Revisions.
    let resolution = revision::resolve(gd, &observed.revisions);
    let update_revision = resolution.update_revision.clone();
    match &resolution.change {
        Some(revision::RevisionChange::Create(r)) => draft.actions.push(Action::CreateRevision(r.clone())),
        Some(revision::RevisionChange::Renumber { name, revision }) => {
            draft.actions.push(Action::RenumberRevision { name: name.clone(), revision: *revision });
        }
        None => {}
    }
    let mut templates: BTreeMap<String, PodTemplateSpec> =
        observed.revisions.iter().filter_map(|r| Some((r.metadata.name.clone()?, revision::template_of(r)?))).collect();
    templates.insert(update_revision.clone(), gd.spec.template.clone());
    let active: Vec<&Pod> = owned.iter().copied().filter(|p| common::pod::is_active(p)).collect();
    let current_revision = current_revision(&old_status, &active, &observed.revisions, &update_revision);

    // Settings.
    let mut spec_problems: Vec<(status::Failure, String)> = Vec::new();
    if let Err(problem) = &selector {
        spec_problems.push((status::Failure::Scale, problem.to_string()));
    }
    let mut ctx = resolve_settings(observed, &mut spec_problems, update_revision, current_revision, templates);

    let infos = pod_infos(&ctx, &active);

    // Canary steps decide the partition of this pass.
    let counts = crate::canary::Counts {
        replicas: ctx.replicas,
        updated_ready: count(infos.iter().filter(|i| i.updated && i.ready).count()),
        ready: count(infos.iter().filter(|i| i.ready).count()),
        available: count(infos.iter().filter(|i| i.available).count()),
    };
    let canary = crate::canary::evaluate(gd, &old_status, &ctx.update_revision, counts, &ctx.gate, ctx.now);
    if let Some(partition) = canary.partition {
        ctx.partition = partition.min(ctx.replicas);
    }
    draft.actions.extend(canary.actions.iter().cloned());
    draft.events.extend(canary.events.iter().cloned());
    if let Some(at) = canary.requeue_at {
        draft.requeue_at(ctx.now, at);
    }

    if selector.is_ok() {
        // 3. Scale, 4. update.
        let scaled = scale::plan(&ctx, &infos, &observed.pods, &owned, observed.seed, &mut draft);
        if let Some(problem) = scaled.problem {
            spec_problems.push((status::Failure::Scale, problem));
        }
        let scaled = scaled.acted;
        if !scaled && ctx.update_settings_ok {
            update::plan(&ctx, &infos, &mut draft);
        }
        // 5. Refresh.
        refresh(&ctx, &infos, &mut draft);
        // 6. Housekeeping.
        release_unneeded_holds(&ctx, &infos, &mut draft);
        prune_pods_to_delete(gd, &owned, &mut draft);
        crate::hooks::housekeeping(&ctx, &owned, &mut draft);
    }
    truncate_history(&ctx, &owned, &observed.revisions, &mut draft);
    grace_and_readiness_requeue(&ctx, &infos, &mut draft);

    // 7. Status.
    let mut status = status::compute(&ctx, &old_status, &infos, &draft, &spec_problems);
    status.current_step_index = canary.current_step_index;
    status.current_step_hash = canary.current_step_hash.clone();
    status.canary = canary.canary.clone();
    status.pause_conditions = canary.pause_conditions.clone();
    let mut hook_events = Vec::new();
    crate::hooks::status(&ctx, &infos, &draft, &old_status, &mut status, &mut hook_events);
    draft.events.extend(hook_events);
    draft.events.extend(status::transition_events(&old_status, &status));
    draft.finish(status)
}

/// The revision pods of the "old" side are created from: the recorded `status.currentRevision` while it still
/// exists, else the oldest revision an active pod runs, else the update revision.
fn current_revision(
    old: &GameDeploymentStatus,
    active: &[&Pod],
    revisions: &[&ControllerRevision],
    update_revision: &str,
) -> String {
    let known =
        |name: &str| name == update_revision || revisions.iter().any(|r| r.metadata.name.as_deref() == Some(name));
    if let Some(current) = old.current_revision.as_deref().filter(|c| known(c)) {
        return current.to_string();
    }
    let used: BTreeSet<&str> =
        active.iter().filter_map(|p| common::pod::label(p, keys::CONTROLLER_REVISION_HASH)).collect();
    revisions
        .iter()
        .filter(|r| r.metadata.name.as_deref().is_some_and(|n| used.contains(n)))
        .min_by_key(|r| r.revision.unwrap_or(0))
        .and_then(|r| r.metadata.name.clone())
        .unwrap_or_else(|| update_revision.to_string())
}

fn resolve_settings<'a>(
    observed: &Observed<'a>,
    problems: &mut Vec<(status::Failure, String)>,
    update_revision: String,
    current_revision: String,
    templates: BTreeMap<String, PodTemplateSpec>,
) -> Ctx<'a> {
    let gd = observed.gd;
    let replicas = gd.spec.replicas.unwrap_or(1).max(0);
    let strategy = &gd.spec.update_strategy;
    let mut update_settings_ok = true;
    let mut resolve = |value, default: i32, rounding, field, failure| {
        intstr::scaled_value_or(value, default, replicas, rounding, field).unwrap_or_else(|e| {
            problems.push((failure, e.to_string()));
            if failure == status::Failure::Update {
                update_settings_ok = false;
            }
            default
        })
    };
    let partition = resolve(
        strategy.partition.as_ref(),
        0,
        Rounding::Down,
        "spec.updateStrategy.partition",
        status::Failure::Update,
    )
    .min(replicas);
    let surge_setting =
        resolve(strategy.max_surge.as_ref(), 0, Rounding::Up, "spec.updateStrategy.maxSurge", status::Failure::Update);
    let create_batch = gd.spec.scale_strategy.as_ref().and_then(|s| s.create_batch.as_ref()).map(|batch| {
        resolve(Some(batch), replicas, Rounding::Up, "spec.scaleStrategy.createBatch", status::Failure::Scale).max(1)
    });
    let unavailable_setting = strategy.max_unavailable.as_ref();
    // maxSurge only applies to RollingUpdate here (BCS surges every strategy, bug list §7.26).
    let rolling = strategy.type_ == GameDeploymentUpdateStrategyType::RollingUpdate;
    let surge_for_budget = if rolling {
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(surge_setting))
    } else {
        None
    };
    let max_unavailable = match intstr::resolve_fenceposts(surge_for_budget.as_ref(), unavailable_setting, replicas) {
        Ok((_, unavailable)) => unavailable,
        Err(e) => {
            problems.push((status::Failure::Update, e.to_string()));
            update_settings_ok = false;
            1
        }
    };
    let max_surge = if rolling && !strategy.paused { surge_setting } else { 0 };
    let sort_method = gd.metadata.annotations.as_ref().and_then(|a| a.get(keys::POD_DELETION_COST_SORT_METHOD));
    Ctx {
        gd,
        now: observed.now,
        replicas,
        partition,
        max_unavailable,
        max_surge,
        create_batch,
        strategy: strategy.type_,
        paused: strategy.paused,
        min_ready_seconds: gd.spec.min_ready_seconds.max(0),
        grace_seconds: strategy.in_place_update_strategy.as_ref().map_or(0, |s| s.grace_period_seconds.max(0)),
        update_revision,
        current_revision,
        templates,
        gate: GateState { gd, hook_runs: observed.hook_runs, templates: observed.hook_templates, now: observed.now },
        costs: DeletionCosts::new(observed.node_costs, sort_method.map(String::as_str)),
        update_settings_ok,
    }
}

fn pod_infos<'a>(ctx: &Ctx<'_>, active: &[&'a Pod]) -> Vec<PodInfo<'a>> {
    let specified: BTreeSet<&str> = ctx
        .gd
        .spec
        .scale_strategy
        .as_ref()
        .map(|s| s.pods_to_delete.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let mut infos: Vec<PodInfo<'a>> = active
        .iter()
        .map(|pod| {
            let name = pod.metadata.name.as_deref().unwrap_or("");
            let revision = common::pod::label(pod, keys::CONTROLLER_REVISION_HASH);
            PodInfo {
                pod,
                name,
                revision,
                updated: revision == Some(ctx.update_revision.as_str()),
                state: lifecycle::state_of(pod),
                ready: common::pod::is_running_and_ready(pod),
                available: common::pod::is_running(pod)
                    && common::pod::is_available(pod, ctx.min_ready_seconds, ctx.now),
                progress: inplace::progress(pod, ctx.now),
                specified: specified.contains(name),
            }
        })
        .collect();
    infos.sort_by(|a, b| a.name.cmp(b.name));
    infos
}

/// Advances in-place updates and the readiness gate, for pods nothing else touched this pass. Runs even while
/// paused and in passes that scaled: a pod's own progress never waits for the rollout's.
fn refresh(ctx: &Ctx<'_>, infos: &[PodInfo<'_>], draft: &mut Draft) {
    for info in infos {
        if draft.is_touched(info.name) {
            continue;
        }
        let change = match &info.progress {
            Progress::Grace(grace) => {
                let annotation = common::pod::annotation(info.pod, keys::INPLACE_UPDATE_GRACE).unwrap_or_default();
                if grace.revision != ctx.update_revision {
                    Some(inplace::cancel_grace(info.pod, annotation, ctx.now))
                } else if inplace::grace_ends_at(grace).is_some_and(|end| end <= ctx.now) {
                    finish_grace(ctx, info, annotation)
                } else {
                    None
                }
            }
            Progress::Done => Some(crate::hooks::complete_in_place(ctx, info, draft)),
            Progress::Patched(_) | Progress::HotPatching { .. } => None,
            Progress::Idle => {
                if info.state.is_preparing() {
                    None
                } else if info.state == LifecycleState::Updated {
                    crate::hooks::post_in_place(ctx, info, draft)
                } else if info.state == LifecycleState::Updating {
                    // `Updating` with nothing recorded: nothing to wait for.
                    Some(crate::hooks::complete_in_place(ctx, info, draft))
                } else {
                    inplace::mark_ready(info.pod, ctx.now)
                }
            }
        };
        if let Some(change) = change {
            draft.touch(info.name);
            draft.actions.push(Action::PatchPod(change));
        }
    }
}

fn finish_grace(ctx: &Ctx<'_>, info: &PodInfo<'_>, annotation: &str) -> Option<crate::action::PodChange> {
    let from = info.revision?;
    let old = ctx.templates.get(from)?;
    let new = ctx.templates.get(&ctx.update_revision)?;
    let change = inplace::diff(old, new).ok()?;
    let step = inplace::Step {
        pod: info.pod,
        from_revision: from,
        to_revision: &ctx.update_revision,
        change: &change,
        now: ctx.now,
    };
    Some(inplace::finish_grace(&step, annotation))
}

/// A pod left in `PreparingDelete` / `PreparingUpdate` that this pass no longer wants to delete or update (the
/// replicas went back up, the template was rolled back to the pod's revision, the partition was raised) goes back
/// to `Normal`. Pods still wanted keep their state even while paused.
fn release_unneeded_holds(ctx: &Ctx<'_>, infos: &[PodInfo<'_>], draft: &mut Draft) {
    for info in infos {
        if !info.state.is_preparing() || draft.is_touched(info.name) || draft.is_held(info.name) {
            continue;
        }
        if info.state == LifecycleState::PreparingUpdate && ctx.paused && !info.updated {
            continue;
        }
        draft.touch(info.name);
        draft.actions.push(Action::PatchPod(crate::action::PodChange {
            pod: info.pod_ref(),
            reason: crate::action::PatchReason::Lifecycle,
            writes: vec![crate::action::PodWrite::Object(lifecycle::set_state_ops(LifecycleState::Normal, ctx.now))],
            summary: format!("no longer needed in {}", info.state.as_str()),
        }));
    }
}

/// `podsToDelete` entries whose pod is gone are removed, as CloneSet does (BCS never prunes: a later pod that
/// happens to reuse a name would be deleted, bug list §7.13).
fn prune_pods_to_delete(gd: &GameDeployment, owned: &[&Pod], draft: &mut Draft) {
    let Some(list) = gd.spec.scale_strategy.as_ref().map(|s| &s.pods_to_delete).filter(|l| !l.is_empty()) else {
        return;
    };
    let existing: BTreeSet<&str> = owned.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
    let remaining: Vec<String> = list.iter().filter(|n| existing.contains(n.as_str())).cloned().collect();
    if remaining.len() != list.len() {
        draft.actions.push(Action::PrunePodsToDelete { expected: list.clone(), remaining });
    }
}

fn truncate_history(ctx: &Ctx<'_>, owned: &[&Pod], revisions: &[&ControllerRevision], draft: &mut Draft) {
    let mut live: BTreeSet<String> =
        owned.iter().filter_map(|p| common::pod::label(p, keys::CONTROLLER_REVISION_HASH).map(String::from)).collect();
    live.insert(ctx.update_revision.clone());
    live.insert(ctx.current_revision.clone());
    let limit = ctx.gd.spec.revision_history_limit.unwrap_or(common::api::DEFAULT_REVISION_HISTORY_LIMIT);
    for name in revision::history_to_delete(revisions, &live, limit) {
        draft.actions.push(Action::DeleteRevision { name });
    }
}

fn grace_and_readiness_requeue(ctx: &Ctx<'_>, infos: &[PodInfo<'_>], draft: &mut Draft) {
    for info in infos {
        match &info.progress {
            Progress::Grace(grace) => {
                if let Some(end) = inplace::grace_ends_at(grace) {
                    draft.requeue_at(ctx.now, end);
                }
            }
            Progress::HotPatching { deadline } => draft.requeue_at(ctx.now, *deadline),
            _ => {}
        }
        if ctx.min_ready_seconds > 0
            && info.ready
            && !info.available
            && let Some(at) = common::pod::available_at(info.pod, ctx.min_ready_seconds)
        {
            draft.requeue_at(ctx.now, at);
        }
    }
}
