//! The web provider's egress policy, redirects and credential redaction, against local servers only (loopback
//! addresses; other addresses are never used as "unreachable").
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use common::api::{Argument, HookPhase, Metric, MetricProvider, WebMetric, WebMetricHeader};
use futures::StreamExt;
use hook_operator::measure;
use hook_operator::providers::http::egress::Policy;
use hook_operator::providers::{ProviderSettings, Providers};

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// A server counting every request it gets.
async fn counting() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let router = Router::new().fallback(any({
        let hits = hits.clone();
        move |request: Request| {
            let hits = hits.clone();
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                let auth = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("");
                serde_json::json!({"age": 45, "auth": auth}).to_string()
            }
        }
    }));
    (serve(router).await, hits)
}

/// The message of a measurement that must have ended as an Error (a refused or failed request).
fn error_message(taken: measure::Taken) -> String {
    assert_eq!(taken.measurement.phase, Some(HookPhase::Error), "{:?}", taken.measurement.message);
    taken.measurement.message.unwrap_or_default()
}

fn web(url: &str) -> Metric {
    Metric {
        name: "probe".into(),
        success_condition: Some("result.age == 45".into()),
        provider: MetricProvider {
            web: Some(WebMetric { url: url.into(), ..WebMetric::default() }),
            ..MetricProvider::default()
        },
        ..Metric::default()
    }
}

fn providers(settings: ProviderSettings) -> Arc<Providers> {
    Providers::new(&settings, None).unwrap()
}

#[tokio::test]
async fn cloud_metadata_is_refused_before_any_connection() {
    // 169.254.169.254:80 is pointed at a local server with --web-resolve: if the policy let the request
    // through, that server would see it.
    let (addr, hits) = counting().await;
    let settings = ProviderSettings {
        resolve: vec![format!("169.254.169.254:80={addr}").parse().unwrap()],
        ..ProviderSettings::default()
    };
    let taken = measure::take(&providers(settings), &web("http://169.254.169.254/latest/meta-data/"), &[]).await;
    let message = error_message(taken);
    assert!(message.contains("refused by the egress policy: 169.254.169.254 is in 169.254.0.0/16"), "{message}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "no request reached the server");
}

#[tokio::test]
async fn deny_and_allow_flags_apply_to_resolved_addresses() {
    let (addr, hits) = counting().await;
    let url = format!("http://{addr}/");
    let deny_loopback = ProviderSettings {
        egress: Policy::new(vec!["127.0.0.0/8".parse().unwrap()], vec![]),
        ..ProviderSettings::default()
    };
    let taken = measure::take(&providers(deny_loopback.clone()), &web(&url), &[]).await;
    assert!(taken.measurement.message.unwrap_or_default().contains("--web-deny-cidr"));
    // A host name is resolved first, then judged: localhost resolves to loopback only.
    let by_name = format!("http://localhost:{}/", addr.port());
    let taken = measure::take(&providers(deny_loopback), &web(&by_name), &[]).await;
    let message = error_message(taken);
    assert!(message.contains("resolves to refused addresses"), "{message}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    // An exception lets one address through.
    let exception = ProviderSettings {
        egress: Policy::new(vec!["127.0.0.0/8".parse().unwrap()], vec![format!("{}/32", addr.ip()).parse().unwrap()]),
        ..ProviderSettings::default()
    };
    let taken = measure::take(&providers(exception), &web(&url), &[]).await;
    assert_eq!(taken.measurement.phase, Some(HookPhase::Successful), "{:?}", taken.measurement.message);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn redirects_stay_on_the_same_origin() {
    let (other, hits) = counting().await;
    let router = Router::new()
        .route("/same", get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/target")]).into_response() }))
        .route("/target", get(|| async { r#"{"age":45}"# }))
        .route(
            "/away",
            get(move || async move {
                (StatusCode::FOUND, [(header::LOCATION, format!("http://{other}/stolen"))]).into_response()
            }),
        );
    let addr = serve(router).await;
    let p = providers(ProviderSettings::default());
    let same = measure::take(&p, &web(&format!("http://{addr}/same")), &[]).await;
    assert_eq!(same.measurement.phase, Some(HookPhase::Successful), "{:?}", same.measurement.message);
    let away = measure::take(&p, &web(&format!("http://{addr}/away")), &[]).await;
    let message = error_message(away);
    assert!(message.contains("to another origin"), "{message}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the other origin was never asked");
}

#[tokio::test]
async fn credentials_never_appear_in_measurements() {
    let (addr, _) = counting().await;
    let p = providers(ProviderSettings::default());
    // Userinfo and a token parameter in a URL that fails.
    let failing = web(&format!("http://admin:hunter2@{addr}/x?access_token=t0k3n&page=1"));
    let mut failing = failing;
    failing.provider.web.as_mut().unwrap().json_path = Some("{$.missing}".into());
    let taken = measure::take(&p, &failing, &[]).await;
    let message = error_message(taken);
    assert!(!message.contains("hunter2") && !message.contains("t0k3n"), "{message}");
    // A credential header that the endpoint echoes back into the value.
    let mut echo = web(&format!("http://{addr}/"));
    echo.success_condition = Some("result.age == 0".into());
    echo.provider.web.as_mut().unwrap().headers =
        vec![WebMetricHeader { key: "Authorization".into(), value: "Bearer {{ args.token }}".into() }];
    let taken = measure::take(&p, &echo, &[Argument::new("token", "s3cr3t-value")]).await;
    let value = taken.measurement.value.unwrap_or_default();
    assert_eq!(taken.measurement.phase, Some(HookPhase::Failed));
    assert!(!value.contains("s3cr3t-value") && value.contains("***"), "{value}");
}

#[tokio::test]
async fn secret_args_are_refused_unless_enabled() {
    let (addr, hits) = counting().await;
    let mut metric = web(&format!("http://{addr}/"));
    metric.provider.web.as_mut().unwrap().headers =
        vec![WebMetricHeader { key: "Authorization".into(), value: "Bearer {{ args.token }}".into() }];
    let secret = Argument {
        name: "token".into(),
        value: None,
        value_from: Some(common::api::ArgumentValueFrom {
            secret_key_ref: Some(common::api::SecretKeyRef { name: "creds".into(), key: "token".into() }),
        }),
    };
    let taken = measure::take_in(&providers(ProviderSettings::default()), "team-a", &metric, &[secret]).await;
    let message = error_message(taken);
    assert!(message.contains("Secret team-a/creds") && message.contains("--secret-args"), "{message}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

/// `--max-buffered-body-bytes`: a response reserves its announced length before it is read, so two 600 kB
/// responses never sit in memory together under a 1 MiB budget: the second waits for the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_response_bytes_are_bounded_across_measurements() {
    let router = Router::new().route(
        "/big",
        get(|| async {
            let first = bytes_chunk(b'{', 1);
            let stream =
                futures::stream::iter(vec![Ok::<_, std::io::Error>(first)]).chain(futures::stream::once(async {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    let mut rest = vec![b' '; 600_000 - 10];
                    rest.extend_from_slice(b"\"age\":45}");
                    Ok(axum::body::Bytes::from(rest))
                }));
            ([(header::CONTENT_LENGTH, "600000")], axum::body::Body::from_stream(stream))
        }),
    );
    let addr = serve(router).await;
    let metric = web(&format!("http://{addr}/big"));
    let peak = |budget: usize| {
        let metric = metric.clone();
        async move {
            let p = providers(ProviderSettings { max_buffered_body_bytes: budget, ..ProviderSettings::default() });
            let (a, b, c) = tokio::join!(
                measure::take(&p, &metric, &[]),
                measure::take(&p, &metric, &[]),
                measure::take(&p, &metric, &[])
            );
            for taken in [a, b, c] {
                assert_eq!(taken.measurement.phase, Some(HookPhase::Successful), "{:?}", taken.measurement.message);
            }
            p.peak_buffered_bytes()
        }
    };
    let unbounded = peak(16 << 20).await;
    assert!(unbounded > 1 << 20, "three concurrent 600 kB bodies are buffered together: {unbounded}");
    let bounded = peak(1 << 20).await;
    assert!(bounded <= 1 << 20, "never more than the budget at once: {bounded}");
}

fn bytes_chunk(byte: u8, n: usize) -> axum::body::Bytes {
    axum::body::Bytes::from(vec![byte; n])
}

/// Proxy settings from the environment are ignored: `hook-operator check` run with `HTTP_PROXY`/`ALL_PROXY` pointing
/// at a counting server resolves `localhost` itself and reaches the endpoint directly; the "proxy" sees nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_from_the_environment_are_never_used() {
    let (proxy, proxied) = counting().await;
    let endpoint = serve(Router::new().fallback(get(|| async { r#"{"age":45}"# }))).await;
    let dir = std::env::temp_dir().join(format!("no-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.yaml");
    let template = format!(
        "apiVersion: tkex.tencent.com/v1alpha1\nkind: HookTemplate\nmetadata: {{name: t}}\nspec:\n  metrics:\n  - name: \
         web\n    successCondition: asInt(result) > 30\n    provider:\n      web:\n        url: \
         http://localhost:{}/\n        jsonPath: '{{$.age}}'\n",
        endpoint.port()
    );
    std::fs::write(&file, template).unwrap();
    let proxy_url = format!("http://{proxy}");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_hook-operator"))
        .args(["check", "-f", &file.display().to_string()])
        .env("HTTP_PROXY", &proxy_url)
        .env("http_proxy", &proxy_url)
        .env("ALL_PROXY", &proxy_url)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{out}{}", String::from_utf8_lossy(&output.stderr));
    assert!(out.contains("Successful  value=45"), "{out}");
    assert_eq!(proxied.load(Ordering::SeqCst), 0, "the proxy was used");
}
