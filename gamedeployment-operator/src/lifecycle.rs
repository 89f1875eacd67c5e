//! The per-pod lifecycle state, in the OpenKruise CloneSet vocabulary (label `lifecycle.apps.kruise.io/state`,
//! timestamp annotation `lifecycle.apps.kruise.io/timestamp`), so people and tools can see why a pod is held
//! and so the planner can pick up, after a restart, work it started earlier.
//!
//! | State | Meaning |
//! |---|---|
//! | `PreparingNormal` | Created, waiting for the `spec.lifecycle.preNormal` handler (only with one); not available. |
//! | `Normal` | Serving; nothing in progress. Pods are created in this state (without a `preNormal` handler). |
//! | `PreparingDelete` | Chosen for deletion; the delete gate has not allowed it yet. |
//! | `PreparingUpdate` | Chosen for an in-place / hot-patch update; the update gate has not allowed it yet. |
//! | `Updating` | Taken out of service for an in-place update (grace period or new containers starting). |
//! | `Updated` | The in-place update finished; a post-update gate or the `inPlaceUpdate` handler still holds the pod. |
//!
//! The lifecycle handlers (`spec.lifecycle`, OpenKruise CloneSet) are read here: a pod is *hooked* by a handler
//! while it carries any of its labels (with the value) or finalizers, and *all hooked* when it carries every one.

use common::api::{GameDeployment, LifecycleHook};
use common::cached_pod::Pod;
use common::keys;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::patch;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LifecycleState {
    PreparingNormal,
    Normal,
    PreparingDelete,
    PreparingUpdate,
    Updating,
    Updated,
}

impl LifecycleState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreparingNormal => "PreparingNormal",
            Self::Normal => "Normal",
            Self::PreparingDelete => "PreparingDelete",
            Self::PreparingUpdate => "PreparingUpdate",
            Self::Updating => "Updating",
            Self::Updated => "Updated",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "PreparingNormal" => Self::PreparingNormal,
            "Normal" => Self::Normal,
            "PreparingDelete" => Self::PreparingDelete,
            "PreparingUpdate" => Self::PreparingUpdate,
            "Updating" => Self::Updating,
            "Updated" => Self::Updated,
            _ => return None,
        })
    }

    /// Held by a gate: still serving, but already chosen.
    pub fn is_preparing(self) -> bool {
        matches!(self, Self::PreparingDelete | Self::PreparingUpdate)
    }
}

/// The state a pod is in. A missing or foreign value reads as `Normal`.
pub fn state_of(pod: &Pod) -> LifecycleState {
    common::pod::label(pod, keys::LIFECYCLE_STATE).and_then(LifecycleState::parse).unwrap_or(LifecycleState::Normal)
}

/// Whether the pod carries CloneSet's `apps.kruise.io/specified-delete: "true"`: delete it (through the gate) and
/// replace it.
pub fn specified_delete(pod: &Pod) -> bool {
    common::pod::label(pod, keys::SPECIFIED_DELETE) == Some("true")
}

/// Condition type and readiness gate (OpenKruise `KruisePodReady`) that `markPodNotReady` sets False while a pod is
/// held in `PreparingDelete` / `PreparingUpdate`, so it leaves Service endpoints. New pods carry the gate when a
/// handler asks for it.
pub const KRUISE_POD_READY: &str = "KruisePodReady";

/// Which handler a pod change waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    PreDelete,
    InPlaceUpdate,
    PreNormal,
}

impl Handler {
    pub fn field(self) -> &'static str {
        match self {
            Self::PreDelete => "preDelete",
            Self::InPlaceUpdate => "inPlaceUpdate",
            Self::PreNormal => "preNormal",
        }
    }
}

/// The GameDeployment's handler of that kind, if it configures one.
pub fn handler(gd: &GameDeployment, which: Handler) -> Option<&LifecycleHook> {
    let lifecycle = gd.spec.lifecycle.as_ref()?;
    match which {
        Handler::PreDelete => lifecycle.pre_delete.as_ref(),
        Handler::InPlaceUpdate => lifecycle.in_place_update.as_ref(),
        Handler::PreNormal => lifecycle.pre_normal.as_ref(),
    }
}

/// What of the handler is on the pod: `label k=v` / `finalizer f`, each with whether the pod carries it.
fn parts(hook: &LifecycleHook, pod: &Pod) -> Vec<(String, bool)> {
    let finalizers = pod.metadata.finalizers.as_deref().unwrap_or_default();
    let mut parts: Vec<(String, bool)> = hook
        .labels_handler
        .iter()
        .map(|(k, v)| (format!("label {k}={v}"), common::pod::label(pod, k) == Some(v.as_str())))
        .collect();
    parts.extend(hook.finalizers_handler.iter().map(|f| (format!("finalizer {f}"), finalizers.contains(f))));
    parts
}

/// CloneSet `IsPodHooked`: the pod carries any label (with its value) or finalizer of the handler.
pub fn hooked(hook: &LifecycleHook, pod: &Pod) -> bool {
    parts(hook, pod).iter().any(|(_, on)| *on)
}

/// CloneSet `IsPodAllHooked`: the pod carries every label and finalizer of the handler.
pub fn all_hooked(hook: &LifecycleHook, pod: &Pod) -> bool {
    parts(hook, pod).iter().all(|(_, on)| *on)
}

/// What an outside controller must do for the `which` handler to let the pod on, if the handler holds it: remove
/// what of the handler is still on the pod (`release`: before the change, [`holds_release`]), or add what of it is
/// missing (`!release`: back to `Normal`, [`holds_return`]).
pub fn what_releases(gd: &GameDeployment, which: Handler, pod: &Pod, release: bool) -> Option<String> {
    let hook = handler(gd, which)?;
    if release {
        hooked(hook, pod).then(|| {
            let on: Vec<String> = parts(hook, pod).into_iter().filter(|(_, on)| *on).map(|(p, _)| p).collect();
            format!("an outside controller must remove {} from the pod", on.join(", "))
        })
    } else {
        let missing: Vec<String> = parts(hook, pod).into_iter().filter(|(_, on)| !*on).map(|(p, _)| p).collect();
        (!missing.is_empty()).then(|| format!("an outside controller must add {} to the pod", missing.join(", ")))
    }
}

/// Why the `which` handler holds a pod that must be released (no part of it left on the pod): what is still on it.
pub fn holds_release(gd: &GameDeployment, which: Handler, pod: &Pod) -> Option<String> {
    what_releases(gd, which, pod, true)
        .map(|what| format!("waiting for the {} lifecycle handler: {what}", which.field()))
}

/// Whether the `which` handler still holds a pod that must be all hooked (`Updated` → `Normal`, `PreparingNormal`
/// → `Normal`): some part of the handler is missing.
pub fn holds_return(gd: &GameDeployment, which: Handler, pod: &Pod) -> bool {
    handler(gd, which).is_some_and(|hook| !all_hooked(hook, pod))
}

/// Whether the handler of a kind asks for `KruisePodReady` False while a pod is held.
pub fn marks_not_ready(gd: &GameDeployment, which: Handler) -> bool {
    handler(gd, which).is_some_and(|h| h.mark_pod_not_ready)
}

/// Whether new pods get the `KruisePodReady` readiness gate (a `preDelete` or `inPlaceUpdate` handler marks pods
/// not ready).
pub fn wants_kruise_gate(gd: &GameDeployment) -> bool {
    marks_not_ready(gd, Handler::PreDelete) || marks_not_ready(gd, Handler::InPlaceUpdate)
}

/// The pod has the `KruisePodReady` readiness gate.
pub fn has_kruise_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|g| g.condition_type == KRUISE_POD_READY))
}

/// Status-patch operations setting `KruisePodReady` to `ready` on a pod with the gate, if it is not already so.
pub fn kruise_ready_ops(pod: &Pod, ready: bool, reason: Option<&str>, now: Timestamp) -> Option<Vec<Value>> {
    let want = if ready { "True" } else { "False" };
    let current = common::pod::condition(pod, KRUISE_POD_READY).map(|c| c.status.as_str());
    (has_kruise_gate(pod) && current != Some(want))
        .then(|| patch::condition_ops(pod, KRUISE_POD_READY, want, reason, now))
}

/// JSON-patch operations moving the pod to `state`, stamped with `now`. Assumes the pod has labels and
/// annotations maps (pods we create always do; [`patch::ensure_maps`] adds them otherwise).
pub fn set_state_ops(state: LifecycleState, now: Timestamp) -> Vec<Value> {
    vec![
        json!({"op": "add", "path": patch::label_path(keys::LIFECYCLE_STATE), "value": state.as_str()}),
        json!({"op": "add", "path": patch::annotation_path(keys::LIFECYCLE_TIMESTAMP), "value": now.to_string()}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn reads_known_states_and_defaults_to_normal() {
        let mut pod = Pod::default();
        assert_eq!(state_of(&pod), LifecycleState::Normal);
        for state in [
            LifecycleState::PreparingNormal,
            LifecycleState::Normal,
            LifecycleState::PreparingDelete,
            LifecycleState::PreparingUpdate,
            LifecycleState::Updating,
            LifecycleState::Updated,
        ] {
            pod.metadata = ObjectMeta {
                labels: Some([(keys::LIFECYCLE_STATE.into(), state.as_str().into())].into()),
                ..Default::default()
            };
            assert_eq!(state_of(&pod), state);
        }
        pod.metadata.labels = Some([(keys::LIFECYCLE_STATE.into(), "Unknown".into())].into());
        assert_eq!(state_of(&pod), LifecycleState::Normal);
    }

    #[test]
    fn hooked_is_any_part_and_all_hooked_is_every_part() {
        // CloneSet's IsPodHooked / IsPodAllHooked.
        let hook = LifecycleHook {
            labels_handler: [("a".to_string(), "true".to_string())].into(),
            finalizers_handler: vec!["f".into()],
            mark_pod_not_ready: false,
        };
        let mut pod = Pod::default();
        assert!(!hooked(&hook, &pod) && !all_hooked(&hook, &pod));
        pod.metadata.labels = Some([("a".into(), "false".into())].into());
        assert!(!hooked(&hook, &pod), "the value must match");
        pod.metadata.labels = Some([("a".into(), "true".into())].into());
        assert!(hooked(&hook, &pod) && !all_hooked(&hook, &pod));
        pod.metadata.finalizers = Some(vec!["f".into()]);
        assert!(hooked(&hook, &pod) && all_hooked(&hook, &pod));
        pod.metadata.labels = None;
        assert!(hooked(&hook, &pod) && !all_hooked(&hook, &pod));
        assert!(all_hooked(&LifecycleHook::default(), &pod) && !hooked(&LifecycleHook::default(), &pod));
    }

    #[test]
    fn what_releases_a_pod_is_what_of_the_handler_to_remove_or_to_add() {
        let gd: GameDeployment = serde_json::from_value(json!({
            "metadata": {"name": "g"},
            "spec": {"selector": {}, "template": {}, "lifecycle": {"preNormal": {
                "labelsHandler": {"a": "true"}, "finalizersHandler": ["f"]}}}
        }))
        .unwrap();
        let mut pod = Pod::default();
        assert_eq!(what_releases(&gd, Handler::PreNormal, &pod, true), None, "nothing of it on the pod");
        assert_eq!(
            what_releases(&gd, Handler::PreNormal, &pod, false).as_deref(),
            Some("an outside controller must add label a=true, finalizer f to the pod")
        );
        pod.metadata.finalizers = Some(vec!["f".into()]);
        assert_eq!(
            what_releases(&gd, Handler::PreNormal, &pod, true).as_deref(),
            Some("an outside controller must remove finalizer f from the pod")
        );
        assert_eq!(
            holds_release(&gd, Handler::PreNormal, &pod).as_deref(),
            Some(
                "waiting for the preNormal lifecycle handler: an outside controller must remove finalizer f from the pod"
            )
        );
        assert_eq!(what_releases(&gd, Handler::PreDelete, &pod, true), None, "no such handler");
    }

    #[test]
    fn state_ops_escape_the_keys() {
        let ops = set_state_ops(LifecycleState::Updating, Timestamp::UNIX_EPOCH);
        assert_eq!(ops[0]["path"], "/metadata/labels/lifecycle.apps.kruise.io~1state");
        assert_eq!(ops[0]["value"], "Updating");
        assert_eq!(ops[1]["path"], "/metadata/annotations/lifecycle.apps.kruise.io~1timestamp");
        assert_eq!(ops[1]["value"], "1970-01-01T00:00:00Z");
    }
}
