//! Command-line flags common to both operators. Each struct is meant to be `#[command(flatten)]`ed into a
//! binary's own `clap::Parser`, so the two binaries spell shared options identically.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// Every shared flag group at once.
#[derive(Args, Debug, Clone)]
pub struct RuntimeFlags {
    /// `--kubeconfig`, `--namespace`.
    #[command(flatten)]
    pub kube: KubeFlags,
    /// `--log-format`, `--log-level`.
    #[command(flatten)]
    pub log: LogFlags,
    /// `--metrics-address`.
    #[command(flatten)]
    pub serve: ServeFlags,
    /// `--leader-elect` and its Lease settings.
    #[command(flatten)]
    pub leader_election: LeaderElectionFlags,
}

/// How to reach the API server and which part of it to watch.
#[derive(Args, Debug, Clone, Default)]
pub struct KubeFlags {
    /// Path of a kubeconfig file. Without it: in-cluster config, then $KUBECONFIG, then ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Only watch this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE", value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// For people reading `kubectl logs`.
    #[default]
    Text,
    /// One JSON object a line, for log pipelines.
    Json,
}

// Written out rather than derived: the derive turns the variant docs into possible-value help, which switches both
// operators' `--help` to clap's long layout.
impl ValueEnum for LogFormat {
    fn value_variants<'a>() -> &'a [Self] {
        &[Self::Text, Self::Json]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(match self {
            Self::Text => "text",
            Self::Json => "json",
        }))
    }
}

/// How and how much the binary logs.
#[derive(Args, Debug, Clone, Default)]
pub struct LogFlags {
    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "LOG_FORMAT")]
    pub log_format: LogFormat,
    /// tracing filter directives (overridden by RUST_LOG when that is set), e.g. `info,kube=warn`.
    #[arg(long, default_value = "info", value_name = "FILTER")]
    pub log_level: String,
}

/// Where the metrics and health endpoints listen.
#[derive(Args, Debug, Clone)]
pub struct ServeFlags {
    /// Address of the HTTP server for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", env = "METRICS_ADDRESS", value_name = "HOST:PORT")]
    pub metrics_address: SocketAddr,
}

impl Default for ServeFlags {
    fn default() -> Self {
        Self { metrics_address: SocketAddr::from(([0, 0, 0, 0], 8080)) }
    }
}

/// Leader election on a `coordination.k8s.io/v1` Lease, so several replicas can run with one active.
#[derive(Args, Debug, Clone)]
pub struct LeaderElectionFlags {
    /// Only reconcile while holding the Lease. Off: this replica always reconciles (single replica setups).
    #[arg(long, env = "LEADER_ELECT")]
    pub leader_elect: bool,
    /// Name of the Lease (default: the binary's name).
    #[arg(long, value_name = "NAME")]
    pub leader_elect_lease_name: Option<String>,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else the kubeconfig's namespace).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// Identity written into the Lease (default: $POD_NAME, else the hostname).
    #[arg(long, value_name = "ID")]
    pub leader_elect_identity: Option<String>,
    /// How long a Lease stays valid without renewal; another replica takes over after this.
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub leader_elect_lease_duration: Duration,
    /// The leader gives up (and the process stops) when it could not renew for this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub leader_elect_renew_deadline: Duration,
    /// Time between attempts to acquire or renew.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub leader_elect_retry_period: Duration,
}

impl Default for LeaderElectionFlags {
    fn default() -> Self {
        Self {
            leader_elect: false,
            leader_elect_lease_name: None,
            leader_elect_namespace: None,
            leader_elect_identity: None,
            leader_elect_lease_duration: Duration::from_secs(15),
            leader_elect_renew_deadline: Duration::from_secs(10),
            leader_elect_retry_period: Duration::from_secs(2),
        }
    }
}

/// Accepts Go durations (`15s`, `1m30s`) and humantime (`2min`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::duration::parse_flexible(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        runtime: RuntimeFlags,
    }

    #[test]
    fn defaults_and_overrides() {
        let cli = Cli::try_parse_from(["op"]).unwrap();
        assert_eq!(cli.runtime.log.log_format, LogFormat::Text);
        assert!(!cli.runtime.leader_election.leader_elect);
        assert_eq!(cli.runtime.leader_election.leader_elect_lease_duration, Duration::from_secs(15));
        let cli = Cli::try_parse_from([
            "op",
            "--log-format",
            "json",
            "--leader-elect",
            "--leader-elect-lease-duration",
            "30s",
            "--metrics-address",
            "127.0.0.1:9000",
            "--namespace",
            "games",
            "--kubeconfig",
            "/tmp/kc",
        ])
        .unwrap();
        assert_eq!(cli.runtime.log.log_format, LogFormat::Json);
        assert!(cli.runtime.leader_election.leader_elect);
        assert_eq!(cli.runtime.leader_election.leader_elect_lease_duration, Duration::from_secs(30));
        assert_eq!(cli.runtime.serve.metrics_address.port(), 9000);
        assert_eq!(cli.runtime.kube.namespace.as_deref(), Some("games"));
        assert!(Cli::try_parse_from(["op", "--leader-elect-retry-period", "soon"]).is_err());
    }
}
