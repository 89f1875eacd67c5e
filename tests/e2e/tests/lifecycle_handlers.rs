//! CloneSet lifecycle parity (issue 13), end to end on kube-sim with the real operators and the real `kubectl`:
//! the pod label `apps.kruise.io/specified-delete: "true"` deletes a pod through its pre-delete hook and replaces
//! it; the lifecycle handlers (`spec.lifecycle.preDelete` / `inPlaceUpdate` / `preNormal`) hold pods for an outside
//! controller, as seed 000's service-discovery operator.

use crate::walkthrough_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e::gamedeployment::{Columns, Shape, apply, image, is_ready, manifest, manifest_shaped, wait_columns};
use e2e::gamedeployment::{label, live_pods};
use e2e::gate::GateChecker;
use e2e::{Cluster, Operator, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use walkthrough_support::{LONG, QUICK, operators, pre_delete};

/// A kube-sim cluster with both operators and the `quick` template, and a GameDeployment `name` rolled out.
async fn rolled_out(name: &str, replicas: i64, strategy: &str, extra: &str) -> (Cluster, (Operator, Operator)) {
    let cluster = Cluster::start().await;
    let operators = operators(&cluster).await;
    apply(&cluster, QUICK).await;
    apply(&cluster, &manifest(name, replicas as i32, strategy, extra, "python:latest")).await;
    wait_columns(&cluster, name, Columns::new(replicas, replicas, replicas, replicas, replicas)).await;
    wait_for(&format!("every pod of {name} to run"), LONG, || async {
        let live = live_pods(&cluster, name).await;
        (live.len() == replicas as usize && live.iter().all(|p| image(p) == Some("python:latest"))).then_some(())
    })
    .await;
    (cluster, operators)
}

/// `kubectl label pod X apps.kruise.io/specified-delete=true`: the pod goes through `PreparingDelete` and its
/// pre-delete HookRun (one run consumed, checked by the strict gate checker), is deleted and replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_labelled_specified_delete_is_deleted_through_its_hook_and_replaced() {
    let (cluster, _operators) = rolled_out("marked", 3, "RollingUpdate", &pre_delete("quick")).await;
    let checker = GateChecker::start(&cluster, "default").await;
    let victim = live_pods(&cluster, "marked").await.remove(0);
    let name = victim.metadata.name.clone().unwrap_or_default();
    let out = cluster.kubectl_ok(&["label", "pod", &name, "apps.kruise.io/specified-delete=true"]).await;
    println!("$ kubectl label pod {name} apps.kruise.io/specified-delete=true\n{out}");
    wait_for("the labelled pod to be replaced", LONG, || async {
        let live = live_pods(&cluster, "marked").await;
        (live.len() == 3 && !live.iter().any(|p| p.metadata.uid == victim.metadata.uid)).then_some(())
    })
    .await;
    wait_columns(&cluster, "marked", Columns::new(3, 3, 3, 3, 3)).await;
    let report = checker.stop().await;
    report.assert_clean();
    assert_eq!(report.gated_deletions, 1, "exactly the labelled pod was deleted, through one run: {report:?}");
    let events = cluster
        .kubectl_ok(&["get", "events", "-o", "custom-columns=REASON:.reason,MESSAGE:.message", "--no-headers"])
        .await;
    assert!(
        events.lines().any(|l| l.contains("SuccessfulDelete") && l.contains(&name) && l.contains("specified-delete")),
        "{events}"
    );
    cluster.shutdown().await;
}

const BLOCK_INPLACE: &str = "example.com/unready-blocker-inplace";
const BLOCK_DELETE: &str = "example.com/unready-blocker-delete";
const NEWLY_CREATED: &str = "example.com/newly-create";

fn state(pod: &Pod) -> &str {
    label(pod, "lifecycle.apps.kruise.io/state").unwrap_or("")
}

/// Seed 000's service-discovery controller, in the test: registers a pod when it is `Normal` + Ready (new) or
/// `Updated` + Ready, unregisters it and releases the handler label in `PreparingUpdate` / `PreparingDelete`.
/// The registry maps a pod to the image it served when registered.
#[derive(Default)]
struct Discovery {
    registered: BTreeMap<String, String>,
    registrations: usize,
    unregistrations: usize,
    violations: Vec<String>,
}

async fn set_label(api: &Api<Pod>, pod: &str, key: &str, value: &str) {
    let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
    // A pod deleted meanwhile is fine: the next round sees it gone.
    let _ = api.patch(pod, &PatchParams::default(), &Patch::Merge(&patch)).await;
}

/// One reconcile round of the outside controller over the pods of `app`.
async fn discovery_round(api: &Api<Pod>, app: &str, sd: &Arc<Mutex<Discovery>>) {
    let Ok(list) = api.list(&ListParams::default().labels(&format!("app={app}"))).await else { return };
    for pod in list.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ready = is_ready(&pod);
        let served = image(&pod).unwrap_or_default().to_string();
        match state(&pod) {
            "Normal" if label(&pod, NEWLY_CREATED) == Some("true") && ready => {
                {
                    let mut sd = sd.lock().unwrap();
                    // The list may still show the label this controller just patched: count each change once.
                    if sd.registered.insert(name.clone(), served).is_none() {
                        sd.registrations += 1;
                    }
                }
                set_label(api, &name, NEWLY_CREATED, "false").await;
            }
            "PreparingUpdate" if label(&pod, BLOCK_INPLACE) == Some("true") => {
                {
                    let mut sd = sd.lock().unwrap();
                    if sd.registered.remove(&name).is_some() {
                        sd.unregistrations += 1;
                    }
                }
                set_label(api, &name, BLOCK_INPLACE, "false").await;
            }
            "Updated" if label(&pod, BLOCK_INPLACE) == Some("false") && ready => {
                {
                    let mut sd = sd.lock().unwrap();
                    // The list may still show the label this controller just patched: count each change once.
                    if sd.registered.insert(name.clone(), served).is_none() {
                        sd.registrations += 1;
                    }
                }
                set_label(api, &name, BLOCK_INPLACE, "true").await;
            }
            "PreparingDelete" if label(&pod, BLOCK_DELETE) == Some("true") => {
                {
                    let mut sd = sd.lock().unwrap();
                    if sd.registered.remove(&name).is_some() {
                        sd.unregistrations += 1;
                    }
                }
                set_label(api, &name, BLOCK_DELETE, "false").await;
            }
            _ => {}
        }
    }
}

/// The invariant, from the pod watch: no registered pod is deleted (deletion timestamp, or gone) or runs another
/// image than the one it was registered with.
fn check_registered(pod: &Pod, gone: bool, sd: &Arc<Mutex<Discovery>>) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut sd = sd.lock().unwrap();
    let Some(served) = sd.registered.get(&name).cloned() else { return };
    if gone || pod.metadata.deletion_timestamp.is_some() {
        sd.violations.push(format!("{name} was deleted while registered"));
    } else if image(pod) != Some(served.as_str()) {
        sd.violations.push(format!("{name} moved from {served} to {:?} while registered", image(pod)));
    }
}

/// Seed 000 replayed: a GameDeployment with the seed's `inPlaceUpdate` and `preDelete` label handlers (and the
/// walkthrough's pre-delete HookRun gate on top, which also gates in-place updates as in BCS), an outside
/// controller that registers pods in a fake service discovery; an in-place rollout and a scale-in. Invariant: no
/// pod is deleted or updated while registered; every change also consumed its HookRun (strict gate checker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_service_discovery_controller_never_loses_a_registered_pod() {
    seed_000_replayed("InplaceUpdate").await;
}

/// Seed 000's CloneSet manifest names its update type `InPlaceIfPossible`: with only `apiVersion`/`kind` changed it
/// applies and rolls in place under the same handlers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_with_clonesets_in_place_if_possible_never_loses_a_registered_pod() {
    seed_000_replayed("InPlaceIfPossible").await;
}

async fn seed_000_replayed(update_type: &str) {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    apply(&cluster, QUICK).await;
    let checker = GateChecker::start(&cluster, "default").await;
    let api: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let sd: Arc<Mutex<Discovery>> = Arc::default();
    let watch = {
        let (api, sd) = (api.clone(), sd.clone());
        tokio::spawn(async move {
            let config = watcher::Config::default().labels("app=seed");
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        check_registered(&pod, false, &sd)
                    }
                    Ok(watcher::Event::Delete(pod)) => check_registered(&pod, true, &sd),
                    _ => {}
                }
            }
        })
    };
    let controller = {
        let (api, sd) = (api.clone(), sd.clone());
        tokio::spawn(async move {
            loop {
                discovery_round(&api, "seed", &sd).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let strategy = format!(
        "    maxUnavailable: 1\n{}  lifecycle:\n    inPlaceUpdate:\n      labelsHandler:\n        {BLOCK_INPLACE}: \"true\"\n    preDelete:\n      labelsHandler:\n        {BLOCK_DELETE}: \"true\"\n",
        pre_delete("quick")
    );
    let labels = [(NEWLY_CREATED, "true"), (BLOCK_INPLACE, "true"), (BLOCK_DELETE, "true")];
    let shape = Shape { template_labels: &labels, ..Shape::default() };
    let manifest = manifest_shaped("seed", 3, update_type, &strategy, "python:latest", shape);
    apply(&cluster, &manifest).await;
    let registered = |n: usize, image: &'static str| {
        let sd = sd.clone();
        let cluster = &cluster;
        async move {
            wait_for(&format!("{n} pods registered on {image}"), LONG, || async {
                let live = live_pods(cluster, "seed").await;
                let sd = sd.lock().unwrap();
                let all_normal = live.iter().all(|p| state(p) == "Normal");
                (live.len() == n
                    && sd.registered.len() == n
                    && sd.registered.values().all(|i| i == image)
                    && all_normal)
                    .then_some(())
            })
            .await;
        }
    };
    registered(3, "python:latest").await;

    // In-place rollout: each pod is unregistered before its update and registered again after.
    e2e::gamedeployment::set_image(&cluster, "default", "seed", "python:3.12").await;
    registered(3, "python:3.12").await;
    let out = cluster.kubectl_ok(&["get", "pods", "-L", "lifecycle.apps.kruise.io/state", "-L", BLOCK_INPLACE]).await;
    println!("$ kubectl get pods -L lifecycle.apps.kruise.io/state -L {BLOCK_INPLACE}\n{out}");

    // Scale-in: the deleted pods are unregistered first.
    cluster.kubectl_ok(&["scale", "gamedeployment", "seed", "--replicas=1"]).await;
    registered(1, "python:3.12").await;

    controller.abort();
    watch.abort();
    let report = checker.stop().await;
    {
        let sd = sd.lock().unwrap();
        assert!(sd.violations.is_empty(), "{:?}", sd.violations);
        assert_eq!(sd.registrations, 3 + 3, "3 new pods, registered again after their update");
        assert_eq!(sd.unregistrations, 3 + 2, "before each update and each deletion");
    }
    report.assert_clean();
    assert_eq!((report.gated_updates, report.gated_deletions), (3, 2), "{report:?}");
    cluster.shutdown().await;
}
