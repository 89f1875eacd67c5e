//! Lifecycle patches of the in-place path besides the image change: the lifecycle handlers' labels an in-place
//! patch leaves alone, `KruisePodReady` back to True on a pod no longer held, and a pod back to `Normal`.

use common::api::GameDeployment;
use k8s_openapi::jiff::Timestamp;

use crate::action::{PatchReason, PodChange, PodWrite};
use crate::lifecycle::{self, LifecycleState};
use crate::planner::settings::{PodInfo, Settings};

/// Leaves the labels of the lifecycle handlers to the outside controller: an in-place update does not put back a
/// handler label the template sets but that did not change between the revisions (the controller removed it to
/// release the pod, and adds it again to return the pod to `Normal`).
pub(crate) fn leave_handler_labels(
    gd: &GameDeployment,
    from: &mut std::collections::BTreeMap<String, String>,
    to: &mut std::collections::BTreeMap<String, String>,
) {
    let Some(lifecycle) = gd.spec.lifecycle.as_ref() else { return };
    let hooks = [&lifecycle.pre_delete, &lifecycle.in_place_update, &lifecycle.pre_normal];
    for key in hooks.into_iter().flatten().flat_map(|h| h.labels_handler.keys()) {
        if from.get(key) == to.get(key) {
            from.remove(key);
            to.remove(key);
        }
    }
}

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
