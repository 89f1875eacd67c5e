//! Throughput benchmark: how many objects per second kube-sim sustains for creates, lists,
//! watches and status updates at the scale the operators need (10,000 pods and 10,000 custom
//! objects). Prints figures; it is a command, not a test.
//!
//! `cargo run --release -p kube-sim --bin kube-sim-bench -- [--objects 10000] [--concurrency 32]`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube_sim::SimConfig;
use serde_json::json;

#[derive(Debug, clap::Parser)]
struct Args {
    /// Objects of each kind.
    #[arg(long, default_value_t = 10_000)]
    objects: usize,
    /// Concurrent requests.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
}

fn rate(n: usize, d: Duration) -> String {
    format!("{n} objects in {:.2}s = {:.0} objects/s", d.as_secs_f64(), n as f64 / d.as_secs_f64().max(1e-9))
}

async fn run() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let sim =
        kube_sim::start(SimConfig { kubelet: None, watch_history: args.objects * 3, ..SimConfig::default() }).await?;
    let client = sim.client().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "hookruns.bench.kube-sim.test"},
            "spec": {"group": "bench.kube-sim.test", "scope": "Namespaced", "names": {"kind": "HookRun", "plural": "hookruns"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"metrics": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
                        "status": {"type": "object", "properties": {"phase": {"type": "string", "default": "Pending"}}}}}}}]}
        }))?,
    )
    .await?;
    let hookruns: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("bench.kube-sim.test", "v1alpha1", "HookRun"),
            "hookruns",
        ),
    );

    // Watchers running during the writes, as operators' informers do.
    let seen_pods = Arc::new(AtomicUsize::new(0));
    let seen = seen_pods.clone();
    let pod_watch = tokio::spawn(
        watcher(pods.clone(), watcher::Config::default()).default_backoff().applied_objects().for_each(move |r| {
            if r.is_ok() {
                seen.fetch_add(1, Ordering::Relaxed);
            }
            async {}
        }),
    );

    println!("kube-sim throughput ({} objects per kind, {} concurrent requests)", args.objects, args.concurrency);
    let started = Instant::now();
    futures::stream::iter(0..args.objects)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let p: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("pod-{i:05}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
                    "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "python:3.5", "ports": [{"containerPort": 8000}]}]}
                }))?;
                pods.create(&PostParams::default(), &p).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    println!("create pods:             {}", rate(args.objects, started.elapsed()));

    let started = Instant::now();
    futures::stream::iter(0..args.objects)
        .map(|i| {
            let hookruns = hookruns.clone();
            async move {
                let o: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "bench.kube-sim.test/v1alpha1", "kind": "HookRun",
                    "metadata": {"name": format!("hookrun-{i:05}")},
                    "spec": {"metrics": [{"name": "webtest", "provider": {"web": {"url": "http://127.0.0.1:9091", "jsonPath": "{$.age}"}}}]}
                }))?;
                hookruns.create(&PostParams::default(), &o).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    println!("create custom objects:   {}", rate(args.objects, started.elapsed()));

    let started = Instant::now();
    let all = pods.list(&ListParams::default()).await?;
    println!("list pods (one page):    {}", rate(all.items.len(), started.elapsed()));
    let started = Instant::now();
    let mut n = 0;
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = hookruns.list(&lp).await?;
        n += page.items.len();
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    println!("list custom (500/page):  {}", rate(n, started.elapsed()));
    let started = Instant::now();
    let selected = pods.list(&ListParams::default().labels("shard=3")).await?;
    println!(
        "list pods by label:      {} matched of {} scanned in {:.3}s",
        selected.items.len(),
        args.objects,
        started.elapsed().as_secs_f64()
    );

    // A fresh watcher: initial list + watch of all pods.
    let started = Instant::now();
    let mut initial = 0;
    let mut stream = watcher(pods.clone(), watcher::Config::default()).boxed();
    while let Some(ev) = stream.next().await {
        match ev? {
            watcher::Event::InitApply(_) => initial += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    println!("watcher initial sync:    {}", rate(initial, started.elapsed()));

    // Status updates (what the kubelet and operators write most) with the watchers running.
    let before = seen_pods.load(Ordering::Relaxed);
    let started = Instant::now();
    futures::stream::iter(0..args.objects)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let patch = json!({"status": {"phase": "Running", "podIP": format!("127.1.{}.{}", i / 250, i % 250 + 1),
                    "conditions": [{"type": "Ready", "status": "True"}]}});
                pods.patch_status(&format!("pod-{i:05}"), &PatchParams::default(), &Patch::Strategic(patch)).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let write_time = started.elapsed();
    println!("patch pod status:        {}", rate(args.objects, write_time));
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen_pods.load(Ordering::Relaxed) < before + args.objects && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let delivered = seen_pods.load(Ordering::Relaxed) - before;
    println!("watch events delivered:  {}", rate(delivered, started.elapsed()));
    pod_watch.abort();
    sim.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kube-sim-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
