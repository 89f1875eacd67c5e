//! The recorded timeline of a forecast: what each pass of the planner started, grouped into batches (a batch is
//! the pod actions started in one pass), each pod's hook with its probe schedule, and when each pod is done.
//! Times are seconds since the forecast began (the moment the change would be applied).

use std::collections::{BTreeMap, BTreeSet};

use common::api::{GameDeployment, HookPhase, HookRun};
use common::cached_pod::Pod;
use common::keys;
use serde::Serialize;

use super::hook_operator::{self, Assume, Timing};
use crate::action::{Action, HeldPod, PatchReason, PodChange, PodWrite};
use crate::gate::{DeleteCause, GateKind};
use crate::lifecycle::{self, Handler, LifecycleState};
use crate::planner::scale::race_to_empty;
use crate::{ownership, patch};

/// What happens to one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PodAction {
    /// Deleted and not replaced (scale-in, `podsToDelete` beyond `replicas`).
    Delete,
    /// Its containers restart on the new images, the pod stays.
    InPlaceUpdate,
    /// Its images change without a restart.
    HotPatch,
    /// Deleted to be replaced by a pod of the new revision.
    Recreate,
    /// A new pod.
    Create,
}

impl PodAction {
    /// The action in words, as `kubectl gd plan` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::InPlaceUpdate => "in-place update",
            Self::HotPatch => "hot-patch",
            Self::Recreate => "recreate",
            Self::Create => "create",
        }
    }
}

/// A hook a pod (or a canary step) waits on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookWait {
    /// `preDelete`, `preInplace`, `postInplace` or `canaryStep`.
    pub kind: String,
    /// The HookTemplate the run is made from.
    pub template: String,
    /// The HookRun's name: the live run's, or the name the operator would give a run it makes.
    pub run: String,
    /// The probe schedule in words ("3 measurements 60s apart").
    pub schedule: String,
    /// When the run starts (seconds).
    pub starts: i64,
    /// When the run completes (seconds); `None` when it never does (an unbounded metric under `as-now`, or the
    /// forecast ends first).
    pub completes: Option<i64>,
    /// How it completes under the assumption (`Running`: never).
    pub outcome: HookPhase,
}

/// One pod's part of a batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStep {
    /// The pod's name, or "new pod N" for a pod the rollout creates (its name is chosen when it is created).
    pub pod: String,
    /// The pod does not exist yet: the rollout creates it.
    pub new: bool,
    /// What happens to the pod.
    pub action: PodAction,
    /// The hooks the pod waits on, in order (pre-delete or pre-inplace, then post-inplace).
    pub hooks: Vec<HookWait>,
    /// When its first hook started or the action was taken, whichever came first.
    pub started: i64,
    /// When the action itself was taken (`None`: never, e.g. its hook fails).
    pub acted: Option<i64>,
    /// When the pod is available again on its new revision, or gone (`None`: not within the forecast).
    pub done: Option<i64>,
}

/// The pod actions started in one pass.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Batch {
    /// 1-based.
    pub index: usize,
    /// The pass that started it (seconds).
    pub starts: i64,
    /// When its last pod is done (`None`: one never is within the forecast).
    pub ends: Option<i64>,
    /// The pods whose action the pass started.
    pub pods: Vec<PodStep>,
}

/// Something the rollout does beyond pods: a canary step's hook, a pause.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Note {
    /// When it happens (seconds).
    pub at: i64,
    /// What happens, in words (`canaryStep hook <template> starts`, `paused: <why>`).
    pub text: String,
    /// The canary step's hook, when the note is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookWait>,
}

/// How a race-to-empty candidate ends in the forecast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RaceResult {
    /// Its gate opened among the first: deleted.
    Won,
    /// Its pre-delete hook failed while another pod could take its place: back to `Normal`, marked `race-skipped`.
    Skipped,
    /// The race had its winners (or no longer needed it): back to `Normal`.
    Released,
    /// Still in `PreparingDelete` when the forecast ends.
    Racing,
}

impl RaceResult {
    /// The result in words, as `kubectl gd plan` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Won => "wins (deleted)",
            Self::Skipped => "skipped (its hook failed)",
            Self::Released => "released",
            Self::Racing => "still racing",
        }
    }
}

/// One pod of a race to empty, as the forecast's passes moved it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RaceCandidate {
    /// The candidate pod.
    pub pod: String,
    /// When it joined the race (held in `PreparingDelete`, or deleted at once).
    pub joined: i64,
    /// How its part in the race ends.
    pub result: RaceResult,
    /// When it was deleted, skipped or released (`None`: still racing).
    pub decided: Option<i64>,
    /// Its pre-delete run, and how that run ends under the assumption (`None`: no run, e.g. it needed no hook).
    pub run: Option<String>,
    /// The phase that run ends with under the assumption (`None`: no run).
    pub outcome: Option<HookPhase>,
    /// Whether the run had taken a measurement when the forecast began (a run the forecast starts has none): under
    /// `as-now` only a measured run's outcome is read from the cluster, the others are assumed to succeed.
    pub measured: bool,
}

/// A race to empty (`scaleInPolicy.mode: RaceToEmpty`) as the forecast ran it: the pods in the order they joined
/// the race (the race order), which won, which were skipped.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Race {
    /// Every pod that joined the race, in race order.
    pub candidates: Vec<RaceCandidate>,
    /// The deleted candidates, in race order.
    pub winners: Vec<String>,
    /// The candidates skipped because their hook failed, in race order.
    pub skipped: Vec<String>,
}

/// A pod a CloneSet lifecycle handler (`spec.lifecycle`) holds when the forecast ends: the simulated cluster has no
/// outside controller to change the pod's labels or finalizers, so the hold never ends there.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHold {
    /// The held pod.
    pub pod: String,
    /// `PreparingDelete`, `PreparingUpdate`, `Updated` or `PreparingNormal`.
    pub state: String,
    /// `preDelete`, `inPlaceUpdate` or `preNormal`.
    pub handler: String,
    /// What would release it, in words.
    pub release: String,
    /// When it entered that state (seconds; negative: before the forecast began).
    pub since: Option<i64>,
}

/// Why the forecast ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// Every pod runs the new revision and is available.
    Complete,
    /// Done as far as the partition lets it: the rest stay on the old revision.
    Partition,
    /// A canary pause step (or `paused: true`) holds the rollout.
    Paused,
    /// A hook fails (under `--assume-hooks fail`, or one that failed already) and holds its pod, or a canary step's
    /// hook fails and pauses the rollout (`hookPolicy.onFailure: Hold`).
    HookFailed,
    /// A canary step's hook fails with `hookPolicy.onFailure: Rollback`: the pods go back to the stable revision
    /// ([`Timeline::rolled_back_to`]) and stay there until a new template. Never "complete".
    RolledBack,
    /// Pods wait on a CloneSet lifecycle handler that only an outside controller can release
    /// ([`Timeline::lifecycle_holds`]).
    LifecycleHold,
    /// Nothing changes any more and nothing is scheduled, but the rollout is not done (the status says why).
    Stuck,
    /// The simulated time limit was reached.
    TimeLimit,
}

/// How and when the forecast ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stop {
    /// Why it ends: done, or what holds the rollout.
    pub reason: StopReason,
    /// When (seconds).
    pub at: i64,
    /// In the status' words (its `Progressing` condition, a hook condition's message).
    pub message: String,
}

/// Pod counts at the end of the forecast (as the GameDeployment's status would show them).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// `status.replicas`.
    pub replicas: i32,
    /// `status.updatedReplicas`: pods on the update revision.
    pub updated: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
}

/// The whole forecast.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    /// The GameDeployment's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// How hooks were assumed to end (`--assume-hooks`).
    pub assume: Assume,
    /// The revision the change rolls out (a rolled-back canary's too: the one that failed).
    pub update_revision: Option<String>,
    /// The stable revision the pods are back on when a failed canary was rolled back ([`StopReason::RolledBack`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back_to: Option<String>,
    /// The pod actions, grouped by the pass that started them.
    pub batches: Vec<Batch>,
    /// What happens beyond pods (canary hooks, pauses), in time order.
    pub notes: Vec<Note>,
    /// The race to empty, when the scale-in races (`scaleInPolicy.mode: RaceToEmpty`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub race: Option<Race>,
    /// Pods a lifecycle handler holds when the forecast ends.
    pub lifecycle_holds: Vec<LifecycleHold>,
    /// Why and when the forecast ends.
    pub stop: Stop,
    /// When the last pod action is done (seconds): the estimated duration of the rollout.
    pub total_seconds: i64,
    /// The pod counts before the change.
    pub before: Counts,
    /// The pod counts when the forecast ends.
    pub after: Counts,
    /// Planner passes simulated.
    pub passes: usize,
}

/// The kind of a pod or canary run, as the spec names it (`None` for shadow runs and runs of other workloads).
fn hook_kind(run: &HookRun) -> Option<&'static str> {
    match run.metadata.labels.as_ref()?.get(keys::HOOKRUN_TYPE)?.as_str() {
        keys::hookrun_type::PRE_DELETE => Some("preDelete"),
        keys::hookrun_type::PRE_INPLACE => Some("preInplace"),
        keys::hookrun_type::POST_INPLACE => Some("postInplace"),
        keys::hookrun_type::CANARY_STEP => Some("canaryStep"),
        _ => None,
    }
}

/// The template a run was made from: its name is `<prefix>-<revision>-<instance id or step>-<template>`, maybe with
/// BCS's `.N` suffix.
fn template_of(run: &HookRun) -> String {
    let name = run.metadata.name.as_deref().unwrap_or("");
    let labels = run.metadata.labels.clone().unwrap_or_default();
    let revision = labels.get(keys::HOOKRUN_WORKLOAD_REVISION).map_or("", String::as_str);
    let middle = labels
        .get(keys::HOOKRUN_INSTANCE_ID)
        .or_else(|| labels.get(keys::HOOKRUN_CANARY_STEP_INDEX))
        .map_or("", String::as_str);
    let rest = name.split_once('-').map_or(name, |(_, rest)| rest);
    let rest = rest.strip_prefix(&format!("{revision}-{middle}-")).unwrap_or(rest);
    match rest.rsplit_once('.') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base.to_string(),
        _ => rest.to_string(),
    }
}

/// Builds the timeline pass by pass.
pub(crate) struct Recorder {
    start: i64,
    assume: Assume,
    timing: Timing,
    /// Pod name → its step, and the pass it started in.
    steps: BTreeMap<String, (usize, PodStep)>,
    /// Pod UID → name, for runs (which name their pod by UID).
    names: BTreeMap<String, String>,
    new_pods: usize,
    pub notes: Vec<Note>,
    /// Race-to-empty candidates in the order they joined the race.
    race: Vec<(String, RaceEntry)>,
    /// Runs that had taken a measurement when the forecast began.
    measured: BTreeSet<String>,
    /// Pods whose cost probe had not answered when the forecast began, or was started by the forecast.
    unanswered_probes: BTreeSet<String>,
}

/// A race candidate while the forecast runs.
#[derive(Debug, Clone)]
struct RaceEntry {
    joined: i64,
    /// `None`: racing.
    result: Option<RaceResult>,
    decided: Option<i64>,
    run: Option<String>,
}

/// The pod a run is about (cost probes and pod hooks name it by UID).
fn run_pod_uid(run: &HookRun) -> Option<&String> {
    run.metadata.labels.as_ref()?.get(keys::HOOKRUN_POD_UID)
}

fn is_cost_probe(run: &HookRun) -> bool {
    run.metadata.labels.as_ref().and_then(|l| l.get(keys::HOOKRUN_TYPE)).map(String::as_str)
        == Some(race_to_empty::COST_PROBE)
}

/// The JSON-patch operations of a pod change's object writes.
fn object_ops(change: &PodChange) -> impl Iterator<Item = &serde_json::Value> {
    change.writes.iter().flat_map(|w| match w {
        PodWrite::Object(ops) => ops.as_slice(),
        PodWrite::Status(_) => &[],
    })
}

/// A pod change that takes a pod back to serving (`Normal`, or `PreparingNormal` under a preNormal handler), and
/// whether it marks it skipped by the race.
fn back_to_serving(change: &PodChange) -> Option<bool> {
    let state = patch::label_path(keys::LIFECYCLE_STATE);
    let back = object_ops(change).any(|op| {
        op["op"] == "add"
            && op["path"] == state.as_str()
            && matches!(op["value"].as_str(), Some("Normal" | "PreparingNormal"))
    });
    let mark = patch::annotation_path(race_to_empty::SKIPPED);
    back.then(|| object_ops(change).any(|op| op["op"] == "add" && op["path"] == mark.as_str()))
}

impl Recorder {
    pub fn new(start: i64, assume: Assume, timing: Timing) -> Self {
        Self {
            start,
            assume,
            timing,
            steps: BTreeMap::new(),
            names: BTreeMap::new(),
            new_pods: 0,
            notes: Vec::new(),
            race: Vec::new(),
            measured: BTreeSet::new(),
            unanswered_probes: BTreeSet::new(),
        }
    }

    fn step(&mut self, name: &str, pass: usize, at: i64, action: PodAction) -> &mut PodStep {
        &mut self
            .steps
            .entry(name.to_string())
            .or_insert_with(|| {
                (
                    pass,
                    PodStep {
                        pod: name.to_string(),
                        new: false,
                        action,
                        hooks: Vec::new(),
                        started: at,
                        acted: None,
                        done: None,
                    },
                )
            })
            .1
    }

    fn wait(&self, run: &HookRun, kind: &str, now: i64) -> HookWait {
        let outcome = hook_operator::outcome(run, now * 1000, self.assume, self.timing);
        HookWait {
            kind: kind.to_string(),
            template: template_of(run),
            run: run.metadata.name.clone().unwrap_or_default(),
            schedule: hook_operator::run_schedule_text(&run.spec.metrics, self.timing),
            starts: now - self.start,
            // Whole seconds, rounded up: the planner sees the run completed at the first pass after.
            completes: outcome.at.map(|ms| (ms + 999).div_euclid(1000) - self.start),
            outcome: outcome.phase,
        }
    }

    /// Pods already waiting on a hook when the forecast begins: their step starts with that run (first batch).
    pub fn seed(&mut self, now: i64, pods: &[Pod], runs: &[std::sync::Arc<HookRun>]) {
        for pod in pods {
            if let (Some(uid), Some(name)) = (&pod.metadata.uid, &pod.metadata.name) {
                self.names.entry(uid.clone()).or_insert_with(|| name.clone());
            }
        }
        for run in runs {
            let status = run.status.as_ref();
            if status.is_some_and(|s| s.metric_results.iter().any(|m| !m.measurements.is_empty() || m.count > 0)) {
                self.measured.insert(run.metadata.name.clone().unwrap_or_default());
            }
            if is_cost_probe(run)
                && !status.and_then(|s| s.phase).is_some_and(HookPhase::is_completed)
                && let Some(name) = run_pod_uid(run).and_then(|uid| self.names.get(uid))
            {
                self.unanswered_probes.insert(name.clone());
            }
            let Some(kind) = hook_kind(run) else { continue };
            let Some(pod_uid) = run.metadata.labels.as_ref().and_then(|l| l.get(keys::HOOKRUN_POD_UID)) else {
                continue;
            };
            let Some(pod) = pods.iter().find(|p| p.metadata.uid.as_ref() == Some(pod_uid)) else { continue };
            let waiting =
                matches!(lifecycle::state_of(pod), LifecycleState::PreparingDelete | LifecycleState::PreparingUpdate);
            if !waiting || !common::pod::is_active(pod) {
                continue;
            }
            let created = run.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0.as_second());
            let mut wait = self.wait(run, kind, created);
            wait.starts = created - self.start;
            let name = pod.metadata.name.clone().unwrap_or_default();
            let action = if run
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::HOOKRUN_CHANGE))
                .is_some_and(|c| c == "delete")
            {
                PodAction::Delete
            } else {
                PodAction::InPlaceUpdate
            };
            self.step(&name, 0, wait.starts, action).hooks.push(wait);
        }
    }

    /// Records what a pass planned at `now` (before it is applied to `pods`).
    pub fn record(&mut self, pass: usize, now: i64, pods: &[Pod], actions: &[Action]) {
        for pod in pods {
            if let (Some(uid), Some(name)) = (&pod.metadata.uid, &pod.metadata.name) {
                self.names.entry(uid.clone()).or_insert_with(|| name.clone());
            }
        }
        let at = now - self.start;
        for action in actions {
            match action {
                Action::CreateHookRun(run) => {
                    if is_cost_probe(run)
                        && let Some(name) = run_pod_uid(run).and_then(|uid| self.names.get(uid))
                    {
                        self.unanswered_probes.insert(name.clone());
                    }
                    let Some(kind) = hook_kind(run) else { continue };
                    let wait = self.wait(run, kind, now);
                    let pod_uid = run.metadata.labels.as_ref().and_then(|l| l.get(keys::HOOKRUN_POD_UID));
                    match pod_uid.and_then(|uid| self.names.get(uid)).cloned() {
                        Some(name) => {
                            let change = run.metadata.annotations.as_ref().and_then(|a| a.get(keys::HOOKRUN_CHANGE));
                            let action = if change.is_some_and(|c| c == "delete") {
                                PodAction::Delete
                            } else {
                                PodAction::InPlaceUpdate
                            };
                            self.step(&name, pass, at, action).hooks.push(wait);
                        }
                        None => self.notes.push(Note {
                            at,
                            text: format!("{kind} hook {} starts", wait.template),
                            hook: Some(wait),
                        }),
                    }
                }
                Action::DeletePod { pod, cause } => {
                    let action = match cause {
                        DeleteCause::RollingUpdate | DeleteCause::RecreateFallback => PodAction::Recreate,
                        DeleteCause::ScaleIn | DeleteCause::PodsToDelete | DeleteCause::SpecifiedDelete => {
                            PodAction::Delete
                        }
                    };
                    let step = self.step(&pod.name, pass, at, action);
                    step.action = action;
                    step.acted.get_or_insert(at);
                    step.done.get_or_insert(at);
                }
                Action::PatchPod(change)
                    if matches!(change.reason, PatchReason::InPlaceUpdate | PatchReason::HotPatchUpdate) =>
                {
                    let action = match change.reason {
                        PatchReason::HotPatchUpdate => PodAction::HotPatch,
                        _ => PodAction::InPlaceUpdate,
                    };
                    let step = self.step(&change.pod.name, pass, at, action);
                    step.action = action;
                    step.acted.get_or_insert(at);
                }
                Action::CreatePod { pod, .. } => {
                    self.new_pods += 1;
                    let label = format!("new pod {}", self.new_pods);
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let step = self.step(&name, pass, at, PodAction::Create);
                    step.pod = label;
                    step.new = true;
                    step.acted.get_or_insert(at);
                }
                Action::SetPaused { paused, why, .. } => self.notes.push(Note {
                    at,
                    text: if *paused { format!("paused: {why}") } else { format!("resumed: {why}") },
                    hook: None,
                }),
                _ => {}
            }
        }
    }

    /// A pod as the batches name it ("new pod N" for a pod the rollout creates).
    pub fn shown(&self, name: &str) -> String {
        self.steps.get(name).map_or_else(|| name.to_string(), |(_, step)| step.pod.clone())
    }

    fn candidate(&mut self, pod: &str, at: i64) -> &mut RaceEntry {
        let index = match self.race.iter().position(|(name, _)| name == pod) {
            Some(index) => index,
            None => {
                self.race.push((pod.to_string(), RaceEntry { joined: at, result: None, decided: None, run: None }));
                self.race.len() - 1
            }
        };
        &mut self.race[index].1
    }

    /// Records the pods a pass's gates hold (after [`Self::record`]): a pod held without a hook (by a lifecycle
    /// handler alone) starts its step here. Then what the pass did to the pods a scale-in takes from: pods deleted
    /// by it (winners, first: the race deletes them before it moves the others), pods its gate holds (racing, in
    /// the order the race asked the gate: the race order), and candidates taken back to serving (skipped when
    /// marked `race-skipped`, else released).
    pub fn record_held(&mut self, pass: usize, now: i64, held: &[HeldPod], actions: &[Action]) {
        let at = now - self.start;
        for pod in held {
            let action = match pod.kind {
                GateKind::Delete(DeleteCause::RollingUpdate | DeleteCause::RecreateFallback) => PodAction::Recreate,
                GateKind::Delete(_) => PodAction::Delete,
                GateKind::InPlaceUpdate => PodAction::InPlaceUpdate,
                GateKind::HotPatchUpdate => PodAction::HotPatch,
            };
            self.step(&pod.name, pass, at, action);
        }
        for action in actions {
            if let Action::DeletePod { pod, cause: DeleteCause::ScaleIn } = action {
                let entry = self.candidate(&pod.name, at);
                entry.result = Some(RaceResult::Won);
                entry.decided = Some(at);
            }
        }
        for pod in held.iter().filter(|h| h.kind == GateKind::Delete(DeleteCause::ScaleIn)) {
            let entry = self.candidate(&pod.name, at);
            entry.result = None;
            entry.decided = None;
            if let Some(hook) = &pod.hook {
                entry.run = Some(hook.run_name.clone());
            }
        }
        for action in actions {
            let Action::PatchPod(change) = action else { continue };
            if change.reason != PatchReason::Lifecycle || !self.race.iter().any(|(name, _)| *name == change.pod.name) {
                continue;
            }
            if let Some(skipped) = back_to_serving(change) {
                let entry = self.candidate(&change.pod.name, at);
                entry.result = Some(if skipped { RaceResult::Skipped } else { RaceResult::Released });
                entry.decided = Some(at);
            }
        }
    }

    /// The race as the passes ran it (`None` when no pod joined one).
    pub fn race(&self) -> Option<Race> {
        if self.race.is_empty() {
            return None;
        }
        let candidates: Vec<RaceCandidate> = self
            .race
            .iter()
            .map(|(pod, entry)| {
                let hook = entry.run.as_ref().and_then(|run| {
                    self.steps.get(pod).and_then(|(_, step)| step.hooks.iter().rev().find(|h| &h.run == run))
                });
                RaceCandidate {
                    pod: pod.clone(),
                    joined: entry.joined,
                    result: entry.result.unwrap_or(RaceResult::Racing),
                    decided: entry.decided,
                    run: entry.run.clone(),
                    outcome: hook.map(|h| h.outcome),
                    measured: entry.run.as_ref().is_some_and(|run| self.measured.contains(run)),
                }
            })
            .collect();
        let named = |result: RaceResult| -> Vec<String> {
            candidates.iter().filter(|c| c.result == result).map(|c| c.pod.clone()).collect()
        };
        Some(Race { winners: named(RaceResult::Won), skipped: named(RaceResult::Skipped), candidates })
    }

    /// What the forecast of a race cannot know, as notes: under `as-now`, how runs without a measurement will read
    /// (they are assumed to succeed); under any assumption, the costs of cost probes that have not answered (the
    /// simulated hook-operator answers none, so those pods race as pods without a cost, in deletion order).
    pub fn race_notes(&self, race: &Race) -> Vec<Note> {
        let mut notes = Vec::new();
        // Said where the first of the pods concerned joins the race (or where the race starts).
        let race_start = race.candidates.iter().map(|c| c.joined).min().unwrap_or(0);
        if self.assume == Assume::AsNow {
            let unknown: Vec<&RaceCandidate> =
                race.candidates.iter().filter(|c| c.run.is_some() && !c.measured).collect();
            if let Some(at) = unknown.iter().map(|c| c.joined).min() {
                let unknown: Vec<&str> = unknown.iter().map(|c| c.pod.as_str()).collect();
                notes.push(Note {
                    at,
                    text: format!(
                        "as-now cannot know how the pre-delete hook of {} will read: no measurement yet, assumed to \
                         succeed (the winners may differ)",
                        unknown.join(", ")
                    ),
                    hook: None,
                });
            }
        }
        if !self.unanswered_probes.is_empty() {
            let pods: Vec<&str> = self.unanswered_probes.iter().map(String::as_str).collect();
            notes.push(Note {
                at: race_start,
                text: format!(
                    "the cost probe of {} has not answered: the forecast cannot know these costs and races those pods \
                     as pods without a cost, in deletion order (the race order may differ)",
                    pods.join(", ")
                ),
                hook: None,
            });
        }
        notes
    }

    /// Marks pods done once they are available (`min_ready_seconds` after turning ready, in state `Normal`, on
    /// `update_revision`) after their action.
    pub fn observe(&mut self, now: i64, pods: &[Pod], update_revision: Option<&str>, min_ready_seconds: i64) {
        let at = now - self.start;
        // Steps are keyed by the pod's name (the planned name for a new pod, shown as "new pod N").
        for (name, (_, step)) in self.steps.iter_mut() {
            if step.done.is_some() || step.acted.is_none() {
                continue;
            }
            if let Some(pod) = pods.iter().find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
                && is_available(pod, update_revision, now, min_ready_seconds)
            {
                step.done = Some(at);
            }
        }
    }

    /// Batches in order of the pass that started them.
    pub fn batches(&self) -> Vec<Batch> {
        let mut by_pass: BTreeMap<usize, Vec<&PodStep>> = BTreeMap::new();
        for (pass, step) in self.steps.values() {
            by_pass.entry(*pass).or_default().push(step);
        }
        by_pass
            .into_values()
            .enumerate()
            .map(|(i, mut steps)| {
                steps.sort_by_key(|s| (s.new, natural(&s.pod)));
                let ends = steps.iter().map(|s| s.done).collect::<Option<Vec<i64>>>().and_then(|d| d.into_iter().max());
                Batch {
                    index: i + 1,
                    starts: steps.iter().map(|s| s.started).min().unwrap_or_default(),
                    ends,
                    pods: steps.into_iter().cloned().collect(),
                }
            })
            .collect()
    }

    /// When the last pod action is done (or was taken, for one never done; or, for one never taken, when the race
    /// to empty skipped or released the pod, else when its hook ended).
    pub fn last_done(&self) -> Option<i64> {
        let decided = |name: &str| {
            self.race.iter().find(|(pod, _)| pod == name).and_then(|(_, e)| e.decided.filter(|_| e.result.is_some()))
        };
        self.steps
            .iter()
            .filter_map(|(name, (_, s))| {
                s.done
                    .or(s.acted)
                    .or_else(|| decided(name))
                    .or_else(|| s.hooks.iter().filter_map(|h| h.completes).max())
            })
            .max()
    }
}

/// The pods of `gd` a CloneSet lifecycle handler holds: in `PreparingDelete` / `PreparingUpdate` while any part of
/// the handler is on them, in `Updated` / `PreparingNormal` while a part is missing ([`lifecycle::what_releases`]).
/// `start` is the forecast's beginning (seconds since the epoch).
pub fn lifecycle_holds(gd: &GameDeployment, pods: &[Pod], start: i64) -> Vec<LifecycleHold> {
    let mut holds: Vec<LifecycleHold> = pods
        .iter()
        .filter(common::pod::is_active)
        .filter(|p| {
            ownership::controller_of(p.metadata.owner_references.as_ref())
                .is_some_and(|o| ownership::is_owned_by(o, gd))
        })
        .filter_map(|pod| {
            let state = lifecycle::state_of(pod);
            let (handler, release) = match state {
                LifecycleState::PreparingDelete => (Handler::PreDelete, true),
                LifecycleState::PreparingUpdate => (Handler::InPlaceUpdate, true),
                LifecycleState::Updated => (Handler::InPlaceUpdate, false),
                LifecycleState::PreparingNormal => (Handler::PreNormal, false),
                LifecycleState::Normal | LifecycleState::Updating => return None,
            };
            let what = lifecycle::what_releases(gd, handler, pod, release)?;
            let since = common::pod::annotation(pod, keys::LIFECYCLE_TIMESTAMP)
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(|t| t.as_second() - start);
            Some(LifecycleHold {
                pod: pod.metadata.name.clone().unwrap_or_default(),
                state: state.as_str().to_string(),
                handler: handler.field().to_string(),
                release: what,
                since,
            })
        })
        .collect();
    holds.sort_by_key(|h| natural(&h.pod));
    holds
}

/// Sorts "new pod 10" after "new pod 9".
fn natural(name: &str) -> (String, usize) {
    match name.rsplit_once(' ') {
        Some((head, n)) if n.bytes().all(|b| b.is_ascii_digit()) => (head.to_string(), n.parse().unwrap_or(0)),
        _ => (name.to_string(), 0),
    }
}

fn is_available(pod: &Pod, update_revision: Option<&str>, now: i64, min_ready_seconds: i64) -> bool {
    if !common::pod::is_active(pod) || lifecycle::state_of(pod) != LifecycleState::Normal {
        return false;
    }
    if common::pod::label(pod, keys::CONTROLLER_REVISION_HASH) != update_revision {
        return false;
    }
    if common::pod::condition(pod, keys::IN_PLACE_UPDATE_READY).is_some_and(|c| c.status != "True") {
        return false;
    }
    let Some(ready) = common::pod::condition(pod, "Ready").filter(|c| c.status == "True") else { return false };
    let since = ready.last_transition_time.as_ref().map_or(now, |t| t.0.as_second());
    now - since >= min_ready_seconds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_is_read_from_the_run_name() {
        let run: HookRun = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "predelete-gd-67864c6f65-s9rbp-my-check.2",
                         "labels": {"workload-revision": "gd-67864c6f65", "instance-id": "s9rbp"}},
            "spec": {"metrics": []}
        }))
        .unwrap();
        assert_eq!(template_of(&run), "my-check");
        let canary: HookRun = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "canary-gd-5d8f-1-smoke",
                         "labels": {"workload-revision": "gd-5d8f", "canary-step-index": "1"}},
            "spec": {"metrics": []}
        }))
        .unwrap();
        assert_eq!(template_of(&canary), "smoke");
    }
}
