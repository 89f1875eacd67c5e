//! Command-line flags of the `hook-operator` binary.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use common::runtime::RuntimeFlags;
use common::runtime::flags::parse_duration;

use crate::providers::ProviderSettings;
use crate::providers::http::Resolve;
use crate::settings::EngineSettings;

/// The binary's command line: a subcommand, or the controller's flags.
#[derive(Parser, Debug)]
#[command(
    name = "hook-operator",
    version,
    about = "Runs HookRuns (tkex.tencent.com/v1alpha1): web, prometheus and kubernetes checks that gate pod changes",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// `check` or the internal `evaluator`; none runs the controller.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The controller's flags (used when no subcommand is given).
    #[command(flatten)]
    pub run: RunFlags,
}

/// The binary's subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a HookTemplate (or HookRun) once, locally, without a cluster, and print every measurement.
    /// Exits 0 when the run ends Successful, 1 when it ends Failed, Error or Inconclusive, 2 when it cannot run (an
    /// unreadable file, an invalid template or run, an argument without a value).
    Check(Box<CheckFlags>),
    /// Internal: serve evaluation jobs on stdin/stdout (started by the operator itself; see `isolation`).
    #[command(hide = true)]
    Evaluator(crate::isolation::worker::WorkerFlags),
}

/// The controller (the default command).
#[derive(Args, Debug)]
pub struct RunFlags {
    /// The flags both operators share (kubeconfig, logs, metrics address, leader election).
    #[command(flatten)]
    pub runtime: RuntimeFlags,
    /// Only reconcile HookRuns matching this label selector (to shard runs between operator instances).
    #[arg(long, value_name = "SELECTOR")]
    pub label_selector: Option<String>,
    /// HookRuns reconciled concurrently (0: unbounded). Reconciles never wait for measurements.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u16,
    /// Measurements running at once across all HookRuns; further due measurements wait for a slot.
    #[arg(long = "max-inflight-measurements", alias = "max-in-flight", default_value_t = 2000, value_name = "N")]
    pub max_in_flight: usize,
    /// Share of the in-flight slots one namespace may hold, in percent (its runs wait beyond that, so one
    /// tenant's slow endpoints cannot take every slot).
    #[arg(long = "max-inflight-per-namespace-percent", default_value_t = 25, value_name = "PERCENT",
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub max_in_flight_per_namespace_percent: u8,
    /// Least time between two status writes of one running HookRun, and from its first round to its first write
    /// (`Running`); completions and later phase changes are written at once.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub status_write_interval: Duration,
    /// Progress-only status writes per second for the whole process (0: unlimited). Runs waiting for one are served
    /// oldest first; phase changes and completions never wait. Bounds the API writes however many runs are live.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub max_status_writes_per_second: u32,
    /// Finished HookRuns without an owner are deleted this long after they finished (0: never). Runs a workload
    /// operator created have an owner and go with it.
    #[arg(long, default_value = "24h", value_parser = parse_duration, value_name = "DURATION")]
    pub finished_run_ttl: Duration,
    /// Deletes of expired HookRuns sent per second at most (bounds the collector's API writes).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub gc_deletes_per_second: u32,
    /// Split HookRuns between replicas over this many shards (0: off). Each shard has a Lease
    /// `<lease-name>-shard-<i>` in the leader-election namespace, with the leader-election timings; each replica
    /// takes its fair share. Replaces --leader-elect (every replica works).
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub shards: u32,
    /// How runs are measured and judged.
    #[command(flatten)]
    pub engine: EngineFlags,
}

/// Engine and provider settings shared by the controller, `check` and the benchmark.
#[derive(Args, Debug, Clone)]
pub struct EngineFlags {
    /// Measurements kept per metric in status (counters are never trimmed).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub measurement_history: usize,
    /// Largest web/Prometheus response body read, in bytes.
    #[arg(long, default_value_t = 1024 * 1024, value_name = "BYTES")]
    pub max_body_bytes: usize,
    /// Response bytes buffered at once across all measurements; a measurement waits for room before reading.
    #[arg(long, default_value_t = 16 * 1024 * 1024, value_name = "BYTES")]
    pub max_buffered_body_bytes: usize,
    /// How long one condition may run before its measurement is an Error.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub condition_timeout: Duration,
    /// Memory one condition evaluation may use (allocated and not yet freed), in bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024, value_name = "BYTES")]
    pub condition_memory_bytes: usize,
    /// Evaluation workers for namespaces in good standing (0: 2 worker processes; with `--condition-isolation
    /// thread`, one thread per CPU, at least 2); one more serves the penalty lane. Each process may hold a job's body
    /// and `--condition-memory-bytes` at once: size the memory limit for (N + 1) of them.
    #[arg(long, alias = "condition-workers", default_value_t = 0, value_name = "N")]
    pub condition_threads: usize,
    /// Where answers are read and conditions judged when that is not cheap by construction: `process` (worker
    /// processes with hard memory and time bounds) or `thread` (in-process, bounds checked at checkpoints only).
    #[arg(long, default_value = "process", value_parser = ["process", "thread"], value_name = "KIND")]
    pub condition_isolation: String,
    /// The executable evaluation workers run (default: this one, or a `hook-operator` next to it; without either,
    /// in-process threads).
    #[arg(long, value_name = "PATH")]
    pub condition_worker_binary: Option<PathBuf>,
    /// How long a namespace whose evaluation was stopped at a bound is served by the penalty lane only.
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub condition_penalty: Duration,
    /// Web and Prometheus requests to addresses in this CIDR are refused (repeatable; checked after DNS
    /// resolution, added to the built-in denials of link-local and cloud metadata addresses).
    #[arg(long = "web-deny-cidr", value_name = "CIDR")]
    pub web_deny_cidr: Vec<crate::providers::http::egress::Cidr>,
    /// Addresses in this CIDR are allowed even if a denial covers them (repeatable), e.g. 169.254.0.0/16 for a
    /// link-local endpoint you trust.
    #[arg(long = "web-allow-cidr", value_name = "CIDR")]
    pub web_allow_cidr: Vec<crate::providers::http::egress::Cidr>,
    /// Kinds the kubernetes provider may read and patch, as plural resource names with their API group
    /// (`pods`, `apps/deployments`, `tkex.tencent.com/gamedeployments`); repeatable. Always only in the HookRun's
    /// own namespace. The chart's RBAC must allow the same.
    #[arg(
        long = "kubernetes-provider-kinds",
        value_name = "[GROUP/]RESOURCE",
        default_value = "pods",
        value_delimiter = ','
    )]
    pub kubernetes_kinds: Vec<String>,
    /// Let args read their value from a Secret in the HookRun's namespace (`valueFrom.secretKeyRef`); needs
    /// `get` on secrets (chart value hookOperator.secretArgs.enabled).
    #[arg(long)]
    pub secret_args: bool,
    /// Least time between measurements of a metric: a shorter `interval` is raised to this (before
    /// `--interval-scale`).
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub min_interval: Duration,
    /// Idle keep-alive connections to web/Prometheus endpoints are closed after this long.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub web_idle_timeout: Duration,
    /// Idle keep-alive connections kept per endpoint host.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub web_max_idle_per_host: usize,
    /// Timeout of a Prometheus query.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub prometheus_timeout: Duration,
    /// Timeout of a kubernetes provider call.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub kubernetes_timeout: Duration,
    /// TEST/SANDBOX AID, off by default: multiply every interval, initialDelay and error retry delay by this
    /// factor (e.g. 0.01 runs a `60s` interval every 0.6 s).
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR")]
    pub interval_scale: f64,
    /// TEST/SANDBOX AID, off by default: send web and Prometheus requests for HOST:PORT to ADDR:PORT
    /// instead, like `curl --resolve` (repeatable), e.g. `1.1.1.1:9091=127.0.0.1:18080`.
    #[arg(long = "web-resolve", value_name = "HOST:PORT=ADDR:PORT")]
    pub web_resolve: Vec<Resolve>,
}

impl EngineFlags {
    /// The engine settings the flags give, or why they are invalid.
    pub fn engine(&self) -> Result<EngineSettings, String> {
        let settings = EngineSettings {
            interval_scale: self.interval_scale,
            history_limit: self.measurement_history,
            min_interval: self.min_interval,
            ..EngineSettings::default()
        };
        settings.validate()?;
        Ok(settings)
    }

    /// The provider settings the flags give.
    pub fn providers(&self) -> ProviderSettings {
        ProviderSettings {
            max_body_bytes: self.max_body_bytes,
            resolve: self.web_resolve.clone(),
            prometheus_timeout: self.prometheus_timeout,
            kubernetes_timeout: self.kubernetes_timeout,
            idle_timeout: self.web_idle_timeout,
            max_idle_per_host: self.web_max_idle_per_host,
            condition_limits: crate::conditions::budget::Limits {
                timeout: self.condition_timeout,
                memory: self.condition_memory_bytes,
            },
            condition_threads: self.condition_threads,
            isolation: if self.condition_isolation == "thread" {
                crate::isolation::Isolation::Threads
            } else {
                crate::isolation::processes_or_threads(self.condition_worker_binary.clone())
            },
            condition_penalty: self.condition_penalty,
            egress: crate::providers::http::egress::Policy::new(
                self.web_deny_cidr.clone(),
                self.web_allow_cidr.clone(),
            ),
            kubernetes_kinds: self.kubernetes_kinds.clone(),
            max_buffered_body_bytes: self.max_buffered_body_bytes,
            secret_args: self.secret_args,
            // The operator runs its own client; hyper's is `hook-bench`'s comparison only.
            plain_client: crate::providers::http::hyper_baseline::PlainClient::Own,
        }
    }
}

/// The flags of `hook-operator check`.
#[derive(Args, Debug)]
pub struct CheckFlags {
    /// A YAML file holding a HookTemplate or a HookRun (the first one found).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// An argument value, NAME=VALUE (repeatable); overrides the template's value.
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = parse_arg)]
    pub args: Vec<(String, String)>,
    /// kubeconfig for the kubernetes provider (default: in-cluster, $KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Print each measurement as one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// How the run is measured and judged, as in the controller.
    #[command(flatten)]
    pub engine: EngineFlags,
}

fn parse_arg(s: &str) -> Result<(String, String), String> {
    let (name, value) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    if name.is_empty() {
        return Err(format!("{s:?} has an empty name"));
    }
    Ok((name.to_string(), value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_controller_and_check_command_lines() {
        let cli = Cli::try_parse_from(["hook-operator", "--namespace", "games", "--max-inflight-measurements", "10"])
            .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.run.max_in_flight, 10);
        assert_eq!(cli.run.finished_run_ttl, Duration::from_secs(24 * 3600), "finished runs are kept a day");
        assert_eq!(cli.run.gc_deletes_per_second, 10);
        assert_eq!(cli.run.max_status_writes_per_second, 200, "progress writes are bounded by default");
        assert_eq!(cli.run.status_write_interval, Duration::from_secs(1));
        assert_eq!(cli.run.runtime.kube.namespace.as_deref(), Some("games"));
        assert_eq!(cli.run.engine.interval_scale, 1.0, "test aids are off by default");
        assert!(cli.run.engine.web_resolve.is_empty(), "test aids are off by default");

        let cli = Cli::try_parse_from([
            "hook-operator",
            "check",
            "-f",
            "t.yaml",
            "--arg",
            "PodIP=127.0.0.1",
            "--arg",
            "x=a=b",
            "--interval-scale",
            "0.01",
            "--web-resolve",
            "1.1.1.1:9091=127.0.0.1:18080",
        ])
        .unwrap();
        let Some(Command::Check(check)) = cli.command else { panic!("expected check") };
        assert_eq!(check.args, vec![("PodIP".into(), "127.0.0.1".into()), ("x".into(), "a=b".into())]);
        assert_eq!(check.engine.interval_scale, 0.01);
        assert_eq!(check.engine.web_resolve.len(), 1);
        assert!(Cli::try_parse_from(["hook-operator", "check", "-f", "t.yaml", "--arg", "novalue"]).is_err());
        assert!(
            Cli::try_parse_from(["hook-operator", "check", "-f", "t.yaml", "--interval-scale", "0"])
                .unwrap()
                .command
                .is_some()
        );
    }
}
