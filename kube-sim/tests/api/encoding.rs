//! The byte order of JSON responses: built-in kinds are Go structs on a real server, so an object, a list, a watch
//! event's object and a `Status` start with `kind` then `apiVersion`; custom resources are unstructured maps, which
//! Go's encoder writes with sorted keys (`apiVersion` first, a list's `items` before its `kind`).

use anyhow::{Context, Result};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn built_in_objects_start_with_kind_then_api_version() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let mut w = raw.watch("/api/v1/namespaces/default/configmaps?watch=true").await?;
    let created = raw.post("/api/v1/namespaces/default/configmaps", &json!({"metadata": {"name": "order"}})).await?;
    assert!(created.text.starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#), "{}", created.text);
    let event = w.next_line().await?.context("watch event")?;
    assert!(
        event.starts_with(r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#),
        "{event}"
    );
    let got = raw.get("/api/v1/namespaces/default/configmaps/order").await?;
    assert!(got.text.starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#), "{}", got.text);
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let created = raw.post("/api/v1/namespaces/default/pods", &pod).await?;
    assert!(created.text.starts_with(r#"{"kind":"Pod","apiVersion":"v1","metadata":{"#), "{}", created.text);
    let list = raw.get("/api/v1/namespaces/default/pods").await?;
    assert!(list.text.starts_with(r#"{"kind":"PodList","apiVersion":"v1","metadata":{"#), "{}", list.text);
    let deployments = raw.get("/apis/apps/v1/deployments").await?;
    assert!(deployments.text.starts_with(r#"{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"#));
    // Status: kind, apiVersion, metadata, status, message, reason, details, code (the struct's field order).
    let missing = raw.get("/api/v1/namespaces/default/pods/nope").await?;
    assert_eq!(
        missing.text.trim_end(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"nope\" not found","reason":"NotFound","details":{"name":"nope","kind":"pods"},"code":404}"#
    );
    let groups = raw.get("/apis").await?;
    assert!(groups.text.starts_with(r#"{"kind":"APIGroupList","apiVersion":"v1","#), "{}", groups.text);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn custom_resources_keep_the_unstructured_sorted_order() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    install_test_crd(&client).await?;
    let raw = Raw::new(&sim);
    let path = "/apis/sim.kube-sim.test/v1alpha1/namespaces/default/gameservers";
    let created = raw.post(path, &serde_json::to_value(gameserver("web"))?).await?;
    assert_eq!(created.status, 201, "{}", created.text);
    assert!(
        created.text.starts_with(r#"{"apiVersion":"sim.kube-sim.test/v1alpha1","kind":"GameServer","metadata":{"#),
        "{}",
        created.text
    );
    let list = raw.get(path).await?;
    assert!(
        list.text.starts_with(r#"{"apiVersion":"sim.kube-sim.test/v1alpha1","items":[{"apiVersion":"#),
        "{}",
        list.text
    );
    assert!(list.text.contains(r#"],"kind":"GameServerList","metadata":{"#), "{}", list.text);
    sim.shutdown().await;
    Ok(())
}
