//! Update order end to end (seed 003 "升级顺序"), watched with a pod watch and driven with the real kubectl:
//!
//! 1. `scatterStrategy: [{key: foo, value: bar}]` with 3 of 10 pods labelled `foo=bar` (`kubectl label`): an
//!    in-place rollout with `maxUnavailable: 1` updates the labelled pods 1st, 6th and 10th — the seed's example;
//! 2. `priorityStrategy.orderPriority: [{orderedKey: order}]` with every pod labelled `order=sts-<n>`: the next
//!    rollout updates them highest `n` first;
//! 3. a bad `priorityStrategy` is refused: by the CRD schema (`weight: 0`), and by the operator (both lists set:
//!    `FailedUpdate` naming the field, no pod updated).

use std::collections::BTreeMap;

use e2e::Cluster;
use e2e::gamedeployment::{Columns, apply, manifest, pods, revision, start_operator, wait_columns};
use e2e::observe::Observer;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;

const NAME: &str = "order";

/// Pod name → revision, name-sorted.
async fn revisions(cluster: &Cluster) -> BTreeMap<String, String> {
    pods(cluster, NAME)
        .await
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), revision(p).unwrap_or("").to_string()))
        .collect()
}

/// Runs one rollout with `patch` (a JSON patch) and returns the pods in the order they were updated: each pod's first
/// version away from its revision at the start, in the order a watch started (and listed) before the patch saw them.
async fn rollout(cluster: &Cluster, patch: &str) -> Vec<String> {
    let initial = revisions(cluster).await;
    let api: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let config = watcher::Config::default().labels(&format!("app={NAME}"));
    let pod_versions = Observer::start("the rollout's pods", api, config).await;
    let out = cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", patch]).await;
    println!("$ kubectl patch gamedeployment {NAME} --type=json -p '{patch}'\n{out}");
    // The watch first (the status still shows the last rollout's 10 updated pods until the operator writes anew).
    let mut order: Vec<String> = Vec::new();
    pod_versions
        .wait("the watch to show all 10 updates", e2e::DEADLINE, |seen| {
            let name = seen.name();
            let moved = initial.get(name).is_some_and(|r| revision(&seen.object) != Some(r.as_str()));
            if moved && !order.iter().any(|n| n == name) {
                order.push(name.to_string());
            }
            (order.len() == 10).then_some(())
        })
        .await;
    wait_columns(cluster, NAME, Columns::new(10, 10, 10, 10, 10)).await;
    let after = revisions(cluster).await;
    assert!(after.iter().all(|(name, rev)| initial.get(name).is_some_and(|r| r != rev)), "every pod updated in place");
    order
}

fn image_patch(image: &str, extra: &str) -> String {
    format!(r#"[{extra}{{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "{image}"}}]"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scatter_and_order_priority_decide_the_update_order() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let _operator = start_operator(&cluster);
    let strategy = "    maxUnavailable: 1\n    scatterStrategy:\n      - key: foo\n        value: bar\n";
    apply(&cluster, &manifest(NAME, 10, "InplaceUpdate", strategy, "python:latest")).await;
    wait_columns(&cluster, NAME, Columns::new(10, 10, 10, 10, 10)).await;

    // 1. Scatter: three pods labelled foo=bar, spread 1st, 6th and 10th.
    let names: Vec<String> = revisions(&cluster).await.into_keys().collect();
    let labelled: Vec<String> = [2, 5, 7].iter().map(|&i| names[i].clone()).collect();
    for pod in &labelled {
        cluster.kubectl_ok(&["label", "pod", pod, "foo=bar"]).await;
    }
    let order = rollout(&cluster, &image_patch("python:3.5", "")).await;
    println!("update order: {order:?} (labelled foo=bar: {labelled:?})");
    let positions: Vec<usize> =
        order.iter().enumerate().filter(|(_, n)| labelled.contains(n)).map(|(at, _)| at + 1).collect();
    assert_eq!(positions, [1, 6, 10], "{order:?}");

    // 2. orderPriority: label value `sts-<n>`, highest n first.
    let numbers = [3, 10, 7, 1, 9, 2, 8, 5, 6, 4];
    for (pod, n) in names.iter().zip(numbers) {
        cluster.kubectl_ok(&["label", "pod", pod, &format!("order=sts-{n}")]).await;
    }
    let switch = r#"{"op": "remove", "path": "/spec/updateStrategy/scatterStrategy"},
        {"op": "add", "path": "/spec/updateStrategy/priorityStrategy", "value": {"orderPriority": [{"orderedKey": "order"}]}},"#;
    let order = rollout(&cluster, &image_patch("python:3.6", switch)).await;
    let mut want: Vec<(i32, String)> = numbers.iter().copied().zip(names.iter().cloned()).collect();
    want.sort_by_key(|w| std::cmp::Reverse(w.0));
    let want: Vec<String> = want.into_iter().map(|(_, n)| n).collect();
    assert_eq!(order, want, "highest sts-<n> first");

    // 3. Bad values: the CRD rejects weight 0; the operator refuses both lists at once (the CRD cannot say "one of").
    let zero = r#"[{"op": "add", "path": "/spec/updateStrategy/priorityStrategy", "value": {"weightPriority": [{"weight": 0, "matchSelector": {}}]}}]"#;
    let out = cluster.kubectl(&["patch", "gamedeployment", NAME, "--type=json", "-p", zero]).await;
    assert!(!out.success, "weight 0 is refused by the CRD schema: {}", out.stdout);
    println!("$ kubectl patch (weight 0)\n{}", out.stderr);
    assert!(out.stderr.contains("weight"), "{}", out.stderr);
    let both = r#"{"op": "add", "path": "/spec/updateStrategy/priorityStrategy", "value": {"orderPriority": [{"orderedKey": "order"}], "weightPriority": [{"weight": 5, "matchSelector": {}}]}},"#;
    // Every version of every pod from before the refused change on.
    let pod_versions = e2e::observe::Observer::<k8s_openapi::api::core::v1::Pod>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", &image_patch("python:3.7", both)]).await;
    let message = e2e::wait_for("FailedUpdate naming priorityStrategy", e2e::DEADLINE, || async {
        let path = r#"jsonpath={.status.conditions[?(@.type=="FailedUpdate")].message}"#;
        let out = cluster.kubectl(&["get", "gamedeployment", NAME, "-o", path]).await;
        out.stdout.contains("only one of weightPriority and orderPriority").then_some(out.stdout)
    })
    .await;
    println!("FailedUpdate: {message}");
    let events = cluster.kubectl_ok(&["get", "events", "--field-selector", "reason=FailedUpdate"]).await;
    println!("{events}");
    assert!(events.contains("only one of weightPriority and orderPriority"), "{events}");
    // No pod moved to the refused template: a window of 1 s past the refusal, every change in it checked.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    pod_versions.assert_never("a pod moved to the refused template", |seen| {
        e2e::gamedeployment::label(&seen.object, "app") == Some(NAME)
            && e2e::gamedeployment::image(&seen.object) != Some("python:3.6")
    });
    assert!(pods(&cluster, NAME).await.iter().all(|p| e2e::gamedeployment::image(p) == Some("python:3.6")));
}
