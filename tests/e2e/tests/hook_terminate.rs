//! `spec.terminate` opens a gate (issue 46): whoever may patch HookRuns can end the operator's own signed run, and the
//! pod goes. It is kept (`kubectl gd skip-hook` uses it) and recorded: the run's completion message and a
//! `HookRunTerminated` Warning on the run name the field manager that set `spec.terminate` (from its
//! `managedFields`), and the GameDeployment's hook condition records the release (`releasedBy: Terminated`, the same
//! name) with a `HookRunTerminated` Warning on the pod. Before, nothing named who did it and the status kept no trace.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::walkthrough_support;

use std::sync::{Arc, Mutex};

use common::api::{GameDeployment, HookPhase, HookReleaseReason, HookRun};
use e2e::gamedeployment::{Columns, apply, live_pods, manifest, wait_columns};
use e2e::{Cluster, wait_for};
use futures::StreamExt;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::watcher;
use walkthrough_support::{LONG, QUICK, operators, pre_delete};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_gating_run_names_who_terminated_it_in_the_run_the_status_and_events() {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    apply(&cluster, QUICK).await;
    // Never completes on its own: the pod it gates is held until someone terminates the run.
    apply(&cluster, &e2e::manifests::load!("hooktemplate-never", interval = "60s")).await;
    apply(&cluster, &manifest("term", 2, "RollingUpdate", &pre_delete("never"), "python:latest")).await;
    wait_columns(&cluster, "term", Columns::new(2, 2, 2, 2, 2)).await;

    // Every version of the GameDeployment from now on (a release record is kept for a while only).
    let seen: Arc<Mutex<Vec<GameDeployment>>> = Arc::default();
    let watch = tokio::spawn({
        let (seen, api) = (seen.clone(), Api::<GameDeployment>::namespaced(cluster.client(), "default"));
        async move {
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(gd) | watcher::Event::InitApply(gd)) = event {
                    seen.lock().unwrap().push(gd);
                }
            }
        }
    });
    cluster.kubectl_ok(&["scale", "--replicas=1", "gamedeployment/term"]).await;
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    let run = wait_for("the gating run to be Running", LONG, || async {
        let list = runs.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|r| r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Running))
    })
    .await;
    let name = run.metadata.name.clone().unwrap();
    cluster.kubectl_ok(&["patch", "hookrun", &name, "--type=merge", "-p", r#"{"spec":{"terminate":true}}"#]).await;
    wait_for("the held pod to go", LONG, || async { (live_pods(&cluster, "term").await.len() == 1).then_some(()) })
        .await;

    // The run names the field manager kubectl's patch used.
    let done = runs.get(&name).await.unwrap();
    let message = done.status.as_ref().and_then(|s| s.message.clone()).unwrap_or_default();
    assert_eq!(done.status.as_ref().and_then(|s| s.phase), Some(HookPhase::Successful));
    assert!(
        message.starts_with("terminated (spec.terminate) by field manager \"kubectl-patch\""),
        "the run's message names who terminated it: {message}"
    );
    // The GameDeployment's status recorded the release, naming the same.
    let record = wait_for("the release in the GameDeployment's status", LONG, || async {
        seen.lock().unwrap().iter().rev().find_map(|gd| {
            let status = gd.status.as_ref()?;
            status
                .pre_delete_hook_condition
                .iter()
                .find(|c| c.released_by == Some(HookReleaseReason::Terminated) && c.hook_run.as_deref() == Some(&name))
                .cloned()
        })
    })
    .await;
    let recorded = record.message.unwrap_or_default();
    assert!(recorded.contains("field manager \"kubectl-patch\""), "{recorded}");
    // Events: on the run (hook-operator) and on the pod (gamedeployment-operator), both naming it.
    let events = wait_for("both HookRunTerminated Events", LONG, || async {
        let out = cluster
            .kubectl_ok(&["get", "events", "-o", "custom-columns=REASON:.reason,MESSAGE:.message", "--no-headers"])
            .await;
        let terminated: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with("HookRunTerminated") && l.contains("kubectl-patch"))
            .map(String::from)
            .collect();
        (terminated.len() >= 2).then_some(terminated)
    })
    .await;
    assert!(events.iter().any(|e| e.contains("hook completed Successful")), "{events:?}");
    assert!(events.iter().any(|e| e.contains("released because HookRun")), "{events:?}");
    watch.abort();
    cluster.shutdown().await;
}
