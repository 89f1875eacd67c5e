//! Every manifest in `examples/` (the BCS walkthrough and docs manifests, unchanged) must deserialise into
//! the Rust types without losing a field and validate against the generated CRD schema, so an example can
//! never drift from the API.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};

use common::api::{GameDeployment, HookRun, HookTemplate};
use serde_json::{Value, json};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(examples_dir())
        .expect("examples/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("readable example");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let value: Value = serde::Deserialize::deserialize(doc).expect("valid YAML");
            value
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// What the API server would refuse in `doc` with `kubectl apply` (server-side field validation `Strict`, the
/// default since kubectl 1.27): the fields the CRD schema does not declare, then the schema's own errors. The
/// validator is kube-sim's, the one every end-to-end test applies manifests through (it keeps kube-openapi's
/// rules and wording; its conformance is kube-sim's own test suite).
fn schema_errors(doc: &Value) -> Vec<String> {
    let kind = doc["kind"].as_str().expect("kind");
    assert_eq!(doc["apiVersion"], json!("tkex.tencent.com/v1alpha1"), "{kind}: apiVersion");
    let (_, crd) = common::crd::all().into_iter().find(|(_, c)| c.spec.names.kind == kind).expect("known kind");
    let schema = serde_json::to_value(&crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    let schema = kube_sim::schema::from_crd_schema(&schema);
    let root = kube_sim::schema::Cursor::root(&schema);
    let mut pruned = doc.clone();
    let mut errors: Vec<String> = kube_sim::schema::pruning::prune_object(root, &mut pruned)
        .into_iter()
        .map(|field| format!("unknown field \"{field}\""))
        .collect();
    errors.extend(kube_sim::schema::validate::validate_object(root, doc).iter().map(ToString::to_string));
    errors
}

/// Every field of `original` is present, with the same value, in `round_tripped` (which may add defaults).
/// A `0` or `false` may be omitted: the field is `omitempty` in BCS too, and absent means the same.
fn missing_fields(original: &Value, round_tripped: &Value, path: &str, out: &mut Vec<String>) {
    match (original, round_tripped) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => missing_fields(v, w, &format!("{path}.{k}"), out),
                    None if *v == json!(0) || *v == json!(false) => {}
                    None => out.push(format!("{path}.{k}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                missing_fields(v, w, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: {a} became {b}")),
    }
}

fn round_trip(doc: &Value) -> Value {
    match doc["kind"].as_str() {
        Some("GameDeployment") => {
            serde_json::to_value(serde_json::from_value::<GameDeployment>(doc.clone()).unwrap()).unwrap()
        }
        Some("HookTemplate") => {
            serde_json::to_value(serde_json::from_value::<HookTemplate>(doc.clone()).unwrap()).unwrap()
        }
        Some("HookRun") => serde_json::to_value(serde_json::from_value::<HookRun>(doc.clone()).unwrap()).unwrap(),
        other => panic!("unexpected kind {other:?}"),
    }
}

#[test]
fn every_example_round_trips_and_validates() {
    let files = example_files();
    assert!(files.len() >= 5, "the walkthrough examples are missing: {files:?}");
    for file in files {
        for doc in documents(&file) {
            let errors = schema_errors(&doc);
            assert!(errors.is_empty(), "{}: schema errors: {errors:#?}", file.display());
            let mut missing = Vec::new();
            missing_fields(&doc, &round_trip(&doc), "", &mut missing);
            assert!(missing.is_empty(), "{}: fields lost in the Rust types: {missing:?}", file.display());
        }
    }
}

#[test]
fn the_walkthrough_files_are_there() {
    for name in [
        "hook-template-success.yaml",
        "hook-template-fail.yaml",
        "hook-template-args.yaml",
        "gamedeployment.yaml",
        "gamedeployment-args.yaml",
    ] {
        assert!(examples_dir().join(name).is_file(), "examples/{name} is missing");
    }
}

#[test]
fn the_schema_rejects_what_the_api_server_would() {
    let base = documents(&examples_dir().join("gamedeployment.yaml")).remove(0);
    let mutate = |pointer: &str, value: Value| {
        let mut doc = base.clone();
        *doc.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer}")) = value;
        doc
    };
    let bad = [
        ("bad strategy type", mutate("/spec/updateStrategy/type", json!("Recreate"))),
        ("percent without %", mutate("/spec/updateStrategy/maxUnavailable", json!("20"))),
        ("bool int-or-string", mutate("/spec/updateStrategy/partition", json!(true))),
        ("negative replicas", mutate("/spec/replicas", json!(-1))),
        ("string replicas", mutate("/spec/replicas", json!("6"))),
        ("missing templateName", mutate("/spec/preDeleteUpdateStrategy/hook", json!({ "args": [] }))),
    ];
    for (what, doc) in bad {
        assert!(!schema_errors(&doc).is_empty(), "{what} was accepted");
    }
    // CloneSet's update type names and partition percentages (issue 31) apply; a malformed decimal does not.
    for (what, pointer, value) in [
        ("InPlaceIfPossible", "/spec/updateStrategy/type", json!("InPlaceIfPossible")),
        ("InPlaceOnly", "/spec/updateStrategy/type", json!("InPlaceOnly")),
        ("ReCreate", "/spec/updateStrategy/type", json!("ReCreate")),
        ("decimal partition", "/spec/updateStrategy/partition", json!("99.99%")),
    ] {
        let errors = schema_errors(&mutate(pointer, value));
        assert!(errors.is_empty(), "{what} was refused: {errors:?}");
    }
    for bad in ["99.%", ".5%", "1e2%", "-1%"] {
        let doc = mutate("/spec/updateStrategy/partition", json!(bad));
        assert!(!schema_errors(&doc).is_empty(), "partition {bad:?} was accepted");
    }
    let mut typo = base.clone();
    typo["spec"]["replica"] = json!(3);
    assert!(!schema_errors(&typo).is_empty(), "an unknown field was accepted");

    let template = documents(&examples_dir().join("hook-template-success.yaml")).remove(0);
    let mut bad_interval = template.clone();
    bad_interval["spec"]["metrics"][0]["interval"] = json!("60");
    assert!(!schema_errors(&bad_interval).is_empty(), "interval without unit was accepted");
    let mut bad_policy = template;
    bad_policy["spec"]["policy"] = json!("Sequential");
    assert!(!schema_errors(&bad_policy).is_empty(), "unknown policy was accepted");
}
