//! The kubelet simulator keeps its promises while the API server misbehaves: injected 500s and
//! 409s on every write it makes, and watches cut every few hundred milliseconds.

use crate::kubelet_support;

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube_sim::{FaultConfig, FaultRule};
use kubelet_support::*;
use serde_json::json;

const PODS: usize = 20;

/// Retries one of the test's own calls through the injected faults.
async fn retry<T, F, Fut>(mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0;
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(e) if attempt < 100 => {
                attempt += 1;
                tracing::debug!(error = %e, "test call failed; retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[tokio::test]
async fn pods_run_update_and_go_away_despite_errors_conflicts_and_dropped_watches() -> Result<()> {
    let sim = start().await?;
    sim.set_faults(FaultConfig {
        rules: vec![
            FaultRule {
                resources: ["pods/status", "pods/binding", "nodes/status", "events"].map(String::from).to_vec(),
                error_rate: 0.25,
                conflict_rate: 0.25,
                ..Default::default()
            },
            FaultRule {
                verbs: vec!["delete".into()],
                resources: vec!["pods".into()],
                error_rate: 0.25,
                ..Default::default()
            },
            FaultRule { verbs: vec!["watch".into()], watch_drop_after_ms: Some(300), ..Default::default() },
        ],
    });
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    for i in 0..PODS {
        let mut pod = pod(&format!("flaky-{i}"), vec![container("app", "app:v1", &[])], &[]);
        pod.metadata.labels = Some([("flaky".to_string(), "yes".to_string())].into());
        let params = Default::default();
        retry(|| pods.create(&params, &pod)).await?;
    }
    let selector = ListParams::default().labels("flaky=yes");
    eventually("every pod Ready with its own IP", || async {
        let list = pods.list(&selector).await?;
        let ready = list.items.iter().filter(|p| is_ready(p)).count();
        let ips: HashSet<_> = list.items.iter().filter_map(|p| pod_ip(p).ok()).collect();
        Ok((ready == PODS && ips.len() == PODS).then_some(()))
    })
    .await?;

    for i in 0..5 {
        let name = format!("flaky-{i}");
        let patch = Patch::Strategic(json!({"spec": {"containers": [{"name": "app", "image": "app:v2"}]}}));
        let params = PatchParams::default();
        retry(|| pods.patch(&name, &params, &patch)).await?;
    }
    for i in 0..5 {
        wait_pod(&pods, &format!("flaky-{i}"), "restarted on app:v2 and Ready", |p| {
            container_status(p, "app").is_some_and(|s| s.image == "app:v2" && s.restart_count == 1 && s.ready)
        })
        .await?;
    }

    for i in 0..PODS {
        let name = format!("flaky-{i}");
        let params = DeleteParams::default();
        retry(|| pods.delete(&name, &params)).await?;
    }
    eventually("every pod gone", || async { Ok(pods.list(&selector).await?.items.is_empty().then_some(())) }).await?;
    sim.set_faults(FaultConfig::default());
    sim.shutdown().await;
    Ok(())
}
