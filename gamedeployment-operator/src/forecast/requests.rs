//! The requests the operator's executor sends the simulated cluster, as the cluster records them ([`Sent`]) and as
//! a test makes them fail ([`Fault`]). Below both the cluster, which keeps them, and its writes' side
//! ([`super::sim_writes`]), which answers them.

/// A request the executor sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// Create a ControllerRevision (a new template).
    CreateRevision,
    /// Read a ControllerRevision (after a create found the name taken).
    GetRevision,
    /// Patch a ControllerRevision (its revision number, on a rollback).
    PatchRevision,
    /// Delete a ControllerRevision beyond `revisionHistoryLimit`.
    DeleteRevision,
    /// Read the GameDeployment fresh (before adopting pods: one being deleted must not take new pods).
    GetGameDeployment,
    /// Patch the GameDeployment.
    PatchGameDeployment,
    /// Create a pod.
    CreatePod,
    /// Patch a pod (state label, images, readiness condition, marks).
    PatchPod,
    /// Delete a pod, with its UID as precondition.
    DeletePod,
    /// Create a PersistentVolumeClaim of `volumeClaimTemplates`.
    CreateClaim,
    /// Delete a PersistentVolumeClaim of a pod scaled away.
    DeleteClaim,
    /// Create a HookRun for a gate or a canary step.
    CreateHookRun,
    /// Read a HookRun whose create found the name taken, to judge the run that holds it.
    GetHookRun,
    /// Delete one HookRun (a stale or retried run).
    DeleteHookRun,
    /// Delete a collection of HookRuns by label selector.
    DeleteHookRuns,
}

impl Request {
    /// Whether it changes something (a read changes nothing).
    pub fn writes(self) -> bool {
        !matches!(self, Self::GetRevision | Self::GetGameDeployment | Self::GetHookRun)
    }
}

/// Requests of this kind (for the object `name`, or any) fail with `code`, as long as the fault stays in
/// [`SimCluster::faults`](super::cluster::SimCluster::faults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The kind of request that fails.
    pub request: Request,
    /// Only for this object (`None`: every object).
    pub name: Option<String>,
    /// The HTTP status it fails with (409 conflict, 500, 429, ...).
    pub code: u16,
}

/// A request as answered: its kind, the object's name (the selector for a collection), and the error code (None:
/// it succeeded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The kind of request.
    pub request: Request,
    /// The object's name, or the label selector of a collection delete.
    pub name: String,
    /// The error status it was answered with (`None`: it succeeded).
    pub code: Option<u16>,
}
