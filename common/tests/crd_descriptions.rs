//! What `kubectl explain` shows comes from the CRD schema: every HookTemplate and HookRun field, and every
//! GameDeployment field outside the embedded pod template (whose descriptions are stripped to fit the apply annotation) must say what it is, in whole
//! sentences that kubectl can wrap (no hard line breaks inside a paragraph, no rustdoc link syntax), and every
//! int-or-string field must say that it takes an integer or a percentage.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{JSONSchemaProps, JSONSchemaPropsOrArray};

fn gamedeployment_schema() -> JSONSchemaProps {
    let (_, crd) = common::crd::all()
        .into_iter()
        .find(|(_, crd)| crd.spec.names.kind == "GameDeployment")
        .expect("GameDeployment CRD");
    crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.clone()).expect("schema")
}

/// Visits every property below `schema` as (path, schema), not descending into `skip`ped paths.
fn walk<'a>(schema: &'a JSONSchemaProps, path: &str, skip: &[&str], out: &mut Vec<(String, &'a JSONSchemaProps)>) {
    for (name, child) in schema.properties.iter().flatten() {
        let child_path = format!("{path}.{name}");
        out.push((child_path.clone(), child));
        if skip.contains(&child_path.as_str()) {
            continue;
        }
        walk(child, &child_path, skip, out);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &schema.items {
        walk(items, path, skip, out);
    }
}

fn own_fields(schema: &JSONSchemaProps) -> Vec<(String, &JSONSchemaProps)> {
    let mut fields = Vec::new();
    // The pod template's own fields, the label selector's and the claim templates' specs are Kubernetes types,
    // documented by Kubernetes.
    walk(schema, "gd", &["gd.spec.template", "gd.spec.selector", "gd.spec.volumeClaimTemplates.spec"], &mut fields);
    fields
}

#[test]
fn every_gamedeployment_field_has_a_description() {
    let schema = gamedeployment_schema();
    let missing: Vec<String> = own_fields(&schema)
        .into_iter()
        .filter(|(_, s)| s.description.as_deref().is_none_or(|d| d.trim().is_empty()))
        .map(|(path, _)| path)
        .collect();
    assert!(missing.is_empty(), "fields without a description (kubectl explain prints <no description>): {missing:?}");
}

#[test]
fn every_hooktemplate_and_hookrun_field_has_a_description() {
    for kind in ["HookTemplate", "HookRun"] {
        let (_, crd) = common::crd::all().into_iter().find(|(_, crd)| crd.spec.names.kind == kind).expect("CRD");
        let schema = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.clone()).unwrap();
        let mut fields = Vec::new();
        walk(&schema, kind, &[], &mut fields);
        let missing: Vec<String> = fields
            .into_iter()
            .filter(|(_, s)| s.description.as_deref().is_none_or(|d| d.trim().is_empty()))
            .map(|(path, _)| path)
            .collect();
        assert!(missing.is_empty(), "{kind} fields without a description (kubectl explain): {missing:?}");
    }
}

#[test]
fn descriptions_are_whole_paragraphs() {
    let (mut all, mut broken) = (Vec::new(), Vec::new());
    for (_, crd) in common::crd::all() {
        let schema = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.clone()).unwrap();
        let kind = crd.spec.names.kind.clone();
        let mut fields = vec![(kind.clone(), &schema)];
        walk(&schema, &kind, &[], &mut fields);
        for (path, s) in fields {
            if let Some(d) = &s.description {
                all.push(path.clone());
                // A single line break inside a paragraph makes kubectl explain's wrapped text look cut off.
                let single_break = d.replace("\n\n", "").contains('\n');
                if single_break || d.contains("[`") || d.ends_with(' ') {
                    broken.push(format!("{path}: {d:?}"));
                }
            }
        }
    }
    assert!(!all.is_empty());
    assert!(
        broken.is_empty(),
        "descriptions with line breaks inside a paragraph or rustdoc links:\n{}",
        broken.join("\n")
    );
}

#[test]
fn int_or_string_fields_say_integer_or_percentage() {
    let schema = gamedeployment_schema();
    let fields = own_fields(&schema);
    let int_or_string: Vec<_> = fields.iter().filter(|(_, s)| s.x_kubernetes_int_or_string == Some(true)).collect();
    let paths: Vec<&str> = int_or_string.iter().map(|(p, _)| p.as_str()).collect();
    for want in [
        "gd.spec.updateStrategy.maxUnavailable",
        "gd.spec.updateStrategy.maxSurge",
        "gd.spec.updateStrategy.partition",
        "gd.spec.scaleStrategy.createBatch",
        "gd.spec.updateStrategy.canary.steps.partition",
    ] {
        assert!(paths.contains(&want), "{want} is not int-or-string: {paths:?}");
    }
    for (path, s) in int_or_string {
        let d = s.description.as_deref().unwrap_or_default();
        assert!(d.contains("an integer or a percentage"), "{path}: {d:?}");
    }
}

/// Every Rust type declared in the API modules, except the three kinds (users know those names).
fn rust_type_names() -> Vec<String> {
    let sources = [include_str!("../src/api/gamedeployment.rs"), include_str!("../src/api/hook.rs")];
    let mut names = Vec::new();
    for line in sources.iter().flat_map(|s| s.lines()) {
        let line = line.trim_start();
        for prefix in ["pub struct ", "pub enum "] {
            if let Some(rest) = line.strip_prefix(prefix) {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !["GameDeployment", "HookRun", "HookTemplate"].contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
    }
    names
}

#[test]
fn descriptions_stand_on_their_own() {
    // `kubectl explain` is read where the README is not, by people who never saw the Rust code (issue 34, item
    // 9): no "see the README", no Rust type names, and no two fields of one object sharing a text (onFailure and
    // onTimeout once both showed their enum's description).
    let types = rust_type_names();
    assert!(types.contains(&"HookGatePolicy".to_string()), "{types:?}");
    let mut problems = Vec::new();
    for (_, crd) in common::crd::all() {
        let schema = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.clone()).unwrap();
        let kind = crd.spec.names.kind.clone();
        let mut fields = vec![(kind.clone(), &schema)];
        walk(&schema, &kind, &[format!("{kind}.spec.template").as_str()], &mut fields);
        for (path, s) in &fields {
            let d = s.description.as_deref().unwrap_or_default();
            if d.contains("README") {
                problems.push(format!("{path}: points at the README: {d:?}"));
            }
            for name in types.iter().filter(|n| d.contains(&format!("`{n}`"))) {
                problems.push(format!("{path}: names the Rust type {name}: {d:?}"));
            }
            let mut seen = std::collections::BTreeMap::new();
            for (name, child) in s.properties.iter().flatten() {
                if let Some(text) = child.description.as_deref().filter(|t| !t.is_empty())
                    && let Some(other) = seen.insert(text.to_string(), name.clone())
                {
                    problems.push(format!("{path}.{name} and .{other} share one description: {text:?}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn documented_enums_keep_a_plain_enum_schema() {
    // The API enums' variants carry rustdoc (missing_docs). With documented variants schemars makes a `oneOf` of
    // described constants, which drops `null` from an optional field's `enum` (unlike every other optional field)
    // and puts the enum's own text over the field's: `hookPolicy.onFailure`'s enum and the hook conditions'
    // `releasedBy` text were lost that way before `schema::plain_enum`. HookRun `spec.policy` is optional, and its
    // field text says what the enum's does not.
    let mut problems = Vec::new();
    for (_, crd) in common::crd::all() {
        let schema = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.clone()).unwrap();
        let kind = crd.spec.names.kind.clone();
        let mut fields = Vec::new();
        walk(&schema, &kind, &[format!("{kind}.spec.template").as_str()], &mut fields);
        for (path, s) in &fields {
            let Some(values) = &s.enum_ else { continue };
            if s.nullable == Some(true) && !values.iter().any(|v| v.0.is_null()) {
                problems.push(format!("{path}: optional, but its enum has no null: {values:?}"));
            }
            if kind == "HookRun" && path == "HookRun.spec.policy" {
                let d = s.description.as_deref().unwrap_or_default();
                if !d.contains("Immutable") {
                    problems.push(format!("{path}: the enum's description replaced the field's: {d:?}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
