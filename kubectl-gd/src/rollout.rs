//! Where a rollout stands, from the same objects the tree shows: the verdict `kubectl gd status` waits for.
//!
//! It trusts the operator's own judgement (`status.observedGeneration`, the `Progressing` condition, the hook
//! conditions) and adds what a CI job needs on top: a failed hook is reported as soon as either the
//! GameDeployment's hook condition or the HookRun itself shows it, naming the pod and the HookRun.

use common::api::{HookPhase, PauseReason};
use common::hookrun::HookKind;
use common::keys;
use serde::Serialize;

use crate::tree::{Snapshot, run_phase, runs_of};

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub enum State {
    /// Every pod the rollout is meant to move runs the update revision and is available.
    Complete,
    Progressing,
    /// Paused by `spec.updateStrategy.paused` or a canary pause step, with work left.
    Paused,
    /// A hook failed (or cannot start), or the spec is invalid: nothing moves until a person acts.
    Failed,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub state: State,
    pub message: String,
    /// The pod held by the failed hook, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook_run: Option<String>,
}

impl Verdict {
    fn new(state: State, message: impl Into<String>) -> Self {
        Self { state, message: message.into(), pod: None, hook_run: None }
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

/// Where the rollout stands.
pub fn judge(snapshot: &Snapshot) -> Verdict {
    let gd = &snapshot.gd;
    let status = gd.status.clone().unwrap_or_default();
    let generation = gd.metadata.generation.unwrap_or(0);
    let observed = status.observed_generation.unwrap_or(0);
    let name = gd.metadata.name.clone().unwrap_or_default();

    // 1. Failed hooks, as the GameDeployment reports them.
    let lists = [
        (&status.pre_delete_hook_condition, HookKind::PreDelete),
        (&status.pre_inplace_hook_condition, HookKind::PreInplace),
        (&status.post_inplace_hook_condition, HookKind::PostInplace),
    ];
    for (list, kind) in lists {
        if retry_requested(snapshot, kind) {
            continue;
        }
        // The run, when it exists, is fresher than the status: a condition naming a run that is gone (deleted for
        // a retry) or that was recreated under the same name and is running again is stale.
        let failed_now = |c: &&common::api::HookCondition| match c.hook_run.as_deref() {
            Some(n) => snapshot
                .runs
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(n))
                .is_some_and(|r| failed(run_phase(r))),
            None => failed(c.phase),
        };
        // An entry released without its hook (`releasedBy`: a deadline, a fallback, a skip) is a record, not a hold.
        if let Some(c) = list.iter().filter(|c| failed(c.phase) && c.released_by.is_none()).find(failed_now) {
            let run = c
                .hook_run
                .as_deref()
                .and_then(|n| snapshot.runs.iter().find(|r| r.metadata.name.as_deref() == Some(n)));
            let why = run
                .and_then(|r| r.status.as_ref().and_then(|s| s.message.clone()))
                .or_else(|| c.message.clone())
                .unwrap_or_default();
            return Verdict {
                state: State::Failed,
                message: format!(
                    "pod {} is held: HookRun {} ended {}: {why} (run `kubectl gd retry {name}` once the cause is fixed; \
                     it sets {})",
                    c.pod_name,
                    c.hook_run.as_deref().unwrap_or("<none>"),
                    c.phase,
                    retry_hint(Some(kind.type_label())),
                ),
                pod: Some(c.pod_name.clone()),
                hook_run: c.hook_run.clone(),
            };
        }
    }
    // 2. ... or as the HookRun shows it before the GameDeployment's next status write.
    for pod in &snapshot.pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let state = common::pod::label(pod, keys::LIFECYCLE_STATE).unwrap_or("Normal");
        if !matches!(state, "PreparingDelete" | "PreparingUpdate" | "Updated") {
            continue;
        }
        let revision = common::pod::label(pod, keys::CONTROLLER_REVISION_HASH);
        for run in runs_of(pod, &snapshot.runs) {
            let labels = run.metadata.labels.clone().unwrap_or_default();
            let kind = HookKind::POD_HOOKS
                .into_iter()
                .find(|k| labels.get(keys::HOOKRUN_TYPE).map(String::as_str) == Some(k.type_label()));
            let released = lists.iter().any(|(list, _)| {
                list.iter().any(|c| c.released_by.is_some() && c.hook_run.as_deref() == run.metadata.name.as_deref())
            });
            if run.metadata.deletion_timestamp.is_some()
                || released
                || labels.get(keys::HOOKRUN_WORKLOAD_REVISION).map(String::as_str) != revision
                || !failed(run_phase(run))
                || kind.is_some_and(|k| retry_requested(snapshot, k))
            {
                continue;
            }
            let run_name = run.metadata.name.clone().unwrap_or_default();
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let why = run.status.as_ref().and_then(|s| s.message.clone()).unwrap_or_default();
            return Verdict {
                state: State::Failed,
                message: format!(
                    "pod {pod_name} is held: HookRun {run_name} ended {}: {why} (run `kubectl gd retry {name}` once \
                     the cause is fixed; it sets {})",
                    run_phase(run),
                    retry_hint(labels.get(keys::HOOKRUN_TYPE).map(String::as_str)),
                ),
                pod: Some(pod_name),
                hook_run: Some(run_name),
            };
        }
    }
    // 3. A hook that cannot even start (missing HookTemplate, unresolved arg).
    if let Some(c) = status.conditions.iter().find(|c| c.type_ == "HookBlocked" && c.status == "True") {
        let held = status.pre_delete_hook_condition.iter().chain(&status.pre_inplace_hook_condition).next();
        return Verdict {
            state: State::Failed,
            message: format!("a hook cannot start: {}", c.message.clone().unwrap_or_default()),
            pod: held.map(|h| h.pod_name.clone()),
            hook_run: held.and_then(|h| h.hook_run.clone()),
        };
    }
    // 4. A failed canary step hook pauses the rollout.
    if status.pause_conditions.iter().any(|p| p.reason == PauseReason::PausedByStepBasedHook) {
        let run = status.canary.as_ref().and_then(|c| c.current_step_hook_run.clone());
        let why = run
            .as_deref()
            .and_then(|n| snapshot.runs.iter().find(|r| r.metadata.name.as_deref() == Some(n)))
            .and_then(|r| r.status.as_ref().and_then(|s| s.message.clone()))
            .unwrap_or_default();
        return Verdict {
            state: State::Failed,
            message: format!(
                "canary step {} is paused: its HookRun {} failed: {why} (`kubectl gd promote {name}` overrides it)",
                status.current_step_index.unwrap_or(0),
                run.as_deref().unwrap_or("<none>")
            ),
            pod: None,
            hook_run: run,
        };
    }
    let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing");
    let reason = progressing.and_then(|c| c.reason.as_deref()).unwrap_or("");
    let message = progressing.and_then(|c| c.message.clone()).unwrap_or_default();
    if reason == "InvalidSpec" {
        return Verdict::new(State::Failed, format!("the spec is invalid: {message}"));
    }
    if observed < generation {
        return Verdict::new(
            State::Progressing,
            format!("waiting for the operator to observe generation {generation} (observed {observed})"),
        );
    }
    // 5. Paused with work left; a timed canary pause ends by itself, so that one is still progress.
    let step = status.current_step_index.unwrap_or(0);
    let canary_pause = gd.spec.update_strategy.paused
        && status.pause_conditions.iter().any(|p| p.reason == PauseReason::PausedByCanaryPauseStep);
    let timed = gd
        .spec
        .update_strategy
        .canary
        .as_ref()
        .and_then(|c| c.steps.get(step.max(0) as usize))
        .and_then(|s| s.pause.as_ref())
        .and_then(|p| p.duration);
    if canary_pause {
        return match timed {
            Some(seconds) => {
                Verdict::new(State::Progressing, format!("canary step {step} pauses the rollout for {seconds}s"))
            }
            None => Verdict::new(
                State::Paused,
                format!("canary step {step} pauses the rollout until resumed (`kubectl gd promote {name}`)"),
            ),
        };
    }
    if reason == "Paused" {
        return Verdict::new(State::Paused, format!("{message} (`kubectl gd resume {name}` resumes it)"));
    }
    // 6. Complete: the operator says so, every desired pod exists, nothing waits on a gate, canary steps done.
    let desired = gd.spec.replicas.unwrap_or(1);
    let steps = gd.spec.update_strategy.canary.as_ref().map_or(0, |c| c.steps.len()) as i32;
    let steps_done = steps == 0 || status.current_step_index.is_none_or(|i| i >= steps);
    let nothing_held = status.pre_delete_hook_condition.is_empty() && status.pre_inplace_hook_condition.is_empty();
    if matches!(reason, "RolloutComplete" | "PartitionAvailable")
        && status.replicas == desired
        && nothing_held
        && steps_done
    {
        return Verdict::new(State::Complete, message);
    }
    if message.is_empty() {
        return Verdict::new(State::Progressing, "waiting for the operator to report progress");
    }
    Verdict::new(State::Progressing, message)
}
