//! `status`: the counts BCS shows (and `kubectl get gamedeployment` prints), the revisions, and conditions that
//! are actually written — `FailedScale` / `FailedUpdate` when something fails (BCS builds them but never persists
//! them, BCS-G16) and `Progressing`, which says what the rollout is waiting for.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use common::api::{GameDeploymentStatus, GameDeploymentUpdateStrategyType};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::diffs::Diffs;
use super::plan_draft::Draft;
use super::settings::{PodInfo, Settings, count, count_where};
use super::update::inplace::Progress;
use super::update::ondelete;
use crate::action::{Phase, PlannedEvent};
use crate::lifecycle::LifecycleState;
use crate::ownership;

pub const FAILED_SCALE: &str = "FailedScale";
pub const FAILED_UPDATE: &str = "FailedUpdate";

/// Reason of a failure condition caused by the spec itself (not by an API call).
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";

pub(crate) use super::settings::Failure;
// The conditions' vocabulary is below every step that reads or writes a condition ([`super::conditions`]); named
// here too, where the status is computed.
pub(crate) use super::conditions::resume_command;
pub use super::conditions::{PROGRESSING, condition, remove_condition, set_condition};

/// The condition type a failure is reported under.
pub fn condition_type(failure: Failure) -> &'static str {
    match failure {
        Failure::Scale => FAILED_SCALE,
        Failure::Update => FAILED_UPDATE,
    }
}

/// Reason of a failure condition caused by a write the API refused.
pub const REASON_WRITE_FAILED: &str = "WriteFailed";

/// What the executor's writes did to the conditions (a pure function, so the mapping is tested without a
/// server): a failed write of the scale (update) part of the plan sets `FailedScale` (`FailedUpdate`) True with
/// reason `WriteFailed` and the first message; a part with a successful write and no failure clears a
/// `WriteFailed` condition of its type. Spec problems (`InvalidSpec`) are left as the planner set them.
pub(crate) fn apply_write_outcome(
    status: &mut GameDeploymentStatus,
    failures: &[(Phase, String)],
    succeeded: &BTreeSet<Phase>,
    now: Timestamp,
) {
    for failure in [Failure::Scale, Failure::Update] {
        let phase = failure.phase();
        let messages: Vec<&str> = failures.iter().filter(|(p, _)| *p == phase).map(|(_, m)| m.as_str()).collect();
        let type_ = condition_type(failure);
        if let Some(first) = messages.first() {
            let message = if messages.len() > 1 {
                format!("{first} (and {} more)", messages.len() - 1)
            } else {
                first.to_string()
            };
            set_condition(&mut status.conditions, type_, "True", REASON_WRITE_FAILED, &message, now);
        } else if succeeded.contains(&phase)
            && condition(status, type_).is_some_and(|c| c.reason.as_deref() == Some(REASON_WRITE_FAILED))
        {
            remove_condition(&mut status.conditions, type_);
        }
    }
}

/// A short list for messages ("a, b, c and 4 more").
fn names<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = items.collect();
    let shown = all.iter().take(3).copied().collect::<Vec<_>>().join(", ");
    if all.len() > 3 { format!("{shown} and {} more", all.len() - 3) } else { shown }
}

/// "1 pod" / "3 pods".
fn pods(n: i32) -> String {
    if n == 1 { "1 pod".to_string() } else { format!("{n} pods") }
}

/// How many pods declare each known server state, from each pod's declared value (`common::server_state`'s
/// `ServerState::declared`): a server that says `Draining` is counted as `Draining`, though scale-in ranks it with
/// `WaitToBeDeleted`.
fn server_states(declared: impl Iterator<Item = Option<&'static str>>) -> BTreeMap<String, i32> {
    let mut counts = BTreeMap::new();
    for declared in declared.flatten() {
        *counts.entry(declared.to_string()).or_insert(0) += 1;
    }
    counts
}

/// The status of this pass, from what was observed.
pub(crate) fn compute(
    settings: &Settings<'_>,
    diffs: &Diffs,
    old: &GameDeploymentStatus,
    infos: &[PodInfo<'_>],
    draft: &Draft,
    problems: &[(Failure, String)],
) -> GameDeploymentStatus {
    let replicas = count(infos.len());
    let updated = count_where(infos, |i| i.updated);
    let settled = replicas == settings.replicas
        && updated == replicas
        && infos.iter().all(|i| i.state == LifecycleState::Normal && i.progress.is_idle());
    // Settled but for the servers in `Maintaining`, which the rollout leaves as they are (reported by name).
    let serving_settled = replicas == settings.replicas
        && infos
            .iter()
            .filter(|i| !i.quarantined)
            .all(|i| i.updated && i.state == LifecycleState::Normal && i.progress.is_idle());
    let mut status = GameDeploymentStatus {
        observed_generation: settings.gd.metadata.generation,
        replicas,
        ready_replicas: count_where(infos, |i| i.ready),
        // Kruise's `calculateStatus`: available = `IsPodAvailable`, which only a pod in lifecycle state `Normal` is.
        available_replicas: count_where(infos, |i| i.status_available()),
        updated_replicas: updated,
        updated_ready_replicas: count_where(infos, |i| i.updated && i.ready),
        updated_available_replicas: count_where(infos, |i| i.updated && i.status_available()),
        // CloneSet: `replicas − partition` (the partition in force this pass: the canary step's while one runs).
        expected_updated_replicas: (settings.replicas - settings.partition).max(0),
        server_states: server_states(infos.iter().map(|i| i.declared_state)),
        current_revision: Some(if settled {
            settings.update_revision.clone()
        } else {
            settings.current_revision.clone()
        }),
        update_revision: Some(settings.update_revision.clone()),
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        label_selector: Some(ownership::selector_string(&settings.gd.spec.selector)),
        // Canary progress and hook conditions are kept as they are (issue 6 manages them), except entries of
        // pods that no longer exist.
        pause_conditions: old.pause_conditions.clone(),
        current_step_index: old.current_step_index,
        current_step: old.current_step.clone(),
        current_step_hash: old.current_step_hash.clone(),
        canary: old.canary.clone(),
        // Written by `super::hooks::status` from the old lists and this pass' decisions: one copy per pass.
        pre_delete_hook_condition: Vec::new(),
        pre_inplace_hook_condition: Vec::new(),
        post_inplace_hook_condition: Vec::new(),
        shadow_hook_results: old.shadow_hook_results.clone(),
    };

    let now = settings.now;
    let scale_settled = replicas == settings.replicas && !infos.iter().any(|i| i.specified);
    let update_settled = diffs.update == 0 && infos.iter().all(|i| i.progress.is_idle());
    for failure in [Failure::Scale, Failure::Update] {
        let type_ = condition_type(failure);
        let mine: Vec<&str> = problems.iter().filter(|(f, _)| *f == failure).map(|(_, m)| m.as_str()).collect();
        if !mine.is_empty() {
            set_condition(&mut status.conditions, type_, "True", REASON_INVALID_SPEC, &mine.join("; "), now);
            continue;
        }
        let stale_spec_problem =
            condition(&status, type_).is_some_and(|c| c.reason.as_deref() == Some(REASON_INVALID_SPEC));
        let settled = match failure {
            Failure::Scale => scale_settled,
            Failure::Update => update_settled,
        };
        if settled || stale_spec_problem {
            remove_condition(&mut status.conditions, type_);
        }
    }
    let (progress_status, reason, message) = progressing(settings, diffs, infos, draft, problems, serving_settled);
    set_condition(&mut status.conditions, PROGRESSING, progress_status, reason, &message, now);
    status
}

/// A pod a gate holds, for the `Progressing` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub name: String,
    /// The hook holding it ("pre-delete hook"), or "gate" when no hook is involved.
    pub by: String,
    /// Why, without the pod's name ("HookRun x is Running").
    pub why: String,
}

/// Everything the `Progressing` condition says, gathered from one pass (so the wording is tested on plain
/// values: `progress_tests::messages`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// `spec.replicas`.
    pub desired: i32,
    /// Pods that exist and are not terminating.
    pub existing: i32,
    /// Of those, pods on the update revision.
    pub updated: i32,
    pub revision: String,
    pub partition: i32,
    /// Pods still to move to the update revision.
    pub to_update: i32,
    pub paused: bool,
    pub on_delete: bool,
    pub max_unavailable: i32,
    pub held: Vec<Held>,
    pub grace: Vec<String>,
    pub new_containers: Vec<String>,
    pub unavailable: Vec<String>,
    /// Pods this pass's update batch starts to move (their next state is not observed yet).
    pub starting: Vec<String>,
    /// Servers in `Maintaining`: left as they are, whatever the rollout wants.
    pub quarantined: Vec<String>,
    /// Pods listed for deletion (`podsToDelete`, the `specified-delete` label) that no gate holds: this pass deletes
    /// them, and their replacements do not exist yet — the rollout is not complete (issue 49, finding 1).
    pub replacing: Vec<String>,
    /// Every pod (but those in `Maintaining`) runs the update revision, is idle and in `Normal`.
    pub settled: bool,
}

/// `(status, reason, message)` of `Progressing`. The message is made of clauses separated by "; ", one fact each:
/// how many pods run the update revision, scaling, the partition, then one clause per thing waited for.
pub(crate) fn progressing_message(f: &Facts) -> (&'static str, &'static str, String) {
    let runs = if f.updated == 1 { "runs" } else { "run" };
    let mut clauses = vec![format!("{} of {} {runs} revision {}", f.updated, pods(f.existing), f.revision)];
    if f.existing > f.desired {
        clauses.push(format!("scaling in to {}", pods(f.desired)));
    } else if f.existing < f.desired {
        clauses.push(format!("scaling out to {}", pods(f.desired)));
    }
    let old = f.existing - f.updated;
    if f.partition > 0 && f.to_update > 0 {
        clauses.push(format!("partition {} keeps {} on older revisions", f.partition, pods(f.partition)));
    }
    if !f.quarantined.is_empty() {
        let list = names(f.quarantined.iter().map(String::as_str));
        clauses.push(match f.quarantined.len() {
            1 => format!("1 server in Maintaining is left as it is: {list}"),
            n => format!("{n} servers in Maintaining are left as they are: {list}"),
        });
    }
    if f.to_update > 0 && f.paused {
        clauses.push("updates are paused by spec.updateStrategy.paused".to_string());
        return ("Unknown", "Paused", clauses.join("; "));
    }
    if f.to_update > 0 && f.on_delete {
        clauses.push(ondelete::WAITING_FOR_DELETION.to_string());
        return ("True", "WaitingForDeletion", clauses.join("; "));
    }
    let mut waiting: Vec<String> = Vec::new();
    let mut by: Vec<&str> = f.held.iter().map(|h| h.by.as_str()).collect();
    by.sort_unstable();
    by.dedup();
    for gate in by {
        let held: Vec<String> =
            f.held.iter().filter(|h| h.by == gate).map(|h| format!("{} ({})", h.name, h.why)).collect();
        let count = i32::try_from(held.len()).unwrap_or(i32::MAX);
        waiting.push(format!("{gate} of {}: {}", pods(count), names(held.iter().map(String::as_str))));
    }
    if !f.grace.is_empty() {
        waiting.push(format!("in-place grace period of {}", names(f.grace.iter().map(String::as_str))));
    }
    if !f.new_containers.is_empty() {
        waiting.push(format!("new containers of {}", names(f.new_containers.iter().map(String::as_str))));
    }
    if !f.unavailable.is_empty() {
        waiting.push(format!("{} to become available", names(f.unavailable.iter().map(String::as_str))));
    }
    if !f.replacing.is_empty() {
        waiting.push(format!("{} to be deleted and replaced", names(f.replacing.iter().map(String::as_str))));
    }
    // The batch this pass starts is what happens next; only when nothing moves and nothing is waited on is the
    // update budget what holds the rest.
    if !f.starting.is_empty() && waiting.is_empty() {
        clauses.push(format!("updating {}", names(f.starting.iter().map(String::as_str))));
    } else if f.to_update > 0 && waiting.is_empty() && f.existing == f.desired {
        waiting.push(format!("room in the update budget (maxUnavailable {})", f.max_unavailable));
    }
    if !waiting.is_empty() || f.to_update > 0 || f.existing != f.desired {
        clauses.extend(waiting.into_iter().map(|w| format!("waiting for {w}")));
        return ("True", "RolloutInProgress", clauses.join("; "));
    }
    if f.settled && !f.quarantined.is_empty() {
        return ("True", "RolloutComplete", clauses.join("; "));
    }
    if f.settled {
        let all = if f.desired == 1 {
            format!("the only pod runs revision {} and is available", f.revision)
        } else {
            format!("all {} run revision {} and are available", pods(f.desired), f.revision)
        };
        return ("True", "RolloutComplete", all);
    }
    if old > 0 {
        clauses.push(format!("partition {} keeps {} on older revisions", f.partition, pods(old)));
    }
    ("True", "PartitionAvailable", clauses.join("; "))
}

/// `Progressing`: what the rollout waits for, in words.
fn progressing(
    settings: &Settings<'_>,
    diffs: &Diffs,
    infos: &[PodInfo<'_>],
    draft: &Draft,
    problems: &[(Failure, String)],
    settled: bool,
) -> (&'static str, &'static str, String) {
    if let Some((_, problem)) = problems.first() {
        return ("False", REASON_INVALID_SPEC, problem.clone());
    }
    let named = |keep: &dyn Fn(&PodInfo<'_>) -> bool| -> Vec<String> {
        infos.iter().filter(|i| keep(i)).map(|i| i.name.to_string()).collect()
    };
    let facts = Facts {
        desired: settings.replicas,
        existing: count(infos.len()),
        updated: count_where(infos, |i| i.updated),
        revision: settings.update_revision.clone(),
        partition: settings.partition,
        to_update: diffs.update,
        paused: settings.paused,
        on_delete: settings.strategy == GameDeploymentUpdateStrategyType::OnDelete,
        max_unavailable: settings.max_unavailable,
        held: draft
            .held
            .iter()
            .map(|h| Held {
                name: h.name.clone(),
                by: h.hook.as_ref().map_or_else(|| "the gate".to_string(), |g| hook_name(g.kind).to_string()),
                why: h.decision.reason().unwrap_or("held").to_string(),
            })
            // A pod in `Updated` waits for its post-inplace hook: the rollout is not done until it passes (it holds
            // no other pod, but the pod is not back in service).
            .chain(draft.post_hooks.iter().filter(|c| c.released_by.is_none()).map(|c| Held {
                name: c.pod_name.clone(),
                by: hook_name(common::hookrun::HookKind::PostInplace).to_string(),
                why: c.message.clone().unwrap_or_else(|| format!("HookRun is {}", c.phase)),
            }))
            .collect(),
        grace: named(&|i| matches!(i.progress, Progress::Grace(_))),
        new_containers: named(&|i| matches!(i.progress, Progress::Patched(_) | Progress::Done)),
        unavailable: named(&|i| !i.available && !i.quarantined && i.progress.is_idle()),
        starting: draft.batch.clone(),
        quarantined: named(&|i| i.quarantined),
        replacing: Vec::new(),
        settled,
    };
    let held: BTreeSet<&str> = facts.held.iter().map(|h| h.name.as_str()).collect();
    let replacing = named(&|i| i.specified).into_iter().filter(|name| !held.contains(name.as_str())).collect();
    progressing_message(&Facts { replacing, ..facts })
}

/// Why a canary step holds the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PauseWhy {
    /// A `pause` step without `duration`: a person resumes it.
    Indefinite,
    /// A timed `pause` step: it ends by itself at this time (or earlier, when a person resumes it).
    Until(Timestamp),
    /// The step's HookRun ended Failed, Error or Inconclusive.
    HookFailed(String),
}

/// A canary step that paused the rollout (`index` counts from 0, as `status.currentStepIndex` does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CanaryPause {
    pub index: usize,
    pub steps: usize,
    pub why: PauseWhy,
}

/// "paused at canary step 2 of 3 (indefinite): resume with kubectl gd resume …" (steps count from 1 here).
pub(crate) fn canary_pause_message(
    pause: &CanaryPause,
    gd: &common::api::GameDeployment,
    status: &GameDeploymentStatus,
) -> String {
    let why = match &pause.why {
        PauseWhy::Indefinite => "indefinite".to_string(),
        PauseWhy::Until(t) => {
            let t = Timestamp::from_second(t.as_second()).unwrap_or(*t);
            format!("until {t}")
        }
        PauseWhy::HookFailed(run) => format!("hook {run} failed"),
    };
    let resume = resume_command(gd, status.update_revision.as_deref().map(|r| (r, pause.index)));
    let (verb, rest) = match pause.why {
        PauseWhy::HookFailed(_) => ("resume anyway", "; or roll the template back to abort"),
        PauseWhy::Until(_) => ("resume early", ""),
        PauseWhy::Indefinite => ("resume", ""),
    };
    format!("paused at canary step {} of {} ({why}): {verb} with {resume}{rest}", pause.index + 1, pause.steps)
}

/// `status.currentStep`, the STEP column: the canary step in progress counted from 1 (`2/5`), `done` after the last,
/// unset without steps — so `kubectl get gamedeployment -o wide` numbers steps as `Progressing` and `kubectl gd` do.
pub(crate) fn show_canary_step(gd: &common::api::GameDeployment, status: &mut GameDeploymentStatus) {
    let steps = gd.spec.update_strategy.canary.as_ref().map_or(0, |c| c.steps.len());
    status.current_step = match status.current_step_index {
        _ if steps == 0 => None,
        None => None,
        Some(index) if usize::try_from(index).is_ok_and(|i| i >= steps) => Some("done".to_string()),
        Some(index) => Some(format!("{}/{steps}", index.max(0) + 1)),
    };
}

/// The canary step pausing the rollout, from the status this pass computed (None: no step pauses it).
pub(crate) fn canary_pause(gd: &common::api::GameDeployment, status: &GameDeploymentStatus) -> Option<CanaryPause> {
    use common::api::PauseReason;
    // BCS records a step's pause in the spec; GitOps-clean, where the spec is Git's, in status only.
    if !gd.spec.update_strategy.paused && !crate::gate::gitops_control::gitops_clean(gd) {
        return None;
    }
    let steps = &gd.spec.update_strategy.canary.as_ref()?.steps;
    let index = usize::try_from(status.current_step_index?).ok().filter(|i| *i < steps.len())?;
    let condition = status
        .pause_conditions
        .iter()
        .find(|c| matches!(c.reason, PauseReason::PausedByCanaryPauseStep | PauseReason::PausedByStepBasedHook))?;
    let why = match condition.reason {
        PauseReason::PausedByStepBasedHook => PauseWhy::HookFailed(
            status.canary.as_ref().and_then(|c| c.current_step_hook_run.clone()).unwrap_or_default(),
        ),
        _ => match steps[index].pause.as_ref().and_then(|p| p.duration) {
            Some(d) => PauseWhy::Until(
                condition
                    .start_time
                    .0
                    .checked_add(SignedDuration::from_secs(i64::from(d)))
                    .unwrap_or(condition.start_time.0),
            ),
            None => PauseWhy::Indefinite,
        },
    };
    Some(CanaryPause { index, steps: steps.len(), why })
}

/// Says in `Progressing` that a canary step paused the rollout and how to resume it (a spec problem still wins).
pub(crate) fn show_canary_pause(gd: &common::api::GameDeployment, status: &mut GameDeploymentStatus, now: Timestamp) {
    let invalid = condition(status, PROGRESSING).is_some_and(|c| c.reason.as_deref() == Some(REASON_INVALID_SPEC));
    if invalid {
        return;
    }
    if let Some(pause) = canary_pause(gd, status) {
        let message = canary_pause_message(&pause, gd, status);
        set_condition(&mut status.conditions, PROGRESSING, "Unknown", "Paused", &message, now);
    }
}

/// The reason `Progressing` takes (status `False`) while a failed canary is rolled back, and after.
pub const REASON_CANARY_ROLLED_BACK: &str = "CanaryRolledBack";

/// Says in `Progressing` (`False`, `CanaryRolledBack`) that a failed canary was rolled back
/// (`status.canary.rollback`), followed by where the pods are on their way back; a spec problem still wins. Not a
/// rollout in progress, so the progress deadline never fires on it.
pub(crate) fn show_canary_rollback(status: &mut GameDeploymentStatus, now: Timestamp) {
    let Some(rollback) = status.canary.as_ref().and_then(|c| c.rollback.as_ref()) else { return };
    let Some(progressing) = condition(status, PROGRESSING).filter(|c| c.reason.as_deref() != Some(REASON_INVALID_SPEC))
    else {
        return;
    };
    let message = format!("{}; {}", rollback.message, progressing.message.as_deref().unwrap_or_default());
    set_condition(&mut status.conditions, PROGRESSING, "False", REASON_CANARY_ROLLED_BACK, &message, now);
}

/// A hook as people call it ("the pre-delete hook").
pub(crate) fn hook_name(kind: common::hookrun::HookKind) -> &'static str {
    use common::hookrun::HookKind;
    match kind {
        HookKind::PreDelete => "the pre-delete hook",
        HookKind::PreInplace => "the pre-inplace hook",
        HookKind::PostInplace => "the post-inplace hook",
        HookKind::CanaryStep => "the canary step hook",
    }
}

/// Events for conditions the planner itself decided (a spec problem appearing, a rollout completing).
pub(crate) fn transition_events(old: &GameDeploymentStatus, new: &GameDeploymentStatus) -> Vec<PlannedEvent> {
    let mut events = Vec::new();
    for type_ in [FAILED_SCALE, FAILED_UPDATE] {
        let Some(c) = condition(new, type_).filter(|c| c.reason.as_deref() == Some(REASON_INVALID_SPEC)) else {
            continue;
        };
        if condition(old, type_).map(|o| (&o.reason, &o.message)) != Some((&c.reason, &c.message)) {
            events.push(PlannedEvent::warning(type_, c.message.clone().unwrap_or_default()));
        }
    }
    let reason = |s: &GameDeploymentStatus| condition(s, PROGRESSING).and_then(|c| c.reason.clone());
    if let Some(now) = reason(new).filter(|r| r == "RolloutComplete" || r == "PartitionAvailable")
        && reason(old).as_deref() != Some(now.as_str())
    {
        let message = condition(new, PROGRESSING).and_then(|c| c.message.clone()).unwrap_or_default();
        events.push(PlannedEvent::normal(&now, message));
    }
    let exceeded = super::progress_deadline::EXCEEDED;
    if reason(new).as_deref() == Some(exceeded) && reason(old).as_deref() != Some(exceeded) {
        let message = condition(new, PROGRESSING).and_then(|c| c.message.clone()).unwrap_or_default();
        events.push(PlannedEvent::warning(exceeded, message));
    }
    events
}

/// Whether a status differing from the one last written must be written at once, or may wait for the next
/// status write of its GameDeployment (at most `--status-write-interval` later, see the controller's report step).
///
/// Only progress that every pass recomputes from the pods and HookRuns may wait: the five replica counts, the
/// `Progressing` message (not its status or reason), and hook condition entries of pods a hook still holds (no
/// `releasedBy`, phase `Pending`, `Running` or `Successful`, a run named). Everything else — the generation, the
/// revisions, `collisionCount`, the other conditions, a `Progressing` status or reason, canary and pause fields,
/// release records, failed hooks — is written in the pass that computes it: it is history or a state the planner
/// reads back, or something a person must see now.
pub fn must_write_now(written: &GameDeploymentStatus, new: &GameDeploymentStatus) -> bool {
    Skeleton::of(written) != Skeleton::of(new)
}

/// The status without what may wait ([`must_write_now`]), borrowed: a pass compares two statuses without copying
/// either (a roll holds a thousand hook condition entries). Built by naming every field, so a field added to the
/// status is compared unless it is left out here on purpose.
#[derive(PartialEq)]
struct Skeleton<'a> {
    observed_generation: Option<i64>,
    expected_updated_replicas: i32,
    current_revision: &'a Option<String>,
    update_revision: &'a Option<String>,
    collision_count: Option<i32>,
    conditions: Conditions<'a>,
    pause_conditions: &'a [common::api::PauseCondition],
    label_selector: &'a Option<String>,
    current_step_index: Option<i32>,
    current_step: &'a Option<String>,
    current_step_hash: &'a Option<String>,
    canary: &'a Option<common::api::CanaryStatus>,
    hook_conditions: [Decided<'a>; 3],
    shadow_hook_results: &'a [common::api::ShadowHookResult],
}

impl<'a> Skeleton<'a> {
    fn of(status: &'a GameDeploymentStatus) -> Self {
        let GameDeploymentStatus {
            observed_generation,
            // Recomputed by every pass.
            replicas: _,
            ready_replicas: _,
            available_replicas: _,
            updated_replicas: _,
            updated_ready_replicas: _,
            updated_available_replicas: _,
            server_states: _,
            expected_updated_replicas,
            current_revision,
            update_revision,
            collision_count,
            conditions,
            pause_conditions,
            label_selector,
            current_step_index,
            current_step,
            current_step_hash,
            canary,
            pre_delete_hook_condition,
            pre_inplace_hook_condition,
            post_inplace_hook_condition,
            shadow_hook_results,
        } = status;
        Self {
            observed_generation: *observed_generation,
            expected_updated_replicas: *expected_updated_replicas,
            current_revision,
            update_revision,
            collision_count: *collision_count,
            conditions: Conditions(conditions),
            pause_conditions,
            label_selector,
            current_step_index: *current_step_index,
            current_step,
            current_step_hash,
            canary,
            hook_conditions: [
                Decided(pre_delete_hook_condition),
                Decided(pre_inplace_hook_condition),
                Decided(post_inplace_hook_condition),
            ],
            shadow_hook_results,
        }
    }
}

/// Conditions compared without the `Progressing` message and update time, which move with the counts they follow
/// (`super::progress_deadline`).
struct Conditions<'a>(&'a [common::api::GameDeploymentCondition]);

impl PartialEq for Conditions<'_> {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &common::api::GameDeploymentCondition, b: &common::api::GameDeploymentCondition| {
            if a.type_ == PROGRESSING && b.type_ == PROGRESSING {
                (&a.status, &a.last_transition_time, &a.reason) == (&b.status, &b.last_transition_time, &b.reason)
            } else {
                a == b
            }
        };
        self.0.len() == other.0.len() && self.0.iter().zip(other.0).all(|(a, b)| same(a, b))
    }
}

/// Hook condition entries without those of pods a hook still holds (no `releasedBy`, phase `Pending`, `Running` or
/// `Successful`, a run named).
struct Decided<'a>(&'a [common::api::HookCondition]);

impl Decided<'_> {
    fn entries(&self) -> impl Iterator<Item = &common::api::HookCondition> {
        let held = |c: &common::api::HookCondition| {
            c.released_by.is_none()
                && c.hook_run.is_some()
                && matches!(
                    c.phase,
                    common::api::HookPhase::Pending
                        | common::api::HookPhase::Running
                        | common::api::HookPhase::Successful
                )
        };
        self.0.iter().filter(move |c| !held(c))
    }
}

impl PartialEq for Decided<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.entries().eq(other.entries())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    #[test]
    fn server_states_count_named_states_only() {
        let pod = |state: Option<&str>| {
            let pod = crate::fixtures::pod("p");
            match state {
                Some(s) => pod.labels(&[(common::keys::SERVER_STATE, s)]).build(),
                None => pod.build(),
            }
        };
        let pods = [
            pod(Some("Idle")),
            pod(Some("Allocated")),
            pod(Some("Idle")),
            pod(Some("Draining")),
            pod(None),
            pod(Some("x")),
        ];
        let want: BTreeMap<String, i32> =
            [("Allocated".to_string(), 1), ("Draining".to_string(), 1), ("Idle".to_string(), 2)].into();
        assert_eq!(server_states(pods.iter().map(common::server_state::ServerState::declared)), want);
    }

    #[test]
    fn only_recomputable_progress_may_wait_for_the_next_status_write() {
        use common::api::{HookCondition, HookPhase, HookReleaseReason};
        let t = Timestamp::from_second(10).unwrap();
        let mut base = GameDeploymentStatus { observed_generation: Some(2), replicas: 5, ..Default::default() };
        set_condition(&mut base.conditions, PROGRESSING, "True", "RolloutInProgress", "1 of 5 updated", t);
        let entry = |pod: &str, phase| HookCondition {
            pod_name: pod.into(),
            start_time: Time(t),
            phase,
            hook_run: Some(format!("preinplace-{pod}")),
            message: None,
            released_by: None,
            released_at: None,
        };
        let mut progress = base.clone();
        progress.ready_replicas = 3;
        progress.updated_replicas = 2;
        progress.updated_ready_replicas = 1;
        progress.available_replicas = 3;
        set_condition(&mut progress.conditions, PROGRESSING, "True", "RolloutInProgress", "2 of 5 updated", t);
        progress.pre_inplace_hook_condition = vec![entry("a", HookPhase::Pending), entry("b", HookPhase::Running)];
        assert!(!must_write_now(&base, &progress), "counts, the Progressing message, held pods: may wait");
        assert!(!must_write_now(&base, &base));

        type Change<'a> = Box<dyn Fn(&mut GameDeploymentStatus) + 'a>;
        let urgent: Vec<(&str, Change<'_>)> = vec![
            ("generation", Box::new(|s| s.observed_generation = Some(3))),
            ("update revision", Box::new(|s| s.update_revision = Some("web-2".into()))),
            ("current revision", Box::new(|s| s.current_revision = Some("web-2".into()))),
            ("collision count", Box::new(|s| s.collision_count = Some(1))),
            ("canary step", Box::new(|s| s.current_step_index = Some(1))),
            ("canary step hash", Box::new(|s| s.current_step_hash = Some("h2".into()))),
            ("canary status", Box::new(|s| s.canary = Some(Default::default()))),
            ("expected updated replicas", Box::new(|s| s.expected_updated_replicas = 4)),
            ("label selector", Box::new(|s| s.label_selector = Some("app=web".into()))),
            (
                "a failed post-inplace hook",
                Box::new(move |s| s.post_inplace_hook_condition = vec![entry("b", HookPhase::Failed)]),
            ),
            (
                "Progressing reason",
                Box::new(|s| set_condition(&mut s.conditions, PROGRESSING, "True", "RolloutComplete", "done", t)),
            ),
            (
                "a failure condition",
                Box::new(|s| set_condition(&mut s.conditions, FAILED_UPDATE, "True", REASON_WRITE_FAILED, "x", t)),
            ),
            ("a failed hook", Box::new(move |s| s.pre_inplace_hook_condition = vec![entry("a", HookPhase::Failed)])),
            (
                "a release record",
                Box::new(move |s| {
                    let mut e = entry("a", HookPhase::Running);
                    e.released_by = Some(HookReleaseReason::Skipped);
                    s.pre_delete_hook_condition = vec![e];
                }),
            ),
            (
                "a held pod without a run (its problem)",
                Box::new(move |s| {
                    let mut e = entry("a", HookPhase::Pending);
                    e.hook_run = None;
                    s.pre_inplace_hook_condition = vec![e];
                }),
            ),
        ];
        for (what, change) in urgent {
            let mut new = progress.clone();
            change(&mut new);
            assert!(must_write_now(&base, &new), "{what} is written at once");
        }
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let t1 = Timestamp::from_second(10).unwrap();
        let t2 = Timestamp::from_second(20).unwrap();
        let mut conditions = Vec::new();
        set_condition(&mut conditions, PROGRESSING, "True", "RolloutInProgress", "a", t1);
        set_condition(&mut conditions, PROGRESSING, "True", "RolloutInProgress", "b", t2);
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Some(Time(t1)));
        assert_eq!(conditions[0].message.as_deref(), Some("b"));
        set_condition(&mut conditions, PROGRESSING, "Unknown", "Paused", "c", t2);
        assert_eq!(conditions[0].last_transition_time, Some(Time(t2)));
        set_condition(&mut conditions, FAILED_SCALE, "True", "x", "y", t2);
        assert_eq!(conditions.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(), [FAILED_SCALE, PROGRESSING]);
        remove_condition(&mut conditions, FAILED_SCALE);
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn name_lists_are_short() {
        assert_eq!(names(["a", "b"].into_iter()), "a, b");
        assert_eq!(names(["a", "b", "c", "d", "e"].into_iter()), "a, b, c and 2 more");
    }
}

#[cfg(test)]
mod step_tests {
    use super::*;
    use crate::fixtures::gd;
    use crate::planner::diffs;
    use crate::planner::settings::builder::{NEW, OLD, Pass};

    fn status_of(pass: &Pass) -> GameDeploymentStatus {
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        compute(&settings, &diffs, &GameDeploymentStatus::default(), &infos, &Draft::default(), &[])
    }

    #[test]
    fn counts_revisions_and_progress() {
        let status = status_of(&Pass::new(gd(3, "InplaceUpdate")).updated(3));
        assert_eq!((status.replicas, status.ready_replicas, status.updated_replicas), (3, 3, 3));
        assert_eq!(status.current_revision.as_deref(), Some(NEW), "settled: the update revision is current");
        assert_eq!(condition(&status, PROGRESSING).and_then(|c| c.reason.as_deref()), Some("RolloutComplete"));

        let status = status_of(&Pass::new(gd(3, "InplaceUpdate")).old(2).updated(1));
        assert_eq!((status.updated_replicas, status.current_revision.as_deref()), (1, Some(OLD)));
        let progressing = condition(&status, PROGRESSING).unwrap();
        assert_eq!(progressing.reason.as_deref(), Some("RolloutInProgress"));
        assert!(progressing.message.as_deref().unwrap().contains("update budget"), "{progressing:?}");
    }

    /// CloneSet's `expectedUpdatedReplicas` (`replicas − partition`, the partition in force) and
    /// `updatedAvailableReplicas` (updated pods Ready for `minReadySeconds`), as Kruise's
    /// `pkg/controller/cloneset/cloneset_status.go` (`calculateStatus`) computes them.
    #[test]
    fn expected_updated_and_updated_available_replicas() {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        // (replicas, partition, old pods, updated available, updated Ready < minReadySeconds, updated not Ready)
        // → (expectedUpdatedReplicas, updatedAvailableReplicas, updatedReadyReplicas)
        type Row = (i32, Option<IntOrString>, usize, usize, usize, usize, (i32, i32, i32));
        let table: &[Row] = &[
            (3, None, 0, 3, 0, 0, (3, 3, 3)),
            (5, None, 3, 1, 1, 0, (5, 1, 2)),
            (5, Some(IntOrString::Int(2)), 3, 0, 1, 1, (3, 0, 1)),
            (5, Some(IntOrString::Int(9)), 5, 0, 0, 0, (0, 0, 0)),
            (4, Some(IntOrString::Int(0)), 0, 2, 1, 1, (4, 2, 3)),
            (0, None, 0, 0, 0, 0, (0, 0, 0)),
            // Scaling out: the expectation follows spec.replicas, not the pods that exist.
            (6, Some(IntOrString::Int(1)), 1, 2, 0, 0, (5, 2, 2)),
        ];
        for (replicas, partition, old, available, warming, sick, want) in table.iter().cloned() {
            let mut g = gd(replicas, "InplaceUpdate");
            g.spec.min_ready_seconds = 30;
            g.spec.update_strategy.partition = partition.clone();
            let mut pass = Pass::new(g).old(old).updated(available);
            for i in 0..warming {
                // Ready 5 s ago (now is 1000), minReadySeconds 30: Ready, not available.
                pass = pass.pod(crate::fixtures::pod(&format!("game-w{i}")).serving(NEW, "game:1", 995).build());
            }
            for i in 0..sick {
                pass = pass
                    .pod(crate::fixtures::pod(&format!("game-s{i}")).serving(NEW, "game:1", 10).not_ready().build());
            }
            let status = status_of(&pass);
            let got =
                (status.expected_updated_replicas, status.updated_available_replicas, status.updated_ready_replicas);
            assert_eq!(got, want, "replicas {replicas}, partition {partition:?}");
        }
    }

    #[test]
    fn write_failures_become_conditions_and_clear_on_success() {
        let now = Timestamp::UNIX_EPOCH;
        let mut status = GameDeploymentStatus::default();
        let failures = vec![(Phase::Update, "a".to_string()), (Phase::Update, "b".to_string())];
        apply_write_outcome(&mut status, &failures, &BTreeSet::new(), now);
        let failed = condition(&status, FAILED_UPDATE).unwrap();
        assert_eq!(
            (failed.reason.as_deref(), failed.message.as_deref()),
            (Some(REASON_WRITE_FAILED), Some("a (and 1 more)"))
        );
        assert!(condition(&status, FAILED_SCALE).is_none());
        // A later successful write of that part clears it; a success elsewhere does not.
        apply_write_outcome(&mut status, &[], &BTreeSet::from([Phase::Scale]), now);
        assert!(condition(&status, FAILED_UPDATE).is_some());
        apply_write_outcome(&mut status, &[], &BTreeSet::from([Phase::Update]), now);
        assert!(condition(&status, FAILED_UPDATE).is_none());
        // A spec problem is not a write failure: it stays.
        set_condition(&mut status.conditions, FAILED_SCALE, "True", REASON_INVALID_SPEC, "bad", now);
        apply_write_outcome(&mut status, &[], &BTreeSet::from([Phase::Scale]), now);
        assert!(condition(&status, FAILED_SCALE).is_some());
        assert_eq!(Failure::Scale.phase(), Phase::Scale);
    }
}

#[cfg(test)]
mod progress_tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn facts(desired: i32, existing: i32, updated: i32) -> Facts {
        Facts { desired, existing, updated, revision: "web-2".into(), max_unavailable: 1, ..Facts::default() }
    }

    fn held(name: &str, by: &str, why: &str) -> Held {
        Held { name: name.into(), by: by.into(), why: why.into() }
    }

    /// Situation → exact `Progressing` (status, reason, message).
    #[test]
    fn messages() {
        let pre = "the pre-delete hook";
        let table: Vec<(&str, Facts, (&str, &str, &str))> = vec![
            (
                "plain scale-in: never more pods than exist, no partition talk when nothing is to update",
                Facts { partition: 2, ..facts(5, 6, 6) },
                ("True", "RolloutInProgress", "6 of 6 pods run revision web-2; scaling in to 5 pods"),
            ),
            (
                "scale-out",
                Facts { unavailable: vec!["web-a".into()], ..facts(3, 1, 1) },
                (
                    "True",
                    "RolloutInProgress",
                    "1 of 1 pod runs revision web-2; scaling out to 3 pods; waiting for web-a to become available",
                ),
            ),
            (
                "held pods: one entry per pod, each with its own reason, no name twice",
                Facts {
                    held: vec![
                        held("a", pre, "HookRun ra is Running"),
                        held("b", pre, "HookRun rb is Running"),
                        held("c", pre, "HookTemplate \"t\" not found in namespace ns"),
                        held("d", pre, "HookRun rd is Running"),
                        held("e", "the pre-inplace hook", "HookRun re is Pending"),
                    ],
                    ..facts(3, 7, 0)
                },
                (
                    "True",
                    "RolloutInProgress",
                    "0 of 7 pods run revision web-2; scaling in to 3 pods; waiting for the pre-delete hook of 4 pods: \
                     a (HookRun ra is Running), b (HookRun rb is Running), c (HookTemplate \"t\" not found in \
                     namespace ns) and 1 more; waiting for the pre-inplace hook of 1 pod: e (HookRun re is Pending)",
                ),
            ),
            (
                "update limited by the budget, with a partition",
                Facts { partition: 1, to_update: 2, ..facts(4, 4, 1) },
                (
                    "True",
                    "RolloutInProgress",
                    "1 of 4 pods runs revision web-2; partition 1 keeps 1 pod on older revisions; waiting for room in \
                     the update budget (maxUnavailable 1)",
                ),
            ),
            (
                "a batch starts this pass: the pods it moves are named, the budget is not blamed",
                Facts { to_update: 3, starting: vec!["a".into(), "b".into()], ..facts(4, 4, 1) },
                ("True", "RolloutInProgress", "1 of 4 pods runs revision web-2; updating a, b"),
            ),
            (
                "in-place steps",
                Facts {
                    to_update: 1,
                    grace: vec!["a".into()],
                    new_containers: vec!["b".into(), "c".into()],
                    ..facts(4, 4, 2)
                },
                (
                    "True",
                    "RolloutInProgress",
                    "2 of 4 pods run revision web-2; waiting for in-place grace period of a; waiting for new \
                     containers of b, c",
                ),
            ),
            (
                "paused",
                Facts { to_update: 3, paused: true, ..facts(3, 3, 0) },
                (
                    "Unknown",
                    "Paused",
                    "0 of 3 pods run revision web-2; updates are paused by spec.updateStrategy.paused",
                ),
            ),
            (
                "partition reached",
                Facts { partition: 2, ..facts(5, 5, 3) },
                (
                    "True",
                    "PartitionAvailable",
                    "3 of 5 pods run revision web-2; partition 2 keeps 2 pods on older revisions",
                ),
            ),
            (
                "complete",
                Facts { settled: true, ..facts(1, 1, 1) },
                ("True", "RolloutComplete", "the only pod runs revision web-2 and is available"),
            ),
            (
                "complete, several pods",
                Facts { settled: true, ..facts(3, 3, 3) },
                ("True", "RolloutComplete", "all 3 pods run revision web-2 and are available"),
            ),
            (
                "a pod of podsToDelete deleted this pass: not complete before its replacement exists (issue 49)",
                Facts { settled: true, replacing: vec!["web-a".into()], ..facts(3, 3, 3) },
                (
                    "True",
                    "RolloutInProgress",
                    "3 of 3 pods run revision web-2; waiting for web-a to be deleted and replaced",
                ),
            ),
            (
                "complete but for a server in Maintaining",
                Facts { settled: true, quarantined: vec!["a".into()], ..facts(3, 3, 2) },
                (
                    "True",
                    "RolloutComplete",
                    "2 of 3 pods run revision web-2; 1 server in Maintaining is left as it is: a",
                ),
            ),
            (
                "scale-in held by servers in Maintaining",
                Facts { quarantined: vec!["a".into(), "b".into()], ..facts(1, 2, 2) },
                (
                    "True",
                    "RolloutInProgress",
                    "2 of 2 pods run revision web-2; scaling in to 1 pod; 2 servers in Maintaining are left as they \
                     are: a, b",
                ),
            ),
        ];
        for (situation, facts, (status, reason, message)) in table {
            let got = progressing_message(&facts);
            assert_eq!(got, (status, reason, message.to_string()), "{situation}");
        }
    }

    #[test]
    fn canary_pauses_say_how_to_resume() {
        // One verb, `kubectl gd resume`, and the plain kubectl equivalent for each control mode (issue 34, item 5).
        let mut gd = crate::fixtures::gd(4, "InplaceUpdate");
        gd.metadata.name = Some("web".into());
        let status = GameDeploymentStatus { update_revision: Some("web-7c9f".into()), ..Default::default() };
        let resume = r#"kubectl gd resume web -n default (or: kubectl patch gamedeployment web -n default --type=merge -p '{"spec":{"updateStrategy":{"paused":false}}}')"#;
        let until = Timestamp::from_second(1_700_000_000).unwrap();
        let table = [
            (PauseWhy::Indefinite, format!("paused at canary step 2 of 3 (indefinite): resume with {resume}")),
            (
                PauseWhy::Until(until),
                format!("paused at canary step 2 of 3 (until 2023-11-14T22:13:20Z): resume early with {resume}"),
            ),
            (
                PauseWhy::HookFailed("canary-web-2-1-check".into()),
                format!(
                    "paused at canary step 2 of 3 (hook canary-web-2-1-check failed): resume anyway with {resume}; or \
                     roll the template back to abort"
                ),
            ),
        ];
        for (why, want) in table {
            assert_eq!(canary_pause_message(&CanaryPause { index: 1, steps: 3, why }, &gd, &status), want);
        }
        gd.metadata.namespace = Some("games".into());
        assert!(
            resume_command(&gd, None).starts_with(
                "kubectl gd resume web -n games (or: kubectl patch gamedeployment web -n games --type=merge"
            )
        );
        // GitOps-clean: the annotation that resumes this step of this revision, never a spec write.
        gd.metadata.annotations = Some([(common::keys::CONTROL.to_string(), "annotations".to_string())].into());
        assert_eq!(
            resume_command(&gd, Some(("web-7c9f", 1))),
            "kubectl gd resume web -n games (or: kubectl annotate gamedeployment web -n games --overwrite \
             gamedeployment.tkex.tencent.com/resume-step=web-7c9f/1)"
        );
    }

    /// Issue 49, finding 3: the STEP column (`status.currentStep`) counts canary steps from 1, as `Progressing`
    /// ("paused at canary step 2 of 2") and `kubectl gd` do; it showed `currentStepIndex`, 1 beside "step 2 of 2".
    #[test]
    fn the_step_column_counts_canary_steps_from_one() {
        let mut gd = crate::fixtures::gd(4, "InplaceUpdate");
        let at = |index: Option<i32>| GameDeploymentStatus { current_step_index: index, ..Default::default() };
        let step = |gd: &common::api::GameDeployment, index: Option<i32>| {
            let mut status = at(index);
            show_canary_step(gd, &mut status);
            status.current_step
        };
        assert_eq!(step(&gd, Some(0)), None, "no canary steps: no column value");
        gd.spec.update_strategy.canary =
            Some(serde_json::from_value(serde_json::json!({"steps": [{"partition": 3}, {"pause": {}}]})).unwrap());
        assert_eq!(step(&gd, Some(0)).as_deref(), Some("1/2"));
        assert_eq!(step(&gd, Some(1)).as_deref(), Some("2/2"));
        assert_eq!(step(&gd, Some(2)).as_deref(), Some("done"));
        assert_eq!(step(&gd, None), None);
        let crd = serde_json::to_value(<common::api::GameDeployment as kube::CustomResourceExt>::crd()).unwrap();
        let columns = &crd["spec"]["versions"][0]["additionalPrinterColumns"];
        let column = columns.as_array().unwrap().iter().find(|c| c["name"] == "STEP").unwrap();
        assert_eq!(column["jsonPath"], ".status.currentStep", "{column}");
    }

    #[test]
    fn a_gitops_clean_canary_pause_shows_in_progressing() {
        // GitOps-clean: the pause lives in status only, `spec.updateStrategy.paused` stays false; `kubectl get gd -o
        // wide` must still say the rollout is paused and how to resume it (issue 34, item 2).
        use common::api::{PauseCondition, PauseReason};
        let mut gd = crate::fixtures::gd(4, "InplaceUpdate");
        gd.metadata.annotations = Some([(common::keys::CONTROL.to_string(), "annotations".to_string())].into());
        gd.spec.update_strategy.canary =
            Some(serde_json::from_value(serde_json::json!({"steps": [{"partition": 3}, {"pause": {}}]})).unwrap());
        let mut status = GameDeploymentStatus {
            current_step_index: Some(1),
            update_revision: Some("rev-2".into()),
            pause_conditions: vec![PauseCondition {
                reason: PauseReason::PausedByCanaryPauseStep,
                start_time: Time(Timestamp::from_second(1_000).unwrap()),
            }],
            ..Default::default()
        };
        assert_eq!(canary_pause(&gd, &status).map(|p| p.why), Some(PauseWhy::Indefinite));
        show_canary_pause(&gd, &mut status, Timestamp::from_second(1_010).unwrap());
        let progressing = condition(&status, PROGRESSING).expect("Progressing");
        assert_eq!(progressing.reason.as_deref(), Some("Paused"));
        let message = progressing.message.clone().unwrap_or_default();
        assert!(message.contains("paused at canary step 2 of 2 (indefinite)"), "{message}");
        assert!(message.contains("resume-step=rev-2/1"), "{message}");
    }

    #[test]
    fn the_pause_is_read_from_the_status_and_the_steps() {
        use common::api::{CanaryStatus, PauseCondition, PauseReason};
        let mut gd = crate::fixtures::gd(4, "InplaceUpdate");
        gd.spec.update_strategy.canary = Some(
            serde_json::from_value(serde_json::json!({"steps": [{"partition": 3}, {"pause": {"duration": 60}},
                {"hook": {"templateName": "t"}}, {"pause": {}}]}))
            .unwrap(),
        );
        let start = Timestamp::from_second(1_000).unwrap();
        let at = |index: i32, reason: PauseReason| GameDeploymentStatus {
            current_step_index: Some(index),
            pause_conditions: vec![PauseCondition { reason, start_time: Time(start) }],
            canary: Some(CanaryStatus { current_step_hook_run: Some("run".into()), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(canary_pause(&gd, &at(1, PauseReason::PausedByCanaryPauseStep)), None, "spec not paused yet");
        gd.spec.update_strategy.paused = true;
        let pause = |index, reason| canary_pause(&gd, &at(index, reason)).map(|p| p.why);
        assert_eq!(
            pause(1, PauseReason::PausedByCanaryPauseStep),
            Some(PauseWhy::Until(Timestamp::from_second(1_060).unwrap()))
        );
        assert_eq!(pause(2, PauseReason::PausedByStepBasedHook), Some(PauseWhy::HookFailed("run".into())));
        assert_eq!(pause(3, PauseReason::PausedByCanaryPauseStep), Some(PauseWhy::Indefinite));
        assert_eq!(
            canary_pause(&gd, &GameDeploymentStatus { current_step_index: Some(3), ..Default::default() }),
            None
        );
    }

    #[test]
    fn a_rolled_back_canary_says_so_in_progressing_and_the_progress_deadline_never_fires_on_it() {
        use common::api::{CanaryRollback, CanaryStatus, HookPhase};
        let now = Timestamp::from_second(1_000).unwrap();
        let why = "HookRun canary-new-1-check of canary step 2 of 2 ended Failed (hookPolicy.onFailure: Rollback): \
                   revision new is rolled back to the stable revision old; change the template to try again";
        let rollback = CanaryRollback {
            failed_revision: "new".into(),
            stable_revision: "old".into(),
            step: 1,
            hook_run: "canary-new-1-check".into(),
            phase: HookPhase::Failed,
            rolled_back_at: Time(now),
            message: why.into(),
        };
        let mut status = GameDeploymentStatus {
            canary: Some(CanaryStatus { rollback: Some(rollback), ..Default::default() }),
            ..Default::default()
        };
        let moving =
            "2 of 4 pods run revision old; waiting for the pre-inplace hook of 1 pod: a (HookRun ra is Running)";
        set_condition(&mut status.conditions, PROGRESSING, "True", "RolloutInProgress", moving, now);
        show_canary_rollback(&mut status, now);
        let progressing = condition(&status, PROGRESSING).cloned().expect("Progressing");
        assert_eq!((progressing.status.as_str(), progressing.reason.as_deref()), ("False", Some("CanaryRolledBack")));
        assert_eq!(progressing.message.as_deref(), Some(format!("{why}; {moving}").as_str()));
        // Not a rollout in progress: a deadline long past does not fire, during the rollback or after it.
        let old = status.clone();
        let later = Timestamp::from_second(1_000_000).unwrap();
        assert_eq!(super::super::progress_deadline::apply(Some(60), &old, &mut status, later), None);
        assert_eq!(condition(&status, PROGRESSING).and_then(|c| c.reason.clone()).as_deref(), Some("CanaryRolledBack"));
        // A spec problem still wins; no rollback, nothing changes.
        let mut invalid = status.clone();
        set_condition(&mut invalid.conditions, PROGRESSING, "False", REASON_INVALID_SPEC, "bad", now);
        show_canary_rollback(&mut invalid, now);
        assert_eq!(condition(&invalid, PROGRESSING).and_then(|c| c.reason.clone()).as_deref(), Some("InvalidSpec"));
        let mut plain = GameDeploymentStatus::default();
        set_condition(&mut plain.conditions, PROGRESSING, "True", "RolloutComplete", "all", now);
        let before = plain.clone();
        show_canary_rollback(&mut plain, now);
        assert_eq!(plain, before);
    }
}
