//! The controller's watches, one function each: which objects it watches (and with which selector, so that the
//! operator's memory follows its own objects), and whom an event also tells (the adoption scan, the pod-gate
//! labeller). Each returns the cache the passes read and the stream that triggers them; [`super::run`] wires the
//! streams into one `Controller`.

use common::api::{GameDeployment, HookRun, HookTemplate};
use common::cached_pod::Pod;
use common::keys;
use common::runtime::kube_api::api;
use common::runtime::{lean, watch};
use futures::{Stream, StreamExt, TryStreamExt, future};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use kube::api::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::mpsc;

use super::{orphans, spec_fingerprint};
use crate::webhook::labeller;

/// Where a GameDeployment change is told besides the controller: the adoption scan, and the pod-gate labeller
/// when it runs.
pub(super) struct GdListeners {
    pub orphans: mpsc::UnboundedSender<ObjectRef<GameDeployment>>,
    pub labeller: Option<mpsc::UnboundedSender<labeller::Trigger>>,
}

/// GameDeployments: a change triggers a pass only when something other than the status changed (our own status
/// writes do not, BCS-G37).
pub(super) fn game_deployments(
    client: &Client,
    namespace: Option<&str>,
    listeners: GdListeners,
) -> (Store<GameDeployment>, impl Stream<Item = Result<GameDeployment, watcher::Error>> + Send + 'static) {
    let (reader, events) = watch::cached(api::<GameDeployment>(client, namespace));
    let stream =
        events.applied_objects().predicate_filter(spec_fingerprint, Default::default()).inspect_ok(move |gd| {
            let key = ObjectRef::from_obj(gd);
            if let Some(tx) = &listeners.labeller {
                let _ = tx.send(labeller::Trigger::Gd(key.clone()));
            }
            let _ = listeners.orphans.send(key);
        });
    (reader, stream)
}

/// Only the operator's own pods (the instance-id label: `orphans::WATCH_SELECTOR`), decoded straight into the
/// fields the operator reads (`common::cached_pod`), otherwise as `watch::cached` does. Orphans to adopt are found
/// by [`orphans`].
pub(super) fn pods(
    client: &Client,
    namespace: Option<&str>,
    labeller: Option<mpsc::UnboundedSender<labeller::Trigger>>,
) -> (Store<Pod>, impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static) {
    let (reader, writer) = kube::runtime::reflector::store::<Pod>();
    let stream = kube::runtime::watcher(
        api::<Pod>(client, namespace),
        watcher::Config::default().labels(orphans::WATCH_SELECTOR).any_semantic(),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects()
    .inspect_ok(move |pod| {
        if let Some(tx) = &labeller {
            let _ = tx.send(labeller::Trigger::Pod(ObjectRef::from_obj(pod)));
        }
    });
    (reader, stream)
}

/// Only revisions labelled with a GameDeployment's name (`orphans::REVISION_WATCH_SELECTOR`); those written without
/// it are labelled before the first pass (`orphans::label_revisions`).
pub(super) fn revisions(
    client: &Client,
    namespace: Option<&str>,
) -> (Store<ControllerRevision>, impl Stream<Item = Result<ControllerRevision, watcher::Error>> + Send + 'static) {
    let (reader, events) =
        watch::cached_selected(api::<ControllerRevision>(client, namespace), Some(orphans::REVISION_WATCH_SELECTOR));
    (reader, events.touched_objects())
}

/// Only runs a GameDeployment made (labelled with its name): HookRuns of other tools (BCS GameStatefulSets) are not
/// cached. A run without the label that holds one of our names is read when creating ours fails with 409
/// (`execute::reveal_hook_run`).
pub(super) fn hook_runs(
    client: &Client,
    namespace: Option<&str>,
) -> (Store<HookRun>, impl Stream<Item = Result<HookRun, watcher::Error>> + Send + 'static) {
    let (reader, writer) = kube::runtime::reflector::store::<HookRun>();
    let stream = kube::runtime::watcher(
        api::<lean::LeanHookRun>(client, namespace),
        watcher::Config::default().labels(keys::HOOKRUN_WORKLOAD_NAME).any_semantic(),
    )
    .default_backoff()
    .map_ok(lean::full_event)
    .reflect(writer)
    .touched_objects();
    (reader, stream)
}

/// HookTemplates: creating a missing one unblocks the GameDeployments that name it at once.
pub(super) fn hook_templates(
    client: &Client,
    namespace: Option<&str>,
) -> (Store<HookTemplate>, impl Stream<Item = Result<HookTemplate, watcher::Error>> + Send + 'static) {
    let (reader, events) = watch::cached(api::<HookTemplate>(client, namespace));
    (reader, events.touched_objects())
}

/// Only claims with an instance-id label: those the operator makes from `spec.volumeClaimTemplates`. A failing
/// watch holds only the GameDeployments that have such templates.
pub(super) fn claims(
    client: &Client,
    namespace: Option<&str>,
) -> (Store<PersistentVolumeClaim>, impl Stream<Item = Result<PersistentVolumeClaim, watcher::Error>> + Send + 'static)
{
    let (reader, writer) = kube::runtime::reflector::store::<PersistentVolumeClaim>();
    let config = watcher::Config::default().labels(keys::INSTANCE_ID).any_semantic();
    let stream = kube::runtime::watcher(api::<PersistentVolumeClaim>(client, namespace), config)
        .default_backoff()
        .modify(|claim| claim.metadata.managed_fields = None)
        .reflect(writer)
        .touched_objects()
        .inspect_err(|e| tracing::warn!(error = %e, "PersistentVolumeClaim watch failed (GameDeployments with volumeClaimTemplates wait until it recovers)"));
    (reader, stream)
}

/// Node metadata for `io.tencent.bcs.dev/node-deletion-cost` (when `enabled`: it needs list/watch on nodes). No pass
/// waits on it: the watch runs on its own task and only fills the cache.
pub(super) fn node_costs(client: &Client, enabled: bool) -> Option<Store<PartialObjectMeta<Node>>> {
    if !enabled {
        return None;
    }
    let (reader, events) = watch::cached(Api::<PartialObjectMeta<Node>>::all(client.clone()));
    tokio::spawn(events.touched_objects().for_each(|event| {
        if let Err(e) = event {
            tracing::warn!(error = %e, "node watch failed (node deletion costs unavailable until it recovers)");
        }
        future::ready(())
    }));
    Some(reader)
}
