//! `kubectl gd plan` against kube-sim: the GameDeployment operator (in this process) settles a walkthrough-like
//! GameDeployment (5 pods, InplaceUpdate, partition 2, maxUnavailable 2, a 30s grace period, the walkthrough's
//! pre-delete hook `test`: 3 measurements 60s apart) and stops; then the plugin, as a user of its own, forecasts an
//! image change — as text and as JSON — and the API server's audit log shows it wrote nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use common::api::{GameDeployment, HookTemplate};
use kube::Api;
use kube::api::PostParams;

const NAME: &str = "planned";
const DEADLINE: Duration = Duration::from_secs(120);
const USER: &str = "planner";

const TEMPLATE: &str = include_str!("manifests/plan-hooktemplate.yaml");

const GD: &str = include_str!("manifests/plan-gamedeployment.yaml");

/// kube-sim with the GameDeployment settled by the operator, which is stopped again; a kubeconfig for [`USER`].
async fn settled() -> (kube_sim::SimHandle, tempfile::TempDir, std::path::PathBuf) {
    let sim = kube_sim::start(kube_sim::SimConfig::default()).await.expect("kube-sim");
    let client = sim.client().await;
    crate::crds::install(&client, DEADLINE).await;
    let templates: Api<HookTemplate> = Api::namespaced(client.clone(), "default");
    templates.create(&PostParams::default(), &serde_yaml::from_str(TEMPLATE).unwrap()).await.unwrap();
    let gds: Api<GameDeployment> = Api::namespaced(client.clone(), "default");
    gds.create(&PostParams::default(), &serde_yaml::from_str(GD).unwrap()).await.unwrap();
    let metrics =
        gamedeployment_operator::metrics::Metrics::register(&mut prometheus_client::registry::Registry::default());
    let reporter = kube::runtime::events::Reporter { controller: "gamedeployment-operator".into(), instance: None };
    let operator = tokio::spawn(gamedeployment_operator::controller::run(
        client.clone(),
        gamedeployment_operator::controller::Config::default(),
        metrics,
        reporter,
        std::future::pending::<()>(),
        || {},
    ));
    let start = Instant::now();
    loop {
        let status = gds.get(NAME).await.unwrap().status.unwrap_or_default();
        if status.updated_available_replicas == 5 && status.replicas == 5 {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the GameDeployment did not settle: {status:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    operator.abort();
    let _ = operator.await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig_for_user(&kubeconfig, USER, &["system:masters"]).expect("kubeconfig");
    (sim, dir, kubeconfig)
}

fn plan(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-gd"))
        .arg("plan")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("kubectl-gd runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_forecasts_the_image_change_in_two_batches_through_the_hook_and_writes_nothing() {
    let (sim, _dir, kubeconfig) = settled().await;
    let pods: Vec<String> = {
        let client = sim.client().await;
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, "default");
        api.list(&Default::default()).await.unwrap().items.into_iter().filter_map(|p| p.metadata.name).collect()
    };
    let before = sim.audit().items.iter().map(|e| e.id).max().unwrap_or(0);

    let out = plan(&kubeconfig, &[NAME, "--image", "python=python:3.5"]);
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    assert!(text.starts_with("Plan for gamedeployment default/planned: image python=python:3.5"), "{text}");
    assert!(text.contains("Batch 1 (starts at ") && text.contains("Batch 2 (starts at "), "{text}");
    assert!(!text.contains("Batch 3"), "{text}");
    assert_eq!(
        text.matches("in-place update  waits on preDelete hook test (3 measurements 60s apart; succeeds after 2m0s)")
            .count(),
        3,
        "{text}"
    );
    assert!(text.contains("the rollout stops at the partition: 3 of 5 pods run revision"), "{text}");
    assert!(text.contains("Estimated duration: 5m"), "two batches of 2m hook + 30s grace: {text}");

    let out = plan(&kubeconfig, &[NAME, "--image", "python=python:3.5", "-o", "json"]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let batches = json["batches"].as_array().unwrap();
    assert_eq!(batches.iter().map(|b| b["pods"].as_array().unwrap().len()).collect::<Vec<_>>(), [2, 1]);
    for pod in batches.iter().flat_map(|b| b["pods"].as_array().unwrap()) {
        assert!(pods.contains(&pod["pod"].as_str().unwrap().to_string()), "existing pods by name: {pod}");
        assert_eq!(pod["action"], "in-place-update");
        assert_eq!(pod["hooks"][0]["kind"], "preDelete");
        assert_eq!(pod["hooks"][0]["template"], "test");
        assert_eq!(pod["hooks"][0]["schedule"], "3 measurements 60s apart");
    }
    assert_eq!(json["stop"]["reason"], "partition");
    let total = json["totalSeconds"].as_i64().unwrap();
    assert!((300..=320).contains(&total), "{total}");

    // Under `fail` the rollout stops at the first batch, its hooks failing at their third measurement.
    let out = plan(&kubeconfig, &[NAME, "--image", "python=python:3.5", "--assume-hooks", "fail", "-o", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["batches"].as_array().unwrap().len(), 1, "{json}");
    assert_eq!(json["stop"]["reason"], "hook-failed");
    assert_eq!(json["batches"][0]["pods"][0]["hooks"][0]["outcome"], "Failed");

    // A scale-in: one pod deleted through its hook.
    let out = plan(&kubeconfig, &[NAME, "--replicas", "4"]);
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    let deletes = text.lines().filter(|l| l.contains(" delete ") && l.contains("waits on preDelete hook test"));
    assert_eq!(deletes.count(), 1, "{text}");
    assert!(text.contains("the rollout is complete: all 4 pods run revision"), "{text}");

    // Bad input is refused before anything is forecast.
    let out = plan(&kubeconfig, &[NAME, "--image", "web=nginx"]);
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no container \"web\" (containers: python)"));

    assert!(sim.audit().items.iter().any(|e| e.user == "admin" || !e.user.is_empty()), "the log names users");
    let writes: Vec<_> = sim.audit_since(before).items.into_iter().filter(|e| e.user == USER).collect();
    assert!(writes.is_empty(), "kubectl gd plan wrote: {writes:?}");
    sim.shutdown().await;
}

/// When the hook-operator's own engine (`hook_operator::engine::plan`, rounds driven by simulated measurements
/// that all read `success`) completes a run of `spec`: (seconds after its start, phase).
fn engine_completion(spec: &common::api::HookRunSpec, success: bool, scale: f64) -> (f64, common::api::HookPhase) {
    use common::api::{HookPhase, HookRunStatus, Measurement};
    use hook_operator::engine::{self, Finished, Inputs, Precise, Start};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    let settings = hook_operator::settings::EngineSettings { interval_scale: scale, ..Default::default() };
    let t0 = Timestamp::from_second(1_000_000).unwrap();
    let (mut now, mut status, mut precise) = (t0, None::<HookRunStatus>, Precise::default());
    let (mut pending, mut finished, mut id): (Vec<Start>, Vec<Finished>, u64) = (Vec::new(), Vec::new(), 0);
    for _ in 0..10_000 {
        let in_flight = pending.iter().map(|s| s.metric.clone()).collect();
        let plan = engine::plan(&Inputs {
            spec,
            status: status.as_ref(),
            invalid: None,
            finished: &finished,
            in_flight: &in_flight,
            precise: &precise,
            now,
            settings: &settings,
        });
        finished.clear();
        precise = plan.precise.clone();
        status = Some(plan.status.clone());
        if plan.completed {
            let elapsed = now.duration_since(t0).as_secs_f64();
            return (elapsed, plan.status.phase.unwrap());
        }
        pending.extend(plan.start);
        pending.extend(plan.arm);
        let next = pending.iter().map(|s| s.due).chain(plan.wake_at).min().expect("something is due");
        now = now.max(next);
        let (due, rest): (Vec<Start>, Vec<Start>) = pending.into_iter().partition(|s| s.due <= now);
        pending = rest;
        for start in due {
            id += 1;
            let phase = if success { HookPhase::Successful } else { HookPhase::Failed };
            finished.push(Finished {
                id,
                metric: start.metric,
                measurement: Measurement {
                    phase: Some(phase),
                    started_at: Some(Time(now)),
                    finished_at: Some(Time(now)),
                    ..Measurement::default()
                },
                finished_at: now,
                taken_before: start.taken_before,
                lost: false,
            });
        }
    }
    panic!("the engine did not complete the run")
}

/// The forecast's simulated hook-operator agrees with the hook-operator's engine on when and how runs complete.
#[test]
fn the_forecast_times_hooks_as_the_hook_operator_runs_them() {
    use common::api::{HookPolicy, HookRun, HookRunSpec, Metric};
    use gamedeployment_operator::forecast::{Assume, Timing, hook_operator};
    let metric = |name: &str, fields: serde_json::Value| -> Metric {
        let mut value = serde_json::json!({"name": name, "provider": {"web": {"url": "http://x"}}});
        value.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    };
    use serde_json::json;
    let specs = [
        (vec![metric("webtest", json!({"count": 3, "interval": "60s", "failureLimit": 2}))], None),
        (vec![metric("m", json!({"count": 2, "interval": "5s", "initialDelay": "10s"}))], None),
        (vec![metric("m", json!({"count": 2, "interval": "5s", "failureLimit": -1}))], None),
        (vec![metric("m", json!({"interval": "5s", "consecutiveSuccessfulLimit": 4, "failureLimit": 1}))], None),
        (vec![metric("m", json!({"successfulLimit": 2, "interval": "3s", "count": 5}))], None),
        (
            vec![
                metric("a", json!({"count": 2, "interval": "10s"})),
                metric("b", json!({"count": 4, "interval": "10s", "initialDelay": "5s", "failureLimit": 1})),
            ],
            None,
        ),
        (
            vec![
                metric("a", json!({"count": 2, "interval": "10s"})),
                metric("b", json!({"count": 4, "interval": "10s", "initialDelay": "5s"})),
            ],
            Some(HookPolicy::Ordered),
        ),
    ];
    for (metrics, policy) in specs {
        for scale in [1.0, 0.05] {
            for (assume, success) in [(Assume::Succeed, true), (Assume::Fail, false)] {
                let spec = HookRunSpec { metrics: metrics.clone(), policy, ..HookRunSpec::default() };
                let (seconds, phase) = engine_completion(&spec, success, scale);
                let run = HookRun::new("r", spec);
                let forecast = hook_operator::outcome(&run, 1_000_000_000, assume, Timing { interval_scale: scale });
                let forecast_seconds = forecast.at.map(|ms| (ms - 1_000_000_000) as f64 / 1000.0);
                assert_eq!(
                    (forecast_seconds, forecast.phase),
                    (Some(seconds), phase),
                    "{metrics:?} {policy:?} scale {scale} {assume:?}"
                );
            }
        }
    }
}
