//! OpenKruise CloneSet's `updateStrategy.type` names on a GameDeployment (issue 31), end to end with the real
//! operator and `kubectl`: `InPlaceOnly` refuses a template change that cannot be made in place — `FailedUpdate`
//! True saying why, a Warning Event, and no pod deleted or created — and rolls in place once the change is only an
//! image; `ReCreate` recreates pods as `RollingUpdate` does.

use std::collections::BTreeSet;
use std::time::Duration;

use e2e::gamedeployment::{Columns, condition, image, is_ready, pods, rolled_out, wait_columns};
use e2e::observe::Observer;
use e2e::{Cluster, DEADLINE, wait_for};
use k8s_openapi::api::core::v1::Pod;

const NEW_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "python:3.5"}]"#;
const NEW_ENV: &str =
    r#"[{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [{"name": "MODE", "value": "hard"}]}]"#;
const NO_ENV: &str = r#"[{"op": "remove", "path": "/spec/template/spec/containers/0/env"}]"#;

async fn uids(cluster: &Cluster, name: &str) -> BTreeSet<String> {
    pods(cluster, name)
        .await
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid.clone())
        .collect()
}

/// Patches the image to `python:3.5` and waits until the 3 pods run it, ready, and `kubectl get` shows them.
async fn to_new_image(cluster: &Cluster, name: &str) {
    cluster.kubectl_ok(&["patch", "gamedeployment", name, "--type=json", "-p", NEW_IMAGE]).await;
    wait_for("3 ready pods on the new image", DEADLINE, || async {
        let now = pods(cluster, name).await;
        (now.len() == 3 && now.iter().all(|p| is_ready(p) && image(p) == Some("python:3.5"))).then_some(())
    })
    .await;
    wait_columns(cluster, name, Columns::new(3, 3, 3, 3, 3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_only_refuses_a_change_that_cannot_be_made_in_place() {
    const NAME: &str = "in-place-only";
    let (cluster, mut operator) = rolled_out(NAME, 3, "InPlaceOnly", "    maxUnavailable: 1\n").await;
    let before = uids(&cluster, NAME).await;

    // Every version of every pod from before the refused change on: none is deleted, none created.
    let pod_versions = Observer::<Pod>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_ENV]).await;
    let message = wait_for("FailedUpdate saying InPlaceOnly refused the change", DEADLINE, || async {
        let status = condition(&cluster, NAME, "FailedUpdate", "status").await;
        let message = condition(&cluster, NAME, "FailedUpdate", "message").await;
        (status == "True" && message.contains("InPlaceOnly")).then_some(message)
    })
    .await;
    assert!(message.contains("spec.containers") && message.contains("InPlaceIfPossible"), "{message}");
    let events = cluster.kubectl_ok(&["get", "events", "--field-selector", "reason=FailedUpdate"]).await;
    assert!(events.contains("InPlaceOnly"), "a Warning Event says it too:\n{events}");
    // Nothing is recreated: a window of 3 s past the refusal, every change in it checked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_columns(&cluster, NAME, Columns::new(3, 0, 0, 3, 3)).await;
    pod_versions.assert_never("no pod deleted or created", |seen| {
        seen.deleted || seen.object.metadata.deletion_timestamp.is_some() || !before.contains(seen.uid())
    });
    drop(pod_versions);
    assert_eq!(uids(&cluster, NAME).await, before, "no pod deleted or created");

    // Back to an image-only change: it rolls in place, and the condition goes.
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NO_ENV]).await;
    to_new_image(&cluster, NAME).await;
    assert_eq!(uids(&cluster, NAME).await, before, "updated in place");
    wait_for("FailedUpdate to go", DEADLINE, || async {
        condition(&cluster, NAME, "FailedUpdate", "status").await.is_empty().then_some(())
    })
    .await;
    assert!(operator.is_running());
    operator.kill().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_replaces_pods_as_rolling_update() {
    const NAME: &str = "recreate";
    let (cluster, mut operator) = rolled_out(NAME, 3, "ReCreate", "    maxUnavailable: 1\n").await;
    let before = uids(&cluster, NAME).await;
    to_new_image(&cluster, NAME).await;
    let after = uids(&cluster, NAME).await;
    assert!(before.is_disjoint(&after), "every pod was recreated: {before:?} → {after:?}");
    assert!(operator.is_running());
    operator.kill().await;
    cluster.shutdown().await;
}
