//! The ReplicaSet controller (`pkg/controller/replicaset`): a ReplicaSet claims the pods its
//! selector matches (adopting orphans, releasing pods whose labels no longer match), creates pods
//! from its template until `spec.replicas` are active, deletes the surplus in the order the real
//! controller ranks them, and reports `replicas`, `fullyLabeledReplicas`, `readyReplicas`,
//! `availableReplicas` (ready for `minReadySeconds`), `terminatingReplicas` and
//! `observedGeneration`.
//!
//! [`plan`] decides from the ReplicaSet, the namespace's pods and the clock; [`sync`] reads them
//! from the registry and carries the plan out. Deleted pods go through the kubelet's graceful
//! path like any other deletion.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::{events, io, pods};
use crate::admission::Admission;
use crate::meta;
use crate::registry::Registry;
use crate::selector::{LabelSelector, object_labels};

/// Annotation by which users rank pods for scale-down (`controller.kubernetes.io/pod-deletion-cost`).
/// The controller's name: its field manager, Event source and ServiceAccount (`kube-system/replicaset-controller`).
const CONTROLLER: &str = "replicaset-controller";

/// How soon a sync whose pod write failed runs again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// What one sync of a ReplicaSet does.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Plan {
    /// Orphans to take as this ReplicaSet's pods (by name).
    pub adopt: Vec<String>,
    /// Pods of this ReplicaSet its selector no longer matches.
    pub release: Vec<String>,
    /// Pods to create from the template.
    pub create: usize,
    /// Pods to delete, in deletion order.
    pub delete: Vec<String>,
    /// The status the observed pods give.
    pub status: Value,
    /// When a ready pod becomes available (`minReadySeconds`), to look again then.
    pub recheck_at: Option<Timestamp>,
}

fn spec_i64(rs: &Value, field: &str) -> i64 {
    meta::lookup(rs, &["spec", field]).and_then(Value::as_i64).unwrap_or(0)
}

/// The selector of a ReplicaSet (or Deployment); an absent or invalid one selects nothing.
pub(super) fn selector(obj: &Value) -> Option<LabelSelector> {
    let sel = meta::lookup(obj, &["spec", "selector"])?;
    LabelSelector::from_label_selector_object(sel).ok().filter(|s| !s.is_empty())
}

/// Decides one sync. `pods` are the namespace's pods.
pub(super) fn plan(rs: &Value, pods: &[Arc<Value>], now: Timestamp) -> Plan {
    let mut out = Plan::default();
    let uid = meta::uid(rs);
    let Some(sel) = selector(rs) else {
        out.status = status_of(rs, &[], 0, now).0;
        return out;
    };
    let rs_deleting = meta::deletion_timestamp(rs).is_some();
    let mut owned: Vec<&Arc<Value>> = Vec::new();
    let mut terminating = 0;
    for pod in pods {
        let matches = sel.matches(&object_labels(pod));
        match pods::controller_uid(pod) {
            Some(c) if c == uid => {
                if !matches {
                    out.release.push(meta::name(pod).to_string());
                } else if pods::is_active(pod) {
                    owned.push(pod);
                } else if meta::deletion_timestamp(pod).is_some() {
                    terminating += 1;
                }
            }
            None if matches && !rs_deleting && meta::deletion_timestamp(pod).is_none() => {
                out.adopt.push(meta::name(pod).to_string());
                if pods::is_active(pod) {
                    owned.push(pod);
                }
            }
            _ => {}
        }
    }
    let (status, recheck_at) = status_of(rs, &owned, terminating, now);
    out.status = status;
    out.recheck_at = recheck_at;
    if rs_deleting {
        return out;
    }
    let want = spec_i64(rs, "replicas").max(0) as usize;
    if owned.len() < want {
        out.create = want - owned.len();
    } else if owned.len() > want {
        out.delete = deletion_order(&owned, now).into_iter().take(owned.len() - want).collect();
    }
    out
}

/// The status of the observed pods (`calculateStatus`): Go's `omitempty` leaves zero counts out.
fn status_of(rs: &Value, active: &[&Arc<Value>], terminating: i64, now: Timestamp) -> (Value, Option<Timestamp>) {
    let template_labels = meta::lookup(rs, &["spec", "template", "metadata", "labels"]).cloned().unwrap_or(json!({}));
    let min_ready = spec_i64(rs, "minReadySeconds");
    let (mut fully, mut ready, mut available) = (0, 0, 0);
    let mut recheck: Option<Timestamp> = None;
    for pod in active {
        let labels = object_labels(pod);
        let fully_labeled = template_labels
            .as_object()
            .is_none_or(|t| t.iter().all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str()));
        if fully_labeled {
            fully += 1;
        }
        if pods::is_ready(pod) {
            ready += 1;
        }
        match pods::availability(pod, min_ready, now) {
            (true, _) => available += 1,
            (false, Some(at)) => recheck = Some(recheck.map_or(at, |r| r.min(at))),
            (false, None) => {}
        }
    }
    let mut status = serde_json::Map::new();
    status.insert("replicas".into(), json!(active.len()));
    for (k, v) in [("fullyLabeledReplicas", fully), ("readyReplicas", ready), ("availableReplicas", available)] {
        if v > 0 {
            status.insert(k.into(), json!(v));
        }
    }
    let generation = meta::generation(rs);
    if generation > 0 {
        status.insert("observedGeneration".into(), json!(generation));
    }
    status.insert("terminatingReplicas".into(), json!(terminating));
    (Value::Object(status), recheck)
}

/// `ActivePodsWithRanks`: the pods to delete first come first — unscheduled, pending, not ready,
/// lower deletion cost, more pods of the set on the same node, ready for less time, more
/// restarts, newer.
fn deletion_order(pods: &[&Arc<Value>], now: Timestamp) -> Vec<String> {
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for p in pods {
        *per_node.entry(pods::node_name(p)).or_default() += 1;
    }
    let phase_rank = |p: &Value| match pods::phase(p) {
        "Pending" | "" => 0,
        "Unknown" => 1,
        _ => 2,
    };
    let cost = |p: &Value| {
        meta::annotations(p)
            .and_then(|a| a.get(DELETION_COST))
            .and_then(Value::as_str)
            .and_then(|c| c.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let mut sorted: Vec<&Arc<Value>> = pods.to_vec();
    sorted.sort_by(|a, b| {
        let assigned = |p: &Value| !pods::node_name(p).is_empty();
        assigned(a)
            .cmp(&assigned(b))
            .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
            .then_with(|| pods::is_ready(a).cmp(&pods::is_ready(b)))
            .then_with(|| cost(a).cmp(&cost(b)))
            .then_with(|| {
                let rank =
                    |p: &Value| if assigned(p) { per_node.get(pods::node_name(p)).copied().unwrap_or(0) } else { 0 };
                rank(b).cmp(&rank(a))
            })
            .then_with(|| match (pods::ready_since(a), pods::ready_since(b)) {
                (Some(x), Some(y)) => y.min(now).cmp(&x.min(now)),
                _ => Ordering::Equal,
            })
            .then_with(|| pods::restarts(b).cmp(&pods::restarts(a)))
            .then_with(|| {
                let created = |p: &Value| meta::meta_str(p, "creationTimestamp").unwrap_or("").to_string();
                created(b).cmp(&created(a))
            })
    });
    sorted.into_iter().map(|p| meta::name(p).to_string()).collect()
}

/// The pod the ReplicaSet creates from its template (`GetPodFromTemplate`).
pub(super) fn pod_from_template(rs: &Value) -> Value {
    let template = meta::lookup(rs, &["spec", "template"]).cloned().unwrap_or(json!({}));
    let mut metadata = serde_json::Map::new();
    metadata.insert("generateName".into(), json!(format!("{}-", meta::name(rs))));
    metadata.insert("namespace".into(), json!(meta::namespace(rs)));
    for field in ["labels", "annotations", "finalizers"] {
        if let Some(v) = template.get("metadata").and_then(|m| m.get(field)) {
            metadata.insert(field.into(), v.clone());
        }
    }
    metadata.insert(
        "ownerReferences".into(),
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": meta::name(rs), "uid": meta::uid(rs),
                "controller": true, "blockOwnerDeletion": true}]),
    );
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec").cloned().unwrap_or(json!({}))})
}

/// Syncs the ReplicaSet `ns/name`; returns when to look again (availability after `minReadySeconds`).
pub(super) async fn sync(registry: &Registry, admission: &Admission, ns: &str, name: &str) -> Option<Duration> {
    let rs_storage = io::storage(registry, "apps", "replicasets")?;
    let rs = registry.store.get(&rs_storage, &format!("{ns}/{name}"))?;
    let pods = io::list(registry, "pods", ns);
    let now = Timestamp::now();
    let plan = plan(&rs, &pods, now);
    let owner = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": meta::uid(&rs),
                       "controller": true, "blockOwnerDeletion": true});
    for pod in &plan.adopt {
        io::set_controller(registry, ns, pod, Some(&owner), meta::uid(&rs));
    }
    for pod in &plan.release {
        io::set_controller(registry, ns, pod, None, meta::uid(&rs));
    }
    let mut created = 0;
    // A write that failed (refused by admission, say) is tried again at a later sync, as the controller's work
    // queue requeues a key whose sync failed.
    let mut failed = false;
    for _ in 0..plan.create {
        let pod = pod_from_template(&rs);
        match io::create_admitted(registry, admission, CONTROLLER, "", "v1", "pods", ns, pod).await {
            Ok(pod) => {
                created += 1;
                events::record(
                    registry,
                    &rs,
                    "Normal",
                    "SuccessfulCreate",
                    &format!("Created pod: {}", meta::name(&pod)),
                    CONTROLLER,
                );
            }
            Err(e) => {
                events::record(
                    registry,
                    &rs,
                    "Warning",
                    "FailedCreate",
                    &format!("Error creating: {}", e.message),
                    CONTROLLER,
                );
                failed = true;
                break;
            }
        }
    }
    for pod in &plan.delete {
        if io::delete_admitted(registry, admission, CONTROLLER, "", "v1", "pods", ns, pod).await {
            events::record(registry, &rs, "Normal", "SuccessfulDelete", &format!("Deleted pod: {pod}"), CONTROLLER);
        } else {
            failed = true;
        }
    }
    let _ = registry.write_status_if_changed(&rs_storage, &format!("{ns}/{name}"), |cur| {
        // Conditions other controllers wrote (none today) are kept.
        let mut s = plan.status.clone();
        if let Some(c) = cur.get("status").and_then(|s| s.get("conditions"))
            && let Value::Object(m) = &mut s
        {
            m.insert("conditions".into(), c.clone());
        }
        s
    });
    let _ = created;
    let recheck = plan.recheck_at.map(|at| Duration::from_millis(at.duration_since(now).as_millis().max(0) as u64));
    match (recheck, failed) {
        (Some(at), true) => Some(at.min(RETRY_AFTER_FAILURE)),
        (None, true) => Some(RETRY_AFTER_FAILURE),
        (recheck, false) => recheck,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(replicas: i64) -> Value {
        json!({"metadata": {"name": "web-abc", "namespace": "default", "uid": "rs-uid", "generation": 2},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    }

    fn pod(name: &str, owner: Option<&str>, node: &str, ready: bool, created: &str) -> Arc<Value> {
        let mut p = json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}, "creationTimestamp": created},
                           "spec": {"nodeName": node},
                           "status": {"phase": if node.is_empty() { "Pending" } else { "Running" },
                                      "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        if let Some(uid) = owner {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": uid, "controller": true}]);
        }
        Arc::new(p)
    }

    fn now() -> Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    #[test]
    fn creates_the_missing_pods_and_adopts_orphans() {
        let pods = vec![
            pod("a", Some("rs-uid"), "n1", true, "2026-01-01T00:00:00Z"),
            pod("orphan", None, "n1", true, "2026-01-01T00:00:00Z"),
        ];
        let p = plan(&rs(4), &pods, now());
        assert_eq!(p.adopt, vec!["orphan"]);
        assert_eq!(p.create, 2);
        assert_eq!(p.status["replicas"], 2);
        assert_eq!(p.status["availableReplicas"], 2);
        assert_eq!(p.status["observedGeneration"], 2);
    }

    #[test]
    fn pods_of_another_controller_are_never_claimed() {
        let mut other = (*pod("gd-0", Some("gamedeployment-uid"), "n1", true, "2026-01-01T00:00:00Z")).clone();
        other["metadata"]["ownerReferences"][0]["kind"] = json!("GameDeployment");
        let p = plan(&rs(0), &[Arc::new(other)], now());
        assert_eq!(
            p,
            Plan {
                status: json!({"replicas": 0, "observedGeneration": 2, "terminatingReplicas": 0}),
                ..Plan::default()
            }
        );
    }

    #[test]
    fn releases_pods_whose_labels_no_longer_match() {
        let mut relabeled = (*pod("a", Some("rs-uid"), "n1", true, "2026-01-01T00:00:00Z")).clone();
        relabeled["metadata"]["labels"]["app"] = json!("debug");
        let p = plan(&rs(1), &[Arc::new(relabeled)], now());
        assert_eq!(p.release, vec!["a"]);
        assert_eq!(p.create, 1);
    }

    #[test]
    fn deletes_unscheduled_then_not_ready_then_newest_first() {
        let pods = vec![
            pod("old-ready", Some("rs-uid"), "n1", true, "2026-01-01T00:00:00Z"),
            pod("new-ready", Some("rs-uid"), "n2", true, "2026-01-01T00:05:00Z"),
            pod("not-ready", Some("rs-uid"), "n3", false, "2026-01-01T00:00:00Z"),
            pod("pending", Some("rs-uid"), "", false, "2026-01-01T00:00:00Z"),
        ];
        assert_eq!(plan(&rs(1), &pods, now()).delete, vec!["pending", "not-ready", "new-ready"]);
    }

    #[test]
    fn terminating_pods_are_replaced_and_counted_apart() {
        let mut going = (*pod("a", Some("rs-uid"), "n1", true, "2026-01-01T00:00:00Z")).clone();
        going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:09:00Z");
        let p = plan(&rs(1), &[Arc::new(going)], now());
        assert_eq!(p.create, 1);
        assert_eq!(p.status["replicas"], 0);
        assert_eq!(p.status["terminatingReplicas"], 1);
    }

    #[test]
    fn min_ready_seconds_delays_availability() {
        let mut r = rs(1);
        r["spec"]["minReadySeconds"] = json!(900);
        let p = plan(&r, &[pod("a", Some("rs-uid"), "n1", true, "2026-01-01T00:00:00Z")], now());
        assert_eq!(p.status.get("availableReplicas"), None);
        assert_eq!(p.status["readyReplicas"], 1);
        assert_eq!(p.recheck_at, Some("2026-01-01T00:15:00Z".parse().unwrap()));
    }

    #[test]
    fn the_template_makes_an_owned_pod() {
        let p = pod_from_template(&rs(1));
        assert_eq!(p["metadata"]["generateName"], "web-abc-");
        assert_eq!(p["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], "rs-uid");
        assert_eq!(p["spec"]["containers"][0]["image"], "nginx");
    }
}
