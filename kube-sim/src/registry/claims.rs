//! PersistentVolumeClaim admission on create, as the `DefaultStorageClass` and `StorageObjectInUseProtection`
//! plugins do it: an absent `spec.storageClassName` (not `""`) becomes the default class's, and the claim gets the
//! `kubernetes.io/pvc-protection` finalizer. The provisioner and the protection controller that later act on the
//! claim are `crate::volumes`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Registry;
use crate::meta;

/// The finalizer that keeps a claim while a pod uses it.
pub(crate) const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// The annotation that makes a StorageClass the default.
pub(crate) const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

fn classes(registry: &Registry) -> Vec<Arc<Value>> {
    let Some(rd) = registry.catalog.get("storage.k8s.io", "v1", "storageclasses") else { return vec![] };
    registry.store.snapshot(&rd.storage).into_iter().map(|(_, v)| v).collect()
}

/// The StorageClass called `name`.
pub(crate) fn class(registry: &Registry, name: &str) -> Option<Arc<Value>> {
    classes(registry).into_iter().find(|c| meta::name(c) == name)
}

/// Admission for a claim being created: default class and the protection finalizer.
pub(crate) fn admit_claim(registry: &Registry, claim: &mut Value) {
    let has_class = claim.get("spec").and_then(|s| s.get("storageClassName")).is_some_and(|c| !c.is_null());
    if !has_class {
        let mut defaults: Vec<Arc<Value>> = classes(registry)
            .into_iter()
            .filter(|c| {
                meta::annotations(c).and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION)).and_then(Value::as_str)
                    == Some("true")
            })
            .collect();
        // Several defaults: the newest wins (as since Kubernetes 1.26).
        defaults.sort_by(|a, b| {
            meta::meta_str(a, "creationTimestamp")
                .cmp(&meta::meta_str(b, "creationTimestamp"))
                .then(meta::name(a).cmp(meta::name(b)))
        });
        if let Some(c) = defaults.last()
            && let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut)
        {
            spec.insert("storageClassName".into(), json!(meta::name(c)));
        }
    }
    let mut fins = meta::finalizers(claim);
    if !fins.iter().any(|f| f == PVC_PROTECTION) {
        fins.push(PVC_PROTECTION.to_string());
        meta::set_finalizers(claim, &fins);
    }
}
