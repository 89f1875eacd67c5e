//! Lifecycle patches of the in-place path that are not an image change: `KruisePodReady` back to True on a pod no
//! longer held, and a pod back to `Normal`.

use k8s_openapi::jiff::Timestamp;

use crate::action::{PatchReason, PodChange, PodWrite};
use crate::lifecycle::{self, LifecycleState};
use crate::planner::settings::{PodInfo, Settings};

/// `KruisePodReady` back to True on a pod no longer held (markPodNotReady).
pub(crate) fn kruise_ready(settings: &Settings<'_>, info: &PodInfo<'_>) -> Option<PodChange> {
    let ops = lifecycle::kruise_ready_ops(info.pod, true, None, settings.now)?;
    Some(PodChange {
        pod: info.pod_ref(),
        reason: PatchReason::ReadinessGate,
        writes: vec![PodWrite::Status(ops)],
        summary: format!("{} condition set True", lifecycle::KRUISE_POD_READY),
    })
}

/// The pod's lifecycle state back to `Normal`.
pub(crate) fn to_normal(info: &PodInfo<'_>, now: Timestamp, summary: &str) -> PodChange {
    PodChange {
        pod: info.pod_ref(),
        reason: PatchReason::Lifecycle,
        writes: vec![PodWrite::Object(lifecycle::set_state_ops(LifecycleState::Normal, now))],
        summary: summary.to_string(),
    }
}
