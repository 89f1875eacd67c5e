//! Finished HookRuns nobody owns are deleted `--finished-run-ttl` after they finished, at a bounded rate; owned
//! and running runs stay. The controller runs in-process against kube-sim (an API server in this process).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use common::api::{HookPhase, HookRun, HookRunSpec, Metric, MetricProvider, WebMetric};
use common::runtime::{Health, Shutdown};
use hook_operator::readiness::Readiness;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, CustomResourceExt};
use kube_sim::SimConfig;
use kube_sim::testing::wait_for;

use hook_operator::controller::{self, Options};
use hook_operator::metrics::Metrics;
use hook_operator::providers::{ProviderSettings, Providers};

const DEADLINE: Duration = Duration::from_secs(60);

pub async fn endpoint() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route("/", get(|| async { r#"{"age":45}"# }));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

pub fn hookrun(name: &str, url: &str, condition: &str, count: Option<i32>, owner: Option<&ConfigMap>) -> HookRun {
    let mut run = HookRun::new(
        name,
        HookRunSpec {
            metrics: vec![Metric {
                name: "m".into(),
                count: count.unwrap_or(0),
                interval: Some("1s".into()),
                success_condition: Some(condition.into()),
                provider: MetricProvider {
                    web: Some(WebMetric { url: url.into(), json_path: Some("{$.age}".into()), ..WebMetric::default() }),
                    ..MetricProvider::default()
                },
                ..Metric::default()
            }],
            ..HookRunSpec::default()
        },
    );
    run.metadata.namespace = Some("default".into());
    if let Some(owner) = owner {
        run.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: owner.metadata.name.clone().unwrap(),
            uid: owner.metadata.uid.clone().unwrap(),
            ..OwnerReference::default()
        }]);
    }
    run
}

pub async fn cluster() -> (kube_sim::SimHandle, kube::Client) {
    let sim = kube_sim::start(SimConfig { kubelet: None, ..SimConfig::default() }).await.unwrap();
    let client = sim.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &HookRun::crd()).await.unwrap();
    let runs: Api<HookRun> = Api::namespaced(client.clone(), "default");
    wait_for("HookRuns to be served", DEADLINE, || async { runs.list(&Default::default()).await.ok() }).await;
    (sim, client)
}

pub fn options(ttl: Duration, rate: u32) -> Options {
    Options {
        namespace: None,
        label_selector: None,
        concurrency: 16,
        max_in_flight: 100,
        engine: hook_operator::settings::EngineSettings { interval_scale: 0.1, ..Default::default() },
        identity: "test".into(),
        namespace_share_percent: 100,
        status_write_interval: Duration::ZERO,
        max_status_writes_per_second: 0,
        finished_run_ttl: ttl,
        gc_deletes_per_second: rate,
        shards: None,
    }
}

pub fn start(client: kube::Client, options: Options) -> Shutdown {
    let shutdown = Shutdown::default();
    let providers = Providers::new(&ProviderSettings::default(), Some(client.clone())).unwrap();
    tokio::spawn(controller::run(
        client,
        options,
        providers,
        Arc::new(Metrics::default()),
        Readiness::acting(Health::default()),
        shutdown.clone(),
    ));
    shutdown
}

async fn phase_of(runs: &Api<HookRun>, name: &str) -> Option<Option<HookPhase>> {
    runs.get_opt(name).await.unwrap().map(|r| r.status.and_then(|s| s.phase))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_ownerless_runs_are_deleted_after_the_ttl_owned_and_running_runs_stay() {
    let (sim, client) = cluster().await;
    let url = format!("http://{}/", endpoint().await);
    let shutdown = start(client.clone(), options(Duration::from_secs(3), 50));
    let runs: Api<HookRun> = Api::namespaced(client.clone(), "default");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = configmaps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta { name: Some("owner".into()), ..ObjectMeta::default() },
                ..Default::default()
            },
        )
        .await
        .unwrap();

    // The owned run finishes first, so it is past the TTL before the ownerless ones are collected.
    let create = |run: HookRun| {
        let runs = runs.clone();
        async move { runs.create(&PostParams::default(), &run).await.unwrap() }
    };
    create(hookrun("owned", &url, "asInt(result) > 30", Some(1), Some(&owner))).await;
    wait_for("the owned run to finish", DEADLINE, || async {
        (phase_of(&runs, "owned").await == Some(Some(HookPhase::Successful))).then_some(())
    })
    .await;
    create(hookrun("loose-successful", &url, "asInt(result) > 30", Some(1), None)).await;
    create(hookrun("loose-failed", &url, "asInt(result) < 30", Some(1), None)).await;
    create(hookrun("running", &url, "asInt(result) > 30", None, None)).await;
    wait_for("the ownerless runs to finish", DEADLINE, || async {
        let a = phase_of(&runs, "loose-successful").await;
        let b = phase_of(&runs, "loose-failed").await;
        // Either finished, or already gone (collected).
        (a.is_none_or(|p| p == Some(HookPhase::Successful)) && b.is_none_or(|p| p == Some(HookPhase::Failed)))
            .then_some(())
    })
    .await;
    wait_for("the finished ownerless runs to be deleted", DEADLINE, || async {
        (phase_of(&runs, "loose-successful").await.is_none() && phase_of(&runs, "loose-failed").await.is_none())
            .then_some(())
    })
    .await;
    assert_eq!(phase_of(&runs, "owned").await, Some(Some(HookPhase::Successful)), "an owned run goes with its owner");
    assert_eq!(phase_of(&runs, "running").await, Some(Some(HookPhase::Running)), "a running run is never collected");

    let deletes: Vec<String> = sim
        .audit()
        .items
        .into_iter()
        .filter(|e| e.resource == "hookruns" && e.verb == "delete")
        .map(|e| format!("{} {}", e.name, e.code))
        .collect();
    assert_eq!(deletes.len(), 2, "one delete per expired run: {deletes:?}");
    assert!(deletes.iter().all(|d| d.ends_with(" 200")), "{deletes:?}");
    shutdown.trigger();
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_are_rate_limited_and_a_zero_ttl_collects_nothing() {
    let (sim, client) = cluster().await;
    let url = format!("http://{}/", endpoint().await);
    let runs: Api<HookRun> = Api::namespaced(client.clone(), "default");
    // With a zero TTL nothing is collected: the runs finish and stay.
    let shutdown = start(client.clone(), options(Duration::ZERO, 50));
    for i in 0..12 {
        runs.create(&PostParams::default(), &hookrun(&format!("r{i}"), &url, "true", Some(1), None)).await.unwrap();
    }
    wait_for("every run to finish", DEADLINE, || async {
        let list = runs.list(&Default::default()).await.ok()?;
        list.items.iter().all(|r| r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Successful)).then_some(())
    })
    .await;
    // Long enough for several scans of a 1 s TTL collector: a ttl-0 collector never deletes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(runs.list(&Default::default()).await.unwrap().items.len(), 12);
    shutdown.trigger();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // 4 deletes per second: 12 deletes take at least 11 gaps of 250 ms.
    let shutdown = start(client.clone(), options(Duration::from_secs(1), 4));
    wait_for("every run to be deleted", DEADLINE, || async {
        runs.list(&Default::default()).await.ok()?.items.is_empty().then_some(())
    })
    .await;
    let times: Vec<_> = sim
        .audit()
        .items
        .into_iter()
        .filter(|e| e.resource == "hookruns" && e.verb == "delete")
        .map(|e| e.request_received_timestamp)
        .collect();
    assert_eq!(times.len(), 12);
    let spread = times[11].duration_since(times[0]);
    assert!(spread.as_secs_f64() >= 11.0 * 0.25 * 0.99, "12 deletes at 4/s took only {spread:?}");
    shutdown.trigger();
    sim.shutdown().await;
}
