//! THE gate: every pod deletion and every in-place or hot-patch update the planner wants to make is first put to
//! [`verdict()`], and happens only on [`GateDecision::Allow`]. There is no other path to a pod change, so the hook
//! invariant ("no gated pod changes without a `Successful` HookRun for that pod and revision") lives here.
//!
//! Which hook gates what (BCS semantics, docs/src/concepts/gate.md):
//! - every deletion (scale-in, `podsToDelete`, RollingUpdate, recreate fallback): `preDeleteUpdateStrategy.hook`;
//! - an in-place update: `preInplaceUpdateStrategy.hook`, or the pre-delete hook when that is absent;
//! - a hot-patch update: `preInplaceUpdateStrategy.hook` only (a hot patch destroys nothing).
//!
//! A pod that is not Running passes without a hook. The decision is pure: it reads the observed HookRuns and
//! HookTemplates; the HookRun to create is handed back for the planner to turn into an action.
//!
//! Held pods (`Wait`, `Blocked`) keep their lifecycle state (`PreparingDelete` / `PreparingUpdate`), count as
//! unavailable for the update budget, and do not stop other pods from progressing.
//!
//! The folder, in the order a request passes through it:
//! - this module: the request ([`GateRequest`], [`GateState`]) and the answer ([`Verdict`], [`GateDecision`],
//!   [`HookGate`]);
//! - [`verdict`](mod@verdict): the decision, a table of contents of named steps;
//! - [`pod_runs`]: which hook gates a change, the runs of an attempt, the run a pod needs;
//! - [`attempt`]: which run belongs to which attempt (names, signed stamps);
//! - [`deadline`]: what `hookPolicy` (deadlines, fallbacks, automatic retries) says about a run that has not
//!   succeeded;
//! - [`gitops_control`]: the annotation requests a person makes (skip a hook, resume or promote a canary, the
//!   GitOps-clean opt-in).
//!
//! The gate depends on nothing in the planner or the controller (nor on [`crate::action`], which depends on it).

use std::sync::Arc;

use common::api::{GameDeployment, HookPhase, HookReleaseReason, HookRun, HookTemplate};
use common::cached_pod::Pod;
use common::hookrun::HookKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::hookrun_keys::Keyring;

pub mod attempt;
pub mod deadline;
pub mod gitops_control;
pub mod pod_runs;
pub mod verdict;

pub use pod_runs::{
    AttemptRuns, attempt_runs, build_pod_run, hold_started, hook_for, in_progress, instance_id, policy_for,
    preparing_state, retry_field, run_finished, run_phase, run_started,
};
pub use verdict::verdict;

/// Why a pod is about to be deleted. Hooks treat every cause the same (BCS gates scale-in, `podsToDelete` and
/// the delete half of a RollingUpdate with one hook); the cause is carried for events, metrics and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeleteCause {
    /// `spec.replicas` went down (or a surge pod is no longer needed).
    ScaleIn,
    /// The pod is named in `spec.scaleStrategy.podsToDelete`.
    PodsToDelete,
    /// The pod carries the label `apps.kruise.io/specified-delete: "true"` (CloneSet): deleted and replaced.
    SpecifiedDelete,
    /// RollingUpdate: the pod is replaced by one of the new revision.
    RollingUpdate,
    /// InplaceUpdate/HotPatchUpdate of a change that cannot be made in place: the pod is recreated.
    RecreateFallback,
}

impl DeleteCause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ScaleIn => "scale_in",
            Self::PodsToDelete => "pods_to_delete",
            Self::SpecifiedDelete => "specified_delete",
            Self::RollingUpdate => "rolling_update",
            Self::RecreateFallback => "recreate_fallback",
        }
    }
}

/// The pod change asking to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateKind {
    Delete(DeleteCause),
    InPlaceUpdate,
    HotPatchUpdate,
}

/// One request: this pod, this change, towards (or away from) this revision.
#[derive(Debug, Clone, Copy)]
pub struct GateRequest<'a> {
    pub kind: GateKind,
    pub pod: &'a Pod,
    /// The revision the pod runs (part of the BCS run name).
    pub pod_revision: Option<&'a str>,
    /// The revision an update moves the pod to: an in-place run is made for one target and opens no other.
    pub target_revision: Option<&'a str>,
}

/// What the gate knows about the world besides the pod: the GameDeployment (its hook configuration), the
/// namespace's HookRuns and HookTemplates as observed, and the clock.
#[derive(Debug, Clone, Copy)]
pub struct GateState<'a> {
    pub gd: &'a GameDeployment,
    pub hook_runs: &'a [Arc<HookRun>],
    pub templates: &'a [HookTemplate],
    pub now: Timestamp,
    /// `hook_runs` by name, when the pass built the index (a state whose `hook_runs` were replaced scans them).
    pub names: Option<&'a attempt::RunNames<'a>>,
    /// The keys runs are signed with (only runs whose stamp verifies open a gate).
    pub keys: &'a Keyring,
}

/// The hook side of a decision: which run decides the pod, what to create, what the status shows.
#[derive(Debug, Clone, PartialEq)]
pub struct HookGate {
    pub kind: HookKind,
    pub run_name: String,
    /// No run exists yet: create this one.
    pub create: Option<Box<HookRun>>,
    /// The run's phase (`Pending` while it is being created).
    pub phase: HookPhase,
    /// When the run started (its creation), for `status.*HookCondition[].startTime`.
    pub started: Time,
    /// A configuration problem (missing template, unresolved arg) that only a person can fix.
    pub problem: Option<String>,
    /// Runs found under this attempt's names that were not made for it (name, why): skipped, never trusted. When a
    /// run of the attempt exists (`create` is None), only the forged ones: stamped for this attempt without a valid
    /// signature.
    pub foreign: Vec<(String, String)>,
    /// The run that decided was terminated by a person (`spec.terminate: true`) rather than measured to success.
    pub terminated: bool,
    /// The terminated run's completion message: the hook-operator names there who set `spec.terminate` (the field
    /// manager of its `managedFields` entry), so the Event and the GameDeployment's status can say it.
    pub terminated_by: Option<String>,
    /// The gate let the pod go *without* a successful hook (`hookPolicy` deadline or fallback, a skip annotation):
    /// why, and the message for the condition and the Event.
    pub released: Option<(HookReleaseReason, String)>,
    /// Ask again at this time even if nothing changes (a deadline or a retry back-off ends).
    pub recheck_at: Option<Timestamp>,
}

/// A decision with its hook details (None when no hook is involved).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub decision: GateDecision,
    pub hook: Option<HookGate>,
}

impl Verdict {
    fn allow() -> Self {
        Self { decision: GateDecision::Allow, hook: None }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    /// Go ahead now.
    Allow,
    /// Not yet (a hook is running); ask again on a later pass.
    Wait(String),
    /// Stopped until someone acts (a hook failed, its template is missing); the reason says what to do.
    Blocked(String),
}

impl GateDecision {
    pub fn is_allow(&self) -> bool {
        matches!(self, Self::Allow)
    }

    /// Why the pod is held, if it is.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Allow => None,
            Self::Wait(reason) | Self::Blocked(reason) => Some(reason),
        }
    }
}
