//! The forecast behind `kubectl gd plan`: what a change to a GameDeployment will do, in what order and through which
//! hooks, before it is applied. It runs the operator's own [`crate::planner::plan`] pass after pass over a
//! simulated copy of the live objects, and sends each pass's actions with the operator's own executor
//! ([`crate::controller::execute`]: its order, batches and slow start), so the order it shows is the order the
//! operator follows.
//!
//! - [`cluster`]: the simulated cluster (a tiny kubelet, and the executor's passes);
//! - [`sim_writes`]: the simulated cluster's answers to the executor's requests (API server semantics);
//! - [`hook_operator`]: the simulated hook-operator (a HookRun completes when its metrics' schedule says, as the
//!   measurements are assumed to read: [`Assume`]);
//! - [`trust`]: the forecast's own signing key (live runs are re-signed in memory, never written back);
//! - [`takeover`]: per pod, whether taking the fleet over changes it and why (`kubectl gd plan --takeover`);
//! - [`timeline`]: the recorded timeline (batches, each pod's action and hooks, where the rollout stops).
//!
//! The clock: a pass every simulated second while anything changes (pods becoming ready as the kubelet makes them,
//! actions taken); when a pass changes nothing the clock moves to the next moment something is due — a HookRun
//! completing, or the planner's own `requeue_after` (grace periods, `minReadySeconds`, a timed canary pause), which
//! is when the operator would look again too. The forecast stops when nothing changes and nothing is due (the
//! rollout is complete, stops at its partition or a pause, a hook failed, or it is stuck: the status the planner
//! computed says why), or at a simulated time limit.
//!
//! Nothing here writes to a cluster: the caller reads the objects (get and list only) and gets data back.

pub mod cluster;
pub mod hook_operator;
pub(crate) mod requests;
pub(crate) mod sim_writes;
pub mod takeover;
pub(crate) mod timeline;
pub(crate) mod trust;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::api::{GameDeployment, GameDeploymentStatus, HookPhase, HookRun, HookTemplate, ScaleInMode};
use common::cached_pod::Pod;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::jiff::Timestamp;

pub use hook_operator::{Assume, Timing};
pub use timeline::{
    Batch, Counts, HookWait, LifecycleHold, Note, PodAction, PodStep, Race, RaceCandidate, RaceResult, Stop,
    StopReason, Timeline,
};

use crate::hookrun_keys::{KeyError, Keyring};
use cluster::SimCluster;
use hook_operator::SimHookOperator;
use timeline::Recorder;

/// The live objects, as read (the GameDeployment with the change already made to it).
#[derive(Debug, Clone)]
pub struct Live {
    /// The GameDeployment, with the change the forecast is about already made to its spec.
    pub gd: GameDeployment,
    /// The namespace's pods (at least those the GameDeployment's selector matches).
    pub pods: Vec<Pod>,
    /// The GameDeployment's ControllerRevisions: which revision each pod is on, and whether the update revision exists.
    pub revisions: Vec<ControllerRevision>,
    /// The namespace's HookRuns: runs already under way are continued from their measurements, not restarted.
    pub hook_runs: Vec<HookRun>,
    /// The namespace's HookTemplates: their metrics give each hook's probe schedule.
    pub hook_templates: Vec<HookTemplate>,
    /// `io.tencent.bcs.dev/node-deletion-cost` by node.
    pub node_costs: BTreeMap<String, f64>,
    /// When the objects were read: the forecast's second 0.
    pub now: Timestamp,
}

/// What the forecast assumes where the cluster cannot tell it.
#[derive(Debug, Clone)]
pub struct Options {
    /// How hooks end (`--assume-hooks`).
    pub assume: Assume,
    /// The hook-operator's timing (its `--interval-scale`), which spaces the probes.
    pub timing: Timing,
    /// Simulated seconds after which the forecast gives up.
    pub max_seconds: i64,
}

impl Default for Options {
    fn default() -> Self {
        Self { assume: Assume::default(), timing: Timing::default(), max_seconds: 24 * 3600 }
    }
}

/// Why no forecast could be made.
#[derive(Debug, thiserror::Error)]
pub enum ForecastError {
    /// The simulated operator signs its runs' attempt stamps like the real one; its throwaway key could not be made.
    #[error("cannot make the forecast's signing key: {0}")]
    Keys(#[from] KeyError),
}

fn counts(status: Option<&GameDeploymentStatus>) -> Counts {
    status.map_or_else(Counts::default, |s| Counts {
        replicas: s.replicas,
        updated: s.updated_replicas,
        ready: s.ready_replicas,
        available: s.available_replicas,
    })
}

/// Everything in the spec and status that moves as the rollout moves (compared pass to pass to see whether anything
/// changed): counts, the canary step and its pause, conditions and hook conditions (their timestamps left out).
fn progress(gd: &GameDeployment, status: &GameDeploymentStatus) -> String {
    let conditions: Vec<_> = status.conditions.iter().map(|c| (&c.type_, &c.status, &c.reason, &c.message)).collect();
    let hooks: Vec<_> =
        [&status.pre_delete_hook_condition, &status.pre_inplace_hook_condition, &status.post_inplace_hook_condition]
            .into_iter()
            .flatten()
            .map(|c| (&c.pod_name, c.phase, &c.hook_run))
            .collect();
    format!(
        "{:?}",
        (
            (status.replica_counts(), status.expected_updated_replicas),
            (status.current_step_index, &status.current_step_hash, status.pause_conditions.len()),
            gd.spec.update_strategy.paused,
            conditions,
            hooks,
            serde_json::to_string(&status.canary).unwrap_or_default(),
        )
    )
}

fn progressing_message(status: &GameDeploymentStatus) -> String {
    crate::planner::status::condition(status, "Progressing")
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| "no Progressing condition".into())
}

/// Where a rollout that no longer moves stands, from its spec and the status the planner computed.
fn classify(gd: &GameDeployment, status: &GameDeploymentStatus) -> (StopReason, String) {
    let failed =
        [&status.pre_delete_hook_condition, &status.pre_inplace_hook_condition, &status.post_inplace_hook_condition]
            .into_iter()
            .flatten()
            .find(|c| matches!(c.phase, HookPhase::Failed | HookPhase::Error | HookPhase::Inconclusive));
    if let Some(c) = failed {
        let message = c.message.clone().unwrap_or_else(|| format!("the hook of pod {} failed", c.pod_name));
        return (StopReason::HookFailed, format!("pod {}: {message}", c.pod_name));
    }
    // A failed canary is rolled back: never "complete", however many pods are back on the stable revision.
    if status.canary.as_ref().is_some_and(|c| c.rollback.is_some()) {
        return (StopReason::RolledBack, progressing_message(status));
    }
    // A failed canary step hook that holds (`onFailure: Hold`) pauses the rollout: a failure, as `kubectl gd
    // status` says of it, not a pause a person ends.
    if status.pause_conditions.iter().any(|p| p.reason == common::api::PauseReason::PausedByStepBasedHook) {
        return (StopReason::HookFailed, progressing_message(status));
    }
    let replicas = gd.spec.replicas.unwrap_or(1);
    if status.replicas == replicas && status.updated_available_replicas >= replicas {
        return (StopReason::Complete, progressing_message(status));
    }
    if gd.spec.update_strategy.paused || !status.pause_conditions.is_empty() {
        return (StopReason::Paused, progressing_message(status));
    }
    // At the partition only once every pod is available (a server in `Maintaining` never is): new pods still within
    // `minReadySeconds` are waited for.
    let maintaining = status.server_states.get("Maintaining").copied().unwrap_or(0);
    if status.replicas == replicas
        && status.available_replicas + maintaining >= replicas
        && status.updated_available_replicas >= status.expected_updated_replicas
        && status.expected_updated_replicas < replicas
    {
        return (StopReason::Partition, progressing_message(status));
    }
    (StopReason::Stuck, progressing_message(status))
}

/// A rollout that ends (stuck, at the time limit, or complete or at its partition by the status — which counts a
/// `PreparingNormal` pod as available) while lifecycle handlers hold pods waits for them: nothing in the simulated
/// cluster releases a handler, only an outside controller does. A failed hook or a pause stays the reason.
fn held_by_handlers(stop: Stop, holds: &[LifecycleHold]) -> Stop {
    let ends =
        matches!(stop.reason, StopReason::Stuck | StopReason::TimeLimit | StopReason::Complete | StopReason::Partition);
    if holds.is_empty() || !ends {
        return stop;
    }
    let waits: Vec<String> = holds
        .iter()
        .map(|h| format!("pod {} in {} waits for the {} lifecycle handler: {}", h.pod, h.state, h.handler, h.release))
        .collect();
    Stop { reason: StopReason::LifecycleHold, at: stop.at, message: format!("{}; {}", waits.join("; "), stop.message) }
}

/// Whether the kubelet still has work on a pod (scheduling, containers starting).
fn settling(pods: &[Pod]) -> bool {
    pods.iter().filter(common::pod::is_active).any(|p| {
        let status = p.status.as_ref();
        status.and_then(|s| s.phase.as_deref()) != Some("Running")
            || status.and_then(|s| s.container_statuses.as_ref()).is_some_and(|c| c.iter().any(|c| !c.ready))
    })
}

/// Forecasts the rollout of `live.gd` (already changed) from the live objects.
pub fn forecast(live: Live, options: &Options) -> Result<Timeline, ForecastError> {
    let (keys, _) = Keyring::generate()?;
    let gd_uid = live.gd.metadata.uid.clone().unwrap_or_default();
    let hook_runs: Vec<Arc<HookRun>> = live
        .hook_runs
        .into_iter()
        .map(|mut run| {
            trust::resign(&mut run, &gd_uid, &keys);
            Arc::new(run)
        })
        .collect();
    let before = counts(live.gd.status.as_ref());
    let (name, namespace) =
        (live.gd.metadata.name.clone().unwrap_or_default(), live.gd.metadata.namespace.clone().unwrap_or_default());
    let min_ready_seconds = i64::from(live.gd.spec.min_ready_seconds.max(0));
    let mut cluster = SimCluster::with_keys(live.gd, Arc::new(keys));
    cluster.pods = live.pods;
    cluster.revisions = live.revisions;
    cluster.hook_runs = hook_runs;
    cluster.hook_templates = live.hook_templates;
    cluster.node_costs = live.node_costs;
    cluster.now = live.now.as_second();
    let start = cluster.now;
    let mut recorder = Recorder::new(start, options.assume, options.timing);
    let mut hooks = SimHookOperator::new(options.assume, options.timing);
    recorder.seed(cluster.now, &cluster.pods, &cluster.hook_runs);
    let mut last_progress = cluster.gd.status.as_ref().map(|s| progress(&cluster.gd, s));
    let mut passes = 0;
    let stop = loop {
        let hooks_moved = hooks.step(&mut cluster.hook_runs, cluster.now);
        let plan = cluster.plan();
        recorder.record(passes, cluster.now, &cluster.pods, &plan.actions);
        recorder.record_held(passes, cluster.now, &plan.held, &plan.actions);
        cluster.finish_pass(&plan);
        passes += 1;
        let now_progress = Some(progress(&cluster.gd, &plan.status));
        // What the executor sent, not what the plan asked for: a batch of consumed runs it holds back while the
        // rollout is in progress is no change (a rollout stopped there would otherwise be passed every second).
        let wrote = cluster.sent.iter().any(|s| s.request.writes());
        let changed = wrote || hooks_moved || now_progress != last_progress;
        last_progress = now_progress;
        let mut step = 1;
        if !changed && !settling(&cluster.pods) {
            let requeue = plan.requeue_after.map(|d| cluster.now + i64::try_from(d.as_secs()).unwrap_or(i64::MAX) + 1);
            let due = [hooks.next_completion(&cluster.hook_runs), requeue].into_iter().flatten().min();
            let (reason, message) = classify(&cluster.gd, &plan.status);
            let done = matches!(
                reason,
                StopReason::Complete | StopReason::Partition | StopReason::HookFailed | StopReason::RolledBack
            );
            match due {
                Some(at) if !(done && hooks.next_completion(&cluster.hook_runs).is_none()) => {
                    step = (at - cluster.now).max(1);
                }
                _ => {
                    let never = hooks.never_completing(&cluster.hook_runs);
                    let message = if reason == StopReason::Stuck && !never.is_empty() {
                        format!(
                            "{message}; HookRun(s) {} never complete under this assumption (no count or limit ends \
                             their metrics)",
                            never.join(", ")
                        )
                    } else {
                        message
                    };
                    break Stop { reason, at: cluster.now - start, message };
                }
            }
        }
        if cluster.now + step - start > options.max_seconds {
            let message = format!(
                "the forecast stopped after {} simulated seconds: {}",
                options.max_seconds,
                progressing_message(&plan.status)
            );
            break Stop { reason: StopReason::TimeLimit, at: cluster.now - start, message };
        }
        cluster.tick(step);
        let update_revision = cluster.update_revision();
        recorder.observe(cluster.now, &cluster.pods, update_revision.as_deref(), min_ready_seconds);
    };
    let batches = recorder.batches();
    let total_seconds = recorder.last_done().unwrap_or(0);
    let racing = cluster
        .gd
        .spec
        .scale_strategy
        .as_ref()
        .and_then(|s| s.scale_in_policy.as_ref())
        .is_some_and(|p| p.mode == ScaleInMode::RaceToEmpty);
    let race = recorder.race().filter(|_| racing);
    if let Some(race) = &race {
        let notes = recorder.race_notes(race);
        recorder.notes.extend(notes);
        recorder.notes.sort_by_key(|n| n.at);
    }
    let mut lifecycle_holds = timeline::lifecycle_holds(&cluster.gd, &cluster.pods, start);
    for hold in &mut lifecycle_holds {
        hold.pod = recorder.shown(&hold.pod);
    }
    let stop = held_by_handlers(stop, &lifecycle_holds);
    // While a failed canary is rolled back, `status.updateRevision` is the stable revision: the change's revision is
    // the one that failed.
    let rollback = cluster.gd.status.as_ref().and_then(|s| s.canary.as_ref()).and_then(|c| c.rollback.clone());
    let update_revision = rollback.as_ref().map(|r| r.failed_revision.clone()).or_else(|| cluster.update_revision());
    Ok(Timeline {
        name,
        namespace,
        assume: options.assume,
        update_revision,
        rolled_back_to: rollback.map(|r| r.stable_revision),
        batches,
        notes: recorder.notes,
        race,
        lifecycle_holds,
        stop,
        total_seconds,
        before,
        after: counts(cluster.gd.status.as_ref()),
        passes,
    })
}

#[cfg(test)]
mod tests;
