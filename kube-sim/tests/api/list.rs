//! Lists: pagination (consistent snapshots, `remainingItemCount`, expired continue tokens),
//! label and field selectors, resourceVersion semantics, discovery and OpenAPI documents.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube_sim::SimConfig;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn pagination_is_a_consistent_snapshot() -> Result<()> {
    let sim = sim_with(SimConfig { kubelet: None, watch_history: 50, ..SimConfig::default() }).await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    for i in 0..7 {
        api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("c{i}")}}))?)
            .await?;
    }
    let page1 = api.list(&ListParams::default().limit(3)).await?;
    assert_eq!(page1.items.len(), 3);
    assert_eq!(page1.metadata.remaining_item_count, Some(4));
    let token = page1.metadata.continue_.clone().context("continue token")?;
    // Changes after the first page are invisible to the rest of this list.
    api.delete("c5", &Default::default()).await?;
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "c9"}}))?).await?;
    let page2 = api.list(&ListParams::default().limit(3).continue_token(&token)).await?;
    let names: Vec<String> = page2.items.iter().filter_map(|c| c.metadata.name.clone()).collect();
    assert_eq!(names, vec!["c3", "c4", "c5"]);
    assert_eq!(page2.metadata.resource_version, page1.metadata.resource_version);
    let page3 = api
        .list(&ListParams::default().limit(3).continue_token(page2.metadata.continue_.as_deref().context("token 2")?))
        .await?;
    let names: Vec<String> = page3.items.iter().filter_map(|c| c.metadata.name.clone()).collect();
    assert_eq!(names, vec!["c6"]);
    assert!(page3.metadata.continue_.is_none());
    // Once the history no longer covers the snapshot, the token is expired.
    for i in 0..60 {
        api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("z{i}")}}))?)
            .await?;
    }
    let err = api_error(api.list(&ListParams::default().limit(3).continue_token(&token)).await)?;
    assert_eq!((err.code, err.reason.as_str()), (410, "Expired"));
    assert!(err.message.starts_with("The provided continue parameter is too old"));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn label_and_field_selectors() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for (name, app, node) in [("a", "web", Some("n1")), ("b", "web", None), ("c", "db", Some("n1"))] {
        let mut p = json!({"metadata": {"name": name, "labels": {"app": app, "tier": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        pods.create(&PostParams::default(), &serde_json::from_value(p)?).await?;
    }
    let names =
        |l: kube::core::ObjectList<Pod>| l.items.into_iter().filter_map(|p| p.metadata.name).collect::<Vec<_>>();
    assert_eq!(names(pods.list(&ListParams::default().labels("app=web")).await?), vec!["a", "b"]);
    assert_eq!(
        names(pods.list(&ListParams::default().labels("app in (web,db),tier notin (b)")).await?),
        vec!["a", "c"]
    );
    assert_eq!(names(pods.list(&ListParams::default().labels("!missing,app!=web")).await?), vec!["c"]);
    assert_eq!(names(pods.list(&ListParams::default().fields("spec.nodeName=n1")).await?), vec!["a", "c"]);
    assert_eq!(names(pods.list(&ListParams::default().fields("spec.nodeName=")).await?), vec!["b"]);
    assert_eq!(
        names(pods.list(&ListParams::default().fields("status.phase=Pending,metadata.name!=a")).await?),
        vec!["b", "c"]
    );
    // Across namespaces.
    let all: Api<Pod> = Api::all(client.clone());
    assert_eq!(names(all.list(&ListParams::default().fields("metadata.namespace=default")).await?).len(), 3);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn resource_version_semantics_of_lists() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let a = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"v": "1"}}))?,
        )
        .await?;
    let rv_a = a.metadata.resource_version.clone().context("rv")?;
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "b"}}))?).await?;
    // Exact: the state at that version.
    let exact = raw
        .get(&format!("/api/v1/namespaces/default/configmaps?resourceVersion={rv_a}&resourceVersionMatch=Exact"))
        .await?;
    assert_eq!(exact.body["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(exact.body["metadata"]["resourceVersion"], json!(rv_a));
    // NotOlderThan a future version: 504 with a Retry-After, like the watch cache.
    let future = raw.get("/api/v1/namespaces/default/configmaps?resourceVersion=999999").await?;
    assert_eq!(future.status, 504);
    assert_eq!(future.body["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    let bad = raw.get("/api/v1/namespaces/default/configmaps?resourceVersionMatch=Exact").await?;
    assert_eq!(bad.status, 400);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn discovery_version_health_and_openapi() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let v = raw.get("/version").await?.body;
    assert_eq!(v["major"], "1");
    assert!(v["gitVersion"].as_str().unwrap_or("").starts_with("v1."));
    for probe in ["/healthz", "/livez", "/readyz", "/readyz/ping"] {
        let r = raw.get(probe).await?;
        assert_eq!((r.status, r.text.as_str()), (200, "ok"), "{probe}");
    }
    let api = raw.get("/api").await?.body;
    assert_eq!(api["kind"], "APIVersions");
    let groups = raw.get("/apis").await?.body;
    assert!(
        groups["groups"]
            .as_array()
            .context("groups")?
            .iter()
            .any(|g| g["name"] == "apps" && g["preferredVersion"]["version"] == "v1")
    );
    let aggregated = raw.aggregated_discovery().await?;
    assert_eq!(aggregated.headers.get("content-type").and_then(|v| v.to_str().ok()), Some(AGGREGATED_DISCOVERY));
    let apps = discovery_group(&aggregated.body, "apps")?;
    let deploy = apps["versions"][0]["resources"]
        .as_array()
        .context("resources")?
        .iter()
        .find(|r| r["resource"] == "deployments")
        .context("deployments")?
        .clone();
    assert_eq!(deploy["scope"], "Namespaced");
    assert!(
        deploy["subresources"]
            .as_array()
            .context("subresources")?
            .iter()
            .any(|s| s["subresource"] == "scale" && s["responseKind"]["kind"] == "Scale")
    );
    // OpenAPI v3: the index, and per-group documents kubectl reads.
    let index = raw.get("/openapi/v3").await?.body;
    let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().context("apps/v1 url")?.to_string();
    assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="));
    let doc = raw.get(&url).await?;
    assert_eq!(doc.headers.get("cache-control").and_then(|v| v.to_str().ok()), Some("public, immutable"));
    let patch = &doc.body["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert!(patch["parameters"].as_array().context("params")?.iter().any(|p| p["name"] == "fieldValidation"));
    let pod_spec = &doc.body["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(pod_spec["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(pod_spec["x-kubernetes-patch-strategy"], "merge");
    sim.shutdown().await;
    Ok(())
}

/// `apiregistration.k8s.io/v1` is served as on kube-apiserver: first in `/apis` and in aggregated discovery, with the
/// cluster-scoped `apiservices`, which lists one `Local`, `Available` APIService per built-in group version (named
/// `v1.`, `v1.apps`, `v2.autoscaling`, ... with the aggregator's priorities); the aggregator's own group has none.
#[tokio::test]
async fn apiservices_list_every_served_built_in_group_version() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let groups = raw.get("/apis").await?.body;
    assert_eq!(groups["groups"][0]["name"], "apiregistration.k8s.io");
    assert_eq!(groups["groups"][0]["preferredVersion"]["groupVersion"], "apiregistration.k8s.io/v1");
    let aggregated = raw.aggregated_discovery().await?.body;
    let group = discovery_group(&aggregated, "apiregistration.k8s.io")?;
    let resource = &group["versions"][0]["resources"][0];
    assert_eq!((resource["resource"].as_str(), resource["scope"].as_str()), (Some("apiservices"), Some("Cluster")));
    assert_eq!(resource["responseKind"]["kind"], "APIService");

    let list = raw.get("/apis/apiregistration.k8s.io/v1/apiservices").await?;
    assert_eq!(list.status, 200, "{}", list.text);
    assert_eq!(list.body["kind"], "APIServiceList");
    let items = list.body["items"].as_array().context("items")?;
    let names: Vec<&str> = items.iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    for expected in ["v1.", "v1.apps", "v1.authentication.k8s.io", "v2.autoscaling", "v1.apiextensions.k8s.io"] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    assert!(!names.iter().any(|n| n.ends_with(".apiregistration.k8s.io")), "{names:?}");
    let core = raw.get("/apis/apiregistration.k8s.io/v1/apiservices/v1.").await?.body;
    assert_eq!(core["spec"], json!({"version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}));
    assert_eq!(core["metadata"]["labels"], json!({"kube-aggregator.kubernetes.io/automanaged": "onstart"}));
    let apps = raw.get("/apis/apiregistration.k8s.io/v1/apiservices/v1.apps").await?.body;
    assert_eq!(
        apps["spec"],
        json!({"group": "apps", "version": "v1", "groupPriorityMinimum": 17800, "versionPriority": 15})
    );
    let available = &apps["status"]["conditions"][0];
    assert_eq!(
        (available["type"].as_str(), available["status"].as_str(), available["reason"].as_str()),
        (Some("Available"), Some("True"), Some("Local"))
    );
    assert_eq!(available["message"], "Local APIServices are always available");

    // The CRD registration controller's APIServices: one per served custom group version, gone with the CRD.
    let client = sim.client().await;
    install_test_crd(&client).await?;
    let path = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.sim.kube-sim.test";
    let crd_service = raw.get(path).await?.body;
    assert_eq!(
        crd_service["spec"],
        json!({"group": "sim.kube-sim.test", "version": "v1alpha1", "groupPriorityMinimum": 1000, "versionPriority": 100})
    );
    assert_eq!(crd_service["metadata"]["labels"], json!({"kube-aggregator.kubernetes.io/automanaged": "true"}));
    assert_eq!(crd_service["status"]["conditions"][0]["status"], "True");
    raw.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gameservers.sim.kube-sim.test", None).await?;
    kube_sim::testing::eventually("the CRD's APIService to go", || async {
        Ok((raw.get(path).await?.status == 404).then_some(()))
    })
    .await?;
    sim.shutdown().await;
    Ok(())
}
