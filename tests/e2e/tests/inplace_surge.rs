//! `maxSurge` with an in-place update, as OpenKruise CloneSet does it (issue 31): with `maxUnavailable: 0` and
//! `maxSurge: 1`, a 4-replica GameDeployment under `InplaceUpdate` (and CloneSet's name for it,
//! `InPlaceIfPossible`) first creates one pod of the new template, updates the old pods in place one at a time
//! while it serves, and scales the surplus pod in at the end. A pod watcher checks at every observed moment that
//! at least `replicas` pods are Ready (never fewer) and that no more than `replicas + 1` pods exist; the rollout
//! completes with every pod on the new image, most of them the same pods as before.

use std::collections::BTreeSet;

use e2e::gamedeployment::{
    Columns, PodMonitor, apply, image, is_ready, manifest, pods, revision, start_operator, wait_columns,
};
use e2e::{Cluster, DEADLINE, wait_for};

const NAME: &str = "surge-inplace";
const NEW_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "python:3.5"}]"#;

async fn rolls_in_place_with_surge(strategy: &str) {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut operator = start_operator(&cluster);
    apply(&cluster, &manifest(NAME, 4, strategy, "    maxUnavailable: 0\n    maxSurge: 1\n", "python:latest")).await;
    wait_columns(&cluster, NAME, Columns::new(4, 4, 4, 4, 4)).await;
    let before = pods(&cluster, NAME).await;
    let initial = revision(&before[0]).map(String::from);
    let before_uids: BTreeSet<String> = before.iter().filter_map(|p| p.metadata.uid.clone()).collect();

    // No pod may be missing or not Ready below 4 (max unavailable 0); every pod may leave the initial revision.
    let monitor = PodMonitor::start(&cluster, NAME, 4, 0, initial, 5);
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    let after = wait_for("4 ready pods, all on the new image", DEADLINE, || async {
        let now = pods(&cluster, NAME).await;
        let live: Vec<_> = now.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).cloned().collect();
        let done =
            live.len() == 4 && now.len() == 4 && live.iter().all(|p| is_ready(p) && image(p) == Some("python:3.5"));
        done.then_some(live)
    })
    .await;
    wait_columns(&cluster, NAME, Columns::new(4, 4, 4, 4, 4)).await;
    let seen = monitor.stop().await;
    assert!(seen.violations.is_empty(), "{strategy}: fewer than 4 Ready pods: {:#?}", seen.violations);
    assert!(seen.moments >= 4, "{strategy}: the watcher saw the rollout ({} moments)", seen.moments);
    assert_eq!(seen.max_pods, 5, "{strategy}: one surge pod, never more");
    let kept = after.iter().filter(|p| p.metadata.uid.as_ref().is_some_and(|u| before_uids.contains(u))).count();
    assert!(kept >= 3, "{strategy}: the old pods were updated in place ({kept} of 4 kept)");
    for pod in after.iter().filter(|p| p.metadata.uid.as_ref().is_some_and(|u| before_uids.contains(u))) {
        let restarts = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).map(|c| c[0].restart_count);
        assert_eq!(restarts, Some(1), "{strategy}: {:?} restarted once, in place", pod.metadata.name);
    }
    assert!(operator.is_running());
    operator.kill().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inplace_update_with_max_surge_never_drops_below_replicas_ready() {
    rolls_in_place_with_surge("InplaceUpdate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_if_possible_with_max_surge_never_drops_below_replicas_ready() {
    rolls_in_place_with_surge("InPlaceIfPossible").await;
}
