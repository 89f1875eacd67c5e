//! Operator plumbing both binaries share, so that flags, logs, health endpoints and leader election behave the
//! same in the hook-operator and the gamedeployment-operator.
//!
//! A binary typically does:
//! ```ignore
//! let flags = RuntimeFlags::parse();            // or #[command(flatten)] it into its own Cli
//! logging::init(&flags.log)?;
//! let client = client::build(&flags.kube).await?;
//! let health = Health::default();
//! let server = server::serve(flags.serve.metrics_address, registry, health.clone(), shutdown.clone());
//! leader::LeaderElection::from_flags(client, &flags.leader_election, "hook-operator")?
//!     .run_while_leading(shutdown, |lease| controller(...)).await?;
//! ```

pub mod client;
pub mod connections;
pub mod descriptors;
pub mod events;
pub mod flags;
pub mod http_server;
pub mod kube_api;
pub mod leader;
pub mod lean;
pub mod logging;
pub mod metrics;
pub mod server;
pub mod shutdown;
pub mod text;
pub mod watch;

pub use flags::{KubeFlags, LeaderElectionFlags, LogFlags, LogFormat, RuntimeFlags, ServeFlags};
pub use leader::{LeaderElection, LeaderError, Leading, LeaseError, LeaseStore};
pub use server::Health;
pub use shutdown::{Handover, Shutdown};

/// Errors of the plumbing itself (not of a controller).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig { path: String, source: kube::config::KubeconfigError },
    #[error("finding a Kubernetes configuration (in-cluster, $KUBECONFIG or ~/.kube/config): {0}")]
    InferConfig(#[from] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("installing the log subscriber: {0}")]
    Logging(String),
    #[error("binding the metrics/health server on {address}: {source}")]
    Bind { address: std::net::SocketAddr, source: std::io::Error },
}
