//! GameDeployment end to end, on kube-sim with the real operator binary and the real `kubectl`: creation,
//! `kubectl scale` up and down, `podsToDelete`, a bad selector, and garbage collection on deletion. The printer
//! columns are read with `kubectl get gamedeployment` at every step, as in the walkthrough.

use std::collections::BTreeSet;

use e2e::gamedeployment::{Columns, apply, columns, condition, manifest, pods, start_operator, wait_columns};
use e2e::{Cluster, DEADLINE, wait_for};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::Api;

const PARTITIONED: &str = "    partition: 2\n    maxUnavailable: 2\n";

fn names(pods: &[k8s_openapi::api::core::v1::Pod]) -> BTreeSet<String> {
    pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).filter_map(|p| p.metadata.name.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_scale_pods_to_delete_and_garbage_collection() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut operator = start_operator(&cluster);

    apply(&cluster, &manifest("test-gamedeployment", 6, "InplaceUpdate", PARTITIONED, "python:latest")).await;
    wait_columns(&cluster, "test-gamedeployment", Columns::new(6, 6, 6, 6, 6)).await;
    let created = pods(&cluster, "test-gamedeployment").await;
    assert_eq!(names(&created).len(), 6);
    for pod in &created {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let id = &labels["tkex.bkbcs.tencent.com/gamedeployment-instance-id"];
        assert_eq!(pod.metadata.name.as_deref(), Some(format!("test-gamedeployment-{id}").as_str()));
        assert!(labels["controller-revision-hash"].starts_with("test-gamedeployment-"));
        assert_eq!(labels["lifecycle.apps.kruise.io/state"], "Normal");
    }

    cluster.kubectl_ok(&["scale", "--replicas=8", "gamedeployment/test-gamedeployment"]).await;
    wait_columns(&cluster, "test-gamedeployment", Columns::new(8, 8, 8, 8, 8)).await;
    cluster.kubectl_ok(&["scale", "--replicas=3", "gamedeployment/test-gamedeployment"]).await;
    wait_columns(&cluster, "test-gamedeployment", Columns::new(3, 3, 3, 3, 3)).await;
    wait_for("3 pods left", DEADLINE, || async {
        (names(&pods(&cluster, "test-gamedeployment").await).len() == 3).then_some(())
    })
    .await;

    // podsToDelete: the named pod is replaced, and the list is pruned once it is gone.
    let before = names(&pods(&cluster, "test-gamedeployment").await);
    let victim = before.iter().next().cloned().unwrap_or_default();
    let patch = format!(r#"{{"spec":{{"scaleStrategy":{{"podsToDelete":["{victim}"]}}}}}}"#);
    cluster.kubectl_ok(&["patch", "gamedeployment", "test-gamedeployment", "--type=merge", "-p", &patch]).await;
    let after = wait_for("the listed pod to be replaced", DEADLINE, || async {
        let now = names(&pods(&cluster, "test-gamedeployment").await);
        (now.len() == 3 && !now.contains(&victim)).then_some(now)
    })
    .await;
    assert_eq!(before.difference(&after).count(), 1, "exactly the listed pod was replaced");
    wait_for("podsToDelete to be pruned", DEADLINE, || async {
        let out = cluster
            .kubectl_ok(&[
                "get",
                "gamedeployment",
                "test-gamedeployment",
                "-o",
                "jsonpath={.spec.scaleStrategy.podsToDelete}",
            ])
            .await;
        (out.trim().is_empty() || out.trim() == "[]").then_some(())
    })
    .await;
    wait_columns(&cluster, "test-gamedeployment", Columns::new(3, 3, 3, 3, 3)).await;

    // Status fields beyond the columns.
    let selector = cluster
        .kubectl_ok(&["get", "gamedeployment", "test-gamedeployment", "-o", "jsonpath={.status.labelSelector}"])
        .await;
    assert_eq!(selector, "app=test-gamedeployment");
    let progressing = condition(&cluster, "test-gamedeployment", "Progressing", "reason").await;
    assert_eq!(progressing, "RolloutComplete");
    let events =
        cluster.kubectl_ok(&["get", "events", "--field-selector", "involvedObject.name=test-gamedeployment"]).await;
    assert!(events.contains("SuccessfulCreate") && events.contains("SuccessfulDelete"), "{events}");

    // Deleting the GameDeployment garbage-collects its pods and revisions.
    cluster.kubectl_ok(&["delete", "gamedeployment", "test-gamedeployment"]).await;
    let revisions: Api<ControllerRevision> = Api::namespaced(cluster.client(), "default");
    wait_for("pods and revisions to be garbage-collected", DEADLINE, || async {
        let pods = pods(&cluster, "test-gamedeployment").await;
        let revisions = revisions.list(&Default::default()).await.map(|l| l.items.len()).unwrap_or(usize::MAX);
        (pods.is_empty() && revisions == 0).then_some(())
    })
    .await;
    assert!(operator.is_running(), "the operator never exits on its own");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_that_does_not_match_the_template_is_refused() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let _operator = start_operator(&cluster);
    let shape = e2e::gamedeployment::Shape { selector_app: Some("somebody-else"), ..Default::default() };
    let bad = e2e::gamedeployment::manifest_shaped("mismatch", 2, "RollingUpdate", "", "python:latest", shape);
    apply(&cluster, &bad).await;
    let message = wait_for("the FailedScale condition", DEADLINE, || async {
        let out = cluster
            .kubectl(&[
                "get",
                "gamedeployment",
                "mismatch",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"FailedScale\")].message}",
            ])
            .await;
        (out.success && !out.stdout.is_empty()).then_some(out.stdout)
    })
    .await;
    assert!(message.contains("does not match"), "{message}");
    let events = cluster.kubectl_ok(&["get", "events", "--field-selector", "involvedObject.name=mismatch"]).await;
    assert!(events.contains("FailedScale"), "{events}");
    assert!(pods(&cluster, "mismatch").await.is_empty());
    assert_eq!(columns(&cluster, "mismatch").await.map(|c| c.total), Some(0));
    cluster.shutdown().await;
}
