//! Taking over a live BCS fleet: a GameDeployment whose ControllerRevision, pods and status are exactly as BCS's Go
//! operator wrote them (revision named `<gd>-<FNV hash>` with the `$patch: replace` template Go re-encoded, pods with
//! `controller-revision-hash`, the instance-id label, the `InPlaceUpdateReady` gate and condition, and BCS's status)
//! is taken over by this operator with no pod deleted, created, restarted or updated, for every template style
//! whose spelling Go's re-encoding changes (issue 48). A watch on the pods is started before the operator, so every
//! change it makes is seen, however short-lived.
//!
//! The templates and their Go re-encodings are written out here by hand (what `json.Marshal` of a decoded
//! `corev1.PodTemplateSpec` writes); the same pairs are the unit table of
//! `gamedeployment-operator/src/revision/styles_tests.rs`.

use std::collections::{BTreeMap, BTreeSet};

use common::api::{GameDeployment, HookPhase, HookRun};
use e2e::gamedeployment::{image, is_ready, revision, set_image, start_operator};
use e2e::observe::Observer;
use e2e::{Cluster, DEADLINE, wait_for};

use crate::kubectl_gd::kubectl_gd;
use crate::takeover_support::{apply_drain_hook, gate_ready, revision_hash};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const INSTANCE_ID: &str = "tkex.bkbcs.tencent.com/gamedeployment-instance-id";
const NS: &str = "default";

/// A template style: the template as the user wrote it in the GameDeployment, and as BCS's revision (and pods)
/// hold it after Go's re-encoding.
struct Style {
    name: &'static str,
    written: Value,
    stored: Value,
}

fn labels(app: &str) -> Value {
    json!({"app": app})
}

/// Each style of the issue, for the GameDeployment `app`.
fn styles(app: &str) -> Vec<Style> {
    let meta = json!({"labels": labels(app)});
    let go_meta = json!({"creationTimestamp": null, "labels": labels(app)});
    vec![
        Style {
            name: "the docs' example",
            written: json!({"metadata": meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "imagePullPolicy": "IfNotPresent", "ports": [{"name": "http", "containerPort": 8000}]}]}}),
            stored: json!({"metadata": go_meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "imagePullPolicy": "IfNotPresent", "resources": {},
                "ports": [{"name": "http", "containerPort": 8000}]}]}}),
        },
        Style {
            name: "quantities not in canonical form",
            written: json!({"metadata": meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "resources": {"limits": {"cpu": "1000m", "memory": "1024Mi", "ephemeral-storage": "1000"},
                              "requests": {"cpu": "0.5", "memory": "0.5Gi"}}}]}}),
            stored: json!({"metadata": go_meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "resources": {"limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1k"},
                              "requests": {"cpu": "500m", "memory": "512Mi"}}}]}}),
        },
        Style {
            name: "quantities as YAML numbers",
            written: json!({"metadata": meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "resources": {"limits": {"cpu": 2, "memory": 1000}}}]}}),
            stored: json!({"metadata": go_meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "resources": {"limits": {"cpu": "2", "memory": "1k"}}}]}}),
        },
        Style {
            name: "zero values Go omits",
            written: json!({"metadata": meta, "spec": {"hostNetwork": false, "hostPID": false, "hostname": "",
                "containers": [{"name": "python", "image": "python:3.4", "stdin": false, "tty": false,
                    "workingDir": "", "ports": [{"name": "http", "containerPort": 8000, "hostPort": 0}],
                    "readinessProbe": {"tcpSocket": {"port": 8000}, "initialDelaySeconds": 0},
                    "env": [{"name": "EMPTY", "value": ""}]}]}}),
            stored: json!({"metadata": go_meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "resources": {}, "ports": [{"name": "http", "containerPort": 8000}],
                "readinessProbe": {"tcpSocket": {"port": 8000}}, "env": [{"name": "EMPTY"}]}]}}),
        },
        Style {
            name: "values the API server defaults (revision from a defaulted object)",
            written: json!({"metadata": meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "ports": [{"containerPort": 8000}]}]}}),
            stored: json!({"metadata": go_meta, "spec": {"restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "securityContext": {},
                "schedulerName": "default-scheduler", "containers": [{"name": "python", "image": "python:3.4",
                    "resources": {}, "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 8000, "protocol": "TCP"}]}]}}),
        },
        Style {
            name: "int-or-string ports",
            written: json!({"metadata": meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "lifecycle": {"preStop": {"httpGet": {"port": "8000", "path": "/drain"}}}}]}}),
            stored: json!({"metadata": go_meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "resources": {}, "lifecycle": {"preStop": {"httpGet": {"port": 8000, "path": "/drain"}}}}]}}),
        },
        Style {
            name: "empty maps and lists",
            written: json!({"metadata": {"labels": labels(app), "annotations": {}}, "spec": {"nodeSelector": {},
                "tolerations": [], "containers": [{"name": "python", "image": "python:3.4", "args": [],
                    "env": [], "resources": {"limits": {}}}]}}),
            stored: json!({"metadata": go_meta, "spec": {"containers": [{"name": "python", "image": "python:3.4",
                "resources": {}}]}}),
        },
    ]
}

/// What BCS left of one fleet.
struct BcsFleet {
    name: String,
    revision: String,
    /// Pod name → uid.
    pods: BTreeMap<String, String>,
}

/// Writes a fleet as BCS's operator leaves it: the GameDeployment (`written` template, `InplaceUpdate`), its one
/// ControllerRevision (`stored`, Go's re-encoding), `replicas` pods made from the stored template, Running and
/// Ready, and BCS's status.
async fn bcs_fleet(
    cluster: &Cluster,
    name: &str,
    style: &Style,
    replicas: usize,
    partition: usize,
    hook: Option<&str>,
) -> BcsFleet {
    let mut gd = json!({
        "apiVersion": "tkex.tencent.com/v1alpha1", "kind": "GameDeployment",
        "metadata": {"name": name, "namespace": NS, "labels": labels(name)},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels(name)}, "template": style.written,
                 "updateStrategy": {"type": "InplaceUpdate", "partition": partition}}
    });
    if let Some(template) = hook {
        gd["spec"]["preDeleteUpdateStrategy"] = json!({"hook": {"templateName": template}});
    }
    let gds: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    let gd: GameDeployment = serde_json::from_value(gd).expect("a GameDeployment");
    let gd = gds.create(&PostParams::default(), &gd).await.unwrap_or_else(|e| panic!("{}: {e}", style.name));
    let uid = gd.metadata.uid.clone().expect("a uid");
    let owner = json!([{"apiVersion": "tkex.tencent.com/v1alpha1", "kind": "GameDeployment", "name": name,
        "uid": uid, "controller": true, "blockOwnerDeletion": true}]);

    let mut template = style.stored.clone();
    template["$patch"] = json!("replace");
    let payload = json!({"spec": {"template": template}});
    let hash = revision_hash(&payload);
    let revision_name = format!("{name}-{hash}");
    let mut revision_labels = labels(name);
    revision_labels["controller.kubernetes.io/hash"] = json!(hash);
    let revision: ControllerRevision = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": revision_name, "namespace": NS, "labels": revision_labels, "ownerReferences": owner},
        "data": payload, "revision": 1
    }))
    .expect("a ControllerRevision");
    let revisions: Api<ControllerRevision> = Api::namespaced(cluster.client(), NS);
    revisions.create(&PostParams::default(), &revision).await.expect("revision created");

    let pods_api: Api<Pod> = Api::namespaced(cluster.client(), NS);
    let mut pods = BTreeMap::new();
    for i in 0..replicas {
        let id: String = ["b", "c", "d", "f", "g", "h", "j", "k"][i].repeat(3) + "x2";
        let pod_name = format!("{name}-{id}");
        let mut pod_labels = labels(name);
        pod_labels["controller-revision-hash"] = json!(revision_name);
        pod_labels[INSTANCE_ID] = json!(id);
        let mut spec = style.stored["spec"].clone();
        spec["readinessGates"] = json!([{"conditionType": "InPlaceUpdateReady"}]);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": NS, "labels": pod_labels, "ownerReferences": owner},
            "spec": spec
        }))
        .expect("a pod");
        let pod = pods_api.create(&PostParams::default(), &pod).await.unwrap_or_else(|e| panic!("{}: {e}", style.name));
        pods.insert(pod_name, pod.metadata.uid.expect("a uid"));
    }
    // BCS's update loop sets the in-place readiness gate's condition.
    gate_ready(&pods_api, pods.keys()).await;
    let n = replicas;
    let status = json!({"status": {"observedGeneration": gd.metadata.generation, "replicas": n, "readyReplicas": n,
        "availableReplicas": n, "updatedReplicas": n, "updatedReadyReplicas": n, "updateRevision": revision_name,
        "collisionCount": 0}});
    gds.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.expect("status written");
    BcsFleet { name: name.to_string(), revision: revision_name, pods }
}

/// Waits until the operator has made its first pass over each fleet (it writes `status.currentRevision`, which BCS
/// never writes) and returns each fleet's status then.
async fn taken_over(cluster: &Cluster, fleets: &[BcsFleet]) -> Vec<common::api::GameDeploymentStatus> {
    let gds: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    let mut statuses = Vec::new();
    for fleet in fleets {
        let status = wait_for(&format!("the operator's first status of {}", fleet.name), DEADLINE, || async {
            let status = gds.get(&fleet.name).await.ok()?.status?;
            status.current_revision.is_some().then_some(status)
        })
        .await;
        statuses.push(status);
    }
    statuses
}

/// Every version of every pod the watch saw: none deleted or terminating, none new, each still on its revision,
/// image and first container start (no restart).
fn assert_no_pod_changed(pods: &Observer<Pod>, fleets: &[BcsFleet], images: &BTreeMap<String, String>) {
    let uids: BTreeMap<&str, &BcsFleet> =
        fleets.iter().flat_map(|f| f.pods.values().map(move |uid| (uid.as_str(), f))).collect();
    for seen in pods.versions() {
        let pod = &seen.object;
        let name = seen.name();
        let Some(fleet) = uids.get(seen.uid()) else { panic!("pod {name} was created (uid {})", seen.uid()) };
        assert!(!seen.deleted, "{name} of {} was deleted", fleet.name);
        assert!(pod.metadata.deletion_timestamp.is_none(), "{name} of {} was being deleted", fleet.name);
        assert_eq!(revision(pod), Some(fleet.revision.as_str()), "{name} of {} changed revision", fleet.name);
        assert_eq!(image(pod), images.get(&fleet.name).map(String::as_str), "{name} of {} changed image", fleet.name);
        let restarts: i32 =
            pod.status.iter().flat_map(|s| s.container_statuses.iter().flatten()).map(|c| c.restart_count).sum();
        assert_eq!(restarts, 0, "{name} of {} restarted a container", fleet.name);
    }
}

fn slug(name: &str) -> String {
    let s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let s = s.split('-').filter(|p| !p.is_empty()).take(3).collect::<Vec<_>>().join("-");
    format!("bcs-{s}")
}

/// The table: one BCS fleet per template style, all taken over by one operator started after a watch on the pods;
/// each keeps BCS's revision as its update revision, mints no other, and no pod changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bcs_fleet_in_every_template_style_is_taken_over_with_no_pod_changed() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut fleets = Vec::new();
    let mut images = BTreeMap::new();
    for style in styles("placeholder") {
        let name = slug(style.name);
        // The style again, for this fleet's labels.
        let style = styles(&name).into_iter().find(|s| s.name == style.name).expect("the same style");
        fleets.push(bcs_fleet(&cluster, &name, &style, 3, 0, None).await);
        images.insert(name, "python:3.4".to_string());
    }
    let names: BTreeSet<&str> = fleets.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.len(), fleets.len(), "one fleet per style");

    // The dry run first: `kubectl gd plan --takeover` says of every pod that nothing would change, and why.
    for fleet in &fleets {
        let plan = kubectl_gd(&cluster, &["plan", &fleet.name, "--takeover", "-o", "json"]).await;
        assert_eq!(plan.code, 0, "{}", plan.stderr);
        let plan: Value = serde_json::from_str(&plan.stdout).expect("plan as JSON");
        let takeover = &plan["takeover"];
        assert_eq!(takeover["updateRevision"], json!(fleet.revision), "{}: {takeover:#}", fleet.name);
        assert_eq!(takeover["revisionExists"], json!(true), "{}: {takeover:#}", fleet.name);
        let verdicts = takeover["pods"].as_array().expect("pods");
        assert_eq!(verdicts.len(), 3, "{takeover:#}");
        assert!(verdicts.iter().all(|p| p["wouldChange"] == json!(false)), "{}: {takeover:#}", fleet.name);
        assert!(plan["batches"].as_array().is_none_or(Vec::is_empty), "{}: {:#}", fleet.name, plan["batches"]);
    }
    let text = kubectl_gd(&cluster, &["plan", &fleets[1].name, "--takeover"]).await.stdout;
    let summary = format!("Takeover: revision {} holds the current template; no pod would change", fleets[1].revision);
    assert!(text.contains(&summary), "{text}");
    assert!(text.contains("which holds the current template"), "{text}");

    let pods = Observer::<Pod>::namespaced(&cluster, NS).await;
    let revisions = Observer::<ControllerRevision>::namespaced(&cluster, NS).await;
    let _operator = start_operator(&cluster);
    let statuses = taken_over(&cluster, &fleets).await;
    let not_recognised: Vec<String> = fleets
        .iter()
        .zip(&statuses)
        .filter(|(fleet, status)| {
            status.update_revision.as_deref() != Some(fleet.revision.as_str())
                || status.current_revision.as_deref() != Some(fleet.revision.as_str())
                || (status.updated_replicas, status.replicas) != (3, 3)
        })
        .map(|(fleet, status)| {
            format!("{}: {:?}", fleet.name, status.conditions.first().and_then(|c| c.message.clone()))
        })
        .collect();
    assert!(not_recognised.is_empty(), "BCS's revision not kept as the update revision: {not_recognised:#?}");
    // Settled: every fleet's pods all updated and ready as the operator counts them.
    let gds: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    for fleet in &fleets {
        wait_for(&format!("{} settled", fleet.name), DEADLINE, || async {
            let status = gds.get(&fleet.name).await.ok()?.status?;
            (status.updated_ready_replicas == 3 && status.ready_replicas == 3).then_some(())
        })
        .await;
    }
    assert_no_pod_changed(&pods, &fleets, &images);
    let minted: Vec<String> = revisions
        .versions()
        .iter()
        .map(|r| r.name().to_string())
        .filter(|n| !fleets.iter().any(|f| &f.revision == n))
        .collect();
    assert!(minted.is_empty(), "revisions minted beside BCS's: {minted:?}");
    cluster.shutdown().await;
}

/// The case: an `InplaceUpdate` GameDeployment of 6 game servers with partition 2, resources written
/// `1000m`/`0.5`/`1024Mi`, whose user changed nothing. The operator before this change minted a second revision,
/// counted every BCS pod outdated and deleted and recreated 4 of the 6 (the resources "differed", so not in
/// place). Now nothing changes, and no hook runs; the next image change is made in place on BCS's pods (the
/// revision BCS wrote is the old side of the in-place diff), each through its own Successful run of the
/// GameDeployment's pre-delete hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inplace_fleet_whose_user_changed_nothing_keeps_all_six_game_servers() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let name = "bcs-inplace";
    let style = styles(name).into_iter().find(|s| s.name == "quantities not in canonical form").expect("the style");
    // BCS's walkthrough hook: a web probe that reads an age above 30 (one measurement).
    apply_drain_hook(&cluster, NS).await;
    let fleet = bcs_fleet(&cluster, name, &style, 6, 2, Some("drain")).await;
    // Had the user changed the resources for real, the dry run says which pods would change and why.
    let manifest = cluster.dir().join("changed.json");
    let mut changed = json!({"apiVersion": "tkex.tencent.com/v1alpha1", "kind": "GameDeployment",
        "metadata": {"name": name}, "spec": {"replicas": 6, "selector": {"matchLabels": labels(name)},
        "template": style.written, "updateStrategy": {"type": "InplaceUpdate", "partition": 2},
        "preDeleteUpdateStrategy": {"hook": {"templateName": "drain"}}}});
    changed["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("2");
    std::fs::write(&manifest, changed.to_string()).expect("manifest written");
    let plan = kubectl_gd(&cluster, &["plan", name, "--takeover"]).await;
    assert!(plan.stdout.contains("no pod would change"), "{}", plan.stdout);
    // The plan page's block, names and times masked.
    let page = "operating/kubectl-gd-plan.md";
    e2e::book::Book::of_this_test().assert_output(page, &format!("kubectl gd plan {name} --takeover"), &plan.stdout);
    let path = manifest.display().to_string();
    let plan = kubectl_gd(&cluster, &["plan", name, "--takeover", "-f", &path, "-o", "json"]).await;
    let plan: Value = serde_json::from_str(&plan.stdout).expect("plan as JSON");
    let verdicts = plan["takeover"]["pods"].as_array().cloned().unwrap_or_default();
    let changing: Vec<&Value> = verdicts.iter().filter(|p| p["wouldChange"] == json!(true)).collect();
    assert_eq!((verdicts.len(), changing.len()), (6, 4), "partition 2 keeps two: {plan:#}");
    for pod in changing {
        let why = pod["why"].as_str().unwrap_or_default();
        assert!(why.contains("would be recreated") && why.contains("spec.containers"), "{why}");
    }
    let pods = Observer::<Pod>::namespaced(&cluster, NS).await;
    let runs = Observer::<HookRun>::namespaced(&cluster, NS).await;
    let _hook_operator = e2e::hook::start_operator(&cluster, &[]);
    let _operator = start_operator(&cluster);
    let status = taken_over(&cluster, std::slice::from_ref(&fleet)).await.remove(0);
    assert_eq!(status.update_revision.as_deref(), Some(fleet.revision.as_str()), "{status:?}");
    let gds: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    wait_for("the fleet settled", DEADLINE, || async {
        let status = gds.get(name).await.ok()?.status?;
        (status.updated_ready_replicas == 6 && status.ready_replicas == 6).then_some(())
    })
    .await;
    let images = BTreeMap::from([(name.to_string(), "python:3.4".to_string())]);
    assert_no_pod_changed(&pods, std::slice::from_ref(&fleet), &images);

    assert!(runs.versions().is_empty(), "a hook ran though nothing was to change");

    // Then a real change: 4 of BCS's pods are updated in place (same uids), 2 stay (partition), each through a
    // Successful run of the hook.
    set_image(&cluster, NS, name, "python:3.5").await;
    let pods_api: Api<Pod> = Api::namespaced(cluster.client(), NS);
    let selector = ListParams::default().labels(&format!("app={name}"));
    let updated = wait_for("4 pods on python:3.5 in place", DEADLINE, || async {
        let list = pods_api.list(&selector).await.ok()?.items;
        let on_new: Vec<&Pod> = list
            .iter()
            .filter(|p| image(p) == Some("python:3.5") && is_ready(p) && p.metadata.deletion_timestamp.is_none())
            .collect();
        (on_new.len() == 4 && list.len() == 6)
            .then(|| list.iter().map(|p| p.metadata.uid.clone().unwrap_or_default()).collect::<BTreeSet<String>>())
    })
    .await;
    let bcs_uids: BTreeSet<String> = fleet.pods.values().cloned().collect();
    assert_eq!(updated, bcs_uids, "the same 6 pods, 4 of them updated in place");
    for seen in pods.versions() {
        assert!(!seen.deleted && seen.object.metadata.deletion_timestamp.is_none(), "{} was deleted", seen.name());
        assert!(bcs_uids.contains(seen.uid()), "{} was created", seen.name());
    }
    let successful: BTreeSet<String> = runs
        .versions()
        .iter()
        .filter(|r| r.object.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Successful))
        .map(|r| r.name().to_string())
        .collect();
    assert_eq!(successful.len(), 4, "one Successful run per updated pod: {successful:?}");
    cluster.shutdown().await;
}
