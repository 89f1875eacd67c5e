//! Issue 47's "Done when", and issue 46's chart half: the Helm chart installed on kube-sim, whose kubelet runs the
//! chart's image as the workspace's operator binaries (`e2e::chart_pods`), and nothing else starting an operator.
//!
//! - Both operator Deployments report Available with two Ready replicas each; every hook-operator pod is Ready
//!   within 10 s of its container starting (its readiness probe on the chart's `/readyz`); the webhook Service's
//!   endpoints are the Ready gamedeployment-operator pods; the leader holds the chart's Lease under its pod name;
//!   the gamedeployment-operator signs with the chart's key Secret (it made no key Secret of its own);
//!   `kubectl logs deploy/<operator>` prints the operator's own log.
//! - `kubectl drain` of each operator's node completes (the budgets let one replica go at a time, and the
//!   replacement becomes Ready elsewhere).
//! - `kubectl rollout restart deployment/<operator>` of each operator during a hooked rollout of a GameDeployment
//!   completes (`kubectl rollout status`), the rollout finishes, and the strict gate checker (`e2e::gate`) finds
//!   every deletion behind its own Successful HookRun.

use std::time::Duration;

use common::api::HookRun;
use e2e::Cluster;
use e2e::chart_pods::{self, GAMEDEPLOYMENT, HOOK, NS, OPERATORS, ROLLOUT, operator_pods, wait_available};
use e2e::gamedeployment::{Columns, columns, image, live_pods, wait_columns};
use e2e::gate::GateChecker;
use e2e::observe::Observer;
use e2e::wait_for;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

/// Seconds from a pod's container start to its `Ready` condition turning `True` (both as the kubelet wrote them).
fn seconds_to_ready(pod: &Pod) -> Option<i64> {
    let status = pod.status.as_ref()?;
    let started = status.container_statuses.as_ref()?.first()?.state.as_ref()?.running.as_ref()?.started_at.as_ref()?;
    let ready = status.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready" && c.status == "True")?;
    let ready = ready.last_transition_time.as_ref()?;
    Some(ready.0.as_second() - started.0.as_second())
}

fn node_of(pod: &Pod) -> String {
    pod.spec.as_ref().and_then(|s| s.node_name.clone()).expect("a scheduled pod")
}

fn name_of(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// `kubectl drain <node>` as an administrator runs it; fails the test with kubectl's output when it does not
/// complete.
async fn drain(cluster: &Cluster, node: &str) {
    let out =
        cluster.kubectl(&["drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=240s"]).await;
    println!("$ kubectl drain {node} --ignore-daemonsets --delete-emptydir-data\n{}{}", out.stdout, out.stderr);
    if !out.success {
        chart_pods::show(cluster).await;
    }
    assert!(out.success, "kubectl drain {node} did not complete:\n{}{}", out.stderr, out.stdout);
    assert!(out.stdout.contains(&format!("node/{node} drained")), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_s_operators_run_as_its_pods_and_drains_of_their_nodes_complete() {
    let cluster = chart_pods::cluster().await;
    chart_pods::install(&cluster, json!({})).await;
    chart_pods::show(&cluster).await;

    for deployment in OPERATORS {
        let pods = operator_pods(&cluster, deployment).await;
        assert_eq!(pods.len(), 2, "two replicas of {deployment}");
        assert!(pods.iter().all(e2e::gamedeployment::is_ready), "every replica of {deployment} is Ready");
    }
    // Ready within seconds of a normal start (issue 46): the chart probes /readyz every 5 s.
    for pod in operator_pods(&cluster, HOOK).await {
        let seconds = seconds_to_ready(&pod).expect("a started, Ready hook-operator pod");
        println!("{} Ready {seconds} s after its container started", name_of(&pod));
        assert!(seconds <= 10, "{} became Ready {seconds} s after it started", name_of(&pod));
    }
    // The webhook Service routes to the Ready gamedeployment-operator pods, on the chart's webhook port.
    let mut ips: Vec<String> = operator_pods(&cluster, GAMEDEPLOYMENT)
        .await
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    ips.sort();
    let endpoints = wait_for("the webhook Service's endpoints to be both replicas", ROLLOUT, || async {
        let out = cluster
            .kubectl(&[
                "-n",
                NS,
                "get",
                "endpoints",
                &format!("{GAMEDEPLOYMENT}-webhook"),
                "-o",
                "jsonpath={range .subsets[*]}{range .addresses[*]}{.ip}{\"\\n\"}{end}{end}",
            ])
            .await;
        let mut now: Vec<String> = out.stdout.lines().map(str::to_string).collect();
        now.sort();
        (now == ips).then_some(now)
    })
    .await;
    println!("webhook endpoints: {endpoints:?}");
    // The chart's identities and keys: each leader holds its Lease under its pod's name (the chart's POD_NAME), and
    // the gamedeployment-operator reads the chart's key Secret (without it, it would keep a key Secret of its own).
    for deployment in OPERATORS {
        let names: Vec<String> = operator_pods(&cluster, deployment).await.iter().map(name_of).collect();
        let holder = wait_for(&format!("a replica of {deployment} to hold the chart's Lease"), ROLLOUT, || async {
            let out =
                cluster.kubectl(&["-n", NS, "get", "lease", deployment, "-o", "jsonpath={.spec.holderIdentity}"]).await;
            let holder = out.stdout.trim().to_string();
            names.contains(&holder).then_some(holder)
        })
        .await;
        println!("lease/{deployment} held by {holder}");
    }
    let own = cluster.kubectl(&["-n", NS, "get", "secret", "gamedeployment-operator-hookrun-key"]).await;
    assert!(!own.success && own.stderr.contains("NotFound"), "the operator made a key of its own: {}", own.stdout);
    // `kubectl logs deploy/…` prints what the operator itself wrote.
    for (deployment, line) in [
        (HOOK, "serving /metrics, /healthz, /readyz"),
        (GAMEDEPLOYMENT, "serving admission webhooks over HTTPS: /validate-pods, /validate-workload"),
    ] {
        let logs = cluster.kubectl_ok(&["-n", NS, "logs", &format!("deploy/{deployment}")]).await;
        assert!(logs.contains(line), "kubectl logs deploy/{deployment}:\n{logs}");
        // A container's stderr is a file, not a terminal: plain text, no colour escapes in the log.
        assert!(!logs.contains('\u{1b}'), "kubectl logs deploy/{deployment} holds ANSI escapes:\n{logs}");
    }

    // A drain of each operator's node completes: the budget lets one replica go, the Deployment replaces it on
    // another node, and it is Ready there.
    for deployment in OPERATORS {
        let node = node_of(&operator_pods(&cluster, deployment).await[0]);
        drain(&cluster, &node).await;
        for pod in operator_pods(&cluster, deployment).await {
            assert_ne!(node_of(&pod), node, "{} is still on the drained node", name_of(&pod));
        }
        cluster.kubectl_ok(&["uncordon", &node]).await;
        for deployment in OPERATORS {
            wait_available(&cluster, deployment).await;
        }
    }
    chart_pods::show(&cluster).await;
    cluster.shutdown().await;
}

/// A GameDeployment whose every deletion waits for the walkthrough's `test` hook (three probes); its pods stop
/// within a second, so a replacement's turn comes when the hook allows it, not after a grace period.
fn hooked_game(name: &str, replicas: i32, image: &str) -> String {
    format!(
        r#"apiVersion: tkex.tencent.com/v1alpha1
kind: GameDeployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: python
          image: {image}
          command: ["python"]
          args: ["-m", "http.server", "8000"]
  preDeleteUpdateStrategy:
    hook:
      templateName: test
  updateStrategy:
    type: RollingUpdate
    maxUnavailable: 1
"#
    )
}

async fn wait_rolled(cluster: &Cluster, name: &str, replicas: i64, want: &str) {
    wait_columns(cluster, name, Columns::new(replicas, replicas, replicas, replicas, replicas)).await;
    wait_for(&format!("every pod of {name} to run {want}"), ROLLOUT, || async {
        let live = live_pods(cluster, name).await;
        (live.len() == replicas as usize && live.iter().all(|p| image(p) == Some(want))).then_some(())
    })
    .await;
}

/// `kubectl rollout restart deployment/<d>`, then `kubectl rollout status` until it completes.
async fn restart(cluster: &Cluster, deployment: &str) {
    let target = format!("deployment/{deployment}");
    println!("$ kubectl -n {NS} rollout restart {target}");
    print!("{}", cluster.kubectl_ok(&["-n", NS, "rollout", "restart", &target]).await);
    let status = cluster.kubectl(&["-n", NS, "rollout", "status", &target, "--timeout=300s"]).await;
    println!("$ kubectl -n {NS} rollout status {target}\n{}{}", status.stdout, status.stderr);
    if !status.success {
        chart_pods::show(cluster).await;
    }
    assert!(status.success, "the rollout of {target} did not complete:\n{}{}", status.stderr, status.stdout);
    assert!(status.stdout.contains("successfully rolled out"), "{}", status.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_restart_of_each_operator_during_a_hooked_rollout_keeps_the_gate() {
    const GAME: &str = "hooked";
    const REPLICAS: i64 = 6;
    let cluster = chart_pods::cluster().await;
    // The walkthrough's hook endpoint (http://1.1.1.1:9091, sent to kube-sim's hook pod), and its 60 s intervals
    // scaled 10x, so each run takes about 12 s: passed to the chart's pods as extraArgs, as the sandbox does.
    let ip = e2e::hook::hook_pod(&cluster, "canary-hook").await;
    let values = json!({"hookOperator": {"extraArgs": [format!("--web-resolve=1.1.1.1:9091={ip}:9091"), "--interval-scale=0.1"]}});
    chart_pods::install(&cluster, values).await;
    cluster.kubectl_ok(&["apply", "-f", "examples/hook-template-success.yaml"]).await;
    let manifest = cluster.dir().join("hooked.yaml");
    std::fs::write(&manifest, hooked_game(GAME, REPLICAS as i32, "python:latest")).unwrap();
    cluster.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()]).await;
    wait_rolled(&cluster, GAME, REPLICAS, "python:latest").await;

    let checker = GateChecker::start(&cluster, "default").await;
    // A run lasts about 12 s and is deleted once its pod is updated: observed from a watch started before the apply.
    let runs = Observer::<HookRun>::namespaced(&cluster, "default").await;
    std::fs::write(&manifest, hooked_game(GAME, REPLICAS as i32, "python:3.5")).unwrap();
    cluster.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()]).await;
    // The rollout is under way (a pod is held by its hook) when the operators are restarted.
    runs.wait("the first pre-delete HookRun", ROLLOUT, |_| Some(())).await;
    let before = columns(&cluster, GAME).await;
    println!("before the restarts: {before:?}");
    assert!(before.is_some_and(|c| c.updated < REPLICAS), "the rollout was over before the restarts: {before:?}");
    for deployment in [HOOK, GAMEDEPLOYMENT] {
        restart(&cluster, deployment).await;
    }
    let after = columns(&cluster, GAME).await;
    println!("after both restarts: {after:?}");
    wait_rolled(&cluster, GAME, REPLICAS, "python:3.5").await;
    // Let the last HookRuns and deletions reach the watches before the replay.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = checker.stop().await;
    println!(
        "gate: {} gated deletions, {} ungated changes, {} violations",
        report.gated_deletions,
        report.ungated_changes,
        report.violations.len()
    );
    report.assert_clean();
    assert!(report.gated_deletions >= REPLICAS as usize, "{report:?}");
    assert!(report.released.is_empty(), "holds released by accident: {:?}", report.released);
    chart_pods::show(&cluster).await;
    cluster.shutdown().await;
}
