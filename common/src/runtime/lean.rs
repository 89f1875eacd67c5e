//! Pods and HookRuns as the operators cache them: decoded without `metadata.managedFields`.
//!
//! A cache could drop `managedFields` after the watch event was decoded into the full type, but k8s-openapi decodes
//! each entry's `fieldsV1` into a tree of JSON values first: CPU and allocations for a field nobody reads. [`LeanPod`] decodes the same JSON into a
//! [`Pod`] and skips the field unread (serde ignores unknown keys without building them); [`LeanHookRun`] does the
//! same for HookRuns (their watch events, and the answers to the operator's creates).

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::api::{HookRun, HookRunSpec, HookRunStatus};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::runtime::watcher;
use serde::{Deserialize, Deserializer};

/// A [`Pod`] decoded without its `managedFields` (always `None`).
#[derive(Clone, Debug, Default)]
pub struct LeanPod(pub Pod);

/// `ObjectMeta` without `managedFields`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct LeanMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<LeanMeta> for ObjectMeta {
    fn from(m: LeanMeta) -> Self {
        Self {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

impl<'de> Deserialize<'de> for LeanPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Repr {
            #[serde(default)]
            metadata: LeanMeta,
            spec: Option<PodSpec>,
            status: Option<PodStatus>,
        }
        let r = Repr::deserialize(d)?;
        Ok(Self(Pod { metadata: r.metadata.into(), spec: r.spec, status: r.status }))
    }
}

/// A [`HookRun`] decoded without its `managedFields` (always `None`).
#[derive(Clone, Debug)]
pub struct LeanHookRun(pub HookRun);

impl<'de> Deserialize<'de> for LeanHookRun {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Repr {
            #[serde(default)]
            metadata: LeanMeta,
            spec: HookRunSpec,
            status: Option<HookRunStatus>,
        }
        let r = Repr::deserialize(d)?;
        Ok(Self(HookRun { metadata: r.metadata.into(), spec: r.spec, status: r.status }))
    }
}

macro_rules! lean_resource {
    ($lean:ident, $full:ty) => {
        impl kube::Resource for $lean {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::kind(&())
            }
            fn group(_: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::group(&())
            }
            fn version(_: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::version(&())
            }
            fn plural(_: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::plural(&())
            }
            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }

        impl From<$lean> for $full {
            fn from(lean: $lean) -> Self {
                lean.0
            }
        }
    };
}
lean_resource!(LeanPod, Pod);
lean_resource!(LeanHookRun, HookRun);

/// The watch event of the object inside.
pub fn full_event<L: Into<K>, K>(event: watcher::Event<L>) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(p) => watcher::Event::Apply(p.into()),
        watcher::Event::Delete(p) => watcher::Event::Delete(p.into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(p) => watcher::Event::InitApply(p.into()),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_decodes_as_the_full_type_does_less_its_managed_fields() {
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
        let mut full: Pod = serde_json::from_str(&text).unwrap();
        assert!(full.metadata.managed_fields.is_some(), "the fixture carries managedFields");
        full.metadata.managed_fields = None;
        let lean: LeanPod = serde_json::from_str(&text).unwrap();
        assert_eq!(lean.0, full);
        // A watch event's object decodes the same way (kube's watcher decodes `WatchEvent<K>`).
        let event: kube::api::WatchEvent<LeanPod> =
            serde_json::from_value(serde_json::json!({"type": "MODIFIED", "object": json})).unwrap();
        let kube::api::WatchEvent::Modified(pod) = event else { panic!("not a modification") };
        assert_eq!(pod.0, full);
        assert!(matches!(full_event::<_, Pod>(watcher::Event::Apply(pod)), watcher::Event::Apply(p) if p == full));
    }

    #[test]
    fn a_hook_run_decodes_as_the_full_type_does_less_its_managed_fields() {
        let json = serde_json::json!({
            "apiVersion": "tkex.tencent.com/v1alpha1",
            "kind": "HookRun",
            "metadata": {
                "name": "fleet-preinplace-r1-abc-web", "namespace": "default", "uid": "run-1", "resourceVersion": "7",
                "labels": {"hookrun-type": "pre-inplace-step", "pod-uid": "pod-1"},
                "annotations": {"gamedeployment.tkex.tencent.com/spec-hash": "h"},
                "ownerReferences": [{"apiVersion": "tkex.tencent.com/v1alpha1", "kind": "GameDeployment",
                    "name": "fleet", "uid": "gd-1", "controller": true}],
                "creationTimestamp": "2026-11-24T10:00:00Z",
                "managedFields": [{"manager": "hook-operator", "operation": "Update", "subresource": "status",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]
            },
            "spec": {"metrics": [{"name": "web", "count": 3, "interval": "1s",
                "successCondition": "result == 'ok'", "provider": {"web": {"url": "http://10.0.0.1:8080/"}}}],
                "args": [{"name": "PodName", "value": "fleet-abc"}]},
            "status": {"phase": "Successful", "metricResults": [{"name": "web", "phase": "Successful", "count": 3,
                "successful": 3, "measurements": [{"phase": "Successful", "value": "ok",
                "startedAt": "2026-11-24T10:00:01Z", "finishedAt": "2026-11-24T10:00:01Z"}]}]}
        });
        let text = json.to_string();
        let mut full: HookRun = serde_json::from_str(&text).unwrap();
        assert!(full.metadata.managed_fields.is_some(), "the fixture carries managedFields");
        assert!(full.status.is_some(), "the fixture's status decodes");
        full.metadata.managed_fields = None;
        let lean: LeanHookRun = serde_json::from_str(&text).unwrap();
        assert_eq!(lean.0, full);
    }
}
