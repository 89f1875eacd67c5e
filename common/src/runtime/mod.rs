//! Operator plumbing both binaries share, so that flags, logs, health endpoints and leader election behave the
//! same in the hook-operator and the gamedeployment-operator.
//!
//! A binary typically does:
//! ```ignore
//! let flags = RuntimeFlags::parse();            // or #[command(flatten)] it into its own Cli
//! logging::init(&flags.log)?;
//! let client = client::build(&flags.kube).await?;
//! let health = Health::default();
//! let server = server::start(flags.serve.metrics_address, registry, health.clone(), shutdown.clone(), connections, &descriptors).await?;
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
pub mod metric_set;
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
    /// The `--kubeconfig` file cannot be read or used.
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file named by `--kubeconfig`.
        path: String,
        /// What is wrong with it.
        source: kube::config::KubeconfigError,
    },
    /// No `--kubeconfig`, and neither the in-cluster configuration nor a kubeconfig file was found.
    #[error("finding a Kubernetes configuration (in-cluster, $KUBECONFIG or ~/.kube/config): {0}")]
    InferConfig(#[from] kube::config::InferConfigError),
    /// The configuration was found but no client could be made from it (TLS settings, proxy).
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// `--log-level` (or `RUST_LOG`) is not a valid filter, or a subscriber is already installed.
    #[error("installing the log subscriber: {0}")]
    Logging(String),
    /// The metrics/health address is taken or not ours to bind.
    #[error("binding the metrics/health server on {address}: {source}")]
    Bind {
        /// `--metrics-address`.
        address: std::net::SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
}
