//! OpenAPI v3 schema validation of custom resources with the field errors (and wording) of
//! kube-openapi's validator as the apiextensions-apiserver reports them in `422 Invalid`.

use serde_json::{Value, json};

use super::Cursor;
use crate::status::{FieldError, FieldErrorType};

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, v: &Value) -> bool {
    match expected {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        _ => true,
    }
}

fn fmt_num(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 { format!("{}", f as i64) } else { format!("{f}") }
}

/// Validates a custom resource against its schema (the root's apiVersion/kind/metadata are
/// validated elsewhere, as the real server does).
pub fn validate_object(root: Cursor<'_>, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let node = root.node();
    if let Value::Object(map) = obj {
        for req in &node.required {
            if !map.contains_key(req) && req != "metadata" && req != "apiVersion" && req != "kind" {
                errs.push(FieldError::required(req.clone(), ""));
            }
        }
        for (k, v) in map {
            if k == "metadata" || k == "apiVersion" || k == "kind" {
                continue;
            }
            if let Some(id) = node.properties.get(k).copied().or(node.additional) {
                validate(Cursor { schema: root.schema, id }, v, k, &mut errs);
            }
        }
    }
    errs
}

/// `minItems`/`maxItems` of an array or `minProperties`/`maxProperties` of an object (`what`: items or properties)
/// against its `len`, worded as the apiserver's validator words them: too many is `TooMany` with the count and
/// "must have at most N items" for both, too few `Invalid` with the value.
fn check_size(
    v: &Value,
    path: &str,
    len: usize,
    (min, max): (Option<u64>, Option<u64>),
    what: &str,
    errs: &mut Vec<FieldError>,
) {
    if let Some(max) = max
        && len as u64 > max
    {
        errs.push(FieldError::new(
            FieldErrorType::TooMany,
            path,
            Some(json!(len)),
            format!("must have at most {max} items"),
        ));
    }
    if let Some(min) = min
        && (len as u64) < min
    {
        errs.push(FieldError::invalid(path, v.clone(), format!("{path} in body should have at least {min} {what}")));
    }
}

pub(crate) fn validate(c: Cursor<'_>, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let node = c.node();
    if v.is_null() {
        if node.nullable || node.type_.is_none() {
            return;
        }
        errs.push(FieldError::new(
            FieldErrorType::TypeInvalid,
            path,
            Some(json!("null")),
            format!("{path} in body must be of type {}: \"null\"", node.type_.as_deref().unwrap_or("")),
        ));
        return;
    }
    if node.int_or_string {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            errs.push(FieldError::new(
                FieldErrorType::TypeInvalid,
                path,
                Some(json!(json_type(v))),
                format!("{path} in body must be of type integer,string: {:?}", json_type(v)),
            ));
            return;
        }
    } else if let Some(t) = &node.type_
        && !type_matches(t, v)
    {
        errs.push(FieldError::new(
            FieldErrorType::TypeInvalid,
            path,
            Some(json!(json_type(v))),
            format!("{path} in body must be of type {t}: {:?}", json_type(v)),
        ));
        return;
    }
    if !node.enum_values.is_empty() && !node.enum_values.contains(v) {
        let supported: Vec<String> =
            node.enum_values.iter().map(|e| e.as_str().map(str::to_string).unwrap_or_else(|| e.to_string())).collect();
        errs.push(FieldError::not_supported(path, v.clone(), &supported));
    }
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if let Some(min) = node.minimum {
                if node.exclusive_minimum && f <= min {
                    errs.push(FieldError::invalid(
                        path,
                        v.clone(),
                        format!("{path} in body should be greater than {}", fmt_num(min)),
                    ));
                } else if !node.exclusive_minimum && f < min {
                    errs.push(FieldError::invalid(
                        path,
                        v.clone(),
                        format!("{path} in body should be greater than or equal to {}", fmt_num(min)),
                    ));
                }
            }
            if let Some(max) = node.maximum {
                if node.exclusive_maximum && f >= max {
                    errs.push(FieldError::invalid(
                        path,
                        v.clone(),
                        format!("{path} in body should be less than {}", fmt_num(max)),
                    ));
                } else if !node.exclusive_maximum && f > max {
                    errs.push(FieldError::invalid(
                        path,
                        v.clone(),
                        format!("{path} in body should be less than or equal to {}", fmt_num(max)),
                    ));
                }
            }
            if let Some(m) = node.multiple_of
                && m != 0.0
                && (f / m).fract() != 0.0
            {
                errs.push(FieldError::invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should be a multiple of {}", fmt_num(m)),
                ));
            }
            match node.format.as_deref() {
                Some("int32") if n.as_i64().is_some_and(|i| i < i32::MIN as i64 || i > i32::MAX as i64) => {
                    errs.push(FieldError::invalid(
                        path,
                        v.clone(),
                        format!("{path} in body must be of type int32: {:?}", n.to_string()),
                    ));
                }
                _ => {}
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = node.max_length
                && len > max
            {
                errs.push(FieldError::new(
                    FieldErrorType::TooLong,
                    path,
                    Some(v.clone()),
                    format!("may not be more than {max} bytes"),
                ));
            }
            if let Some(min) = node.min_length
                && len < min
            {
                errs.push(FieldError::invalid(
                    path,
                    v.clone(),
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some((p, Some(re))) = &node.pattern
                && !re.is_match(s)
            {
                errs.push(FieldError::invalid(path, v.clone(), format!("{path} in body should match '{p}'")));
            }
            if let Some(f) = node.format.as_deref()
                && !format_ok(f, s)
            {
                errs.push(FieldError::invalid(path, v.clone(), format!("{path} in body must be of type {f}: {s:?}")));
            }
        }
        Value::Array(items) => {
            check_size(v, path, items.len(), (node.min_items, node.max_items), "items", errs);
            if node.unique_items || matches!(node.list_type, Some(super::ListType::Set)) {
                for (i, it) in items.iter().enumerate() {
                    if items[..i].contains(it) {
                        errs.push(FieldError::duplicate(format!("{path}[{i}]"), it.clone()));
                    }
                }
            }
            if let Some(super::ListType::Map(keys)) = &node.list_type {
                let mut seen: Vec<Vec<Value>> = Vec::new();
                for (i, it) in items.iter().enumerate() {
                    let k: Vec<Value> = keys.iter().map(|key| it.get(key).cloned().unwrap_or(Value::Null)).collect();
                    if seen.contains(&k) {
                        let dup: serde_json::Map<String, Value> = keys.iter().cloned().zip(k.iter().cloned()).collect();
                        errs.push(FieldError::duplicate(format!("{path}[{i}]"), Value::Object(dup)));
                    }
                    seen.push(k);
                }
            }
            if let Some(item) = c.items() {
                for (i, it) in items.iter().enumerate() {
                    validate(item, it, &format!("{path}[{i}]"), errs);
                }
            }
        }
        Value::Object(map) => {
            check_size(v, path, map.len(), (node.min_properties, node.max_properties), "properties", errs);
            for req in &node.required {
                if !map.contains_key(req) {
                    errs.push(FieldError::required(child_path(path, req), ""));
                }
            }
            for (k, val) in map {
                if let Some(id) = node.properties.get(k).copied().or(node.additional) {
                    validate(Cursor { schema: c.schema, id }, val, &child_path(path, k), errs);
                }
            }
        }
        _ => {}
    }
    for id in &node.all_of {
        validate(Cursor { schema: c.schema, id: *id }, v, path, errs);
    }
    if !node.any_of.is_empty() {
        let ok = node.any_of.iter().any(|id| {
            let mut e = Vec::new();
            validate(Cursor { schema: c.schema, id: *id }, v, path, &mut e);
            e.is_empty()
        });
        if !ok {
            errs.push(FieldError::invalid(
                path,
                v.clone(),
                format!("{path} in body must validate at least one schema (anyOf)"),
            ));
        }
    }
    if !node.one_of.is_empty() {
        let passing = node
            .one_of
            .iter()
            .filter(|id| {
                let mut e = Vec::new();
                validate(Cursor { schema: c.schema, id: **id }, v, path, &mut e);
                e.is_empty()
            })
            .count();
        if passing != 1 {
            errs.push(FieldError::invalid(
                path,
                v.clone(),
                format!("{path} in body must validate one and only one schema (oneOf)"),
            ));
        }
    }
    if let Some(not) = node.not {
        let mut e = Vec::new();
        validate(Cursor { schema: c.schema, id: not }, v, path, &mut e);
        if e.is_empty() {
            errs.push(FieldError::invalid(
                path,
                v.clone(),
                format!("{path} in body must not validate the schema (not)"),
            ));
        }
    }
}

fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" => s.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
        "date" => s.parse::<k8s_openapi::jiff::civil::Date>().is_ok(),
        "uuid" => {
            s.len() == 36
                && s.chars()
                    .enumerate()
                    .all(|(i, c)| if [8, 13, 18, 23].contains(&i) { c == '-' } else { c.is_ascii_hexdigit() })
        }
        "byte" => data_encoding::BASE64.decode(s.as_bytes()).is_ok(),
        "int-or-string" => true,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::from_crd_schema;

    /// `format: byte` is Go's `base64.StdEncoding`: the standard alphabet, padded.
    #[test]
    fn byte_format_is_standard_padded_base64() {
        assert!(format_ok("byte", "Pz8+") && format_ok("byte", "YQ==") && format_ok("byte", ""));
        assert!(!format_ok("byte", "Pz8-"), "the URL-safe alphabet");
        assert!(!format_ok("byte", "YQ"), "no padding");
    }

    fn schema() -> crate::schema::Schema {
        from_crd_schema(&json!({
            "type": "object",
            "required": ["spec"],
            "properties": {"spec": {"type": "object", "required": ["template"], "properties": {
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10},
                "type": {"type": "string", "enum": ["RollingUpdate", "InplaceUpdate"]},
                "partition": {"x-kubernetes-int-or-string": true},
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                "template": {"type": "object"}
            }}}
        }))
    }

    fn messages(obj: Value) -> Vec<String> {
        let s = schema();
        validate_object(Cursor::root(&s), &obj).iter().map(|e| e.to_string()).collect()
    }

    /// Array and object sizes are worded alike: too many as `TooMany` "items" for both, too few in their own noun.
    #[test]
    fn sizes_of_arrays_and_objects_are_checked_alike() {
        let s = from_crd_schema(&json!({"type": "object", "properties": {
            "ports": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "integer"}},
            "labels": {"type": "object", "minProperties": 1, "maxProperties": 2, "additionalProperties": {"type": "string"}}
        }}));
        let errors = |obj: Value| -> Vec<(FieldErrorType, String, String)> {
            let mut errs: Vec<_> =
                validate_object(Cursor::root(&s), &obj).into_iter().map(|e| (e.kind, e.field, e.detail)).collect();
            errs.sort_by(|a, b| a.1.cmp(&b.1));
            errs
        };
        let error = |kind: FieldErrorType, field: &str, detail: &str| (kind, field.to_string(), detail.to_string());
        assert_eq!(
            errors(json!({"ports": [1, 2, 3], "labels": {"a": "1", "b": "2", "c": "3"}})),
            [
                error(FieldErrorType::TooMany, "labels", "must have at most 2 items"),
                error(FieldErrorType::TooMany, "ports", "must have at most 2 items"),
            ]
        );
        assert_eq!(
            errors(json!({"ports": [], "labels": {}})),
            [
                error(FieldErrorType::Invalid, "labels", "labels in body should have at least 1 properties"),
                error(FieldErrorType::Invalid, "ports", "ports in body should have at least 1 items"),
            ]
        );
        assert!(errors(json!({"ports": [1], "labels": {"a": "1"}})).is_empty());
    }

    #[test]
    fn reports_fields_like_kube_openapi() {
        assert_eq!(
            messages(json!({"spec": {"replicas": "x", "template": {}}})),
            vec!["spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""]
        );
        assert_eq!(
            messages(json!({"spec": {"replicas": -1, "template": {}}})),
            vec!["spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"]
        );
        assert_eq!(
            messages(json!({"spec": {"type": "Foo", "template": {}}})),
            vec!["spec.type: Unsupported value: \"Foo\": supported values: \"RollingUpdate\", \"InplaceUpdate\""]
        );
        assert_eq!(messages(json!({"spec": {}})), vec!["spec.template: Required value"]);
        assert_eq!(messages(json!({})), vec!["spec: Required value"]);
        assert_eq!(
            messages(json!({"spec": {"partition": true, "template": {}}})),
            vec![
                "spec.partition: Invalid value: \"boolean\": spec.partition in body must be of type integer,string: \"boolean\""
            ]
        );
        assert!(messages(json!({"spec": {"partition": "10%", "template": {}}})).is_empty());
        assert_eq!(
            messages(json!({"spec": {"name": "ABC", "template": {}}})),
            vec!["spec.name: Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'"]
        );
    }
}
