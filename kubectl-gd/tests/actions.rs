//! What each action writes, for the fixed objects of `fixtures`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::fixtures;

use kubectl_gd::actions::{self, RESTARTED_AT, Write};
use kubectl_gd::snapshot::Snapshot;
use serde_json::json;

use fixtures::*;

#[test]
fn retry_sets_the_flag_of_each_gate_with_a_failed_run() {
    let plan = actions::retry(&snapshot(), None).unwrap();
    assert_eq!(
        plan.writes,
        vec![Write::MergeGd {
            name: "test-gamedeployment".into(),
            patch: json!({"spec": {"preDeleteUpdateStrategy": {"retry": true}}})
        }]
    );
    assert!(plan.summary[0].contains("spec.preDeleteUpdateStrategy.retry set to true"), "{:?}", plan.summary);
    // Nothing failed: nothing to do, and the user is told.
    let calm = Snapshot::owned(gd(), revisions(), pods(), vec![run("s9rbp", SUCCESS, RUNNING)]);
    let mut calm_gd = calm.gd.clone();
    calm_gd.status.as_mut().unwrap().pre_delete_hook_condition.retain(|c| c.pod_name.ends_with("s9rbp"));
    let calm = Snapshot { gd: calm_gd, ..calm };
    assert!(actions::retry(&calm, None).unwrap_err().contains("no failed hook"));
}

#[test]
fn retry_of_one_pod_deletes_only_its_failed_run_with_a_uid_precondition() {
    let plan = actions::retry(&snapshot(), Some("test-gamedeployment-k2x7q")).unwrap();
    assert_eq!(
        plan.writes,
        vec![Write::DeleteRun {
            name: "predelete-test-gamedeployment-67864c6f65-k2x7q-test".into(),
            uid: "run-k2x7q".into()
        }]
    );
    let err = actions::retry(&snapshot(), Some("test-gamedeployment-s9rbp")).unwrap_err();
    assert!(err.contains("no failed HookRun"), "{err}");
    let err = actions::retry(&snapshot(), Some("test-gamedeployment-zzzzz")).unwrap_err();
    assert!(err.contains("does not belong"), "{err}");
}

#[test]
fn skip_hook_terminates_only_an_unfinished_run() {
    let s = snapshot();
    let held = s.pods.iter().find(|p| p.metadata.name.as_deref() == Some("test-gamedeployment-s9rbp")).unwrap();
    let plan = actions::skip_hook(&s, held).unwrap();
    assert_eq!(
        plan.writes,
        vec![Write::MergeRun {
            name: "predelete-test-gamedeployment-67864c6f65-s9rbp-test".into(),
            patch: json!({"spec": {"terminate": true}})
        }]
    );
    let failed = s.pods.iter().find(|p| p.metadata.name.as_deref() == Some("test-gamedeployment-k2x7q")).unwrap();
    let err = actions::skip_hook(&s, failed).unwrap_err();
    assert!(err.contains("is Failed"), "{err}");
    // Both ways out, as exact commands (issue 34, item 6: the hint lacked the GameDeployment's name).
    assert!(err.contains("`kubectl gd retry test-gamedeployment -n default --pod test-gamedeployment-k2x7q`"), "{err}");
    assert!(
        err.contains(
            "`kubectl annotate pod test-gamedeployment-k2x7q -n default gamedeployment.tkex.tencent.com/skip-hook=delete`"
        ),
        "{err}"
    );
    let normal = s.pods.iter().find(|p| p.metadata.name.as_deref() == Some("test-gamedeployment-a1b2c")).unwrap();
    assert_eq!(
        actions::skip_hook(&s, normal).unwrap_err(),
        "pod test-gamedeployment-a1b2c is Normal: no hook holds it (instance id a1b2c, no HookRun); `kubectl gd get \
         test-gamedeployment -n default` shows what the rollout waits for"
    );
}

/// Issue 49, finding 5: a pod held by a hook that cannot start (its HookTemplate is missing: no HookRun exists) is
/// skipped by the pod's `skip-hook` annotation, in either control mode — there is no run to terminate.
#[test]
fn skip_hook_of_a_pod_whose_hook_cannot_start_skips_it_by_annotation() {
    let mut s = snapshot();
    s.runs.clear();
    let status = s.gd.status.as_mut().unwrap();
    status.pre_delete_hook_condition = vec![yaml(
        "{podName: test-gamedeployment-s9rbp, startTime: '2024-05-01T10:09:00Z', phase: Pending, message: 'HookTemplate \
         \"test\" not found in namespace default'}",
    )];
    let held = s.pods.iter().find(|p| p.metadata.name.as_deref() == Some("test-gamedeployment-s9rbp")).unwrap();
    let plan = actions::skip_hook(&s, held).unwrap();
    assert_eq!(
        plan.writes,
        vec![Write::MergePod {
            name: "test-gamedeployment-s9rbp".into(),
            patch: json!({"metadata": {"annotations": {common::keys::SKIP_HOOK: "delete"}}})
        }]
    );
    assert_eq!(
        plan.summary[0],
        "pod test-gamedeployment-s9rbp has no HookRun to terminate (HookTemplate \"test\" not found in namespace \
         default): its hook is skipped instead"
    );
}

/// Issue 49, finding 3: `resume` names the step it ends as every view does, counted from 1 ("canary step 2 of 5",
/// where it said "canary step 1 resumed"), in both control modes.
#[test]
fn resume_counts_canary_steps_from_one() {
    let mut s = snapshot();
    s.gd.spec.update_strategy.canary =
        Some(yaml("{steps: [{partition: 3}, {pause: {}}, {partition: 2}, {partition: 1}, {pause: {}}]}"));
    let status = s.gd.status.as_mut().unwrap();
    status.current_step_index = Some(1);
    status.pause_conditions = vec![yaml("{reason: PausedByCanaryPauseStep, startTime: '2024-05-01T10:09:00Z'}")];
    let plan = actions::resume(&s).unwrap();
    assert_eq!(plan.summary[1], "canary step 2 of 5 resumed", "{:?}", plan.summary);
    s.gd.status.as_mut().unwrap().current_step_index = Some(4);
    assert_eq!(actions::resume(&s).unwrap().summary[1], "canary step 5 of 5 resumed");
    s.gd.metadata.annotations = Some([(common::keys::CONTROL.to_string(), "annotations".to_string())].into());
    let plan = actions::resume(&s).unwrap();
    assert!(plan.summary[0].ends_with("canary step 5 of 5 resumes"), "{:?}", plan.summary);
}

#[test]
fn pause_resume_and_restart_patch_the_spec() {
    let s = snapshot();
    let paused = actions::set_paused(&s, true);
    assert_eq!(
        paused.writes,
        vec![Write::MergeGd {
            name: "test-gamedeployment".into(),
            patch: json!({"spec": {"updateStrategy": {"paused": true}}})
        }]
    );
    let resumed = actions::set_paused(&s, false);
    assert!(
        matches!(&resumed.writes[0], Write::MergeGd { patch, .. } if patch["spec"]["updateStrategy"]["paused"] == false)
    );
    let restart = actions::restart(&s, "2024-05-01T10:10:00Z");
    assert_eq!(
        restart.writes,
        vec![Write::MergeGd {
            name: "test-gamedeployment".into(),
            patch: json!({"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: "2024-05-01T10:10:00Z"}}}}})
        }]
    );
    assert!(restart.summary[0].contains("containers keep running"), "InplaceUpdate: {:?}", restart.summary);
}

#[test]
fn promote_skips_the_remaining_steps_resume_ends_one() {
    // One meaning per verb (issue 34, item 5): `promote` is the `promote` annotation (skip every remaining canary
    // step of the update revision, in either control mode); `resume` ends the current step only.
    let mut s = snapshot();
    s.gd.status.as_mut().unwrap().update_revision = Some("test-gamedeployment-7c9f".into());
    let plan = actions::promote(&s).unwrap();
    assert_eq!(
        plan.writes,
        vec![Write::MergeGd {
            name: "test-gamedeployment".into(),
            patch: json!({"metadata": {"annotations": {common::keys::PROMOTE: "test-gamedeployment-7c9f"}}})
        }]
    );
    assert!(plan.summary[0].contains("remaining canary steps"), "{:?}", plan.summary);
    s.gd.status.as_mut().unwrap().update_revision = None;
    assert!(actions::promote(&s).unwrap_err().contains("no update revision"));
}

/// GitOps-clean `skip-hook`: the pod annotation naming the change its hook holds (never a spec or run write);
/// `delete` for a pod in `PreparingDelete`, `inplace/<update revision>` in `PreparingUpdate`, `postinplace/<its
/// revision>` in `Updated`; a pod no hook holds is refused.
#[test]
fn skip_hook_by_annotation_names_the_held_change() {
    let s = snapshot();
    let pod = |id: &str, state: &str| {
        let mut p = s
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&format!("test-gamedeployment-{id}")))
            .unwrap()
            .clone();
        p.metadata.labels.as_mut().unwrap().insert(common::keys::LIFECYCLE_STATE.into(), state.into());
        p
    };
    for (state, change) in [
        ("PreparingDelete", "delete".to_string()),
        ("PreparingUpdate", "inplace/test-gamedeployment-5d8f9b7c4".to_string()),
        ("Updated", "postinplace/test-gamedeployment-67864c6f65".to_string()),
    ] {
        let plan = actions::skip_hook_by_annotation(&s, &pod("a1b2c", state)).unwrap();
        assert_eq!(
            plan.writes,
            vec![Write::MergePod {
                name: "test-gamedeployment-a1b2c".into(),
                patch: json!({"metadata": {"annotations": {common::keys::SKIP_HOOK: change}}})
            }],
            "{state}"
        );
    }
    let err = actions::skip_hook_by_annotation(&s, &pod("a1b2c", "Normal")).unwrap_err();
    assert_eq!(err, "pod test-gamedeployment-a1b2c is Normal: no hook holds it");
}
