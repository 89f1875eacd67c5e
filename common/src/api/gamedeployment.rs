//! `GameDeployment`: a pod workload with in-place / hot-patch updates and hook gates.
//!
//! The API is the kourse superset of the BCS GameDeployment (docs/src/api/gamedeployment.md):
//! every field an existing BCS manifest uses is here under the same JSON name. Optional additions are marked
//! "Addition" and listed in the book (docs/src/api/README.md, "API additions").

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::hook::{HookPhase, HookRunArgument, HookStep};
use super::schema;

/// Default `spec.updateStrategy.maxUnavailable` (BCS code constant `DefaultGameDeploymentMaxUnavailable`).
pub const DEFAULT_MAX_UNAVAILABLE: &str = "20%";
/// Default `spec.revisionHistoryLimit`.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;

/// Most `spec.replicas`: Kubernetes supports clusters of at most 150,000 pods, so a GameDeployment above 100,000
/// cannot run anyway, and the bound keeps one manifest from making the operator plan millions of pods.
pub const MAX_REPLICAS: i32 = 100_000;
/// Largest `podEndIndex` of the index-range annotation (`tkex.bkbcs.tencent.com/gamedeployment-index-range`):
/// indices stay 32-bit integers, so a game server reading `POD_INDEX` into an `int` can. The annotation is not
/// part of the CRD schema (a CRD cannot validate annotations), so the operator enforces it.
pub const MAX_POD_INDEX_END: i64 = i32::MAX as i64;

/// Most names in `spec.scaleStrategy.podsToDelete` (pod names are up to 253 bytes: the list stays well within
/// the object size limit).
pub const MAX_PODS_TO_DELETE: usize = 1000;

/// Most canary steps.
pub const MAX_CANARY_STEPS: usize = 100;

/// Most `spec.volumeClaimTemplates` (each pod gets one PVC per template; a pod with more volumes than this is not
/// a game server).
pub const MAX_VOLUME_CLAIM_TEMPLATES: usize = 16;

// The schema fragments of the fields whose CRD bounds and defaults are the constants above (the generic fragments
// are in `schema`, which knows no GameDeployment).

fn replicas_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "format": "int32",
        "minimum": 0,
        "maximum": MAX_REPLICAS,
        "default": 1
    })
}

fn revision_history_limit_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "format": "int32",
        "minimum": 0,
        "default": DEFAULT_REVISION_HISTORY_LIMIT
    })
}

fn max_unavailable_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schema::int_or_percent_with_default(serde_json::json!(DEFAULT_MAX_UNAVAILABLE))
}

/// `updateStrategy` defaults to `{}` so that the API server also applies the nested defaults (type,
/// maxUnavailable, maxSurge) when the whole block is omitted.
fn update_strategy_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = GameDeploymentUpdateStrategy::json_schema(generator);
    schema.insert("default".into(), serde_json::json!({}));
    schema
}

fn volume_claim_templates_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schema::volume_claim_templates(generator, MAX_VOLUME_CLAIM_TEMPLATES)
}

/// Most terms in `updateStrategy.priorityStrategy.weightPriority`, `.orderPriority` and in
/// `updateStrategy.scatterStrategy` (each term is evaluated for every pod of every pass).
pub const MAX_UPDATE_ORDER_TERMS: usize = 32;

// Printer columns repeat `type_ = ...`, which clippy mistakes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "tkex.tencent.com",
    version = "v1alpha1",
    kind = "GameDeployment",
    plural = "gamedeployments",
    singular = "gamedeployment",
    shortname = "gd",
    namespaced,
    derive = "PartialEq",
    status = "GameDeploymentStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.labelSelector"
    ),
    printcolumn(
        name = "DESIRED",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "The desired number of pods."
    ),
    printcolumn(
        name = "UPDATED",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "The number of pods updated."
    ),
    printcolumn(
        name = "UPDATED_READY",
        type_ = "integer",
        json_path = ".status.updatedReadyReplicas",
        description = "The number of pods updated and ready."
    ),
    printcolumn(
        name = "READY",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "The number of pods ready."
    ),
    printcolumn(
        name = "TOTAL",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "The number of currently all pods."
    ),
    printcolumn(name = "AGE", type_ = "date", json_path = ".metadata.creationTimestamp"),
    // `-o wide` only (priority 1): the default columns stay the BCS ones.
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Progressing\")].reason",
        description = "What the rollout is doing: the reason of the Progressing condition (RolloutComplete, RolloutInProgress, Paused, InvalidSpec, ...).",
        priority = 1
    ),
    printcolumn(
        name = "PAUSED",
        type_ = "boolean",
        json_path = ".spec.updateStrategy.paused",
        description = "Whether updates are paused (by the user or a canary pause step).",
        priority = 1
    ),
    printcolumn(
        name = "STEP",
        type_ = "string",
        json_path = ".status.currentStep",
        description = "The canary step in progress, counted from 1 as every view counts it (`2/5`), or `done`.",
        priority = 1
    ),
    printcolumn(
        name = "MESSAGE",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Progressing\")].message",
        description = "What the rollout is waiting for: the message of the Progressing condition.",
        priority = 1
    ),
    doc = "GameDeployment manages game-server pods with in-place and hot-patch updates, gated by HookRuns."
)]
/// Desired state: the pods to run (`replicas`, `template`), how they move to a new template (`updateStrategy`) and
/// the hooks that must succeed before a pod is deleted or updated in place.
#[serde(rename_all = "camelCase")]
pub struct GameDeploymentSpec {
    /// Desired number of pods, at most 100000 (Kubernetes supports at most 150,000 pods per cluster; the bound
    /// keeps one manifest from making the operator plan millions of pods).
    #[serde(default = "default_replicas", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "replicas_schema")]
    pub replicas: Option<i32>,
    /// Selects the pods this GameDeployment owns; must match the template labels.
    pub selector: LabelSelector,
    /// The pod template. Its whole content (metadata and spec) is hashed into the revision.
    #[schemars(schema_with = "schema::pod_template")]
    pub template: PodTemplateSpec,
    /// Accepted for compatibility with the BCS GameStatefulSet-style manifests (BCS docs use it in
    /// `rolling-update.yaml`); a GameDeployment has no stable network identity, so it is not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// How pods are created and deleted when scaling: the pods to delete first, and slow-start batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_strategy: Option<GameDeploymentScaleStrategy>,
    /// How pods move to a new template: the update type, partition, maxUnavailable, maxSurge, pause and canary
    /// steps.
    #[serde(default)]
    #[schemars(schema_with = "update_strategy_schema")]
    pub update_strategy: GameDeploymentUpdateStrategy,
    /// Hook run before a pod is deleted (scale-in, `podsToDelete`, the delete half of RollingUpdate) and before
    /// an in-place update when `preInplaceUpdateStrategy` is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::pre_delete_gate)]
    pub pre_delete_update_strategy: Option<HookGateStrategy>,
    /// Hook run before an in-place update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::pre_inplace_gate)]
    pub pre_inplace_update_strategy: Option<HookGateStrategy>,
    /// Hook run after an in-place update completed (the new containers run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::post_inplace_gate)]
    pub post_inplace_update_strategy: Option<HookGateStrategy>,
    /// Addition (OpenKruise CloneSet): lifecycle handlers — labels / finalizers an outside controller (service
    /// discovery, a load balancer) removes to let a pod be deleted (`preDelete`) or updated in place
    /// (`inPlaceUpdate`), and adds to let a new pod (`preNormal`) or an updated one (`inPlaceUpdate`) become
    /// `Normal`. They compose with the HookRun gates: a change needs both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Number of old ControllerRevisions kept (revisions still used by a pod are always kept).
    #[serde(default = "default_revision_history_limit", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "revision_history_limit_schema")]
    pub revision_history_limit: Option<i32>,
    /// Seconds a pod must be Ready before it counts as available.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: i32,
    /// Addition (Deployment's and Argo Rollouts' meaning): seconds a rollout may make no progress before
    /// `Progressing` turns `False` with reason `ProgressDeadlineExceeded` (and a Warning Event, a metric, `kubectl gd
    /// status` exit 6). Progress is any change of the revision, the replica counts or the canary step; a paused or
    /// complete rollout never exceeds it. The deadline reports; it stops nothing. Unset: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i32>,
    /// Do not inject the `InPlaceUpdateReady` readiness gate into new pods.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_readiness_gate: bool,
    /// Addition (OpenKruise CloneSet): one PersistentVolumeClaim per pod per template, named
    /// `<template>-<gamedeployment>-<instance id>`, labelled with the pod's instance id, owned by the
    /// GameDeployment and mounted as the pod volume named like the template. Deleted with its pod on scale-in and
    /// on a recreate update, kept by in-place updates; a pod deleted out of band is replaced by one with the same
    /// instance id and the same claims (unless `scaleStrategy.disablePVCReuse`). At most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "volume_claim_templates_schema")]
    pub volume_claim_templates: Vec<PersistentVolumeClaim>,
}

impl GameDeploymentSpec {
    /// Every HookTemplate this spec names: its hooks (pre-delete, pre-inplace, post-inplace, canary steps) and the
    /// scale-in cost probe. One list for everything that asks "which GameDeployments use this template" (deletion
    /// protection, the controller's template watch).
    pub fn hook_template_names(&self) -> impl Iterator<Item = &str> {
        let hooks = [
            self.pre_delete_update_strategy.as_ref().and_then(|s| s.hook.as_ref()),
            self.pre_inplace_update_strategy.as_ref().and_then(|s| s.hook.as_ref()),
            self.post_inplace_update_strategy.as_ref().and_then(|s| s.hook.as_ref()),
        ];
        let steps = self.update_strategy.canary.iter().flat_map(|c| c.steps.iter()).filter_map(|s| s.hook.as_ref());
        let probe = self
            .scale_strategy
            .as_ref()
            .and_then(|s| s.scale_in_policy.as_ref())
            .and_then(|p| p.cost_probe.as_ref())
            .map(|p| p.template_name.as_str());
        hooks.into_iter().flatten().chain(steps).map(|h| h.template_name.as_str()).chain(probe)
    }
}

/// Most labels in a lifecycle hook's `labelsHandler`, and most finalizers in its `finalizersHandler`.
pub const MAX_LIFECYCLE_HANDLERS: usize = 16;

/// Addition (OpenKruise CloneSet `spec.lifecycle`): the hooks an outside controller uses to take part in a pod's
/// lifecycle (state label `lifecycle.apps.kruise.io/state`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// Before a pod is deleted: a pod matching the handler waits in `PreparingDelete` until no label / finalizer
    /// of the handler is left on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_delete: Option<LifecycleHook>,
    /// Around an in-place update: a pod matching the handler waits in `PreparingUpdate` until none of it is left,
    /// then is updated (`Updating`), then waits in `Updated` until all of it is back before it is `Normal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update: Option<LifecycleHook>,
    /// After a pod is created: it waits in `PreparingNormal` (not available) until all of the handler is on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_normal: Option<LifecycleHook>,
}

/// One lifecycle hook: a pod matches ("is hooked") while it carries any of these labels (with the value) or
/// finalizers, and "all hooked" when it carries every one of them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHook {
    /// Labels (key: value), at most 16.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_LIFECYCLE_HANDLERS))]
    pub labels_handler: std::collections::BTreeMap<String, String>,
    /// Finalizers, at most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIFECYCLE_HANDLERS))]
    pub finalizers_handler: Vec<String>,
    /// While the pod is held in `PreparingDelete` / `PreparingUpdate`, set its condition `KruisePodReady` False
    /// (new pods get the readiness gate `KruisePodReady`, so the pod leaves Service endpoints); back to True in
    /// `Updated`. Takes effect on `preDelete` and `inPlaceUpdate`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mark_pod_not_ready: bool,
}

fn default_replicas() -> Option<i32> {
    Some(1)
}

fn default_revision_history_limit() -> Option<i32> {
    Some(DEFAULT_REVISION_HISTORY_LIMIT)
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// How pods are created and deleted when scaling.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GameDeploymentScaleStrategy {
    /// Names of pods to delete first, through the pre-delete hook like any other deletion (the gated way to remove
    /// a given pod; `kubectl delete pod` skips the hook). Names of pods that no longer exist are pruned by the
    /// operator. At most 1000 names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PODS_TO_DELETE))]
    pub pods_to_delete: Vec<String>,
    /// Slow start: how many pods are created per batch, an integer or a percentage of the pods to create such as
    /// "25%" (rounded up); default all at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::int_or_percent")]
    pub create_batch: Option<IntOrString>,
    /// Addition (OpenKruise CloneSet): most pods that may be unavailable while scaling out, an integer or a
    /// percentage of replicas such as "20%" (rounded up): no new pod is created while this many are unavailable,
    /// so scaling out waits for the new pods to become available. Default: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::int_or_percent")]
    pub max_unavailable: Option<IntOrString>,
    /// Addition (OpenKruise CloneSet v1alpha1): `true` deletes the claims of a pod that disappeared out of band
    /// instead of giving them (and its instance id) to its replacement.
    #[serde(default, rename = "disablePVCReuse", skip_serializing_if = "std::ops::Not::not")]
    pub disable_pvc_reuse: bool,
    /// Addition (kourse): how a scale-in chooses its victims. Unset: the first pods in deletion
    /// order, as BCS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_in_policy: Option<ScaleInPolicy>,
}

/// Most extra candidates a race-to-empty scale-in starts hooks on (besides never more than the pods it deletes).
pub const MAX_RACE_EXTRA_CANDIDATES: i32 = 100;

/// Addition (kourse): how a scale-in chooses the pods it deletes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleInPolicy {
    /// `Ordered` (default): the first pods in deletion order are the victims, each held by its pre-delete hook until
    /// it succeeds (BCS). `RaceToEmpty`: pre-delete hooks start on more candidates than needed (`extraCandidates`),
    /// the first pods whose hook succeeds are deleted and the others are released; a candidate whose hook fails is
    /// skipped (released, another candidate started) instead of held.
    #[serde(default)]
    pub mode: ScaleInMode,
    /// `RaceToEmpty`: candidates started besides the pods to delete, an integer or a percentage of them such as
    /// "50%" (rounded up); default "100%". Never more than the pods to delete (at most twice as many hooks run) nor
    /// than 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::int_or_percent")]
    pub extra_candidates: Option<IntOrString>,
    /// `RaceToEmpty`: ask each pod its cost at decision time (a HookRun per pod from this HookTemplate; the value of
    /// its first metric's last measurement, a number, is the cost) and start the cheapest candidates first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_probe: Option<CostProbe>,
}

/// Most pods a race-to-empty scale-in asks their cost (`scaleInPolicy.costProbe`), the first in deletion order.
pub const MAX_COST_PROBES: usize = 200;

/// Addition (kourse): the cost probe of a race to empty.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostProbe {
    /// Name of a HookTemplate in the namespace; its run gets the pod args (`PodName`, `PodIP`, ...) as a hook does.
    pub template_name: String,
    /// Arguments passed to each probe run besides the pod args.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<HookRunArgument>,
    /// How long candidates wait for the probes before starting without the missing costs (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: Option<i32>,
}

/// How a scale-in chooses its victims.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(transform = schema::plain_enum)]
pub enum ScaleInMode {
    /// BCS's behaviour: the first pods in deletion order are the victims, each held until its pre-delete hook
    /// succeeds, however long a busy server takes.
    #[default]
    Ordered,
    /// Start pre-delete hooks on more candidates than needed (`extraCandidates`) and delete the first whose hook
    /// succeeds, so one busy server cannot hold a scale-in while an empty one keeps running.
    RaceToEmpty,
}

/// How pods move to a new template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GameDeploymentUpdateStrategy {
    /// `RollingUpdate` (default) deletes old pods and creates new ones; `InplaceUpdate` patches the images of
    /// running pods (recreating them when more than images and pod metadata change); `HotPatchUpdate` patches them
    /// without taking the pod out of service; `OnDelete` only recreates pods that you delete. CloneSet's names are
    /// accepted too: `ReCreate` (as `RollingUpdate`), `InPlaceIfPossible` (as `InplaceUpdate`) and `InPlaceOnly`
    /// (in place, and a change that cannot be made in place is refused with `FailedUpdate`).
    #[serde(rename = "type", default)]
    pub type_: GameDeploymentUpdateStrategyType,
    /// Pods kept on the old revision, an integer or a percentage of replicas such as "20%" or "99.9%"; default 0.
    /// A percentage rounds up as in OpenKruise CloneSet: above "0%" it keeps at least one old pod, below "100%" it
    /// updates at least one pod when there are two or more. Ignored while canary steps run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::partition")]
    pub partition: Option<IntOrString>,
    /// Most pods that may be unavailable during an update, an integer or a percentage of replicas such as "20%"
    /// (rounded down); default "20%".
    #[serde(default = "default_max_unavailable", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "max_unavailable_schema")]
    pub max_unavailable: Option<IntOrString>,
    /// Extra pods allowed above replicas during a RollingUpdate, an integer or a percentage of replicas such as
    /// "25%" (rounded up); default 0.
    #[serde(default = "default_max_surge", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::max_surge")]
    pub max_surge: Option<IntOrString>,
    /// Stop updating pods (scaling continues). Set and cleared by the user, or by canary pause steps.
    // Defaulted in the schema so the PAUSED column shows false rather than <none>, and a JSON-patch `replace`
    // of it always works.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    pub paused: bool,
    /// Settings of `InplaceUpdate` and `HotPatchUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_strategy: Option<InPlaceUpdateStrategy>,
    /// Canary steps (partition, pause, hook) that every new template goes through, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStrategy>,
    /// Addition (OpenKruise CloneSet): which pods are updated first, by weights over label selectors or by the
    /// number at the end of a label value. Set one of the two lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,
    /// Addition (OpenKruise CloneSet): spread the pods carrying each `key: value` label evenly through the update
    /// order (3 such pods among 10 are updated 1st, 6th and 10th). At most 32 terms.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_UPDATE_ORDER_TERMS))]
    pub scatter_strategy: Vec<UpdateScatterTerm>,
}

/// Update priority (OpenKruise `UpdatePriorityStrategy`): only one of `weightPriority` and `orderPriority`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityStrategy {
    /// A pod's priority is the sum of the weights of the terms whose selector matches its labels; higher goes
    /// first. At most 32 terms.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_UPDATE_ORDER_TERMS))]
    pub weight_priority: Vec<UpdatePriorityWeightTerm>,
    /// Pods are ordered by the integer at the end of the value of the first of these label keys they carry
    /// (`"5"` is 5, `"sts-10"` is 10; no digits is 0); higher goes first. Pods with the first key come before
    /// pods with only the second, and so on; pods with none of the keys go before all of them (as CloneSet). At
    /// most 32 terms.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_UPDATE_ORDER_TERMS))]
    pub order_priority: Vec<UpdatePriorityOrderTerm>,
}

/// One weight term.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityWeightTerm {
    /// Added to the priority of every pod the selector matches, 1 to 100.
    #[schemars(range(min = 1, max = 100))]
    pub weight: i32,
    /// Label selector over the pod's labels.
    pub match_selector: LabelSelector,
}

/// One order term.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityOrderTerm {
    /// The label key whose value's trailing integer is the priority.
    #[schemars(length(min = 1, max = 317))]
    pub ordered_key: String,
}

/// One scatter term: pods labelled `key: value`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateScatterTerm {
    /// The label key.
    #[schemars(length(min = 1, max = 317))]
    pub key: String,
    /// The label value.
    #[schemars(length(max = 63))]
    pub value: String,
}

fn default_max_unavailable() -> Option<IntOrString> {
    Some(IntOrString::String(DEFAULT_MAX_UNAVAILABLE.to_string()))
}

fn default_max_surge() -> Option<IntOrString> {
    Some(IntOrString::Int(0))
}

impl Default for GameDeploymentUpdateStrategy {
    fn default() -> Self {
        Self {
            type_: GameDeploymentUpdateStrategyType::default(),
            partition: None,
            max_unavailable: default_max_unavailable(),
            max_surge: default_max_surge(),
            paused: false,
            in_place_update_strategy: None,
            canary: None,
            priority_strategy: None,
            scatter_strategy: Vec::new(),
        }
    }
}

/// How pods move to a new template.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum GameDeploymentUpdateStrategyType {
    /// Delete old pods and create new ones.
    #[default]
    RollingUpdate,
    /// Patch the images of running pods (the container restarts; the pod keeps its name and IP).
    InplaceUpdate,
    /// Patch the images without taking the pod out of service; needs a hot-patch-capable runtime.
    HotPatchUpdate,
    /// Only pods the user deletes are recreated with the new template.
    OnDelete,
    /// OpenKruise CloneSet's name for `InplaceUpdate`: in place when only images and pod metadata change, recreated
    /// otherwise.
    InPlaceIfPossible,
    /// OpenKruise CloneSet: in place only. A change that cannot be made in place (anything beyond images and pod
    /// metadata) is refused: no pod is recreated, and `FailedUpdate` says which pods and why.
    InPlaceOnly,
    /// OpenKruise CloneSet's name for `RollingUpdate`: delete old pods and create new ones.
    ReCreate,
}

impl GameDeploymentUpdateStrategyType {
    /// The BCS strategy this one behaves as: `InPlaceIfPossible` and `InPlaceOnly` update as `InplaceUpdate`
    /// (`InPlaceOnly` refuses the recreate fallback on top), `ReCreate` as `RollingUpdate`.
    pub fn behaves_as(self) -> Self {
        match self {
            Self::InPlaceIfPossible | Self::InPlaceOnly => Self::InplaceUpdate,
            Self::ReCreate => Self::RollingUpdate,
            other => other,
        }
    }
}

/// Settings of `InplaceUpdate` and `HotPatchUpdate`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateStrategy {
    /// Seconds between taking the pod out of service (readiness gate False) and patching its images.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub grace_period_seconds: i32,
    /// Container ordering during an in-place update (kourse API): `DisOrdered` (default) updates the changed
    /// containers together. `OrderedReady` and `OrderedUpdated` are refused (FailedUpdate, no update starts) for a
    /// template with more than one container, where they would matter: the operator does not order containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<InPlaceUpdatePolicy>,
}

/// Container ordering during an in-place update.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = schema::plain_enum)]
pub enum InPlaceUpdatePolicy {
    /// The changed containers are updated together; the only ordering the operator implements.
    DisOrdered,
    /// CloneSet's "one container after the previous is ready": refused for a template with more than one container.
    OrderedReady,
    /// CloneSet's "one container after the previous is updated": refused for a template with more than one
    /// container.
    OrderedUpdated,
}

/// Canary steps that every new template goes through.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStrategy {
    /// The steps, in order, at most 100. Changing the template or the steps starts again at step 0.
    #[schemars(length(max = MAX_CANARY_STEPS))]
    pub steps: Vec<CanaryStep>,
}

/// One canary step. Normally one of `partition`, `pause`, `hook` is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.hookPolicy) || !has(self.hookPolicy.onTimeout) || self.hookPolicy.onTimeout != 'Rollback'",
    "message": "hookPolicy.onTimeout: Rollback is not accepted (only onFailure: Rollback): use Hold or Proceed"
}]))]
pub struct CanaryStep {
    /// Pods kept on the old revision from this step on, an integer or a percentage of replicas such as "50%"
    /// (rounded as `spec.updateStrategy.partition`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::partition")]
    pub partition: Option<IntOrString>,
    /// Pause the rollout; without `duration` until the user sets `updateStrategy.paused: false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<CanaryPause>,
    /// Run a HookRun from this template and continue when it is Successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookStep>,
    /// Addition (kourse): a HookTemplate trialled when the rollout reaches this step (beside `hook`, or alone):
    /// its HookRun is made and measured as a step's run, and its result recorded (`status.shadowHookResults`, an
    /// Event, the metric), but the step never waits for it — `hook` alone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_hook: Option<HookStep>,
    /// Addition (kourse): deadlines, fallbacks and automatic retries of this step's `hook`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_policy: Option<HookGatePolicy>,
}

/// A canary pause.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryPause {
    /// Seconds to pause; unset pauses until `updateStrategy.paused` is set to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub duration: Option<i32>,
}

/// Most automatic retries of one hook (each retry is a new HookRun under BCS's `.N` name suffix, of which the
/// operator tries at most 8).
pub const MAX_HOOK_AUTO_RETRIES: i32 = 5;

/// Most seconds of a hook deadline or back-off (30 days).
pub const MAX_HOOK_DEADLINE_SECONDS: i64 = 30 * 24 * 3600;

/// Addition (kourse): how long a hook may hold its pod (or canary step), and what happens when it fails or runs too
/// long. Every pod released by a deadline or a fallback is recorded in its `status.*HookCondition` entry
/// (`releasedBy`), a Warning Event `HookReleased` and the metric `gamedeployment_hook_releases_total`, so it is
/// never mistaken for a successful hook.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookGatePolicy {
    /// Seconds one HookRun may run; a run still `Pending`/`Running` after that is decided by `onTimeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_HOOK_DEADLINE_SECONDS))]
    pub soft_deadline_seconds: Option<i64>,
    /// Seconds the gate may hold its pod in all — counted from when the pod entered `PreparingDelete`,
    /// `PreparingUpdate` or `Updated` (a canary step: from its first HookRun's creation), retries included. Past it
    /// the pod is released whatever its hook says (unless the hook already succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_HOOK_DEADLINE_SECONDS))]
    pub hard_deadline_seconds: Option<i64>,
    /// What a failed hook (`Failed`, `Error`, `Inconclusive`) does once automatic retries are used up: `Hold`
    /// (default: the pod waits for `retry` or a person) or `Proceed` (the pod is released); on a canary step also
    /// `Rollback` (the GameDeployment goes back to the stable revision, `status.canary.rollback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<HookFallback>,
    /// What a run past `softDeadlineSeconds` does: `Hold` (default: keep waiting for it, up to the hard deadline)
    /// or `Proceed` (the pod is released).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<HookFallback>,
    /// Retry a failed hook automatically: a new HookRun after `backoffSeconds`, up to `limit` times, before
    /// `onFailure` applies. The manual `retry: true` keeps working beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_retry: Option<HookAutoRetry>,
}

/// What a hook that failed or ran past its soft deadline does to its pod.
///
/// The CRD carries no description of this type (`schema::without_description`): the generator would put it over
/// each field's own, and `onFailure`/`onTimeout` describe the choice differently.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = schema::plain_enum, transform = schema::without_description)]
pub enum HookFallback {
    /// Keep the pod held (the BCS behaviour).
    #[default]
    Hold,
    /// Release the pod: delete or update it as if the hook had succeeded — recorded as a release, not a success.
    Proceed,
    /// A canary step's `onFailure` only: roll the GameDeployment back to the stable revision (recorded in
    /// `status.canary.rollback`, never in the spec) until the template changes again.
    Rollback,
}

/// Automatic retries of a failed hook.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookAutoRetry {
    /// How many new HookRuns may follow the first one, 1 to 5.
    #[schemars(range(min = 1, max = MAX_HOOK_AUTO_RETRIES))]
    pub limit: i32,
    /// Seconds between a run's failure and its retry (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_HOOK_DEADLINE_SECONDS))]
    pub backoff_seconds: Option<i64>,
}

/// Why a gate let a pod go without a successful hook.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = schema::plain_enum)]
pub enum HookReleaseReason {
    /// `hookPolicy.hardDeadlineSeconds` passed.
    HardDeadline,
    /// `hookPolicy.softDeadlineSeconds` passed with `onTimeout: Proceed`.
    SoftDeadline,
    /// The hook failed with `onFailure: Proceed` (after any automatic retries).
    OnFailure,
    /// A person asked to skip the hook for this pod (the pod annotation `gamedeployment.tkex.tencent.com/skip-hook`).
    Skipped,
    /// The run that opened the gate was ended by `spec.terminate` (a patch of the HookRun, e.g. `kubectl gd
    /// skip-hook`), not measured to success; the condition's message names who set it.
    Terminated,
}

impl HookReleaseReason {
    /// The metric label.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::HardDeadline => "hard_deadline",
            Self::SoftDeadline => "soft_deadline",
            Self::OnFailure => "on_failure",
            Self::Skipped => "skipped",
            Self::Terminated => "terminated",
        }
    }
}

/// A hook gate: the HookTemplate run for each pod around one kind of change, as BCS's
/// `preDeleteUpdateStrategy`, `preInplaceUpdateStrategy` and `postInplaceUpdateStrategy` (three Go types with the
/// same fields; one type here). The field of [`GameDeploymentSpec`] says which change; the CRD describes `hook`,
/// `shadowHook` and `retry` per change (`schema::pre_delete_gate` and its siblings), so `kubectl explain` tells
/// what each one gates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.hookPolicy) || ((!has(self.hookPolicy.onFailure) || self.hookPolicy.onFailure != 'Rollback') && (!has(self.hookPolicy.onTimeout) || self.hookPolicy.onTimeout != 'Rollback'))",
    "message": "hookPolicy Rollback is only accepted in a canary step's hookPolicy.onFailure: use Hold or Proceed"
}]))]
pub struct HookGateStrategy {
    /// The HookTemplate to run for each pod around the change; the change proceeds (or, after an in-place
    /// update, the pod counts as updated) once its HookRun is Successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookStep>,
    /// Addition (kourse): a HookTemplate trialled beside `hook` (or alone): its HookRun is made and measured for
    /// each pod exactly as the real one, and its result recorded (`status.shadowHookResults`, an Event, the
    /// metric), but it never holds or releases a pod — the real hook alone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_hook: Option<HookStep>,
    /// Set to true to delete this gate's failed HookRuns and run them again; the operator sets it back to false
    /// once it has acted on it.
    // Defaulted in the schema so `kubectl patch --type=json` can `replace` it, as the BCS walkthrough does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    pub retry: bool,
    /// Addition (kourse): deadlines, fallbacks and automatic retries of this hook. Unset: the
    /// BCS behaviour — the pod is held until the hook succeeds, a failed hook until `retry: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_policy: Option<HookGatePolicy>,
}

/// Observed state. Counts are over the pods the GameDeployment owns that are not terminating.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GameDeploymentStatus {
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods (the TOTAL column).
    #[serde(default)]
    pub replicas: i32,
    /// Pods whose Ready condition is True (the READY column).
    #[serde(default)]
    pub ready_replicas: i32,
    /// Pods Ready for at least `minReadySeconds`.
    #[serde(default)]
    pub available_replicas: i32,
    /// Pods on the update revision (the UPDATED column).
    #[serde(default)]
    pub updated_replicas: i32,
    /// Pods on the update revision that are Ready (the UPDATED_READY column).
    #[serde(default)]
    pub updated_ready_replicas: i32,
    /// Pods on the update revision that are available (Ready for at least `minReadySeconds`), as OpenKruise
    /// CloneSet's `updatedAvailableReplicas`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub updated_available_replicas: i32,
    /// Pods that should be on the update revision: `spec.replicas` minus the partition in force (the spec's
    /// `partition`, or the current canary step's), as OpenKruise CloneSet's `expectedUpdatedReplicas`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expected_updated_replicas: i32,
    /// Addition: how many pods declare each server state (`gamedeployment.tkex.tencent.com/server-state`:
    /// `WaitToBeDeleted`, `Idle`, `Allocated`, `Maintaining`; pods without one, or with another value, are not counted).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub server_states: std::collections::BTreeMap<String, i32>,
    /// Revision of the pods that are not updated (the previous stable template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// Revision (ControllerRevision name) of the current template — the one pods are driven to; while a failed
    /// canary is rolled back (`canary.rollback`), the stable revision instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    /// Counts hash collisions of revision names; used to make the next revision name unique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// `Progressing` (what the rollout is waiting for), and `FailedScale`, `FailedUpdate` and `HookBlocked` while
    /// something stops the operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<GameDeploymentCondition>,
    /// Why the rollout is paused by a canary step, and since when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pause_conditions: Vec<PauseCondition>,
    /// `spec.selector` as a string, for the scale subresource and HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Index of the canary step being run (equal to the number of steps when all are done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_index: Option<i32>,
    /// Addition (kourse): the canary step in progress as people count it, from 1 — `<currentStepIndex + 1>/<steps>`
    /// — or `done` once every step is; unset without canary steps. The STEP column of `kubectl get gamedeployment -o
    /// wide` (`currentStepIndex` counts from 0, as BCS writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<String>,
    /// Hash of the canary steps and template the step index refers to; a change starts again at step 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_hash: Option<String>,
    /// Progress of the canary rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
    /// Pods held before deletion until their pre-delete HookRun succeeds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_delete_hook_condition: Vec<HookCondition>,
    /// Pods held before an in-place update until their pre-inplace HookRun succeeds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_inplace_hook_condition: Vec<HookCondition>,
    /// Updated pods whose post-inplace HookRun has not succeeded yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_inplace_hook_condition: Vec<HookCondition>,
    /// Addition (kourse): the latest results of shadow hooks (`shadowHook`), newest last, at most
    /// `MAX_SHADOW_RESULTS`: what the trialled check said for each pod, beside what the real gate did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_SHADOW_RESULTS))]
    pub shadow_hook_results: Vec<ShadowHookResult>,
}

impl GameDeploymentStatus {
    /// The six pod counts (`replicas`, `readyReplicas`, `availableReplicas`, `updatedReplicas`,
    /// `updatedReadyReplicas`, `updatedAvailableReplicas`), in that order: any change of them is a rollout moving.
    pub fn replica_counts(&self) -> [i32; 6] {
        [
            self.replicas,
            self.ready_replicas,
            self.available_replicas,
            self.updated_replicas,
            self.updated_ready_replicas,
            self.updated_available_replicas,
        ]
    }
}

/// Most entries of `status.shadowHookResults`.
pub const MAX_SHADOW_RESULTS: usize = 20;

/// Addition (kourse): what a shadow hook said about one pod's change.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowHookResult {
    /// `preDelete`, `preInplace`, `postInplace` or `canaryStep`.
    pub hook: String,
    /// The pod whose change the shadow run was made for (empty for a canary step's).
    pub pod_name: String,
    /// The canary step (from 0) a `canaryStep` shadow run was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_step: Option<i32>,
    /// The shadow hook's HookTemplate.
    pub template_name: String,
    /// The shadow HookRun (removed once its pod moved on; this entry stays).
    pub hook_run: String,
    /// How the shadow run ended.
    pub phase: HookPhase,
    /// The run's message, if any (why it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What the real gate of that pod (or canary step) said when the shadow run ended: `no hook`, its run's phase
    /// (`Successful`, `Running`, `Failed`, …) while it holds, or `not holding` once it let go.
    pub gate: String,
    /// When the shadow run ended (recorded).
    pub finished_at: Time,
}

/// Standard Kubernetes-style condition (`FailedScale`, `FailedUpdate`, `Progressing`, ...).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GameDeploymentCondition {
    /// `Progressing`, `FailedScale`, `FailedUpdate` or `HookBlocked`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// `Progressing` only, with `spec.progressDeadlineSeconds` set: when the rollout last made progress (as
    /// Deployment's `lastUpdateTime`); the deadline counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// One CamelCase word for the state, e.g. `RolloutComplete`, `RolloutInProgress`, `Paused`, `InvalidSpec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened, or what the rollout is waiting for, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Why a rollout is paused.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = schema::plain_enum)]
pub enum PauseReason {
    /// A `pause` step: indefinite until `paused` is set to false, or for its `duration`.
    PausedByCanaryPauseStep,
    /// A step's hook failed: the rollout waits until a person resumes it.
    PausedByStepBasedHook,
}

/// A pause of the rollout by a canary step.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseCondition {
    /// `PausedByCanaryPauseStep` or `PausedByStepBasedHook`.
    pub reason: PauseReason,
    /// When the pause started.
    pub start_time: Time,
}

/// Progress of a canary rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// The stable revision the canary started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The HookRun of the current hook step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_hook_run: Option<String>,
    /// When the current pause step started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_start_time: Option<Time>,
    /// Addition (kourse): hook steps of this canary that were passed *without* a successful hook (a `hookPolicy`
    /// deadline or fallback); cleared when a new canary starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_CANARY_STEPS))]
    pub step_releases: Vec<CanaryStepRelease>,
    /// Addition (kourse): set when a hook step with `hookPolicy.onFailure: Rollback` failed for good: the pods are
    /// driven back to the stable revision until the template changes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<CanaryRollback>,
}

/// Addition (kourse): a canary rolled back to its stable revision by a failed hook step (`onFailure: Rollback`).
/// Lives in the status only (never a spec write); ended only by a new template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryRollback {
    /// The revision whose canary failed (the template's; `status.updateRevision` is the stable one meanwhile).
    pub failed_revision: String,
    /// The stable revision the pods go back to.
    pub stable_revision: String,
    /// Index of the hook step that failed.
    pub step: i32,
    /// The step's last HookRun.
    pub hook_run: String,
    /// The HookRun's phase when the rollback was decided (`Failed`, `Error` or `Inconclusive`).
    pub phase: HookPhase,
    /// When the rollback was decided.
    pub rolled_back_at: Time,
    /// Why, in words.
    pub message: String,
}

/// Addition (kourse): a canary hook step passed without a successful hook.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStepRelease {
    /// Index of the step.
    pub step: i32,
    /// The step's last HookRun.
    pub hook_run: String,
    /// Its phase when the step was passed.
    pub phase: HookPhase,
    /// Why the step was passed.
    pub released_by: HookReleaseReason,
    /// When the step was passed.
    pub released_at: Time,
    /// Why, in words (the deadline or policy that passed it, and the run's message).
    pub message: String,
}

/// A pod whose hook has not (yet) succeeded.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookCondition {
    /// The pod held by the hook.
    pub pod_name: String,
    /// When the hook started for this pod.
    pub start_time: Time,
    /// Phase of the pod's HookRun.
    pub phase: HookPhase,
    /// Addition: the HookRun that decides this pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_run: Option<String>,
    /// Addition: why the pod is held (the HookRun's message, or why no HookRun could be created).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Addition (kourse): set when the gate released the pod *without* a successful hook (a deadline, a fallback
    /// or a skip); the entry then stays for 5 minutes after `releasedAt` as a record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_by: Option<HookReleaseReason>,
    /// Addition (kourse): when the pod was released without a successful hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<Time>,
}
