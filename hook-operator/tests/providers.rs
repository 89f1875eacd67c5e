//! Providers and the dispatcher against real local HTTP servers that are slow, hang, fail, answer non-JSON,
//! huge bodies or documents without the requested key.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, Request};
use axum::http::StatusCode;
use axum::routing::{any, get};
use common::api::{
    Argument, HookPhase, HookRun, HookRunSpec, Metric, MetricProvider, PrometheusMetric, WebMetric, WebMetricHeader,
};
use hook_operator::dispatch::Dispatcher;
use hook_operator::local::{self, Wakers};
use hook_operator::measure;
use hook_operator::metrics::Metrics;
use hook_operator::providers::{ProviderSettings, Providers};
use hook_operator::settings::EngineSettings;
use kube::api::ObjectMeta;

const BRYAN: &str = r#"{"name":"bryan","male":"yes","age":45}"#;

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

async fn endpoint() -> SocketAddr {
    let router = Router::new()
        .route("/", get(|| async { ([("content-type", "application/json")], BRYAN) }))
        .route("/string-age", get(|| async { r#"{"age":"45"}"# }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                BRYAN
            }),
        )
        .route(
            "/hang",
            get(|| async {
                std::future::pending::<()>().await;
                ""
            }),
        )
        .route("/500", get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "database is down") }))
        .route("/text", get(|| async { "<html>maintenance</html>" }))
        .route("/huge", get(|| async { format!("{{\"pad\":\"{}\"}}", "x".repeat(2 * 1024 * 1024)) }))
        .route(
            "/echo",
            any(|request: Request| async move {
                let method = request.method().to_string();
                let headers: HashMap<String, String> = request
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
                    .collect();
                let body = axum::body::to_bytes(request.into_body(), 1 << 20).await.unwrap();
                serde_json::json!({"method": method, "headers": headers, "body": String::from_utf8_lossy(&body)}).to_string()
            }),
        )
        .route(
            "/api/v1/query",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                let query = q.get("query").cloned().unwrap_or_default();
                match query.as_str() {
                    "up" => (StatusCode::OK, r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]},{"metric":{},"value":[1,"0.5"]}]}}"#.to_string()),
                    "scalar(0.97)" => (StatusCode::OK, r#"{"status":"success","data":{"resultType":"scalar","result":[1,"0.97"]}}"#.to_string()),
                    "nan" => (StatusCode::OK, r#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#.to_string()),
                    _ => (StatusCode::BAD_REQUEST, format!(r#"{{"status":"error","errorType":"bad_data","error":"unknown query {query}"}}"#)),
                }
            }),
        );
    serve(router).await
}

fn web(url: String, json_path: Option<&str>, success: Option<&str>) -> Metric {
    Metric {
        name: "webtest".into(),
        success_condition: success.map(Into::into),
        provider: MetricProvider {
            web: Some(WebMetric { url, json_path: json_path.map(Into::into), ..WebMetric::default() }),
            ..MetricProvider::default()
        },
        ..Metric::default()
    }
}

fn providers() -> Arc<Providers> {
    Providers::new(&ProviderSettings::default(), None).unwrap()
}

async fn take(metric: &Metric, args: &[Argument]) -> (HookPhase, String, Option<String>) {
    let taken = measure::take(&providers(), metric, args).await;
    (taken.measurement.phase.unwrap(), taken.measurement.message.unwrap_or_default(), taken.measurement.value)
}

#[tokio::test]
async fn web_measurements_and_their_messages() {
    let addr = endpoint().await;
    let url = |path: &str| format!("http://{addr}{path}");
    let ok = take(&web(url("/"), Some("{$.age}"), Some("asInt(result) > 30")), &[]).await;
    assert_eq!((ok.0, ok.2.as_deref()), (HookPhase::Successful, Some("45")));
    let typed = take(&web(url("/string-age"), Some("$.age"), Some("asInt(result) > 30")), &[]).await;
    assert_eq!((typed.0, typed.2.as_deref()), (HookPhase::Successful, Some("45")));
    let failed = take(&web(url("/"), Some("{$.age}"), Some("asInt(result) < 30")), &[]).await;
    assert_eq!(failed.0, HookPhase::Failed);
    assert_eq!(failed.1, "successCondition `asInt(result) < 30` is false");

    // Slow but within timeoutSeconds: a normal measurement.
    let slow = measure::take(&providers(), &web(url("/slow"), Some("{$.age}"), Some("result == 45")), &[]).await;
    assert_eq!(slow.measurement.phase, Some(HookPhase::Successful), "{:?}", slow.measurement.message);
    assert!(slow.latency >= Duration::from_millis(300));

    let server_error = take(&web(url("/500"), Some("{$.age}"), None), &[]).await;
    assert_eq!(server_error.0, HookPhase::Error);
    assert!(server_error.1.contains("returned HTTP 500 Internal Server Error: database is down"), "{}", server_error.1);

    let not_json = take(&web(url("/text"), Some("{$.age}"), None), &[]).await;
    assert_eq!(not_json.0, HookPhase::Error);
    assert!(
        not_json.1.contains("did not return JSON") && not_json.1.contains("<html>maintenance</html>"),
        "{}",
        not_json.1
    );
    // Without a jsonPath the text itself is the result.
    let text = take(&web(url("/text"), None, Some("result contains 'maintenance'")), &[]).await;
    assert_eq!(text.0, HookPhase::Successful);

    let missing = take(&web(url("/"), Some("{$.agee}"), None), &[]).await;
    assert_eq!(missing.0, HookPhase::Error);
    assert!(
        missing.1.contains("jsonPath `{$.agee}` matched nothing") && missing.1.contains("keys name, male, age"),
        "{}",
        missing.1
    );

    let huge = take(&web(url("/huge"), Some("{$.pad}"), None), &[]).await;
    assert_eq!(huge.0, HookPhase::Error);
    assert!(huge.1.contains("exceeds the 1048576 byte limit"), "{}", huge.1);

    let bad_expression = take(&web(url("/"), Some("{$.name}"), Some("asInt(result) > 30")), &[]).await;
    assert_eq!(bad_expression.0, HookPhase::Error);
    assert!(
        bad_expression.1.contains("asInt(result) > 30") && bad_expression.1.contains("\"bryan\""),
        "{}",
        bad_expression.1
    );

    let refused = {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        take(&web(format!("http://127.0.0.1:{port}/"), None, None), &[]).await
    };
    assert_eq!(refused.0, HookPhase::Error);
    assert!(refused.1.contains("cannot connect"), "{}", refused.1);
}

#[tokio::test]
async fn web_timeouts_end_as_errors_that_say_so() {
    let addr = endpoint().await;
    let mut metric = web(format!("http://{addr}/hang"), None, None);
    metric.provider.web.as_mut().unwrap().timeout_seconds = Some(1);
    let (phase, message, _) = take(&metric, &[]).await;
    assert_eq!(phase, HookPhase::Error);
    assert_eq!(message, format!("GET http://{addr}/hang: no response within 1s"));
}

#[tokio::test]
async fn templates_headers_methods_and_bodies() {
    let addr = endpoint().await;
    let metric = Metric {
        name: "echo".into(),
        success_condition: Some(
            "result.method == 'POST' && result.headers['x-pod'] == 'p-1' && result.body == '{\"ip\":\"127.0.0.1\"}'"
                .into(),
        ),
        provider: MetricProvider {
            web: Some(WebMetric {
                url: "http://{{ args.addr }}/echo".into(),
                headers: vec![WebMetricHeader { key: "X-Pod".into(), value: "{{args.service-name}}".into() }],
                method: Some("POST".into()),
                body: Some("{\"ip\":\"{{ args.PodIP }}\"}".into()),
                json_path: Some("{$}".into()),
                ..WebMetric::default()
            }),
            ..MetricProvider::default()
        },
        ..Metric::default()
    };
    let args = vec![
        Argument::new("addr", addr.to_string()),
        Argument::new("service-name", "p-1"),
        Argument::new("PodIP", "127.0.0.1"),
    ];
    let (phase, message, value) = take(&metric, &args).await;
    assert_eq!(phase, HookPhase::Successful, "{message} {value:?}");
    assert!(value.unwrap().contains("application/json"), "JSON bodies get a content type");
}

#[tokio::test]
async fn web_resolve_points_an_unchanged_url_at_a_local_server() {
    let addr = endpoint().await;
    let settings = ProviderSettings {
        resolve: vec![format!("1.1.1.1:9091={addr}").parse().unwrap()],
        ..ProviderSettings::default()
    };
    let providers = Providers::new(&settings, None).unwrap();
    let metric = web("http://1.1.1.1:9091".into(), Some("{$.age}"), Some("asInt(result) > 30"));
    let taken = measure::take(&providers, &metric, &[]).await;
    assert_eq!(taken.measurement.phase, Some(HookPhase::Successful), "{:?}", taken.measurement.message);
}

#[tokio::test]
async fn prometheus_queries() {
    let addr = endpoint().await;
    let metric = |query: &str, success: &str| Metric {
        name: "prom".into(),
        success_condition: Some(success.into()),
        provider: MetricProvider {
            prometheus: Some(PrometheusMetric { address: format!("http://{addr}"), query: query.into() }),
            ..MetricProvider::default()
        },
        ..Metric::default()
    };
    let vector = take(&metric("up", "result[0] >= 0.95 && len(result) == 2"), &[]).await;
    assert_eq!((vector.0, vector.2.as_deref()), (HookPhase::Successful, Some("[1,0.5]")));
    let scalar = take(&metric("scalar(0.97)", "result > 0.9"), &[]).await;
    assert_eq!(scalar.0, HookPhase::Successful);
    let templated = take(&metric("scalar({{ args.v }})", "asFloat(result) > 0.9"), &[Argument::new("v", "0.97")]).await;
    assert_eq!(templated.0, HookPhase::Successful);
    let nan = take(&metric("nan", "result > 0"), &[]).await;
    assert_eq!((nan.0, nan.1.as_str()), (HookPhase::Inconclusive, "query `nan` returned NaN"));
    let bad = take(&metric("rate(", "true"), &[]).await;
    assert_eq!(bad.0, HookPhase::Error);
    assert!(bad.1.contains("unknown query rate( (bad_data)"), "{}", bad.1);
}

fn run(name: &str, metric: Metric) -> HookRun {
    HookRun {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        spec: HookRunSpec { metrics: vec![metric], ..HookRunSpec::default() },
        status: None,
    }
}

/// One HookRun whose webhook hangs must not delay the others: measurements are independent tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_webhook_never_delays_another_run() {
    let addr = endpoint().await;
    let wakers = Wakers::default();
    let dispatcher =
        Dispatcher::new(providers(), Arc::new(Metrics::default()), EngineSettings::default(), 100, wakers.wake());
    let mut hanging = web(format!("http://{addr}/hang"), None, None);
    hanging.provider.web.as_mut().unwrap().timeout_seconds = Some(300);
    let stuck = tokio::spawn({
        let (dispatcher, wakers) = (dispatcher.clone(), wakers.clone());
        async move { local::drive(&dispatcher, &wakers, run("stuck", hanging), |_| {}).await }
    });
    let quick = Metric {
        count: 3,
        interval: Some("10ms".into()),
        ..web(format!("http://{addr}/"), Some("{$.age}"), Some("result == 45"))
    };
    let done =
        tokio::time::timeout(Duration::from_secs(60), local::drive(&dispatcher, &wakers, run("quick", quick), |_| {}))
            .await
            .expect("the other run completes while the webhook hangs");
    let status = done.status.unwrap();
    assert_eq!(status.phase, Some(HookPhase::Successful));
    assert_eq!(status.metric_results[0].count, 3);
    assert!(!stuck.is_finished());
    stuck.abort();
}

/// One namespace may hold only its share of the in-flight slots: ten runs hanging in one namespace leave room
/// for another namespace's run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_cannot_take_every_slot() {
    let addr = endpoint().await;
    let wakers = Wakers::default();
    let dispatcher =
        Dispatcher::new(providers(), Arc::new(Metrics::default()), EngineSettings::default(), 4, wakers.wake())
            .with_namespace_share(50);
    let mut stuck = Vec::new();
    for i in 0..10 {
        let mut hanging = web(format!("http://{addr}/hang"), None, None);
        hanging.provider.web.as_mut().unwrap().timeout_seconds = Some(300);
        let mut greedy = run(&format!("greedy-{i}"), hanging);
        greedy.metadata.namespace = Some("greedy".into());
        let (dispatcher, wakers) = (dispatcher.clone(), wakers.clone());
        stuck.push(tokio::spawn(async move { local::drive(&dispatcher, &wakers, greedy, |_| {}).await }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let polite = run("polite", web(format!("http://{addr}/"), Some("{$.age}"), Some("result == 45")));
    let done = tokio::time::timeout(Duration::from_secs(60), local::drive(&dispatcher, &wakers, polite, |_| {}))
        .await
        .expect("the other namespace's run completes while one namespace hangs");
    assert_eq!(done.status.unwrap().phase, Some(HookPhase::Successful));
    for task in stuck {
        assert!(!task.is_finished());
        task.abort();
    }
}

/// `--max-in-flight` bounds concurrent measurements; the others wait for a slot and still all complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_measurements_are_bounded() {
    let current = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let router = Router::new().route(
        "/",
        get({
            let (current, peak) = (current.clone(), peak.clone());
            move || {
                let (current, peak) = (current.clone(), peak.clone());
                async move {
                    let now = current.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    current.fetch_sub(1, Ordering::SeqCst);
                    BRYAN
                }
            }
        }),
    );
    let addr = serve(router).await;
    let wakers = Wakers::default();
    let dispatcher =
        Dispatcher::new(providers(), Arc::new(Metrics::default()), EngineSettings::default(), 4, wakers.wake());
    let runs: Vec<_> = (0..20)
        .map(|i| {
            let (dispatcher, wakers) = (dispatcher.clone(), wakers.clone());
            let metric = web(format!("http://{addr}/"), Some("{$.age}"), Some("result == 45"));
            tokio::spawn(async move { local::drive(&dispatcher, &wakers, run(&format!("r{i}"), metric), |_| {}).await })
        })
        .collect();
    for r in runs {
        let done = tokio::time::timeout(Duration::from_secs(60), r).await.unwrap().unwrap();
        assert_eq!(done.status.unwrap().phase, Some(HookPhase::Successful));
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!((1..=4).contains(&peak), "peak concurrency {peak}");
}
