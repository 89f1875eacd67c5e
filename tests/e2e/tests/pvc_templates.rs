//! `spec.volumeClaimTemplates` end to end (seed 003 "支持 PVC 模板") on kube-sim's simulated provisioner, with the
//! real kubectl:
//!
//! 1. each pod gets its claim `data-<gamedeployment>-<instance id>`, labelled with the pod's instance id, owned by
//!    the GameDeployment, Bound, and mounted as the pod's `data` volume;
//! 2. `kubectl delete pod` (out of band): the replacement has the same name and instance id and mounts the same
//!    claim (same UID);
//! 3. an in-place update keeps every claim (same UIDs);
//! 4. `kubectl scale` in: the deleted pod's claim is deleted with it;
//! 5. a recreate update (RollingUpdate): the old pod's claim goes, the new pod gets a new one;
//! 6. `scaleStrategy.disablePVCReuse: true`: a pod deleted out of band is replaced under a new instance id and its
//!    claim is deleted;
//! 7. a bad template name is refused by the CRD; deleting the GameDeployment garbage-collects the claims.

use std::collections::BTreeMap;

use e2e::Cluster;
use e2e::gamedeployment::{Columns, apply, pods, start_operator, wait_columns};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Api;

const NAME: &str = "pvc";
const ID: &str = "tkex.bkbcs.tencent.com/gamedeployment-instance-id";

fn manifest(replicas: i32, strategy: &str, image: &str) -> String {
    gamedeployment(NAME, "data", replicas, strategy, image)
}

/// The GameDeployment `name` with one claim template named `claim`.
fn gamedeployment(name: &str, claim: &str, replicas: i32, strategy: &str, image: &str) -> String {
    e2e::manifests::load!(
        "gamedeployment-pvc",
        name = name,
        claim = claim,
        replicas = replicas,
        strategy = strategy,
        image = image
    )
}

/// Live (not terminating) pods: name → instance id.
async fn live_pods(cluster: &Cluster) -> BTreeMap<String, (String, Pod)> {
    pods(cluster, NAME)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let id = p.metadata.labels.as_ref().and_then(|l| l.get(ID)).cloned().unwrap_or_default();
            (p.metadata.name.clone().unwrap_or_default(), (id, p))
        })
        .collect()
}

/// Claims that exist and are not being deleted: name → (uid, instance id, phase).
async fn claims(cluster: &Cluster) -> BTreeMap<String, (String, String, String)> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(cluster.client(), "default");
    let list = api.list(&kube::api::ListParams::default().labels(&format!("app={NAME}"))).await.expect("claims");
    list.items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| {
            let id = c.metadata.labels.as_ref().and_then(|l| l.get(ID)).cloned().unwrap_or_default();
            let phase = c.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            (c.metadata.name.clone().unwrap_or_default(), (c.metadata.uid.clone().unwrap_or_default(), id, phase))
        })
        .collect()
}

/// Waits until every live pod has exactly its Bound claim and no other claim exists; returns claim name → uid.
async fn one_bound_claim_per_pod(cluster: &Cluster, replicas: usize) -> BTreeMap<String, String> {
    e2e::wait_for("one Bound claim per pod, no other claim", e2e::DEADLINE, || async {
        let pods = live_pods(cluster).await;
        let claims = claims(cluster).await;
        let want: Vec<String> = pods.values().map(|(id, _)| format!("data-{NAME}-{id}")).collect();
        let mounted = pods.values().all(|(id, pod)| {
            pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).is_some_and(|vs| {
                vs.iter().any(|v| {
                    v.name == "data"
                        && v.persistent_volume_claim.as_ref().map(|c| c.claim_name.as_str())
                            == Some(format!("data-{NAME}-{id}").as_str())
                })
            })
        });
        let exact = pods.len() == replicas
            && claims.len() == replicas
            && want.iter().all(|n| claims.get(n).is_some_and(|(_, id, phase)| phase == "Bound" && n.ends_with(id)));
        (exact && mounted).then(|| claims.into_iter().map(|(n, (uid, _, _))| (n, uid)).collect())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_follow_their_pods() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let _operator = start_operator(&cluster);
    apply(&cluster, &manifest(3, "InplaceUpdate", "nginx:1")).await;
    wait_columns(&cluster, NAME, Columns::new(3, 3, 3, 3, 3)).await;

    // 1. One claim per pod, owned by the GameDeployment.
    let first = one_bound_claim_per_pod(&cluster, 3).await;
    println!("{}", cluster.kubectl_ok(&["get", "pvc", "-L", ID]).await);
    let owners = cluster
        .kubectl_ok(&[
            "get",
            "pvc",
            "-o",
            "jsonpath={range .items[*]}{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {end}",
        ])
        .await;
    assert_eq!(owners.split_whitespace().collect::<Vec<_>>(), vec![format!("GameDeployment/{NAME}"); 3]);

    // 2. Out-of-band deletion: same name, same instance id, same claim.
    let before = live_pods(&cluster).await;
    let victim = before.keys().next().cloned().expect("a pod");
    let old_uid = before[&victim].1.metadata.uid.clone();
    cluster.kubectl_ok(&["delete", "pod", &victim, "--wait=false"]).await;
    e2e::wait_for("the replacement under the same name", e2e::DEADLINE, || async {
        let pods = live_pods(&cluster).await;
        let back = pods.get(&victim).is_some_and(|(_, p)| p.metadata.uid != old_uid);
        (back && pods.len() == 3).then_some(())
    })
    .await;
    wait_columns(&cluster, NAME, Columns::new(3, 3, 3, 3, 3)).await;
    assert_eq!(one_bound_claim_per_pod(&cluster, 3).await, first, "the replacement reuses the claim");

    // 3. In-place update: claims kept.
    let patch = r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:2"}]"#;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", patch]).await;
    wait_columns(&cluster, NAME, Columns::new(3, 3, 3, 3, 3)).await;
    e2e::wait_for("every pod on nginx:2", e2e::DEADLINE, || async {
        let pods = live_pods(&cluster).await;
        pods.values().all(|(_, p)| e2e::gamedeployment::image(p) == Some("nginx:2")).then_some(())
    })
    .await;
    assert_eq!(one_bound_claim_per_pod(&cluster, 3).await, first, "in-place updates keep the claims");

    // 4. Scale in: the deleted pod's claim goes with it.
    cluster.kubectl_ok(&["scale", "gamedeployment", NAME, "--replicas=2"]).await;
    wait_columns(&cluster, NAME, Columns::new(2, 2, 2, 2, 2)).await;
    let scaled = one_bound_claim_per_pod(&cluster, 2).await;
    assert!(scaled.iter().all(|(n, uid)| first.get(n) == Some(uid)), "the kept pods keep their claims");
    let events = cluster.kubectl_ok(&["get", "events", "--field-selector", "reason=SuccessfulDeletePVC"]).await;
    println!("{events}");
    assert!(events.contains("with pod"), "{events}");

    // 5. Recreate update: new pods, new claims, the old claims deleted.
    let recreate = r#"[{"op": "replace", "path": "/spec/updateStrategy/type", "value": "RollingUpdate"},
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:3"}]"#;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", recreate]).await;
    e2e::wait_for("every pod recreated on nginx:3", e2e::DEADLINE, || async {
        let pods = live_pods(&cluster).await;
        (pods.len() == 2 && pods.values().all(|(_, p)| e2e::gamedeployment::image(p) == Some("nginx:3"))).then_some(())
    })
    .await;
    wait_columns(&cluster, NAME, Columns::new(2, 2, 2, 2, 2)).await;
    let recreated = one_bound_claim_per_pod(&cluster, 2).await;
    assert!(recreated.keys().all(|n| !scaled.contains_key(n)), "new claims {recreated:?}, old {scaled:?}");

    // 6. disablePVCReuse: a pod deleted out of band gets a new instance id; its claim is deleted.
    let reuse = r#"[{"op": "add", "path": "/spec/scaleStrategy", "value": {"disablePVCReuse": true}}]"#;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", reuse]).await;
    let victim = live_pods(&cluster).await.keys().next().cloned().expect("a pod");
    cluster.kubectl_ok(&["delete", "pod", &victim, "--wait=false"]).await;
    wait_columns(&cluster, NAME, Columns::new(2, 2, 2, 2, 2)).await;
    let after = one_bound_claim_per_pod(&cluster, 2).await;
    assert!(!live_pods(&cluster).await.contains_key(&victim), "a new name for the replacement");
    assert!(!after.contains_key(&format!("data-{victim}")), "the old claim is deleted: {after:?}");

    // 7. Validation and garbage collection.
    let bad = gamedeployment("bad", "Data_Vol", 1, "RollingUpdate", "nginx:1");
    let path = cluster.dir().join("bad.yaml");
    std::fs::write(&path, bad).expect("written");
    let out = cluster.kubectl(&["apply", "-f", &path.display().to_string()]).await;
    println!("$ kubectl apply -f bad.yaml (template name Data_Vol)\n{}{}", out.stdout, out.stderr);
    assert!(!out.success && out.stderr.contains("volumeClaimTemplates"), "{}", out.stderr);
    cluster.kubectl_ok(&["delete", "gamedeployment", NAME]).await;
    e2e::wait_for("the claims to be garbage-collected", e2e::DEADLINE, || async {
        claims(&cluster).await.is_empty().then_some(())
    })
    .await;
}
