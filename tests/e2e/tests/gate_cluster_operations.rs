//! Issue 46, the gamedeployment-operator's half: the pod gate fails closed while the cluster does its ordinary work
//! around the operator — its API slow or failing, its replicas stopped with SIGTERM in the middle of a drain — and
//! a replica is Ready exactly when it can answer.
//!
//! Every story runs the chart's webhook configuration (helm install on kube-sim, which calls the real operator
//! binaries over HTTPS, `failurePolicy` Ignore for evictions as the chart's default) under the strict gate checker
//! (`e2e::gate`): each deletion of a Running gated pod consumed one fresh `Successful` HookRun.
//!
//! - `kubectl drain` of gated game servers, plus a second eviction client, while the operator's requests fail 5 % of
//!   the time, and while its reads and writes take 2.5 s: every refusal is the webhook's `429`, no gated pod leaves
//!   without its run, and each drain completes once the API recovers. (Before: the webhook answered 500 on a failed
//!   read, or ran out of its budget on two slow reads, and `Ignore` let the eviction through.)
//! - SIGTERM of each replica in turn, while a drain and a second eviction client run: the replica reports not ready
//!   at once, releases the Lease (the other replica leads within a lease duration), keeps judging the evictions routed
//!   to it for `--shutdown-drain`, then exits by itself. (Before: its listener closed at once, evictions routed to it
//!   failed to connect and `Ignore` let them through.)
//! - Readiness: not Ready while its caches cannot sync; Ready within seconds once they can; 503 from SIGTERM on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::gamedeployment::{Columns, http_status, nth_metrics_address, pods, wait_columns};
use e2e::gate::GateChecker;
use e2e::{DEADLINE, FAST_ELECTION, Operator, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::EvictParams;
use kube_sim::{FaultConfig, FaultRule};
use serde_json::json;

use crate::pod_gate_webhook::{
    Gated, NAME, NS, OPERATOR_USER, SPECIFIED_DELETE, drain, gated_pods_sharing_a_node, operator_args, render_chart,
    rendered, start_gamedeployment_operator, webhook_address,
};

/// The webhook Service as kube-sim routes it.
fn service() -> String {
    format!("{NS}/{NAME}-webhook")
}

/// Two replicas with leader election: `replica-a` (the cluster's first operator) leads, `replica-b` stands by.
/// Both get `extra`. The webhook Service points at the leader.
async fn two_replicas(extra: &[&str]) -> (Gated, Operator) {
    let with_identity = |identity: &'static str| {
        let mut args = FAST_ELECTION.to_vec();
        args.extend(["--leader-elect-identity", identity]);
        args.extend_from_slice(extra);
        args
    };
    let gated = Gated::start("Always", &with_identity("replica-a")).await;
    let cluster = &gated.cluster;
    wait_for("replica-a to hold the Lease", DEADLINE, || async {
        (holder(cluster).await == "replica-a").then_some(())
    })
    .await;
    let mut args: Vec<&str> = gated.client_ca.iter().map(String::as_str).collect();
    args.extend(with_identity("replica-b"));
    let standby = start_gamedeployment_operator(cluster, &gated.operator_kubeconfig, &gated.cert_dir, "Always", &args);
    // Both replicas log to one file, in start order: B's lines come second.
    webhook_address(&gated.gamedeployment, 1).await;
    (gated, standby)
}

async fn holder(cluster: &e2e::Cluster) -> String {
    cluster.kubectl(&["get", "lease", "gamedeployment-operator", "-o", "jsonpath={.spec.holderIdentity}"]).await.stdout
}

/// What one eviction got.
#[derive(Debug, Clone)]
struct Answer {
    at: Instant,
    pod: String,
    /// `None`: evicted. Else the code and message of the refusal.
    refused: Option<(u16, String)>,
}

/// A second eviction client (a second drain, the cluster autoscaler): evicts each pod of `names` every 500 ms, as the
/// admin, until it is gone, recording every answer.
struct Evictor {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Answer>>,
}

impl Evictor {
    async fn start(cluster: &e2e::Cluster, names: Vec<String>) -> Self {
        // Without kube's own retries (it waits out a 429's Retry-After by itself, as client-go does), so every
        // answer is seen.
        let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig()).expect("the kubeconfig");
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("a client config");
        config.default_retry = false;
        let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(config).expect("a client"), "default");
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut answers = Vec::new();
                let mut left = names;
                while !left.is_empty() && !stop.load(Ordering::Relaxed) {
                    let mut still = Vec::new();
                    for name in left {
                        let at = Instant::now();
                        match pods.evict(&name, &EvictParams::default()).await {
                            Ok(_) => answers.push(Answer { at, pod: name.clone(), refused: None }),
                            Err(kube::Error::Api(status)) if status.code == 404 => continue,
                            Err(kube::Error::Api(status)) => {
                                answers.push(Answer {
                                    at,
                                    pod: name.clone(),
                                    refused: Some((status.code, status.message.clone())),
                                });
                                still.push(name);
                            }
                            Err(e) => panic!("evicting {name}: {e}"),
                        }
                    }
                    left = still;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                answers
            }
        });
        Self { stop, task }
    }

    /// Waits until every pod is gone (or `within` passes), then returns the answers.
    async fn finish(self, within: Duration) -> Vec<Answer> {
        let stop = self.stop.clone();
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(within).await;
            stop.store(true, Ordering::Relaxed);
        });
        let answers = self.task.await.expect("the eviction client ran");
        stopper.abort();
        answers
    }
}

/// Waits until every pod of `uids` is marked for deletion or gone (a pod let through without its hook is gone too: the
/// gate checker says so).
async fn wait_marked_or_gone(cluster: &e2e::Cluster, uids: &[String]) {
    wait_for("the gated pods on the node to be marked for deletion (or gone)", DEADLINE, || async {
        let now = pods(cluster, "drained").await;
        let open = now
            .iter()
            .filter(|p| uids.contains(p.metadata.uid.as_ref().unwrap()))
            .filter(|p| e2e::gamedeployment::label(p, SPECIFIED_DELETE) != Some("true"))
            .count();
        (open == 0).then_some(())
    })
    .await;
}

/// The names of the pods of `drained` with these UIDs.
async fn names_of(cluster: &e2e::Cluster, uids: &[String]) -> Vec<String> {
    pods(cluster, "drained")
        .await
        .into_iter()
        .filter(|p| uids.contains(p.metadata.uid.as_ref().unwrap()))
        .map(|p| p.metadata.name.unwrap())
        .collect()
}

/// A drain of the node holding the most gated pods, and a second eviction client on every gated pod, with the
/// operator's requests under `faults` until the pods on the node are marked and `faulty_for` has passed; then the API
/// recovers and the drain completes. No gated pod leaves without its run.
async fn drain_under_faults(faults: FaultConfig, faulty_for: Duration) {
    let (gated, _standby) = two_replicas(&[]).await;
    let cluster = &gated.cluster;
    cluster.sim().set_service_address(&service(), Some(443), webhook_address(&gated.gamedeployment, 0).await);
    let (node, on_node) = gated_pods_sharing_a_node(cluster).await;
    let all: Vec<String> = pods(cluster, "drained").await.iter().map(|p| p.metadata.uid.clone().unwrap()).collect();
    let names = names_of(cluster, &all).await;
    let checker = GateChecker::start(cluster, "default").await;

    cluster.sim().set_faults(faults);
    let faulty_since = Instant::now();
    let drain = drain(cluster, &node, "300s");
    let evictor = Evictor::start(cluster, names).await;
    wait_marked_or_gone(cluster, &on_node).await;
    tokio::time::sleep(faulty_for.saturating_sub(faulty_since.elapsed())).await;
    let counts = cluster.sim().fault_counts();
    cluster.sim().set_faults(FaultConfig::default());
    println!("faults injected: {counts:?}");

    let output = tokio::time::timeout(Duration::from_secs(360), drain).await.expect("the drain ends").unwrap().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("$ kubectl drain {node} --ignore-daemonsets\n{stdout}{stderr}");
    assert!(output.status.success(), "the drain completes once the API recovers");
    let answers = evictor.finish(Duration::from_secs(300)).await;
    let evicted: Vec<&Answer> = answers.iter().filter(|a| a.refused.is_none()).collect();
    let refused = answers.len() - evicted.len();
    // An eviction is let through only once the pod is no longer gated (already terminating after its hook): whether
    // any gated pod left without its run is the gate checker's verdict, below.
    println!("second eviction client: {refused} refused, {} evicted: {evicted:?}", evicted.len());
    for answer in answers.iter().filter(|a| a.refused.is_some()) {
        let (code, message) = answer.refused.as_ref().unwrap();
        assert_eq!(*code, 429, "every refusal of {} says 'retry later': {message}", answer.pod);
        assert!(message.contains("pod-eviction-gate.gamedeployment.tkex.tencent.com"), "{message}");
    }
    wait_columns(cluster, "drained", Columns::new(4, 4, 4, 4, 4)).await;
    let report = checker.stop().await;
    report.assert_clean();
    assert!(report.gated_deletions >= all.len(), "each pod consumed a run: {report:?}");
    gated.cluster.shutdown().await;
}

/// 5 % of the operator's requests on pods, GameDeployments and HookRuns fail (500, and 1.5 % 429 with
/// `Retry-After`), everyone else's succeed (its Lease is spared: with the test's 2 s renew deadline on a loaded
/// machine a replica that loses it exits, and nothing here restarts it as a kubelet would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_while_the_operators_requests_fail_keeps_every_gated_pod_behind_its_hook() {
    let rule = |rate: f64, code: u16| FaultRule {
        error_rate: rate,
        error_code: Some(code),
        resources: ["pods", "gamedeployments.tkex.tencent.com", "hookruns.tkex.tencent.com"].map(String::from).to_vec(),
        users: vec![OPERATOR_USER.to_string()],
        ..FaultRule::default()
    };
    let faults = FaultConfig { rules: vec![rule(0.05, 500), rule(0.015, 429)] };
    drain_under_faults(faults, Duration::from_secs(30)).await;
}

/// Every read and write of pods, GameDeployments and HookRuns by the operator is answered 2.5 s late (its Lease is
/// not slowed, so the replicas keep their roles).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_while_the_operators_requests_are_slow_keeps_every_gated_pod_behind_its_hook() {
    let faults = FaultConfig {
        rules: vec![FaultRule {
            verbs: ["get", "list", "create", "update", "patch", "delete"].map(String::from).to_vec(),
            resources: ["pods", "gamedeployments.tkex.tencent.com", "hookruns.tkex.tencent.com"]
                .map(String::from)
                .to_vec(),
            latency_ms: 2500,
            users: vec![OPERATOR_USER.to_string()],
            ..FaultRule::default()
        }],
    };
    drain_under_faults(faults, Duration::from_secs(30)).await;
}

/// Sends SIGTERM to an operator process.
fn sigterm(operator: &Operator) {
    let pid = operator.pid().expect("the replica runs");
    let status = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill runs");
    assert!(status.success(), "SIGTERM sent to {pid}");
}

/// Waits until the process exits by itself.
async fn wait_exited(operator: &mut Operator, what: &str, within: Duration) {
    let start = Instant::now();
    while operator.is_running() {
        assert!(start.elapsed() < within, "{what} did not exit within {within:?}:\n{}", operator.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Endpoint propagation as the test plays it: the terminating replica stays the Service's address this long after
/// its SIGTERM (kube-sim routes a Service to one address; a cluster withdraws the endpoint after a few seconds).
const PROPAGATION: Duration = Duration::from_secs(3);
/// The replicas' `--shutdown-drain`: longer than [`PROPAGATION`].
const DRAIN: &str = "8s";

/// A rolling restart by hand, each replica in turn: SIGTERM → not ready (503 on `/readyz`) at once, the Lease to the
/// other replica, evictions still judged for the drain period, then the process exits by itself; its successor starts,
/// becomes Ready, and takes the Service. A drain and a second eviction client run throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_each_replica_during_a_drain_hands_over_without_opening_the_gate() {
    let (mut gated, mut b) = two_replicas(&["--shutdown-drain", DRAIN]).await;
    let cluster = &gated.cluster;
    let a_address = webhook_address(&gated.gamedeployment, 0).await;
    cluster.sim().set_service_address(&service(), Some(443), a_address);
    let (node, on_node) = gated_pods_sharing_a_node(cluster).await;
    let all: Vec<String> = pods(cluster, "drained").await.iter().map(|p| p.metadata.uid.clone().unwrap()).collect();
    let names = names_of(cluster, &all).await;
    let checker = GateChecker::start(cluster, "default").await;
    let drain = drain(cluster, &node, "300s");
    let evictor = Evictor::start(cluster, names).await;
    wait_marked_or_gone(cluster, &on_node).await;

    // SIGTERM of the leader, which the Service still routes to.
    let a_metrics = nth_metrics_address(&gated.gamedeployment, 0).await;
    let a_stopped = Instant::now();
    sigterm(&gated.gamedeployment);
    wait_for("replica-a to report not ready", DEADLINE, || async {
        (http_status(a_metrics, "/readyz").await == Some(503)).then_some(())
    })
    .await;
    wait_for("replica-b to take the Lease", DEADLINE, || async {
        (holder(cluster).await == "replica-b").then_some(())
    })
    .await;
    let handed_over = a_stopped.elapsed();
    tokio::time::sleep(PROPAGATION.saturating_sub(a_stopped.elapsed())).await;
    let b_address = webhook_address(&gated.gamedeployment, 1).await;
    cluster.sim().set_service_address(&service(), Some(443), b_address);
    let a_propagated = Instant::now();
    wait_exited(&mut gated.gamedeployment, "replica-a", Duration::from_secs(60)).await;
    let a_exited = a_stopped.elapsed();
    println!("replica-a: Lease handed over after {handed_over:?}, exited {a_exited:?} after SIGTERM");
    assert!(a_exited >= Duration::from_secs(8), "replica-a answered through its drain: exited after {a_exited:?}");

    // Its successor: Ready, then the Service's; then SIGTERM of replica-b (now the leader).
    let mut args: Vec<&str> = gated.client_ca.iter().map(String::as_str).collect();
    args.extend(FAST_ELECTION);
    args.extend(["--leader-elect-identity", "replica-a2", "--shutdown-drain", DRAIN]);
    let a2 = start_gamedeployment_operator(cluster, &gated.operator_kubeconfig, &gated.cert_dir, "Always", &args);
    let a2_metrics = nth_metrics_address(&a2, 2).await;
    wait_for("replica-a2 to be ready", DEADLINE, || async {
        (http_status(a2_metrics, "/readyz").await == Some(200)).then_some(())
    })
    .await;
    let b_metrics = nth_metrics_address(&b, 1).await;
    let b_stopped = Instant::now();
    sigterm(&b);
    wait_for("replica-b to report not ready", DEADLINE, || async {
        (http_status(b_metrics, "/readyz").await == Some(503)).then_some(())
    })
    .await;
    wait_for("replica-a2 to take the Lease", DEADLINE, || async {
        (holder(cluster).await == "replica-a2").then_some(())
    })
    .await;
    tokio::time::sleep(PROPAGATION.saturating_sub(b_stopped.elapsed())).await;
    cluster.sim().set_service_address(&service(), Some(443), webhook_address(&a2, 2).await);
    wait_exited(&mut b, "replica-b", Duration::from_secs(60)).await;

    let output = tokio::time::timeout(Duration::from_secs(360), drain).await.expect("the drain ends").unwrap().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("$ kubectl drain {node} --ignore-daemonsets\n{stdout}{stderr}");
    assert!(output.status.success(), "the drain completes");
    let answers = evictor.finish(Duration::from_secs(300)).await;
    let evicted: Vec<&Answer> = answers.iter().filter(|a| a.refused.is_none()).collect();
    // Let through only once no longer gated (terminating after its hook): the gate checker below judges.
    println!("second eviction client evicted (after their hooks): {evicted:?}");
    // Evictions that reached replica-a while it drained were judged by it: the webhook's own 429.
    let during_drain: Vec<&Answer> = answers.iter().filter(|a| a.at > a_stopped && a.at < a_propagated).collect();
    println!("{} evictions answered during replica-a's drain, {} in all", during_drain.len(), answers.len());
    assert!(!during_drain.is_empty(), "the eviction client ran during the drain");
    for answer in answers.iter().filter(|a| a.refused.is_some()) {
        let (code, message) = answer.refused.as_ref().unwrap();
        assert_eq!(*code, 429, "{answer:?}");
        assert!(message.contains("pod-eviction-gate.gamedeployment.tkex.tencent.com"), "judged: {message}");
    }
    wait_columns(cluster, "drained", Columns::new(4, 4, 4, 4, 4)).await;
    let report = checker.stop().await;
    report.assert_clean();
    assert!(report.gated_deletions >= all.len(), "each pod consumed a run: {report:?}");
    drop(a2);
    gated.cluster.shutdown().await;
}

/// `/readyz` on the webhook port (HTTPS, the chart's readiness probe): the status code, or `None` when nothing
/// answers.
async fn webhook_readyz(address: std::net::SocketAddr) -> Option<u16> {
    let out = tokio::process::Command::new("curl")
        .args(["-sk", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("https://{address}/readyz"))
        .output()
        .await
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).trim().parse().ok().filter(|c| *c != 0)
}

/// Readiness means "can do its job now": a replica whose caches cannot be listed (its pod lists hang) serves
/// `/healthz` but is not Ready; once they can, it is Ready within seconds; from SIGTERM on it reports 503 while its
/// webhook still answers, and it exits after its drain. A standby is Ready too (a rollout waits for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_ready_exactly_when_it_can_answer() {
    let gated = Gated::start("Always", &["--shutdown-drain", DRAIN]).await;
    let cluster = &gated.cluster;
    let first = nth_metrics_address(&gated.gamedeployment, 0).await;
    wait_for("the first replica to be ready", Duration::from_secs(20), || async {
        (http_status(first, "/readyz").await == Some(200)).then_some(())
    })
    .await;

    // A second replica whose pod lists hang: no cache, no readiness.
    cluster.sim().set_faults(FaultConfig {
        rules: vec![FaultRule {
            verbs: vec!["list".into()],
            resources: vec!["pods".into()],
            users: vec![OPERATOR_USER.to_string()],
            blackhole: true,
            ..FaultRule::default()
        }],
    });
    let mut args: Vec<&str> = gated.client_ca.iter().map(String::as_str).collect();
    args.extend(["--shutdown-drain", DRAIN]);
    let mut second =
        start_gamedeployment_operator(cluster, &gated.operator_kubeconfig, &gated.cert_dir, "Always", &args);
    let metrics = nth_metrics_address(&second, 1).await;
    let webhook = webhook_address(&gated.gamedeployment, 1).await;
    wait_for("the second replica's webhook to answer", DEADLINE, || async {
        webhook_readyz(webhook).await.is_some().then_some(())
    })
    .await;
    assert_eq!(http_status(metrics, "/healthz").await, Some(200), "alive");
    assert_eq!(webhook_readyz(webhook).await, Some(503), "not ready while its caches cannot sync");
    assert_eq!(http_status(metrics, "/readyz").await, Some(503));

    let listable = Instant::now();
    cluster.sim().set_faults(FaultConfig::default());
    wait_for("the second replica to be ready within seconds", Duration::from_secs(20), || async {
        (webhook_readyz(webhook).await == Some(200)).then_some(())
    })
    .await;
    println!("ready {:?} after its caches could sync", listable.elapsed());
    assert_eq!(http_status(metrics, "/readyz").await, Some(200));

    let stopped = Instant::now();
    sigterm(&second);
    wait_for("not ready after SIGTERM", DEADLINE, || async {
        (webhook_readyz(webhook).await == Some(503)).then_some(())
    })
    .await;
    // Seen while the process still drains (it exits when the drain ends): not a bound on this test's clock, which
    // also counts its polls on a loaded machine.
    assert!(second.is_running(), "503 before the drain ended (after {:?})", stopped.elapsed());
    assert_eq!(http_status(metrics, "/healthz").await, Some(200), "still serving while it drains");
    wait_exited(&mut second, "the second replica", Duration::from_secs(60)).await;
    assert!(stopped.elapsed() >= Duration::from_secs(8), "it drained for --shutdown-drain");
    assert_eq!(webhook_readyz(webhook).await, None, "closed after the drain");
    gated.cluster.shutdown().await;
}

/// The chart's handover settings agree with each other: `--shutdown-drain` from `shutdownDrainSeconds`, and a
/// termination grace period that covers the drain and one webhook timeout; the readiness probe is the webhook's
/// `/readyz`, often enough to notice a stop within the drain.
#[tokio::test]
async fn the_chart_gives_a_stopping_replica_its_drain() {
    let docs = render_chart(json!({})).await.unwrap();
    assert!(operator_args(&docs).contains(&"--shutdown-drain=15s".to_string()), "{:?}", operator_args(&docs));
    let pod = &rendered(&docs, "Deployment", NAME).unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 30, "15 s drain + 5 s webhook timeout + 10 s");
    let probe = &pod["containers"][0]["readinessProbe"];
    assert_eq!(probe["httpGet"]["path"], "/readyz");
    assert_eq!(probe["httpGet"]["port"], "webhook");
    let noticed = probe["periodSeconds"].as_u64().unwrap() * probe["failureThreshold"].as_u64().unwrap();
    assert!(noticed < 15, "a stop is noticed by the probe within the drain: {probe}");
    let docs = render_chart(json!({"gamedeploymentOperator": {"shutdownDrainSeconds": 20}})).await.unwrap();
    assert!(operator_args(&docs).contains(&"--shutdown-drain=20s".to_string()));
    assert_eq!(
        rendered(&docs, "Deployment", NAME).unwrap()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        35
    );
}
