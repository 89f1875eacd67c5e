//! `ValidatingAdmissionPolicy` and `ValidatingAdmissionPolicyBinding` (`admissionregistration.k8s.io/v1`), enforced
//! on writes like kube-apiserver's `ValidatingAdmissionPolicy` plugin, which runs before the validating webhooks.
//!
//! A binding applies its policy (`spec.policyName`) to a write when the policy's `matchConstraints` and the binding's
//! `matchResources` both match it (`resourceRules` and `excludeResourceRules` with operations, groups, versions,
//! resources and subresources, `resourceNames`, `scope`; `namespaceSelector`, `objectSelector`) and every
//! `matchConditions` expression is true. Its `validations` are then evaluated in order; the first that is false
//! refuses the write, as `ValidatingAdmissionPolicy 'P' with binding 'B' denied request: MESSAGE` with the
//! validation's `reason` (`Invalid`, 422, by default; `Forbidden` is 403). An expression that fails to compile or
//! to evaluate refuses the write under `failurePolicy: Fail` (the default) and is skipped under `Ignore`.
//!
//! The expressions are CEL, evaluated by the `cel` crate with the variables `object`, `oldObject` (`null` on create
//! and delete respectively), `request` (`operation`, `name`, `namespace`, `userInfo` with `username`, `uid`,
//! `groups` and `extra`, `kind`, `resource`, `subResource`, `dryRun`, `options`), `namespaceObject` and
//! `variables` (the policy's `variables`, in order). Not supported, and refused when a policy is stored:
//! `paramKind` (and so `params`); bindings whose `validationActions` lack `Deny` are not enforced (`Warn` and
//! `Audit` are not implemented); `auditAnnotations` are ignored. Values are untyped JSON (no OpenAPI schema):
//! numbers are CEL `int` or `double`, and there is no cost budget.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Attempt, Cluster, Operation, Request};
use crate::selector::LabelSelector;
use crate::status::{ApiError, FieldError};
use crate::store::object_key;

/// Store bucket of the policies.
pub(crate) const POLICIES: &str = "validatingadmissionpolicies.admissionregistration.k8s.io";
/// Store bucket of the bindings.
pub(crate) const BINDINGS: &str = "validatingadmissionpolicybindings.admissionregistration.k8s.io";
pub(crate) const POLICY_PLURAL: &str = "validatingadmissionpolicies";

/// A policy and one of its bindings.
#[derive(Clone, Debug)]
pub(crate) struct Bound {
    pub policy: Arc<Value>,
    pub binding: Arc<Value>,
}

impl Bound {
    fn policy_name(&self) -> &str {
        crate::meta::name(&self.policy)
    }

    fn binding_name(&self) -> &str {
        crate::meta::name(&self.binding)
    }

    fn spec(&self) -> &Value {
        self.policy.get("spec").unwrap_or(&Value::Null)
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

/// One `NamedRuleWithOperations` against a request; `name` is checked against `resourceNames` when known.
fn rule_matches(rule: &Value, op: Operation, req: &Request<'_>, name: Option<&str>) -> bool {
    let ops = strings(rule.get("operations"));
    if !listed(&ops, op.as_str())
        || !listed(&strings(rule.get("apiGroups")), &req.rd.group)
        || !listed(&strings(rule.get("apiVersions")), &req.rd.version)
    {
        return false;
    }
    let resource_ok = strings(rule.get("resources")).iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == req.rd.plural) && (sub == "*" || sub == req.subresource)
    });
    if !resource_ok {
        return false;
    }
    let names = strings(rule.get("resourceNames"));
    if let Some(name) = name
        && !names.is_empty()
        && !names.iter().any(|n| n == name)
    {
        return false;
    }
    let is_namespace = req.rd.group.is_empty() && req.rd.plural == "namespaces";
    match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Namespaced" => !is_namespace && req.rd.namespaced,
        "Cluster" => is_namespace || !req.rd.namespaced,
        _ => true,
    }
}

/// `MatchResources` by its rules only (selectors need the object). An absent `matchResources` (a binding's) matches.
fn resources_match(m: Option<&Value>, op: Operation, req: &Request<'_>, name: Option<&str>) -> bool {
    let Some(m) = m.filter(|m| m.is_object()) else { return true };
    let rules = m.get("resourceRules").and_then(Value::as_array).cloned().unwrap_or_default();
    let excluded = m.get("excludeResourceRules").and_then(Value::as_array).cloned().unwrap_or_default();
    // A binding's matchResources without resourceRules leaves the policy's rules in force.
    (rules.is_empty() || rules.iter().any(|r| rule_matches(r, op, req, name)))
        && !excluded.iter().any(|r| rule_matches(r, op, req, name))
}

fn enforced(binding: &Value) -> bool {
    strings(binding.pointer("/spec/validationActions")).iter().any(|a| a == "Deny")
}

/// The bindings that may apply to a request that can turn out as one of `ops`, before the object is known.
pub(crate) fn candidates(cluster: Cluster<'_>, req: &Request<'_>, ops: &[Operation]) -> Vec<Bound> {
    if req.rd.group == super::config::GROUP || cluster.store.count(BINDINGS, None) == 0 {
        return Vec::new();
    }
    let mut bindings = cluster.store.snapshot(BINDINGS);
    bindings.sort_by(|a, b| crate::meta::name(&a.1).cmp(crate::meta::name(&b.1)));
    bindings
        .into_iter()
        .filter(|(_, b)| enforced(b))
        .filter_map(|(_, binding)| {
            let policy_name = binding.pointer("/spec/policyName").and_then(Value::as_str)?;
            let policy = cluster.store.get(POLICIES, policy_name)?;
            let bound = Bound { policy, binding };
            let constraints = bound.spec().get("matchConstraints");
            let any = ops.iter().any(|op| {
                constraints.is_some()
                    && resources_match(constraints, *op, req, None)
                    && resources_match(bound.binding.pointer("/spec/matchResources"), *op, req, None)
            });
            any.then_some(bound)
        })
        .collect()
}

/// `namespaceSelector` and `objectSelector` of one `MatchResources`.
fn selectors_match(
    m: Option<&Value>,
    ns_labels: Option<&std::collections::BTreeMap<String, String>>,
    a: &Attempt,
) -> bool {
    let Some(m) = m else { return true };
    let selector = |k: &str| {
        m.get(k).map(LabelSelector::from_label_selector_object).transpose().ok().flatten().unwrap_or_default()
    };
    let (ns_sel, obj_sel) = (selector("namespaceSelector"), selector("objectSelector"));
    if let Some(labels) = ns_labels
        && !ns_sel.matches(labels)
    {
        return false;
    }
    if !obj_sel.is_empty() {
        let matches = |o: &Option<Value>| o.as_ref().is_some_and(|o| obj_sel.matches_object(o));
        if !matches(&a.object) && !matches(&a.old_object) {
            return false;
        }
    }
    true
}

/// JSON as a CEL value: integers are `int` (`uint` beyond i64), other numbers `double`.
pub(crate) fn cel_value(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(cel_value).collect())),
        Value::Object(m) => {
            let map: HashMap<String, cel::Value> = m.iter().map(|(k, v)| (k.clone(), cel_value(v))).collect();
            cel::Value::from(map)
        }
    }
}

/// Compiles and evaluates one expression.
fn evaluate(expression: &str, ctx: &cel::Context<'_, '_>) -> Result<cel::Value, String> {
    let program = cel::Program::compile(expression).map_err(|e| format!("compilation failed: {e}"))?;
    program.execute(ctx).map_err(|e| e.to_string())
}

fn evaluate_bool(expression: &str, ctx: &cel::Context<'_, '_>) -> Result<bool, String> {
    match evaluate(expression, ctx)? {
        cel::Value::Bool(b) => Ok(b),
        other => Err(format!("expected a bool, got {other:?}")),
    }
}

/// The `request` variable (an `admission.k8s.io/v1` AdmissionRequest's fields).
fn request_value(req: &Request<'_>, a: &Attempt) -> Value {
    let mut user = json!({"username": req.user.name, "uid": req.user.uid, "groups": req.user.groups});
    user["extra"] = crate::user::extra_json(req.user);
    json!({
        "kind": {"group": a.kind.0, "version": a.kind.1, "kind": a.kind.2},
        "resource": {"group": req.rd.group, "version": req.rd.version, "resource": req.rd.plural},
        "subResource": req.subresource,
        "requestKind": {"group": a.kind.0, "version": a.kind.1, "kind": a.kind.2},
        "requestResource": {"group": req.rd.group, "version": req.rd.version, "resource": req.rd.plural},
        "name": a.name,
        "namespace": req.namespace,
        "operation": a.operation.as_str(),
        "userInfo": user,
        "dryRun": req.dry_run,
        "options": a.options,
    })
}

/// Why a binding refused a write: its message and reason.
struct Denial {
    message: String,
    reason: String,
}

/// Evaluates one binding's policy on an attempt: `Ok(None)` admits (or does not apply).
fn decide(bound: &Bound, ctx: &cel::Context<'_, '_>) -> Option<Denial> {
    let spec = bound.spec();
    let fail_closed = spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore");
    let error = |message: String| fail_closed.then(|| Denial { message, reason: "Invalid".into() });
    for condition in spec.get("matchConditions").and_then(Value::as_array).into_iter().flatten() {
        let name = condition.get("name").and_then(Value::as_str).unwrap_or("");
        let expression = condition.get("expression").and_then(Value::as_str).unwrap_or("");
        match evaluate_bool(expression, ctx) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return error(format!("failed to evaluate match condition {name:?}: {e}")),
        }
    }
    for v in spec.get("validations").and_then(Value::as_array).into_iter().flatten() {
        let expression = v.get("expression").and_then(Value::as_str).unwrap_or("");
        match evaluate_bool(expression, ctx) {
            Ok(true) => continue,
            Err(e) => match error(format!("expression '{expression}' resulted in error: {e}")) {
                Some(d) => return Some(d),
                None => continue,
            },
            Ok(false) => {}
        }
        let from_expression = v
            .get("messageExpression")
            .and_then(Value::as_str)
            .and_then(|m| match evaluate(m, ctx) {
                Ok(cel::Value::String(s)) => Some(s.trim().to_string()),
                _ => None,
            })
            .filter(|m| !m.is_empty() && !m.contains('\n'));
        let message = from_expression
            .or_else(|| v.get("message").and_then(Value::as_str).filter(|m| !m.is_empty()).map(str::to_string))
            .unwrap_or_else(|| format!("failed expression: {expression}"));
        let reason = v.get("reason").and_then(Value::as_str).filter(|r| !r.is_empty()).unwrap_or("Invalid");
        return Some(Denial { message, reason: reason.to_string() });
    }
    None
}

/// `reasonToCode`.
fn code_of(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// Evaluates the candidate bindings on one attempt; the first refusal (bindings in name order) is the error.
pub(crate) fn admit(cluster: Cluster<'_>, bound: &[Bound], req: &Request<'_>, a: &Attempt) -> Result<(), ApiError> {
    if bound.is_empty() {
        return Ok(());
    }
    let ns_labels = super::Admission::namespace_labels(cluster, req, a);
    let name = (!a.name.is_empty()).then_some(a.name.as_str());
    let namespace_object = if req.namespace.is_empty() {
        Value::Null
    } else {
        cluster.store.get("namespaces", &object_key("", req.namespace)).map(|n| (*n).clone()).unwrap_or(Value::Null)
    };
    let request = request_value(req, a);
    for b in bound {
        let (constraints, resources) = (b.spec().get("matchConstraints"), b.binding.pointer("/spec/matchResources"));
        if !resources_match(constraints, a.operation, req, name)
            || !resources_match(resources, a.operation, req, name)
            || !selectors_match(constraints, ns_labels.as_ref(), a)
            || !selectors_match(resources, ns_labels.as_ref(), a)
        {
            continue;
        }
        let mut ctx = cel::Context::default();
        ctx.add_variable_from_value("object", a.object.as_ref().map_or(cel::Value::Null, cel_value));
        ctx.add_variable_from_value("oldObject", a.old_object.as_ref().map_or(cel::Value::Null, cel_value));
        ctx.add_variable_from_value("request", cel_value(&request));
        ctx.add_variable_from_value("namespaceObject", cel_value(&namespace_object));
        ctx.add_variable_from_value("params", cel::Value::Null);
        // Variables in order, each seeing the ones before it; one that fails is left out, so an expression that
        // uses it fails in its turn.
        let mut variables: HashMap<String, cel::Value> = HashMap::new();
        for v in b.spec().get("variables").and_then(Value::as_array).into_iter().flatten() {
            let (Some(vname), Some(expression)) =
                (v.get("name").and_then(Value::as_str), v.get("expression").and_then(Value::as_str))
            else {
                continue;
            };
            ctx.add_variable_from_value("variables", cel::Value::from(variables.clone()));
            if let Ok(value) = evaluate(expression, &ctx) {
                variables.insert(vname.to_string(), value);
            }
        }
        ctx.add_variable_from_value("variables", cel::Value::from(variables));
        if let Some(d) = decide(b, &ctx) {
            let message = format!(
                "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
                b.policy_name(),
                b.binding_name(),
                d.message
            );
            let mut e = ApiError::forbidden(&req.rd.group_resource(), &a.name, &message);
            e.code = code_of(&d.reason);
            e.reason = d.reason;
            if let Some(details) = e.details.as_deref_mut()
                && let Value::Object(m) = details
            {
                m.insert("causes".into(), json!([{"message": message}]));
            }
            return Err(e);
        }
    }
    Ok(())
}

/// What kube-sim refuses in a policy it cannot enforce as written: `paramKind`, and expressions that do not
/// compile (a real server stores them and reports them in `status.typeChecking`; they would fail every request).
pub(crate) fn validate(plural: &str, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if plural != POLICY_PLURAL {
        return errs;
    }
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    if spec.get("paramKind").is_some_and(|p| !p.is_null()) {
        errs.push(FieldError::forbidden("spec.paramKind", "kube-sim does not support policy parameters"));
    }
    if spec.get("matchConstraints").is_none_or(Value::is_null) {
        errs.push(FieldError::required("spec.matchConstraints", ""));
    }
    for (list, key) in [
        ("matchConditions", "expression"),
        ("validations", "expression"),
        ("validations", "messageExpression"),
        ("variables", "expression"),
    ] {
        for (i, item) in spec.get(list).and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Some(expression) = item.get(key).and_then(Value::as_str)
                && let Err(e) = cel::Program::compile(expression)
            {
                errs.push(FieldError::invalid(
                    format!("spec.{list}[{i}].{key}"),
                    json!(expression),
                    format!("compilation failed: {e}"),
                ));
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expression: &str, vars: &[(&str, Value)]) -> Result<bool, String> {
        let mut ctx = cel::Context::default();
        for (k, v) in vars {
            ctx.add_variable_from_value(*k, cel_value(v));
        }
        evaluate_bool(expression, &ctx)
    }

    #[test]
    fn json_reads_as_cel_values() {
        let pod = json!({"metadata": {"name": "gs-0", "labels": {"a": "1"}}, "spec": {"replicas": 3, "ratio": 0.5}});
        assert_eq!(eval("object.metadata.name == 'gs-0'", &[("object", pod.clone())]), Ok(true));
        assert_eq!(eval("object.spec.replicas > 2 && object.spec.ratio < 1.0", &[("object", pod.clone())]), Ok(true));
        assert_eq!(eval("has(object.metadata.annotations)", &[("object", pod.clone())]), Ok(false));
        assert_eq!(eval("object.metadata.labels.all(k, k == 'a')", &[("object", pod.clone())]), Ok(true));
        let old = json!({"metadata": {"name": "gs-0", "labels": {"a": "1"}}, "spec": {"replicas": 3, "ratio": 0.5}});
        assert_eq!(eval("object.spec == oldObject.spec", &[("object", pod.clone()), ("oldObject", old)]), Ok(true));
        assert!(eval("object.metadata.annotations['x'] == 'y'", &[("object", pod)]).is_err());
        assert!(eval("1 +", &[]).unwrap_err().starts_with("compilation failed"));
    }

    #[test]
    fn unsupported_and_uncompilable_policies_are_refused() {
        let errs = validate(
            POLICY_PLURAL,
            &json!({"spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {"resourceRules": []}, "validations": [{"expression": "object. =="}]}}),
        );
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["spec.paramKind", "spec.validations[0].expression"]);
        assert!(validate("validatingadmissionpolicybindings", &json!({})).is_empty());
    }
}
