//! Prometheus metrics, and the client layer that counts every API request the operator makes.
//!
//! No metric carries a per-GameDeployment label: BCS's per-GameDeployment series were never deleted and its
//! min/max gauges were process-wide anyway (bug list §7.31). Per-GameDeployment state is in `status` and Events.

use std::task::{Context, Poll};

use http::{Method, Request};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `success`, `error`, `waiting` (expectations not yet met) or `skipped` (being deleted).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`.
    pub verb: String,
    /// Resource and subresource (`pods`, `pods/status`, `gamedeployments/status`, `events`...).
    pub resource: String,
}

/// Every metric of the operator.
#[derive(Clone, Debug)]
pub struct Metrics {
    pub reconciles: Family<ResultLabels, Counter>,
    pub reconcile_errors: Family<ReasonLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub pods_created: Family<ReasonLabels, Counter>,
    pub pods_deleted: Family<ReasonLabels, Counter>,
    pub pods_updated: Family<ReasonLabels, Counter>,
    pub pods_held: Gauge,
    pub status_writes: Counter,
    pub expectations_expired: Counter,
    pub events_dropped: Counter,
    pub api_requests: Family<RequestLabels, Counter>,
}

impl Metrics {
    /// Creates the metrics and registers them under `gamedeployment_`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            pods_created: Family::default(),
            pods_deleted: Family::default(),
            pods_updated: Family::default(),
            pods_held: Gauge::default(),
            status_writes: Counter::default(),
            expectations_expired: Counter::default(),
            events_dropped: Counter::default(),
            api_requests: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("gamedeployment");
        r.register("reconciles", "Reconcile passes by result", metrics.reconciles.clone());
        r.register("reconcile_errors", "Failed reconcile passes by cause", metrics.reconcile_errors.clone());
        r.register("reconcile_duration_seconds", "Duration of reconcile passes", metrics.reconcile_duration.clone());
        r.register("pods_created", "Pods created, by reason (replicas, surge)", metrics.pods_created.clone());
        r.register(
            "pods_deleted",
            "Pods deleted, by reason (scale_in, pods_to_delete, rolling_update, recreate_fallback)",
            metrics.pods_deleted.clone(),
        );
        r.register(
            "pods_updated",
            "Pod patches, by reason (in_place_update, hot_patch_update, in_place_update_completed, readiness_gate...)",
            metrics.pods_updated.clone(),
        );
        r.register(
            "pods_held",
            "Pods a gate held in the last pass of every GameDeployment, summed",
            metrics.pods_held.clone(),
        );
        r.register("status_writes", "GameDeployment status writes", metrics.status_writes.clone());
        r.register(
            "expectations_expired",
            "Writes the watch cache did not show within the expectations timeout",
            metrics.expectations_expired.clone(),
        );
        r.register(
            "events_dropped",
            "Kubernetes Events dropped because the event queue was full",
            metrics.events_dropped.clone(),
        );
        r.register(
            "api_requests",
            "Requests sent to the Kubernetes API, by verb and resource",
            metrics.api_requests.clone(),
        );
        metrics
    }

    pub fn reconciled(&self, result: &str) {
        self.reconciles.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub fn failed(&self, reason: &str) {
        self.reconcile_errors.get_or_create(&ReasonLabels { reason: reason.into() }).inc();
    }

    /// The client layer counting requests into [`Metrics::api_requests`].
    pub fn request_counter(&self) -> CountRequests {
        CountRequests { requests: self.api_requests.clone() }
    }
}

/// A tower layer counting the API requests of a kube client by verb and resource.
#[derive(Clone, Debug)]
pub struct CountRequests {
    requests: Family<RequestLabels, Counter>,
}

impl<S> Layer<S> for CountRequests {
    type Service = CountedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountedService { inner, requests: self.requests.clone() }
    }
}

#[derive(Clone, Debug)]
pub struct CountedService<S> {
    inner: S,
    requests: Family<RequestLabels, Counter>,
}

impl<S, B> Service<Request<B>> for CountedService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.requests.get_or_create(&classify(request.method(), request.uri())).inc();
        self.inner.call(request)
    }
}

/// Verb and resource of an API request, from its method and path (`/api/v1/namespaces/ns/pods/x/status`).
pub fn classify(method: &Method, uri: &http::Uri) -> RequestLabels {
    let watch = uri.query().is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // Skip `api/v1` or `apis/<group>/<version>`, then `namespaces/<ns>` when present.
    let mut rest: &[&str] = match segments.first() {
        Some(&"api") => segments.get(2..).unwrap_or_default(),
        Some(&"apis") => segments.get(3..).unwrap_or_default(),
        _ => &segments,
    };
    if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        rest = &rest[2..];
    }
    let resource = match rest {
        [resource] | [resource, _] => (*resource).to_string(),
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        [] => uri.path().to_string(),
    };
    let named = rest.len() >= 2;
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    };
    RequestLabels { verb: verb.into(), resource }
}

/// Whether a request verb writes.
pub fn is_write(verb: &str) -> bool {
    matches!(verb, "create" | "update" | "patch" | "delete")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(method: Method, uri: &str) -> (String, String) {
        let l = classify(&method, &uri.parse().unwrap());
        (l.verb, l.resource)
    }

    #[test]
    fn classifies_requests() {
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(c(Method::GET, "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=5"), s("watch", "pods"));
        assert_eq!(c(Method::GET, "/api/v1/pods?limit=500"), s("list", "pods"));
        assert_eq!(c(Method::GET, "/api/v1/namespaces/ns/pods/p"), s("get", "pods"));
        assert_eq!(c(Method::PATCH, "/api/v1/namespaces/ns/pods/p/status"), s("patch", "pods/status"));
        assert_eq!(
            c(Method::PUT, "/apis/tkex.tencent.com/v1alpha1/namespaces/ns/gamedeployments/gd/status"),
            s("update", "gamedeployments/status")
        );
        assert_eq!(
            c(Method::POST, "/apis/apps/v1/namespaces/ns/controllerrevisions"),
            s("create", "controllerrevisions")
        );
        assert_eq!(c(Method::DELETE, "/api/v1/namespaces/ns/pods/p"), s("delete", "pods"));
        assert_eq!(c(Method::GET, "/api/v1/nodes"), s("list", "nodes"));
        assert!(is_write("patch") && !is_write("watch"));
    }

    #[test]
    fn registers_with_the_prefix() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.reconciled("success");
        metrics.pods_created.get_or_create(&ReasonLabels { reason: "replicas".into() }).inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("gamedeployment_reconciles_total{result=\"success\"} 1"), "{text}");
        assert!(text.contains("gamedeployment_pods_created_total{reason=\"replicas\"} 1"), "{text}");
    }
}
