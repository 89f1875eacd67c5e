//! The planner: a pure function from what the operator observes (the GameDeployment, the namespace's pods, the
//! GameDeployment's ControllerRevisions, node deletion costs, HookRuns and HookTemplates, the clock) to what it
//! should do (a [`Plan`]).
//!
//! [`plan`] runs these steps, in order, each in its own module:
//! 1. ownership ([`crate::ownership`]) — validate the selector, adopt matching orphans, release owned pods that
//!    stopped matching;
//! 2. revisions ([`crate::revision`]) — find or create the revision of the current template (renumbering it on
//!    rollback); then the pass's [`settings`] and [`PodInfo`](settings::PodInfo)s are resolved (each pod's own
//!    facts from [`pod_facts`]: kept between passes, derived again only for the pods that changed);
//! 3. canary ([`canary`]) — the current step decides the partition of this pass (and may pause);
//! 4. diffs ([`diffs`]) — how many pods to create, delete and update, the surge and the unavailable budget;
//! 5. scale ([`scale`]) — `podsToDelete`, then create or delete pods towards `replicas` (+ surge)
//!    ([`scale::race_to_empty`] for `RaceToEmpty`);
//! 6. update ([`update`]) — only if scaling did nothing this pass: move pods to the update revision (the in-place
//!    lifecycle lives in [`update::inplace`]); then the claims of the pods created and deleted above
//!    ([`scale::volumes`]);
//! 7. refresh ([`refresh`]) — advance in-place updates ([`update::inplace::advance()`]: grace periods, completion,
//!    post-inplace hooks) and the readiness gate of new pods;
//! 8. housekeeping ([`housekeeping`], [`hooks`], [`shadow`]) — release pods held for work no longer wanted, prune
//!    `podsToDelete`, remove HookRuns nobody waits for (and retried ones), make and remove shadow runs, truncate the
//!    revision history;
//! 9. status ([`status`], [`hooks::status`]) — counts, revisions, conditions, hook conditions, canary fields.
//!
//! Every deletion and every in-place / hot-patch update is first put to the gate ([`crate::gate::verdict()`], from
//! [`plan_draft::Draft::pass_gate_with`]). No pod is acted on twice in one pass.

pub(crate) mod canary;
pub(crate) mod claim_names;
pub(crate) mod conditions;
pub(crate) mod diffs;
pub(crate) mod hooks;
mod housekeeping;
mod plan_draft;
pub(crate) mod pod_facts;
pub(crate) mod pod_progress;
pub(crate) mod progress_deadline;
mod refresh;
pub(crate) mod scale;
pub(crate) mod settings;
pub(crate) mod shadow;
pub(crate) mod status;
pub(crate) mod update;

#[cfg(test)]
mod cloneset_tests;
#[cfg(test)]
mod hook_tests;
#[cfg(test)]
mod incremental_properties;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod quarantine_tests;
#[cfg(test)]
mod rollback_tests;
#[cfg(test)]
pub(crate) mod sim_cluster;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use common::api::GameDeploymentStatus;
use common::cached_pod::Pod;
use k8s_openapi::api::core::v1::PodTemplateSpec;

use crate::action::{Action, HeldPod, PlannedEvent, PodRef};
use crate::{ownership, revision};
use plan_draft::Draft;
pub use pod_facts::FactsCache;
pub use settings::Observed;
use status::Failure;

/// What to do, and the status the GameDeployment should show.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The writes to make, each complete data (the pod to create, the patch with its preconditions), in order.
    pub actions: Vec<Action>,
    /// The status computed from what was observed. The executor adds the outcome of the actions
    /// (`FailedScale` / `FailedUpdate`) before writing it — and writes it only if it differs.
    pub status: GameDeploymentStatus,
    /// The Events that explain the pass's decisions, for the executor to publish.
    pub events: Vec<PlannedEvent>,
    /// Pods a gate holds, with the reason.
    pub held: Vec<HeldPod>,
    /// When to look again even if nothing changes (grace periods, `minReadySeconds`).
    pub requeue_after: Option<Duration>,
    /// Old pods the current canary step keeps back beyond the spec's partition.
    pub canary_held: i32,
}

/// Drops every action that would write the GameDeployment outside its status (`retry` reset, `paused`,
/// `podsToDelete` pruning) when it opted in to [`crate::gate::gitops_control`] — the last guard of the promise,
/// whatever a planner step asked for.
fn keep_spec_untouched(gd: &common::api::GameDeployment, actions: &mut Vec<Action>) {
    if crate::gate::gitops_control::gitops_clean(gd) {
        actions.retain(|a| {
            !matches!(a, Action::ResetRetry { .. } | Action::SetPaused { .. } | Action::PrunePodsToDelete { .. })
        });
    }
}

fn finish(mut draft: Draft, status: GameDeploymentStatus, canary_held: i32, gd: &common::api::GameDeployment) -> Plan {
    keep_spec_untouched(gd, &mut draft.actions);
    let requeue_after = draft.requeue_after();
    Plan { actions: draft.actions, status, events: draft.events, held: draft.held, requeue_after, canary_held }
}

/// Decides what to do, with the pods' own facts from the process's shared cache ([`FactsCache::shared`]): derived
/// again only for the pods that changed since an earlier pass.
pub fn plan(observed: &Observed<'_>) -> Plan {
    plan_with_facts(observed, FactsCache::shared())
}

/// Decides what to do, with the pods' own facts from `facts` ([`pod_facts`]). The plan is the same whatever
/// `facts` remembers (an empty cache plans from scratch): the cache only saves deriving facts again.
pub fn plan_with_facts(observed: &Observed<'_>, facts: &FactsCache) -> Plan {
    let gd = observed.gd;
    // Borrowed, not copied: the pass reads the stored status and builds the new one beside it.
    let no_status = GameDeploymentStatus::default();
    let old_status = gd.status.as_ref().unwrap_or(&no_status);
    let mut draft = Draft::default();

    // A GameDeployment being deleted is left to the garbage collector (pods, revisions and HookRuns carry its
    // ownerReference); acting on it would only race with it.
    if gd.metadata.deletion_timestamp.is_some() {
        return finish(draft, old_status.clone(), 0, gd);
    }

    // The gate looks up every held pod's runs by name.
    let run_names = crate::gate::attempt::RunNames::of(observed.hook_runs);

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

    // 2. Revisions, and the settings of the pass.
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
    let active: Vec<&Pod> = owned.iter().copied().filter(common::pod::is_active).collect();
    let current_revision = settings::current_revision(old_status, &active, &observed.revisions, &update_revision);
    let mut spec_problems: Vec<(Failure, String)> = Vec::new();
    if let Err(problem) = &selector {
        spec_problems.push((Failure::Scale, problem.to_string()));
    }
    let mut settings = settings::resolve(observed, &mut spec_problems, update_revision, current_revision, templates);
    settings.gate.names = Some(&run_names);
    // A failed canary rolled back (`status.canary.rollback`, recorded by an earlier pass): pods go back to the stable
    // revision through the usual update machinery and gates.
    if let Some(stable) = canary::rollback_target(old_status, &settings.template_revision) {
        if settings.templates.contains_key(stable) {
            settings.update_revision = stable.to_string();
        } else {
            spec_problems.push((
                Failure::Update,
                format!(
                    "the canary was rolled back to revision {stable}, whose ControllerRevision no longer exists: not \
                     updating (change the template)"
                ),
            ));
            settings.update_settings_ok = false;
        }
    }
    let infos = settings::pod_infos(&settings, &active, facts);
    let spec_partition = settings.partition;

    // 3. Canary steps decide the partition of this pass.
    let canary = canary::evaluate(
        gd,
        old_status,
        &settings.template_revision,
        canary::Counts::of(&infos, &settings),
        &settings.gate,
        settings.now,
    );
    if let Some(partition) = canary.partition {
        settings.partition = partition.min(settings.replicas);
    }
    draft.actions.extend(canary.actions.iter().cloned());
    draft.events.extend(canary.events.iter().cloned());
    if let Some(at) = canary.requeue_at {
        draft.requeue_at(settings.now, at);
    }

    // 4. Diffs.
    let diffs = diffs::compute(&settings, &infos);
    let old_kept = settings::count_where(&infos, |i| !i.updated && !i.specified);
    let canary_held = ((old_kept - spec_partition).max(0) - diffs.update).max(0);
    if let Some(problem) = update::in_place_only_problem(&settings, &infos) {
        spec_problems.push((Failure::Update, problem));
    }

    if selector.is_ok() {
        // 5. Scale.
        let scaled = scale::plan(&settings, &diffs, &infos, &observed.pods, &owned, observed.seed, &mut draft);
        if let Some(problem) = scaled.problem {
            spec_problems.push((Failure::Scale, problem));
        }
        // 6. Update.
        let update_ran = !scaled.acted && settings.update_settings_ok;
        if update_ran {
            update::plan(&settings, &diffs, &infos, &mut draft);
        }
        // Claims follow the pods created and deleted above (`spec.volumeClaimTemplates`).
        let claims =
            scale::volumes::Claims { gd, claims: &observed.claims, namespace_pods: &observed.pods, owned: &owned };
        scale::volumes::plan(&claims, &mut draft.actions);
        // 7. Refresh.
        refresh::plan(&settings, &infos, &mut draft);
        // 8. Housekeeping.
        housekeeping::release_unneeded_holds(&settings, &infos, update_ran, &mut draft);
        housekeeping::prune_pods_to_delete(gd, &owned, &mut draft);
        hooks::housekeeping(&settings, &owned, &mut draft);
        shadow::plan(&settings, &infos, old_status, canary.judged_step, &mut draft);
    }
    housekeeping::truncate_history(&settings, &owned, &observed.revisions, &mut draft);
    refresh::requeue(&settings, &infos, &mut draft);

    // 9. Status.
    let mut status = status::compute(&settings, &diffs, old_status, &infos, &draft, &spec_problems);
    canary.apply_to(&mut status);
    status::show_canary_step(gd, &mut status);
    status::show_canary_pause(gd, &mut status, settings.now);
    status::show_canary_rollback(&mut status, settings.now);
    let mut hook_events = Vec::new();
    hooks::status(&settings, &infos, &draft, old_status, &mut status, &mut hook_events);
    shadow::status(&settings, &mut status, &mut hook_events);
    if let Some(at) = hooks::records_expire_at(&status) {
        draft.requeue_at(settings.now, at);
    }
    draft.events.extend(hook_events);
    // 10. The progress deadline (last: it reports on the `Progressing` every step above settled).
    if let Some(at) = progress_deadline::apply(gd.spec.progress_deadline_seconds, old_status, &mut status, settings.now)
    {
        draft.requeue_at(settings.now, at);
    }
    draft.events.extend(status::transition_events(old_status, &status));
    finish(draft, status, canary_held, gd)
}
