//! Shared by the hook walkthrough and canary tests: both operators on kube-sim, the `kubectl get` tables the seed
//! shows (printed to the test log and their columns asserted). The gate invariant is checked by
//! [`e2e::gate::GateChecker`].
#![allow(dead_code)]

use std::time::Duration;

use common::api::{GameDeployment, HookRun};
use e2e::gamedeployment::{Columns, columns};
use e2e::hook::hook_pod;
use e2e::observe::Observer;
use e2e::{Cluster, Operator, wait_for};
use kube::Api;

pub const NAME: &str = "test-gamedeployment";
/// Long enough for the walkthrough's `minReadySeconds: 30` and `gracePeriodSeconds: 30` batches.
pub const LONG: Duration = Duration::from_secs(240);

/// Succeeds at the first measurement (the walkthrough's server answers age 45).
pub const QUICK: &str = e2e::manifests::load!("hooktemplate-quick");

/// The GameDeployment spec lines that gate deletions on `template`.
pub fn pre_delete(template: &str) -> String {
    format!("  preDeleteUpdateStrategy:\n    hook:\n      templateName: {template}\n")
}

/// The GameDeployment spec lines that gate in-place updates on `template`.
pub fn pre_inplace(template: &str) -> String {
    format!("  preInplaceUpdateStrategy:\n    hook:\n      templateName: {template}\n")
}

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

/// Waits until `runs` (a watch started before the action) has seen `n` HookRuns whose names pass `wanted` and are
/// not in `known`, and returns the first version seen of each, in the order they appeared. A pre-delete run lasts
/// only until its pod goes, so it is observed rather than polled for with `kubectl get hookrun`.
pub async fn new_runs(
    runs: &Observer<HookRun>,
    what: &str,
    n: usize,
    known: &[String],
    wanted: impl Fn(&str) -> bool,
) -> Vec<HookRun> {
    let mut found: Vec<HookRun> = Vec::new();
    runs.wait(what, LONG, |seen| {
        let name = seen.name();
        if wanted(name)
            && !known.iter().any(|k| k == name)
            && !found.iter().any(|f| f.metadata.name.as_deref() == Some(name))
        {
            found.push(seen.object.clone());
        }
        (found.len() >= n).then(|| found.clone())
    })
    .await
}

/// Waits until `runs` has seen the HookRun named `name` `Successful`, and returns that version.
pub async fn observed_success(runs: &Observer<HookRun>, name: &str) -> HookRun {
    runs.wait(&format!("HookRun {name} to succeed"), LONG, |seen| {
        let phase = seen.object.status.as_ref().and_then(|s| s.phase);
        (seen.name() == name && phase == Some(common::api::HookPhase::Successful)).then(|| seen.object.clone())
    })
    .await
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

/// Operators stopped (SIGSTOP) while a view of what they did is read, so that the view shows a state they would
/// otherwise move on from (a run completes a few seconds after its first measurement) however long the read takes on
/// a loaded machine; continued (SIGCONT) when dropped.
pub struct Frozen(Vec<u32>);

impl Frozen {
    pub fn new(operators: &[&e2e::Operator]) -> Self {
        let pids: Vec<u32> = operators.iter().map(|o| o.pid().expect("the operator runs")).collect();
        for pid in &pids {
            assert!(signal("STOP", *pid), "SIGSTOP {pid}");
        }
        Self(pids)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for pid in &self.0 {
            signal("CONT", *pid);
        }
    }
}

fn signal(name: &str, pid: u32) -> bool {
    std::process::Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().is_ok_and(|s| s.success())
}
