//! The HTTPS server: `POST /validate-pods` (the pod gate), `POST /validate-workload` (deletion protection, BCS's
//! path), `GET /healthz` and `GET /readyz` (the chart's readiness probe: 200 while this replica answers webhook
//! calls, 503 once it is shutting down).
//!
//! Every answer is computed from the API at request time: for a pod `DELETE` the pod is the request's
//! `oldObject` (the API server's current object), for an eviction it is read with a GET, and the pod's
//! GameDeployment is always read with a GET. Nothing comes from a cache, so a stale cache can neither refuse a
//! deletion the operator already allows nor allow one it should refuse. When a read fails or takes longer than
//! [`API_TIMEOUT`], the webhook answers HTTP 500: the webhook configuration's `failurePolicy` decides (`Ignore`, the
//! chart's default: the deletion happens without the hook, as if the webhook were not installed; `Fail`: it is
//! refused until the API answers). A webhook that cannot read cannot decide, and the cluster owner chose which way
//! that goes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use common::api::GameDeployment;
use common::keys;
use common::runtime::Shutdown;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::StatusSummary;
use kube::core::{DynamicObject, ObjectList};
use kube::{Api, Client, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::tls::{CertFiles, TlsError, TlsListener, server_config};
use super::verdict::{
    self, DeletionAllow, GateSettings, Mark, PodOperation, PodRequest, PodVerdict, Protected, deletion_protection,
};
use super::{MARKED_AT, SPECIFIED_DELETE};
use crate::ownership;

/// Bound on each API read or write a webhook answer needs; the chart's `timeoutSeconds` is 5.
pub const API_TIMEOUT: Duration = Duration::from_secs(3);

/// The webhook server's settings (flags).
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub address: SocketAddr,
    pub cert: CertFiles,
    pub gate: GateSettings,
    /// Deletion protection for GameDeployments and HookTemplates without the `deletion-allow` label.
    pub deletion_default: DeletionAllow,
}

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook certificate: {0}")]
    Tls(#[from] TlsError),
    #[error("binding the webhook address {address}: {source}")]
    Bind { address: SocketAddr, source: std::io::Error },
    #[error("serving webhooks: {0}")]
    Serve(std::io::Error),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `pod-gate` or `deletion-protection`.
    pub webhook: String,
    /// `allowed`, `refused` or `error` (answered 500: the failurePolicy decided).
    pub verdict: String,
    /// Why (`operator`, `bypass`, `deadline_passed`, `marked`, …; a bounded set).
    pub reason: String,
}

/// `gamedeployment_webhook_requests_total{webhook,verdict,reason}`.
#[derive(Clone, Debug, Default)]
pub struct WebhookMetrics {
    requests: Family<WebhookLabels, Counter>,
}

impl WebhookMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.sub_registry_with_prefix("gamedeployment").register(
            "webhook_requests",
            "Admission webhook calls answered, by webhook, verdict and reason",
            metrics.requests.clone(),
        );
        metrics
    }

    fn count(&self, webhook: &str, verdict: &str, reason: &str) {
        self.requests
            .get_or_create(&WebhookLabels { webhook: webhook.into(), verdict: verdict.into(), reason: reason.into() })
            .inc();
    }
}

#[derive(Clone)]
struct AppState {
    client: Client,
    gate: Arc<GateSettings>,
    deletion_default: DeletionAllow,
    metrics: WebhookMetrics,
    shutdown: Shutdown,
}

/// Loads the certificate and binds, so a bad certificate or a taken port fails start-up.
pub async fn bind(config: &WebhookConfig) -> Result<TlsListener, WebhookError> {
    let tls = server_config(&config.cert)?;
    let tcp = tokio::net::TcpListener::bind(config.address)
        .await
        .map_err(|source| WebhookError::Bind { address: config.address, source })?;
    TlsListener::new(tcp, tls).map_err(|source| WebhookError::Bind { address: config.address, source })
}

pub fn router(client: Client, config: &WebhookConfig, metrics: WebhookMetrics, shutdown: Shutdown) -> Router {
    let state = AppState {
        client,
        gate: Arc::new(config.gate.clone()),
        deletion_default: config.deletion_default,
        metrics,
        shutdown,
    };
    Router::new()
        .route("/validate-pods", post(validate_pods))
        .route("/validate-workload", post(validate_workload))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Serves until `shutdown`.
pub async fn serve(listener: TlsListener, router: Router, shutdown: Shutdown) -> Result<(), WebhookError> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.wait().await })
        .await
        .map_err(WebhookError::Serve)
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.shutdown.is_triggered() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    } else {
        (StatusCode::OK, "ok")
    }
}

/// Why the webhook cannot answer (HTTP 500: the failurePolicy decides).
struct Unanswerable(String);

impl IntoResponse for Unanswerable {
    fn into_response(self) -> Response {
        (StatusCode::INTERNAL_SERVER_ERROR, self.0).into_response()
    }
}

async fn bounded<T>(what: &str, call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, Unanswerable> {
    match tokio::time::timeout(API_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Unanswerable(format!("{what}: {e}"))),
        Err(_) => Err(Unanswerable(format!("{what}: no answer within {API_TIMEOUT:?}"))),
    }
}

fn parse_request(review: AdmissionReview<DynamicObject>) -> Result<AdmissionRequest<DynamicObject>, Box<Response>> {
    review.try_into().map_err(|e| {
        Box::new((StatusCode::BAD_REQUEST, format!("not an AdmissionReview request: {e}")).into_response())
    })
}

fn review(response: AdmissionResponse) -> Response {
    Json(response.into_review()).into_response()
}

fn refuse(request: &AdmissionRequest<DynamicObject>, code: u16, message: String) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request).deny(message);
    response.result.code = code;
    response.result.status = Some(StatusSummary::Failure);
    response.result.reason = match code {
        429 => "TooManyRequests".into(),
        _ => "Forbidden".into(),
    };
    response
}

fn typed<K: serde::de::DeserializeOwned>(object: &DynamicObject) -> Option<K> {
    serde_json::to_value(object).ok().and_then(|v| serde_json::from_value(v).ok())
}

/// `gracePeriodSeconds` of the request's DeleteOptions (a DELETE's `options`, an Eviction's `deleteOptions`).
fn grace_period(request: &AdmissionRequest<DynamicObject>, operation: PodOperation) -> Option<i64> {
    match operation {
        PodOperation::Delete => {
            request.options.as_ref().and_then(|o| o.0.get("gracePeriodSeconds")).and_then(Value::as_i64)
        }
        PodOperation::Evict => request
            .object
            .as_ref()
            .and_then(|o| o.data.get("deleteOptions"))
            .and_then(|o| o.get("gracePeriodSeconds"))
            .and_then(Value::as_i64),
    }
}

async fn validate_pods(State(state): State<AppState>, Json(body): Json<AdmissionReview<DynamicObject>>) -> Response {
    let request = match parse_request(body) {
        Ok(request) => request,
        Err(response) => return *response,
    };
    match pod_gate(&state, &request).await {
        Ok(response) => review(response),
        Err(Unanswerable(message)) => {
            tracing::warn!(pod = %request.name, namespace = ?request.namespace, %message, "pod gate cannot answer");
            state.metrics.count("pod-gate", "error", "api");
            Unanswerable(message).into_response()
        }
    }
}

async fn pod_gate(
    state: &AppState,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<AdmissionResponse, Unanswerable> {
    let operation = match (&request.operation, request.sub_resource.as_deref()) {
        (Operation::Delete, None) => PodOperation::Delete,
        (Operation::Create, Some("eviction")) => PodOperation::Evict,
        _ => return Ok(AdmissionResponse::from(request)),
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(state.client.clone(), &namespace);
    let pod = match request.old_object.as_ref().filter(|_| operation == PodOperation::Delete).and_then(typed::<Pod>) {
        Some(pod) => Some(pod),
        None => bounded(&format!("reading pod {namespace}/{}", request.name), pods.get_opt(&request.name)).await?,
    };
    let owner = pod
        .as_ref()
        .and_then(|p| ownership::controller_of(p.metadata.owner_references.as_ref()))
        .filter(|o| o.kind == "GameDeployment")
        .map(|o| o.name.clone());
    let gd = match owner {
        Some(name) => {
            let gds: Api<GameDeployment> = Api::namespaced(state.client.clone(), &namespace);
            bounded(&format!("reading GameDeployment {namespace}/{name}"), gds.get_opt(&name)).await?
        }
        None => None,
    };
    let groups = request.user_info.groups.clone().unwrap_or_default();
    let pod_request = PodRequest {
        operation,
        username: request.user_info.username.as_deref().unwrap_or_default(),
        groups: &groups,
        grace_period_seconds: grace_period(request, operation),
    };
    let now = Timestamp::now();
    match verdict::pod_gate(&pod_request, pod.as_ref(), gd.as_ref(), &state.gate, now) {
        PodVerdict::Allow(why) => {
            state.metrics.count("pod-gate", "allowed", why.as_str());
            let mut response = AdmissionResponse::from(request);
            if matches!(why, verdict::Allowed::Bypass | verdict::Allowed::Forced | verdict::Allowed::DeadlinePassed) {
                let how = match why {
                    verdict::Allowed::Bypass => "the gate-bypass annotation",
                    verdict::Allowed::Forced => "a forced deletion by a privileged user",
                    _ => "the pod-gate deadline passed",
                };
                response.warnings =
                    Some(vec![format!("pod {} leaves without its pre-delete hook: allowed by {how}", request.name)]);
                response.audit_annotations.insert("pod-gate".into(), why.as_str().into());
            }
            Ok(response)
        }
        PodVerdict::Refuse(refusal) => {
            let mut message = refusal.message;
            if !refusal.mark.is_empty()
                && !request.dry_run
                && let Err(Unanswerable(e)) = mark(&pods, &request.name, &refusal.mark).await
            {
                // Still refused (the requester retries), but say the mark did not happen.
                tracing::warn!(pod = %request.name, %namespace, error = %e, "marking the pod failed");
                message = format!("{message} (marking the pod failed, retry: {e})");
            }
            tracing::info!(pod = %request.name, %namespace, user = pod_request.username, ?operation, "pod gate refused");
            state.metrics.count("pod-gate", "refused", if refusal.mark.is_empty() { "waiting" } else { "marked" });
            Ok(refuse(request, refusal.code, message))
        }
    }
}

/// Writes the mark with a merge patch of exactly the keys the verdict asked for (idempotent: every replica may
/// write it, the values are the same or the first one wins for the label).
async fn mark(pods: &Api<Pod>, name: &str, mark: &Mark) -> Result<(), Unanswerable> {
    let mut metadata = serde_json::Map::new();
    if mark.label {
        metadata.insert("labels".into(), json!({ SPECIFIED_DELETE: "true" }));
    }
    if let Some(at) = mark.marked_at {
        metadata.insert("annotations".into(), json!({ MARKED_AT: at.to_string() }));
    }
    let patch = json!({ "metadata": metadata });
    bounded(&format!("marking pod {name}"), pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch)))
        .await
        .map(|_| ())
}

async fn validate_workload(
    State(state): State<AppState>,
    Json(body): Json<AdmissionReview<DynamicObject>>,
) -> Response {
    let request = match parse_request(body) {
        Ok(request) => request,
        Err(response) => return *response,
    };
    match protect(&state, &request).await {
        Ok(response) => review(response),
        Err(Unanswerable(message)) => {
            tracing::warn!(name = %request.name, namespace = ?request.namespace, %message, "deletion protection cannot answer");
            state.metrics.count("deletion-protection", "error", "api");
            Unanswerable(message).into_response()
        }
    }
}

async fn protect(
    state: &AppState,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<AdmissionResponse, Unanswerable> {
    let resource = request.resource.resource.as_str();
    if request.operation != Operation::Delete
        || request.sub_resource.is_some()
        || request.resource.group != "tkex.tencent.com"
        || !matches!(resource, "gamedeployments" | "hooktemplates")
    {
        return Ok(AdmissionResponse::from(request));
    }
    let namespace = request.namespace.clone().unwrap_or_default();
    let object = match &request.old_object {
        Some(object) => Some(object.clone()),
        None => {
            let gvk = kube::core::GroupVersionKind::gvk(
                "tkex.tencent.com",
                "v1alpha1",
                if resource == "gamedeployments" { "GameDeployment" } else { "HookTemplate" },
            );
            let api: Api<DynamicObject> = Api::namespaced_with(
                state.client.clone(),
                &namespace,
                &kube::core::ApiResource::from_gvk_with_plural(&gvk, resource),
            );
            bounded(&format!("reading {resource} {namespace}/{}", request.name), api.get_opt(&request.name)).await?
        }
    };
    let Some(object) = object else { return Ok(AdmissionResponse::from(request)) };
    let label = object.labels().get(keys::DELETION_ALLOW).map(String::as_str);
    let result = if resource == "gamedeployments" {
        let replicas = object.data.get("spec").and_then(|s| s.get("replicas")).and_then(Value::as_i64);
        let replicas = replicas.map(|r| i32::try_from(r).unwrap_or(i32::MAX));
        deletion_protection(label, state.deletion_default, Protected::GameDeployment { replicas })
    } else {
        let cascading = match label {
            Some(value) => value == "Cascading",
            None => state.deletion_default == DeletionAllow::Cascading,
        };
        let used_by = if cascading { template_users(state, &namespace, &request.name).await? } else { Vec::new() };
        deletion_protection(label, state.deletion_default, Protected::HookTemplate { used_by: &used_by })
    };
    match result {
        Ok(()) => {
            state.metrics.count("deletion-protection", "allowed", resource);
            Ok(AdmissionResponse::from(request))
        }
        Err(message) => {
            tracing::info!(%resource, name = %request.name, %namespace, %message, "deletion refused");
            state.metrics.count("deletion-protection", "refused", resource);
            Ok(refuse(request, 403, message))
        }
    }
}

/// The GameDeployments of `namespace` (not being deleted) that name HookTemplate `template` in a hook.
async fn template_users(state: &AppState, namespace: &str, template: &str) -> Result<Vec<String>, Unanswerable> {
    let gds: Api<GameDeployment> = Api::namespaced(state.client.clone(), namespace);
    let list: ObjectList<GameDeployment> =
        bounded(&format!("listing GameDeployments in {namespace}"), gds.list(&ListParams::default())).await?;
    Ok(list
        .items
        .iter()
        .filter(|gd| gd.metadata.deletion_timestamp.is_none() && verdict::uses_template(gd, template))
        .map(ResourceExt::name_any)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": body,
        }))
        .expect("an AdmissionReview");
        review.try_into().expect("a request")
    }

    fn base(operation: &str, sub_resource: Option<&str>) -> Value {
        json!({
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": sub_resource,
            "name": "game-abcde",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "alice"},
        })
    }

    #[test]
    fn the_grace_period_comes_from_delete_options_or_the_eviction() {
        let mut delete = base("DELETE", None);
        delete["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0});
        assert_eq!(grace_period(&request(delete), PodOperation::Delete), Some(0));
        assert_eq!(grace_period(&request(base("DELETE", None)), PodOperation::Delete), None);
        let mut evict = base("CREATE", Some("eviction"));
        evict["object"] = json!({
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "game-abcde", "namespace": "default"},
            "deleteOptions": {"gracePeriodSeconds": 0},
        });
        assert_eq!(grace_period(&request(evict), PodOperation::Evict), Some(0));
    }

    #[test]
    fn refusals_carry_the_code_and_reason_the_requester_sees() {
        let req = request(base("CREATE", Some("eviction")));
        let response = refuse(&req, 429, "wait".into());
        let out = serde_json::to_value(response.into_review()).expect("serialisable");
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["uid"], "u1");
        assert_eq!(out["response"]["status"]["code"], 429);
        assert_eq!(out["response"]["status"]["reason"], "TooManyRequests");
        assert_eq!(out["response"]["status"]["message"], "wait");
    }
}
