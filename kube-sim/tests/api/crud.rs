//! Create/get/list/update/delete semantics, optimistic concurrency, object metadata, error
//! bodies and field validation.

use anyhow::Result;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::*;

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<String, Value>>()
    }))
    .unwrap_or_default()
}

#[tokio::test]
async fn object_metadata_resource_versions_and_optimistic_concurrency() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let created = api.create(&PostParams::default(), &cm("a", &[("k", "v")])).await?;
    let uid = created.metadata.uid.clone().unwrap_or_default();
    assert_eq!(uid.len(), 36, "uid is a UUID");
    assert!(created.metadata.creation_timestamp.is_some());
    let rv1: u64 = created.metadata.resource_version.clone().unwrap_or_default().parse()?;
    assert_eq!(created.metadata.generation, None, "ConfigMaps have no generation");

    // A stale resourceVersion is a 409 Conflict with the apiserver's exact wording.
    let mut stale = created.clone();
    let mut fresh = created.clone();
    fresh.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = api.replace("a", &PostParams::default(), &fresh).await?;
    let rv2: u64 = updated.metadata.resource_version.clone().unwrap_or_default().parse()?;
    assert!(rv2 > rv1, "resource versions increase");
    stale.data = Some([("k".to_string(), "v3".to_string())].into());
    let err = api_error(api.replace("a", &PostParams::default(), &stale).await)?;
    assert_eq!(err.code, 409);
    assert_eq!(err.reason, "Conflict");
    assert_eq!(
        err.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // A write that changes nothing keeps the resource version (no event either).
    let same = api.replace("a", &PostParams::default(), &updated).await?;
    assert_eq!(same.metadata.resource_version, updated.metadata.resource_version);

    // Identity fields are immutable and creationTimestamp cannot be rewritten.
    let mut renamed_uid = updated.clone();
    renamed_uid.metadata.uid = Some("not-the-uid".into());
    let err = api_error(api.replace("a", &PostParams::default(), &renamed_uid).await)?;
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains("metadata.uid: Invalid value: \"not-the-uid\": field is immutable"),
        "{}",
        err.message
    );

    // Unconditional update (no resourceVersion) succeeds.
    let mut unconditional = updated.clone();
    unconditional.metadata.resource_version = None;
    unconditional.data = Some([("k".to_string(), "v4".to_string())].into());
    let u = api.replace("a", &PostParams::default(), &unconditional).await?;
    assert_eq!(u.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(u.metadata.creation_timestamp, created.metadata.creation_timestamp);

    // Delete returns a Status naming the resource (the `kind` detail is the resource name).
    let raw = Raw::new(&sim);
    let del = raw.delete("/api/v1/namespaces/default/configmaps/a", None).await?;
    assert_eq!(del.status, 200);
    assert_eq!(del.body["kind"], "Status");
    assert_eq!(del.body["status"], "Success");
    assert_eq!(del.body["details"], json!({"name": "a", "kind": "configmaps", "uid": uid}));
    let err = api_error(api.get("a").await)?;
    assert_eq!((err.code, err.reason.as_str(), err.message.as_str()), (404, "NotFound", "configmaps \"a\" not found"));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn generate_name_dry_run_and_already_exists() -> Result<()> {
    let sim = sim().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    let mut g = cm("", &[]);
    g.metadata.name = None;
    g.metadata.generate_name = Some("web-".into());
    let created = api.create(&PostParams::default(), &g).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");
    assert!(name[4..].chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)), "{name}");

    let dry = api.create(&PostParams { dry_run: true, ..Default::default() }, &cm("dry", &[])).await?;
    assert!(dry.metadata.uid.is_some());
    assert!(api.get_opt("dry").await?.is_none(), "dry-run create persists nothing");

    api.create(&PostParams::default(), &cm("dup", &[])).await?;
    let err = api_error(api.create(&PostParams::default(), &cm("dup", &[])).await)?;
    assert_eq!(
        (err.code, err.reason.as_str(), err.message.as_str()),
        (409, "AlreadyExists", "configmaps \"dup\" already exists")
    );

    // A name is required.
    let err = api_error(api.create(&PostParams::default(), &cm("", &[])).await)?;
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn namespaces_must_exist_and_not_be_terminating() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
    let err = api_error(missing.create(&PostParams::default(), &cm("x", &[])).await)?;
    assert_eq!(
        (err.code, err.reason.as_str(), err.message.as_str()),
        (404, "NotFound", "namespaces \"nope\" not found")
    );

    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "doomed"}}))?).await?;
    let ns = nss.get("doomed").await?;
    assert_eq!(
        ns.metadata.labels.unwrap_or_default().get("kubernetes.io/metadata.name").map(String::as_str),
        Some("doomed")
    );
    assert_eq!(ns.spec.and_then(|s| s.finalizers), Some(vec!["kubernetes".to_string()]));
    // The namespace stays Terminating while a finalizer holds its content.
    let held: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let mut blocker = cm("blocker", &[]);
    blocker.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    held.create(&PostParams::default(), &blocker).await?;
    nss.delete("doomed", &DeleteParams::default()).await?;
    let err = api_error(held.create(&PostParams::default(), &cm("late", &[])).await)?;
    assert_eq!(err.code, 403);
    assert_eq!(
        err.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    let terminating = eventually("NamespaceFinalizersRemaining", || async {
        let ns = nss.get("doomed").await?;
        let conds = ns.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        Ok(conds.into_iter().find(|c| c.type_ == "NamespaceFinalizersRemaining" && c.status == "True").map(|c| (ns, c)))
    })
    .await?;
    assert_eq!(terminating.0.status.and_then(|s| s.phase).as_deref(), Some("Terminating"));
    assert_eq!(
        terminating.1.message.as_deref(),
        Some("Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
    );
    held.patch("blocker", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await?;
    eventually("namespace doomed to be gone", || async { Ok(nss.get_opt("doomed").await?.is_none().then_some(())) })
        .await?;
    // System namespaces cannot be deleted.
    let err = api_error(nss.delete("default", &DeleteParams::default()).await)?;
    assert_eq!(
        (err.code, err.message.as_str()),
        (403, "namespaces \"default\" is forbidden: this namespace may not be deleted")
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn validation_errors_are_422_with_field_causes() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let r = raw
        .post(
            "/api/v1/namespaces/default/pods",
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Bad_Name"}, "spec": {"containers": []}}),
        )
        .await?;
    assert_eq!(r.status, 422);
    assert_eq!(r.body["reason"], "Invalid");
    assert_eq!(r.body["details"]["kind"], "Pod");
    let causes = r.body["details"]["causes"].as_array().cloned().unwrap_or_default();
    assert!(causes.iter().any(|c| c["field"] == "metadata.name" && c["reason"] == "FieldValueInvalid"), "{causes:?}");
    assert!(
        causes.iter().any(|c| c["field"] == "spec.containers" && c["reason"] == "FieldValueRequired"),
        "{causes:?}"
    );
    assert!(r.body["message"].as_str().unwrap_or("").starts_with("Pod \"Bad_Name\" is invalid: ["));
    // A container without a name or image is invalid, not a decoding error.
    let r = raw
        .post("/api/v1/namespaces/default/pods", &json!({"metadata": {"name": "p0"}, "spec": {"containers": [{}]}}))
        .await?;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body["message"],
        "Pod \"p0\" is invalid: [spec.containers[0].name: Required value, spec.containers[0].image: Required value]"
    );

    // Labels are validated like the apiserver does.
    let r = raw
        .post("/api/v1/namespaces/default/configmaps", &json!({"metadata": {"name": "l", "labels": {"bad key": "v"}}}))
        .await?;
    assert_eq!(r.status, 422);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("metadata.labels: Invalid value: \"bad key\": name part must consist of alphanumeric characters"),
        "{}",
        r.text
    );

    // Pod spec updates are restricted to images (and a few fields).
    let pods: Api<Pod> = Api::default_namespaced(sim.client().await);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "python:3.4"}]}}),
        )?,
    )
    .await?;
    let ok = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "c", "image": "python:3.5"}]}})),
        )
        .await?;
    assert_eq!(ok.spec.map(|s| s.containers[0].image.clone()), Some(Some("python:3.5".into())));
    let err = api_error(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}})),
        )
        .await,
    )?;
    assert_eq!(err.code, 422);
    assert!(err.message.starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"), "{}", err.message);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn field_validation_strict_warn_and_ignore() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s", "bogus": 1}, "data": {"a": "b"}, "extra": true});
    let r = raw.post("/api/v1/namespaces/default/configmaps?fieldValidation=Strict", &body).await?;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"extra\", unknown field \"metadata.bogus\""
    );
    let r = raw.post("/api/v1/namespaces/default/configmaps", &body).await?;
    assert_eq!(r.status, 201);
    let warnings: Vec<&str> = r.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok()).collect();
    assert_eq!(
        warnings,
        vec!["299 - \"unknown field \\\"extra\\\"\"", "299 - \"unknown field \\\"metadata.bogus\\\"\""]
    );
    assert!(r.body.get("extra").is_none(), "unknown fields are dropped");
    let mut ignored = body.clone();
    ignored["metadata"]["name"] = json!("i");
    let r = raw.post("/api/v1/namespaces/default/configmaps?fieldValidation=Ignore", &ignored).await?;
    assert_eq!(r.status, 201);
    assert!(r.headers.get("warning").is_none());
    // Wrong types are a 400 for built-in kinds.
    let r = raw
        .post("/api/v1/namespaces/default/configmaps", &json!({"metadata": {"name": "t"}, "data": {"a": 1}}))
        .await?;
    assert_eq!(r.status, 400);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: "),
        "{}",
        r.text
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn status_subresource_and_generation_of_built_in_workloads() -> Result<()> {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client().await);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}},
        "status": {"replicas": 99}
    }))?;
    let created = api.create(&PostParams::default(), &d).await?;
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.as_ref().and_then(|s| s.replicas).is_none(), "create ignores status");
    let spec = created.spec.clone();
    assert_eq!(spec.replicas, Some(1), "defaulted");
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(spec.strategy.and_then(|s| s.type_).as_deref(), Some("RollingUpdate"));
    // The status rules, on a StatefulSet: a Deployment's status is its controller's to write.
    let api: Api<StatefulSet> = Api::default_namespaced(sim.client().await);
    let s: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"serviceName": "web", "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}},
    }))?;
    api.create(&PostParams::default(), &s).await?;
    // Status through /status does not bump generation and ignores spec.
    let st = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 7}, "status": {"replicas": 3, "observedGeneration": 1}})),
        )
        .await?;
    assert_eq!(st.metadata.generation, Some(1));
    assert_eq!(st.spec.replicas, Some(1));
    assert_eq!(st.status.map(|s| s.replicas), Some(3));
    // Spec changes through the main endpoint bump generation and ignore status.
    let sp = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}, "status": {"replicas": 0}})),
        )
        .await?;
    assert_eq!(sp.metadata.generation, Some(2));
    assert_eq!(sp.status.map(|s| s.replicas), Some(3));
    // A label change is not a spec change.
    let lb =
        api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}))).await?;
    assert_eq!(lb.metadata.generation, Some(2));
    // The selector of apps/v1 workloads is immutable.
    let err = api_error(
        api.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": {"matchLabels": {"app": "other"}}}})),
        )
        .await,
    )?;
    assert_eq!(err.code, 422);
    assert!(err.message.contains("spec.selector: Invalid value:"), "{}", err.message);
    assert!(err.message.contains("field is immutable"), "{}", err.message);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn status_errors_for_unsupported_requests() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let r = raw.get("/api/v1/namespaces/default/nothings").await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(r.body["message"], "the server could not find the requested resource");
    let r = raw.put("/api/v1/namespaces/default/configmaps", &json!({})).await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (405, Some("MethodNotAllowed")));
    let r = raw
        .send("POST", "/api/v1/namespaces/default/configmaps", Some("application/json"), Some("{not json".into()))
        .await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (400, Some("BadRequest")));
    let r = raw.send("PATCH", "/api/v1/namespaces/default/configmaps/x", Some("text/plain"), Some("{}".into())).await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (415, Some("UnsupportedMediaType")));
    let r = raw
        .send_with("GET", "/api/v1/namespaces", None, None, &[("Accept", "application/vnd.kubernetes.protobuf")])
        .await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (406, Some("NotAcceptable")));
    let r = raw.get("/api/v1/namespaces/default/configmaps?labelSelector=a%20b").await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (400, Some("BadRequest")));
    let r = raw.get("/api/v1/namespaces/default/configmaps?fieldSelector=spec.foo%3Dx").await?;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["message"], "field label not supported: spec.foo");
    let r = raw
        .post(
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        )
        .await?;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["message"], "the API version in the data (apps/v1) does not match the expected API version (v1)");
    // Responses carry kind/apiVersion; lists of built-ins omit them on items, like typed encoders.
    let l = raw.get("/api/v1/namespaces").await?;
    assert_eq!(l.body["kind"], "NamespaceList");
    assert!(l.body["items"][0].get("kind").is_none());
    assert!(l.body["metadata"]["resourceVersion"].as_str().is_some());
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().await);
    assert!(api.list(&ListParams::default()).await?.items.iter().all(|c| c.metadata.name.is_some()));
    sim.shutdown().await;
    Ok(())
}
