//! `events-bench`: the operators' Events publisher (`common::runtime::events::EventSink`) against kube-runtime's
//! `Recorder`, the maintained crate it replaced, on the same Events in the same run. A command that prints figures,
//! not a test.
//!
//! ```text
//! cargo run --release -p e2e --bin events-bench -- --pods 2000
//! ```
//!
//! kube-sim runs in this process; each publisher runs on a runtime of its own on one thread (its kube client too),
//! so that thread's CPU time (the scheduler's count) is the publisher's cost. Two workloads, each through both:
//!
//! - **roll**: a rollout's Events, one per pod (`SuccessfulUpdatePodInPlace` about the GameDeployment, the pod as
//!   its related object), `--pods` of them;
//! - **repeats**: one Event repeated `--pods` times (a pod held at a gate, noted on every pass).
//!
//! For each it prints the Events API writes (kube-sim's audit log: creates and patches of `events`), the
//! publisher's CPU per Event, and how long the caller waited in total (the `Recorder` writes before `publish`
//! returns; the sink queues and returns). The sink's writes are counted after its flush interval has passed, so
//! the repeats it counted in memory are written too.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::runtime::events::{EventCounters, EventSettings, EventSink, Note};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

struct Flags {
    /// Events per workload (pods in the roll, repeats of the held Event).
    pods: usize,
}

fn parse_args() -> Result<Flags, String> {
    let mut flags = Flags { pods: 2000 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--pods" => {
                let value = it.next().ok_or("--pods needs a value")?;
                flags.pods = value.parse().map_err(|e| format!("--pods: {e}"))?;
            }
            _ => return Err("usage: events-bench [--pods N]".into()),
        }
    }
    Ok(flags)
}

/// Which publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publisher {
    Recorder,
    Sink,
}

/// Which Events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Roll,
    Repeats,
}

/// What one publisher did with one workload.
struct Figures {
    writes: usize,
    cpu: Duration,
    waited: Duration,
}

/// CPU time this thread has used (the scheduler's count, in nanoseconds: `/proc/thread-self/schedstat`).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(stat.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0))
}

fn reference(kind: &str, api_version: &str, namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..ObjectReference::default()
    }
}

/// The `i`th Event of `workload`: (regarding, related, reason, note).
fn event(workload: Workload, namespace: &str, i: usize) -> (ObjectReference, Option<ObjectReference>, String, String) {
    let gd = reference("GameDeployment", "tkex.tencent.com/v1alpha1", namespace, "web");
    match workload {
        Workload::Roll => {
            let pod = format!("web-{i}");
            let note = format!("pod {pod} updated in place to revision web-2");
            (gd, Some(reference("Pod", "v1", namespace, &pod)), "SuccessfulUpdatePodInPlace".into(), note)
        }
        Workload::Repeats => {
            let pod = reference("Pod", "v1", namespace, "web-0");
            (gd, Some(pod), "HookPending".into(), "pod web-0 held in PreparingUpdate until its hook succeeds".into())
        }
    }
}

/// Publishes `pods` Events of `workload` through `publisher` on a runtime of this thread; returns the publisher's
/// CPU and the caller's total wait. The sink is kept until its flush interval has passed (its repeats written).
fn publish(
    kubeconfig: &std::path::Path,
    publisher: Publisher,
    workload: Workload,
    namespace: &str,
    pods: usize,
) -> Result<(Duration, Duration), String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
        let reporter = Reporter { controller: "events-bench".into(), instance: Some("events-bench-0".into()) };
        let cpu = thread_cpu();
        let mut waited = Duration::ZERO;
        match publisher {
            Publisher::Recorder => {
                let recorder = Recorder::new(client, reporter);
                for i in 0..pods {
                    let (regarding, related, reason, note) = event(workload, namespace, i);
                    let event = Event {
                        type_: EventType::Normal,
                        reason,
                        note: Some(note),
                        action: "Update".into(),
                        secondary: related,
                    };
                    let started = Instant::now();
                    recorder.publish(&event, &regarding).await.map_err(|e| format!("Recorder::publish: {e}"))?;
                    waited += started.elapsed();
                }
            }
            Publisher::Sink => {
                let settings = EventSettings::default();
                let flush = settings.flush;
                let sink = EventSink::start_with(client, reporter, settings, EventCounters::default());
                for i in 0..pods {
                    let (regarding, related, reason, message) = event(workload, namespace, i);
                    let note = Note { warning: false, reason, message, action: "Update".into() };
                    let started = Instant::now();
                    sink.publish_related(&regarding, related, note);
                    waited += started.elapsed();
                    // As reconciles publish: a pass at a time, the publisher running between them.
                    if i % 50 == 49 {
                        tokio::task::yield_now().await;
                    }
                }
                // Dropped, the sink's publisher drains the queue, writes every series it counted and ends; a flush
                // interval is more than it needs for that here.
                drop(sink);
                tokio::time::sleep(flush).await;
            }
        }
        Ok((thread_cpu() - cpu, waited))
    })
}

fn main() -> ExitCode {
    let flags = match parse_args() {
        Ok(flags) => flags,
        Err(e) => {
            eprintln!("events-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("events-bench: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("events-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bench(flags: Flags) -> Result<(), String> {
    let config =
        kube_sim::SimConfig { kubelet: None, audit_capacity: flags.pods * 8 + 1000, ..kube_sim::SimConfig::default() };
    let sim = kube_sim::start(config).await.map_err(|e| format!("starting kube-sim: {e}"))?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).map_err(|e| format!("writing the kubeconfig: {e}"))?;
    let client = sim.client().await;
    println!(
        "events-bench: {} Events per workload, kube-sim in this process, each publisher on one thread",
        flags.pods
    );
    println!("| workload | publisher | Events API writes | publisher CPU / Event | caller's wait, total |");
    println!("|---|---|---|---|---|");
    for workload in [Workload::Roll, Workload::Repeats] {
        for publisher in [Publisher::Recorder, Publisher::Sink] {
            let namespace = format!("{workload:?}-{publisher:?}").to_ascii_lowercase();
            let ns = Namespace {
                metadata: ObjectMeta { name: Some(namespace.clone()), ..ObjectMeta::default() },
                ..Namespace::default()
            };
            Api::<Namespace>::all(client.clone())
                .create(&PostParams::default(), &ns)
                .await
                .map_err(|e| format!("creating namespace {namespace}: {e}"))?;
            let before = sim.audit().items.last().map(|e| e.id).unwrap_or(0);
            let (path, pods, ns_name) = (kubeconfig.clone(), flags.pods, namespace.clone());
            // A thread of its own (not the blocking pool, whose threads are inside this runtime).
            let thread = std::thread::spawn(move || publish(&path, publisher, workload, &ns_name, pods));
            let (cpu, waited) = tokio::task::spawn_blocking(move || thread.join())
                .await
                .map_err(|e| e.to_string())?
                .map_err(|_| "the publishing thread panicked".to_string())??;
            let audit = sim.audit_since(before);
            if audit.dropped > 0 {
                return Err(format!("kube-sim's audit log dropped {} entries: raise audit_capacity", audit.dropped));
            }
            let writes = audit
                .items
                .iter()
                .filter(|e| e.succeeded() && e.resource == "events" && e.namespace == namespace)
                .count();
            let figures = Figures { writes, cpu, waited };
            println!(
                "| {} | {} | {} | {:.1} µs | {:.1} ms |",
                match workload {
                    Workload::Roll => format!("roll ({} pods, one Event each)", flags.pods),
                    Workload::Repeats => format!("repeats (one Event, {} times)", flags.pods),
                },
                match publisher {
                    Publisher::Recorder => "kube-runtime `Recorder`",
                    Publisher::Sink => "`EventSink` (ours)",
                },
                figures.writes,
                figures.cpu.as_secs_f64() * 1e6 / flags.pods.max(1) as f64,
                figures.waited.as_secs_f64() * 1e3
            );
        }
    }
    Ok(())
}
