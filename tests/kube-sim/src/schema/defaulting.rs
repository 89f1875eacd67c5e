//! Structural defaulting of custom resources: `default` values from the schema fill in absent
//! fields, and `null`s in non-nullable fields are dropped (or replaced by the default), as the
//! apiextensions-apiserver does on every write and read.

use serde_json::Value;

use super::Cursor;

pub fn apply_defaults(c: Cursor<'_>, v: &mut Value) {
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

/// Whether any node reachable from the root declares a default (skips work on reads).
pub fn has_defaults(c: Cursor<'_>) -> bool {
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
    use crate::schema::from_crd_schema;
    use serde_json::json;

    #[test]
    fn defaults_fill_absent_and_null_fields_recursively() {
        let s = from_crd_schema(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1},
                "strategy": {"type": "object", "properties": {"type": {"type": "string", "default": "RollingUpdate"}}},
                "items": {"type": "array", "items": {"type": "object", "properties": {"w": {"type": "integer", "default": 5}}}},
                "gone": {"type": "string"}
            }}}
        }));
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
}
