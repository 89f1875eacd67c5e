//! `kubectl explain` on the GameDeployment, with the real kubectl against kube-sim: every field of the
//! GameDeployment's own schema is described (nothing prints `<no description>` or `<empty>`), descriptions come
//! out as whole paragraphs that kubectl wraps itself, int-or-string fields say "an integer or a percentage",
//! and a malformed one is rejected with the message a real API server gives.
//!
//! `maxUnavailable` shows as `<Object>`: kubectl's explain template prints a schema's `type` or "Object", and a
//! real API server publishes a CRD's `x-kubernetes-int-or-string` field with no `type` (only built-in types get
//! `<IntOrString>`, through a `$ref`; kubernetes/kubernetes#130946). kube-sim publishes the same schema, which
//! [`int_or_string_is_published_like_a_real_api_server`] checks; the description is what tells users.

use e2e::Cluster;
use serde_json::Value;

/// The GameDeployment schema from the CRD file users apply.
fn crd_schema() -> Value {
    let text =
        std::fs::read_to_string(e2e::repo_root().join("crds/tkex.tencent.com_gamedeployments.yaml")).expect("CRD file");
    let crd: Value = serde_yaml::from_str(&text).expect("CRD YAML");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Paths (`spec.updateStrategy`) of every object field of the GameDeployment's own schema, outside the pod
/// template and the label selector (Kubernetes types documented by Kubernetes).
fn object_paths(schema: &Value, path: &str, out: &mut Vec<String>) {
    let schema = if schema.get("items").is_some() { &schema["items"] } else { schema };
    let Some(props) = schema.get("properties").and_then(Value::as_object) else { return };
    if !path.is_empty() {
        out.push(path.to_string());
    }
    for (name, child) in props {
        let child_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        // Kubernetes' own types, embedded without their descriptions to keep the CRD under kubectl apply's
        // annotation limit (as common/tests/crd_descriptions.rs): the pod template, the selector, a claim's spec.
        if matches!(
            child_path.as_str(),
            "spec.template" | "spec.selector" | "metadata" | "spec.volumeClaimTemplates.spec"
        ) {
            continue;
        }
        object_paths(child, &child_path, out);
    }
}

fn schema_at<'a>(schema: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(schema, |s, name| {
        let s = if s.get("items").is_some() { &s["items"] } else { s };
        &s["properties"][name]
    })
}

/// The DESCRIPTION block of `kubectl explain` output, with kubectl's wrapping undone.
fn description_block(out: &str) -> String {
    let block: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("DESCRIPTION:"))
        .skip(1)
        .take_while(|l| !l.starts_with("FIELDS:"))
        .collect();
    block.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn explain(cluster: &Cluster, path: &str) -> String {
    let out = cluster.kubectl_ok(&["explain", &format!("gamedeployment.{path}")]).await;
    println!("$ kubectl explain gamedeployment.{path}\n{out}");
    out
}

async fn cluster() -> Cluster {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    cluster
}

#[tokio::test(flavor = "multi_thread")]
async fn every_gamedeployment_field_is_explained() {
    let cluster = cluster().await;
    let schema = crd_schema();
    let mut paths = Vec::new();
    object_paths(&schema, "", &mut paths);
    for want in [
        "spec",
        "spec.scaleStrategy",
        "spec.updateStrategy.canary.steps",
        "spec.preDeleteUpdateStrategy.hook.args",
        "status",
    ] {
        assert!(paths.iter().any(|p| p == want), "{want} not among {paths:?}");
    }
    let mut undocumented = Vec::new();
    for path in &paths {
        let out = explain(&cluster, path).await;
        if out.contains("<no description>") || out.contains("<empty>") {
            undocumented.push(path.clone());
        }
    }
    assert!(undocumented.is_empty(), "kubectl explain shows <no description>/<empty> under {undocumented:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn descriptions_are_whole_paragraphs_and_say_what_int_or_string_takes() {
    let cluster = cluster().await;
    let schema = crd_schema();

    // kubectl wraps the text itself: undoing its wrapping gives back the description, not a sentence cut
    // off at a source line break.
    for path in ["spec.preDeleteUpdateStrategy", "spec.serviceName", "spec.updateStrategy.type"] {
        let out = explain(&cluster, path).await;
        let want = schema_at(&schema, path)["description"].as_str().expect("described").to_string();
        assert_eq!(description_block(&out), want.split_whitespace().collect::<Vec<_>>().join(" "), "{path}");
    }

    for path in [
        "spec.updateStrategy.maxUnavailable",
        "spec.updateStrategy.maxSurge",
        "spec.updateStrategy.partition",
        "spec.scaleStrategy.createBatch",
        "spec.updateStrategy.canary.steps.partition",
    ] {
        let out = explain(&cluster, path).await;
        assert!(description_block(&out).contains("an integer or a percentage"), "{path}:\n{out}");
    }

    let out = explain(&cluster, "spec.preDeleteUpdateStrategy.hook.args").await;
    assert!(out.contains("name\t<string> -required-\n    The argument's name"), "{out}");
    assert!(out.contains("value\t<string>\n    The argument's value"), "{out}");

    // A malformed value is rejected with the real API server's message (the pattern only constrains strings).
    let manifest = std::fs::read_to_string(e2e::repo_root().join("examples/gamedeployment.yaml")).unwrap();
    let bad = manifest.replace("maxUnavailable: 2", "maxUnavailable: \"abc\"");
    assert_ne!(bad, manifest);
    let file = cluster.dir().join("bad.yaml");
    std::fs::write(&file, bad).unwrap();
    let out = cluster.kubectl(&["apply", "-f", &file.display().to_string()]).await;
    println!("$ kubectl apply -f bad.yaml  # maxUnavailable: \"abc\"\n{}{}", out.stdout, out.stderr);
    assert!(!out.success);
    assert_eq!(
        out.stderr.trim(),
        "The GameDeployment \"test-gamedeployment\" is invalid: spec.updateStrategy.maxUnavailable: Invalid value: \
         \"abc\": spec.updateStrategy.maxUnavailable in body should match '^[0-9]+%$'"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn int_or_string_is_published_like_a_real_api_server() {
    let cluster = cluster().await;
    let doc = cluster.kubectl_ok(&["get", "--raw", "/openapi/v3/apis/tkex.tencent.com/v1alpha1"]).await;
    let doc: Value = serde_json::from_str(&doc).expect("OpenAPI v3 JSON");
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let (_, gd) = schemas.iter().find(|(name, _)| name.ends_with(".GameDeployment")).expect("GameDeployment schema");
    let field = &gd["properties"]["spec"]["properties"]["updateStrategy"]["properties"]["maxUnavailable"];
    // What apiextensions-apiserver publishes (structural schema → OpenAPI): the extension and the anyOf, no type.
    assert_eq!(field["x-kubernetes-int-or-string"], Value::Bool(true), "{field}");
    assert_eq!(field["anyOf"], serde_json::json!([{"type": "integer"}, {"type": "string"}]), "{field}");
    assert!(field.get("type").is_none(), "{field}");
    assert!(field.get("$ref").is_none(), "{field}");
    let out = explain(&cluster, "spec.updateStrategy.maxUnavailable").await;
    assert!(out.contains("FIELD: maxUnavailable <Object>"), "kubectl shows a typeless schema as <Object>:\n{out}");
    cluster.shutdown().await;
}
