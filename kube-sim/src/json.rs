//! JSON value helpers for the write path, and the field order of encoded objects.

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Map, Value};

/// `a == b`, computed for less. serde_json's map equality looks every key of one map up in the other (a SipHash of
/// the key when `preserve_order` makes the map an `IndexMap`, as the workspace's other crates do); the objects the
/// write path compares (a stored object and its patched copy) nearly always hold their keys in the same order, so
/// keys at the same position are compared directly and only maps whose key order differs fall back to lookups.
/// Objects are compared from their last entry back: an update's change is usually in `status` or `spec`, after the
/// large `metadata`. The result is `a == b` for every pair (`json::tests::eq_agrees_with_partial_eq`).
pub(crate) fn eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => map_eq(a, b),
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| eq(x, y)),
        _ => a == b,
    }
}

/// `a == b` for two maps (see [`eq`]).
pub(crate) fn map_eq(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    if a.len() != b.len() {
        return false;
    }
    for ((ka, va), (kb, vb)) in a.iter().rev().zip(b.iter().rev()) {
        if ka != kb {
            return a.iter().all(|(k, v)| b.get(k).is_some_and(|w| eq(v, w)));
        }
        // The same key in both: unequal values make the maps unequal whatever the other keys are.
        if !eq(va, vb) {
            return false;
        }
    }
    true
}

/// `a == b` for two optional values (see [`eq`]).
pub(crate) fn opt_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Whether objects of `api_version` are Go structs on a real server, encoded `kind` first: the built-in groups (no
/// dot, or `*.k8s.io`: a CRD's group has a dot and needs an approval annotation for `*.k8s.io`). Custom resources
/// are unstructured maps, encoded with sorted keys.
pub(crate) fn is_typed(api_version: &str) -> bool {
    match api_version.rsplit_once('/') {
        None => true,
        Some((group, _)) => !group.contains('.') || group.ends_with(".k8s.io"),
    }
}

/// An object in the real server's order: for built-in kinds `kind`, then `apiVersion`, for custom resources
/// `apiVersion`, then `kind`; then the other fields in the map's order. Only the top level is reordered, while it is
/// written: no copy.
pub(crate) struct WireOrder<'a>(pub &'a Value);

impl Serialize for WireOrder<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(m) = self.0 else { return self.0.serialize(s) };
        let (Some(kind), Some(api_version)) = (m.get("kind"), m.get("apiVersion")) else { return self.0.serialize(s) };
        let mut map = s.serialize_map(Some(m.len()))?;
        if api_version.as_str().is_some_and(is_typed) {
            map.serialize_entry("kind", kind)?;
            map.serialize_entry("apiVersion", api_version)?;
        } else {
            // Sorted, as Go writes a map (the rest of the object keeps the map's order).
            map.serialize_entry("apiVersion", api_version)?;
            map.serialize_entry("kind", kind)?;
        }
        for (k, v) in m {
            if k != "kind" && k != "apiVersion" {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reordered(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().rev().map(|(k, v)| (k.clone(), reordered(v))).collect()),
            Value::Array(a) => Value::Array(a.iter().map(reordered).collect()),
            other => other.clone(),
        }
    }

    #[test]
    fn wire_order_puts_type_meta_first_as_go_does() {
        let encode = |v: Value| serde_json::to_string(&WireOrder(&reordered(&v))).unwrap();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert!(encode(pod).starts_with(r#"{"kind":"Pod","apiVersion":"v1","#));
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
        assert_eq!(encode(deployment), r#"{"kind":"Deployment","apiVersion":"apps/v1"}"#);
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"});
        assert!(encode(crd).starts_with(r#"{"kind":"#));
        let custom = json!({"kind": "GameDeployment", "apiVersion": "tkex.tencent.com/v1alpha1", "spec": {}});
        assert!(encode(custom).starts_with(r#"{"apiVersion":"tkex.tencent.com/v1alpha1","kind":"GameDeployment","#));
        assert_eq!(encode(json!({"a": 1})), r#"{"a":1}"#);
    }

    #[test]
    fn eq_agrees_with_partial_eq() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"containers": [{"name": "c", "image": "game:v1", "ports": [{"containerPort": 80}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": null}
        });
        let mut variants = vec![
            pod.clone(),
            reordered(&pod),
            json!(null),
            json!({}),
            json!([]),
            json!({"apiVersion": "v1"}),
            json!(1),
            json!(1.0),
            json!("1"),
        ];
        let edits: Vec<fn(&mut Value)> = vec![
            |v| v["spec"]["containers"][0]["image"] = json!("game:v2"),
            |v| v["status"]["phase"] = json!("Pending"),
            |v| v["status"]["podIP"] = json!("10.0.0.1"),
            |v| v["metadata"]["labels"]["c"] = json!("3"),
            |v| {
                v["metadata"]["labels"].as_object_mut().unwrap().remove("a");
            },
            |v| {
                // Same keys and values, another order.
                let labels = v["metadata"]["labels"].as_object_mut().unwrap();
                let a = labels.remove("a").unwrap();
                labels.insert("a".into(), a);
            },
            |v| {
                // Same length, one key renamed.
                let labels = v["metadata"]["labels"].as_object_mut().unwrap();
                let b = labels.remove("b").unwrap();
                labels.insert("z".into(), b);
            },
            |v| v["spec"]["containers"].as_array_mut().unwrap().push(json!({"name": "d"})),
            |v| v["status"]["conditions"][0]["status"] = json!(true),
            |v| v["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(80.0),
        ];
        for edit in edits {
            let mut v = pod.clone();
            edit(&mut v);
            variants.push(reordered(&v));
            variants.push(v);
        }
        for a in &variants {
            for b in &variants {
                assert_eq!(eq(a, b), a == b, "{a} vs {b}");
                assert_eq!(opt_eq(Some(a), Some(b)), a == b);
            }
            assert!(!opt_eq(Some(a), None));
        }
        assert!(opt_eq(None, None));
    }
}
