//! A pod as the gamedeployment-operator caches it: the fields its steps read, in a layout of its own.
//!
//! A k8s-openapi [`k8s::Pod`] lays out every field of the API inline, set or not: the `Pod` itself is about 2.5 KB,
//! each `Container` 2.3 KB, each `ContainerStatus` 750 B, before any string, list or map. A fleet's pod store is
//! the largest share of the operator's heap, so its pods are decoded from the watch's JSON straight into these
//! types, which hold what a step reads and nothing else (serde skips the other keys without building them, and
//! `metadata.managedFields` with them: [`crate::lean_meta`]):
//!
//! - `metadata`: identity, selection, owners, versions, timestamps, finalizers: every `test` precondition of a
//!   patch;
//! - `spec.containers[].name` and `.image` (in-place updates patch images by index, checked by name), the readiness
//!   gates, the node (deletion cost, spreading);
//! - `status`: phase, conditions (patched by index when marking a pod not ready), pod and host IP (hook
//!   arguments), each container status' name, image, image ID, readiness and restart count (in-place update
//!   progress, deletion order).
//!
//! The strings that repeat from pod to pod in a fleet (container names and images, image IDs, the phase, the node and
//! its IP, condition types, statuses and reasons) are [`Interned`]: one shared copy per distinct value, not one per
//! pod (`pod-heap` prints the heap a store holds per pod). The metadata stays k8s-openapi's `ObjectMeta`, which
//! `kube::Resource` and the watcher require, so its label and annotation keys are still one copy per pod.
//!
//! The names and shapes are k8s-openapi's, so code reads `pod.spec.as_ref()?.containers` either way, and every
//! write names its own fields (JSON patches): nothing left out here is ever written back. A field a new step
//! reads must be added here (the planner does not compile otherwise), to the conversion from k8s-openapi's type,
//! and to the tests below, which decode pods as the API server serves them both ways.

use std::borrow::Cow;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::api::core::v1::{ContainerStateRunning, PodReadinessGate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

use crate::interned::Interned;

/// A cached pod (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    /// Decoded without `managedFields` ([`crate::lean_meta`]); everything a patch's `test` precondition names.
    #[serde(default, deserialize_with = "crate::lean_meta::deserialize")]
    pub metadata: ObjectMeta,
    /// Containers, readiness gates and node: what in-place updates, readiness and deletion order read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    /// Phase, conditions, IPs and container statuses: readiness, hook arguments and in-place update progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// The part of a pod's spec the operator reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// In API order: in-place updates patch `/spec/containers/<i>/image` by this index, after testing the name.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Whether the pod carries the operator's in-place readiness gate (taken out of service before an update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_gates: Option<Vec<PodReadinessGate>>,
    /// The node the pod runs on: node deletion cost and spreading in the deletion order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<Interned>,
}

/// A container as an in-place update sees it: which one (name) runs what (image).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Container {
    /// Checked by a patch's `test` before the image at this index is replaced.
    pub name: Interned,
    /// The image the pod should run; differs from the status' image while an in-place update is under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Interned>,
}

/// The part of a pod's status the operator reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed`: BCS runs a hook only for a `Running` pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Interned>,
    /// `Ready` and the in-place readiness gate's condition, patched by index when a pod is taken out of service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    /// Injected into hook runs as `PodIP`.
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// Injected into hook runs as `HostIP`.
    #[serde(default, rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<Interned>,
    /// One per container: tells when an in-place update is complete and ranks pods in the deletion order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
}

/// What the kubelet reports of one container: enough to tell that an in-place update has taken effect.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    /// The container this status is about (statuses are matched to containers by name, not index).
    pub name: Interned,
    /// The image the kubelet runs, as it reports it (it may differ in form from the spec's).
    #[serde(default)]
    pub image: Interned,
    /// The resolved image digest; a change of it after the patch shows the new image runs.
    #[serde(default, rename = "imageID")]
    pub image_id: Interned,
    /// The container passes its readiness probe.
    #[serde(default)]
    pub ready: bool,
    /// Summed over containers, ranks pods in the deletion order: among equals, the pod that restarted most goes first.
    #[serde(default)]
    pub restart_count: i32,
    /// Whether the container runs now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
}

/// A condition of the pod (`Ready`, a readiness gate's): k8s-openapi's fields, with the type, status and reason
/// shared between pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    /// `Ready`, `ContainersReady`, a readiness gate's condition type.
    #[serde(rename = "type")]
    pub type_: Interned,
    /// `True`, `False` or `Unknown`.
    pub status: Interned,
    /// Why the condition last changed, one word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Interned>,
    /// Why the condition last changed, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the status last changed: availability counts `minReadySeconds` from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// When the condition was last probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    /// The pod's `metadata.generation` the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl From<k8s::PodCondition> for PodCondition {
    fn from(c: k8s::PodCondition) -> Self {
        Self {
            type_: c.type_.into(),
            status: c.status.into(),
            reason: c.reason.map(Into::into),
            message: c.message,
            last_transition_time: c.last_transition_time,
            last_probe_time: c.last_probe_time,
            observed_generation: c.observed_generation,
        }
    }
}

/// Whether the container runs (an in-place update is complete once the new image runs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerState {
    /// Set while the container runs, with when it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<ContainerStateRunning>,
}

/// What the cache keeps of a pod the operator holds as k8s-openapi's type (an admission request's, a created
/// pod's), field by field as the watch would decode it.
impl From<k8s::Pod> for Pod {
    fn from(pod: k8s::Pod) -> Self {
        let mut metadata = pod.metadata;
        metadata.managed_fields = None;
        Self {
            metadata,
            spec: pod.spec.map(|spec| PodSpec {
                containers: spec
                    .containers
                    .into_iter()
                    .map(|c| Container { name: c.name.into(), image: c.image.map(Into::into) })
                    .collect(),
                readiness_gates: spec.readiness_gates,
                node_name: spec.node_name.map(Into::into),
            }),
            status: pod.status.map(|status| PodStatus {
                phase: status.phase.map(Into::into),
                conditions: status.conditions.map(|c| c.into_iter().map(Into::into).collect()),
                pod_ip: status.pod_ip,
                host_ip: status.host_ip.map(Into::into),
                container_statuses: status.container_statuses.map(|statuses| {
                    statuses
                        .into_iter()
                        .map(|s| ContainerStatus {
                            name: s.name.into(),
                            image: s.image.into(),
                            image_id: s.image_id.into(),
                            ready: s.ready,
                            restart_count: s.restart_count,
                            state: s.state.map(|state| ContainerState { running: state.running }),
                        })
                        .collect()
                }),
            }),
        }
    }
}

impl kube::Resource for Pod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        <k8s::Pod as kube::Resource>::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        <k8s::Pod as kube::Resource>::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        <k8s::Pod as kube::Resource>::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        <k8s::Pod as kube::Resource>::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn served() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web"}, "annotations": {"a": "b"},
                "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]
            },
            "spec": {
                "nodeName": "node-1",
                "readinessGates": [{"conditionType": "tkex.tencent.com/hook-ready"}],
                "containers": [{"name": "main", "image": "nginx:1", "ports": [{"containerPort": 80}],
                                "resources": {"limits": {"cpu": "1"}}, "imagePullPolicy": "IfNotPresent"}],
                "dnsPolicy": "ClusterFirst", "restartPolicy": "Always"
            },
            "status": {
                "phase": "Running", "podIP": "127.1.0.5", "hostIP": "127.0.100.1", "qosClass": "Burstable",
                "podIPs": [{"ip": "127.1.0.5"}],
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "main", "image": "nginx:1", "imageID": "docker-pullable://nginx@sha256:1",
                                       "ready": true, "restartCount": 2, "started": true,
                                       "containerID": "docker://abc", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                                       "lastState": {}}]
            }
        })
    }

    #[test]
    fn the_metadata_decodes_as_the_full_type_does_less_its_managed_fields() {
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "game-0", "namespace": "default", "uid": "u-1", "resourceVersion": "42",
                "generateName": "game-", "generation": 3, "selfLink": "/api/v1/pods/game-0",
                "creationTimestamp": "2026-11-24T10:00:00Z", "deletionTimestamp": "2026-11-24T10:05:00Z",
                "deletionGracePeriodSeconds": 30, "finalizers": ["f"],
                "labels": {"app": "game", "controller-revision-hash": "r1"},
                "annotations": {"a": "1"},
                "ownerReferences": [{"apiVersion": "tkex.tencent.com/v1alpha1", "kind": "GameDeployment",
                    "name": "game", "uid": "gd-1", "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-11-24T10:00:01Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {".": {}, "k:{\"type\":\"Ready\"}": {}}}}}]
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "game", "image": "game:v1"}],
                "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-24T10:00:02Z"}],
                "containerStatuses": [{"name": "game", "image": "game:v1", "imageID": "sha256:1", "ready": true,
                    "restartCount": 2, "started": true, "state": {"running": {"startedAt": "2026-11-24T10:00:02Z"}}}]}
        });
        let text = json.to_string();
        let full: k8s::Pod = serde_json::from_str(&text).unwrap();
        assert!(full.metadata.managed_fields.is_some(), "the fixture carries managedFields");
        let full = Pod::from(full);
        assert!(full.metadata.managed_fields.is_none());
        let cached: Pod = serde_json::from_str(&text).unwrap();
        assert_eq!(cached, full);
        // A watch event's object decodes the same way (kube's watcher decodes `WatchEvent<K>`).
        let event: kube::api::WatchEvent<Pod> =
            serde_json::from_value(serde_json::json!({"type": "MODIFIED", "object": json})).unwrap();
        let kube::api::WatchEvent::Modified(pod) = event else { panic!("not a modification") };
        assert_eq!(pod, full);
    }

    #[test]
    fn the_watch_decode_and_the_conversion_keep_the_same_fields() {
        let decoded: Pod = serde_json::from_value(served()).unwrap();
        let full: k8s::Pod = serde_json::from_value(served()).unwrap();
        assert_eq!(decoded, Pod::from(full));
        assert!(decoded.metadata.managed_fields.is_none());
        let status = decoded.status.as_ref().unwrap();
        assert_eq!(status.pod_ip.as_deref(), Some("127.1.0.5"));
        assert_eq!(status.host_ip.as_deref(), Some("127.0.100.1"));
        let container = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            (container.image_id.as_str(), container.ready, container.restart_count),
            ("docker-pullable://nginx@sha256:1", true, 2)
        );
        let spec = decoded.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-1"));
        assert_eq!(spec.containers, vec![Container { name: "main".into(), image: Some("nginx:1".into()) }]);
    }

    #[test]
    fn a_cached_pod_encodes_under_the_api_names() {
        let decoded: Pod = serde_json::from_value(served()).unwrap();
        let again: Pod = serde_json::from_value(serde_json::to_value(&decoded).unwrap()).unwrap();
        assert_eq!(again, decoded);
        let as_k8s: k8s::Pod = serde_json::from_value(serde_json::to_value(&decoded).unwrap()).unwrap();
        assert_eq!(Pod::from(as_k8s), decoded);
    }

    #[test]
    fn the_strings_that_repeat_between_pods_are_one_shared_copy() {
        let mut other = served();
        other["metadata"]["name"] = "web-2".into();
        other["status"]["podIP"] = "127.1.0.6".into();
        let (a, b): (Pod, Pod) = (serde_json::from_value(served()).unwrap(), serde_json::from_value(other).unwrap());
        let (a_spec, b_spec) = (a.spec.as_ref().unwrap(), b.spec.as_ref().unwrap());
        assert!(a_spec.containers[0].name.ptr_eq(&b_spec.containers[0].name));
        assert!(a_spec.containers[0].image.as_ref().unwrap().ptr_eq(b_spec.containers[0].image.as_ref().unwrap()));
        assert!(a_spec.node_name.as_ref().unwrap().ptr_eq(b_spec.node_name.as_ref().unwrap()));
        let (a_status, b_status) = (a.status.as_ref().unwrap(), b.status.as_ref().unwrap());
        assert!(a_status.phase.as_ref().unwrap().ptr_eq(b_status.phase.as_ref().unwrap()));
        assert!(a_status.host_ip.as_ref().unwrap().ptr_eq(b_status.host_ip.as_ref().unwrap()));
        let (a_cond, b_cond) = (&a_status.conditions.as_ref().unwrap()[0], &b_status.conditions.as_ref().unwrap()[0]);
        assert!(a_cond.type_.ptr_eq(&b_cond.type_) && a_cond.status.ptr_eq(&b_cond.status));
        let (a_c, b_c) =
            (&a_status.container_statuses.as_ref().unwrap()[0], &b_status.container_statuses.as_ref().unwrap()[0]);
        assert!(a_c.name.ptr_eq(&b_c.name) && a_c.image.ptr_eq(&b_c.image) && a_c.image_id.ptr_eq(&b_c.image_id));
        // The conversion from k8s-openapi's type shares them too.
        let converted = Pod::from(serde_json::from_value::<k8s::Pod>(served()).unwrap());
        assert!(converted.spec.as_ref().unwrap().containers[0].name.ptr_eq(&a_spec.containers[0].name));
        // Values unique to a pod are its own.
        assert_ne!(a_status.pod_ip, b_status.pod_ip);
    }

    #[test]
    fn a_cached_pod_is_a_fraction_of_the_full_type() {
        let decoded: Pod = serde_json::from_value(served()).unwrap();
        let inline = std::mem::size_of::<Pod>()
            + std::mem::size_of::<PodSpec>()
            + std::mem::size_of::<PodStatus>()
            + std::mem::size_of::<Container>()
            + std::mem::size_of::<ContainerStatus>();
        let full_inline = std::mem::size_of::<k8s::Pod>()
            + std::mem::size_of::<k8s::Container>()
            + std::mem::size_of::<k8s::ContainerStatus>();
        assert!(inline * 4 < full_inline, "{inline} B against {full_inline} B");
        assert_eq!(decoded.spec.unwrap().containers.len(), 1);
    }
}
