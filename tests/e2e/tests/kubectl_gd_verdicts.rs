//! `kubectl gd`'s one rollout verdict, as a CI job and an on-call person meet it (issue 49), through the real
//! kubectl's plugin mechanism on kube-sim:
//!
//! - `status` after `podsToDelete`: exits 0 only once the replacement exists, runs the update revision and is
//!   available — not in the pass that deletes the pod (finding 1);
//! - `status` during a timed canary pause prints the elapsed time and the pause with the time it ends, one line per
//!   change (no terminal here); `resume` names the step as every view counts it, from 1 (findings 3 and 6);
//! - `skip-hook` of a pod held by a missing HookTemplate (no HookRun to terminate) lets it go by the pod's
//!   `skip-hook` annotation, recorded as skipped (finding 5).

use crate::kubectl_gd::kubectl_gd;
use crate::walkthrough_support;

use e2e::gamedeployment::{Columns, apply, live_pods, manifest, revision, wait_columns};
use e2e::{Cluster, wait_for};
use walkthrough_support::*;

/// Finding 1: the pass that deletes a pod of `podsToDelete` wrote a status that still counted it, and `kubectl gd
/// status` exited 0 ("rollout complete") before the replacement existed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_after_pods_to_delete_waits_for_the_replacement() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "hook-template-success.yaml").await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    let before = live_pods(&cluster, NAME).await;
    let victim = before[0].metadata.name.clone().expect("a pod name");
    let patch = format!(r#"{{"spec":{{"scaleStrategy":{{"podsToDelete":["{victim}"]}}}}}}"#);
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=merge", "-p", &patch]).await;

    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "4m"]).await;
    // Read at once: what `status` saw when it exited can only have moved on (nothing here makes a pod worse).
    let pods = live_pods(&cluster, NAME).await;
    let gd = get_gd(&cluster).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("rollout complete"), "{out:?}");
    let update = gd.status.as_ref().and_then(|s| s.update_revision.clone()).expect("an update revision");
    let names: Vec<String> = pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert!(!names.contains(&victim), "the pod listed is gone: {names:?}");
    assert_eq!(pods.len(), 6, "its replacement exists: {names:?}");
    let ready = |p: &k8s_openapi::api::core::v1::Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    assert!(pods.iter().all(|p| ready(p) && revision(p) == Some(update.as_str())), "{pods:#?}");
    // While it waited it said so, each line with the time since it started.
    let progress: Vec<&str> = out.stdout.lines().filter(|l| l.contains("] Progressing: ")).collect();
    assert!(!progress.is_empty() && progress.iter().all(|l| l.starts_with('[')), "{out:?}");
    cluster.shutdown().await;
}

/// Findings 3 and 6: a canary of 2 pods — partition 1, a 20 s pause, an indefinite pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_timed_pause_with_its_end_and_resume_counts_steps_from_one() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let _operator = e2e::gamedeployment::start_operator(&cluster);
    let steps =
        "    canary:\n      steps:\n        - partition: 1\n        - pause: {duration: 20}\n        - pause: {}\n";
    let canary = manifest("waits", 2, "InplaceUpdate", steps, "python:latest");
    apply(&cluster, &canary).await;
    wait_columns(&cluster, "waits", Columns::new(2, 2, 2, 2, 2)).await;
    apply(&cluster, &manifest("waits", 2, "InplaceUpdate", steps, "python:3.5")).await;

    let out = kubectl_gd(&cluster, &["status", "waits", "--timeout", "3m"]).await;
    assert_eq!(out.code, 3, "paused at the indefinite step: {out:?}");
    assert!(out.stderr.contains("canary step 3 of 3 pauses the rollout until resumed"), "{out:?}");
    let pause = out
        .stdout
        .lines()
        .find(|l| l.contains("waiting for the pause of canary step 2 of 3 (20s) until "))
        .unwrap_or_else(|| panic!("the timed pause with its end: {out:?}"));
    assert!(pause.starts_with('[') && pause.contains("] Progressing: canary step 2 of 3 pauses"), "{pause}");
    assert!(pause.ends_with("s)"), "the time left: {pause}");
    // One line per change, not one per second: the 20 s pause is not 20 lines, and no line repeats the one before
    // it but for the time.
    let verdicts: Vec<&str> = out.stdout.lines().filter_map(|l| l.split_once("] ").map(|(_, v)| v)).collect();
    assert!(verdicts.windows(2).all(|w| w[0] != w[1]), "{out:?}");
    let pause_lines = verdicts.iter().filter(|l| l.contains("pause of canary step 2 of 3")).count();
    assert!((1..=3).contains(&pause_lines), "{out:?}");

    let resumed = kubectl_gd(&cluster, &["resume", "waits"]).await;
    assert_eq!(resumed.code, 0, "{resumed:?}");
    assert!(resumed.stdout.contains("canary step 3 of 3 resumed"), "{resumed:?}");
    let done = kubectl_gd(&cluster, &["status", "waits", "--timeout", "3m"]).await;
    assert_eq!(done.code, 0, "{done:?}");
    cluster.shutdown().await;
}

/// Finding 5: `kubectl gd skip-hook P` for a pod held by a missing HookTemplate said "has no HookRun" (exit 5), with
/// no way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_hook_lets_a_pod_held_by_a_missing_template_go() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    let held = wait_for("a pod held by the missing template", LONG, || async {
        let status = get_gd(&cluster).await.status?;
        status.conditions.iter().any(|c| c.type_ == "HookBlocked" && c.status == "True").then_some(())?;
        status.pre_delete_hook_condition.first().map(|c| c.pod_name.clone())
    })
    .await;
    let blocked = kubectl_gd(&cluster, &["status", NAME]).await;
    assert_eq!(blocked.code, 1, "a hook that cannot start: {blocked:?}");

    let out = kubectl_gd(&cluster, &["skip-hook", &held]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&format!("pod {held} has no HookRun to terminate")), "{out:?}");
    assert!(out.stdout.contains("gamedeployment.tkex.tencent.com/skip-hook=delete"), "{out:?}");
    wait_gd(&cluster, Columns::new(5, 5, 5, 5, 5)).await;
    let names: Vec<String> = live_pods(&cluster, NAME).await.iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert!(!names.contains(&held), "{names:?}");
    let done = kubectl_gd(&cluster, &["status", NAME, "--timeout", "2m"]).await;
    assert_eq!(done.code, 0, "{done:?}");
    assert!(hookruns(&cluster, false).await.is_empty(), "no HookRun was made");
    cluster.shutdown().await;
}
