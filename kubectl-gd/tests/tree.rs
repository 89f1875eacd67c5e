//! The tree for a fixed set of objects (golden output, plain text), its JSON form, and the rollout verdicts.
//! `UPDATE_GOLDEN=1 cargo test -p kubectl-gd --test integration -- tree::` rewrites the golden file after an intended change.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::fixtures;

use common::api::HookPhase;
use kubectl_gd::render::{Style, render};
use kubectl_gd::rollout::{State, Verdict};
use kubectl_gd::snapshot::Snapshot;
use kubectl_gd::tree::build;

use fixtures::*;

/// The verdict at the fixtures' clock.
fn judge(snapshot: &Snapshot) -> Verdict {
    kubectl_gd::rollout::judge(snapshot, now())
}

fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} differs (UPDATE_GOLDEN=1 rewrites it):\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

#[test]
fn plain_tree_matches_the_golden_file() {
    let text = render(&build(&snapshot(), now()), Style::PLAIN);
    assert!(text.is_ascii(), "plain output is ASCII without escape sequences:\n{text}");
    assert!(!text.contains('\x1b'));
    golden("tree.txt", &text);
}

#[test]
fn terminal_tree_has_colour_and_the_same_content() {
    let text = render(&build(&snapshot(), now()), Style::TERMINAL);
    assert!(text.contains("\x1b[") && text.contains("├── ") && text.contains("✖ Failed"), "{text}");
    // Without escapes and symbols it says the same things.
    for needle in ["pod test-gamedeployment-s9rbp", "value 45", "success: asInt(result) > 30", "PreparingDelete for 1m"]
    {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
}

#[test]
fn the_tree_holds_only_this_gamedeployments_objects() {
    let tree = build(&snapshot(), now());
    let names: Vec<&str> = tree.revisions.iter().flat_map(|r| r.pods.iter().map(|p| p.name.as_str())).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    assert!(!names.iter().any(|n| n.ends_with("zzzzz")));
    assert_eq!(tree.revisions[0].name, "test-gamedeployment-5d8f9b7c4", "newest revision first");
    assert!(tree.revisions[0].update && tree.revisions[1].current);
    let held = tree.revisions[1].pods.iter().find(|p| p.name.ends_with("s9rbp")).unwrap();
    assert!(held.is_held());
    let run = &held.runs[0];
    assert_eq!(run.phase, HookPhase::Running);
    assert_eq!(run.elapsed_seconds, 60);
    let last = run.metrics[0].last.as_ref().unwrap();
    assert_eq!((last.value.as_deref(), last.phase), (Some("45"), HookPhase::Successful));
    assert_eq!(run.metrics[0].judged_by[0], "success: asInt(result) > 30");
    // JSON for scripts: the same tree.
    let json = serde_json::to_value(&tree).unwrap();
    assert_eq!(json["verdict"]["state"], "Failed");
    // CloneSet's status fields, as the operator writes them.
    assert_eq!(
        (json["progress"]["expectedUpdated"].as_i64(), json["progress"]["updatedAvailable"].as_i64()),
        (Some(3), Some(1))
    );
    assert_eq!(json["revisions"][1]["pods"][2]["runs"][0]["metrics"][0]["last"]["value"], "45", "{json:#}");
}

#[test]
fn a_failed_hook_names_the_pod_and_the_hookrun() {
    let verdict = judge(&snapshot());
    assert_eq!(verdict.state, State::Failed);
    assert_eq!(verdict.pod.as_deref(), Some("test-gamedeployment-k2x7q"));
    assert_eq!(verdict.hook_run.as_deref(), Some("predelete-test-gamedeployment-67864c6f65-k2x7q-test"));
    assert!(verdict.message.contains("failureLimit 2"), "{}", verdict.message);
    assert!(verdict.message.contains("kubectl gd retry test-gamedeployment"), "{}", verdict.message);
}

#[test]
fn a_failed_run_counts_before_the_gamedeployment_reports_it() {
    let mut gd = gd();
    gd.status.as_mut().unwrap().pre_delete_hook_condition.clear();
    let runs = vec![run("k2x7q", FAIL, FAILED)];
    let verdict = judge(&Snapshot::owned(gd, revisions(), pods(), runs));
    assert_eq!(verdict.state, State::Failed);
    assert_eq!(verdict.pod.as_deref(), Some("test-gamedeployment-k2x7q"));
}

#[test]
fn retry_requested_or_run_deleted_is_progress_not_failure() {
    let mut gd = gd();
    gd.spec.pre_delete_update_strategy.as_mut().unwrap().retry = true;
    let verdict = judge(&Snapshot::owned(gd, revisions(), pods(), vec![run("k2x7q", FAIL, FAILED)]));
    assert_eq!(verdict.state, State::Progressing, "{verdict:?}");
    // The failed run is gone (deleted for a retry) but the status still lists it: stale, not a failure.
    let verdict = judge(&Snapshot::owned(fixtures::gd(), revisions(), pods(), vec![run("s9rbp", SUCCESS, RUNNING)]));
    assert_eq!(verdict.state, State::Progressing, "{verdict:?}");
    // Retried: a new run under the same name is running again while the status still says Failed.
    let verdict = judge(&Snapshot::owned(fixtures::gd(), revisions(), pods(), vec![run("k2x7q", SUCCESS, RUNNING)]));
    assert_eq!(verdict.state, State::Progressing, "{verdict:?}");
}

#[test]
fn a_pod_released_without_its_hook_is_a_record_not_a_failure() {
    // hookPolicy released the pod (hard deadline, onFailure: Proceed, a skip): the entry stays in the status for a
    // while as a record with the run's real phase; the rollout is not held by it.
    let mut gd = gd();
    for c in &mut gd.status.as_mut().unwrap().pre_delete_hook_condition {
        c.released_by = Some(common::api::HookReleaseReason::OnFailure);
    }
    let verdict = judge(&Snapshot::owned(gd, revisions(), pods(), vec![run("k2x7q", FAIL, FAILED)]));
    assert_ne!(verdict.state, State::Failed, "{verdict:?}");
}

fn finished(mut gd: common::api::GameDeployment, reason: &str) -> common::api::GameDeployment {
    let status = gd.status.as_mut().unwrap();
    status.pre_delete_hook_condition.clear();
    status.conditions[0].reason = Some(reason.to_string());
    status.conditions[0].message = Some("all 5 pods run revision x and are available".into());
    gd
}

#[test]
fn complete_paused_and_stale() {
    let done = |gd| judge(&Snapshot::owned(gd, revisions(), settled_pods(), vec![]));
    assert_eq!(done(finished(gd(), "RolloutComplete")).state, State::Complete);
    assert_eq!(done(finished(gd(), "PartitionAvailable")).state, State::Complete);
    // Scaled, not yet observed: not complete even though the condition still says so.
    let mut gd1 = finished(gd(), "RolloutComplete");
    gd1.metadata.generation = Some(4);
    let verdict = done(gd1);
    assert_eq!(verdict.state, State::Progressing);
    assert!(verdict.message.contains("generation 4"), "{}", verdict.message);
    // Observed, but a pod too many still exists (held by its pre-delete hook).
    let mut gd2 = finished(gd(), "RolloutComplete");
    gd2.spec.replicas = Some(4);
    assert_eq!(done(gd2).state, State::Progressing);
    let mut gd3 = finished(gd(), "Paused");
    gd3.spec.update_strategy.paused = true;
    let verdict = done(gd3);
    assert_eq!(verdict.state, State::Paused);
    assert!(verdict.message.contains("kubectl gd resume"), "{}", verdict.message);
    let mut gd4 = finished(gd(), "InvalidSpec");
    gd4.status.as_mut().unwrap().conditions[0].status = "False".into();
    assert_eq!(done(gd4).state, State::Failed);
}

#[test]
fn a_rolled_back_canary_is_its_own_verdict_naming_its_hook_run_until_a_new_template_is_observed() {
    let mut gd = finished(gd(), "CanaryRolledBack");
    let status = gd.status.as_mut().unwrap();
    status.conditions[0].status = "False".into();
    let why = "HookRun canary-x-1-check of canary step 2 of 2 ended Failed (hookPolicy.onFailure: Rollback): revision \
               y is rolled back to the stable revision x; change the template to try again";
    status.conditions[0].message = Some(format!("{why}; all 5 pods run revision x and are available"));
    status.canary = Some(yaml(&format!(
        "{{revision: x, rollback: {{failedRevision: y, stableRevision: x, step: 1, hookRun: canary-x-1-check, \
         phase: Failed, rolledBackAt: '2026-01-01T00:00:00Z', message: '{why}'}}}}"
    )));
    let verdict = judge(&Snapshot::owned(gd.clone(), revisions(), settled_pods(), vec![]));
    assert_eq!(verdict.state, State::RolledBack, "its own verdict, never complete: {verdict:?}");
    assert_eq!(verdict.state.exit_code(), Some(7), "its own exit code");
    assert_eq!(verdict.hook_run.as_deref(), Some("canary-x-1-check"));
    assert!(verdict.message.starts_with("canary rolled back: HookRun canary-x-1-check"), "{}", verdict.message);
    assert!(verdict.message.ends_with("(all 5 pods run revision x and are available)"), "{}", verdict.message);
    // A new template, not observed yet: the operator is about to end the rollback.
    gd.metadata.generation = Some(gd.metadata.generation.unwrap_or(0) + 1);
    assert_eq!(judge(&Snapshot::owned(gd, revisions(), pods(), vec![])).state, State::Progressing);
}

#[test]
fn a_missing_template_fails_naming_the_pod() {
    let mut gd = finished(gd(), "RolloutInProgress");
    let status = gd.status.as_mut().unwrap();
    status.conditions.push(yaml(
        "{type: HookBlocked, status: 'True', reason: HookRunNotCreated, message: 'pod test-gamedeployment-s9rbp: \
         HookTemplate \"test\" not found in namespace default'}",
    ));
    status.pre_delete_hook_condition.push(yaml(
        "{podName: test-gamedeployment-s9rbp, startTime: '2024-05-01T10:09:00Z', phase: Pending, message: x}",
    ));
    let verdict = judge(&Snapshot::owned(gd, revisions(), pods(), vec![]));
    assert_eq!(verdict.state, State::Failed);
    assert_eq!(verdict.pod.as_deref(), Some("test-gamedeployment-s9rbp"));
    assert!(verdict.message.contains("not found"), "{}", verdict.message);
}

#[test]
fn canary_pauses_and_step_hooks() {
    let canary = |duration: Option<i32>, reason: &str| {
        let mut gd = finished(gd(), "Paused");
        let pause = match duration {
            Some(d) => format!("{{pause: {{duration: {d}}}}}"),
            None => "{pause: {}}".to_string(),
        };
        gd.spec.update_strategy.canary =
            Some(yaml(&format!("{{steps: [{{partition: 3}}, {pause}, {{hook: {{templateName: t}}}}]}}")));
        gd.spec.update_strategy.paused = true;
        let status = gd.status.as_mut().unwrap();
        status.current_step_index = Some(1);
        status.pause_conditions = vec![yaml(&format!("{{reason: {reason}, startTime: '2024-05-01T10:09:00Z'}}"))];
        status.canary = Some(yaml("{currentStepHookRun: canary-x-2-t}"));
        gd
    };
    let judge_gd = |gd| judge(&Snapshot::owned(gd, revisions(), pods(), vec![]));
    let verdict = judge_gd(canary(None, "PausedByCanaryPauseStep"));
    assert_eq!(verdict.state, State::Paused);
    assert!(verdict.message.contains("kubectl gd promote"), "{}", verdict.message);
    assert_eq!(judge_gd(canary(Some(60), "PausedByCanaryPauseStep")).state, State::Progressing, "a timed pause ends");
    let verdict = judge_gd(canary(None, "PausedByStepBasedHook"));
    assert_eq!(verdict.state, State::Failed);
    assert_eq!(verdict.hook_run.as_deref(), Some("canary-x-2-t"));
    let tree = build(&Snapshot::owned(canary(None, "PausedByCanaryPauseStep"), revisions(), pods(), vec![]), now());
    let text = render(&tree, Style::PLAIN);
    assert!(text.contains("Canary:    step 2 of 3: pause (until resumed) (PausedByCanaryPauseStep)"), "{text}");
}

/// The kubectl gd page: canary steps count from 1 in every view, and only `status.currentStepIndex` and `-o json`'s
/// `canary.step`, which mirrors it, count from 0 (the BCS-compatible index).
#[test]
fn json_canary_step_mirrors_the_0_based_index_while_every_text_counts_from_1() {
    let mut gd = finished(gd(), "Paused");
    gd.spec.update_strategy.canary = Some(yaml("{steps: [{partition: 3}, {pause: {}}, {hook: {templateName: t}}]}"));
    gd.spec.update_strategy.paused = true;
    let status = gd.status.as_mut().unwrap();
    status.current_step_index = Some(1);
    status.pause_conditions = vec![yaml("{reason: PausedByCanaryPauseStep, startTime: '2024-05-01T10:09:00Z'}")];
    let snapshot = Snapshot::owned(gd, revisions(), pods(), vec![]);
    let tree = build(&snapshot, now());
    let json = serde_json::to_value(&tree).unwrap();
    assert_eq!(json["canary"]["step"], serde_json::json!(1), "status.currentStepIndex as it is: {json:#}");
    assert!(render(&tree, Style::PLAIN).contains("Canary:    step 2 of 3"), "the tree counts from 1");
    assert!(judge(&snapshot).message.contains("canary step 2 of 3"), "status counts from 1");
}

#[test]
fn a_released_record_left_in_the_status_does_not_hold_completion() {
    // A skip, a deadline or `onFailure: Proceed` leaves its entry in the status as a record for a while; the rollout
    // it released is complete all the same (issue 34, item 1: `kubectl gd status` waited for the record to expire).
    let mut gd = finished(gd(), "RolloutComplete");
    gd.status.as_mut().unwrap().pre_delete_hook_condition.push(yaml(
        "{podName: test-gamedeployment-k2x7q, startTime: '2024-05-01T10:09:00Z', phase: Error, \
         hookRun: test-gamedeployment-k2x7q-pre-delete, releasedBy: Skipped, releasedAt: '2024-05-01T10:09:30Z'}",
    ));
    let verdict = judge(&Snapshot::owned(gd, revisions(), settled_pods(), vec![]));
    assert_eq!(verdict.state, State::Complete, "{verdict:?}");
}

#[test]
fn a_gitops_clean_canary_pause_is_a_pause_counted_from_one() {
    // GitOps-clean: the operator records the pause in status only; `spec.updateStrategy.paused` stays false
    // (issue 34, items 2 and 5: it used to time out as "progressing", and to count steps from 0).
    let mut gd = finished(gd(), "Paused");
    gd.metadata.annotations = Some([(common::keys::CONTROL.to_string(), "annotations".to_string())].into());
    gd.spec.update_strategy.canary = Some(yaml("{steps: [{partition: 3}, {pause: {}}, {hook: {templateName: t}}]}"));
    gd.spec.update_strategy.paused = false;
    let status = gd.status.as_mut().unwrap();
    status.current_step_index = Some(1);
    status.pause_conditions = vec![yaml("{reason: PausedByCanaryPauseStep, startTime: '2024-05-01T10:09:00Z'}")];
    let verdict = judge(&Snapshot::owned(gd.clone(), revisions(), pods(), vec![]));
    assert_eq!(verdict.state, State::Paused, "{verdict:?}");
    assert!(verdict.message.contains("canary step 2 of 3"), "{}", verdict.message);
    assert!(verdict.message.contains("kubectl gd resume test-gamedeployment"), "{}", verdict.message);
    // The same step, failed hook: numbered the same way.
    let status = gd.status.as_mut().unwrap();
    status.current_step_index = Some(2);
    status.pause_conditions = vec![yaml("{reason: PausedByStepBasedHook, startTime: '2024-05-01T10:09:00Z'}")];
    let verdict = judge(&Snapshot::owned(gd, revisions(), pods(), vec![]));
    assert_eq!(verdict.state, State::Failed, "{verdict:?}");
    assert!(verdict.message.contains("canary step 3 of 3"), "{}", verdict.message);
}

#[test]
fn a_failed_run_with_an_automatic_retry_to_come_is_not_a_failure() {
    // `hookPolicy.autoRetry` starts a new run after the back-off: the operator says "automatic retry 1 of 2 at …";
    // `kubectl gd status` must not report the rollout failed meanwhile (issue 34, item 3).
    let with_policy = |limit: i32| {
        let mut gd = gd();
        gd.spec.pre_delete_update_strategy =
            Some(yaml(&format!("{{hook: {{templateName: test}}, hookPolicy: {{autoRetry: {{limit: {limit}}}}}}}")));
        gd
    };
    let retried = |n: usize| {
        let mut runs = vec![run("k2x7q", FAIL, FAILED)];
        for i in 1..=n {
            let mut r = run("k2x7q", FAIL, FAILED);
            r.metadata.name = Some(format!("predelete-test-gamedeployment-67864c6f65-k2x7q-test.{i}"));
            r.metadata.uid = Some(format!("run-k2x7q-{i}"));
            runs.push(r);
        }
        runs
    };
    let verdict = judge(&Snapshot::owned(with_policy(2), revisions(), pods(), retried(0)));
    assert_ne!(verdict.state, State::Failed, "retry 1 of 2 is to come: {verdict:?}");
    let verdict = judge(&Snapshot::owned(with_policy(2), revisions(), pods(), retried(1)));
    assert_ne!(verdict.state, State::Failed, "retry 2 of 2 is to come: {verdict:?}");
    let verdict = judge(&Snapshot::owned(with_policy(2), revisions(), pods(), retried(2)));
    assert_eq!(verdict.state, State::Failed, "retries used up: {verdict:?}");
}

#[test]
fn the_last_automatic_retry_just_created_is_progress_not_a_failure() {
    // examples/hook-deadlines.yaml (autoRetry limit 3) on kube-sim: the operator had created the third retry
    // (`….3`, not yet measured) while the status still named the failed `….2`; `kubectl gd status` counted 4 runs
    // against the limit and exited 1 a whole run early (tests/e2e/tests/examples_complete.rs, hook_deadlines).
    let mut gd = gd();
    gd.spec.pre_delete_update_strategy =
        Some(yaml("{hook: {templateName: test}, hookPolicy: {autoRetry: {limit: 3}}}"));
    let mut runs = vec![run("k2x7q", FAIL, FAILED)];
    for (i, status) in [(1, FAILED), (2, FAILED), (3, RUNNING)] {
        let mut r = run("k2x7q", FAIL, status);
        r.metadata.name = Some(format!("predelete-test-gamedeployment-67864c6f65-k2x7q-test.{i}"));
        r.metadata.uid = Some(format!("run-k2x7q-{i}"));
        runs.push(r);
    }
    let mut unmeasured = runs.clone();
    unmeasured[3].status = None;
    for runs in [runs, unmeasured] {
        let verdict = judge(&Snapshot::owned(gd.clone(), revisions(), pods(), runs));
        assert_ne!(verdict.state, State::Failed, "the last retry is under way: {verdict:?}");
    }
}

#[test]
fn a_failure_the_status_has_not_caught_up_with_names_the_latest_run() {
    // The same example once the third retry failed too, before the operator's next status write (its entry still
    // says `….3` is Running): the failure is final, and the run to look at is `….3`, not the first of the four.
    let mut gd = gd();
    gd.spec.pre_delete_update_strategy =
        Some(yaml("{hook: {templateName: test}, hookPolicy: {autoRetry: {limit: 3}}}"));
    let latest = "predelete-test-gamedeployment-67864c6f65-k2x7q-test.3";
    let entry =
        gd.status.as_mut().unwrap().pre_delete_hook_condition.iter_mut().find(|c| c.pod_name.ends_with("k2x7q"));
    let entry = entry.unwrap();
    entry.phase = HookPhase::Running;
    entry.hook_run = Some(latest.to_string());
    let mut runs = vec![run("k2x7q", FAIL, FAILED)];
    for i in 1..=3 {
        let mut r = run("k2x7q", FAIL, FAILED);
        r.metadata.name = Some(format!("predelete-test-gamedeployment-67864c6f65-k2x7q-test.{i}"));
        r.metadata.uid = Some(format!("run-k2x7q-{i}"));
        runs.push(r);
    }
    let verdict = judge(&Snapshot::owned(gd, revisions(), pods(), runs));
    assert_eq!(verdict.state, State::Failed, "{verdict:?}");
    assert_eq!(verdict.hook_run.as_deref(), Some(latest), "{verdict:?}");
}

#[test]
fn a_race_to_empty_candidate_whose_hook_fails_is_skipped_not_held() {
    // RaceToEmpty skips a candidate whose pre-delete hook fails and starts another (issue 34, item 3).
    let mut gd = gd();
    gd.spec.scale_strategy = Some(yaml("{scaleInPolicy: {mode: RaceToEmpty}}"));
    gd.spec.replicas = Some(4);
    let verdict = judge(&Snapshot::owned(gd.clone(), revisions(), pods(), vec![run("k2x7q", FAIL, FAILED)]));
    assert_ne!(verdict.state, State::Failed, "{verdict:?}");
    // Not scaling in: a failed pre-delete hook of a rolling update holds as always.
    gd.spec.replicas = Some(5);
    let verdict = judge(&Snapshot::owned(gd, revisions(), pods(), vec![run("k2x7q", FAIL, FAILED)]));
    assert_eq!(verdict.state, State::Failed, "{verdict:?}");
}

#[test]
fn under_gitops_clean_the_retry_hint_deletes_runs_instead_of_setting_the_spec() {
    // `kubectl gd retry` on a GitOps-clean GameDeployment deletes the failed HookRuns (issue 34, item 6).
    let mut gd = gd();
    let verdict = judge(&Snapshot::owned(gd.clone(), revisions(), pods(), vec![run("k2x7q", FAIL, FAILED)]));
    assert!(verdict.message.contains("it sets spec.preDeleteUpdateStrategy.retry"), "{}", verdict.message);
    gd.metadata.annotations = Some([(common::keys::CONTROL.to_string(), "annotations".to_string())].into());
    let verdict = judge(&Snapshot::owned(gd, revisions(), pods(), vec![run("k2x7q", FAIL, FAILED)]));
    assert!(!verdict.message.contains("it sets spec"), "{}", verdict.message);
    assert!(
        verdict.message.contains(
            "run `kubectl gd retry test-gamedeployment -n default` once the cause is fixed; it deletes the failed HookRuns"
        ),
        "{}",
        verdict.message
    );
}

/// Under a hook-operator that scales intervals (the sandbox's `--fast`), the manifest's `every 60s` is not what
/// happens: the next measurement's `resumeAt` says when it really comes, and the view says so (issue 34, item 7).
#[test]
fn a_scaled_interval_is_shown_as_it_is_measured() {
    let build_with = |status: &str| {
        let runs = vec![run("s9rbp", SUCCESS, status)];
        build(&Snapshot::owned(gd(), revisions(), pods(), runs), now())
    };
    let limits = |tree: &kubectl_gd::tree::Tree| {
        let pod = tree.revisions.iter().flat_map(|r| &r.pods).find(|p| p.name == "test-gamedeployment-s9rbp");
        pod.unwrap().runs[0].metrics[0].judged_by[1].clone()
    };
    assert_eq!(limits(&build_with(RUNNING)), "count 3, every 60s, failureLimit 2", "as written, as measured");
    let fast = RUNNING.replace("resumeAt: \"2024-05-01T10:10:01Z\"", "resumeAt: \"2024-05-01T10:09:07Z\"");
    assert_eq!(
        limits(&build_with(&fast)),
        "count 3, every 60s (~6s apart here: this hook-operator scales intervals), failureLimit 2"
    );
}

/// `spec.progressDeadlineSeconds` passed (the operator's `ProgressDeadlineExceeded`): its own state, `Stalled`
/// (`kubectl gd status` exits 6), with the operator's account of what the rollout waits for; a failed hook still
/// says `Failed` first.
#[test]
fn a_rollout_past_its_progress_deadline_is_stalled() {
    let mut gd = finished(gd(), "ProgressDeadlineExceeded");
    let status = gd.status.as_mut().unwrap();
    status.conditions[0].status = "False".into();
    status.conditions[0].message =
        Some("no progress for 600s (spec.progressDeadlineSeconds), since 2024-05-01T10:00:00Z: waiting for x".into());
    let verdict = judge(&Snapshot::owned(gd.clone(), revisions(), pods(), vec![]));
    assert_eq!(verdict.state, State::Stalled, "{verdict:?}");
    // `kubectl gd get` shows this verdict: it does not tell the reader to run `kubectl gd get` (issue 49, finding
    // 8); `kubectl gd status` adds that pointer.
    assert_eq!(
        verdict.message,
        "no progress for 600s (spec.progressDeadlineSeconds), since 2024-05-01T10:00:00Z: waiting for x"
    );
    assert_eq!(
        kubectl_gd::rollout::next_look(&verdict, "test-gamedeployment", Some("default")).as_deref(),
        Some("`kubectl gd get test-gamedeployment -n default` shows each pod and hook")
    );
    let text = render(&build(&Snapshot::owned(gd.clone(), revisions(), pods(), vec![]), now()), Style::PLAIN);
    assert!(!text.contains("kubectl gd get"), "{text}");
    let failed = judge(&Snapshot::owned(gd, revisions(), pods(), vec![run("k2x7q", FAIL, FAILED)]));
    assert_eq!(failed.state, State::Failed, "{failed:?}");
}

/// The server states the pods declare (`status.serverStates`) are shown under Progress, and in the JSON.
#[test]
fn server_states_are_shown() {
    let mut gd = gd();
    gd.status.as_mut().unwrap().server_states =
        [("Allocated".to_string(), 3), ("Idle".to_string(), 2), ("WaitToBeDeleted".to_string(), 1)].into();
    let tree = build(&Snapshot::owned(gd, revisions(), pods(), vec![]), now());
    let text = render(&tree, Style::PLAIN);
    assert!(text.contains("Servers:   3 Allocated, 2 Idle, 1 WaitToBeDeleted\n"), "{text}");
    let json = serde_json::to_value(&tree).unwrap();
    assert_eq!(json["progress"]["serverStates"]["Idle"], 2, "{json:#}");
    // None declared: no line.
    let tree = build(&snapshot(), now());
    assert!(!render(&tree, Style::PLAIN).contains("Servers:"));
}

/// Each pod's declared server state is on its line (a named state only: never a value a pod made up).
#[test]
fn each_pod_shows_the_state_its_server_declares() {
    let mut pods = pods();
    let label = |pod: &mut k8s_openapi::api::core::v1::Pod, value: &str| {
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("gamedeployment.tkex.tencent.com/server-state".into(), value.into());
    };
    label(&mut pods[0], "Maintaining");
    label(&mut pods[1], "made-up");
    let (first, second) = (pods[0].metadata.name.clone().unwrap(), pods[1].metadata.name.clone().unwrap());
    let tree = build(&Snapshot::owned(gd(), revisions(), pods, vec![]), now());
    let text = render(&tree, Style::PLAIN);
    let line = |name: &str| text.lines().find(|l| l.contains(&format!("pod {name} "))).unwrap_or_default().to_string();
    assert!(line(&first).contains("  server Maintaining  "), "{text}");
    assert!(!line(&second).contains("server"), "{text}");
    let json = serde_json::to_value(&tree).unwrap();
    assert!(json.to_string().contains(r#""serverState":"Maintaining""#), "{json:#}");
}

/// A failed shadow run (`shadowHook`) decides nothing: no verdict or action looks at it, the tree shows it with its
/// kind, and `kubectl gd get` summarises the recorded results.
#[test]
fn a_failed_shadow_run_is_shown_but_never_a_failure() {
    let mut gd = gd();
    gd.status.as_mut().unwrap().pre_delete_hook_condition.clear();
    gd.status.as_mut().unwrap().shadow_hook_results = vec![yaml(
        "{hook: preDelete, podName: test-gamedeployment-k2x7q, templateName: test-fail, \
          hookRun: shadow-predelete-test-gamedeployment-k2x7q-x-test-fail, phase: Failed, message: 'value 45', \
          gate: Running, finishedAt: '2024-05-01T10:08:03Z'}",
    )];
    let mut shadow = run("k2x7q", FAIL, FAILED);
    shadow.metadata.name = Some("shadow-predelete-test-gamedeployment-k2x7q-x-test-fail".into());
    shadow.metadata.labels.as_mut().unwrap().insert("hookrun-type".into(), "shadow-pre-delete-step".into());
    gd.spec.pre_delete_update_strategy.as_mut().unwrap().shadow_hook = Some(yaml("{templateName: test-fail}"));
    let snapshot = Snapshot::owned(gd, revisions(), pods(), vec![shadow]);
    let verdict = judge(&snapshot);
    assert_ne!(verdict.state, State::Failed, "{verdict:?}");
    let retry = kubectl_gd::actions::retry(&snapshot, Some("test-gamedeployment-k2x7q"));
    assert!(retry.is_err_and(|e| e.contains("no failed HookRun to retry")), "a shadow run is never retried");
    let text = render(&build(&snapshot, now()), Style::PLAIN);
    assert!(text.contains("Hooks:     pre-delete: test, pre-delete shadow: test-fail\n"), "{text}");
    assert!(
        text.contains("hookrun shadow-predelete-test-gamedeployment-k2x7q-x-test-fail  shadow-pre-delete-step"),
        "{text}"
    );
    assert!(
        text.contains(
            "Shadow:    1 results, 0 successful; latest: preDelete test-fail hook \
             shadow-predelete-test-gamedeployment-k2x7q-x-test-fail on pod test-gamedeployment-k2x7q ended Failed (real gate: Running): value 45"
        ),
        "{text}"
    );
}

/// Post-inplace and canary step shadow hooks are listed under `Hooks:` beside the real ones, and a canary step's
/// result names its step.
#[test]
fn post_inplace_and_canary_shadow_hooks_are_listed_with_the_hooks() {
    let mut gd = gd();
    gd.spec.post_inplace_update_strategy = Some(yaml("{shadowHook: {templateName: settle-check}}"));
    gd.spec.update_strategy.canary =
        Some(yaml("{steps: [{partition: 1}, {shadowHook: {templateName: canary-trial}}]}"));
    gd.status.as_mut().unwrap().shadow_hook_results = vec![yaml(
        "{hook: canaryStep, podName: '', canaryStep: 1, templateName: canary-trial, \
          hookRun: shadow-canary-x-1-canary-trial, phase: Successful, gate: no hook, finishedAt: '2024-05-01T10:08:03Z'}",
    )];
    let snapshot = Snapshot::owned(gd, revisions(), pods(), Vec::new());
    let text = render(&build(&snapshot, now()), Style::PLAIN);
    assert!(text.contains("post-inplace shadow: settle-check, canary step 2 shadow: canary-trial\n"), "{text}");
    assert!(
        text.contains(
            "latest: canaryStep canary-trial hook shadow-canary-x-1-canary-trial on canary step 2 ended Successful"
        ),
        "{text}"
    );
}

/// Issue 49, finding 1: "complete" means every desired pod exists, runs the update revision and is available — checked
/// on the pods, since the operator's status is a pass behind its own actions. The pass that deletes a pod listed in
/// `podsToDelete` writes a status that still counts it (`PartitionAvailable`, 4 of 4): `kubectl gd status` exited 0
/// while the replacement did not exist yet.
#[test]
fn complete_only_when_every_desired_pod_exists_runs_the_update_revision_and_is_available() {
    let judge_pods = |gd: &common::api::GameDeployment, pods: Vec<k8s_openapi::api::core::v1::Pod>| {
        judge(&Snapshot::owned(gd.clone(), revisions(), pods, vec![]))
    };
    let mut gd = finished(gd(), "RolloutComplete");
    gd.spec.scale_strategy = Some(yaml("{podsToDelete: [test-gamedeployment-a1b2c]}"));
    // Listed for deletion, not deleted yet: about to be replaced.
    let verdict = judge_pods(&gd, settled_pods());
    assert_eq!(verdict.state, State::Progressing, "{verdict:?}");
    assert!(
        verdict.message.contains("pod test-gamedeployment-a1b2c to be deleted and replaced"),
        "{}",
        verdict.message
    );
    // Deleted (terminating), its replacement not created yet.
    let mut pods = settled_pods();
    pods[2].metadata.deletion_timestamp = Some(yaml("'2024-05-01T10:09:59Z'"));
    gd.spec.scale_strategy = None;
    let verdict = judge_pods(&gd, pods.clone());
    assert_eq!(verdict.state, State::Progressing, "{verdict:?}");
    assert!(verdict.message.starts_with("waiting for 5 pods to exist (4 do now)"), "{}", verdict.message);
    // The replacement exists, not ready yet.
    let mut replacement = pod("zz9yx", "test-gamedeployment-5d8f9b7c4", "Normal", "2024-05-01T10:10:00Z", false);
    replacement.metadata.name = Some("test-gamedeployment-zz9yx".into());
    pods.push(replacement.clone());
    let verdict = judge_pods(&gd, pods.clone());
    assert_eq!(verdict.state, State::Progressing, "{verdict:?}");
    assert!(verdict.message.contains("pod test-gamedeployment-zz9yx to become available"), "{}", verdict.message);
    // Ready, but not for minReadySeconds yet.
    gd.spec.min_ready_seconds = 30;
    let ready_now = |mut p: k8s_openapi::api::core::v1::Pod, since: &str| {
        p.status.as_mut().unwrap().conditions =
            Some(vec![yaml(&format!("{{type: Ready, status: 'True', lastTransitionTime: '{since}'}}"))]);
        p
    };
    let mut pods: Vec<_> = pods.into_iter().map(|p| ready_now(p, "2024-05-01T10:00:00Z")).collect();
    let last = pods.len() - 1;
    pods[last] = ready_now(replacement, "2024-05-01T10:09:50Z");
    let verdict = judge_pods(&gd, pods.clone());
    assert_eq!(verdict.state, State::Progressing, "available 30s after ready: {verdict:?}");
    pods[last] = ready_now(pods[last].clone(), "2024-05-01T10:09:00Z");
    assert_eq!(judge_pods(&gd, pods.clone()).state, State::Complete);
    // Not on the update revision: a RolloutComplete status from before the template changed cannot say so.
    pods[0]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("controller-revision-hash".into(), "test-gamedeployment-67864c6f65".into());
    // A server in `Maintaining` is left on its revision, unready: the operator's RolloutComplete holds around it.
    let mut maintaining = pods.clone();
    maintaining[0].metadata.labels.as_mut().unwrap().insert(common::keys::SERVER_STATE.into(), "Maintaining".into());
    maintaining[0].status.as_mut().unwrap().conditions = Some(vec![yaml("{type: Ready, status: 'False'}")]);
    assert_eq!(judge_pods(&gd, maintaining).state, State::Complete);
    let verdict = judge_pods(&gd, pods);
    assert_eq!(verdict.state, State::Progressing, "{verdict:?}");
    assert!(
        verdict.message.contains("5 pods to run revision test-gamedeployment-5d8f9b7c4 (4 do now)"),
        "{}",
        verdict.message
    );
}

/// Issue 49, finding 6: what the rollout waits for that ends at a known time, with that time — a timed canary
/// pause, an in-place grace period, the progress deadline — in the verdict (`kubectl gd get`'s `Waiting:` lines, its
/// JSON) and in `kubectl gd status`'s progress line with the time since it started.
#[test]
fn waits_that_end_at_a_known_time_are_shown_with_that_time() {
    let mut paused = finished(gd(), "Paused");
    paused.spec.update_strategy.canary =
        Some(yaml("{steps: [{partition: 3}, {pause: {duration: 60}}, {partition: 0}]}"));
    paused.spec.update_strategy.paused = true;
    let status = paused.status.as_mut().unwrap();
    status.current_step_index = Some(1);
    status.pause_conditions = vec![yaml("{reason: PausedByCanaryPauseStep, startTime: '2024-05-01T10:09:30Z'}")];
    let snapshot = Snapshot::owned(paused, revisions(), settled_pods(), vec![]);
    let verdict = judge(&snapshot);
    assert_eq!(verdict.state, State::Progressing, "{verdict:?}");
    assert_eq!(verdict.waits.len(), 1, "{verdict:?}");
    assert_eq!(verdict.waits[0].what, "the pause of canary step 2 of 3 (60s)");
    assert_eq!(verdict.waits[0].until.0.to_string(), "2024-05-01T10:10:30Z");
    assert_eq!(verdict.waits[0].remaining_seconds, 30);
    let started: k8s_openapi::jiff::Timestamp = "2024-05-01T10:08:55Z".parse().unwrap();
    assert_eq!(
        kubectl_gd::commands::status_line(&verdict, started, now()),
        "[1m5s] Progressing: canary step 2 of 3 pauses the rollout for 60s; waiting for the pause of canary step 2 of \
         3 (60s) until 2024-05-01T10:10:30Z (in 30s)"
    );
    let text = render(&build(&snapshot, now()), Style::PLAIN);
    assert!(
        text.contains("Waiting:   the pause of canary step 2 of 3 (60s) until 2024-05-01T10:10:30Z (in 30s)\n"),
        "{text}"
    );
    let json = serde_json::to_value(build(&snapshot, now())).unwrap();
    assert_eq!(json["verdict"]["waits"][0]["until"], "2024-05-01T10:10:30Z", "{json:#}");

    // An in-place grace period, and the progress deadline, while the rollout is in progress.
    let mut gd = gd();
    gd.status.as_mut().unwrap().pre_delete_hook_condition.clear();
    gd.spec.progress_deadline_seconds = Some(600);
    gd.status.as_mut().unwrap().conditions[0].last_update_time = Some(yaml("'2024-05-01T10:05:00Z'"));
    let mut pods = pods();
    pods[2].metadata.annotations.as_mut().unwrap().insert(
        "inplace-update-grace".into(),
        r#"{"revision":"test-gamedeployment-5d8f9b7c4","containerImages":{"python":"python:3.5"},"graceSeconds":30,"updateTimestamp":"2024-05-01T10:09:45Z"}"#.into(),
    );
    let verdict = judge(&Snapshot::owned(gd, revisions(), pods, vec![]));
    assert_eq!(verdict.state, State::Progressing, "{verdict:?}");
    let waits: Vec<(String, String)> = verdict.waits.iter().map(|w| (w.what.clone(), w.until.0.to_string())).collect();
    assert_eq!(
        waits,
        [
            (
                "the in-place grace period of pod test-gamedeployment-a1b2c (30s)".to_string(),
                "2024-05-01T10:10:15Z".to_string()
            ),
            (
                "progress before the deadline (spec.progressDeadlineSeconds 600)".to_string(),
                "2024-05-01T10:15:00Z".to_string()
            ),
        ]
    );
}

/// Issue 49, finding 8: `Hooks:` names a canary step's hook (it said `none` when that was the only hook), and
/// `Progress:` never says "updated 6/5": while pods are added or removed it counts out of those that exist.
#[test]
fn a_canary_step_hook_is_a_hook_and_progress_never_counts_past_the_desired_pods() {
    let mut gd = gd();
    gd.spec.pre_delete_update_strategy = None;
    gd.spec.update_strategy.canary = Some(yaml("{steps: [{partition: 1}, {hook: {templateName: canary-check}}]}"));
    let status = gd.status.as_mut().unwrap();
    status.replicas = 6;
    status.updated_replicas = 6;
    status.expected_updated_replicas = 5;
    let text = render(&build(&Snapshot::owned(gd, revisions(), pods(), vec![]), now()), Style::PLAIN);
    assert!(text.contains("Hooks:     canary step 2: canary-check\n"), "{text}");
    assert!(text.contains("Progress:  updated 6 of 6 pods (desired 5), updated ready"), "{text}");
    assert!(!text.contains("6/5"), "{text}");
}

/// Issue 49, finding 8: the spacing of measurements is the one a person timing them sees — between the starts of the
/// last two — once there are two (`resumeAt` is rounded up to a whole second after a truncated `finishedAt`, so it
/// read "~7s apart" for measurements 6 s apart).
#[test]
fn the_spacing_of_measurements_is_measured_between_their_starts() {
    let two = "  phase: Running\n  startedAt: \"2024-05-01T10:09:00Z\"\n  metricResults:\n  - name: webtest\n    phase: \
               Running\n    count: 2\n    successful: 2\n    measurements:\n    - {phase: Successful, value: \"45\", \
               startedAt: \"2024-05-01T10:09:00Z\", finishedAt: \"2024-05-01T10:09:00Z\", resumeAt: \
               \"2024-05-01T10:09:07Z\"}\n    - {phase: Successful, value: \"45\", startedAt: \"2024-05-01T10:09:06Z\", \
               finishedAt: \"2024-05-01T10:09:06Z\", resumeAt: \"2024-05-01T10:09:13Z\"}";
    let tree = build(&Snapshot::owned(gd(), revisions(), pods(), vec![run("s9rbp", SUCCESS, two)]), now());
    let pod = tree.revisions.iter().flat_map(|r| &r.pods).find(|p| p.name == "test-gamedeployment-s9rbp").unwrap();
    assert_eq!(
        pod.runs[0].metrics[0].judged_by[1],
        "count 3, every 60s (~6s apart here: this hook-operator scales intervals), failureLimit 2"
    );
}
