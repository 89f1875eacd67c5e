//! The HTTP front end: routing of discovery, health, version, OpenAPI, the kube-sim admin API
//! and resource requests, plus authentication, authorization and fault injection around them.

mod handlers;
pub mod request;
mod response;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use hyper::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use crate::auth::{self, Attributes, Authenticator};
use crate::faults::{FaultConfig, Faults};
use crate::openapi::OpenApiCache;
use crate::registry::{Registry, UserInfo};
use crate::status::ApiError;
use request::{Query, Representation, negotiate, parse_resource_path};
pub use response::{error_response, json_response};

/// The Kubernetes version kube-sim reports (kubectl 1.32 is within the supported skew).
pub const GIT_VERSION: &str = "v1.33.0";

/// Everything request handlers share.
pub struct AppState {
    pub registry: Arc<Registry>,
    pub faults: Arc<Faults>,
    pub auth: Authenticator,
    pub openapi: OpenApiCache,
    /// `host:port` clients reach the server at (discovery's `serverAddressByClientCIDRs`).
    pub address: String,
    /// Whether to answer aggregated discovery (`false` forces clients onto the legacy path).
    pub aggregated_discovery: bool,
    /// Maximum request body size.
    pub max_body: usize,
}

pub fn router(state: Arc<AppState>) -> Router {
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

fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": "kube-sim",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24 (kube-sim, Rust)",
        "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
    })
}

fn text(status: StatusCode, body: &str) -> axum::response::Response {
    let mut r = axum::response::Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

async fn dispatch(st: Arc<AppState>, req: Request<Body>) -> axum::response::Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = Query::parse(req.uri().query());
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_string);
    let authorization = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_string);
    let user = match st.auth.authenticate(&st.registry.store, authorization.as_deref()) {
        Ok(u) => u,
        Err(e) => return error_response(&e),
    };
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
        Err(e) => return error_response(&e),
    };
    if let Some(rr) = parse_resource_path(&path) {
        return handlers::resource(st, user, req, rr, query).await;
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
    let rep = negotiate(accept.as_deref());
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["version"] => json_response(StatusCode::OK, &version_info(), &[]),
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
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(10);
