//! The API calls the kubelet and scheduler make, run as bounded concurrent tasks whose outcomes
//! come back to the event loop as messages (the loop owns all state; tasks own none).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Binding, Event, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, Error as KubeError};
use serde_json::Value;

use super::lean::LeanPod;

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
    /// The object changed (resourceVersion or UID precondition failed).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The object (or, for a binding, the subresource) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Anything else (server error, timeout, injected fault): worth retrying.
    #[error("{action} failed: {source}")]
    Other {
        action: &'static str,
        #[source]
        source: KubeError,
    },
}

impl WriteError {
    fn from_kube(action: &'static str, error: KubeError) -> Self {
        match &error {
            KubeError::Api(status) if status.code == 409 => Self::Conflict(status.message.clone()),
            KubeError::Api(status) if status.code == 404 => Self::NotFound(status.message.clone()),
            _ => Self::Other { action, source: error },
        }
    }
}

/// What a finished API call reports to the loop.
#[derive(Debug)]
pub(super) enum Outcome {
    /// A pod status patch (kubelet status or scheduler's Unschedulable condition).
    Status { uid: String, result: Result<Pod, WriteError> },
    /// A pod bound to a node.
    Bound { uid: String, node: String, result: Result<(), WriteError> },
    /// The kubelet's final delete; `Some` when finalizers still hold the pod.
    Deleted { uid: String, result: Result<Option<Pod>, WriteError> },
    /// A fresh read of a pod after a conflict (`None`: it no longer exists).
    Fetched { uid: String, result: Result<Option<Pod>, WriteError> },
    /// A node registered or its status posted.
    Node { name: String, registration: bool, result: Result<Node, WriteError> },
    /// An Event recorded (best effort: failures are only logged).
    Event { reason: String, result: Result<(), WriteError> },
    /// A node Lease renewed (best effort: the next renewal retries).
    Lease { name: String, result: Result<(), WriteError> },
}

/// Namespace, name and UID of the pod a write targets.
#[derive(Clone, Debug)]
pub(super) struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    pub(super) fn of(pod: &Pod) -> Option<Self> {
        Some(Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone()?,
            uid: pod.metadata.uid.clone()?,
        })
    }
}

/// The kubelet's API client, shared by the write tasks.
#[derive(Clone)]
pub(super) struct Writer {
    client: Client,
    /// Set once the server answered a binding with 404/405 for a pod that exists: from then on
    /// pods are bound by patching `spec.nodeName`, which such a server accepts.
    binding_unsupported: Arc<AtomicBool>,
}

impl Writer {
    pub(super) fn new(client: Client) -> Self {
        Self { client, binding_unsupported: Arc::new(AtomicBool::new(false)) }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Strategic merge patch of `pods/status`, as the kubelet's status manager sends.
    pub(super) async fn patch_status(&self, pod: PodRef, patch: Value, manager: &str) -> Outcome {
        let params = PatchParams { field_manager: Some(manager.to_owned()), ..Default::default() };
        let result = Api::<LeanPod>::namespaced(self.client.clone(), &pod.namespace)
            .patch_status(&pod.name, &params, &Patch::Strategic(patch))
            .await
            .map(Pod::from)
            .map_err(|e| WriteError::from_kube("patching pod status", e));
        Outcome::Status { uid: pod.uid, result }
    }

    /// Binds a pod to a node through `pods/binding`, as the scheduler does.
    pub(super) async fn bind(&self, pod: PodRef, node: String) -> Outcome {
        let result = self.bind_inner(&pod, &node).await;
        Outcome::Bound { uid: pod.uid, node, result }
    }

    async fn bind_inner(&self, pod: &PodRef, node: &str) -> Result<(), WriteError> {
        let api = self.pods(&pod.namespace);
        if !self.binding_unsupported.load(Ordering::Relaxed) {
            let binding = Binding {
                metadata: ObjectMeta {
                    name: Some(pod.name.clone()),
                    namespace: Some(pod.namespace.clone()),
                    uid: Some(pod.uid.clone()),
                    ..Default::default()
                },
                target: ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Node".into()),
                    name: Some(node.to_owned()),
                    ..Default::default()
                },
            };
            let params = PostParams { field_manager: Some("kube-scheduler".into()), ..Default::default() };
            match api.create_subresource::<_, Value>("binding", &pod.name, &params, &binding).await {
                Ok(_) => return Ok(()),
                Err(KubeError::Api(status)) if status.code == 404 || status.code == 405 => {
                    let exists = api.get_opt(&pod.name).await.map_err(|e| WriteError::from_kube("reading pod", e))?;
                    if exists.is_none() {
                        return Err(WriteError::NotFound(status.message.clone()));
                    }
                    tracing::warn!(
                        "the API server has no pods/binding subresource ({}); binding pods by \
                         patching spec.nodeName instead",
                        status.message
                    );
                    self.binding_unsupported.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(WriteError::from_kube("binding pod", e)),
            }
        }
        let patch = serde_json::json!({
            "metadata": { "uid": pod.uid },
            "spec": { "nodeName": node },
        });
        let params = PatchParams { field_manager: Some("kube-scheduler".into()), ..Default::default() };
        api.patch(&pod.name, &params, &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| WriteError::from_kube("setting spec.nodeName", e))
    }

    /// The kubelet's final delete of a pod whose containers are gone: grace period 0, guarded by
    /// the UID so a new pod with the same name is never hit.
    pub(super) async fn delete(&self, pod: PodRef) -> Outcome {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(pod.uid.clone()), resource_version: None }),
            ..Default::default()
        };
        let result = self
            .pods(&pod.namespace)
            .delete(&pod.name, &params)
            .await
            .map(|either| either.left())
            .map_err(|e| WriteError::from_kube("deleting pod", e));
        Outcome::Deleted { uid: pod.uid, result }
    }

    /// Reads a pod again after a conflict. A pod with the same name but another UID is a
    /// different pod: for this one it means "gone".
    pub(super) async fn fetch(&self, pod: PodRef) -> Outcome {
        let result = self
            .pods(&pod.namespace)
            .get_opt(&pod.name)
            .await
            .map(|found| found.filter(|p| p.metadata.uid.as_deref() == Some(pod.uid.as_str())))
            .map_err(|e| WriteError::from_kube("reading pod", e));
        Outcome::Fetched { uid: pod.uid, result }
    }

    /// Registers a node like the kubelet: create it, or if it exists, take it over by posting
    /// labels and a full status.
    pub(super) async fn register_node(&self, node: Node) -> Outcome {
        let name = node.metadata.name.clone().unwrap_or_default();
        let result = self.register_inner(&name, node).await;
        Outcome::Node { name, registration: true, result }
    }

    async fn register_inner(&self, name: &str, node: Node) -> Result<Node, WriteError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let params = PatchParams { field_manager: Some("kubelet".into()), ..Default::default() };
        let status_patch = serde_json::json!({ "status": node.status });
        match api.create(&PostParams::default(), &node).await {
            Ok(created) => {
                // Some servers drop the status on create; posting it again is harmless.
                if created.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some() {
                    return Ok(created);
                }
            }
            Err(KubeError::Api(status)) if status.code == 409 => {
                let labels = serde_json::json!({ "metadata": { "labels": node.metadata.labels } });
                api.patch(name, &params, &Patch::Strategic(labels))
                    .await
                    .map_err(|e| WriteError::from_kube("updating node labels", e))?;
            }
            Err(e) => return Err(WriteError::from_kube("creating node", e)),
        }
        api.patch_status(name, &params, &Patch::Strategic(status_patch))
            .await
            .map_err(|e| WriteError::from_kube("posting node status", e))
    }

    /// Records an Event.
    pub(super) async fn create_event(&self, event: Event) -> Outcome {
        let namespace = event.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let reason = event.reason.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let result = api
            .create(&PostParams::default(), &event)
            .await
            .map(|_| ())
            .map_err(|e| WriteError::from_kube("recording event", e));
        Outcome::Event { reason, result }
    }

    /// Renews a node's Lease like the kubelet's lease controller: update the renew time, or create
    /// the Lease when it does not exist yet.
    pub(super) async fn renew_lease(&self, lease: Lease) -> Outcome {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let result = self.renew_lease_inner(&name, lease).await;
        Outcome::Lease { name, result }
    }

    async fn renew_lease_inner(&self, name: &str, lease: Lease) -> Result<(), WriteError> {
        let namespace = lease.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &namespace);
        let params = PatchParams { field_manager: Some("kubelet".into()), ..Default::default() };
        let renewal = serde_json::json!({ "spec": lease.spec });
        match api.patch(name, &params, &Patch::Merge(renewal)).await {
            Ok(_) => Ok(()),
            Err(KubeError::Api(status)) if status.code == 404 => api
                .create(&PostParams::default(), &lease)
                .await
                .map(|_| ())
                .map_err(|e| WriteError::from_kube("creating node lease", e)),
            Err(e) => Err(WriteError::from_kube("renewing node lease", e)),
        }
    }

    /// Posts a node heartbeat.
    pub(super) async fn node_heartbeat(&self, name: String, patch: Value) -> Outcome {
        let api: Api<Node> = Api::all(self.client.clone());
        let params = PatchParams { field_manager: Some("kubelet".into()), ..Default::default() };
        let result = api
            .patch_status(&name, &params, &Patch::Strategic(patch))
            .await
            .map_err(|e| WriteError::from_kube("posting node status", e));
        Outcome::Node { name, registration: false, result }
    }
}
