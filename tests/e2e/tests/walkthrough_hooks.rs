//! The PreDeleteHook / PreInplaceHook walkthrough (seed 002) line by line, with both operator binaries, the real
//! `kubectl` and the unchanged `examples/`: the success template (scale-in waits for its HookRun; an in-place
//! update in batches of 2 with a HookRun each, 3 pods updated, HookRuns removed), the fail template (the pod
//! stays, `status.preDeleteHookCondition` shows it `Failed`; fixing the template and `retry: true` starts a new
//! run and the scale-in completes) and the args template (the HookRun carries the pod's real PodIP, PodName,
//! PodNamespace and service-name, and the probe reaches the pod's endpoint). A watcher checks that no pod is
//! deleted or updated without a `Successful` HookRun for it and its revision.

use crate::walkthrough_support;

use common::api::{HookPhase, HookRun};
use e2e::Cluster;
use e2e::gamedeployment::Columns;
use e2e::observe::Observer;
use walkthrough_support::*;

const NEW_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value":"python:3.5"}]"#;
const RETRY: &str = r#"[{"op": "replace", "path": "/spec/preDeleteUpdateStrategy/retry", "value":true}]"#;

fn is_predelete(row: &RunRow) -> bool {
    is_predelete_name(&row.name)
}

fn is_predelete_name(name: &str) -> bool {
    name.starts_with(&format!("predelete-{NAME}-")) && name.ends_with("-test")
}

fn name_of(run: &HookRun) -> String {
    run.metadata.name.clone().unwrap_or_default()
}

/// The instance id in a pod hook run's name (`predelete-<revision>-<id>-<template>`).
fn instance_id(run: &str) -> &str {
    run.trim_end_matches("-test").rsplit('-').next().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_template_scale_in_and_in_place_update() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "hook-template-success.yaml").await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    let watch = e2e::gate::GateChecker::start(&cluster, "default").await;
    // Each pre-delete run lasts only until its pod goes: observed from a watch started before the action.
    let runs = Observer::<HookRun>::namespaced(&cluster, "default").await;

    // Scale in: a HookRun appears and the pod stays until it is Successful.
    let out = cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    println!("$ kubectl scale --replicas=5 gamedeployment/{NAME}\n{out}");
    let run = name_of(&new_runs(&runs, "one pre-delete HookRun", 1, &[], is_predelete_name).await[0]);
    hookruns(&cluster, false).await;
    let shown = show_gd(&cluster).await;
    if shown != Some(Columns::new(5, 6, 6, 6, 6)) {
        // The pod is gone already: only once its run was Successful.
        observed_success(&runs, &run).await;
    } else {
        show_pods(&cluster).await;
    }
    wait_gd(&cluster, Columns::new(5, 5, 5, 5, 5)).await;
    show_pods(&cluster).await;
    let pods = e2e::gamedeployment::pods(&cluster, NAME).await;
    assert!(
        pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).all(|p| !p
            .metadata
            .name
            .as_deref()
            .unwrap_or("")
            .ends_with(instance_id(&run))),
        "the pod of {run} is the one deleted"
    );
    wait_runs(&cluster, "the HookRun of the deleted pod to be removed", |rows| rows.is_empty()).await;

    // The walkthrough updates pods that have long been available (AGE 28m); with the example's
    // `minReadySeconds: 30`, wait for that too — an unavailable pod costs no update budget and would be taken in
    // the same batch.
    wait_for_condition(&cluster, |gd| gd.status.as_ref().is_some_and(|s| s.available_replicas == 5)).await;

    // In-place update, partition 2, maxUnavailable 2: HookRuns per batch of 2, then 1.
    let out = cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    println!("$ kubectl patch gamedeployment {NAME} --type='json' -p='{NEW_IMAGE}'\n{out}");
    let known = [run.clone()];
    let first: Vec<String> = new_runs(&runs, "two pre-delete HookRuns (first batch)", 2, &known, is_predelete_name)
        .await
        .iter()
        .map(name_of)
        .collect();
    hookruns(&cluster, false).await;
    let shown = show_gd(&cluster).await;
    if shown.map(|c| c.updated) != Some(0) {
        // Something is updated already: only once its run was Successful.
        for name in &first {
            observed_success(&runs, name).await;
        }
    }
    wait_gd(&cluster, Columns::new(5, 2, 2, 5, 5)).await;
    wait_runs(&cluster, "the first batch's HookRuns to be removed", |rows| {
        rows.iter().all(|r| first.iter().all(|f| *f != r.name))
    })
    .await;
    let known: Vec<String> = known.into_iter().chain(first.iter().cloned()).collect();
    let second = new_runs(&runs, "one pre-delete HookRun (second batch)", 1, &known, is_predelete_name).await;
    hookruns(&cluster, false).await;
    assert!(first.iter().all(|f| *f != name_of(&second[0])));
    wait_gd(&cluster, Columns::new(5, 3, 3, 5, 5)).await;
    show_pods(&cluster).await;
    wait_runs(&cluster, "every HookRun to be removed", |rows| rows.is_empty()).await;
    let pods = e2e::gamedeployment::pods(&cluster, NAME).await;
    let live: Vec<_> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    assert_eq!(live.len(), 5);
    assert_eq!(live.iter().filter(|p| e2e::gamedeployment::image(p) == Some("python:3.5")).count(), 3);
    // Lifecycle labels are back to Normal once nothing holds the pods.
    assert!(live.iter().all(|p| {
        p.metadata.labels.as_ref().and_then(|l| l.get("lifecycle.apps.kruise.io/state")).map(String::as_str)
            == Some("Normal")
    }));

    let checked = watch.stop().await;
    assert!(checked.violations.is_empty(), "{:#?}", checked.violations);
    assert!(checked.gated_deletions >= 1 && checked.gated_updates >= 3, "the watcher saw the changes: {checked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_template_holds_the_pod_until_retry() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "hook-template-fail.yaml").await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    let watch = e2e::gate::GateChecker::start(&cluster, "default").await;

    let out = cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    println!("$ kubectl scale --replicas=5 gamedeployment/{NAME}\n{out}");
    let rows = wait_runs(&cluster, "one pre-delete HookRun", |rows| rows.len() == 1 && is_predelete(&rows[0])).await;
    let run = rows[0].name.clone();
    let failed_uid = get_run(&cluster, &run).await.and_then(|r| r.metadata.uid).expect("the run exists");
    assert_eq!(show_gd(&cluster).await, Some(Columns::new(5, 6, 6, 6, 6)));
    wait_runs(&cluster, "the HookRun to fail", |rows| rows.len() == 1 && rows[0].phase == "Failed").await;
    // Held: still 6 pods, and the status says which pod and why.
    let gd = wait_for_condition(&cluster, |gd| {
        gd.status.as_ref().is_some_and(|s| {
            s.pre_delete_hook_condition
                .iter()
                .any(|c| c.phase == HookPhase::Failed && c.hook_run.as_deref() == Some(&run))
        })
    })
    .await;
    assert_eq!(show_gd(&cluster).await, Some(Columns::new(5, 6, 6, 6, 6)), "the pod is not deleted");
    let status = gd.status.expect("status");
    let yaml = cluster.kubectl_ok(&["get", "gamedeployment", NAME, "-o", "yaml"]).await;
    println!("$ kubectl get gamedeployment {NAME} -o yaml\n{yaml}");
    assert_eq!(status.pre_delete_hook_condition.len(), 1);
    let condition = &status.pre_delete_hook_condition[0];
    assert!(condition.pod_name.ends_with(instance_id(&run)), "{condition:?}");
    assert!(condition.message.as_deref().unwrap_or("").contains("retry"), "{condition:?}");
    assert!(yaml.contains("preDeleteHookCondition:") && yaml.contains("phase: Failed"), "{yaml}");
    let events = cluster.kubectl_ok(&["get", "events", "--field-selector", "reason=HookFailed"]).await;
    println!("$ kubectl get events --field-selector reason=HookFailed\n{events}");
    assert!(events.contains("Warning") && events.contains(&condition.pod_name) && events.contains(&run), "{events}");
    let held = e2e::gamedeployment::pods(&cluster, NAME)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(condition.pod_name.as_str()))
        .expect("the held pod exists");
    assert_eq!(
        held.metadata.labels.as_ref().and_then(|l| l.get("lifecycle.apps.kruise.io/state")).map(String::as_str),
        Some("PreparingDelete")
    );
    assert!(held.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("lifecycle.apps.kruise.io/timestamp")));

    // Someone fixes the hook and asks for a retry.
    example(&cluster, "hook-template-success.yaml").await;
    // The new run succeeds within seconds and goes with the pod: observed from a watch started before the retry.
    let runs = e2e::observe::Observer::<common::api::HookRun>::namespaced(&cluster, "default").await;
    let out = cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", RETRY]).await;
    println!("$ kubectl patch gamedeployment {NAME} --type='json' -p='{RETRY}'\n{out}");
    wait_for_condition(&cluster, |gd| gd.spec.pre_delete_update_strategy.as_ref().is_some_and(|s| !s.retry)).await;
    runs.wait("a new HookRun for the pod", LONG, |seen| (seen.name() == run && seen.uid() != failed_uid).then_some(()))
        .await;
    hookruns(&cluster, false).await;
    wait_gd(&cluster, Columns::new(5, 5, 5, 5, 5)).await;
    wait_runs(&cluster, "every HookRun to be removed", |rows| rows.is_empty()).await;
    let gd =
        wait_for_condition(&cluster, |gd| gd.status.as_ref().is_some_and(|s| s.pre_delete_hook_condition.is_empty()))
            .await;
    assert!(!gd.spec.pre_delete_update_strategy.is_some_and(|s| s.retry));

    let checked = watch.stop().await;
    assert!(checked.violations.is_empty(), "{:#?}", checked.violations);
    assert!(checked.gated_deletions >= 1, "the watcher saw the deletion: {checked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn args_template_passes_the_pods_identity() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "hook-template-args.yaml").await;
    example(&cluster, "gamedeployment-args.yaml").await;
    wait_gd(&cluster, Columns::new(4, 4, 4, 4, 4)).await;
    let watch = e2e::gate::GateChecker::start(&cluster, "default").await;
    // The pre-delete runs last only until their pods go: observed from a watch started before the action.
    let runs = Observer::<HookRun>::namespaced(&cluster, "default").await;
    let before = e2e::gamedeployment::pods(&cluster, NAME).await;

    let out = cluster.kubectl_ok(&["scale", "--replicas=2", &format!("gamedeployment/{NAME}")]).await;
    println!("$ kubectl scale --replicas=2 gamedeployment/{NAME}\n{out}");
    let observed = new_runs(&runs, "two pre-delete HookRuns", 2, &[], is_predelete_name).await;
    hookruns(&cluster, false).await;
    for run in &observed {
        let name = name_of(run);
        println!("the HookRun {name} as created:\n{}", serde_yaml::to_string(run).unwrap_or_default());
        let pod = before
            .iter()
            .find(|p| p.metadata.name.as_deref().is_some_and(|n| n.ends_with(instance_id(&name))))
            .expect("the run names one of the pods");
        let arg = |name: &str| run.spec.args.iter().find(|a| a.name == name).and_then(|a| a.value.clone());
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        assert!(ip.as_deref().is_some_and(|ip| !ip.is_empty()));
        assert_eq!(arg("PodIP"), ip);
        assert_eq!(arg("PodName"), pod.metadata.name.clone());
        assert_eq!(arg("PodNamespace").as_deref(), Some("default"));
        assert_eq!(arg("service-name").as_deref(), Some("test-gamedeployment-svc.default.svc.cluster.local"));
        let labels = run.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("hookrun-type").map(String::as_str), Some("pre-delete-step"));
        assert_eq!(labels.get("gamedeployment.tkex.tencent.com/name").map(String::as_str), Some(NAME));
        let owner = run.metadata.owner_references.clone().unwrap_or_default();
        assert!(owner.iter().any(|o| o.kind == "GameDeployment" && o.name == NAME && o.controller == Some(true)));
    }
    // The probe reaches each pod's own endpoint (the bryan JSON: age 45) and the runs succeed.
    for run in &observed {
        let run = observed_success(&runs, &name_of(run)).await;
        let result = run.status.and_then(|s| s.metric_results.into_iter().next()).expect("a metric result");
        assert!(result.measurements.iter().all(|m| m.value.as_deref() == Some("45")), "{result:?}");
    }
    wait_gd(&cluster, Columns::new(2, 2, 2, 2, 2)).await;
    show_pods(&cluster).await;
    wait_runs(&cluster, "every HookRun to be removed", |rows| rows.is_empty()).await;
    let checked = watch.stop().await;
    assert!(checked.violations.is_empty(), "{:#?}", checked.violations);
    assert!(checked.gated_deletions >= 2, "the watcher saw the deletions: {checked:?}");
}

async fn wait_for_condition(
    cluster: &Cluster,
    want: impl Fn(&common::api::GameDeployment) -> bool,
) -> common::api::GameDeployment {
    e2e::wait_for("the GameDeployment to reach the expected state", LONG, || async {
        let gd = get_gd(cluster).await;
        want(&gd).then_some(gd)
    })
    .await
}
