//! The post-inplace hook (`postInplaceUpdateStrategy.hook`): when the new containers run, the pod goes to
//! `Updated` and its run starts ([`complete_in_place`]); the pod returns to `Normal` once that run is `Successful`,
//! released by `hookPolicy` or skipped by the pod's annotation ([`post_in_place`]). A pod held here never blocks
//! other pods.

use common::api::{HookCondition, HookPhase, HookRun, HookStep};
use common::hookrun::HookKind;
use common::keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{lifecycle_patches, step};
use crate::action::{Action, PodChange};
use crate::gate;
use crate::gate::attempt::{self, Attempt, Change, Choice};
use crate::lifecycle::{self, Handler, LifecycleState};
use crate::planner::hooks::{failed, retry_requested};
use crate::planner::plan_draft::Draft;
use crate::planner::settings::{PodInfo, Settings};

fn post_hook<'a>(settings: &Settings<'a>) -> Option<&'a HookStep> {
    settings.gd.spec.post_inplace_update_strategy.as_ref().and_then(|s| s.hook.as_ref())
}

/// The in-place update finished (the new containers run). With a post-inplace hook the pod goes to `Updated`
/// and its run is started now — after the update, not before the images are patched as in BCS.
pub(crate) fn complete_in_place(settings: &Settings<'_>, info: &PodInfo<'_>, draft: &mut Draft) -> PodChange {
    // The inPlaceUpdate lifecycle handler not all back on the pod: `Updated` until it is (CloneSet).
    let handler = lifecycle::holds_return(settings.gd, Handler::InPlaceUpdate, info.pod);
    let Some(step) = post_hook(settings).filter(|_| common::pod::is_running(info.pod)) else {
        if handler {
            return step::complete_to(info.pod, settings.now, LifecycleState::Updated);
        }
        return step::complete(info.pod, settings.now);
    };
    // The run is bound to the pod's `Updated` visit that this very patch starts (same timestamp).
    let updated_at = settings.now.to_string();
    let attempt = post_attempt(settings, info, Some(&updated_at));
    if let Choice::Create { name, .. } = attempt::choose_in(
        settings.gate.hook_runs,
        settings.gate.names,
        &post_run_name(step, info),
        &attempt,
        settings.gate.keys,
    ) && let Ok(mut run) = build_post_run(settings, step, info, name)
    {
        attempt::stamp(&mut run, &attempt, settings.gate.keys);
        draft.actions.push(Action::CreateHookRun(Box::new(run)));
    }
    step::complete_to(info.pod, settings.now, LifecycleState::Updated)
}

fn post_run_name(step: &HookStep, info: &PodInfo<'_>) -> String {
    common::hookrun::pod_hook_name(
        HookKind::PostInplace,
        info.revision.unwrap_or(""),
        gate::instance_id(info.pod),
        &step.template_name,
    )
}

/// The post-inplace attempt of a pod: after its update to the revision it runs, during one `Updated` visit.
fn post_attempt<'a>(settings: &'a Settings<'_>, info: &'a PodInfo<'_>, updated_at: Option<&'a str>) -> Attempt<'a> {
    Attempt {
        gd_uid: settings.gd.metadata.uid.as_deref().unwrap_or(""),
        pod_uid: info.pod.metadata.uid.as_deref().unwrap_or(""),
        change: Change::PostInPlace(info.revision.unwrap_or("").to_string()),
        prepared_at: updated_at,
    }
}

fn build_post_run(
    settings: &Settings<'_>,
    step: &HookStep,
    info: &PodInfo<'_>,
    name: String,
) -> Result<HookRun, String> {
    gate::build_pod_run(&settings.gate, HookKind::PostInplace, step, info.pod, info.revision.unwrap_or(""), &[], name)
}

/// A pod in `Updated`: back to `Normal` once its post-inplace run is `Successful` (or the hook was removed);
/// otherwise it stays and is reported. Never blocks other pods.
pub(crate) fn post_in_place(settings: &Settings<'_>, info: &PodInfo<'_>, draft: &mut Draft) -> Option<PodChange> {
    let to_normal = |summary: &str| lifecycle_patches::to_normal(info, settings.now, summary);
    let normal = || to_normal("post-inplace hook done");
    let Some(step) = post_hook(settings) else { return Some(normal()) };
    let attempt = post_attempt(settings, info, common::pod::annotation(info.pod, keys::LIFECYCLE_TIMESTAMP));
    let base = post_run_name(step, info);
    let choice = attempt::choose_in(settings.gate.hook_runs, settings.gate.names, &base, &attempt, settings.gate.keys);
    let gate::AttemptRuns { history, free, forged } = gate::attempt_runs(&settings.gate, &base, &attempt);
    let latest = history.last().copied().or(if let Choice::Found(run) = &choice { Some(*run) } else { None });
    if !forged.is_empty() {
        let decides = latest.and_then(|r| r.metadata.name.as_deref()).unwrap_or(base.as_str());
        draft.forged_runs(info, HookKind::PostInplace, decides, &forged);
    }
    let mut release = |reason, message: String, run: Option<&HookRun>| {
        draft.post_hooks.push(HookCondition {
            pod_name: info.name.to_string(),
            start_time: run.map_or(Time(settings.now), |r| gate::run_started(r, settings.now)),
            phase: run.map_or(HookPhase::Pending, gate::run_phase),
            hook_run: Some(run.and_then(|r| r.metadata.name.clone()).unwrap_or_else(|| base.clone())),
            message: Some(message),
            released_by: Some(reason),
            released_at: Some(Time(settings.now)),
        });
        Some(to_normal("post-inplace hook released without success"))
    };
    if latest.is_none_or(|r| gate::run_phase(r) != HookPhase::Successful)
        && crate::gate::gitops_control::skip_requested(info.pod, &attempt.change.annotation())
    {
        let message = format!("released by the pod annotation {}: the hook was skipped, not passed", keys::SKIP_HOOK);
        return release(common::api::HookReleaseReason::Skipped, message, latest);
    }
    let mut retry_wait = None;
    if let Some(run) = latest.filter(|r| gate::run_phase(r) != HookPhase::Successful) {
        let phase = gate::run_phase(run);
        let name = run.metadata.name.clone().unwrap_or_default();
        let facts = crate::gate::deadline::Facts {
            phase,
            run_started: gate::run_started(run, settings.now).0,
            run_finished: gate::run_finished(run),
            hold_started: gate::hold_started(info.pod),
            retries_used: i32::try_from(history.len().saturating_sub(1)).unwrap_or(i32::MAX),
            now: settings.now,
        };
        let policy = gate::policy_for(settings.gd, HookKind::PostInplace);
        let limit = policy.and_then(|p| p.auto_retry.as_ref()).map_or(0, |r| r.limit);
        let manual = failed(phase) && retry_requested(settings, HookKind::PostInplace);
        match if manual { None } else { Some(crate::gate::deadline::decide(policy, &facts)) } {
            Some(crate::gate::deadline::Decision::Release { reason, message }) => {
                return release(reason, format!("HookRun {name}: {message}"), Some(run));
            }
            Some(crate::gate::deadline::Decision::RetryNow { retry }) => {
                if let Some(next) = free.clone()
                    && let Ok(mut new) = build_post_run(settings, step, info, next.clone())
                {
                    attempt::stamp(&mut new, &attempt, settings.gate.keys);
                    draft.actions.push(Action::CreateHookRun(Box::new(new)));
                    retry_wait = Some((
                        next.clone(),
                        format!(
                            "HookRun {name} ended {phase}; automatic retry {retry} of {limit}: HookRun {next} is being created"
                        ),
                    ));
                }
            }
            Some(crate::gate::deadline::Decision::RetryAt { retry, at }) => {
                draft.requeue_at(settings.now, at);
                retry_wait = Some((
                    name.clone(),
                    format!("HookRun {name} ended {phase}; automatic retry {retry} of {limit} at {at}"),
                ));
            }
            Some(crate::gate::deadline::Decision::AsAlways { recheck_at: Some(at) }) => {
                draft.requeue_at(settings.now, at)
            }
            _ => {}
        }
    }
    if let (Some((name, message)), Some(run)) = (retry_wait, latest) {
        draft.post_hooks.push(HookCondition {
            pod_name: info.name.to_string(),
            start_time: gate::run_started(run, settings.now),
            phase: gate::run_phase(run),
            hook_run: Some(name),
            message: Some(message),
            released_by: None,
            released_at: None,
        });
        return None;
    }
    let choice = match (choice, latest) {
        (Choice::Found(_), Some(run)) => Choice::Found(run),
        (choice, _) => choice,
    };
    let (name, phase, started, message) = match choice {
        Choice::Found(run) if gate::run_phase(run) == HookPhase::Successful => return Some(normal()),
        Choice::Found(run) => {
            let name = run.metadata.name.clone().unwrap_or_default();
            let phase = gate::run_phase(run);
            let message = if failed(phase) {
                let again = gate::pod_runs::retry_command(settings.gd, HookKind::PostInplace, info.name, &name);
                format!(
                    "HookRun {name} ended {phase}; the pod runs its new revision but stays Updated until the hook runs \
                     again and succeeds: {again}"
                )
            } else {
                gate::in_progress(run, &name, phase)
            };
            (name, phase, gate::run_started(run, settings.now), Some(message))
        }
        Choice::Create { name, .. } => match build_post_run(settings, step, info, name.clone()) {
            Ok(mut run) => {
                attempt::stamp(&mut run, &attempt, settings.gate.keys);
                draft.actions.push(Action::CreateHookRun(Box::new(run)));
                let message = format!("HookRun {name} is being created");
                (name, HookPhase::Pending, Time(settings.now), Some(message))
            }
            Err(problem) => (name, HookPhase::Pending, Time(settings.now), Some(problem)),
        },
        Choice::Exhausted { .. } => {
            let message = format!(
                "every name from {base} to {base}.{} is taken by runs not made for this pod",
                attempt::MAX_NAME_SUFFIX
            );
            (base, HookPhase::Pending, Time(settings.now), Some(message))
        }
    };
    draft.post_hooks.push(HookCondition {
        pod_name: info.name.to_string(),
        start_time: started,
        phase,
        hook_run: Some(name),
        message,
        released_by: None,
        released_at: None,
    });
    None
}
