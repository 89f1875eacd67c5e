//! `pods/NAME/log`: the simulated containers log their life (started from an image, ready, stopped for an in-place
//! update or a deletion) and their demo servers' requests, read with the real `kubectl logs` and with raw requests, checked like kube-apiserver checks
//! a log request.

use crate::kubelet_support;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kubelet_support::*;

#[tokio::test]
async fn kubectl_logs_shows_the_simulated_container_life() -> Result<()> {
    let sim = start().await?;
    let (dir, kubeconfig) = kubeconfig_dir(&sim, "kubelet-logs")?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let mut python = container("python", "python:latest", &[8000]);
    python.args = Some(["-m", "http.server", "8000"].map(String::from).to_vec());
    create(&pods, &pod("web", vec![python], &[])).await?;
    let ready = wait_pod(&pods, "web", "Ready", is_ready).await?;
    let ip = pod_ip(&ready)?;

    let logs = kubectl(&kubeconfig, &["logs", "web"]).await?;
    assert_eq!(
        logs.lines().collect::<Vec<_>>(),
        [
            format!("[kube-sim] container python started from image python:latest in pod default/web, pod IP {ip}"),
            "[kube-sim] container python is ready".to_string(),
        ],
        "{logs}"
    );
    // The demo server's requests, as `python -m http.server` logs them.
    assert_eq!(http(ip, 8000, "GET", "/nope").await?.0, 404);
    let logs = kubectl(&kubeconfig, &["logs", "web"]).await?;
    let request = logs.lines().last().unwrap_or_default();
    assert!(request.contains(" - - [") && request.ends_with(r#"] "GET /nope HTTP/1.1" 404 -"#), "{logs}");
    let o = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["logs", "web", "--previous"])
        .output()
        .await?;
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(r#"previous terminated container "python" in pod "web" not found"#),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // An in-place update: the new instance logs afresh, the old one is `--previous`.
    kubectl(&kubeconfig, &["set", "image", "pod/web", "python=python:3.5"]).await?;
    wait_pod(&pods, "web", "restarted and Ready", |p| {
        container_status(p, "python").is_some_and(|s| s.restart_count == 1 && s.ready)
    })
    .await?;
    let logs = kubectl(&kubeconfig, &["logs", "web", "-c", "python"]).await?;
    assert!(logs.starts_with("[kube-sim] container python started from image python:3.5 "), "{logs}");
    let previous = kubectl(&kubeconfig, &["logs", "web", "--previous"]).await?;
    assert_eq!(
        previous.lines().last(),
        Some("[kube-sim] stopping: the container's image changed (in-place update)"),
        "{previous}"
    );
    let tail = kubectl(&kubeconfig, &["logs", "web", "--tail=1", "--timestamps"]).await?;
    let (stamp, line) = tail.trim_end().split_once(' ').context("timestamped line")?;
    assert_eq!(line, "[kube-sim] container python is ready");
    assert!(stamp.len() == "2025-01-01T00:00:00.000000000Z".len() && stamp.ends_with('Z'), "{stamp}");
    // `-f` returns what there is (kube-sim does not stream logs).
    let followed = kubectl(&kubeconfig, &["logs", "-f", "web"]).await?;
    assert_eq!(followed, logs);
    let _ = std::fs::remove_dir_all(dir);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn log_requests_are_checked_like_kube_apiserver_checks_them() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let two = pod("two", vec![container("a", "python:latest", &[]), container("b", "python:latest", &[])], &[]);
    create(&pods, &two).await?;
    wait_pod(&pods, "two", "Ready", is_ready).await?;
    let http = reqwest::Client::new();
    let get = |path: String| {
        let request = http.get(format!("{}/api/v1/namespaces/default/pods/{path}", sim.url()));
        async move {
            let r = request.send().await?;
            let (status, ct) = (r.status().as_u16(), r.headers().get("content-type").cloned());
            Ok::<_, anyhow::Error>((status, ct.and_then(|v| v.to_str().ok().map(str::to_string)), r.text().await?))
        }
    };
    let (status, ct, body) = get("two/log?container=b&tailLines=1".into()).await?;
    assert_eq!((status, ct.as_deref(), body.as_str()), (200, Some("text/plain"), "[kube-sim] container b is ready\n"));
    let (status, _, body) = get("two/log".into()).await?;
    assert_eq!(status, 400);
    let status_body: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(status_body["message"], "a container name must be specified for pod two, choose one of: [a b]");
    let (status, _, body) = get("two/log?container=nope".into()).await?;
    assert_eq!(status, 400);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body)?["message"], "container nope is not valid for pod two");
    let (status, _, body) = get("missing/log".into()).await?;
    assert_eq!(status, 404, "{body}");
    let (status, _, body) = get("two/log?container=a&tailLines=-1".into()).await?;
    assert_eq!(status, 422, "{body}");
    // `follow` and `sinceSeconds` are accepted; the answer ends with the log as it is.
    let (status, _, body) = get("two/log?container=a&follow=true&sinceSeconds=600".into()).await?;
    assert_eq!((status, body.lines().count()), (200, 2), "{body}");
    // A subresource of its own in discovery, as RBAC sees it.
    let resources: serde_json::Value = http.get(format!("{}/api/v1", sim.url())).send().await?.json().await?;
    let log = resources["resources"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["name"] == "pods/log"))
        .context("pods/log in discovery")?;
    assert_eq!((log["kind"].as_str(), log["verbs"].clone()), (Some("Pod"), serde_json::json!(["get"])));
    sim.shutdown().await;
    Ok(())
}
