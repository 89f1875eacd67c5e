//! Patch types: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch,
//! the latter driven by the list semantics of the kind's schema (merge keys, sets, atomic lists)
//! and its `$patch`, `$retainKeys`, `$deleteFromPrimitiveList` and `$setElementOrder` directives.

use serde_json::{Map, Value};

use crate::schema::{Cursor, ListType};
use crate::status::ApiError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub(crate) fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(PatchType::Apply),
            _ => None,
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

pub(crate) fn json_patch(doc: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    json_patch_owned(doc.clone(), patch)
}

/// [`json_patch()`] onto a document the caller gives up (the write path: one copy of the stored object, not two).
pub(crate) fn json_patch_owned(doc: Value, patch: &[u8]) -> Result<Value, ApiError> {
    let ops: json_patch::Patch = serde_json::from_slice(patch).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut out = doc;
    json_patch::patch(&mut out, &ops).map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?;
    Ok(out)
}

pub(crate) fn merge_patch(doc: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    merge_patch_owned(doc.clone(), patch)
}

pub(crate) fn merge_patch_owned(doc: Value, patch: &[u8]) -> Result<Value, ApiError> {
    let p: Value = serde_json::from_slice(patch).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if !p.is_object() {
        return Err(ApiError::bad_request("json: cannot unmarshal into Go value of type map[string]interface {}"));
    }
    let mut out = doc;
    json_patch::merge(&mut out, &p);
    Ok(out)
}

pub(crate) fn strategic_merge_patch(doc: &Value, patch: &[u8], schema: Option<Cursor<'_>>) -> Result<Value, ApiError> {
    strategic_merge_patch_owned(doc.clone(), patch, schema)
}

pub(crate) fn strategic_merge_patch_owned(
    doc: Value,
    patch: &[u8],
    schema: Option<Cursor<'_>>,
) -> Result<Value, ApiError> {
    let p: Value = serde_json::from_slice(patch).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let Value::Object(pm) = p else {
        return Err(ApiError::bad_request("json: cannot unmarshal into Go value of type map[string]interface {}"));
    };
    let mut out = doc;
    if !out.is_object() {
        out = Value::Object(Map::new());
    }
    merge_map(&mut out, pm, schema).map_err(ApiError::bad_request)?;
    Ok(out)
}

fn child<'a>(c: Option<Cursor<'a>>, field: &str) -> Option<Cursor<'a>> {
    c.and_then(|c| c.field(field))
}

fn merge_map(target: &mut Value, patch: Map<String, Value>, schema: Option<Cursor<'_>>) -> Result<(), String> {
    let mut patch = patch;
    if let Some(directive) = patch.remove("$patch") {
        match directive.as_str() {
            Some("replace") => {
                *target = Value::Object(strip_directives(patch));
                return Ok(());
            }
            Some("delete") => {
                *target = Value::Object(Map::new());
                return Ok(());
            }
            Some("merge") => {}
            other => return Err(format!("Unknown patch type: {}", other.unwrap_or_default())),
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Some(retain) = patch.remove("$retainKeys") {
        let keep: Vec<String> = retain
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        if let Value::Object(t) = target {
            t.retain(|k, _| keep.contains(k));
        }
    }
    let mut orders: Vec<(String, Value)> = Vec::new();
    let mut deletions: Vec<(String, Value)> = Vec::new();
    let keys: Vec<String> = patch.keys().cloned().collect();
    for k in keys {
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            if let Some(v) = patch.remove(&k) {
                orders.push((field.to_string(), v));
            }
        } else if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/")
            && let Some(v) = patch.remove(&k)
        {
            deletions.push((field.to_string(), v));
        }
    }
    let Value::Object(t) = target else { return Ok(()) };
    for (field, values) in deletions {
        if let (Some(Value::Array(list)), Some(del)) = (t.get_mut(&field), values.as_array()) {
            list.retain(|v| !del.contains(v));
        }
    }
    for (k, pv) in patch {
        let cs = child(schema, &k);
        match pv {
            Value::Null => {
                t.remove(&k);
            }
            Value::Object(pm) => {
                let atomic = cs.is_some_and(|c| c.node().map_atomic);
                if atomic {
                    t.insert(k, Value::Object(strip_directives(pm)));
                } else {
                    let entry = t.entry(k).or_insert_with(|| Value::Object(Map::new()));
                    merge_map(entry, pm, cs)?;
                }
            }
            Value::Array(items) => {
                let lt = cs.map(|c| c.list_type()).unwrap_or(ListType::Atomic);
                let cur = t.remove(&k);
                let merged = merge_list(cur, items, lt, cs.and_then(|c| c.items()))?;
                t.insert(k, merged);
            }
            scalar => {
                t.insert(k, scalar);
            }
        }
    }
    for (field, order) in orders {
        if let (Some(Value::Array(list)), Some(order)) = (t.get_mut(&field), order.as_array()) {
            let key = match child(schema, &field).map(|c| c.list_type()) {
                Some(ListType::Map(keys)) => keys.first().cloned(),
                _ => None,
            };
            reorder(list, order, key.as_deref());
        }
    }
    Ok(())
}

fn strip_directives(mut m: Map<String, Value>) -> Map<String, Value> {
    m.retain(|k, _| !k.starts_with('$'));
    m
}

fn reorder(list: &mut Vec<Value>, order: &[Value], key: Option<&str>) {
    let id = |v: &Value| -> Value {
        match key {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let order_ids: Vec<Value> = order
        .iter()
        .map(|o| match key {
            Some(k) => o.get(k).cloned().unwrap_or(Value::Null),
            None => o.clone(),
        })
        .collect();
    let mut ordered: Vec<Value> = Vec::with_capacity(list.len());
    let mut rest: Vec<Value> = Vec::new();
    let mut items: Vec<Option<Value>> = list.drain(..).map(Some).collect();
    for oid in &order_ids {
        if let Some(pos) = items.iter().position(|i| i.as_ref().is_some_and(|i| &id(i) == oid))
            && let Some(v) = items[pos].take()
        {
            ordered.push(v);
        }
    }
    for i in items.into_iter().flatten() {
        rest.push(i);
    }
    ordered.extend(rest);
    *list = ordered;
}

fn merge_list(
    cur: Option<Value>,
    patch: Vec<Value>,
    lt: ListType,
    item_schema: Option<Cursor<'_>>,
) -> Result<Value, String> {
    // A list-level `{"$patch": "replace"}` item replaces the whole list with the other items.
    if patch.iter().any(|i| {
        i.get("$patch").and_then(Value::as_str) == Some("replace") && i.as_object().is_some_and(|m| m.len() == 1)
    }) {
        let items: Vec<Value> = patch.into_iter().filter(|i| i.get("$patch").is_none()).collect();
        return Ok(Value::Array(items));
    }
    let mut current = match cur {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    match lt {
        ListType::Atomic => Ok(Value::Array(patch)),
        ListType::Set => {
            for item in patch {
                if !current.contains(&item) {
                    current.push(item);
                }
            }
            Ok(Value::Array(current))
        }
        ListType::Map(keys) => {
            let Some(key) = keys.first() else { return Ok(Value::Array(patch)) };
            for item in patch {
                let Value::Object(mut im) = item else {
                    return Err(format!("expected a map in the list, got {item}"));
                };
                let Some(kv) = im.get(key).cloned() else {
                    return Err(format!("map: {im:?} does not contain declared merge key: {key}"));
                };
                let pos = current.iter().position(|c| c.get(key) == Some(&kv));
                match im.get("$patch").and_then(Value::as_str) {
                    Some("delete") => {
                        if let Some(p) = pos {
                            current.remove(p);
                        }
                        continue;
                    }
                    Some("replace") => {
                        im.remove("$patch");
                        match pos {
                            Some(p) => current[p] = Value::Object(im),
                            None => current.push(Value::Object(im)),
                        }
                        continue;
                    }
                    _ => {}
                }
                match pos {
                    Some(p) => merge_map(&mut current[p], im, item_schema)?,
                    None => {
                        let mut fresh = Value::Object(Map::new());
                        merge_map(&mut fresh, im, item_schema)?;
                        current.push(fresh);
                    }
                }
            }
            Ok(Value::Array(current))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::from_crd_schema;
    use serde_json::json;

    fn pod_like_schema() -> crate::schema::Schema {
        from_crd_schema(&json!({
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "properties": {"finalizers": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}},
                "spec": {"type": "object", "properties": {
                    "containers": {"type": "array", "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name",
                        "items": {"type": "object", "properties": {"name": {"type": "string"}, "image": {"type": "string"},
                            "args": {"type": "array", "items": {"type": "string"}}}}},
                    "tolerations": {"type": "array", "items": {"type": "object"}}
                }},
                "status": {"type": "object", "properties": {"conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object"}}}}
            }
        }))
    }

    #[test]
    fn strategic_merge_by_key_and_atomic_lists() {
        let s = pod_like_schema();
        let doc = json!({"metadata": {"finalizers": ["a"]}, "spec": {"containers": [{"name": "a", "image": "x", "args": ["1"]}, {"name": "b", "image": "y"}], "tolerations": [{"k": 1}]},
                         "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let patch = json!({"metadata": {"finalizers": ["b"]}, "spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "w"}], "tolerations": [{"k": 2}]},
                           "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "True"}]}});
        let out = strategic_merge_patch(&doc, patch.to_string().as_bytes(), Some(Cursor::root(&s))).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "x", "args": ["1"]}, {"name": "b", "image": "z"}, {"name": "c", "image": "w"}])
        );
        assert_eq!(out["spec"]["tolerations"], json!([{"k": 2}]));
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "X", "status": "True"}])
        );
    }

    #[test]
    fn strategic_merge_directives() {
        let s = pod_like_schema();
        let doc = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
                           "spec": {"containers": [{"name": "a", "$patch": "delete"}], "$setElementOrder/containers": [{"name": "b"}]}});
        let out = strategic_merge_patch(&doc, patch.to_string().as_bytes(), Some(Cursor::root(&s))).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(out["spec"]["containers"], json!([{"name": "b", "image": "y"}]));
        let replace = json!({"spec": {"$patch": "replace", "containers": [{"name": "z", "image": "q"}]}});
        let out = strategic_merge_patch(&doc, replace.to_string().as_bytes(), Some(Cursor::root(&s))).unwrap();
        assert_eq!(out["spec"], json!({"containers": [{"name": "z", "image": "q"}]}));
    }

    #[test]
    fn json_and_merge_patches() {
        let doc = json!({"spec": {"template": {"spec": {"containers": [{"image": "python:3.4"}]}}}});
        let out = json_patch(
            &doc,
            br#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"python:3.5"}]"#,
        )
        .unwrap();
        assert_eq!(out["spec"]["template"]["spec"]["containers"][0]["image"], "python:3.5");
        let err = json_patch(&doc, br#"[{"op":"replace","path":"/spec/nope","value":1}]"#).unwrap_err();
        assert_eq!(err.code, 422);
        let out = merge_patch(&doc, br#"{"spec":{"replicas":3,"template":null}}"#).unwrap();
        assert_eq!(out, json!({"spec": {"replicas": 3}}));
    }
}
