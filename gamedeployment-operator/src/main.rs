//! `gamedeployment-operator`: parse flags, build the client, serve `/metrics` `/healthz` `/readyz` and the admission
//! webhooks, and run the controller (while holding the Lease when `--leader-elect` is on).
//!
//! Readiness means "can do its job now": with the webhooks on, the webhook caches are synced and the webhook server
//! answers; without them, the replica has started (keys loaded). Leading is not part of it: a standby answers the
//! webhooks and must be Ready for a rollout to proceed. On SIGTERM the replica hands over in two steps
//! ([`Handover`]): it reports not ready, stops its controller and releases the Lease at once, keeps answering
//! admission for `--shutdown-drain`, then closes its servers.

/// mimalloc: every pass clones and drops many small values (pods, HookRuns, patches), and glibc's malloc showed
/// up high in the operator's CPU profile of a large roll through hooks (`scripts/bench`, perf).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use common::runtime::connections::{ConnectionLimits, ConnectionMetrics, Limiter};
use common::runtime::descriptors;
use common::runtime::events::{EventSettings, EventSink};
use common::runtime::flags::parse_duration;
use common::runtime::{
    Handover, Health, LeaderElection, LeaderError, RuntimeError, RuntimeFlags, client, logging, server,
};
use gamedeployment_operator::controller::{self, Config};
use gamedeployment_operator::hookrun_keys;
use gamedeployment_operator::metrics::Metrics;
use gamedeployment_operator::webhook::caches::GateCaches;
use gamedeployment_operator::webhook::metrics::WebhookMetrics;
use gamedeployment_operator::webhook::server::{self as webhook_server, WebhookError};
use gamedeployment_operator::webhook::{IdentityError, WebhookFlags};
use kube::client::ClientBuilder;
use kube::runtime::events::Reporter;
use prometheus_client::registry::Registry;

/// Kubernetes operator for tkex.tencent.com/v1alpha1 GameDeployments (BCS-compatible).
#[derive(Parser, Debug)]
#[command(name = "gamedeployment-operator", version, about)]
struct Cli {
    #[command(flatten)]
    runtime: RuntimeFlags,
    /// GameDeployments reconciled at the same time.
    #[arg(long, default_value_t = 4, env = "CONCURRENCY")]
    concurrency: u16,
    /// Pod writes in flight at once within one GameDeployment's pass.
    #[arg(long, default_value_t = 16)]
    write_concurrency: usize,
    /// How long a write may stay invisible in the watch cache before planning resumes anyway.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    expectations_timeout: Duration,
    /// Do not watch Nodes (then `io.tencent.bcs.dev/node-deletion-cost` is ignored; no nodes RBAC needed).
    #[arg(long)]
    no_node_deletion_cost: bool,
    /// Coalesce triggers arriving within this window into one pass (e.g. `100ms` on very large fleets).
    #[arg(long, default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
    debounce: Duration,
    /// A status change that is only progress (replica counts, the Progressing message, pods still held by a
    /// hook) is written at most once per this interval per GameDeployment; revisions, conditions, canary fields,
    /// failed hooks and release records are written at once. `0s`: every change at once.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    status_write_interval: Duration,
    /// The next pass of a GameDeployment starts no sooner than this many times the previous pass's planning time
    /// after it ended (at most 1 s); triggers arriving meanwhile become one pass. Fewer passes and less operator
    /// CPU for a little latency. `0` (default): passes back to back.
    #[arg(long, default_value_t = 0.0, value_name = "RATIO", value_parser = parse_ratio)]
    pass_spacing: f64,
    /// How often each GameDeployment's namespace is searched for orphans to adopt: pods that match its selector but
    /// carry no instance-id label (the operator watches only pods that do). A GameDeployment is also searched when it
    /// is created or its selector changes. `0s`: only then.
    #[arg(long, default_value = "1m", value_parser = parse_duration, value_name = "DURATION")]
    adoption_scan_interval: Duration,
    #[command(flatten)]
    webhook: WebhookFlags,
    #[command(flatten)]
    hookrun_keys: hookrun_keys::KeyFlags,
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    #[error(transparent)]
    Keys(#[from] hookrun_keys::KeyError),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = logging::init(&cli.runtime.log) {
        eprintln!("gamedeployment-operator: {e}");
        return ExitCode::FAILURE;
    }
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "gamedeployment-operator stopped");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), StartError> {
    // Every connection the servers hold takes a descriptor: the most the process may have sizes their caps.
    let descriptors = descriptors::raise_to_hard_limit();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let webhook_metrics = WebhookMetrics::register(&mut registry);
    let connection_metrics = ConnectionMetrics::register(&mut registry, "gamedeployment");
    let kube_config = client::config(&cli.runtime.kube).await?;
    let client = ClientBuilder::try_from(kube_config)
        .map_err(StartError::Client)?
        .with_layer(&metrics.request_counter())
        .build();

    // With webhooks, a stop drains: requests routed here before the endpoint is withdrawn are still answered.
    let drain = if cli.webhook.webhook_address.is_some() { cli.webhook.shutdown_drain } else { Duration::ZERO };
    let handover = Handover::on_signals(drain);
    let health = Health::default();
    tokio::spawn({
        let (stopping, health) = (handover.stopping.clone(), health.clone());
        async move {
            stopping.wait().await;
            health.stop();
        }
    });
    let server = server::start(
        cli.runtime.serve.metrics_address,
        registry,
        health.clone(),
        handover.stopped.clone(),
        connection_metrics.clone(),
        &descriptors,
    )
    .await?;
    // Every replica serves the webhooks, leader or not: a drain must be answered while a standby waits. They answer
    // from watch caches every replica keeps; the replica is Ready once they are synced.
    let webhook = match cli.webhook.config(&client).await? {
        Some(webhook) => {
            let listener = webhook_server::bind(&webhook).await?;
            let address = listener.local_addr().map_or(webhook.address, |a| a);
            let connections = Limiter::serving(
                "webhook",
                address,
                ConnectionLimits::webhook(descriptors.count()),
                connection_metrics,
                "admission webhooks over HTTPS: /validate-pods, /validate-workload, /validate-hooks",
            );
            let reporter = Reporter {
                controller: "gamedeployment-operator".into(),
                instance: std::env::var("POD_NAME").ok().or_else(|| std::env::var("HOSTNAME").ok()),
            };
            let events = EventSink::start_with(client.clone(), reporter, EventSettings::default(), Default::default());
            let caches = GateCaches::start(&client, cli.runtime.kube.namespace.as_deref());
            let router = webhook_server::router(
                client.clone(),
                &webhook,
                webhook_metrics,
                events,
                caches.clone(),
                health.clone(),
            );
            let stopped = handover.stopped.clone();
            let serving =
                tokio::spawn(webhook_server::serve(listener, router, connections, async move { stopped.wait().await }));
            Some((serving, caches))
        }
        None => None,
    };

    // Every replica loads the keys before it may lead: the one that leads signs and verifies with them.
    let keys = hookrun_keys::load(&client, &cli.hookrun_keys.source(&client)).await?;
    match &webhook {
        Some((_, caches)) => {
            let (caches, health) = (caches.clone(), health.clone());
            tokio::spawn(async move {
                caches.wait_until_synced().await;
                tracing::info!("webhook caches synced; ready");
                health.set_ready(true);
            });
        }
        None => health.set_ready(true),
    }
    let config = Config {
        hookrun_keys: Some(Arc::new(keys)),
        namespace: cli.runtime.kube.namespace.clone(),
        concurrency: cli.concurrency,
        write_concurrency: cli.write_concurrency,
        expectations_timeout: cli.expectations_timeout,
        node_costs: !cli.no_node_deletion_cost,
        debounce: cli.debounce,
        status_write_interval: cli.status_write_interval,
        pass_spacing: cli.pass_spacing,
        adoption_scan_interval: cli.adoption_scan_interval,
        // The pod-gate label the webhook's objectSelector matches is kept by the leader, like every pod write.
        pod_gate_labels: webhook.is_some(),
        ..Config::default()
    };
    let election = cli
        .runtime
        .leader_election
        .leader_elect
        .then(|| LeaderElection::from_flags(client.clone(), &cli.runtime.leader_election, "gamedeployment-operator"))
        .transpose()?;
    let instance = election
        .as_ref()
        .map(|e| e.identity().to_string())
        .or_else(|| std::env::var("POD_NAME").ok())
        .or_else(|| std::env::var("HOSTNAME").ok());
    let reporter = Reporter { controller: "gamedeployment-operator".into(), instance };
    let stopping = handover.stopping.clone();
    let work = {
        let stopping = stopping.clone();
        move || async move {
            controller::run(client, config, metrics, reporter, async move { stopping.wait().await }, || {
                tracing::info!("controller caches synced");
            })
            .await
        }
    };
    // The controller stops and the Lease is released at the first step of the handover; the webhooks keep answering
    // until the drain ends.
    let result = match election {
        Some(election) => election.run_while_leading(&stopping, work).await.map(|_| ()),
        None => {
            work().await;
            Ok(())
        }
    };
    stopping.trigger();
    handover.stopped.wait().await;
    if let Err(e) = server.await {
        tracing::warn!(error = %e, "metrics server task");
    }
    if let Some((webhook, _)) = webhook
        && let Err(e) = webhook.await
    {
        tracing::warn!(error = %e, "webhook server task");
    }
    result.map_err(StartError::from)
}
/// A finite, non-negative number (`--pass-spacing`).
fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        Ok(_) => Err(format!("{s}: must be a finite number of at least 0")),
        Err(e) => Err(format!("{s}: {e}")),
    }
}
