//! The Deployment controller (`pkg/controller/deployment`): a Deployment owns one ReplicaSet per
//! template it has had (named and labelled by `pod-template-hash`), rolls from the old ones to
//! the new one with `RollingUpdate` (`maxSurge`/`maxUnavailable`, [`super::rollout`]) or
//! `Recreate`, numbers them with `deployment.kubernetes.io/revision` (so `kubectl rollout undo`
//! and `history` work), keeps `revisionHistoryLimit` old ones, and writes the status and
//! conditions [`super::progress`] derives. A paused Deployment only follows its replica count.
//!
//! [`sync`] is the registry I/O around those pure decisions; ReplicaSets and their pods are
//! written through the registry as kube-controller-manager's requests would be.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::progress::{self, Inputs};
use super::revision::{self, HASH_LABEL};
use super::rollout::{self, ReplicaSetCounts, Scale};
use super::{events, io, pods, replicaset};
use crate::meta;
use crate::registry::Registry;
use crate::selector::object_labels;

const MANAGER: &str = "deployment-controller";

fn spec<'a>(d: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut full = vec!["spec"];
    full.extend_from_slice(path);
    meta::lookup(d, &full)
}

fn counts(rs: &Value) -> ReplicaSetCounts {
    let n = |path: &[&str]| meta::lookup(rs, path).and_then(Value::as_i64).unwrap_or(0);
    ReplicaSetCounts {
        name: meta::name(rs).to_string(),
        created: meta::meta_str(rs, "creationTimestamp").unwrap_or("").to_string(),
        spec_replicas: n(&["spec", "replicas"]),
        status_replicas: n(&["status", "replicas"]),
        available: n(&["status", "availableReplicas"]),
    }
}

/// The ReplicaSet a new template gets: owned by the Deployment, its selector and labels
/// narrowed by the template hash.
fn new_replica_set(d: &Value, hash: &str, replicas: i64, annotations: Value) -> Value {
    let mut template = spec(d, &["template"]).cloned().unwrap_or(json!({}));
    template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let mut selector = spec(d, &["selector"]).cloned().unwrap_or(json!({}));
    selector["matchLabels"][HASH_LABEL] = json!(hash);
    let labels = template["metadata"]["labels"].clone();
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": format!("{}-{hash}", meta::name(d)), "namespace": meta::namespace(d), "labels": labels,
                     "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta::name(d),
                                          "uid": meta::uid(d), "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"replicas": replicas, "minReadySeconds": spec(d, &["minReadySeconds"]).cloned().unwrap_or(json!(0)),
                 "selector": selector, "template": template},
    })
}

/// Whether a pod of an old ReplicaSet may still be running (`oldPodsRunning`, for Recreate).
fn old_pods_running(registry: &Registry, ns: &str, old: &[Arc<Value>]) -> bool {
    if old.iter().any(|rs| meta::lookup(rs, &["status", "replicas"]).and_then(Value::as_i64).unwrap_or(0) > 0) {
        return true;
    }
    let uids: Vec<&str> = old.iter().map(|rs| meta::uid(rs)).collect();
    io::list(registry, "pods", ns).iter().any(|p| {
        pods::controller_uid(p).is_some_and(|u| uids.contains(&u)) && !matches!(pods::phase(p), "Succeeded" | "Failed")
    })
}

/// Scales a ReplicaSet and records it on the Deployment, as `scaleReplicaSet` does.
fn scale(registry: &Registry, d: &Value, ns: &str, s: &Scale, desired: i64, max: i64) {
    let result = io::update(registry, "apps", "replicasets", ns, &s.name, MANAGER, |cur| {
        let mut next = cur.clone();
        next["spec"]["replicas"] = json!(s.to);
        next["metadata"]["annotations"][revision::DESIRED_REPLICAS] = json!(desired.to_string());
        next["metadata"]["annotations"][revision::MAX_REPLICAS] = json!(max.to_string());
        (next != *cur).then_some(next)
    });
    match result {
        Ok(()) => {
            let verb = if s.to > s.from { "up" } else { "down" };
            let message = format!("Scaled {verb} replica set {} from {} to {}", s.name, s.from, s.to);
            events::record(registry, d, "Normal", "ScalingReplicaSet", &message, MANAGER);
        }
        Err(e) => tracing::warn!(replicaset = %s.name, error = %e.message, "could not scale"),
    }
}

/// Syncs the Deployment `ns/name`; returns when to look again (a progress deadline).
pub(super) fn sync(registry: &Registry, ns: &str, name: &str) -> Option<Duration> {
    let d_storage = io::storage(registry, "apps", "deployments")?;
    let rs_storage = io::storage(registry, "apps", "replicasets")?;
    let key = format!("{ns}/{name}");
    let d = registry.store.get(&d_storage, &key)?;
    if meta::deletion_timestamp(&d).is_some() {
        return None;
    }
    let sel = replicaset::selector(&d)?;
    let uid = meta::uid(&d).to_string();
    let owner = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid,
                       "controller": true, "blockOwnerDeletion": true});
    // Claim: own ReplicaSets the selector still matches, adopt matching orphans, release the rest.
    for rs in io::list(registry, &rs_storage, ns) {
        let matches = sel.matches(&object_labels(&rs));
        match pods::controller_uid(&rs) {
            Some(u) if u == uid && !matches => {
                io::set_controller_of(registry, "apps", "replicasets", ns, meta::name(&rs), None, &uid)
            }
            None if matches && meta::deletion_timestamp(&rs).is_none() => {
                io::set_controller_of(registry, "apps", "replicasets", ns, meta::name(&rs), Some(&owner), &uid)
            }
            _ => {}
        }
    }
    let mine = |registry: &Registry| -> Vec<Arc<Value>> {
        io::list(registry, &rs_storage, ns)
            .into_iter()
            .filter(|rs| pods::controller_uid(rs) == Some(uid.as_str()) && sel.matches(&object_labels(rs)))
            .collect()
    };
    let all = mine(registry);
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| meta::meta_str(a, "creationTimestamp").cmp(&meta::meta_str(b, "creationTimestamp")));
    let new_rs = sorted.iter().find(|rs| revision::same_template(rs, &d)).cloned();
    let old: Vec<Arc<Value>> =
        all.iter().filter(|rs| new_rs.as_ref().is_none_or(|n| meta::uid(n) != meta::uid(rs))).cloned().collect();

    let desired = spec(&d, &["replicas"]).and_then(Value::as_i64).unwrap_or(1);
    let paused = spec(&d, &["paused"]).and_then(Value::as_bool).unwrap_or(false);
    let recreate = spec(&d, &["strategy", "type"]).and_then(Value::as_str) == Some("Recreate");
    let rolling_update = spec(&d, &["strategy", "rollingUpdate"]);
    let (max_surge, max_unavailable) = if recreate { (0, 0) } else { rollout::fenceposts(rolling_update, desired) };
    let max_total = desired + max_surge;
    let has_deadline =
        spec(&d, &["progressDeadlineSeconds"]).and_then(Value::as_i64).is_some_and(|s| s != i64::from(i32::MAX));
    let next_revision = old.iter().map(|rs| revision::revision(rs)).max().unwrap_or(0) + 1;
    let mut conditions = progress::conditions(d.get("status").unwrap_or(&Value::Null));
    let min_ready = spec(&d, &["minReadySeconds"]).cloned().unwrap_or(json!(0));

    // The current template's ReplicaSet: bring its revision, annotations and minReadySeconds up to date.
    if let Some(rs) = &new_rs {
        // A template seen before (a rollback) becomes the newest revision again.
        let rev = revision::revision(rs).max(next_revision);
        let current = meta::annotations(rs).map(|a| Value::Object(a.clone()));
        let annotations = revision::replica_set_annotations(&d, current.as_ref(), rev, desired, max_total);
        let _ = io::update(registry, "apps", "replicasets", ns, meta::name(rs), MANAGER, |cur| {
            let mut next = cur.clone();
            next["metadata"]["annotations"] = annotations.clone();
            next["spec"]["minReadySeconds"] = min_ready.clone();
            (next != *cur).then_some(next)
        });
        if has_deadline && !conditions.iter().any(|c| c["type"] == "Progressing") {
            progress::set_condition(
                &mut conditions,
                json!({"type": "Progressing", "status": "True", "reason": "FoundNewReplicaSet",
                "message": format!("Found new replica set {:?}", meta::name(rs)), "lastUpdateTime": meta::now(), "lastTransitionTime": meta::now()}),
            );
        }
    }

    let mut recheck = None;
    if paused {
        // A paused rollout only follows the replica count of its one active ReplicaSet.
        let active: Vec<&Arc<Value>> = all.iter().filter(|rs| counts(rs).spec_replicas > 0).collect();
        if let [only] = active.as_slice() {
            let c = counts(only);
            if c.spec_replicas != desired {
                scale(
                    registry,
                    &d,
                    ns,
                    &Scale { name: c.name, from: c.spec_replicas, to: desired },
                    desired,
                    max_total,
                );
            }
        }
    } else {
        let old_counts: Vec<ReplicaSetCounts> = old.iter().map(|rs| counts(rs)).collect();
        let old_running = recreate && old_pods_running(registry, ns, &old);
        let create_now = match &new_rs {
            Some(_) => false,
            None if recreate => old_counts.iter().all(|c| c.spec_replicas == 0) && !old_running,
            None => true,
        };
        if create_now {
            let all_spec: i64 = old_counts.iter().map(|c| c.spec_replicas).sum();
            let replicas = if recreate { desired } else { rollout::new_rs_replicas(desired, max_surge, 0, all_spec) };
            let collisions = meta::lookup(&d, &["status", "collisionCount"]).and_then(Value::as_i64);
            let hash = revision::template_hash(spec(&d, &["template"]).unwrap_or(&Value::Null), collisions);
            let annotations = revision::replica_set_annotations(&d, None, next_revision, desired, max_total);
            let body = new_replica_set(&d, &hash, replicas, annotations);
            match io::create(registry, "apps", "v1", "replicasets", ns, body, MANAGER) {
                Ok(rs) => {
                    let message = format!("Scaled up replica set {} from 0 to {replicas}", meta::name(&rs));
                    events::record(registry, &d, "Normal", "ScalingReplicaSet", &message, MANAGER);
                    if has_deadline {
                        let now = meta::now();
                        progress::set_condition(
                            &mut conditions,
                            json!({"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
                            "message": format!("Created new replica set {:?}", meta::name(&rs)), "lastUpdateTime": now, "lastTransitionTime": now}),
                        );
                    }
                }
                Err(e) if e.reason == "AlreadyExists" => {
                    // A ReplicaSet of another template holds the name: count the collision, the
                    // next hash differs.
                    let _ = registry.write_status_if_changed(&d_storage, &key, |cur| {
                        let mut s = cur.get("status").cloned().unwrap_or(json!({}));
                        s["collisionCount"] = json!(collisions.unwrap_or(0) + 1);
                        s
                    });
                    return Some(Duration::ZERO);
                }
                Err(e) => {
                    tracing::warn!(deployment = %key, error = %e.message, "could not create the new ReplicaSet");
                    return Some(Duration::from_secs(1));
                }
            }
        } else if let Some(rs) = &new_rs {
            let steps = if recreate {
                rollout::recreate_step(desired, Some(&counts(rs)), &old_counts, old_running).0
            } else {
                rollout::rolling_step(desired, rolling_update, &counts(rs), &old_counts)
            };
            for s in &steps {
                scale(registry, &d, ns, s, desired, max_total);
            }
        } else if recreate {
            for s in rollout::recreate_step(desired, None, &old_counts, old_running).0 {
                scale(registry, &d, ns, &s, desired, max_total);
            }
        }
    }

    // Status from the ReplicaSets as they are now.
    let all = mine(registry);
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| meta::meta_str(a, "creationTimestamp").cmp(&meta::meta_str(b, "creationTimestamp")));
    let new_rs = sorted.iter().find(|rs| revision::same_template(rs, &d)).cloned();
    let refs: Vec<&Value> = all.iter().map(|rs| rs.as_ref()).collect();
    let (status, deadline_recheck) = progress::status(Inputs {
        deployment: &d,
        new_rs: new_rs.as_deref(),
        all: &refs,
        max_unavailable,
        conditions,
        paused,
        now: Timestamp::now(),
    });
    recheck = recheck.or(deadline_recheck);
    let complete = [status.get("updatedReplicas"), status.get("replicas"), status.get("availableReplicas")]
        .iter()
        .all(|v| v.and_then(|v| v.as_i64()).unwrap_or(0) == desired);
    if complete && !paused {
        let old_refs: Vec<&Value> =
            refs.iter().copied().filter(|rs| new_rs.as_ref().is_none_or(|n| meta::uid(n) != meta::uid(rs))).collect();
        let limit = spec(&d, &["revisionHistoryLimit"]).and_then(Value::as_i64).unwrap_or(10);
        for victim in revision::history_to_delete(&old_refs, limit) {
            io::delete(registry, "apps", "v1", "replicasets", ns, &victim, MANAGER);
        }
    }
    if let Some(rs) = &new_rs {
        let rev = revision::revision(rs).to_string();
        let _ = io::update(registry, "apps", "deployments", ns, name, MANAGER, |cur| {
            let current = meta::annotations(cur).and_then(|a| a.get(revision::REVISION)).and_then(Value::as_str);
            if current == Some(rev.as_str()) {
                return None;
            }
            let mut next = cur.clone();
            next["metadata"]["annotations"][revision::REVISION] = json!(rev);
            Some(next)
        });
    }
    let _ = registry.write_status_if_changed(&d_storage, &key, |_| status.clone());
    recheck
}
