//! The tree `kubectl gd get` shows, built from the objects as observed: pure, so the same objects and clock always
//! give the same tree (the golden test relies on it), and `-o json` prints exactly this.
//!
//! GameDeployment → its ControllerRevisions (newest first) → the pods running each revision → for a pod with a
//! HookRun, the run → each metric with its last measurement and the condition it is judged by.

use common::api::{HookCondition, HookPhase, HookRun, Measurement, Metric, MetricResult};
use common::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::rollout::{self, Verdict};
use crate::snapshot::{Snapshot, label, run_phase, runs_of};

/// `kubectl gd get` output, also its `-o json` document.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Tree {
    /// The GameDeployment's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// How it updates (`spec.updateStrategy` and its hooks).
    pub strategy: Strategy,
    /// Replica counts and revisions from its status.
    pub progress: Progress,
    /// The canary steps, when the update strategy has some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<Canary>,
    /// The operator's own `Progressing` condition (what it says the rollout waits for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progressing: Option<Condition>,
    /// What `kubectl gd status` concludes from the same objects.
    pub verdict: Verdict,
    /// Its revisions, newest first, each with its pods.
    pub revisions: Vec<Revision>,
}

/// The update strategy, as the tree's header shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// `spec.updateStrategy.type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `partition`, as written (a count or a percentage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// `maxUnavailable`, as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<String>,
    /// `maxSurge`, as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<String>,
    /// `paused`: updates stop, scaling goes on.
    pub paused: bool,
    /// The HookTemplates gating pods, by gate (`pre-delete: test`).
    pub hooks: Vec<String>,
}

/// Where the rollout stands, from the GameDeployment's status.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// `spec.replicas`.
    pub desired: i32,
    /// `status.updatedReplicas`: pods on the update revision.
    pub updated: i32,
    /// `status.updatedReadyReplicas`.
    pub updated_ready: i32,
    /// Updated pods available for `minReadySeconds` (`status.updatedAvailableReplicas`, as CloneSet).
    pub updated_available: i32,
    /// Pods that should end on the update revision, `replicas − partition` (`status.expectedUpdatedReplicas`).
    pub expected_updated: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// `status.replicas`: pods that exist.
    pub total: i32,
    /// `status.updateRevision`: the current template's revision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    /// `status.currentRevision`: the stable side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// `metadata.generation` not yet observed by the operator.
    pub stale: bool,
    /// How many pods declare each server state (`status.serverStates`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub server_states: std::collections::BTreeMap<String, i32>,
    /// The latest shadow hook results (`status.shadowHookResults`), newest last.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow_results: Vec<common::api::ShadowHookResult>,
}

/// The canary steps of the update strategy.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    /// 0-based index of the current step; `steps` when every step is done.
    pub step: i32,
    /// How many steps there are.
    pub steps: usize,
    /// The current step in words (`partition 3`, `pause (indefinite)`, `hook test`, `done`).
    pub current: String,
    /// Why the rollout is paused at this step (`PausedByCanaryPauseStep`, `PausedByStepBasedHook`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_reason: Option<String>,
    /// The current step's HookRun, when the step is a hook.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_run: Option<Run>,
}

/// A status condition of the GameDeployment.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// One CamelCase word (`RolloutComplete`, `ProgressDeadlineExceeded`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the operator says, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One revision of the GameDeployment with its pods.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// ControllerRevision name; pods whose revision has no ControllerRevision are grouped under their label.
    pub name: String,
    /// The ControllerRevision's `revision` number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number: Option<i64>,
    /// This is `status.updateRevision` (the current template).
    pub update: bool,
    /// This is `status.currentRevision` (the stable side).
    pub current: bool,
    /// The pods on this revision.
    pub pods: Vec<PodNode>,
}

/// One pod of a revision.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodNode {
    /// The pod's name.
    pub name: String,
    /// The revision the pod names (`controller-revision-hash`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// `status.phase`, or `Terminating` once deletion started.
    pub phase: String,
    /// The pod is Ready.
    pub ready: bool,
    /// `lifecycle.apps.kruise.io/state` (`Normal` when absent).
    pub state: String,
    /// Seconds in that state (from `lifecycle.apps.kruise.io/timestamp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_seconds: Option<i64>,
    /// Seconds since the pod was created.
    pub age_seconds: i64,
    /// Container restarts, summed.
    pub restarts: i32,
    /// The state its game server declares (`common::server_state`: a named state only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_state: Option<String>,
    /// `status.podIP`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The GameDeployment's hook condition for this pod (`status.pre*HookCondition`): why it is held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<Held>,
    /// The pod's HookRuns (found by its instance id, canary step runs left out), by name.
    pub runs: Vec<Run>,
}

impl PodNode {
    /// Held by a gate: waiting in a `Preparing*` state, or listed in a hook condition.
    pub fn is_held(&self) -> bool {
        self.held.is_some() || matches!(self.state.as_str(), "PreparingDelete" | "PreparingUpdate")
    }
}

/// Why a gate holds a pod, from the GameDeployment's hook condition.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Held {
    /// `pre-delete`, `pre-inplace` or `post-inplace`.
    pub gate: String,
    /// The held pod's HookRun phase as the condition records it.
    pub phase: HookPhase,
    /// The HookRun holding it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook_run: Option<String>,
    /// The condition's message (why the run failed, when it did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Seconds since the hook started for this pod (the condition's `startTime`).
    pub seconds: i64,
}

/// A HookRun, with what its metrics measured so far.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The HookRun's name.
    pub name: String,
    /// `hookrun-type` label (`pre-delete-step`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Its phase (`Pending` until the hook-operator first reconciled it).
    pub phase: HookPhase,
    /// Why it is in its phase, when the hook-operator says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since `status.startedAt` (or creation); for a completed run, until its last measurement finished.
    pub elapsed_seconds: i64,
    /// `spec.terminate` is set (skipped by `kubectl gd skip-hook`, or stopped).
    pub terminated: bool,
    /// Its metrics, in spec order.
    pub metrics: Vec<MetricNode>,
}

/// One metric of a HookRun.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricNode {
    /// The metric's name.
    pub name: String,
    /// Its phase (`Pending` until it started).
    pub phase: HookPhase,
    /// Measurements that counted, and how many the metric takes (`None`: until a limit decides).
    pub measured: i32,
    /// How many measurements it takes (`None`: until a limit decides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Successful measurements so far.
    pub successful: i32,
    /// Failed measurements so far.
    pub failed: i32,
    /// Inconclusive measurements so far.
    pub inconclusive: i32,
    /// Measurements that errored so far.
    pub error: i32,
    /// How a measurement is judged: `success: <expr>`, `failure: <expr>`, limits.
    pub judged_by: Vec<String>,
    /// Why the metric ended in its phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The newest measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<LastMeasurement>,
}

/// The newest measurement of a metric.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastMeasurement {
    /// The value measured, as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// How it was judged.
    pub phase: HookPhase,
    /// What went wrong, or which condition decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Seconds since it finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ago_seconds: Option<i64>,
}

fn seconds_since(now: Timestamp, then: Option<&Time>) -> Option<i64> {
    then.map(|t| (now.as_second() - t.0.as_second()).max(0))
}

fn int_or_string(v: &Option<IntOrString>) -> Option<String> {
    v.as_ref().map(|v| match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    })
}

/// Builds the tree as of `now`.
pub fn build(snapshot: &Snapshot, now: Timestamp) -> Tree {
    let gd = &snapshot.gd;
    let status = gd.status.clone().unwrap_or_default();
    let spec = &gd.spec;
    let update = &spec.update_strategy;
    let mut hooks = Vec::new();
    let gates = [
        ("pre-delete", spec.pre_delete_update_strategy.as_ref().and_then(|s| s.hook.as_ref())),
        ("pre-inplace", spec.pre_inplace_update_strategy.as_ref().and_then(|s| s.hook.as_ref())),
        ("post-inplace", spec.post_inplace_update_strategy.as_ref().and_then(|s| s.hook.as_ref())),
    ];
    for (gate, hook) in gates {
        if let Some(hook) = hook {
            hooks.push(format!("{gate}: {}", hook.template_name));
        }
    }
    let shadows = [
        ("pre-delete", spec.pre_delete_update_strategy.as_ref().and_then(|s| s.shadow_hook.as_ref())),
        ("pre-inplace", spec.pre_inplace_update_strategy.as_ref().and_then(|s| s.shadow_hook.as_ref())),
        ("post-inplace", spec.post_inplace_update_strategy.as_ref().and_then(|s| s.shadow_hook.as_ref())),
    ];
    for (gate, hook) in shadows {
        if let Some(hook) = hook {
            hooks.push(format!("{gate} shadow: {}", hook.template_name));
        }
    }
    let steps = update.canary.as_ref().map_or(&[][..], |c| c.steps.as_slice());
    for (index, step) in steps.iter().enumerate() {
        if let Some(hook) = &step.hook {
            hooks.push(format!("canary step {}: {}", index + 1, hook.template_name));
        }
    }
    for (index, step) in steps.iter().enumerate() {
        if let Some(hook) = &step.shadow_hook {
            hooks.push(format!("canary step {} shadow: {}", index + 1, hook.template_name));
        }
    }
    let strategy = Strategy {
        type_: format!("{:?}", update.type_),
        partition: int_or_string(&update.partition),
        max_unavailable: int_or_string(&update.max_unavailable),
        max_surge: int_or_string(&update.max_surge),
        paused: update.paused,
        hooks,
    };
    let progress = Progress {
        desired: spec.replicas.unwrap_or(1),
        updated: status.updated_replicas,
        updated_ready: status.updated_ready_replicas,
        updated_available: status.updated_available_replicas,
        expected_updated: status.expected_updated_replicas,
        ready: status.ready_replicas,
        available: status.available_replicas,
        total: status.replicas,
        update_revision: status.update_revision.clone(),
        current_revision: status.current_revision.clone(),
        stale: status.observed_generation.unwrap_or(0) < gd.metadata.generation.unwrap_or(0),
        server_states: status.server_states.clone(),
        shadow_results: status.shadow_hook_results.clone(),
    };
    let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing").map(|c| Condition {
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
    });

    let canary = update.canary.as_ref().filter(|c| !c.steps.is_empty()).map(|c| {
        let step = status.current_step_index.unwrap_or(c.steps.len() as i32);
        let current = match c.steps.get(step.max(0) as usize) {
            None => "done".to_string(),
            Some(s) => {
                let mut parts = Vec::new();
                if let Some(p) = &s.partition {
                    parts.push(format!("partition {}", int_or_string(&Some(p.clone())).unwrap_or_default()));
                }
                if let Some(p) = &s.pause {
                    parts.push(match p.duration {
                        Some(d) => format!("pause {d}s"),
                        None => "pause (until resumed)".to_string(),
                    });
                }
                if let Some(h) = &s.hook {
                    parts.push(format!("hook {}", h.template_name));
                }
                parts.join(", ")
            }
        };
        let step_run = status
            .canary
            .as_ref()
            .and_then(|c| c.current_step_hook_run.as_deref())
            .and_then(|name| snapshot.runs.iter().find(|r| r.metadata.name.as_deref() == Some(name)))
            .map(|r| run_node(r, now));
        Canary {
            step,
            steps: c.steps.len(),
            current,
            pause_reason: status.pause_conditions.first().map(|p| format!("{:?}", p.reason)),
            step_run,
        }
    });

    // Hook conditions by pod.
    let conditions: Vec<(&str, &HookCondition)> = [
        ("pre-delete", &status.pre_delete_hook_condition),
        ("pre-inplace", &status.pre_inplace_hook_condition),
        ("post-inplace", &status.post_inplace_hook_condition),
    ]
    .into_iter()
    .flat_map(|(gate, list)| list.iter().map(move |c| (gate, c)))
    .collect();

    let mut pods: Vec<PodNode> = snapshot.pods.iter().map(|p| pod_node(p, snapshot, &conditions, now)).collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));

    let mut revisions: Vec<(i64, Revision)> = snapshot
        .revisions
        .iter()
        .map(|r| {
            let name = r.metadata.name.clone().unwrap_or_default();
            (
                r.revision.unwrap_or(0),
                Revision {
                    update: status.update_revision.as_deref() == Some(name.as_str()),
                    current: status.current_revision.as_deref() == Some(name.as_str()),
                    number: r.revision,
                    name,
                    pods: Vec::new(),
                },
            )
        })
        .collect();
    // Newest first, as `kubectl argo rollouts get` shows them.
    revisions.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let mut revisions: Vec<Revision> = revisions.into_iter().map(|(_, r)| r).collect();
    for pod in pods {
        let revision = pod.revision.clone().unwrap_or_else(|| "<no revision>".to_string());
        match revisions.iter_mut().find(|r| r.name == revision) {
            Some(r) => r.pods.push(pod),
            None => revisions.push(Revision {
                update: status.update_revision.as_deref() == Some(revision.as_str()),
                current: status.current_revision.as_deref() == Some(revision.as_str()),
                name: revision,
                number: None,
                pods: vec![pod],
            }),
        }
    }
    let verdict = rollout::judge(snapshot, now);
    Tree {
        name: gd.metadata.name.clone().unwrap_or_default(),
        namespace: gd.metadata.namespace.clone().unwrap_or_default(),
        strategy,
        progress,
        canary,
        progressing,
        verdict,
        revisions,
    }
}

fn pod_node(pod: &Pod, snapshot: &Snapshot, conditions: &[(&str, &HookCondition)], now: Timestamp) -> PodNode {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let phase = if pod.metadata.deletion_timestamp.is_some() {
        "Terminating".to_string()
    } else {
        common::pod::phase(pod).unwrap_or("Pending").to_string()
    };
    let state_since = common::pod::annotation(pod, keys::LIFECYCLE_TIMESTAMP)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map(|t| (now.as_second() - t.as_second()).max(0));
    let held = conditions.iter().find(|(_, c)| c.pod_name == name).map(|(gate, c)| Held {
        gate: gate.to_string(),
        phase: c.phase,
        hook_run: c.hook_run.clone(),
        message: c.message.clone(),
        seconds: seconds_since(now, Some(&c.start_time)).unwrap_or(0),
    });
    PodNode {
        revision: common::pod::label(pod, keys::CONTROLLER_REVISION_HASH).map(str::to_string),
        phase,
        ready: common::pod::is_ready(pod),
        state: common::pod::label(pod, keys::LIFECYCLE_STATE).unwrap_or("Normal").to_string(),
        state_seconds: state_since,
        age_seconds: seconds_since(now, pod.metadata.creation_timestamp.as_ref()).unwrap_or(0),
        restarts: common::pod::restart_count(pod),
        server_state: common::server_state::ServerState::of(pod).name().map(str::to_string),
        ip: Some(common::pod::pod_ip(pod).to_string()).filter(|ip| !ip.is_empty()),
        held,
        runs: runs_of(pod, &snapshot.runs).into_iter().map(|r| run_node(r, now)).collect(),
        name,
    }
}

fn run_node(run: &HookRun, now: Timestamp) -> Run {
    let status = run.status.clone().unwrap_or_default();
    let phase = run_phase(run);
    let started = status.started_at.as_ref().or(run.metadata.creation_timestamp.as_ref());
    let last_finished = status
        .metric_results
        .iter()
        .flat_map(|r| r.measurements.iter())
        .filter_map(|m| m.finished_at.as_ref())
        .map(|t| t.0)
        .max();
    let until = match (phase.is_completed(), last_finished) {
        (true, Some(t)) => t,
        _ => now,
    };
    let elapsed = started.map(|s| (until.as_second() - s.0.as_second()).max(0)).unwrap_or(0);
    let metrics = run
        .spec
        .metrics
        .iter()
        .map(|m| metric_node(m, status.metric_results.iter().find(|r| r.name == m.name), now))
        .collect();
    Run {
        name: run.metadata.name.clone().unwrap_or_default(),
        kind: label(&run.metadata.labels, keys::HOOKRUN_TYPE).map(str::to_string),
        phase,
        message: status.message.clone(),
        elapsed_seconds: elapsed,
        terminated: run.spec.terminate,
        metrics,
    }
}

/// How the hook-operator judges a measurement of `metric`, in the manifest's own words — and, where the run shows
/// measurements spaced otherwise than `interval` says ([`measured_spacing`]), that spacing too.
pub fn judged_by(metric: &Metric, result: Option<&MetricResult>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(c) = &metric.success_condition {
        out.push(format!("success: {c}"));
    }
    if let Some(c) = &metric.failure_condition {
        out.push(format!("failure: {c}"));
    }
    if metric.success_condition.is_none() && metric.failure_condition.is_none() {
        out.push("success: the call succeeds".to_string());
    }
    let mut limits = Vec::new();
    if metric.count > 0 {
        limits.push(format!("count {}", metric.count));
    }
    if let Some(i) = &metric.interval {
        let declared = common::duration::parse_flexible(i).ok();
        match (declared, result.and_then(measured_spacing)) {
            // A quarter off: not the rounding of whole seconds in status, a hook-operator that scales intervals.
            (Some(declared), Some(seen)) if seen.abs_diff(declared) * 4 > declared => limits.push(format!(
                "every {i} (~{} apart here: this hook-operator scales intervals)",
                common::duration::format_go(seen)
            )),
            _ => limits.push(format!("every {i}")),
        }
    }
    limits.push(format!("failureLimit {}", metric.failure_limit));
    if metric.successful_limit > 0 {
        limits.push(format!("successfulLimit {}", metric.successful_limit));
    }
    if metric.inconclusive_limit > 0 {
        limits.push(format!("inconclusiveLimit {}", metric.inconclusive_limit));
    }
    if let Some(l) = metric.consecutive_error_limit {
        limits.push(format!("consecutiveErrorLimit {l}"));
    }
    if let Some(l) = metric.consecutive_successful_limit {
        limits.push(format!("consecutiveSuccessfulLimit {l}"));
    }
    out.push(limits.join(", "));
    out
}

/// How far apart this run's measurements are: between the starts of its last two measurements once it has two (what
/// a person timing them sees), before that as the hook-operator scheduled the next one (the last measurement's
/// `resumeAt` after its `finishedAt`: whole seconds, rounded up, so up to a second more than the spacing). `Error`
/// measurements are left out (an error is retried on its own schedule).
fn measured_spacing(result: &MetricResult) -> Option<std::time::Duration> {
    let mut measured = result.measurements.iter().rev().filter(|m| m.phase != Some(HookPhase::Error));
    let last = measured.next()?;
    let seconds = match measured.next().and_then(|m| m.started_at.as_ref()).zip(last.started_at.as_ref()) {
        Some((before, latest)) => latest.0.as_second().checked_sub(before.0.as_second())?,
        None => last.resume_at.as_ref()?.0.as_second().checked_sub(last.finished_at.as_ref()?.0.as_second())?,
    };
    Some(std::time::Duration::from_secs(u64::try_from(seconds).ok()?))
}

fn metric_node(metric: &Metric, result: Option<&MetricResult>, now: Timestamp) -> MetricNode {
    let last: Option<&Measurement> = result.and_then(|r| r.measurements.last());
    MetricNode {
        name: metric.name.clone(),
        phase: result.and_then(|r| r.phase).unwrap_or(HookPhase::Pending),
        measured: result.map_or(0, |r| r.count),
        count: (metric.count > 0).then_some(metric.count),
        successful: result.map_or(0, |r| r.successful),
        failed: result.map_or(0, |r| r.failed),
        inconclusive: result.map_or(0, |r| r.inconclusive),
        error: result.map_or(0, |r| r.error),
        judged_by: judged_by(metric, result),
        message: result.and_then(|r| r.message.clone()),
        last: last.map(|m| LastMeasurement {
            value: m.value.clone(),
            phase: m.phase.unwrap_or(HookPhase::Pending),
            message: m.message.clone(),
            ago_seconds: seconds_since(now, m.finished_at.as_ref()),
        }),
    }
}
