//! Where a rollout stands, from the same objects the tree shows: the one verdict every view of `kubectl gd` gives —
//! `status` waits for it (and exits with its code), `get` shows it, `plan` judges its forecast's last state with it.
//!
//! It trusts the operator's own judgement (`status.observedGeneration`, the `Progressing` condition, the hook
//! conditions) and adds what a CI job needs on top: a failed hook is reported as soon as either the
//! GameDeployment's hook condition or the HookRun itself shows it, naming the pod and the HookRun; and "complete"
//! is checked against the pods themselves, since the operator's status is written from the pass *before* its own
//! actions (the pass that deletes a pod listed in `podsToDelete` still counts it).

use common::api::{GameDeploymentStatus, HookCondition, HookPhase, PauseReason, ScaleInMode};
use common::hookrun::HookKind;
use common::keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::snapshot::{Snapshot, gate_runs_of, gitops_clean, run_phase};

/// Where a rollout stands, as `kubectl gd status` reports it.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub enum State {
    /// Every pod the rollout is meant to move runs the update revision and is available.
    Complete,
    /// Moving, or waiting on something that will come (a hook running, a timed pause, a grace period).
    Progressing,
    /// Paused by `spec.updateStrategy.paused` or a canary pause step, with work left.
    Paused,
    /// A hook failed (or cannot start), or the spec is invalid: nothing moves until a person acts.
    Failed,
    /// No progress for `spec.progressDeadlineSeconds` (the operator's `ProgressDeadlineExceeded`): nothing failed,
    /// but the rollout waits on something that does not come.
    Stalled,
    /// A canary step hook with `hookPolicy.onFailure: Rollback` failed: the pods are taken (or were taken) back to
    /// the stable revision, and only a new template tries again. Not "complete", even once every pod is back.
    RolledBack,
}

/// `kubectl gd status` exit codes, one per final [`State`] (and the command's own failures).
pub mod exit {
    /// The rollout is complete.
    pub const COMPLETE: u8 = 0;
    /// A hook failed or cannot start, or the spec is invalid.
    pub const FAILED: u8 = 1;
    /// Paused with work left (`paused`, or a canary pause step).
    pub const PAUSED: u8 = 3;
    /// `--timeout` passed first.
    pub const TIMEOUT: u8 = 4;
    /// Not found, or the API refused.
    pub const ERROR: u8 = 5;
    /// `spec.progressDeadlineSeconds` passed without progress (`ProgressDeadlineExceeded`).
    pub const STALLED: u8 = 6;
    /// A failed canary was rolled back (`onFailure: Rollback`).
    pub const ROLLED_BACK: u8 = 7;
}

impl State {
    /// The exit code `kubectl gd status` ends with in this state (`None`: it keeps waiting).
    pub fn exit_code(self) -> Option<u8> {
        match self {
            Self::Progressing => None,
            Self::Complete => Some(exit::COMPLETE),
            Self::Failed => Some(exit::FAILED),
            Self::Paused => Some(exit::PAUSED),
            Self::Stalled => Some(exit::STALLED),
            Self::RolledBack => Some(exit::ROLLED_BACK),
        }
    }
}

/// Something the rollout waits for that ends at a known time: a timed canary pause, an in-place grace period, or
/// the progress deadline by which it must move.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Wait {
    /// In words: "the pause of canary step 2 of 3 (60s)", "the in-place grace period of pod p (30s)", "progress
    /// before the deadline (spec.progressDeadlineSeconds 600)".
    pub what: String,
    /// When it ends.
    pub until: Time,
    /// Seconds from the verdict's `now` to `until` (negative once past).
    pub remaining_seconds: i64,
}

impl Wait {
    /// `until` is kept to the second, as Kubernetes writes times: an end worked out from a clock reading would
    /// otherwise print nanoseconds ("until 2026-12-02T06:34:28.554856364Z").
    fn new(what: String, until: Timestamp) -> Self {
        let until = Timestamp::from_second(until.as_second()).unwrap_or(until);
        Self { what, until: Time(until), remaining_seconds: 0 }
    }
}

/// What `kubectl gd status` says about a rollout at one moment.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Where the rollout stands.
    pub state: State,
    /// Why, in words.
    pub message: String,
    /// The pod held by the failed hook, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The failed HookRun, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook_run: Option<String>,
    /// What ends at a known time while the rollout progresses, soonest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<Wait>,
}

impl Verdict {
    fn new(state: State, message: impl Into<String>) -> Self {
        Self { state, message: message.into(), pod: None, hook_run: None, waits: Vec::new() }
    }
}

fn failed(phase: HookPhase) -> bool {
    phase.is_completed() && phase != HookPhase::Successful
}

/// The retry field that starts failed runs of this `hookrun-type` again.
pub fn retry_hint(kind: Option<&str>) -> &'static str {
    match kind {
        Some(k) if k == HookKind::PreInplace.type_label() => "spec.preInplaceUpdateStrategy.retry",
        Some(k) if k == HookKind::PostInplace.type_label() => "spec.postInplaceUpdateStrategy.retry",
        _ => "spec.preDeleteUpdateStrategy.retry",
    }
}

/// `retry: true` is set for this gate: the operator is about to rerun its failed runs.
fn retry_requested(snapshot: &Snapshot, kind: HookKind) -> bool {
    let spec = &snapshot.gd.spec;
    match kind {
        HookKind::PreDelete => spec.pre_delete_update_strategy.as_ref().is_some_and(|s| s.retry),
        HookKind::PreInplace => spec.pre_inplace_update_strategy.as_ref().is_some_and(|s| s.retry),
        HookKind::PostInplace => spec.post_inplace_update_strategy.as_ref().is_some_and(|s| s.retry),
        HookKind::CanaryStep => false,
    }
}

/// Where the rollout stands at `now`: the first step that has something to say decides.
pub fn judge(snapshot: &Snapshot, now: Timestamp) -> Verdict {
    let facts = Facts::of(snapshot);
    let mut verdict = failed_hook_in_status(snapshot, &facts)
        .or_else(|| failed_run_not_yet_reported(snapshot, &facts))
        .or_else(|| blocked_hook(&facts))
        .or_else(|| failed_canary_step(snapshot, &facts))
        .or_else(|| rolled_back_canary(&facts))
        .or_else(|| invalid_or_unobserved(&facts))
        .or_else(|| past_its_deadline(&facts))
        .or_else(|| paused(snapshot, &facts))
        .unwrap_or_else(|| complete_or_progressing(snapshot, &facts, now));
    if verdict.state == State::Progressing {
        verdict.waits.extend(grace_periods(snapshot));
        verdict.waits.extend(progress_deadline(snapshot, &facts));
        verdict.waits.sort_by_key(|w| w.until.0);
    }
    for wait in &mut verdict.waits {
        wait.remaining_seconds = wait.until.0.as_second() - now.as_second();
    }
    verdict
}

/// What every step reads: the status, the generation the operator observed, the `Progressing` condition.
struct Facts {
    /// The GameDeployment as hints name it: `NAME`, or `NAME -n NAMESPACE` ([`common::hint::target`]).
    target: String,
    gitops_clean: bool,
    status: GameDeploymentStatus,
    generation: i64,
    observed: i64,
    reason: String,
    message: String,
}

impl Facts {
    fn of(snapshot: &Snapshot) -> Self {
        let gd = &snapshot.gd;
        let status = gd.status.clone().unwrap_or_default();
        let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing");
        let reason = progressing.and_then(|c| c.reason.clone()).unwrap_or_default();
        let message = progressing.and_then(|c| c.message.clone()).unwrap_or_default();
        Self {
            target: common::hint::target(
                gd.metadata.name.as_deref().unwrap_or_default(),
                gd.metadata.namespace.as_deref(),
            ),
            gitops_clean: gitops_clean(gd),
            generation: gd.metadata.generation.unwrap_or(0),
            observed: status.observed_generation.unwrap_or(0),
            status,
            reason,
            message,
        }
    }

    /// Each pod gate's status list with its kind.
    fn hook_lists(&self) -> [(&[HookCondition], HookKind); 3] {
        [
            (&self.status.pre_delete_hook_condition, HookKind::PreDelete),
            (&self.status.pre_inplace_hook_condition, HookKind::PreInplace),
            (&self.status.post_inplace_hook_condition, HookKind::PostInplace),
        ]
    }

    /// Entries that hold a pod: an entry released without its hook (`releasedBy`: a deadline, a fallback, a skip)
    /// is a record, not a hold.
    fn holds(&self) -> impl Iterator<Item = &HookCondition> {
        self.status
            .pre_delete_hook_condition
            .iter()
            .chain(&self.status.pre_inplace_hook_condition)
            .filter(|c| c.released_by.is_none())
    }

    /// The command that starts failed runs again, and what it writes: the retry flag, or — GitOps-clean, where
    /// the spec is Git's — the deletion of the failed runs.
    fn retry_advice(&self, kind: Option<&str>) -> String {
        let does = if self.gitops_clean {
            "it deletes the failed HookRuns and the operator starts new ones".to_string()
        } else {
            format!("it sets {}", retry_hint(kind))
        };
        format!("run `kubectl gd retry {}` once the cause is fixed; {does}", self.target)
    }
}

/// A failed run that is not the last word: a newer run of the same hook is under way (the status still names the
/// failed one), `hookPolicy.autoRetry` will start another one, or the pod is a race-to-empty candidate, which the
/// operator skips (and replaces) instead of holding.
fn not_final(snapshot: &Snapshot, facts: &Facts, kind: HookKind, pod_name: &str) -> bool {
    let runs = hook_runs_of(snapshot, kind, pod_name);
    runs.as_ref().is_some_and(|runs| runs.iter().any(|r| !run_phase(r).is_completed()))
        || runs.is_some_and(|runs| auto_retry_to_come(snapshot, kind, runs.len()))
        || (kind == HookKind::PreDelete && racing(snapshot, facts))
}

/// The runs of the pod's `kind` hook at the pod's revision, not being deleted (`None`: the pod is not there).
fn hook_runs_of<'a>(snapshot: &'a Snapshot, kind: HookKind, pod_name: &str) -> Option<Vec<&'a common::api::HookRun>> {
    let pod = snapshot.pods.iter().find(|p| p.metadata.name.as_deref() == Some(pod_name))?;
    let revision = common::pod::label(pod, keys::CONTROLLER_REVISION_HASH);
    let label = |r: &common::api::HookRun, key: &str| r.metadata.labels.as_ref().and_then(|l| l.get(key)).cloned();
    let runs = gate_runs_of(pod, &snapshot.runs)
        .into_iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| label(r, keys::HOOKRUN_TYPE).as_deref() == Some(kind.type_label()))
        .filter(|r| label(r, keys::HOOKRUN_WORKLOAD_REVISION).as_deref() == revision)
        .collect();
    Some(runs)
}

/// The gate's `hookPolicy.autoRetry` has retries left for this pod: of its `runs` (every one failed), fewer than
/// `limit` were retries.
fn auto_retry_to_come(snapshot: &Snapshot, kind: HookKind, runs: usize) -> bool {
    let spec = &snapshot.gd.spec;
    let policy = match kind {
        HookKind::PreDelete => spec.pre_delete_update_strategy.as_ref().and_then(|s| s.hook_policy.as_ref()),
        HookKind::PreInplace => spec.pre_inplace_update_strategy.as_ref().and_then(|s| s.hook_policy.as_ref()),
        HookKind::PostInplace => spec.post_inplace_update_strategy.as_ref().and_then(|s| s.hook_policy.as_ref()),
        HookKind::CanaryStep => None,
    };
    let Some(limit) = policy.and_then(|p| p.auto_retry.as_ref()).map(|r| r.limit) else {
        return false;
    };
    (runs as i64) <= i64::from(limit)
}

/// A race-to-empty scale-in is under way: more pods exist than the spec asks for.
fn racing(snapshot: &Snapshot, facts: &Facts) -> bool {
    let spec = &snapshot.gd.spec;
    let race = spec.scale_strategy.as_ref().and_then(|s| s.scale_in_policy.as_ref()).map(|p| p.mode);
    race == Some(ScaleInMode::RaceToEmpty) && facts.status.replicas > spec.replicas.unwrap_or(1)
}

/// The named HookRun, when it is in the snapshot.
fn run_named<'a>(snapshot: &'a Snapshot, name: Option<&str>) -> Option<&'a common::api::HookRun> {
    let name = name?;
    snapshot.runs.iter().find(|r| r.metadata.name.as_deref() == Some(name))
}

fn run_message(run: Option<&common::api::HookRun>) -> Option<String> {
    run.and_then(|r| r.status.as_ref().and_then(|s| s.message.clone()))
}

/// 1. A failed hook, as the GameDeployment reports it — unless its run is gone or running again (the status is
///    stale then), or `retry: true` is about to rerun it.
fn failed_hook_in_status(snapshot: &Snapshot, facts: &Facts) -> Option<Verdict> {
    for (list, kind) in facts.hook_lists() {
        if retry_requested(snapshot, kind) {
            continue;
        }
        let failed_now = |c: &&HookCondition| {
            !not_final(snapshot, facts, kind, &c.pod_name)
                && match c.hook_run.as_deref() {
                    Some(n) => run_named(snapshot, Some(n)).is_some_and(|r| failed(run_phase(r))),
                    None => failed(c.phase),
                }
        };
        let Some(c) = list.iter().filter(|c| failed(c.phase) && c.released_by.is_none()).find(failed_now) else {
            continue;
        };
        let why = run_message(run_named(snapshot, c.hook_run.as_deref())).or_else(|| c.message.clone());
        return Some(Verdict {
            state: State::Failed,
            message: format!(
                "pod {} is held: HookRun {} ended {}: {} ({})",
                c.pod_name,
                c.hook_run.as_deref().unwrap_or("<none>"),
                c.phase,
                why.unwrap_or_default(),
                facts.retry_advice(Some(kind.type_label())),
            ),
            pod: Some(c.pod_name.clone()),
            hook_run: c.hook_run.clone(),
            waits: Vec::new(),
        });
    }
    None
}

/// 2. A failed hook as the HookRun shows it, before the GameDeployment's next status write.
fn failed_run_not_yet_reported(snapshot: &Snapshot, facts: &Facts) -> Option<Verdict> {
    let released = |run: &common::api::HookRun| {
        facts.hook_lists().iter().any(|(list, _)| {
            list.iter().any(|c| c.released_by.is_some() && c.hook_run.as_deref() == run.metadata.name.as_deref())
        })
    };
    for pod in snapshot.pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let state = common::pod::label(pod, keys::LIFECYCLE_STATE).unwrap_or("Normal");
        if !matches!(state, "PreparingDelete" | "PreparingUpdate" | "Updated") {
            continue;
        }
        let revision = common::pod::label(pod, keys::CONTROLLER_REVISION_HASH);
        // The latest run first: after automatic retries, the one to look at is the last.
        let mut runs = gate_runs_of(pod, &snapshot.runs);
        runs.sort_by(|a, b| {
            let key = |r: &common::api::HookRun| {
                (r.metadata.creation_timestamp.as_ref().map(|t| t.0), r.metadata.name.clone())
            };
            key(b).cmp(&key(a))
        });
        for run in runs {
            let labels = run.metadata.labels.clone().unwrap_or_default();
            let type_label = labels.get(keys::HOOKRUN_TYPE).map(String::as_str);
            let kind = HookKind::POD_HOOKS.into_iter().find(|k| type_label == Some(k.type_label()));
            if run.metadata.deletion_timestamp.is_some()
                || released(run)
                || labels.get(keys::HOOKRUN_WORKLOAD_REVISION).map(String::as_str) != revision
                || !failed(run_phase(run))
                || kind.is_some_and(|k| retry_requested(snapshot, k))
                || kind.is_some_and(|k| not_final(snapshot, facts, k, pod.metadata.name.as_deref().unwrap_or_default()))
            {
                continue;
            }
            let run_name = run.metadata.name.clone().unwrap_or_default();
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            return Some(Verdict {
                state: State::Failed,
                message: format!(
                    "pod {pod_name} is held: HookRun {run_name} ended {}: {} ({})",
                    run_phase(run),
                    run_message(Some(run)).unwrap_or_default(),
                    facts.retry_advice(type_label),
                ),
                pod: Some(pod_name),
                hook_run: Some(run_name),
                waits: Vec::new(),
            });
        }
    }
    None
}

/// 3. A hook that cannot even start (missing HookTemplate, unresolved arg).
fn blocked_hook(facts: &Facts) -> Option<Verdict> {
    let c = facts.status.conditions.iter().find(|c| c.type_ == "HookBlocked" && c.status == "True")?;
    let held = facts.holds().next();
    Some(Verdict {
        state: State::Failed,
        message: format!("a hook cannot start: {}", c.message.clone().unwrap_or_default()),
        pod: held.map(|h| h.pod_name.clone()),
        hook_run: held.and_then(|h| h.hook_run.clone()),
        waits: Vec::new(),
    })
}

/// The canary step in progress, counted from 1 as every view counts it, and the number of steps.
fn canary_step(snapshot: &Snapshot, facts: &Facts) -> (i32, usize) {
    let steps = snapshot.gd.spec.update_strategy.canary.as_ref().map_or(0, |c| c.steps.len());
    (facts.status.current_step_index.unwrap_or(0).max(0) + 1, steps)
}

/// 4. A failed canary step hook pauses the rollout.
fn failed_canary_step(snapshot: &Snapshot, facts: &Facts) -> Option<Verdict> {
    let status = &facts.status;
    if !status.pause_conditions.iter().any(|p| p.reason == PauseReason::PausedByStepBasedHook) {
        return None;
    }
    let run = status.canary.as_ref().and_then(|c| c.current_step_hook_run.clone());
    let why = run_message(run_named(snapshot, run.as_deref())).unwrap_or_default();
    let (step, steps) = canary_step(snapshot, facts);
    Some(Verdict {
        state: State::Failed,
        message: format!(
            "canary step {step} of {steps} is paused: its HookRun {} failed: {why} (`kubectl gd resume {}` goes past it)",
            run.as_deref().unwrap_or("<none>"),
            facts.target,
        ),
        pod: None,
        hook_run: run,
        waits: Vec::new(),
    })
}

/// 4b. A canary step hook failed with `onFailure: Rollback`: the operator took the pods back to the stable revision
///     (`status.canary.rollback`), and only a new template tries again. A failure for whoever waits on the rollout,
///     wherever the pods are on their way back (the operator's `Progressing` message says).
fn rolled_back_canary(facts: &Facts) -> Option<Verdict> {
    let rollback = facts.status.canary.as_ref()?.rollback.as_ref()?;
    if facts.observed < facts.generation {
        // A new template may end it: the operator has not looked yet.
        return None;
    }
    let progress = if facts.reason == "CanaryRolledBack" {
        facts.message.strip_prefix(rollback.message.as_str()).unwrap_or_default().trim_start_matches("; ").to_string()
    } else {
        String::new()
    };
    let progress = if progress.is_empty() { String::new() } else { format!(" ({progress})") };
    Some(Verdict {
        state: State::RolledBack,
        message: format!("canary rolled back: {}{progress}", rollback.message),
        pod: None,
        hook_run: Some(rollback.hook_run.clone()),
        waits: Vec::new(),
    })
}

/// 5. An invalid spec, or a generation the operator has not observed yet.
fn invalid_or_unobserved(facts: &Facts) -> Option<Verdict> {
    if facts.reason == "InvalidSpec" {
        return Some(Verdict::new(State::Failed, format!("the spec is invalid: {}", facts.message)));
    }
    (facts.observed < facts.generation).then(|| {
        Verdict::new(
            State::Progressing,
            format!(
                "waiting for the operator to observe generation {} (observed {})",
                facts.generation, facts.observed
            ),
        )
    })
}

/// 6. No progress within `spec.progressDeadlineSeconds`, as the operator reports it (its message says since when and
///    what the rollout waits for). The view that shows each pod and hook is `kubectl gd get`, which prints this
///    verdict itself: `kubectl gd status` adds the pointer to it ([`next_look`]), not the verdict.
fn past_its_deadline(facts: &Facts) -> Option<Verdict> {
    (facts.reason == "ProgressDeadlineExceeded").then(|| Verdict::new(State::Stalled, facts.message.clone()))
}

/// Where to look next after a verdict `kubectl gd status` ends with, when its message does not say already.
pub fn next_look(verdict: &Verdict, name: &str, namespace: Option<&str>) -> Option<String> {
    (verdict.state == State::Stalled)
        .then(|| format!("`kubectl gd get {}` shows each pod and hook", common::hint::target(name, namespace)))
}

/// 7. Paused with work left. A canary pause step is one whether the operator set `spec.updateStrategy.paused`
///    (BCS) or recorded it in status only (GitOps-clean); a timed one ends by itself, so it is still progress.
fn paused(snapshot: &Snapshot, facts: &Facts) -> Option<Verdict> {
    let name = &facts.target;
    if facts.status.pause_conditions.iter().any(|p| p.reason == PauseReason::PausedByCanaryPauseStep) {
        let (step, steps) = canary_step(snapshot, facts);
        let timed = snapshot
            .gd
            .spec
            .update_strategy
            .canary
            .as_ref()
            .and_then(|c| c.steps.get(usize::try_from(step - 1).unwrap_or(0)))
            .and_then(|s| s.pause.as_ref())
            .and_then(|p| p.duration);
        let started = facts
            .status
            .pause_conditions
            .iter()
            .find(|p| p.reason == PauseReason::PausedByCanaryPauseStep)
            .map(|p| p.start_time.0);
        return Some(match timed {
            Some(seconds) => {
                let mut verdict = Verdict::new(
                    State::Progressing,
                    format!("canary step {step} of {steps} pauses the rollout for {seconds}s"),
                );
                if let Some(until) =
                    started.and_then(|t| t.checked_add(SignedDuration::from_secs(i64::from(seconds))).ok())
                {
                    verdict
                        .waits
                        .push(Wait::new(format!("the pause of canary step {step} of {steps} ({seconds}s)"), until));
                }
                verdict
            }
            None => Verdict::new(
                State::Paused,
                format!(
                    "canary step {step} of {steps} pauses the rollout until resumed (`kubectl gd resume {name}` \
                     ends this step; `kubectl gd promote {name}` skips every remaining step)"
                ),
            ),
        });
    }
    (facts.reason == "Paused")
        .then(|| Verdict::new(State::Paused, format!("{} (`kubectl gd resume {name}` resumes it)", facts.message)))
}

/// 8. Complete when the operator says so, nothing waits on a gate, the canary steps are done, and the pods agree
///    ([`unsettled_pods`]); otherwise the operator's own account of the progress.
fn complete_or_progressing(snapshot: &Snapshot, facts: &Facts, now: Timestamp) -> Verdict {
    let spec = &snapshot.gd.spec;
    let status = &facts.status;
    let steps = spec.update_strategy.canary.as_ref().map_or(0, |c| c.steps.len()) as i32;
    let steps_done = steps == 0 || status.current_step_index.is_none_or(|i| i >= steps);
    if matches!(facts.reason.as_str(), "RolloutComplete" | "PartitionAvailable")
        && status.replicas == spec.replicas.unwrap_or(1)
        && facts.holds().next().is_none()
        && steps_done
    {
        return match unsettled_pods(snapshot, facts, now) {
            None => Verdict::new(State::Complete, facts.message.clone()),
            Some(waiting) => Verdict::new(
                State::Progressing,
                format!("waiting for {waiting} (the operator's last status: {})", facts.message),
            ),
        };
    }
    if facts.message.is_empty() {
        return Verdict::new(State::Progressing, "waiting for the operator to report progress");
    }
    Verdict::new(State::Progressing, facts.message.clone())
}

/// What the pods still lack before the rollout the operator reports done is done — every desired pod exists (not
/// terminating, not listed for deletion), the update revision runs where it should (all pods, or those beyond the
/// partition) and every pod is available (a server in `Maintaining` is left as it is, as the operator leaves it) —
/// in words, or `None` when nothing. The status may be a pass behind: the pass that deletes a pod of
/// `podsToDelete` writes a status that still counts it, before the replacement exists.
fn unsettled_pods(snapshot: &Snapshot, facts: &Facts, now: Timestamp) -> Option<String> {
    let spec = &snapshot.gd.spec;
    let desired = spec.replicas.unwrap_or(1);
    let listed: Vec<&str> =
        spec.scale_strategy.iter().flat_map(|s| s.pods_to_delete.iter().map(String::as_str)).collect();
    let name = |p: &k8s_openapi::api::core::v1::Pod| p.metadata.name.clone().unwrap_or_default();
    let active: Vec<_> = snapshot.pods.iter().filter(|p| common::pod::is_active(*p)).collect();
    let leaving: Vec<String> = active
        .iter()
        .filter(|p| {
            listed.contains(&name(p).as_str())
                || common::pod::label(**p, keys::SPECIFIED_DELETE).is_some_and(|v| v == "true")
        })
        .map(|p| name(p))
        .collect();
    if !leaving.is_empty() {
        return Some(format!("{} to be deleted and replaced", pod_list(&leaving)));
    }
    let existing = i32::try_from(active.len()).unwrap_or(i32::MAX);
    if existing != desired {
        return Some(format!("{desired} pods to exist ({existing} do now)"));
    }
    let revision = facts.status.update_revision.as_deref();
    // A server in `Maintaining` is left on whatever revision it runs, and unavailable, as the operator leaves it.
    let quarantined = |p: &k8s_openapi::api::core::v1::Pod| common::server_state::ServerState::quarantined(p);
    let updated = active
        .iter()
        .filter(|p| {
            quarantined(p)
                || (revision.is_some() && common::pod::label(**p, keys::CONTROLLER_REVISION_HASH) == revision)
        })
        .count();
    let expected = if facts.reason == "PartitionAvailable" { facts.status.expected_updated_replicas } else { desired };
    if i32::try_from(updated).unwrap_or(i32::MAX) < expected {
        return Some(format!("{expected} pods to run revision {} ({updated} do now)", revision.unwrap_or("<none>")));
    }
    let min_ready = spec.min_ready_seconds;
    let unavailable: Vec<String> = active
        .iter()
        .filter(|p| !quarantined(p))
        .filter(|p| !(common::pod::is_running(**p) && common::pod::is_available(**p, min_ready, now)))
        .map(|p| name(p))
        .collect();
    if !unavailable.is_empty() {
        return Some(format!("{} to become available", pod_list(&unavailable)));
    }
    let busy: Vec<String> = active
        .iter()
        .filter(|p| common::pod::label(**p, keys::LIFECYCLE_STATE).is_some_and(|s| s != "Normal"))
        .map(|p| name(p))
        .collect();
    (!busy.is_empty()).then(|| format!("{} to return to lifecycle state Normal", pod_list(&busy)))
}

/// "pod a", "pods a, b and c", "pods a, b, c and 2 more".
fn pod_list(names: &[String]) -> String {
    match names {
        [one] => format!("pod {one}"),
        _ if names.len() <= 3 => {
            let (last, rest) = names.split_last().map(|(l, r)| (l.as_str(), r.join(", "))).unwrap_or_default();
            format!("pods {rest} and {last}")
        }
        _ => format!("pods {} and {} more", names[..3].join(", "), names.len() - 3),
    }
}

/// Pods waiting out an in-place grace period (`inplace-update-grace`: when it started and how long it is).
fn grace_periods(snapshot: &Snapshot) -> Vec<Wait> {
    snapshot
        .pods
        .iter()
        .filter(|p| common::pod::is_active(*p))
        .filter_map(|pod| {
            let grace: serde_json::Value =
                serde_json::from_str(common::pod::annotation(pod, keys::INPLACE_UPDATE_GRACE)?).ok()?;
            let started: Timestamp = grace.get("updateTimestamp")?.as_str()?.parse().ok()?;
            let seconds = grace.get("graceSeconds")?.as_i64()?;
            let until = started.checked_add(SignedDuration::from_secs(seconds)).ok()?;
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            Some(Wait::new(format!("the in-place grace period of pod {pod_name} ({seconds}s)"), until))
        })
        .collect()
}

/// The time by which the rollout must move (`spec.progressDeadlineSeconds` after the operator's last recorded
/// progress), while it is in progress.
fn progress_deadline(snapshot: &Snapshot, facts: &Facts) -> Option<Wait> {
    let seconds = snapshot.gd.spec.progress_deadline_seconds?;
    if facts.reason != "RolloutInProgress" {
        return None;
    }
    let condition = facts.status.conditions.iter().find(|c| c.type_ == "Progressing")?;
    let since = condition.last_update_time.as_ref().or(condition.last_transition_time.as_ref())?.0;
    let until = since.checked_add(SignedDuration::from_secs(i64::from(seconds))).ok()?;
    Some(Wait::new(format!("progress before the deadline (spec.progressDeadlineSeconds {seconds})"), until))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_at_a_whole_second_as_kubernetes_writes_times() {
        let until: Timestamp = "2026-12-02T06:34:28.554856364Z".parse().expect("a timestamp");
        let wait = Wait::new("the pause of canary step 1 of 2 (60s)".to_string(), until);
        assert_eq!(wait.until.0.to_string(), "2026-12-02T06:34:28Z");
        assert!(
            crate::render::wait_text(&wait).contains("until 2026-12-02T06:34:28Z ("),
            "{}",
            crate::render::wait_text(&wait)
        );
    }
}
