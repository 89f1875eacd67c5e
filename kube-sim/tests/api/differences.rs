//! Known differences from a real kube-apiserver, pinned down so that the README's list stays
//! true: each test asserts kube-sim's current behaviour (and says what the real server does).
//! When one of these starts failing, kube-sim got closer to the real thing: update the README.

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube_sim::SimConfig;
use serde_json::json;

use crate::support::*;

/// Real: CEL `x-kubernetes-validations` rules are evaluated. kube-sim ignores them.
#[tokio::test]
async fn cel_validation_rules_are_not_evaluated() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let mut crd = test_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([{"rule": "self.replicas <= 3", "message": "at most 3 replicas"}]);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_json::from_value(crd)?).await?;
    let gs: Api<kube::api::DynamicObject> = Api::namespaced_with(client, "default", &gameserver_resource());
    let mut o = gameserver("many");
    o.data["spec"]["replicas"] = json!(10);
    gs.create(&PostParams::default(), &o).await?;
    sim.shutdown().await;
    Ok(())
}

/// Real: many more validation rules (quantities, probes, volume sources...). kube-sim
/// validates names, labels, annotations, owner references, finalizers, containers, ports,
/// selectors and the immutable fields its tests rely on; a negative CPU request passes.
#[tokio::test]
async fn built_in_validation_is_a_subset() -> Result<()> {
    let sim = sim().await?;
    let pods: Api<Pod> = Api::default_namespaced(sim.client().await);
    let p: Pod = serde_json::from_value(
        json!({"metadata": {"name": "neg"}, "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "-1"}}}]}}),
    )?;
    pods.create(&PostParams::default(), &p).await?;
    sim.shutdown().await;
    Ok(())
}

/// Real: strict field validation reports duplicate JSON keys. kube-sim keeps the last value.
#[tokio::test]
async fn duplicate_fields_are_not_reported() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"},"data":{"a":"1"},"data":{"a":"2"}}"#;
    let r = raw
        .send(
            "POST",
            "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
            Some("application/json"),
            Some(body.into()),
        )
        .await?;
    assert_eq!(r.status, 201);
    assert_eq!(r.body["data"]["a"], "2");
    sim.shutdown().await;
    Ok(())
}

/// Real: RBAC prevents privilege escalation (creating a Role or RoleBinding that grants more
/// than the creator holds needs `escalate`/`bind`). kube-sim does not check it.
#[tokio::test]
async fn rbac_escalation_is_not_prevented() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("kube-sim-escalation-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "t,mallory,1\n")?;
    let sim = sim_with(SimConfig { kubelet: None, token_file: Some(tokens), ..SimConfig::default() }).await?;
    let admin = sim.client().await;
    let roles: Api<Role> = Api::default_namespaced(admin.clone());
    roles
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "rbac-writer"}, "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]}]}))?)
        .await?;
    let rbs: Api<RoleBinding> = Api::default_namespaced(admin.clone());
    rbs.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "m"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rbac-writer"}, "subjects": [{"kind": "User", "name": "mallory"}]}))?)
        .await?;
    let mallory = sim.client_for_token("t").await?;
    let mroles: Api<Role> = Api::default_namespaced(mallory);
    mroles.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "everything"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}))?).await?;
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// Real: pods/exec, pods/attach, pods/portforward exist and `pods/log?follow=true` streams. kube-sim serves
/// status, scale, binding, eviction, log (without streaming), serviceaccounts/token and namespaces/finalize only.
#[tokio::test]
async fn streaming_subresources_are_not_served() -> Result<()> {
    let sim = sim().await?;
    let pods: Api<Pod> = Api::default_namespaced(sim.client().await);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )?,
    )
    .await?;
    let raw = Raw::new(&sim);
    for sub in ["exec", "attach", "portforward"] {
        assert_eq!(raw.get(&format!("/api/v1/namespaces/default/pods/p/{sub}")).await?.status, 404, "{sub}");
    }
    // The log is served, but `follow` does not stream: the answer ends with what there is (nothing for a pod that
    // is not scheduled).
    let log = raw.get("/api/v1/namespaces/default/pods/p/log?follow=true").await?;
    assert_eq!((log.status, log.text.as_str()), (200, ""));
    sim.shutdown().await;
    Ok(())
}

/// Real: every workload controller acts on its objects. kube-sim runs the Deployment, ReplicaSet
/// and endpoint controllers (`cluster` tests `workloads::`) beside the garbage collector and the
/// namespace, service account and CRD controllers; a StatefulSet, DaemonSet or Job never gets pods
/// or status.
#[tokio::test]
async fn other_workload_controllers_do_not_run() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let template =
        json!({"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let s = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template}});
    assert_eq!(raw.post("/apis/apps/v1/namespaces/default/statefulsets", &s).await?.status, 201);
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    assert_eq!(raw.post("/apis/apps/v1/namespaces/default/deployments", &d).await?.status, 201);
    // The Deployment's pod appears; by then the StatefulSet's would have too.
    let pods: Api<Pod> = Api::default_namespaced(sim.client().await);
    kube_sim::testing::eventually("the Deployment's pod", || async {
        Ok((!pods.list(&ListParams::default().labels("app=web")).await?.items.is_empty()).then_some(()))
    })
    .await?;
    assert!(pods.list(&ListParams::default().labels("app=db")).await?.items.is_empty());
    assert!(
        raw.get("/apis/apps/v1/namespaces/default/statefulsets/db")
            .await?
            .body
            .get("status")
            .is_none_or(|s| s.get("replicas").is_none())
    );
    sim.shutdown().await;
    Ok(())
}

/// Real: OpenAPI v2 is served (protobuf for kubectl), and mutating webhooks / mutating admission
/// policies exist. kube-sim serves OpenAPI v3 only, and of admissionregistration only
/// ValidatingWebhookConfiguration (tests/admission.rs) and ValidatingAdmissionPolicy with its
/// bindings (`policy::`).
#[tokio::test]
async fn openapi_v2_and_admission_apis_are_absent() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    assert_eq!(raw.get("/openapi/v2").await?.status, 404);
    for r in ["mutatingwebhookconfigurations", "mutatingadmissionpolicies", "mutatingadmissionpolicybindings"] {
        assert_eq!(raw.get(&format!("/apis/admissionregistration.k8s.io/v1/{r}")).await?.status, 404, "{r}");
    }
    sim.shutdown().await;
    Ok(())
}

/// Real: Events expire after `--event-ttl` (1h). kube-sim keeps them like any object, and has
/// no event rate limiting or aggregation server-side.
#[tokio::test]
async fn events_are_ordinary_objects() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let ev = json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "reason": "Test", "message": "hello", "type": "Normal"});
    assert_eq!(raw.post("/api/v1/namespaces/default/events", &ev).await?.status, 201);
    // Both Event APIs see it.
    let v1 = raw.get("/apis/events.k8s.io/v1/namespaces/default/events/e1").await?.body;
    assert_eq!(v1["note"], "hello");
    assert_eq!(v1["regarding"]["name"], "p");
    sim.shutdown().await;
    Ok(())
}

/// Real: the root-ca-cert-publisher puts `kube-root-ca.crt` into every namespace. kube-sim has
/// no cluster CA, so the ConfigMap the projected token volume names does not exist.
#[tokio::test]
async fn root_ca_configmap_is_not_published() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    assert_eq!(raw.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt").await?.status, 404);
    sim.shutdown().await;
    Ok(())
}

/// Real: cluster IPs are random within the service CIDR. kube-sim hands them out in order from
/// 10.96.0.0/16 (10.96.0.1 is the `kubernetes` service) and node ports from 30000 upwards.
#[tokio::test]
async fn service_addresses_are_allocated_in_order() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let svc = json!({"metadata": {"name": "np"}, "spec": {"type": "NodePort", "selector": {"app": "x"}, "ports": [{"port": 80}]}});
    let r = raw.post("/api/v1/namespaces/default/services", &svc).await?;
    assert_eq!(r.status, 201);
    assert_eq!(r.body["spec"]["clusterIP"], "10.96.0.2");
    assert_eq!(r.body["spec"]["ports"][0]["nodePort"], 30000);
    assert_eq!(r.body["spec"]["ports"][0]["targetPort"], 80);
    assert_eq!(raw.get("/api/v1/namespaces/default/services/kubernetes").await?.body["spec"]["clusterIP"], "10.96.0.1");
    sim.shutdown().await;
    Ok(())
}

/// Real: the aggregator proxies an APIService's group version to its `service` and marks it available or not.
/// kube-sim stores the APIService but serves nothing for it.
#[tokio::test]
async fn api_aggregation_is_not_served() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let metrics = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1beta1.metrics.k8s.io"},
        "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100,
                 "insecureSkipTLSVerify": true, "service": {"namespace": "kube-system", "name": "metrics-server"}}});
    assert_eq!(raw.post("/apis/apiregistration.k8s.io/v1/apiservices", &metrics).await?.status, 201);
    assert_eq!(raw.get("/apis/metrics.k8s.io/v1beta1").await?.status, 404);
    sim.shutdown().await;
    Ok(())
}

/// Real: a kube-apiserver of the release kube-sim reports (1.33) does not know a Pod's `spec.hostnameOverride`
/// (added in 1.34) and drops it. kube-sim's built-in kinds have the fields of k8s-openapi's types (the workspace's
/// Kubernetes version, newer than the reported one), so the field is stored and served.
#[tokio::test]
async fn fields_newer_than_the_reported_release_are_kept() -> Result<()> {
    let sim = sim_with(SimConfig { kubelet: None, ..SimConfig::default() }).await?;
    let raw = Raw::new(&sim);
    let version = raw.get("/version").await?.body;
    let minor: u32 = version["minor"].as_str().unwrap_or_default().parse()?;
    assert!(minor < 34, "the reported release has hostnameOverride: {version}");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "newer"},
        "spec": {"hostnameOverride": "game-1", "containers": [{"name": "c", "image": "i"}]}});
    let created = raw.post("/api/v1/namespaces/default/pods", &pod).await?;
    assert_eq!(created.status, 201, "{}", created.body);
    let read = raw.get("/api/v1/namespaces/default/pods/newer").await?;
    assert_eq!(read.body["spec"]["hostnameOverride"], "game-1");
    sim.shutdown().await;
    Ok(())
}
