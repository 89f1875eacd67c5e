//! Label, annotation, condition and readiness-gate keys, in one place so both operators and the tests agree.
//!
//! BCS keys are kept byte-for-byte so existing tooling (dashboards, scripts, the BCS console) keeps working.

/// Pod label: the ControllerRevision name of the template the pod runs (Kubernetes convention).
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";
/// ControllerRevision label: the bare hash (Kubernetes `controller/history`).
pub const CONTROLLER_REVISION_HASH_ONLY: &str = "controller.kubernetes.io/hash";
/// Pod label: 5-character instance id, also the pod-name suffix.
pub const INSTANCE_ID: &str = "tkex.bkbcs.tencent.com/gamedeployment-instance-id";
/// Pod annotation: the index injected when index injection is on.
pub const INDEX_ID: &str = "tkex.bkbcs.tencent.com/gamedeployment-index-id";
/// GameDeployment annotation: `"true"` turns on index injection.
pub const INDEX_ON: &str = "tkex.bkbcs.tencent.com/gamedeployment-index-on";
/// GameDeployment annotation: JSON `{"podStartIndex":a,"podEndIndex":b}`, the half-open index range.
pub const INDEX_RANGE: &str = "tkex.bkbcs.tencent.com/gamedeployment-index-range";
/// Environment variable carrying the injected index.
pub const POD_INDEX_ENV: &str = "POD_INDEX";

/// Pod annotation (Kubernetes): lower cost is deleted first on scale-in.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// Node annotation (BCS): lower cost nodes lose their pods first on scale-in.
pub const NODE_DELETION_COST: &str = "io.tencent.bcs.dev/node-deletion-cost";
/// GameDeployment annotation (BCS): `ascend` (default) or `descend` pod-deletion-cost order.
pub const POD_DELETION_COST_SORT_METHOD: &str = "io.tencent.bcs.dev/pod-deletion-cost-sort-method";
/// Label (BCS): `Always` / `Cascading` deletion protection.
pub const DELETION_ALLOW: &str = "io.tencent.bcs.dev/deletion-allow";
/// Pod annotation (BCS): set when a pre-delete or pre-inplace HookRun is created for the pod.
pub const GAME_POD_DELETING: &str = "io.tencent.bcs.dev/game-pod-deleting";

/// Readiness gate and pod condition type flipped around an in-place update.
pub const IN_PLACE_UPDATE_READY: &str = "InPlaceUpdateReady";
/// Reason on the `InPlaceUpdateReady=False` condition while an update is in progress (BCS value).
pub const IN_PLACE_UPDATE_STARTED_REASON: &str = "StartInPlaceUpdate";
/// Pod annotation (BCS): JSON state of the last in-place update.
pub const INPLACE_UPDATE_STATE: &str = "inplace-update-state";
/// Pod annotation (BCS): pending in-place update waiting for its grace period.
pub const INPLACE_UPDATE_GRACE: &str = "inplace-update-grace";
/// Pod annotation (BCS): JSON state of the last hot-patch update.
pub const HOTPATCH_UPDATE_STATE: &str = "hotpatch-update-state";
/// Pod annotation (BCS): marks containers for a hot-patch-capable runtime.
pub const HOTPATCH_CONTAINER: &str = "io.kubernetes.hotpatch.container";

/// Pod label in the OpenKruise CloneSet vocabulary: why a pod is held (`Normal`, `PreparingDelete`,
/// `PreparingUpdate`, `Updating`, `Updated`).
pub const LIFECYCLE_STATE: &str = "lifecycle.apps.kruise.io/state";
/// Pod label (OpenKruise CloneSet): `"true"` asks for the pod to be deleted — through `PreparingDelete`, the
/// pre-delete hook and lifecycle handler — and replaced, without editing the workload.
pub const SPECIFIED_DELETE: &str = "apps.kruise.io/specified-delete";
/// Pod annotation: when the lifecycle state last changed (RFC 3339).
pub const LIFECYCLE_TIMESTAMP: &str = "lifecycle.apps.kruise.io/timestamp";

/// HookRun label (BCS): `canary-step`, `pre-delete-step`, `pre-inplace-step`, `post-inplace-step`.
pub const HOOKRUN_TYPE: &str = "hookrun-type";
/// HookRun label (BCS): the pod's revision (canary: the update revision).
pub const HOOKRUN_WORKLOAD_REVISION: &str = "workload-revision";
/// HookRun label (BCS): the pod's instance id.
pub const HOOKRUN_INSTANCE_ID: &str = "instance-id";
/// HookRun label (BCS): the canary step index.
pub const HOOKRUN_CANARY_STEP_INDEX: &str = "canary-step-index";
/// HookRun label (addition): the owning GameDeployment's name, so `kubectl get hookrun -l` finds them.
pub const HOOKRUN_WORKLOAD_NAME: &str = "gamedeployment.tkex.tencent.com/name";

/// HookRun label (addition): the UID of the pod a pod HookRun was made for. With the controller ownerReference
/// (the GameDeployment's UID) and the annotations below it binds the run to one *attempt*: that pod, that change,
/// that visit of its Preparing state. The gate accepts a run only for the attempt it was made for.
pub const HOOKRUN_POD_UID: &str = "gamedeployment.tkex.tencent.com/pod-uid";
/// HookRun annotation (addition): the change the run gates: `delete`, `inplace/<revision>` (to that revision),
/// `postinplace/<revision>` (after the update to it).
pub const HOOKRUN_CHANGE: &str = "gamedeployment.tkex.tencent.com/change";
/// HookRun annotation (addition): the pod's [`LIFECYCLE_TIMESTAMP`] when it entered the Preparing state the run was
/// made for; a later visit is a new attempt that needs a new run.
pub const HOOKRUN_PREPARED_AT: &str = "gamedeployment.tkex.tencent.com/prepared-at";
/// HookRun annotation (addition): [`crate::hookrun::spec_hash`] of the spec the operator created, so an edited spec
/// is recognised (the CRD also makes `spec` immutable).
pub const HOOKRUN_SPEC_HASH: &str = "gamedeployment.tkex.tencent.com/spec-hash";
/// HookRun annotation (addition): `v1:` and the hex HMAC-SHA256 of the attempt the run was made for (GameDeployment
/// UID, pod UID, change, Preparing timestamp), its name and its spec hash, keyed by a secret only the
/// gamedeployment-operator holds. The other stamps are data whoever creates a HookRun chooses; a run whose signature
/// does not verify never opens a gate.
pub const HOOKRUN_SIGNATURE: &str = "gamedeployment.tkex.tencent.com/attempt-signature";

/// Pod annotation (addition): on a pod whose pre-delete hook failed in a race to empty, when it was skipped. It is
/// not a candidate again for as long as others are (the race would otherwise restart its hook at once); removed when
/// no scale-in is wanted.
pub const RACE_SKIPPED: &str = "gamedeployment.tkex.tencent.com/race-skipped";

/// GameDeployment annotation (addition): `annotations` opts the GameDeployment in to the GitOps-clean control
/// surface: the operator never writes its spec (no `retry` reset, no `paused` write by canary steps, no
/// `podsToDelete` pruning) and takes the per-pod and per-step requests below instead.
pub const CONTROL: &str = "gamedeployment.tkex.tencent.com/control";
/// Value of [`CONTROL`] that opts in.
pub const CONTROL_ANNOTATIONS: &str = "annotations";
/// GameDeployment annotation (addition): `<update revision>/<step index>` resumes that canary step — ends its pause,
/// or lets the rollout past its failed hook. Naming the step makes a left-over annotation inert for later steps.
pub const RESUME_STEP: &str = "gamedeployment.tkex.tencent.com/resume-step";
/// GameDeployment annotation (addition): `<update revision>` promotes that revision: its remaining canary steps are
/// skipped.
pub const PROMOTE: &str = "gamedeployment.tkex.tencent.com/promote";
/// Pod annotation (addition): skip the hook of one change of this pod — `delete` (pre-delete), `inplace/<revision>`
/// (pre-inplace, to that revision) or `postinplace/<revision>` (post-inplace, after it). The gate releases the pod
/// as a recorded release (`releasedBy: Skipped`), never as a success.
pub const SKIP_HOOK: &str = "gamedeployment.tkex.tencent.com/skip-hook";

/// Pod label (addition) a game server or its matchmaker sets on its own pod: what the server is doing
/// (`WaitToBeDeleted`/`Draining`, `Idle`, `Allocated`); see [`crate::server_state`].
pub const SERVER_STATE: &str = "gamedeployment.tkex.tencent.com/server-state";

/// Values of [`HOOKRUN_TYPE`].
pub mod hookrun_type {
    /// A canary step's run.
    pub const CANARY_STEP: &str = "canary-step";
    /// A pre-delete gate's run.
    pub const PRE_DELETE: &str = "pre-delete-step";
    /// A pre-inplace gate's run.
    pub const PRE_INPLACE: &str = "pre-inplace-step";
    /// A post-inplace gate's run.
    pub const POST_INPLACE: &str = "post-inplace-step";
}

/// Arguments the gamedeployment-operator injects into pod HookRuns (BCS names).
pub mod hook_args {
    /// The gated pod's name.
    pub const POD_NAME: &str = "PodName";
    /// The gated pod's namespace.
    pub const POD_NAMESPACE: &str = "PodNamespace";
    /// The pod's IP (`status.podIP`): what a hook usually calls to ask the game server.
    pub const POD_IP: &str = "PodIP";
    /// The node's IP (`status.hostIP`), for servers reached through a host port.
    pub const HOST_IP: &str = "HostIP";
    /// Prefix of `PodContainer[i]` (container names).
    pub const POD_CONTAINER: &str = "PodContainer";
    /// Prefix of `ModifiedContainer[i]` (containers whose image changes; pre-inplace only).
    pub const MODIFIED_CONTAINER: &str = "ModifiedContainer";
    /// Names BCS merges into a run even when the template does not declare them (substring match).
    pub const BUILTIN: [&str; 6] = [POD_NAME, POD_NAMESPACE, POD_IP, POD_CONTAINER, MODIFIED_CONTAINER, HOST_IP];
}
