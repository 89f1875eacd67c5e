//! The conditions' vocabulary: the `Progressing` type, setting, removing and reading a condition, and the command
//! that resumes a paused rollout (which several conditions' messages give). Every step that reports through a
//! condition (hooks, the canary, the progress deadline, the status) uses it; it uses none of them.

use common::api::{GameDeploymentCondition, GameDeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The condition that says what the rollout is waiting for.
pub const PROGRESSING: &str = "Progressing";

/// Sets (or replaces) a condition; the transition time only moves when the status does.
pub fn set_condition(
    conditions: &mut Vec<GameDeploymentCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let since = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    // Kept as it was: only the progress deadline moves it (`super::progress_deadline`).
    let last_update_time = conditions.iter().find(|c| c.type_ == type_).and_then(|c| c.last_update_time.clone());
    conditions.retain(|c| c.type_ != type_);
    conditions.push(GameDeploymentCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        last_transition_time: Some(since),
        last_update_time,
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
    });
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// Removes the condition of `type_`, if any.
pub fn remove_condition(conditions: &mut Vec<GameDeploymentCondition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The condition of `type_`, if set.
pub fn condition<'a>(status: &'a GameDeploymentStatus, type_: &str) -> Option<&'a GameDeploymentCondition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The command that resumes a paused rollout, exactly as a person types it: `kubectl gd resume`, and the plain
/// kubectl write it stands for — `spec.updateStrategy.paused: false`, or on a GitOps-clean GameDeployment the
/// annotation that resumes `step` (update revision, step index) without a spec write.
pub(crate) fn resume_command(gd: &common::api::GameDeployment, step: Option<(&str, usize)>) -> String {
    use common::hint::{patch_spec, target};
    let (name, namespace) = (gd.metadata.name.as_deref().unwrap_or_default(), gd.metadata.namespace.as_deref());
    let plain = match step {
        Some((revision, index)) if crate::gate::gitops_control::gitops_clean(gd) => format!(
            "kubectl annotate gamedeployment {} --overwrite {}={}",
            target(name, namespace),
            common::keys::RESUME_STEP,
            crate::gate::gitops_control::resume_value(revision, index)
        ),
        _ => patch_spec(name, namespace, "updateStrategy.paused", "false"),
    };
    format!("kubectl gd resume {} (or: {plain})", target(name, namespace))
}
