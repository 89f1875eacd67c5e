//! The gamedeployment-operator sees only its own pods (those with the instance-id label), and finds the others it
//! should adopt by scanning:
//!
//! - its memory follows its own objects, not the cluster's: next to a running sandbox (the walkthrough applied and
//!   opted into the pod gate, so the controller and the pod-gate labeller both run), another team creates 20,000
//!   pods in a namespace with no GameDeployment, bound to a node no kubelet runs. Neither operator's resident
//!   memory may grow by 4 MiB or more (before the pod watch had a selector, the gamedeployment-operator grew by
//!   about 33 KB per such pod: 660 MB here), nor with 1,000 ControllerRevisions of that team's StatefulSets;
//! - a pod whose instance-id label someone removed leaves the operator's view; the adoption scan labels it back and
//!   the GameDeployment returns to its size, every pod labelled and owned.

use std::time::Duration;

use e2e::gamedeployment::{apply, manifest};
use e2e::sandbox::{START, Sandbox, ensure_binaries, free_base, kubectl_ok};
use e2e::{Cluster, DEADLINE, wait_for};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};

const UNRELATED: usize = 20_000;
/// ControllerRevisions of another team's StatefulSets (each holds a whole pod template).
const UNRELATED_REVISIONS: usize = 1_000;
const MAX_GROWTH: u64 = 4 << 20;

/// Resident memory of a process, in bytes (`VmRSS`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process is alive");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("a VmRSS line");
    kib << 10
}

/// The resident memory once it stopped moving: two samples 3 s apart within 256 KiB of each other (at most 90 s).
async fn settled_rss(pid: u32) -> u64 {
    let mut last = rss(pid);
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = rss(pid);
        if now.abs_diff(last) < 256 << 10 {
            return now;
        }
        last = now;
    }
    last
}

async fn client(sandbox: &Sandbox) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(sandbox.state().join("kubeconfig")).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config");
    kube::Client::try_from(config).expect("client")
}

/// A pod of another team: labels no GameDeployment selects, bound to a node no kubelet runs, so it stays Pending.
fn unrelated_pod(i: usize) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("batch-{i:05}"),
            "labels": {"app": "batch", "team": "analytics", "shard": (i % 16).to_string()},
            "annotations": {"example.com/owner": "analytics@example.com"},
        },
        "spec": {
            "nodeName": "nowhere",
            "containers": [{
                "name": "worker",
                "image": "registry.example.com/analytics/worker:1.0",
                "args": ["--queue", "jobs", "--concurrency", "4"],
                "env": [{"name": "SHARD", "value": (i % 16).to_string()}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            }],
        },
    }))
    .expect("a pod")
}

/// A revision of another team's StatefulSet: its pod template, about 4 KB of JSON.
fn unrelated_revision(i: usize) -> ControllerRevision {
    let env: Vec<_> = (0..60)
        .map(|e| serde_json::json!({"name": format!("SETTING_{e:02}"), "value": format!("value-{i}-{e}")}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {"name": format!("db-{i:05}-7d9f8c6b5"), "labels": {"app": "db", "controller.kubernetes.io/hash": "7d9f8c6b5"}},
        "revision": 1,
        "data": {"spec": {"template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{
            "name": "db", "image": "registry.example.com/analytics/db:14", "env": env,
        }]}}}},
    }))
    .expect("a revision")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_teams_pods_and_revisions_cost_the_operators_nothing_measurable() {
    ensure_binaries();
    let mut sandbox = Sandbox::start(free_base());
    sandbox.wait_ready().await;
    kubectl_ok(&sandbox, &["apply", "-f", "examples/hook-template-success.yaml", "-f", "examples/gamedeployment.yaml"]);
    kubectl_ok(&sandbox, &["annotate", "gd", "test-gamedeployment", "gamedeployment.tkex.tencent.com/pod-gate=true"]);
    e2e::wait_for("the walkthrough's pods to run, labelled for the pod gate", START, || async {
        let out = kubectl_ok(
            &sandbox,
            &[
                "get",
                "pods",
                "-l",
                "gamedeployment.tkex.tencent.com/pod-gate=true",
                "-o",
                "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}",
            ],
        );
        (out.lines().filter(|l| *l == "Running").count() == 6).then_some(())
    })
    .await;

    let operators = ["gamedeployment-operator", "hook-operator"].map(|name| (name, sandbox.pid_of(name)));
    let before: Vec<u64> = futures::future::join_all(operators.iter().map(|(_, pid)| settled_rss(*pid))).await;

    let client = client(&sandbox).await;
    let namespace: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "analytics"}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.expect("namespace");
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), "analytics");
    let pods: Api<Pod> = Api::namespaced(client, "analytics");
    let created = futures::stream::iter(0..UNRELATED)
        .map(|i| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &unrelated_pod(i)).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .filter(|r| std::future::ready(r.is_ok()))
        .count()
        .await;
    assert_eq!(created, UNRELATED, "every unrelated pod was created");
    let created = futures::stream::iter(0..UNRELATED_REVISIONS)
        .map(|i| {
            let revisions = revisions.clone();
            async move { revisions.create(&PostParams::default(), &unrelated_revision(i)).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .filter(|r| std::future::ready(r.is_ok()))
        .count()
        .await;
    assert_eq!(created, UNRELATED_REVISIONS, "every unrelated revision was created");

    let after: Vec<u64> = futures::future::join_all(operators.iter().map(|(_, pid)| settled_rss(*pid))).await;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    for (((name, _), before), after) in operators.iter().zip(&before).zip(&after) {
        println!(
            "{name}: {:.1} MiB -> {:.1} MiB with {UNRELATED} unrelated pods and {UNRELATED_REVISIONS} revisions",
            mib(*before),
            mib(*after)
        );
    }
    for (((name, _), before), after) in operators.iter().zip(&before).zip(&after) {
        assert!(
            after.saturating_sub(*before) < MAX_GROWTH,
            "{name} grew from {:.1} MiB to {:.1} MiB with {UNRELATED} unrelated pods and {UNRELATED_REVISIONS} \
             revisions (limit: +4 MiB)",
            mib(*before),
            mib(*after)
        );
    }
    // Still working: the walkthrough's pods are all there and Running.
    let out = kubectl_ok(&sandbox, &["get", "gd", "test-gamedeployment", "-o", "jsonpath={.status.readyReplicas}"]);
    assert_eq!(out.trim(), "6", "{out}");
}

/// The pods of `app=<name>` that are not terminating.
async fn live_pods(cluster: &Cluster, name: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let pods = api.list(&ListParams::default().labels(&format!("app={name}"))).await.expect("pods listed");
    pods.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_lost_its_instance_id_label_is_labelled_back_and_the_fleet_returns_to_its_size() {
    const ID: &str = "tkex.bkbcs.tencent.com/gamedeployment-instance-id";
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let _operator =
        cluster.operator("gamedeployment-operator", "gamedeployment-operator", &["--adoption-scan-interval", "2s"]);
    apply(&cluster, &manifest("game", 3, "RollingUpdate", "", "python:latest")).await;
    let pods = wait_for("3 running pods", DEADLINE, || async {
        let pods = live_pods(&cluster, "game").await;
        let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        (pods.len() == 3 && pods.iter().all(running)).then_some(pods)
    })
    .await;
    let victim = pods[0].metadata.name.clone().unwrap();
    cluster.kubectl_ok(&["label", "pod", &victim, &format!("{ID}-")]).await;
    wait_for("every pod labelled and owned, 3 of them", DEADLINE, || async {
        let pods = live_pods(&cluster, "game").await;
        let labelled = |p: &Pod| p.metadata.labels.as_ref().is_some_and(|l| l.contains_key(ID));
        let owned = |p: &Pod| p.metadata.owner_references.as_ref().is_some_and(|o| !o.is_empty());
        (pods.len() == 3 && pods.iter().all(labelled) && pods.iter().all(owned)).then_some(())
    })
    .await;
    // The victim got its own id back (its name's last segment), whether or not it was the one scaled in.
    let api: Api<Pod> = Api::namespaced(cluster.client(), "default");
    if let Some(pod) = api.get_opt(&victim).await.unwrap().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let id = pod.metadata.labels.unwrap_or_default().get(ID).cloned();
        assert_eq!(id.as_deref(), victim.rsplit('-').next());
    }
    cluster.shutdown().await;
}

/// Revisions written before the operator labelled its revisions (by BCS or an earlier version) carry no
/// GameDeployment name label, so its revision watch would not show them: before its first pass the operator labels
/// them, and a rollback to the old template then reuses the old revision (renumbered) instead of writing a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_written_without_the_name_label_are_labelled_before_the_first_pass() {
    const NAME_LABEL: &str = "gamedeployment.tkex.tencent.com/name";
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut operator = cluster.operator("gamedeployment-operator", "gamedeployment-operator", &[]);
    apply(&cluster, &manifest("game", 2, "RollingUpdate", "", "python:1")).await;
    let revisions: Api<ControllerRevision> = Api::namespaced(cluster.client(), "default");
    let names = || async {
        let list = revisions.list(&ListParams::default()).await.expect("revisions listed").items;
        list.into_iter().map(|r| r.metadata.name.unwrap_or_default()).collect::<std::collections::BTreeSet<_>>()
    };
    let gd_status = |field: &'static str| {
        let cluster = &cluster;
        async move {
            cluster
                .kubectl_ok(&["get", "gd", "game", "-o", &format!("jsonpath={{.status.{field}}}")])
                .await
                .trim()
                .to_string()
        }
    };
    let first = wait_for("the first revision, rolled out", DEADLINE, || async {
        let rev = gd_status("updateRevision").await;
        (gd_status("updatedReadyReplicas").await == "2" && !rev.is_empty()).then_some(rev)
    })
    .await;
    apply(&cluster, &manifest("game", 2, "RollingUpdate", "", "python:2")).await;
    wait_for("the second revision, rolled out", DEADLINE, || async {
        let rev = gd_status("updateRevision").await;
        (rev != first && gd_status("updatedReadyReplicas").await == "2").then_some(())
    })
    .await;
    let before = names().await;
    assert_eq!(before.len(), 2, "{before:?}");

    // As BCS or an earlier version left them: no name label.
    operator.kill().await;
    for name in &before {
        cluster.kubectl_ok(&["label", "controllerrevision", name, &format!("{NAME_LABEL}-")]).await;
    }
    operator.restart().await;
    wait_for("both revisions labelled again", DEADLINE, || async {
        let list = revisions.list(&ListParams::default().labels(&format!("{NAME_LABEL}=game"))).await.ok()?;
        (list.items.len() == 2).then_some(())
    })
    .await;
    // Back to the first template: its revision is reused, no third one is written.
    apply(&cluster, &manifest("game", 2, "RollingUpdate", "", "python:1")).await;
    wait_for("the rollback to the first revision, rolled out", DEADLINE, || async {
        (gd_status("updateRevision").await == first && gd_status("updatedReadyReplicas").await == "2").then_some(())
    })
    .await;
    assert_eq!(names().await, before, "the old revision was reused");
    cluster.shutdown().await;
}
