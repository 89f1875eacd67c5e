//! The per-pod lifecycle state, in the OpenKruise CloneSet vocabulary (label `lifecycle.apps.kruise.io/state`,
//! timestamp annotation `lifecycle.apps.kruise.io/timestamp`), so people and tools can see why a pod is held
//! and so the planner can pick up, after a restart, work it started earlier.
//!
//! | State | Meaning |
//! |---|---|
//! | `Normal` | Serving; nothing in progress. Pods are created in this state. |
//! | `PreparingDelete` | Chosen for deletion; the delete gate has not allowed it yet. |
//! | `PreparingUpdate` | Chosen for an in-place / hot-patch update; the update gate has not allowed it yet. |
//! | `Updating` | Taken out of service for an in-place update (grace period or new containers starting). |
//! | `Updated` | The in-place update finished; a post-update gate still holds the pod (issue 6). |

use common::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::patch;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LifecycleState {
    Normal,
    PreparingDelete,
    PreparingUpdate,
    Updating,
    Updated,
}

impl LifecycleState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::PreparingDelete => "PreparingDelete",
            Self::PreparingUpdate => "PreparingUpdate",
            Self::Updating => "Updating",
            Self::Updated => "Updated",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
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

/// The state a pod is in. A missing or foreign value (e.g. CloneSet's `PreparingNormal`) reads as `Normal`.
pub fn state_of(pod: &Pod) -> LifecycleState {
    common::pod::label(pod, keys::LIFECYCLE_STATE).and_then(LifecycleState::parse).unwrap_or(LifecycleState::Normal)
}

/// Whether the pod carries CloneSet's `apps.kruise.io/specified-delete: "true"`: delete it (through the gate) and
/// replace it.
pub fn specified_delete(pod: &Pod) -> bool {
    common::pod::label(pod, keys::SPECIFIED_DELETE) == Some("true")
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
        pod.metadata.labels = Some([(keys::LIFECYCLE_STATE.into(), "PreparingNormal".into())].into());
        assert_eq!(state_of(&pod), LifecycleState::Normal);
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
