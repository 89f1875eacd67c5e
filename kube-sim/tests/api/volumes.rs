//! PersistentVolumeClaims: default storage class, the simulated provisioner binding claims to
//! new volumes, claim protection while a pod uses the claim, and garbage collection of claims
//! owned by a workload (with their volumes).

use anyhow::Result;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::*;

fn claim(name: &str, class: Option<&str>, owner: Option<(&str, &str)>) -> Result<PersistentVolumeClaim> {
    let mut v = json!({"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}});
    if let Some(c) = class {
        v["spec"]["storageClassName"] = json!(c);
    }
    if let Some((kind_name, uid)) = owner {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "sim.kube-sim.test/v1alpha1", "kind": "GameServer",
            "name": kind_name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
    }
    Ok(serde_json::from_value(v)?)
}

async fn bound(claims: &Api<PersistentVolumeClaim>, name: &str) -> Result<PersistentVolumeClaim> {
    eventually(&format!("claim {name} bound"), || async {
        let c = claims.get(name).await?;
        Ok((c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")).then_some(c))
    })
    .await
}

#[tokio::test]
async fn claims_are_provisioned_bound_protected_and_released() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let created = claims.create(&PostParams::default(), &claim("data", None, None)?).await?;
    assert_eq!(created.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()), Some("standard"));
    assert_eq!(created.metadata.finalizers, Some(vec!["kubernetes.io/pvc-protection".to_string()]));
    let c = bound(&claims, "data").await?;
    let pv_name = format!("pvc-{}", c.metadata.uid.clone().unwrap_or_default());
    assert_eq!(c.spec.as_ref().and_then(|s| s.volume_name.clone()), Some(pv_name.clone()));
    let ann = c.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann.get("pv.kubernetes.io/bind-completed").map(String::as_str), Some("yes"));
    assert_eq!(
        ann.get("volume.kubernetes.io/storage-provisioner").map(String::as_str),
        Some("kube-sim.kourse.dev/hostpath")
    );
    let st = c.status.clone().unwrap_or_default();
    assert_eq!(st.capacity.and_then(|c| c.get("storage").map(|q| q.0.clone())), Some("2Gi".into()));
    let pv = volumes.get(&pv_name).await?;
    let pv_json = serde_json::to_value(&pv)?;
    assert_eq!(pv_json["status"]["phase"], "Bound");
    assert_eq!(pv_json["spec"]["claimRef"]["name"], "data");
    assert_eq!(pv_json["spec"]["persistentVolumeReclaimPolicy"], "Delete");

    // A class kube-sim does not provision, and an explicit "" (no class): the claim stays Pending.
    let scs: Api<StorageClass> = Api::all(client.clone());
    scs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "remote"}, "provisioner": "ebs.csi.aws.com"}))?,
    )
    .await?;
    claims.create(&PostParams::default(), &claim("elsewhere", Some("remote"), None)?).await?;
    claims.create(&PostParams::default(), &claim("static", Some(""), None)?).await?;
    // WaitForFirstConsumer: bound once a scheduled pod uses it.
    scs.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "late"}, "provisioner": "kube-sim.kourse.dev/hostpath", "volumeBindingMode": "WaitForFirstConsumer"}))?).await?;
    claims.create(&PostParams::default(), &claim("lazy", Some("late"), None)?).await?;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for n in ["elsewhere", "static", "lazy"] {
        let phase = claims.get(n).await?.status.and_then(|s| s.phase);
        assert_eq!(phase.as_deref(), Some("Pending"), "{n}");
    }
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod = json!({"metadata": {"name": "user"}, "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}, {"name": "l", "persistentVolumeClaim": {"claimName": "lazy"}}]}});
    pods.create(&PostParams::default(), &serde_json::from_value(pod)?).await?;
    let lazy = bound(&claims, "lazy").await?;
    let ann: Value = serde_json::to_value(&lazy.metadata.annotations)?;
    assert_eq!(ann["volume.kubernetes.io/selected-node"], "node-1");

    // Protection: deleting a claim in use leaves it Terminating until the pod is gone.
    claims.delete("data", &DeleteParams::default()).await?;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(claims.get("data").await?.metadata.deletion_timestamp.is_some());
    pods.patch_status("user", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Succeeded"}})))
        .await?;
    eventually("claim data deleted", || async { Ok(claims.get_opt("data").await?.is_none().then_some(())) }).await?;
    eventually("its volume deleted", || async { Ok(volumes.get_opt(&pv_name).await?.is_none().then_some(())) }).await?;
    sim.shutdown().await;
    Ok(())
}

/// The claims of a GameDeployment-shaped workload (one per pod, owned by the workload) are
/// garbage collected with it, and their volumes with them.
#[tokio::test]
async fn claims_owned_by_a_workload_are_garbage_collected_with_it() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let gs = install_test_crd(&client).await?;
    let owner = gs.create(&PostParams::default(), &gameserver("game")).await?;
    let uid = owner.metadata.uid.clone().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    for n in ["data-game-0", "data-game-1"] {
        claims.create(&PostParams::default(), &claim(n, None, Some(("game", &uid)))?).await?;
    }
    let mut volumes_of = Vec::new();
    for n in ["data-game-0", "data-game-1"] {
        volumes_of.push(bound(&claims, n).await?.spec.and_then(|s| s.volume_name).unwrap_or_default());
    }
    gs.delete("game", &DeleteParams::foreground()).await?;
    eventually("claims collected", || async {
        let left = claims.list(&Default::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await?;
    eventually("owner gone", || async { Ok(gs.get_opt("game").await?.is_none().then_some(())) }).await?;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for v in volumes_of {
        eventually(&format!("volume {v} deleted"), || async { Ok(volumes.get_opt(&v).await?.is_none().then_some(())) })
            .await?;
    }
    sim.shutdown().await;
    Ok(())
}
