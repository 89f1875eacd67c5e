//! The HTTP front end: routing of discovery, health, version, OpenAPI, the kube-sim admin API
//! and resource requests, plus authentication, authorization and fault injection around them.

mod handlers;
pub(crate) mod request;
mod response;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use hyper::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use crate::audit::{Audit, AuditEvent, Written};
use crate::auth::{self, Attributes, Authenticator};
use crate::faults::{self, FaultConfig, Faults};
use crate::openapi::OpenApiCache;
use crate::registry::Registry;
use crate::status::ApiError;
use crate::user::UserInfo;
use request::{Query, Representation, ResourceRequest, negotiate, parse_resource_path, verb_for};
pub(crate) use response::{error_response, json_response};

/// Everything request handlers share.
pub(crate) struct AppState {
    pub registry: Arc<Registry>,
    pub faults: Arc<Faults>,
    pub audit: Arc<Audit>,
    pub auth: Arc<Authenticator>,
    pub openapi: OpenApiCache,
    /// `host:port` clients reach the server at (discovery's `serverAddressByClientCIDRs`).
    pub address: String,
    /// Whether to answer aggregated discovery (`false` forces clients onto the legacy path).
    pub aggregated_discovery: bool,
    /// Maximum request body size.
    pub max_body: usize,
    /// Validating admission webhooks.
    pub admission: Arc<crate::admission::Admission>,
    /// The simulated containers' logs (`pods/NAME/log`), written by the kubelet simulator.
    pub logs: Arc<crate::logs::PodLogs>,
    /// What `componentstatuses` reports.
    pub components: crate::componentstatus::Components,
}

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

async fn handle(State(st): State<Arc<AppState>>, req: Request<Body>) -> axum::response::Response {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let started = std::time::Instant::now();
    let resp = dispatch(st, req).await;
    tracing::debug!(%method, uri = %uri, status = resp.status().as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "request");
    resp
}

fn text(status: StatusCode, body: &str) -> axum::response::Response {
    let mut r = axum::response::Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// Records one write request in the audit log when dropped: with the response's code when
/// [`AuditGuard::finish`] saw it, with code 0 when the client went away first.
struct AuditGuard {
    audit: Arc<Audit>,
    event: Option<AuditEvent>,
}

impl AuditGuard {
    fn new(
        st: &AppState,
        received: k8s_openapi::jiff::Timestamp,
        rr: &ResourceRequest,
        req: &Request<Body>,
        query: &Query,
    ) -> Option<Self> {
        let verb = verb_for(req.method(), rr.name.is_some(), false);
        if !matches!(verb, "create" | "update" | "patch" | "delete" | "deletecollection") {
            return None;
        }
        let uri = req.uri().path_and_query().map_or_else(|| req.uri().path().to_string(), ToString::to_string);
        let resource = match st.registry.catalog.get(&rr.group, &rr.version, &rr.resource) {
            Some(rd) => rd.plural.clone(),
            None => rr.resource.clone(),
        };
        Some(Self {
            audit: st.audit.clone(),
            event: Some(AuditEvent {
                id: 0,
                audit_id: String::new(),
                request_received_timestamp: received,
                stage_timestamp: received,
                user: String::new(),
                groups: Vec::new(),
                impersonated_by: None,
                user_agent: req
                    .headers()
                    .get(header::USER_AGENT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string(),
                verb: verb.to_string(),
                request_uri: format!("{} {uri}", req.method()),
                api_group: rr.group.clone(),
                api_version: rr.version.clone(),
                resource,
                subresource: rr.subresource.clone(),
                namespace: rr.namespace.clone().unwrap_or_default(),
                name: rr.name.clone().unwrap_or_default(),
                resource_version: None,
                code: 0,
                dry_run: query.all("dryRun").contains(&"All"),
            }),
        })
    }

    fn user(&mut self, user: &UserInfo, requester: &UserInfo) {
        if let Some(e) = self.event.as_mut() {
            e.user = user.name.clone();
            e.groups = user.groups.clone();
            e.impersonated_by = (user.name != requester.name).then(|| requester.name.clone());
        }
    }

    fn finish(mut self, resp: &axum::response::Response) {
        if let Some(e) = self.event.as_mut() {
            e.code = resp.status().as_u16();
            e.audit_id = resp.headers().get("audit-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
            if let Some(w) = resp.extensions().get::<Written>() {
                if !w.name.is_empty() {
                    e.name = w.name.clone();
                }
                e.resource_version = w.resource_version.clone();
            }
        }
    }
}

impl Drop for AuditGuard {
    fn drop(&mut self) {
        if let Some(mut e) = self.event.take() {
            e.stage_timestamp = k8s_openapi::jiff::Timestamp::now();
            self.audit.record(e);
        }
    }
}

/// Holds a request while a blackhole rule matches it (the client may give up meanwhile: then
/// this future is dropped and the request has no effect).
pub(crate) async fn wait_while_blackholed(
    faults: &Faults,
    verb: &str,
    gr: Option<&crate::status::GroupResource>,
    subresource: Option<&str>,
    client: &faults::Client<'_>,
) {
    while faults.blackholed(verb, gr, subresource, client) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn dispatch(st: Arc<AppState>, req: Request<Body>) -> axum::response::Response {
    let received = k8s_openapi::jiff::Timestamp::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = Query::parse(req.uri().query());
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_string);
    let authorization = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_string);
    let user_agent = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let resource_request = parse_resource_path(&path);
    let mut guard = resource_request.as_ref().and_then(|rr| AuditGuard::new(&st, received, rr, &req, &query));
    let finish = |guard: Option<AuditGuard>, resp: axum::response::Response| {
        if let Some(g) = guard {
            g.finish(&resp);
        }
        resp
    };
    let user = match st.auth.authenticate(&st.registry.store, authorization.as_deref()) {
        Ok(u) => u,
        Err(e) => return finish(guard, error_response(&e)),
    };
    let requester = user.clone();
    let (impersonated_user, impersonated_uid, impersonated_groups) = {
        let h = req.headers();
        let one = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let groups: Vec<String> =
            h.get_all("impersonate-group").iter().filter_map(|v| v.to_str().ok().map(str::to_string)).collect();
        (one("impersonate-user"), one("impersonate-uid"), groups)
    };
    let user = match auth::impersonate(
        &st.registry.store,
        user,
        impersonated_user.as_deref(),
        &impersonated_groups,
        impersonated_uid.as_deref(),
    ) {
        Ok(u) => u,
        Err(e) => return finish(guard, error_response(&e)),
    };
    if let Some(g) = guard.as_mut() {
        g.user(&user, &requester);
    }
    if let Some(rr) = resource_request {
        let resp = handlers::resource(st, user, requester.name, req, rr, query).await;
        return finish(guard, resp);
    }
    let verb = method.as_str().to_ascii_lowercase();
    let non_resource = |st: &AppState, user: &UserInfo| -> Result<(), ApiError> {
        let attrs =
            Attributes { verb: verb.clone(), resource_request: false, path: path.clone(), ..Attributes::default() };
        if auth::allowed(&st.registry.store, user, &attrs) { Ok(()) } else { Err(auth::forbidden(user, &attrs)) }
    };
    if path.starts_with("/kube-sim/") {
        if !user.is_admin() {
            return error_response(&ApiError::forbidden_path(&user.name, &verb, &path));
        }
        return admin(st, method, &path, req).await;
    }
    if let Err(e) = non_resource(&st, &user) {
        return error_response(&e);
    }
    let client = faults::Client { user: &user.name, requester: &requester.name, user_agent: &user_agent };
    let decision = st.faults.decide_non_resource("get", &client);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    if decision.blackhole {
        wait_while_blackholed(&st.faults, "get", None, None, &client).await;
    }
    if let Some(e) = decision.error {
        return error_response(&e);
    }
    let rep = negotiate(accept.as_deref());
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["version"] => json_response(StatusCode::OK, &crate::version::info(), &[]),
        [probe @ ("healthz" | "livez" | "readyz"), rest @ ..] => {
            if query.get("verbose").is_some() {
                let checks = [
                    "ping",
                    "log",
                    "etcd",
                    "poststarthook/start-apiextensions-controllers",
                    "poststarthook/crd-informer-synced",
                ];
                let mut out = String::new();
                for c in checks {
                    out.push_str(&format!("[+]{c} ok\n"));
                }
                out.push_str(&format!("{probe} check passed\n"));
                text(StatusCode::OK, &out)
            } else if rest.is_empty()
                || ["ping", "etcd", "log"].contains(&rest[0])
                || rest[0].starts_with("poststarthook")
            {
                text(StatusCode::OK, "ok")
            } else {
                text(StatusCode::NOT_FOUND, "404 page not found\n")
            }
        }
        ["api"] => match rep {
            Some(Representation::Discovery(v)) if st.aggregated_discovery => {
                response::discovery_response(&crate::discovery::aggregated(&st.registry.catalog, true, &v), &v)
            }
            _ => json_response(StatusCode::OK, &crate::discovery::api_versions(&st.address), &[]),
        },
        ["apis"] => match rep {
            Some(Representation::Discovery(v)) if st.aggregated_discovery => {
                response::discovery_response(&crate::discovery::aggregated(&st.registry.catalog, false, &v), &v)
            }
            _ => json_response(StatusCode::OK, &crate::discovery::api_group_list(&st.registry.catalog), &[]),
        },
        ["apis", g] => match crate::discovery::api_group(&st.registry.catalog, g) {
            Some(v) => json_response(StatusCode::OK, &v, &[]),
            None => error_response(&ApiError::not_found_path()),
        },
        ["api", v] => match crate::discovery::api_resource_list(&st.registry.catalog, "", v) {
            Some(doc) => json_response(StatusCode::OK, &doc, &[]),
            None => error_response(&ApiError::not_found_path()),
        },
        ["apis", g, v] => match crate::discovery::api_resource_list(&st.registry.catalog, g, v) {
            Some(doc) => json_response(StatusCode::OK, &doc, &[]),
            None => error_response(&ApiError::not_found_path()),
        },
        ["openapi", "v3"] => json_response(StatusCode::OK, &st.openapi.root(&st.registry.catalog), &[]),
        ["openapi", "v3", rest @ ..] => match st.openapi.document(&st.registry.catalog, &rest.join("/")) {
            Some((hash, bytes)) => response::openapi_response(&hash, bytes, query.get("hash").is_some()),
            None => error_response(&ApiError::not_found_path()),
        },
        _ => error_response(&ApiError::not_found_path()),
    }
}

/// `/kube-sim/...`: runtime control of fault injection.
async fn admin(st: Arc<AppState>, method: Method, path: &str, req: Request<Body>) -> axum::response::Response {
    match (method, path.trim_end_matches('/')) {
        (Method::GET, "/kube-sim/faults") => {
            json_response(StatusCode::OK, &serde_json::to_value(st.faults.get()).unwrap_or(Value::Null), &[])
        }
        (Method::PUT | Method::POST, "/kube-sim/faults") => {
            let body = match axum::body::to_bytes(req.into_body(), st.max_body).await {
                Ok(b) => b,
                Err(e) => return error_response(&ApiError::bad_request(e.to_string())),
            };
            match serde_json::from_slice::<FaultConfig>(&body) {
                Ok(cfg) => {
                    st.faults.set(cfg.clone());
                    json_response(StatusCode::OK, &serde_json::to_value(cfg).unwrap_or(Value::Null), &[])
                }
                Err(e) => error_response(&ApiError::bad_request(format!("invalid fault configuration: {e}"))),
            }
        }
        (Method::DELETE, "/kube-sim/faults") => {
            st.faults.set(FaultConfig::default());
            json_response(StatusCode::OK, &serde_json::to_value(FaultConfig::default()).unwrap_or(Value::Null), &[])
        }
        (Method::POST, "/kube-sim/faults/drop-watches") => {
            let n = st.registry.store.drop_watchers(None);
            json_response(StatusCode::OK, &json!({"dropped": n}), &[])
        }
        (Method::GET, "/kube-sim/audit") => {
            let since = match Query::parse(req.uri().query()).int("since") {
                Ok(s) => s.unwrap_or(0).max(0) as u64,
                Err(e) => return error_response(&ApiError::bad_request(e)),
            };
            json_response(StatusCode::OK, &serde_json::to_value(st.audit.since(since)).unwrap_or(Value::Null), &[])
        }
        (Method::DELETE, "/kube-sim/audit") => {
            st.audit.clear();
            json_response(StatusCode::OK, &json!({}), &[])
        }
        (Method::POST, "/kube-sim/tokens") => {
            let body = match axum::body::to_bytes(req.into_body(), st.max_body).await {
                Ok(b) => b,
                Err(e) => return error_response(&ApiError::bad_request(e.to_string())),
            };
            match serde_json::from_slice::<auth::TokenUser>(&body) {
                Ok(u) if !u.user.is_empty() => {
                    let token = st.auth.add_token(u);
                    json_response(StatusCode::CREATED, &json!({"token": token}), &[])
                }
                Ok(_) => error_response(&ApiError::bad_request("user is required")),
                Err(e) => error_response(&ApiError::bad_request(format!("invalid token request: {e}"))),
            }
        }
        (Method::GET, "/kube-sim/service-addresses") => json_response(
            StatusCode::OK,
            &json!({"items": serde_json::to_value(st.admission.caller.service_addresses()).unwrap_or(Value::Null)}),
            &[],
        ),
        (Method::POST | Method::PUT, "/kube-sim/service-addresses") => {
            let body = match axum::body::to_bytes(req.into_body(), st.max_body).await {
                Ok(b) => b,
                Err(e) => return error_response(&ApiError::bad_request(e.to_string())),
            };
            match serde_json::from_slice::<crate::admission::ServiceAddress>(&body) {
                Ok(a) if a.service.split_once('/').is_some_and(|(ns, n)| !ns.is_empty() && !n.is_empty()) => {
                    st.admission.caller.set_service_address(a.clone());
                    json_response(StatusCode::OK, &serde_json::to_value(a).unwrap_or(Value::Null), &[])
                }
                Ok(_) => error_response(&ApiError::bad_request("service must be NAMESPACE/NAME")),
                Err(e) => error_response(&ApiError::bad_request(format!("invalid service address: {e}"))),
            }
        }
        (Method::DELETE, "/kube-sim/service-addresses") => {
            st.admission.caller.clear_service_addresses();
            json_response(StatusCode::OK, &json!({"items": []}), &[])
        }
        (Method::GET, "/kube-sim/stats") => {
            let buckets = st.registry.store.buckets();
            let counts: serde_json::Map<String, Value> =
                buckets.iter().map(|b| (b.clone(), json!(st.registry.store.count(b, None)))).collect();
            json_response(
                StatusCode::OK,
                &json!({"resourceVersion": st.registry.store.current_rv(), "objects": counts}),
                &[],
            )
        }
        _ => error_response(&ApiError::not_found_path()),
    }
}

/// How often watchers that asked for bookmarks get one.
pub(crate) const BOOKMARK_INTERVAL: Duration = Duration::from_secs(10);
