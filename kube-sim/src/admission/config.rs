//! `admissionregistration.k8s.io/v1` webhook configurations: scheme defaults, validation (the
//! v1 rules of `ValidateValidatingWebhookConfiguration`, with the real field paths and wording)
//! and the parsed form the dispatcher matches requests against.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::selector::LabelSelector;
use crate::status::FieldError;

/// The group of the webhook configurations (requests for its resources never reach webhooks).
pub(crate) const GROUP: &str = "admissionregistration.k8s.io";
pub(crate) const MUTATING: &str = "mutatingwebhookconfigurations";

/// Where a webhook is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `clientConfig.url`.
    Url(String),
    /// `clientConfig.service`: reached at `https://NAME.NAMESPACE.svc:PORT/PATH`.
    Service { namespace: String, name: String, path: String, port: u16 },
}

/// One rule of `rules[]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    pub scope: String,
}

/// One webhook of a configuration, defaults applied.
#[derive(Clone, Debug)]
pub(crate) struct Webhook {
    pub name: String,
    pub target: Target,
    pub ca_bundle: Option<Vec<u8>>,
    pub rules: Vec<Rule>,
    /// `failurePolicy: Fail` (the default) rejects the request when the call fails.
    pub fail_closed: bool,
    /// `matchPolicy: Equivalent` (the default) also matches other versions of the resource.
    pub equivalent: bool,
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
    pub side_effects: String,
    pub timeout: Duration,
}

impl Webhook {
    /// Whether a dry-run request may be sent to it (`sideEffects: None | NoneOnDryRun`).
    pub(crate) fn dry_run_safe(&self) -> bool {
        self.side_effects == "None" || self.side_effects == "NoneOnDryRun"
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The webhooks of a stored configuration, in their listed order. Entries that cannot be
/// parsed (impossible after validation) are skipped.
pub(crate) fn webhooks(config: &Value) -> Vec<Webhook> {
    let mut out = Vec::new();
    for w in config.get("webhooks").and_then(Value::as_array).into_iter().flatten() {
        let mut w = w.clone();
        webhook_defaults(&mut w);
        let cc = w.get("clientConfig");
        let target = if let Some(u) = cc.and_then(|c| c.get("url")).and_then(Value::as_str) {
            Target::Url(u.to_string())
        } else if let Some(s) = cc.and_then(|c| c.get("service")) {
            Target::Service {
                namespace: s.get("namespace").and_then(Value::as_str).unwrap_or("").to_string(),
                name: s.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                path: s.get("path").and_then(Value::as_str).unwrap_or("").to_string(),
                port: s.get("port").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()).unwrap_or(443),
            }
        } else {
            continue;
        };
        let ca_bundle = cc
            .and_then(|c| c.get("caBundle"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .and_then(|s| data_encoding::BASE64.decode(s.as_bytes()).ok());
        let rules = w
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| Rule {
                operations: strings(r.get("operations")),
                api_groups: strings(r.get("apiGroups")),
                api_versions: strings(r.get("apiVersions")),
                resources: strings(r.get("resources")),
                scope: r.get("scope").and_then(Value::as_str).unwrap_or("*").to_string(),
            })
            .collect();
        let selector = |key: &str| {
            w.get(key).map(LabelSelector::from_label_selector_object).transpose().ok().flatten().unwrap_or_default()
        };
        out.push(Webhook {
            name: w.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
            target,
            ca_bundle,
            rules,
            fail_closed: w.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
            equivalent: w.get("matchPolicy").and_then(Value::as_str) != Some("Exact"),
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
            side_effects: w.get("sideEffects").and_then(Value::as_str).unwrap_or("Unknown").to_string(),
            timeout: Duration::from_secs(w.get("timeoutSeconds").and_then(Value::as_u64).unwrap_or(10).clamp(1, 30)),
        });
    }
    out
}

fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
    }
}

fn webhook_defaults(w: &mut Value) {
    let Value::Object(m) = w else { return };
    set_default(m, "failurePolicy", json!("Fail"));
    set_default(m, "matchPolicy", json!("Equivalent"));
    set_default(m, "namespaceSelector", json!({}));
    set_default(m, "objectSelector", json!({}));
    set_default(m, "timeoutSeconds", json!(10));
    if let Some(Value::Array(rules)) = m.get_mut("rules") {
        for r in rules {
            if let Value::Object(r) = r {
                set_default(r, "scope", json!("*"));
            }
        }
    }
    if let Some(Value::Object(s)) = m.get_mut("clientConfig").and_then(|c| c.get_mut("service")) {
        set_default(s, "port", json!(443));
    }
}

/// Scheme defaults of both configuration kinds (`SetDefaults_ValidatingWebhook`,
/// `SetDefaults_MutatingWebhook`, `SetDefaults_Rule`, `SetDefaults_ServiceReference`).
pub(crate) fn defaults(obj: &mut Value, mutating: bool) {
    if let Some(Value::Array(ws)) = obj.get_mut("webhooks") {
        for w in ws {
            webhook_defaults(w);
            if mutating && let Value::Object(m) = w {
                set_default(m, "reinvocationPolicy", json!("Never"));
            }
        }
    }
}

fn supported(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| s.to_string()).collect()
}

fn rule_errors(r: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let ops = r.get("operations").and_then(Value::as_array);
    match ops {
        None => errs.push(FieldError::required(format!("{path}.operations"), "")),
        Some(ops) if ops.is_empty() => errs.push(FieldError::required(format!("{path}.operations"), "")),
        Some(ops) => {
            if ops.len() > 1 && ops.iter().any(|o| o == "*") {
                errs.push(FieldError::invalid(
                    format!("{path}.operations"),
                    Value::Array(ops.clone()),
                    "if '*' is present, must not specify other operations",
                ));
            }
            for (i, o) in ops.iter().enumerate() {
                let o = o.as_str().unwrap_or("");
                if !["*", "CREATE", "UPDATE", "DELETE", "CONNECT"].contains(&o) {
                    errs.push(FieldError::not_supported(
                        format!("{path}.operations[{i}]"),
                        json!(o),
                        &supported(&["*", "CONNECT", "CREATE", "DELETE", "UPDATE"]),
                    ));
                }
            }
        }
    }
    for field in ["apiGroups", "apiVersions"] {
        let list = r.get(field).and_then(Value::as_array);
        if list.is_none_or(Vec::is_empty) {
            errs.push(FieldError::required(format!("{path}.{field}"), ""));
        } else if let Some(list) = list
            && list.len() > 1
            && list.iter().any(|g| g == "*")
        {
            errs.push(FieldError::invalid(
                format!("{path}.{field}"),
                Value::Array(list.clone()),
                "if '*' is present, must not specify other API groups",
            ));
        }
    }
    match r.get("resources").and_then(Value::as_array) {
        None => errs.push(FieldError::required(format!("{path}.resources"), "")),
        Some(rs) if rs.is_empty() => errs.push(FieldError::required(format!("{path}.resources"), "")),
        Some(rs) => {
            for (i, res) in rs.iter().enumerate() {
                let res = res.as_str().unwrap_or("");
                if res.is_empty() {
                    errs.push(FieldError::required(format!("{path}.resources[{i}]"), ""));
                }
                if res.contains('/') && res.split('/').any(str::is_empty) {
                    errs.push(FieldError::invalid(
                        format!("{path}.resources[{i}]"),
                        json!(res),
                        "must not have empty resource or subresource",
                    ));
                }
            }
        }
    }
    if let Some(scope) = r.get("scope").and_then(Value::as_str)
        && !["*", "Cluster", "Namespaced"].contains(&scope)
    {
        errs.push(FieldError::not_supported(
            format!("{path}.scope"),
            json!(scope),
            &supported(&["*", "Cluster", "Namespaced"]),
        ));
    }
}

fn client_config_errors(cc: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let url = cc.and_then(|c| c.get("url")).and_then(Value::as_str);
    let service = cc.and_then(|c| c.get("service")).filter(|s| !s.is_null());
    match (url, service) {
        (Some(_), Some(_)) | (None, None) => {
            errs.push(FieldError::required(path.to_string(), "exactly one of url or service is required"));
        }
        (Some(u), None) => {
            let scheme = u.split_once("://").map(|(s, _)| s).unwrap_or("");
            if scheme != "https" {
                errs.push(FieldError::invalid(
                    format!("{path}.url"),
                    json!(scheme),
                    "'https' is the only allowed URL scheme",
                ));
            } else if u.contains('#') || u.contains('?') {
                errs.push(FieldError::invalid(
                    format!("{path}.url"),
                    json!(u),
                    "fragments and query parameters are not permitted",
                ));
            }
        }
        (None, Some(s)) => {
            for f in ["name", "namespace"] {
                if s.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    errs.push(FieldError::required(format!("{path}.service.{f}"), "service {f} is required"));
                }
            }
            if let Some(p) = s.get("path").and_then(Value::as_str)
                && !p.is_empty()
                && !p.starts_with('/')
            {
                errs.push(FieldError::invalid(format!("{path}.service.path"), json!(p), "must start with a '/'"));
            }
            if let Some(port) = s.get("port").and_then(Value::as_i64)
                && !(1..=65535).contains(&port)
            {
                errs.push(FieldError::invalid(
                    format!("{path}.service.port"),
                    json!(port),
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
}

fn selector_errors(sel: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    if let Some(s) = sel.filter(|s| !s.is_null())
        && let Err(e) = LabelSelector::from_label_selector_object(s)
    {
        errs.push(FieldError::invalid(path.to_string(), s.clone(), e));
    }
}

/// The v1 validation of a webhook configuration (defaults already applied).
pub(crate) fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    let label = regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").ok();
    let Some(ws) = obj.get("webhooks").and_then(Value::as_array) else { return errs };
    for (i, w) in ws.iter().enumerate() {
        let path = format!("webhooks[{i}]");
        let name = w.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            errs.push(FieldError::required(format!("{path}.name"), ""));
        } else {
            if !names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(format!("{path}.name"), json!(name)));
            }
            if name.split('.').count() < 3 {
                errs.push(FieldError::invalid(
                    format!("{path}.name"),
                    json!(name),
                    "should be a domain with at least three segments separated by dots",
                ));
            } else if name.len() > 253 || label.as_ref().is_some_and(|re| !name.split('.').all(|s| re.is_match(s))) {
                errs.push(FieldError::invalid(
                    format!("{path}.name"),
                    json!(name),
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                ));
            }
        }
        for (j, r) in w.get("rules").and_then(Value::as_array).into_iter().flatten().enumerate() {
            rule_errors(r, &format!("{path}.rules[{j}]"), &mut errs);
        }
        if let Some(fp) = w.get("failurePolicy").and_then(Value::as_str)
            && !["Fail", "Ignore"].contains(&fp)
        {
            errs.push(FieldError::not_supported(
                format!("{path}.failurePolicy"),
                json!(fp),
                &supported(&["Fail", "Ignore"]),
            ));
        }
        if let Some(mp) = w.get("matchPolicy").and_then(Value::as_str)
            && !["Exact", "Equivalent"].contains(&mp)
        {
            errs.push(FieldError::not_supported(
                format!("{path}.matchPolicy"),
                json!(mp),
                &supported(&["Equivalent", "Exact"]),
            ));
        }
        match w.get("sideEffects").and_then(Value::as_str) {
            None => {
                errs.push(FieldError::required(format!("{path}.sideEffects"), "must specify one of None, NoneOnDryRun"))
            }
            Some(se) if !["None", "NoneOnDryRun"].contains(&se) => errs.push(FieldError::not_supported(
                format!("{path}.sideEffects"),
                json!(se),
                &supported(&["None", "NoneOnDryRun"]),
            )),
            Some(_) => {}
        }
        match w.get("admissionReviewVersions").and_then(Value::as_array) {
            None => errs.push(FieldError::required(
                format!("{path}.admissionReviewVersions"),
                "must specify one of v1, v1beta1",
            )),
            Some(vs) if vs.is_empty() => errs.push(FieldError::required(
                format!("{path}.admissionReviewVersions"),
                "must specify one of v1, v1beta1",
            )),
            Some(vs) => {
                if !vs.iter().any(|v| v == "v1" || v == "v1beta1") {
                    errs.push(FieldError::invalid(
                        format!("{path}.admissionReviewVersions"),
                        Value::Array(vs.clone()),
                        "must include at least one of v1, v1beta1",
                    ));
                }
            }
        }
        if let Some(t) = w.get("timeoutSeconds").and_then(Value::as_i64)
            && !(1..=30).contains(&t)
        {
            errs.push(FieldError::invalid(
                format!("{path}.timeoutSeconds"),
                json!(t),
                "the timeout value must be between 1 and 30 seconds",
            ));
        }
        client_config_errors(w.get("clientConfig"), &format!("{path}.clientConfig"), &mut errs);
        selector_errors(w.get("namespaceSelector"), &format!("{path}.namespaceSelector"), &mut errs);
        selector_errors(w.get("objectSelector"), &format!("{path}.objectSelector"), &mut errs);
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_parsing_follow_the_v1_scheme() {
        let mut c = json!({"metadata": {"name": "cfg"}, "webhooks": [{
            "name": "a.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "ns", "name": "svc"}},
            "rules": [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}]});
        defaults(&mut c, false);
        let w = &c["webhooks"][0];
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["matchPolicy"], "Equivalent");
        assert_eq!(w["timeoutSeconds"], 10);
        assert_eq!(w["namespaceSelector"], json!({}));
        assert_eq!(w["objectSelector"], json!({}));
        assert_eq!(w["rules"][0]["scope"], "*");
        assert_eq!(w["clientConfig"]["service"]["port"], 443);
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        let parsed = webhooks(&c);
        assert_eq!(parsed.len(), 1);
        assert!(parsed[0].fail_closed && parsed[0].equivalent && parsed[0].dry_run_safe());
        assert_eq!(
            parsed[0].target,
            Target::Service { namespace: "ns".into(), name: "svc".into(), path: String::new(), port: 443 }
        );
    }

    #[test]
    fn validation_words_errors_like_the_api_server() {
        let c = json!({"webhooks": [
            {"name": "short", "sideEffects": "Some", "admissionReviewVersions": ["v2"], "timeoutSeconds": 31,
             "clientConfig": {"url": "http://x"}},
            {"name": "a.b.c", "clientConfig": {}},
        ]});
        let got: Vec<String> = validate(&c).iter().map(FieldError::to_string).collect();
        let want = [
            "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots",
            "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
            // (Go prints the value as `[]string{"v2"}`.)
            "webhooks[0].admissionReviewVersions: Invalid value: []interface {}{\"v2\"}: must include at least one of v1, v1beta1",
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme",
            "webhooks[1].sideEffects: Required value: must specify one of None, NoneOnDryRun",
            "webhooks[1].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
            "webhooks[1].clientConfig: Required value: exactly one of url or service is required",
        ];
        for w in want {
            assert!(got.iter().any(|g| g == w), "missing {w:?} in {got:#?}");
        }
    }
}
