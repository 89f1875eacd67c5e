//! What the planner asks the API to do. Every action is complete data — the pod to create, the JSON patch with
//! its preconditions — so the executor only sends it, and tests can apply it to a simulated cluster.

use common::api::HookRun;
use common::cached_pod::Pod;
use common::hookrun::HookKind;
use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::Value;

use crate::gate::{DeleteCause, GateDecision, GateKind, HookGate};

/// A pod the action is about. The UID makes deletes and ownership patches precise: a pod recreated under the same
/// name is never hit by a decision taken about its predecessor.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    /// The pod's name.
    pub name: String,
    /// The pod's UID: the precondition of its delete and the `test` of its patches.
    pub uid: String,
}

impl PodRef {
    /// The reference to a cached pod.
    pub fn of(pod: &Pod) -> Self {
        Self { name: pod.metadata.name.clone().unwrap_or_default(), uid: pod.metadata.uid.clone().unwrap_or_default() }
    }
}

/// A PersistentVolumeClaim an action is about; the UID is the delete precondition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimRef {
    /// The claim's name.
    pub name: String,
    /// The claim's UID.
    pub uid: String,
}

/// Why a pod is created (metric label and event text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CreateReason {
    /// Fewer pods than `spec.replicas` (scale-out, or replacing a deleted pod).
    Replicas,
    /// RollingUpdate `maxSurge`: an extra pod of the new revision before an old one goes.
    Surge,
}

impl CreateReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replicas => "replicas",
            Self::Surge => "surge",
        }
    }
}

/// Why a pod is patched (metric label, event reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatchReason {
    /// In-place update started (images patched now, or the grace period began).
    InPlaceUpdate,
    /// The in-place grace period ended; the images are patched now.
    InPlaceGraceEnded,
    /// A grace period was abandoned because the target revision changed (rollback or new template).
    InPlaceGraceCancelled,
    /// The new containers run: the pod is put back in service.
    InPlaceUpdateCompleted,
    HotPatchUpdate,
    /// `InPlaceUpdateReady` set True on a pod that has the readiness gate and nothing in progress.
    ReadinessGate,
    /// The pod's lifecycle state label changes (held by a gate, or released from being held).
    Lifecycle,
}

impl PatchReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InPlaceUpdate => "in_place_update",
            Self::InPlaceGraceEnded => "in_place_grace_ended",
            Self::InPlaceGraceCancelled => "in_place_grace_cancelled",
            Self::InPlaceUpdateCompleted => "in_place_update_completed",
            Self::HotPatchUpdate => "hot_patch_update",
            Self::ReadinessGate => "readiness_gate",
            Self::Lifecycle => "lifecycle",
        }
    }

    /// Whether this patch moves the pod to another revision (the hook tests check each such patch was gated).
    #[cfg(test)]
    pub fn changes_revision(self) -> bool {
        matches!(self, Self::InPlaceUpdate | Self::InPlaceGraceEnded | Self::HotPatchUpdate)
    }
}

/// One write to a pod, in order: a status-subresource patch or an object patch (both RFC 6902 JSON patches).
#[derive(Debug, Clone, PartialEq)]
pub enum PodWrite {
    Status(Vec<Value>),
    Object(Vec<Value>),
}

/// A change to one pod: its writes are sent in order and the first failure stops the rest (the readiness gate
/// is set False *before* the images change, never after).
#[derive(Debug, Clone, PartialEq)]
pub struct PodChange {
    pub pod: PodRef,
    pub reason: PatchReason,
    pub writes: Vec<PodWrite>,
    /// Human-readable summary for the event (`python: python:3.5 -> python:3.6`).
    pub summary: String,
}

/// Which part of the reconcile an action belongs to; failures become the `FailedScale` or `FailedUpdate`
/// condition accordingly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// ControllerRevisions created or renumbered.
    Revisions,
    /// Pods adopted or released.
    Ownership,
    /// Pods (and their claims) created or deleted for `replicas` or `podsToDelete` (`FailedScale`).
    Scale,
    /// Pods deleted or patched to move them to the update revision (`FailedUpdate`).
    Update,
    /// Everything else: old revisions, HookRuns, `podsToDelete` entries, the `retry` and `paused` flags, readiness
    /// gate and lifecycle patches.
    Housekeeping,
}

/// One write the planner asks for, complete with everything the executor needs to send it (and its preconditions),
/// so the executor decides nothing and tests can apply a plan to a simulated cluster. Actions are sent in groups
/// (revisions, ownership, deletes, creates, patches, housekeeping); a failure is reported in the status' `FailedScale`
/// or `FailedUpdate` condition, by [`Phase`].
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create the ControllerRevision of a new template.
    CreateRevision(Box<ControllerRevision>),
    /// Rollback to an older revision: give it the next revision number.
    RenumberRevision {
        /// The ControllerRevision's name.
        name: String,
        /// Its new `revision` number.
        revision: i64,
    },
    /// Delete a ControllerRevision beyond `revisionHistoryLimit` that no pod uses.
    DeleteRevision {
        /// The ControllerRevision's name.
        name: String,
    },
    /// Take an orphan that matches the selector: add this GameDeployment as its controller owner.
    AdoptPod(PodRef),
    /// Let go of an owned pod that no longer matches the selector: remove the controller ownerReference.
    ReleasePod(PodRef),
    /// Create a pod.
    CreatePod {
        /// The pod as sent (name, labels, ownerReference, the revision's template).
        pod: Box<k8s_openapi::api::core::v1::Pod>,
        /// Why (replicas or surge): the metric label and the Event.
        reason: CreateReason,
    },
    /// Delete a pod, with its UID as precondition (a gated pod only once its gate opened).
    DeletePod {
        /// The pod.
        pod: PodRef,
        /// Why (scale-in, `podsToDelete`, a rolling update, ...): the metric label and the Event.
        cause: DeleteCause,
    },
    /// Change one pod: state labels, images, readiness condition, marks; its writes are sent in order.
    PatchPod(PodChange),
    /// The claims (`spec.volumeClaimTemplates`) of the pod `pod` that do not exist yet: created right before it,
    /// and the pod is not created if one fails ([`crate::planner::scale::volumes`]).
    CreateClaims { pod: String, claims: Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim> },
    /// Delete these claims: those of `pod` once its deletion succeeded (not if it was already gone: a pod that
    /// disappeared out of band leaves its claims to its replacement), or free claims (`pod: None`,
    /// `disablePVCReuse`).
    DeleteClaims { pod: Option<PodRef>, claims: Vec<ClaimRef> },
    /// Remove from `spec.scaleStrategy.podsToDelete` the names of pods that are gone (the patch tests the list
    /// is still `expected`, so a concurrent user edit wins).
    PrunePodsToDelete { expected: Vec<String>, remaining: Vec<String> },
    /// Start a hook for a pod (or a canary step). Its name is deterministic, so a second create only finds it.
    CreateHookRun(Box<HookRun>),
    /// Remove a run: its pod is gone or moved on, or a retry starts it again. The UID makes it precise.
    DeleteHookRun { name: String, uid: String, why: String },
    /// Set `spec.<kind strategy>.retry` back to false, only if the GameDeployment is still at
    /// `resource_version` (a newer request is never lost) and only after this plan's deletions succeeded.
    ResetRetry { kind: HookKind, resource_version: String },
    /// Set `spec.updateStrategy.paused` (a canary pause step or failed step hook pauses the rollout; the end of a
    /// timed pause resumes it), only if the GameDeployment is still at `resource_version`.
    SetPaused {
        paused: bool,
        resource_version: String,
        /// For the Event: "canary step 2 of 3 paused the rollout (indefinite)", "canary step 2 of 3 is complete".
        why: String,
    },
}

impl Action {
    pub fn phase(&self) -> Phase {
        match self {
            Self::CreateRevision(_) | Self::RenumberRevision { .. } => Phase::Revisions,
            Self::AdoptPod(_) | Self::ReleasePod(_) => Phase::Ownership,
            Self::CreatePod { .. } | Self::CreateClaims { .. } | Self::DeleteClaims { .. } => Phase::Scale,
            Self::DeletePod { cause, .. } => match cause {
                DeleteCause::ScaleIn | DeleteCause::PodsToDelete | DeleteCause::SpecifiedDelete => Phase::Scale,
                DeleteCause::RollingUpdate | DeleteCause::RecreateFallback => Phase::Update,
            },
            Self::PatchPod(change) => match change.reason {
                PatchReason::ReadinessGate | PatchReason::Lifecycle => Phase::Housekeeping,
                _ => Phase::Update,
            },
            Self::DeleteRevision { .. }
            | Self::PrunePodsToDelete { .. }
            | Self::CreateHookRun(_)
            | Self::DeleteHookRun { .. }
            | Self::ResetRetry { .. }
            | Self::SetPaused { .. } => Phase::Housekeeping,
        }
    }

    /// The pod this action touches, if it touches one that exists.
    #[cfg(test)]
    pub fn pod_name(&self) -> Option<&str> {
        match self {
            Self::AdoptPod(p) | Self::ReleasePod(p) | Self::DeletePod { pod: p, .. } => Some(&p.name),
            Self::PatchPod(change) => Some(&change.pod.name),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event about the GameDeployment that comes from a decision (the executor adds one per API action).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    pub type_: EventType,
    pub reason: String,
    pub message: String,
    /// The object the event is also about (events.k8s.io `related`). Events are aggregated by reason *and*
    /// related object, so each pod's (revision's, HookRun's) event stays its own in `kubectl describe`.
    pub related: Option<Related>,
}

/// An object an event is about, besides the GameDeployment (same namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Related {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub name: String,
    pub uid: Option<String>,
}

impl Related {
    pub fn pod(name: &str, uid: Option<&str>) -> Self {
        Self { api_version: "v1", kind: "Pod", name: name.into(), uid: uid.map(Into::into) }
    }

    pub fn revision(name: &str) -> Self {
        Self { api_version: "apps/v1", kind: "ControllerRevision", name: name.into(), uid: None }
    }

    pub fn hook_run(name: &str, uid: Option<&str>) -> Self {
        Self { api_version: "tkex.tencent.com/v1alpha1", kind: "HookRun", name: name.into(), uid: uid.map(Into::into) }
    }
}

impl PlannedEvent {
    pub fn warning(reason: &str, message: impl Into<String>) -> Self {
        Self { type_: EventType::Warning, reason: reason.into(), message: message.into(), related: None }
    }

    pub fn normal(reason: &str, message: impl Into<String>) -> Self {
        Self { type_: EventType::Normal, reason: reason.into(), message: message.into(), related: None }
    }

    /// The same event, about `related` too.
    #[must_use]
    pub fn about(mut self, related: Related) -> Self {
        self.related = Some(related);
        self
    }

    /// The same event, about a pod too.
    #[must_use]
    pub fn about_pod(self, pod: &PodRef) -> Self {
        let uid = (!pod.uid.is_empty()).then_some(pod.uid.as_str());
        self.about(Related::pod(&pod.name, uid))
    }
}

/// A pod a gate did not let through this pass.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldPod {
    pub name: String,
    pub kind: GateKind,
    pub decision: GateDecision,
    /// The hook that holds it, if a hook does.
    pub hook: Option<HookGate>,
}
