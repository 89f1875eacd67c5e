//! The Eviction subresource and PodDisruptionBudget status, as the eviction REST storage and
//! the disruption controller implement them. Pods are made Running and Ready by hand (no
//! kubelet), and scheduled to a node so that their deletion is graceful.

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::*;

async fn running_pod(pods: &Api<Pod>, name: &str, ready: bool) -> Result<()> {
    let p = json!({"metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]}});
    pods.create(&PostParams::default(), &serde_json::from_value(p)?).await?;
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await?;
    Ok(())
}

fn eviction(name: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}})
}

async fn pdb_status(pdbs: &Api<PodDisruptionBudget>, name: &str, allowed: i32) -> Result<Value> {
    eventually(&format!("pdb {name} to allow {allowed}"), || async {
        let p = pdbs.get(name).await?;
        let st = p.status.clone().unwrap_or_default();
        Ok((st.observed_generation == p.metadata.generation && st.disruptions_allowed == Some(allowed))
            .then(|| serde_json::to_value(&p).unwrap_or_default()))
    })
    .await
}

#[tokio::test]
async fn evictions_respect_pod_disruption_budgets() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let raw = Raw::new(&sim);
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    for n in ["a", "b", "c"] {
        running_pod(&pods, n, true).await?;
    }
    let pdb =
        json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}});
    pdbs.create(&PostParams::default(), &serde_json::from_value(pdb)?).await?;
    let p = pdb_status(&pdbs, "web", 1).await?;
    assert_eq!(
        (&p["status"]["expectedPods"], &p["status"]["currentHealthy"], &p["status"]["desiredHealthy"]),
        (&json!(3), &json!(3), &json!(2))
    );
    assert_eq!(p["status"]["conditions"][0]["reason"], "SufficientPods");

    // Discovery announces the subresource the way kubectl drain looks for it.
    let core = raw.get("/api/v1").await?.body;
    let sub = core["resources"].as_array().into_iter().flatten().find(|r| r["name"] == "pods/eviction").cloned();
    assert_eq!(
        sub.map(|s| (s["group"].clone(), s["version"].clone(), s["kind"].clone(), s["verbs"].clone())),
        Some((json!("policy"), json!("v1"), json!("Eviction"), json!(["create"])))
    );

    // Dry run: allowed, nothing changes.
    let dry = raw.post("/api/v1/namespaces/default/pods/a/eviction?dryRun=All", &eviction("a")).await?;
    assert_eq!(dry.status, 201, "{}", dry.text);
    assert!(pods.get("a").await?.metadata.deletion_timestamp.is_none());
    // The first eviction consumes the budget.
    let r = raw.post("/api/v1/namespaces/default/pods/a/eviction", &eviction("a")).await?;
    assert_eq!(
        (r.status, &r.body),
        (201, &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
    );
    let a = pods.get("a").await?;
    assert!(a.metadata.deletion_timestamp.is_some(), "deleted gracefully");
    let target =
        a.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "DisruptionTarget");
    assert_eq!(
        target.map(|c| (c.status, c.reason, c.message)),
        Some(("True".into(), Some("EvictionByEvictionAPI".into()), Some("Eviction API: evicting".into())))
    );
    // The second would leave 1 < 2 healthy: 429, as kubectl drain and the autoscaler expect.
    let r = raw.post("/api/v1/namespaces/default/pods/b/eviction", &eviction("b")).await?;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.body["reason"], "TooManyRequests");
    assert_eq!(r.body["message"], "Cannot evict pod as it would violate the pod's disruption budget.");
    assert_eq!(
        r.body["details"]["causes"],
        json!([{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}])
    );
    assert!(r.headers.get("retry-after").is_none());
    assert!(pods.get("b").await?.metadata.deletion_timestamp.is_none());
    let p = pdb_status(&pdbs, "web", 0).await?;
    assert_eq!(p["status"]["conditions"][0]["reason"], "InsufficientPods");

    // A replacement becoming Ready gives the budget back.
    running_pod(&pods, "d", true).await?;
    pdb_status(&pdbs, "web", 1).await?;
    // An unready pod may go without consuming the budget while enough others are healthy.
    running_pod(&pods, "sick", false).await?;
    pdb_status(&pdbs, "web", 1).await?;
    assert_eq!(raw.post("/api/v1/namespaces/default/pods/sick/eviction", &eviction("sick")).await?.status, 201);
    assert_eq!(pdbs.get("web").await?.status.and_then(|s| s.disruptions_allowed), Some(1));
    // Pending pods (never running) are not protected.
    pods.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "new", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}))?).await?;
    assert_eq!(raw.post("/api/v1/namespaces/default/pods/new/eviction", &eviction("new")).await?.status, 201);

    // Errors.
    assert_eq!(raw.post("/api/v1/namespaces/default/pods/nope/eviction", &eviction("nope")).await?.status, 404);
    let r = raw.post("/api/v1/namespaces/default/pods/b/eviction", &eviction("c")).await?;
    assert_eq!(
        (r.status, r.body["message"].as_str()),
        (400, Some("name in URL does not match name in Eviction object"))
    );
    let second = json!({"metadata": {"name": "all"}, "spec": {"maxUnavailable": 1, "selector": {}}});
    pdbs.create(&PostParams::default(), &serde_json::from_value(second)?).await?;
    let r = raw.post("/api/v1/namespaces/default/pods/b/eviction", &eviction("b")).await?;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.body["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn percentage_budgets_count_the_controllers_scale() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let gs = install_test_crd(&client).await?;
    let mut owner = gameserver("g");
    owner.data["spec"]["replicas"] = json!(4);
    let owner = gs.create(&PostParams::default(), &owner).await?;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for n in ["g-1", "g-2", "g-3"] {
        running_pod(&pods, n, true).await?;
        let refs = json!({"metadata": {"ownerReferences": [{"apiVersion": "sim.kube-sim.test/v1alpha1", "kind": "GameServer",
            "name": "g", "uid": owner.metadata.uid, "controller": true}]}});
        pods.patch(n, &PatchParams::default(), &Patch::Merge(refs)).await?;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    let pdb = json!({"metadata": {"name": "half"}, "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "web"}}}});
    pdbs.create(&PostParams::default(), &serde_json::from_value(pdb)?).await?;
    // 4 expected (the GameServer's scale), 50% of 4 may be unavailable: 2 desired, 3 healthy.
    let p = pdb_status(&pdbs, "half", 1).await?;
    assert_eq!((&p["status"]["expectedPods"], &p["status"]["desiredHealthy"]), (&json!(4), &json!(2)));
    gs.patch_scale("g", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 6}}))).await?;
    let p = pdb_status(&pdbs, "half", 0).await?;
    assert_eq!((&p["status"]["expectedPods"], &p["status"]["desiredHealthy"]), (&json!(6), &json!(3)));
    sim.shutdown().await;
    Ok(())
}
