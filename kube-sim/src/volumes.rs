//! PersistentVolumeClaims as a cluster with a dynamic provisioner treats them.
//!
//! - Admission on create (`crate::registry::claims`): `DefaultStorageClass` fills `spec.storageClassName` (absent,
//!   not `""`) with the default class, `StorageObjectInUseProtection` adds the `kubernetes.io/pvc-protection`
//!   finalizer.
//! - A simulated provisioner (`kube-sim.kourse.dev/hostpath`, the provisioner of the bootstrap
//!   default class `standard`) provisions a PersistentVolume `pvc-<claim uid>` for each pending
//!   claim of one of its classes (`Immediate` binding at once, `WaitForFirstConsumer` once a
//!   scheduled pod uses the claim) and binds both ways, with the PV controller's annotations and
//!   `status.phase: Bound` on both.
//! - Claim protection: a claim being deleted keeps its finalizer while a pod that is not
//!   `Succeeded`/`Failed` uses it. When the claim is gone, its volume is deleted (reclaim policy
//!   `Delete`) or becomes `Released` (`Retain`).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::meta;
use crate::registry::claims::{DEFAULT_CLASS_ANNOTATION, PVC_PROTECTION, class};
use crate::registry::{DeleteOptions, Registry, WriteCtx};
use crate::store::{ListRequest, object_key};

/// The provisioner of kube-sim's storage classes.
pub(crate) const PROVISIONER: &str = "kube-sim.kourse.dev/hostpath";
pub(crate) const PV_PROTECTION: &str = "kubernetes.io/pv-protection";
const CLAIMS: &str = "persistentvolumeclaims";
const VOLUMES: &str = "persistentvolumes";

/// The bootstrap default StorageClass.
pub(crate) fn default_storage_class() -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    })
}

fn claim_names_of(pod: &Value) -> Vec<&str> {
    pod.get("spec")
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_array)
        .map(|vs| vs.iter().filter_map(|v| v.get("persistentVolumeClaim")?.get("claimName")?.as_str()).collect())
        .unwrap_or_default()
}

fn phase(obj: &Value) -> &str {
    obj.get("status").and_then(|s| s.get("phase")).and_then(Value::as_str).unwrap_or("")
}

/// Provisioning, binding and claim protection for the claims of one namespace, plus the
/// volumes whose claims are gone.
pub(crate) fn sync_namespace(registry: &Registry, ns: &str) {
    let req = ListRequest { namespace: Some(ns), filter: None, limit: None, start_after: None, at: None };
    let claims = registry.store.list(CLAIMS, &req).map(|p| p.items).unwrap_or_default();
    if claims.is_empty() {
        // Pod churn in a namespace without claims costs one empty list; a claim that just went
        // away still releases its volume.
        release_volumes(registry);
        return;
    }
    let pods = registry.store.list("pods", &req).map(|p| p.items).unwrap_or_default();
    for claim in &claims {
        let name = meta::name(claim);
        let users: Vec<&Arc<Value>> = pods
            .iter()
            .filter(|p| claim_names_of(p).contains(&name) && !matches!(phase(p), "Succeeded" | "Failed"))
            .collect();
        if meta::deletion_timestamp(claim).is_some() {
            if users.is_empty() && meta::finalizers(claim).iter().any(|f| f == PVC_PROTECTION) {
                remove_finalizer(registry, CLAIMS, &object_key(ns, name), PVC_PROTECTION);
            }
            continue;
        }
        let volume_name = claim.get("spec").and_then(|s| s.get("volumeName")).and_then(Value::as_str).unwrap_or("");
        if phase(claim) == "Bound" || !volume_name.is_empty() {
            continue;
        }
        let class_name =
            claim.get("spec").and_then(|s| s.get("storageClassName")).and_then(Value::as_str).unwrap_or("");
        let Some(sc) = class(registry, class_name).filter(|c| c["provisioner"] == PROVISIONER) else { continue };
        let selected_node = if sc["volumeBindingMode"] == "WaitForFirstConsumer" {
            match users.iter().find_map(|p| p.get("spec")?.get("nodeName")?.as_str()) {
                Some(n) => Some(n.to_string()),
                None => continue, // waits for its first consumer to be scheduled
            }
        } else {
            None
        };
        provision(registry, claim, &sc, selected_node.as_deref());
    }
    release_volumes(registry);
}

fn provision(registry: &Registry, claim: &Value, sc: &Value, node: Option<&str>) {
    let ns = meta::namespace(claim);
    let name = meta::name(claim);
    let pv_name = format!("pvc-{}", meta::uid(claim));
    let spec = claim.get("spec").cloned().unwrap_or_default();
    let capacity = spec
        .get("resources")
        .and_then(|r| r.get("requests"))
        .and_then(|r| r.get("storage"))
        .cloned()
        .unwrap_or(json!("1Gi"));
    let access_modes = spec.get("accessModes").cloned().unwrap_or(json!(["ReadWriteOnce"]));
    let mut pv_spec = json!({
        "capacity": {"storage": capacity},
        "accessModes": access_modes,
        "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy").cloned().unwrap_or(json!("Delete")),
        "storageClassName": meta::name(sc),
        "volumeMode": spec.get("volumeMode").cloned().unwrap_or(json!("Filesystem")),
        "hostPath": {"path": format!("/var/lib/kube-sim/volumes/{pv_name}"), "type": "DirectoryOrCreate"},
        "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": name, "uid": meta::uid(claim), "resourceVersion": meta::resource_version(claim)},
    });
    if let Some(n) = node {
        pv_spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [n]}]}]}});
    }
    let pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}, "finalizers": [PV_PROTECTION]},
        "spec": pv_spec,
    });
    let Some(pv_rd) = registry.catalog.get("", "v1", VOLUMES) else { return };
    let mut ctx = WriteCtx::internal("persistent-volume-binder");
    match registry.create(&pv_rd, "", pv, &mut ctx) {
        Ok(_) => {}
        Err(e) if e.reason == "AlreadyExists" => {}
        Err(e) => {
            tracing::warn!(pv = %pv_name, error = %e, "provisioner could not create a PersistentVolume");
            return;
        }
    }
    let _ = registry.internal_update(VOLUMES, &pv_name, |cur| {
        if phase(cur) == "Bound" {
            return Ok(None);
        }
        let mut next = cur.clone();
        next["status"] = json!({"phase": "Bound", "lastPhaseTransitionTime": meta::now()});
        Ok(Some(next))
    });
    let _ = registry.internal_update(CLAIMS, &object_key(ns, name), |cur| {
        if meta::uid(cur) != meta::uid(claim) || phase(cur) == "Bound" {
            return Ok(None);
        }
        let mut next = cur.clone();
        next["spec"]["volumeName"] = json!(pv_name);
        let m = meta::metadata_mut(&mut next);
        let annotations = m.entry("annotations").or_insert_with(|| json!({}));
        if let Value::Object(a) = annotations {
            a.insert("pv.kubernetes.io/bind-completed".into(), json!("yes"));
            a.insert("pv.kubernetes.io/bound-by-controller".into(), json!("yes"));
            a.insert("volume.beta.kubernetes.io/storage-provisioner".into(), json!(PROVISIONER));
            a.insert("volume.kubernetes.io/storage-provisioner".into(), json!(PROVISIONER));
            if let Some(n) = node {
                a.insert("volume.kubernetes.io/selected-node".into(), json!(n));
            }
        }
        next["status"] = json!({"phase": "Bound", "accessModes": access_modes, "capacity": {"storage": capacity}});
        Ok(Some(next))
    });
}

/// Volumes whose claim is gone: deleted (`Delete`) or `Released` (`Retain`).
fn release_volumes(registry: &Registry) {
    let Some(pv_rd) = registry.catalog.get("", "v1", VOLUMES) else { return };
    for (key, pv) in registry.store.snapshot(VOLUMES) {
        let Some(claim_ref) = pv.get("spec").and_then(|s| s.get("claimRef")) else { continue };
        let claim_key =
            object_key(claim_ref["namespace"].as_str().unwrap_or(""), claim_ref["name"].as_str().unwrap_or(""));
        let alive = registry
            .store
            .get(CLAIMS, &claim_key)
            .is_some_and(|c| meta::uid(&c) == claim_ref["uid"].as_str().unwrap_or(""));
        if alive {
            continue;
        }
        if meta::deletion_timestamp(&pv).is_some() {
            remove_finalizer(registry, VOLUMES, &key, PV_PROTECTION);
            continue;
        }
        let ours =
            meta::annotations(&pv).and_then(|a| a.get("pv.kubernetes.io/provisioned-by")).and_then(Value::as_str)
                == Some(PROVISIONER);
        if ours && pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete" {
            let mut ctx = WriteCtx::internal("persistent-volume-binder");
            let opts = DeleteOptions { precondition_uid: Some(meta::uid(&pv).to_string()), ..DeleteOptions::default() };
            if registry.delete(&pv_rd, "", &key, opts, &mut ctx).is_ok() {
                remove_finalizer(registry, VOLUMES, &key, PV_PROTECTION);
            }
        } else if phase(&pv) != "Released" {
            let _ = registry.internal_update(VOLUMES, &key, |cur| {
                let mut next = cur.clone();
                next["status"] = json!({"phase": "Released", "lastPhaseTransitionTime": meta::now()});
                Ok(Some(next))
            });
        }
    }
}

fn remove_finalizer(registry: &Registry, storage: &str, key: &str, finalizer: &str) {
    let Some(rd) = registry.catalog.by_storage(storage) else { return };
    let (ns, name) = if rd.namespaced { key.split_once('/').unwrap_or(("", key)) } else { ("", key) };
    let mut ctx = WriteCtx::internal("pvc-protection-controller");
    let res = registry.guaranteed_update(&rd, ns, name, crate::registry::Endpoint::Main, &mut ctx, |cur| {
        let mut v = (*registry.view(&rd, cur)).clone();
        let fins: Vec<String> = meta::finalizers(&v).into_iter().filter(|f| f != finalizer).collect();
        meta::set_finalizers(&mut v, &fins);
        Ok(v)
    });
    if let Err(e) = res
        && e.code != 404
    {
        tracing::warn!(%key, error = %e, "could not remove finalizer {finalizer}");
    }
}
