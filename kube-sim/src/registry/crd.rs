//! CustomResourceDefinition validation (the structural-schema and naming rules of the
//! apiextensions-apiserver) and the conditions its controllers set once names are accepted.

use serde_json::{Value, json};

use crate::status::FieldError;

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    crate::meta::lookup(v, path).and_then(Value::as_str).unwrap_or("")
}

/// `ValidateCustomResourceDefinition` (the rules clients trip over).
pub(crate) fn validate(crd: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let group = s(crd, &["spec", "group"]);
    let plural = s(crd, &["spec", "names", "plural"]);
    let kind = s(crd, &["spec", "names", "kind"]);
    let name = crate::meta::name(crd);
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else {
        for e in crate::validation::dns1123_subdomain_errors(group) {
            errs.push(FieldError::invalid("spec.group", json!(group), e));
        }
        if !group.contains('.') {
            errs.push(FieldError::invalid("spec.group", json!(group), "should be a domain with at least one dot"));
        }
    }
    if plural.is_empty() {
        errs.push(FieldError::required("spec.names.plural", ""));
    } else {
        for e in crate::validation::dns1123_label_errors(plural) {
            errs.push(FieldError::invalid("spec.names.plural", json!(plural), e));
        }
    }
    if kind.is_empty() {
        errs.push(FieldError::required("spec.names.kind", ""));
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid("metadata.name", json!(name), "must be spec.names.plural+\".\"+spec.group"));
    }
    let scope = s(crd, &["spec", "scope"]);
    if scope != "Cluster" && scope != "Namespaced" {
        errs.push(FieldError::not_supported("spec.scope", json!(scope), &["Cluster".into(), "Namespaced".into()]));
    }
    let versions = crd.get("spec").and_then(|s| s.get("versions")).and_then(Value::as_array);
    match versions {
        None => errs.push(FieldError::required("spec.versions", "")),
        Some(vs) if vs.is_empty() => errs.push(FieldError::required("spec.versions", "")),
        Some(vs) => {
            let storage = vs.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true)).count();
            if storage != 1 {
                errs.push(FieldError::invalid(
                    "spec.versions",
                    Value::Array(vs.clone()),
                    "must have exactly one version marked as storage version",
                ));
            }
            let mut names: Vec<&str> = Vec::new();
            for (i, v) in vs.iter().enumerate() {
                let vname = s(v, &["name"]);
                if vname.is_empty() {
                    errs.push(FieldError::required(format!("spec.versions[{i}].name"), ""));
                } else if names.contains(&vname) {
                    errs.push(FieldError::invalid(format!("spec.versions[{i}].name"), json!(vname), "must be unique"));
                }
                names.push(vname);
                match v.get("schema").and_then(|s| s.get("openAPIV3Schema")) {
                    None => errs.push(FieldError::required(
                        format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        "schemas are required",
                    )),
                    Some(schema) => {
                        let base = format!("spec.versions[{i}].schema.openAPIV3Schema");
                        if schema.get("type").and_then(Value::as_str) != Some("object") {
                            if schema.get("type").is_none() {
                                errs.push(FieldError::required(
                                    format!("{base}.type"),
                                    "must not be empty at the root",
                                ));
                            } else {
                                errs.push(FieldError::invalid(
                                    format!("{base}.type"),
                                    schema["type"].clone(),
                                    "must be object at the root",
                                ));
                            }
                        }
                        structural_errors(schema, &base, true, &mut errs);
                    }
                }
                if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
                    for (j, c) in cols.iter().enumerate() {
                        let p = format!("spec.versions[{i}].additionalPrinterColumns[{j}]");
                        if s(c, &["name"]).is_empty() {
                            errs.push(FieldError::required(format!("{p}.name"), ""));
                        }
                        let t = s(c, &["type"]);
                        if !["integer", "number", "string", "boolean", "date"].contains(&t) {
                            errs.push(FieldError::not_supported(
                                format!("{p}.type"),
                                json!(t),
                                &["boolean".into(), "date".into(), "integer".into(), "number".into(), "string".into()],
                            ));
                        }
                        if s(c, &["jsonPath"]).is_empty() {
                            errs.push(FieldError::required(format!("{p}.jsonPath"), ""));
                        }
                    }
                }
                if let Some(scale) = v.get("subresources").and_then(|s| s.get("scale")) {
                    let p = format!("spec.versions[{i}].subresources.scale");
                    for f in ["specReplicasPath", "statusReplicasPath"] {
                        let path = s(scale, &[f]);
                        if path.is_empty() {
                            errs.push(FieldError::required(format!("{p}.{f}"), ""));
                        } else if !path.starts_with('.') {
                            errs.push(FieldError::invalid(
                                format!("{p}.{f}"),
                                json!(path),
                                "should be a json path under .spec or .status",
                            ));
                        }
                    }
                }
            }
        }
    }
    errs
}

/// Every specified field needs a type unless it preserves unknown fields or is int-or-string.
fn structural_errors(node: &Value, path: &str, root: bool, errs: &mut Vec<FieldError>) {
    let Some(m) = node.as_object() else { return };
    let typeless_ok = m.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true)
        || m.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    if !root && !typeless_ok && m.get("type").is_none() {
        errs.push(FieldError::required(format!("{path}.type"), "must not be empty for specified object fields"));
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            structural_errors(v, &format!("{path}.properties[{k}]"), false, errs);
        }
    }
    if let Some(items) = m.get("items") {
        structural_errors(items, &format!("{path}.items"), false, errs);
    }
    if let Some(ap @ Value::Object(_)) = m.get("additionalProperties") {
        structural_errors(ap, &format!("{path}.additionalProperties"), false, errs);
    }
}

/// Validation of a CRD update beyond the create rules.
pub(crate) fn validate_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errs = validate(new);
    for (path, field) in [(&["spec", "scope"][..], "spec.scope"), (&["spec", "group"][..], "spec.group")] {
        if s(old, path) != s(new, path) {
            errs.push(FieldError::invalid(field, json!(s(new, path)), "field is immutable"));
        }
    }
    errs
}

/// The name of the CRD's storage version (its `spec.versions` entry with `storage: true`): the version its objects
/// are stored in, which `status.storedVersions` records.
pub(crate) fn storage_version(crd: &Value) -> Option<&Value> {
    let versions = crd.get("spec")?.get("versions")?.as_array()?;
    versions.iter().find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))?.get("name")
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "lastTransitionTime": crate::meta::now(), "reason": reason, "message": message})
}

/// The status the naming and establishing controllers converge to. `conflict` is the reason
/// names were refused, if any.
pub(crate) fn accepted_status(crd: &Value, conflict: Option<&str>) -> Value {
    let mut status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
    let names = crd.get("spec").and_then(|s| s.get("names")).cloned().unwrap_or_else(|| json!({}));
    let mut accepted = names.clone();
    if let Value::Object(a) = &mut accepted {
        let kind = names.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        a.entry("singular").or_insert_with(|| json!(kind.to_lowercase()));
        a.entry("listKind").or_insert_with(|| json!(format!("{kind}List")));
    }
    let existing: Vec<Value> = status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let keep_time = |c: Value| -> Value {
        let prev = existing.iter().find(|e| e.get("type") == c.get("type"));
        match prev {
            Some(p) if p.get("status") == c.get("status") => {
                let mut c = c;
                if let (Value::Object(m), Some(t)) = (&mut c, p.get("lastTransitionTime")) {
                    m.insert("lastTransitionTime".into(), t.clone());
                }
                c
            }
            _ => c,
        }
    };
    let mut conditions = Vec::new();
    match conflict {
        None => {
            conditions.push(keep_time(condition("NamesAccepted", "True", "NoConflicts", "no conflicts found")));
            conditions.push(keep_time(condition(
                "Established",
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            )));
        }
        Some(reason) => {
            conditions.push(keep_time(condition("NamesAccepted", "False", "MultipleNamesNotAllowed", reason)));
            conditions.push(keep_time(condition("Established", "False", "NotAccepted", "not all names are accepted")));
        }
    }
    if crate::meta::deletion_timestamp(crd).is_some() {
        conditions.push(keep_time(condition(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        )));
    }
    if let Value::Object(m) = &mut status {
        if conflict.is_none() {
            m.insert("acceptedNames".into(), accepted);
        }
        m.insert("conditions".into(), Value::Array(conditions));
        let storage = storage_version(crd).cloned();
        let stored = m.entry("storedVersions").or_insert_with(|| json!([]));
        if let (Value::Array(sv), Some(st)) = (stored, storage)
            && !sv.contains(&st)
        {
            sv.push(st);
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_rules() {
        let crd = json!({"metadata": {"name": "foos.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "foos", "kind": "Foo"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"properties": {}}}}}}]}});
        let msgs: Vec<String> = validate(&crd).iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"
            ]
        );
        let st = accepted_status(&crd, None);
        assert_eq!(st["acceptedNames"]["listKind"], "FooList");
        assert_eq!(st["conditions"][1]["type"], "Established");
        assert_eq!(st["storedVersions"], json!(["v1"]));
    }
}
