//! Events the workload controllers record on their objects (`ScalingReplicaSet`,
//! `SuccessfulCreate`, …), so `kubectl describe deployment` and `kubectl events` read as on a
//! cluster.

use serde_json::{Value, json};

use crate::meta;
use crate::registry::Registry;

/// Records a core/v1 Event about `obj` from `component`. Best effort, as client-go's recorder is.
pub(super) fn record(registry: &Registry, obj: &Value, type_: &str, reason: &str, message: &str, component: &str) {
    let ns = meta::namespace(obj);
    let now = meta::now();
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        // Named as client-go's recorder names them (`generateName: "web."` is not a valid prefix: the name would
        // end in a dot, and kube-apiserver refuses it).
        "metadata": {"name": format!("{}.{:x}", meta::name(obj), k8s_openapi::jiff::Timestamp::now().as_nanosecond()), "namespace": ns},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "name": meta::name(obj), "namespace": ns,
                           "uid": meta::uid(obj), "resourceVersion": meta::resource_version(obj)},
        "reason": reason, "message": message, "type": type_,
        "source": {"component": component},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "reportingComponent": component, "reportingInstance": "",
    });
    if let Err(e) = super::io::create(registry, "", "v1", "events", ns, event, component) {
        tracing::debug!(reason, error = %e.message, "could not record an event");
    }
}
