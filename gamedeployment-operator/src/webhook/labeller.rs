//! Keeps the pod label [`POD_GATE`] in step with the GameDeployments' opt-in (run by the leader, inside the
//! controller): set on every pod of a GameDeployment annotated `gamedeployment.tkex.tencent.com/pod-gate: "true"`,
//! removed from the pods of one that is not (any more). The pod-gate webhook's `objectSelector` matches this label,
//! so pod deletions elsewhere in the cluster never reach the webhook.
//!
//! It reads the controller's own caches (the pods the operator's watch selects and the GameDeployments) and is told
//! which object changed by the controller's watch streams ([`Trigger`]), so it keeps no cache of its own: the
//! operator holds one copy of each pod, and only of its own pods. A pod trigger checks that one pod against its
//! GameDeployment (O(1)); a GameDeployment trigger rescans its pods only when its opt-in changed. The controller
//! creates the pods of an opted-in GameDeployment with the label already (`planner::scale::create::build`), so this
//! labels the pods that existed before the opt-in (and removes the label after an opt-out). A failed patch is
//! retried after [`RETRY_AFTER`].
//!
//! It also ends marks with what they mark: a pod that carries the webhook's mark time ([`MARKED_AT`]) but no longer
//! the mark ([`SPECIFIED_DELETE`] removed by the user: the request was cancelled, the pod is back to `Normal`) has
//! the mark time removed, in the same patch and under a `resourceVersion` precondition, so a new mark written
//! meanwhile is never erased. (The webhook does not count a mark time without its label either: `verdict::pod_gate`.)

use std::collections::HashMap;
use std::time::Duration;

use common::api::GameDeployment;
use common::cached_pod::Pod;
use futures::{StreamExt, stream};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use super::verdict::opted_in;
use super::{MARKED_AT, POD_GATE, SPECIFIED_DELETE};
use crate::ownership;

/// Delay before a GameDeployment whose pod patch failed is scanned again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Whether the pods of `gd` should carry the label.
fn wanted(gd: &GameDeployment) -> bool {
    opted_in(gd) && gd.metadata.deletion_timestamp.is_none()
}

fn labelled(pod: &Pod) -> bool {
    pod.labels().get(POD_GATE).is_some_and(|v| v == "true")
}

/// Carries a mark time whose mark is gone (a cancelled deletion request).
fn stale_mark(pod: &Pod) -> bool {
    pod.annotations().contains_key(MARKED_AT) && pod.labels().get(SPECIFIED_DELETE).is_none_or(|v| v != "true")
}

/// What a pod of `gd` needs: the pod-gate label set or removed, and a stale mark time removed.
fn fix(pod: &Pod, gd: &GameDeployment) -> Fix {
    Fix { label: (labelled(pod) != wanted(gd)).then(|| wanted(gd)), clear_mark: stale_mark(pod) }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fix {
    /// `Some(want)`: set (`true`) or remove the pod-gate label.
    label: Option<bool>,
    /// Remove [`MARKED_AT`].
    clear_mark: bool,
}

impl Fix {
    fn is_empty(self) -> bool {
        self.label.is_none() && !self.clear_mark
    }

    /// The merge patch; a mark time is only removed from the version of the pod it was seen on.
    fn patch(self, resource_version: Option<&str>) -> serde_json::Value {
        let mut metadata = serde_json::Map::new();
        if let Some(want) = self.label {
            let value = if want { json!("true") } else { json!(null) };
            metadata.insert("labels".into(), json!({ POD_GATE: value }));
        }
        if self.clear_mark {
            metadata.insert("annotations".into(), json!({ MARKED_AT: null }));
            if let Some(rv) = resource_version {
                metadata.insert("resourceVersion".into(), json!(rv));
            }
        }
        json!({ "metadata": metadata })
    }
}

fn controller_uid(pod: &Pod) -> Option<&str> {
    ownership::controller_of(pod.metadata.owner_references.as_ref())
        .filter(|o| o.kind == "GameDeployment")
        .map(|o| o.uid.as_str())
}

/// What changed, as the controller's watch streams saw it.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// A GameDeployment was created or changed (its labels, annotations or spec).
    Gd(ObjectRef<GameDeployment>),
    /// A pod the operator's watch selects was created or changed.
    Pod(ObjectRef<Pod>),
}

/// Runs until every sender of `triggers` is gone (the controller stopped).
pub async fn run(
    client: Client,
    gds: Store<GameDeployment>,
    pods: Store<Pod>,
    triggers: mpsc::UnboundedReceiver<Trigger>,
) {
    enum Next {
        Changed(Trigger),
        Retry(ObjectRef<GameDeployment>),
    }
    let (retry_tx, retry_rx) = mpsc::unbounded_channel();
    let retries = stream::unfold(retry_rx, |mut rx| async move { rx.recv().await.map(|r| (Next::Retry(r), rx)) });
    let changes = stream::unfold(triggers, |mut rx| async move { rx.recv().await.map(|t| (Next::Changed(t), rx)) });
    // The triggers end the run; pending retries do not keep it alive.
    let mut next = stream::select(changes.map(Some).chain(stream::once(async { None })), retries.map(Some)).boxed();
    let mut labeller = Labeller { client, gds, pods, opted: HashMap::new(), retry: retry_tx };
    while let Some(Some(next)) = next.next().await {
        match next {
            Next::Changed(Trigger::Gd(key)) => labeller.gd_changed(key).await,
            Next::Changed(Trigger::Pod(key)) => labeller.pod_changed(&key).await,
            Next::Retry(key) => {
                if let Some(gd) = labeller.gds.get(&key) {
                    labeller.sync_all(&gd).await;
                }
            }
        }
    }
}

struct Labeller {
    client: Client,
    gds: Store<GameDeployment>,
    pods: Store<Pod>,
    /// The opt-in last acted on, per GameDeployment (with its UID: a new object of the same name starts afresh).
    opted: HashMap<ObjectRef<GameDeployment>, (String, bool)>,
    retry: mpsc::UnboundedSender<ObjectRef<GameDeployment>>,
}

impl Labeller {
    /// One pod checked against its GameDeployment.
    async fn pod_changed(&self, key: &ObjectRef<Pod>) {
        let Some(pod) = self.pods.get(key) else { return };
        let (Some(uid), Some(owner)) =
            (controller_uid(&pod), ownership::controller_of(pod.metadata.owner_references.as_ref()))
        else {
            return;
        };
        let gd_key = ObjectRef::new(&owner.name).within(&pod.namespace().unwrap_or_default());
        let Some(gd) = self.gds.get(&gd_key).filter(|gd| gd.metadata.uid.as_deref() == Some(uid)) else { return };
        let fix = fix(&pod, &gd);
        if !fix.is_empty() && !self.patch(&pod, fix).await {
            self.retry_later(gd_key);
        }
    }

    /// A GameDeployment whose opt-in changed (or that is new) gets all its pods brought in line.
    async fn gd_changed(&mut self, key: ObjectRef<GameDeployment>) {
        let Some(gd) = self.gds.get(&key) else {
            self.opted.remove(&key);
            return;
        };
        let now = (gd.metadata.uid.clone().unwrap_or_default(), wanted(&gd));
        if self.opted.get(&key) != Some(&now) {
            self.opted.insert(key, now);
            self.sync_all(&gd).await;
        }
    }

    /// Brings every pod of `gd` in line (a retry is scheduled when a patch fails).
    async fn sync_all(&self, gd: &GameDeployment) {
        let uid = gd.metadata.uid.as_deref();
        let stale: Vec<_> = self
            .pods
            .state()
            .into_iter()
            .filter(|p| controller_uid(p).is_some() && controller_uid(p) == uid)
            .map(|p| (fix(&p, gd), p))
            .filter(|(fix, _)| !fix.is_empty())
            .collect();
        let failed = stream::iter(stale)
            .map(|(fix, pod)| async move { self.patch(&pod, fix).await })
            .buffer_unordered(16)
            .filter(|ok| std::future::ready(!ok))
            .count()
            .await;
        if failed > 0 {
            self.retry_later(ObjectRef::from_obj(gd));
        }
    }

    fn retry_later(&self, key: ObjectRef<GameDeployment>) {
        let retry = self.retry.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RETRY_AFTER).await;
            let _ = retry.send(key);
        });
    }

    /// Applies `fix` with a merge patch; `false` when the patch failed for another reason than the pod being gone or
    /// having changed since (a newer version comes through the watch and is looked at again).
    async fn patch(&self, pod: &Pod, fix: Fix) -> bool {
        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let patch = fix.patch(pod.metadata.resource_version.as_deref());
        match pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                tracing::debug!(pod = %name, %namespace, ?fix, "pod-gate label or mark time updated");
                true
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => true,
            Err(e) => {
                tracing::warn!(pod = %name, %namespace, error = %e, "updating the pod-gate label failed; retrying");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
        let map = |kv: &[(&str, &str)]| Some(kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        Pod {
            metadata: ObjectMeta {
                labels: map(labels),
                annotations: map(annotations),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn a_mark_time_without_its_mark_is_removed_from_the_version_it_was_seen_on() {
        let cancelled = meta(&[(POD_GATE, "true")], &[(MARKED_AT, "2026-01-01T00:00:00Z")]);
        assert!(stale_mark(&cancelled));
        let fix = Fix { label: None, clear_mark: true };
        assert_eq!(
            fix.patch(cancelled.metadata.resource_version.as_deref()),
            json!({"metadata": {"annotations": {MARKED_AT: null}, "resourceVersion": "42"}})
        );
        // Still marked, or never marked: nothing to clear.
        let marked = meta(&[(SPECIFIED_DELETE, "true")], &[(MARKED_AT, "2026-01-01T00:00:00Z")]);
        assert!(!stale_mark(&marked));
        assert!(!stale_mark(&meta(&[], &[])));
        // A label other than "true" is no mark.
        assert!(stale_mark(&meta(&[(SPECIFIED_DELETE, "false")], &[(MARKED_AT, "x")])));
        // The label alone goes without a precondition (its value is the same whoever writes it).
        assert_eq!(
            Fix { label: Some(false), clear_mark: false }.patch(Some("42")),
            json!({"metadata": {"labels": {POD_GATE: null}}})
        );
    }
}
