//! `hook-operator`: the controller (default) and `hook-operator check`.

/// mimalloc: the engine allocates many small, short-lived values per measurement. Counted while a condition
/// is evaluated, which bounds a condition's memory (see `hook_operator::conditions::budget`).
#[global_allocator]
static ALLOCATOR: hook_operator::conditions::budget::Counting<mimalloc::MiMalloc> =
    hook_operator::conditions::budget::Counting(mimalloc::MiMalloc);

use std::process::ExitCode;

use clap::Parser;
use common::runtime::connections::ConnectionMetrics;
use common::runtime::{Health, LeaderElection, Shutdown, client, descriptors, logging, server};
use hook_operator::cli::{Cli, Command, RunFlags};
use hook_operator::controller::{self, Options};
use hook_operator::metrics::Metrics;
use hook_operator::providers::Providers;
use hook_operator::readiness::{AnsweredLeases, Readiness};
use hook_operator::settings::EngineSettings;
use prometheus_client::registry::Registry;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // An evaluation worker needs no runtime: it reads jobs from stdin, one at a time.
    if let Some(Command::Evaluator(flags)) = cli.command {
        return hook_operator::isolation::worker::serve(flags);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hook-operator: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Some(Command::Evaluator(_)) => ExitCode::FAILURE,
        Some(Command::Check(flags)) => hook_operator::local::check::run(*flags).await,
        None => match operate(cli.run).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("{e}");
                eprintln!("hook-operator: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

async fn operate(flags: RunFlags) -> Result<(), String> {
    logging::init(&flags.runtime.log).map_err(|e| e.to_string())?;
    let descriptors = descriptors::raise_to_hard_limit();
    // Nobody reads the rounds' copies of what they recorded here (`check` does).
    let engine = EngineSettings { keep_recorded: false, ..flags.engine.engine()? };
    if engine.interval_scale != 1.0 || !flags.engine.web_resolve.is_empty() {
        tracing::warn!(
            interval_scale = engine.interval_scale,
            web_resolve = ?flags.engine.web_resolve,
            "test aids are on: intervals are scaled and/or web targets rewritten; do not use in production"
        );
    }
    let client = client::build(&flags.runtime.kube).await.map_err(|e| e.to_string())?;
    let shutdown = Shutdown::default();
    shutdown.trigger_on_signals();

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let providers = Providers::new(&flags.engine.providers(), Some(client.clone())).map_err(|e| e.0)?;
    providers.conditions.register(&mut registry);
    let connection_metrics = ConnectionMetrics::register(&mut registry, "hook_operator");
    let health = Health::default();
    let server = server::start(
        flags.runtime.serve.metrics_address,
        registry,
        health.clone(),
        shutdown.clone(),
        connection_metrics,
        &descriptors,
    )
    .await
    .map_err(|e| e.to_string())?;

    let election = LeaderElection::from_flags(client.clone(), &flags.runtime.leader_election, controller::COMPONENT)
        .map_err(|e| e.to_string())?;
    // Ready exactly when this replica can do its job (see `hook_operator::readiness`): acting, once its HookRun cache
    // synced; standing by (leader election without sharding), once the API server answers its Lease requests.
    let standby = flags.runtime.leader_election.leader_elect && flags.shards == 0;
    let readiness = Readiness::new(health.clone(), standby.then(|| election.leading()));
    let election = election.map_store(|inner| AnsweredLeases { inner, readiness: readiness.clone() });
    tokio::spawn({
        let (readiness, shutdown) = (readiness.clone(), shutdown.clone());
        async move {
            shutdown.wait().await;
            readiness.stopping();
        }
    });
    let options = Options {
        namespace: flags.runtime.kube.namespace.clone(),
        label_selector: flags.label_selector.clone(),
        concurrency: flags.concurrency,
        max_in_flight: flags.max_in_flight,
        engine,
        identity: election.identity().to_string(),
        namespace_share_percent: flags.max_in_flight_per_namespace_percent,
        status_write_interval: flags.status_write_interval,
        max_status_writes_per_second: flags.max_status_writes_per_second,
        finished_run_ttl: flags.finished_run_ttl,
        gc_deletes_per_second: flags.gc_deletes_per_second,
        shards: (flags.shards > 0).then(|| hook_operator::controller::shards::Ownership::new(flags.shards)),
    };
    let sharding = options.shards.clone().map(|ownership| {
        let le = &flags.runtime.leader_election;
        let settings = hook_operator::controller::shards::Settings {
            namespace: le.leader_elect_namespace.clone().unwrap_or_else(|| client.default_namespace().to_string()),
            base: le.leader_elect_lease_name.clone().unwrap_or_else(|| controller::COMPONENT.to_string()),
            identity: election.identity().to_string(),
            lease_duration: le.leader_elect_lease_duration,
            renew_deadline: le.leader_elect_renew_deadline,
            retry_period: le.leader_elect_retry_period,
        };
        let (client, shutdown) = (client.clone(), shutdown.clone());
        tokio::spawn(async move {
            let managed =
                hook_operator::controller::shards::manage(client, settings, ownership, shutdown.clone()).await;
            // Without its manager the controller would hold no shard: stop the process instead.
            shutdown.trigger();
            managed
        })
    });
    let leader = metrics.clone();
    let controller = controller::run(client, options, providers, metrics, readiness.clone(), shutdown.clone());
    // Polled only while leading: `hook_operator_leader` is 1 exactly while the controller runs.
    let run = async move {
        let _leading = leader.leading();
        // Acting now (the elector set `leading` before this runs): not Ready until the cache has synced.
        readiness.update();
        controller.await
    };
    let outcome = if let Some(manager) = sharding {
        // Every replica runs the controller; the shard manager decides which runs it acts on. On shutdown the
        // manager releases its shards after the controller stopped.
        run.await;
        shutdown.trigger();
        match manager.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("shard manager: {e}")),
            Err(e) => Err(format!("shard manager stopped: {e}")),
        }
    } else if flags.runtime.leader_election.leader_elect {
        election.run_while_leading(&shutdown, || run).await.map(|_| ()).map_err(|e| e.to_string())
    } else {
        run.await;
        Ok(())
    };
    shutdown.trigger();
    if let Err(e) = server.await {
        tracing::warn!(error = %e, "metrics server task");
    }
    outcome
}
