//! Canary steps (`spec.updateStrategy.canary.steps`): `partition`, `pause` (with or without `duration`) and
//! `hook` steps, with `status.currentStepIndex`, `currentStepHash`, `canary` and `pauseConditions`
//! (docs/src/concepts/canary.md).
//!
//! Rules, evaluated once per pass before scaling and updating:
//! - no steps: the canary fields are cleared and the plain `partition` applies;
//! - a new GameDeployment skips its steps (its first template is the stable one);
//! - a template change or a change of the steps restarts at step 0 — except a rollback to the stable revision
//!   (`status.canary.revision`), which goes straight through (all steps skipped);
//! - the partition is that of the latest `partition` step up to the current one (`replicas`, i.e. nothing
//!   updated, before the first); after the last step the spec's `partition` applies;
//! - a `partition` step completes when exactly `replicas − partition` pods are updated and ready and every ready
//!   pod is available;
//! - a `pause` step pauses the rollout the BCS way: the operator sets `spec.updateStrategy.paused: true`, then
//!   records `PausedByCanaryPauseStep`. It ends when a person sets `paused: false` (`kubectl patch`), or when
//!   `duration` seconds have passed (then the operator sets `paused: false` itself). Unlike BCS, resuming a timed
//!   pause early is honoured;
//! - a `hook` step starts a HookRun `canary-<revision>-<step>-<template>` and moves on when it is `Successful`;
//!   a failed run pauses the rollout with `PausedByStepBasedHook`, and `paused: false` overrides it;
//! - a hook step whose `hookPolicy.onFailure` is `Rollback` and whose run failed for good (after its automatic
//!   retries) rolls the canary back instead: `status.canary.rollback` records it (never the spec) and, from the next
//!   pass on, the stable revision is the one pods are driven to ([`rollback_target`]), at partition 0, through the
//!   usual update machinery and gates. Only a new template ends it (resume and promote do not), and that template
//!   starts its canary at step 0 — or skips every step when it is the stable one.
//!
//! A pause condition is only written once `spec.paused` shows `true`, so "condition present and `paused`
//! false" always means a person resumed — never that our own `paused: true` was not visible yet.

use common::api::{
    CanaryPause, CanaryRollback, CanaryStatus, CanaryStep, GameDeployment, GameDeploymentStatus, HookFallback,
    HookPhase, HookRun, HookStep, PauseCondition, PauseReason,
};
use common::hookrun::{self, HookKind, NewHookRun};
use common::intstr;
use common::keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::settings::{PodInfo, Settings, count, count_where};
use crate::action::{Action, PlannedEvent};
use crate::gate::deadline::{self, Decision};
use crate::gate::{self, GateState, gitops_control};
use crate::ownership;
use crate::revision;

/// What the canary decided for this pass.
#[derive(Debug, Clone, Default)]
pub struct StepDecision {
    /// The partition to roll out to (None: the spec's).
    pub partition: Option<i32>,
    pub current_step_index: Option<i32>,
    pub current_step_hash: Option<String>,
    /// The step this pass judged (the rollout reached it): its shadow hook is trialled
    /// ([`super::shadow`]).
    pub judged_step: Option<usize>,
    pub canary: Option<CanaryStatus>,
    pub pause_conditions: Vec<PauseCondition>,
    pub actions: Vec<Action>,
    pub events: Vec<PlannedEvent>,
    /// Look again at this time (a timed pause ends, or a step was completed and the next one starts).
    pub requeue_at: Option<Timestamp>,
}

impl StepDecision {
    /// Writes the canary fields of the status.
    pub fn apply_to(&self, status: &mut GameDeploymentStatus) {
        status.current_step_index = self.current_step_index;
        status.current_step_hash = self.current_step_hash.clone();
        status.canary = self.canary.clone();
        status.pause_conditions = self.pause_conditions.clone();
    }
}

/// What the canary reads about the pods.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub replicas: i32,
    pub updated_ready: i32,
    pub ready: i32,
    pub available: i32,
}

impl Counts {
    pub(crate) fn of(infos: &[PodInfo<'_>], settings: &Settings<'_>) -> Self {
        Self {
            replicas: settings.replicas,
            updated_ready: count_where(infos, |i| i.updated && i.ready),
            ready: count_where(infos, |i| i.ready),
            available: count_where(infos, |i| i.available),
        }
    }
}

/// The hash of the steps as BCS keeps it in `status.currentStepHash` (FNV-32a of their JSON).
pub fn steps_hash(steps: &[CanaryStep]) -> String {
    let json = serde_json::to_vec(steps).unwrap_or_default();
    format!("{:x}", revision::fnv32a(&json))
}

fn step_partition(step: &CanaryStep, replicas: i32) -> Option<i32> {
    let value = step.partition.as_ref()?;
    // As the spec's partition (CloneSet's rounding, `intstr::partition`).
    intstr::partition(Some(value), replicas, "partition").ok()
}

/// The partition in force at step `index`: the latest partition step up to it, else `replicas`.
fn partition_at(steps: &[CanaryStep], index: usize, replicas: i32) -> i32 {
    steps[..=index.min(steps.len().saturating_sub(1))]
        .iter()
        .rev()
        .find_map(|s| step_partition(s, replicas))
        .unwrap_or(replicas)
}

/// The rollback recorded for the canary of `template_revision` (the revision of the current template), if any: it
/// holds until the template changes.
pub fn rollback_of<'a>(old: &'a GameDeploymentStatus, template_revision: &str) -> Option<&'a CanaryRollback> {
    old.canary.as_ref()?.rollback.as_ref().filter(|r| r.failed_revision == template_revision)
}

/// The revision pods are driven to while the canary of `template_revision` is rolled back: the stable one.
pub fn rollback_target<'a>(old: &'a GameDeploymentStatus, template_revision: &str) -> Option<&'a str> {
    rollback_of(old, template_revision).map(|r| r.stable_revision.as_str())
}

/// Evaluates the steps. `update_revision` is the revision of the current template. Read top to bottom, each step
/// a function below.
pub fn evaluate(
    gd: &GameDeployment,
    old: &GameDeploymentStatus,
    update_revision: &str,
    counts: Counts,
    gate: &GateState<'_>,
    now: Timestamp,
) -> StepDecision {
    let mut out = StepDecision::default();
    if rollback_of(old, update_revision).is_some() {
        // Rolled back: every pod goes back to the stable revision (partition 0); the steps wait for a new template.
        out.partition = Some(0);
        out.current_step_index = old.current_step_index;
        out.current_step_hash = old.current_step_hash.clone();
        out.canary = old.canary.clone();
        return out;
    }
    let steps: &[CanaryStep] = gd.spec.update_strategy.canary.as_ref().map_or(&[], |c| c.steps.as_slice());
    let hash = steps_hash(steps);
    remove_stale_step_runs(gd, gate, steps, update_revision, &hash, &mut out);
    if steps.is_empty() {
        return out;
    }
    out.current_step_hash = Some(hash.clone());
    let mut walk = Walk {
        gd,
        old,
        update_revision,
        steps,
        hash,
        counts,
        gate,
        now,
        spec_paused: gd.spec.update_strategy.paused,
        clean: gitops_control::gitops_clean(gd),
        canary: old.canary.clone().unwrap_or_default(),
        index: old.current_step_index.map_or(steps.len(), |i| usize::try_from(i).unwrap_or(0)).min(steps.len()),
        conditions: old.pause_conditions.clone(),
        out,
    };
    walk.restart_on_change();
    walk.promote_if_requested();
    if walk.index < steps.len() {
        walk.out.judged_step = Some(walk.index);
        match walk.judge_step() {
            Outcome::Complete => walk.complete_step(),
            Outcome::Pause(reason) => walk.pause(reason),
            Outcome::RollBack(run, phase) => walk.roll_back(&run, phase),
            Outcome::Wait => {}
        }
    }
    walk.finish()
}

/// Runs of other revisions, of other steps (a steps edit makes fresh runs, as BCS does) or of a canary that no
/// longer exists are removed.
fn remove_stale_step_runs(
    gd: &GameDeployment,
    gate: &GateState<'_>,
    steps: &[CanaryStep],
    update_revision: &str,
    hash: &str,
    out: &mut StepDecision,
) {
    for run in canary_runs(gd, gate) {
        let revision_label = run.metadata.labels.as_ref().and_then(|l| l.get(keys::HOOKRUN_WORKLOAD_REVISION));
        let why = if steps.is_empty() || revision_label.map(String::as_str) != Some(update_revision) {
            "its canary step belongs to another revision"
        } else if change_of(run) != Some(step_change(hash).as_str()) {
            "it was made for other canary steps (the steps were edited)"
        } else {
            continue;
        };
        out.actions.push(Action::DeleteHookRun {
            name: run.metadata.name.clone().unwrap_or_default(),
            uid: run.metadata.uid.clone().unwrap_or_default(),
            why: why.into(),
        });
    }
}

/// What the current step says this pass.
enum Outcome {
    Complete,
    /// The step wants the rollout paused for this reason.
    Pause(PauseReason),
    /// The step's hook failed for good with `onFailure: Rollback`: this run, in this phase.
    RollBack(String, HookPhase),
    Wait,
}

/// How the current step may have been resumed.
#[derive(Clone, Copy)]
struct Resume {
    /// By its annotation (`<revision>/<index>`), or — the BCS way — by `paused: false`.
    lifted: bool,
    by_annotation: bool,
}

/// The canary while one pass walks its steps: what it reads, and the position it moves.
struct Walk<'a> {
    gd: &'a GameDeployment,
    old: &'a GameDeploymentStatus,
    update_revision: &'a str,
    steps: &'a [CanaryStep],
    hash: String,
    counts: Counts,
    gate: &'a GateState<'a>,
    now: Timestamp,
    spec_paused: bool,
    /// GitOps-clean opt-in: steps pause in status only and are resumed by annotations; the spec is never written.
    clean: bool,
    canary: CanaryStatus,
    index: usize,
    conditions: Vec<PauseCondition>,
    out: StepDecision,
}

impl Walk<'_> {
    fn len(&self) -> usize {
        self.steps.len()
    }

    fn has(&self, reason: PauseReason) -> Option<PauseCondition> {
        self.conditions.iter().find(|c| c.reason == reason).cloned()
    }

    /// Whether the pause in the spec is a step's, to be lifted by the operator (never in GitOps-clean mode).
    fn our_pause_in_spec(&self) -> bool {
        self.spec_paused && !self.old.pause_conditions.is_empty() && !self.clean
    }

    /// First sight: the current template is the stable one. A template or steps change restarts at step 0, or
    /// skips every step when it rolls back to the stable revision.
    fn restart_on_change(&mut self) {
        let (update_revision, len) = (self.update_revision, self.len());
        // While rolled back, `status.updateRevision` is the stable revision: the template's is the rollback's.
        let rolled_back = self.old.canary.as_ref().and_then(|c| c.rollback.as_ref());
        let previous = rolled_back.map(|r| r.failed_revision.as_str()).or(self.old.update_revision.as_deref());
        let template_changed = previous.is_some_and(|r| r != update_revision);
        let steps_changed = self.old.current_step_hash.as_deref().is_some_and(|h| h != self.hash);
        match self.old.canary.as_ref().and_then(|c| c.revision.clone()).as_deref() {
            None => {
                // First sight: the current template is the stable one; nothing to roll out.
                self.canary.revision = Some(update_revision.to_string());
                self.index = len;
                self.conditions.clear();
            }
            Some(stable) if template_changed || steps_changed => {
                self.conditions.clear();
                self.canary.current_step_hook_run = None;
                self.canary.pause_start_time = None;
                self.canary.step_releases.clear();
                let ended = match self.canary.rollback.take() {
                    Some(r) => format!(" (the rollback of revision {} ends)", r.failed_revision),
                    None => String::new(),
                };
                let message = if stable == update_revision {
                    self.index = len;
                    format!("revision {update_revision} is the stable one: all canary steps are skipped{ended}")
                } else {
                    self.index = 0;
                    format!("canary of revision {update_revision} starts at step 1 of {len}{ended}")
                };
                self.out.events.push(PlannedEvent::normal("SetStepIndex", message));
                if self.our_pause_in_spec() {
                    // The pause was ours (a step's): lift it with the restart.
                    let lift = set_paused(self.gd, false, "the canary restarted (new template or steps)".into());
                    self.out.actions.push(lift);
                }
            }
            Some(_) => {}
        }
    }

    /// Promoted by the annotation: the remaining steps are skipped.
    fn promote_if_requested(&mut self) {
        let (update_revision, len) = (self.update_revision, self.len());
        if self.index >= len || !gitops_control::promote_requested(self.gd, update_revision) {
            return;
        }
        self.out.events.push(PlannedEvent::normal(
            "CanaryPromoted",
            format!(
                "revision {update_revision} promoted by the annotation {}: canary steps {}..{len} skipped",
                keys::PROMOTE,
                self.index + 1
            ),
        ));
        if self.our_pause_in_spec() {
            self.out.actions.push(set_paused(self.gd, false, format!("revision {update_revision} was promoted")));
        }
        self.index = len;
        self.conditions.clear();
        self.canary.current_step_hook_run = None;
        self.canary.pause_start_time = None;
    }

    /// Whether the current step is complete, wants the rollout paused, or waits.
    fn judge_step(&mut self) -> Outcome {
        let steps = self.steps;
        let step = &steps[self.index];
        // The step is resumed: by its annotation (`<revision>/<index>`), or — the BCS way — by `paused: false`.
        let by_annotation = gitops_control::resume_requested(self.gd, self.update_revision, self.index);
        let resume = Resume { lifted: by_annotation || (!self.clean && !self.spec_paused), by_annotation };
        let partition = partition_at(steps, self.index, self.counts.replicas);
        let counts = self.counts;
        let settled = counts.updated_ready == counts.replicas - partition && counts.available == counts.ready;
        if step.partition.is_some() && settled {
            Outcome::Complete
        } else if let Some(pause) = &step.pause {
            self.judge_pause(pause, resume, settled)
        } else if let Some(hook) = &step.hook {
            self.judge_hook(hook, resume)
        } else if step.shadow_hook.is_some() && step.partition.is_none() {
            // Only a trial: its run is made (`super::shadow`) and the step never waits for it.
            Outcome::Complete
        } else {
            Outcome::Wait
        }
    }

    /// A pause step: paused once the partition settled; over when resumed or when its `duration` has passed.
    fn judge_pause(&mut self, pause: &CanaryPause, resume: Resume, settled: bool) -> Outcome {
        match self.has(PauseReason::PausedByCanaryPauseStep) {
            Some(c) => {
                let now = self.now;
                let expired = pause.duration.is_some_and(|d| {
                    let end = c.start_time.0.checked_add(SignedDuration::from_secs(i64::from(d))).unwrap_or(now);
                    self.out.requeue_at = Some(end);
                    end <= now
                });
                if resume.lifted || expired {
                    Outcome::Complete
                } else {
                    Outcome::Pause(PauseReason::PausedByCanaryPauseStep)
                }
            }
            None if settled => Outcome::Pause(PauseReason::PausedByCanaryPauseStep),
            None => Outcome::Wait,
        }
    }

    /// A hook step: its run decides — once `hookPolicy` has had its say (release, automatic retry).
    fn judge_hook(&mut self, hook: &HookStep, resume: Resume) -> Outcome {
        let base = hookrun::canary_hook_name(self.update_revision, self.index, &hook.template_name);
        let scan = scan_step_runs(self.gd, self.gate, &base, &self.hash);
        let (name, found) = step_run(&scan, &base);
        self.canary.current_step_hook_run = Some(name.clone());
        let (runs, free) = step_runs(&scan);
        let by_policy = self.step_policy(&runs);
        let found = runs.last().copied().or(found);
        let name = found.and_then(|r| r.metadata.name.clone()).unwrap_or(name);
        let released = matches!(by_policy, Decision::Release { .. });
        let retrying = matches!(by_policy, Decision::RetryAt { .. } | Decision::RetryNow { .. });
        self.apply_step_policy(by_policy, found, &name, free, hook);
        if released {
            Outcome::Complete
        } else if retrying {
            Outcome::Wait
        } else {
            self.by_run_phase(found, &name, hook, resume)
        }
    }

    /// `hookPolicy`: deadlines, fallbacks and automatic retries decide a step run that has not succeeded.
    fn step_policy(&mut self, runs: &[&HookRun]) -> Decision {
        let policy = self.steps[self.index].hook_policy.as_ref();
        let Some(latest) = runs.last().copied().filter(|r| gate::run_phase(r) != HookPhase::Successful) else {
            return Decision::AsAlways { recheck_at: None };
        };
        let now = self.now;
        let facts = deadline::Facts {
            phase: gate::run_phase(latest),
            run_started: gate::run_started(latest, now).0,
            run_finished: gate::run_finished(latest),
            hold_started: runs.first().map(|r| gate::run_started(r, now).0),
            retries_used: i32::try_from(runs.len() - 1).unwrap_or(i32::MAX),
            now,
        };
        self.canary.current_step_hook_run = latest.metadata.name.clone();
        let by_policy = deadline::decide(policy, &facts);
        if self.has(PauseReason::PausedByStepBasedHook).is_some()
            && matches!(by_policy, Decision::RetryAt { .. } | Decision::RetryNow { .. })
        {
            // Paused for the failure already (a person's resume decides now).
            return Decision::AsAlways { recheck_at: None };
        }
        by_policy
    }

    /// Carries out the policy's decision: a time to look again, a release record, a retry run.
    fn apply_step_policy(
        &mut self,
        by_policy: Decision,
        found: Option<&HookRun>,
        name: &str,
        free: Option<String>,
        hook: &HookStep,
    ) {
        let (index, len, now) = (self.index, self.len(), self.now);
        match by_policy {
            Decision::AsAlways { recheck_at: Some(at) } | Decision::RetryAt { at, .. } => {
                self.out.requeue_at = Some(self.out.requeue_at.map_or(at, |r: Timestamp| r.min(at)));
            }
            Decision::AsAlways { recheck_at: None } => {}
            Decision::Release { reason, message } => {
                let run = found.map(gate::run_phase).unwrap_or(HookPhase::Pending);
                let message = format!("HookRun {name}: {message}");
                self.out.events.push(PlannedEvent::warning(
                    "HookReleased",
                    format!("canary step {} of {len} passed without a successful hook: {message}", index + 1),
                ));
                self.canary.step_releases.push(common::api::CanaryStepRelease {
                    step: count(index),
                    hook_run: name.to_string(),
                    phase: run,
                    released_by: reason,
                    released_at: Time(now),
                    message,
                });
            }
            Decision::RetryNow { retry } => {
                let Some(next) = free else { return };
                match build_step_run(self.gd, self.gate, self.update_revision, index, hook, &next, &self.hash) {
                    Ok(run) => {
                        self.out.actions.push(Action::CreateHookRun(Box::new(run)));
                        self.out.events.push(PlannedEvent::normal(
                            "CanaryHookRetried",
                            format!(
                                "HookRun {name} of canary step {} of {len} failed: automatic retry {retry} is {next}",
                                index + 1
                            ),
                        ));
                        self.canary.current_step_hook_run = Some(next);
                    }
                    Err(problem) => self.out.events.push(PlannedEvent::warning("FailedCreateHookRun", problem)),
                }
            }
        }
    }

    /// The step run's phase decides: success completes the step, a failure pauses the rollout (unless resumed),
    /// no run yet makes one.
    fn by_run_phase(&mut self, found: Option<&HookRun>, name: &str, hook: &HookStep, resume: Resume) -> Outcome {
        match found.map(gate::run_phase) {
            Some(HookPhase::Successful) => Outcome::Complete,
            Some(phase) if phase.is_completed() => self.failed_run(name, phase, resume),
            Some(_) => Outcome::Wait,
            None => {
                self.create_step_run(hook, name);
                Outcome::Wait
            }
        }
    }

    /// A failed step run: rolled back with `onFailure: Rollback`; else overridden by a resume, else the rollout
    /// pauses (announced once).
    fn failed_run(&mut self, name: &str, phase: HookPhase, resume: Resume) -> Outcome {
        let (index, len) = (self.index, self.len());
        let policy = self.steps[index].hook_policy.as_ref();
        if policy.and_then(|p| p.on_failure) == Some(HookFallback::Rollback) {
            return Outcome::RollBack(name.to_string(), phase);
        }
        let paused_for_it = self.has(PauseReason::PausedByStepBasedHook).is_some();
        if paused_for_it && resume.lifted {
            let by = if resume.by_annotation {
                format!("the annotation {}", keys::RESUME_STEP)
            } else {
                "spec.updateStrategy.paused: false".to_string()
            };
            self.out.events.push(PlannedEvent::normal(
                "CanaryHookOverridden",
                format!("HookRun {name} ended {phase}; the rollout was resumed by {by}"),
            ));
            return Outcome::Complete;
        }
        if !paused_for_it && (self.spec_paused || self.clean) {
            self.out.events.push(PlannedEvent::warning(
                "CanaryHookFailed",
                format!(
                    "HookRun {name} of canary step {} of {len} ended {phase}: the rollout is paused; resume anyway \
                     with {}, or roll the template back to abort",
                    index + 1,
                    how_to_resume(self.gd, Some((self.update_revision, index)))
                ),
            ));
        }
        Outcome::Pause(PauseReason::PausedByStepBasedHook)
    }

    /// The step's first run. A failure to build it is announced once per step (the next pass sees the run name
    /// recorded) and retried every pass.
    fn create_step_run(&mut self, hook: &HookStep, name: &str) {
        match build_step_run(self.gd, self.gate, self.update_revision, self.index, hook, name, &self.hash) {
            Ok(run) => self.out.actions.push(Action::CreateHookRun(Box::new(run))),
            Err(problem) => {
                let recorded = self.old.canary.as_ref().and_then(|c| c.current_step_hook_run.as_deref());
                if recorded != Some(name) {
                    self.out.events.push(PlannedEvent::warning("FailedCreateHookRun", problem));
                }
            }
        }
    }

    /// The step is complete: the next one starts (at once), and a step's pause in the spec is lifted.
    fn complete_step(&mut self) {
        self.index += 1;
        self.conditions.clear();
        self.canary.current_step_hook_run = None;
        self.canary.pause_start_time = None;
        let (index, len) = (self.index, self.len());
        if self.our_pause_in_spec() {
            self.out.actions.push(set_paused(self.gd, false, format!("canary step {index} of {len} is complete")));
        }
        self.out.events.push(PlannedEvent::normal("SetStepIndex", format!("canary step {} of {len} complete", index)));
        self.out.requeue_at = Some(self.now);
    }

    /// The step pauses the rollout. The operator records in `status.canary.pauseStartTime` that it is about to
    /// pause *before* it writes `paused: true` (one pass earlier: that status write cannot fail on the
    /// resourceVersion the spec patch changes). A pause found set without that record is a person's, which a step
    /// never takes over (or lifts when it ends).
    fn pause(&mut self, reason: PauseReason) {
        let asked = self.canary.pause_start_time.is_some();
        let (index, len) = (self.index, self.len());
        if self.clean {
            // Paused in status only: the condition is the pause.
            if self.has(reason).is_none() {
                self.record_pause(reason);
            }
        } else if !self.spec_paused && !asked {
            self.canary.pause_start_time = Some(Time(self.now));
            self.out.requeue_at = Some(self.now);
        } else if !self.spec_paused {
            // `paused: true`; the condition follows once the spec shows it.
            let why = match (reason, self.steps[index].pause.as_ref().and_then(|p| p.duration)) {
                (PauseReason::PausedByStepBasedHook, _) => {
                    format!("hook {} failed", self.canary.current_step_hook_run.as_deref().unwrap_or_default())
                }
                (_, Some(d)) => format!("for {d}s"),
                (_, None) => "indefinite".to_string(),
            };
            let why = format!("canary step {} of {len} paused the rollout ({why})", index + 1);
            self.out.actions.push(set_paused(self.gd, true, why));
        } else if self.has(reason).is_none() && !asked {
            self.out.events.push(PlannedEvent::normal(
                "CanaryWaitsForResume",
                format!(
                    "canary step {} of {len} waits: the rollout was paused by spec.updateStrategy.paused before the \
                     step paused it; resume with {} to let the step run",
                    index + 1,
                    how_to_resume(self.gd, Some((self.update_revision, index)))
                ),
            ));
        } else if self.has(reason).is_none() {
            self.record_pause(reason);
        }
    }

    /// The pause condition (the pause itself in GitOps-clean mode), and when a timed pause ends.
    fn record_pause(&mut self, reason: PauseReason) {
        self.conditions.retain(|c| c.reason == reason);
        self.conditions.push(PauseCondition { reason, start_time: Time(self.now) });
        self.canary.pause_start_time = Some(Time(self.now));
        if let Some(d) = self.steps[self.index].pause.as_ref().and_then(|p| p.duration) {
            self.out.requeue_at = self.now.checked_add(SignedDuration::from_secs(i64::from(d))).ok();
        }
    }

    /// The step's hook failed for good with `onFailure: Rollback`: recorded in `status.canary.rollback` (the spec is
    /// never written), announced by a Warning Event. Pods move back from the next pass on, once the record is
    /// stored: this pass keeps the step's partition.
    fn roll_back(&mut self, run: &str, phase: HookPhase) {
        let (index, len, update_revision) = (self.index, self.len(), self.update_revision);
        let Some(stable) = self.canary.revision.clone().filter(|s| s != update_revision) else {
            // No other revision to go back to (cannot happen while steps run): hold as `Hold` does.
            return self.pause(PauseReason::PausedByStepBasedHook);
        };
        let message = format!(
            "HookRun {run} of canary step {} of {len} ended {phase} (hookPolicy.onFailure: Rollback): revision \
             {update_revision} is rolled back to the stable revision {stable}; change the template to try again",
            index + 1
        );
        self.out.events.push(PlannedEvent::warning("CanaryRolledBack", message.clone()));
        self.conditions.clear();
        self.canary.pause_start_time = None;
        self.canary.rollback = Some(CanaryRollback {
            failed_revision: update_revision.to_string(),
            stable_revision: stable,
            step: count(index),
            hook_run: run.to_string(),
            phase,
            rolled_back_at: Time(self.now),
            message,
        });
        self.out.requeue_at = Some(self.now);
    }

    /// The partition of this pass (the spec's once every step is done) and the canary fields of the status.
    fn finish(mut self) -> StepDecision {
        if self.index >= self.len() {
            self.canary.revision = Some(self.update_revision.to_string());
            self.out.partition = None;
        } else {
            self.out.partition = Some(partition_at(self.steps, self.index, self.counts.replicas));
        }
        self.out.current_step_index = Some(count(self.index));
        self.out.canary = Some(self.canary);
        self.out.pause_conditions = self.conditions;
        self.out
    }
}

fn canary_runs<'a>(
    gd: &'a GameDeployment,
    gate: &GateState<'a>,
) -> impl Iterator<Item = &'a common::api::HookRun> + 'a {
    gate.hook_runs.iter().map(AsRef::as_ref).filter(move |r: &&common::api::HookRun| {
        r.metadata.deletion_timestamp.is_none()
            && r.metadata.labels.as_ref().and_then(|l| l.get(keys::HOOKRUN_TYPE)).map(String::as_str)
                == Some(HookKind::CanaryStep.type_label())
            && ownership::controller_of(r.metadata.owner_references.as_ref())
                .is_some_and(|o| ownership::is_owned_by(o, gd))
    })
}

/// The value of [`keys::HOOKRUN_CHANGE`] on a step run: the steps it was made for.
fn step_change(steps_hash: &str) -> String {
    format!("canary/{steps_hash}")
}

fn change_of(run: &common::api::HookRun) -> Option<&str> {
    run.metadata.annotations.as_ref()?.get(keys::HOOKRUN_CHANGE).map(String::as_str)
}

/// The step's runs (ours, made for these steps) under `base` or BCS's `base.N`, with their suffix, in suffix order,
/// and the first free name: one scan of the names for both views below.
fn scan_step_runs<'a>(
    gd: &GameDeployment,
    gate: &GateState<'a>,
    base: &str,
    steps_hash: &str,
) -> (Vec<(usize, &'a common::api::HookRun)>, Option<String>) {
    let change = step_change(steps_hash);
    let mut ours = Vec::new();
    let mut free = None;
    for n in 0..=crate::gate::attempt::MAX_NAME_SUFFIX {
        let name = crate::gate::attempt::nth_name(base, n);
        match gate.hook_runs.iter().map(AsRef::as_ref).find(|r| r.metadata.name.as_deref() == Some(name.as_str())) {
            None => {
                free.get_or_insert(name);
            }
            Some(run)
                if crate::gate::attempt::controller_uid(run) == gd.metadata.uid.as_deref()
                    && change_of(run) == Some(change.as_str()) =>
            {
                ours.push((n, run));
            }
            Some(_) => {}
        }
    }
    (ours, free)
}

/// The step's run (the first of [`scan_step_runs`], terminating or not), or the name a new one gets.
fn step_run<'a>(
    scan: &(Vec<(usize, &'a common::api::HookRun)>, Option<String>),
    base: &str,
) -> (String, Option<&'a common::api::HookRun>) {
    let (ours, free) = scan;
    match ours.first() {
        Some(&(n, run)) => (crate::gate::attempt::nth_name(base, n), Some(run)),
        None => (free.clone().unwrap_or_else(|| base.to_string()), None),
    }
}

/// Every live run of the step, oldest first — an automatic retry adds one — and the first free name.
fn step_runs<'a>(
    scan: &(Vec<(usize, &'a common::api::HookRun)>, Option<String>),
) -> (Vec<&'a common::api::HookRun>, Option<String>) {
    let (ours, free) = scan;
    let mut live: Vec<(usize, &common::api::HookRun)> =
        ours.iter().copied().filter(|(_, run)| run.metadata.deletion_timestamp.is_none()).collect();
    live.sort_by_key(|(n, run)| (run.metadata.creation_timestamp.as_ref().map(|t| t.0), *n));
    (live.into_iter().map(|(_, run)| run).collect(), free.clone())
}

fn build_step_run(
    gd: &GameDeployment,
    gate: &GateState<'_>,
    revision: &str,
    index: usize,
    hook: &common::api::HookStep,
    name: &str,
    steps_hash: &str,
) -> Result<common::api::HookRun, String> {
    let namespace = gd.metadata.namespace.clone().unwrap_or_default();
    let template =
        gate.templates.iter().find(|t| t.metadata.name.as_deref() == Some(hook.template_name.as_str())).ok_or_else(
            || {
                let step = index + 1;
                format!("canary step {step}: HookTemplate {:?} not found in namespace {namespace}", hook.template_name)
            },
        )?;
    let new = NewHookRun {
        name: name.to_string(),
        namespace,
        labels: hookrun::canary_hook_labels(revision, index, gd.metadata.name.as_deref().unwrap_or("")),
        owner: Some(ownership::owner_reference(gd)),
        args: hookrun::step_args(hook),
    };
    let mut run = hookrun::from_template(template, new).map_err(|e| format!("canary step {}: {e}", index + 1))?;
    let hash = hookrun::spec_hash(&run.spec);
    let annotations = run.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(keys::HOOKRUN_CHANGE.into(), step_change(steps_hash));
    annotations.insert(keys::HOOKRUN_SPEC_HASH.into(), hash);
    Ok(run)
}

fn how_to_resume(gd: &GameDeployment, step: Option<(&str, usize)>) -> String {
    super::conditions::resume_command(gd, step)
}

fn set_paused(gd: &GameDeployment, paused: bool, why: String) -> Action {
    Action::SetPaused { paused, resource_version: gd.metadata.resource_version.clone().unwrap_or_default(), why }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::gd;
    use crate::planner::settings::builder::{NEW, OLD, Pass};

    fn with_steps() -> Pass {
        let mut g = gd(4, "InplaceUpdate");
        g.spec.update_strategy.canary = Some(
            serde_json::from_value(serde_json::json!({"steps": [{"partition": 3}, {"pause": {}}, {"partition": 1}]}))
                .expect("valid canary"),
        );
        Pass::new(g).old(4)
    }

    #[test]
    fn a_new_game_deployment_skips_its_steps() {
        let pass = with_steps();
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let out = evaluate(
            &pass.gd,
            &GameDeploymentStatus::default(),
            NEW,
            Counts::of(&infos, &settings),
            &settings.gate,
            settings.now,
        );
        assert_eq!((out.partition, out.current_step_index), (None, Some(3)));
        assert_eq!(out.canary.and_then(|c| c.revision).as_deref(), Some(NEW));
    }

    #[test]
    fn a_template_change_starts_at_step_zero_with_its_partition() {
        let pass = with_steps();
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let old = GameDeploymentStatus {
            update_revision: Some(OLD.into()),
            current_step_index: Some(3),
            current_step_hash: Some(steps_hash(&pass.gd.spec.update_strategy.canary.as_ref().unwrap().steps)),
            canary: Some(CanaryStatus { revision: Some(OLD.into()), ..Default::default() }),
            ..Default::default()
        };
        let out = evaluate(&pass.gd, &old, NEW, Counts::of(&infos, &settings), &settings.gate, settings.now);
        assert_eq!((out.partition, out.current_step_index), (Some(3), Some(0)));
        assert!(out.events.iter().any(|e| e.reason == "SetStepIndex"));
        let mut status = GameDeploymentStatus::default();
        out.apply_to(&mut status);
        assert_eq!(status.current_step_index, Some(0));

        // Rolling back to the stable revision skips every step.
        let back = evaluate(&pass.gd, &old, OLD, Counts::of(&infos, &settings), &settings.gate, settings.now);
        assert_eq!(back.partition, None);
    }

    fn at_step(pass: &Pass, index: i32) -> GameDeploymentStatus {
        GameDeploymentStatus {
            update_revision: Some(NEW.into()),
            current_step_index: Some(index),
            current_step_hash: Some(steps_hash(&pass.gd.spec.update_strategy.canary.as_ref().unwrap().steps)),
            canary: Some(CanaryStatus { revision: Some(OLD.into()), ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn a_pause_a_person_set_is_never_taken_over_or_lifted_by_a_step() {
        // Step 1 is a pause; the partition of step 0 is reached (1 of 4 updated and ready).
        let mut pass = Pass::new(with_steps().gd).old(3).updated(1);
        pass.gd.spec.update_strategy.paused = true;
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let old = at_step(&pass, 1);
        let out = evaluate(&pass.gd, &old, NEW, Counts::of(&infos, &settings), &settings.gate, settings.now);
        assert!(out.pause_conditions.is_empty(), "the person's pause is not recorded as the step's");
        assert!(out.actions.is_empty(), "{:?}", out.actions);
        assert!(out.events.iter().any(|e| e.reason == "CanaryWaitsForResume"));
        // Once the person resumes, the step records that the pause is its own, then pauses.
        let counts = Counts::of(&infos, &settings);
        drop(infos);
        pass.gd.spec.update_strategy.paused = false;
        let settings = pass.settings();
        let out = evaluate(&pass.gd, &old, NEW, counts, &settings.gate, settings.now);
        assert!(out.actions.is_empty(), "{:?}", out.actions);
        let marked = out.canary.clone().expect("canary status");
        assert!(marked.pause_start_time.is_some());
        let old = GameDeploymentStatus { canary: Some(marked), ..old };
        let out = evaluate(&pass.gd, &old, NEW, counts, &settings.gate, settings.now);
        assert!(matches!(out.actions.as_slice(), [Action::SetPaused { paused: true, .. }]), "{:?}", out.actions);
    }

    /// Steps: partition 3, then the `check` hook with `onFailure` (`Hold`/`Rollback`); at step 1 with a failed run.
    fn failed_hook_step(on_failure: &str) -> (Pass, std::sync::Arc<HookRun>) {
        let mut g = gd(4, "InplaceUpdate");
        g.spec.update_strategy.canary = Some(
            serde_json::from_value(serde_json::json!({"steps": [
                {"partition": 3},
                {"hook": {"templateName": "check"}, "hookPolicy": {"onFailure": on_failure}}
            ]}))
            .unwrap(),
        );
        let pass = Pass::new(g).old(3).updated(1);
        let hash = steps_hash(&pass.gd.spec.update_strategy.canary.as_ref().unwrap().steps);
        let mut run: HookRun = serde_json::from_value(serde_json::json!({
            "apiVersion": "tkex.tencent.com/v1alpha1", "kind": "HookRun",
            "metadata": {"name": hookrun::canary_hook_name(NEW, 1, "check"), "uid": "run-1",
                "labels": {"hookrun-type": "canary-step", "workload-revision": NEW},
                "annotations": {"gamedeployment.tkex.tencent.com/change": step_change(&hash)}},
            "spec": {"metrics": []},
            "status": {"phase": "Failed"}
        }))
        .unwrap();
        run.metadata.owner_references = Some(vec![ownership::owner_reference(&pass.gd)]);
        (pass, std::sync::Arc::new(run))
    }

    #[test]
    fn a_failed_hook_step_rolls_back_or_holds_by_its_on_failure() {
        // (onFailure, GitOps-clean) → (rollback recorded, pause condition, spec writes)
        for (on_failure, clean, rollback, paused, writes) in [
            ("Rollback", false, true, false, 0),
            ("Rollback", true, true, false, 0),
            // Hold, as before: a spec pause (first the record that it is ours), or a status pause when clean.
            ("Hold", false, false, false, 0),
            ("Hold", true, false, true, 0),
        ] {
            let (mut pass, run) = failed_hook_step(on_failure);
            if clean {
                pass.gd.metadata.annotations =
                    Some([(keys::CONTROL.to_string(), "annotations".to_string())].into_iter().collect());
            }
            let settings = pass.settings();
            let infos = pass.infos(&settings);
            let runs = [run.clone()];
            let gate = GateState { hook_runs: &runs, ..settings.gate };
            let out = evaluate(&pass.gd, &at_step(&pass, 1), NEW, Counts::of(&infos, &settings), &gate, settings.now);
            let case = format!("{on_failure} clean={clean}");
            let recorded = out.canary.as_ref().and_then(|c| c.rollback.clone());
            assert_eq!(recorded.is_some(), rollback, "{case}");
            assert_eq!(!out.pause_conditions.is_empty(), paused, "{case}");
            assert_eq!(out.actions.len(), writes, "{case}: {:?}", out.actions);
            assert_eq!(out.partition, Some(3), "{case}: this pass moves nothing more");
            assert_eq!(out.events.iter().any(|e| e.reason == "CanaryRolledBack"), rollback, "{case}");
            if let Some(r) = recorded {
                assert_eq!((r.failed_revision.as_str(), r.stable_revision.as_str(), r.step), (NEW, OLD, 1));
                assert_eq!((r.hook_run.as_str(), r.phase), (run.metadata.name.as_deref().unwrap(), HookPhase::Failed));
                assert!(r.message.contains("change the template to try again"), "{}", r.message);
            }
        }
    }

    #[test]
    fn a_rollback_holds_for_its_revision_whatever_resumes_it_and_ends_with_a_new_template() {
        let (mut pass, run) = failed_hook_step("Rollback");
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let counts = Counts::of(&infos, &settings);
        let runs = [run];
        let gate = GateState { hook_runs: &runs, ..settings.gate };
        let recorded = evaluate(&pass.gd, &at_step(&pass, 1), NEW, counts, &gate, settings.now);
        let mut old = at_step(&pass, 1);
        recorded.apply_to(&mut old);
        // The next pass's status shows the stable revision as the update revision.
        old.update_revision = Some(OLD.into());
        assert_eq!(rollback_target(&old, NEW), Some(OLD));
        assert_eq!(rollback_target(&old, "third"), None);
        let held = evaluate(&pass.gd, &old, NEW, counts, &gate, settings.now);
        assert_eq!(held.partition, Some(0), "every pod goes back");
        assert_eq!(held.canary, old.canary);
        assert!(held.events.is_empty() && held.actions.is_empty());
        // A resume or a promotion of the failed revision does not undo it.
        drop(infos);
        let annotations = pass.gd.metadata.annotations.get_or_insert_with(Default::default);
        annotations.insert(keys::RESUME_STEP.into(), format!("{NEW}/1"));
        annotations.insert(keys::PROMOTE.into(), NEW.into());
        let settings = pass.settings();
        let gate = GateState { hook_runs: &runs, ..settings.gate };
        assert_eq!(evaluate(&pass.gd, &old, NEW, counts, &gate, settings.now).canary, old.canary);
        // Removing the steps does not end it either.
        let mut no_steps = pass.gd.clone();
        no_steps.spec.update_strategy.canary = None;
        let kept = evaluate(&no_steps, &old, NEW, counts, &gate, settings.now);
        assert_eq!((kept.canary, kept.partition), (old.canary.clone(), Some(0)));
        // A new template ends it and starts at step 0; the stable one skips every step.
        let third = evaluate(&pass.gd, &old, "third", counts, &gate, settings.now);
        assert_eq!(third.canary.as_ref().and_then(|c| c.rollback.as_ref()), None);
        let restart = format!("canary of revision third starts at step 1 of 2 (the rollback of revision {NEW} ends)");
        assert!(third.events.iter().any(|e| e.message == restart), "{:?}", third.events);
        let back = evaluate(&pass.gd, &old, OLD, counts, &gate, settings.now);
        assert_eq!(back.canary.as_ref().and_then(|c| c.rollback.as_ref()), None);
        assert_eq!((back.current_step_index, back.partition), (Some(2), None));
    }

    #[test]
    fn a_steps_edit_makes_a_fresh_step_run() {
        let mut g = gd(4, "InplaceUpdate");
        g.spec.update_strategy.canary =
            Some(serde_json::from_value(serde_json::json!({"steps": [{"hook": {"templateName": "check"}}]})).unwrap());
        let pass = Pass::new(g).old(4);
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let hash = steps_hash(&pass.gd.spec.update_strategy.canary.as_ref().unwrap().steps);
        let name = hookrun::canary_hook_name(NEW, 0, "check");
        let mut run: common::api::HookRun = serde_json::from_value(serde_json::json!({
            "apiVersion": "tkex.tencent.com/v1alpha1", "kind": "HookRun",
            "metadata": {"name": name, "uid": "run-1",
                "labels": {"hookrun-type": "canary-step", "workload-revision": NEW},
                "annotations": {"gamedeployment.tkex.tencent.com/change": "canary/other-steps"}},
            "spec": {"metrics": []},
            "status": {"phase": "Successful"}
        }))
        .unwrap();
        run.metadata.owner_references = Some(vec![ownership::owner_reference(&pass.gd)]);
        let runs = [std::sync::Arc::new(run)];
        let gate = GateState { hook_runs: &runs, ..settings.gate };
        let old = at_step(&pass, 0);
        let out = evaluate(&pass.gd, &old, NEW, Counts::of(&infos, &settings), &gate, settings.now);
        assert_eq!(out.current_step_index, Some(0), "the old success does not complete the step");
        assert!(out.actions.iter().any(|a| matches!(a, Action::DeleteHookRun { why, .. } if why.contains("edited"))));
        assert_eq!(
            out.canary.and_then(|c| c.current_step_hook_run),
            Some(format!("{name}.1")),
            "a fresh run under the next name (steps {hash})"
        );
    }
}
