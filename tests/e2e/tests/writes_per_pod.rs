//! API writes per pod of a hooked in-place update (issue 17: at most 6 per pod), counted in kube-sim's audit log:
//! the gamedeployment-operator runs as its own user, rolls 10 pods to a new image in place through a preInplace
//! hook (the walkthrough's `quick` template, one measurement) with maxUnavailable 50 %, and every successful write
//! it made from the image change until it has been quiet for a while is counted (Events excluded), by resource,
//! subresource and verb, and printed. Per pod: the hold (`PreparingUpdate`), its HookRun, the readiness condition
//! False, the image patch (straight back to `Normal`), the condition True; consumed runs go in one
//! `deletecollection` at the end of the roll, the status at most once per `--status-write-interval` (5 s here) plus
//! its revision and condition changes. The strict gate checker watches the roll (every image change consumed a fresh
//! `Successful` run of its own). A count, not a timing.

use crate::walkthrough_support;

use std::collections::BTreeMap;
use std::time::Duration;

use common::api::{GameDeployment, HookRun};
use e2e::gamedeployment::{Columns, apply, manifest};
use e2e::{Cluster, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use walkthrough_support::*;

const PODS: usize = 10;
const USER: &str = "gamedeployment-operator";
const NEW_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value":"python:3.5"}]"#;

/// The operator's successful writes after audit entry `since`, Events excluded, by "resource[/subresource] verb".
fn writes(cluster: &Cluster, since: u64) -> BTreeMap<String, usize> {
    let log = cluster.sim().audit_since(since);
    let mut by_kind = BTreeMap::new();
    for event in log.items.iter().filter(|e| e.succeeded() && e.user == USER && e.resource != "events") {
        let sub = event.subresource.as_deref().map(|s| format!("/{s}")).unwrap_or_default();
        *by_kind.entry(format!("{}{sub} {}", event.resource, event.verb)).or_default() += 1;
    }
    by_kind
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hooked_in_place_update_makes_at_most_six_writes_per_pod() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let ip = e2e::hook::hook_pod(&cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");
    let _hooks = e2e::hook::start_operator_scaled(&cluster, "0.05", &["--web-resolve", &resolve]);
    let kubeconfig = cluster.dir().join("gamedeployment-operator.kubeconfig");
    cluster.sim().write_kubeconfig_for_user(&kubeconfig, USER, &["system:masters"]).expect("kubeconfig written");
    let _gd = cluster.operator_with_kubeconfig(
        "gamedeployment-operator",
        "gamedeployment-operator",
        &kubeconfig,
        // Status writes are bounded in time, not per pod (progress at most once per interval): a longer interval
        // keeps their share of this small roll independent of how fast the machine is.
        &["--expectations-timeout", "20s", "--status-write-interval", "5s"],
    );
    apply(&cluster, QUICK).await;
    let strategy = format!("    maxUnavailable: 50%\n{}", pre_inplace("quick"));
    apply(&cluster, &manifest(NAME, PODS as i32, "InplaceUpdate", &strategy, "python:latest")).await;
    let n = PODS as i64;
    wait_gd(&cluster, Columns::new(n, n, n, n, n)).await;
    let watch = e2e::gate::GateChecker::start(&cluster, "default").await;

    let before = cluster.sim().audit().items.last().map_or(0, |e| e.id);
    let out = cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    println!("$ kubectl patch gamedeployment {NAME} --type='json' -p='{NEW_IMAGE}'\n{out}");

    // Done: the status says every pod runs the new image and is Ready (generation 2), every pod is Normal with
    // the new image and its readiness condition True, and no HookRun is left.
    let gds: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    wait_for("the roll to finish and its HookRuns to be removed", LONG, || async {
        let gd = gds.get(NAME).await.ok()?;
        let s = gd.status.unwrap_or_default();
        let status_done = s.observed_generation >= Some(2)
            && s.updated_ready_replicas == PODS as i32
            && s.ready_replicas == PODS as i32
            && s.replicas == PODS as i32;
        let list = pods.list(&Default::default()).await.ok()?;
        let ours: Vec<&Pod> = list
            .items
            .iter()
            .filter(|p| p.metadata.labels.as_ref().and_then(|l| l.get("app")).map(String::as_str) == Some(NAME))
            .collect();
        let pods_done = ours.len() == PODS
            && ours.iter().all(|p| {
                e2e::gamedeployment::image(p) == Some("python:3.5")
                    && p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("lifecycle.apps.kruise.io/state"))
                        .map(String::as_str)
                        == Some("Normal")
                    && p.status
                        .iter()
                        .flat_map(|s| s.conditions.iter().flatten())
                        .any(|c| c.type_ == "InPlaceUpdateReady" && c.status == "True")
            });
        let no_runs = runs.list(&Default::default()).await.ok()?.items.is_empty();
        (status_done && pods_done && no_runs).then_some(())
    })
    .await;
    // Then until the operator has written nothing for 5 s (a status write may wait for its interval).
    let mut last = before;
    let mut quiet_since = std::time::Instant::now();
    wait_for("the operator to be quiet for 5 s", LONG, || {
        let log = cluster.sim().audit_since(last);
        if log.items.iter().any(|e| e.user == USER && e.resource != "events") {
            quiet_since = std::time::Instant::now();
        }
        last = log.items.last().map_or(last, |e| e.id);
        let quiet = quiet_since.elapsed() >= Duration::from_secs(5);
        async move { quiet.then_some(()) }
    })
    .await;

    let by_kind = writes(&cluster, before);
    let total: usize = by_kind.values().sum();
    println!("gamedeployment-operator writes for {PODS} pods (Events excluded):");
    for (kind, count) in &by_kind {
        println!("  {count:>4}  {kind}  ({:.2} per pod)", *count as f64 / PODS as f64);
    }
    println!("  {total:>4}  in all ({:.2} per pod)", total as f64 / PODS as f64);

    let checked = watch.stop().await;
    assert!(checked.violations.is_empty(), "{:#?}", checked.violations);
    assert!(checked.released.is_empty(), "holds released by accident: {:?}", checked.released);
    assert_eq!(checked.gated_updates, PODS, "each pod's image changed once, through its hook: {checked:?}");
    assert!(total <= 6 * PODS, "at most 6 writes per pod, made {total} for {PODS} pods: {by_kind:#?}");
}
