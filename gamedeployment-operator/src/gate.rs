//! THE gate: every pod deletion and every in-place or hot-patch update the planner wants to make is first put to
//! [`verdict`], and happens only on [`GateDecision::Allow`]. There is no other path to a pod change, so the hook
//! invariant ("no gated pod changes without a `Successful` HookRun for that pod and revision") lives here.
//!
//! Which hook gates what (BCS semantics, `research/bcs-gamedeployment-spec.md` §4.2/§4.3):
//! - every deletion (scale-in, `podsToDelete`, RollingUpdate, recreate fallback): `preDeleteUpdateStrategy.hook`;
//! - an in-place update: `preInplaceUpdateStrategy.hook`, or the pre-delete hook when that is absent;
//! - a hot-patch update: `preInplaceUpdateStrategy.hook` only (a hot patch destroys nothing).
//!
//! A pod that is not Running passes without a hook. The decision is pure: it reads the observed HookRuns and
//! HookTemplates; the HookRun to create is handed back for the planner to turn into an action.
//!
//! Held pods (`Wait`, `Blocked`) keep their lifecycle state (`PreparingDelete` / `PreparingUpdate`), count as
//! unavailable for the update budget, and do not stop other pods from progressing.

use common::api::Argument;
use common::api::{GameDeployment, HookGatePolicy, HookPhase, HookReleaseReason, HookRun, HookStep, HookTemplate};
use common::hookrun::{self, HookKind, NewHookRun};
use common::keys::{self, hook_args};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;

use crate::attempt::{self, Attempt, Change, Choice};
use crate::deadline::{self, Decision};
use crate::hookrun_keys::Keyring;
use crate::lifecycle::{self, LifecycleState};
use crate::ownership;

/// Why a pod is about to be deleted. Hooks treat every cause the same (BCS gates scale-in, `podsToDelete` and
/// the delete half of a RollingUpdate with one hook); the cause is carried for events, metrics and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeleteCause {
    /// `spec.replicas` went down (or a surge pod is no longer needed).
    ScaleIn,
    /// The pod is named in `spec.scaleStrategy.podsToDelete`.
    PodsToDelete,
    /// The pod carries the label `apps.kruise.io/specified-delete: "true"` (CloneSet): deleted and replaced.
    SpecifiedDelete,
    /// RollingUpdate: the pod is replaced by one of the new revision.
    RollingUpdate,
    /// InplaceUpdate/HotPatchUpdate of a change that cannot be made in place: the pod is recreated.
    RecreateFallback,
}

impl DeleteCause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ScaleIn => "scale_in",
            Self::PodsToDelete => "pods_to_delete",
            Self::SpecifiedDelete => "specified_delete",
            Self::RollingUpdate => "rolling_update",
            Self::RecreateFallback => "recreate_fallback",
        }
    }
}

/// The pod change asking to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateKind {
    Delete(DeleteCause),
    InPlaceUpdate,
    HotPatchUpdate,
}

/// One request: this pod, this change, towards (or away from) this revision.
#[derive(Debug, Clone, Copy)]
pub struct GateRequest<'a> {
    pub kind: GateKind,
    pub pod: &'a Pod,
    /// The revision the pod runs (part of the BCS run name).
    pub pod_revision: Option<&'a str>,
    /// The revision an update moves the pod to: an in-place run is made for one target and opens no other.
    pub target_revision: Option<&'a str>,
}

/// What the gate knows about the world besides the pod: the GameDeployment (its hook configuration), the
/// namespace's HookRuns and HookTemplates as observed, and the clock.
#[derive(Debug, Clone, Copy)]
pub struct GateState<'a> {
    pub gd: &'a GameDeployment,
    pub hook_runs: &'a [Arc<HookRun>],
    pub templates: &'a [HookTemplate],
    pub now: Timestamp,
    /// `hook_runs` by name, when the pass built the index (a state whose `hook_runs` were replaced scans them).
    pub names: Option<&'a attempt::RunNames<'a>>,
    /// The keys runs are signed with (only runs whose stamp verifies open a gate).
    pub keys: &'a Keyring,
}

/// The hook side of a decision: which run decides the pod, what to create, what the status shows.
#[derive(Debug, Clone, PartialEq)]
pub struct HookGate {
    pub kind: HookKind,
    pub run_name: String,
    /// No run exists yet: create this one.
    pub create: Option<Box<HookRun>>,
    /// The run's phase (`Pending` while it is being created).
    pub phase: HookPhase,
    /// When the run started (its creation), for `status.*HookCondition[].startTime`.
    pub started: Time,
    /// A configuration problem (missing template, unresolved arg) that only a person can fix.
    pub problem: Option<String>,
    /// Runs found under this attempt's names that were not made for it (name, why): skipped, never trusted. When a
    /// run of the attempt exists (`create` is None), only the forged ones: stamped for this attempt without a valid
    /// signature.
    pub foreign: Vec<(String, String)>,
    /// The run that decided was terminated by a person (`spec.terminate: true`) rather than measured to success.
    pub terminated: bool,
    /// The gate let the pod go *without* a successful hook (`hookPolicy` deadline or fallback, a skip annotation):
    /// why, and the message for the condition and the Event.
    pub released: Option<(HookReleaseReason, String)>,
    /// Ask again at this time even if nothing changes (a deadline or a retry back-off ends).
    pub recheck_at: Option<Timestamp>,
}

/// A decision with its hook details (None when no hook is involved).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub decision: GateDecision,
    pub hook: Option<HookGate>,
}

impl Verdict {
    fn allow() -> Self {
        Self { decision: GateDecision::Allow, hook: None }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    /// Go ahead now.
    Allow,
    /// Not yet (a hook is running); ask again on a later pass.
    Wait(String),
    /// Stopped until someone acts (a hook failed, its template is missing); the reason says what to do.
    Blocked(String),
}

impl GateDecision {
    pub fn is_allow(&self) -> bool {
        matches!(self, Self::Allow)
    }

    /// Why the pod is held, if it is.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Allow => None,
            Self::Wait(reason) | Self::Blocked(reason) => Some(reason),
        }
    }
}

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

pub fn run_started(run: &HookRun, now: Timestamp) -> Time {
    run.metadata.creation_timestamp.clone().unwrap_or(Time(now))
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

/// Decides whether a pod change may happen now, with the hook details. `modified` names the containers an
/// in-place update changes.
pub fn verdict(request: &GateRequest<'_>, state: &GateState<'_>, modified: &[String]) -> Verdict {
    let Some((kind, step, retry)) = hook_for(state.gd, request.kind) else { return Verdict::allow() };
    // GitOps-clean: `retry` is not read (the operator never resets it); a failed run is deleted to retry it.
    let clean = crate::control::gitops_clean(state.gd);
    let retry = retry && !clean;
    // A pod that does not run serves nobody: nothing to drain (BCS).
    if !common::pod::is_running(request.pod) {
        return Verdict::allow();
    }
    let revision = request.pod_revision.unwrap_or("");
    let base = hookrun::pod_hook_name(kind, revision, instance_id(request.pod), &step.template_name);
    let pending = |run_name: String, problem: Option<String>, create: Option<Box<HookRun>>, foreign| HookGate {
        kind,
        run_name,
        create,
        phase: HookPhase::Pending,
        started: Time(state.now),
        problem,
        foreign,
        terminated: false,
        released: None,
        recheck_at: None,
    };
    // A run is made for one visit of the Preparing state, so it is created only once the pod is seen there (its
    // lifecycle timestamp names the attempt); until then the pod is only being moved there.
    let preparing = preparing_state(request.kind);
    if lifecycle::state_of(request.pod) != preparing {
        return Verdict {
            decision: GateDecision::Wait(format!("entering {} before its hook starts", preparing.as_str())),
            hook: Some(pending(base, None, None, Vec::new())),
        };
    }
    let change = match request.kind {
        GateKind::Delete(_) => Change::Delete,
        GateKind::InPlaceUpdate | GateKind::HotPatchUpdate => {
            Change::InPlace(request.target_revision.unwrap_or_default().to_string())
        }
    };
    let skip = crate::control::skip_requested(request.pod, &change.annotation());
    let gd_uid = state.gd.metadata.uid.as_deref().unwrap_or("");
    let attempt = Attempt::of(gd_uid, request.pod, change);
    let modified: &[String] = if kind == HookKind::PreInplace { modified } else { &[] };
    let choice = attempt::choose_in(state.hook_runs, state.names, &base, &attempt, state.keys);
    if skip {
        // A person asked to skip this change's hook for this pod: released and recorded, never a success.
        let found = if let Choice::Found(run) = &choice { Some(*run) } else { None };
        let mut hook = pending(found.and_then(|r| r.metadata.name.clone()).unwrap_or(base), None, None, Vec::new());
        if let Some(run) = found {
            hook.phase = run_phase(run);
            hook.started = run_started(run, state.now);
        }
        let message = format!("released by the pod annotation {}: the hook was skipped, not passed", keys::SKIP_HOOK);
        hook.released = Some((HookReleaseReason::Skipped, message));
        return Verdict { decision: GateDecision::Allow, hook: Some(hook) };
    }
    let run = match choice {
        Choice::Found(run) => run,
        Choice::Create { name, skipped } => {
            return match build_pod_run(state, kind, step, request.pod, revision, modified, name.clone()) {
                Ok(mut run) => {
                    attempt::stamp(&mut run, &attempt, state.keys);
                    Verdict {
                        decision: GateDecision::Wait(format!("HookRun {name} is being created")),
                        hook: Some(pending(name, None, Some(Box::new(run)), skipped)),
                    }
                }
                Err(problem) => Verdict {
                    decision: GateDecision::Blocked(problem.clone()),
                    hook: Some(pending(name, Some(problem), None, skipped)),
                },
            };
        }
        Choice::Exhausted { skipped } => {
            let names: Vec<String> = skipped.iter().map(|(n, why)| format!("{n} ({why})")).collect();
            let problem = format!(
                "every name for its HookRun is taken by runs not made for this pod: {}; delete them",
                names.join(", ")
            );
            return Verdict {
                decision: GateDecision::Blocked(problem.clone()),
                hook: Some(pending(base, Some(problem), None, skipped)),
            };
        }
    };
    // The latest run of the attempt decides (earlier ones failed and were retried automatically).
    let AttemptRuns { history, free, forged } = attempt_runs(state, &base, &attempt);
    let run = history.last().copied().unwrap_or(run);
    let run_name = run.metadata.name.clone().unwrap_or_default();
    let phase = run_phase(run);
    let started = run_started(run, state.now);
    let failed = phase.is_completed() && phase != HookPhase::Successful;
    let policy = policy_for(state.gd, kind);
    let facts = deadline::Facts {
        phase,
        run_started: started.0,
        run_finished: run_finished(run),
        hold_started: hold_started(request.pod),
        retries_used: i32::try_from(history.len().saturating_sub(1)).unwrap_or(i32::MAX),
        now: state.now,
    };
    // A requested manual retry goes first: the failed runs are being deleted.
    let by_policy =
        if failed && retry { Decision::AsAlways { recheck_at: None } } else { deadline::decide(policy, &facts) };
    let limit = policy.and_then(|p| p.auto_retry.as_ref()).map_or(0, |r| r.limit);
    let gate_of = |decision, released, recheck_at| Verdict {
        decision,
        hook: Some(HookGate {
            kind,
            run_name: run_name.clone(),
            create: None,
            phase,
            started: started.clone(),
            problem: None,
            foreign: forged.clone(),
            terminated: false,
            released,
            recheck_at,
        }),
    };
    let recheck_at = match by_policy {
        Decision::Release { reason, message } => {
            return gate_of(GateDecision::Allow, Some((reason, format!("HookRun {run_name}: {message}"))), None);
        }
        Decision::RetryAt { retry, at } => {
            let wait = format!("HookRun {run_name} ended {phase}; automatic retry {retry} of {limit} at {at}");
            return gate_of(GateDecision::Wait(wait), None, Some(at));
        }
        Decision::RetryNow { retry } => {
            let Some(name) = free else {
                let problem = format!(
                    "HookRun {run_name} ended {phase}; automatic retry {retry} of {limit} has no free name (every \
                     name up to {base}.{} is taken)",
                    attempt::MAX_NAME_SUFFIX
                );
                return gate_of(GateDecision::Blocked(problem), None, None);
            };
            return match build_pod_run(state, kind, step, request.pod, revision, modified, name.clone()) {
                Ok(mut next) => {
                    attempt::stamp(&mut next, &attempt, state.keys);
                    let mut hook = pending(name.clone(), None, Some(Box::new(next)), forged.clone());
                    hook.started = started;
                    Verdict {
                        decision: GateDecision::Wait(format!(
                            "HookRun {run_name} ended {phase}; automatic retry {retry} of {limit}: HookRun {name} is \
                             being created"
                        )),
                        hook: Some(hook),
                    }
                }
                Err(problem) => Verdict {
                    decision: GateDecision::Blocked(problem.clone()),
                    hook: Some(pending(name, Some(problem), None, Vec::new())),
                },
            };
        }
        Decision::AsAlways { recheck_at } => recheck_at,
    };
    let decision = match phase {
        HookPhase::Successful => GateDecision::Allow,
        HookPhase::Pending | HookPhase::Running => GateDecision::Wait(format!("HookRun {run_name} is {phase}")),
        HookPhase::Failed | HookPhase::Error | HookPhase::Inconclusive if retry => {
            GateDecision::Wait(format!("HookRun {run_name} ended {phase}; retrying it"))
        }
        HookPhase::Failed | HookPhase::Error | HookPhase::Inconclusive => {
            let why = run.status.as_ref().and_then(|s| s.message.clone()).unwrap_or_default();
            let why = if why.is_empty() { String::new() } else { format!(" ({why})") };
            if clean {
                GateDecision::Blocked(format!(
                    "HookRun {run_name} ended {phase}{why}; fix the hook, then delete HookRun {run_name} to run it \
                     again (kubectl gd retry NAME --pod {})",
                    request.pod.metadata.name.as_deref().unwrap_or_default()
                ))
            } else {
                GateDecision::Blocked(format!(
                    "HookRun {run_name} ended {phase}{why}; fix the hook, then set spec.{}.retry: true",
                    retry_field(kind)
                ))
            }
        }
    };
    let terminated = phase == HookPhase::Successful && run.spec.terminate;
    Verdict {
        decision,
        hook: Some(HookGate {
            kind,
            run_name,
            create: None,
            phase,
            started,
            problem: None,
            foreign: forged,
            terminated,
            released: None,
            recheck_at,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_hooks_everything_passes() {
        let gd = GameDeployment::new(
            "web",
            serde_json::from_value(serde_json::json!({
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}}
            }))
            .unwrap(),
        );
        let pod = Pod::default();
        for kind in [
            GateKind::Delete(DeleteCause::ScaleIn),
            GateKind::Delete(DeleteCause::PodsToDelete),
            GateKind::Delete(DeleteCause::SpecifiedDelete),
            GateKind::Delete(DeleteCause::RollingUpdate),
            GateKind::Delete(DeleteCause::RecreateFallback),
            GateKind::InPlaceUpdate,
            GateKind::HotPatchUpdate,
        ] {
            let request = GateRequest { kind, pod: &pod, pod_revision: Some("web-1"), target_revision: Some("web-2") };
            let state = GateState {
                gd: &gd,
                hook_runs: &[],
                templates: &[],
                now: Timestamp::UNIX_EPOCH,
                names: None,
                keys: crate::hookrun_keys::test_keys(),
            };
            assert_eq!(verdict(&request, &state, &[]), Verdict::allow());
        }
        assert_eq!(GateDecision::Wait("hook running".into()).reason(), Some("hook running"));
    }

    /// A Failed run copied from the operator's (every label and annotation) under `.1` is forged: it is not a retry
    /// of the attempt. With `autoRetry.limit: 1` and `onFailure: Proceed` the operator retries with a run of its own
    /// under the next free name instead of counting the forgery as the retry and letting the pod go (as it did when
    /// stamps were not signed); the forgery is reported.
    #[test]
    fn a_forged_failed_run_is_not_a_retry_and_never_triggers_on_failure_proceed() {
        use crate::fixtures::{self, pod, ts};
        use crate::hookrun_keys::{Keyring, test_keys};
        let mut gd = fixtures::gd(1, "RollingUpdate");
        gd.spec.pre_delete_update_strategy = Some(
            serde_json::from_value(serde_json::json!({
                "hook": {"templateName": "drain"},
                "hookPolicy": {"autoRetry": {"limit": 1, "backoffSeconds": 0}, "onFailure": "Proceed"}
            }))
            .unwrap(),
        );
        let held = pod("game-abcde")
            .serving("game-1", "game:1", 100)
            .state(LifecycleState::PreparingDelete)
            .annotation(keys::LIFECYCLE_TIMESTAMP, &ts(200).to_string())
            .build();
        let templates = [fixtures::hook_template()];
        let request = GateRequest {
            kind: GateKind::Delete(DeleteCause::ScaleIn),
            pod: &held,
            pod_revision: Some("game-1"),
            target_revision: None,
        };
        let state = |runs: &'static [Arc<HookRun>]| GateState {
            gd: &gd,
            hook_runs: runs,
            templates: &templates,
            now: ts(300),
            names: None,
            keys: test_keys(),
        };
        // The first pass creates the operator's run; it fails.
        let created = verdict(&request, &state(&[]), &[]).hook.and_then(|h| h.create).expect("a run is created");
        let failed = |mut run: HookRun, name: &str, created: i64| {
            run.metadata.name = Some(name.into());
            run.metadata.uid = Some(format!("uid-{name}"));
            run.metadata.creation_timestamp = Some(Time(ts(created)));
            run.status = Some(serde_json::from_value(serde_json::json!({"phase": "Failed"})).unwrap());
            run
        };
        let base = created.metadata.name.clone().unwrap();
        let real = failed(*created.clone(), &base, 210);
        // The forgery: the real run's labels and annotations (signature included) under `.1`, and one signed with
        // another installation's key.
        let copied = failed(real.clone(), &format!("{base}.1"), 220);
        let theirs = Keyring::parse("their-key-0123456789-0123456789-0123456789").unwrap();
        let attempt = Attempt::of(fixtures::GD_UID, &held, Change::Delete);
        let mut resigned = failed(*created, &format!("{base}.1"), 220);
        attempt::stamp(&mut resigned, &attempt, &theirs);
        for forged in [copied, resigned] {
            let runs: &'static [Arc<HookRun>] = Box::leak(Box::new([Arc::new(real.clone()), Arc::new(forged)]));
            let got = verdict(&request, &state(runs), &[]);
            assert!(!got.decision.is_allow(), "released on a forged run: {got:?}");
            let hook = got.hook.expect("hook details");
            assert_eq!(
                hook.create.as_ref().and_then(|r| r.metadata.name.clone()),
                Some(format!("{base}.2")),
                "{hook:?}"
            );
            assert!(hook.released.is_none());
            assert_eq!(hook.foreign.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), [format!("{base}.1")]);
        }
    }
}
