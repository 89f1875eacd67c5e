//! `hookPolicy` (issue 15, part 1) end to end on kube-sim with both operators:
//! - a pre-delete hook that never succeeds releases its pod at the hard deadline — not earlier — with a Warning
//!   Event `HookReleased`, the condition entry saying `releasedBy: HardDeadline`, and the metric
//!   `gamedeployment_hook_releases_total{hook="predelete",reason="hard_deadline"}`;
//! - `onFailure: Proceed` on a post-inplace hook that fails: the updated pods go back to `Normal`, each recorded as
//!   `releasedBy: OnFailure`;
//! - `autoRetry` re-runs a failed pre-delete hook after its back-off (a hook server that fails the first request and
//!   succeeds after), and the retried run's success deletes the pod.
//!
//! Deadlines are seconds long; the hook-operator runs the templates' intervals 20x faster (`--interval-scale`).

use crate::walkthrough_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::api::{GameDeployment, HookCondition, HookPhase, HookReleaseReason, HookRun};
use e2e::gamedeployment::{apply, manifest, metrics_address, pods, scrape};
use e2e::gamedeployment::{label, live};
use e2e::observe::Observer;
use e2e::{Cluster, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use walkthrough_support::{LONG, operators};

/// Fails at its first measurement (the walkthrough's server answers age 45).
const FAIL: &str = e2e::manifests::load!("hooktemplate-fail");

async fn rolled_out(cluster: &Cluster, name: &str, replicas: usize) {
    wait_for(&format!("{replicas} ready pods of {name}"), LONG, || async {
        let pods = live(pods(cluster, name).await);
        (pods.len() == replicas && pods.iter().all(e2e::gamedeployment::is_ready)).then_some(())
    })
    .await;
}

/// Warning Events `HookReleased` about the GameDeployment `name`.
async fn released_events(cluster: &Cluster, name: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(cluster.client(), "default");
    let list = api.list(&Default::default()).await.expect("events listed");
    list.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("HookReleased") && e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_never_succeeds_releases_its_pod_at_the_hard_deadline() {
    const NAME: &str = "hard";
    let cluster = Cluster::start().await;
    let (_hooks, gd_operator) = operators(&cluster).await;
    // Never completes (every measurement fails, failures never fail the metric, no count).
    apply(&cluster, &e2e::manifests::load!("hooktemplate-never", interval = "20s")).await;
    let policy = "  preDeleteUpdateStrategy:\n    hook:\n      templateName: never\n    hookPolicy:\n      \
                  hardDeadlineSeconds: 6\n";
    apply(&cluster, &manifest(NAME, 2, "InplaceUpdate", policy, "python:latest")).await;
    rolled_out(&cluster, NAME, 2).await;

    // The hold lasts the 6 s deadline, and the record may go with the pod: both observed from watches started before
    // the scale-in.
    let pod_versions = Observer::<Pod>::namespaced(&cluster, "default").await;
    let statuses = Observer::<GameDeployment>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "gamedeployment", NAME, "--replicas=1"]).await;
    // The victim is held in PreparingDelete while its run keeps running.
    let (victim, held_since) = pod_versions
        .wait("a pod held in PreparingDelete", LONG, |seen| {
            let pod = &seen.object;
            if label(pod, "app") != Some(NAME)
                || label(pod, "lifecycle.apps.kruise.io/state") != Some("PreparingDelete")
            {
                return None;
            }
            let since: Timestamp = common::pod::annotation(pod, "lifecycle.apps.kruise.io/timestamp")?.parse().ok()?;
            Some((seen.name().to_string(), since))
        })
        .await;
    let entry: HookCondition = statuses
        .wait("the condition to record the release", LONG, |seen| {
            let status = seen.object.status.as_ref()?;
            status.pre_delete_hook_condition.iter().find(|c| c.pod_name == victim && c.released_by.is_some()).cloned()
        })
        .await;
    println!("released: {entry:#?}");
    assert_eq!(entry.released_by, Some(HookReleaseReason::HardDeadline));
    assert_eq!(entry.phase, HookPhase::Running, "the hook was still running: not a success");
    let message = entry.message.clone().unwrap_or_default();
    assert!(message.contains("hard deadline (6s held)") && message.contains("did not succeed"), "{message}");
    let released_at = entry.released_at.clone().expect("releasedAt").0;
    assert!(
        released_at.as_second() - held_since.as_second() >= 6,
        "released at {released_at}, held since {held_since}: not before the hard deadline"
    );
    let hook_run = entry.hook_run.clone().expect("the run is named");
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    if let Some(run) = runs.get_opt(&hook_run).await.expect("runs readable") {
        assert_ne!(run.status.and_then(|s| s.phase), Some(HookPhase::Successful));
    }
    wait_for("the victim to be deleted", LONG, || async {
        live(pods(&cluster, NAME).await)
            .iter()
            .all(|p| p.metadata.name.as_deref() != Some(victim.as_str()))
            .then_some(())
    })
    .await;
    let events = wait_for("a HookReleased Warning Event", LONG, || async {
        let events = released_events(&cluster, NAME).await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    let note = events[0].note.clone().unwrap_or_default();
    assert!(note.contains(&victim) && note.contains("hard deadline"), "{note}");
    let address = metrics_address(&gd_operator).await;
    let samples: BTreeMap<String, f64> = scrape(address).await;
    let key = r#"gamedeployment_hook_releases_total{hook="predelete",reason="hard_deadline"}"#;
    assert_eq!(samples.get(key), Some(&1.0), "{samples:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_proceed_releases_pods_whose_post_inplace_hook_failed() {
    const NAME: &str = "post";
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    apply(&cluster, FAIL).await;
    let policy = "    maxUnavailable: 2\n  postInplaceUpdateStrategy:\n    hook:\n      templateName: fail\n    \
                  hookPolicy:\n      onFailure: Proceed\n";
    apply(&cluster, &manifest(NAME, 2, "InplaceUpdate", policy, "python:latest")).await;
    rolled_out(&cluster, NAME, 2).await;

    let patch = r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value":"python:3.5"}]"#;
    // Each pod's release record, from a watch started before the patch (a record need not outlive its hook).
    let statuses = Observer::<GameDeployment>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", patch]).await;
    let mut released: BTreeMap<String, HookCondition> = BTreeMap::new();
    let entries = statuses
        .wait("both pods released by onFailure: Proceed", LONG, |seen| {
            let status = seen.object.status.as_ref()?;
            for entry in status.post_inplace_hook_condition.iter().filter(|c| c.released_by.is_some()) {
                released.entry(entry.pod_name.clone()).or_insert_with(|| entry.clone());
            }
            (released.len() == 2).then(|| released.values().cloned().collect::<Vec<_>>())
        })
        .await;
    for entry in &entries {
        assert_eq!(entry.released_by, Some(HookReleaseReason::OnFailure), "{entry:#?}");
        assert_eq!(entry.phase, HookPhase::Failed, "{entry:#?}");
        let message = entry.message.clone().unwrap_or_default();
        assert!(message.contains("onFailure: Proceed") && message.contains("did not succeed"), "{message}");
    }
    let pods = wait_for("both pods updated and back to Normal", LONG, || async {
        let pods = live(pods(&cluster, NAME).await);
        let done = pods.len() == 2
            && pods.iter().all(|p| {
                e2e::gamedeployment::image(p) == Some("python:3.5")
                    && label(p, "lifecycle.apps.kruise.io/state") == Some("Normal")
            });
        done.then_some(pods)
    })
    .await;
    for pod in &pods {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        assert!(entries.iter().any(|e| e.pod_name == name), "{name} is recorded as released");
    }
    let events = wait_for("two HookReleased Warning Events", LONG, || async {
        let events = released_events(&cluster, NAME).await;
        (events.len() == 2).then_some(events)
    })
    .await;
    assert!(events.iter().all(|e| e.note.as_deref().is_some_and(|n| n.contains("onFailure: Proceed"))));
}

/// An HTTP server on loopback answering `{"age": 20}` to its first `failures` requests, `{"age": 45}` after.
async fn flaky_server(failures: usize) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let address = listener.local_addr().expect("address");
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let n = count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let body = if n < failures { r#"{"age": 20}"# } else { r#"{"age": 45}"# };
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    (address, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_retry_reruns_a_failed_hook_after_its_back_off() {
    const NAME: &str = "retry";
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    let (address, served) = flaky_server(1).await;
    let template = e2e::manifests::load!("hooktemplate-flaky", address = address);
    apply(&cluster, &template).await;
    let policy = "  preDeleteUpdateStrategy:\n    hook:\n      templateName: flaky\n    hookPolicy:\n      autoRetry:\n        \
                  limit: 2\n        backoffSeconds: 3\n";
    apply(&cluster, &manifest(NAME, 2, "InplaceUpdate", policy, "python:latest")).await;
    rolled_out(&cluster, NAME, 2).await;

    // Every HookRun version, as the API committed them.
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    let seen: Arc<std::sync::Mutex<BTreeMap<String, HookRun>>> = Default::default();
    let record = seen.clone();
    let watch = tokio::spawn(async move {
        let mut stream = watcher(runs, watcher::Config::default()).applied_objects().boxed();
        while let Some(Ok(run)) = stream.next().await {
            let name = run.metadata.name.clone().unwrap_or_default();
            let mut seen = record.lock().expect("not poisoned");
            let completed = seen.get(&name).and_then(|r| r.status.as_ref()?.phase).is_some_and(HookPhase::is_completed);
            if !completed {
                seen.insert(name, run);
            }
        }
    });

    cluster.kubectl_ok(&["scale", "gamedeployment", NAME, "--replicas=1"]).await;
    wait_for("the scale-in to complete", LONG, || async {
        (live(pods(&cluster, NAME).await).len() == 1).then_some(())
    })
    .await;
    watch.abort();
    let seen = seen.lock().expect("not poisoned").clone();
    println!("runs: {:#?}", seen.keys().collect::<Vec<_>>());
    let phase = |r: &HookRun| r.status.as_ref().and_then(|s| s.phase);
    let first = seen.values().find(|r| !r.metadata.name.as_deref().unwrap_or("").ends_with(".1")).expect("first run");
    let retried =
        seen.values().find(|r| r.metadata.name.as_deref().unwrap_or("").ends_with(".1")).expect("a retry run");
    assert_eq!(seen.len(), 2, "one failed run and one retry");
    assert_eq!(phase(first), Some(HookPhase::Failed), "{first:#?}");
    assert_eq!(phase(retried), Some(HookPhase::Successful), "{retried:#?}");
    let failed_at = first
        .status
        .as_ref()
        .and_then(|s| {
            s.metric_results.iter().flat_map(|m| m.measurements.iter()).filter_map(|m| m.finished_at.clone()).max()
        })
        .expect("the failed measurement finished")
        .0;
    let retried_at = retried.metadata.creation_timestamp.clone().expect("created").0;
    assert!(
        retried_at.as_second() - failed_at.as_second() >= 3,
        "retry created at {retried_at}, {failed_at} + 3s back-off at the earliest"
    );
    assert_eq!(served.load(Ordering::SeqCst), 2, "one request per run");
}
