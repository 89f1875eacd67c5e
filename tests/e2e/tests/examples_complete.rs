//! The files of `examples/` do what the docs say, on kube-sim with both operators, and `kubectl gd status` says so
//! within 5 s of the operator's `RolloutComplete` (issue 34: items 1 and 8). Each scenario runs in its own
//! namespace, all at once:
//!
//! - `race-to-empty.yaml` as shipped: its pods answer `{"players": 0, "cost": 1}` on 9091 in the sandbox (the
//!   kube-sim annotations of its pod template), so `kubectl scale --replicas=7` deletes 3 servers through their
//!   hooks and the rollout completes (before, every probe ended `Connection refused` and 6 pods stayed held);
//! - `gamedeployment.yaml` with `hook-template-success.yaml`: the walkthrough's scale-in, 6 → 5;
//! - `inplace-update.yaml`: an image patch rolled in place up to its partition;
//! - the walkthrough's scale-in with the victim's hook skipped by the pod annotation (`skip-hook=delete`): the
//!   release record left in the status does not keep `kubectl gd status` waiting;
//! - `hotpatch-update.yaml`, `rolling-update.yaml`, `gamedeployment-args.yaml`, `gitops-clean.yaml`: see each
//!   scenario's function;
//! - in a second cluster (their stories take minutes of the gamedeployment-operator's clock: grace periods, a timed
//!   pause, retry back-offs), `canary-gamedeployment.yaml` resumed past its failing step hook and promoted, and
//!   `hook-deadlines.yaml`.
//!
//! Not here: `server-state/` (RBAC, an admission policy and a client script, no GameDeployment to complete) is driven
//! as shipped by `server_state_self_label.rs`.
//!
//! The hook-operator runs the templates' intervals 20x faster (`--interval-scale 0.05`).

use crate::kubectl_gd::kubectl_gd;
use crate::walkthrough_support;

use common::api::{GameDeployment, HookPhase, HookRun};
use e2e::observe::Observer;
use e2e::{Cluster, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use walkthrough_support::{LONG, NAME, operators};

/// Whether the operator reports the rollout complete for the current generation (`RolloutComplete` or
/// `PartitionAvailable`) with its canary steps done: a canary `partition` step also reports `PartitionAvailable`,
/// and `kubectl gd status` rightly waits for the last step. The condition's `lastTransitionTime` cannot say when: it
/// moves only when its status does.
async fn complete_now(cluster: &Cluster, ns: &str) -> bool {
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), ns);
    let Ok(gd) = api.get(NAME).await else {
        return false;
    };
    let Some(status) = gd.status else {
        return false;
    };
    let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing");
    let reason = progressing.and_then(|c| c.reason.as_deref());
    let steps = gd.spec.update_strategy.canary.as_ref().map_or(0, |c| c.steps.len());
    let steps_done = status.current_step_index.is_none_or(|i| usize::try_from(i).is_ok_and(|i| i >= steps));
    matches!(reason, Some("RolloutComplete" | "PartitionAvailable"))
        && status.observed_generation == gd.metadata.generation
        && (steps == 0 || steps_done)
}

/// `kubectl gd status` exits 0, and within 5 s of the operator's completion — or of its own start, when it was
/// started after it. The completion is seen by polling the GameDeployment every 200 ms beside it.
async fn status_completes_promptly(cluster: &Cluster, ns: &str, what: &str) {
    let started = Instant::now();
    let watch = async {
        loop {
            if complete_now(cluster, ns).await {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let args = ["status", NAME, "-n", ns, "--timeout", "4m"];
    let status = kubectl_gd(cluster, &args);
    tokio::pin!(status);
    tokio::pin!(watch);
    // The status command and the watch run side by side; once the command has concluded, the watch gets 10 s more
    // to see what the command saw.
    let mut done = None;
    let (out, exited) = tokio::select! {
        out = &mut status => (out, Instant::now()),
        at = &mut watch => {
            done = Some(at);
            ((&mut status).await, Instant::now())
        }
    };
    assert_eq!(out.code, 0, "{what}: {}{}", out.stdout, out.stderr);
    let done = match done {
        Some(at) => at,
        None => tokio::time::timeout(Duration::from_secs(10), watch).await.expect("the operator reports completion"),
    };
    let lag = exited.saturating_duration_since(done.max(started));
    assert!(lag <= Duration::from_secs(5), "{what}: kubectl gd status exited {lag:?} after the operator's completion");
}

async fn kubectl(cluster: &Cluster, ns: &str, args: &[&str]) -> String {
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["-n", ns]);
    let out = cluster.kubectl_ok(&full).await;
    println!("$ kubectl {}\n{out}", full.join(" "));
    out
}

/// The names of the pods in `ns` matching `selector`.
async fn pod_names(cluster: &Cluster, ns: &str, selector: &str) -> Vec<String> {
    let out =
        cluster.kubectl(&["get", "pods", "-n", ns, "-l", selector, "-o", "jsonpath={.items[*].metadata.name}"]).await;
    out.stdout.split_whitespace().map(str::to_string).collect()
}

async fn live_count(cluster: &Cluster, ns: &str) -> usize {
    pod_names(cluster, ns, "app=test-gamedeployment").await.len()
}

async fn wait_pods(cluster: &Cluster, ns: &str, want: usize) {
    wait_for(&format!("{ns}: {want} pods"), LONG, || async { (live_count(cluster, ns).await == want).then_some(()) })
        .await;
}

/// The pods in `ns` matching `selector` that are not being deleted.
async fn live_pods(cluster: &Cluster, ns: &str, selector: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(cluster.client(), ns);
    let pods = api.list(&ListParams::default().labels(selector)).await.map(|l| l.items).unwrap_or_default();
    e2e::gamedeployment::live(pods)
}

/// Waits until exactly `want` pods of `selector` are live in `ns`, and returns them.
async fn settled_pods(cluster: &Cluster, ns: &str, selector: &str, want: usize) -> Vec<Pod> {
    wait_for(&format!("{ns}: {want} live pods"), LONG, || async {
        let pods = live_pods(cluster, ns, selector).await;
        (pods.len() == want).then_some(pods)
    })
    .await
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The image the pod's first container is asked to run.
fn image(pod: &Pod) -> String {
    pod.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.clone()).unwrap_or_default()
}

/// The first container's `containerID` and `restartCount`: what a restart changes.
fn container(pod: &Pod) -> (Option<String>, i32) {
    let status = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).and_then(|c| c.first());
    (status.and_then(|c| c.container_id.clone()), status.map_or(-1, |c| c.restart_count))
}

async fn game_deployment(cluster: &Cluster, ns: &str) -> GameDeployment {
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), ns);
    api.get(NAME).await.expect("the GameDeployment exists")
}

/// The HookRuns in `ns`.
async fn runs(cluster: &Cluster, ns: &str) -> Vec<HookRun> {
    let api: Api<HookRun> = Api::namespaced(cluster.client(), ns);
    api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default()
}

/// `kubectl gd <args> -n ns`.
async fn gd(cluster: &Cluster, ns: &str, args: &[&str]) -> crate::kubectl_gd::Gd {
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["-n", ns]);
    kubectl_gd(cluster, &full).await
}

/// `kubectl gd status` run to its verdict, with how long it took.
async fn status_verdict(cluster: &Cluster, ns: &str) -> (crate::kubectl_gd::Gd, Duration) {
    let started = Instant::now();
    let out = gd(cluster, ns, &["status", NAME, "--timeout", "4m"]).await;
    (out, started.elapsed())
}

const IMAGE_PATH: &str = "/spec/template/spec/containers/0/image";

async fn patch_image(cluster: &Cluster, ns: &str, image: &str) {
    let patch = format!(r#"[{{"op":"replace","path":"{IMAGE_PATH}","value":"{image}"}}]"#);
    kubectl(cluster, ns, &["patch", "gamedeployment", NAME, "--type=json", "-p", &patch]).await;
}

/// Applies `files` in `ns`, then scales the GameDeployment to `replicas`: each step completes promptly.
async fn scale_in(cluster: &Cluster, ns: &str, files: &[&str], replicas: usize) {
    for file in files {
        kubectl(cluster, ns, &["apply", "-f", &format!("examples/{file}")]).await;
    }
    status_completes_promptly(cluster, ns, &format!("{ns}: created")).await;
    kubectl(cluster, ns, &["scale", "gamedeployment", NAME, &format!("--replicas={replicas}")]).await;
    status_completes_promptly(cluster, ns, &format!("{ns}: scaled in")).await;
    wait_pods(cluster, ns, replicas).await;
}

async fn inplace_update(cluster: &Cluster) {
    let ns = "ex-inplace";
    kubectl(cluster, ns, &["apply", "-f", "examples/inplace-update.yaml"]).await;
    status_completes_promptly(cluster, ns, "inplace-update: created").await;
    let image = r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"python:3.6"}]"#;
    kubectl(cluster, ns, &["patch", "gamedeployment", NAME, "--type=json", "-p", image]).await;
    status_completes_promptly(cluster, ns, "inplace-update: image patched").await;
}

async fn skipped_hook(cluster: &Cluster) {
    let ns = "ex-skip";
    kubectl(cluster, ns, &["apply", "-f", "examples/hook-template-fail.yaml"]).await;
    kubectl(cluster, ns, &["apply", "-f", "examples/gamedeployment.yaml"]).await;
    status_completes_promptly(cluster, ns, "skip: created").await;
    kubectl(cluster, ns, &["scale", "gamedeployment", NAME, "--replicas=5"]).await;
    // The victim is held by its failing hook; skip it the documented way.
    let held = "lifecycle.apps.kruise.io/state=PreparingDelete";
    let victim = wait_for("a pod held in PreparingDelete", LONG, || async {
        pod_names(cluster, ns, held).await.into_iter().next()
    })
    .await;
    kubectl(cluster, ns, &["annotate", "pod", &victim, "gamedeployment.tkex.tencent.com/skip-hook=delete"]).await;
    status_completes_promptly(cluster, ns, "skip: scaled in without the hook").await;
    wait_pods(cluster, ns, 5).await;
}

/// `hotpatch-update.yaml` (8 pods, partition 3): an image patch swaps the image of 5 pods in service — the same
/// pods (UIDs), the same containers (`containerID`), no restart — and leaves 3 on the old image.
async fn hotpatch_update(cluster: &Cluster) {
    let ns = "ex-hotpatch";
    let selector = "app=test-gd1";
    kubectl(cluster, ns, &["apply", "-f", "examples/hotpatch-update.yaml"]).await;
    status_completes_promptly(cluster, ns, "hotpatch-update: created").await;
    let before = settled_pods(cluster, ns, selector, 8).await;
    patch_image(cluster, ns, "main:v2").await;
    status_completes_promptly(cluster, ns, "hotpatch-update: image patched").await;
    let after = live_pods(cluster, ns, selector).await;
    let uids = |pods: &[Pod]| pods.iter().map(uid).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(uids(&after), uids(&before), "a hot patch keeps every pod");
    for pod in &after {
        let was = before.iter().find(|p| uid(p) == uid(pod)).expect("the same pod");
        assert_eq!(container(pod), container(was), "a hot patch does not restart the container");
        assert_eq!(container(pod).1, 0, "no restart");
    }
    let patched = after.iter().filter(|p| image(p) == "main:v2").count();
    let kept = after.iter().filter(|p| image(p) == "main:v1").count();
    assert_eq!((patched, kept), (5, 3), "partition 3 keeps 3 pods on the old image");
}

/// `rolling-update.yaml` (8 pods, partition 3, maxSurge 2): an image patch recreates 5 pods (new UIDs) and keeps
/// the 3 of the partition.
async fn rolling_update(cluster: &Cluster) {
    let ns = "ex-rolling";
    let selector = "app=test";
    kubectl(cluster, ns, &["apply", "-f", "examples/rolling-update.yaml"]).await;
    status_completes_promptly(cluster, ns, "rolling-update: created").await;
    let before = settled_pods(cluster, ns, selector, 8).await;
    patch_image(cluster, ns, "python:3.6").await;
    status_completes_promptly(cluster, ns, "rolling-update: image patched").await;
    let after = settled_pods(cluster, ns, selector, 8).await;
    let old: Vec<String> = before.iter().map(uid).collect();
    for pod in &after {
        let new_image = image(pod) == "python:3.6";
        assert_eq!(!old.contains(&uid(pod)), new_image, "{}: recreated exactly when updated", image(pod));
    }
    let updated = after.iter().filter(|p| image(p) == "python:3.6").count();
    assert_eq!(updated, 5, "partition 3 keeps 3 pods of the old revision");
}

/// `gamedeployment-args.yaml` with `hook-template-args.yaml`: the scale-in 4 → 2 makes one pre-delete HookRun per
/// victim carrying the pod's identity (`PodIP`, `PodName`, `PodNamespace`) and the spec's `service-name`; each
/// probes its own pod (`http://{{ args.PodIP }}:9091`, answering age 45).
async fn args_scale_in(cluster: &Cluster) {
    let ns = "ex-args";
    kubectl(cluster, ns, &["apply", "-f", "examples/hook-template-args.yaml"]).await;
    kubectl(cluster, ns, &["apply", "-f", "examples/gamedeployment-args.yaml"]).await;
    status_completes_promptly(cluster, ns, "args: created").await;
    let before = settled_pods(cluster, ns, "app=test-gamedeployment", 4).await;
    // Each run succeeds at its first measurement and goes with its pod: observed from a watch started before the
    // scale-in.
    let runs = Observer::<HookRun>::namespaced(cluster, ns).await;
    kubectl(cluster, ns, &["scale", "gamedeployment", NAME, "--replicas=2"]).await;
    // Both runs, once each has measured its pod.
    let mut first_measured: BTreeMap<String, HookRun> = BTreeMap::new();
    let measured = runs
        .wait("two measured pre-delete HookRuns", LONG, |seen| {
            let status = seen.object.status.as_ref()?;
            if status.metric_results.iter().any(|m| !m.measurements.is_empty()) {
                first_measured.entry(seen.name().to_string()).or_insert_with(|| seen.object.clone());
            }
            (first_measured.len() == 2).then(|| first_measured.values().cloned().collect::<Vec<_>>())
        })
        .await;
    for run in &measured {
        let arg = |name: &str| run.spec.args.iter().find(|a| a.name == name).and_then(|a| a.value.clone());
        let pod_name = arg("PodName").expect("PodName is passed");
        let pod = before.iter().find(|p| p.metadata.name.as_deref() == Some(pod_name.as_str())).expect("a pod");
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        assert!(ip.as_deref().is_some_and(|ip| !ip.is_empty()), "{pod_name} has an IP");
        assert_eq!(arg("PodIP"), ip, "{pod_name}");
        assert_eq!(arg("PodNamespace").as_deref(), Some(ns));
        assert_eq!(arg("service-name").as_deref(), Some("test-gamedeployment-svc.default.svc.cluster.local"));
        let status = run.status.clone().expect("measured");
        let values: Vec<Option<String>> =
            status.metric_results.iter().flat_map(|m| m.measurements.iter().map(|x| x.value.clone())).collect();
        assert!(values.iter().all(|v| v.as_deref() == Some("45")), "{pod_name}'s own server answers: {values:?}");
    }
    status_completes_promptly(cluster, ns, "args: scaled in").await;
    let after = settled_pods(cluster, ns, "app=test-gamedeployment", 2).await;
    let names: Vec<Option<String>> = measured
        .iter()
        .map(|r| r.spec.args.iter().find(|a| a.name == "PodName").and_then(|a| a.value.clone()))
        .collect();
    assert!(after.iter().all(|p| !names.contains(&p.metadata.name)), "the probed pods are the ones deleted");
}

/// A merge patch of the GameDeployment in `ns`, as a person's write; returns the spec the API committed with it.
async fn write_spec(cluster: &Cluster, ns: &str, patch: serde_json::Value) -> serde_json::Value {
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), ns);
    println!("$ kubectl patch gamedeployment {NAME} -n {ns} --type=merge -p '{patch}'");
    let after = api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patched");
    serde_json::to_value(&after.spec).expect("spec serialises")
}

/// `gitops-clean.yaml` with `hook-template-success.yaml`: an image patch rolls 2 pods (canary partition 2), the pause
/// step holds in status only (`kubectl gd status` exits 3, `spec.updateStrategy.paused` stays false), `kubectl gd
/// resume` sets the `resume-step` annotation and the rollout completes; a scale-in 4 → 3 through the pre-delete hook
/// completes. A watch on the object sees only specs this test wrote, and `metadata.generation` moves only with them
/// (as `gitops_clean.rs` checks it).
async fn gitops_clean(cluster: &Cluster) {
    let ns = "ex-gitops";
    kubectl(cluster, ns, &["apply", "-f", "examples/hook-template-success.yaml"]).await;
    kubectl(cluster, ns, &["apply", "-f", "examples/gitops-clean.yaml"]).await;
    status_completes_promptly(cluster, ns, "gitops-clean: created").await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), ns);
    let start = game_deployment(cluster, ns).await;
    let first_generation = start.metadata.generation.expect("generation");
    let mut ours = vec![serde_json::to_value(&start.spec).expect("spec")];
    let seen: Arc<Mutex<Vec<(i64, serde_json::Value)>>> = Default::default();
    let record = seen.clone();
    let watch = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
        let mut stream = watcher(api, config).applied_objects().boxed();
        while let Some(Ok(gd)) = stream.next().await {
            let spec = serde_json::to_value(&gd.spec).expect("spec");
            record.lock().expect("not poisoned").push((gd.metadata.generation.unwrap_or_default(), spec));
        }
    });

    let new_image = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "python", "image": "python:3.5", "command": ["python"], "args": ["-m", "http.server", "8000"]}]}}}});
    ours.push(write_spec(cluster, ns, new_image).await);
    let (out, _) = status_verdict(cluster, ns).await;
    assert_eq!(out.code, 3, "gitops-clean: the pause step is a pause: {out:?}");
    assert!(out.stderr.contains("canary step 2 of 2"), "{}", out.stderr);
    let paused = game_deployment(cluster, ns).await;
    assert!(!paused.spec.update_strategy.paused, "the pause lives in status only");
    assert_eq!(updated(cluster, ns).await, 2, "gitops-clean: partition 2 of 4");
    let out = gd(cluster, ns, &["resume", NAME]).await;
    assert!(out.code == 0 && out.stdout.contains("gamedeployment.tkex.tencent.com/resume-step="), "{out:?}");
    status_completes_promptly(cluster, ns, "gitops-clean: resumed").await;
    let pods = settled_pods(cluster, ns, "app=test-gamedeployment", 4).await;
    assert!(pods.iter().all(|p| image(p) == "python:3.5"), "every pod updated");

    ours.push(write_spec(cluster, ns, serde_json::json!({"spec": {"replicas": 3}})).await);
    status_completes_promptly(cluster, ns, "gitops-clean: scaled in").await;
    settled_pods(cluster, ns, "app=test-gamedeployment", 3).await;

    let last = game_deployment(cluster, ns).await;
    watch.abort();
    let seen = seen.lock().expect("not poisoned").clone();
    assert!(!seen.is_empty());
    for (generation, spec) in &seen {
        assert!(
            ours.contains(spec),
            "gitops-clean: generation {generation} shows a spec this test did not write: {spec:#}"
        );
    }
    let writes = i64::try_from(ours.len() - 1).expect("small");
    assert_eq!(last.metadata.generation, Some(first_generation + writes), "only our {writes} writes changed the spec");
}

/// Applies the canary example, and once created patches its image: the rollout starts at step 1.
async fn canary_started(cluster: &Cluster, ns: &str) {
    kubectl(cluster, ns, &["apply", "-f", "examples/canary-hooktemplate.yaml"]).await;
    kubectl(cluster, ns, &["apply", "-f", "examples/canary-gamedeployment.yaml"]).await;
    status_completes_promptly(cluster, ns, &format!("{ns}: created")).await;
    patch_image(cluster, ns, "python:3.5").await;
    // Step 1 (partition 3) updates one pod; step 2 pauses until a person resumes: `status` says so.
    let (out, _) = status_verdict(cluster, ns).await;
    assert_eq!(out.code, 3, "{ns}: paused at the indefinite pause step: {out:?}");
    assert!(out.stderr.contains("canary step 2 of 5") && out.stderr.contains("kubectl gd resume"), "{}", out.stderr);
    assert_eq!(updated(cluster, ns).await, 1, "{ns}: partition 3 of 4");
}

async fn updated(cluster: &Cluster, ns: &str) -> usize {
    live_pods(cluster, ns, "app=test-gamedeployment").await.iter().filter(|p| image(p) == "python:3.5").count()
}

/// `canary-gamedeployment.yaml` with `canary-hooktemplate.yaml`, driven as the hook template's comment says: after
/// the indefinite pause (`kubectl gd status` exits 3) `kubectl gd resume`; `status` then waits through step 3
/// (partition 2) and the timed 60 s pause of step 4, and exits 1 naming the step's HookRun, which fails on purpose
/// (`age < 30` against 45); `kubectl gd resume` goes past it and the rollout completes with every pod updated.
async fn canary_resumed(cluster: &Cluster) {
    let ns = "ex-canary";
    canary_started(cluster, ns).await;
    let out = gd(cluster, ns, &["resume", NAME]).await;
    assert!(out.code == 0 && out.stdout.contains("paused set to false"), "{out:?}");
    let (out, took) = status_verdict(cluster, ns).await;
    assert_eq!(out.code, 1, "canary: the step hook fails on purpose: {out:?}");
    assert!(took >= Duration::from_secs(60), "canary: the timed pause (60 s) is waited for, not reported: {took:?}");
    let run = game_deployment(cluster, ns)
        .await
        .status
        .and_then(|s| s.canary)
        .and_then(|c| c.current_step_hook_run)
        .expect("the step's HookRun is recorded");
    assert!(run.ends_with("-4-test"), "{run}");
    assert!(out.stderr.contains("canary step 5 of 5") && out.stderr.contains(&run), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("kubectl gd resume {NAME}")), "{}", out.stderr);
    assert_eq!(updated(cluster, ns).await, 2, "canary: partition 2 of 4 while the hook step holds");
    let out = gd(cluster, ns, &["resume", NAME]).await;
    assert_eq!(out.code, 0, "{out:?}");
    status_completes_promptly(cluster, ns, "canary: resumed past the failed hook").await;
    settled_pods(cluster, ns, "app=test-gamedeployment", 4).await;
    assert_eq!(updated(cluster, ns).await, 4, "canary: every pod updated");
}

/// The same canary promoted at its indefinite pause (`kubectl gd promote`): every remaining step is skipped — the
/// step hook never runs — and the rollout completes with every pod updated.
async fn canary_promoted(cluster: &Cluster) {
    let ns = "ex-promote";
    // The only hook is the step hook's: a run that is created and deleted again is caught by the watch.
    let hook_runs = Observer::<HookRun>::namespaced(cluster, ns).await;
    canary_started(cluster, ns).await;
    let out = gd(cluster, ns, &["promote", NAME]).await;
    assert!(out.code == 0 && out.stdout.contains("gamedeployment.tkex.tencent.com/promote="), "{out:?}");
    status_completes_promptly(cluster, ns, "promote: promoted").await;
    settled_pods(cluster, ns, "app=test-gamedeployment", 4).await;
    assert_eq!(updated(cluster, ns).await, 4, "promote: every pod updated");
    let ran: Vec<String> = hook_runs.versions().iter().map(|v| v.name().to_string()).collect();
    assert!(ran.is_empty(), "promote: no step hook ran: {ran:?}");
}

/// `hook-deadlines.yaml`. With `hook-template-success.yaml`, an image patch passes all four hooks (pre-inplace,
/// post-inplace, the canary step hook) and completes with no release recorded (a hook that succeeds is a success,
/// never a release). Then with `hook-template-fail.yaml`, a scale-in 6 → 5: the victim's pre-delete hook fails and
/// `autoRetry` (limit 3, back-off 30 s) runs it again 3 times — `kubectl gd status` keeps waiting meanwhile — then
/// `onFailure: Hold` keeps the pod: `status` exits 1 naming the last run (`….3`), the 4 failed runs stay as the
/// history. The documented way out, the fixed template and `kubectl gd retry`, completes the scale-in.
async fn hook_deadlines(cluster: &Cluster) {
    let ns = "ex-deadlines";
    kubectl(cluster, ns, &["apply", "-f", "examples/hook-template-success.yaml"]).await;
    kubectl(cluster, ns, &["apply", "-f", "examples/hook-deadlines.yaml"]).await;
    status_completes_promptly(cluster, ns, "hook-deadlines: created").await;
    patch_image(cluster, ns, "python:3.5").await;
    status_completes_promptly(cluster, ns, "hook-deadlines: image patched").await;
    let pods = settled_pods(cluster, ns, "app=test-gamedeployment", 6).await;
    assert!(pods.iter().all(|p| image(p) == "python:3.5"), "hook-deadlines: every pod updated");
    let status = game_deployment(cluster, ns).await.status.expect("status");
    let conditions = status.pre_inplace_hook_condition.iter().chain(&status.post_inplace_hook_condition);
    let released: Vec<_> = conditions.filter(|c| c.released_by.is_some()).collect();
    assert!(released.is_empty(), "hook-deadlines: successful hooks are no releases: {released:?}");
    assert!(status.canary.is_none_or(|c| c.step_releases.is_empty()), "hook-deadlines: the step hook succeeded");

    kubectl(cluster, ns, &["apply", "-f", "examples/hook-template-fail.yaml"]).await;
    kubectl(cluster, ns, &["scale", "gamedeployment", NAME, "--replicas=5"]).await;
    let (out, took) = status_verdict(cluster, ns).await;
    assert_eq!(out.code, 1, "hook-deadlines: held after the automatic retries: {out:?}");
    assert!(took >= Duration::from_secs(90), "hook-deadlines: 3 retries, 30 s apart, are waited for: {took:?}");
    let runs = runs(cluster, ns).await;
    let failed: Vec<String> = runs
        .iter()
        .filter(|r| r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Failed))
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    assert_eq!(failed.len(), 4, "hook-deadlines: the first run and 3 retries, kept: {failed:?}");
    let last = failed.iter().find(|n| n.ends_with("-test.3")).expect("the third retry");
    assert!(out.stderr.contains(last.as_str()), "hook-deadlines: status names the last run: {}", out.stderr);
    let held = pod_names(cluster, ns, "lifecycle.apps.kruise.io/state=PreparingDelete").await;
    assert_eq!(held.len(), 1, "hook-deadlines: onFailure Hold keeps the pod");
    assert!(out.stderr.contains(&held[0]), "{}", out.stderr);

    kubectl(cluster, ns, &["apply", "-f", "examples/hook-template-success.yaml"]).await;
    let out = gd(cluster, ns, &["retry", NAME]).await;
    assert_eq!(out.code, 0, "{out:?}");
    status_completes_promptly(cluster, ns, "hook-deadlines: retried").await;
    settled_pods(cluster, ns, "app=test-gamedeployment", 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_completes_and_kubectl_gd_status_says_so_promptly() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    for ns in ["ex-race", "ex-walk", "ex-inplace", "ex-skip", "ex-hotpatch", "ex-rolling", "ex-args", "ex-gitops"] {
        cluster.kubectl_ok(&["create", "namespace", ns]).await;
    }
    tokio::join!(
        scale_in(&cluster, "ex-race", &["race-to-empty.yaml"], 7),
        scale_in(&cluster, "ex-walk", &["hook-template-success.yaml", "gamedeployment.yaml"], 5),
        inplace_update(&cluster),
        skipped_hook(&cluster),
        hotpatch_update(&cluster),
        rolling_update(&cluster),
        args_scale_in(&cluster),
        gitops_clean(&cluster),
    );
}

/// The examples whose story takes minutes of the gamedeployment-operator's own clock (grace periods, a timed pause,
/// retry back-offs): a cluster of their own, run beside the first by the test harness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_and_hook_deadline_examples_complete_as_documented() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    for ns in ["ex-canary", "ex-promote", "ex-deadlines"] {
        cluster.kubectl_ok(&["create", "namespace", ns]).await;
    }
    tokio::join!(canary_resumed(&cluster), canary_promoted(&cluster), hook_deadlines(&cluster));
}
