//! Fault injection: errors and latency per verb/resource, forced conflicts, dropped watches,
//! configured by flags (`SimConfig::faults`) or at runtime through `/kube-sim/faults`.

use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_sim::{FaultConfig, FaultRule, SimConfig};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn injected_errors_latency_conflicts_and_dropped_watches() -> Result<()> {
    let faults = FaultConfig {
        rules: vec![FaultRule {
            verbs: vec!["list".into()],
            resources: vec!["secrets".into()],
            error_rate: 1.0,
            error_code: Some(503),
            ..Default::default()
        }],
    };
    let sim = sim_with(SimConfig { kubelet: None, faults, ..SimConfig::default() }).await?;
    let client = sim.client().await;
    let raw = Raw::new(&sim);
    let r = raw.get("/api/v1/namespaces/default/secrets").await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (503, Some("ServiceUnavailable")));
    assert_eq!(raw.get("/api/v1/namespaces/default/configmaps").await?.status, 200, "other resources unaffected");

    // Runtime configuration through the admin API: conflicts on every update of configmaps.
    let rules = json!({"rules": [{"verbs": ["patch", "update"], "resources": ["configmaps"], "conflictRate": 1.0, "latencyMs": 50}]});
    let set = raw.put("/kube-sim/faults", &rules).await?;
    assert_eq!(set.status, 200);
    assert_eq!(raw.get("/kube-sim/faults").await?.body["rules"][0]["conflictRate"], 1.0);
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "c"}}))?).await?;
    let started = std::time::Instant::now();
    let err = api_error(cms.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "b"}}))).await)?;
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(started.elapsed() >= std::time::Duration::from_millis(50), "latency is added before the error");
    cms.list(&ListParams::default()).await?;
    assert_eq!(raw.delete("/kube-sim/faults", None).await?.status, 200);
    cms.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "b"}}))).await?;

    // Dropped watches: every open watch ends.
    let mut w = raw.watch("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1").await?;
    let _ = w.next_event().await?;
    let dropped = raw.post("/kube-sim/faults/drop-watches", &json!({})).await?;
    assert!(dropped.body["dropped"].as_u64().unwrap_or(0) >= 1);
    let mut ended = false;
    for _ in 0..10 {
        if w.next().await?.is_none() {
            ended = true;
            break;
        }
    }
    assert!(ended, "the dropped watch ends");
    // Watches cut after a configured time.
    raw.put("/kube-sim/faults", &json!({"rules": [{"verbs": ["watch"], "watchDropAfterMs": 200}]})).await?;
    let rv = raw.get("/api/v1/namespaces/default/configmaps").await?.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mut cut = raw.watch(&format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}")).await?;
    assert!(cut.next().await?.is_none(), "the watch ends after watchDropAfterMs");
    sim.shutdown().await;
    Ok(())
}
