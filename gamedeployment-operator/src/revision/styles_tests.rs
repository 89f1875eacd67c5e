//! Templates written in everyday styles are the same revision as the template Go stored for them: BCS's operator
//! (and Kubernetes' history library) store a revision from Go's re-encoding of the template, which spells
//! quantities canonically, drops the zero values `omitempty` omits, writes `creationTimestamp: null` and
//! `resources: {}`; a revision taken from a defaulted object holds the API server's defaults. Each case here is a
//! (template as the user wrote it, template as the revision stores it) pair; the end-to-end takeover of a BCS
//! fleet in each style is `tests/e2e/tests/bcs_takeover.rs`.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{holds_template, resolve};
use crate::fixtures;

/// A revision holding `stored` as BCS writes it (`$patch: replace`).
fn revision(stored: &Value) -> ControllerRevision {
    let mut template = stored.clone();
    template["$patch"] = json!("replace");
    let mut revision = super::new_revision(&fixtures::gd(1, "InplaceUpdate"), None, 1);
    revision.metadata.name = Some("game-bcs".into());
    revision.data = RawExtension(json!({"spec": {"template": template}}));
    revision
}

fn typed(written: &Value) -> PodTemplateSpec {
    serde_json::from_value(written.clone()).expect("a valid pod template")
}

/// The styles of the issue: (name, template as written, template as the revision stores it).
fn styles() -> Vec<(&'static str, Value, Value)> {
    vec![
        (
            "the docs' example",
            json!({"metadata": {"labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4", "imagePullPolicy": "IfNotPresent",
                 "ports": [{"name": "http", "containerPort": 8000}]}]}}),
            json!({"metadata": {"creationTimestamp": null, "labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4", "imagePullPolicy": "IfNotPresent", "resources": {},
                 "ports": [{"name": "http", "containerPort": 8000}]}]}}),
        ),
        (
            "quantities not in canonical form",
            json!({"metadata": {"labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4", "resources": {
                    "limits": {"cpu": "1000m", "memory": "1024Mi", "ephemeral-storage": "1000"},
                    "requests": {"cpu": "0.5", "memory": "0.5Gi"}}}]}}),
            json!({"metadata": {"creationTimestamp": null, "labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4", "resources": {
                    "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1k"},
                    "requests": {"cpu": "500m", "memory": "512Mi"}}}]}}),
        ),
        (
            "quantities as YAML numbers",
            json!({"metadata": {"labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4", "resources": {
                    "limits": {"cpu": 2}, "requests": {"cpu": 0.25}}}]}}),
            json!({"metadata": {"creationTimestamp": null, "labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4", "resources": {
                    "limits": {"cpu": "2"}, "requests": {"cpu": "250m"}}}]}}),
        ),
        (
            "zero values Go omits",
            json!({"metadata": {"labels": {"app": "game"}}, "spec": {
                "hostNetwork": false, "hostPID": false, "hostname": "", "containers": [
                {"name": "python", "image": "python:3.4", "stdin": false, "tty": false, "workingDir": "",
                 "ports": [{"name": "http", "containerPort": 8000, "hostPort": 0}],
                 "readinessProbe": {"tcpSocket": {"port": 8000}, "initialDelaySeconds": 0, "timeoutSeconds": 0},
                 "env": [{"name": "EMPTY", "value": ""}]}]}}),
            json!({"metadata": {"creationTimestamp": null, "labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4", "resources": {},
                 "ports": [{"name": "http", "containerPort": 8000}],
                 "readinessProbe": {"tcpSocket": {"port": 8000}},
                 "env": [{"name": "EMPTY"}]}]}}),
        ),
        (
            "values the API server defaults, stored defaulted",
            json!({"metadata": {"labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4",
                 "ports": [{"containerPort": 8000}],
                 "readinessProbe": {"httpGet": {"port": 8000}}}]}}),
            json!({"metadata": {"creationTimestamp": null, "labels": {"app": "game"}}, "spec": {
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                "securityContext": {}, "schedulerName": "default-scheduler", "containers": [
                {"name": "python", "image": "python:3.4", "resources": {},
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                 "imagePullPolicy": "IfNotPresent",
                 "ports": [{"containerPort": 8000, "protocol": "TCP"}],
                 "readinessProbe": {"httpGet": {"path": "/", "port": 8000, "scheme": "HTTP"},
                     "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}}]}}),
        ),
        (
            "values the API server defaults, written out",
            json!({"metadata": {"labels": {"app": "game"}}, "spec": {
                "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                "securityContext": {}, "containers": [
                {"name": "python", "image": "python:latest", "imagePullPolicy": "Always",
                 "terminationMessagePath": "/dev/termination-log",
                 "ports": [{"containerPort": 8000, "protocol": "TCP"}]}]}}),
            json!({"metadata": {"creationTimestamp": null, "labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:latest", "resources": {},
                 "ports": [{"containerPort": 8000}]}]}}),
        ),
        (
            "int-or-string ports",
            json!({"metadata": {"labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4",
                 "livenessProbe": {"tcpSocket": {"port": "8000"}},
                 "lifecycle": {"preStop": {"httpGet": {"port": "8000", "path": "/drain"}}}}]}}),
            json!({"metadata": {"creationTimestamp": null, "labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4", "resources": {},
                 "livenessProbe": {"tcpSocket": {"port": 8000}},
                 "lifecycle": {"preStop": {"httpGet": {"port": 8000, "path": "/drain"}}}}]}}),
        ),
        (
            "empty maps and lists",
            json!({"metadata": {"labels": {"app": "game"}, "annotations": {}}, "spec": {
                "nodeSelector": {}, "tolerations": [], "volumes": [], "containers": [
                {"name": "python", "image": "python:3.4", "args": [], "env": [], "resources": {"limits": {}},
                 "securityContext": {}}]}}),
            json!({"metadata": {"creationTimestamp": null, "labels": {"app": "game"}}, "spec": {"containers": [
                {"name": "python", "image": "python:3.4", "resources": {}}]}}),
        ),
    ]
}

#[test]
fn every_style_is_the_revision_go_stored_for_it() {
    for (name, written, stored) in styles() {
        let template = typed(&written);
        assert!(holds_template(&revision(&stored), &template), "{name}: not recognised");
        // The GameDeployment resolves to the stored revision: nothing new is minted, no pod is outdated.
        let mut gd = fixtures::gd(6, "InplaceUpdate");
        gd.spec.template = template;
        let stored_revision = revision(&stored);
        let resolution = resolve(&gd, &[&stored_revision]);
        assert_eq!((resolution.update_revision.as_str(), resolution.change), ("game-bcs", None), "{name}");
    }
}

/// What the canonical form must not merge: each pair differs in a way a pod would show.
#[test]
fn templates_that_run_differently_stay_different_revisions() {
    let base = json!({"metadata": {"labels": {"app": "game"}}, "spec": {"containers": [
        {"name": "python", "image": "python:3.4", "resources": {"requests": {"cpu": "500m"}}}]}});
    let changed = |path: &[&str], value: Value| {
        let mut v = base.clone();
        let mut at = &mut v;
        for key in &path[..path.len() - 1] {
            at = if let Ok(i) = key.parse::<usize>() { &mut at[i] } else { &mut at[*key] };
        }
        at[path[path.len() - 1]] = value;
        v
    };
    let cases = [
        ("another image", changed(&["spec", "containers", "0", "image"], json!("python:3.5"))),
        ("another cpu request", changed(&["spec", "containers", "0", "resources", "requests", "cpu"], json!("501m"))),
        ("root (runAsUser 0 is not unset)", changed(&["spec", "securityContext"], json!({"runAsUser": 0}))),
        ("no token (false is not unset)", changed(&["spec", "automountServiceAccountToken"], json!(false))),
        ("no service links (false is not the default)", changed(&["spec", "enableServiceLinks"], json!(false))),
        ("immediate termination (0 is not 30)", changed(&["spec", "terminationGracePeriodSeconds"], json!(0))),
        ("an empty label value is a label", changed(&["metadata", "labels", "canary"], json!(""))),
        ("another pull policy", changed(&["spec", "containers", "0", "imagePullPolicy"], json!("Always"))),
    ];
    let stored = revision(&base);
    assert!(holds_template(&stored, &typed(&base)));
    for (name, other) in cases {
        assert!(!holds_template(&stored, &typed(&other)), "{name}: taken for the same template");
        assert!(!holds_template(&revision(&other), &typed(&base)), "{name}: taken for the same template (reversed)");
    }
}

/// A quantity as written and as Go writes it back, built so the canonical spelling is known by construction (not
/// computed by the code under test): a mantissa that is no multiple of the next unit, with its suffix, written
/// with a smaller unit, a larger unit and a fraction, trailing zeros, a `+`, or as a plain number.
fn quantity_pair(choices: &mut Choices) -> (Value, String) {
    const DECIMAL: [&str; 6] = ["u", "m", "", "k", "M", "G"];
    const BINARY: [&str; 4] = ["", "Ki", "Mi", "Gi"];
    if choices.flip() {
        let mantissa = loop {
            let m = 1 + choices.below(5000);
            if !m.is_multiple_of(1000) {
                break m;
            }
        };
        let unit = 1 + choices.below(DECIMAL.len() - 1);
        let canonical = format!("{mantissa}{}", DECIMAL[unit]);
        let fraction = |m: usize| {
            let (whole, frac) = (m / 1000, m % 1000);
            let frac = format!("{frac:03}").trim_end_matches('0').to_string();
            if frac.is_empty() { whole.to_string() } else { format!("{whole}.{frac}") }
        };
        let written = match choices.below(5) {
            0 => Value::String(format!("{}{}", mantissa * 1000, DECIMAL[unit - 1])),
            1 if unit + 1 < DECIMAL.len() => Value::String(format!("{}{}", fraction(mantissa), DECIMAL[unit + 1])),
            2 if unit + 1 < DECIMAL.len() && mantissa % 1000 != 0 && fraction(mantissa).contains('.') => {
                Value::String(format!("{}00{}", fraction(mantissa), DECIMAL[unit + 1]))
            }
            3 => Value::String(format!("+{canonical}")),
            4 if DECIMAL[unit].is_empty() => json!(mantissa),
            _ => Value::String(canonical.clone()),
        };
        (written, canonical)
    } else {
        let mantissa = loop {
            let m = 1 + choices.below(4096);
            if !m.is_multiple_of(1024) {
                break m;
            }
        };
        let unit = 1 + choices.below(BINARY.len() - 1);
        let canonical = format!("{mantissa}{}", BINARY[unit]);
        let written = match choices.below(3) {
            0 if unit > 1 => format!("{}{}", mantissa * 1024, BINARY[unit - 1]),
            1 if unit + 1 < BINARY.len() && mantissa % 128 == 0 => {
                let eighths = mantissa / 128;
                let decimal = format!("{}.{:03}", eighths / 8, (eighths % 8) * 125);
                format!("{}{}", decimal.trim_end_matches('0').trim_end_matches('.'), BINARY[unit + 1])
            }
            _ => canonical.clone(),
        };
        (Value::String(written), canonical)
    }
}

/// Random choices from a proptest-drawn list (cycled), so a failing case shrinks and replays.
struct Choices {
    values: Vec<u32>,
    at: usize,
}

impl Choices {
    fn next(&mut self) -> u32 {
        let v = self.values[self.at % self.values.len()];
        self.at += 1;
        v
    }

    fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n
    }

    fn flip(&mut self) -> bool {
        self.next().is_multiple_of(2)
    }
}

/// Sets `key` to `zero` in `written` only (Go omits it from what it stores), when the coin says so.
fn maybe_zero(choices: &mut Choices, written: &mut Map<String, Value>, key: &str, zero: Value) {
    if choices.flip() {
        written.insert(key.into(), zero);
    }
}

/// A template as a user might write it and the same template as Go re-encodes it (and, sometimes, as the API
/// server's defaulting leaves it).
fn template_pair(choices: &mut Choices) -> (Value, Value) {
    let mut written_container = Map::new();
    let mut stored_container = Map::new();
    for c in [&mut written_container, &mut stored_container] {
        c.insert("name".into(), json!("game"));
        c.insert("image".into(), json!(format!("game:{}", 1 + choices.values[0] % 9)));
    }
    // Resources: canonical quantities in the stored template.
    let mut written_resources = Map::new();
    let mut stored_resources = Map::new();
    for list in ["limits", "requests"] {
        if choices.flip() {
            let (mut w, mut s) = (Map::new(), Map::new());
            for resource in ["cpu", "memory"] {
                if choices.flip() {
                    let (written, canonical) = quantity_pair(choices);
                    w.insert(resource.into(), written);
                    s.insert(resource.into(), Value::String(canonical));
                }
            }
            if !s.is_empty() || choices.flip() {
                written_resources.insert(list.into(), Value::Object(w));
                if !s.is_empty() {
                    stored_resources.insert(list.into(), Value::Object(s));
                }
            }
        }
    }
    if !written_resources.is_empty() || choices.flip() {
        written_container.insert("resources".into(), Value::Object(written_resources));
    }
    // Go writes `resources: {}` even when there are none (a struct, not a pointer).
    stored_container.insert("resources".into(), Value::Object(stored_resources));
    // Zero values Go's omitempty drops.
    maybe_zero(choices, &mut written_container, "stdin", json!(false));
    maybe_zero(choices, &mut written_container, "tty", json!(false));
    maybe_zero(choices, &mut written_container, "workingDir", json!(""));
    maybe_zero(choices, &mut written_container, "args", json!([]));
    maybe_zero(choices, &mut written_container, "env", json!([]));
    // A port, as a number or a string of digits, in either template.
    let port = 7000 + choices.below(2000);
    let spell = |as_string: bool| if as_string { json!(port.to_string()) } else { json!(port) };
    if choices.flip() {
        let (w, s) = (spell(choices.flip()), spell(choices.flip()));
        written_container.insert("livenessProbe".into(), json!({"tcpSocket": {"port": w}}));
        stored_container.insert("livenessProbe".into(), json!({"tcpSocket": {"port": s}}));
    }
    let mut written_port = json!({"containerPort": port});
    if choices.flip() {
        written_port["hostPort"] = json!(0);
    }
    written_container.insert("ports".into(), json!([written_port]));
    stored_container.insert("ports".into(), json!([{"containerPort": port}]));

    let mut written_spec = Map::new();
    let mut stored_spec = Map::new();
    maybe_zero(choices, &mut written_spec, "hostNetwork", json!(false));
    maybe_zero(choices, &mut written_spec, "hostIPC", json!(false));
    maybe_zero(choices, &mut written_spec, "nodeSelector", json!({}));
    maybe_zero(choices, &mut written_spec, "tolerations", json!([]));
    maybe_zero(choices, &mut written_spec, "serviceAccountName", json!(""));
    // Defaults: written out by the user, or present in a revision taken from a defaulted object.
    let defaults = [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("securityContext", json!({})),
    ];
    let container_defaults = [
        ("terminationMessagePath", json!("/dev/termination-log")),
        ("terminationMessagePolicy", json!("File")),
        ("imagePullPolicy", json!("IfNotPresent")),
    ];
    for (key, value) in defaults {
        match choices.below(3) {
            0 => drop(written_spec.insert(key.into(), value)),
            1 => drop(stored_spec.insert(key.into(), value)),
            _ => {}
        }
    }
    for (key, value) in container_defaults {
        match choices.below(3) {
            0 => drop(written_container.insert(key.into(), value)),
            1 => drop(stored_container.insert(key.into(), value)),
            _ => {}
        }
    }
    if choices.flip() {
        let ports = stored_container.get_mut("ports").and_then(Value::as_array_mut);
        if let Some(p) = ports.and_then(|p| p.first_mut()) {
            p["protocol"] = json!("TCP");
        }
    }
    written_spec.insert("containers".into(), json!([Value::Object(written_container)]));
    stored_spec.insert("containers".into(), json!([Value::Object(stored_container)]));

    let mut written_meta = json!({"labels": {"app": "game"}});
    if choices.flip() {
        written_meta["annotations"] = json!({});
    }
    let written = json!({"metadata": written_meta, "spec": Value::Object(written_spec)});
    let stored =
        json!({"metadata": {"creationTimestamp": null, "labels": {"app": "game"}}, "spec": Value::Object(stored_spec)});
    (written, stored)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// A template and its Go-style re-encoding are always the same revision, and a changed image never is.
    #[test]
    fn a_template_and_its_go_re_encoding_are_the_same_revision(values in proptest::collection::vec(any::<u32>(), 8..64)) {
        let mut choices = Choices { values, at: 0 };
        let (written, stored) = template_pair(&mut choices);
        let template = typed(&written);
        prop_assert!(holds_template(&revision(&stored), &template), "written {written:#}\nstored {stored:#}");
        let mut other = stored.clone();
        other["spec"]["containers"][0]["image"] = json!("game:10");
        prop_assert!(!holds_template(&revision(&other), &template));
    }

    /// Every quantity pair the generator builds canonicalises to the spelling it was built from.
    #[test]
    fn a_quantity_and_its_other_spellings_have_one_canonical_form(values in proptest::collection::vec(any::<u32>(), 4..8)) {
        let mut choices = Choices { values, at: 0 };
        let (written, canonical) = quantity_pair(&mut choices);
        let written = match written { Value::String(s) => s, other => other.to_string() };
        prop_assert_eq!(super::quantity::canonical(&written), Some(canonical));
    }
}
