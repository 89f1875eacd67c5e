//! Dynamic admission: `ValidatingWebhookConfiguration`s called like kube-apiserver's
//! `ValidatingAdmissionWebhook` plugin does.
//!
//! For each write (CREATE, UPDATE, DELETE of any resource and of the `status` subresource, and
//! CREATE of `pods/eviction` and `pods/binding`) the webhooks whose `rules`,
//! `namespaceSelector` and `objectSelector` match are sent an `admission.k8s.io/v1`
//! AdmissionReview over HTTPS, all at once; the first refusal (in configuration-name order)
//! becomes the request's error, worded `admission webhook "NAME" denied the request: MESSAGE`
//! with the webhook's status code, and a webhook that cannot be called fails the request
//! (`failurePolicy: Fail`) or is skipped (`Ignore`). Requests for the webhook configurations
//! themselves never reach webhooks. See `gate` for how a synchronous registry write waits
//! for them, and `client` for where a webhook is reached.

pub(crate) mod auth;
pub(crate) mod client;
pub(crate) mod config;
pub(crate) mod gate;
pub(crate) mod policy;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

pub use auth::ClientAuth;
pub use client::ServiceAddress;
use config::Webhook;
pub(crate) use gate::{Gate, Probed};

use crate::resources::{Catalog, ResourceDef};
use crate::selector::object_labels;
use crate::status::ApiError;
use crate::store::{Store, object_key};
use crate::user::UserInfo;

/// Store bucket of the validating webhook configurations.
pub(crate) const VALIDATING_STORAGE: &str = "validatingwebhookconfigurations.admissionregistration.k8s.io";

/// An admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }

    /// The operation a registry write performed: create (no old object), delete (no new one),
    /// otherwise update.
    pub(crate) fn of(probed: &Probed) -> Self {
        match (&probed.old, &probed.new) {
            (None, _) => Operation::Create,
            (Some(_), None) => Operation::Delete,
            (Some(_), Some(_)) => Operation::Update,
        }
    }
}

/// The request being admitted, as far as it is known before its object.
pub(crate) struct Request<'a> {
    pub rd: &'a ResourceDef,
    /// `""`, `"status"`, `"eviction"`, `"binding"`.
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub user: &'a UserInfo,
    pub dry_run: bool,
}

/// One admission decision to take.
pub(crate) struct Attempt {
    pub operation: Operation,
    /// Group, version and kind of `object` / `old_object` as the request sent them.
    pub kind: (String, String, String),
    pub name: String,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    /// `CreateOptions` / `UpdateOptions` / `DeleteOptions`.
    pub options: Value,
}

/// What may admit a request: the ValidatingAdmissionPolicy bindings, then the webhooks.
#[derive(Debug, Default)]
pub(crate) struct Candidates {
    pub policies: Vec<policy::Bound>,
    pub webhooks: Vec<Webhook>,
}

impl Candidates {
    /// Nothing to ask: the request needs no admission.
    pub(crate) fn is_empty(&self) -> bool {
        self.policies.is_empty() && self.webhooks.is_empty()
    }
}

/// What admission reads of the cluster: the stored webhook configurations, policies, namespaces, Services and
/// endpoints, and the served versions of each resource. Admission never writes; the registry's writes call it
/// through [`Gate`], which is why it sits below the registry and reads the store directly.
#[derive(Clone, Copy)]
pub(crate) struct Cluster<'a> {
    pub store: &'a Store,
    pub catalog: &'a Catalog,
}

/// kube-sim's admission webhook dispatcher.
#[derive(Default)]
pub(crate) struct Admission {
    pub caller: client::Caller,
}

/// Which version of the resource a webhook is called with (its rule's, under `Equivalent`).
struct Invocation<'h> {
    hook: &'h Webhook,
    version: String,
    kind: String,
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

/// `rules.Matcher`: operation, group, version, resource/subresource (`*` is every resource
/// but no subresource, `*/*` everything, `pods/*` every subresource of pods) and scope.
fn rule_matches(rule: &config::Rule, op: Operation, group: &str, version: &str, req: &Request<'_>) -> bool {
    if !listed(&rule.operations, op.as_str())
        || !listed(&rule.api_groups, group)
        || !listed(&rule.api_versions, version)
    {
        return false;
    }
    let resource_ok = rule.resources.iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == req.rd.plural) && (sub == "*" || sub == req.subresource)
    });
    if !resource_ok {
        return false;
    }
    let is_namespace = req.rd.group.is_empty() && req.rd.plural == "namespaces";
    match rule.scope.as_str() {
        "Namespaced" => !is_namespace && req.rd.namespaced,
        "Cluster" => is_namespace || !req.rd.namespaced,
        _ => true,
    }
}

impl Admission {
    /// The version a webhook is called with for `op`, or `None` when no rule matches (under
    /// `matchPolicy: Equivalent` another served version of the same resource may match).
    fn invocation<'h>(
        &self,
        cluster: Cluster<'_>,
        hook: &'h Webhook,
        op: Operation,
        kind: &(String, String, String),
        req: &Request<'_>,
    ) -> Option<Invocation<'h>> {
        let group = &req.rd.group;
        if hook.rules.iter().any(|r| rule_matches(r, op, group, &req.rd.version, req)) {
            return Some(Invocation { hook, version: req.rd.version.clone(), kind: kind.2.clone() });
        }
        if !hook.equivalent || !(req.subresource.is_empty() || req.subresource == "status") {
            return None;
        }
        let versions = cluster.catalog.versions_of(group, &req.rd.plural);
        versions.into_iter().filter(|d| d.version != req.rd.version).find_map(|d| {
            hook.rules.iter().any(|r| rule_matches(r, op, group, &d.version, req)).then(|| Invocation {
                hook,
                version: d.version.clone(),
                kind: d.kind.clone(),
            })
        })
    }

    /// Every validating webhook, configurations in name order, webhooks in listed order.
    fn webhooks(cluster: Cluster<'_>) -> Vec<Webhook> {
        let mut configs = cluster.store.snapshot(VALIDATING_STORAGE);
        configs.sort_by(|a, b| crate::meta::name(&a.1).cmp(crate::meta::name(&b.1)));
        configs.iter().flat_map(|(_, c)| config::webhooks(c)).collect()
    }

    /// The policy bindings and webhooks that may apply to a request that can turn out as one of `ops` (a patch may
    /// create), before the object is known. Empty: the request needs no admission.
    pub(crate) fn candidates(&self, cluster: Cluster<'_>, req: &Request<'_>, ops: &[Operation]) -> Candidates {
        Candidates {
            policies: policy::candidates(cluster, req, ops),
            webhooks: self.candidate_webhooks(cluster, req, ops),
        }
    }

    /// Admits one attempt: the ValidatingAdmissionPolicy bindings first (as kube-apiserver's plugin order has
    /// them), then the webhooks. `Ok` carries the webhooks' warnings.
    pub(crate) async fn admit(
        &self,
        cluster: Cluster<'_>,
        candidates: &Candidates,
        req: &Request<'_>,
        a: &Attempt,
    ) -> Result<Vec<String>, ApiError> {
        policy::admit(cluster, &candidates.policies, req, a)?;
        self.validate(cluster, &candidates.webhooks, req, a).await
    }

    /// The webhooks whose rules may match a request that can turn out as one of `ops`, before the object is known.
    fn candidate_webhooks(&self, cluster: Cluster<'_>, req: &Request<'_>, ops: &[Operation]) -> Vec<Webhook> {
        if req.rd.group == config::GROUP || cluster.store.count(VALIDATING_STORAGE, None) == 0 {
            return Vec::new();
        }
        let kind = (req.rd.group.clone(), req.rd.version.clone(), req.rd.kind.clone());
        Self::webhooks(cluster)
            .into_iter()
            .filter(|h| ops.iter().any(|op| self.invocation(cluster, h, *op, &kind, req).is_some()))
            .collect()
    }

    /// The labels `namespaceSelector` is evaluated against; `None` when it does not apply
    /// (cluster-scoped resources other than namespaces).
    pub(crate) fn namespace_labels(
        cluster: Cluster<'_>,
        req: &Request<'_>,
        a: &Attempt,
    ) -> Option<BTreeMap<String, String>> {
        let is_namespace = req.rd.group.is_empty() && req.rd.plural == "namespaces";
        if is_namespace && req.subresource.is_empty() {
            return a.object.as_ref().or(a.old_object.as_ref()).map(object_labels).or_else(|| Some(BTreeMap::new()));
        }
        let ns = if is_namespace { a.name.as_str() } else { req.namespace };
        if ns.is_empty() {
            return None;
        }
        Some(cluster.store.get("namespaces", &object_key("", ns)).map(|n| object_labels(&n)).unwrap_or_default())
    }

    /// Calls the matching webhooks for one attempt. `Ok` carries the webhooks' warnings; `Err`
    /// is the refusal (or the call failure of a `Fail` webhook) the client gets.
    pub(crate) async fn validate(
        &self,
        cluster: Cluster<'_>,
        hooks: &[Webhook],
        req: &Request<'_>,
        a: &Attempt,
    ) -> Result<Vec<String>, ApiError> {
        let ns_labels = Self::namespace_labels(cluster, req, a);
        let mut calls = Vec::new();
        for hook in hooks {
            let Some(inv) = self.invocation(cluster, hook, a.operation, &a.kind, req) else { continue };
            if let Some(labels) = &ns_labels
                && !hook.namespace_selector.matches(labels)
            {
                continue;
            }
            if !hook.object_selector.is_empty() {
                let matches = |o: &Option<Value>| o.as_ref().is_some_and(|o| hook.object_selector.matches_object(o));
                if !matches(&a.object) && !matches(&a.old_object) {
                    continue;
                }
            }
            if req.dry_run && !hook.dry_run_safe() {
                return Err(ApiError::bad_request(format!(
                    "admission webhook {:?} does not support dry run",
                    hook.name
                )));
            }
            calls.push(inv);
        }
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let futures = calls.iter().map(|inv| {
            let review = self.review(req, a, inv);
            async move {
                let result = self.caller.call(cluster.store, inv.hook, &review).await;
                (inv.hook, result)
            }
        });
        let results = futures::future::join_all(futures).await;
        let mut warnings = Vec::new();
        let mut first_error = None;
        for (hook, result) in results {
            match result {
                Ok(response) => {
                    warnings.extend(
                        response
                            .get("warnings")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .map(str::to_string),
                    );
                    if response.get("allowed").and_then(Value::as_bool) != Some(true) && first_error.is_none() {
                        first_error = Some(denied(&hook.name, response.get("status")));
                    }
                }
                Err(e) if hook.fail_closed => {
                    tracing::warn!(webhook = %hook.name, error = %e.0, "failed calling webhook, failing closed");
                    if first_error.is_none() {
                        first_error =
                            Some(ApiError::internal(format!("failed calling webhook {:?}: {}", hook.name, e.0)));
                    }
                }
                Err(e) => {
                    tracing::warn!(webhook = %hook.name, error = %e.0, "failed calling webhook, failing open");
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(warnings),
        }
    }

    /// The AdmissionReview sent to one webhook.
    fn review(&self, req: &Request<'_>, a: &Attempt, inv: &Invocation<'_>) -> Value {
        let group = req.rd.group.clone();
        let converted = inv.version != req.rd.version;
        let api_version = if group.is_empty() { inv.version.clone() } else { format!("{group}/{}", inv.version) };
        let convert = |o: &Option<Value>| -> Value {
            match o {
                Some(v) if converted => {
                    let mut v = v.clone();
                    if let Value::Object(m) = &mut v {
                        m.insert("apiVersion".into(), json!(api_version));
                    }
                    v
                }
                Some(v) => v.clone(),
                None => Value::Null,
            }
        };
        let (kind, resource) = if converted {
            (
                json!({"group": group, "version": inv.version, "kind": inv.kind}),
                json!({"group": group, "version": inv.version, "resource": req.rd.plural}),
            )
        } else {
            (
                json!({"group": a.kind.0, "version": a.kind.1, "kind": a.kind.2}),
                json!({"group": group, "version": req.rd.version, "resource": req.rd.plural}),
            )
        };
        let mut r = Map::new();
        r.insert("uid".into(), json!(crate::meta::new_uid()));
        r.insert("kind".into(), kind);
        r.insert("resource".into(), resource);
        if !req.subresource.is_empty() {
            r.insert("subResource".into(), json!(req.subresource));
        }
        r.insert("requestKind".into(), json!({"group": a.kind.0, "version": a.kind.1, "kind": a.kind.2}));
        r.insert(
            "requestResource".into(),
            json!({"group": req.rd.group, "version": req.rd.version, "resource": req.rd.plural}),
        );
        if !req.subresource.is_empty() {
            r.insert("requestSubResource".into(), json!(req.subresource));
        }
        if !a.name.is_empty() {
            r.insert("name".into(), json!(a.name));
        }
        if !req.namespace.is_empty() {
            r.insert("namespace".into(), json!(req.namespace));
        }
        r.insert("operation".into(), json!(a.operation.as_str()));
        let mut user = Map::new();
        user.insert("username".into(), json!(req.user.name));
        if !req.user.uid.is_empty() {
            user.insert("uid".into(), json!(req.user.uid));
        }
        if !req.user.groups.is_empty() {
            user.insert("groups".into(), json!(req.user.groups));
        }
        if !req.user.extra.is_empty() {
            user.insert("extra".into(), crate::user::extra_json(req.user));
        }
        r.insert("userInfo".into(), Value::Object(user));
        r.insert("object".into(), convert(&a.object));
        r.insert("oldObject".into(), convert(&a.old_object));
        r.insert("dryRun".into(), json!(req.dry_run));
        r.insert("options".into(), a.options.clone());
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": Value::Object(r)})
    }
}

/// `ToStatusErr`: the webhook's `status`, its message prefixed with who denied, its code kept
/// when it is an error code (400 otherwise).
pub(crate) fn denied(webhook: &str, status: Option<&Value>) -> ApiError {
    let status = status.filter(|s| s.is_object());
    let field = |k: &str| status.and_then(|s| s.get(k)).and_then(Value::as_str).unwrap_or("").to_string();
    let code = status.and_then(|s| s.get("code")).and_then(Value::as_u64).unwrap_or(0);
    let code = if (400..=599).contains(&code) { code as u16 } else { 400 };
    let by = format!("admission webhook {webhook:?} denied the request");
    let (message, reason) = (field("message"), field("reason"));
    let message = if !message.is_empty() {
        format!("{by}: {message}")
    } else if !reason.is_empty() {
        format!("{by}: {reason}")
    } else {
        format!("{by} without explanation")
    };
    let mut e = ApiError::new(code, &reason, message);
    if let Some(d) = status.and_then(|s| s.get("details")).filter(|d| d.is_object()) {
        // kube-apiserver's ErrorNegotiated sends `details.retryAfterSeconds` as the `Retry-After` header too
        // (responsewriters/writers.go), which client-go's clients wait on before they retry.
        e.retry_after = d.get("retryAfterSeconds").and_then(Value::as_u64).filter(|s| *s > 0);
        e = e.with_details(d.clone());
    }
    e
}

/// The options object of an admission request.
pub(crate) fn options(
    operation: Operation,
    dry_run: bool,
    field_manager: Option<&str>,
    delete: Option<&Value>,
) -> Value {
    let kind = match operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
    };
    let mut m = match delete {
        Some(Value::Object(d)) if operation == Operation::Delete => d.clone(),
        _ => Map::new(),
    };
    m.insert("kind".into(), json!(kind));
    m.insert("apiVersion".into(), json!("meta.k8s.io/v1"));
    if dry_run {
        m.insert("dryRun".into(), json!(["All"]));
    }
    if let Some(f) = field_manager.filter(|f| !f.is_empty())
        && operation != Operation::Delete
    {
        m.insert("fieldManager".into(), json!(f));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_and_codes_as_upstream() {
        let e = denied(
            "deny.example.com",
            Some(&json!({"code": 429, "message": "players online", "reason": "TooManyRequests"})),
        );
        assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
        assert_eq!(e.message, "admission webhook \"deny.example.com\" denied the request: players online");
        assert_eq!(e.retry_after, None);
        // A retry hint in the details becomes the Retry-After header, as kube-apiserver sends it.
        let e = denied(
            "deny.example.com",
            Some(&json!({"code": 429, "message": "not now", "details": {"retryAfterSeconds": 2}})),
        );
        assert_eq!((e.code, e.retry_after), (429, Some(2)));
        let e = denied("d.example.com", Some(&json!({"code": 200})));
        assert_eq!(e.code, 400);
        assert_eq!(e.message, "admission webhook \"d.example.com\" denied the request without explanation");
        assert_eq!(denied("d.example.com", None).code, 400);
        let e = denied("d.example.com", Some(&json!({"reason": "Because"})));
        assert_eq!(e.message, "admission webhook \"d.example.com\" denied the request: Because");
    }

    fn registry() -> crate::registry::Registry {
        crate::registry::Registry::new(Store::new(100, 100), std::sync::Arc::new(Catalog::new()))
    }

    fn cluster(reg: &crate::registry::Registry) -> Cluster<'_> {
        Cluster { store: &reg.store, catalog: &reg.catalog }
    }

    fn webhook(side_effects: &str, rules: Value) -> Webhook {
        let config = json!({"metadata": {"name": "c"}, "webhooks": [{"name": "w.example.com", "sideEffects": side_effects,
            "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1:1/"}, "rules": rules}]});
        config::webhooks(&config).remove(0)
    }

    #[test]
    fn rules_match_operations_resources_subresources_and_scope() {
        let reg = registry();
        let user = UserInfo::admin();
        let rd = |g: &str, r: &str| reg.catalog.get(g, "v1", r).unwrap();
        let (pods, nodes, namespaces) = (rd("", "pods"), rd("", "nodes"), rd("", "namespaces"));
        let req = |rd, sub| Request { rd, subresource: sub, namespace: "", user: &user, dry_run: false };
        let matches = |rule: Value, op: Operation, r: &Request<'_>| {
            let h = webhook("None", json!([rule]));
            let kind = (r.rd.group.clone(), r.rd.version.clone(), r.rd.kind.clone());
            Admission::default().invocation(cluster(&reg), &h, op, &kind, r).is_some()
        };
        let rule = |ops: &[&str], res: &[&str], scope: &str| json!({"operations": ops, "apiGroups": [""], "apiVersions": ["v1"], "resources": res, "scope": scope});
        let pod = req(&pods, "");
        let eviction = req(&pods, "eviction");
        assert!(matches(rule(&["*"], &["pods"], "*"), Operation::Delete, &pod));
        assert!(!matches(rule(&["CREATE"], &["pods"], "*"), Operation::Delete, &pod));
        assert!(!matches(rule(&["*"], &["pods"], "*"), Operation::Create, &eviction), "pods is not pods/eviction");
        assert!(!matches(rule(&["*"], &["*"], "*"), Operation::Create, &eviction), "* is no subresource");
        assert!(matches(rule(&["*"], &["*/*"], "*"), Operation::Create, &eviction));
        assert!(matches(rule(&["*"], &["pods/*"], "*"), Operation::Create, &eviction));
        assert!(matches(rule(&["*"], &["*/eviction"], "*"), Operation::Create, &eviction));
        assert!(matches(rule(&["*"], &["*"], "Namespaced"), Operation::Create, &pod));
        assert!(!matches(rule(&["*"], &["*"], "Cluster"), Operation::Create, &pod));
        assert!(matches(rule(&["*"], &["*"], "Cluster"), Operation::Create, &req(&nodes, "")));
        // Namespaces are cluster-scoped.
        assert!(matches(rule(&["*"], &["*"], "Cluster"), Operation::Create, &req(&namespaces, "")));
        assert!(!matches(rule(&["*"], &["*"], "Namespaced"), Operation::Create, &req(&namespaces, "")));
    }

    #[tokio::test]
    async fn dry_runs_are_refused_by_webhooks_with_side_effects() {
        // v1 only stores None/NoneOnDryRun, so this is the dispatcher's rule for configurations
        // stored through older versions (sideEffects Some/Unknown): refuse the dry run, call nothing.
        let reg = registry();
        let user = UserInfo::admin();
        let cms = reg.catalog.get("", "v1", "configmaps").unwrap();
        let hooks = vec![webhook(
            "Unknown",
            json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]),
        )];
        let attempt = Attempt {
            operation: Operation::Create,
            kind: ("".into(), "v1".into(), "ConfigMap".into()),
            name: "x".into(),
            object: Some(json!({"metadata": {"name": "x"}})),
            old_object: None,
            options: options(Operation::Create, true, None, None),
        };
        let dry = Request { rd: &cms, subresource: "", namespace: "default", user: &user, dry_run: true };
        let e = Admission::default().validate(cluster(&reg), &hooks, &dry, &attempt).await.unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
        assert_eq!(e.message, "admission webhook \"w.example.com\" does not support dry run");
    }

    #[test]
    fn delete_options_carry_the_request_options() {
        let o = options(Operation::Delete, true, None, Some(&json!({"gracePeriodSeconds": 0})));
        assert_eq!(
            o,
            json!({"gracePeriodSeconds": 0, "kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"]})
        );
        let o = options(Operation::Create, false, Some("kubectl-client-side-apply"), None);
        assert_eq!(o["fieldManager"], "kubectl-client-side-apply");
        assert_eq!(o["kind"], "CreateOptions");
    }
}
