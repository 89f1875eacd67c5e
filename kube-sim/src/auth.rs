//! Authentication (static bearer tokens in the `--token-auth-file` CSV format) and RBAC
//! authorization (Roles, ClusterRoles with aggregation, RoleBindings, ClusterRoleBindings),
//! including the bootstrap policy every cluster has and the access review APIs kubectl uses.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::selector::LabelSelector;
use crate::status::{ApiError, GroupResource};
use crate::store::Store;
use crate::user::{UserInfo, extra_json};

/// Users known by token. Requests without a token are the admin user (kube-sim is a local
/// test server); requests with an unknown token get `401 Unauthorized`.
#[derive(Debug, Default)]
pub(crate) struct Authenticator {
    tokens: std::sync::RwLock<HashMap<String, UserInfo>>,
    service_accounts: std::sync::Mutex<HashMap<String, IssuedToken>>,
}

/// A bearer token user added at runtime ([`crate::SimHandle::add_token_user`],
/// `POST /kube-sim/tokens`), like one line of the token file.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct TokenUser {
    /// The token; a random one when absent.
    pub token: Option<String>,
    pub user: String,
    /// Defaults to the user name.
    pub uid: Option<String>,
    /// `system:masters` makes the user a cluster admin (no RBAC needed); `system:authenticated`
    /// (and the service-account groups for `system:serviceaccount:` users) is always added.
    pub groups: Vec<String>,
}

/// A service account token handed out through `serviceaccounts/token`.
#[derive(Clone, Debug)]
struct IssuedToken {
    namespace: String,
    name: String,
    uid: String,
    expires: i64,
    /// The pod a `boundObjectRef` bound the token to.
    pod: Option<BoundPod>,
}

/// The pod a token is bound to, and the node it ran on when the token was issued.
#[derive(Clone, Debug)]
struct BoundPod {
    name: String,
    uid: String,
    node: Option<(String, String)>,
}

/// The `extra` keys of a service-account user, as the service-account authenticator fills them.
pub(crate) const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
pub(crate) const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";
pub(crate) const EXTRA_NODE_NAME: &str = "authentication.kubernetes.io/node-name";
pub(crate) const EXTRA_NODE_UID: &str = "authentication.kubernetes.io/node-uid";

impl IssuedToken {
    fn user(&self) -> UserInfo {
        let mut user = service_account_user(&self.namespace, &self.name, &self.uid);
        let mut put = |k: &str, v: &str| {
            if !v.is_empty() {
                user.extra.insert(k.to_string(), vec![v.to_string()]);
            }
        };
        if let Some(pod) = &self.pod {
            put(EXTRA_POD_NAME, &pod.name);
            put(EXTRA_POD_UID, &pod.uid);
            if let Some((node, node_uid)) = &pod.node {
                put(EXTRA_NODE_NAME, node);
                put(EXTRA_NODE_UID, node_uid);
            }
        }
        user
    }
}

/// `userInfo.extra` of a review's spec (`{"key": ["value", ...]}`).
fn extra_of(v: Option<&Value>) -> std::collections::BTreeMap<String, Vec<String>> {
    v.and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(Some(v)))).collect())
        .unwrap_or_default()
}

fn service_account_user(namespace: &str, name: &str, uid: &str) -> UserInfo {
    UserInfo {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        uid: uid.to_string(),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".into(),
        ],
        extra: Default::default(),
    }
}

/// Splits one CSV line (double quotes group fields containing commas).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|f| f.trim().to_string()).collect()
}

impl Authenticator {
    pub(crate) fn parse(content: &str) -> Result<Self, String> {
        let mut tokens = HashMap::new();
        for (i, line) in content.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f = csv_fields(line);
            if f.len() < 3 {
                return Err(format!("line {}: expected token,user,uid[,\"group1,group2\"]", i + 1));
            }
            let mut groups: Vec<String> = f
                .get(3)
                .map(|g| g.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
                .unwrap_or_default();
            if let Some(rest) = f[1].strip_prefix("system:serviceaccount:") {
                let ns = rest.split(':').next().unwrap_or_default();
                groups.push("system:serviceaccounts".into());
                groups.push(format!("system:serviceaccounts:{ns}"));
            }
            groups.push("system:authenticated".into());
            tokens.insert(
                f[0].clone(),
                UserInfo { name: f[1].clone(), uid: f[2].clone(), groups, extra: Default::default() },
            );
        }
        Ok(Self { tokens: std::sync::RwLock::new(tokens), service_accounts: std::sync::Mutex::new(HashMap::new()) })
    }

    /// Adds a token user; returns the token.
    pub(crate) fn add_token(&self, u: TokenUser) -> String {
        let token = u.token.filter(|t| !t.is_empty()).unwrap_or_else(|| {
            let random: [u8; 24] = rand::RngExt::random(&mut rand::rng());
            format!("kube-sim-user.{}", random.iter().map(|b| format!("{b:02x}")).collect::<String>())
        });
        let mut groups = u.groups;
        if let Some(rest) = u.user.strip_prefix("system:serviceaccount:") {
            let ns = rest.split(':').next().unwrap_or_default();
            groups.push("system:serviceaccounts".into());
            groups.push(format!("system:serviceaccounts:{ns}"));
        }
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        let info =
            UserInfo { uid: u.uid.unwrap_or_else(|| u.user.clone()), name: u.user, groups, extra: Default::default() };
        self.tokens.write().unwrap_or_else(|p| p.into_inner()).insert(token.clone(), info);
        token
    }

    pub(crate) fn from_file(path: &Path) -> Result<Self, String> {
        let content = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Self::parse(&content)
    }

    pub(crate) fn authenticate(&self, store: &Store, authorization: Option<&str>) -> Result<UserInfo, ApiError> {
        let Some(header) = authorization else { return Ok(UserInfo::admin()) };
        let token = header.strip_prefix("Bearer ").or_else(|| header.strip_prefix("bearer ")).map(str::trim);
        let Some(t) = token else {
            // Basic auth and others are not supported: treated like an anonymous admin request.
            return Ok(UserInfo::admin());
        };
        self.user_of_token(store, t).ok_or_else(ApiError::unauthorized)
    }

    /// The user a bearer token authenticates as: a token file (or runtime) user, or the service account of a live
    /// TokenRequest token.
    fn user_of_token(&self, store: &Store, token: &str) -> Option<UserInfo> {
        if let Some(u) = self.tokens.read().unwrap_or_else(|p| p.into_inner()).get(token) {
            return Some(u.clone());
        }
        let issued = self.service_accounts.lock().unwrap_or_else(|p| p.into_inner()).get(token).cloned()?;
        // The token dies with its service account (or a new one of the same name), with the pod it is bound to (once
        // the pod is gone, replaced, or past its deletion timestamp) and on expiry.
        let key = format!("{}/{}", issued.namespace, issued.name);
        let now = k8s_openapi::jiff::Timestamp::now();
        let alive = store.get("serviceaccounts", &key).is_some_and(|sa| crate::meta::uid(&sa) == issued.uid);
        let pod_alive = issued.pod.as_ref().is_none_or(|bound| {
            store.get("pods", &format!("{}/{}", issued.namespace, bound.name)).is_some_and(|pod| {
                let deleted_before_now = pod
                    .pointer("/metadata/deletionTimestamp")
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                    .is_some_and(|t| t < now);
                crate::meta::uid(&pod) == bound.uid && !deleted_before_now
            })
        });
        (alive && pod_alive && now.as_second() <= issued.expires).then(|| issued.user())
    }

    /// `TokenReview` (`authentication.k8s.io/v1`): the review with `status` filled as the tokenreview storage does
    /// it: `authenticated` and `user` for a known token, only an empty `user` (`authenticated: false` is omitted by
    /// Go's encoder) for any other, no `error` (the token authenticators report an unknown opaque token as not
    /// authenticated, not as an error).
    pub(crate) fn review_token(&self, store: &Store, body: &Value) -> Result<Value, ApiError> {
        let token = body.pointer("/spec/token").and_then(Value::as_str).unwrap_or("");
        if token.is_empty() {
            return Err(ApiError::bad_request("token is required for TokenReview in authentication"));
        }
        let status = match self.user_of_token(store, token) {
            Some(u) => {
                let mut user = serde_json::Map::new();
                user.insert("username".into(), json!(u.name));
                if !u.uid.is_empty() {
                    user.insert("uid".into(), json!(u.uid));
                }
                user.insert("groups".into(), json!(u.groups));
                if !u.extra.is_empty() {
                    user.insert("extra".into(), extra_json(&u));
                }
                let audiences = body
                    .pointer("/spec/audiences")
                    .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
                    .cloned()
                    .unwrap_or_else(|| json!(["https://kubernetes.default.svc.cluster.local"]));
                json!({"authenticated": true, "user": user, "audiences": audiences})
            }
            None => json!({"user": {}}),
        };
        let mut out = body.clone();
        if let Value::Object(m) = &mut out {
            m.insert("status".into(), status);
            if let Value::Object(md) = m.entry("metadata").or_insert_with(|| json!({})) {
                md.insert("creationTimestamp".into(), Value::Null);
            }
        }
        Ok(out)
    }

    /// `serviceaccounts/token` (TokenRequest): issues an opaque bearer token for the account.
    pub(crate) fn issue_token(
        &self,
        store: &Store,
        namespace: &str,
        name: &str,
        request: &Value,
    ) -> Result<Value, ApiError> {
        let sa = store
            .get("serviceaccounts", &format!("{namespace}/{name}"))
            .ok_or_else(|| ApiError::not_found(&GroupResource::new("", "serviceaccounts"), name))?;
        let spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
        let seconds = spec.get("expirationSeconds").and_then(Value::as_i64).unwrap_or(3600);
        if seconds < 600 {
            return Err(ApiError::invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                &[crate::status::FieldError::invalid(
                    "spec.expirationSeconds",
                    json!(seconds),
                    "may not specify a duration less than 10 minutes",
                )],
            ));
        }
        let pod = match spec.get("boundObjectRef").filter(|r| !r.is_null()) {
            Some(r) => Some(bound_pod(store, namespace, name, r)?),
            None => None,
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let expires = now.as_second() + seconds;
        let random: [u8; 24] = rand::RngExt::random(&mut rand::rng());
        let token = format!("kube-sim.{}", random.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let issued = IssuedToken {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: crate::meta::uid(&sa).to_string(),
            expires,
            pod,
        };
        self.service_accounts.lock().unwrap_or_else(|p| p.into_inner()).insert(token.clone(), issued);
        let audiences = spec
            .get("audiences")
            .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
            .cloned()
            .unwrap_or_else(|| json!(["https://kubernetes.default.svc.cluster.local"]));
        let expiry =
            k8s_openapi::jiff::Timestamp::from_second(expires).map(crate::meta::format_time).unwrap_or_default();
        let mut out_spec = spec.clone();
        if let Value::Object(m) = &mut out_spec {
            m.insert("audiences".into(), audiences);
            m.insert("expirationSeconds".into(), json!(seconds));
        }
        Ok(json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": crate::meta::format_time(now)},
            "spec": out_spec,
            "status": {"token": token, "expirationTimestamp": expiry},
        }))
    }
}

/// `boundObjectRef` of a TokenRequest, as `saTokenREST` checks it: only a Pod (kube-sim binds to nothing else), one
/// that exists, runs as the account, and has the referenced UID when one is given.
fn bound_pod(store: &Store, namespace: &str, account: &str, r: &Value) -> Result<BoundPod, ApiError> {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (api_version, kind, name, uid) = (s("apiVersion"), s("kind"), s("name"), s("uid"));
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version.as_str()));
    if !(group.is_empty() && kind == "Pod") {
        return Err(ApiError::bad_request(format!(
            "cannot bind token to object of type {group}/{version}, Kind={kind}"
        )));
    }
    let pod = store
        .get("pods", &format!("{namespace}/{name}"))
        .ok_or_else(|| ApiError::not_found(&GroupResource::new("", "pods"), &name))?;
    let runs_as = pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).unwrap_or("default");
    if runs_as != account {
        return Err(ApiError::bad_request(format!(
            "cannot bind token for serviceaccount {account:?} to pod running with different serviceaccount name."
        )));
    }
    let pod_uid = crate::meta::uid(&pod).to_string();
    if !uid.is_empty() && uid != pod_uid {
        return Err(ApiError::conflict(
            &GroupResource::new("", "Pod"),
            &name,
            &format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might \
                 have been deleted and then recreated"
            ),
        ));
    }
    let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()).map(|n| {
        let node_uid = store.get("nodes", n).map(|node| crate::meta::uid(&node).to_string()).unwrap_or_default();
        (n.to_string(), node_uid)
    });
    Ok(BoundPod { name, uid: pod_uid, node })
}

/// Applies `Impersonate-User`/`Impersonate-Group`/`Impersonate-Uid` headers: the requester
/// must be allowed to `impersonate` users (and groups) by RBAC, as on a real server.
pub(crate) fn impersonate(
    store: &Store,
    requester: UserInfo,
    user: Option<&str>,
    groups: &[String],
    uid: Option<&str>,
) -> Result<UserInfo, ApiError> {
    let Some(user) = user else {
        if groups.is_empty() {
            return Ok(requester);
        }
        return Err(ApiError::internal("requested impersonation of groups without impersonating a user"));
    };
    let check = |resource: &str, name: &str| -> Result<(), ApiError> {
        let attrs = Attributes {
            verb: "impersonate".into(),
            resource_request: true,
            resource: resource.into(),
            name: name.into(),
            ..Attributes::default()
        };
        if allowed(store, &requester, &attrs) { Ok(()) } else { Err(forbidden(&requester, &attrs)) }
    };
    let mut out_groups: Vec<String> = groups.to_vec();
    if let Some(rest) = user.strip_prefix("system:serviceaccount:") {
        let (ns, name) = rest.split_once(':').unwrap_or(("", rest));
        let attrs = Attributes {
            verb: "impersonate".into(),
            resource_request: true,
            resource: "serviceaccounts".into(),
            name: name.into(),
            namespace: ns.into(),
            ..Attributes::default()
        };
        if !allowed(store, &requester, &attrs) {
            return Err(forbidden(&requester, &attrs));
        }
        if groups.is_empty() {
            out_groups.push("system:serviceaccounts".into());
            out_groups.push(format!("system:serviceaccounts:{ns}"));
        }
    } else {
        check("users", user)?;
    }
    for g in groups {
        check("groups", g)?;
    }
    if user != "system:anonymous" && !out_groups.iter().any(|g| g == "system:authenticated") {
        out_groups.push("system:authenticated".into());
    }
    Ok(UserInfo {
        name: user.to_string(),
        uid: uid.unwrap_or_default().to_string(),
        groups: out_groups,
        extra: Default::default(),
    })
}

/// What a request does, as the authorizer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub namespace: String,
    pub path: String,
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = strings(rule.get("verbs"));
    if !verbs.iter().any(|v| v == "*" || *v == a.verb) {
        return false;
    }
    if !a.resource_request {
        return strings(rule.get("nonResourceURLs"))
            .iter()
            .any(|u| u == "*" || *u == a.path || (u.ends_with('*') && a.path.starts_with(u.trim_end_matches('*'))));
    }
    let groups = strings(rule.get("apiGroups"));
    if !groups.iter().any(|g| g == "*" || *g == a.api_group) {
        return false;
    }
    let combined =
        if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    let resources = strings(rule.get("resources"));
    let resource_ok = resources.iter().any(|r| {
        r == "*"
            || *r == combined
            || (!a.subresource.is_empty()
                && (*r == format!("*/{}", a.subresource) || *r == format!("{}/*", a.resource)))
    });
    if !resource_ok {
        return false;
    }
    let names = strings(rule.get("resourceNames"));
    names.is_empty() || (!a.name.is_empty() && names.contains(&a.name))
}

fn subject_matches(subject: &Value, user: &UserInfo, binding_ns: &str) -> bool {
    let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = subject.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "User" => name == user.name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = subject.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or(binding_ns);
            user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

const CLUSTER_ROLES: &str = "clusterroles.rbac.authorization.k8s.io";
const CLUSTER_ROLE_BINDINGS: &str = "clusterrolebindings.rbac.authorization.k8s.io";
const ROLES: &str = "roles.rbac.authorization.k8s.io";
const ROLE_BINDINGS: &str = "rolebindings.rbac.authorization.k8s.io";

/// Rules of a ClusterRole including those aggregated into it by label selectors.
fn cluster_role_rules(store: &Store, name: &str) -> Vec<Value> {
    let Some(role) = store.get(CLUSTER_ROLES, name) else { return vec![] };
    let mut rules: Vec<Value> = role.get("rules").and_then(Value::as_array).cloned().unwrap_or_default();
    if let Some(selectors) =
        role.get("aggregationRule").and_then(|a| a.get("clusterRoleSelectors")).and_then(Value::as_array)
    {
        let sels: Vec<LabelSelector> =
            selectors.iter().filter_map(|s| LabelSelector::from_label_selector_object(s).ok()).collect();
        for (_, other) in store.snapshot(CLUSTER_ROLES) {
            if crate::meta::name(&other) == name {
                continue;
            }
            if sels.iter().any(|s| !s.is_empty() && s.matches_object(&other)) {
                rules.extend(other.get("rules").and_then(Value::as_array).cloned().unwrap_or_default());
            }
        }
    }
    rules
}

/// Every rule that applies to the user in a namespace ("" = cluster-wide only).
pub(crate) fn rules_for(store: &Store, user: &UserInfo, namespace: &str) -> Vec<Value> {
    let mut rules = Vec::new();
    for (_, b) in store.snapshot(CLUSTER_ROLE_BINDINGS) {
        let subjects = b.get("subjects").and_then(Value::as_array).cloned().unwrap_or_default();
        if subjects.iter().any(|s| subject_matches(s, user, "")) {
            let role = b.get("roleRef").and_then(|r| r.get("name")).and_then(Value::as_str).unwrap_or("");
            rules.extend(cluster_role_rules(store, role));
        }
    }
    if !namespace.is_empty() {
        let prefix = format!("{namespace}/");
        for (key, b) in store.snapshot(ROLE_BINDINGS) {
            if !key.starts_with(&prefix) {
                continue;
            }
            let subjects = b.get("subjects").and_then(Value::as_array).cloned().unwrap_or_default();
            if !subjects.iter().any(|s| subject_matches(s, user, namespace)) {
                continue;
            }
            let role_ref = b.get("roleRef").cloned().unwrap_or(Value::Null);
            let role_name = role_ref.get("name").and_then(Value::as_str).unwrap_or("");
            match role_ref.get("kind").and_then(Value::as_str) {
                Some("ClusterRole") => rules.extend(cluster_role_rules(store, role_name)),
                Some("Role") => {
                    if let Some(r) = store.get(ROLES, &format!("{namespace}/{role_name}")) {
                        rules.extend(r.get("rules").and_then(Value::as_array).cloned().unwrap_or_default());
                    }
                }
                _ => {}
            }
        }
    }
    rules
}

pub(crate) fn allowed(store: &Store, user: &UserInfo, a: &Attributes) -> bool {
    if user.is_admin() {
        return true;
    }
    rules_for(store, user, &a.namespace).iter().any(|r| rule_allows(r, a))
}

/// The `403 Forbidden` the real server returns for a denied request.
pub(crate) fn forbidden(user: &UserInfo, a: &Attributes) -> ApiError {
    if !a.resource_request {
        let mut e = ApiError::new(
            403,
            "Forbidden",
            format!("forbidden: User {:?} cannot {} path {:?}", user.name, a.verb, a.path),
        );
        e.details = Some(Box::new(json!({})));
        return e;
    }
    let resource =
        if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    let cause = if a.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
            user.name, a.verb, a.api_group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
            user.name, a.verb, a.api_group, a.namespace
        )
    };
    ApiError::forbidden(&GroupResource::new(&a.api_group, &a.resource), &a.name, &cause)
}

fn attrs_from_review(spec: &Value) -> Attributes {
    if let Some(r) = spec.get("resourceAttributes") {
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Attributes {
            verb: s("verb"),
            resource_request: true,
            api_group: s("group"),
            api_version: s("version"),
            resource: s("resource"),
            subresource: s("subresource"),
            name: s("name"),
            namespace: s("namespace"),
            path: String::new(),
        }
    } else {
        let n = spec.get("nonResourceAttributes").cloned().unwrap_or(Value::Null);
        Attributes {
            verb: n.get("verb").and_then(Value::as_str).unwrap_or("").to_string(),
            resource_request: false,
            path: n.get("path").and_then(Value::as_str).unwrap_or("").to_string(),
            ..Attributes::default()
        }
    }
}

/// Evaluates an access review / rules review / self subject review (create-only kinds).
pub(crate) fn review(
    store: &Store,
    kind: &str,
    namespace: &str,
    body: &Value,
    user: &UserInfo,
) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let mut out = body.clone();
    let status = match kind {
        "SelfSubjectAccessReview" | "LocalSubjectAccessReview" | "SubjectAccessReview" => {
            let subject = if kind == "SelfSubjectAccessReview" {
                user.clone()
            } else {
                let mut groups = strings(spec.get("groups"));
                if !groups.iter().any(|g| g == "system:authenticated") && spec.get("user").is_some() {
                    groups.push("system:authenticated".into());
                }
                UserInfo {
                    name: spec.get("user").and_then(Value::as_str).unwrap_or("").to_string(),
                    uid: spec.get("uid").and_then(Value::as_str).unwrap_or("").to_string(),
                    groups,
                    extra: extra_of(spec.get("extra")),
                }
            };
            let mut a = attrs_from_review(&spec);
            if kind == "LocalSubjectAccessReview" {
                a.namespace = namespace.to_string();
            }
            let ok = allowed(store, &subject, &a);
            if ok {
                json!({"allowed": true, "reason": if subject.is_admin() { "kube-sim: member of system:masters" } else { "RBAC: allowed by a role binding" }})
            } else {
                json!({"allowed": false})
            }
        }
        "SelfSubjectRulesReview" => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            let rules = if user.is_admin() {
                vec![
                    json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                    json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
                ]
            } else {
                rules_for(store, user, ns)
            };
            let (resource, non_resource): (Vec<Value>, Vec<Value>) =
                rules.into_iter().partition(|r| r.get("nonResourceURLs").is_none());
            json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": false})
        }
        "SelfSubjectReview" => {
            let mut info = json!({"username": user.name, "uid": user.uid, "groups": user.groups});
            if !user.extra.is_empty() {
                info["extra"] = extra_json(user);
            }
            json!({"userInfo": info})
        }
        other => return Err(ApiError::bad_request(format!("{other} is not a review kind"))),
    };
    if let Value::Object(m) = &mut out {
        m.insert("status".into(), status);
        let md = m.entry("metadata").or_insert_with(|| json!({}));
        if let Value::Object(md) = md {
            md.insert("creationTimestamp".into(), Value::Null);
        }
    }
    Ok(out)
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

/// The bootstrap ClusterRoles and ClusterRoleBindings of a new cluster (a subset).
pub(crate) fn bootstrap_policy() -> Vec<(&'static str, Value)> {
    let read = &["get", "list", "watch"][..];
    let write = &["create", "delete", "deletecollection", "patch", "update"][..];
    let all_rw: Vec<&str> = read.iter().chain(write.iter()).copied().collect();
    let view_rules = vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            read,
        ),
        rule(&[""], &["namespaces"], read),
        rule(&["discovery.k8s.io"], &["endpointslices"], read),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            read,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"], read),
        rule(&["batch"], &["cronjobs", "cronjobs/status", "jobs", "jobs/status"], read),
        rule(&["policy"], &["poddisruptionbudgets", "poddisruptionbudgets/status"], read),
        rule(&["networking.k8s.io"], &["ingresses", "ingresses/status", "networkpolicies"], read),
        rule(&["events.k8s.io"], &["events"], read),
        rule(&["coordination.k8s.io"], &["leases"], read),
    ];
    let mut edit_rules = view_rules.clone();
    edit_rules.extend([
        rule(&[""], &["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "pods/eviction"], &all_rw),
        rule(
            &[""],
            // No `endpoints`: kube-apiserver dropped their write from edit and admin (CVE-2021-25740), since a
            // Service's endpoints written by hand can point it anywhere.
            &[
                "configmaps",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
                "events",
            ],
            &all_rw,
        ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
                "controllerrevisions",
            ],
            &all_rw,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], &all_rw),
        rule(&["batch"], &["cronjobs", "jobs"], &all_rw),
        rule(&["policy"], &["poddisruptionbudgets"], &all_rw),
        rule(&["networking.k8s.io"], &["ingresses", "networkpolicies"], &all_rw),
        rule(&["coordination.k8s.io"], &["leases"], &all_rw),
        rule(&["events.k8s.io"], &["events"], &all_rw),
    ]);
    let mut admin_rules = edit_rules.clone();
    admin_rules.push(rule(&["rbac.authorization.k8s.io"], &["rolebindings", "roles"], &all_rw));
    admin_rules.push(rule(&["authorization.k8s.io"], &["localsubjectaccessreviews"], &["create"]));
    let meta = |name: &str| json!({"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}, "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}});
    let aggregated = |name: &str, to: &str, rules: Vec<Value>| {
        let mut m = meta(name);
        if let Value::Object(o) = &mut m
            && let Some(Value::Object(labels)) = o.get_mut("labels")
        {
            if to == "edit" {
                labels.insert("rbac.authorization.k8s.io/aggregate-to-admin".into(), json!("true"));
            }
            if to == "view" {
                labels.insert("rbac.authorization.k8s.io/aggregate-to-edit".into(), json!("true"));
            }
        }
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": m,
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{name}"): "true"}}]},
               "rules": rules})
    };
    let binding = |name: &str, role: &str, group: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(name),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]})
    };
    vec![
        (
            CLUSTER_ROLES,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("cluster-admin"),
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
        ),
        (CLUSTER_ROLES, aggregated("admin", "", admin_rules)),
        (CLUSTER_ROLES, aggregated("edit", "edit", edit_rules)),
        (CLUSTER_ROLES, aggregated("view", "view", view_rules)),
        (
            CLUSTER_ROLES,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("system:discovery"),
            "rules": [{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]}]}),
        ),
        (
            CLUSTER_ROLES,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("system:basic-user"),
            "rules": [rule(&["authorization.k8s.io"], &["selfsubjectaccessreviews", "selfsubjectrulesreviews"], &["create"]), rule(&["authentication.k8s.io"], &["selfsubjectreviews"], &["create"])]}),
        ),
        (
            CLUSTER_ROLES,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("system:auth-delegator"),
            "rules": [rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]), rule(&["authorization.k8s.io"], &["subjectaccessreviews"], &["create"])]}),
        ),
        (
            CLUSTER_ROLES,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("system:public-info-viewer"),
            "rules": [{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]}),
        ),
        (CLUSTER_ROLE_BINDINGS, binding("cluster-admin", "cluster-admin", "system:masters")),
        (CLUSTER_ROLE_BINDINGS, binding("system:discovery", "system:discovery", "system:authenticated")),
        (CLUSTER_ROLE_BINDINGS, binding("system:basic-user", "system:basic-user", "system:authenticated")),
        (
            CLUSTER_ROLE_BINDINGS,
            binding("system:public-info-viewer", "system:public-info-viewer", "system:authenticated"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_and_rules() {
        let a = Authenticator::parse("tok1,alice,u1,\"dev,qa\"\n# comment\ntok2,bob,u2\n").unwrap();
        let store = Store::new(10, 10);
        let alice = a.authenticate(&store, Some("Bearer tok1")).unwrap();
        assert_eq!(alice.name, "alice");
        assert!(alice.groups.contains(&"qa".to_string()));
        assert_eq!(a.authenticate(&store, Some("Bearer nope")).unwrap_err().code, 401);
        assert!(a.authenticate(&store, None).unwrap().is_admin());

        let r = json!({"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "list"], "resourceNames": []});
        let mut at = Attributes {
            verb: "get".into(),
            resource_request: true,
            resource: "pods".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        assert!(rule_allows(&r, &at));
        at.subresource = "log".into();
        assert!(!rule_allows(&r, &at));
        at.subresource = "status".into();
        assert!(rule_allows(&r, &at));
        at.verb = "delete".into();
        assert!(!rule_allows(&r, &at));
        let e = forbidden(
            &alice,
            &Attributes {
                verb: "list".into(),
                resource_request: true,
                resource: "pods".into(),
                namespace: "default".into(),
                ..Default::default()
            },
        );
        assert_eq!(
            e.message,
            "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
    }
}
