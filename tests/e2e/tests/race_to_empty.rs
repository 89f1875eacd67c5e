//! `scaleStrategy.scaleInPolicy.mode: RaceToEmpty` (issue 15, part 2) end to end on kube-sim with both operators:
//! 10 game servers of which only 3 report "empty" (a per-pod answer of the HTTP server `e2e::players`: the hook's
//! URL ends in `{{ args.PodName }}`); `kubectl scale --replicas=7` deletes exactly those 3, each through a
//! `Successful` run of its own (the strict gate checker), while candidates whose hook failed are skipped — back to `Normal`,
//! marked `race-skipped`, their `game-pod-deleting` annotation removed — and replaced by others. No pod is created
//! for the scale-in, and once it is over every survivor serves (`Normal`, no mark, no run left).
//!
//! With the cost probe (`scaleInPolicy.costProbe`), every server is empty but each answers a different cost: the
//! scale-in deletes exactly the 3 cheapest, and no probe run is left.
//!
//! The hook-operator runs the template's interval 20x faster (`--interval-scale`).

use crate::walkthrough_support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use e2e::gamedeployment::{annotation, label, live};
use e2e::gamedeployment::{apply, manifest, pods};
use e2e::gate::GateChecker;
use e2e::players::players_server;
use e2e::{Cluster, wait_for};
use k8s_openapi::api::core::v1::Pod;
use walkthrough_support::{LONG, operators};

const NAME: &str = "race";

fn names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().filter_map(|p| p.metadata.name.clone()).collect()
}

/// The `empty` HookTemplate: one measurement of `GET http://<address>/<pod>`, Successful when it has no players
/// (both races gate deletions on it).
fn empty_template(address: std::net::SocketAddr) -> String {
    e2e::manifests::load!("hooktemplate-empty", address = address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_in_deletes_exactly_the_empty_servers() {
    let cluster = Cluster::start().await;
    let (_hooks, gd_operator) = operators(&cluster).await;
    let empty: Arc<Mutex<BTreeSet<String>>> = Default::default();
    let (address, asked) = players_server(empty.clone()).await;
    // "Empty" is one measurement: a server with players fails its hook at once (and is skipped by the race).
    let template = empty_template(address);
    apply(&cluster, &template).await;
    // maxUnavailable 50% of 7 (3): 10 − (7 − 3) = 6 candidates may leave service at once, the 3 pods to delete and
    // 100% extra (the default).
    let strategy = "    maxUnavailable: 50%\n  preDeleteUpdateStrategy:\n    hook:\n      templateName: empty\n  \
                    scaleStrategy:\n    scaleInPolicy:\n      mode: RaceToEmpty\n";
    apply(&cluster, &manifest(NAME, 10, "InplaceUpdate", strategy, "python:latest")).await;
    let before = wait_for("10 ready pods", LONG, || async {
        let pods = live(pods(&cluster, NAME).await);
        (pods.len() == 10 && pods.iter().all(e2e::gamedeployment::is_ready)).then_some(pods)
    })
    .await;
    let before = names(&before);
    // The empty servers: three that the default order would not all pick (every third name).
    let chosen: BTreeSet<String> = before.iter().skip(1).step_by(3).take(3).cloned().collect();
    *empty.lock().expect("not poisoned") = chosen.clone();
    println!("empty servers: {chosen:?}");

    let checker = GateChecker::start(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "gamedeployment", NAME, "--replicas=7"]).await;
    let after = wait_for("7 pods, all serving, no run left", LONG, || async {
        let pods = live(pods(&cluster, NAME).await);
        let settled = pods.len() == 7
            && pods.iter().all(|p| {
                label(p, "lifecycle.apps.kruise.io/state") == Some("Normal")
                    && annotation(p, "gamedeployment.tkex.tencent.com/race-skipped").is_none()
            });
        let runs = cluster.kubectl(&["get", "hookrun", "-o", "name"]).await.stdout;
        (settled && runs.trim().is_empty()).then_some(pods)
    })
    .await;
    let report = checker.stop().await;
    println!("{}", cluster.kubectl_ok(&["get", "gamedeployment", NAME]).await);
    println!("asked: {:?}", asked.lock().expect("not poisoned"));
    println!("released: {:?}", report.released);
    report.assert_clean();

    let after = names(&after);
    let deleted: BTreeSet<String> = before.difference(&after).cloned().collect();
    assert_eq!(deleted, chosen, "exactly the empty servers were deleted");
    assert!(after.is_subset(&before), "no pod was created for the scale-in: {after:?}");
    assert_eq!(report.gated_deletions, 3, "each deletion consumed a Successful run: {report:?}");
    // Servers with players that raced were released (skipped), not held; none kept `game-pod-deleting`.
    let asked: BTreeSet<String> = asked.lock().expect("not poisoned").iter().cloned().collect();
    let raced_with_players: BTreeSet<&String> = asked.iter().filter(|p| !chosen.contains(*p)).collect();
    for pod in &raced_with_players {
        assert!(report.released.iter().any(|r| r.starts_with(&format!("{pod}:"))), "{pod} was released: {report:?}");
    }
    for pod in live(pods(&cluster, NAME).await) {
        assert!(annotation(&pod, "io.tencent.bcs.dev/game-pod-deleting").is_none(), "{:?}", pod.metadata.name);
    }
    assert!(gd_operator.logs().lines().all(|l| !l.contains("panicked")));
}

/// An HTTP server on loopback answering `GET /<pod>` with `{"players": 0, "cost": <cost of the pod>}` (1000 for a pod
/// without one).
async fn cost_server(costs: Arc<Mutex<std::collections::BTreeMap<String, i64>>>) -> std::net::SocketAddr {
    let (address, _asked) = e2e::players::per_pod_server(move |pod| {
        let cost = costs.lock().expect("not poisoned").get(pod).copied().unwrap_or(1000);
        format!(r#"{{"players": 0, "cost": {cost}}}"#)
    })
    .await;
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_cost_probe_the_three_cheapest_go_first() {
    let cluster = Cluster::start().await;
    let (_hooks, gd_operator) = operators(&cluster).await;
    let costs: Arc<Mutex<std::collections::BTreeMap<String, i64>>> = Default::default();
    let address = cost_server(costs.clone()).await;
    let templates = empty_template(address) + "---\n" + &e2e::manifests::load!("hooktemplate-cost", address = address);
    apply(&cluster, &templates).await;
    // No extra candidate: the 3 cheapest start, and (every server being empty) go.
    let strategy = "    maxUnavailable: 50%\n  preDeleteUpdateStrategy:\n    hook:\n      templateName: empty\n  \
                    scaleStrategy:\n    scaleInPolicy:\n      mode: RaceToEmpty\n      extraCandidates: 0\n      \
                    costProbe:\n        templateName: cost\n        timeoutSeconds: 120\n";
    apply(&cluster, &manifest("cost", 10, "InplaceUpdate", strategy, "python:latest")).await;
    let before = wait_for("10 ready pods", LONG, || async {
        let pods = live(pods(&cluster, "cost").await);
        (pods.len() == 10 && pods.iter().all(e2e::gamedeployment::is_ready)).then_some(pods)
    })
    .await;
    let before = names(&before);
    // Distinct costs, cheapest every third name (not the default order's choice): 10, 20, ... in a shuffled order.
    let order: Vec<String> = before
        .iter()
        .skip(1)
        .step_by(3)
        .chain(before.iter().step_by(3))
        .chain(before.iter().skip(2).step_by(3))
        .cloned()
        .collect();
    let cheapest: BTreeSet<String> = order.iter().take(3).cloned().collect();
    *costs.lock().expect("not poisoned") =
        order.iter().enumerate().map(|(i, p)| (p.clone(), 10 * (i as i64 + 1))).collect();
    println!("costs: {:?}", costs.lock().expect("not poisoned"));

    let checker = GateChecker::start(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "gamedeployment", "cost", "--replicas=7"]).await;
    let after = wait_for("7 pods, all serving, no run left", LONG, || async {
        let pods = live(pods(&cluster, "cost").await);
        let settled =
            pods.len() == 7 && pods.iter().all(|p| label(p, "lifecycle.apps.kruise.io/state") == Some("Normal"));
        let runs = cluster.kubectl(&["get", "hookrun", "-o", "name"]).await.stdout;
        (settled && runs.trim().is_empty()).then_some(pods)
    })
    .await;
    let report = checker.stop().await;
    report.assert_clean();
    let after = names(&after);
    let deleted: BTreeSet<String> = before.difference(&after).cloned().collect();
    assert_eq!(deleted, cheapest, "exactly the 3 cheapest were deleted");
    assert!(after.is_subset(&before), "no pod was created for the scale-in: {after:?}");
    assert_eq!(report.gated_deletions, 3, "each deletion consumed a Successful run: {report:?}");
    assert!(report.released.is_empty(), "no candidate was released: {report:?}");
    assert!(gd_operator.logs().lines().all(|l| !l.contains("panicked")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_back_up_mid_race_releases_the_candidates_without_churn() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    // Nobody is ever empty, and a hook keeps measuring: the candidates race until the scale-in is called off.
    let (address, _asked) = players_server(Default::default()).await;
    let template = e2e::manifests::load!("hooktemplate-wait-empty", address = address);
    apply(&cluster, &template).await;
    let strategy = "    maxUnavailable: 50%\n  preDeleteUpdateStrategy:\n    hook:\n      templateName: wait-empty\n  \
                    scaleStrategy:\n    scaleInPolicy:\n      mode: RaceToEmpty\n      extraCandidates: 2\n";
    apply(&cluster, &manifest("back", 6, "InplaceUpdate", strategy, "python:latest")).await;
    let before = wait_for("6 ready pods", LONG, || async {
        let pods = live(pods(&cluster, "back").await);
        (pods.len() == 6 && pods.iter().all(e2e::gamedeployment::is_ready)).then_some(names(&pods))
    })
    .await;
    let checker = GateChecker::start(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "gamedeployment", "back", "--replicas=4"]).await;
    // 2 to delete + 2 extra candidates race.
    wait_for("4 candidates in PreparingDelete", LONG, || async {
        let pods = live(pods(&cluster, "back").await);
        let preparing = pods.iter().filter(|p| label(p, "lifecycle.apps.kruise.io/state") == Some("PreparingDelete"));
        (preparing.count() == 4).then_some(())
    })
    .await;
    cluster.kubectl_ok(&["scale", "gamedeployment", "back", "--replicas=6"]).await;
    wait_for("every candidate back to Normal, no run left", LONG, || async {
        let pods = live(pods(&cluster, "back").await);
        let normal = pods.iter().all(|p| label(p, "lifecycle.apps.kruise.io/state") == Some("Normal"));
        let runs = cluster.kubectl(&["get", "hookrun", "-o", "name"]).await.stdout;
        (pods.len() == 6 && normal && runs.trim().is_empty()).then_some(())
    })
    .await;
    let report = checker.stop().await;
    report.assert_clean();
    assert_eq!(names(&live(pods(&cluster, "back").await)), before, "no pod deleted or created");
    assert_eq!(report.gated_deletions + report.ungated_changes, 0, "{report:?}");
    assert_eq!(report.released.len(), 4, "the 4 candidates were released: {report:?}");
}
