//! PodDisruptionBudgets and the Eviction API.
//!
//! - The disruption controller's status computation (`pkg/controller/disruption`): for every
//!   PDB, the pods its selector matches (a null selector matches none, `{}` all pods of the
//!   namespace), `expectedPods` (the pods for an integer `minAvailable`, otherwise the summed
//!   `spec.replicas` of their controllers read through the scale subresource),
//!   `desiredHealthy`, `currentHealthy` (Ready, not terminating, not recently evicted),
//!   `disruptionsAllowed`, `disruptedPods` (evictions not yet seen through, kept 2 minutes),
//!   `observedGeneration` and the `DisruptionAllowed` condition.
//! - `POST pods/NAME/eviction` (`pkg/registry/core/pod/storage/eviction.go`): terminal,
//!   pending and terminating pods are deleted at once; otherwise the one matching PDB must allow
//!   a disruption (else `429 TooManyRequests`, "Cannot evict pod as it would violate the pod's
//!   disruption budget.", with a `DisruptionBudget` cause), which the eviction then consumes
//!   (`disruptionsAllowed - 1`, the pod in `disruptedPods`); the pod gets the `DisruptionTarget`
//!   condition and is deleted with the eviction's `deleteOptions` (gracefully, like any delete).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::meta;
use crate::registry::{DeleteOptions, Registry, WriteCtx};
use crate::selector::{LabelSelector, object_labels};
use crate::status::{ApiError, GroupResource};
use crate::store::{ListRequest, object_key};

const PDBS: &str = "poddisruptionbudgets.policy";
const PODS: &str = "pods";
/// How long an eviction keeps a pod out of `currentHealthy` before the controller gives up on it.
const DISRUPTED_POD_TIMEOUT_SECS: i64 = 120;

fn pdb_storage(registry: &Registry) -> String {
    registry
        .catalog
        .get("policy", "v1", "poddisruptionbudgets")
        .map_or_else(|| PDBS.to_string(), |rd| rd.storage.clone())
}

fn list(registry: &Registry, storage: &str, ns: &str) -> Vec<Arc<Value>> {
    let req = ListRequest { namespace: Some(ns), filter: None, limit: None, start_after: None, at: None };
    registry.store.list(storage, &req).map(|p| p.items).unwrap_or_default()
}

/// The PDB's selector; `None` (null) matches nothing, an empty one every pod (policy/v1).
fn selector(pdb: &Value) -> Option<LabelSelector> {
    let sel = pdb.get("spec")?.get("selector").filter(|s| !s.is_null())?;
    LabelSelector::from_label_selector_object(sel).ok()
}

fn pod_ready(pod: &Value) -> bool {
    pod.get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .is_some_and(|c| c["status"] == "True")
}

fn phase(pod: &Value) -> &str {
    pod.get("status").and_then(|s| s.get("phase")).and_then(Value::as_str).unwrap_or("")
}

/// PDBs in the pod's namespace whose selector matches it.
pub(crate) fn matching_pdbs(registry: &Registry, pod: &Value) -> Vec<Arc<Value>> {
    let labels = object_labels(pod);
    list(registry, &pdb_storage(registry), meta::namespace(pod))
        .into_iter()
        .filter(|pdb| selector(pdb).is_some_and(|s| s.matches(&labels)))
        .collect()
}

/// `GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let p: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((p * total + 99) / 100)
        }
        _ => None,
    }
}

/// The summed `spec.replicas` of the pods' controllers (through their scale subresource);
/// pods without a controller, or whose controller has no scale, are not counted.
fn expected_scale(registry: &Registry, pods: &[Arc<Value>]) -> i64 {
    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    for pod in pods {
        let Some(owner) = meta::owner_references(pod).iter().find(|o| o["controller"] == true) else { continue };
        // `getPodDeployment`: a ReplicaSet's pods count their Deployment's replicas.
        let deployment = (owner["kind"] == "ReplicaSet")
            .then(|| registry.store.get("replicasets.apps", &object_key(meta::namespace(pod), owner["name"].as_str()?)))
            .flatten()
            .and_then(|rs| {
                meta::owner_references(&rs)
                    .iter()
                    .find(|o| o["controller"] == true && o["kind"] == "Deployment" && o["apiVersion"] == "apps/v1")
                    .cloned()
            });
        let owner = deployment.as_ref().unwrap_or(owner);
        let uid = owner["uid"].as_str().unwrap_or_default().to_string();
        if seen.contains_key(&uid) {
            continue;
        }
        let api_version = owner["apiVersion"].as_str().unwrap_or_default();
        let kind = owner["kind"].as_str().unwrap_or_default();
        let name = owner["name"].as_str().unwrap_or_default();
        let replicas = registry
            .catalog
            .by_api_version_kind(api_version, kind)
            .filter(|rd| rd.scale.is_some())
            .and_then(|rd| registry.get_scale(&rd, meta::namespace(pod), name).ok())
            .filter(|scale| scale["metadata"]["uid"].as_str().is_none_or(|u| u == uid))
            .and_then(|scale| scale["spec"]["replicas"].as_i64())
            .unwrap_or(0);
        seen.insert(uid, replicas);
    }
    seen.values().sum()
}

/// The status the disruption controller would write for this PDB now.
pub(crate) fn compute_status(registry: &Registry, pdb: &Value, now: Timestamp) -> Value {
    let pods: Vec<Arc<Value>> = match selector(pdb) {
        Some(sel) => {
            list(registry, PODS, meta::namespace(pdb)).into_iter().filter(|p| sel.matches(&object_labels(p))).collect()
        }
        None => vec![],
    };
    let spec = pdb.get("spec").cloned().unwrap_or_default();
    let (expected, desired) = if let Some(max) = spec.get("maxUnavailable").filter(|v| !v.is_null()) {
        let expected = expected_scale(registry, &pods);
        (expected, (expected - scaled(max, expected).unwrap_or(0)).max(0))
    } else if let Some(min) = spec.get("minAvailable").filter(|v| !v.is_null()) {
        if min.is_number() {
            (pods.len() as i64, min.as_i64().unwrap_or(0))
        } else {
            let expected = expected_scale(registry, &pods);
            (expected, scaled(min, expected).unwrap_or(0))
        }
    } else {
        (0, 0)
    };
    // Evictions the controller has not seen through yet (pod still there, not terminating).
    let old: Map<String, Value> =
        pdb.get("status").and_then(|s| s.get("disruptedPods")).and_then(Value::as_object).cloned().unwrap_or_default();
    let mut disrupted = Map::new();
    for pod in &pods {
        let name = meta::name(pod);
        if meta::deletion_timestamp(pod).is_some() {
            continue;
        }
        if let Some(t) = old.get(name)
            && let Some(at) = t.as_str().and_then(meta::parse_time)
            && at.as_second() + DISRUPTED_POD_TIMEOUT_SECS > now.as_second()
        {
            disrupted.insert(name.to_string(), t.clone());
        }
    }
    let healthy = pods
        .iter()
        .filter(|p| meta::deletion_timestamp(p).is_none() && !disrupted.contains_key(meta::name(p)) && pod_ready(p))
        .count() as i64;
    let allowed = if expected <= 0 { 0 } else { (healthy - desired).max(0) };
    let (cond_status, reason) = if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
    let old_cond = pdb
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionAllowed"))
        .cloned();
    let transition = match &old_cond {
        Some(c) if c["status"] == cond_status && c["reason"] == reason => c["lastTransitionTime"].clone(),
        _ => json!(meta::format_time(now)),
    };
    let mut status = Map::new();
    if !disrupted.is_empty() {
        status.insert("disruptedPods".into(), Value::Object(disrupted));
    }
    status.insert("observedGeneration".into(), json!(meta::generation(pdb)));
    status.insert("disruptionsAllowed".into(), json!(allowed));
    status.insert("currentHealthy".into(), json!(healthy));
    status.insert("desiredHealthy".into(), json!(desired));
    status.insert("expectedPods".into(), json!(expected));
    status.insert(
        "conditions".into(),
        json!([{"type": "DisruptionAllowed", "status": cond_status, "reason": reason, "message": "",
                "observedGeneration": meta::generation(pdb), "lastTransitionTime": transition}]),
    );
    Value::Object(status)
}

/// Recomputes the status of every PDB in `ns` (the disruption controller's sync), writing
/// only those that changed.
pub(crate) fn sync_namespace(registry: &Registry, ns: &str) {
    let storage = pdb_storage(registry);
    let now = Timestamp::now();
    for pdb in list(registry, &storage, ns) {
        let key = object_key(ns, meta::name(&pdb));
        let res = registry.write_status_if_changed(&storage, &key, |cur| compute_status(registry, cur, now));
        if let Err(e) = res {
            tracing::warn!(pdb = %key, error = %e, "disruption controller could not update a PodDisruptionBudget");
        }
    }
}

fn too_many_requests(message: String, retry_after: u64) -> ApiError {
    let mut e =
        ApiError::too_many_requests("Cannot evict pod as it would violate the pod's disruption budget.", retry_after);
    if let Some(Value::Object(d)) = e.details.as_deref_mut() {
        d.insert("causes".into(), json!([{"reason": "DisruptionBudget", "message": message}]));
    }
    e
}

fn denied_message(pdb: &Value) -> String {
    let name = meta::name(pdb);
    let st = pdb.get("status").cloned().unwrap_or_default();
    let (current, desired) = (st["currentHealthy"].as_i64().unwrap_or(0), st["desiredHealthy"].as_i64().unwrap_or(0));
    if current <= desired {
        format!("The disruption budget {name} needs {desired} healthy pods and has {current} currently")
    } else {
        format!("The disruption budget {name} does not allow evicting pods currently")
    }
}

/// `POST pods/NAME/eviction`; returns the `Status` of a successful eviction.
pub(crate) fn evict(
    registry: &Registry,
    ns: &str,
    name: &str,
    eviction: &Value,
    ctx: &mut WriteCtx,
) -> Result<Value, ApiError> {
    let pods_gr = GroupResource::new("", "pods");
    if meta::name(eviction) != name {
        return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
    }
    let body_ns = meta::namespace(eviction);
    if !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let mut opts = match eviction.get("deleteOptions").filter(|o| !o.is_null()) {
        Some(o) => DeleteOptions::from_body(o)?,
        None => DeleteOptions::default(),
    };
    opts.dry_run |= ctx.dry_run;
    let pods = registry.catalog.get("", "v1", "pods").ok_or_else(ApiError::not_found_path)?;
    let key = object_key(ns, name);
    let success = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    let rv_unset = opts.precondition_rv.as_deref().is_none_or(str::is_empty);
    let mut attempts = 0;
    let (pod, pdb) = loop {
        attempts += 1;
        let pod = registry.store.get(PODS, &key).ok_or_else(|| ApiError::not_found(&pods_gr, name))?;
        let terminal = matches!(phase(&pod), "Succeeded" | "Failed");
        let deleting = meta::deletion_timestamp(&pod).is_some();
        if !(terminal || deleting || phase(&pod) == "Pending") {
            let pdbs = matching_pdbs(registry, &pod);
            break (pod, pdbs);
        }
        // Already disrupted (or never running): delete it without looking at budgets, pinned to
        // the version looked at unless it is terminal or terminating.
        let pin = (!terminal && !deleting && rv_unset).then(|| meta::resource_version(&pod).to_string());
        match delete_pod(registry, &pods, ns, name, opts.clone(), pin.as_deref(), None, ctx) {
            Err(e) if e.code == 409 && rv_unset && attempts < 20 => continue,
            other => return other.map(|()| success),
        }
    };
    if pdb.len() > 1 {
        return Err(ApiError::new(
            500,
            "",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        ));
    }
    let Some(pdb) = pdb.first() else {
        return delete_pod(registry, &pods, ns, name, opts, None, None, ctx).map(|()| success);
    };
    let pdb_name = meta::name(pdb).to_string();
    let st = pdb.get("status").cloned().unwrap_or_default();
    let desired = st["desiredHealthy"].as_i64().unwrap_or(0);
    let unhealthy_ok = !pod_ready(&pod)
        && (pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
            || (st["currentHealthy"].as_i64().unwrap_or(0) >= desired && desired > 0));
    if unhealthy_ok {
        // An unready pod may go without consuming the budget, as long as it is still unready:
        // the delete is pinned to the version looked at, and a change since is a 429.
        let pin = rv_unset.then(|| meta::resource_version(&pod).to_string());
        return delete_pod(registry, &pods, ns, name, opts, pin.as_deref(), Some(&pdb_name), ctx).map(|()| success);
    }
    check_and_decrement(registry, ns, &pdb_name, name, opts.dry_run)?;
    delete_pod(registry, &pods, ns, name, opts, None, None, ctx).map(|()| success)
}

fn check_and_decrement(
    registry: &Registry,
    ns: &str,
    pdb_name: &str,
    pod: &str,
    dry_run: bool,
) -> Result<(), ApiError> {
    let storage = pdb_storage(registry);
    let key = object_key(ns, pdb_name);
    let now = meta::now();
    let res = registry.internal_update(&storage, &key, |cur| {
        let st = cur.get("status").cloned().unwrap_or_default();
        if st["observedGeneration"].as_i64().unwrap_or(0) < meta::generation(cur) {
            return Err(too_many_requests(
                format!("The disruption budget {pdb_name} is still being processed by the server."),
                10,
            ));
        }
        let allowed = st["disruptionsAllowed"].as_i64().unwrap_or(0);
        if allowed < 0 {
            return Err(ApiError::forbidden(
                &GroupResource::new("policy", "poddisruptionbudget"),
                pdb_name,
                "pdb disruptions allowed is negative",
            ));
        }
        if st["disruptedPods"].as_object().is_some_and(|m| m.len() > 2000) {
            return Err(ApiError::forbidden(
                &GroupResource::new("policy", "poddisruptionbudget"),
                pdb_name,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            ));
        }
        if allowed == 0 {
            return Err(too_many_requests(denied_message(cur), 0));
        }
        if dry_run {
            return Ok(None);
        }
        let mut next = cur.clone();
        let status = &mut next["status"];
        status["disruptionsAllowed"] = json!(allowed - 1);
        if allowed - 1 == 0
            && let Some(cs) = status["conditions"].as_array_mut()
        {
            for c in cs.iter_mut().filter(|c| c["type"] == "DisruptionAllowed") {
                c["status"] = json!("False");
                c["reason"] = json!("InsufficientPods");
                c["lastTransitionTime"] = json!(now);
            }
        }
        if !status["disruptedPods"].is_object() {
            status["disruptedPods"] = json!({});
        }
        status["disruptedPods"][pod] = json!(now);
        Ok(Some(next))
    });
    match res {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(ApiError::not_found(&GroupResource::new("policy", "poddisruptionbudgets"), pdb_name)),
        Err(e) => Err(e),
    }
}

/// Marks the pod with `DisruptionTarget` and deletes it.
#[allow(clippy::too_many_arguments)]
fn delete_pod(
    registry: &Registry,
    pods: &Arc<crate::resources::ResourceDef>,
    ns: &str,
    name: &str,
    mut opts: DeleteOptions,
    pin: Option<&str>,
    pdb: Option<&str>,
    ctx: &mut WriteCtx,
) -> Result<(), ApiError> {
    let gr = GroupResource::new("", "pods");
    let key = object_key(ns, name);
    let conflict = |e: ApiError| {
        if pdb.is_some() && e.code == 409 && pin.is_some() {
            too_many_requests(
                format!("The disruption budget {} is still being processed by the server.", pdb.unwrap_or_default()),
                10,
            )
        } else {
            e
        }
    };
    if !opts.dry_run {
        let now = meta::now();
        let marked = registry
            .internal_update(PODS, &key, |cur| {
                opts.check_preconditions(&gr, name, cur, pin)?;
                let mut next = cur.clone();
                if !next["status"].is_object() {
                    next["status"] = json!({});
                }
                if !next["status"]["conditions"].is_array() {
                    next["status"]["conditions"] = json!([]);
                }
                let cs = next["status"]["conditions"].as_array_mut().ok_or_else(|| ApiError::internal("conditions"))?;
                match cs.iter_mut().find(|c| c["type"] == "DisruptionTarget") {
                    Some(c) => {
                        if c["status"] != "True" {
                            c["lastTransitionTime"] = json!(now);
                        }
                        c["status"] = json!("True");
                        c["reason"] = json!("EvictionByEvictionAPI");
                        c["message"] = json!("Eviction API: evicting");
                    }
                    None => {
                        cs.push(json!({"type": "DisruptionTarget", "status": "True", "lastProbeTime": null,
                            "lastTransitionTime": now, "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}))
                    }
                }
                Ok(Some(next))
            })
            .map_err(conflict)?;
        let Some(marked) = marked else { return Err(ApiError::not_found(&gr, name)) };
        // The delete must hit the version just written (or the caller's precondition).
        if pin.is_some() || !opts.precondition_rv.as_deref().is_none_or(str::is_empty) {
            opts.precondition_rv = Some(meta::resource_version(&marked).to_string());
        }
    }
    registry.delete(pods, ns, name, opts, ctx).map(|_| ()).map_err(conflict)
}
