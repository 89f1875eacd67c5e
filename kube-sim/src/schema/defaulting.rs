//! Structural defaulting of custom resources: `default` values from the schema fill in absent
//! fields, and `null`s in non-nullable fields are dropped (or replaced by the default), as the
//! apiextensions-apiserver does on every write and read.

use serde_json::Value;

use super::Cursor;

pub(crate) fn apply_defaults(c: Cursor<'_>, v: &mut Value) {
    let node = c.node();
    match v {
        Value::Object(map) => {
            for (k, child) in &node.properties {
                let cn = c.schema.set.node(*child);
                let absent = match map.get(k) {
                    None => true,
                    Some(Value::Null) => !cn.nullable,
                    Some(_) => false,
                };
                if absent {
                    match &cn.default {
                        Some(d) => {
                            map.insert(k.clone(), d.clone());
                        }
                        None => {
                            if map.get(k).is_some_and(Value::is_null) {
                                map.remove(k);
                            }
                        }
                    }
                }
            }
            for (k, val) in map.iter_mut() {
                let child = node.properties.get(k).copied().or(node.additional);
                if let Some(id) = child {
                    apply_defaults(Cursor { schema: c.schema, id }, val);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = c.items() {
                for it in items.iter_mut() {
                    apply_defaults(item, it);
                }
            }
        }
        _ => {}
    }
}

/// Whether [`apply_defaults`] would change `v` (reads of stored objects, which were defaulted when written, then
/// need no copy); `apply_defaults_changes_exactly_what_defaults_would_change` pins the two together.
pub(crate) fn defaults_would_change(c: Cursor<'_>, v: &Value) -> bool {
    let node = c.node();
    match v {
        Value::Object(map) => {
            for (k, child) in &node.properties {
                let cn = c.schema.set.node(*child);
                let current = map.get(k);
                let absent = match current {
                    None => true,
                    Some(Value::Null) => !cn.nullable,
                    Some(_) => false,
                };
                if absent {
                    match &cn.default {
                        Some(d) if current != Some(d) => return true,
                        Some(_) => {}
                        None if current.is_some() => return true,
                        None => {}
                    }
                }
            }
            map.iter().any(|(k, val)| {
                node.properties
                    .get(k)
                    .copied()
                    .or(node.additional)
                    .is_some_and(|id| defaults_would_change(Cursor { schema: c.schema, id }, val))
            })
        }
        Value::Array(items) => c.items().is_some_and(|item| items.iter().any(|it| defaults_would_change(item, it))),
        _ => false,
    }
}

/// Whether any node reachable from the root declares a default (skips work on reads).
pub(crate) fn has_defaults(c: Cursor<'_>) -> bool {
    fn walk(c: Cursor<'_>, seen: &mut Vec<usize>) -> bool {
        if seen.contains(&c.id) {
            return false;
        }
        seen.push(c.id);
        let n = c.node();
        if n.default.is_some() {
            return true;
        }
        n.properties
            .values()
            .chain(n.additional.iter())
            .chain(n.items.iter())
            .any(|id| walk(Cursor { schema: c.schema, id: *id }, seen))
    }
    walk(c, &mut Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Schema, from_crd_schema};
    use serde_json::json;

    /// A CRD schema whose `spec` (defaulted to `{}`) has defaults at every depth: a scalar, a field of a nested object,
    /// a field of an array's items, and a field without one; `more` adds properties to `spec`.
    fn spec_with_defaults(more: Value) -> Schema {
        let mut spec = json!({
            "replicas": {"type": "integer", "default": 1},
            "strategy": {"type": "object", "properties": {"type": {"type": "string", "default": "RollingUpdate"}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {"w": {"type": "integer", "default": 5}}}},
            "gone": {"type": "string"}
        });
        if let (Value::Object(spec), Value::Object(more)) = (&mut spec, more) {
            spec.extend(more);
        }
        from_crd_schema(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "default": {}, "properties": spec}}
        }))
    }

    #[test]
    fn defaults_fill_absent_and_null_fields_recursively() {
        let s = spec_with_defaults(json!({}));
        let mut obj = json!({"spec": {"strategy": {}, "items": [{}, {"w": 2}], "gone": null}});
        apply_defaults(Cursor::root(&s), &mut obj);
        assert_eq!(
            obj,
            json!({"spec": {"replicas": 1, "strategy": {"type": "RollingUpdate"}, "items": [{"w": 5}, {"w": 2}]}})
        );
        let mut empty = json!({});
        apply_defaults(Cursor::root(&s), &mut empty);
        assert_eq!(empty, json!({"spec": {"replicas": 1}}));
        assert!(has_defaults(Cursor::root(&s)));
    }

    #[test]
    fn apply_defaults_changes_exactly_what_defaults_would_change() {
        let s = spec_with_defaults(json!({
            "maybe": {"type": "string", "nullable": true, "default": "x"},
            "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "integer", "default": 0}}}},
            "metrics": {"type": "array", "default": [], "items": {"type": "string"}}
        }));
        let cases = [
            json!({}),
            json!({"spec": {}}),
            json!({"spec": {"replicas": 1, "metrics": []}}),
            json!({"spec": {"replicas": 3, "metrics": ["a"]}}),
            json!({"spec": {"replicas": 1, "metrics": [], "strategy": {}}}),
            json!({"spec": {"replicas": 1, "metrics": [], "strategy": {"type": "Recreate"}}}),
            json!({"spec": {"replicas": 1, "metrics": [], "items": [{"w": 1}, {}]}}),
            json!({"spec": {"replicas": 1, "metrics": [], "items": [{"w": 1}, {"w": 2}]}}),
            json!({"spec": {"replicas": 1, "metrics": [], "gone": null}}),
            json!({"spec": {"replicas": 1, "metrics": [], "gone": "here"}}),
            json!({"spec": {"replicas": 1, "metrics": [], "maybe": null}}),
            json!({"spec": {"replicas": null, "metrics": []}}),
            json!({"spec": {"replicas": 1, "metrics": [], "labels": {"a": {"v": 2}, "b": {}}}}),
            json!({"spec": {"replicas": 1, "metrics": [], "labels": {"a": {"v": 2}}}}),
            json!({"spec": null}),
            json!({"status": {"anything": null}}),
            json!("not an object"),
        ];
        for case in cases {
            let mut defaulted = case.clone();
            apply_defaults(Cursor::root(&s), &mut defaulted);
            assert_eq!(defaults_would_change(Cursor::root(&s), &case), defaulted != case, "{case}");
            assert!(!defaults_would_change(Cursor::root(&s), &defaulted), "{defaulted}");
        }
    }
}
