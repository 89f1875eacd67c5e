//! Shared helpers for the kubelet simulator's integration tests: a running kube-sim with fast
//! kubelet timings, pod builders and waits, and a minimal HTTP client for pod endpoints. Polling
//! is `kube_sim::testing`'s, shared with the API tests and the end-to-end tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use kube_sim::KubeletConfig;
use kube_sim::{SimConfig, SimHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Starts kube-sim with the kubelet simulator in its fast test configuration.
pub async fn start() -> Result<SimHandle> {
    start_with(KubeletConfig::fast()).await
}

pub async fn start_with(kubelet: KubeletConfig) -> Result<SimHandle> {
    // Logs appear with `RUST_LOG=kube_sim::kubelet=debug cargo test -- --nocapture`.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let config = SimConfig { kubelet: Some(kubelet), ..SimConfig::default() };
    kube_sim::start(config).await.context("starting kube-sim")
}

pub use kube_sim::testing::eventually;

/// A directory of this test's own under the temp dir (`prefix`, the process and `sim`'s port) with a kubeconfig for
/// `sim` in it; returns the directory and the kubeconfig's path.
pub fn kubeconfig_dir(sim: &SimHandle, prefix: &str) -> Result<(PathBuf, PathBuf)> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), sim.addr().port()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig)?;
    Ok((dir, kubeconfig))
}

/// Runs the real kubectl with `kubeconfig` (as a child process, without blocking the runtime that also serves
/// kube-sim) and returns its output; a failure is an error with its stderr.
pub async fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let output = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .await
        .context("running kubectl (is it installed?)")?;
    if !output.status.success() {
        bail!("kubectl {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// Waits until the pod satisfies `condition` and returns it.
pub async fn wait_pod(api: &Api<Pod>, name: &str, what: &str, condition: impl Fn(&Pod) -> bool) -> Result<Pod> {
    eventually(&format!("pod {name}: {what}"), || async { Ok(api.get_opt(name).await?.filter(|pod| condition(pod))) })
        .await
}

/// Waits until the pod no longer exists.
pub async fn wait_gone(api: &Api<Pod>, name: &str) -> Result<()> {
    eventually(&format!("pod {name} to be deleted"), || async { Ok(api.get_opt(name).await?.is_none().then_some(())) })
        .await
}

/// A container with an image and optional TCP ports.
pub fn container(name: &str, image: &str, ports: &[i32]) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        ports: (!ports.is_empty())
            .then(|| ports.iter().map(|port| ContainerPort { container_port: *port, ..Default::default() }).collect()),
        ..Default::default()
    }
}

/// A pod in `default` with the given containers and annotations.
pub fn pod(name: &str, containers: Vec<Container>, annotations: &[(&str, &str)]) -> Pod {
    let annotations: BTreeMap<String, String> =
        annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        },
        spec: Some(PodSpec { containers, ..Default::default() }),
        ..Default::default()
    }
}

pub async fn create(api: &Api<Pod>, pod: &Pod) -> Result<Pod> {
    api.create(&PostParams::default(), pod).await.context("creating pod")
}

/// Status `Ready` condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c == "True")
}

/// Status of the pod condition `type_`.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

pub fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

pub fn pod_ip(pod: &Pod) -> Result<Ipv4Addr> {
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()).context("no podIP")?;
    ip.parse().context("podIP is not an IPv4 address")
}

/// The status of container `name`.
pub fn container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.iter().find(|s| s.name == name)
}

/// One HTTP/1.1 request; returns the status code and body.
pub async fn http(ip: Ipv4Addr, port: u16, method: &str, path: &str) -> Result<(u16, String)> {
    let mut stream = tokio::time::timeout(Duration::from_secs(10), tokio::net::TcpStream::connect((ip, port)))
        .await
        .context("connect timed out")??;
    let request = format!("{method} {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut response))
        .await
        .context("response timed out")??;
    let status =
        response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).context("malformed HTTP response")?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Ok((status, body))
}
