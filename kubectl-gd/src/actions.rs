//! What each action writes, decided from the observed objects (pure). Every action is a mechanism the operators
//! already document; `kubectl gd` only saves typing and says what it did:
//!
//! | Action | Write | Documented in |
//! |---|---|---|
//! | `retry` | `spec.<gate>UpdateStrategy.retry: true` for each gate with a failed run (BCS) | docs/src/concepts/hooks.md "Retry" |
//! | `retry --pod P` | delete P's failed HookRun (UID precondition); the gate creates a new one | same: retry *is* "delete the failed runs" |
//! | `pause` / `resume` | `spec.updateStrategy.paused: true` / `false` (GitOps-clean `resume`: the `resume-step` annotation) | docs/src/concepts/canary.md |
//! | `promote` | annotation `gamedeployment.tkex.tencent.com/promote: <update revision>`: skip the remaining canary steps | docs/src/concepts/canary.md |
//! | `skip-hook P` | `spec.terminate: true` on P's running HookRun | docs/src/hooks/semantics.md (`spec.terminate`) |
//! | `restart` | `spec.template.metadata.annotations["kubectl.kubernetes.io/restartedAt"]` | as `kubectl rollout restart` |
//!
//! A GameDeployment annotated `gamedeployment.tkex.tencent.com/control: annotations` (GitOps-clean) is never
//! given a spec write by `retry`, `resume` or `skip-hook`: `retry` deletes the failed HookRuns, `resume` sets the
//! annotation `gamedeployment.tkex.tencent.com/resume-step: <update revision>/<step>`, `skip-hook P` annotates the
//! pod `gamedeployment.tkex.tencent.com/skip-hook: <change>` (gamedeployment-operator `control` module).

use common::api::HookPhase;
use common::hookrun::HookKind;
use common::keys;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::snapshot::{Snapshot, gate_runs_of, gitops_clean, instance_id, run_phase};

/// Annotation `kubectl rollout restart` sets on the pod template; we use the same key.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// One API write.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// JSON merge patch of a GameDeployment.
    MergeGd {
        /// The object's name.
        name: String,
        /// The merge patch.
        patch: Value,
    },
    /// JSON merge patch of a HookRun.
    MergeRun {
        /// The object's name.
        name: String,
        /// The merge patch.
        patch: Value,
    },
    /// Delete a HookRun, only if it is still the one observed (UID precondition).
    DeleteRun {
        /// The object's name.
        name: String,
        /// The UID observed: the delete's precondition.
        uid: String,
    },
    /// JSON merge patch of a pod (its annotations).
    MergePod {
        /// The object's name.
        name: String,
        /// The merge patch.
        patch: Value,
    },
}

/// Writes plus what to tell the user.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The writes, in the order they are sent.
    pub writes: Vec<Write>,
    /// One line per thing done, printed once the writes went through.
    pub summary: Vec<String>,
}

fn failed(phase: HookPhase) -> bool {
    phase.is_completed() && phase != HookPhase::Successful
}

fn kind_of(label: Option<&str>) -> Option<HookKind> {
    HookKind::POD_HOOKS.into_iter().find(|k| Some(k.type_label()) == label)
}

/// The spec field holding a gate's strategy.
pub fn strategy_field(kind: HookKind) -> &'static str {
    match kind {
        HookKind::PreDelete => "preDeleteUpdateStrategy",
        HookKind::PreInplace => "preInplaceUpdateStrategy",
        HookKind::PostInplace => "postInplaceUpdateStrategy",
        HookKind::CanaryStep => "updateStrategy",
    }
}

fn gd_name(snapshot: &Snapshot) -> String {
    snapshot.gd.metadata.name.clone().unwrap_or_default()
}

/// `retry`: every gate with a failed run gets its `retry` flag (the operator deletes the failed runs of that gate,
/// starts new ones and sets the flag back to `false`). With `pod`, only that pod's failed runs are deleted.
pub fn retry(snapshot: &Snapshot, pod: Option<&str>) -> Result<Plan, String> {
    let name = gd_name(snapshot);
    if let Some(pod_name) = pod {
        let pod = snapshot
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(pod_name))
            .ok_or_else(|| format!("pod {pod_name} does not belong to gamedeployment {name}"))?;
        let mut plan = Plan { writes: Vec::new(), summary: Vec::new() };
        for run in gate_runs_of(pod, &snapshot.runs) {
            let phase = run_phase(run);
            if !failed(phase) || run.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let run_name = run.metadata.name.clone().unwrap_or_default();
            plan.summary.push(format!(
                "hookrun {run_name} ({phase}) deleted: the operator starts a new run for pod {pod_name}"
            ));
            plan.writes.push(Write::DeleteRun { name: run_name, uid: run.metadata.uid.clone().unwrap_or_default() });
        }
        if plan.writes.is_empty() {
            return Err(format!("pod {pod_name} has no failed HookRun to retry"));
        }
        return Ok(plan);
    }
    if gitops_clean(&snapshot.gd) {
        // No `retry` flag: delete every failed run; the gates make new ones.
        let mut plan = Plan { writes: Vec::new(), summary: Vec::new() };
        for run in &snapshot.runs {
            if !failed(run_phase(run)) || run.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let run_name = run.metadata.name.clone().unwrap_or_default();
            plan.summary.push(format!(
                "hookrun {run_name} ({}) deleted: gamedeployment {name} is GitOps-clean, so no spec is written; the \
                 operator starts a new run",
                run_phase(run)
            ));
            plan.writes.push(Write::DeleteRun { name: run_name, uid: run.metadata.uid.clone().unwrap_or_default() });
        }
        if plan.writes.is_empty() {
            return Err(format!("gamedeployment {name} has no failed HookRun to retry"));
        }
        return Ok(plan);
    }
    let mut kinds: Vec<HookKind> = Vec::new();
    let status = snapshot.gd.status.clone().unwrap_or_default();
    for (list, kind) in [
        (&status.pre_delete_hook_condition, HookKind::PreDelete),
        (&status.pre_inplace_hook_condition, HookKind::PreInplace),
        (&status.post_inplace_hook_condition, HookKind::PostInplace),
    ] {
        if list.iter().any(|c| failed(c.phase)) && !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    for run in &snapshot.runs {
        let labels = run.metadata.labels.clone().unwrap_or_default();
        if let Some(kind) = kind_of(labels.get(keys::HOOKRUN_TYPE).map(String::as_str))
            && failed(run_phase(run))
            && !kinds.contains(&kind)
        {
            kinds.push(kind);
        }
    }
    if kinds.is_empty() {
        return Err(format!("gamedeployment {name} has no failed hook to retry"));
    }
    kinds.sort_by_key(|k| HookKind::POD_HOOKS.iter().position(|p| p == k));
    let mut spec = serde_json::Map::new();
    let mut summary = Vec::new();
    for kind in kinds {
        spec.insert(strategy_field(kind).to_string(), json!({"retry": true}));
        summary.push(format!(
            "gamedeployment {name}: spec.{}.retry set to true (the operator reruns the failed {} hooks and sets it \
             back to false)",
            strategy_field(kind),
            kind.type_label().trim_end_matches("-step")
        ));
    }
    Ok(Plan { writes: vec![Write::MergeGd { name, patch: json!({"spec": Value::Object(spec)}) }], summary })
}

/// `pause` / `resume`: the user's `spec.updateStrategy.paused`.
pub fn set_paused(snapshot: &Snapshot, paused: bool) -> Plan {
    let name = gd_name(snapshot);
    let status = snapshot.gd.status.clone().unwrap_or_default();
    let mut summary = vec![format!("gamedeployment {name}: spec.updateStrategy.paused set to {paused}")];
    if !paused && !status.pause_conditions.is_empty() {
        summary.push(format!("{} resumed", step_words(snapshot)));
    }
    Plan {
        writes: vec![Write::MergeGd { name, patch: json!({"spec": {"updateStrategy": {"paused": paused}}}) }],
        summary,
    }
}

/// The canary step in progress as every view names it: counted from 1 (`status.currentStepIndex` + 1), of the
/// number of steps ("canary step 2 of 5").
pub fn step_words(snapshot: &Snapshot) -> String {
    let steps = snapshot.gd.spec.update_strategy.canary.as_ref().map_or(0, |c| c.steps.len());
    let index = snapshot.gd.status.as_ref().and_then(|s| s.current_step_index).unwrap_or(0).max(0);
    format!("canary step {} of {steps}", index + 1)
}

/// `resume`: `spec.updateStrategy.paused: false`, or — GitOps-clean — the annotation that resumes
/// the canary step in progress (`<update revision>/<step index>`), leaving the spec alone.
pub fn resume(snapshot: &Snapshot) -> Result<Plan, String> {
    if !gitops_clean(&snapshot.gd) {
        return Ok(set_paused(snapshot, false));
    }
    let name = gd_name(snapshot);
    let status = snapshot.gd.status.clone().unwrap_or_default();
    let (Some(revision), Some(step)) = (status.update_revision.clone(), status.current_step_index) else {
        return Err(format!("gamedeployment {name} has no canary step in progress to resume"));
    };
    let value = format!("{revision}/{step}");
    let mut summary = vec![format!(
        "gamedeployment {name}: annotation {}={value} set (GitOps-clean: the spec is not written); {} resumes",
        keys::RESUME_STEP,
        step_words(snapshot)
    )];
    if snapshot.gd.spec.update_strategy.paused {
        summary.push("spec.updateStrategy.paused is true in the spec: that pause is Git's to lift".to_string());
    }
    Ok(Plan {
        writes: vec![Write::MergeGd { name, patch: json!({"metadata": {"annotations": {keys::RESUME_STEP: value}}}) }],
        summary,
    })
}

/// `promote`: skip every remaining canary step of the update revision — the annotation
/// `gamedeployment.tkex.tencent.com/promote: <update revision>`, honoured in either control mode and never a spec
/// write. It names its revision, so left in place it never promotes a later rollout.
pub fn promote(snapshot: &Snapshot) -> Result<Plan, String> {
    let name = gd_name(snapshot);
    let status = snapshot.gd.status.clone().unwrap_or_default();
    let Some(revision) = status.update_revision.clone() else {
        return Err(format!("gamedeployment {name} has no update revision yet: nothing to promote"));
    };
    Ok(Plan {
        writes: vec![Write::MergeGd {
            name: name.clone(),
            patch: json!({"metadata": {"annotations": {keys::PROMOTE: revision.clone()}}}),
        }],
        summary: vec![format!(
            "gamedeployment {name}: annotation {}={revision} set; the remaining canary steps of {revision} are skipped \
             (every pod still passes its own hooks)",
            keys::PROMOTE
        )],
    })
}

/// The change whose hook holds the pod, as the `skip-hook` annotation names it: `delete`,
/// `inplace/<update revision>` or `postinplace/<revision>`.
pub fn skip_change(snapshot: &Snapshot, pod: &Pod) -> Result<String, String> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let state = common::pod::label(pod, keys::LIFECYCLE_STATE).unwrap_or("Normal");
    let status = snapshot.gd.status.clone().unwrap_or_default();
    match state {
        "PreparingDelete" => Ok("delete".to_string()),
        "PreparingUpdate" => Ok(format!("inplace/{}", status.update_revision.clone().unwrap_or_default())),
        "Updated" => {
            Ok(format!("postinplace/{}", common::pod::label(pod, keys::CONTROLLER_REVISION_HASH).unwrap_or_default()))
        }
        other => Err(format!("pod {pod_name} is {other}: no hook holds it")),
    }
}

/// `skip-hook POD` on a GitOps-clean GameDeployment: the pod annotation naming the change whose hook holds it
/// (`delete`, `inplace/<update revision>`, `postinplace/<revision>`); the gate releases it, recorded as skipped.
pub fn skip_hook_by_annotation(snapshot: &Snapshot, pod: &Pod) -> Result<Plan, String> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let change = skip_change(snapshot, pod)?;
    Ok(Plan {
        writes: vec![Write::MergePod {
            name: pod_name.clone(),
            patch: json!({"metadata": {"annotations": {keys::SKIP_HOOK: change.clone()}}}),
        }],
        summary: vec![format!(
            "pod {pod_name}: annotation {}={change} set; the gate lets it go without its hook (recorded as skipped)",
            keys::SKIP_HOOK
        )],
    })
}

/// `skip-hook POD`: terminate the pod's unfinished HookRun. The hook-operator completes a terminated run at once,
/// `Successful` unless a metric already ended worse, so the gate then lets the pod go without the remaining
/// measurements. A run that already completed is frozen: terminating it changes nothing, so it is refused with the
/// two ways out. A pod without any HookRun (its template is missing) is skipped by annotation instead.
pub fn skip_hook(snapshot: &Snapshot, pod: &Pod) -> Result<Plan, String> {
    let runs = &snapshot.runs;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let revision = common::pod::label(pod, keys::CONTROLLER_REVISION_HASH);
    let mine = gate_runs_of(pod, runs);
    if mine.is_empty() {
        return skip_hold_without_run(snapshot, pod);
    }
    let open: Vec<_> = mine
        .iter()
        .filter(|r| !run_phase(r).is_completed() && !r.spec.terminate && r.metadata.deletion_timestamp.is_none())
        .filter(|r| {
            let labels = r.metadata.labels.clone().unwrap_or_default();
            revision.is_none() || labels.get(keys::HOOKRUN_WORKLOAD_REVISION).map(String::as_str) == revision
        })
        .collect();
    if open.is_empty() {
        let described: Vec<String> =
            mine.iter().map(|r| format!("{} is {}", r.metadata.name.as_deref().unwrap_or(""), run_phase(r))).collect();
        let namespace = snapshot.gd.metadata.namespace.as_deref();
        let mut err = format!(
            "pod {pod_name} has no unfinished HookRun to skip ({}); a completed run cannot be changed: `kubectl gd \
             retry {} --pod {pod_name}` runs the hook again",
            described.join(", "),
            common::hint::target(&gd_name(snapshot), namespace),
        );
        if let Ok(change) = skip_change(snapshot, pod) {
            err.push_str(&format!(
                ", or `kubectl annotate pod {} {}={change}` lets the pod go without it (recorded as skipped)",
                common::hint::target(&pod_name, namespace),
                keys::SKIP_HOOK
            ));
        }
        return Err(err);
    }
    Ok(Plan {
        writes: open
            .iter()
            .map(|r| Write::MergeRun {
                name: r.metadata.name.clone().unwrap_or_default(),
                patch: json!({"spec": {"terminate": true}}),
            })
            .collect(),
        summary: open
            .iter()
            .map(|r| {
                format!(
                    "hookrun {} terminated: the hook-operator completes it now (Successful unless a metric already \
                     failed), and the gate then lets pod {pod_name} go",
                    r.metadata.name.as_deref().unwrap_or("")
                )
            })
            .collect(),
    })
}

/// `skip-hook POD` for a pod no HookRun holds — its hook cannot start (a missing HookTemplate, an unresolved arg) or
/// has not started yet: there is no run to terminate, so the hold is skipped by the pod annotation naming the change
/// (`delete`, `inplace/<update revision>`, `postinplace/<revision>`), which the gate honours before it makes a run,
/// in either control mode, and records as skipped. A pod in no `Preparing` state is held by nothing to skip.
fn skip_hold_without_run(snapshot: &Snapshot, pod: &Pod) -> Result<Plan, String> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let status = snapshot.gd.status.clone().unwrap_or_default();
    let held =
        [&status.pre_delete_hook_condition, &status.pre_inplace_hook_condition, &status.post_inplace_hook_condition]
            .into_iter()
            .flatten()
            .find(|c| c.pod_name == pod_name && c.released_by.is_none());
    skip_change(snapshot, pod).map_err(|why| {
        format!(
            "{why} (instance id {}, no HookRun); `kubectl gd get {}` shows what the rollout waits for",
            instance_id(pod),
            common::hint::target(&gd_name(snapshot), snapshot.gd.metadata.namespace.as_deref())
        )
    })?;
    let why = held.and_then(|c| c.message.clone()).map(|m| format!(" ({m})")).unwrap_or_default();
    let mut plan = skip_hook_by_annotation(snapshot, pod)?;
    plan.summary.insert(0, format!("pod {pod_name} has no HookRun to terminate{why}: its hook is skipped instead"));
    Ok(plan)
}

/// `restart`: a new pod-template annotation makes a new revision, so every pod moves to it through the gates.
pub fn restart(snapshot: &Snapshot, now: &str) -> Plan {
    let name = gd_name(snapshot);
    let strategy = format!("{:?}", snapshot.gd.spec.update_strategy.type_);
    let how = match strategy.as_str() {
        "RollingUpdate" => "each pod is deleted (through the pre-delete hook) and recreated",
        "InplaceUpdate" => {
            "each pod is updated in place through its pre-inplace (or pre-delete) hook; only the annotation changes, \
             so its containers keep running"
        }
        "HotPatchUpdate" => "each pod is hot-patched through its pre-inplace hook; its containers keep running",
        _ => "OnDelete: pods move to the new revision only when deleted",
    };
    Plan {
        writes: vec![Write::MergeGd {
            name: name.clone(),
            patch: json!({"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: now}}}}}),
        }],
        summary: vec![format!(
            "gamedeployment {name}: pod template annotated {RESTARTED_AT}={now}; a new revision rolls out ({strategy}: \
             {how})"
        )],
    }
}
