//! Building a HookRun from a HookTemplate: argument merging, names and labels as BCS writes them
//! (docs/src/concepts/keys.md). Pure, so the
//! gamedeployment-operator and `hook-operator check` build runs the same way.
//!
//! One deliberate difference from BCS: an incoming argument the template does not declare is kept instead of
//! being dropped silently, so `{{ args.X }}` in a template works whenever the workload passes `X`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::{Argument, HookRun, HookRunArgument, HookRunSpec, HookStep, HookTemplate};
use crate::keys;

/// Why a HookRun cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookRunError {
    /// A declared argument ends without a value: rendering `{{ args.X }}` would send a wrong request.
    #[error(
        "args.{name} was not resolved: HookTemplate {template:?} declares it without a value and nobody passed it \
         (add it to the hook's args, or give it a value in the template)"
    )]
    Unresolved {
        /// The HookTemplate that declares the argument.
        template: String,
        /// The argument left without a value.
        name: String,
    },
    /// A run without metrics would succeed at once and open its gate without checking anything.
    #[error("HookTemplate {template:?} has no metrics")]
    NoMetrics {
        /// The empty HookTemplate.
        template: String,
    },
}

/// Which gate or step a run belongs to; decides its name prefix and `hookrun-type` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookKind {
    /// `preDeleteUpdateStrategy`: the run must succeed before the pod is deleted.
    PreDelete,
    /// `preInplaceUpdateStrategy`: the run must succeed before the pod's images are patched.
    PreInplace,
    /// `postInplaceUpdateStrategy`: the run must succeed before an in-place updated pod counts as updated.
    PostInplace,
    /// A canary step's `hook`: the run must succeed before the rollout goes past the step.
    CanaryStep,
}

impl HookKind {
    /// Value of the `hookrun-type` label (BCS).
    pub fn type_label(self) -> &'static str {
        match self {
            Self::PreDelete => keys::hookrun_type::PRE_DELETE,
            Self::PreInplace => keys::hookrun_type::PRE_INPLACE,
            Self::PostInplace => keys::hookrun_type::POST_INPLACE,
            Self::CanaryStep => keys::hookrun_type::CANARY_STEP,
        }
    }

    /// Name prefix (BCS).
    pub fn prefix(self) -> &'static str {
        match self {
            Self::PreDelete => "predelete",
            Self::PreInplace => "preinplace",
            Self::PostInplace => "postinplace",
            Self::CanaryStep => "canary",
        }
    }

    /// All kinds gated on pods (not canary steps).
    pub const POD_HOOKS: [HookKind; 3] = [Self::PreDelete, Self::PreInplace, Self::PostInplace];
}

/// Merges a template's declared args with the args a creator passes. Later incoming values override earlier
/// ones and template defaults; every declared arg must end with a value.
pub fn merge_args(
    template_name: &str,
    declared: &[Argument],
    incoming: &[Argument],
) -> Result<Vec<Argument>, HookRunError> {
    // Room for every arg at once: a run keeps this list for its life (thousands per scale-in).
    let mut merged: Vec<Argument> = Vec::with_capacity(declared.len() + incoming.len());
    merged.extend_from_slice(declared);
    for arg in incoming {
        match merged.iter_mut().find(|a| a.name == arg.name) {
            Some(existing) => {
                if arg.is_set() {
                    existing.value = arg.value.clone();
                    existing.value_from = arg.value_from.clone();
                }
            }
            None => merged.push(arg.clone()),
        }
    }
    if let Some(missing) = merged.iter().find(|a| !a.is_set()) {
        return Err(HookRunError::Unresolved { template: template_name.to_string(), name: missing.name.clone() });
    }
    merged.shrink_to_fit();
    Ok(merged)
}

/// The args of a workload hook step, as template args.
pub fn step_args(step: &HookStep) -> Vec<Argument> {
    step.args
        .iter()
        .map(|HookRunArgument { name, value, value_from }| match value_from {
            Some(from) if from.secret_key_ref.is_some() => {
                Argument { name: name.clone(), value: None, value_from: Some(from.clone()) }
            }
            _ => Argument::new(name, value),
        })
        .collect()
}

/// `<prefix>-<revision>-<instance id>-<template>` for pod hooks (BCS), e.g.
/// `predelete-test-gamedeployment-67864c6f65-s9rbp-test`.
pub fn pod_hook_name(kind: HookKind, revision: &str, instance_id: &str, template: &str) -> String {
    format!("{}-{revision}-{instance_id}-{template}", kind.prefix())
}

/// `canary-<revision>-<step index>-<template>` (BCS).
pub fn canary_hook_name(revision: &str, step_index: usize, template: &str) -> String {
    format!("canary-{revision}-{step_index}-{template}")
}

/// The value of [`keys::HOOKRUN_WORKLOAD_NAME`] for a GameDeployment: its name, or — past the 63 characters a
/// label value may hold — its first 54 characters, `-` and 8 hex digits of the name's SHA-256 (stable, unique).
pub fn workload_label_value(name: &str) -> String {
    use sha2::Digest;
    const MAX: usize = 63;
    if name.len() <= MAX {
        return name.to_string();
    }
    let mut end = 54;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}-{hex}", name[..end].trim_end_matches(['-', '.', '_']))
}

/// Labels of a pod hook run: the BCS lookup set plus the workload name.
pub fn pod_hook_labels(kind: HookKind, revision: &str, instance_id: &str, workload: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (keys::HOOKRUN_TYPE.to_string(), kind.type_label().to_string()),
        (keys::HOOKRUN_WORKLOAD_REVISION.to_string(), revision.to_string()),
        (keys::HOOKRUN_INSTANCE_ID.to_string(), instance_id.to_string()),
        (keys::HOOKRUN_WORKLOAD_NAME.to_string(), workload_label_value(workload)),
    ])
}

/// Labels of a canary step run (BCS set plus the workload name).
pub fn canary_hook_labels(revision: &str, step_index: usize, workload: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (keys::HOOKRUN_TYPE.to_string(), HookKind::CanaryStep.type_label().to_string()),
        (keys::HOOKRUN_WORKLOAD_REVISION.to_string(), revision.to_string()),
        (keys::HOOKRUN_CANARY_STEP_INDEX.to_string(), step_index.to_string()),
        (keys::HOOKRUN_WORKLOAD_NAME.to_string(), workload_label_value(workload)),
    ])
}

/// Everything about a new run except what the template provides.
#[derive(Debug, Clone)]
pub struct NewHookRun {
    /// The run's name (BCS's `<prefix>-<pod>-<revision>...` form, see [`HookKind::prefix`]).
    pub name: String,
    /// The workload's namespace: a run only reads templates and Secrets of its own namespace.
    pub namespace: String,
    /// The labels that find the run again (`hookrun-type`, revision, pod or step; see docs/src/concepts/keys.md).
    pub labels: BTreeMap<String, String>,
    /// The workload (or pod) that owns the run, so the run is garbage-collected with it.
    pub owner: Option<OwnerReference>,
    /// Args in order: the step's args, then injected ones (later wins).
    pub args: Vec<Argument>,
}

/// Builds the run: metrics and policy copied from the template, args merged.
pub fn from_template(template: &HookTemplate, new: NewHookRun) -> Result<HookRun, HookRunError> {
    let template_name = template.metadata.name.clone().unwrap_or_default();
    if template.spec.metrics.is_empty() {
        return Err(HookRunError::NoMetrics { template: template_name });
    }
    let args = merge_args(&template_name, &template.spec.args, &new.args)?;
    Ok(HookRun {
        metadata: ObjectMeta {
            name: Some(new.name),
            namespace: Some(new.namespace),
            labels: Some(new.labels),
            owner_references: new.owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: HookRunSpec {
            metrics: template.spec.metrics.clone(),
            args,
            terminate: false,
            policy: template.spec.policy,
        },
        status: None,
    })
}

/// A stable digest of a run's spec (SHA-256 of its canonical JSON, keys sorted, hex, 32 characters): the
/// gamedeployment-operator records it at creation ([`keys::HOOKRUN_SPEC_HASH`]) and accepts a run only while its
/// spec still hashes to it, so an edited run never opens a gate. `terminate` is left out: setting it is the one
/// documented edit (a person letting the pod go now).
pub fn spec_hash(spec: &HookRunSpec) -> String {
    use sha2::Digest;
    let mut value = serde_json::to_value(spec).unwrap_or(serde_json::Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.remove("terminate");
    }
    let canonical = canonical_json(&value);
    let digest = sha2::Sha256::digest(canonical.as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// JSON text with object keys sorted at every level (independent of serde_json's `preserve_order`).
fn canonical_json(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let body: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", serde_json::Value::String(k.clone()), canonical_json(v)))
                .collect();
            format!("{{{}}}", body.join(","))
        }
        serde_json::Value::Array(items) => {
            format!("[{}]", items.iter().map(canonical_json).collect::<Vec<_>>().join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HookTemplateSpec, Metric};

    #[test]
    fn workload_label_values_fit_in_63_characters() {
        assert_eq!(workload_label_value("test-gamedeployment"), "test-gamedeployment");
        let long = format!("long-{}", "x".repeat(65));
        let value = workload_label_value(&long);
        assert_eq!(value.len(), 63);
        assert!(value.starts_with("long-xxx") && value.chars().last().is_some_and(|c| c.is_ascii_alphanumeric()));
        assert_ne!(value, workload_label_value(&format!("long-{}y", "x".repeat(64))));
    }

    #[test]
    fn spec_hash_is_stable_and_sees_every_edit() {
        let template: HookTemplate = serde_json::from_value(serde_json::json!({
            "apiVersion": "tkex.tencent.com/v1alpha1", "kind": "HookTemplate", "metadata": {"name": "t"},
            "spec": {"args": [{"name": "PodIP"}], "metrics": [
                {"name": "web", "count": 3, "successCondition": "asInt(result) > 30",
                 "provider": {"web": {"url": "http://{{ args.PodIP }}:9091", "jsonPath": "{$.age}"}}}]}
        }))
        .unwrap();
        let new = NewHookRun {
            name: "r".into(),
            namespace: "default".into(),
            labels: BTreeMap::new(),
            owner: None,
            args: vec![Argument::new("PodIP", "127.0.0.9")],
        };
        let run = from_template(&template, new).unwrap();
        let hash = spec_hash(&run.spec);
        assert_eq!(hash.len(), 32);
        // The same spec read back from the API (a JSON round trip) hashes the same.
        let back: HookRunSpec = serde_json::from_str(&serde_json::to_string(&run.spec).unwrap()).unwrap();
        assert_eq!(spec_hash(&back), hash);
        let mut edited = run.spec.clone();
        edited.metrics[0].success_condition = Some("true".into());
        assert_ne!(spec_hash(&edited), hash);
        let mut args = run.spec.clone();
        args.args[0].value = Some("127.0.0.10".into());
        assert_ne!(spec_hash(&args), hash);
        // Terminating a run is not an edit of what it measures.
        let mut terminated = run.spec.clone();
        terminated.terminate = true;
        assert_eq!(spec_hash(&terminated), hash);
    }

    fn arg(name: &str, value: Option<&str>) -> Argument {
        Argument { name: name.into(), value: value.map(Into::into), value_from: None }
    }

    #[test]
    fn merge_follows_bcs_and_keeps_undeclared_args() {
        let declared = [arg("PodIP", None), arg("service-name", Some("default-svc")), arg("PodName", None)];
        let incoming = [
            arg("service-name", Some("svc.from.step")),
            arg("extra", Some("kept")),
            arg("PodName", Some("gd-abcde")),
            arg("PodIP", Some("127.0.0.5")),
            arg("PodIP", Some("127.0.0.6")),
        ];
        let merged = merge_args("test", &declared, &incoming).unwrap();
        assert_eq!(
            merged,
            vec![
                arg("PodIP", Some("127.0.0.6")),
                arg("service-name", Some("svc.from.step")),
                arg("PodName", Some("gd-abcde")),
                arg("extra", Some("kept")),
            ]
        );
        assert_eq!(merged.capacity(), merged.len(), "a run keeps its args for life: no slack");
    }

    #[test]
    fn an_unresolved_arg_is_named() {
        let err = merge_args("test", &[arg("token", None)], &[arg("PodIP", Some("1.2.3.4"))]).unwrap_err();
        assert_eq!(err, HookRunError::Unresolved { template: "test".into(), name: "token".into() });
        assert!(err.to_string().contains("args.token"));
        // A value-less incoming arg does not erase a template default.
        let merged = merge_args("t", &[arg("a", Some("x"))], &[arg("a", None)]).unwrap();
        assert_eq!(merged, vec![arg("a", Some("x"))]);
    }

    #[test]
    fn secret_args_count_as_resolved_and_override_defaults() {
        let from = crate::api::ArgumentValueFrom {
            secret_key_ref: Some(crate::api::SecretKeyRef { name: "creds".into(), key: "token".into() }),
        };
        let secret = Argument { name: "token".into(), value: None, value_from: Some(from.clone()) };
        let merged = merge_args("t", std::slice::from_ref(&secret), &[]).unwrap();
        assert_eq!(merged, vec![secret.clone()], "a Secret reference is a value");
        // A workload's Secret reference replaces a template default, and the other way round.
        let merged = merge_args("t", &[arg("token", Some("literal"))], std::slice::from_ref(&secret)).unwrap();
        assert_eq!(merged[0].value, None);
        assert_eq!(merged[0].value_from, Some(from.clone()));
        let step = HookStep {
            template_name: "t".into(),
            args: vec![crate::api::HookRunArgument {
                name: "token".into(),
                value: String::new(),
                value_from: Some(from),
            }],
        };
        assert_eq!(step_args(&step), vec![secret]);
    }

    #[test]
    fn names_and_labels_are_bcs() {
        assert_eq!(
            pod_hook_name(HookKind::PreDelete, "test-gamedeployment-67864c6f65", "s9rbp", "test"),
            "predelete-test-gamedeployment-67864c6f65-s9rbp-test"
        );
        assert_eq!(canary_hook_name("gd-123", 4, "test"), "canary-gd-123-4-test");
        let labels = pod_hook_labels(HookKind::PreInplace, "gd-123", "abcde", "gd");
        assert_eq!(labels["hookrun-type"], "pre-inplace-step");
        assert_eq!(labels["workload-revision"], "gd-123");
        assert_eq!(labels["instance-id"], "abcde");
        assert_eq!(canary_hook_labels("gd-123", 2, "gd")["canary-step-index"], "2");
    }

    #[test]
    fn builds_a_run_from_a_template() {
        let mut template = HookTemplate::new(
            "test",
            HookTemplateSpec {
                metrics: vec![Metric { name: "webtest".into(), ..Default::default() }],
                args: vec![arg("PodIP", None)],
                policy: Some(crate::api::HookPolicy::Ordered),
            },
        );
        template.metadata.namespace = Some("default".into());
        let new = NewHookRun {
            name: "predelete-x".into(),
            namespace: "default".into(),
            labels: BTreeMap::new(),
            owner: None,
            args: vec![arg("PodIP", Some("127.0.0.9"))],
        };
        let run = from_template(&template, new.clone()).unwrap();
        assert_eq!(run.spec.metrics.len(), 1);
        assert_eq!(run.spec.policy, Some(crate::api::HookPolicy::Ordered));
        assert_eq!(run.spec.args, vec![arg("PodIP", Some("127.0.0.9"))]);
        template.spec.metrics.clear();
        assert!(matches!(from_template(&template, new), Err(HookRunError::NoMetrics { .. })));
    }
}
