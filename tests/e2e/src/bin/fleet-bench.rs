//! `fleet-bench`: the two operators end to end on kube-sim, at fleet scale, with the machine's own limits measured
//! in the same run. A command that prints figures, not a test.
//!
//! ```text
//! scripts/bench                      # builds the release binaries, runs the defaults (200 pods, 1,000 runs)
//! scripts/bench --pods 5000 --runs 10000
//! ```
//!
//! Three parts, one table:
//! - (c) **machine limits**: kube-sim's write throughput (ConfigMap creates from 32 concurrent clients) and the
//!   loopback HTTP rate of a minimal keep-alive server (32 connections), so the other figures read as ratios;
//! - (b) **HookRuns through the API**: `--runs` HookRuns in 10 namespaces (one web metric, `interval: 1s`, no count,
//!   against an in-process server answering after 100 ms) created through the API and run by the release hook-operator:
//!   measurements/s against the ceiling `runs / (interval + latency)`, scheduling lag p50/p99 (from the operator's
//!   histogram: the upper bound of the bucket), status writes/s (operator counter and kube-sim's audit log),
//!   operator CPU (and CPU per measurement) and RSS;
//! - (a) **fleet rollout through hooks**: a `--pods` GameDeployment with a preInplace hook (web, `count: 3`,
//!   `interval: 1s`, each pod's own endpoint answering after 100 ms) rolled in place to a new image with
//!   `maxUnavailable` (20 %): wall time against the ideal `batches × (hook time + update time)`, API writes per pod
//!   by who made them (kube-sim's audit log), the gamedeployment-operator's requests per pod, HookRun
//!   `Successful` → pod image changed latency p50/p99/max (both from watch events), CPU and peak RSS of both
//!   operators.

/// kube-sim runs in this process: with glibc's malloc, allocation was a third of its CPU in a 2,000-pod roll (perf).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::api::{GameDeployment, HookPhase, HookRun, HookRunSpec, Metric, MetricProvider, WebMetric};
use e2e::Cluster;
use e2e::bench::{process_usage, start_operator_process, wait_until};
use e2e::gamedeployment::scrape;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the roll's two latency watchers read of pods and HookRuns. They run in this process next to kube-sim:
/// decoding every event into the full types (managedFields, the whole pod spec and status) cost the process more
/// than the two fields they look at; serde skips the rest of each object.
mod slim {
    use std::borrow::Cow;

    use common::api::{Argument, HookPhase};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::{Deserialize, Deserializer};

    /// Name, namespace and resourceVersion (the watcher resumes from it) only.
    fn meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
            resource_version: Option<String>,
        }
        let m = Meta::deserialize(d)?;
        Ok(ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            resource_version: m.resource_version,
            ..ObjectMeta::default()
        })
    }

    macro_rules! resource {
        ($ty:ident, $kind:literal, $group:literal, $version:literal, $plural:literal) => {
            impl kube::Resource for $ty {
                type DynamicType = ();
                type Scope = k8s_openapi::NamespaceResourceScope;
                fn kind(_: &()) -> Cow<'_, str> {
                    $kind.into()
                }
                fn group(_: &()) -> Cow<'_, str> {
                    $group.into()
                }
                fn version(_: &()) -> Cow<'_, str> {
                    $version.into()
                }
                fn plural(_: &()) -> Cow<'_, str> {
                    $plural.into()
                }
                fn meta(&self) -> &ObjectMeta {
                    &self.metadata
                }
                fn meta_mut(&mut self) -> &mut ObjectMeta {
                    &mut self.metadata
                }
            }
        };
    }

    #[derive(Clone, Debug, Deserialize)]
    pub struct Pod {
        #[serde(deserialize_with = "meta")]
        pub metadata: ObjectMeta,
        #[serde(default)]
        pub spec: PodSpec,
    }
    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct PodSpec {
        #[serde(default)]
        pub containers: Vec<Container>,
    }
    #[derive(Clone, Debug, Deserialize)]
    pub struct Container {
        pub image: Option<String>,
    }
    resource!(Pod, "Pod", "", "v1", "pods");

    #[derive(Clone, Debug, Deserialize)]
    pub struct Run {
        #[serde(deserialize_with = "meta")]
        pub metadata: ObjectMeta,
        #[serde(default)]
        pub spec: RunSpec,
        #[serde(default)]
        pub status: RunStatus,
    }
    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct RunSpec {
        #[serde(default)]
        pub args: Vec<Argument>,
    }
    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct RunStatus {
        pub phase: Option<HookPhase>,
    }
    resource!(Run, "HookRun", "tkex.tencent.com", "v1alpha1", "hookruns");
}

struct Args {
    pods: i32,
    runs: usize,
    window: Duration,
    max_unavailable_percent: i32,
    skip: Vec<String>,
    /// Extra flags for the gamedeployment-operator (A/B runs of one build, e.g. `--gd-arg=--pass-spacing=0`).
    gd_args: Vec<String>,
    /// Print the roll second by second: writes by kind, the API's answer time, hooks done, pods changed.
    timeline: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        pods: 200,
        runs: 1000,
        window: Duration::from_secs(20),
        max_unavailable_percent: 20,
        skip: Vec::new(),
        gd_args: Vec::new(),
        timeline: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--pods" => args.pods = value()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--runs" => args.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--window-seconds" => {
                args.window = Duration::from_secs(value()?.parse().map_err(|e| format!("--window-seconds: {e}"))?)
            }
            "--max-unavailable-percent" => {
                args.max_unavailable_percent =
                    value()?.parse().map_err(|e| format!("--max-unavailable-percent: {e}"))?
            }
            "--skip" => args.skip.push(value()?),
            "--gd-arg" => args.gd_args.push(value()?),
            "--timeline" => args.timeline = true,
            other if other.starts_with("--gd-arg=") => args.gd_args.push(other["--gd-arg=".len()..].to_string()),
            "-h" | "--help" => {
                return Err("usage: fleet-bench [--pods 200] [--runs 1000] [--window-seconds 20] \
                            [--max-unavailable-percent 20] [--skip limits|runs|fleet]... \
                            [--gd-arg=<gamedeployment-operator flag>]... [--timeline]"
                    .into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// CPU seconds and current / peak RSS (MiB) of a process; zeros when /proc cannot be read.
fn usage(pid: u32) -> (f64, f64, f64) {
    process_usage(pid).unwrap_or_default()
}

fn release_binary(name: &str) -> Result<PathBuf, String> {
    let path = e2e::repo_root().join("target/release").join(name);
    path.exists()
        .then_some(path)
        .ok_or_else(|| format!("{name} not built: run `cargo build --release -p {name}` (scripts/bench does)"))
}

/// A keep-alive HTTP/1.1 server answering every request with `{"age":45}` after `delay`; counts requests.
async fn http_server(delay: Duration, served: Arc<AtomicU64>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { continue };
            let served = served.clone();
            tokio::spawn(async move {
                let mut buffer = Vec::with_capacity(1024);
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    buffer.drain(..end + 4);
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    let response =
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n{\"age\":45}";
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                    served.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    addr
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// The upper bound of the histogram bucket where quantile `q` of the observations between two scrapes falls.
fn histogram_quantile(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, name: &str, q: f64) -> f64 {
    let prefix = format!("{name}_bucket{{le=\"");
    let mut buckets: Vec<(f64, f64)> = after
        .iter()
        .filter_map(|(k, v)| {
            let le = k.strip_prefix(&prefix)?.strip_suffix("\"}")?;
            let bound = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((bound, v - before.get(k).copied().unwrap_or(0.0)))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    buckets.iter().find(|(_, count)| *count >= q * total).map(|b| b.0).unwrap_or(f64::NAN)
}

fn sum(samples: &BTreeMap<String, f64>, prefix: &str) -> f64 {
    samples.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v).sum()
}

/// Rows of the final table.
#[derive(Default)]
struct Table(Vec<(String, String, String)>);

impl Table {
    fn row(&mut self, part: &str, what: &str, value: String) {
        println!("  {what:<52} {value}");
        self.0.push((part.into(), what.into(), value));
    }
}

async fn limits(table: &mut Table) -> Result<(), String> {
    println!("(c) machine limits");
    let cluster = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let total = 4000usize;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (api, next) = (api.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i as usize >= total {
                    return;
                }
                let cm = ConfigMap {
                    metadata: ObjectMeta { name: Some(format!("cm-{i}")), ..ObjectMeta::default() },
                    data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
                    ..ConfigMap::default()
                };
                let _ = api.create(&PostParams::default(), &cm).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    table.row("limits", "kube-sim creates/s (32 clients, this process)", format!("{rate:.0}/s"));
    cluster.shutdown().await;

    let served = Arc::new(AtomicU64::new(0));
    let addr = http_server(Duration::ZERO, served.clone()).await;
    let stop = Instant::now() + Duration::from_secs(3);
    let mut clients = Vec::new();
    for _ in 0..32 {
        clients.push(tokio::spawn(async move {
            let Ok(mut socket) = tokio::net::TcpStream::connect(addr).await else { return };
            let mut reply = [0u8; 256];
            while Instant::now() < stop {
                if socket.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.is_err() {
                    return;
                }
                // The whole response arrives in one segment on loopback.
                if socket.read(&mut reply).await.unwrap_or(0) == 0 {
                    return;
                }
            }
        }));
    }
    let started = Instant::now();
    for client in clients {
        let _ = client.await;
    }
    let rate = served.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    table.row("limits", "loopback HTTP requests/s (32 keep-alive connections)", format!("{rate:.0}/s"));
    Ok(())
}

/// Tenants the runs are spread over: the hook-operator gives one namespace at most 25 % of its in-flight slots
/// (`--max-inflight-per-namespace-percent`), so 10,000 runs in one namespace would be capped at 500 in flight
/// (5,000 measurements/s at 100 ms) by that fairness rule, not by the engine.
const RUN_NAMESPACES: usize = 10;

fn web_run(name: &str, namespace: &str, url: &str) -> HookRun {
    let mut run = HookRun::new(
        name,
        HookRunSpec {
            metrics: vec![Metric {
                name: "web".into(),
                interval: Some("1s".into()),
                success_condition: Some("asInt(result) > 30".into()),
                provider: MetricProvider {
                    web: Some(WebMetric { url: url.into(), json_path: Some("{$.age}".into()), ..WebMetric::default() }),
                    ..MetricProvider::default()
                },
                ..Metric::default()
            }],
            ..HookRunSpec::default()
        },
    );
    run.metadata.namespace = Some(namespace.into());
    run
}

async fn runs(args: &Args, table: &mut Table) -> Result<(), String> {
    println!(
        "(b) {} HookRuns through the API in {RUN_NAMESPACES} namespaces (interval 1s, server latency 100 ms)",
        args.runs
    );
    let cluster = Cluster::start_with(kube_sim::SimConfig { kubelet: None, ..kube_sim::SimConfig::default() }).await;
    cluster.install_crds().await;
    let served = Arc::new(AtomicU64::new(0));
    let addr = http_server(Duration::from_millis(100), served.clone()).await;
    let log = cluster.dir().join("hook-operator.log");
    let mut operator =
        start_operator_process(&release_binary("hook-operator")?, cluster.kubeconfig(), &log, &[]).await?;
    let namespaces: Api<Namespace> = Api::all(cluster.client());
    for n in 0..RUN_NAMESPACES {
        let namespace = Namespace {
            metadata: ObjectMeta { name: Some(format!("tenant-{n}")), ..ObjectMeta::default() },
            ..Namespace::default()
        };
        let _ = namespaces.create(&PostParams::default(), &namespace).await;
    }
    let client = cluster.client();
    let url = format!("http://{addr}/");
    let created = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, next, url, total) = (client.clone(), next.clone(), url.clone(), args.runs);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= total {
                    return;
                }
                let namespace = format!("tenant-{}", i % RUN_NAMESPACES);
                let api: Api<HookRun> = Api::namespaced(client.clone(), &namespace);
                let _ = api.create(&PostParams::default(), &web_run(&format!("run-{i}"), &namespace, &url)).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let creation = created.elapsed();
    // Every run's first status write (no status yet → Running) is never deferred: let that wave pass.
    tokio::time::sleep(Duration::from_secs((args.runs as u64 / 1000).max(5))).await;
    let before = scrape(operator.metrics).await;
    let (cpu_before, _, _) = usage(operator.pid);
    let (bench_cpu_before, _, _) = usage(std::process::id());
    let audit_before = cluster.sim().audit().items.last().map(|e| e.id).unwrap_or(0);
    let window_start = Instant::now();
    tokio::time::sleep(args.window).await;
    let elapsed = window_start.elapsed().as_secs_f64();
    let after = scrape(operator.metrics).await;
    let (cpu_after, rss, peak) = usage(operator.pid);
    let (bench_cpu_after, _, _) = usage(std::process::id());
    let status_patches = cluster
        .sim()
        .audit_since(audit_before)
        .items
        .iter()
        .filter(|e| e.resource == "hookruns" && e.subresource.as_deref() == Some("status"))
        .count();
    let measurements =
        sum(&after, "hook_operator_measurements_total") - sum(&before, "hook_operator_measurements_total");
    let ceiling = args.runs as f64 / 1.1;
    let rate = measurements / elapsed;
    let cpu = cpu_after - cpu_before;
    let lag = "hook_operator_scheduling_lag_seconds";
    let writes = sum(&after, "hook_operator_status_writes_total") - sum(&before, "hook_operator_status_writes_total");
    let deferred = sum(&after, "hook_operator_status_writes_deferred_total")
        - sum(&before, "hook_operator_status_writes_deferred_total");
    let waiting = sum(&after, "hook_operator_status_writes_waiting");
    let delay = "hook_operator_status_write_delay_seconds";
    table.row(
        "runs",
        "HookRuns created through the API",
        format!("{} in {RUN_NAMESPACES} namespaces in {:.1} s", args.runs, creation.as_secs_f64()),
    );
    table.row(
        "runs",
        "measurements/s (share of the ceiling runs/1.1 s)",
        format!("{rate:.0}/s ({:.1} % of {ceiling:.0}/s)", 100.0 * rate / ceiling),
    );
    table.row(
        "runs",
        "scheduling lag p50 / p99 (histogram bucket bound)",
        format!(
            "≤ {:.1} ms / ≤ {:.1} ms",
            histogram_quantile(&before, &after, lag, 0.5) * 1e3,
            histogram_quantile(&before, &after, lag, 0.99) * 1e3
        ),
    );
    table.row(
        "runs",
        "status writes/s (operator counter; kube-sim audit; budget --max-status-writes-per-second 200 + phase changes)",
        format!("{:.0}/s; {:.0}/s", writes / elapsed, status_patches as f64 / elapsed),
    );
    table.row(
        "runs",
        "progress kept in memory: deferred rounds/s; runs waiting at the end; wait before written p50 / p99",
        format!(
            "{:.0}/s; {waiting:.0}; ≤ {:.2} s / ≤ {:.2} s",
            deferred / elapsed,
            histogram_quantile(&before, &after, delay, 0.5),
            histogram_quantile(&before, &after, delay, 0.99)
        ),
    );
    table.row(
        "runs",
        "hook-operator CPU (per measurement)",
        format!(
            "{cpu:.1} s in {elapsed:.0} s = {:.0} % of a core ({:.0} µs)",
            100.0 * cpu / elapsed,
            if measurements > 0.0 { cpu * 1e6 / measurements } else { 0.0 }
        ),
    );
    table.row("runs", "hook-operator RSS (peak)", format!("{rss:.0} MiB ({peak:.0} MiB)"));
    table.row(
        "runs",
        "this process's CPU (kube-sim, the 100 ms test server, the bench)",
        format!("{:.0} % of a core", 100.0 * (bench_cpu_after - bench_cpu_before) / elapsed),
    );
    let _ = operator.child.kill().await;
    cluster.shutdown().await;
    Ok(())
}

const TEMPLATE: &str = r#"apiVersion: tkex.tencent.com/v1alpha1
kind: HookTemplate
metadata:
  name: fleet
spec:
  args:
    - name: PodIP
  metrics:
    - name: web
      count: 3
      interval: 1s
      successCondition: "asInt(result) > 30"
      provider:
        web:
          url: http://{{ args.PodIP }}:9091
          jsonPath: "{$.age}"
"#;

fn fleet_manifest(pods: i32, max_unavailable_percent: i32) -> String {
    format!(
        r#"apiVersion: tkex.tencent.com/v1alpha1
kind: GameDeployment
metadata:
  name: fleet
spec:
  replicas: {pods}
  selector:
    matchLabels:
      app: fleet
  template:
    metadata:
      labels:
        app: fleet
      annotations:
        kube-sim.kourse.dev/http-port: "9091"
        kube-sim.kourse.dev/http-delay: 100ms
        kube-sim.kourse.dev/http-body: '{{"age": 45}}'
    spec:
      containers:
        - name: game
          image: game:v1
  updateStrategy:
    type: InplaceUpdate
    maxUnavailable: {max_unavailable_percent}%
  preInplaceUpdateStrategy:
    hook:
      templateName: fleet
"#
    )
}

/// The roll second by second (`--timeline`): where its wall time goes. Writes are counted by the second their answer
/// was ready; "answer ms" is the time kube-sim took from receiving a write to its answer (queueing for the CPU
/// included), mean and maximum of that second's writes; "done" counts hooks turned Successful and pods given the new
/// image in that second, from the bench's watches.
fn print_timeline(
    started: Instant,
    audit: &[kube_sim::audit::AuditEvent],
    successful: &HashMap<String, Instant>,
    changed: &HashMap<String, Instant>,
) {
    #[derive(Default)]
    struct Second {
        runs_created: u32,
        pod_patches: u32,
        pod_status_gd: u32,
        run_status: u32,
        pod_status_others: u32,
        other: u32,
        answer_ms: Vec<f64>,
        successful: u32,
        changed: u32,
    }
    let wall_start = k8s_openapi::jiff::Timestamp::now()
        - k8s_openapi::jiff::SignedDuration::try_from(started.elapsed()).unwrap_or_default();
    // Seconds since the roll started at which kube-sim answered a request.
    let answered = |event: &kube_sim::audit::AuditEvent| event.stage_timestamp.duration_since(wall_start).as_secs_f64();
    let mut seconds: BTreeMap<i64, Second> = BTreeMap::new();
    for event in audit.iter().filter(|e| e.succeeded() && e.verb != "get" && e.verb != "list" && e.verb != "watch") {
        let second = seconds.entry(answered(event).floor() as i64).or_default();
        let kind = (event.user.as_str(), event.resource.as_str(), event.subresource.as_deref());
        match kind {
            ("gamedeployment-operator", "hookruns", None) => second.runs_created += 1,
            ("gamedeployment-operator", "pods", None) => second.pod_patches += 1,
            ("gamedeployment-operator", "pods", Some("status")) => second.pod_status_gd += 1,
            ("hook-operator", "hookruns", Some("status")) => second.run_status += 1,
            (_, "pods", Some("status")) => second.pod_status_others += 1,
            _ => second.other += 1,
        }
        second
            .answer_ms
            .push(event.stage_timestamp.duration_since(event.request_received_timestamp).as_secs_f64() * 1e3);
    }
    let second_of = |instant: &Instant| instant.saturating_duration_since(started).as_secs() as i64;
    for instant in successful.values() {
        seconds.entry(second_of(instant)).or_default().successful += 1;
    }
    for instant in changed.values() {
        seconds.entry(second_of(instant)).or_default().changed += 1;
    }
    // One pod's way through the roll, from the writes about it (in the order kube-sim answered them).
    let mut by_pod: HashMap<&str, Vec<(&str, f64)>> = HashMap::new();
    for event in audit.iter().filter(|e| e.succeeded() && e.resource == "pods" && e.verb == "patch") {
        let at = answered(event);
        let stage = match (event.user.as_str(), event.subresource.as_deref()) {
            ("gamedeployment-operator", None) => "gd pod",
            ("gamedeployment-operator", Some("status")) => "gd status",
            (_, Some("status")) => "kubelet",
            _ => continue,
        };
        by_pod.entry(event.name.as_str()).or_default().push((stage, at));
    }
    let mut gaps: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (pod, stages) in &by_pod {
        let nth = |stage: &str, n: usize| stages.iter().filter(|(s, _)| *s == stage).nth(n).map(|(_, at)| *at);
        let (Some(hold), Some(image), Some(unready), Some(ready)) =
            (nth("gd pod", 0), nth("gd pod", 1), nth("gd status", 0), nth("gd status", 1))
        else {
            continue;
        };
        let done = successful.get(*pod).map(|at| at.saturating_duration_since(started).as_secs_f64());
        let kubelet_after = |t: f64| stages.iter().find(|(s, at)| *s == "kubelet" && *at > t).map(|(_, at)| *at);
        let mut gap = |name, from: Option<f64>, to: Option<f64>| {
            if let (Some(from), Some(to)) = (from, to) {
                gaps.entry(name).or_default().push(to - from);
            }
        };
        gap("1 hold → hook Successful", Some(hold), done);
        gap("2 Successful → not ready (gd status)", done, Some(unready));
        gap("3 not ready → image (gd pod)", Some(unready), Some(image));
        gap("4 image → first kubelet status", Some(image), kubelet_after(image));
        gap("5 image → ready (gd status)", Some(image), Some(ready));
        gap("6 ready → kubelet Ready", Some(ready), kubelet_after(ready));
        gap("7 hold → kubelet Ready", Some(hold), kubelet_after(ready));
    }
    for (name, mut values) in gaps {
        values.sort_by(f64::total_cmp);
        println!(
            "  {name:<40} p50 {:>6.0} ms  p90 {:>6.0} ms  p99 {:>6.0} ms  ({} pods)",
            percentile(&values, 0.5) * 1e3,
            percentile(&values, 0.9) * 1e3,
            percentile(&values, 0.99) * 1e3,
            values.len()
        );
    }
    println!(
        "  second | runs created | pod patches | pod status (gd) | run status | pod status (kubelet) | other | answer ms mean / max | hooks Successful | pods changed"
    );
    for (at, s) in seconds.range(0..) {
        let mean = s.answer_ms.iter().sum::<f64>() / s.answer_ms.len().max(1) as f64;
        let max = s.answer_ms.iter().copied().fold(0.0, f64::max);
        println!(
            "  {at:>6} | {:>12} | {:>11} | {:>15} | {:>10} | {:>20} | {:>5} | {mean:>8.1} / {max:>6.0} | {:>16} | {:>12}",
            s.runs_created,
            s.pod_patches,
            s.pod_status_gd,
            s.run_status,
            s.pod_status_others,
            s.other,
            s.successful,
            s.changed
        );
    }
}

async fn fleet(args: &Args, table: &mut Table) -> Result<(), String> {
    let pods = args.pods;
    println!(
        "(a) fleet rollout: {pods} pods, preInplace web hook (count 3, interval 1s, 100 ms), maxUnavailable {}%",
        args.max_unavailable_percent
    );
    // kube-sim's defaults hold 3 nodes × 1,000 pods and 100,000 audit entries: room for the whole fleet on 3 nodes, and
    // an audit log that keeps every write of the roll (about 30 per pod with the Events).
    let mut config = kube_sim::SimConfig {
        audit_capacity: (pods.max(0) as usize * 60).max(100_000),
        ..kube_sim::SimConfig::default()
    };
    if let Some(kubelet) = config.kubelet.as_mut() {
        kubelet.grace_period_scale = 0.01;
        kubelet.max_pods_per_node = kubelet.max_pods_per_node.max(pods.max(0) as u32);
        // The simulated kubelet's own Events (Scheduled, Pulled, Created, Started, Killing: about 7 per pod in a
        // roll) are writes a real cluster's API server takes from real kubelets; here they would compete with the
        // operators for the same 2 cores in this process.
        kubelet.events = false;
    }
    let cluster = Cluster::start_with(config).await;
    cluster.install_crds().await;
    let gd_log = cluster.dir().join("gamedeployment-operator.log");
    let hook_log = cluster.dir().join("hook-operator.log");
    // Each operator as its own user, so the audit log tells their writes apart.
    let kubeconfig = |user: &str| -> Result<PathBuf, String> {
        let path = cluster.dir().join(format!("{user}.kubeconfig"));
        cluster.sim().write_kubeconfig_for_user(&path, user, &["system:masters"]).map_err(|e| e.to_string())?;
        Ok(path)
    };
    let mut gd_operator = start_operator_process(
        &release_binary("gamedeployment-operator")?,
        &kubeconfig("gamedeployment-operator")?,
        &gd_log,
        &args.gd_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await?;
    let mut hook_operator =
        start_operator_process(&release_binary("hook-operator")?, &kubeconfig("hook-operator")?, &hook_log, &[])
            .await?;
    for (file, text) in
        [("template.yaml", TEMPLATE.to_string()), ("fleet.yaml", fleet_manifest(pods, args.max_unavailable_percent))]
    {
        let path = cluster.dir().join(file);
        std::fs::write(&path, text).map_err(|e| e.to_string())?;
        cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
    }
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let ready = |generation: i64| {
        let api = api.clone();
        async move || {
            let Ok(gd) = api.get("fleet").await else { return false };
            let s = gd.status.unwrap_or_default();
            s.observed_generation.unwrap_or(0) >= generation
                && s.replicas == pods
                && s.ready_replicas == pods
                && s.updated_ready_replicas == pods
        }
    };
    let limit = Duration::from_secs(3600);
    let creating = Instant::now();
    wait_until("all pods Ready", limit, ready(1)).await?;
    println!("  {pods} pods Ready in {:.1} s; rolling them to game:v2", creating.elapsed().as_secs_f64());

    // Watch events: when each pre-inplace run turned Successful, and when each pod got the new image.
    let successful: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let changed: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let run_watch = tokio::spawn({
        let (api, successful) = (Api::<slim::Run>::namespaced(cluster.client(), "default"), successful.clone());
        async move {
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = stream.next().await {
                if let watcher::Event::Apply(run) | watcher::Event::InitApply(run) = event
                    && run.status.phase == Some(HookPhase::Successful)
                    && let Some(pod) = run.spec.args.iter().find(|a| a.name == "PodName").and_then(|a| a.value.clone())
                {
                    successful.lock().expect("lock").entry(pod).or_insert_with(Instant::now);
                }
            }
        }
    });
    let pod_watch = tokio::spawn({
        let (api, changed) = (Api::<slim::Pod>::namespaced(cluster.client(), "default"), changed.clone());
        async move {
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = stream.next().await {
                if let watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) = event
                    && pod.spec.containers.iter().any(|c| c.image.as_deref() == Some("game:v2"))
                {
                    changed.lock().expect("lock").entry(pod.name_any()).or_insert_with(Instant::now);
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let gd_before = scrape(gd_operator.metrics).await;
    let (gd_cpu0, _, _) = usage(gd_operator.pid);
    let (hook_cpu0, _, _) = usage(hook_operator.pid);
    let (bench_cpu0, _, _) = usage(std::process::id());
    let audit_before = cluster.sim().audit().items.last().map(|e| e.id).unwrap_or(0);
    let started = Instant::now();
    let patch =
        serde_json::json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "game:v2"}]);
    let patch: Patch<()> = Patch::Json(serde_json::from_value(patch).map_err(|e| e.to_string())?);
    let patched = api.patch("fleet", &PatchParams::default(), &patch).await.map_err(|e| e.to_string())?;
    wait_until("all pods updated and Ready", limit, ready(patched.metadata.generation.unwrap_or(2))).await?;
    let wall = started.elapsed().as_secs_f64();
    let gd_after = scrape(gd_operator.metrics).await;
    let (gd_cpu1, _, gd_peak) = usage(gd_operator.pid);
    let (hook_cpu1, _, hook_peak) = usage(hook_operator.pid);
    let (bench_cpu1, _, bench_peak) = usage(std::process::id());
    run_watch.abort();
    pod_watch.abort();

    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    let audit = cluster.sim().audit_since(audit_before);
    if audit.items.first().is_some_and(|e| e.id > audit_before + 1) {
        return Err(format!(
            "kube-sim's audit log evicted writes of the roll ({} dropped): raise audit_capacity",
            audit.dropped
        ));
    }
    for event in audit.items.iter().filter(|e| e.succeeded()) {
        let who = match event.user.as_str() {
            "gamedeployment-operator" => "gamedeployment-operator",
            "hook-operator" => "hook-operator",
            // kube-sim's kubelet simulator and garbage collector (in-process) and this benchmark's own patch.
            _ => "others",
        };
        *writes
            .entry(format!(
                "{who} {}{}",
                event.resource,
                event.subresource.as_deref().map(|s| format!("/{s}")).unwrap_or_default()
            ))
            .or_default() += 1;
    }
    let per_pod = |who: &str| {
        writes.iter().filter(|(k, _)| k.starts_with(who) && !k.contains(" events")).map(|(_, v)| *v).sum::<usize>()
            as f64
            / f64::from(pods)
    };
    let successful = successful.lock().expect("lock").clone();
    let changed = changed.lock().expect("lock").clone();
    let mut latencies: Vec<f64> = successful
        .iter()
        .filter_map(|(pod, at)| Some(changed.get(pod)?.saturating_duration_since(*at).as_secs_f64()))
        .collect();
    latencies.sort_by(f64::total_cmp);
    let unavailable = ((pods * args.max_unavailable_percent + 99) / 100).max(1); // signed div_ceil is unstable
    let batches = (pods + unavailable - 1) / unavailable;
    // Hook: 3 measurements, each 100 ms, 1 s apart (interval counts from the previous one's end). Update: kube-sim's
    // default in-place restart (start 100 ms + ready 300 ms).
    let ideal = f64::from(batches) * (3.0 * 0.1 + 2.0 * 1.0 + 0.4);
    table.row(
        "fleet",
        "wall time (ideal batches × (hook 2.3 s + update 0.4 s))",
        format!("{wall:.1} s ({ideal:.1} s, {:.2}×; {batches} batches of {unavailable})", wall / ideal),
    );
    table.row(
        "fleet",
        "API writes per pod: gamedeployment-op / hook-op / others (kubelet sim, bench)",
        format!(
            "{:.2} / {:.2} / {:.2} (Events excluded)",
            per_pod("gamedeployment-operator"),
            per_pod("hook-operator"),
            per_pod("others")
        ),
    );
    let requests =
        sum(&gd_after, "gamedeployment_api_requests_total") - sum(&gd_before, "gamedeployment_api_requests_total");
    table.row("fleet", "gamedeployment-operator API requests per pod", format!("{:.2}", requests / f64::from(pods)));
    table.row(
        "fleet",
        "hook Successful → pod image changed p50 / p99 / max",
        format!(
            "{:.0} / {:.0} / {:.0} ms ({} pods)",
            percentile(&latencies, 0.5) * 1e3,
            percentile(&latencies, 0.99) * 1e3,
            latencies.last().copied().unwrap_or_default() * 1e3,
            latencies.len()
        ),
    );
    table.row(
        "fleet",
        "CPU during the roll: gamedeployment-op / hook-op",
        format!("{:.1} s / {:.1} s", gd_cpu1 - gd_cpu0, hook_cpu1 - hook_cpu0),
    );
    table.row(
        "fleet",
        "CPU during the roll: this process (kube-sim, its kubelet, the watchers)",
        format!("{:.1} s (peak RSS {bench_peak:.0} MiB)", bench_cpu1 - bench_cpu0),
    );
    let passes = "gamedeployment_reconcile_duration_seconds";
    let (count, seconds) = (
        sum(&gd_after, &format!("{passes}_count")) - sum(&gd_before, &format!("{passes}_count")),
        sum(&gd_after, &format!("{passes}_sum")) - sum(&gd_before, &format!("{passes}_sum")),
    );
    table.row(
        "fleet",
        "gamedeployment-operator passes (mean duration)",
        format!("{count:.0} ({:.0} ms)", if count > 0.0 { seconds * 1e3 / count } else { 0.0 }),
    );
    let delta = |name: &str| sum(&gd_after, name) - sum(&gd_before, name);
    table.row(
        "fleet",
        "gamedeployment-operator passes that waited for spacing (total wait)",
        format!(
            "{:.0} ({:.1} s)",
            delta("gamedeployment_passes_spaced_total"),
            delta("gamedeployment_pass_spacing_seconds_total")
        ),
    );
    table.row("fleet", "peak RSS: gamedeployment-op / hook-op", format!("{gd_peak:.0} MiB / {hook_peak:.0} MiB"));
    for (what, count) in &writes {
        println!("    writes {what}: {count}");
    }
    if args.timeline {
        print_timeline(started, &audit.items, &successful, &changed);
    }
    let _ = gd_operator.child.kill().await;
    let _ = hook_operator.child.kill().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "fleet-bench: {} pods, {} runs, {} CPUs, load average {}",
        args.pods,
        args.runs,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let mut table = Table::default();
    let parts: [(&str, bool); 3] = [("limits", true), ("runs", true), ("fleet", true)];
    for (part, _) in parts {
        if args.skip.iter().any(|s| s == part) {
            continue;
        }
        let outcome = match part {
            "limits" => limits(&mut table).await,
            "runs" => runs(&args, &mut table).await,
            _ => fleet(&args, &mut table).await,
        };
        if let Err(e) = outcome {
            eprintln!("fleet-bench {part}: {e}");
            return ExitCode::FAILURE;
        }
    }
    println!("\n| part | figure | value |\n|---|---|---|");
    for (part, what, value) in &table.0 {
        println!("| {part} | {what} | {value} |");
    }
    ExitCode::SUCCESS
}
