//! The CEL rules kube-sim enforces without a CEL interpreter: the transition rule `self == oldSelf`
//! in `x-kubernetes-validations` ("this field is immutable") and the presence rules `has(self.f)` /
//! `!has(self.f)` ("this field is required / refused"), evaluated as the apiextensions-apiserver's
//! CEL validator evaluates them.
//!
//! What the real validator does and this module reproduces:
//! - presence rules run on creates and updates, on every value of their node (object properties,
//!   map values, items of every kind of list). `has(self.f)` on an object with properties is false
//!   for an absent field and for a field set to `null` (the validator treats a null nullable field
//!   as absent); on a map (`additionalProperties`) it tests the key.
//! - transition rules run on updates only, for a node whose old value can be *correlated*: object
//!   properties by name, map values (`additionalProperties`) by key, items of
//!   `x-kubernetes-list-type: map` lists by their keys; items of atomic and set lists are not
//!   correlatable, so rules under them never run. A node absent (or null) in the old or the new
//!   object is not evaluated.
//! - `==` is CEL equality over the schema's types: lists of type `set` and `map` compare without
//!   regard to order, `1 == 1.0`, objects compare field by field; at the root only
//!   `metadata.name` and `metadata.generateName` are visible.
//! - a failure is `field.Invalid(path, <schema type>, message)`, so the cause reads
//!   `spec: Invalid value: "object": <message>` (`<nil>` for a rule on the root), where the
//!   message is `message`, a string-literal `messageExpression`, or `failed rule: <rule>`;
//!   `reason` picks the error type (`FieldValueForbidden`, `FieldValueRequired`,
//!   `FieldValueDuplicate`, default `FieldValueInvalid`) and `fieldPath` is appended to the path.
//! - when the OpenAPI validation already found a blocking error (wrong type, required,
//!   enum, too long, too many), CEL rules are not run and one more cause says so.
//!
//! Every other CEL rule is recorded (the node "has CEL rules") but not evaluated.

use serde_json::{Map, Value, json};

use super::{Cursor, ListType};
use crate::status::{FieldError, FieldErrorType};

/// One recognised `self == oldSelf` rule of a schema node (also the failure description of a
/// [`PresenceRule`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TransitionRule {
    /// The failure detail: `message`, a literal `messageExpression`, or `failed rule: <rule>`.
    pub message: String,
    /// `reason` (`FieldValueInvalid` when absent).
    pub reason: Option<String>,
    /// `fieldPath`, relative to the node (`.spec.x` or `.x`).
    pub field_path: Option<String>,
}

/// One recognised `has(self.f)` (`present`) or `!has(self.f)` rule of a schema node.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PresenceRule {
    pub field: String,
    /// `true` for `has(self.f)`, `false` for `!has(self.f)`.
    pub present: bool,
    pub failure: TransitionRule,
}

/// `has(self.f)` as `(f, true)`, `!has(self.f)` as `(f, false)` (any spacing), or `None` for any
/// other rule.
pub(crate) fn presence_rule(rule: &str) -> Option<(String, bool)> {
    let compact: String = rule.chars().filter(|c| !c.is_whitespace()).collect();
    let (present, rest) = match compact.strip_prefix('!') {
        Some(r) => (false, r),
        None => (true, compact.as_str()),
    };
    let field = rest.strip_prefix("has(self.")?.strip_suffix(')')?;
    let mut chars = field.chars();
    let ident = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    ident.then(|| (field.to_string(), present))
}

/// Whether `rule` is the transition rule `self == oldSelf` (either operand order, any spacing).
pub(crate) fn is_self_equals_old_self(rule: &str) -> bool {
    let compact: String = rule.chars().filter(|c| !c.is_whitespace()).collect();
    compact == "self==oldSelf" || compact == "oldSelf==self"
}

/// The content of a CEL string literal (`'text'`, `"text"`), or `None` for any other expression.
pub(crate) fn string_literal(expr: &str) -> Option<String> {
    let e = expr.trim();
    let quote = e.chars().next().filter(|q| *q == '\'' || *q == '"')?;
    if e.len() < 2 || !e.ends_with(quote) {
        return None;
    }
    let inner = &e[1..e.len() - 1];
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                other => out.push(other),
            },
            c if c == quote => return None, // a concatenation such as 'a' + 'b'
            c => out.push(c),
        }
    }
    Some(out)
}

/// The recognised rules of a node's `x-kubernetes-validations`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Rules {
    pub transition: Vec<TransitionRule>,
    pub presence: Vec<PresenceRule>,
    /// The node declares any CEL rule at all (recognised or not).
    pub any: bool,
}

/// Parses a node's `x-kubernetes-validations`.
pub(crate) fn parse_rules(v: &Value) -> Rules {
    let Some(rules) = v.get("x-kubernetes-validations").and_then(Value::as_array) else { return Rules::default() };
    let mut out = Rules { any: !rules.is_empty(), ..Rules::default() };
    for r in rules {
        let Some(rule) = r.get("rule").and_then(Value::as_str) else { continue };
        let presence = presence_rule(rule);
        let transition =
            is_self_equals_old_self(rule) && r.get("optionalOldSelf").and_then(Value::as_bool) != Some(true);
        if presence.is_none() && !transition {
            continue;
        }
        let message = r.get("message").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty());
        let from_expression = r
            .get("messageExpression")
            .and_then(Value::as_str)
            .and_then(string_literal)
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty() && !m.contains('\n'));
        let message = from_expression
            .or_else(|| message.map(str::to_string))
            .unwrap_or_else(|| format!("failed rule: {}", rule.trim()));
        let failure = TransitionRule {
            message,
            reason: r.get("reason").and_then(Value::as_str).map(str::to_string),
            field_path: r.get("fieldPath").and_then(Value::as_str).filter(|p| !p.is_empty()).map(str::to_string),
        };
        match presence {
            Some((field, present)) => out.presence.push(PresenceRule { field, present, failure }),
            None => out.transition.push(failure),
        }
    }
    out
}

/// The field errors that stop CEL evaluation (`hasBlockingErr` in the customresource strategy).
pub(crate) fn blocking_error(errs: &[FieldError]) -> Option<FieldError> {
    errs.iter()
        .any(|e| {
            matches!(
                e.kind,
                FieldErrorType::NotSupported
                    | FieldErrorType::Required
                    | FieldErrorType::TooLong
                    | FieldErrorType::TooMany
                    | FieldErrorType::TypeInvalid
            )
        })
        .then(|| {
            FieldError::invalid(
                "<nil>",
                // Go renders a nil bad value as the string "null".
                json!("null"),
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            )
        })
}

/// Evaluates every transition rule of the schema on an update from `old` to `new`.
pub(crate) fn validate_update(root: Cursor<'_>, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    walk(root, new, old, "", true, &mut errs);
    errs
}

/// Evaluates every presence rule of the schema on `obj` (a create's or an update's new object).
pub(crate) fn validate_presence(root: Cursor<'_>, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    walk_presence(root, obj, "", true, &mut errs);
    errs
}

fn walk_presence(c: Cursor<'_>, v: &Value, path: &str, root: bool, errs: &mut Vec<FieldError>) {
    let node = c.node();
    if let Value::Object(m) = v {
        for rule in &node.presence_rules {
            // A null field of an object with properties is absent to `has`; a map's key is present whatever its value.
            let has = m.get(&rule.field).is_some_and(|f| !f.is_null() || node.properties.is_empty());
            if has != rule.present {
                errs.push(failure(node.type_.as_deref().unwrap_or(""), path, &rule.failure));
            }
        }
    }
    match v {
        Value::Object(m) => {
            for (k, fv) in m {
                if root && k == "metadata" {
                    continue;
                }
                if let Some(&id) = node.properties.get(k) {
                    walk_presence(Cursor { schema: c.schema, id }, fv, &child(path, k), false, errs);
                } else if let Some(id) = node.additional {
                    walk_presence(Cursor { schema: c.schema, id }, fv, &format!("{path}[{k}]"), false, errs);
                }
            }
        }
        Value::Array(items) => {
            let Some(ic) = c.items() else { return };
            for (i, iv) in items.iter().enumerate() {
                walk_presence(ic, iv, &format!("{path}[{i}]"), false, errs);
            }
        }
        _ => {}
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn walk(c: Cursor<'_>, new: &Value, old: &Value, path: &str, root: bool, errs: &mut Vec<FieldError>) {
    if new.is_null() || old.is_null() {
        return;
    }
    let node = c.node();
    for rule in &node.transition_rules {
        if !equal(Some(c), new, old, root) {
            errs.push(failure(node.type_.as_deref().unwrap_or(""), path, rule));
        }
    }
    match (new, old) {
        (Value::Object(n), Value::Object(o)) => {
            for (k, nv) in n {
                if root && k == "metadata" {
                    continue;
                }
                let Some(ov) = o.get(k) else { continue };
                if let Some(&id) = node.properties.get(k) {
                    walk(Cursor { schema: c.schema, id }, nv, ov, &child(path, k), false, errs);
                } else if let Some(id) = node.additional {
                    walk(Cursor { schema: c.schema, id }, nv, ov, &format!("{path}[{k}]"), false, errs);
                }
            }
        }
        (Value::Array(n), Value::Array(o)) => {
            let (ListType::Map(keys), Some(items)) = (c.list_type(), c.items()) else { return };
            for (i, nv) in n.iter().enumerate() {
                if let Some(ov) = o.iter().find(|ov| same_keys(&keys, nv, ov)) {
                    walk(items, nv, ov, &format!("{path}[{i}]"), false, errs);
                }
            }
        }
        _ => {}
    }
}

fn failure(schema_type: &str, path: &str, rule: &TransitionRule) -> FieldError {
    let mut field = if path.is_empty() { "<nil>".to_string() } else { path.to_string() };
    if let Some(fp) = &rule.field_path {
        let rel = fp.trim_start_matches('.');
        field = if path.is_empty() { rel.to_string() } else { format!("{path}.{rel}") };
    }
    // The bad value is the schema type, so objects and lists read `Invalid value: "object"`.
    let value = json!(schema_type);
    match rule.reason.as_deref() {
        Some("FieldValueForbidden") => FieldError::forbidden(field, rule.message.clone()),
        Some("FieldValueRequired") => FieldError::required(field, rule.message.clone()),
        Some("FieldValueDuplicate") => FieldError::duplicate(field, value),
        _ => FieldError::invalid(field, value, rule.message.clone()),
    }
}

fn same_keys(keys: &[String], a: &Value, b: &Value) -> bool {
    keys.iter().all(|k| a.get(k) == b.get(k))
}

fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    match (a.as_i64(), b.as_i64(), a.as_u64(), b.as_u64()) {
        (Some(x), Some(y), _, _) => x == y,
        (_, _, Some(x), Some(y)) => x == y,
        _ => a.as_f64() == b.as_f64(),
    }
}

/// CEL equality of two values of the same schema node.
fn equal(c: Option<Cursor<'_>>, a: &Value, b: &Value, root: bool) -> bool {
    let node = c.map(|c| c.node());
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Object(x), Value::Object(y)) => {
            if root {
                let visible = |m: &Map<String, Value>| -> Value {
                    let md = m.get("metadata").cloned().unwrap_or_default();
                    json!({"name": md.get("name"), "generateName": md.get("generateName")})
                };
                if visible(x) != visible(y) {
                    return false;
                }
            }
            let keys = |m: &Map<String, Value>| -> Vec<String> {
                let mut k: Vec<String> = m.keys().filter(|k| !root || *k != "metadata").cloned().collect();
                k.sort();
                k
            };
            if keys(x) != keys(y) {
                return false;
            }
            x.iter().filter(|(k, _)| !root || *k != "metadata").all(|(k, xv)| {
                let sub = c.and_then(|c| c.field(k));
                y.get(k).is_some_and(|yv| equal(sub, xv, yv, false))
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return false;
            }
            let items = c.and_then(|c| c.items());
            match node.and_then(|n| n.list_type.clone()) {
                Some(ListType::Set) => x.iter().all(|xv| y.iter().any(|yv| equal(items, xv, yv, false))),
                Some(ListType::Map(keys)) => x.iter().all(|xv| {
                    y.iter().find(|yv| same_keys(&keys, xv, yv)).is_some_and(|yv| equal(items, xv, yv, false))
                }),
                _ => x.iter().zip(y).all(|(xv, yv)| equal(items, xv, yv, false)),
            }
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::from_crd_schema;

    #[test]
    fn recognises_the_rule_and_literal_messages() {
        assert!(is_self_equals_old_self("self == oldSelf"));
        assert!(is_self_equals_old_self(" oldSelf==self "));
        assert!(!is_self_equals_old_self("self.x == oldSelf.x"));
        assert_eq!(string_literal("'spec is immutable'").as_deref(), Some("spec is immutable"));
        assert_eq!(string_literal(r#""it\"s""#).as_deref(), Some("it\"s"));
        assert_eq!(string_literal("'a' + 'b'"), None);
        assert_eq!(string_literal("self.name"), None);
    }

    #[test]
    fn recognises_presence_rules() {
        assert_eq!(presence_rule("!has(self.exec)"), Some(("exec".to_string(), false)));
        assert_eq!(presence_rule(" has( self.web ) "), Some(("web".to_string(), true)));
        assert_eq!(presence_rule("has(self.a.b)"), None);
        assert_eq!(presence_rule("!has(self.a) || has(self.b)"), None);
        assert_eq!(presence_rule("has(oldSelf.a)"), None);
    }

    #[test]
    fn presence_rules_apply_to_every_value_of_their_node() {
        let s = from_crd_schema(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "items": {"type": "array", "items": {"type": "object",
                    "x-kubernetes-validations": [{"rule": "!has(self.exec)", "message": "no exec"}, {"rule": "has(self.name)"}],
                    "properties": {"name": {"type": "string"}, "exec": {"type": "object", "nullable": true}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string", "nullable": true},
                    "x-kubernetes-validations": [{"rule": "has(self.app)", "reason": "FieldValueRequired"}]}
            }}}
        }));
        let c = Cursor::root(&s);
        let ok = json!({"spec": {"items": [{"name": "a"}, {"name": "b", "exec": null}], "labels": {"app": null}}});
        assert!(validate_presence(c, &ok).is_empty());
        let bad = json!({"spec": {"items": [{"name": "a", "exec": {}}, {}], "labels": {}}});
        let msgs: Vec<String> = validate_presence(c, &bad).iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            [
                r#"spec.items[0]: Invalid value: "object": no exec"#,
                r#"spec.items[1]: Invalid value: "object": failed rule: has(self.name)"#,
                "spec.labels: Required value: failed rule: has(self.app)",
            ]
        );
    }

    #[test]
    fn only_correlatable_changed_nodes_fail() {
        let s = from_crd_schema(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "fixed": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "fixed is immutable"}]},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {"name": {"type": "string"},
                                    "port": {"type": "integer", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"},
                         "x-kubernetes-validations": [{"rule": "self == oldSelf", "messageExpression": "'tags are immutable'"}]}
            }}}
        }));
        let c = Cursor::root(&s);
        let old = json!({"spec": {"fixed": "a", "ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}], "tags": ["x", "y"]}});
        // Reordered set and map lists, a new map item: all equal or uncorrelated.
        let same = json!({"spec": {"fixed": "a", "ports": [{"name": "c", "port": 9}, {"name": "b", "port": 2}, {"name": "a", "port": 1}], "tags": ["y", "x"]}});
        assert!(validate_update(c, &same, &old).is_empty());
        // Removing a field is not a transition of it.
        assert!(validate_update(c, &json!({"spec": {}}), &old).is_empty());
        let changed = json!({"spec": {"fixed": "b", "ports": [{"name": "b", "port": 3}], "tags": ["x"]}});
        let msgs: Vec<String> = validate_update(c, &changed, &old).iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            [
                r#"spec.fixed: Invalid value: "string": fixed is immutable"#,
                r#"spec.ports[0].port: Invalid value: "integer": failed rule: self == oldSelf"#,
                r#"spec.tags: Invalid value: "array": tags are immutable"#,
            ]
        );
    }

    #[test]
    fn root_rules_see_only_name_and_generate_name_of_metadata() {
        let s = from_crd_schema(&json!({"type": "object", "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
            "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}));
        let c = Cursor::root(&s);
        let old = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"n": 1}});
        assert!(validate_update(c, &json!({"metadata": {"name": "a"}, "spec": {"n": 1.0}}), &old).is_empty());
        let msgs: Vec<String> = validate_update(c, &json!({"metadata": {"name": "a"}, "spec": {"n": 2}}), &old)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(msgs, [r#"<nil>: Invalid value: "object": failed rule: self == oldSelf"#]);
    }
}
