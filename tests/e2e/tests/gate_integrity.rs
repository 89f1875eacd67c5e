//! Gate integrity (issue 11): every gated pod change consumes one fresh `Successful` HookRun made for that pod,
//! that change and that attempt — checked by [`e2e::gate::GateChecker`] from the watch streams in commit order —
//! in the situations a busy cluster produces: surge, failing HookRun deletes, forged / foreign / edited / terminated
//! runs, held pods during scale-out, a target that moves while a pod waits, pause with surge pods, orphaned runs,
//! pods without annotations and names over 63 characters.

use crate::walkthrough_support;

use std::collections::BTreeMap;
use std::time::Duration;

use common::api::HookRun;
use common::hookrun::HookKind;
use e2e::gamedeployment::live_pods;
use e2e::gamedeployment::{
    Columns, Shape, apply, image, manifest, manifest_shaped, revision, set_image, set_paused, wait_columns,
};
use e2e::gate::{GateChecker, GateReport};
use e2e::observe::{Observed, Observer};
use e2e::{Cluster, Operator, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube_sim::{FaultConfig, FaultRule};
use walkthrough_support::{LONG, QUICK, operators, pre_delete, pre_inplace};

async fn templates(cluster: &Cluster) {
    apply(cluster, QUICK).await;
    // Never completes on its own (every measurement fails, failures never fail the metric, no count): a pod it
    // gates is held until a person terminates the run.
    apply(cluster, &e2e::manifests::load!("hooktemplate-never", interval = "60s")).await;
}

/// A kube-sim cluster with both operators and the `quick` / `never` templates, and a GameDeployment `name` rolled
/// out on `python:latest`.
async fn rolled_out(name: &str, replicas: i64, strategy: &str, extra: &str) -> (Cluster, (Operator, Operator)) {
    let cluster = Cluster::start().await;
    let operators = operators(&cluster).await;
    templates(&cluster).await;
    apply(&cluster, &manifest(name, replicas as i32, strategy, extra, "python:latest")).await;
    wait_rolled(&cluster, name, replicas, "python:latest").await;
    (cluster, operators)
}

/// [`rolled_out`], then the gate checker started and the template moved to `image`: every change from here on is
/// checked.
async fn changed(
    name: &str,
    replicas: i64,
    strategy: &str,
    extra: &str,
    image: &str,
) -> (Cluster, (Operator, Operator), GateChecker) {
    let (cluster, operators) = rolled_out(name, replicas, strategy, extra).await;
    let checker = GateChecker::start(&cluster, "default").await;
    set_image(&cluster, "default", name, image).await;
    (cluster, operators, checker)
}

/// Stops the checker and asserts that no gated change broke the rules; the report, for the counts.
async fn clean(checker: GateChecker) -> GateReport {
    let report = checker.stop().await;
    report.assert_clean();
    report
}

/// Waits for a live pod of GameDeployment `name` in lifecycle state `state` (`PreparingDelete`, ...).
async fn wait_in_state(cluster: &Cluster, name: &str, state: &str) -> Pod {
    wait_for(&format!("a pod of {name} in {state}"), LONG, || async {
        live_pods(cluster, name).await.into_iter().find(|p| lifecycle(p) == state)
    })
    .await
}

/// Waits until `replicas` live pods all run `want` and `kubectl get gd` shows them updated and ready.
async fn wait_rolled(cluster: &Cluster, name: &str, replicas: i64, want: &str) {
    wait_columns(cluster, name, Columns::new(replicas, replicas, replicas, replicas, replicas)).await;
    wait_for(&format!("every pod of {name} to run {want}"), LONG, || async {
        let live = live_pods(cluster, name).await;
        (live.len() == replicas as usize && live.iter().all(|p| image(p) == Some(want))).then_some(())
    })
    .await;
}

/// A version of a pod of GameDeployment `name` that deletes it (marked for deletion, or gone).
fn is_deletion(seen: &Observed<Pod>, name: &str) -> bool {
    is_of(seen, name) && (seen.deleted || seen.object.metadata.deletion_timestamp.is_some())
}

/// A version of a pod of GameDeployment `name` (`app={name}`).
fn is_of(seen: &Observed<Pod>, name: &str) -> bool {
    e2e::gamedeployment::label(&seen.object, "app") == Some(name)
}

/// The run `name` in a version that is `Successful`.
fn succeeded(seen: &Observed<HookRun>, name: &str) -> Option<()> {
    let phase = seen.object.status.as_ref()?.phase?;
    (seen.name() == name && phase == common::api::HookPhase::Successful).then_some(())
}

fn lifecycle(pod: &Pod) -> &str {
    pod.metadata.labels.as_ref().and_then(|l| l.get("lifecycle.apps.kruise.io/state")).map_or("", String::as_str)
}

async fn runs(cluster: &Cluster) -> Vec<HookRun> {
    let api: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default()
}

/// The runs made for `pod` (by its UID label), once at least `n` exist.
async fn runs_for(cluster: &Cluster, pod: &Pod, n: usize) -> Vec<HookRun> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    wait_for(&format!("{n} HookRun(s) for pod {:?}", pod.metadata.name), LONG, || {
        let uid = uid.clone();
        async move {
            let mine: Vec<HookRun> = runs(cluster)
                .await
                .into_iter()
                .filter(|r| {
                    r.metadata.labels.as_ref().and_then(|l| l.get("gamedeployment.tkex.tencent.com/pod-uid"))
                        == Some(&uid)
                })
                .filter(|r| r.metadata.deletion_timestamp.is_none())
                .collect();
            (mine.len() >= n).then_some(mine)
        }
    })
    .await
}

async fn terminate(cluster: &Cluster, run: &str) {
    cluster.kubectl_ok(&["patch", "hookrun", run, "--type=merge", "-p", r#"{"spec":{"terminate":true}}"#]).await;
}

async fn event_reasons(cluster: &Cluster) -> String {
    cluster.kubectl_ok(&["get", "events", "-o", "custom-columns=REASON:.reason,MESSAGE:.message", "--no-headers"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_with_surge_consumes_one_run_per_deletion_and_never_releases_holds() {
    let strategy = format!("    maxUnavailable: 2\n    maxSurge: 1\n{}", pre_delete("quick"));
    let (cluster, _operators, checker) = changed("roll", 5, "RollingUpdate", &strategy, "python:3.5").await;
    wait_rolled(&cluster, "roll", 5, "python:3.5").await;
    let report = clean(checker).await;
    assert!(report.gated_deletions >= 5, "{report:?}");
    assert!(report.released.is_empty(), "holds released by accident: {:?}", report.released);
    cluster.shutdown().await;
}

/// R1 → R2 → R1 → R2 in place while every HookRun delete fails: the runs of the first R1 → R2 change are still
/// there, `Successful`, under the same names, when the pods go R1 → R2 again. Each change must run its own hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_success_is_never_reused_even_when_hookrun_deletes_fail() {
    let strategy = format!("    maxUnavailable: 2\n{}", pre_inplace("quick"));
    let (cluster, _operators) = rolled_out("pingpong", 2, "InplaceUpdate", &strategy).await;
    cluster.sim().set_faults(FaultConfig {
        rules: vec![FaultRule {
            verbs: vec!["delete".into()],
            resources: vec!["hookruns".into()],
            error_rate: 1.0,
            ..FaultRule::default()
        }],
    });
    let checker = GateChecker::start(&cluster, "default").await;
    for image in ["python:3.5", "python:latest", "python:3.5"] {
        set_image(&cluster, "default", "pingpong", image).await;
        wait_rolled(&cluster, "pingpong", 2, image).await;
    }
    let report = checker.stop().await;
    cluster.sim().set_faults(FaultConfig::default());
    report.assert_clean();
    assert_eq!(report.gated_updates, 6, "{report:?}");
    cluster.shutdown().await;
}

/// A run someone pre-created under the predictable name (a forged `Successful` one, or one BCS left without our
/// label) never opens the gate: the operator makes its own under BCS's `.N` name and says so. The spec of a run
/// cannot be edited; terminating a run (`spec.terminate: true`) is the documented way to let a pod go now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_foreign_and_edited_runs_never_open_the_gate_and_terminate_does() {
    let (cluster, _operators) = rolled_out("forge", 2, "RollingUpdate", &pre_delete("never")).await;
    let gd_pods = live_pods(&cluster, "forge").await;
    let quick: common::api::HookTemplate =
        Api::namespaced(cluster.client(), "default").get("quick").await.expect("the quick template");
    let api: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    // The forgery claims to be the operator's but has no owner, so the operator may remove it as an orphan once it
    // succeeds: its success is observed from a watch started before it is created.
    let hook_runs = Observer::<HookRun>::namespaced(&cluster, "default").await;
    let mut forged_names = Vec::new();
    for (i, pod) in gd_pods.iter().enumerate() {
        let id = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("tkex.bkbcs.tencent.com/gamedeployment-instance-id"))
            .cloned()
            .unwrap_or_default();
        let rev = revision(pod).unwrap_or_default().to_string();
        let name = common::hookrun::pod_hook_name(HookKind::PreDelete, &rev, &id, "never");
        // The first carries every label the operator writes (a forgery); the second none (as BCS left it).
        let labels: BTreeMap<String, String> = if i == 0 {
            common::hookrun::pod_hook_labels(HookKind::PreDelete, &rev, &id, "forge")
        } else {
            BTreeMap::new()
        };
        let new = common::hookrun::NewHookRun {
            name: name.clone(),
            namespace: "default".into(),
            labels,
            owner: None,
            args: vec![],
        };
        let run = common::hookrun::from_template(&quick, new).expect("a run from the quick template");
        api.create(&PostParams::default(), &run).await.expect("forged run created");
        forged_names.push(name);
    }
    for name in &forged_names {
        hook_runs.wait(&format!("forged run {name} to succeed"), LONG, |seen| succeeded(seen, name)).await;
    }
    let checker = GateChecker::start(&cluster, "default").await;
    let pods = Observer::<Pod>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "--replicas=0", "gamedeployment/forge"]).await;
    // Each pod gets a run of its own. The name BCS left (no label of ours) is skipped with `.1`; the forgery, which
    // claims to be ours but is controlled by nobody, is removed like any orphan and never trusted.
    let mut own = Vec::new();
    for (i, pod) in gd_pods.iter().enumerate() {
        let mine = runs_for(&cluster, pod, 1).await;
        assert_eq!(mine.len(), 1, "{mine:?}");
        let name = mine[0].metadata.name.clone().unwrap_or_default();
        if i == 1 {
            assert_eq!(name, format!("{}.1", forged_names[1]), "the name BCS left is skipped");
        }
        own.push(name);
    }
    wait_for("the forged run to be removed", LONG, || async {
        (!runs(&cluster).await.iter().any(|r| {
            r.metadata.name.as_deref() == Some(forged_names[0].as_str())
                && r.metadata.labels.as_ref().and_then(|l| l.get("gamedeployment.tkex.tencent.com/pod-uid")).is_none()
        }))
        .then_some(())
    })
    .await;
    // The forged Successful runs did not let anything go: the operator has seen them (it made runs of its own and
    // removed the forgery), and no version of a pod since the scale-in began was a deletion.
    pods.assert_never("no pod deleted on a forged run", |seen| is_deletion(seen, "forge"));
    let events = event_reasons(&cluster).await;
    assert!(events.contains("HookRunNameTaken"), "{events}");
    // Editing what a run measures is refused by the API server.
    let edit =
        cluster.kubectl(&["patch", "hookrun", &own[0], "--type=merge", "-p", r#"{"spec":{"metrics":[]}}"#]).await;
    assert!(!edit.success && edit.stderr.contains("immutable"), "{edit:?}");
    // Terminating one run lets exactly that pod go.
    terminate(&cluster, &own[0]).await;
    let terminated = own[0].clone();
    let deleted = pods
        .wait("one pod to be deleted", LONG, |seen| is_deletion(seen, "forge").then(|| seen.uid().to_string()))
        .await;
    // A window for a wrong second deletion, every change in it checked (the checker replays the rest).
    tokio::time::sleep(Duration::from_secs(2)).await;
    pods.assert_never(&format!("only the pod of {terminated} deleted"), |seen| {
        is_deletion(seen, "forge") && seen.uid() != deleted
    });
    let report = clean(checker).await;
    assert_eq!((report.gated_deletions, report.terminated_runs_used), (1, 1), "{report:?}");
    let events = event_reasons(&cluster).await;
    assert!(events.contains("HookRunTerminated"), "{events}");
    cluster.shutdown().await;
}

/// RollingUpdate, maxUnavailable 2, a pre-delete hook: P1 and P2 wait; P1 is let go, its replacement is created,
/// and P2 must keep waiting (it used to drop back to Normal). An HPA-style scale-out while pods are held does not
/// release them either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_pods_stay_held_through_replacements_and_scale_out() {
    let strategy = format!("    maxUnavailable: 2\n{}", pre_delete("never"));
    let (cluster, _operators, checker) = changed("held", 4, "RollingUpdate", &strategy, "python:3.5").await;
    let held = wait_for("two pods held in PreparingDelete", LONG, || async {
        let held: Vec<Pod> =
            live_pods(&cluster, "held").await.into_iter().filter(|p| lifecycle(p) == "PreparingDelete").collect();
        (held.len() == 2).then_some(held)
    })
    .await;
    let pods = Observer::<Pod>::namespaced(&cluster, "default").await;
    let first = runs_for(&cluster, &held[0], 1).await;
    terminate(&cluster, first[0].metadata.name.as_deref().unwrap_or_default()).await;
    wait_for("the first held pod to go", LONG, || async {
        let live = live_pods(&cluster, "held").await;
        (!live.iter().any(|p| p.metadata.uid == held[0].metadata.uid)).then_some(())
    })
    .await;
    // HPA-style scale-out while the second pod is held.
    cluster.kubectl_ok(&["scale", "--replicas=5", "gamedeployment/held"]).await;
    wait_for("5 pods besides the held one", LONG, || async {
        (live_pods(&cluster, "held").await.len() >= 5).then_some(())
    })
    .await;
    // A window for a wrong release, every change in it checked: the second pod never left PreparingDelete.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = held[1].metadata.uid.clone().unwrap_or_default();
    pods.assert_never("the second pod is still held", |seen| {
        seen.uid() == second && (is_deletion(seen, "held") || lifecycle(&seen.object) != "PreparingDelete")
    });
    let report = clean(checker).await;
    assert!(report.released.is_empty(), "holds released by accident: {:?}", report.released);
    cluster.shutdown().await;
}

/// A pod waits in PreparingUpdate for revision R2 when the template moves on to R3: the run made for R2 — even
/// `Successful` by then — must not move it to R3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_made_for_one_target_revision_never_moves_a_pod_to_another() {
    let strategy = format!("    maxUnavailable: 1\n{}", pre_inplace("never"));
    let (cluster, _operators, checker) = changed("target", 1, "InplaceUpdate", &strategy, "python:3.5").await;
    let pod = wait_in_state(&cluster, "target", "PreparingUpdate").await;
    let for_r2 = runs_for(&cluster, &pod, 1).await.remove(0);
    // Paused, R2's run succeeds (a person terminates it) and the template moves on to R3.
    set_paused(&cluster, "default", "target", true).await;
    let hook_runs = Observer::<HookRun>::namespaced(&cluster, "default").await;
    let r2_name = for_r2.metadata.name.clone().unwrap_or_default();
    terminate(&cluster, &r2_name).await;
    hook_runs.wait("R2's run to succeed", LONG, |seen| succeeded(seen, &r2_name)).await;
    let pods = Observer::<Pod>::namespaced(&cluster, "default").await;
    set_image(&cluster, "default", "target", "python:3.6").await;
    set_paused(&cluster, "default", "target", false).await;
    // A run is made for the R3 attempt; until it succeeds the pod stays where it is.
    let r3 = wait_for("a run for the R3 attempt", LONG, || async {
        runs(&cluster).await.into_iter().find(|r| {
            r.metadata.uid != for_r2.metadata.uid && !r.spec.terminate && r.metadata.deletion_timestamp.is_none()
        })
    })
    .await;
    // A window for a wrong update, every change in it checked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    pods.assert_never("not moved to R3 on R2's run", |seen| {
        is_of(seen, "target") && image(&seen.object) != Some("python:latest")
    });
    terminate(&cluster, r3.metadata.name.as_deref().unwrap_or_default()).await;
    wait_rolled(&cluster, "target", 1, "python:3.6").await;
    let report = clean(checker).await;
    assert_eq!(report.gated_updates, 1, "{report:?}");
    cluster.shutdown().await;
}

/// Pausing a RollingUpdate that has surge pods freezes it: no pod is created or deleted while paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_rolling_update_with_surge_pods_freezes_it() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    let strategy = "    maxUnavailable: 0\n    maxSurge: 2\n  minReadySeconds: 20\n";
    apply(&cluster, &manifest("surge", 4, "RollingUpdate", strategy, "python:latest")).await;
    wait_for("4 pods", LONG, || async { (live_pods(&cluster, "surge").await.len() == 4).then_some(()) }).await;
    tokio::time::sleep(Duration::from_secs(21)).await;
    wait_columns(&cluster, "surge", Columns::new(4, 4, 4, 4, 4)).await;
    // The surge pods live beside the old ones only until they have been ready for minReadySeconds: observed.
    let surging = Observer::<Pod>::namespaced(&cluster, "default").await;
    set_image(&cluster, "default", "surge", "python:3.5").await;
    surging
        .wait_state("surge pods", LONG, |pods| {
            let live = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none());
            (live.filter(|p| e2e::gamedeployment::label(p, "app") == Some("surge")).count() == 6).then_some(())
        })
        .await;
    drop(surging);
    set_paused(&cluster, "default", "surge", true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = Observer::<Pod>::namespaced(&cluster, "default").await;
    let before: Vec<String> = live_pods(&cluster, "surge").await.into_iter().filter_map(|p| p.metadata.uid).collect();
    // Past minReadySeconds: an unpaused rollout would now delete old pods. Every change in the window is checked:
    // no pod marked for deletion, none created.
    tokio::time::sleep(Duration::from_secs(25)).await;
    pods.assert_never("pods changed while paused", |seen| {
        let was_live = before.iter().any(|uid| uid == seen.uid());
        // A live pod deleted, or a pod created (one already terminating when the pause began is neither).
        is_of(seen, "surge") && is_deletion(seen, "surge") == was_live
    });
    set_paused(&cluster, "default", "surge", false).await;
    wait_rolled(&cluster, "surge", 4, "python:3.5").await;
    cluster.shutdown().await;
}

/// After `kubectl delete gd --cascade=orphan` and re-creating it, the runs of the old GameDeployment are not
/// trusted (another UID) and are cleaned up; a pod is deleted only on a run of the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_runs_are_not_trusted_and_are_cleaned_up() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    templates(&cluster).await;
    let gd = manifest("orphan", 2, "RollingUpdate", &pre_delete("never"), "python:latest");
    apply(&cluster, &gd).await;
    wait_rolled(&cluster, "orphan", 2, "python:latest").await;
    cluster.kubectl_ok(&["scale", "--replicas=1", "gamedeployment/orphan"]).await;
    let held = wait_in_state(&cluster, "orphan", "PreparingDelete").await;
    let old = runs_for(&cluster, &held, 1).await;
    let old_uid = old[0].metadata.uid.clone();
    // Mark it Successful as a person would (terminate) only after the workload is gone: an old success.
    cluster.kubectl_ok(&["delete", "gamedeployment", "orphan", "--cascade=orphan"]).await;
    wait_for("the old run to lose its owner", LONG, || async {
        let run = runs(&cluster).await.into_iter().find(|r| r.metadata.uid == old_uid)?;
        run.metadata.owner_references.as_ref().is_none_or(|o| o.is_empty()).then_some(())
    })
    .await;
    terminate(&cluster, old[0].metadata.name.as_deref().unwrap_or_default()).await;
    let checker = GateChecker::start(&cluster, "default").await;
    let pods = Observer::<Pod>::namespaced(&cluster, "default").await;
    apply(&cluster, &manifest("orphan", 1, "RollingUpdate", &pre_delete("never"), "python:latest")).await;
    wait_for("the orphaned run to be cleaned up", LONG, || async {
        (!runs(&cluster).await.iter().any(|r| r.metadata.uid == old_uid && r.metadata.deletion_timestamp.is_none()))
            .then_some(())
    })
    .await;
    // A window for a wrong deletion, every change in it checked.
    tokio::time::sleep(Duration::from_secs(2)).await;
    pods.assert_never("nothing deleted on the orphaned success", |seen| is_deletion(seen, "orphan"));
    let fresh = runs_for(&cluster, &held, 1).await;
    terminate(&cluster, fresh[0].metadata.name.as_deref().unwrap_or_default()).await;
    wait_for("one pod left", LONG, || async { (live_pods(&cluster, "orphan").await.len() == 1).then_some(()) }).await;
    let report = clean(checker).await;
    assert_eq!(report.gated_deletions, 1, "{report:?}");
    cluster.shutdown().await;
}

/// A GameDeployment named with 70 characters (HookRun label values are capped at 63) and an adopted pod without
/// any annotations both go through the pre-delete hook without errors or hot loops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_names_and_pods_without_annotations_pass_the_gate() {
    let cluster = Cluster::start().await;
    let (_hooks, gd_operator) = operators(&cluster).await;
    templates(&cluster).await;
    let name = format!("long-{}", "x".repeat(65));
    assert_eq!(name.len(), 70);
    let bare = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bare\n  labels:\n    app: long\nspec:\n  containers:\n    - name: python\n      image: python:latest\n";
    apply(&cluster, bare).await;
    let api: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    // The bare pod runs before the workload can adopt it: the operator judges a pod by the version its pass saw, and
    // one still starting then is deleted without a hook (it has served nobody) even if it started running before the
    // delete landed, which the checker, judging the pod at its deletion, would report (CI saw that on a loaded machine).
    wait_for("the bare pod to run", LONG, || async { api.get("bare").await.ok().filter(running).map(|_| ()) }).await;
    let checker = GateChecker::start(&cluster, "default").await;
    // The workload's own label must fit in 63 characters, so it selects `app: long`, not its name.
    let shape = Shape { app: Some("long"), ..Shape::default() };
    let gd = manifest_shaped(&name, 2, "RollingUpdate", &pre_delete("quick"), "python:latest", shape);
    apply(&cluster, &gd).await;
    wait_for("the bare pod to be adopted", LONG, || async {
        let pod = api.get("bare").await.ok()?;
        pod.metadata.owner_references.filter(|o| !o.is_empty()).map(|_| ())
    })
    .await;
    // Only a Running pod's deletion needs the hook: both must run before the scale-in, or the one the workload just
    // created may go ungated, rightly, while still starting (CI saw that on a loaded machine).
    wait_for("both pods to run", LONG, || async {
        let pods = api.list(&ListParams::default().labels("app=long")).await.ok()?;
        (pods.items.len() == 2 && pods.items.iter().all(running)).then_some(())
    })
    .await;
    cluster.kubectl_ok(&["scale", "--replicas=0", &format!("gamedeployment/{name}")]).await;
    wait_for("every pod to go", LONG, || async {
        let pods = api.list(&ListParams::default().labels("app=long")).await.ok()?;
        pods.items.iter().all(|p| p.metadata.deletion_timestamp.is_some()).then_some(())
    })
    .await;
    let report = clean(checker).await;
    assert!(report.gated_deletions >= 2, "{report:?}");
    // A refused patch logs the API status (`code: 422`, reason `Invalid`). Matching a bare "422" would also match
    // timestamps and generated pod names, which made this test fail by chance.
    let logs = gd_operator.logs();
    let refused: Vec<&str> = logs.lines().filter(|l| l.contains("code: 422") || l.contains("\"Invalid\"")).collect();
    assert!(refused.is_empty(), "no invalid patches: {refused:#?}");
    cluster.shutdown().await;
}

/// `podsToDelete` goes through the pre-delete hook like any deletion, and the pod is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_to_delete_consume_a_run_each() {
    let (cluster, _operators) = rolled_out("named", 3, "RollingUpdate", &pre_delete("quick")).await;
    let checker = GateChecker::start(&cluster, "default").await;
    let victim = live_pods(&cluster, "named").await.remove(0);
    let name = victim.metadata.name.clone().unwrap_or_default();
    let patch = format!(r#"{{"spec":{{"scaleStrategy":{{"podsToDelete":["{name}"]}}}}}}"#);
    cluster.kubectl_ok(&["patch", "gamedeployment", "named", "--type=merge", "-p", &patch]).await;
    wait_for("the named pod to be replaced", LONG, || async {
        let live = live_pods(&cluster, "named").await;
        (live.len() == 3 && !live.iter().any(|p| p.metadata.uid == victim.metadata.uid)).then_some(())
    })
    .await;
    let report = clean(checker).await;
    assert_eq!(report.gated_deletions, 1, "{report:?}");
    cluster.shutdown().await;
}
