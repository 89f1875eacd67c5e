//! [`verdict`]: whether a pod change may happen now. See [`crate::gate`] for which hook gates what.

use common::api::{HookPhase, HookReleaseReason, HookRun};
use common::hookrun::{self, HookKind};
use common::keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::attempt::{self, Attempt, Change, Choice};
use super::deadline::{self, Decision};
use super::pod_runs::*;
use super::{GateDecision, GateKind, GateRequest, GateState, HookGate, Verdict};
use crate::lifecycle;

/// Decides whether a pod change may happen now, with the hook details. `modified` names the containers an
/// in-place update changes.
pub fn verdict(request: &GateRequest<'_>, state: &GateState<'_>, modified: &[String]) -> Verdict {
    let Some((kind, step, retry)) = hook_for(state.gd, request.kind) else { return Verdict::allow() };
    // GitOps-clean: `retry` is not read (the operator never resets it); a failed run is deleted to retry it.
    let clean = crate::gate::gitops_control::gitops_clean(state.gd);
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
    let skip = crate::gate::gitops_control::skip_requested(request.pod, &change.annotation());
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
    use crate::gate::DeleteCause;
    use crate::lifecycle::LifecycleState;
    use common::api::GameDeployment;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::jiff::Timestamp;
    use std::sync::Arc;

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
