//! What the workload controllers read from a pod: its controller, whether it is active, ready and
//! available (`k8s.io/kubernetes/pkg/api/v1/pod` and `pkg/controller`'s helpers).

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::meta;

/// The owner reference marked `controller: true`, if any.
pub(super) fn controller_ref(obj: &Value) -> Option<&Value> {
    meta::owner_references(obj).iter().find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
}

/// The UID of the object's controller.
pub(super) fn controller_uid(obj: &Value) -> Option<&str> {
    controller_ref(obj).and_then(|o| o.get("uid")).and_then(Value::as_str)
}

/// `(kind, name)` of the object's controller.
pub(super) fn controller_kind_name(obj: &Value) -> Option<(&str, &str)> {
    let o = controller_ref(obj)?;
    Some((o.get("kind")?.as_str()?, o.get("name")?.as_str()?))
}

pub(super) fn phase(pod: &Value) -> &str {
    meta::lookup(pod, &["status", "phase"]).and_then(Value::as_str).unwrap_or("")
}

/// `controller.IsPodActive`: not finished and not being deleted.
pub(super) fn is_active(pod: &Value) -> bool {
    meta::deletion_timestamp(pod).is_none() && !matches!(phase(pod), "Succeeded" | "Failed")
}

fn ready_condition(pod: &Value) -> Option<&Value> {
    meta::lookup(pod, &["status", "conditions"])
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready")))
}

/// `podutil.IsPodReady`: the `Ready` condition is `True`.
pub(super) fn is_ready(pod: &Value) -> bool {
    ready_condition(pod).and_then(|c| c.get("status")).and_then(Value::as_str) == Some("True")
}

/// When the pod last became ready (the `Ready` condition's `lastTransitionTime`).
pub(super) fn ready_since(pod: &Value) -> Option<Timestamp> {
    if !is_ready(pod) {
        return None;
    }
    ready_condition(pod).and_then(|c| c.get("lastTransitionTime")).and_then(Value::as_str).and_then(meta::parse_time)
}

/// `podutil.IsPodAvailable`: ready for at least `min_ready_seconds`. Also returns when a ready
/// pod that is not available yet will become so (for the caller to look again then).
pub(super) fn availability(pod: &Value, min_ready_seconds: i64, now: Timestamp) -> (bool, Option<Timestamp>) {
    if !is_ready(pod) {
        return (false, None);
    }
    if min_ready_seconds <= 0 {
        return (true, None);
    }
    let Some(since) = ready_since(pod) else { return (true, None) };
    let Ok(at) = since.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(min_ready_seconds)) else {
        return (true, None);
    };
    if at <= now { (true, None) } else { (false, Some(at)) }
}

pub(super) fn restarts(pod: &Value) -> i64 {
    meta::lookup(pod, &["status", "containerStatuses"])
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter_map(|c| c.get("restartCount").and_then(Value::as_i64)).sum())
        .unwrap_or(0)
}

pub(super) fn node_name(pod: &Value) -> &str {
    meta::lookup(pod, &["spec", "nodeName"]).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn pod_ip(pod: &Value) -> Option<&str> {
    meta::lookup(pod, &["status", "podIP"]).and_then(Value::as_str).filter(|s| !s.is_empty())
}
