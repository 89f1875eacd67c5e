//! HookRuns as the gamedeployment-operator caches them: decoded without `metadata.managedFields`.
//!
//! A cache could drop `managedFields` after the watch event was decoded into the full type, but k8s-openapi decodes
//! each entry's `fieldsV1` into a tree of JSON values first: CPU and allocations for a field nobody reads.
//! [`LeanHookRun`] decodes the same JSON into a [`HookRun`] and skips the field unread (serde ignores unknown keys
//! without building them): its watch events, and the answers to the operator's creates. Pods are cached as
//! [`crate::cached_pod::Pod`].

use std::borrow::Cow;

use crate::api::{HookRun, HookRunSpec, HookRunStatus};
use crate::lean_meta::LeanMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use serde::{Deserialize, Deserializer};

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
        let mut run = HookRun { metadata: r.metadata.into(), spec: r.spec, status: r.status };
        fit(&mut run);
        Ok(Self(run))
    }
}

/// Gives the run's lists the capacity of their length. JSON does not say how long a list is, so serde grows each
/// by doubling from four: a run's one metric took the room of four, and the runs an operator keeps as decoded
/// (the gamedeployment-operator's own creates until its watch shows them, thousands in a large scale-in) held
/// that slack until dropped.
fn fit(run: &mut HookRun) {
    run.spec.metrics.shrink_to_fit();
    run.spec.args.shrink_to_fit();
    if let Some(status) = &mut run.status {
        status.metric_results.shrink_to_fit();
        for result in &mut status.metric_results {
            result.measurements.shrink_to_fit();
        }
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

    #[test]
    fn a_decoded_hook_run_holds_no_slack_in_its_lists() {
        let json = serde_json::json!({
            "metadata": {"name": "run", "namespace": "default"},
            "spec": {"metrics": [{"name": "web", "provider": {"web": {"url": "http://127.0.0.1:8080/"}}}],
                "args": [{"name": "PodName", "value": "p"}, {"name": "PodIP", "value": "127.0.0.1"}]},
            "status": {"metricResults": [{"name": "web", "measurements": [{"phase": "Successful"}]}]}
        });
        let run = serde_json::from_str::<LeanHookRun>(&json.to_string()).unwrap().0;
        assert_eq!((run.spec.metrics.capacity(), run.spec.args.capacity()), (1, 2));
        let status = run.status.unwrap();
        assert_eq!(status.metric_results.capacity(), 1);
        assert_eq!(status.metric_results[0].measurements.capacity(), 1);
    }
}
