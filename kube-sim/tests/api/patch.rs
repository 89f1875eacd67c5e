//! Patch types: JSON patch, JSON merge patch, strategic merge patch (merge keys and
//! directives) and server-side apply (ownership, conflicts, force, removal of applied fields).

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

fn deployment() -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
            {"name": "a", "image": "nginx:1.26", "env": [{"name": "X", "value": "1"}], "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "busybox:1.36"}
        ]}}}
    }))?)
}

#[tokio::test]
async fn json_merge_and_strategic_patches() -> Result<()> {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client().await);
    api.create(&PostParams::default(), &deployment()?).await?;
    let pp = PatchParams::default();
    // Strategic merge: containers merge by name, env by name; other containers are kept.
    let d = api
        .patch("web", &pp, &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "busybox:1.37", "env": [{"name": "Y", "value": "2"}]}]}}}})))
        .await?;
    let cs = d.spec.template.spec.context("pod spec")?.containers;
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0].image.as_deref(), Some("nginx:1.26"));
    assert_eq!(cs[1].image.as_deref(), Some("busybox:1.37"));
    assert_eq!(cs[1].env.as_ref().map(Vec::len), Some(1));
    // JSON merge patch replaces lists wholesale.
    let d = api
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}})),
        )
        .await?;
    let cs = d.spec.template.spec.context("pod spec")?.containers;
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0].image_pull_policy.as_deref(), Some("IfNotPresent"), "defaults apply to patched objects");
    // JSON patch, including a failing test operation (422).
    let d = api
        .patch(
            "web",
            &pp,
            &Patch::Json::<()>(serde_json::from_value(
                json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "x:2"}]),
            )?),
        )
        .await?;
    assert_eq!(d.spec.template.spec.context("pod spec")?.containers[0].image.as_deref(), Some("x:2"));
    let err = api_error(
        api.patch(
            "web",
            &pp,
            &Patch::Json::<()>(serde_json::from_value(json!([{"op": "test", "path": "/spec/replicas", "value": 99}]))?),
        )
        .await,
    )?;
    assert_eq!(err.code, 422);
    // $patch: delete and $deleteFromPrimitiveList.
    let pods: Api<Pod> = Api::default_namespaced(sim.client().await);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "p", "finalizers": ["a.io/x", "a.io/y"]}, "spec": {"containers": [{"name": "c", "image": "i"}]}}))?,
    )
    .await?;
    let p = pods
        .patch("p", &pp, &Patch::Strategic(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/x"]}})))
        .await?;
    assert_eq!(p.metadata.finalizers, Some(vec!["a.io/y".to_string()]));
    // Conditions merge by type on pods/status (what kubelets and controllers rely on).
    pods.patch_status(
        "p",
        &pp,
        &Patch::Strategic(json!({"status": {"conditions": [{"type": "example.com/gate", "status": "False"}]}})),
    )
    .await?;
    let p = pods
        .patch_status(
            "p",
            &pp,
            &Patch::Strategic(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})),
        )
        .await?;
    let types: Vec<String> =
        p.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().map(|c| c.type_).collect();
    assert_eq!(types, vec!["example.com/gate", "Ready"]);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn server_side_apply_tracks_ownership_and_conflicts() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let apply =
        |manager: &str, force: bool| PatchParams { field_manager: Some(manager.into()), force, ..Default::default() };
    let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "labels": {"a": "1"}}, "data": {"x": "1", "y": "2"}});
    // Apply creates.
    let c = api.patch("ssa", &apply("helm", false), &Patch::Apply(cfg.clone())).await?;
    assert_eq!(c.data.clone().unwrap_or_default().len(), 2);
    let mf = c.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(mf.len(), 1);
    assert_eq!((mf[0].manager.as_deref(), mf[0].operation.as_deref()), (Some("helm"), Some("Apply")));
    // Another manager changes x through a regular patch and takes ownership of it.
    api.patch(
        "ssa",
        &PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() },
        &Patch::Merge(json!({"data": {"x": "edited"}})),
    )
    .await?;
    // Re-applying x=1 conflicts with the new owner.
    let err = api_error(api.patch("ssa", &apply("helm", false), &Patch::Apply(cfg.clone())).await)?;
    assert_eq!(err.code, 409);
    assert_eq!(err.message, "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .data.x");
    // Forcing takes ownership back; dropping y from the config removes it.
    let forced = api
        .patch("ssa", &apply("helm", true), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "labels": {"a": "1"}}, "data": {"x": "1"}})))
        .await?;
    assert_eq!(
        forced.data.unwrap_or_default().into_iter().collect::<Vec<_>>(),
        vec![("x".to_string(), "1".to_string())]
    );
    let managers: Vec<String> =
        forced.metadata.managed_fields.unwrap_or_default().into_iter().filter_map(|m| m.manager).collect();
    assert_eq!(managers, vec!["helm"]);
    // Apply requires a field manager.
    let raw = Raw::new(&sim);
    let r = raw.patch("/api/v1/namespaces/default/configmaps/ssa", "application/apply-patch+yaml", &cfg).await?;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    // A partial apply of a built-in kind (no selector/template) updates what it names.
    let deploys: Api<Deployment> = Api::default_namespaced(sim.client().await);
    deploys.create(&PostParams::default(), &deployment()?).await?;
    let scaled = deploys
        .patch("web", &apply("autoscaler", true), &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}})))
        .await?;
    assert_eq!(scaled.spec.replicas, Some(5));
    sim.shutdown().await;
    Ok(())
}

/// Concurrent patches without a resourceVersion never fail with a conflict: like the API server's
/// `GuaranteedUpdate`, kube-sim applies a patch again to the object a concurrent write left. A patch was refused with
/// 409 when another write landed between its read and its commit (an e2e test's label patch on a pod the operators
/// were writing failed so). A patch that names a stale resourceVersion still gets 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_patches_without_a_resource_version_all_apply() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "busy"}}))?;
    let created = api.create(&PostParams::default(), &cm).await?;
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let api = api.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    let patch = json!({"data": {format!("k{t}-{i}"): "v"}});
                    api.patch("busy", &PatchParams::default(), &Patch::Merge(&patch)).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let data = api.get("busy").await?.data.unwrap_or_default();
    assert_eq!(data.len(), 400, "every patch applied");
    let stale = created.metadata.resource_version.clone().context("resourceVersion")?;
    let err = api_error(
        api.patch(
            "busy",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": stale}, "data": {"late": "v"}})),
        )
        .await,
    )?;
    assert_eq!(err.code, 409);
    Ok(())
}
