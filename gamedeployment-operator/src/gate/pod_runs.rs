//! Which hook gates a change ([`hook_for`]) and under which `hookPolicy` ([`policy_for`]), the runs of an attempt
//! ([`attempt_runs`]), and the run a pod needs ([`build_pod_run`]): what [`super::verdict()`] and the planner's
//! post-inplace step read about pod HookRuns.

use common::api::Argument;
use common::api::{GameDeployment, HookGatePolicy, HookPhase, HookRun, HookStep};
use common::cached_pod::Pod;
use common::hookrun::{self, HookKind, NewHookRun};
use common::keys::{self, hook_args};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::attempt::{self, Attempt};
use super::{DeleteCause, GateKind, GateState};
use crate::lifecycle::LifecycleState;
use crate::ownership;

/// The hook configured for a change, and the run kind it creates (in-place falls back to the pre-delete hook).
pub fn hook_for(gd: &GameDeployment, kind: GateKind) -> Option<(HookKind, &HookStep, bool)> {
    let pre_delete = gd.spec.pre_delete_update_strategy.as_ref().and_then(|s| Some((s.hook.as_ref()?, s.retry)));
    let pre_inplace = gd.spec.pre_inplace_update_strategy.as_ref().and_then(|s| Some((s.hook.as_ref()?, s.retry)));
    match kind {
        // A recreate is an update the user asked to drain for: without a pre-delete hook, the in-place hook gates it.
        GateKind::Delete(DeleteCause::RecreateFallback) => pre_delete
            .map(|(h, r)| (HookKind::PreDelete, h, r))
            .or_else(|| pre_inplace.map(|(h, r)| (HookKind::PreInplace, h, r))),
        GateKind::Delete(_) => pre_delete.map(|(h, r)| (HookKind::PreDelete, h, r)),
        GateKind::InPlaceUpdate => pre_inplace
            .map(|(h, r)| (HookKind::PreInplace, h, r))
            .or_else(|| pre_delete.map(|(h, r)| (HookKind::PreDelete, h, r))),
        GateKind::HotPatchUpdate => pre_inplace.map(|(h, r)| (HookKind::PreInplace, h, r)),
    }
}

/// The `hookPolicy` (deadlines, fallbacks, automatic retries) of a hook kind's gate.
pub fn policy_for(gd: &GameDeployment, kind: HookKind) -> Option<&HookGatePolicy> {
    let spec = &gd.spec;
    match kind {
        HookKind::PreDelete => spec.pre_delete_update_strategy.as_ref()?.hook_policy.as_ref(),
        HookKind::PreInplace => spec.pre_inplace_update_strategy.as_ref()?.hook_policy.as_ref(),
        HookKind::PostInplace => spec.post_inplace_update_strategy.as_ref()?.hook_policy.as_ref(),
        HookKind::CanaryStep => None,
    }
}

/// When a run completed: its last measurement's end (None while it runs, or without measurements).
pub fn run_finished(run: &HookRun) -> Option<Timestamp> {
    let status = run.status.as_ref()?;
    status
        .metric_results
        .iter()
        .flat_map(|m| m.measurements.iter())
        .filter_map(|m| m.finished_at.as_ref())
        .map(|t| t.0)
        .max()
}

/// When the pod entered its current lifecycle state (its lifecycle timestamp), where the gate's hold starts.
pub fn hold_started(pod: &Pod) -> Option<Timestamp> {
    common::pod::annotation(pod, keys::LIFECYCLE_TIMESTAMP)?.parse().ok()
}

/// The runs of an attempt found under `base` or `base.N`.
pub struct AttemptRuns<'a> {
    /// Ours, oldest first: an automatic retry adds one. Only these count (as the decision and as retries used).
    pub history: Vec<&'a HookRun>,
    /// The first name no run holds (for the next retry).
    pub free: Option<String>,
    /// Runs stamped for this attempt whose signature does not verify (name, why): ignored, reported.
    pub forged: Vec<(String, String)>,
}

/// Every run of an attempt (see [`AttemptRuns`]).
pub fn attempt_runs<'a>(state: &GateState<'a>, base: &str, attempt: &Attempt<'_>) -> AttemptRuns<'a> {
    let mut ours = Vec::new();
    let mut free = None;
    let mut forged = Vec::new();
    for (n, run) in attempt::named_in(state.hook_runs, state.names, base).into_iter().enumerate() {
        match run {
            None => {
                free.get_or_insert(attempt::nth_name(base, n));
            }
            Some(run) => match attempt::judge(run, attempt, state.keys) {
                attempt::Judgement::Ours => ours.push((n, run)),
                attempt::Judgement::Forged(why) => forged.push((attempt::nth_name(base, n), why)),
                attempt::Judgement::Foreign(_) => {}
            },
        }
    }
    ours.sort_by_key(|(n, run)| (run.metadata.creation_timestamp.as_ref().map(|t| t.0), *n));
    AttemptRuns { history: ours.into_iter().map(|(_, run)| run).collect(), free, forged }
}

/// The pod's instance id (label, else the name's last segment as BCS derives it).
pub fn instance_id(pod: &Pod) -> &str {
    common::pod::label(pod, keys::INSTANCE_ID)
        .unwrap_or_else(|| pod.metadata.name.as_deref().and_then(|n| n.rsplit('-').next()).unwrap_or(""))
}

/// Args injected into a pod's run: the hook's args, then the pod's identity (later wins, as in BCS).
pub fn pod_args(step: &HookStep, pod: &Pod, modified: &[String]) -> Vec<Argument> {
    let mut args = hookrun::step_args(step);
    args.push(Argument::new(hook_args::POD_NAME, pod.metadata.name.clone().unwrap_or_default()));
    args.push(Argument::new(hook_args::POD_NAMESPACE, pod.metadata.namespace.clone().unwrap_or_default()));
    args.push(Argument::new(hook_args::POD_IP, common::pod::pod_ip(pod)));
    args.push(Argument::new(hook_args::HOST_IP, common::pod::host_ip(pod)));
    for (i, c) in pod.spec.iter().flat_map(|s| s.containers.iter()).enumerate() {
        args.push(Argument::new(format!("{}[{i}]", hook_args::POD_CONTAINER), c.name.clone()));
    }
    for (i, name) in modified.iter().enumerate() {
        args.push(Argument::new(format!("{}[{i}]", hook_args::MODIFIED_CONTAINER), name.clone()));
    }
    args
}

/// Builds the run a pod needs from its template, or says why it cannot be built.
pub fn build_pod_run(
    state: &GateState<'_>,
    kind: HookKind,
    step: &HookStep,
    pod: &Pod,
    revision: &str,
    modified: &[String],
    name: String,
) -> Result<HookRun, String> {
    let namespace = state.gd.metadata.namespace.clone().unwrap_or_default();
    let template = state
        .templates
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(step.template_name.as_str()))
        .ok_or_else(|| format!("HookTemplate {:?} not found in namespace {namespace}", step.template_name))?;
    let id = instance_id(pod);
    let gd_name = state.gd.metadata.name.as_deref().unwrap_or("");
    let new = NewHookRun {
        name,
        namespace,
        labels: hookrun::pod_hook_labels(kind, revision, id, gd_name),
        owner: Some(ownership::owner_reference(state.gd)),
        args: pod_args(step, pod, modified),
    };
    hookrun::from_template(template, new).map_err(|e| e.to_string())
}

/// The Preparing state a change holds its pod in.
pub fn preparing_state(kind: GateKind) -> LifecycleState {
    match kind {
        GateKind::Delete(_) => LifecycleState::PreparingDelete,
        GateKind::InPlaceUpdate | GateKind::HotPatchUpdate => LifecycleState::PreparingUpdate,
    }
}

pub fn run_phase(run: &HookRun) -> HookPhase {
    run.status.as_ref().and_then(|s| s.phase).unwrap_or(HookPhase::Pending)
}

/// Why a run in progress still holds its pod: "HookRun X is Running", and what the run itself says while it runs
/// (the hook-operator writes a message only when measurements error, from the first one), so a hook that cannot
/// connect does not look healthy until its error limit ends it.
pub fn in_progress(run: &HookRun, name: &str, phase: HookPhase) -> String {
    let says = run.status.as_ref().and_then(|s| s.message.as_deref()).map(str::trim).filter(|m| !m.is_empty());
    match says {
        Some(message) => format!("HookRun {name} is {phase}: {}", common::runtime::text::excerpt(message, 300)),
        None => format!("HookRun {name} is {phase}"),
    }
}

pub fn run_started(run: &HookRun, now: Timestamp) -> Time {
    run.metadata.creation_timestamp.clone().unwrap_or(Time(now))
}

/// The command that runs a failed pod hook again, exactly as a person types it: `kubectl gd retry`, and the plain
/// kubectl write it stands for — the gate's `retry` flag, or on a GitOps-clean GameDeployment (whose spec is Git's)
/// the deletion of the failed run, for this pod only.
pub fn retry_command(gd: &common::api::GameDeployment, kind: HookKind, pod: &str, run: &str) -> String {
    use common::hint::{patch_spec, target};
    let (name, namespace) = (gd.metadata.name.as_deref().unwrap_or_default(), gd.metadata.namespace.as_deref());
    if super::gitops_control::gitops_clean(gd) {
        format!(
            "kubectl gd retry {} --pod {pod} (or: kubectl delete hookrun {})",
            target(name, namespace),
            target(run, namespace)
        )
    } else {
        let flag = patch_spec(name, namespace, &format!("{}.retry", retry_field(kind)), "true");
        format!("kubectl gd retry {} (or: {flag})", target(name, namespace))
    }
}

/// The strategy field a person sets to retry failed runs of this kind.
pub fn retry_field(kind: HookKind) -> &'static str {
    match kind {
        HookKind::PreDelete => "preDeleteUpdateStrategy",
        HookKind::PreInplace => "preInplaceUpdateStrategy",
        HookKind::PostInplace => "postInplaceUpdateStrategy",
        HookKind::CanaryStep => "updateStrategy.canary",
    }
}
