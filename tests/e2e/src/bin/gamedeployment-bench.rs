//! `gamedeployment-bench`: how the gamedeployment-operator does on a large GameDeployment, on kube-sim.
//!
//! ```text
//! cargo build --release -p gamedeployment-operator
//! cargo run --release -p e2e --bin gamedeployment-bench -- [--replicas 1000] [--max-unavailable 20%] [--operator PATH]
//! ```
//!
//! Phases: create a GameDeployment of N replicas and wait until all are Ready; roll it with `InplaceUpdate`
//! and wait until all are updated and Ready; then make the operator reconcile once with nothing to do. For each
//! phase it prints the wall time, the API requests the operator made (from its own request counter, in total,
//! per pod, and writes per pod), the operator's CPU seconds (from /proc) and its resident memory. The no-op pass
//! must make zero write requests; the command fails if it does not.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::api::GameDeployment;
use e2e::bench::{OperatorProcess, process_usage, start_operator_process, wait_until};
use e2e::gamedeployment::{manifest, scrape, workload_writes};
use kube::Api;
use kube::api::{Patch, PatchParams};

struct Args {
    replicas: i32,
    max_unavailable: String,
    operator: Option<PathBuf>,
    /// Extra operator flags (everything after `--`).
    operator_args: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { replicas: 1000, max_unavailable: "20%".into(), operator: None, operator_args: Vec::new() };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--replicas" => args.replicas = value()?.parse().map_err(|e| format!("--replicas: {e}"))?,
            "--max-unavailable" => args.max_unavailable = value()?,
            "--operator" => args.operator = Some(PathBuf::from(value()?)),
            "--" => {
                args.operator_args = it.by_ref().collect();
                break;
            }
            "-h" | "--help" => {
                return Err(
                    "usage: gamedeployment-bench [--replicas N] [--max-unavailable 20%] [--operator PATH]".into()
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn sample(samples: &BTreeMap<String, f64>, name: &str) -> f64 {
    samples.get(name).copied().unwrap_or(0.0)
}

fn requests(samples: &BTreeMap<String, f64>) -> f64 {
    samples.iter().filter(|(k, _)| k.starts_with("gamedeployment_api_requests_total")).map(|(_, v)| v).sum()
}

struct Phase {
    name: &'static str,
    passes: f64,
    pass_seconds: f64,
    seconds: f64,
    requests: f64,
    writes: f64,
    cpu: f64,
    rss: f64,
    peak: f64,
}

fn print_phase(p: &Phase, pods: f64) {
    println!(
        "{:<20} {:>7.2} s  {:>6.0} passes ({:>6.2} ms avg)  {:>6.0} requests ({:>4.2}/pod, {:>4.2} writes/pod)  \
         cpu {:>5.2} s  rss {:>5.1} MiB (peak {:>5.1} MiB)",
        p.name,
        p.seconds,
        p.passes,
        if p.passes > 0.0 { p.pass_seconds * 1000.0 / p.passes } else { 0.0 },
        p.requests,
        p.requests / pods,
        p.writes / pods,
        p.cpu,
        p.rss,
        p.peak
    );
}

async fn run(args: Args) -> Result<(), String> {
    let replicas = args.replicas;
    let operator = args.operator.unwrap_or_else(|| {
        let release = e2e::repo_root().join("target/release/gamedeployment-operator");
        if release.exists() { release } else { e2e::binary("gamedeployment-operator", "gamedeployment-operator") }
    });
    println!("gamedeployment-bench: {replicas} replicas, InplaceUpdate maxUnavailable {}", args.max_unavailable);
    println!("operator binary: {} {}", operator.display(), args.operator_args.join(" "));

    let cluster = e2e::Cluster::start().await;
    cluster.install_crds().await;
    let log = cluster.dir().join("operator.log");
    let OperatorProcess { mut child, pid, metrics } = start_operator_process(
        &operator,
        cluster.kubeconfig(),
        &log,
        &args.operator_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await?;

    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    // All pods Ready; for a roll, also: the status is of the new generation and every pod is updated.
    let ready = |generation: i64| {
        let api = api.clone();
        async move || {
            let Ok(gd) = api.get("bench").await else { return false };
            let s = gd.status.unwrap_or_default();
            s.observed_generation.unwrap_or(0) >= generation
                && s.replicas == replicas
                && s.ready_replicas == replicas
                && s.updated_ready_replicas == replicas
        }
    };
    let mut phases = Vec::new();
    let limit = Duration::from_secs(600);
    let measure = async |name: &'static str,
                         before: &BTreeMap<String, f64>,
                         started: Instant|
           -> Result<(Phase, BTreeMap<String, f64>), String> {
        let after = scrape(metrics).await;
        let (cpu, rss, peak) = process_usage(pid).ok_or("cannot read /proc for the operator")?;
        Ok((
            Phase {
                name,
                passes: sample(&after, "gamedeployment_reconcile_duration_seconds_count")
                    - sample(before, "gamedeployment_reconcile_duration_seconds_count"),
                pass_seconds: sample(&after, "gamedeployment_reconcile_duration_seconds_sum")
                    - sample(before, "gamedeployment_reconcile_duration_seconds_sum"),
                seconds: started.elapsed().as_secs_f64(),
                requests: requests(&after) - requests(before),
                writes: workload_writes(&after) - workload_writes(before),
                cpu,
                rss,
                peak,
            },
            after,
        ))
    };

    // 1. Create.
    let before = scrape(metrics).await;
    let started = Instant::now();
    let strategy = format!("    maxUnavailable: {}\n", args.max_unavailable);
    let text = manifest("bench", replicas, "InplaceUpdate", &strategy, "python:latest");
    let path = cluster.dir().join("bench.yaml");
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
    wait_until("all pods Ready", limit, ready(1)).await?;
    let (create, after_create) = measure("create (all Ready)", &before, started).await?;
    let cpu_before_roll = create.cpu;
    phases.push(create);

    // 2. In-place roll.
    let started = Instant::now();
    let patch =
        serde_json::json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "python:3.5"}]);
    let patch: Patch<()> = Patch::Json(serde_json::from_value(patch).map_err(|e| e.to_string())?);
    let patched =
        api.patch("bench", &PatchParams::default(), &patch).await.map_err(|e| format!("patching the image: {e}"))?;
    let generation = patched.metadata.generation.unwrap_or(2);
    wait_until("all pods updated and Ready", limit, ready(generation)).await?;
    let (mut roll, after_roll) = measure("in-place roll", &after_create, started).await?;
    roll.cpu -= cpu_before_roll;
    let cpu_before_noop = cpu_before_roll + roll.cpu;
    phases.push(roll);

    // 3. A pass with nothing to do.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let quiet = scrape(metrics).await;
    let reconciles = |s: &BTreeMap<String, f64>| {
        s.get("gamedeployment_reconciles_total{result=\"success\"}").copied().unwrap_or(0.0)
    };
    let started = Instant::now();
    let touch = serde_json::json!({"metadata": {"annotations": {"bench.example.com/touched": "yes"}}});
    api.patch("bench", &PatchParams::default(), &Patch::Merge(&touch)).await.map_err(|e| e.to_string())?;
    wait_until("a pass after the annotation", Duration::from_secs(60), async || {
        reconciles(&scrape(metrics).await) > reconciles(&quiet)
    })
    .await?;
    let (mut noop, _) = measure("no-op pass", &quiet, started).await?;
    noop.cpu -= cpu_before_noop;
    let noop_writes = noop.writes;
    phases.push(noop);
    let _ = after_roll;

    println!();
    for p in &phases {
        print_phase(p, f64::from(replicas));
    }
    let _ = child.kill().await;
    cluster.shutdown().await;
    if noop_writes != 0.0 {
        return Err(format!("the no-op pass made {noop_writes} write requests"));
    }
    println!("\nno-op pass: 0 write requests");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = e2e::bench::args_or_exit(parse_args());
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gamedeployment-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
