//! Moving a live OpenKruise CloneSet fleet to a GameDeployment with no pod restarted (issue 48), by the procedure of
//! the book's "Moving a live fleet" page: orphan the pods (`kubectl delete cloneset --cascade=orphan`), give each
//! pod the instance-id label (its name's last segment) and the CloneSet's revisions the GameDeployment name label,
//! then apply the CloneSet's manifest with only the kind changed. The CloneSet's pods, revision and template are
//! written as Kruise leaves them: the template defaulted by Kruise's webhook (`SetDefaultsPodSpec`) and stored by
//! Go in a `$patch: replace` revision, the pods labelled `controller-revision-hash` (the revision's name),
//! `apps.kruise.io/cloneset-instance-id` and `lifecycle.apps.kruise.io/state: Normal`, with the
//! `InPlaceUpdateReady` readiness gate. A watch on the pods runs from before the CloneSet is deleted. After the
//! takeover the user adds a pre-delete hook, and the next image change goes in place on every pod, each through
//! one Successful HookRun, under the strict gate checker.

use std::collections::{BTreeMap, BTreeSet};

use common::api::{GameDeployment, HookPhase, HookRun};
use common::keys;
use e2e::gamedeployment::{image, is_ready, revision, set_image, start_operator};
use e2e::observe::Observer;
use e2e::{Cluster, DEADLINE, wait_for};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::kubectl_gd::kubectl_gd;
use crate::takeover_support::{apply_drain_hook, gate_ready, revision_hash};

const NS: &str = "default";
const NAME: &str = "sample";

/// The CloneSet's template as the user wrote it (Kruise's documentation's shape).
fn written_template() -> Value {
    json!({"metadata": {"labels": {"app": NAME}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine",
        "resources": {"requests": {"cpu": "0.1", "memory": "128Mi"}}}]}})
}

/// The same template after Kruise's defaulting webhook and Go's re-encoding: what the revision and the pods hold.
fn stored_template() -> Value {
    json!({"metadata": {"creationTimestamp": null, "labels": {"app": NAME}}, "spec": {
        "containers": [{"name": "nginx", "image": "nginx:alpine", "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "securityContext": {}, "schedulerName": "default-scheduler"}})
}

/// The CloneSet's manifest; `kind` CloneSet or GameDeployment.
fn manifest(api_version: &str, kind: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": NAME, "namespace": NS, "labels": {"app": NAME}},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": NAME}}, "template": written_template(),
            "updateStrategy": {"type": "InPlaceIfPossible", "partition": 0, "maxUnavailable": 1}}})
}

async fn apply(cluster: &Cluster, file: &str, value: &Value) {
    let path = cluster.dir().join(file);
    std::fs::write(&path, value.to_string()).expect("manifest written");
    cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
}

/// A CloneSet fleet as Kruise leaves it: the CloneSet, its revision, 4 Running and Ready pods. Returns the revision's
/// name and the pods' names and uids.
async fn kruise_fleet(cluster: &Cluster) -> (String, BTreeMap<String, String>) {
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "clonesets.apps.kruise.io"},
        "spec": {"group": "apps.kruise.io", "scope": "Namespaced",
            "names": {"kind": "CloneSet", "plural": "clonesets", "singular": "cloneset", "listKind": "CloneSetList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    apply(cluster, "cloneset-crd.json", &crd).await;
    wait_for("clonesets to be served", DEADLINE, || async {
        cluster.kubectl(&["get", "clonesets"]).await.success.then_some(())
    })
    .await;
    apply(cluster, "cloneset.json", &manifest("apps.kruise.io/v1alpha1", "CloneSet")).await;
    let uid = cluster.kubectl_ok(&["get", "cloneset", NAME, "-o", "jsonpath={.metadata.uid}"]).await;
    let owner = json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": NAME, "uid": uid.trim(),
        "controller": true, "blockOwnerDeletion": true}]);

    let mut template = stored_template();
    template["$patch"] = json!("replace");
    let payload = json!({"spec": {"template": template}});
    let hash = revision_hash(&payload);
    let revision_name = format!("{NAME}-{hash}");
    let revision: ControllerRevision =
        serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": revision_name, "namespace": NS, "ownerReferences": owner,
            "labels": {"app": NAME, "controller.kubernetes.io/hash": hash}},
        "data": payload, "revision": 1}))
        .expect("a revision");
    let revisions: Api<ControllerRevision> = Api::namespaced(cluster.client(), NS);
    revisions.create(&PostParams::default(), &revision).await.expect("revision created");

    let pods_api: Api<Pod> = Api::namespaced(cluster.client(), NS);
    let mut pods = BTreeMap::new();
    for id in ["b2c4d", "f5g6h", "j7k8l", "m9n2p"] {
        let name = format!("{NAME}-{id}");
        let mut spec = stored_template()["spec"].clone();
        spec["readinessGates"] = json!([{"conditionType": "InPlaceUpdateReady"}]);
        let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "ownerReferences": owner, "labels": {"app": NAME,
                "controller-revision-hash": revision_name, "apps.kruise.io/cloneset-instance-id": id,
                "lifecycle.apps.kruise.io/state": "Normal"}},
            "spec": spec}))
        .expect("a pod");
        let pod = pods_api.create(&PostParams::default(), &pod).await.expect("pod created");
        pods.insert(name, pod.metadata.uid.expect("a uid"));
    }
    gate_ready(&pods_api, pods.keys()).await;
    (revision_name, pods)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloneset_fleet_moves_to_a_gamedeployment_with_no_pod_changed() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let (kruise_revision, pods) = kruise_fleet(&cluster).await;
    let watch = Observer::<Pod>::namespaced(&cluster, NS).await;
    let revisions = Observer::<ControllerRevision>::namespaced(&cluster, NS).await;
    let _operator = start_operator(&cluster);

    // The procedure of the book's page, with the real kubectl.
    cluster.kubectl_ok(&["delete", "cloneset", NAME, "--cascade=orphan"]).await;
    let pods_api: Api<Pod> = Api::namespaced(cluster.client(), NS);
    for pod in pods.keys() {
        wait_for(&format!("{pod} orphaned"), DEADLINE, || async {
            pods_api.get(pod).await.ok()?.metadata.owner_references.unwrap_or_default().is_empty().then_some(())
        })
        .await;
        let id = pod.rsplit('-').next().expect("a name with an id");
        cluster
            .kubectl_ok(&["label", "pod", pod, &format!("tkex.bkbcs.tencent.com/gamedeployment-instance-id={id}")])
            .await;
    }
    cluster
        .kubectl_ok(&[
            "label",
            "controllerrevision",
            "-l",
            &format!("app={NAME}"),
            &format!("gamedeployment.tkex.tencent.com/name={NAME}"),
        ])
        .await;
    apply(&cluster, "gamedeployment.json", &manifest("tkex.tencent.com/v1alpha1", "GameDeployment")).await;

    let gds: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    let status = wait_for("the operator's first status", DEADLINE, || async {
        let status = gds.get(NAME).await.ok()?.status?;
        status.current_revision.is_some().then_some(status)
    })
    .await;
    assert_eq!(status.update_revision.as_deref(), Some(kruise_revision.as_str()), "{status:?}");
    wait_for("4 pods adopted, updated and ready", DEADLINE, || async {
        let status = gds.get(NAME).await.ok()?.status?;
        (status.replicas == 4 && status.updated_ready_replicas == 4).then_some(())
    })
    .await;
    // The dry run agrees, after the fact: no pod would change.
    let plan = kubectl_gd(&cluster, &["plan", NAME, "--takeover"]).await;
    assert!(plan.stdout.contains("no pod would change"), "{}", plan.stdout);

    for seen in watch.versions() {
        let name = seen.name().to_string();
        assert_eq!(pods.get(&name).map(String::as_str), Some(seen.uid()), "{name} was created");
        assert!(!seen.deleted && seen.object.metadata.deletion_timestamp.is_none(), "{name} was deleted");
        assert_eq!(revision(&seen.object), Some(kruise_revision.as_str()), "{name} changed revision");
        assert_eq!(image(&seen.object), Some("nginx:alpine"), "{name} changed image");
        let restarts: i32 = seen
            .object
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .map(|c| c.restart_count)
            .sum();
        assert_eq!(restarts, 0, "{name} restarted");
    }
    let minted: Vec<String> =
        revisions.versions().iter().map(|r| r.name().to_string()).filter(|n| *n != kruise_revision).collect();
    assert!(minted.is_empty(), "revisions minted beside Kruise's: {minted:?}");
    // Every pod is the GameDeployment's now.
    for pod in pods_api.list(&Default::default()).await.expect("pods").items {
        let owner = pod.metadata.owner_references.unwrap_or_default();
        assert!(
            owner.iter().any(|o| o.kind == "GameDeployment" && o.controller == Some(true)),
            "{:?}",
            pod.metadata.name
        );
    }

    // Kruise's revision is used as it is: no owner reference is written on it.
    let kruise: Api<ControllerRevision> = Api::namespaced(cluster.client(), NS);
    let kept = kruise.get(&kruise_revision).await.expect("Kruise's revision");
    assert!(kept.metadata.owner_references.unwrap_or_default().is_empty(), "Kruise's revision was given an owner");

    // The user adds a pre-delete hook (BCS's walkthrough hook: a web probe reading an age above 30), served by the
    // hook-operator; adding it changes no pod.
    apply_drain_hook(&cluster, NS).await;
    let runs = Observer::<HookRun>::namespaced(&cluster, NS).await;
    let checker = e2e::gate::GateChecker::start(&cluster, NS).await;
    let _hook_operator = e2e::hook::start_operator(&cluster, &[]);
    let mut hooked = manifest("tkex.tencent.com/v1alpha1", "GameDeployment");
    hooked["spec"]["preDeleteUpdateStrategy"] = json!({"hook": {"templateName": "drain"}});
    apply(&cluster, "gamedeployment.json", &hooked).await;
    wait_for("the hook in the GameDeployment's spec", DEADLINE, || async {
        gds.get(NAME).await.ok()?.spec.pre_delete_update_strategy?.hook.is_some().then_some(())
    })
    .await;

    // The next change rolls from Kruise's revision: an image change goes in place, the same 4 pods, each through
    // one Successful run of the hook.
    set_image(&cluster, NS, NAME, "nginx:1.27").await;
    wait_for("4 pods on nginx:1.27, in place", DEADLINE, || async {
        let list = pods_api.list(&Default::default()).await.ok()?.items;
        let done = list.iter().filter(|p| image(p) == Some("nginx:1.27") && is_ready(p)).count();
        (done == 4 && list.len() == 4).then_some(())
    })
    .await;
    for seen in watch.versions() {
        let name = seen.name().to_string();
        assert_eq!(pods.get(&name).map(String::as_str), Some(seen.uid()), "{name} was created");
        assert!(!seen.deleted && seen.object.metadata.deletion_timestamp.is_none(), "{name} was deleted");
    }
    let report = checker.stop().await;
    report.assert_clean();
    assert_eq!(report.gated_updates, 4, "{report:?}");
    let mut successful: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for run in runs.versions() {
        if run.object.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Successful) {
            let labels = run.object.metadata.labels.clone().unwrap_or_default();
            let pod = labels.get(keys::HOOKRUN_POD_UID).cloned().unwrap_or_default();
            successful.entry(pod).or_default().insert(run.name().to_string());
        }
    }
    let uids: BTreeSet<String> = pods.values().cloned().collect();
    assert_eq!(successful.keys().cloned().collect::<BTreeSet<_>>(), uids, "a Successful run per pod: {successful:?}");
    assert!(successful.values().all(|r| r.len() == 1), "exactly one Successful run per pod: {successful:?}");
    cluster.shutdown().await;
}
