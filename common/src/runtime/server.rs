//! The HTTP server every operator runs next to its controller: Prometheus metrics, liveness and readiness.
//!
//! `/healthz` answers 200 while the process serves HTTP at all; `/readyz` answers 200 only once the binary
//! declared itself ready (it can do its job now: caches synced, its servers answering), so a Service or a rollout
//! never counts a replica that cannot act yet, and 503 from the moment the process is told to stop
//! ([`Health::stop`]), before any of its servers closes: a replica leaves its Services first, then stops serving.
//!
//! Anyone who can reach the port can connect (Prometheus, the kubelet's probes, any pod), and the process's
//! descriptors are shared with the webhooks: the server is bounded like them ([`http_server`]), with its own, smaller
//! caps ([`ConnectionLimits::metrics`](super::connections::ConnectionLimits::metrics)).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use tokio::task::JoinHandle;

use super::connections::{ConnectionLimits, ConnectionMetrics, Limiter};
use super::descriptors::Descriptors;
use super::http_server::{self, PlainTcp, Timeouts};
use super::{RuntimeError, Shutdown};

/// Readiness shared between the binary (which sets it) and the servers (which report it).
#[derive(Clone, Debug, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
}

impl Health {
    /// Set by the binary once it can do its job (caches synced, webhook answering), or back when it cannot.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Not ready for good, whatever [`Health::set_ready`] says later: the first step of a graceful stop.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Whether [`Health::stop`] was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// What `/readyz` answers: ready, and not stopping.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && !self.is_stopping()
    }
}

/// The `/readyz` answer for `health` (every server of the process answers the same).
pub fn readiness(health: &Health) -> (StatusCode, &'static str) {
    if health.is_stopping() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    } else if health.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    health: Health,
}

/// `/metrics` (the registry in Prometheus text format), `/healthz` (the process answers) and `/readyz`
/// ([`Health::is_ready`]).
pub fn router(registry: Arc<Registry>, health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { registry, health })
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {e}")).into_response(),
    }
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    readiness(&state.health)
}

/// Binds first (so a port clash is reported at startup, not later), then serves until `shutdown`.
pub async fn bind(address: SocketAddr) -> Result<TcpListener, RuntimeError> {
    TcpListener::bind(address).await.map_err(|source| RuntimeError::Bind { address, source })
}

/// Binds `address` and serves metrics and health from a task until `shutdown`, with the metrics server's connection
/// caps for this process's `descriptors`. The bound address is logged ("serving /metrics, /healthz, /readyz",
/// `address=`): a port 0 request gets a real port, and tools and tests find the endpoints from that line.
pub async fn start(
    address: SocketAddr,
    registry: Registry,
    health: Health,
    shutdown: Shutdown,
    connection_metrics: ConnectionMetrics,
    descriptors: &Descriptors,
) -> Result<JoinHandle<()>, RuntimeError> {
    let listener = bind(address).await?;
    let address = listener.local_addr().unwrap_or(address);
    let limits = ConnectionLimits::metrics(descriptors.count());
    let connections = Limiter::serving("metrics", address, limits, connection_metrics, "/metrics, /healthz, /readyz");
    Ok(tokio::spawn(serve(listener, Arc::new(registry), health, shutdown, connections)))
}

/// Serves until `shutdown`, each connection admitted by `connections`; readiness goes to 503 first
/// ([`Health::stop`]), then the listener closes.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    health: Health,
    shutdown: Shutdown,
    connections: Arc<Limiter>,
) {
    let stopping = health.clone();
    let stop = async move {
        shutdown.wait().await;
        stopping.stop();
    };
    http_server::serve(listener, PlainTcp, router(registry, health), connections, Timeouts::DEFAULT, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::connections::{ConnectionLimits, ConnectionMetrics};
    use prometheus_client::metrics::counter::Counter;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get_path(address: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn serves_metrics_health_and_readiness() {
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("test_things", "Things counted in the test", counter.clone());
        counter.inc();
        let health = Health::default();
        let shutdown = Shutdown::default();
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let address = listener.local_addr().unwrap();
        let limiter = Limiter::new("metrics", ConnectionLimits::metrics(256), ConnectionMetrics::default());
        let server = tokio::spawn(serve(listener, Arc::new(registry), health.clone(), shutdown.clone(), limiter));

        assert!(get_path(address, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get_path(address, "/readyz").await.starts_with("HTTP/1.1 503"));
        health.set_ready(true);
        assert!(get_path(address, "/readyz").await.starts_with("HTTP/1.1 200"));
        let metrics = get_path(address, "/metrics").await;
        assert!(metrics.contains("test_things_total 1"), "{metrics}");
        // Stopping: not ready for good, while the server still answers.
        health.stop();
        health.set_ready(true);
        let readyz = get_path(address, "/readyz").await;
        assert!(readyz.starts_with("HTTP/1.1 503") && readyz.ends_with("shutting down"), "{readyz}");
        assert!(get_path(address, "/healthz").await.starts_with("HTTP/1.1 200"));

        shutdown.trigger();
        server.await.unwrap();
    }
}
