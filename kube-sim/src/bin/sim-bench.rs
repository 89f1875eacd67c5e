//! CPU cost of kube-sim per write and per watch event: a repeatable micro-benchmark. Prints figures; it is a
//! command, not a test.
//!
//! ```sh
//! cargo run --release -p kube-sim --features serde_json/preserve_order --bin sim-bench -- [--pods 5000]
//! ```
//!
//! (`serde_json/preserve_order` is what the workspace's other crates turn on in every test and benchmark build.)
//!
//! kube-sim runs in this process on its own runtime (worker threads named `sim`); the load comes from a
//! single-threaded runtime on the main thread over HTTP, with its own watch streams. kube-sim's CPU is the
//! process's (`/proc/self/stat`) less the main thread's (`/proc/thread-self/stat`), so the client's encoding and
//! decoding are not counted. Phases, each over `--pods` pods with `--concurrency` requests in flight:
//!
//! - `create`: POST a pod (labels, annotations, an owner, one container with ports, env and resources, a
//!   readiness gate), as an operator creates them;
//! - `label`: a JSON merge patch of one label;
//! - `status`: a strategic merge patch of `pods/status` (phase, a condition, a container status), as a kubelet
//!   writes;
//!
//! each first with no watch open, then on a new batch of pods with `--watchers` watch streams open on
//! pods (one without a selector like the kubelet simulator's, the others label-selected like the operators'). A
//! phase ends when every watcher has received every event. The cost of a delivered watch event is the CPU the
//! watched phases took more than the unwatched ones, divided by the events delivered. Last, `kubelet`: a second
//! kube-sim with the kubelet simulator creates `--kubelet-pods` pods and the phase ends when all are Ready (CPU per
//! pod started: the create, scheduling, the kubelet's watch decoding and its status writes).

/// The allocator of the kube-sim binary, the end-to-end test process and `fleet-bench`, where kube-sim runs: the
/// figures are kube-sim's as it runs there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use kube::Client;
use kube_sim::SimConfig;
use serde_json::json;

#[derive(Debug, clap::Parser)]
struct Args {
    /// Pods per phase.
    #[arg(long, default_value_t = 5_000)]
    pods: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Watch streams open during the watched phases.
    #[arg(long, default_value_t = 3)]
    watchers: usize,
    /// Pods the kubelet simulator starts in the last phase (0 skips it).
    #[arg(long, default_value_t = 1_000)]
    kubelet_pods: usize,
    /// Rounds of the API phases; the cheapest round of each phase is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// kube-sim's worker threads.
    #[arg(long, default_value_t = 2)]
    sim_threads: usize,
}

/// utime + stime of a `/proc/.../stat` file, in seconds.
fn stat_cpu(path: &str) -> f64 {
    let Ok(s) = std::fs::read_to_string(path) else { return 0.0 };
    // The fields after the command (which may contain spaces) start after the last ')'.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // state is field 3 of the whole line, f[0] here; utime and stime are fields 14 and 15.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// kube-sim's CPU so far: the process's less this (the client's) thread's.
fn sim_cpu() -> f64 {
    stat_cpu("/proc/self/stat") - stat_cpu("/proc/thread-self/stat")
}

struct Phase {
    name: String,
    ops: usize,
    events: usize,
    cpu: f64,
    wall: Duration,
}

impl Phase {
    fn print(&self) {
        println!(
            "{:<22} {:>6} ops {:>7} events  {:>7.2} s CPU  {:>7.1} µs/op  {:>6.2} s wall",
            self.name,
            self.ops,
            self.events,
            self.cpu,
            self.cpu * 1e6 / self.ops.max(1) as f64,
            self.wall.as_secs_f64()
        );
    }
}

/// The uid of the ConfigMap that owns the pods (an owner that exists, so the garbage collector leaves them).
static OWNER: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Creates the pods' owner in a fresh kube-sim.
async fn create_owner(client: &Client) -> anyhow::Result<()> {
    let body =
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bench-owner"}}))?;
    let text = client
        .request_text(request("POST", "/api/v1/namespaces/default/configmaps", "application/json", body)?)
        .await?;
    let owner: serde_json::Value = serde_json::from_str(&text)?;
    let uid = owner["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    anyhow::ensure!(!uid.is_empty(), "no uid in {text}");
    *OWNER.lock().unwrap_or_else(|p| p.into_inner()) = uid;
    Ok(())
}

fn pod(i: usize, batch: &str) -> Vec<u8> {
    let owner = OWNER.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let name = format!("{batch}-{i:05}");
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "bench", "bench/batch": batch, "bench/index": i.to_string(),
                "controller-revision-hash": "bench-6d4cf56db9"},
            "annotations": {"bench/owner": "sim-bench", "bench/note": "a pod as an operator creates it"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "bench-owner",
                "uid": owner, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": "elsewhere",
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
            "containers": [{
                "name": "main", "image": "registry.example/game-server:1.0",
                "ports": [{"name": "game", "containerPort": 7777, "protocol": "UDP"}, {"name": "http", "containerPort": 8080}],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "MODE", "value": "bench"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            }],
        },
    }))
    .unwrap_or_default()
}

fn request(
    method: &str,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> anyhow::Result<hyper::http::Request<Vec<u8>>> {
    Ok(hyper::http::Request::builder().method(method).uri(uri).header("content-type", content_type).body(body)?)
}

/// Runs `n` requests, `concurrency` at a time.
async fn run_requests(
    client: &Client,
    n: usize,
    concurrency: usize,
    make: impl Fn(usize) -> anyhow::Result<hyper::http::Request<Vec<u8>>>,
) -> anyhow::Result<()> {
    let make = &make;
    futures::stream::iter(0..n)
        .map(|i| async move {
            client.request_text(make(i)?).await?;
            anyhow::Ok(())
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Open watch streams on pods, each counting the event lines it received.
struct Watchers {
    seen: Vec<Arc<AtomicUsize>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watchers {
    async fn open(client: &Client, n: usize, rv: &str) -> anyhow::Result<Self> {
        let mut seen = Vec::new();
        let mut tasks = Vec::new();
        for i in 0..n {
            // The first like the kubelet simulator's (every pod), the others like the operators' (label-selected).
            let selector = if i == 0 { String::new() } else { "&labelSelector=app%3Dbench".to_string() };
            let uri = format!("/api/v1/pods?watch=true&resourceVersion={rv}&allowWatchBookmarks=true{selector}");
            let lines = client.request_stream(request("GET", &uri, "application/json", Vec::new())?).await?;
            let count = Arc::new(AtomicUsize::new(0));
            let c = count.clone();
            tasks.push(tokio::spawn(async move {
                let mut lines = lines.lines();
                while let Some(Ok(line)) = lines.next().await {
                    if !line.starts_with("{\"type\":\"BOOKMARK\"") {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
            seen.push(count);
        }
        Ok(Self { seen, tasks })
    }

    fn total(&self) -> usize {
        self.seen.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }

    /// Waits until each watcher has received `each` more events than `before` in total.
    async fn wait(&self, before: usize, each: usize) -> anyhow::Result<usize> {
        let want = before + each * self.seen.len();
        let deadline = Instant::now() + Duration::from_secs(300);
        while self.total() < want {
            anyhow::ensure!(Instant::now() < deadline, "watchers received {} of {want} events", self.total());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(self.total() - before)
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn measure<F: std::future::Future<Output = anyhow::Result<usize>>>(
    name: &str,
    ops: usize,
    work: F,
) -> anyhow::Result<Phase> {
    let cpu = sim_cpu();
    let started = Instant::now();
    let events = work.await?;
    let phase = Phase { name: name.to_string(), ops, events, cpu: sim_cpu() - cpu, wall: started.elapsed() };
    phase.print();
    Ok(phase)
}

async fn api_phases(args: &Args, client: &Client, rv: impl Fn() -> u64) -> anyhow::Result<()> {
    let n = args.pods;
    let c = args.concurrency;
    let pods = "/api/v1/namespaces/default/pods";
    let create = |batch: String| {
        move |i| request("POST", &format!("{pods}?fieldManager=sim-bench"), "application/json", pod(i, &batch))
    };
    let label = |batch: String, round: usize| {
        move |i| {
            let body = serde_json::to_vec(&json!({"metadata": {"labels": {"bench/round": round.to_string()}}}))?;
            request(
                "PATCH",
                &format!("{pods}/{batch}-{i:05}?fieldManager=sim-bench"),
                "application/merge-patch+json",
                body,
            )
        }
    };
    let status = |batch: String, round: usize| {
        move |i| {
            let body = serde_json::to_vec(&json!({"status": {
                "phase": "Running",
                "podIP": format!("10.1.{}.{}", i / 250, i % 250 + 1),
                "conditions": [{"type": "Ready", "status": if round.is_multiple_of(2) { "True" } else { "False" },
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "main", "image": "registry.example/game-server:1.0", "imageID": "",
                    "ready": round.is_multiple_of(2), "restartCount": round, "started": true,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}],
            }}))?;
            request(
                "PATCH",
                &format!("{pods}/{batch}-{i:05}/status?fieldManager=sim-bench"),
                "application/strategic-merge-patch+json",
                body,
            )
        }
    };

    // [phase][watched] -> the cheapest round's figures.
    let mut best: Vec<[Option<Phase>; 2]> = (0..3).map(|_| [None, None]).collect();
    let mut keep = |p: Phase, i: usize, w: usize| {
        if best[i][w].as_ref().is_none_or(|b| p.cpu < b.cpu) {
            best[i][w] = Some(p);
        }
    };
    for round in 0..args.rounds {
        println!("\nround {}: no watch open", round + 1);
        let batch = format!("r{round}u");
        keep(
            measure("create", n, async { run_requests(client, n, c, create(batch.clone())).await.map(|()| 0) }).await?,
            0,
            0,
        );
        keep(
            measure("patch label", n, async { run_requests(client, n, c, label(batch.clone(), 1)).await.map(|()| 0) })
                .await?,
            1,
            0,
        );
        keep(
            measure("patch status", n, async {
                run_requests(client, n, c, status(batch.clone(), 1)).await.map(|()| 0)
            })
            .await?,
            2,
            0,
        );

        println!("round {}: {} watch streams open", round + 1, args.watchers);
        let batch = format!("r{round}w");
        let watchers = Watchers::open(client, args.watchers, &rv().to_string()).await?;
        let phase = measure("create", n, async {
            let before = watchers.total();
            run_requests(client, n, c, create(batch.clone())).await?;
            watchers.wait(before, n).await
        })
        .await?;
        keep(phase, 0, 1);
        keep(
            measure("patch label", n, async {
                let before = watchers.total();
                run_requests(client, n, c, label(batch.clone(), 1)).await?;
                watchers.wait(before, n).await
            })
            .await?,
            1,
            1,
        );
        keep(
            measure("patch status", n, async {
                let before = watchers.total();
                run_requests(client, n, c, status(batch.clone(), 1)).await?;
                watchers.wait(before, n).await
            })
            .await?,
            2,
            1,
        );
        drop(watchers);
    }
    let [create, label, status] = [0, 1, 2].map(|i| {
        let [a, b] = &best[i];
        (a.as_ref().map_or(0.0, |p| p.cpu), b.as_ref().map_or(0.0, |p| p.cpu), b.as_ref().map_or(0, |p| p.events))
    });
    let per_op = |cpu: f64| cpu * 1e6 / n as f64;
    let per_event = |(without, with, events): (f64, f64, usize)| (with - without) * 1e6 / events.max(1) as f64;
    let events = create.2 + label.2 + status.2;
    let extra = (create.1 - create.0) + (label.1 - label.0) + (status.1 - status.0);
    println!(
        "\nkube-sim CPU, the cheapest of {} rounds (a write: the unwatched phase; a watch event: the watched phases' \
         extra CPU per event delivered)",
        args.rounds
    );
    println!(
        "  per pod create:        {:>7.1} µs  ({:.1} µs with {} watchers)",
        per_op(create.0),
        per_op(create.1),
        args.watchers
    );
    println!(
        "  per label patch:       {:>7.1} µs  ({:.1} µs with {} watchers)",
        per_op(label.0),
        per_op(label.1),
        args.watchers
    );
    println!(
        "  per status patch:      {:>7.1} µs  ({:.1} µs with {} watchers)",
        per_op(status.0),
        per_op(status.1),
        args.watchers
    );
    println!(
        "  per watch event:       {:>7.1} µs  (create {:.1}, label {:.1}, status {:.1})",
        extra * 1e6 / events.max(1) as f64,
        per_event(create),
        per_event(label),
        per_event(status),
    );
    Ok(())
}

/// Pods the kubelet simulator reports Ready, read from a watch stream.
async fn kubelet_phase(args: &Args, client: &Client) -> anyhow::Result<()> {
    let n = args.kubelet_pods;
    let lines = client
        .request_stream(request(
            "GET",
            "/api/v1/pods?watch=true&labelSelector=app%3Dbench",
            "application/json",
            Vec::new(),
        )?)
        .await?;
    let ready = Arc::new(AtomicUsize::new(0));
    let r = ready.clone();
    let task = tokio::spawn(async move {
        let mut ready = std::collections::HashSet::new();
        let mut lines = lines.lines();
        while let Some(Ok(line)) = lines.next().await {
            #[derive(serde::Deserialize)]
            struct Line {
                object: Object,
            }
            #[derive(serde::Deserialize)]
            struct Object {
                metadata: Meta,
                #[serde(default)]
                status: Status,
            }
            #[derive(serde::Deserialize)]
            struct Meta {
                name: String,
            }
            #[derive(serde::Deserialize, Default)]
            struct Status {
                #[serde(default)]
                conditions: Vec<Condition>,
            }
            #[derive(serde::Deserialize)]
            struct Condition {
                #[serde(rename = "type")]
                type_: String,
                status: String,
            }
            let Ok(l) = serde_json::from_str::<Line>(&line) else { continue };
            if l.object.status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True") {
                ready.insert(l.object.metadata.name);
                r.store(ready.len(), Ordering::Relaxed);
            }
        }
    });
    println!("\nkubelet simulator on");
    measure("start pods (to Ready)", n, async {
        run_requests(client, n, args.concurrency, |i| {
            let mut p: serde_json::Value = serde_json::from_slice(&pod(i, "k"))?;
            if let Some(spec) = p.get_mut("spec").and_then(|s| s.as_object_mut()) {
                spec.remove("nodeName");
                spec.remove("readinessGates");
            }
            request(
                "POST",
                "/api/v1/namespaces/default/pods?fieldManager=sim-bench",
                "application/json",
                serde_json::to_vec(&p)?,
            )
        })
        .await?;
        let deadline = Instant::now() + Duration::from_secs(300);
        while ready.load(Ordering::Relaxed) < n {
            anyhow::ensure!(Instant::now() < deadline, "{} of {n} pods Ready", ready.load(Ordering::Relaxed));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(0)
    })
    .await?;
    task.abort();
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = <Args as clap::Parser>::parse();
    let run = || -> anyhow::Result<()> {
        let sim_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.sim_threads)
            .thread_name("sim")
            .thread_keep_alive(Duration::from_secs(3600))
            .enable_all()
            .build()?;
        let client_rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        println!(
            "sim-bench: {} pods per phase, {} requests in flight, {} watchers, {} sim threads ({} build)",
            args.pods,
            args.concurrency,
            args.watchers,
            args.sim_threads,
            if cfg!(debug_assertions) { "debug" } else { "release" }
        );
        let config = SimConfig {
            kubelet: None,
            bookmark_interval: Duration::from_secs(3600),
            watch_history: 20_000,
            ..SimConfig::default()
        };
        let sim = sim_rt.block_on(async { tokio::spawn(kube_sim::start(config)).await })??;
        client_rt.block_on(async {
            let client = sim.client().await;
            create_owner(&client).await?;
            api_phases(&args, &client, || sim.resource_version()).await
        })?;
        sim_rt.block_on(async { tokio::spawn(sim.shutdown()).await })?;

        if args.kubelet_pods > 0 {
            let per_node = 500;
            let kubelet = kube_sim::KubeletConfig {
                nodes: args.kubelet_pods.div_ceil(per_node).max(1) as u32,
                max_pods_per_node: per_node as u32 + 10,
                node_cpu: "1000".into(),
                ..kube_sim::KubeletConfig::fast()
            };
            let config = SimConfig {
                kubelet: Some(kubelet),
                bookmark_interval: Duration::from_secs(3600),
                ..SimConfig::default()
            };
            let sim = sim_rt.block_on(async { tokio::spawn(kube_sim::start(config)).await })??;
            client_rt.block_on(async {
                let client = sim.client().await;
                // Let the nodes register before the pods are scheduled.
                tokio::time::sleep(Duration::from_secs(1)).await;
                create_owner(&client).await?;
                kubelet_phase(&args, &client).await
            })?;
            sim_rt.block_on(async { tokio::spawn(sim.shutdown()).await })?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sim-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
