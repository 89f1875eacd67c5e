//! Deletion semantics: finalizers, deletionTimestamp, preconditions, graceful pod deletion,
//! owner-reference garbage collection (background, foreground with blockOwnerDeletion,
//! orphan) and deletecollection.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
use serde_json::{Value, json};

use crate::support::*;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "gc"}}})).unwrap_or_default()
}

fn owned(name: &str, owner: &ConfigMap, block: bool) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid,
        "controller": true, "blockOwnerDeletion": block
    }]}}))
    .unwrap_or_default()
}

#[tokio::test]
async fn finalizers_hold_deletion_and_cannot_be_added_once_deleting() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let mut c = cm("held");
    c.metadata.finalizers = Some(vec!["example.com/a".into()]);
    api.create(&PostParams::default(), &c).await?;
    let deleting = api
        .delete("held", &DeleteParams::default())
        .await?
        .left()
        .context("the object is returned while finalizers hold it")?;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(0));
    let err = api_error(
        api.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/a", "example.com/b"]}})),
        )
        .await,
    )?;
    assert_eq!(err.code, 422);
    assert!(err.message.contains("metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\"}"), "{}", err.message);
    // Other updates are still allowed; removing the last finalizer deletes the object.
    api.patch("held", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await?;
    api.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await?;
    assert!(api.get_opt("held").await?.is_none());
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn preconditions_and_deletecollection() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let a = api.create(&PostParams::default(), &cm("a")).await?;
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: Some("other".into()), resource_version: None }),
        ..Default::default()
    };
    let err = api_error(api.delete("a", &dp).await)?;
    assert_eq!(err.code, 409);
    assert_eq!(
        err.message,
        format!(
            "Operation cannot be fulfilled on configmaps \"a\": Precondition failed: UID in precondition: other, UID in object meta: {}",
            a.metadata.uid.clone().unwrap_or_default()
        )
    );
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: None, resource_version: Some("1".into()) }),
        ..Default::default()
    };
    assert_eq!(api_error(api.delete("a", &dp).await)?.code, 409);
    api.create(&PostParams::default(), &cm("b")).await?;
    let mut other = cm("c");
    other.metadata.labels = Some([("app".to_string(), "keep".to_string())].into());
    api.create(&PostParams::default(), &other).await?;
    let res = api.delete_collection(&DeleteParams::default(), &ListParams::default().labels("app=gc")).await?;
    let deleted: Vec<String> =
        res.left().context("list of deleted objects")?.items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert_eq!(deleted, vec!["a", "b"]);
    let left: Vec<String> =
        api.list(&ListParams::default()).await?.items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert!(left.contains(&"c".to_string()) && !left.contains(&"a".to_string()));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn background_deletion_collects_dependents() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let owners: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let deps: Api<Secret> = Api::default_namespaced(client.clone());
    let owner = owners.create(&PostParams::default(), &cm("owner")).await?;
    deps.create(&PostParams::default(), &owned("dep1", &owner, false)).await?;
    deps.create(&PostParams::default(), &owned("dep2", &owner, true)).await?;
    owners.delete("owner", &DeleteParams::background()).await?;
    assert!(owners.get_opt("owner").await?.is_none(), "background: the owner goes at once");
    eventually("dependents to be collected", || async {
        Ok((deps.get_opt("dep1").await?.is_none() && deps.get_opt("dep2").await?.is_none()).then_some(()))
    })
    .await?;
    // A dependent whose owner never existed (dangling reference) is collected too.
    let ghost: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"}}))?;
    deps.create(&PostParams::default(), &owned("orphaned", &ghost, false)).await?;
    eventually("the dangling dependent to be collected", || async {
        Ok(deps.get_opt("orphaned").await?.is_none().then_some(()))
    })
    .await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let owners: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let deps: Api<Secret> = Api::default_namespaced(client.clone());
    let owner = owners.create(&PostParams::default(), &cm("owner")).await?;
    let mut blocker = owned("blocker", &owner, true);
    blocker.metadata.finalizers = Some(vec!["example.com/slow".into()]);
    deps.create(&PostParams::default(), &blocker).await?;
    deps.create(&PostParams::default(), &owned("plain", &owner, false)).await?;
    let dp = DeleteParams { propagation_policy: Some(PropagationPolicy::Foreground), ..Default::default() };
    let marked = owners.delete("owner", &dp).await?.left().context("owner still present")?;
    assert!(marked.metadata.finalizers.unwrap_or_default().contains(&"foregroundDeletion".to_string()));
    assert!(marked.metadata.deletion_timestamp.is_some());
    eventually("the blocking dependent to be marked deleted", || async {
        Ok(deps.get_opt("blocker").await?.and_then(|s| s.metadata.deletion_timestamp).map(|_| ()))
    })
    .await?;
    eventually("the non-blocking dependent to go", || async {
        Ok(deps.get_opt("plain").await?.is_none().then_some(()))
    })
    .await?;
    // The owner waits for the blocking dependent.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(owners.get_opt("owner").await?.is_some(), "owner waits for blockOwnerDeletion dependents");
    deps.patch("blocker", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await?;
    eventually("the owner to be deleted", || async { Ok(owners.get_opt("owner").await?.is_none().then_some(())) })
        .await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_and_removes_their_owner_references() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let owners: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let deps: Api<Secret> = Api::default_namespaced(client.clone());
    let owner = owners.create(&PostParams::default(), &cm("owner")).await?;
    deps.create(&PostParams::default(), &owned("kept", &owner, true)).await?;
    owners.delete("owner", &DeleteParams::orphan()).await?;
    eventually("the owner to be deleted", || async { Ok(owners.get_opt("owner").await?.is_none().then_some(())) })
        .await?;
    let kept = deps.get("kept").await?;
    assert!(kept.metadata.owner_references.unwrap_or_default().is_empty(), "owner reference removed");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn pods_are_deleted_gracefully_once_scheduled() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let spec = |name: &str| -> Result<Pod> {
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"terminationGracePeriodSeconds": 30, "containers": [{"name": "c", "image": "app"}]}}),
        )?)
    };
    // Unscheduled pods are deleted immediately.
    pods.create(&PostParams::default(), &spec("pending")?).await?;
    let gone = pods.delete("pending", &DeleteParams::default()).await?;
    assert!(
        gone.left().is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "pods delete returns the deleted object"
    );
    assert!(pods.get_opt("pending").await?.is_none());

    // Scheduled (through pods/binding) pods get a deletion timestamp and grace period.
    pods.create(&PostParams::default(), &spec("running")?).await?;
    let raw = Raw::new(&sim);
    let b = raw
        .post(
            "/api/v1/namespaces/default/pods/running/binding",
            &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "running"}, "target": {"kind": "Node", "name": "node-1"}}),
        )
        .await?;
    assert_eq!(b.status, 201, "{}", b.text);
    let bound = pods.get("running").await?;
    assert_eq!(bound.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("node-1"));
    let conds = bound.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(conds.iter().any(|c| c.type_ == "PodScheduled" && c.status == "True"));
    let again = raw
        .post("/api/v1/namespaces/default/pods/running/binding", &json!({"target": {"kind": "Node", "name": "node-2"}}))
        .await?;
    assert_eq!(again.status, 409);
    assert_eq!(
        again.body["message"],
        "Operation cannot be fulfilled on pods/binding \"running\": pod running is already assigned to node \"node-1\""
    );

    let deleting = pods.delete("running", &DeleteParams::default()).await?.left().context("pod kept")?;
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(30));
    assert!(deleting.metadata.deletion_timestamp.is_some());
    // A longer grace period does not extend it; a shorter one shortens it.
    let longer = pods
        .delete("running", &DeleteParams { grace_period_seconds: Some(60), ..Default::default() })
        .await?
        .left()
        .context("kept")?;
    assert_eq!(longer.metadata.deletion_grace_period_seconds, Some(30));
    // Table output shows Terminating, like kubectl.
    let t = raw
        .send_with(
            "GET",
            "/api/v1/namespaces/default/pods/running",
            None,
            None,
            &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        )
        .await?
        .body;
    assert_eq!(t["rows"][0]["cells"][2], "Terminating");
    // The kubelet's final delete: grace 0 with a UID precondition.
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: deleting.metadata.uid.clone(), resource_version: None }),
        ..Default::default()
    };
    pods.delete("running", &dp).await?;
    assert!(pods.get_opt("running").await?.is_none());
    let _: Value = json!(null);
    sim.shutdown().await;
    Ok(())
}
