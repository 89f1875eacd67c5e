//! Kubelet and scheduler simulator: makes pods live on fake nodes.
//!
//! It talks to the API server only through a [`kube::Client`], with the same calls a real
//! kube-scheduler and kubelet make (watch pods and nodes, `pods/binding`, strategic merge patches
//! of `pods/status` and `nodes/status`, a final delete with grace period 0 and a UID
//! precondition), so it works against kube-sim or any other API server.
//!
//! What it simulates, and why each piece matters to the operators under test:
//! - scheduling onto N registered nodes (least loaded first, honouring node selectors, cordons,
//!   taints and capacity), so pods get `spec.nodeName` and `hostIP`;
//! - a unique loopback `podIP` per pod, so a hook calling `http://<podIP>:<port>` reaches that pod;
//! - container lifecycles: `ContainerCreating` → running → ready, with exact kubelet conditions
//!   and `Ready` honouring `spec.readinessGates`, which is what in-place update gating relies on;
//! - in-place updates: an image change restarts that container only (restart count, new image
//!   ID and container ID, briefly not ready); hot-patch pods swap the image without restart;
//! - graceful deletion over the (scaled) grace period, finalizers respected by the API server;
//! - per-pod behaviour from `kube-sim.kourse.dev/*` annotations (see [`behaviour`]) and HTTP
//!   servers for well-known images (see [`image`]);
//! - the Events both components record, so `kubectl describe pod` reads as on a cluster;
//! - container logs telling the same story (see [`crate::logs`]), for `kubectl logs`.
//!
//! Containers whose image is mapped to a program on this host (`--image-map`, `--host-images`,
//! `--chart-images`) run as real processes instead (see `process`), behind the same pod runtime,
//! status and deletion flow.

mod agent;
pub(crate) mod behaviour;
mod config;
mod duration;
mod endpoint;
mod events;
pub(crate) mod image;
mod ipam;
mod lean;
mod node;
mod process;
mod quantity;
mod runtime;
mod scheduler;
mod status;
mod writes;

pub use config::KubeletConfig;
pub use duration::parse_duration;
pub use process::images::ImageRule;

/// Why the kubelet simulator could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A setting makes no sense (zero nodes, negative scale, unparsable quantity…).
    #[error("invalid kubelet configuration: {field}: {reason}")]
    InvalidConfig { field: &'static str, reason: String },
}

/// Runs the simulated scheduler and kubelets until `shutdown` turns true (or its sender is
/// dropped). API errors never end it: every failed call is retried with back-off, watches are
/// re-established, so it survives API server restarts and injected faults. On return, every
/// HTTP server it started is stopped and its pod addresses are released. The containers' simulated logs go into
/// `logs` (which kube-sim's API server serves as `pods/NAME/log`).
pub(crate) async fn run(
    client: kube::Client,
    config: KubeletConfig,
    logs: std::sync::Arc<crate::logs::PodLogs>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(), Error> {
    let config = config.validate()?;
    agent::Agent::new(client.clone(), config, logs).run(client, shutdown).await
}
