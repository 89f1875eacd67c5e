//! Availability as CloneSet counts it, where the lifecycle handlers hold pods (issue 48). Kruise's documented
//! CloneSet with `InPlaceIfPossible` and the `inPlaceUpdate` label handler, kind changed to GameDeployment, with the
//! outside controller of Kruise's manual played by the test:
//!
//! - `availableReplicas` and `updatedAvailableReplicas` count the pods Kruise's `IsPodAvailable` accepts
//!   (openkruise/kruise `pkg/controller/cloneset/sync/cloneset_sync_utils.go`, used by `calculateStatus` in
//!   `pkg/controller/cloneset/cloneset_status.go`): only a pod in lifecycle state `Normal` (or none). With 6 pods, a
//!   partition keeping 4 and one updated pod held in `Updated`, Kruise shows 5 and 1; the operator showed 6 and 2.
//! - With `maxUnavailable: 0` and `maxSurge: 1`, Kruise's `limitUpdateIndexes` (`pkg/controller/cloneset/sync/
//!   cloneset_update.go`) lets at most `maxUnavailable + pods − replicas` pods be out of `Normal`: the next pod enters
//!   `PreparingUpdate` only once the previous one's return to `Normal` is written. A watch started before the change
//!   checks every moment.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::api::GameDeployment;
use e2e::gamedeployment::{Columns, Shape, apply, image, is_ready, label, live_pods, manifest_shaped};
use e2e::gamedeployment::{start_operator, wait_columns};
use e2e::{Cluster, DEADLINE, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;

const BLOCK_INPLACE: &str = "example.com/unready-blocker-inplace";

fn state(pod: &Pod) -> &str {
    label(pod, "lifecycle.apps.kruise.io/state").unwrap_or("Normal")
}

/// Kruise's CloneSet with the `inPlaceUpdate` label handler (the template sets the label the controller removes).
fn cloneset(name: &str, replicas: i32, strategy: &str) -> String {
    let strategy = format!(
        "{strategy}  lifecycle:\n    inPlaceUpdate:\n      labelsHandler:\n        {BLOCK_INPLACE}: \"true\"\n"
    );
    let shape = Shape { template_labels: &[(BLOCK_INPLACE, "true")], ..Shape::default() };
    manifest_shaped(name, replicas, "InPlaceIfPossible", &strategy, "python:latest", shape)
}

async fn set_block(cluster: &Cluster, pod: &str, value: &str) {
    cluster.kubectl_ok(&["label", "pod", pod, &format!("{BLOCK_INPLACE}={value}"), "--overwrite"]).await;
}

async fn in_state(cluster: &Cluster, name: &str, wanted: &str) -> Vec<String> {
    let mut names: Vec<String> = live_pods(cluster, name)
        .await
        .iter()
        .filter(|p| state(p) == wanted)
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_held_in_updated_is_not_counted_as_available() {
    const NAME: &str = "held-updated";
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut operator = start_operator(&cluster);
    apply(&cluster, &cloneset(NAME, 6, "    partition: \"60%\"\n    maxUnavailable: 2\n")).await;
    wait_columns(&cluster, NAME, Columns::new(6, 6, 6, 6, 6)).await;
    e2e::gamedeployment::set_image(&cluster, "default", NAME, "python:3.5").await;
    // 60 % of 6 keeps 4 (Kruise rounds a partition up): 2 pods are taken, and wait for the outside controller.
    let taken = wait_for("2 pods in PreparingUpdate", DEADLINE, || async {
        let taken = in_state(&cluster, NAME, "PreparingUpdate").await;
        (taken.len() == 2).then_some(taken)
    })
    .await;
    for pod in &taken {
        set_block(&cluster, pod, "false").await;
    }
    wait_for("both updated, waiting in Updated for the handler", DEADLINE, || async {
        (in_state(&cluster, NAME, "Updated").await == taken).then_some(())
    })
    .await;
    // The outside controller registers the first again; the second stays held in Updated.
    set_block(&cluster, &taken[0], "true").await;
    wait_for("the first back in Normal", DEADLINE, || async {
        (in_state(&cluster, NAME, "Updated").await == [taken[1].clone()]).then_some(())
    })
    .await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let last = Arc::new(Mutex::new(None));
    let seen = last.clone();
    let counted = tokio::time::timeout(DEADLINE, async {
        loop {
            if let Some(status) = api.get(NAME).await.ok().and_then(|g| g.status) {
                let counts = (
                    status.replicas,
                    status.ready_replicas,
                    status.updated_replicas,
                    status.updated_ready_replicas,
                    status.available_replicas,
                    status.updated_available_replicas,
                );
                *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(counts);
                if counts == (6, 6, 2, 2, 5, 1) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let last = *last.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        counted.is_ok(),
        "status (replicas, ready, updated, updatedReady, available, updatedAvailable) never became Kruise's \
         (6, 6, 2, 2, 5, 1); last {last:?}"
    );
    assert!(operator.is_running());
    operator.kill().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_max_unavailable_0_the_next_pod_waits_for_the_previous_ones_normal() {
    const NAME: &str = "kruise-available";
    const REPLICAS: usize = 4;
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut operator = start_operator(&cluster);
    apply(&cluster, &cloneset(NAME, 4, "    maxUnavailable: 0\n    maxSurge: 1\n")).await;
    wait_columns(&cluster, NAME, Columns::new(4, 4, 4, 4, 4)).await;
    let api: Api<Pod> = Api::namespaced(cluster.client(), "default");

    // Every moment of the watch: pods out of Normal (or not ready) never exceed maxUnavailable + pods − replicas.
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
    let watch = {
        let (api, violations) = (api.clone(), violations.clone());
        tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
            let mut listed = false;
            let mut events = watcher(api, watcher::Config::default().labels(&format!("app={NAME}"))).boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        pods.insert(pod.metadata.uid.clone().unwrap_or_default(), pod);
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        pods.remove(&pod.metadata.uid.clone().unwrap_or_default());
                    }
                    Ok(watcher::Event::Init) => {
                        pods.clear();
                        listed = false;
                    }
                    Ok(watcher::Event::InitDone) => {
                        listed = true;
                        if let Some(tx) = listed_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Err(_) => continue,
                }
                if !listed {
                    continue;
                }
                let live: Vec<&Pod> = pods.values().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
                let out: Vec<String> = live
                    .iter()
                    .filter(|p| state(p) != "Normal" || !is_ready(p))
                    .map(|p| format!("{} {} ready={}", p.metadata.name.as_deref().unwrap_or(""), state(p), is_ready(p)))
                    .collect();
                let allowed = live.len().saturating_sub(REPLICAS);
                if out.len() > allowed {
                    let mut v = violations.lock().unwrap_or_else(|e| e.into_inner());
                    v.push(format!("{} pods, {} out of Normal (allowed {allowed}): {out:?}", live.len(), out.len()));
                }
            }
        })
    };
    listed_rx.await.expect("the pod watch lists");
    // The outside controller of Kruise's manual: releases pods in PreparingUpdate, registers pods in Updated.
    let controller = {
        let api = api.clone();
        tokio::spawn(async move {
            loop {
                let list = api.list(&kube::api::ListParams::default().labels(&format!("app={NAME}"))).await;
                for pod in list.map(|l| l.items).unwrap_or_default() {
                    let value = match (state(&pod), label(&pod, BLOCK_INPLACE)) {
                        ("PreparingUpdate", Some("true")) => "false",
                        ("Updated", Some("false")) if is_ready(&pod) => "true",
                        _ => continue,
                    };
                    let patch = serde_json::json!({"metadata": {"labels": {BLOCK_INPLACE: value}}});
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let _ =
                        api.patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    e2e::gamedeployment::set_image(&cluster, "default", NAME, "python:3.5").await;
    wait_for("4 pods on the new image, in Normal", DEADLINE, || async {
        let pods = e2e::gamedeployment::pods(&cluster, NAME).await;
        let done = pods.len() == REPLICAS
            && pods.iter().all(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && is_ready(p)
                    && state(p) == "Normal"
                    && image(p) == Some("python:3.5")
            });
        done.then_some(())
    })
    .await;
    controller.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    watch.abort();
    let violations = violations.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(violations.is_empty(), "more pods out of Normal than Kruise allows: {violations:#?}");
    assert!(operator.is_running());
    operator.kill().await;
    cluster.shutdown().await;
}
