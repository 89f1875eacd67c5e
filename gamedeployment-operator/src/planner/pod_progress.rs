//! What a pod records of its in-place (or hot-patch) update — the `inplace-update-grace`, `inplace-update-state` and
//! `hotpatch-update-state` annotations and the `InPlaceUpdateReady` condition — and where that puts the update
//! ([`Progress`]). Every pod's [`crate::planner::settings::PodInfo`] carries it and the per-UID facts
//! ([`crate::planner::pod_facts`]) cache its reading, so it sits below them; the update steps that write it
//! (`update::inplace::step`) use it from above.

use std::collections::BTreeMap;

use common::cached_pod::Pod;
use common::keys;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::lifecycle::{self, LifecycleState};

/// `inplace-update-state` (BCS format): the target revision, when the images were patched, and the image IDs the
/// changed containers had before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateState {
    pub revision: String,
    pub update_timestamp: String,
    #[serde(default)]
    pub last_container_statuses: BTreeMap<String, LastContainerStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastContainerStatus {
    #[serde(rename = "imageID", default)]
    pub image_id: String,
}

/// `inplace-update-grace`: the planned update while its grace period runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraceSpec {
    pub revision: String,
    #[serde(default)]
    pub container_images: BTreeMap<String, String>,
    pub grace_seconds: i64,
    pub update_timestamp: String,
}

/// Where a pod is in an in-place update, as recorded on the pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Nothing in progress.
    Idle,
    /// Waiting for the grace period before the images are patched.
    Grace(GraceSpec),
    /// Images patched; the new containers are not all running yet.
    Patched(InPlaceUpdateState),
    /// Images patched and every changed container runs the new image; not yet back in service.
    Done,
    /// A hot patch whose containers do not report the new image yet (until `deadline`, after which it is taken
    /// as done: a hot-patch runtime may never report it, and that must not stall the rollout).
    HotPatching { deadline: Timestamp },
}

impl Progress {
    pub fn is_idle(&self) -> bool {
        matches!(self, Self::Idle)
    }
}

/// How long a hot-patched pod counts as "being updated" at most when its containers never report the new image.
pub const HOT_PATCH_SETTLE_SECONDS: i64 = 60;

/// Reads the pod's in-place (or hot-patch) update progress at `now` (each pass reads it from the pod's cached
/// facts instead: [`crate::planner::pod_facts`]).
#[cfg(test)]
pub fn progress(pod: &Pod, now: Timestamp) -> Progress {
    recorded(pod).at(now)
}

/// What the pod records of its update, before the clock is looked at (only a hot patch's settle deadline is).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Recorded {
    Settled(Progress),
    HotPatch { deadline: Timestamp },
}

impl Recorded {
    /// The progress at `now`.
    pub(crate) fn at(&self, now: Timestamp) -> Progress {
        match self {
            Self::Settled(progress) => progress.clone(),
            Self::HotPatch { deadline } if *deadline > now => Progress::HotPatching { deadline: *deadline },
            Self::HotPatch { .. } => Progress::Idle,
        }
    }
}

/// What the pod records of its update: parses its JSON annotations, so each pass reads it from the facts cached
/// per pod UID and resourceVersion ([`crate::planner::pod_facts`]), derived again only for the pods that changed.
pub(crate) fn recorded(pod: &Pod) -> Recorded {
    if let Some(grace) = common::pod::annotation(pod, keys::INPLACE_UPDATE_GRACE)
        && let Ok(spec) = serde_json::from_str::<GraceSpec>(grace)
    {
        return Recorded::Settled(Progress::Grace(spec));
    }
    if lifecycle::state_of(pod) != LifecycleState::Updating {
        return direct_progress(pod).map_or_else(|| hot_patch_recorded(pod), Recorded::Settled);
    }
    let Some(state) = common::pod::annotation(pod, keys::INPLACE_UPDATE_STATE)
        .and_then(|s| serde_json::from_str::<InPlaceUpdateState>(s).ok())
    else {
        // `Updating` without a record: the update was never started (or was abandoned); finish it as done.
        return Recorded::Settled(Progress::Done);
    };
    Recorded::Settled(if is_complete(pod, &state) { Progress::Done } else { Progress::Patched(state) })
}

/// An update started straight to `Normal` (`Ending::Normal`): in progress while the pod is `Normal`, its
/// `InPlaceUpdateReady` condition is False with reason `StartInPlaceUpdate` and its `inplace-update-state` names the
/// revision the pod is labelled with. Completing it is one write: the condition back to True.
fn direct_progress(pod: &Pod) -> Option<Progress> {
    if lifecycle::state_of(pod) != LifecycleState::Normal || !has_readiness_gate(pod) {
        return None;
    }
    let condition = common::pod::condition(pod, keys::IN_PLACE_UPDATE_READY)?;
    if condition.status != "False" || condition.reason.as_deref() != Some(keys::IN_PLACE_UPDATE_STARTED_REASON) {
        return None;
    }
    let state = common::pod::annotation(pod, keys::INPLACE_UPDATE_STATE)
        .and_then(|s| serde_json::from_str::<InPlaceUpdateState>(s).ok())?;
    if common::pod::label(pod, keys::CONTROLLER_REVISION_HASH) != Some(state.revision.as_str()) {
        return None;
    }
    Some(if is_complete(pod, &state) { Progress::Done } else { Progress::Patched(state) })
}

/// A hot patch counts as in progress until the containers report the new image (bounded, see
/// [`HOT_PATCH_SETTLE_SECONDS`]); BCS never tracks it, so a canary step could pass before the patch took.
fn hot_patch_recorded(pod: &Pod) -> Recorded {
    let Some(state) = common::pod::annotation(pod, keys::HOTPATCH_UPDATE_STATE)
        .and_then(|s| serde_json::from_str::<InPlaceUpdateState>(s).ok())
    else {
        return Recorded::Settled(Progress::Idle);
    };
    if common::pod::label(pod, keys::CONTROLLER_REVISION_HASH) != Some(state.revision.as_str())
        || is_complete(pod, &state)
    {
        return Recorded::Settled(Progress::Idle);
    }
    let deadline = state
        .update_timestamp
        .parse::<Timestamp>()
        .ok()
        .and_then(|t| Timestamp::from_second(t.as_second().saturating_add(HOT_PATCH_SETTLE_SECONDS)).ok());
    match deadline {
        Some(deadline) => Recorded::HotPatch { deadline },
        None => Recorded::Settled(Progress::Idle),
    }
}

/// `docker.io/library/nginx` and `nginx:latest` are the same image.
fn normalize_image(image: &str) -> String {
    let image = image.strip_prefix("docker.io/").unwrap_or(image);
    let image = image.strip_prefix("library/").unwrap_or(image);
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') || last.contains('@') { image.to_string() } else { format!("{image}:latest") }
}

pub(crate) fn is_complete(pod: &Pod, state: &InPlaceUpdateState) -> bool {
    let spec_image =
        |name: &str| pod.spec.as_ref()?.containers.iter().find(|c| c.name == name).and_then(|c| c.image.clone());
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    state.last_container_statuses.iter().all(|(name, before)| {
        let Some(status) = statuses.and_then(|cs| cs.iter().find(|c| &c.name == name)) else { return false };
        let running = status.state.as_ref().is_some_and(|s| s.running.is_some());
        let new_id = !status.image_id.is_empty() && status.image_id != before.image_id;
        let new_image = spec_image(name).is_some_and(|want| normalize_image(&status.image) == normalize_image(&want));
        running && (new_id || new_image)
    })
}

/// Whether the pod declares the `InPlaceUpdateReady` readiness gate (pods created with
/// `disableReadinessGate` or adopted from elsewhere may not).
pub fn has_readiness_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|g| g.condition_type == keys::IN_PLACE_UPDATE_READY))
}

pub(crate) fn gate_condition_true(pod: &Pod) -> bool {
    common::pod::condition(pod, keys::IN_PLACE_UPDATE_READY).is_some_and(|c| c.status == "True")
}
