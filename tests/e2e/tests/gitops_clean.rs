//! The GitOps-clean control surface (issue 15, part 3): a GameDeployment annotated
//! `gamedeployment.tkex.tencent.com/control: annotations` goes through a whole walkthrough — a scale-in whose
//! pre-delete hook fails and is retried by deleting the failed HookRun, a canary whose pause step is resumed by the
//! `resume-step` annotation, a scale-in whose hook is skipped for one pod by the `skip-hook` pod annotation — and a
//! watch on the object proves the operator never wrote its spec: every spec the watch shows is one this test wrote
//! (each write's own response), and `metadata.generation` moved only with those writes.

use crate::walkthrough_support;

use std::sync::{Arc, Mutex};

use common::api::{GameDeployment, HookPhase, HookReleaseReason, HookRun, PauseReason};
use e2e::gamedeployment::live;
use e2e::gamedeployment::{apply, pods};
use e2e::observe::Observer;
use e2e::{Cluster, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use walkthrough_support::{LONG, operators};

const NAME: &str = "clean";

fn template(name: &str, condition: &str, extra: &str) -> String {
    e2e::manifests::load!("hooktemplate-webtest", name = name, condition = condition, extra = extra)
}

fn state(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get("lifecycle.apps.kruise.io/state").map(String::as_str)
}

async fn gd(api: &Api<GameDeployment>) -> GameDeployment {
    api.get(NAME).await.expect("the GameDeployment exists")
}

/// A merge patch by this test; returns the spec the API committed with it.
async fn write(api: &Api<GameDeployment>, patch: serde_json::Value) -> serde_json::Value {
    let after = api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patched");
    serde_json::to_value(&after.spec).expect("spec serialises")
}

async fn held(cluster: &Cluster) -> Pod {
    wait_for("a pod held in PreparingDelete", LONG, || async {
        live(pods(cluster, NAME).await).into_iter().find(|p| state(p) == Some("PreparingDelete"))
    })
    .await
}

async fn scaled_to(cluster: &Cluster, n: usize) {
    wait_for(&format!("{n} ready pods, none held"), LONG, || async {
        let pods = live(pods(cluster, NAME).await);
        let settled = pods.iter().all(|p| state(p) == Some("Normal") && e2e::gamedeployment::is_ready(p));
        (pods.len() == n && settled).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opted_in_game_deployment_is_never_written_outside_status() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    // `gate` fails at its first measurement (the server answers age 45); `quick` succeeds.
    apply(&cluster, &template("gate", "asInt(result) < 30", "      count: 1\n")).await;
    apply(&cluster, &template("quick", "asInt(result) > 30", "      count: 1\n")).await;
    let extra = "    maxUnavailable: 1\n    canary:\n      steps:\n        - partition: 2\n        - pause: {}\n  \
                 preDeleteUpdateStrategy:\n    hook:\n      templateName: gate\n  preInplaceUpdateStrategy:\n    hook:\n      \
                 templateName: quick\n";
    let shape = e2e::gamedeployment::Shape {
        annotations: &[("gamedeployment.tkex.tencent.com/control", "annotations")],
        ..Default::default()
    };
    let manifest = e2e::gamedeployment::manifest_shaped(NAME, 4, "InplaceUpdate", extra, "python:latest", shape);
    apply(&cluster, &manifest).await;
    scaled_to(&cluster, 4).await;

    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let start = gd(&api).await;
    let mut ours = vec![serde_json::to_value(&start.spec).expect("spec")];
    let first_generation = start.metadata.generation.expect("generation");
    // Every (generation, spec) the API shows, in order.
    let seen: Arc<Mutex<Vec<(i64, serde_json::Value)>>> = Default::default();
    let record = seen.clone();
    let watched = api.clone();
    let watch = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
        let mut stream = watcher(watched, config).applied_objects().boxed();
        while let Some(Ok(gd)) = stream.next().await {
            let spec = serde_json::to_value(&gd.spec).expect("spec");
            record.lock().expect("not poisoned").push((gd.metadata.generation.unwrap_or_default(), spec));
        }
    });

    // 1. Scale-in; the hook fails; fix the template, retry by deleting the failed HookRun.
    ours.push(write(&api, serde_json::json!({"spec": {"replicas": 3}})).await);
    let victim = held(&cluster).await.metadata.name.expect("named");
    let failed = wait_for("the victim's hook to fail", LONG, || async {
        let status = gd(&api).await.status?;
        status.pre_delete_hook_condition.into_iter().find(|c| c.pod_name == victim && c.phase == HookPhase::Failed)
    })
    .await;
    let message = failed.message.clone().unwrap_or_default();
    let run = failed.hook_run.clone().unwrap_or_default();
    assert!(
        message.ends_with(&format!(
            "run it again: kubectl gd retry clean -n default --pod {victim} (or: kubectl delete hookrun {run} -n default)"
        )),
        "the condition says how to retry without a spec write: {message}"
    );
    apply(&cluster, &template("gate", "asInt(result) > 30", "      count: 1\n")).await;
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    runs.delete(&failed.hook_run.clone().expect("run named"), &DeleteParams::default()).await.expect("deleted");
    scaled_to(&cluster, 3).await;

    // 2. A canary: the new image goes to one pod (partition 2 of 3), then the pause step holds in status only.
    let image = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "python", "image": "python:3.5", "imagePullPolicy": "IfNotPresent",
         "command": ["python"], "args": ["-m", "http.server", "8000"],
         "ports": [{"name": "http", "containerPort": 8000}]}]}}}});
    ours.push(write(&api, image).await);
    let paused = wait_for("the canary pause step", LONG, || async {
        let gd = gd(&api).await;
        let status = gd.status.clone()?;
        let pausing = status.pause_conditions.iter().any(|c| c.reason == PauseReason::PausedByCanaryPauseStep);
        (pausing && status.current_step_index == Some(1)).then_some(gd)
    })
    .await;
    assert!(!paused.spec.update_strategy.paused, "the pause lives in status, not in spec.updateStrategy.paused");
    let status = paused.status.clone().expect("status");
    assert_eq!(status.updated_replicas, 1, "{status:#?}");
    let revision = status.update_revision.clone().expect("update revision");
    let resume = serde_json::json!({"metadata": {"annotations": {
        "gamedeployment.tkex.tencent.com/resume-step": format!("{revision}/1")}}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&resume)).await.expect("annotated");
    wait_for("every pod updated", LONG, || async {
        let status = gd(&api).await.status?;
        (status.updated_replicas == 3 && status.updated_ready_replicas == 3 && status.current_step_index == Some(2))
            .then_some(())
    })
    .await;
    scaled_to(&cluster, 3).await;

    // 3. A skipped hook: `gate` never completes now; the held pod is let go by its annotation.
    apply(&cluster, &template("gate", "asInt(result) > 100", "      interval: 20s\n      failureLimit: -1\n")).await;
    ours.push(write(&api, serde_json::json!({"spec": {"replicas": 2}})).await);
    let victim = held(&cluster).await.metadata.name.expect("named");
    let pods_api: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let skip =
        serde_json::json!({"metadata": {"annotations": {"gamedeployment.tkex.tencent.com/skip-hook": "delete"}}});
    // The record may be pruned once the pod is gone: observed from a watch started before the skip.
    let statuses = Observer::<GameDeployment>::namespaced(&cluster, "default").await;
    pods_api.patch(&victim, &PatchParams::default(), &Patch::Merge(&skip)).await.expect("pod annotated");
    let entry = statuses
        .wait("the skip to be recorded", LONG, |seen| {
            let status = seen.object.status.as_ref()?;
            status.pre_delete_hook_condition.iter().find(|c| c.pod_name == victim && c.released_by.is_some()).cloned()
        })
        .await;
    assert_eq!(entry.released_by, Some(HookReleaseReason::Skipped), "{entry:#?}");
    scaled_to(&cluster, 2).await;

    // The operator never wrote the spec: every spec seen is one of ours, generation moved once per write of ours.
    let last = gd(&api).await;
    watch.abort();
    let seen = seen.lock().expect("not poisoned").clone();
    assert!(!seen.is_empty());
    for (generation, spec) in &seen {
        assert!(ours.contains(spec), "generation {generation} shows a spec this test did not write: {spec:#}");
    }
    let writes = i64::try_from(ours.len() - 1).expect("small");
    assert_eq!(last.metadata.generation, Some(first_generation + writes), "only our {writes} writes changed the spec");
    assert_eq!(serde_json::to_value(&last.spec).expect("spec"), *ours.last().expect("ours"));
}
