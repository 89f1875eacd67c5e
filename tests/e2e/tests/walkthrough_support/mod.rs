//! Shared by the hook walkthrough and canary tests: both operators on kube-sim, the `kubectl get` tables the seed
//! shows (printed to the test log and their columns asserted), and the hook invariant watcher.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::api::{GameDeployment, HookPhase, HookRun};
use e2e::gamedeployment::{Columns, columns};
use e2e::hook::hook_pod;
use e2e::{Cluster, Operator, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;

pub const NAME: &str = "test-gamedeployment";
/// Long enough for the walkthrough's `minReadySeconds: 30` and `gracePeriodSeconds: 30` batches.
pub const LONG: Duration = Duration::from_secs(240);

/// Both operators. The hook-operator compresses the templates' `60s` intervals 20x (`--interval-scale 0.05`, so a
/// run takes a few seconds and can be seen `Running`) and sends the unchanged `http://1.1.1.1:9091` to a
/// loopback server answering the bryan JSON (`--web-resolve`; the server is kube-sim's `canary-hook` pod).
pub async fn operators(cluster: &Cluster) -> (Operator, Operator) {
    cluster.install_crds().await;
    let ip = hook_pod(cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");
    let hooks = e2e::hook::start_operator_scaled(cluster, "0.05", &["--web-resolve", &resolve]);
    let gd = e2e::gamedeployment::start_operator(cluster);
    (hooks, gd)
}

pub async fn example(cluster: &Cluster, file: &str) {
    let out = cluster.kubectl_ok(&["apply", "-f", &format!("examples/{file}")]).await;
    println!("$ kubectl apply -f {file}\n{out}");
}

/// `kubectl get gamedeployment`, printed, its columns returned.
pub async fn show_gd(cluster: &Cluster) -> Option<Columns> {
    let out = cluster.kubectl(&["get", "gamedeployment"]).await;
    println!("$ kubectl get gamedeployment\n{}", out.stdout);
    columns(cluster, NAME).await
}

/// One row of `kubectl get hookrun`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub name: String,
    pub phase: String,
}

/// `kubectl get hookrun` parsed (header asserted); `quiet` skips printing (for polling).
pub async fn hookruns(cluster: &Cluster, quiet: bool) -> Vec<RunRow> {
    let out = cluster.kubectl(&["get", "hookrun"]).await;
    if !quiet {
        println!("$ kubectl get hookrun\n{}{}", out.stdout, out.stderr);
    }
    let mut lines = out.stdout.lines();
    let Some(header) = lines.next() else {
        assert!(out.stderr.contains("No resources found"), "{}", out.stderr);
        return Vec::new();
    };
    let header: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(header, ["NAME", "PHASE", "AGE"], "{}", out.stdout);
    lines
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // A run not yet reconciled by the hook-operator has no phase: the column shows <none>... or nothing.
            let phase = if cols.len() >= 3 { cols[1].to_string() } else { String::new() };
            Some(RunRow { name: cols.first()?.to_string(), phase })
        })
        .collect()
}

/// Waits until `kubectl get hookrun` satisfies `want`, printing the table that did.
pub async fn wait_runs(cluster: &Cluster, what: &str, want: impl Fn(&[RunRow]) -> bool) -> Vec<RunRow> {
    let rows = wait_for(what, LONG, || async {
        let rows = hookruns(cluster, true).await;
        want(&rows).then_some(rows)
    })
    .await;
    hookruns(cluster, false).await;
    rows
}

pub async fn wait_gd(cluster: &Cluster, want: Columns) {
    wait_for(&format!("kubectl get gamedeployment to show {want:?}"), LONG, || async {
        (columns(cluster, NAME).await == Some(want)).then_some(())
    })
    .await;
    show_gd(cluster).await;
}

pub async fn get_gd(cluster: &Cluster) -> GameDeployment {
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    api.get(NAME).await.expect("the GameDeployment exists")
}

pub async fn get_run(cluster: &Cluster, name: &str) -> Option<HookRun> {
    let api: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    api.get_opt(name).await.ok().flatten()
}

pub async fn show_pods(cluster: &Cluster) {
    let out = cluster.kubectl(&["get", "pod", "-l", &format!("app={NAME}")]).await;
    println!("$ kubectl get pod | grep gamedeployment\n{}", out.stdout);
}

/// What the invariant watcher saw.
#[derive(Debug, Default, Clone)]
pub struct Checked {
    pub violations: Vec<String>,
    /// Gated pod changes checked (deletions, image changes).
    pub deletions: usize,
    pub updates: usize,
}

#[derive(Debug, Clone)]
enum Seen {
    Pod(Box<Pod>),
    Run(Box<HookRun>),
}

/// Watches pods and HookRuns and records every event with its resourceVersion (kube-sim's versions are global
/// and increase with every commit, like etcd's). At the end the events are replayed in commit order: every pod
/// deletion and every image change of a gated pod must come after a HookRun for that pod (instance id) and
/// revision was committed `Successful`. Ordering by commit makes the check independent of when each watch
/// delivered its events.
pub struct HookWatcher {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    events: Arc<Mutex<Vec<(u64, Seen)>>>,
}

fn rv(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0)
}

impl HookWatcher {
    pub fn start(cluster: &Cluster) -> Self {
        let events: Arc<Mutex<Vec<(u64, Seen)>>> = Arc::default();
        let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
        let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
        let record = events.clone();
        let pod_task = tokio::spawn(async move {
            let mut stream = watcher(pods, watcher::Config::default().labels(&format!("app={NAME}"))).boxed();
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p) | watcher::Event::Delete(p)) = event {
                    record.lock().unwrap_or_else(|e| e.into_inner()).push((rv(&p.metadata), Seen::Pod(Box::new(p))));
                }
            }
        });
        let record = events.clone();
        let run_task = tokio::spawn(async move {
            let mut stream = watcher(runs, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) = event {
                    record.lock().unwrap_or_else(|e| e.into_inner()).push((rv(&r.metadata), Seen::Run(Box::new(r))));
                }
            }
        });
        Self { tasks: vec![pod_task, run_task], events }
    }

    pub async fn stop(self) -> Checked {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for task in &self.tasks {
            task.abort();
        }
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner()).clone();
        events.sort_by_key(|(rv, _)| *rv);
        let mut checked = Checked::default();
        // (instance id, revision) with a Successful run committed so far.
        let mut successful: BTreeSet<(String, String)> = BTreeSet::new();
        // Per pod UID: last seen image and revision, and whether its deletion was already checked.
        let mut pods: BTreeMap<String, (Option<String>, Option<String>, bool)> = BTreeMap::new();
        for (_, seen) in events {
            match seen {
                Seen::Run(run) => {
                    if run.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Successful) {
                        let labels = run.metadata.labels.clone().unwrap_or_default();
                        if let (Some(id), Some(rev)) = (labels.get("instance-id"), labels.get("workload-revision")) {
                            successful.insert((id.clone(), rev.clone()));
                        }
                    }
                }
                Seen::Pod(pod) => {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let labels = pod.metadata.labels.clone().unwrap_or_default();
                    let id =
                        labels.get("tkex.bkbcs.tencent.com/gamedeployment-instance-id").cloned().unwrap_or_default();
                    let revision = labels.get("controller-revision-hash").cloned();
                    let image = pod.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.clone());
                    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                    let entry = pods.entry(uid).or_insert((image.clone(), revision.clone(), false));
                    let before_revision = entry.1.clone().unwrap_or_default();
                    if entry.0 != image {
                        checked.updates += 1;
                        if !successful.contains(&(id.clone(), before_revision.clone())) {
                            checked.violations.push(format!(
                                "pod {name} changed image {:?} -> {image:?} without a Successful HookRun for \
                                 ({id}, {before_revision})",
                                entry.0
                            ));
                        }
                        entry.0 = image;
                    }
                    if pod.metadata.deletion_timestamp.is_some() && !entry.2 {
                        entry.2 = true;
                        checked.deletions += 1;
                        if running && !successful.contains(&(id.clone(), before_revision.clone())) {
                            checked.violations.push(format!(
                                "pod {name} deleted without a Successful HookRun for ({id}, {before_revision})"
                            ));
                        }
                    }
                    entry.1 = revision;
                }
            }
        }
        checked
    }
}
