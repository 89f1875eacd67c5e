//! Field selectors: which fields each kind supports (`GetAttrs`/`ToSelectableFields` of the
//! real registries) and their values on an object.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::resources::{ResourceDef, Special};

fn str_at(obj: &Value, path: &[&str]) -> String {
    match crate::meta::lookup(obj, path) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// The selectable fields of a kind, beyond `metadata.name` and `metadata.namespace`.
pub(crate) fn extra_fields(rd: &ResourceDef) -> Vec<String> {
    let fixed: &[&str] = match rd.special {
        Special::Pod => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        Special::CoreEvent | Special::EventsV1 => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        Special::Secret => &["type"],
        Special::Node => &["spec.unschedulable"],
        Special::Namespace => &["status.phase"],
        Special::ReplicaSet => &["status.replicas"],
        Special::Job => &["status.successful"],
        Special::Service => &["spec.clusterIP", "spec.type"],
        _ => &[],
    };
    let mut out: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
    if let Some(c) = &rd.custom {
        out.extend(c.selectable_fields.iter().cloned());
    }
    out
}

/// Values of every selectable field of an object (in storage form).
pub(crate) fn field_values(rd: &ResourceDef, obj: &Value) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("metadata.name".to_string(), crate::meta::name(obj).to_string());
    if rd.namespaced {
        m.insert("metadata.namespace".to_string(), crate::meta::namespace(obj).to_string());
    }
    for f in extra_fields(rd) {
        let value = match (rd.special, f.as_str()) {
            (Special::Pod, "spec.hostNetwork") => {
                crate::meta::lookup(obj, &["spec", "hostNetwork"]).and_then(Value::as_bool).unwrap_or(false).to_string()
            }
            (Special::Pod, "status.podIPs") => crate::meta::lookup(obj, &["status", "podIPs"])
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|p| p.get("ip").and_then(Value::as_str)).collect::<Vec<_>>().join(","))
                .unwrap_or_default(),
            (Special::Node, "spec.unschedulable") => crate::meta::lookup(obj, &["spec", "unschedulable"])
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
            (Special::CoreEvent | Special::EventsV1, "source") => str_at(obj, &["source", "component"]),
            (Special::CoreEvent | Special::EventsV1, "reportingComponent") => str_at(obj, &["reportingComponent"]),
            _ => {
                let parts: Vec<&str> = f.split('.').collect();
                str_at(obj, &parts)
            }
        };
        m.insert(f, value);
    }
    m
}

/// Checks a selector only uses supported fields (`400 BadRequest` otherwise).
pub(crate) fn check_supported(rd: &ResourceDef, sel: &crate::selector::FieldSelector) -> Result<(), String> {
    let extra = extra_fields(rd);
    for r in &sel.requirements {
        let known = r.field == "metadata.name"
            || (rd.namespaced && r.field == "metadata.namespace")
            || extra.contains(&r.field);
        if !known {
            if rd.is_custom() {
                let mut known: Vec<String> = vec!["\"metadata.name\"".into(), "\"metadata.namespace\"".into()];
                known.extend(extra.iter().map(|f| format!("{f:?}")));
                return Err(format!("{:?} is not a known field selector: only {}", r.field, known.join(", ")));
            }
            return Err(format!("field label not supported: {}", r.field));
        }
    }
    Ok(())
}
