//! The HTTPS server: `POST /validate-pods` (the pod gate), `POST /validate-workload` (deletion protection, BCS's
//! path), `GET /healthz` and `GET /readyz` (the chart's readiness probe: 200 once this replica can answer from synced
//! caches, 503 from the moment it is told to stop, while it still answers for its drain period).
//!
//! Every answer is judged from what the request carries and from the replica's watch caches ([`GateCaches`]): for a
//! pod `DELETE` the pod is the request's `oldObject` (the API server's current object), for an eviction it is the
//! cached pod, and the pod's GameDeployment is the cached one. A pod that is not the operator's, or in a namespace
//! where no GameDeployment gates pods, is answered at once without any read. Only what a cache cannot vouch for
//! (not listed yet, or its watch failed since its last event) is read from the API, and the reads and the mark of one
//! answer share one budget ([`WebhookConfig::answer_within`], `--webhook-answer-within`, just under the
//! configuration's `timeoutSeconds`). When the webhook cannot judge within it — a read failed or is slow — it never
//! lets the request through: it answers `429 TooManyRequests` with a retry hint (`retryAfterSeconds`), which
//! `kubectl drain`, the cluster autoscaler and every eviction client retry (a mark that fails or runs out of time still
//! refuses, saying so). The failurePolicy therefore decides only when no replica answers at all.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use common::api::GameDeployment;
use common::cached_pod::Pod;
use common::keys;
use common::runtime::Health;
use common::runtime::connections::Limiter;
use common::runtime::events::{EventSink, Note};
use common::runtime::http_server::{self, Timeouts};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::response::{StatusDetails, StatusSummary};
use kube::core::{DynamicObject, ObjectList};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};

use super::admission::Admission;
use super::caches::{GateCaches, Lookup};
use super::metrics::WebhookMetrics;
use super::tls::{Caller, CertFiles, TlsError, TlsHandshake, WebhookListener, server_config};
use super::verdict::{
    self, DeletionAllow, GateSettings, Mark, PodOperation, PodRequest, PodVerdict, Protected, deletion_protection,
};
use super::{MARKED_AT, SPECIFIED_DELETE};
use crate::ownership;

/// The webhook server's settings (flags).
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Where the HTTPS server listens (`--webhook-address`).
    pub address: SocketAddr,
    /// The serving certificate and key, reloaded when the files change.
    pub cert: CertFiles,
    /// Who may delete a gated pod, and how a deletion the gate refuses is answered.
    pub gate: GateSettings,
    /// Deletion protection for GameDeployments and HookTemplates without the `deletion-allow` label.
    pub deletion_default: DeletionAllow,
    /// CA (PEM) of the client certificate the API server presents (`--webhook-client-ca`); `None`: every caller is
    /// unverified.
    pub client_ca: Option<PathBuf>,
    /// Whether a caller without a verified client certificate may still cause a write (a mark, an Event).
    pub unverified_may_mark: bool,
    /// What the API reads and the mark of one answer may take together (`--webhook-answer-within`, default 4 s
    /// under the chart's `timeoutSeconds: 5`).
    pub answer_within: Duration,
}

/// Why the webhook server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The certificate, key or client CA cannot be loaded.
    #[error("webhook certificate: {0}")]
    Tls(#[from] TlsError),
    /// The address is taken or not ours to bind.
    #[error("binding the webhook address {address}: {source}")]
    Bind {
        /// `--webhook-address`.
        address: SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
}

#[derive(Clone)]
struct AppState {
    client: Client,
    gate: Arc<GateSettings>,
    deletion_default: DeletionAllow,
    unverified_may_mark: bool,
    answer_within: Duration,
    metrics: WebhookMetrics,
    health: Health,
    events: EventSink,
    caches: GateCaches,
}

/// Loads the certificate and binds, so a bad certificate or a taken port fails start-up.
pub async fn bind(config: &WebhookConfig) -> Result<WebhookListener, WebhookError> {
    let tls = server_config(&config.cert, config.client_ca.as_deref())?;
    let tcp = tokio::net::TcpListener::bind(config.address)
        .await
        .map_err(|source| WebhookError::Bind { address: config.address, source })?;
    Ok(WebhookListener::new(tcp, tls))
}

/// The webhook routes; `events` publishes the Warning Events of deletions let through without their hook, `caches`
/// are what the answers are judged from, and `health` is what `/readyz` reports (the process's readiness).
pub fn router(
    client: Client,
    config: &WebhookConfig,
    metrics: WebhookMetrics,
    events: EventSink,
    caches: GateCaches,
    health: Health,
) -> Router {
    let state = AppState {
        client,
        gate: Arc::new(config.gate.clone()),
        deletion_default: config.deletion_default,
        unverified_may_mark: config.unverified_may_mark,
        answer_within: config.answer_within,
        metrics,
        health,
        events,
        caches,
    };
    Router::new()
        .route("/validate-pods", post(validate_pods))
        .route("/validate-workload", post(validate_workload))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state.clone())
        .merge(super::validation::router(
            state.client,
            config.gate.operator_users.clone(),
            state.answer_within,
            state.metrics,
        ))
}

/// Serves until `stop` resolves (at the end of the drain period: the listener stays open while the replica reports
/// not ready, so requests routed to it before its endpoint is withdrawn are still judged); each request knows
/// whether its connection presented a verified client certificate. Every connection is admitted by `connections`
/// (caps overall and per client address; a verified one is never refused) and each step of it is bounded in time
/// ([`Timeouts::DEFAULT`]: 3 s for the TLS handshake, for each request's head — and so for an idle keep-alive
/// connection — and for its body), well under the API server's `timeoutSeconds`.
pub async fn serve(
    listener: WebhookListener,
    router: Router,
    connections: Arc<Limiter>,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let handshake = TlsHandshake::new(listener.tls);
    http_server::serve(listener.tcp, handshake, router, connections, Timeouts::DEFAULT, stop).await;
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    common::runtime::server::readiness(&state.health)
}

/// Why the webhook cannot judge a request now (a read failed or ran out of the budget): answered with
/// [`cannot_judge`], never let through.
struct Unanswerable(String);

/// Seconds the "cannot judge now" answer asks the caller to wait (`details.retryAfterSeconds`; kube-apiserver turns
/// it into a `Retry-After` header, which client-go's eviction clients honour; `kubectl drain` retries every 5 s).
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// `429 TooManyRequests` with a retry hint: the eviction API's "not now", which `kubectl drain`, the cluster
/// autoscaler and every eviction client retry. Also the answer to a `DELETE` that cannot be judged (the garbage
/// collector retries it; `kubectl delete` shows why).
fn cannot_judge(request: &AdmissionRequest<DynamicObject>, what: &str, why: &str) -> AdmissionResponse {
    let mut response = refuse(
        request,
        429,
        format!("the {what} cannot judge this request now ({why}); nothing was let through: retry in a moment"),
    );
    response.result.details = Some(StatusDetails {
        name: request.name.clone(),
        group: request.resource.group.clone(),
        kind: request.resource.resource.clone(),
        uid: String::new(),
        causes: Vec::new(),
        retry_after_seconds: RETRY_AFTER_SECONDS,
    });
    response
}

/// The time one answer may still take: every API call it makes is cut at the same deadline.
#[derive(Debug, Clone, Copy)]
struct Budget {
    deadline: tokio::time::Instant,
    total: Duration,
}

impl Budget {
    fn start(total: Duration) -> Self {
        Self { deadline: tokio::time::Instant::now() + total, total }
    }
}

/// One object by name, read as a list with a `metadata.name` field selector (as client-go's single-object informers
/// do): the webhook's caches already need `list`, so this fallback needs no `get` grant (the chart grants none for
/// pods and GameDeployments; `chart_rbac::every_granted_verb_is_used`).
async fn by_name<K>(api: &Api<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(api.list(&params).await?.items.into_iter().next())
}

async fn bounded<T>(
    budget: Budget,
    what: &str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, Unanswerable> {
    match tokio::time::timeout_at(budget.deadline, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Unanswerable(format!("{what}: {e}"))),
        Err(_) => Err(Unanswerable(format!(
            "{what}: no answer within the webhook's {} (--webhook-answer-within)",
            common::duration::format_go(budget.total)
        ))),
    }
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

async fn validate_pods(
    State(state): State<AppState>,
    ConnectInfo(caller): ConnectInfo<Caller>,
    Admission(request): Admission,
) -> Response {
    match pod_gate(&state, &request, caller, Budget::start(state.answer_within)).await {
        Ok(response) => review(response),
        Err(Unanswerable(message)) => {
            tracing::warn!(pod = %request.name, namespace = ?request.namespace, %message, "pod gate cannot judge; retry");
            state.metrics.count("pod-gate", "retry", "cannot_judge");
            review(cannot_judge(&request, "pod gate", &message))
        }
    }
}

/// May this request cause writes (a mark, an Event)? Counts unverified callers; `due` says whether the answer asks
/// for a write.
fn may_write(state: &AppState, caller: Caller, webhook: &str, due: bool) -> bool {
    if caller == Caller::Verified {
        return true;
    }
    let write = match (due, state.unverified_may_mark) {
        (false, _) => "none",
        (true, true) => "written",
        (true, false) => "withheld",
    };
    state.metrics.count_unverified(webhook, write);
    state.unverified_may_mark
}

async fn pod_gate(
    state: &AppState,
    request: &AdmissionRequest<DynamicObject>,
    caller: Caller,
    budget: Budget,
) -> Result<AdmissionResponse, Unanswerable> {
    let operation = match (&request.operation, request.sub_resource.as_deref()) {
        (Operation::Delete, None) => PodOperation::Delete,
        (Operation::Create, Some("eviction")) => PodOperation::Evict,
        _ => return Ok(AdmissionResponse::from(request)),
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(state.client.clone(), &namespace);
    // A DELETE carries the pod (the API server's current object); an eviction names it.
    let carried = request.old_object.as_ref().filter(|_| operation == PodOperation::Delete).and_then(typed::<Pod>);
    let pod: Option<Arc<Pod>> = match carried {
        Some(pod) => Some(Arc::new(pod)),
        None => match state.caches.pod(&namespace, &request.name) {
            Lookup::Found(pod) => Some(pod),
            Lookup::Absent => {
                state.metrics.count("pod-gate", "allowed", verdict::Allowed::NotGameDeploymentPod.as_str());
                return Ok(AdmissionResponse::from(request));
            }
            // Only a pod the operator made can be gated, and only where a GameDeployment gates pods.
            Lookup::Unknown if !state.caches.namespace_may_gate(&namespace) => {
                state.metrics.count("pod-gate", "allowed", "not_gated_namespace");
                return Ok(AdmissionResponse::from(request));
            }
            Lookup::Unknown => {
                bounded(budget, &format!("reading pod {namespace}/{}", request.name), by_name(&pods, &request.name))
                    .await?
                    .map(Arc::new)
            }
        },
    };
    let owner = pod
        .as_ref()
        .and_then(|p| ownership::controller_of(p.metadata.owner_references.as_ref()))
        .filter(|o| o.kind == "GameDeployment")
        .map(|o| o.name.clone());
    let gd: Option<Arc<GameDeployment>> = match owner {
        Some(name) => match state.caches.gamedeployment(&namespace, &name) {
            Lookup::Found(gd) => Some(gd),
            Lookup::Absent => None,
            Lookup::Unknown => {
                let gds: Api<GameDeployment> = Api::namespaced(state.client.clone(), &namespace);
                bounded(budget, &format!("reading GameDeployment {namespace}/{name}"), by_name(&gds, &name))
                    .await?
                    .map(Arc::new)
            }
        },
        None => None,
    };
    let groups = request.user_info.groups.clone().unwrap_or_default();
    let pod_request = PodRequest {
        operation,
        username: request.user_info.username.as_deref().unwrap_or_default(),
        groups: &groups,
        grace_period_seconds: grace_period(request, operation),
        may_mark: caller == Caller::Verified || state.unverified_may_mark,
    };
    let now = Timestamp::now();
    match verdict::pod_gate(&pod_request, pod.as_deref(), gd.as_deref(), &state.gate, now) {
        PodVerdict::Allow(why) => {
            state.metrics.count("pod-gate", "allowed", why.as_str());
            let mut response = AdmissionResponse::from(request);
            if matches!(why, verdict::Allowed::Bypass | verdict::Allowed::Forced | verdict::Allowed::DeadlinePassed) {
                let how = match why {
                    verdict::Allowed::Bypass => "the gate-bypass annotation".to_string(),
                    verdict::Allowed::Forced => "a forced deletion by a privileged user".to_string(),
                    _ => match gd.as_ref().map(|gd| verdict::deadline(gd, &state.gate)) {
                        Some(verdict::Deadline { duration, note: Some(note) }) => {
                            format!("the pod-gate deadline ({}) passed ({note})", common::duration::format_go(duration))
                        }
                        Some(verdict::Deadline { duration, note: None }) => {
                            format!("the pod-gate deadline ({}) passed", common::duration::format_go(duration))
                        }
                        None => "the pod-gate deadline passed".to_string(),
                    },
                };
                response.warnings =
                    Some(vec![format!("pod {} leaves without its pre-delete hook: allowed by {how}", request.name)]);
                response.audit_annotations.insert("pod-gate".into(), why.as_str().into());
            }
            let event_due = why == verdict::Allowed::NodeLifecycle && !request.dry_run;
            if may_write(state, caller, "pod-gate", event_due)
                && event_due
                && let (Some(pod), Some(gd)) = (pod.as_ref(), gd.as_ref())
            {
                let note = node_lifecycle_note(pod, pod_request.username, operation);
                response.warnings = Some(vec![note.message.clone()]);
                response.audit_annotations.insert("pod-gate".into(), why.as_str().into());
                state.events.publish_related(&gd.object_ref(&()), Some(pod.object_ref(&())), note);
            }
            Ok(response)
        }
        PodVerdict::Refuse(refusal) => {
            let mut message = refusal.message;
            let mark_due = (refusal.withheld || !refusal.mark.is_empty()) && !request.dry_run;
            // Counted; the verdict already withheld the mark of a caller that may not cause one.
            may_write(state, caller, "pod-gate", mark_due);
            if refusal.withheld {
                tracing::warn!(
                    pod = %request.name, %namespace, user = pod_request.username,
                    "pod gate: a caller without a verified client certificate asked to delete a gated pod; refused, not marked"
                );
            } else if mark_due && let Err(Unanswerable(e)) = mark(&pods, &request.name, &refusal.mark, budget).await {
                // Still refused (the requester retries), but say the mark did not happen.
                tracing::warn!(pod = %request.name, %namespace, error = %e, "marking the pod failed");
                message = format!("{message} (marking the pod failed, retry: {e})");
            }
            tracing::info!(pod = %request.name, %namespace, user = pod_request.username, ?operation, "pod gate refused");
            let reason = match (refusal.withheld, refusal.mark.is_empty()) {
                (true, _) => "unverified",
                (false, true) => "waiting",
                (false, false) => "marked",
            };
            state.metrics.count("pod-gate", "refused", reason);
            Ok(refuse(request, refusal.code, message))
        }
    }
}

/// The Warning Event of a gated pod the node lifecycle deletes without its hook.
fn node_lifecycle_note(pod: &Pod, user: &str, operation: PodOperation) -> Note {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("(none)");
    let what = match operation {
        PodOperation::Delete => "deleted",
        PodOperation::Evict => "evicted",
    };
    Note {
        warning: true,
        reason: "NodeLifecycleDeletion".into(),
        action: "AdmitPodDeletion".into(),
        message: format!(
            "pod {name} on node {node} is {what} by the node lifecycle ({user}) without its pre-delete hook: its node \
             failed (a NoExecute taint) or is gone, so the game server cannot drain anyway, and holding the pod would \
             only delay its replacement"
        ),
    }
}

/// Writes the mark with a merge patch of exactly the keys the verdict asked for (idempotent: every replica may
/// write it, the values are the same or the first one wins for the label).
async fn mark(pods: &Api<Pod>, name: &str, mark: &Mark, budget: Budget) -> Result<(), Unanswerable> {
    let mut metadata = serde_json::Map::new();
    if mark.label {
        metadata.insert("labels".into(), json!({ SPECIFIED_DELETE: "true" }));
    }
    if let Some(at) = mark.marked_at {
        metadata.insert("annotations".into(), json!({ MARKED_AT: at.to_string() }));
    }
    let patch = json!({ "metadata": metadata });
    bounded(budget, &format!("marking pod {name}"), pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch)))
        .await
        .map(|_| ())
}

async fn validate_workload(
    State(state): State<AppState>,
    ConnectInfo(caller): ConnectInfo<Caller>,
    Admission(request): Admission,
) -> Response {
    // Deletion protection writes nothing; an unverified caller is only counted.
    may_write(&state, caller, "deletion-protection", false);
    match protect(&state, &request, Budget::start(state.answer_within)).await {
        Ok(response) => review(response),
        Err(Unanswerable(message)) => {
            tracing::warn!(name = %request.name, namespace = ?request.namespace, %message, "deletion protection cannot judge; retry");
            state.metrics.count("deletion-protection", "retry", "cannot_judge");
            review(cannot_judge(&request, "deletion protection", &message))
        }
    }
}

async fn protect(
    state: &AppState,
    request: &AdmissionRequest<DynamicObject>,
    budget: Budget,
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
            bounded(budget, &format!("reading {resource} {namespace}/{}", request.name), by_name(&api, &request.name))
                .await?
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
        let used_by =
            if cascading { template_users(state, &namespace, &request.name, budget).await? } else { Vec::new() };
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

/// The GameDeployments of `namespace` (not being deleted) that name HookTemplate `template` in a hook: from the
/// cache while it vouches for the list, else listed within the budget.
async fn template_users(
    state: &AppState,
    namespace: &str,
    template: &str,
    budget: Budget,
) -> Result<Vec<String>, Unanswerable> {
    let users = |gds: &mut dyn Iterator<Item = &GameDeployment>| -> Vec<String> {
        gds.filter(|gd| gd.metadata.deletion_timestamp.is_none() && verdict::uses_template(gd, template))
            .map(ResourceExt::name_any)
            .collect()
    };
    if let Some(cached) = state.caches.gamedeployments_in(namespace) {
        return Ok(users(&mut cached.iter().map(|gd| gd.as_ref())));
    }
    let gds: Api<GameDeployment> = Api::namespaced(state.client.clone(), namespace);
    let list: ObjectList<GameDeployment> =
        bounded(budget, &format!("listing GameDeployments in {namespace}"), gds.list(&ListParams::default())).await?;
    Ok(users(&mut list.items.iter()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::admission::AdmissionReview;

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
    fn what_cannot_be_judged_is_never_allowed_but_retried() {
        let req = request(base("CREATE", Some("eviction")));
        let response = cannot_judge(&req, "pod gate", "reading pod default/game-abcde: no answer within 4s");
        let out = serde_json::to_value(response.into_review()).expect("serialisable");
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 429, "the eviction API's 'not now'");
        assert_eq!(out["response"]["status"]["reason"], "TooManyRequests");
        assert_eq!(out["response"]["status"]["details"]["retryAfterSeconds"], 1);
        let message = out["response"]["status"]["message"].as_str().unwrap();
        assert!(message.contains("cannot judge this request now (reading pod default/game-abcde"), "{message}");
        assert!(message.contains("nothing was let through: retry"), "{message}");
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
