//! `provider.kubernetes` (a BCS addition): read or write annotations (and labels) of the object the run's
//! args name — `PodName` in `PodNamespace`, of kind `Group`/`Version`/`Kind` (default core `v1` `Pod`).
//!
//! Differences from BCS, all fixes: the operator's own client is used (so it works out of cluster and
//! honours `--kubeconfig`); discovery is cached; calls time out; a `get` mismatch is a `Failed` measurement
//! (BCS reported an Error, which a single-shot metric then counted as success), and a `get` with conditions
//! evaluates them over the values read; `patch` sends one JSON Patch for all fields — atomic, guarded by a
//! `test` of the resourceVersion it read, keys escaped (`~` → `~0`, `/` → `~1`), values JSON-encoded — and
//! creates the annotations or labels map when the object has none.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use common::api::{Argument, HookPhase, KubernetesField, Metric};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::{Answer, AsyncProvider, Kept, Measured, Observation, ProviderError, display};
use crate::conditions::evaluate::to_expr;

/// Label and annotation prefixes the operators themselves write and read (gates, lifecycle states, overrides): a
/// template may read them but never write them, since a patch goes out with the operator's identity.
pub const RESERVED_PREFIXES: &[&str] =
    &["gamedeployment.tkex.tencent.com/", "lifecycle.apps.kruise.io/", "apps.kruise.io/", "io.tencent.bcs.dev/"];

/// Why a patch may not write `key`, if it may not.
fn reserved(key: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    RESERVED_PREFIXES.iter().copied().find(|prefix| lower.starts_with(prefix))
}

/// Which part of the target object a field reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldPath {
    /// `metadata.annotations.<key>`: the key.
    Annotation(String),
    /// `metadata.labels.<key>`: the key.
    Label(String),
    /// Any other dotted path (`status.phase`); readable, not writable.
    Other(Vec<String>),
}

impl FieldPath {
    /// `metadata.annotations.<key>` (the key may contain dots and slashes, e.g.
    /// `metadata.annotations.tkex.bkbcs.tencent.com/clb-weight`), `metadata.labels.<key>`, or, for `get`
    /// only, another dotted path.
    pub fn parse(path: &str, for_patch: bool) -> Result<Self, String> {
        let path = path.trim();
        if for_patch
            && let Some(key) =
                path.strip_prefix("metadata.annotations.").or_else(|| path.strip_prefix("metadata.labels."))
            && let Some(prefix) = reserved(key)
        {
            return Err(format!(
                "path {path:?}: keys under {prefix} belong to the operators (gates, lifecycle states, overrides) and \
                 cannot be written by a hook; use a key of your own"
            ));
        }
        if let Some(key) = path.strip_prefix("metadata.annotations.") {
            return if key.is_empty() {
                Err(format!("path {path:?} names no annotation"))
            } else {
                Ok(Self::Annotation(key.into()))
            };
        }
        if let Some(key) = path.strip_prefix("metadata.labels.") {
            return if key.is_empty() {
                Err(format!("path {path:?} names no label"))
            } else {
                Ok(Self::Label(key.into()))
            };
        }
        if for_patch {
            return Err(format!(
                "path {path:?}: patch can write metadata.annotations.<key> or metadata.labels.<key> only"
            ));
        }
        let segments: Vec<String> = path.split('.').map(str::to_string).collect();
        if path.is_empty() || segments.iter().any(String::is_empty) {
            return Err(format!("path {path:?} is not a dotted field path such as metadata.annotations.<key>"));
        }
        Ok(Self::Other(segments))
    }

    fn read<'v>(&self, object: &'v Value) -> Option<&'v Value> {
        match self {
            Self::Annotation(key) => object.get("metadata")?.get("annotations")?.get(key),
            Self::Label(key) => object.get("metadata")?.get("labels")?.get(key),
            Self::Other(segments) => segments.iter().try_fold(object, |v, s| match v {
                Value::Array(items) => s.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => v.get(s),
            }),
        }
    }
}

/// `[group/]plural` entries of `--kubernetes-provider-kinds`, lower-cased.
pub fn parse_kinds(kinds: &[String]) -> Vec<(String, String)> {
    kinds
        .iter()
        .map(|k| k.trim().to_ascii_lowercase())
        .filter(|k| !k.is_empty())
        .map(|k| match k.rsplit_once('/') {
            Some((group, plural)) => (group.to_string(), plural.to_string()),
            None => (String::new(), k),
        })
        .collect()
}

fn kind_name(group: &str, plural: &str) -> String {
    if group.is_empty() { plural.to_string() } else { format!("{group}/{plural}") }
}

/// Whether `group`/`plural` is on the allow-list.
pub fn allowed(kinds: &[(String, String)], group: &str, plural: &str) -> bool {
    kinds.iter().any(|(g, p)| g.eq_ignore_ascii_case(group) && p.eq_ignore_ascii_case(plural))
}

/// The provider only reaches objects in the HookRun's own namespace: its args (PodNamespace) come from whoever
/// created the run (for canary steps, verbatim from the GameDeployment), so another namespace is refused.
/// `run_namespace` is empty only for `hook-operator check`, which runs with the caller's own credentials.
pub fn confine(run_namespace: &str, target: &str) -> Result<(), ProviderError> {
    if run_namespace.is_empty() || run_namespace == target {
        return Ok(());
    }
    Err(ProviderError(format!(
        "the kubernetes provider only reaches objects in the HookRun's own namespace {run_namespace:?}, not {target:?} \
         (arg PodNamespace)"
    )))
}

/// JSON Pointer escaping (RFC 6901): `~` first, then `/`.
pub fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// One JSON Patch that sets every field, atomically: a `test` of the resourceVersion it was computed
/// from, then `add` operations; a missing annotations or labels map is added whole.
pub fn build_patch(object: &Value, fields: &[(FieldPath, String)]) -> Value {
    let mut ops = Vec::new();
    if let Some(rv) = object.pointer("/metadata/resourceVersion") {
        ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
    }
    for (map, pick) in [("annotations", true), ("labels", false)] {
        let entries: Vec<(&String, &String)> = fields
            .iter()
            .filter_map(|(path, value)| match (path, pick) {
                (FieldPath::Annotation(key), true) | (FieldPath::Label(key), false) => Some((key, value)),
                _ => None,
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        let exists = object.pointer(&format!("/metadata/{map}")).is_some_and(Value::is_object);
        if exists {
            for (key, value) in entries {
                ops.push(
                    json!({"op": "add", "path": format!("/metadata/{map}/{}", escape_pointer(key)), "value": value}),
                );
            }
        } else {
            let whole: serde_json::Map<String, Value> =
                entries.into_iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
            ops.push(json!({"op": "add", "path": format!("/metadata/{map}"), "value": whole}));
        }
    }
    Value::Array(ops)
}

/// The kubernetes provider: reads and patches fields of objects in the HookRun's own namespace.
pub struct Kubernetes {
    client: Option<Client>,
    timeout: Duration,
    /// `[group/]plural` resources the provider may touch (`--kubernetes-provider-kinds`).
    kinds: Vec<(String, String)>,
    resources: Mutex<HashMap<GroupVersionKind, ApiResource>>,
}

fn arg<'a>(args: &'a [Argument], name: &str) -> Option<&'a str> {
    args.iter().find(|a| a.name == name).and_then(|a| a.value.as_deref()).map(str::trim).filter(|v| !v.is_empty())
}

/// The object a measurement looks at, from the run's args.
pub fn target(args: &[Argument]) -> Result<(GroupVersionKind, String, String), ProviderError> {
    let (group, version, kind) = (arg(args, "Group"), arg(args, "Version"), arg(args, "Kind"));
    let gvk = match (group, version, kind) {
        (None, None, None) => GroupVersionKind::gvk("", "v1", "Pod"),
        (group, Some(version), Some(kind)) => GroupVersionKind::gvk(group.unwrap_or(""), version, kind),
        _ => {
            return Err(ProviderError(
                "args Group/Version/Kind: set Version and Kind (and Group unless it is the core group), or none of \
                 them for a Pod"
                    .into(),
            ));
        }
    };
    let namespace = arg(args, "PodNamespace").ok_or_else(|| {
        ProviderError("the kubernetes provider needs the arg PodNamespace (the target's namespace)".into())
    })?;
    let name = arg(args, "PodName")
        .ok_or_else(|| ProviderError("the kubernetes provider needs the arg PodName (the target's name)".into()))?;
    Ok((gvk, namespace.to_string(), name.to_string()))
}

fn fields(spec: &[KubernetesField], for_patch: bool) -> Result<Vec<(FieldPath, String)>, ProviderError> {
    if spec.is_empty() {
        return Err(ProviderError("provider.kubernetes.fields is empty".into()));
    }
    spec.iter()
        .map(|f| FieldPath::parse(&f.path, for_patch).map(|p| (p, f.value.clone())).map_err(ProviderError))
        .collect()
}

fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What a `get` observed: the value(s) read and, without conditions, whether they all equal the wanted ones.
pub fn judge_get(
    object: &Value,
    fields: &[(FieldPath, String)],
    spec: &[KubernetesField],
    has_conditions: bool,
) -> Observation {
    let read: Vec<Option<&Value>> = fields.iter().map(|(path, _)| path.read(object)).collect();
    let result = if fields.len() == 1 {
        read[0].cloned().unwrap_or(Value::Null)
    } else {
        Value::Object(
            spec.iter().zip(&read).map(|(f, v)| (f.path.clone(), v.cloned().unwrap_or(Value::Null))).collect(),
        )
    };
    let display_text = display(&result);
    if has_conditions {
        return Observation::judged(to_expr(&result), display_text);
    }
    let mismatches: Vec<String> = spec
        .iter()
        .zip(&read)
        .filter_map(|(f, v)| match v {
            None => Some(format!("{} is not set (want {:?})", f.path, f.value)),
            Some(v) if as_text(v) != f.value => Some(format!("{} is {:?}, want {:?}", f.path, as_text(v), f.value)),
            Some(_) => None,
        })
        .collect();
    let verdict = if mismatches.is_empty() {
        (HookPhase::Successful, format!("{} field(s) match", spec.len()))
    } else {
        (HookPhase::Failed, mismatches.join("; "))
    };
    Observation { result: to_expr(&result), display: display_text, verdict: Some(verdict) }
}

impl Kubernetes {
    /// A provider using `client` (`None`: every measurement errors, as in `check` without a cluster), each call
    /// bounded by `timeout`, limited to `kinds` (`[group/]plural`).
    pub fn new(client: Option<Client>, timeout: Duration, kinds: &[String]) -> Self {
        Self { client, timeout, kinds: parse_kinds(kinds), resources: Mutex::new(HashMap::new()) }
    }

    async fn resource(&self, client: &Client, gvk: &GroupVersionKind) -> Result<ApiResource, ProviderError> {
        if let Some(found) = self.resources.lock().ok().and_then(|r| r.get(gvk).cloned()) {
            return Ok(found);
        }
        let (resource, _) = kube::discovery::pinned_kind(client, gvk).await.map_err(|e| {
            ProviderError(format!("the API server does not serve {}/{} {}: {e}", gvk.group, gvk.version, gvk.kind))
        })?;
        if let Ok(mut cache) = self.resources.lock() {
            cache.insert(gvk.clone(), resource.clone());
        }
        Ok(resource)
    }

    async fn observe(
        &self,
        run_namespace: &str,
        metric: &Metric,
        args: &[Argument],
    ) -> Result<Observation, ProviderError> {
        let spec = metric
            .provider
            .kubernetes
            .as_ref()
            .ok_or_else(|| ProviderError("provider.kubernetes is not set".into()))?;
        let client = self.client.as_ref().ok_or_else(|| {
            ProviderError("the kubernetes provider needs a cluster: no Kubernetes configuration was found".into())
        })?;
        let (gvk, namespace, name) = target(args)?;
        confine(run_namespace, &namespace)?;
        let resource = self.resource(client, &gvk).await?;
        if !allowed(&self.kinds, &resource.group, &resource.plural) {
            return Err(ProviderError(format!(
                "the kubernetes provider may not touch {}: allowed are {} (the operator's --kubernetes-provider-kinds)",
                kind_name(&resource.group, &resource.plural),
                self.kinds.iter().map(|(g, p)| kind_name(g, p)).collect::<Vec<_>>().join(", ")
            )));
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
        let what = format!("{} {namespace}/{name}", gvk.kind);
        let get = || async {
            let object = api.get_opt(&name).await.map_err(|e| ProviderError(format!("reading {what}: {e}")))?;
            let object = object.ok_or_else(|| ProviderError(format!("{what} not found")))?;
            serde_json::to_value(object).map_err(|e| ProviderError(format!("reading {what}: {e}")))
        };
        match spec.function.as_str() {
            "get" => {
                let fields = fields(&spec.fields, false)?;
                let object = get().await?;
                let has_conditions = [&metric.success_condition, &metric.failure_condition]
                    .iter()
                    .any(|c| c.as_deref().is_some_and(|c| !c.trim().is_empty()));
                Ok(judge_get(&object, &fields, &spec.fields, has_conditions))
            }
            "patch" => {
                let fields = fields(&spec.fields, true)?;
                // A patch goes out with the operator's identity: only the run's own pod (args PodName), never
                // another kind the template names.
                if !(gvk.group.is_empty() && gvk.version == "v1" && gvk.kind == "Pod") {
                    return Err(ProviderError(format!(
                        "the kubernetes provider patches only the run's own pod (args PodName), not a {}",
                        gvk.kind
                    )));
                }
                let mut last_conflict = String::new();
                for _ in 0..3 {
                    let object = get().await?;
                    let patch: json_patch::Patch = serde_json::from_value(build_patch(&object, &fields))
                        .map_err(|e| ProviderError(format!("building the patch for {what}: {e}")))?;
                    match api.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
                        Ok(_) => {
                            let written: serde_json::Map<String, Value> =
                                spec.fields.iter().map(|f| (f.path.clone(), Value::String(f.value.clone()))).collect();
                            let written = Value::Object(written);
                            let message = format!("patched {} field(s) of {what}", spec.fields.len());
                            return Ok(Observation {
                                result: to_expr(&written),
                                display: display(&written),
                                verdict: Some((HookPhase::Successful, message)),
                            });
                        }
                        // 409/422 is either the `test` failing (the object changed since we read it: read
                        // again) or a real rejection (e.g. an invalid annotation key): tell them apart by
                        // whether the resourceVersion moved.
                        Err(kube::Error::Api(status)) if matches!(status.code, 409 | 422) => {
                            let seen = object.pointer("/metadata/resourceVersion").cloned();
                            let now = get().await?.pointer("/metadata/resourceVersion").cloned();
                            if seen == now {
                                return Err(ProviderError(format!("patching {what}: {}", status.message)));
                            }
                            last_conflict = status.message.clone();
                        }
                        Err(e) => return Err(ProviderError(format!("patching {what}: {e}"))),
                    }
                }
                Err(ProviderError(format!("patching {what}: it kept changing under us ({last_conflict})")))
            }
            other => Err(ProviderError(format!("function {other:?} is not supported (use get or patch)"))),
        }
    }
}

impl AsyncProvider for Kubernetes {
    const KIND: &'static str = "kubernetes";

    fn timeout(&self, _metric: &Metric) -> Duration {
        self.timeout
    }

    async fn measure(&self, namespace: &str, metric: &Metric, args: &[Argument], _kept: &mut Kept) -> Measured {
        self.observe(namespace, metric, args).await.map(Answer::Observed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str, value: &str) -> (FieldPath, String) {
        (FieldPath::parse(path, true).unwrap(), value.to_string())
    }

    #[test]
    fn parses_bcs_paths() {
        assert_eq!(
            FieldPath::parse("metadata.annotations.tkex.bkbcs.tencent.com/clb-weight", true),
            Ok(FieldPath::Annotation("tkex.bkbcs.tencent.com/clb-weight".into()))
        );
        assert_eq!(FieldPath::parse("metadata.labels.app", true), Ok(FieldPath::Label("app".into())));
        assert!(FieldPath::parse("status.phase", true).is_err());
        assert_eq!(
            FieldPath::parse("status.phase", false),
            Ok(FieldPath::Other(vec!["status".into(), "phase".into()]))
        );
        assert!(FieldPath::parse("metadata.annotations.", false).is_err());
        assert!(FieldPath::parse("a..b", false).is_err());
    }

    #[test]
    fn a_patch_never_writes_the_operators_own_keys() {
        for key in [
            "metadata.labels.gamedeployment.tkex.tencent.com/skip-hook",
            "metadata.annotations.gamedeployment.tkex.tencent.com/gate-bypass",
            "metadata.labels.lifecycle.apps.kruise.io/state",
            "metadata.labels.apps.kruise.io/specified-delete",
            "metadata.annotations.io.tencent.bcs.dev/game-pod-deletion-cost",
            "metadata.labels.Apps.Kruise.IO/specified-delete",
        ] {
            let refused = FieldPath::parse(key, true).unwrap_err();
            assert!(refused.contains("belong to the operators"), "{key}: {refused}");
            assert!(FieldPath::parse(key, false).is_ok(), "{key} can still be read");
        }
        assert!(FieldPath::parse("metadata.labels.kruise.io/other", true).is_ok());
    }

    #[test]
    fn patches_escape_keys_and_values_and_create_missing_maps() {
        let object = json!({"metadata": {"name": "p", "resourceVersion": "42", "labels": {"a": "b"}}});
        let patch = build_patch(
            &object,
            &[f("metadata.annotations.example.com/x~y", "say \"hi\"\\"), f("metadata.labels.tier", "db")],
        );
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/metadata/annotations", "value": {"example.com/x~y": "say \"hi\"\\"}},
                {"op": "add", "path": "/metadata/labels/tier", "value": "db"},
            ])
        );
        let with_map = json!({"metadata": {"resourceVersion": "7", "annotations": {}}});
        let patch = build_patch(&with_map, &[f("metadata.annotations.example.com/x~y", "1")]);
        assert_eq!(patch[1]["path"], "/metadata/annotations/example.com~1x~0y");
        // Applying it does what it says.
        let mut applied = with_map.clone();
        let parsed: json_patch::Patch = serde_json::from_value(patch).unwrap();
        json_patch::patch(&mut applied, &parsed).unwrap();
        assert_eq!(applied["metadata"]["annotations"]["example.com/x~y"], "1");
        let mut changed = json!({"metadata": {"resourceVersion": "8", "annotations": {}}});
        assert!(json_patch::patch(&mut changed, &parsed).is_err(), "a concurrent change makes the test fail");
    }

    #[test]
    fn get_compares_or_hands_values_to_the_conditions() {
        let object = json!({"metadata": {"annotations": {"a": "1", "b": "2"}}, "status": {"phase": "Running"}});
        let spec = vec![
            KubernetesField { path: "metadata.annotations.a".into(), value: "1".into() },
            KubernetesField { path: "status.phase".into(), value: "Running".into() },
        ];
        let fields: Vec<_> =
            spec.iter().map(|s| (FieldPath::parse(&s.path, false).unwrap(), s.value.clone())).collect();
        let o = judge_get(&object, &fields, &spec, false);
        assert_eq!(o.verdict.as_ref().map(|v| v.0), Some(HookPhase::Successful));
        let spec_bad = vec![KubernetesField { path: "metadata.annotations.b".into(), value: "3".into() }];
        let fields_bad = vec![(FieldPath::Annotation("b".into()), "3".into())];
        let o = judge_get(&object, &fields_bad, &spec_bad, false);
        assert_eq!(o.verdict, Some((HookPhase::Failed, "metadata.annotations.b is \"2\", want \"3\"".into())));
        assert_eq!(o.display, "2");
        let missing = vec![(FieldPath::Annotation("zz".into()), "x".into())];
        let spec_missing = vec![KubernetesField { path: "metadata.annotations.zz".into(), value: "x".into() }];
        let o = judge_get(&object, &missing, &spec_missing, false);
        assert!(o.verdict.unwrap().1.contains("is not set"));
        let o = judge_get(&object, &fields_bad, &spec_bad, true);
        assert_eq!((o.result, o.verdict), (expr::Value::String("2".into()), None));
    }

    #[test]
    fn only_the_runs_own_namespace_and_allowed_kinds() {
        assert_eq!(confine("team-a", "team-a"), Ok(()));
        let err = confine("team-a", "team-b").unwrap_err();
        assert!(
            err.0.contains("only reaches objects in the HookRun's own namespace \"team-a\", not \"team-b\""),
            "{err}"
        );
        assert_eq!(confine("", "anything"), Ok(()), "hook-operator check runs with the caller's credentials");
        let kinds = parse_kinds(&["pods".into(), "Apps/Deployments".into()]);
        assert!(allowed(&kinds, "", "pods"));
        assert!(allowed(&kinds, "apps", "deployments"));
        assert!(!allowed(&kinds, "", "secrets"));
        assert!(!allowed(&kinds, "tkex.tencent.com", "gamedeployments"));
        assert!(!allowed(&parse_kinds(&["pods".into()]), "apps", "pods"), "the group is part of the name");
    }

    #[test]
    fn target_comes_from_the_args() {
        let args = vec![Argument::new("PodName", "p"), Argument::new("PodNamespace", "ns")];
        let (gvk, ns, name) = target(&args).unwrap();
        assert_eq!((gvk.kind.as_str(), gvk.version.as_str(), ns.as_str(), name.as_str()), ("Pod", "v1", "ns", "p"));
        let mut custom = args.clone();
        custom.extend([
            Argument::new("Group", "tkex.tencent.com"),
            Argument::new("Version", "v1alpha1"),
            Argument::new("Kind", "GameDeployment"),
        ]);
        assert_eq!(target(&custom).unwrap().0.group, "tkex.tencent.com");
        assert!(target(&[Argument::new("PodName", "p")]).unwrap_err().0.contains("PodNamespace"));
        let mut partial = args;
        partial.push(Argument::new("Kind", "Deployment"));
        assert!(target(&partial).is_err());
        // A nil value is reported, not a panic (BCS-H5).
        assert!(
            target(&[
                Argument { name: "PodName".into(), value: None, value_from: None },
                Argument::new("PodNamespace", "n")
            ])
            .is_err()
        );
    }
}
