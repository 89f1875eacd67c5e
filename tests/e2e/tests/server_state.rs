//! Server-declared state steers scale-in (issue 33): game servers label their own pods
//! (`gamedeployment.tkex.tencent.com/server-state`). Of 8 servers, 2 say `WaitToBeDeleted`, 3 `Allocated` and 3
//! `Idle`; a scale-in of 3 deletes the 2 that asked to go and one idle server — never an allocated one — each
//! through its pre-delete hook (the strict gate checker watches). `status.serverStates` counts the states before and
//! after, and `kubectl gd get` shows them.
//!
//! A server in `Maintaining` is quarantined: a full hooked in-place rollout updates every other server through its
//! gate and leaves it on its old image; the rollout is reported complete with the server named, `kubectl gd status`
//! exits 0 and prints it, and it is not counted as available.

use crate::walkthrough_support;

use crate::kubectl_gd::kubectl_gd;

use std::collections::{BTreeMap, BTreeSet};

use common::api::GameDeployment;
use common::keys;
use e2e::gamedeployment::{Columns, apply, live_pods, manifest, wait_columns};
use e2e::gate::GateChecker;
use e2e::{Cluster, wait_for};
use kube::Api;
use walkthrough_support::{LONG, QUICK, operators, pre_delete, pre_inplace};

const NAME: &str = "servers";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_in_takes_the_servers_that_asked_to_go_then_idle_ones_never_allocated_ones() {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    apply(&cluster, QUICK).await;
    apply(&cluster, &manifest(NAME, 8, "RollingUpdate", &pre_delete("quick"), "python:latest")).await;
    wait_columns(&cluster, NAME, Columns::new(8, 8, 8, 8, 8)).await;
    let mut names: Vec<String> = live_pods(&cluster, NAME).await.into_iter().filter_map(|p| p.metadata.name).collect();
    names.sort();
    // What each server says, as it would label itself (`kubectl label pod … --overwrite`).
    let states = ["Allocated", "WaitToBeDeleted", "Idle", "Allocated", "Idle", "WaitToBeDeleted", "Allocated", "Idle"];
    for (pod, state) in names.iter().zip(states) {
        cluster.kubectl_ok(&["label", "pod", pod, &format!("{}={state}", keys::SERVER_STATE), "--overwrite"]).await;
    }
    let said = |state: &str| -> BTreeSet<String> {
        names.iter().zip(states).filter(|(_, s)| *s == state).map(|(n, _)| n.clone()).collect()
    };
    // The status counts them, and `kubectl gd get` shows them.
    let counts =
        |pairs: &[(&str, i32)]| -> BTreeMap<String, i32> { pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect() };
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let want = counts(&[("Allocated", 3), ("Idle", 3), ("WaitToBeDeleted", 2)]);
    wait_for("status.serverStates to count the labels", LONG, || async {
        let states = api.get(NAME).await.ok()?.status?.server_states;
        (states == want).then_some(())
    })
    .await;
    let out = kubectl_gd(&cluster, &["get", NAME]).await;
    assert!(out.stdout.contains("Servers:   3 Allocated, 3 Idle, 2 WaitToBeDeleted"), "{}", out.stdout);
    let checker = GateChecker::start(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    wait_columns(&cluster, NAME, Columns::new(5, 5, 5, 5, 5)).await;
    let left: BTreeSet<String> = live_pods(&cluster, NAME).await.into_iter().filter_map(|p| p.metadata.name).collect();
    wait_for("the scale-in to settle", LONG, || async { (left.len() == 5).then_some(()) }).await;
    let gone: BTreeSet<String> = names.iter().filter(|n| !left.contains(*n)).cloned().collect();
    assert!(said("WaitToBeDeleted").is_subset(&gone), "both servers that asked to go are gone: {gone:?}");
    assert!(said("Allocated").is_subset(&left), "no allocated server was deleted: {gone:?}");
    assert_eq!(gone.intersection(&said("Idle")).count(), 1, "and one idle server: {gone:?}");
    let want = counts(&[("Allocated", 3), ("Idle", 2)]);
    wait_for("status.serverStates to follow the scale-in", LONG, || async {
        let states = api.get(NAME).await.ok()?.status?.server_states;
        (states == want).then_some(())
    })
    .await;
    let report = checker.stop().await;
    report.assert_clean();
    assert_eq!(report.gated_deletions, 3, "each through its hook: {report:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintaining_server_keeps_its_image_through_a_full_rollout_and_is_reported() {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    apply(&cluster, QUICK).await;
    // maxUnavailable 1 of 4: were the quarantined server counted against the budget, the rollout could not move.
    let strategy = format!("    maxUnavailable: 1\n{}", pre_inplace("quick"));
    apply(&cluster, &manifest(NAME, 4, "InplaceUpdate", &strategy, "python:latest")).await;
    wait_columns(&cluster, NAME, Columns::new(4, 4, 4, 4, 4)).await;
    let kept = quarantine_second(&cluster, NAME).await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    wait_for("the quarantined server to be counted, and not as available", LONG, || async {
        let status = api.get(NAME).await.ok()?.status?;
        (status.server_states.get("Maintaining") == Some(&1) && status.available_replicas == 3).then_some(())
    })
    .await;
    let out = kubectl_gd(&cluster, &["get", NAME]).await;
    assert!(out.stdout.contains("Servers:   1 Maintaining"), "{}", out.stdout);

    let checker = GateChecker::start(&cluster, "default").await;
    e2e::gamedeployment::set_image(&cluster, "default", NAME, "python:3.6").await;
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "3m"]).await;
    assert_eq!(out.code, 0, "the rollout completes around the quarantined server: {out:?}");
    let said = format!("1 server in Maintaining is left as it is: {kept}");
    assert!(out.stdout.contains(&said) || out.stderr.contains(&said), "{out:?}");
    let image = |pod: &k8s_openapi::api::core::v1::Pod| {
        pod.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.clone()).unwrap_or_default()
    };
    let pods = live_pods(&cluster, NAME).await;
    for pod in &pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let want = if name == kept { "python:latest" } else { "python:3.6" };
        assert_eq!(image(pod), want, "{name}");
    }
    let status = api.get(NAME).await.expect("the GameDeployment").status.unwrap_or_default();
    assert_eq!((status.updated_replicas, status.available_replicas), (3, 3), "{status:?}");
    let report = checker.stop().await;
    report.assert_clean();
    assert_eq!(report.gated_updates, 3, "each other server through its hook: {report:?}");
    cluster.shutdown().await;
}

/// Labels the second of `name`'s live pods (by name) `Maintaining`, as a server quarantining itself would, and
/// returns its name.
pub(crate) async fn quarantine_second(cluster: &Cluster, name: &str) -> String {
    let mut names: Vec<String> = live_pods(cluster, name).await.into_iter().filter_map(|p| p.metadata.name).collect();
    names.sort();
    let kept = names[1].clone();
    cluster.kubectl_ok(&["label", "pod", &kept, &format!("{}=Maintaining", keys::SERVER_STATE), "--overwrite"]).await;
    kept
}
