//! `maxSurge` with in-place updates, exactly as CloneSet (issue 48): Kruise's documented CloneSet with
//! `InPlaceIfPossible`, `maxUnavailable: 0` and `maxSurge: 1`, kind changed to GameDeployment. Kruise's
//! `calculateDiffsWithExpectation` (openkruise/kruise `pkg/controller/cloneset/sync/cloneset_sync_utils.go`) updates
//! `updateNum = min(updateOldDiff, −updateNewDiff)` pods, where `updateNewDiff = updated pods − (replicas −
//! partition)` counts the surge pod among the updated ones, and scales in `scaleDownNumOldRevision` old pods at the
//! end: of 6 pods, 5 are updated in place and the 6th is deleted. The operator used to update all 6 in place and then
//! delete one of them as the surplus — a game server disrupted twice. A pod watcher started before the change
//! records, per pod (UID), whether it was updated in place (its revision label changed) and whether it was deleted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use e2e::gamedeployment::{Columns, apply, image, is_ready, manifest, pods, revision, start_operator, wait_columns};
use e2e::{Cluster, DEADLINE, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;

const NAME: &str = "cloneset-surge";

/// What happened to one pod during the rollout.
#[derive(Debug, Clone, Default)]
struct History {
    name: String,
    first_revision: Option<String>,
    updated_in_place: bool,
    deleted: bool,
}

type Histories = Arc<Mutex<BTreeMap<String, History>>>;

/// Watches the pods of `NAME`; returns once the initial list is in.
async fn watch(cluster: &Cluster) -> (tokio::task::JoinHandle<()>, Histories) {
    let api: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let histories: Histories = Arc::default();
    let record = histories.clone();
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut listed = Some(listed_tx);
        let mut stream = watcher(api, watcher::Config::default().labels(&format!("app={NAME}"))).boxed();
        while let Some(event) = stream.next().await {
            let (pod, gone) = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => (pod, false),
                Ok(watcher::Event::Delete(pod)) => (pod, true),
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = listed.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                _ => continue,
            };
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let mut all = record.lock().unwrap_or_else(|e| e.into_inner());
            let history = all.entry(uid).or_insert_with(|| History {
                name: pod.metadata.name.clone().unwrap_or_default(),
                first_revision: revision(&pod).map(String::from),
                ..History::default()
            });
            if revision(&pod).map(String::from) != history.first_revision {
                history.updated_in_place = true;
            }
            if gone || pod.metadata.deletion_timestamp.is_some() {
                history.deleted = true;
            }
        }
    });
    listed_rx.await.expect("the pod watch lists");
    (task, histories)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surge_with_in_place_never_deletes_a_pod_it_just_updated() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut operator = start_operator(&cluster);
    let strategy = "    maxUnavailable: 0\n    maxSurge: 1\n";
    apply(&cluster, &manifest(NAME, 6, "InPlaceIfPossible", strategy, "python:latest")).await;
    wait_columns(&cluster, NAME, Columns::new(6, 6, 6, 6, 6)).await;
    let (task, histories) = watch(&cluster).await;
    e2e::gamedeployment::set_image(&cluster, "default", NAME, "python:3.5").await;
    wait_for("6 ready pods on the new image, and no more", DEADLINE, || async {
        let now = pods(&cluster, NAME).await;
        let done = now.len() == 6
            && now
                .iter()
                .all(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p) && image(p) == Some("python:3.5"));
        done.then_some(())
    })
    .await;
    wait_columns(&cluster, NAME, Columns::new(6, 6, 6, 6, 6)).await;
    task.abort();
    let histories: Vec<History> =
        histories.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect::<Vec<_>>();
    println!("{histories:#?}");
    let twice: Vec<&str> =
        histories.iter().filter(|h| h.updated_in_place && h.deleted).map(|h| h.name.as_str()).collect();
    assert!(twice.is_empty(), "pods updated in place and then deleted: {twice:?}");
    let in_place = histories.iter().filter(|h| h.updated_in_place).count();
    assert_eq!(in_place, 5, "replicas − 1 updated in place: {histories:#?}");
    let deleted: Vec<&History> = histories.iter().filter(|h| h.deleted).collect();
    assert_eq!(deleted.len(), 1, "one pod scaled in: {deleted:#?}");
    let initial = histories.iter().filter(|h| h.updated_in_place).find_map(|h| h.first_revision.clone());
    assert_eq!(deleted[0].first_revision, initial, "the pod scaled in is an old one: {deleted:#?}");
    assert!(operator.is_running());
    operator.kill().await;
    cluster.shutdown().await;
}
