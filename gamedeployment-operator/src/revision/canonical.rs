//! A pod template in the form the API machinery would store and run it, so that "is this the same template" is
//! answered as Kubernetes would answer it, whoever wrote the template down.
//!
//! A revision written by BCS's operator (or by Kubernetes' history library) holds the template as Go re-encoded it
//! after decoding it into typed structs; a GameDeployment holds it as the user wrote it. The two differ in spelling
//! only, and a pod created from either is the same pod, so [`template`] writes both the same way:
//! - **quantities** in canonical form ([`super::quantity`]: `1000m` → `1`, `0.5` → `500m`, a YAML number `1` →
//!   `"1"`), under `limits`, `requests`, `overhead`, `sizeLimit` and `divisor`;
//! - **int-or-string** ports (`httpGet.port`, `tcpSocket.port`): a string of digits is the number (the kubelet
//!   reads it so, and the API server rejects a port name without a letter);
//! - **zero values Go's `omitempty` drops** (`false`, `0`, `""`, `null`, `{}`, `[]`) are dropped, except on the
//!   fields Go declares as pointers where the zero means something else than "unset" ([`ZERO_IS_A_VALUE`]:
//!   `runAsUser: 0` is root, `automountServiceAccountToken: false` turns the token off); entries of free-form
//!   maps (labels, annotations, node selectors, resource lists) are values, never dropped;
//! - **fields the API server defaults** (`SetDefaults_PodSpec`, `SetDefaults_Container`, probes, ports,
//!   `HTTPGetAction`, `ObjectFieldSelector`, volume modes, and `SetDefaults_Pod`'s `enableServiceLinks` and
//!   requests-from-limits) are set to their defaults, as kube-sim's defaulting (`kube-sim/src/registry/defaults.rs`)
//!   and the API server set them on the pods;
//! - `metadata.creationTimestamp` (Go's `null`) and the `$patch` directive of a revision are not template content.
//!
//! Order matters and follows the API server: zero values are dropped first (Go drops them when it encodes, before
//! any defaulting), then defaults fill what is unset, then what defaulting left empty (`securityContext: {}`) is
//! dropped again.

use serde_json::{Map, Value, json};

use super::quantity;

/// Fields whose zero value is not the same as leaving them unset (Go pointers whose zero has a meaning of its own,
/// or whose default is not zero): kept when zero.
pub const ZERO_IS_A_VALUE: &[&str] = &[
    "allowPrivilegeEscalation",
    "automountServiceAccountToken",
    "defaultMode",
    "enableServiceLinks",
    "fsGroup",
    "hostUsers",
    "mode",
    "priority",
    "runAsGroup",
    "runAsUser",
    "terminationGracePeriodSeconds",
    "tolerationSeconds",
];

/// Maps whose entries are the user's data (a label may be `""`), not fields.
const FREE_FORM_MAPS: &[&str] =
    &["labels", "annotations", "nodeSelector", "matchLabels", "volumeAttributes", "options", "limits", "requests"];

/// Maps of resource quantities.
const QUANTITY_MAPS: &[&str] = &["limits", "requests", "overhead"];

/// Fields holding one quantity.
const QUANTITY_FIELDS: &[&str] = &["sizeLimit", "divisor"];

/// Int-or-string port fields.
const PORT_FIELDS: &[&str] = &["port"];

/// The canonical form of a pod template given as JSON (a GameDeployment's `spec.template`, or what a revision
/// stores under `spec.template`).
pub fn template(value: &Value) -> Value {
    canonical(value, PullPolicy::Default)
}

/// [`template`] with `imagePullPolicy` as written (not defaulted), for comparing two templates with their images
/// set aside (an in-place update): that default follows the image's tag (`:latest` pulls `Always`), so the caller
/// compares the policies with each side's image ([`default_pull_policy`]).
pub fn template_apart_from_images(value: &Value) -> Value {
    canonical(value, PullPolicy::AsWritten)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PullPolicy {
    Default,
    AsWritten,
}

fn canonical(value: &Value, pull_policy: PullPolicy) -> Value {
    let mut template = value.clone();
    if let Some(map) = template.as_object_mut() {
        map.remove("$patch");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("creationTimestamp");
        }
    }
    let mut template = spellings(&template, None);
    drop_zero_values(&mut template);
    if let Some(spec) = template.get_mut("spec") {
        pod_spec_defaults(spec, pull_policy);
    }
    drop_zero_values(&mut template);
    template
}

/// Quantities and int-or-string ports in one spelling; `key` is the field `value` is held under.
fn spellings(value: &Value, key: Option<&str>) -> Value {
    match value {
        Value::Object(map) => {
            let quantities = key.is_some_and(|k| QUANTITY_MAPS.contains(&k));
            Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let v = if quantities { quantity_value(v) } else { spellings(v, Some(k)) };
                        (k.clone(), v)
                    })
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| spellings(v, key)).collect()),
        scalar if key.is_some_and(|k| QUANTITY_FIELDS.contains(&k)) => quantity_value(scalar),
        Value::String(s) if key.is_some_and(|k| PORT_FIELDS.contains(&k)) => match s.parse::<u16>() {
            Ok(port) if !s.starts_with('+') => json!(port),
            _ => value.clone(),
        },
        other => other.clone(),
    }
}

/// A quantity (a string, or the number YAML made of `cpu: 1`) in canonical spelling; left as written when it is
/// not a quantity.
fn quantity_value(value: &Value) -> Value {
    let written = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return other.clone(),
    };
    Value::String(quantity::canonical(&written).unwrap_or(written))
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// Drops Go's `omitempty` zero values from objects (never from lists: a list's `""` is an element), depth first so
/// an object emptied by it goes too.
fn drop_zero_values(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if FREE_FORM_MAPS.contains(&key.as_str()) {
                    continue;
                }
                drop_zero_values(v);
            }
            map.retain(|key, v| {
                let kept_zero = ZERO_IS_A_VALUE.contains(&key.as_str()) && !matches!(v, Value::Null);
                let empty_collection =
                    matches!(v, Value::Object(m) if m.is_empty()) || matches!(v, Value::Array(a) if a.is_empty());
                kept_zero && !empty_collection || !is_zero(v)
            });
        }
        Value::Array(items) => items.iter_mut().for_each(drop_zero_values),
        _ => {}
    }
}

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_string(), value);
    }
}

/// The `imagePullPolicy` the API server gives a container of `image` that sets none (`SetDefaults_Container`).
pub fn default_pull_policy(image: &str) -> &'static str {
    if image_tag_is_latest(image) { "Always" } else { "IfNotPresent" }
}

/// `:latest` or no tag (and no digest) means `imagePullPolicy: Always` (`SetDefaults_Container`).
fn image_tag_is_latest(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    last.rsplit_once(':').is_none_or(|(_, tag)| tag == "latest")
}

/// `SetDefaults_PodSpec` with its containers, volumes and handlers, and the two pod-level defaults of
/// `SetDefaults_Pod` that follow from the template alone.
fn pod_spec_defaults(spec: &mut Value, pull_policy: PullPolicy) {
    let Some(s) = spec.as_object_mut() else { return };
    set_default(s, "dnsPolicy", json!("ClusterFirst"));
    set_default(s, "restartPolicy", json!("Always"));
    set_default(s, "terminationGracePeriodSeconds", json!(30));
    set_default(s, "securityContext", json!({}));
    set_default(s, "schedulerName", json!("default-scheduler"));
    set_default(s, "enableServiceLinks", json!(true));
    let host_network = s.get("hostNetwork").and_then(Value::as_bool).unwrap_or(false);
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(containers)) = s.get_mut(list) {
            for c in containers {
                container_defaults(c, host_network, pull_policy);
            }
        }
    }
    if let Some(Value::Array(volumes)) = s.get_mut("volumes") {
        for v in volumes.iter_mut().filter_map(Value::as_object_mut) {
            for kind in ["secret", "configMap", "downwardAPI", "projected"] {
                if let Some(source) = v.get_mut(kind).and_then(Value::as_object_mut) {
                    set_default(source, "defaultMode", json!(420));
                }
            }
        }
    }
    handler_defaults(spec);
}

/// `SetDefaults_Container`, `SetDefaults_Probe`, `SetDefaults_ContainerPort`, and (`SetDefaults_PodSpec`) host
/// ports equal to container ports on the host network.
fn container_defaults(container: &mut Value, host_network: bool, pull_policy: PullPolicy) {
    let Some(c) = container.as_object_mut() else { return };
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    if pull_policy == PullPolicy::Default {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        set_default(c, "imagePullPolicy", json!(default_pull_policy(image)));
    }
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("containerPort").cloned().filter(|_| host_network) {
                set_default(p, "hostPort", port);
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
        }
    }
    // Requests default to limits (`SetDefaults_Pod`, for every pod made from the template).
    if let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut)
        && let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned()
        && let Some(requests) = resources.entry("requests").or_insert_with(|| json!({})).as_object_mut()
    {
        for (name, value) in limits {
            requests.entry(name).or_insert(value);
        }
    }
}

/// Defaults of types that appear anywhere in a pod spec: `HTTPGetAction` (path `/`, scheme `HTTP`) and
/// `ObjectFieldSelector` (apiVersion `v1`).
fn handler_defaults(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if FREE_FORM_MAPS.contains(&key.as_str()) {
                    continue;
                }
                if let Some(inner) = v.as_object_mut() {
                    match key.as_str() {
                        "httpGet" => {
                            set_default(inner, "path", json!("/"));
                            set_default(inner, "scheme", json!("HTTP"));
                        }
                        "fieldRef" => set_default(inner, "apiVersion", json!("v1")),
                        _ => {}
                    }
                }
                handler_defaults(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(handler_defaults),
        _ => {}
    }
}
