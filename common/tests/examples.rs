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

/// Turns a CRD's OpenAPI v3 schema into a strict JSON Schema: unknown fields are errors (where the API
/// server would prune them silently) and `nullable` becomes a `null` type.
fn strict(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> = map.iter().map(|(k, v)| (k.clone(), strict(v))).collect();
            if map.get("nullable") == Some(&Value::Bool(true))
                && let Some(Value::String(t)) = map.get("type")
            {
                out.insert("type".into(), json!([t, "null"]));
            }
            let preserves = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            if map.contains_key("properties") && !preserves && !map.contains_key("additionalProperties") {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strict).collect()),
        other => other.clone(),
    }
}

fn validator_for(kind: &str) -> jsonschema::Validator {
    let (_, crd) = common::crd::all().into_iter().find(|(_, c)| c.spec.names.kind == kind).expect("known kind");
    let schema = serde_json::to_value(&crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    let mut schema = strict(&schema);
    // The API server describes these itself; manifests always carry them.
    let props = schema["properties"].as_object_mut().unwrap();
    props.insert("apiVersion".into(), json!({ "type": "string", "enum": ["tkex.tencent.com/v1alpha1"] }));
    props.insert("kind".into(), json!({ "type": "string", "enum": [kind] }));
    props.insert("metadata".into(), json!({ "type": "object" }));
    jsonschema::validator_for(&schema).expect("the CRD schema is a valid JSON schema")
}

fn schema_errors(doc: &Value) -> Vec<String> {
    let kind = doc["kind"].as_str().expect("kind");
    validator_for(kind).iter_errors(doc).map(|e| format!("{} at {}", e, e.instance_path())).collect()
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
