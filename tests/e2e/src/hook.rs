//! Helpers for the hook-operator end-to-end tests: the walkthrough's hook pod (kube-sim's kubelet serves
//! `{"name":"bryan","male":"yes","age":45}` on port 9091 for the `canary-hook` image), HookRuns built from
//! HookTemplates the way a workload operator builds them, and waits on the `PHASE` printer column.

use std::time::Duration;

use common::api::{Argument, HookPhase, HookRun, HookTemplate};
use common::hookrun::{NewHookRun, from_template};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;

use crate::{Cluster, DEADLINE, Operator, wait_for};

/// The hook-operator binary with the walkthrough's `60s` intervals compressed 100x (`--interval-scale`), plus
/// `extra` flags.
pub fn start_operator(cluster: &Cluster, extra: &[&str]) -> Operator {
    start_operator_scaled(cluster, "0.01", extra)
}

/// The hook-operator binary with `--interval-scale scale`.
pub fn start_operator_scaled(cluster: &Cluster, scale: &str, extra: &[&str]) -> Operator {
    let mut args = vec!["--interval-scale", scale];
    args.extend_from_slice(extra);
    cluster.operator("hook-operator", "hook-operator", &args)
}

/// Starts a pod running the walkthrough's hook image and returns its IP once it runs.
pub async fn hook_pod(cluster: &Cluster, name: &str) -> String {
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels:
    app: {name}
spec:
  containers:
    - name: hook
      image: canary-hook:test
      ports:
        - containerPort: 9091
"#
    );
    let path = cluster.dir().join(format!("{name}.yaml"));
    std::fs::write(&path, manifest).expect("pod manifest written");
    cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    wait_for(&format!("pod {name} to run with an IP"), DEADLINE, || {
        let pods = pods.clone();
        async move {
            let pod = pods.get_opt(name).await.ok().flatten()?;
            let status = pod.status?;
            (status.phase.as_deref() == Some("Running")).then_some(())?;
            status.pod_ip.filter(|ip| !ip.is_empty())
        }
    })
    .await
}

/// `kubectl apply -f examples/<file>`, as in the walkthrough.
pub async fn apply_example(cluster: &Cluster, file: &str) {
    cluster.kubectl_ok(&["apply", "-f", &format!("examples/{file}")]).await;
}

/// Creates a HookRun from the stored HookTemplate `template`, merging `args` like the workload operators do.
pub async fn create_run(cluster: &Cluster, template: &str, run: &str, args: &[(&str, &str)]) -> HookRun {
    let templates: Api<HookTemplate> = Api::namespaced(cluster.client(), "default");
    let template = templates.get(template).await.expect("template exists");
    let new = NewHookRun {
        name: run.to_string(),
        namespace: "default".into(),
        labels: Default::default(),
        owner: None,
        args: args.iter().map(|(n, v)| Argument::new(*n, *v)).collect(),
    };
    let hookrun = from_template(&template, new).expect("template makes a run");
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    runs.create(&PostParams::default(), &hookrun).await.expect("HookRun created")
}

pub async fn get_run(cluster: &Cluster, name: &str) -> HookRun {
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    runs.get(name).await.expect("HookRun exists")
}

/// Waits until `kubectl get hookrun <name>` shows a completed PHASE, and returns it.
pub async fn wait_completed(cluster: &Cluster, name: &str) -> String {
    wait_for(&format!("HookRun {name} to complete"), DEADLINE, || async move {
        let out = cluster.kubectl(&["get", "hookrun", name, "--no-headers"]).await;
        let phase = out.stdout.split_whitespace().nth(1)?.to_string();
        ["Successful", "Failed", "Error", "Inconclusive"].contains(&phase.as_str()).then_some(phase)
    })
    .await
}

/// Waits for completion and asserts the phase, showing the stored status when it differs.
pub async fn assert_completed(cluster: &Cluster, name: &str, want: &str) -> HookRun {
    let got = wait_completed(cluster, name).await;
    let run = get_run(cluster, name).await;
    assert_eq!(got, want, "HookRun {name} status: {}", serde_json::to_string_pretty(&run.status).unwrap_or_default());
    run
}

/// Waits until the run's first metric has recorded at least `n` measurements.
pub async fn wait_measurements(cluster: &Cluster, name: &str, n: i32) {
    wait_for(&format!("HookRun {name} to record {n} measurement(s)"), DEADLINE, || async move {
        let run = get_run(cluster, name).await;
        let result = run.status?.metric_results.into_iter().next()?;
        (result.successful + result.failed + result.inconclusive + result.error >= n).then_some(())
    })
    .await;
}

/// Phase of the run as stored.
pub fn phase(run: &HookRun) -> Option<HookPhase> {
    run.status.as_ref().and_then(|s| s.phase)
}

/// Seconds between consecutive measurement starts of the first metric (status keeps whole seconds).
pub fn start_gaps(run: &HookRun) -> Vec<i64> {
    let starts: Vec<i64> = run
        .status
        .iter()
        .flat_map(|s| s.metric_results.first())
        .flat_map(|r| r.measurements.iter())
        .filter_map(|m| m.started_at.as_ref().map(|t| t.0.as_second()))
        .collect();
    starts.windows(2).map(|w| w[1] - w[0]).collect()
}

pub use crate::FAST_ELECTION;

pub const POLL: Duration = Duration::from_millis(200);

/// Resident memory of process `pid` and its children (the hook-operator and its evaluation workers), in bytes.
pub use hook_operator::testing::hostile::tree_rss;

/// The chart's memory limit of the hook-operator, in bytes (`hookOperator.resources.limits.memory`).
pub fn chart_memory_limit() -> u64 {
    let values = std::fs::read_to_string(crate::repo_root().join("charts/gamedeployment-operators/values.yaml"))
        .expect("values.yaml");
    let values: serde_yaml::Value = serde_yaml::from_str(&values).expect("values.yaml is YAML");
    let limit = values["hookOperator"]["resources"]["limits"]["memory"].as_str().expect("a memory limit").to_string();
    let (number, unit) = limit.split_at(limit.find(|c: char| !c.is_ascii_digit()).unwrap_or(limit.len()));
    let factor = match unit {
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ki" => 1 << 10,
        "" => 1,
        other => panic!("unit {other}"),
    };
    number.parse::<u64>().expect("a number") * factor
}

/// A keep-alive HTTP/1.1 server on loopback for hook endpoints: each request's path goes to `answer`, which returns
/// the status (`"200 OK"`) and the JSON body, or `None` to close the connection.
pub async fn serve_http<F>(answer: F) -> std::net::SocketAddr
where
    F: Fn(String) -> futures::future::BoxFuture<'static, Option<(&'static str, Vec<u8>)>> + Send + Sync + 'static,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let address = listener.local_addr().expect("address");
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { continue };
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                loop {
                    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                        let mut chunk = [0u8; 4096];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
                    buffer.drain(..end + 4);
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let Some((status, body)) = answer(path).await else { return };
                    let head = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    if socket.write_all(head.as_bytes()).await.is_err() || socket.write_all(&body).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

/// [`serve_http`] answering `GET /<name>` with `answers[name]` (404 otherwise).
pub async fn serve_answers(answers: std::collections::HashMap<String, Vec<u8>>) -> std::net::SocketAddr {
    let answers = std::sync::Arc::new(answers);
    serve_http(move |path| {
        let found = answers.get(path.trim_start_matches('/')).cloned();
        Box::pin(async move { Some(found.map_or(("404 Not Found", b"no such answer".to_vec()), |b| ("200 OK", b))) })
    })
    .await
}

/// A run of one web metric in `default` that probes `url` every `interval` for `{$.age}`, `count` times, and succeeds
/// when it is above 30.
pub fn age_run(name: &str, url: String, count: i32, interval: &str) -> HookRun {
    use common::api::{HookRunSpec, Metric, MetricProvider, WebMetric};
    let mut run = HookRun::new(
        name,
        HookRunSpec {
            metrics: vec![Metric {
                name: "m".into(),
                count,
                interval: Some(interval.into()),
                success_condition: Some("asInt(result) > 30".into()),
                provider: MetricProvider {
                    web: Some(WebMetric { url, json_path: Some("{$.age}".into()), ..WebMetric::default() }),
                    ..MetricProvider::default()
                },
                ..Metric::default()
            }],
            ..HookRunSpec::default()
        },
    );
    run.metadata.namespace = Some("default".into());
    run
}

/// An [`age_run`] that probes `http://{addr}/{name}` every second, with a 60 s timeout and `failure_limit`: the
/// scripted endpoint decides each measurement (the durability suites).
pub fn scripted_age_run(name: &str, addr: std::net::SocketAddr, count: i32, failure_limit: i32) -> HookRun {
    let mut run = age_run(name, format!("http://{addr}/{name}"), count, "1s");
    for metric in &mut run.spec.metrics {
        metric.failure_limit = failure_limit;
        if let Some(web) = metric.provider.web.as_mut() {
            web.timeout_seconds = Some(60);
        }
    }
    run
}
