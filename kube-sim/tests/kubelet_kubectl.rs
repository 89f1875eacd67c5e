//! What people see with the real kubectl: `get pods -o wide` columns filled by the kubelet
//! simulator, RESTARTS after an in-place update, and `describe pod` with conditions and events.

use crate::kubelet_support;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kubelet_support::*;

#[tokio::test]
async fn kubectl_shows_pods_as_on_a_cluster() -> Result<()> {
    let sim = start().await?;
    let (dir, kubeconfig) = kubeconfig_dir(&sim, "kubelet-kubectl")?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    create(&pods, &pod("web", vec![container("python", "python:latest", &[8000])], &[])).await?;
    let ready = wait_pod(&pods, "web", "Ready", is_ready).await?;
    let ip = pod_ip(&ready)?.to_string();
    let node = ready.spec.as_ref().and_then(|s| s.node_name.clone()).context("nodeName")?;

    let wide = kubectl(&kubeconfig, &["get", "pods", "-o", "wide"]).await?;
    let row = wide.lines().find(|line| line.starts_with("web ")).context("web row")?;
    let columns: Vec<_> = row.split_whitespace().collect();
    assert_eq!(&columns[1..4], ["1/1", "Running", "0"], "{wide}");
    assert!(columns.contains(&ip.as_str()) && columns.contains(&node.as_str()), "{wide}");

    kubectl(
        &kubeconfig,
        &[
            "patch",
            "pod",
            "web",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/containers/0/image","value":"python:3.5"}]"#,
        ],
    )
    .await?;
    wait_pod(&pods, "web", "restarted and Ready", |p| {
        container_status(p, "python").is_some_and(|s| s.restart_count == 1 && s.ready)
    })
    .await?;
    let table = kubectl(&kubeconfig, &["get", "pod", "web"]).await?;
    let row = table.lines().find(|line| line.starts_with("web ")).context("web row")?;
    let columns: Vec<_> = row.split_whitespace().collect();
    assert_eq!(&columns[1..3], ["1/1", "Running"], "{table}");
    assert_eq!(columns[3], "1", "RESTARTS after the in-place update: {table}");

    let describe = eventually("describe to list the kubelet's events", || async {
        let text = kubectl(&kubeconfig, &["describe", "pod", "web"]).await?;
        Ok(text.contains("Started container python").then_some(text))
    })
    .await?;
    for expected in [
        format!("Node:             {node}/127.0.100."),
        format!("IP:               {ip}"),
        "Status:           Running".to_string(),
        "Restart Count:  1".to_string(),
        "Successfully assigned default/web to".to_string(),
        "Container python definition changed, will be restarted".to_string(),
    ] {
        assert!(describe.contains(&expected), "{expected:?} not in:\n{describe}");
    }
    std::fs::remove_dir_all(&dir)?;
    sim.shutdown().await;
    Ok(())
}
