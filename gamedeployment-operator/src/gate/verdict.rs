//! [`verdict`]: whether a pod change may happen now, as a table of contents of named steps (each a method of
//! [`Ask`] below, in the order they run). See [`crate::gate`] for which hook gates what.

use std::ops::ControlFlow;

use common::api::{HookPhase, HookReleaseReason, HookRun, HookStep};
use common::hookrun::{self, HookKind};
use common::keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::attempt::{self, Attempt, Change, Choice};
use super::deadline::{self, Decision};
use super::gitops_control;
use super::pod_runs::{
    AttemptRuns, attempt_runs, build_pod_run, hold_started, hook_for, instance_id, policy_for, preparing_state,
    run_finished, run_phase, run_started,
};
use super::{GateDecision, GateKind, GateRequest, GateState, HookGate, Verdict};
use crate::lifecycle;

/// Decides whether a pod change may happen now, with the hook details. `modified` names the containers an
/// in-place update changes.
pub fn verdict(request: &GateRequest<'_>, state: &GateState<'_>, modified: &[String]) -> Verdict {
    let Some(ask) = Ask::configured(request, state, modified) else { return Verdict::allow() };
    if let Some(wait) = ask.wait_for_preparing() {
        return wait;
    }
    let attempt = ask.attempt();
    let choice = attempt::choose_in(state.hook_runs, state.names, &ask.base, &attempt, state.keys);
    if gitops_control::skip_requested(request.pod, &attempt.change.annotation()) {
        return ask.skipped(&choice);
    }
    let run = match choice {
        Choice::Found(run) => run,
        Choice::Create { name, skipped } => return ask.create_first_run(&attempt, name, skipped),
        Choice::Exhausted { skipped } => return ask.names_exhausted(skipped),
    };
    let latest = ask.latest_run(&attempt, run);
    match ask.apply_policy(&attempt, &latest) {
        ControlFlow::Continue(recheck_at) => ask.by_phase(latest, recheck_at),
        ControlFlow::Break(decided) => decided,
    }
}

/// One request put to the hook configured for it: what every step reads.
struct Ask<'a> {
    request: &'a GateRequest<'a>,
    state: &'a GateState<'a>,
    kind: HookKind,
    step: &'a HookStep,
    /// The strategy's `retry: true`, when it is read (not GitOps-clean: there `retry` is not read, the operator never
    /// resets it, and a failed run is deleted to retry it).
    retry: bool,
    /// The revision the pod runs (part of the BCS run name).
    revision: &'a str,
    /// The BCS name of the attempt's first run.
    base: String,
    /// The containers an in-place update changes (only a pre-inplace run is told).
    modified: &'a [String],
}

/// The run that decides the pod (the latest of its attempt), and what `hookPolicy` reads about it.
struct Latest<'a> {
    run: &'a HookRun,
    name: String,
    phase: HookPhase,
    started: Time,
    /// Automatic retries made (the attempt's runs before the latest).
    retries_used: i32,
    /// The first name no run holds (for the next retry).
    free: Option<String>,
    /// Runs stamped for this attempt whose signature does not verify.
    forged: Vec<(String, String)>,
}

impl<'a> Ask<'a> {
    /// The hook that gates the change, if one is configured and the pod runs (a pod that does not run serves
    /// nobody: nothing to drain, as in BCS).
    fn configured(request: &'a GateRequest<'a>, state: &'a GateState<'a>, modified: &'a [String]) -> Option<Self> {
        let (kind, step, retry) = hook_for(state.gd, request.kind)?;
        let clean = gitops_control::gitops_clean(state.gd);
        if !common::pod::is_running(request.pod) {
            return None;
        }
        let revision = request.pod_revision.unwrap_or("");
        let base = hookrun::pod_hook_name(kind, revision, instance_id(request.pod), &step.template_name);
        let modified: &[String] = if kind == HookKind::PreInplace { modified } else { &[] };
        Some(Self { request, state, kind, step, retry: retry && !clean, revision, base, modified })
    }

    /// A run is made for one visit of the Preparing state, so it is created only once the pod is seen there (its
    /// lifecycle timestamp names the attempt); until then the pod is only being moved there.
    fn wait_for_preparing(&self) -> Option<Verdict> {
        let preparing = preparing_state(self.request.kind);
        (lifecycle::state_of(self.request.pod) != preparing).then(|| Verdict {
            decision: GateDecision::Wait(format!("entering {} before its hook starts", preparing.as_str())),
            hook: Some(self.pending(self.base.clone(), None, None, Vec::new())),
        })
    }

    /// This change of this pod during this Preparing visit.
    fn attempt(&self) -> Attempt<'a> {
        let change = match self.request.kind {
            GateKind::Delete(_) => Change::Delete,
            GateKind::InPlaceUpdate | GateKind::HotPatchUpdate => {
                Change::InPlace(self.request.target_revision.unwrap_or_default().to_string())
            }
        };
        let gd_uid = self.state.gd.metadata.uid.as_deref().unwrap_or("");
        Attempt::of(gd_uid, self.request.pod, change)
    }

    /// A person asked to skip this change's hook for this pod: released and recorded, never a success.
    fn skipped(&self, choice: &Choice<'_>) -> Verdict {
        let found = if let Choice::Found(run) = choice { Some(*run) } else { None };
        let name = found.and_then(|r| r.metadata.name.clone()).unwrap_or_else(|| self.base.clone());
        let mut hook = self.pending(name, None, None, Vec::new());
        if let Some(run) = found {
            hook.phase = run_phase(run);
            hook.started = run_started(run, self.state.now);
        }
        let message = format!("released by the pod annotation {}: the hook was skipped, not passed", keys::SKIP_HOOK);
        hook.released = Some((HookReleaseReason::Skipped, message));
        Verdict { decision: GateDecision::Allow, hook: Some(hook) }
    }

    /// No run of the attempt yet: the first one, stamped for the attempt (or why it cannot be built).
    fn create_first_run(&self, attempt: &Attempt<'_>, name: String, skipped: Vec<(String, String)>) -> Verdict {
        match self.build_run(name.clone()) {
            Ok(mut run) => {
                attempt::stamp(&mut run, attempt, self.state.keys);
                Verdict {
                    decision: GateDecision::Wait(format!("HookRun {name} is being created")),
                    hook: Some(self.pending(name, None, Some(Box::new(run)), skipped)),
                }
            }
            Err(problem) => Verdict {
                decision: GateDecision::Blocked(problem.clone()),
                hook: Some(self.pending(name, Some(problem), None, skipped)),
            },
        }
    }

    /// Every name for the run is taken by runs not made for this pod: only a person can free one.
    fn names_exhausted(&self, skipped: Vec<(String, String)>) -> Verdict {
        let names: Vec<String> = skipped.iter().map(|(n, why)| format!("{n} ({why})")).collect();
        let problem = format!(
            "every name for its HookRun is taken by runs not made for this pod: {}; delete them",
            names.join(", ")
        );
        Verdict {
            decision: GateDecision::Blocked(problem.clone()),
            hook: Some(self.pending(self.base.clone(), Some(problem), None, skipped)),
        }
    }

    /// The latest run of the attempt decides (earlier ones failed and were retried automatically).
    fn latest_run(&self, attempt: &Attempt<'_>, found: &'a HookRun) -> Latest<'a> {
        let AttemptRuns { history, free, forged } = attempt_runs(self.state, &self.base, attempt);
        let run = history.last().copied().unwrap_or(found);
        Latest {
            run,
            name: run.metadata.name.clone().unwrap_or_default(),
            phase: run_phase(run),
            started: run_started(run, self.state.now),
            retries_used: i32::try_from(history.len().saturating_sub(1)).unwrap_or(i32::MAX),
            free,
            forged,
        }
    }

    /// What `hookPolicy` says about the run: `Break` is the verdict (released, an automatic retry, no name left
    /// for it); `Continue` leaves the decision to the run's phase, with a time to look again (the next deadline).
    fn apply_policy(&self, attempt: &Attempt<'_>, latest: &Latest<'a>) -> ControlFlow<Verdict, Option<Timestamp>> {
        let (run_name, phase) = (&latest.name, latest.phase);
        let failed = phase.is_completed() && phase != HookPhase::Successful;
        let policy = policy_for(self.state.gd, self.kind);
        let facts = deadline::Facts {
            phase,
            run_started: latest.started.0,
            run_finished: run_finished(latest.run),
            hold_started: hold_started(self.request.pod),
            retries_used: latest.retries_used,
            now: self.state.now,
        };
        // A requested manual retry goes first: the failed runs are being deleted.
        let by_policy = if failed && self.retry {
            Decision::AsAlways { recheck_at: None }
        } else {
            deadline::decide(policy, &facts)
        };
        let limit = policy.and_then(|p| p.auto_retry.as_ref()).map_or(0, |r| r.limit);
        match by_policy {
            Decision::Release { reason, message } => {
                let released = Some((reason, format!("HookRun {run_name}: {message}")));
                ControlFlow::Break(self.decided(latest, GateDecision::Allow, released, None))
            }
            Decision::RetryAt { retry, at } => {
                let wait = format!("HookRun {run_name} ended {phase}; automatic retry {retry} of {limit} at {at}");
                ControlFlow::Break(self.decided(latest, GateDecision::Wait(wait), None, Some(at)))
            }
            Decision::RetryNow { retry } => ControlFlow::Break(self.retry_now(attempt, latest, retry, limit)),
            Decision::AsAlways { recheck_at } => ControlFlow::Continue(recheck_at),
        }
    }

    /// An automatic retry is due: a new run under the first free name.
    fn retry_now(&self, attempt: &Attempt<'_>, latest: &Latest<'a>, retry: i32, limit: i32) -> Verdict {
        let (run_name, phase) = (&latest.name, latest.phase);
        let Some(name) = latest.free.clone() else {
            let problem = format!(
                "HookRun {run_name} ended {phase}; automatic retry {retry} of {limit} has no free name (every name up \
                 to {}.{} is taken)",
                self.base,
                attempt::MAX_NAME_SUFFIX
            );
            return self.decided(latest, GateDecision::Blocked(problem), None, None);
        };
        match self.build_run(name.clone()) {
            Ok(mut next) => {
                attempt::stamp(&mut next, attempt, self.state.keys);
                let mut hook = self.pending(name.clone(), None, Some(Box::new(next)), latest.forged.clone());
                hook.started = latest.started.clone();
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
                hook: Some(self.pending(name, Some(problem), None, Vec::new())),
            },
        }
    }

    /// The run's phase decides: `Successful` opens the gate, a run in progress waits, a failed one blocks (or
    /// waits for the retry a person asked for).
    fn by_phase(&self, latest: Latest<'a>, recheck_at: Option<Timestamp>) -> Verdict {
        let (run_name, phase) = (&latest.name, latest.phase);
        let decision = match phase {
            HookPhase::Successful => GateDecision::Allow,
            HookPhase::Pending | HookPhase::Running => {
                GateDecision::Wait(super::in_progress(latest.run, run_name, phase))
            }
            HookPhase::Failed | HookPhase::Error | HookPhase::Inconclusive if self.retry => {
                GateDecision::Wait(format!("HookRun {run_name} ended {phase}; retrying it"))
            }
            HookPhase::Failed | HookPhase::Error | HookPhase::Inconclusive => {
                GateDecision::Blocked(self.failed(&latest))
            }
        };
        let terminated = phase == HookPhase::Successful && latest.run.spec.terminate;
        let mut hook = self.decided_hook(&latest, None, recheck_at);
        hook.terminated = terminated;
        if terminated {
            hook.terminated_by = latest.run.status.as_ref().and_then(|s| s.message.clone());
        }
        Verdict { decision, hook: Some(hook) }
    }

    /// Why a failed run holds the pod, and what a person does about it ([`super::pod_runs::retry_command`]).
    fn failed(&self, latest: &Latest<'a>) -> String {
        let (run_name, phase) = (&latest.name, latest.phase);
        let why = latest.run.status.as_ref().and_then(|s| s.message.clone()).unwrap_or_default();
        let why = if why.is_empty() { String::new() } else { format!(" ({why})") };
        let pod = self.request.pod.metadata.name.as_deref().unwrap_or_default();
        let again = super::pod_runs::retry_command(self.state.gd, self.kind, pod, run_name);
        format!("HookRun {run_name} ended {phase}{why}; fix the hook, then run it again: {again}")
    }

    fn build_run(&self, name: String) -> Result<HookRun, String> {
        build_pod_run(self.state, self.kind, self.step, self.request.pod, self.revision, self.modified, name)
    }

    /// The hook side while no run decides yet (it is being created, or cannot be).
    fn pending(
        &self,
        run_name: String,
        problem: Option<String>,
        create: Option<Box<HookRun>>,
        foreign: Vec<(String, String)>,
    ) -> HookGate {
        HookGate {
            kind: self.kind,
            run_name,
            create,
            phase: HookPhase::Pending,
            started: Time(self.state.now),
            problem,
            foreign,
            terminated: false,
            terminated_by: None,
            released: None,
            recheck_at: None,
        }
    }

    /// The hook side when the latest run decides.
    fn decided_hook(
        &self,
        latest: &Latest<'a>,
        released: Option<(HookReleaseReason, String)>,
        recheck_at: Option<Timestamp>,
    ) -> HookGate {
        HookGate {
            kind: self.kind,
            run_name: latest.name.clone(),
            create: None,
            phase: latest.phase,
            started: latest.started.clone(),
            problem: None,
            foreign: latest.forged.clone(),
            terminated: false,
            terminated_by: None,
            released,
            recheck_at,
        }
    }

    fn decided(
        &self,
        latest: &Latest<'a>,
        decision: GateDecision,
        released: Option<(HookReleaseReason, String)>,
        recheck_at: Option<Timestamp>,
    ) -> Verdict {
        Verdict { decision, hook: Some(self.decided_hook(latest, released, recheck_at)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::DeleteCause;
    use crate::lifecycle::LifecycleState;
    use common::api::GameDeployment;
    use common::cached_pod::Pod;
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
