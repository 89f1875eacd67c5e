//! `kube-sim`: runs the local API server (and kubelet simulator) until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kube_sim::{FaultConfig, FaultRule, KubeletConfig, SimConfig, parse_duration};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A local Kubernetes API server for tests and the sandbox.
#[derive(Debug, Parser)]
#[command(name = "kube-sim", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:6443")]
    addr: SocketAddr,

    /// Write an admin kubeconfig for this server to this path.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,

    /// Run the API server without the kubelet simulator.
    #[arg(long)]
    no_kubelet: bool,

    /// Static token users (`token,user,uid,"group1,group2"` per line), authorized by RBAC.
    #[arg(long, alias = "token-auth-file")]
    token_file: Option<PathBuf>,

    /// Manifests (files or directories) to apply after start, CRDs first. Repeatable.
    #[arg(long)]
    apply: Vec<PathBuf>,

    /// Events kept per resource for watches; older resource versions get 410 Gone.
    #[arg(long, default_value_t = 20_000)]
    watch_history: usize,

    /// Answer only legacy discovery (disables aggregated discovery).
    #[arg(long)]
    no_aggregated_discovery: bool,

    /// Interval between watch bookmarks.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    bookmark_interval: Duration,

    /// Fault injection: probability (0..1) that a matching request fails.
    #[arg(long, default_value_t = 0.0)]
    fault_error_rate: f64,

    /// Fault injection: HTTP code of injected errors (500, 503, 429, 504).
    #[arg(long, default_value_t = 500)]
    fault_error_code: u16,

    /// Fault injection: latency added to matching requests.
    #[arg(long, value_parser = parse_duration)]
    fault_latency: Option<Duration>,

    /// Fault injection: probability that a matching update/patch gets 409 Conflict.
    #[arg(long, default_value_t = 0.0)]
    fault_conflict_rate: f64,

    /// Fault injection: close matching watches after this long.
    #[arg(long, value_parser = parse_duration)]
    fault_watch_drop_after: Option<Duration>,

    /// Fault injection: verbs the fault flags apply to (comma separated; default all).
    #[arg(long, value_delimiter = ',')]
    fault_verbs: Vec<String>,

    /// Fault injection: resources the fault flags apply to (`pods`, `gamedeployments.tkex.tencent.com`).
    #[arg(long, value_delimiter = ',')]
    fault_resources: Vec<String>,

    /// Write requests kept in the audit log (`GET /kube-sim/audit`); 0 turns it off.
    #[arg(long, default_value_t = 100_000)]
    audit_capacity: usize,

    /// Where a Service named by an admission webhook is reached:
    /// `NAMESPACE/NAME[:PORT]=IP:PORT` (repeatable), e.g. `kourse-system/gdo-webhook=127.0.0.1:9443`.
    #[arg(long = "service-address")]
    service_address: Vec<kube_sim::ServiceAddress>,

    /// How long after a pod's change the Endpoints and EndpointSlices of its Services follow: a
    /// real cluster takes a moment to withdraw an endpoint (informers, batching, kube-proxy).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    endpoint_propagation_delay: Duration,

    /// kube-apiserver's admission configuration (`AdmissionConfiguration`): the kubeconfig its
    /// `ValidatingAdmissionWebhook` plugin names gives the client certificate presented to each
    /// webhook host (`NAME.NAMESPACE.svc[:PORT]`, `*.NAMESPACE.svc`, `*`).
    #[arg(long, value_name = "FILE")]
    admission_control_config_file: Option<PathBuf>,

    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,

    #[command(flatten)]
    kubelet: KubeletConfig,
}

impl Args {
    fn faults(&self) -> FaultConfig {
        let active = self.fault_error_rate > 0.0
            || self.fault_latency.is_some()
            || self.fault_conflict_rate > 0.0
            || self.fault_watch_drop_after.is_some();
        if !active {
            return FaultConfig::default();
        }
        FaultConfig {
            rules: vec![FaultRule {
                verbs: self.fault_verbs.clone(),
                resources: self.fault_resources.clone(),
                error_rate: self.fault_error_rate,
                error_code: Some(self.fault_error_code),
                latency_ms: self.fault_latency.map_or(0, |d| d.as_millis() as u64),
                conflict_rate: self.fault_conflict_rate,
                watch_drop_after_ms: self.fault_watch_drop_after.map(|d| d.as_millis() as u64),
                ..FaultRule::default()
            }],
        }
    }
}

async fn terminated() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if args.log_format == "json" {
        tracing_subscriber::fmt().with_env_filter(filter).json().init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let admission_client_auth = match &args.admission_control_config_file {
        Some(path) => match kube_sim::load_admission_config(path) {
            Ok(auth) => auth,
            Err(e) => {
                eprintln!("kube-sim: --admission-control-config-file: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => Default::default(),
    };
    let config = SimConfig {
        addr: args.addr,
        kubelet: (!args.no_kubelet).then(|| args.kubelet.clone()),
        token_file: args.token_file.clone(),
        faults: args.faults(),
        watch_history: args.watch_history,
        aggregated_discovery: !args.no_aggregated_discovery,
        bookmark_interval: args.bookmark_interval,
        audit_capacity: args.audit_capacity,
        service_addresses: args.service_address.clone(),
        admission_client_auth,
        endpoint_propagation_delay: args.endpoint_propagation_delay,
        ..SimConfig::default()
    };
    let sim = match kube_sim::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kube-sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = &args.kubeconfig {
        if let Err(e) = sim.write_kubeconfig(path) {
            eprintln!("kube-sim: writing kubeconfig {}: {e}", path.display());
            sim.shutdown().await;
            return ExitCode::FAILURE;
        }
        tracing::info!(path = %path.display(), "wrote kubeconfig");
    }
    if !args.apply.is_empty() {
        match sim.apply_manifests(&args.apply) {
            Ok(applied) => {
                for a in applied {
                    println!("{a} applied");
                }
            }
            Err(e) => {
                eprintln!("kube-sim: {e}");
                sim.shutdown().await;
                return ExitCode::FAILURE;
            }
        }
    }
    println!("kube-sim serving on {}", sim.url());
    terminated().await;
    tracing::info!("shutting down");
    sim.shutdown().await;
    ExitCode::SUCCESS
}
