//! Rollouts end to end: `kubectl patch` the image of a 6-replica GameDeployment with `partition: 2` and
//! `maxUnavailable: 2` under every strategy. A watcher checks at every observed moment that no more than 2 pods
//! are unavailable and no more than 4 leave the old revision; at the end exactly 4 are updated. Also `paused`
//! and a rollback to the previous template.

use std::collections::BTreeMap;

use e2e::gamedeployment::{
    Columns, PodMonitor, condition, image, is_ready, pods, revision, rolled_out, set_paused, wait_columns,
};
use e2e::observe::Observer;
use e2e::{DEADLINE, wait_for};
use k8s_openapi::api::core::v1::Pod;

const NAME: &str = "test-gamedeployment";
const PARTITIONED: &str = "    partition: 2\n    maxUnavailable: 2\n";
const NEW_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "python:3.5"}]"#;

fn live(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// Creates the GameDeployment, waits for 6 ready pods, patches the image, and checks the rollout. Returns the pods
/// before and after.
async fn rollout(strategy: &str, extra: &str) -> (Vec<Pod>, Vec<Pod>) {
    let (cluster, mut operator) = rolled_out(NAME, 6, strategy, &format!("{PARTITIONED}{extra}")).await;
    let before = pods(&cluster, NAME).await;
    let initial = revision(&before[0]).map(String::from);

    let monitor = PodMonitor::start(&cluster, NAME, 6, 2, initial.clone(), 4);
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    wait_columns(&cluster, NAME, Columns::new(6, 4, 4, 6, 6)).await;
    let after = wait_for("6 ready pods, 4 of them on the new image", DEADLINE, || async {
        let now = pods(&cluster, NAME).await;
        let live = live(&now);
        let ready = live.iter().all(|p| is_ready(p)) && live.len() == 6;
        let new = live.iter().filter(|p| image(p) == Some("python:3.5")).count();
        (ready && new == 4).then(|| now.clone())
    })
    .await;
    // From here every version of every pod is checked: the rollout stays where it is.
    let pod_versions = Observer::<Pod>::namespaced(&cluster, "default").await;
    let settled: BTreeMap<String, Option<String>> =
        live(&after).iter().map(|p| (p.metadata.uid.clone().unwrap_or_default(), image(p).map(String::from))).collect();
    let seen = monitor.stop().await;
    assert!(seen.violations.is_empty(), "{strategy}: {:#?}", seen.violations);
    assert!(seen.moments >= 4, "{strategy}: the watcher saw the rollout ({} moments)", seen.moments);
    assert_eq!(seen.max_changed, 4, "{strategy}: exactly replicas - partition pods updated");
    if strategy == "HotPatchUpdate" {
        // kube-sim's runtime honours io.kubernetes.hotpatch.container: the image is swapped in service.
        assert_eq!(seen.max_unavailable, 0, "{strategy}: a hot patch never takes a pod out of service");
    } else {
        assert!(seen.max_unavailable >= 1, "{strategy}: the rollout took pods down (saw {})", seen.max_unavailable);
    }
    // Stays there: nothing more is updated, deleted or created (a window of 2 s, every change in it checked; a pod
    // of the rollout still terminating is neither).
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    wait_columns(&cluster, NAME, Columns::new(6, 4, 4, 6, 6)).await;
    pod_versions.assert_never(&format!("{strategy}: the rollout moved past its partition"), |seen| {
        let going = seen.deleted || seen.object.metadata.deletion_timestamp.is_some();
        match settled.get(seen.uid()) {
            Some(was) => going || image(&seen.object).map(String::from) != *was,
            None => !going,
        }
    });
    drop(pod_versions);
    let live_after = live(&after);
    assert_eq!(live_after.iter().filter(|p| revision(p) == initial.as_deref()).count(), 2);
    assert!(
        live_after.iter().all(|p| p.metadata.labels.as_ref().unwrap()["lifecycle.apps.kruise.io/state"] == "Normal")
    );
    assert!(operator.is_running());
    operator.kill().await;
    cluster.shutdown().await;
    (before, after)
}

fn by_uid(pods: &[Pod]) -> BTreeMap<String, &Pod> {
    pods.iter().map(|p| (p.metadata.uid.clone().unwrap_or_default(), p)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inplace_update_patches_pods_where_they_run() {
    let (before, after) = rollout("InplaceUpdate", "").await;
    let (before, after) = (by_uid(&before), by_uid(&after));
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>(), "same pods, updated in place");
    for pod in after.values().filter(|p| image(p) == Some("python:3.5")) {
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.container_statuses.as_ref().unwrap()[0].restart_count, 1, "the container restarted once");
        let gate = status.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "InPlaceUpdateReady").unwrap();
        assert_eq!(gate.status, "True");
        let state = &pod.metadata.annotations.as_ref().unwrap()["inplace-update-state"];
        assert!(state.contains("lastContainerStatuses"), "{state}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inplace_update_with_a_grace_period() {
    let (before, after) = rollout("InplaceUpdate", "    inPlaceUpdateStrategy:\n      gracePeriodSeconds: 2\n").await;
    assert_eq!(by_uid(&before).keys().collect::<Vec<_>>(), by_uid(&after).keys().collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_recreates_pods() {
    let (before, after) = rollout("RollingUpdate", "").await;
    let before = by_uid(&before);
    let after_live: Vec<&Pod> = live(&after);
    let kept = after_live.iter().filter(|p| before.contains_key(p.metadata.uid.as_deref().unwrap_or(""))).count();
    assert_eq!(kept, 2, "4 pods were recreated, the 2 partitioned ones kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_patch_update_swaps_images() {
    let (before, after) = rollout("HotPatchUpdate", "").await;
    assert_eq!(by_uid(&before).keys().collect::<Vec<_>>(), by_uid(&after).keys().collect::<Vec<_>>());
    for pod in after.iter().filter(|p| image(p) == Some("python:3.5")) {
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()["io.kubernetes.hotpatch.container"], "true");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_delete_updates_only_deleted_pods() {
    let (cluster, _operator) = rolled_out(NAME, 6, "OnDelete", PARTITIONED).await;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    wait_columns(&cluster, NAME, Columns::new(6, 0, 0, 6, 6)).await;
    let reason = condition(&cluster, NAME, "Progressing", "reason").await;
    assert_eq!(reason, "WaitingForDeletion");
    let victim = pods(&cluster, NAME).await[0].metadata.name.clone().unwrap_or_default();
    cluster.kubectl_ok(&["delete", "pod", &victim]).await;
    wait_columns(&cluster, NAME, Columns::new(6, 1, 1, 6, 6)).await;
    let now = pods(&cluster, NAME).await;
    assert_eq!(live(&now).iter().filter(|p| image(p) == Some("python:3.5")).count(), 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_is_honoured_as_set() {
    // Pods created while paused still become Ready.
    let (cluster, _operator) = rolled_out(NAME, 4, "InplaceUpdate", "    paused: true\n").await;
    let first_four: Vec<String> = pods(&cluster, NAME).await.into_iter().filter_map(|p| p.metadata.uid).collect();
    // Every version of every pod while paused: none of the first four is updated or deleted.
    let pod_versions = Observer::<Pod>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    wait_for("the Paused condition", DEADLINE, || async {
        let reason = condition(&cluster, NAME, "Progressing", "reason").await;
        (reason == "Paused").then_some(())
    })
    .await;
    wait_columns(&cluster, NAME, Columns::new(4, 0, 0, 4, 4)).await;
    // Scaling still works while paused; the new pod gets the new template and becomes Ready.
    cluster.kubectl_ok(&["scale", "--replicas=5", "gamedeployment/test-gamedeployment"]).await;
    wait_columns(&cluster, NAME, Columns::new(5, 1, 1, 5, 5)).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    wait_columns(&cluster, NAME, Columns::new(5, 1, 1, 5, 5)).await;
    pod_versions.assert_never("a pod of the old template updated or deleted while paused", |seen| {
        first_four.iter().any(|uid| uid == seen.uid())
            && (seen.deleted
                || seen.object.metadata.deletion_timestamp.is_some()
                || image(&seen.object) != Some("python:latest"))
    });
    drop(pod_versions);
    let paused =
        cluster.kubectl_ok(&["get", "gamedeployment", NAME, "-o", "jsonpath={.spec.updateStrategy.paused}"]).await;
    assert_eq!(paused, "true", "the operator never unpauses (BCS resets the flag)");
    set_paused(&cluster, "default", NAME, false).await;
    wait_columns(&cluster, NAME, Columns::new(5, 5, 5, 5, 5)).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_to_the_previous_template() {
    let (cluster, _operator) = rolled_out(NAME, 3, "InplaceUpdate", "    maxUnavailable: 1\n").await;
    let first = cluster.kubectl_ok(&["get", "gamedeployment", NAME, "-o", "jsonpath={.status.updateRevision}"]).await;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    wait_for("all pods on python:3.5", DEADLINE, || async {
        let now = pods(&cluster, NAME).await;
        (live(&now).iter().filter(|p| image(p) == Some("python:3.5") && is_ready(p)).count() == 3).then_some(())
    })
    .await;
    wait_columns(&cluster, NAME, Columns::new(3, 3, 3, 3, 3)).await;
    let back = r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "python:latest"}]"#;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", back]).await;
    wait_for("the first revision to be the update revision again", DEADLINE, || async {
        let now = cluster.kubectl_ok(&["get", "gamedeployment", NAME, "-o", "jsonpath={.status.updateRevision}"]).await;
        (now == first).then_some(())
    })
    .await;
    wait_for("all pods back on python:latest", DEADLINE, || async {
        let now = pods(&cluster, NAME).await;
        (live(&now).iter().filter(|p| image(p) == Some("python:latest") && is_ready(p)).count() == 3).then_some(())
    })
    .await;
    wait_columns(&cluster, NAME, Columns::new(3, 3, 3, 3, 3)).await;
    let revisions = cluster.kubectl_ok(&["get", "controllerrevisions", "-o", "name"]).await;
    assert_eq!(revisions.lines().count(), 2, "the old revision was reused, not duplicated: {revisions}");
    let number = cluster.kubectl_ok(&["get", "controllerrevision", &first, "-o", "jsonpath={.revision}"]).await;
    assert_eq!(number, "3", "the reused revision is the newest");
    cluster.shutdown().await;
}
