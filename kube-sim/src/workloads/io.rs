//! The registry calls the workload controllers make: list a namespace's objects, create, delete,
//! update and set an object's controller reference. Every write goes through the registry's
//! strategies (defaulting, validation, `metadata.generation`) as a controller's API request does.

use std::sync::Arc;

use serde_json::Value;

use super::admitted;
use crate::admission::{Admission, Operation};
use crate::meta;
use crate::registry::{DeleteOptions, Endpoint, Registry, WriteCtx};
use crate::resources::ResourceDef;
use crate::status::ApiError;
use crate::store::ListRequest;

/// The storage bucket of a built-in resource.
pub(super) fn storage(registry: &Registry, group: &str, plural: &str) -> Option<String> {
    registry.catalog.get(group, "v1", plural).map(|rd| rd.storage.clone())
}

fn def(registry: &Registry, group: &str, version: &str, plural: &str) -> Result<Arc<ResourceDef>, ApiError> {
    registry.catalog.get(group, version, plural).ok_or_else(ApiError::not_found_path)
}

/// Every object of `storage` in namespace `ns`.
pub(super) fn list(registry: &Registry, storage: &str, ns: &str) -> Vec<Arc<Value>> {
    let req = ListRequest { namespace: Some(ns), filter: None, limit: None, start_after: None, at: None };
    registry.store.list(storage, &req).map(|p| p.items).unwrap_or_default()
}

pub(super) fn create(
    registry: &Registry,
    group: &str,
    version: &str,
    plural: &str,
    ns: &str,
    body: Value,
    manager: &str,
) -> Result<Arc<Value>, ApiError> {
    let rd = def(registry, group, version, plural)?;
    registry.create(&rd, ns, body, &mut WriteCtx::internal(manager))
}

/// [`create`] as `controller`'s request, through validating admission ([`admitted`]).
#[allow(clippy::too_many_arguments)]
pub(super) async fn create_admitted(
    registry: &Registry,
    admission: &Admission,
    controller: &str,
    group: &str,
    version: &str,
    plural: &str,
    ns: &str,
    body: Value,
) -> Result<Arc<Value>, ApiError> {
    let rd = def(registry, group, version, plural)?;
    as_controller(registry, admission, controller, &rd, ns, Operation::Create, |ctx| {
        registry.create(&rd, ns, body.clone(), ctx)
    })
    .await
}

/// Runs `write` (an `operation` on `rd` in `ns`) as `controller`'s request through validating admission: as the
/// controller's service account, its write context carrying the admission gate.
async fn as_controller<T>(
    registry: &Registry,
    admission: &Admission,
    controller: &str,
    rd: &ResourceDef,
    ns: &str,
    operation: Operation,
    write: impl Fn(&mut WriteCtx) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let user = admitted::controller_user(controller);
    admitted::run(admission, registry, rd, ns, &user, &[operation], |gate| {
        let mut ctx = WriteCtx::internal(controller);
        ctx.admission = gate;
        write(&mut ctx)
    })
    .await
}

/// [`delete`] as `controller`'s request, through validating admission; a refusal is logged (the controller
/// tries again at its next sync) and counts as no deletion.
#[allow(clippy::too_many_arguments)]
pub(super) async fn delete_admitted(
    registry: &Registry,
    admission: &Admission,
    controller: &str,
    group: &str,
    version: &str,
    plural: &str,
    ns: &str,
    name: &str,
) -> bool {
    let Ok(rd) = def(registry, group, version, plural) else { return false };
    let result = as_controller(registry, admission, controller, &rd, ns, Operation::Delete, |ctx| {
        registry.delete(&rd, ns, name, DeleteOptions::default(), ctx)
    })
    .await;
    deletion_started(result, plural, ns, name)
}

/// Deletes with the object's default grace period; returns whether a deletion started.
pub(super) fn delete(
    registry: &Registry,
    group: &str,
    version: &str,
    plural: &str,
    ns: &str,
    name: &str,
    manager: &str,
) -> bool {
    let Ok(rd) = def(registry, group, version, plural) else { return false };
    let result = registry.delete(&rd, ns, name, DeleteOptions::default(), &mut WriteCtx::internal(manager));
    deletion_started(result, plural, ns, name)
}

/// Whether a controller's delete of `ns/name` started a deletion. An object already gone (404) or changed under it
/// (409) is a race the controller's next sync settles; any other refusal is logged.
fn deletion_started<T>(result: Result<T, ApiError>, plural: &str, ns: &str, name: &str) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => {
            if e.code != 404 && e.code != 409 {
                tracing::warn!(resource = plural, namespace = ns, name, error = %e.message, "workload controller could not delete");
            }
            false
        }
    }
}

/// Updates `ns/name` through the main endpoint with `mutate` (retried on conflicts); `mutate`
/// returning `None` leaves the object as it is.
pub(super) fn update(
    registry: &Registry,
    group: &str,
    plural: &str,
    ns: &str,
    name: &str,
    manager: &str,
    mutate: impl Fn(&Value) -> Option<Value>,
) -> Result<(), ApiError> {
    let rd = def(registry, group, "v1", plural)?;
    let current = registry.get(&rd, ns, name)?;
    if mutate(&current).is_none() {
        return Ok(());
    }
    registry
        .guaranteed_update(&rd, ns, name, Endpoint::Main, &mut WriteCtx::internal(manager), |cur| {
            Ok(mutate(&registry.view(&rd, cur)).unwrap_or_else(|| (**cur).clone()))
        })
        .map(|_| ())
}

/// Points the pod's controller reference at `owner` (adoption) or removes the reference to
/// `owner_uid` (release). Only a pod without a controller is adopted.
pub(super) fn set_controller(registry: &Registry, ns: &str, pod: &str, owner: Option<&Value>, owner_uid: &str) {
    set_controller_of(registry, "", "pods", ns, pod, owner, owner_uid);
}

/// [`set_controller`] for any namespaced resource (a Deployment adopting ReplicaSets).
pub(super) fn set_controller_of(
    registry: &Registry,
    group: &str,
    plural: &str,
    ns: &str,
    name: &str,
    owner: Option<&Value>,
    owner_uid: &str,
) {
    let manager = if plural == "pods" { "replicaset-controller" } else { "deployment-controller" };
    let result = update(registry, group, plural, ns, name, manager, |cur| {
        let refs = meta::owner_references(cur).to_vec();
        let has_controller = refs.iter().any(|o| o.get("controller").and_then(Value::as_bool) == Some(true));
        let mut next = cur.clone();
        let kept: Vec<Value> = match owner {
            Some(o) if !has_controller && meta::deletion_timestamp(cur).is_none() => {
                refs.into_iter().chain(std::iter::once(o.clone())).collect()
            }
            Some(_) => return None,
            None => {
                let kept: Vec<Value> =
                    refs.iter().filter(|o| o.get("uid").and_then(Value::as_str) != Some(owner_uid)).cloned().collect();
                if kept.len() == refs.len() {
                    return None;
                }
                kept
            }
        };
        let m = meta::metadata_mut(&mut next);
        if kept.is_empty() {
            m.remove("ownerReferences");
        } else {
            m.insert("ownerReferences".into(), Value::Array(kept));
        }
        Some(next)
    });
    if let Err(e) = result
        && e.code != 404
    {
        tracing::warn!(namespace = ns, name, resource = plural, error = %e.message, "could not set the controller reference");
    }
}
