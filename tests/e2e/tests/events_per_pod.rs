//! Events about a GameDeployment keep each pod's own note (issue 18, items 4 and 6), read back from kube-sim's
//! events.k8s.io API and printed by the real `kubectl describe`:
//! - scaling the walkthrough's GameDeployment (pre-delete hook `test`) from 6 to 2 creates one HookRun per deleted
//!   pod, and each creation is its own `SuccessfulCreateHookRun` Event, with its pod as the `related` object and
//!   in the note (the Recorder aggregates by reason and related object, so before the fix the four were one Event
//!   `(x4)` showing the first pod's note);
//! - `kubectl delete pod` on one of the remaining pods skips the hook: the operator says so in a Warning Event
//!   `PodDeletedWithoutHook` naming the pod and `podsToDelete`.

use crate::walkthrough_support;

use std::collections::BTreeSet;

use e2e::gamedeployment::Columns;
use e2e::{Cluster, wait_for};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use walkthrough_support::*;

/// The Events about the walkthrough's GameDeployment with `reason`.
async fn events(cluster: &Cluster, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(cluster.client(), "default");
    let list = api.list(&Default::default()).await.expect("events listed");
    list.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NAME))
        .collect()
}

fn related_pod(event: &Event) -> Option<&str> {
    let related = event.related.as_ref()?;
    (related.kind.as_deref() == Some("Pod")).then_some(related.name.as_deref()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pods_hook_run_is_its_own_event_and_a_pod_deleted_around_the_hook_is_reported() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "hook-template-success.yaml").await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    let before: BTreeSet<String> =
        e2e::gamedeployment::pods(&cluster, NAME).await.iter().filter_map(|p| p.metadata.name.clone()).collect();

    let out = cluster.kubectl_ok(&["scale", "--replicas=2", &format!("gamedeployment/{NAME}")]).await;
    println!("$ kubectl scale --replicas=2 gamedeployment/{NAME}\n{out}");
    wait_gd(&cluster, Columns::new(2, 2, 2, 2, 2)).await;
    let created = wait_for("four SuccessfulCreateHookRun Events", LONG, || async {
        let found = events(&cluster, "SuccessfulCreateHookRun").await;
        (found.len() >= 4).then_some(found)
    })
    .await;
    let described = cluster.kubectl_ok(&["describe", "gamedeployment", NAME]).await;
    println!("$ kubectl describe gamedeployment {NAME}\n{described}");

    assert_eq!(created.len(), 4, "one Event per HookRun: {created:#?}");
    let mut pods = BTreeSet::new();
    for event in &created {
        let pod = related_pod(event).unwrap_or_else(|| panic!("the Event names its pod as related: {event:#?}"));
        let note = event.note.as_deref().unwrap_or_default();
        assert!(note.contains(&format!("pod {pod} ")), "the note names the related pod {pod}: {note}");
        assert!(event.series.is_none(), "not aggregated with another pod's Event: {event:#?}");
        assert!(before.contains(pod), "{pod} was one of the six pods");
        pods.insert(pod.to_string());
    }
    assert_eq!(pods.len(), 4, "four different pods: {pods:?}");
    for pod in &pods {
        assert!(described.contains(pod.as_str()), "kubectl describe shows the HookRun Event of {pod}");
    }
    // Every pod that was deleted had its own SuccessfulDelete Event too.
    let deleted: BTreeSet<String> =
        events(&cluster, "SuccessfulDelete").await.iter().filter_map(related_pod).map(str::to_string).collect();
    assert_eq!(deleted, pods, "the pods whose hook ran are the pods deleted");

    // Item 6: a pod deleted by someone else, past the gate.
    let remaining = e2e::gamedeployment::pods(&cluster, NAME).await;
    let victim = remaining
        .iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .and_then(|p| p.metadata.name.clone())
        .expect("a remaining pod");
    let out = cluster.kubectl_ok(&["delete", "pod", &victim, "--wait=false"]).await;
    println!("$ kubectl delete pod {victim} --wait=false\n{out}");
    let warning = wait_for("a PodDeletedWithoutHook Event", LONG, || async {
        events(&cluster, "PodDeletedWithoutHook").await.into_iter().next()
    })
    .await;
    let note = warning.note.clone().unwrap_or_default();
    println!("PodDeletedWithoutHook: {note}");
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(related_pod(&warning), Some(victim.as_str()), "{warning:#?}");
    assert!(
        note.contains(&format!("pod {victim} "))
            && note.contains("podsToDelete")
            && note.contains("apps.kruise.io/specified-delete=true"),
        "{note}"
    );
    // The replacement the operator creates, and the deletions it made itself, are not reported.
    wait_gd(&cluster, Columns::new(2, 2, 2, 2, 2)).await;
    assert_eq!(events(&cluster, "PodDeletedWithoutHook").await.len(), 1, "only the pod someone else deleted");
}
