//! The operator's observability end to end: `/metrics` counts reconciles and pod actions, and a pass that has
//! nothing to do makes no write request at all.

use e2e::gamedeployment::{
    Columns, apply, manifest, metrics_address, scrape, start_operator, wait_columns, workload_writes,
};
use e2e::{Cluster, DEADLINE, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_op_passes_write_nothing_and_metrics_count_the_work() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let operator = start_operator(&cluster);
    let address = metrics_address(&operator).await;
    apply(&cluster, &manifest("quiet", 3, "InplaceUpdate", "", "python:latest")).await;
    wait_columns(&cluster, "quiet", Columns::new(3, 3, 3, 3, 3)).await;

    let settled = wait_for("the operator to go quiet", DEADLINE, || async {
        let first = scrape(address).await;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let second = scrape(address).await;
        (workload_writes(&first) == workload_writes(&second)).then_some(second)
    })
    .await;
    assert_eq!(settled.get("gamedeployment_pods_created_total{reason=\"replicas\"}"), Some(&3.0));
    assert!(settled.get("gamedeployment_reconciles_total{result=\"success\"}").is_some_and(|n| *n >= 1.0));
    let reconciles = settled.get("gamedeployment_reconciles_total{result=\"success\"}").copied().unwrap_or(0.0);

    // Touch the GameDeployment without changing what it asks for: a pass runs and writes nothing.
    cluster.kubectl_ok(&["annotate", "gamedeployment", "quiet", "example.com/touched=yes"]).await;
    let after = wait_for("a pass after the annotation", DEADLINE, || async {
        let now = scrape(address).await;
        let ran = now.get("gamedeployment_reconciles_total{result=\"success\"}").copied().unwrap_or(0.0) > reconciles;
        ran.then_some(now)
    })
    .await;
    assert_eq!(workload_writes(&after), workload_writes(&settled), "a no-op pass made write requests");
    assert_eq!(after.get("gamedeployment_status_writes_total"), settled.get("gamedeployment_status_writes_total"));
    cluster.shutdown().await;
}

use crate::walkthrough_support;

/// Every metric and label the chart's Grafana dashboard and PrometheusRule use
/// (`charts/gamedeployment-operators/metrics-used.txt`, kept in sync with them by
/// `kubectl-gd/tests/chart_observability.rs`) is exported by the running operators after a hooked scale-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_alerts_use_is_exported() {
    use std::collections::{BTreeMap, BTreeSet};

    let cluster = Cluster::start().await;
    let (hooks, gd) = walkthrough_support::operators(&cluster).await;
    let template = "apiVersion: tkex.tencent.com/v1alpha1\nkind: HookTemplate\nmetadata:\n  name: quick\nspec:\n  metrics:\n    - name: webtest\n      successCondition: \"asInt(result) > 30\"\n      provider:\n        web:\n          url: http://1.1.1.1:9091\n          jsonPath: \"{$.age}\"\n";
    apply(&cluster, template).await;
    let strategy = "  preDeleteUpdateStrategy:\n    hook:\n      templateName: quick\n";
    apply(&cluster, &manifest("dash", 3, "RollingUpdate", strategy, "python:latest")).await;
    wait_columns(&cluster, "dash", Columns::new(3, 3, 3, 3, 3)).await;
    cluster.kubectl_ok(&["scale", "--replicas=2", "gamedeployment/dash"]).await;
    wait_columns(&cluster, "dash", Columns::new(2, 2, 2, 2, 2)).await;
    // The error counters have series only once an error happened: fail every status write for a while, during a
    // scale-in through a hook (both operators write status then), and let them recover.
    cluster.sim().set_faults(kube_sim::FaultConfig {
        rules: vec![kube_sim::FaultRule {
            resources: vec!["gamedeployments/status".into(), "hookruns/status".into()],
            error_rate: 1.0,
            ..kube_sim::FaultRule::default()
        }],
    });
    cluster.kubectl_ok(&["scale", "--replicas=1", "gamedeployment/dash"]).await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    cluster.sim().set_faults(kube_sim::FaultConfig::default());
    wait_columns(&cluster, "dash", Columns::new(1, 1, 1, 1, 1)).await;

    let addresses = [metrics_address(&gd).await, e2e::gamedeployment::metrics_address(&hooks).await];
    // Sample names with the label names seen on them, and the family names declared by `# TYPE`.
    let mut samples: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut families: BTreeSet<String> = BTreeSet::new();
    let mut gate_waits = 0.0;
    for address in addresses {
        let text = wait_for("a /metrics page", DEADLINE, || async move {
            let body = reqwest_free_get(address).await?;
            body.contains("# TYPE").then_some(body)
        })
        .await;
        for line in text.lines() {
            if let Some(count) = line.strip_prefix("gamedeployment_gate_wait_seconds_count{hook=\"predelete\"} ") {
                gate_waits = count.trim().parse().unwrap_or(0.0);
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                families.insert(rest.split_whitespace().next().unwrap_or_default().to_string());
            } else if !line.starts_with('#') && !line.is_empty() {
                let (name, labels) = match line.split_once('{') {
                    Some((name, rest)) => (name, rest.split('}').next().unwrap_or_default()),
                    None => (line.split_whitespace().next().unwrap_or_default(), ""),
                };
                let names = labels.split(',').filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()));
                samples.entry(name.to_string()).or_default().extend(names);
            }
        }
    }
    let used = std::fs::read_to_string(e2e::repo_root().join("charts/gamedeployment-operators/metrics-used.txt"))
        .expect("metrics-used.txt");
    let mut missing = Vec::new();
    for line in used.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut parts = line.split_whitespace();
        let name = parts.next().unwrap_or_default();
        let labels: Vec<&str> = parts.next().map(|l| l.split(',').collect()).unwrap_or_default();
        let family = name.trim_end_matches("_bucket").trim_end_matches("_total");
        match samples.get(name) {
            Some(seen) => {
                for label in labels {
                    if !seen.contains(label) {
                        missing.push(format!("{name}: label {label} (seen {seen:?})"));
                    }
                }
            }
            // A labelled family with no sample yet (e.g. no reconcile error happened) is still declared.
            None if families.contains(family) => {}
            None => missing.push(format!("{name}: not exported")),
        }
    }
    assert!(missing.is_empty(), "the dashboard or alerts use what the operators do not export: {missing:#?}");
    // Each of the two pods the scale-ins deleted after their preDelete hook ended a wait of the gate.
    assert_eq!(gate_waits, 2.0, "gamedeployment_gate_wait_seconds{{hook=\"predelete\"}} observations");
    cluster.shutdown().await;
}

/// `GET /metrics` over a plain TCP connection.
async fn reqwest_free_get(address: std::net::SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.split("\r\n\r\n").nth(1).map(str::to_string)
}

/// `--pass-spacing` on (a large ratio, so every pass waits up to the 1 s bound after the previous one): passes wait
/// and say so in `/metrics`, triggers during the wait still lead to a pass, and a scale-out and an in-place roll
/// complete as without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spaced_passes_wait_are_counted_and_still_converge() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let operator = cluster.operator(
        "gamedeployment-operator",
        "gamedeployment-operator",
        &["--expectations-timeout", "20s", "--pass-spacing", "1000"],
    );
    let address = metrics_address(&operator).await;
    apply(&cluster, &manifest("spaced", 2, "InplaceUpdate", "", "python:latest")).await;
    wait_columns(&cluster, "spaced", Columns::new(2, 2, 2, 2, 2)).await;
    cluster.kubectl_ok(&["scale", "--replicas=4", "gamedeployment/spaced"]).await;
    wait_columns(&cluster, "spaced", Columns::new(4, 4, 4, 4, 4)).await;
    apply(&cluster, &manifest("spaced", 4, "InplaceUpdate", "", "python:3")).await;
    wait_for("every pod on the new image", DEADLINE, || async {
        let images = cluster
            .kubectl_ok(&["get", "pods", "-l", "app=spaced", "-o", "jsonpath={.items[*].spec.containers[0].image}"])
            .await;
        let images: Vec<&str> = images.split_whitespace().collect();
        (images.len() == 4 && images.iter().all(|i| *i == "python:3")).then_some(())
    })
    .await;
    wait_columns(&cluster, "spaced", Columns::new(4, 4, 4, 4, 4)).await;
    let metrics = scrape(address).await;
    let spaced = metrics.get("gamedeployment_passes_spaced_total").copied().unwrap_or(0.0);
    let waited = metrics.get("gamedeployment_pass_spacing_seconds_total").copied().unwrap_or(0.0);
    assert!(spaced >= 1.0, "no pass waited for its spacing: {spaced}");
    assert!(waited > 0.0 && waited <= spaced * 1.0 + 1e-9, "each wait is at most 1 s: {waited} s over {spaced} passes");
    cluster.shutdown().await;
}
