//! Name, label and `ObjectMeta` validation with the messages of
//! `k8s.io/apimachinery/pkg/util/validation` and `.../api/validation/objectmeta.go`.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use crate::status::{FieldError, FieldErrorType};

fn re(pattern: &str) -> Regex {
    // Invariant: every pattern passed here is a fixed literal below that is known to compile.
    Regex::new(pattern).unwrap_or_else(|e| unreachable!("static regex {pattern} failed: {e}"))
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";

static DNS1123_LABEL: LazyLock<Regex> = LazyLock::new(|| re(&format!("^{DNS1123_LABEL_FMT}$")));
static DNS1123_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| re(&format!("^{DNS1123_SUBDOMAIN_FMT}$")));
static DNS1035_LABEL: LazyLock<Regex> = LazyLock::new(|| re(&format!("^{DNS1035_LABEL_FMT}$")));
static QUALIFIED_NAME: LazyLock<Regex> = LazyLock::new(|| re(&format!("^{QUALIFIED_NAME_FMT}$")));
static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| re(&format!("^{LABEL_VALUE_FMT}$")));

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut s = format!("{msg} (");
    if !examples.is_empty() {
        s.push_str("e.g. ");
        let quoted: Vec<String> = examples.iter().map(|e| format!("'{e}'")).collect();
        s.push_str(&quoted.join(",  or "));
        s.push_str(", ");
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

pub(crate) fn dns1123_label_errors(v: &str) -> Vec<String> {
    dns_name_errors(
        v,
        63,
        &DNS1123_LABEL,
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
        DNS1123_LABEL_FMT,
        &["my-name", "123-abc"],
    )
}

pub(crate) fn dns1123_subdomain_errors(v: &str) -> Vec<String> {
    dns_name_errors(
        v,
        253,
        &DNS1123_SUBDOMAIN,
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        DNS1123_SUBDOMAIN_FMT,
        &["example.com"],
    )
}

pub(crate) fn dns1035_label_errors(v: &str) -> Vec<String> {
    dns_name_errors(
        v,
        63,
        &DNS1035_LABEL,
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
        DNS1035_LABEL_FMT,
        &["my-name", "abc-123"],
    )
}

/// The errors of a DNS name rule (apimachinery's `IsDNS1123Label`, `IsDNS1123Subdomain`, `IsDNS1035Label`): longer
/// than `max_len`, then not matching `re`, worded with the rule's description `msg`, its regex `fmt` and examples.
fn dns_name_errors(v: &str, max_len: usize, re: &Regex, msg: &str, fmt: &str, examples: &[&str]) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > max_len {
        errs.push(format!("must be no more than {max_len} characters"));
    }
    if !re.is_match(v) {
        errs.push(regex_error(msg, fmt, examples));
    }
    errs
}

/// `IsQualifiedName`: label keys, annotation keys, finalizers.
pub(crate) fn qualified_name_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                for e in dns1123_subdomain_errors(prefix) {
                    errs.push(format!("prefix part {e}"));
                }
            }
            *name
        }
        _ => {
            return vec![format!(
                "{} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"],
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !name.is_empty() && !QUALIFIED_NAME.is_match(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"],
            )
        ));
    }
    errs
}

pub(crate) fn label_value_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !LABEL_VALUE.is_match(v) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `path.IsValidPathSegmentName`: the only rule for RBAC object names.
pub(crate) fn path_segment_errors(v: &str) -> Vec<String> {
    if v == "." || v == ".." {
        return vec![format!("may not be '{v}'")];
    }
    let mut errs = Vec::new();
    for c in ['/', '%'] {
        if v.contains(c) {
            errs.push(format!("may not contain '{c}'"));
        }
    }
    errs
}

/// Which rule a resource applies to `metadata.name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
    PathSegment,
}

impl NameRule {
    pub(crate) fn errors(self, name: &str, prefix: bool) -> Vec<String> {
        // A generateName prefix may end in '-' (`maskTrailingDash`).
        let n = if prefix && name.len() > 1 && name.ends_with('-') {
            format!("{}a", &name[..name.len() - 1])
        } else {
            name.to_string()
        };
        let mut errs = path_segment_errors(&n);
        errs.extend(match self {
            NameRule::Dns1123Subdomain => dns1123_subdomain_errors(&n),
            NameRule::Dns1123Label => dns1123_label_errors(&n),
            NameRule::Dns1035Label => dns1035_label_errors(&n),
            NameRule::PathSegment => vec![],
        });
        errs
    }
}

const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// `ValidateObjectMeta` for create (and the shared parts of update).
pub(crate) fn validate_object_meta(obj: &Value, namespaced: bool, rule: NameRule) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let empty = serde_json::Map::new();
    let meta = crate::meta::metadata(obj).unwrap_or(&empty);
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
    let generate_name = meta.get("generateName").and_then(Value::as_str).unwrap_or("");
    if !generate_name.is_empty() {
        for e in rule.errors(generate_name, true) {
            errs.push(FieldError::invalid("metadata.generateName", json!(generate_name), e));
        }
    }
    if name.is_empty() {
        errs.push(FieldError::required("metadata.name", "name or generateName is required"));
    } else {
        for e in rule.errors(name, false) {
            errs.push(FieldError::invalid("metadata.name", json!(name), e));
        }
    }
    let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
    if namespaced {
        if ns.is_empty() {
            errs.push(FieldError::required("metadata.namespace", ""));
        } else {
            for e in dns1123_label_errors(ns) {
                errs.push(FieldError::invalid("metadata.namespace", json!(ns), e));
            }
        }
    } else if !ns.is_empty() {
        errs.push(FieldError::forbidden("metadata.namespace", "not allowed on this type"));
    }
    if let Some(labels) = meta.get("labels") {
        match labels.as_object() {
            Some(labels) => {
                for (k, v) in labels {
                    for e in qualified_name_errors(k) {
                        errs.push(FieldError::invalid("metadata.labels", json!(k), e));
                    }
                    match v.as_str() {
                        Some(v) => {
                            for e in label_value_errors(v) {
                                errs.push(FieldError::invalid("metadata.labels", json!(v), e));
                            }
                        }
                        None => errs.push(FieldError::invalid(
                            format!("metadata.labels.{k}"),
                            v.clone(),
                            "must be a string",
                        )),
                    }
                }
            }
            None if labels.is_null() => {}
            None => errs.push(FieldError::invalid("metadata.labels", labels.clone(), "must be an object")),
        }
    }
    if let Some(ann) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0usize;
        for (k, v) in ann {
            for e in qualified_name_errors(&k.to_lowercase()) {
                errs.push(FieldError::invalid("metadata.annotations", json!(k), e));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > TOTAL_ANNOTATION_SIZE_LIMIT {
            errs.push(FieldError::new(
                FieldErrorType::TooLong,
                "metadata.annotations",
                None,
                format!("must have at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
            ));
        }
    }
    let owners = crate::meta::owner_references(obj);
    let mut controllers = 0;
    for (i, o) in owners.iter().enumerate() {
        let path = format!("metadata.ownerReferences[{i}]");
        for field in ["apiVersion", "kind", "name", "uid"] {
            if o.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                let detail = match field {
                    "apiVersion" => "version must not be empty",
                    "kind" => "kind must not be empty",
                    "name" => "name must not be empty",
                    _ => "uid must not be empty",
                };
                errs.push(FieldError::invalid(
                    format!("{path}.{field}"),
                    o.get(field).cloned().unwrap_or(json!("")),
                    detail,
                ));
            }
        }
        if o.get("controller").and_then(Value::as_bool) == Some(true) {
            controllers += 1;
        }
    }
    if controllers > 1 {
        errs.push(FieldError::invalid(
            "metadata.ownerReferences",
            Value::Array(owners.to_vec()),
            "Only one reference can have Controller set to true",
        ));
    }
    for (i, f) in crate::meta::finalizers(obj).iter().enumerate() {
        for e in qualified_name_errors(f) {
            errs.push(FieldError::invalid(format!("metadata.finalizers[{i}]"), json!(f), e));
        }
    }
    errs
}

/// `ValidateObjectMetaUpdate`: identity fields are immutable.
pub(crate) fn validate_object_meta_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for field in ["name", "namespace", "uid", "creationTimestamp"] {
        let n = crate::meta::meta_str(new, field).unwrap_or("");
        let o = crate::meta::meta_str(old, field).unwrap_or("");
        if n != o {
            errs.push(FieldError::invalid(format!("metadata.{field}"), json!(n), "field is immutable"));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomain_message_matches_apimachinery() {
        let e = dns1123_subdomain_errors("Foo_bar");
        assert_eq!(
            e[0],
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert!(dns1123_subdomain_errors("web-1.example").is_empty());
    }

    /// Each DNS name rule has its own length limit and wording; a name can break both.
    #[test]
    fn dns_labels_are_checked_for_length_then_form() {
        assert_eq!(dns1123_label_errors(&"a".repeat(64)), ["must be no more than 63 characters"]);
        assert!(dns1123_label_errors(&"a".repeat(63)).is_empty() && dns1123_label_errors("123-abc").is_empty());
        assert_eq!(dns1123_subdomain_errors(&"a".repeat(254)), ["must be no more than 253 characters"]);
        let e = dns1035_label_errors(&format!("1{}", "a".repeat(63)));
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[0], "must be no more than 63 characters");
        assert!(
            e[1].starts_with("a DNS-1035 label must consist of") && e[1].contains("e.g. 'my-name',  or 'abc-123'"),
            "{e:?}"
        );
        assert!(dns1035_label_errors("my-name").is_empty());
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name_errors("app.kubernetes.io/name").is_empty());
        assert!(!qualified_name_errors("a/b/c").is_empty());
        assert!(!qualified_name_errors("-bad").is_empty());
        assert!(label_value_errors("").is_empty());
        assert!(!label_value_errors("no spaces").is_empty());
    }

    #[test]
    fn object_meta_requires_name_and_namespace() {
        let errs = validate_object_meta(&json!({"metadata": {}}), true, NameRule::Dns1123Subdomain);
        let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            vec![
                "metadata.name: Required value: name or generateName is required",
                "metadata.namespace: Required value"
            ]
        );
        let errs = validate_object_meta(
            &json!({"metadata": {"generateName": "web-", "namespace": "default"}}),
            true,
            NameRule::Dns1123Subdomain,
        );
        // generateName alone is fine once the name is generated; here the name is still missing.
        assert_eq!(errs.len(), 1);
    }
}
