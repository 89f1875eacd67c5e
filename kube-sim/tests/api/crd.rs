//! CustomResourceDefinitions: registration and discovery, structural schema defaulting,
//! pruning and validation, status and scale subresources, printer columns, versions, deletion.

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn crds_are_served_at_once_established_and_discoverable() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let gs = install_test_crd(&client).await?;
    // Served immediately after the create returns.
    let created = gs.create(&PostParams::default(), &gameserver("web")).await?;
    assert_eq!(created.metadata.generation, Some(1));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get("gameservers.sim.kube-sim.test").await?;
    let status = crd.status.context("status")?;
    let conds = status.conditions.unwrap_or_default();
    assert!(conds.iter().any(|c| c.type_ == "Established" && c.status == "True"));
    assert!(conds.iter().any(|c| c.type_ == "NamesAccepted" && c.status == "True"));
    assert_eq!(status.accepted_names.map(|n| n.kind).as_deref(), Some("GameServer"));
    assert_eq!(status.stored_versions, Some(vec!["v1alpha1".to_string()]));
    assert_eq!(crd.metadata.finalizers, Some(vec!["customresourcecleanup.apiextensions.k8s.io".to_string()]));

    let discovery = Discovery::new(client.clone()).run().await?;
    let group = discovery.groups().find(|g| g.name() == "sim.kube-sim.test").context("group discovered")?;
    let (ar, caps) = group.recommended_kind("GameServer").context("kind discovered")?;
    assert_eq!(ar.plural, "gameservers");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "gameservers/status" || s.plural == "status"));
    let raw = Raw::new(&sim);
    let list = raw.get("/apis/sim.kube-sim.test/v1alpha1").await?;
    let names: Vec<&str> =
        list.body["resources"].as_array().context("resources")?.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, vec!["gameservers", "gameservers/status", "gameservers/scale"]);
    assert_eq!(list.body["resources"][0]["shortNames"], json!(["gs"]));
    assert_eq!(list.body["resources"][0]["categories"], json!(["all"]));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn structural_schemas_default_prune_and_validate() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    install_test_crd(&client).await?;
    let raw = Raw::new(&sim);
    let path = "/apis/sim.kube-sim.test/v1alpha1/namespaces/default/gameservers";
    let obj = json!({
        "apiVersion": "sim.kube-sim.test/v1alpha1", "kind": "GameServer",
        "metadata": {"name": "p"},
        "spec": {
            "template": {"anything": {"goes": [1, 2]}},
            "unknown": "dropped",
            "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "inner", "labels": {"a": "b"}}, "spec": {"x": 1, "y": 2}},
            "partition": "10%"
        },
        "status": {"replicas": 5}
    });
    let r = raw.post(path, &obj).await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let got = r.body;
    assert!(got["spec"].get("unknown").is_none(), "unknown field pruned");
    assert_eq!(got["spec"]["template"]["anything"]["goes"], json!([1, 2]), "preserve-unknown-fields kept");
    assert_eq!(got["spec"]["embedded"]["kind"], "Pod", "embedded resource keeps apiVersion/kind/metadata");
    assert_eq!(got["spec"]["embedded"]["metadata"]["labels"]["a"], "b");
    assert_eq!(got["spec"]["embedded"]["spec"], json!({"x": 1}), "embedded spec pruned by its schema");
    assert_eq!(got["spec"]["replicas"], 1, "defaulted");
    assert_eq!(
        got["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "maxUnavailable": "20%"}),
        "nested defaults"
    );
    assert!(got.get("status").is_none(), "create ignores status when the status subresource is on");
    let warnings: Vec<&str> = r.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok()).collect();
    assert!(warnings.iter().any(|w| w.contains("unknown field \\\"spec.unknown\\\"")), "{warnings:?}");

    let strict = raw.post(&format!("{path}?fieldValidation=Strict"), &json!({"apiVersion": "sim.kube-sim.test/v1alpha1", "kind": "GameServer", "metadata": {"name": "q"}, "spec": {"template": {}, "bogus": 1}})).await?;
    assert_eq!(strict.status, 400);
    assert_eq!(
        strict.body["message"],
        "GameServer in version \"v1alpha1\" cannot be handled as a GameServer: strict decoding error: unknown field \"spec.bogus\""
    );

    let invalid = json!({
        "apiVersion": "sim.kube-sim.test/v1alpha1", "kind": "GameServer", "metadata": {"name": "bad"},
        "spec": {"replicas": -1, "name": "UPPER", "updateStrategy": {"type": "Recreate"}, "partition": true, "ports": [{"name": "a", "port": 70000}, {"name": "a", "port": 1}]}
    });
    let r = raw.post(path, &invalid).await?;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.body["details"]["kind"], "GameServer");
    assert_eq!(r.body["details"]["group"], "sim.kube-sim.test");
    let fields: Vec<&str> =
        r.body["details"]["causes"].as_array().context("causes")?.iter().filter_map(|c| c["field"].as_str()).collect();
    for f in [
        "spec.template",
        "spec.replicas",
        "spec.name",
        "spec.updateStrategy.type",
        "spec.partition",
        "spec.ports[0].port",
        "spec.ports[1]",
    ] {
        assert!(fields.contains(&f), "missing cause for {f}: {fields:?}");
    }
    let msg = r.body["message"].as_str().unwrap_or("");
    assert!(msg.starts_with("GameServer.sim.kube-sim.test \"bad\" is invalid: ["), "{msg}");
    assert!(
        msg.contains("spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"),
        "{msg}"
    );
    assert!(msg.contains("spec.updateStrategy.type: Unsupported value: \"Recreate\": supported values: \"RollingUpdate\", \"InplaceUpdate\", \"HotPatchUpdate\""), "{msg}");
    assert!(
        msg.contains("spec.name: Invalid value: \"UPPER\": spec.name in body should match '^[a-z][a-z0-9-]*$'"),
        "{msg}"
    );
    assert!(msg.contains("spec.template: Required value"), "{msg}");
    assert!(msg.contains("spec.partition: Invalid value: \"boolean\": spec.partition in body must be of type integer,string: \"boolean\""), "{msg}");
    assert!(msg.contains("spec.ports[1]: Duplicate value: map[string]interface {}{\"name\":\"a\"}"), "{msg}");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn status_and_scale_subresources_have_real_semantics() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let gs = install_test_crd(&client).await?;
    gs.create(&PostParams::default(), &gameserver("web")).await?;
    // The main endpoint ignores status; spec changes bump generation.
    let main = gs
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 9}})),
        )
        .await?;
    assert_eq!(main.metadata.generation, Some(2));
    assert!(main.data.get("status").is_none());
    // /status ignores everything but status, including metadata, and does not bump generation.
    let st = gs
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}, "spec": {"replicas": 0}, "status": {"replicas": 3, "readyReplicas": 2, "selector": "app=web", "phase": "Running"}})),
        )
        .await?;
    assert_eq!(st.metadata.generation, Some(2));
    assert_eq!(st.data["spec"]["replicas"], 3);
    assert_eq!(st.data["status"]["readyReplicas"], 2);
    assert!(!st.metadata.labels.unwrap_or_default().contains_key("x"));
    // Scale maps the configured paths.
    let raw = Raw::new(&sim);
    let path = "/apis/sim.kube-sim.test/v1alpha1/namespaces/default/gameservers/web/scale";
    let scale = raw.get(path).await?.body;
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"], json!({"replicas": 3, "selector": "app=web"}));
    let patched = raw.patch(path, "application/merge-patch+json", &json!({"spec": {"replicas": 5}})).await?;
    assert_eq!(patched.status, 200, "{}", patched.text);
    assert_eq!(patched.body["spec"]["replicas"], 5);
    let obj = gs.get("web").await?;
    assert_eq!(obj.data["spec"]["replicas"], 5);
    assert_eq!(obj.metadata.generation, Some(3));
    let mut stale = scale.clone();
    stale["spec"]["replicas"] = json!(1);
    let conflict = raw.put(path, &stale).await?;
    assert_eq!(conflict.status, 409, "a stale Scale resourceVersion conflicts");
    // Strategic merge patches are not accepted for custom resources.
    let smp = raw
        .patch(
            "/apis/sim.kube-sim.test/v1alpha1/namespaces/default/gameservers/web",
            "application/strategic-merge-patch+json",
            &json!({"spec": {"replicas": 1}}),
        )
        .await?;
    assert_eq!(smp.status, 415);
    assert_eq!(
        smp.body["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn printer_columns_in_table_responses() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let gs = install_test_crd(&client).await?;
    gs.create(&PostParams::default(), &gameserver("web")).await?;
    gs.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"readyReplicas": 1, "phase": "Running"}})),
    )
    .await?;
    let raw = Raw::new(&sim);
    let t = raw
        .send_with(
            "GET",
            "/apis/sim.kube-sim.test/v1alpha1/namespaces/default/gameservers",
            None,
            None,
            &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")],
        )
        .await?
        .body;
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> =
        t["columnDefinitions"].as_array().context("columns")?.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(cols, vec!["Name", "DESIRED", "READY", "PHASE", "AGE"]);
    let cells = &t["rows"][0]["cells"];
    assert_eq!(cells[0], "web");
    assert_eq!(cells[1], 2);
    assert_eq!(cells[2], 1);
    assert_eq!(cells[3], "Running");
    assert!(cells[4].as_str().is_some_and(|a| a.ends_with('s')), "AGE is a server-side duration: {}", cells[4]);
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn multiple_versions_share_storage_and_deleting_the_crd_removes_instances() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let mut crd = test_crd();
    let v1 = crd["spec"]["versions"][0].clone();
    let mut v2 = v1.clone();
    v2["name"] = json!("v1beta1");
    v2["storage"] = json!(false);
    crd["spec"]["versions"] = json!([v1, v2]);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_json::from_value(crd)?).await?;
    let alpha: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &gameserver_resource());
    let beta_res = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sim.kube-sim.test", "v1beta1", "GameServer"),
        "gameservers",
    );
    let beta: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &beta_res);
    alpha.create(&PostParams::default(), &gameserver("web")).await?;
    let via_beta = beta.get("web").await?;
    assert_eq!(via_beta.types.as_ref().map(|t| t.api_version.as_str()), Some("sim.kube-sim.test/v1beta1"));
    let mut held = gameserver("held");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    alpha.create(&PostParams::default(), &held).await?;

    crds.delete("gameservers.sim.kube-sim.test", &DeleteParams::default()).await?;
    // Instances are deleted first; a finalizer on one holds the CRD in Terminating.
    eventually("web to be deleted", || async { Ok(alpha.get_opt("web").await?.is_none().then_some(())) }).await?;
    let crd = crds.get("gameservers.sim.kube-sim.test").await?;
    assert!(crd.metadata.deletion_timestamp.is_some());
    let conds = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(conds.iter().any(|c| c.type_ == "Terminating" && c.status == "True"), "{conds:?}");
    alpha.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await?;
    eventually("the CRD to be gone", || async {
        Ok(crds.get_opt("gameservers.sim.kube-sim.test").await?.is_none().then_some(()))
    })
    .await?;
    let raw = Raw::new(&sim);
    eventually("the endpoint to disappear", || async {
        Ok((raw.get("/apis/sim.kube-sim.test/v1alpha1/namespaces/default/gameservers").await?.status == 404)
            .then_some(()))
    })
    .await?;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn invalid_crds_are_rejected() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let mut crd = test_crd();
    crd["metadata"]["name"] = json!("wrong.sim.kube-sim.test");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["typeless"] =
        json!({"description": "no type"});
    let r = raw.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &crd).await?;
    assert_eq!(r.status, 422);
    let msg = r.body["message"].as_str().unwrap_or("");
    assert!(
        msg.contains(
            "metadata.name: Invalid value: \"wrong.sim.kube-sim.test\": must be spec.names.plural+\".\"+spec.group"
        ),
        "{msg}"
    );
    assert!(msg.contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[typeless].type: Required value: must not be empty for specified object fields"), "{msg}");
    let _: Value = r.body;
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn project_crds_and_examples_apply_with_the_apply_flag() -> Result<()> {
    // What `kube-sim --apply crds/ --apply examples/` does: server-side apply with strict field
    // validation, CRDs first.
    let sim = sim().await?;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let crds = [root.join("crds")];
    let applied = sim.apply_manifests(&crds)?;
    assert!(
        applied.iter().any(|a| a == "customresourcedefinition.apiextensions.k8s.io/gamedeployments.tkex.tencent.com"),
        "{applied:?}"
    );
    // Applying the same manifests again changes nothing.
    let rv = sim.resource_version();
    sim.apply_manifests(&crds)?;
    assert_eq!(sim.resource_version(), rv, "re-applying unchanged manifests is a no-op");
    // The examples define the same objects in several files; each apply takes over the fields
    // the previous one set, like `kubectl apply -f examples/`.
    let applied = sim.apply_manifests(&[root.join("examples")])?;
    assert!(applied.iter().any(|a| a.starts_with("gamedeployment.tkex.tencent.com/")), "{applied:?}");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn server_side_apply_on_custom_resources_and_their_status() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let gs = install_test_crd(&client).await?;
    let apply = |manager: &str| PatchParams::apply(manager).force();
    let cfg = json!({"apiVersion": "sim.kube-sim.test/v1alpha1", "kind": "GameServer", "metadata": {"name": "ssa"},
        "spec": {"replicas": 4, "template": {"spec": {"containers": [{"name": "c", "image": "python:3.4"}]}}}, "status": {"phase": "ignored"}});
    let created = gs.patch("ssa", &apply("operator"), &Patch::Apply(cfg)).await?;
    assert_eq!(created.data["spec"]["replicas"], 4);
    assert!(created.data.get("status").is_none(), "status is not applied through the main resource");
    // A controller applies status through /status: only status is taken, generation is unchanged.
    let st = gs
        .patch_status(
            "ssa",
            &apply("operator-status"),
            &Patch::Apply(json!({"apiVersion": "sim.kube-sim.test/v1alpha1", "kind": "GameServer", "metadata": {"name": "ssa"}, "status": {"phase": "Running", "readyReplicas": 4}})),
        )
        .await?;
    assert_eq!(st.data["status"]["phase"], "Running");
    assert_eq!(st.metadata.generation, Some(1));
    let managers: Vec<(String, String)> = st
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.manager.unwrap_or_default(), m.subresource.unwrap_or_default()))
        .collect();
    assert!(managers.contains(&("operator".to_string(), String::new())), "{managers:?}");
    assert!(managers.contains(&("operator-status".to_string(), "status".to_string())), "{managers:?}");
    // Re-applying the spec leaves the status alone.
    let again = gs
        .patch(
            "ssa",
            &apply("operator"),
            &Patch::Apply(
                json!({"apiVersion": "sim.kube-sim.test/v1alpha1", "kind": "GameServer", "metadata": {"name": "ssa"},
                "spec": {"replicas": 5, "template": {"spec": {"containers": [{"name": "c", "image": "python:3.5"}]}}}}),
            ),
        )
        .await?;
    assert_eq!(again.data["status"]["phase"], "Running");
    assert_eq!(again.metadata.generation, Some(2));
    sim.shutdown().await;
    Ok(())
}

/// `x-kubernetes-validations: [{rule: "self == oldSelf"}]` makes a field immutable: every way of
/// changing it (PUT, merge and JSON patches, server-side apply) is `422 Invalid` with the CEL
/// validator's wording, while creating, leaving it unchanged, reordering a set and writing status
/// still work. A blocking schema error stops the rules, with the real server's extra cause.
#[tokio::test]
async fn transition_rule_self_equals_old_self_is_enforced() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let mut crd = test_crd();
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["properties"]["template"]["x-kubernetes-validations"] =
        json!([{"rule": "self == oldSelf", "message": "template is immutable"}]);
    spec["properties"]["name"]["x-kubernetes-validations"] =
        json!([{"rule": "oldSelf == self", "messageExpression": "'name cannot change'"}, {"rule": "self.size() > 1"}]);
    spec["properties"]["tags"] = json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"},
        "x-kubernetes-validations": [{"rule": "self == oldSelf"}]});
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_json::from_value(crd)?).await?;
    let gs: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &gameserver_resource());
    let mut o = gameserver("fixed");
    o.data["spec"]["name"] = json!("a");
    o.data["spec"]["tags"] = json!(["x", "y"]);
    let created = gs.create(&PostParams::default(), &o).await?;

    // PUT changing the template.
    let mut changed = created.clone();
    changed.data["spec"]["template"]["spec"]["containers"][0]["image"] = json!("python:3.5");
    let e = api_error(gs.replace("fixed", &PostParams::default(), &changed).await)?;
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        r#"GameServer.sim.kube-sim.test "fixed" is invalid: spec.template: Invalid value: "object": template is immutable"#
    );
    let causes = e.details.context("details")?.causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, "spec.template");
    assert_eq!(causes[0].reason, "FieldValueInvalid");
    assert_eq!(causes[0].message, r#"Invalid value: "object": template is immutable"#);

    // Merge patch on a string field with a literal messageExpression; the other rule is not evaluated.
    let e = api_error(gs.patch("fixed", &PatchParams::default(), &Patch::Merge(json!({"spec": {"name": "b"}}))).await)?;
    assert_eq!(
        e.message,
        r#"GameServer.sim.kube-sim.test "fixed" is invalid: spec.name: Invalid value: "string": name cannot change"#
    );
    // JSON patch on a set: the default message.
    let p = serde_json::from_value(json!([{"op": "add", "path": "/spec/tags/-", "value": "z"}]))?;
    let e = api_error(gs.patch("fixed", &PatchParams::default(), &Patch::Json::<()>(p)).await)?;
    assert_eq!(
        e.message,
        r#"GameServer.sim.kube-sim.test "fixed" is invalid: spec.tags: Invalid value: "array": failed rule: self == oldSelf"#
    );
    // Server-side apply changing two immutable fields reports both.
    let apply = json!({"apiVersion": "sim.kube-sim.test/v1alpha1", "kind": "GameServer", "metadata": {"name": "fixed"},
        "spec": {"name": "c", "tags": ["q"]}});
    let e = api_error(gs.patch("fixed", &PatchParams::apply("t").force(), &Patch::Apply(&apply)).await)?;
    assert_eq!(e.details.context("details")?.causes.len(), 2, "{}", e.message);

    // Allowed: other fields, a reordered set, status, and metadata.
    let ok = json!({"spec": {"replicas": 5, "tags": ["y", "x"]}, "metadata": {"labels": {"l": "v"}}});
    gs.patch("fixed", &PatchParams::default(), &Patch::Merge(ok)).await?;
    gs.patch_status("fixed", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Up"}}))).await?;
    // Removing the field is not a transition of it.
    gs.patch("fixed", &PatchParams::default(), &Patch::Merge(json!({"spec": {"name": null}}))).await?;

    // A blocking OpenAPI error (wrong type) stops the CEL rules and says so.
    let e = api_error(
        gs.patch("fixed", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": "x", "tags": ["n"]}})))
            .await,
    )?;
    assert!(
        e.message.ends_with(r#"<nil>: Invalid value: "null": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"#),
        "{}",
        e.message
    );
    assert!(!e.message.contains("spec.tags"), "{}", e.message);
    sim.shutdown().await;
    Ok(())
}

/// The project's CRDs refuse the exec provider with `rule: '!has(self.exec)'`: a HookTemplate naming it is
/// `422 Invalid` on create (and on update) with the CEL validator's cause at the provider's path; one without it is
/// accepted (`testdata/cel/`).
#[tokio::test]
async fn has_rules_refuse_the_exec_provider_of_the_project_crds() -> Result<()> {
    let sim = sim().await?;
    let client = sim.client().await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    sim.apply_manifests(&[root.join("../crds/tkex.tencent.com_hooktemplates.yaml")])?;
    let load = |file: &str| -> Result<DynamicObject> {
        let text = std::fs::read_to_string(root.join("testdata/cel").join(file))?;
        Ok(serde_yaml::from_str(&text)?)
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("tkex.tencent.com", "v1alpha1", "HookTemplate"));
    let templates: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let message = "the exec provider is not supported (BCS declares it but never implemented it): use a web or kubernetes provider instead (or prometheus)";

    let e = api_error(templates.create(&PostParams::default(), &load("hooktemplate-exec.yaml")?).await)?;
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        format!(
            r#"HookTemplate.tkex.tencent.com "with-exec" is invalid: spec.metrics[1].provider: Invalid value: "object": {message}"#
        )
    );
    let causes = e.details.context("details")?.causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(
        (causes[0].reason.as_str(), causes[0].field.as_str()),
        ("FieldValueInvalid", "spec.metrics[1].provider")
    );
    assert_eq!(causes[0].message, format!(r#"Invalid value: "object": {message}"#));

    // Without exec: accepted; adding exec by a patch is refused the same way.
    templates.create(&PostParams::default(), &load("hooktemplate-web.yaml")?).await?;
    let add_exec = json!([{"op": "add", "path": "/spec/metrics/0/provider/exec", "value": {"container": "app", "command": ["true"]}}]);
    let e = api_error(
        templates
            .patch("web-only", &PatchParams::default(), &Patch::Json::<()>(serde_json::from_value(add_exec)?))
            .await,
    )?;
    assert_eq!(
        e.message,
        format!(
            r#"HookTemplate.tkex.tencent.com "web-only" is invalid: spec.metrics[0].provider: Invalid value: "object": {message}"#
        )
    );
    // A null exec is absent for has() (a nullable field set to null).
    let null_exec = json!([{"op": "add", "path": "/spec/metrics/0/provider/exec", "value": null}]);
    templates
        .patch("web-only", &PatchParams::default(), &Patch::Json::<()>(serde_json::from_value(null_exec)?))
        .await?;
    sim.shutdown().await;
    Ok(())
}
