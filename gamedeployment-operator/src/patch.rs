//! JSON-patch (RFC 6902) building blocks for pod writes.
//!
//! Every pod change the planner decides is a JSON patch that starts with `test` operations on what the decision
//! was based on (the pod's revision label, a container's name at an index). If the pod changed since our cache
//! saw it, the server rejects the patch and the next pass decides again — a precondition that, unlike a
//! resourceVersion, does not fail on the kubelet's unrelated status writes.

use std::collections::BTreeMap;

use common::cached_pod::Pod;
use json_patch::jsonptr::{PointerBuf, Token};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

// JSON pointers are built by `jsonptr` (re-exported by json-patch, so the version kube's patches parse with): a
// label key holds `/` (`app.kubernetes.io/name`), which RFC 6901 escapes as `~1` (and `~` as `~0`).

/// The JSON pointer to the label `key` (`/metadata/labels/app.kubernetes.io~1name`).
pub fn label_path(key: &str) -> String {
    PointerBuf::from_tokens(["metadata", "labels", key]).to_string()
}

/// The JSON pointer to the annotation `key`.
pub fn annotation_path(key: &str) -> String {
    PointerBuf::from_tokens(["metadata", "annotations", key]).to_string()
}

/// Adds empty `labels` / `annotations` maps when the pod has none, so later `add` operations on keys apply.
pub fn ensure_maps(pod: &Pod) -> Vec<Value> {
    let mut ops = Vec::new();
    if pod.metadata.labels.is_none() {
        ops.push(json!({"op": "add", "path": "/metadata/labels", "value": {}}));
    }
    if pod.metadata.annotations.is_none() {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    ops
}

/// `test` that a label has a value (or, for `None`, that the operation fails when it is absent cannot be
/// expressed in RFC 6902, so no test is emitted).
pub fn test_label(key: &str, value: Option<&str>) -> Option<Value> {
    value.map(|v| json!({"op": "test", "path": label_path(key), "value": v}))
}

/// Operations turning the labels (or annotations) `from` into `to`, leaving keys in `keep` alone. Keys present
/// in `from` but not in `to` are removed only if the pod still carries them.
pub fn map_ops(
    base: &str,
    current: Option<&BTreeMap<String, String>>,
    from: &BTreeMap<String, String>,
    to: &BTreeMap<String, String>,
) -> Vec<Value> {
    let mut ops = Vec::new();
    for (k, v) in to {
        if from.get(k) != Some(v) || current.and_then(|c| c.get(k)) != Some(v) {
            ops.push(json!({"op": "add", "path": format!("{base}/{}", Token::new(k).encoded()), "value": v}));
        }
    }
    for k in from.keys() {
        if !to.contains_key(k) && current.is_some_and(|c| c.contains_key(k)) {
            ops.push(json!({"op": "remove", "path": format!("{base}/{}", Token::new(k).encoded())}));
        }
    }
    ops
}

/// Operations on `status.conditions` setting a condition of type `type_` to `status`. The transition time
/// changes only when the status does, as the Kubernetes API conventions ask.
pub fn condition_ops(pod: &Pod, type_: &str, status: &str, reason: Option<&str>, now: Timestamp) -> Vec<Value> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let existing = conditions.and_then(|cs| cs.iter().position(|c| c.type_ == type_));
    let mut condition = json!({"type": type_, "status": status});
    if let Some(reason) = reason {
        condition["reason"] = json!(reason);
    }
    match (conditions, existing) {
        (Some(cs), Some(i)) => {
            let old = &cs[i];
            let since = if old.status == status {
                old.last_transition_time.as_ref().map_or_else(|| now.to_string(), |t| t.0.to_string())
            } else {
                now.to_string()
            };
            condition["lastTransitionTime"] = json!(since);
            vec![
                json!({"op": "test", "path": format!("/status/conditions/{i}/type"), "value": type_}),
                json!({"op": "replace", "path": format!("/status/conditions/{i}"), "value": condition}),
            ]
        }
        (Some(_), None) => {
            condition["lastTransitionTime"] = json!(now.to_string());
            vec![json!({"op": "add", "path": "/status/conditions/-", "value": condition})]
        }
        (None, _) => {
            condition["lastTransitionTime"] = json!(now.to_string());
            if pod.status.is_none() {
                vec![json!({"op": "add", "path": "/status", "value": {"conditions": [condition]}})]
            } else {
                vec![json!({"op": "add", "path": "/status/conditions", "value": [condition]})]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::cached_pod::PodCondition;
    use common::cached_pod::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn apply(doc: &mut Value, ops: Vec<Value>) {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        json_patch::patch(doc, &patch).unwrap();
    }

    #[test]
    fn escapes_pointer_segments() {
        assert_eq!(annotation_path("a/b~c"), "/metadata/annotations/a~1b~0c");
        assert_eq!(label_path("app.kubernetes.io/name"), "/metadata/labels/app.kubernetes.io~1name");
    }

    #[test]
    fn map_ops_add_change_and_remove() {
        let from: BTreeMap<String, String> = [("a".into(), "1".into()), ("b".into(), "1".into())].into();
        let to: BTreeMap<String, String> = [("a".into(), "2".into()), ("c".into(), "3".into())].into();
        let current: BTreeMap<String, String> =
            [("a".into(), "1".into()), ("b".into(), "1".into()), ("mine".into(), "x".into())].into();
        let mut doc = json!({"metadata": {"labels": current}});
        apply(&mut doc, map_ops("/metadata/labels", Some(&current), &from, &to));
        assert_eq!(doc["metadata"]["labels"], json!({"a": "2", "c": "3", "mine": "x"}));
    }

    #[test]
    fn map_ops_escape_keys_with_slash_and_tilde() {
        let key = "example.com/a~b";
        let from: BTreeMap<String, String> = [(key.into(), "1".into())].into();
        let to: BTreeMap<String, String> = [(key.into(), "2".into())].into();
        let ops = map_ops("/metadata/labels", Some(&from), &from, &to);
        assert_eq!(ops[0]["path"], "/metadata/labels/example.com~1a~0b");
        let mut doc = json!({"metadata": {"labels": from}});
        apply(&mut doc, ops);
        assert_eq!(doc["metadata"]["labels"], json!({key: "2"}));
        let mut doc = json!({"metadata": {"labels": to.clone()}});
        apply(&mut doc, map_ops("/metadata/labels", Some(&to), &to, &BTreeMap::new()));
        assert_eq!(doc["metadata"]["labels"], json!({}));
    }

    #[test]
    fn condition_ops_insert_replace_and_keep_transition_time() {
        let now = Timestamp::from_second(100).unwrap();
        let mut pod = Pod::default();
        let mut doc = json!({"metadata": {}});
        apply(&mut doc, condition_ops(&pod, "InPlaceUpdateReady", "True", None, now));
        assert_eq!(doc["status"]["conditions"][0]["status"], "True");

        pod.status = Some(PodStatus {
            conditions: Some(vec![
                PodCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() },
                PodCondition {
                    type_: "InPlaceUpdateReady".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(Timestamp::from_second(5).unwrap())),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        });
        let mut doc = serde_json::to_value(&pod).unwrap();
        apply(&mut doc, condition_ops(&pod, "InPlaceUpdateReady", "False", Some("StartInPlaceUpdate"), now));
        let c = &doc["status"]["conditions"][1];
        assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("StartInPlaceUpdate")));
        assert_eq!(c["lastTransitionTime"], "1970-01-01T00:01:40Z");

        let mut doc = serde_json::to_value(&pod).unwrap();
        apply(&mut doc, condition_ops(&pod, "InPlaceUpdateReady", "True", None, now));
        assert_eq!(doc["status"]["conditions"][1]["lastTransitionTime"], "1970-01-01T00:00:05Z");
    }
}
