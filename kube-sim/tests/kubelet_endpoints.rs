//! HTTP endpoints served on pod IPs: the walkthrough's `canary-hook` image, `python -m
//! http.server`, and annotation-defined endpoints, started with the container and stopped with it.

use crate::kubelet_support;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kubelet_support::*;
use serde_json::{Value, json};

#[tokio::test]
async fn walkthrough_hook_image_answers_on_its_pod_ip() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    // The container of `gamedeployment-args.yaml`, unchanged.
    let mut hook = container("pre-delete-hook", "canary-hook:test", &[9091]);
    hook.image_pull_policy = Some("IfNotPresent".into());
    create(&pods, &pod("hook-a", vec![hook.clone()], &[])).await?;
    create(&pods, &pod("hook-b", vec![hook], &[])).await?;

    for name in ["hook-a", "hook-b"] {
        let pod = wait_pod(&pods, name, "Ready", is_ready).await?;
        let ip = pod_ip(&pod)?;
        let (status, body) = http(ip, 9091, "GET", "/").await?;
        assert_eq!(status, 200);
        let body: Value = serde_json::from_str(&body).context("JSON body")?;
        assert_eq!(body, json!({"name": "bryan", "male": "yes", "age": 45}));
    }

    // Deleting the pod stops its server.
    let ip = pod_ip(&pods.get("hook-a").await?)?;
    pods.delete("hook-a", &DeleteParams::default()).await?;
    wait_gone(&pods, "hook-a").await?;
    eventually("the deleted pod's port to close", || async {
        Ok(http(ip, 9091, "GET", "/").await.is_err().then_some(()))
    })
    .await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn python_http_server_serves_a_directory_listing_and_survives_an_image_update() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    // The container of `gamedeployment.yaml`, unchanged.
    let mut python = container("python", "python:latest", &[8000]);
    python.command = Some(vec!["python".into()]);
    python.args = Some(vec!["-m".into(), "http.server".into(), "8000".into()]);
    create(&pods, &pod("web", vec![python], &[])).await?;
    let pod = wait_pod(&pods, "web", "Ready", is_ready).await?;
    let ip = pod_ip(&pod)?;
    let (status, body) = http(ip, 8000, "GET", "/").await?;
    assert_eq!(status, 200);
    assert!(body.contains("Directory listing for /"), "{body}");
    assert_eq!(http(ip, 8000, "GET", "/nope").await?.0, 404);

    // The walkthrough's in-place update to python:3.5: the server comes back on the same IP.
    let patch = json!({"spec": {"containers": [{"name": "python", "image": "python:3.5"}]}});
    pods.patch("web", &PatchParams::default(), &Patch::Strategic(patch)).await?;
    let pod = wait_pod(&pods, "web", "restarted on python:3.5 and Ready", |p| {
        container_status(p, "python").is_some_and(|s| s.restart_count == 1 && s.ready)
    })
    .await?;
    assert_eq!(pod_ip(&pod)?, ip, "an in-place update keeps the pod IP");
    let (status, _) = http(ip, 8000, "GET", "/").await?;
    assert_eq!(status, 200);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn annotation_endpoint_answers_and_follows_annotation_changes() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let annotations = [
        ("kube-sim.kourse.dev/http-port", "9091"),
        ("kube-sim.kourse.dev/http-status", "503"),
        ("kube-sim.kourse.dev/http-body", r#"{"age": 12}"#),
    ];
    // Annotations override the image's own server on the same port.
    create(&pods, &pod("custom", vec![container("hook", "canary-hook:test", &[9091])], &annotations)).await?;
    let pod = wait_pod(&pods, "custom", "Ready", is_ready).await?;
    let ip = pod_ip(&pod)?;
    let (status, body) = http(ip, 9091, "GET", "/anything").await?;
    assert_eq!((status, body.as_str()), (503, r#"{"age": 12}"#));

    // "Fixing" the endpoint on the live pod, as a person would after a failed hook.
    let patch = json!({"metadata": {"annotations": {
        "kube-sim.kourse.dev/http-status": "200",
        "kube-sim.kourse.dev/http-body": r#"{"age": 45}"#,
    }}});
    pods.patch("custom", &PatchParams::default(), &Patch::Merge(patch)).await?;
    eventually("the endpoint to answer the new body", || async {
        let (status, body) = http(ip, 9091, "GET", "/").await?;
        Ok((status == 200 && body == r#"{"age": 45}"#).then_some(()))
    })
    .await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn shutdown_stops_every_endpoint() -> Result<()> {
    let sim = start().await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    create(&pods, &pod("hook", vec![container("hook", "canary-hook:test", &[9091])], &[])).await?;
    let ip = pod_ip(&wait_pod(&pods, "hook", "Ready", is_ready).await?)?;
    assert_eq!(http(ip, 9091, "GET", "/").await?.0, 200);
    sim.shutdown().await;
    eventually("the endpoint to stop with the simulator", || async {
        Ok(http(ip, 9091, "GET", "/").await.is_err().then_some(()))
    })
    .await?;
    Ok(())
}
