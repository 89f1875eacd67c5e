//! Structural pruning: fields a custom resource's schema does not declare are dropped (and
//! reported, for `fieldValidation=Strict|Warn`), honouring `x-kubernetes-preserve-unknown-fields`
//! and `x-kubernetes-embedded-resource`.

use serde_json::Value;

use super::Cursor;

/// The fields of `ObjectMeta`; anything else under `metadata` is unknown.
pub(crate) const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// Prunes a whole custom resource; returns the paths of the removed fields.
pub fn prune_object(root: Cursor<'_>, obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    prune(root, obj, "", true, &mut unknown);
    unknown
}

fn prune_metadata(meta: &mut Value, path: &str, unknown: &mut Vec<String>) {
    if let Value::Object(m) = meta {
        let extra: Vec<String> = m.keys().filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str())).cloned().collect();
        for k in extra {
            m.remove(&k);
            unknown.push(child_path(path, &k));
        }
    }
}

fn prune(c: Cursor<'_>, v: &mut Value, path: &str, resource_root: bool, unknown: &mut Vec<String>) {
    let node = c.node();
    let embedded = resource_root || node.embedded_resource;
    match v {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let p = child_path(path, &k);
                if embedded && (k == "apiVersion" || k == "kind") && !node.properties.contains_key(&k) {
                    continue;
                }
                if embedded && k == "metadata" {
                    if let Some(m) = map.get_mut("metadata") {
                        prune_metadata(m, &p, unknown);
                    }
                    continue;
                }
                if let Some(child) = c.schema.set.node(c.id).properties.get(&k).copied().or(node.additional) {
                    if let Some(val) = map.get_mut(&k) {
                        prune(Cursor { schema: c.schema, id: child }, val, &p, false, unknown);
                    }
                } else if !(node.preserve_unknown || node.additional_any) {
                    map.remove(&k);
                    unknown.push(p);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = c.items() {
                for (i, it) in items.iter_mut().enumerate() {
                    prune(item, it, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::from_crd_schema;
    use serde_json::json;

    #[test]
    fn prunes_unknown_and_keeps_preserved_and_embedded() {
        let s = from_crd_schema(&json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "replicas": {"type": "integer"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
                }}
            }
        }));
        let mut obj = json!({
            "apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "a", "bogus": 1},
            "spec": {"replicas": 1, "extra": true, "free": {"any": {"thing": 1}},
                     "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": "b"}}, "spec": {"x": 1}, "junk": 2}},
            "status": {"x": 1}
        });
        let unknown = prune_object(crate::schema::Cursor::root(&s), &mut obj);
        assert_eq!(unknown, vec!["metadata.bogus", "spec.extra", "spec.template.junk", "status"]);
        assert_eq!(obj["spec"]["free"]["any"]["thing"], 1);
        assert_eq!(obj["spec"]["template"]["kind"], "Pod");
        assert_eq!(obj["spec"]["template"]["spec"]["x"], 1);
    }
}
