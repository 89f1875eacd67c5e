//! Per-kind create/update behaviour: what `PrepareForCreate`, `PrepareForUpdate`, `Validate` and
//! `ValidateUpdate` of the real registries do for the kinds kube-sim serves.

use serde_json::{Map, Value, json};

use super::defaults;
use crate::resources::{GenerationRule, ResourceDef, Special};
use crate::status::{FieldError, go_value};

/// Which endpoint a write came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Main,
    Status,
    Scale,
    Finalize,
}

/// `a == b` for two maps without the keys in `skip`, without copying them; `eq` compares the values of a key both
/// have.
fn eq_except(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    skip: &[&str],
    eq: impl Fn(&str, &Value, &Value) -> bool,
) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
    kept(a) == kept(b)
        && a.iter().filter(|(k, _)| !skip.contains(&k.as_str())).all(|(k, v)| b.get(k).is_some_and(|w| eq(k, v, w)))
}

/// Whether two objects differ outside `metadata` (a non-object counts as an empty one).
fn differ_but_metadata(a: &Value, b: &Value) -> bool {
    let empty = Map::new();
    let (a, b) = (a.as_object().unwrap_or(&empty), b.as_object().unwrap_or(&empty));
    !eq_except(a, b, &["metadata"], |_, v, w| crate::json::eq(v, w))
}

/// Fields of a pod's spec an update may change (the images of its containers aside).
const POD_MUTABLE: &[&str] =
    &["activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"];

/// Whether an update changes a pod's spec beyond what may change: the specs compared without the mutable fields and
/// their containers' images, without copying them (the result of comparing copies stripped of those,
/// `strategy::tests::pod_spec_immutability_agrees_with_stripped_copies`).
fn pod_spec_changed(old: Option<&Value>, new: Option<&Value>) -> bool {
    let (old, new) = (old.unwrap_or(&Value::Null), new.unwrap_or(&Value::Null));
    let (Value::Object(o), Value::Object(n)) = (old, new) else { return !crate::json::eq(old, new) };
    let containers_eq = |a: &Value, b: &Value| match (a, b) {
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| match (x, y) {
                    (Value::Object(x), Value::Object(y)) => {
                        eq_except(x, y, &["image"], |_, v, w| crate::json::eq(v, w))
                    }
                    _ => crate::json::eq(x, y),
                })
        }
        _ => crate::json::eq(a, b),
    };
    !eq_except(o, n, POD_MUTABLE, |k, v, w| match k {
        "containers" | "initContainers" => containers_eq(v, w),
        _ => crate::json::eq(v, w),
    })
}

/// Create-time mutations (everything but system metadata, which the registry sets).
pub(crate) fn prepare_create(rd: &ResourceDef, obj: &mut Value, sa_automount: bool) {
    let Value::Object(m) = obj else { return };
    if rd.status_subresource && rd.special != Special::Node {
        m.remove("status");
    }
    match rd.generation {
        GenerationRule::None => {
            crate::meta::metadata_mut(obj).remove("generation");
        }
        _ => {
            crate::meta::metadata_mut(obj).insert("generation".into(), json!(1));
        }
    }
    match rd.special {
        Special::Pod => {
            defaults::pod_defaults(obj, sa_automount);
            let qos = defaults::qos_class(obj);
            if let Value::Object(m) = obj {
                m.insert("status".into(), json!({"phase": "Pending", "qosClass": qos}));
            }
        }
        Special::Namespace => {
            let name = crate::meta::name(obj).to_string();
            let labels = crate::meta::metadata_mut(obj).entry("labels").or_insert_with(|| json!({}));
            if let Value::Object(l) = labels {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            if let Value::Object(m) = obj {
                m.insert("spec".into(), json!({"finalizers": ["kubernetes"]}));
                m.insert("status".into(), json!({"phase": "Active"}));
            }
        }
        Special::Deployment => defaults::deployment_defaults(obj),
        Special::ReplicaSet => defaults::replicaset_defaults(obj),
        Special::StatefulSet => defaults::statefulset_defaults(obj),
        Special::DaemonSet => defaults::daemonset_defaults(obj),
        Special::Job => defaults::job_defaults(obj),
        Special::Secret => secret_prepare(obj),
        Special::PersistentVolumeClaim => {
            if let Value::Object(m) = obj {
                let spec = m.entry("spec").or_insert_with(|| json!({}));
                if let Value::Object(s) = spec {
                    s.entry("volumeMode").or_insert_with(|| json!("Filesystem"));
                }
                m.insert("status".into(), json!({"phase": "Pending"}));
            }
        }
        Special::Rbac => defaults::rbac_defaults(obj),
        Special::Plain if rd.group == crate::admission::config::GROUP => {
            crate::admission::config::defaults(obj, rd.plural == crate::admission::config::MUTATING)
        }
        Special::Crd => {
            let storage = super::crd::storage_version(obj).cloned();
            if let Value::Object(m) = obj {
                if let Some(Value::Object(spec)) = m.get_mut("spec") {
                    spec.entry("conversion").or_insert_with(|| json!({"strategy": "None"}));
                }
                m.insert(
                    "status".into(),
                    json!({"acceptedNames": {"kind": "", "plural": ""}, "conditions": [], "storedVersions": storage.map(|s| vec![s]).unwrap_or_default()}),
                );
            }
            let fins = crate::meta::finalizers(obj);
            if !fins.iter().any(|f| f == "customresourcecleanup.apiextensions.k8s.io") {
                let mut f = fins;
                f.push("customresourcecleanup.apiextensions.k8s.io".into());
                crate::meta::set_finalizers(obj, &f);
            }
        }
        _ => {}
    }
    if rd.special == Special::Plain && rd.kind == "CronJob" {
        defaults::cronjob_defaults(obj);
    }
}

fn secret_prepare(obj: &mut Value) {
    let Value::Object(m) = obj else { return };
    m.entry("type").or_insert_with(|| json!("Opaque"));
    if let Some(Value::Object(sd)) = m.remove("stringData") {
        let data = m.entry("data").or_insert_with(|| json!({}));
        if let Value::Object(d) = data {
            for (k, v) in sd {
                let s = v.as_str().unwrap_or_default();
                d.insert(k, json!(data_encoding::BASE64.encode(s.as_bytes())));
            }
        }
    }
}

/// A copy of a stored object whose top-level `status` and `metadata.managedFields` are `null`, in their places: a
/// custom resource's status write replaces (or removes) both, so copying them would be wasted, and the keys keep the
/// order a full copy would give them (`strategy::tests::a_status_write_copies_what_it_keeps`).
fn clone_for_status_write(old: &Value) -> Value {
    let Value::Object(m) = old else { return old.clone() };
    let copy = |k: &String, v: &Value| -> Value {
        match (k.as_str(), v) {
            ("status", _) => Value::Null,
            ("metadata", Value::Object(md)) => Value::Object(
                md.iter()
                    .map(|(k, v)| (k.clone(), if k == "managedFields" { Value::Null } else { v.clone() }))
                    .collect(),
            ),
            _ => v.clone(),
        }
    };
    Value::Object(m.iter().map(|(k, v)| (k.clone(), copy(k, v))).collect())
}

/// `next` with the status and managedFields of a custom resource's status write (each removed when absent).
fn with_status_and_fields(mut next: Value, status: Option<Value>, managed: Option<Value>) -> Value {
    if let Value::Object(m) = &mut next {
        match status {
            Some(s) => {
                m.insert("status".into(), s);
            }
            None => {
                m.remove("status");
            }
        }
    }
    let meta = crate::meta::metadata_mut(&mut next);
    match managed {
        Some(mf) => {
            meta.insert("managedFields".into(), mf);
        }
        None => {
            meta.remove("managedFields");
        }
    }
    next
}

/// Update-time mutations; `old` is the stored object, `new` the incoming one (storage form),
/// with system metadata already carried over.
pub(crate) fn prepare_update(rd: &ResourceDef, endpoint: Endpoint, old: &Value, new: &mut Value) {
    match endpoint {
        Endpoint::Main | Endpoint::Scale => {
            // A write that sends the stored status back (most do) keeps it without a copy.
            if rd.status_subresource && !crate::json::opt_eq(new.get("status"), old.get("status")) {
                let old_status = old.get("status").cloned();
                if let Value::Object(m) = new {
                    match old_status {
                        Some(s) => {
                            m.insert("status".into(), s);
                        }
                        None => {
                            m.remove("status");
                        }
                    }
                }
            }
        }
        Endpoint::Status => {
            if rd.is_custom() {
                // Taken out of `new`, which is replaced below: only the stored object is copied.
                let status = new.get_mut("status").map(std::mem::take);
                let managed = new.get_mut("metadata").and_then(|m| m.get_mut("managedFields")).map(std::mem::take);
                // Neither the stored status nor the stored managedFields are copied: both are replaced.
                *new = with_status_and_fields(clone_for_status_write(old), status, managed);
            } else {
                if let (Value::Object(n), Value::Object(o)) = (&mut *new, old) {
                    let keys: Vec<String> =
                        n.keys().chain(o.keys()).filter(|k| *k != "metadata" && *k != "status").cloned().collect();
                    for k in keys {
                        match o.get(&k) {
                            // Unchanged (the usual status write): nothing to copy.
                            Some(v) if n.get(&k).is_some_and(|w| crate::json::eq(w, v)) => {}
                            Some(v) => {
                                n.insert(k, v.clone());
                            }
                            None => {
                                n.remove(&k);
                            }
                        }
                    }
                }
                let old_owners = crate::meta::metadata(old).and_then(|m| m.get("ownerReferences")).cloned();
                let old_labels = crate::meta::metadata(old).and_then(|m| m.get("labels")).cloned();
                let meta = crate::meta::metadata_mut(new);
                match old_owners {
                    Some(o) => meta.insert("ownerReferences".into(), o),
                    None => meta.remove("ownerReferences"),
                };
                if matches!(
                    rd.special,
                    Special::Deployment | Special::ReplicaSet | Special::StatefulSet | Special::DaemonSet
                ) {
                    match old_labels {
                        Some(l) => meta.insert("labels".into(), l),
                        None => meta.remove("labels"),
                    };
                }
            }
        }
        Endpoint::Finalize => {
            let finalizers = new.get("spec").and_then(|s| s.get("finalizers")).cloned();
            let mut next = old.clone();
            if let Some(Value::Object(spec)) = next.get_mut("spec") {
                match finalizers {
                    Some(f) => spec.insert("finalizers".into(), f),
                    None => spec.remove("finalizers"),
                };
            }
            *new = next;
        }
    }
    // Generation.
    let old_gen = crate::meta::generation(old);
    let bump = endpoint != Endpoint::Status
        && endpoint != Endpoint::Finalize
        && match rd.generation {
            GenerationRule::None => false,
            GenerationRule::Spec => !crate::json::opt_eq(new.get("spec"), old.get("spec")),
            GenerationRule::AllButMetadata => differ_but_metadata(new, old),
        };
    match rd.generation {
        GenerationRule::None => {
            if old_gen > 0 {
                crate::meta::metadata_mut(new).insert("generation".into(), json!(old_gen));
            } else {
                crate::meta::metadata_mut(new).remove("generation");
            }
        }
        _ => {
            let g = if bump { old_gen + 1 } else { old_gen.max(1) };
            crate::meta::metadata_mut(new).insert("generation".into(), json!(g));
        }
    }
    match rd.special {
        Special::Namespace if endpoint == Endpoint::Main => {
            // spec.finalizers only change through /finalize; status only through /status.
            if let (Value::Object(n), Some(spec)) = (&mut *new, old.get("spec")) {
                n.insert("spec".into(), spec.clone());
            }
            let name = crate::meta::name(new).to_string();
            let labels = crate::meta::metadata_mut(new).entry("labels").or_insert_with(|| json!({}));
            if let Value::Object(l) = labels {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
        Special::Namespace => {
            let name = crate::meta::name(new).to_string();
            let labels = crate::meta::metadata_mut(new).entry("labels").or_insert_with(|| json!({}));
            if let Value::Object(l) = labels {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
        Special::Secret => secret_prepare(new),
        Special::Service => {
            // Allocated values survive updates that omit them (patchAllocatedValues).
            if let (Some(Value::Object(ns)), Some(os)) = (new.get_mut("spec"), old.get("spec")) {
                for k in [
                    "clusterIP",
                    "clusterIPs",
                    "ipFamilies",
                    "ipFamilyPolicy",
                    "internalTrafficPolicy",
                    "sessionAffinity",
                    "type",
                ] {
                    if ns.get(k).is_none_or(|v| v.is_null() || v == "")
                        && let Some(v) = os.get(k)
                    {
                        ns.insert(k.into(), v.clone());
                    }
                }
            }
        }
        Special::Deployment => defaults::deployment_defaults(new),
        Special::ReplicaSet => defaults::replicaset_defaults(new),
        Special::StatefulSet => defaults::statefulset_defaults(new),
        Special::DaemonSet => defaults::daemonset_defaults(new),
        Special::Job => defaults::job_defaults(new),
        Special::Rbac => defaults::rbac_defaults(new),
        Special::Plain if rd.group == crate::admission::config::GROUP => {
            crate::admission::config::defaults(new, rd.plural == crate::admission::config::MUTATING)
        }
        Special::Pod if endpoint == Endpoint::Main => {
            // Pod spec defaults are applied on the incoming spec too, so that an update that
            // sends back the object it read compares equal (spec is then checked for immutability).
            if let Some(spec) = new.get_mut("spec") {
                defaults::pod_spec_defaults(spec);
            }
        }
        _ => {}
    }
}

fn config_key_errors(field: &str, m: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(Value::Object(d)) = m {
        for k in d.keys() {
            let ok = !k.is_empty()
                && k.len() <= 253
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
            if !ok || k == "." || k == ".." {
                errs.push(FieldError::invalid(
                    format!("{field}[{k}]"),
                    json!(k),
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                ));
            }
        }
    }
    errs
}

fn template_errors(obj: &Value, prefix: &str, selector_required: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec");
    let selector = spec.and_then(|s| s.get("selector"));
    if selector_required && selector.is_none_or(Value::is_null) {
        errs.push(FieldError::required(format!("{prefix}.selector"), ""));
    }
    let template_labels =
        spec.and_then(|s| s.get("template")).and_then(|t| t.get("metadata")).and_then(|m| m.get("labels"));
    if let Some(sel) = selector.filter(|s| !s.is_null()) {
        let empty = sel.get("matchLabels").and_then(Value::as_object).is_none_or(|m| m.is_empty())
            && sel.get("matchExpressions").and_then(Value::as_array).is_none_or(|a| a.is_empty());
        if empty {
            errs.push(FieldError::invalid(
                format!("{prefix}.selector"),
                sel.clone(),
                "empty selector is invalid for deployment",
            ));
        } else if let Ok(s) = crate::selector::LabelSelector::from_label_selector_object(sel) {
            let labels: std::collections::BTreeMap<String, String> = template_labels
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                .unwrap_or_default();
            if !s.matches(&labels) {
                errs.push(FieldError::invalid(
                    format!("{prefix}.template.metadata.labels"),
                    template_labels.cloned().unwrap_or(Value::Null),
                    "`selector` does not match template `labels`",
                ));
            }
        }
    }
    let containers = spec.and_then(|s| s.get("template")).and_then(|t| t.get("spec")).and_then(|s| s.get("containers"));
    errs.extend(container_errors(containers, &format!("{prefix}.template.spec.containers")));
    if let Some(r) = spec.and_then(|s| s.get("replicas")).and_then(Value::as_i64)
        && r < 0
    {
        errs.push(FieldError::invalid(format!("{prefix}.replicas"), json!(r), "must be greater than or equal to 0"));
    }
    errs
}

fn container_errors(containers: Option<&Value>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match containers.and_then(Value::as_array) {
        None => errs.push(FieldError::required(path, "")),
        Some(cs) if cs.is_empty() => errs.push(FieldError::required(path, "")),
        Some(cs) => {
            let mut names: Vec<&str> = Vec::new();
            for (i, c) in cs.iter().enumerate() {
                let name = c.get("name").and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    errs.push(FieldError::required(format!("{path}[{i}].name"), ""));
                } else {
                    for e in crate::validation::dns1123_label_errors(name) {
                        errs.push(FieldError::invalid(format!("{path}[{i}].name"), json!(name), e));
                    }
                    if names.contains(&name) {
                        errs.push(FieldError::duplicate(format!("{path}[{i}].name"), json!(name)));
                    }
                    names.push(name);
                }
                if c.get("image").and_then(Value::as_str).is_none_or(|s| s.trim().is_empty()) {
                    errs.push(FieldError::required(format!("{path}[{i}].image"), ""));
                }
                if let Some(ports) = c.get("ports").and_then(Value::as_array) {
                    for (j, p) in ports.iter().enumerate() {
                        let cp = p.get("containerPort").and_then(Value::as_i64).unwrap_or(0);
                        if !(1..=65535).contains(&cp) {
                            errs.push(FieldError::invalid(
                                format!("{path}[{i}].ports[{j}].containerPort"),
                                json!(cp),
                                "must be between 1 and 65535, inclusive",
                            ));
                        }
                    }
                }
            }
        }
    }
    errs
}

/// Kind-specific validation of a new object (`Validate`).
pub(crate) fn validate_create(rd: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    match rd.special {
        Special::Pod => {
            let mut errs = container_errors(obj.get("spec").and_then(|s| s.get("containers")), "spec.containers");
            if let Some(rp) = obj.get("spec").and_then(|s| s.get("restartPolicy")).and_then(Value::as_str)
                && !["Always", "OnFailure", "Never"].contains(&rp)
            {
                errs.push(FieldError::not_supported(
                    "spec.restartPolicy",
                    json!(rp),
                    &["Always".into(), "OnFailure".into(), "Never".into()],
                ));
            }
            errs
        }
        Special::Deployment | Special::ReplicaSet | Special::StatefulSet | Special::DaemonSet => {
            template_errors(obj, "spec", true)
        }
        Special::Job => container_errors(
            obj.get("spec")
                .and_then(|s| s.get("template"))
                .and_then(|t| t.get("spec"))
                .and_then(|s| s.get("containers")),
            "spec.template.spec.containers",
        ),
        Special::ConfigMap => {
            let mut e = config_key_errors("data", obj.get("data"));
            e.extend(config_key_errors("binaryData", obj.get("binaryData")));
            e
        }
        Special::Secret => config_key_errors("data", obj.get("data")),
        Special::Service => service_errors(obj),
        Special::ControllerRevision => {
            let mut errs = Vec::new();
            match obj.get("revision").and_then(Value::as_i64) {
                Some(r) if r < 0 => {
                    errs.push(FieldError::invalid("revision", json!(r), "must be greater than or equal to 0"))
                }
                _ => {}
            }
            errs
        }
        Special::Rbac if rd.kind.ends_with("Binding") => {
            let mut errs = Vec::new();
            let rr = obj.get("roleRef");
            for f in ["kind", "name"] {
                if rr.and_then(|r| r.get(f)).and_then(Value::as_str).is_none_or(str::is_empty) {
                    errs.push(FieldError::required(format!("roleRef.{f}"), ""));
                }
            }
            errs
        }
        Special::Plain if rd.group == crate::admission::config::GROUP => {
            let mut errs = crate::admission::config::validate(obj);
            errs.extend(crate::admission::policy::validate(&rd.plural, obj));
            errs
        }
        _ => vec![],
    }
}

fn service_errors(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec");
    let ty = spec.and_then(|s| s.get("type")).and_then(Value::as_str).unwrap_or("ClusterIP");
    if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&ty) {
        errs.push(FieldError::not_supported(
            "spec.type",
            json!(ty),
            &["ClusterIP".into(), "ExternalName".into(), "LoadBalancer".into(), "NodePort".into()],
        ));
    }
    let headless = spec.and_then(|s| s.get("clusterIP")).and_then(Value::as_str) == Some("None");
    let ports = spec.and_then(|s| s.get("ports")).and_then(Value::as_array);
    if ty != "ExternalName" && !headless && ports.is_none_or(|p| p.is_empty()) {
        errs.push(FieldError::required("spec.ports", ""));
    }
    for (i, p) in ports.into_iter().flatten().enumerate() {
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            errs.push(FieldError::invalid(
                format!("spec.ports[{i}].port"),
                json!(port),
                "must be between 1 and 65535, inclusive",
            ));
        }
        if ports.is_some_and(|ps| ps.len() > 1) && p.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            errs.push(FieldError::required(format!("spec.ports[{i}].name"), ""));
        }
    }
    errs
}

const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Kind-specific update validation (`ValidateUpdate`), beyond metadata immutability.
pub(crate) fn validate_update(rd: &ResourceDef, endpoint: Endpoint, old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match rd.special {
        Special::Pod if endpoint == Endpoint::Main => {
            if pod_spec_changed(old.get("spec"), new.get("spec")) {
                errs.push(FieldError::forbidden("spec", POD_UPDATE_FORBIDDEN));
            }
            fn tolerations(v: &Value) -> &[Value] {
                v.get("spec").and_then(|s| s.get("tolerations")).and_then(Value::as_array).map_or(&[], Vec::as_slice)
            }
            let (old_tol, new_tol) = (tolerations(old), tolerations(new));
            if old_tol.iter().any(|t| !new_tol.contains(t)) {
                errs.push(FieldError::forbidden(
                    "spec.tolerations",
                    "existing toleration can not be modified except its tolerationSeconds",
                ));
            }
        }
        Special::Deployment | Special::ReplicaSet | Special::StatefulSet | Special::DaemonSet | Special::Job
            if endpoint != Endpoint::Status =>
        {
            let os = old.get("spec").and_then(|s| s.get("selector"));
            let ns = new.get("spec").and_then(|s| s.get("selector"));
            if os != ns {
                errs.push(FieldError::invalid(
                    "spec.selector",
                    ns.cloned().unwrap_or(Value::Null),
                    "field is immutable",
                ));
            }
        }
        Special::Secret | Special::ConfigMap => {
            if old.get("immutable").and_then(Value::as_bool) == Some(true) {
                for f in ["data", "binaryData", "stringData"] {
                    if old.get(f) != new.get(f) {
                        errs.push(FieldError::forbidden(f, "field is immutable when `immutable` is set"));
                    }
                }
                if new.get("immutable").and_then(Value::as_bool) != Some(true) {
                    errs.push(FieldError::forbidden("immutable", "field is immutable when `immutable` is set"));
                }
            }
            if rd.special == Special::Secret && old.get("type") != new.get("type") {
                errs.push(FieldError::invalid(
                    "type",
                    new.get("type").cloned().unwrap_or(Value::Null),
                    "field is immutable",
                ));
            }
        }
        Special::ControllerRevision if old.get("data") != new.get("data") => {
            errs.push(FieldError::invalid(
                "data",
                new.get("data").cloned().unwrap_or(Value::Null),
                "field is immutable",
            ));
        }
        Special::Rbac if rd.kind.ends_with("Binding") && old.get("roleRef") != new.get("roleRef") => {
            errs.push(FieldError::invalid(
                "roleRef",
                new.get("roleRef").cloned().unwrap_or(Value::Null),
                "cannot change roleRef",
            ));
        }
        Special::Service => {
            let o = old.get("spec").and_then(|s| s.get("clusterIP"));
            let n = new.get("spec").and_then(|s| s.get("clusterIP"));
            if o.is_some() && o != n {
                errs.push(FieldError::invalid(
                    "spec.clusterIPs[0]",
                    n.cloned().unwrap_or(Value::Null),
                    "may not change once set",
                ));
            }
        }
        _ => {}
    }
    if errs.is_empty() && endpoint == Endpoint::Main {
        errs.extend(validate_create(rd, new));
    }
    errs
}

/// `ValidateObjectMetaUpdate`'s finalizer rule for objects being deleted.
pub(crate) fn finalizer_errors(old: &Value, new: &Value) -> Vec<FieldError> {
    if crate::meta::deletion_timestamp(old).is_none() {
        return vec![];
    }
    let old_f = crate::meta::finalizers(old);
    let added: Vec<String> = crate::meta::finalizers(new).into_iter().filter(|f| !old_f.contains(f)).collect();
    if added.is_empty() {
        return vec![];
    }
    vec![FieldError::forbidden(
        "metadata.finalizers",
        format!(
            "no new finalizers can be added if the object is being deleted, found new finalizers {}",
            go_string_slice(&added)
        ),
    )]
}

fn go_string_slice(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| go_value(&json!(s))).collect();
    format!("[]string{{{}}}", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The comparisons without copies against the copies they replace: a pod spec stripped of its mutable fields and
    /// its containers' images, and an object without its metadata, over specs that differ in kept and in skipped
    /// fields, in key order only, in non-object containers and in missing or non-object specs.
    #[test]
    fn pod_spec_immutability_agrees_with_stripped_copies() {
        let strip = |v: Option<&Value>| -> Value {
            let mut s = v.cloned().unwrap_or(Value::Null);
            if let Value::Object(m) = &mut s {
                for list in ["containers", "initContainers"] {
                    if let Some(Value::Array(cs)) = m.get_mut(list) {
                        for c in cs {
                            if let Value::Object(c) = c {
                                c.remove("image");
                            }
                        }
                    }
                }
                for k in POD_MUTABLE {
                    m.remove(*k);
                }
            }
            s
        };
        let base = json!({"containers": [{"name": "c", "image": "a", "ports": [{"containerPort": 1}]}],
            "initContainers": [{"name": "i", "image": "b"}], "tolerations": [{"key": "k"}], "nodeName": "n",
            "terminationGracePeriodSeconds": 30});
        let edits: Vec<fn(&mut Value)> = vec![
            |_| {},
            |v| v["containers"][0]["image"] = json!("z"),
            |v| v["initContainers"][0]["image"] = json!("z"),
            |v| v["containers"][0]["name"] = json!("d"),
            |v| v["containers"][0].as_object_mut().unwrap().remove("image").map(drop).unwrap_or(()),
            |v| v["tolerations"] = json!([]),
            |v| v["activeDeadlineSeconds"] = json!(5),
            |v| v["schedulingGates"] = json!([{"name": "g"}]),
            |v| v.as_object_mut().unwrap().remove("terminationGracePeriodSeconds").map(drop).unwrap_or(()),
            |v| v["nodeName"] = json!("m"),
            |v| v["hostname"] = json!("h"),
            |v| v.as_object_mut().unwrap().remove("nodeName").map(drop).unwrap_or(()),
            |v| v["containers"] = json!(["c"]),
            |v| v["containers"] = json!("c"),
            |v| v["containers"].as_array_mut().unwrap().push(json!({"name": "e", "image": "x"})),
            |v| v["initContainers"] = json!(null),
            |v| {
                let m = v.as_object_mut().unwrap();
                let n = m.remove("nodeName").unwrap();
                m.insert("nodeName".into(), n);
            },
            |v| *v = json!(null),
            |v| *v = json!([1]),
            |v| *v = json!({}),
        ];
        let mut specs: Vec<Option<Value>> = vec![None];
        for e in &edits {
            let mut v = base.clone();
            e(&mut v);
            specs.push(Some(v));
        }
        for a in &specs {
            for b in &specs {
                assert_eq!(
                    pod_spec_changed(a.as_ref(), b.as_ref()),
                    strip(a.as_ref()) != strip(b.as_ref()),
                    "{a:?} vs {b:?}"
                );
                let (x, y) = (json!({"metadata": {"name": "a"}, "spec": a}), json!({"metadata": {}, "spec": b}));
                let copy = |v: &Value| -> Map<String, Value> {
                    v.as_object()
                        .unwrap()
                        .iter()
                        .filter(|(k, _)| *k != "metadata")
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                };
                assert_eq!(differ_but_metadata(&x, &y), copy(&x) != copy(&y));
            }
        }
        assert!(!differ_but_metadata(&json!(1), &json!({"metadata": {}})));
        assert!(differ_but_metadata(&json!(1), &json!({"spec": {}})));
    }

    /// A custom resource's status write starts from a copy of the stored object without its status and
    /// managedFields: the result is byte for byte the one a full copy gives, whichever of the two the stored object
    /// and the write have.
    #[test]
    fn a_status_write_copies_what_it_keeps() {
        let fields = json!([{"manager": "m", "operation": "Update", "fieldsV1": {"f:spec": {"f:a": {}}}}]);
        let stored = [
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "x", "managedFields": fields.clone(),
                "labels": {"a": "1"}}, "spec": {"a": 1}, "status": {"phase": "Old"}}),
            json!({"apiVersion": "x/v1", "kind": "K", "status": {"phase": "Old"}, "metadata": {"name": "x"},
                "spec": {"a": 1}}),
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"managedFields": fields.clone(), "name": "x"},
                "spec": {"a": 1}}),
            json!({"apiVersion": "x/v1", "kind": "K", "spec": {"a": 1}}),
        ];
        let writes = [
            (Some(json!({"phase": "New"})), Some(json!([{"manager": "n", "operation": "Update"}]))),
            (Some(json!({"phase": "New"})), None),
            (None, Some(fields.clone())),
            (None, None),
        ];
        for old in &stored {
            let copy = clone_for_status_write(old);
            for (status, managed) in &writes {
                let full = with_status_and_fields(old.clone(), status.clone(), managed.clone());
                let cheap = with_status_and_fields(copy.clone(), status.clone(), managed.clone());
                assert_eq!(serde_json::to_string(&cheap).unwrap(), serde_json::to_string(&full).unwrap());
            }
        }
    }

    /// A Secret's `stringData` is merged into `data` as Kubernetes' `[]byte` codec writes it: the standard alphabet
    /// (`+`, `/`), padded.
    #[test]
    fn string_data_is_merged_into_data_in_standard_padded_base64() {
        let mut secret = json!({"stringData": {"k": "??>", "p": "a"}});
        secret_prepare(&mut secret);
        assert_eq!(secret, json!({"type": "Opaque", "data": {"k": "Pz8+", "p": "YQ=="}}));
    }
}
