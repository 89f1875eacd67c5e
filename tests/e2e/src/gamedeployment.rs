//! Helpers for the GameDeployment end-to-end tests: manifests, the printer columns as `kubectl get` shows them,
//! and a pod watcher that checks invariants at every observed moment.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;

use crate::{Cluster, DEADLINE, Operator};

/// The GameDeployment operator binary, started against the cluster.
pub fn start_operator(cluster: &Cluster) -> Operator {
    cluster.operator("gamedeployment-operator", "gamedeployment-operator", &["--expectations-timeout", "20s"])
}

/// A GameDeployment manifest with the walkthrough's shape.
pub fn manifest(name: &str, replicas: i32, strategy: &str, extra_strategy: &str, image: &str) -> String {
    manifest_shaped(name, replicas, strategy, extra_strategy, image, Shape::default())
}

/// What a test changes in [`manifest`]'s GameDeployment beyond its arguments, each through a placeholder of
/// `manifests/gamedeployment.yaml` (never by editing the text).
#[derive(Clone, Copy, Debug, Default)]
pub struct Shape<'a> {
    /// The `app` label of the GameDeployment, its selector and its pods (default: the name).
    pub app: Option<&'a str>,
    /// The selector's `app` when it differs from the pods' (a selector that does not match its template).
    pub selector_app: Option<&'a str>,
    /// More labels of the pod template (`key: "value"`).
    pub template_labels: &'a [(&'a str, &'a str)],
    /// The pods' `serviceAccountName`.
    pub service_account: Option<&'a str>,
    /// Annotations of the GameDeployment (`key: "value"`).
    pub annotations: &'a [(&'a str, &'a str)],
}

/// [`manifest`] with the changes of `shape`.
pub fn manifest_shaped(
    name: &str,
    replicas: i32,
    strategy: &str,
    extra_strategy: &str,
    image: &str,
    shape: Shape<'_>,
) -> String {
    let app = shape.app.unwrap_or(name);
    let template_labels: Vec<String> =
        shape.template_labels.iter().map(|(key, value)| format!("        {key}: \"{value}\"")).collect();
    let pod_spec = shape.service_account.map(|account| format!("      serviceAccountName: {account}"));
    let annotations: Vec<String> =
        shape.annotations.iter().map(|(key, value)| format!("\n    {key}: \"{value}\"")).collect();
    let annotations =
        if annotations.is_empty() { String::new() } else { format!("  annotations:{}", annotations.concat()) };
    crate::manifests::load!(
        "gamedeployment",
        name = name,
        annotations = annotations,
        app = app,
        selector_app = shape.selector_app.unwrap_or(app),
        template_labels = template_labels.join("\n"),
        pod_spec = pod_spec.unwrap_or_default(),
        replicas = replicas,
        strategy = strategy,
        extra_strategy = extra_strategy,
        image = image
    )
}

/// `kubectl apply -f -` with the given manifest.
pub async fn apply(cluster: &Cluster, manifest: &str) {
    let path = cluster.dir().join(format!("manifest-{}.yaml", std::process::id() ^ manifest.len() as u32));
    std::fs::write(&path, manifest).expect("manifest written");
    let path = path.display().to_string();
    cluster.kubectl_ok(&["apply", "-f", &path]).await;
}

/// `kubectl patch` of the first container's image of GameDeployment `name` in `namespace` (a JSON patch, as the
/// walkthrough writes it).
pub async fn set_image(cluster: &Cluster, namespace: &str, name: &str, image: &str) {
    let patch =
        serde_json::json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image}]);
    let patch = patch.to_string();
    cluster.kubectl_ok(&["patch", "-n", namespace, "gamedeployment", name, "--type=json", "-p", &patch]).await;
}

/// `field` (`status`, `reason`, `message`) of the `type_` condition of GameDeployment `name` in `default`, as
/// `kubectl get -o jsonpath` prints it (empty when there is no such condition).
pub async fn condition(cluster: &Cluster, name: &str, type_: &str, field: &str) -> String {
    let path = format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].{field}}}");
    cluster.kubectl_ok(&["get", "gamedeployment", name, "-o", &path]).await
}

/// `kubectl patch` of `spec.updateStrategy.paused` of GameDeployment `name` in `namespace`.
pub async fn set_paused(cluster: &Cluster, namespace: &str, name: &str, paused: bool) {
    let patch = serde_json::json!({"spec": {"updateStrategy": {"paused": paused}}}).to_string();
    cluster.kubectl_ok(&["patch", "-n", namespace, "gamedeployment", name, "--type=merge", "-p", &patch]).await;
}

/// A kube-sim cluster with the CRDs and the GameDeployment operator, and GameDeployment `name` ([`manifest`] on
/// `python:latest`) applied and rolled out: `kubectl get` shows all `replicas` pods updated and ready.
pub async fn rolled_out(name: &str, replicas: i32, strategy: &str, extra_strategy: &str) -> (Cluster, Operator) {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let operator = start_operator(&cluster);
    apply(&cluster, &manifest(name, replicas, strategy, extra_strategy, "python:latest")).await;
    let all = i64::from(replicas);
    wait_columns(&cluster, name, Columns::new(all, all, all, all, all)).await;
    (cluster, operator)
}

/// One row of `kubectl get gamedeployment`: DESIRED UPDATED UPDATED_READY READY TOTAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    pub desired: i64,
    pub updated: i64,
    pub updated_ready: i64,
    pub ready: i64,
    pub total: i64,
}

impl Columns {
    pub const fn new(desired: i64, updated: i64, updated_ready: i64, ready: i64, total: i64) -> Self {
        Self { desired, updated, updated_ready, ready, total }
    }

    /// The columns `kubectl get gamedeployment` prints for `gd` (the CRD's printer columns' JSONPaths), for a
    /// GameDeployment seen on a watch ([`crate::observe::Observer`]) rather than read with `kubectl`.
    pub fn of(gd: &common::api::GameDeployment) -> Self {
        let status = gd.status.clone().unwrap_or_default();
        Self {
            desired: i64::from(gd.spec.replicas.unwrap_or(0)),
            updated: i64::from(status.updated_replicas),
            updated_ready: i64::from(status.updated_ready_replicas),
            ready: i64::from(status.ready_replicas),
            total: i64::from(status.replicas),
        }
    }
}

/// Reads the printer columns with the real `kubectl get gamedeployment`, checking the header is the walkthrough's.
pub async fn columns(cluster: &Cluster, name: &str) -> Option<Columns> {
    let out = cluster.kubectl(&["get", "gamedeployment", name]).await;
    if !out.success {
        return None;
    }
    let mut lines = out.stdout.lines();
    let header: Vec<&str> = lines.next()?.split_whitespace().collect();
    assert_eq!(header, ["NAME", "DESIRED", "UPDATED", "UPDATED_READY", "READY", "TOTAL", "AGE"], "{}", out.stdout);
    let row: Vec<&str> = lines.next()?.split_whitespace().collect();
    let n = |i: usize| row.get(i).and_then(|v| v.parse::<i64>().ok());
    // Columns of a status that is not written yet print as <none>.
    Some(Columns {
        desired: n(1)?,
        updated: n(2).unwrap_or(0),
        updated_ready: n(3).unwrap_or(0),
        ready: n(4).unwrap_or(0),
        total: n(5).unwrap_or(0),
    })
}

/// Waits until `kubectl get gamedeployment` shows exactly `want`.
pub async fn wait_columns(cluster: &Cluster, name: &str, want: Columns) {
    let start = std::time::Instant::now();
    let mut last = None;
    loop {
        last = columns(cluster, name).await.or(last);
        if last == Some(want) {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {name} to show {want:?}; last seen {last:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Pods of a GameDeployment (by its `app` label), from the API.
pub async fn pods(cluster: &Cluster, name: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(cluster.client(), "default");
    api.list(&kube::api::ListParams::default().labels(&format!("app={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// The pods of a GameDeployment not being deleted (no `deletionTimestamp`).
pub async fn live_pods(cluster: &Cluster, name: &str) -> Vec<Pod> {
    live(pods(cluster, name).await)
}

/// The pods not being deleted (no `deletionTimestamp`).
pub fn live(pods: Vec<Pod>) -> Vec<Pod> {
    pods.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// The value of the pod's label `key`.
pub fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The value of the pod's annotation `key`.
pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn revision(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get("controller-revision-hash").map(String::as_str)
}

pub fn image(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.containers.first()?.image.as_deref()
}

/// What the watcher saw.
#[derive(Debug, Default, Clone)]
pub struct Observations {
    /// Number of distinct moments (watch events) checked.
    pub moments: usize,
    pub violations: Vec<String>,
    /// Largest number of pods not Ready (or missing) at any moment.
    pub max_unavailable: usize,
    /// Largest number of pods on a revision other than the initial one at any moment.
    pub max_changed: usize,
    /// Largest number of pods that existed (not terminating) at any moment.
    pub max_pods: usize,
}

/// Watches the pods of a GameDeployment and checks, after every event, that at most `max_unavailable` of the
/// `replicas` pods are missing or not Ready, and that no more than `max_changed` pods left `initial_revision`.
pub struct PodMonitor {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<Mutex<Observations>>,
}

impl PodMonitor {
    pub fn start(
        cluster: &Cluster,
        name: &str,
        replicas: usize,
        max_unavailable: usize,
        initial_revision: Option<String>,
        max_changed: usize,
    ) -> Self {
        let api: Api<Pod> = Api::namespaced(cluster.client(), "default");
        let config = watcher::Config::default().labels(&format!("app={name}"));
        let seen = Arc::new(Mutex::new(Observations::default()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
            let mut stream = watcher(api, config).boxed();
            // Moments are checked once the initial list is complete (a half-listed set is not a moment).
            let mut listed = false;
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                match event {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                        pods.insert(pod.metadata.uid.clone().unwrap_or_default(), pod);
                    }
                    watcher::Event::Delete(pod) => {
                        pods.remove(&pod.metadata.uid.clone().unwrap_or_default());
                    }
                    watcher::Event::Init => {
                        pods.clear();
                        listed = false;
                    }
                    watcher::Event::InitDone => listed = true,
                }
                if !listed {
                    continue;
                }
                let live: Vec<&Pod> = pods.values().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
                let ready = live.iter().filter(|p| is_ready(p)).count();
                let unavailable = replicas.saturating_sub(ready);
                let changed = initial_revision
                    .as_deref()
                    .map_or(0, |initial| live.iter().filter(|p| revision(p) != Some(initial)).count());
                let mut seen = record.lock().unwrap_or_else(|e| e.into_inner());
                seen.moments += 1;
                seen.max_unavailable = seen.max_unavailable.max(unavailable);
                seen.max_changed = seen.max_changed.max(changed);
                seen.max_pods = seen.max_pods.max(live.len());
                if unavailable > max_unavailable {
                    let states: Vec<String> = live
                        .iter()
                        .map(|p| format!("{}:{}", p.metadata.name.clone().unwrap_or_default(), is_ready(p)))
                        .collect();
                    seen.violations.push(format!("{unavailable} unavailable (max {max_unavailable}): {states:?}"));
                }
                if changed > max_changed {
                    seen.violations.push(format!("{changed} pods left the initial revision (max {max_changed})"));
                }
            }
        });
        Self { task, seen }
    }

    /// Stops watching and returns what was seen.
    pub async fn stop(self) -> Observations {
        // Let the last events arrive.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.task.abort();
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.clone()
    }
}

/// Removes terminal colour codes from a log, by the `strip-ansi-escapes` crate (a full ANSI parser, `vte`).
pub fn strip_ansi(text: &str) -> String {
    strip_ansi_escapes::strip_str(text)
}

/// Every address the operator (or, when several share a log, each operator process in start order) logged it
/// serves `/metrics` on.
pub fn metrics_addresses(operator: &Operator) -> Vec<std::net::SocketAddr> {
    strip_ansi(&operator.logs())
        .lines()
        .filter(|l| l.contains("serving /metrics"))
        .filter_map(|l| l.split("address=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The address the `nth` process logging to this operator's log (0 = the first) serves `/metrics` on.
pub async fn nth_metrics_address(operator: &Operator, nth: usize) -> std::net::SocketAddr {
    let start = std::time::Instant::now();
    loop {
        if let Some(address) = metrics_addresses(operator).get(nth) {
            return *address;
        }
        assert!(start.elapsed() < DEADLINE, "the operator never logged its metrics address");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The address the operator serves `/metrics` on, from its (latest) startup log line.
pub async fn metrics_address(operator: &Operator) -> std::net::SocketAddr {
    let start = std::time::Instant::now();
    loop {
        if let Some(address) = metrics_addresses(operator).last() {
            return *address;
        }
        assert!(start.elapsed() < DEADLINE, "the operator never logged its metrics address");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Scrapes `/metrics` and returns `metric{labels} value` samples as (name with labels, value).
pub async fn scrape(address: std::net::SocketAddr) -> BTreeMap<String, f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("metrics endpoint reachable");
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("request sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("response read");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Sum of `gamedeployment_api_requests_total` samples for writes (create/update/patch/delete), leaving out
/// Events and Leases (which are not GameDeployment work).
pub fn workload_writes(samples: &BTreeMap<String, f64>) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| k.starts_with("gamedeployment_api_requests_total"))
        .filter(|(k, _)| ["create", "update", "patch", "delete"].iter().any(|v| k.contains(&format!("verb=\"{v}\""))))
        .filter(|(k, _)| !k.contains("resource=\"events\"") && !k.contains("resource=\"leases\""))
        .map(|(_, v)| v)
        .sum()
}

/// The HTTP status code of `GET path` on the operator's metrics/health server.
pub async fn http_status(address: std::net::SocketAddr, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}
