//! `componentstatuses`: computed on every read, never stored, read-only, each answer with kube-apiserver's
//! deprecation warning.

use anyhow::Result;
use k8s_openapi::api::core::v1::ComponentStatus;
use kube::api::{Api, ListParams};
use kube_sim::{KubeletConfig, SimConfig};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn component_statuses_are_served_read_only_with_the_deprecation_warning() -> Result<()> {
    let sim = sim_with(SimConfig { kubelet: Some(KubeletConfig::default()), ..SimConfig::default() }).await?;
    let statuses: Api<ComponentStatus> = Api::all(sim.client().await);
    let scheduler = statuses.get("scheduler").await?;
    let healthy = &scheduler.conditions.as_deref().unwrap_or_default()[0];
    assert_eq!((healthy.type_.as_str(), healthy.status.as_str()), ("Healthy", "True"));
    let names: Vec<String> =
        statuses.list(&ListParams::default()).await?.items.into_iter().filter_map(|s| s.metadata.name).collect();
    assert_eq!(names, ["controller-manager", "etcd-0", "scheduler"]);

    let raw = Raw::new(&sim);
    let list = raw.get("/api/v1/componentstatuses").await?;
    assert_eq!(list.status, 200);
    assert_eq!(
        list.headers.get("warning").and_then(|w| w.to_str().ok()),
        Some("299 - \"v1 ComponentStatus is deprecated in v1.19+\"")
    );
    assert!(list.body["items"][0].get("kind").is_none(), "list items carry no kind: {}", list.text);
    assert_eq!(list.body["items"][0]["metadata"], json!({"name": "controller-manager", "creationTimestamp": null}));
    // An unknown component is the storage's plain error, as in kube-apiserver.
    let unknown = raw.get("/api/v1/componentstatuses/kube-dns").await?;
    assert_eq!((unknown.status, unknown.body["message"].as_str()), (500, Some("Component not found: kube-dns")));
    // No watch, no writes.
    let watch = raw.get("/api/v1/componentstatuses?watch=true").await?;
    assert_eq!(watch.status, 405, "{}", watch.text);
    assert_eq!(watch.body["message"], "watch is not supported on resources of kind \"componentstatuses\"");
    let create = raw.post("/api/v1/componentstatuses", &json!({"metadata": {"name": "x"}})).await?;
    assert_eq!(create.status, 405, "{}", create.text);
    Ok(())
}

#[tokio::test]
async fn without_the_kubelet_simulator_the_scheduler_is_unhealthy() -> Result<()> {
    let sim = sim().await?;
    let statuses: Api<ComponentStatus> = Api::all(sim.client().await);
    let scheduler = statuses.get("scheduler").await?;
    let healthy = &scheduler.conditions.as_deref().unwrap_or_default()[0];
    assert_eq!(healthy.status, "False");
    assert!(healthy.error.as_deref().is_some_and(|e| e.contains("connection refused")), "{healthy:?}");
    Ok(())
}
