//! Crash safety: the operator is killed (SIGKILL) in the middle of a rollout and started again. The rollout
//! resumes from what the pods record — no extra pods, no pod updated twice, the partition and the
//! `maxUnavailable` budget held at every observed moment.

use e2e::gamedeployment::{
    Columns, PodMonitor, apply, image, is_ready, manifest, pods, revision, start_operator, wait_columns,
};
use e2e::{Cluster, DEADLINE, wait_for};

const NAME: &str = "test-gamedeployment";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mid_rollout_resumes_without_extra_pods() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut operator = start_operator(&cluster);
    // A grace period makes each step slow enough to be interrupted.
    let strategy = "    partition: 2\n    maxUnavailable: 2\n    inPlaceUpdateStrategy:\n      gracePeriodSeconds: 3\n";
    apply(&cluster, &manifest(NAME, 6, "InplaceUpdate", strategy, "python:latest")).await;
    wait_columns(&cluster, NAME, Columns::new(6, 6, 6, 6, 6)).await;
    let before = pods(&cluster, NAME).await;
    let initial = revision(&before[0]).map(String::from);
    let uids: Vec<String> = before.iter().filter_map(|p| p.metadata.uid.clone()).collect();

    let monitor = PodMonitor::start(&cluster, NAME, 6, 2, initial.clone(), 4);
    let patch = r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "python:3.5"}]"#;
    // A grace period lasts 3 s: observed from a watch started before the patch.
    let pod_versions = e2e::observe::Observer::<k8s_openapi::api::core::v1::Pod>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", patch]).await;
    // Kill while the first pods wait in their grace period.
    pod_versions
        .wait("a pod in its in-place grace period", DEADLINE, |seen| {
            let annotations = seen.object.metadata.annotations.as_ref()?;
            annotations.contains_key("inplace-update-grace").then_some(())
        })
        .await;
    drop(pod_versions);
    operator.kill().await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    operator.restart().await;

    // Kill again later, once some pods have moved.
    wait_for("some pods on the new image", DEADLINE, || async {
        let now = pods(&cluster, NAME).await;
        now.iter().any(|p| image(p) == Some("python:3.5")).then_some(())
    })
    .await;
    operator.restart().await;

    wait_columns(&cluster, NAME, Columns::new(6, 4, 4, 6, 6)).await;
    let after = wait_for("all 6 pods ready and settled", DEADLINE, || async {
        let now = pods(&cluster, NAME).await;
        let settled = now.len() == 6
            && now.iter().all(|p| {
                is_ready(p)
                    && p.metadata.labels.as_ref().is_some_and(|l| l["lifecycle.apps.kruise.io/state"] == "Normal")
                    && !p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("inplace-update-grace"))
            });
        settled.then_some(now)
    })
    .await;
    let seen = monitor.stop().await;
    assert!(seen.violations.is_empty(), "{:#?}", seen.violations);
    assert_eq!(seen.max_pods, 6, "no extra pods were created");
    assert_eq!(seen.max_changed, 4);
    let mut now_uids: Vec<String> = after.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    let mut then = uids.clone();
    now_uids.sort();
    then.sort();
    assert_eq!(now_uids, then, "the same six pods, updated in place");
    for pod in after.iter().filter(|p| image(p) == Some("python:3.5")) {
        let restarts = pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].restart_count;
        assert_eq!(restarts, 1, "no pod was updated twice");
    }
    assert_eq!(after.iter().filter(|p| revision(p) == initial.as_deref()).count(), 2);
    cluster.shutdown().await;
}
