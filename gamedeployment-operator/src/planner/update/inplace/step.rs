//! `InplaceUpdate`: change the images of a running pod (it keeps its name, IP and node; the kubelet restarts the
//! changed containers).
//!
//! Sequence, each step a separate pass so a restart anywhere resumes from what the pod records:
//! 1. The gate allows the update. The pod's `InPlaceUpdateReady` condition is set False (reason
//!    `StartInPlaceUpdate`), which takes it out of Service endpoints, and — in a second write, only if the first
//!    succeeded — the pod is labelled `Updating`. Without a grace period the images, template labels/annotations
//!    and the revision label change in that same write, with the BCS `inplace-update-state` annotation recording
//!    each changed container's previous `imageID`.
//! 2. With `gracePeriodSeconds`, the planned change waits in the `inplace-update-grace` annotation until the
//!    grace period has passed; the pod keeps its old revision label meanwhile (BCS flips it at once, so
//!    `updatedReplicas` counted pods still running the old image — BCS-G9). A new target revision during
//!    the grace period cancels it.
//! 3. Completion: every changed container reports a new `imageID`, or reports the new image (so a tag that
//!    resolves to the same digest completes too, unlike BCS). Then `InPlaceUpdateReady` goes back to True and
//!    the pod to `Normal`.
//!
//! Without a grace period, a post-inplace hook or an `inPlaceUpdate` lifecycle handler, a pod with the readiness
//! gate skips `Updating`: the image patch puts it back to `Normal` and the False `InPlaceUpdateReady` condition
//! (reason `StartInPlaceUpdate`) with the `inplace-update-state` of its revision marks the update as in progress,
//! so completing it is the one status write ([`Ending::Normal`]). Per pod and update that is three pod writes
//! (condition False, image patch, condition True) instead of four.
//!
//! Only container images and template labels/annotations can change in place; anything else is recreated
//! (with an event) instead of failing forever as BCS does (BCS-G5).

use std::collections::BTreeMap;

use common::cached_pod::Pod;
use common::keys;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::action::{PatchReason, PodChange, PodRef, PodWrite};
use crate::lifecycle::{self, LifecycleState};
use crate::patch;
use crate::revision;

/// What changes between two templates when the change can be made in place.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TemplateChange {
    /// Container name → new image.
    pub images: BTreeMap<String, String>,
    pub labels_from: BTreeMap<String, String>,
    pub labels_to: BTreeMap<String, String>,
    pub annotations_from: BTreeMap<String, String>,
    pub annotations_to: BTreeMap<String, String>,
}

fn meta_map(template: &PodTemplateSpec, labels: bool) -> BTreeMap<String, String> {
    let meta = template.metadata.as_ref();
    let map = if labels { meta.and_then(|m| m.labels.clone()) } else { meta.and_then(|m| m.annotations.clone()) };
    map.unwrap_or_default()
}

/// The in-place change from `old` to `new`, or why there is none.
pub fn diff(old: &PodTemplateSpec, new: &PodTemplateSpec) -> Result<TemplateChange, String> {
    let strip_images = |template: &PodTemplateSpec| {
        // Compared as the API machinery stores templates: a spelling difference (`1000m` and `1`) is no change.
        let mut spec = revision::canonical_spec_apart_from_images(template);
        if let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) {
            for c in containers {
                if let Some(map) = c.as_object_mut() {
                    map.remove("image");
                }
            }
        }
        spec
    };
    let (mut old_spec, mut new_spec) = (strip_images(old), strip_images(new));
    set_aside_kept_pull_policies(old, new, &mut old_spec, &mut new_spec);
    if old_spec != new_spec {
        let fields = changed_fields(&old_spec, &new_spec);
        return Err(format!("the template changes more than container images and metadata ({fields})"));
    }
    let mut images = BTreeMap::new();
    let containers = |t: &PodTemplateSpec| t.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default();
    for (o, n) in containers(old).iter().zip(containers(new).iter()) {
        if o.image != n.image {
            images.insert(n.name.clone(), n.image.clone().unwrap_or_default());
        }
    }
    Ok(TemplateChange {
        images,
        labels_from: meta_map(old, true),
        labels_to: meta_map(new, true),
        annotations_from: meta_map(old, false),
        annotations_to: meta_map(new, false),
    })
}

/// Removes `imagePullPolicy` from both specs for each pair of containers where an in-place update keeps the pod's
/// own policy and that is no change: the policies in effect (written, or the API server's default for each side's
/// image, which it set when the pod was created) are equal, or the new template writes none (the default moves with
/// the image's tag, `:latest` pulls `Always`, but an image changed in place keeps the policy the pod has). A policy
/// the new template writes that differs from the one in effect is a change, and recreates the pod.
fn set_aside_kept_pull_policies(
    old: &PodTemplateSpec,
    new: &PodTemplateSpec,
    old_spec: &mut Value,
    new_spec: &mut Value,
) {
    use k8s_openapi::api::core::v1::Container;
    let effective = |c: &Container| {
        c.image_pull_policy
            .clone()
            .unwrap_or_else(|| revision::canonical::default_pull_policy(c.image.as_deref().unwrap_or("")).to_string())
    };
    for list in ["containers", "initContainers"] {
        let containers = |t: &PodTemplateSpec| -> Vec<Container> {
            let spec = t.spec.as_ref();
            let found = if list == "containers" {
                spec.map(|s| s.containers.clone())
            } else {
                spec.and_then(|s| s.init_containers.clone())
            };
            found.unwrap_or_default()
        };
        for (i, (o, n)) in containers(old).iter().zip(containers(new).iter()).enumerate() {
            if n.image_pull_policy.is_none() || effective(o) == effective(n) {
                for spec in [&mut *old_spec, &mut *new_spec] {
                    if let Some(c) = spec.get_mut(list).and_then(|l| l.get_mut(i)).and_then(Value::as_object_mut) {
                        c.remove("imagePullPolicy");
                    }
                }
            }
        }
    }
}

/// Names the differing fields (`spec.containers`, `spec.volumes`...) so the event says what forced a recreate.
fn changed_fields(old: &Value, new: &Value) -> String {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else { return "spec".into() };
    let mut fields: Vec<String> = o
        .keys()
        .chain(n.keys())
        .filter(|k| o.get(*k) != n.get(*k))
        .map(|k| if k == "containers" { "spec.containers (not only images)".to_string() } else { format!("spec.{k}") })
        .collect();
    fields.sort();
    fields.dedup();
    fields.join(", ")
}

/// The lifecycle state an in-place update puts the pod in when it patches the images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// `Updating` until the new containers run, then `Normal` (or `Updated`): a write for each step. Needed for a
    /// grace period, a post-inplace hook, an `inPlaceUpdate` lifecycle handler, or a pod without the readiness gate.
    Updating,
    /// Straight back to `Normal` in the image patch: the readiness condition (False until the new containers run)
    /// carries the progress, so completing the update is the one write that sets it True again.
    Normal,
}

// What a pod records of its update, and reading it, are below the settings that hold it per pod
// ([`crate::planner::pod_progress`]); named here too, where the update steps write it.
pub(crate) use crate::planner::pod_progress::gate_condition_true;
#[cfg(test)]
pub use crate::planner::pod_progress::progress;
pub use crate::planner::pod_progress::{
    GraceSpec, InPlaceUpdateState, LastContainerStatus, Progress, has_readiness_gate,
};

/// Inputs of an in-place step for one pod.
pub struct Step<'a> {
    pub pod: &'a Pod,
    pub from_revision: &'a str,
    pub to_revision: &'a str,
    pub change: &'a TemplateChange,
    pub now: Timestamp,
}

fn summary(change: &TemplateChange) -> String {
    if change.images.is_empty() {
        return "template metadata only".into();
    }
    change.images.iter().map(|(c, image)| format!("{c}={image}")).collect::<Vec<_>>().join(", ")
}

/// Operations replacing the images the change moves (each guarded by a `test` of the container's name), and the
/// image ID each changed container ran before (to tell when the new one runs). Shared by in-place and hot-patch.
pub(crate) fn image_ops(step: &Step<'_>) -> (Vec<Value>, BTreeMap<String, LastContainerStatus>) {
    let pod = step.pod;
    let mut ops = Vec::new();
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let mut last = BTreeMap::new();
    for (i, container) in containers.iter().enumerate() {
        let Some(image) = step.change.images.get(container.name.as_str()) else { continue };
        if container.image.as_deref() == Some(image.as_str()) {
            continue;
        }
        ops.push(json!({"op": "test", "path": format!("/spec/containers/{i}/name"), "value": container.name}));
        ops.push(json!({"op": "replace", "path": format!("/spec/containers/{i}/image"), "value": image}));
        if let Some(status) = statuses.and_then(|cs| cs.iter().find(|c| c.name == container.name)) {
            last.insert(container.name.to_string(), LastContainerStatus { image_id: status.image_id.to_string() });
        }
    }
    (ops, last)
}

/// Operations applying the images, template metadata, revision label and the state annotation.
fn apply_ops(step: &Step<'_>) -> Vec<Value> {
    let pod = step.pod;
    let (mut ops, last) = image_ops(step);
    let mut labels_to = step.change.labels_to.clone();
    labels_to.retain(|k, _| !is_own_key(k));
    let mut labels_from = step.change.labels_from.clone();
    labels_from.retain(|k, _| !is_own_key(k));
    ops.extend(patch::map_ops("/metadata/labels", pod.metadata.labels.as_ref(), &labels_from, &labels_to));
    let mut annotations_to = step.change.annotations_to.clone();
    annotations_to.retain(|k, _| !is_own_key(k));
    let mut annotations_from = step.change.annotations_from.clone();
    annotations_from.retain(|k, _| !is_own_key(k));
    ops.extend(patch::map_ops(
        "/metadata/annotations",
        pod.metadata.annotations.as_ref(),
        &annotations_from,
        &annotations_to,
    ));
    ops.extend(revision_ops(step, keys::INPLACE_UPDATE_STATE, last));
    ops
}

/// The two operations that record an update on the pod, for in-place and hot-patch updates alike: the revision
/// label, and the state annotation `state_key` (`inplace-update-state` or `hotpatch-update-state`, one shape) with
/// the containers' image IDs before the update.
pub(crate) fn revision_ops(
    step: &Step<'_>,
    state_key: &str,
    last: BTreeMap<String, LastContainerStatus>,
) -> [Value; 2] {
    let state = InPlaceUpdateState {
        revision: step.to_revision.to_string(),
        update_timestamp: step.now.to_string(),
        last_container_statuses: last,
    };
    // Serialising a struct of strings cannot fail.
    let state = serde_json::to_string(&state).unwrap_or_default();
    [
        json!({"op": "add", "path": patch::label_path(keys::CONTROLLER_REVISION_HASH), "value": step.to_revision}),
        json!({"op": "add", "path": patch::annotation_path(state_key), "value": state}),
    ]
}

/// Keys the operator owns on pods; template metadata never overrides them.
fn is_own_key(key: &str) -> bool {
    [
        keys::CONTROLLER_REVISION_HASH,
        keys::INSTANCE_ID,
        keys::INDEX_ID,
        keys::LIFECYCLE_STATE,
        keys::LIFECYCLE_TIMESTAMP,
        keys::INPLACE_UPDATE_STATE,
        keys::INPLACE_UPDATE_GRACE,
        keys::HOTPATCH_UPDATE_STATE,
    ]
    .contains(&key)
}

/// Starts the in-place update (step 1): readiness gate False first, then the pod patch.
#[cfg(test)]
pub fn start(step: &Step<'_>, grace_seconds: i32) -> PodChange {
    start_to(step, grace_seconds, Ending::Updating)
}

/// Starts the in-place update (as the tests' `start`), putting the pod in the state `ending` asks for ([`Ending::Normal`] only applies to a pod with the
/// readiness gate and no grace period; otherwise it is `Updating`).
pub fn start_to(step: &Step<'_>, grace_seconds: i32, ending: Ending) -> PodChange {
    let pod = step.pod;
    let direct = ending == Ending::Normal && grace_seconds <= 0 && has_readiness_gate(pod);
    let mut writes = Vec::new();
    if has_readiness_gate(pod) {
        writes.push(PodWrite::Status(patch::condition_ops(
            pod,
            keys::IN_PLACE_UPDATE_READY,
            "False",
            Some(keys::IN_PLACE_UPDATE_STARTED_REASON),
            step.now,
        )));
    }
    let mut ops = patch::ensure_maps(pod);
    ops.extend(patch::test_label(keys::CONTROLLER_REVISION_HASH, Some(step.from_revision)));
    let state = if direct { LifecycleState::Normal } else { LifecycleState::Updating };
    ops.extend(lifecycle::set_state_ops(state, step.now));
    if grace_seconds > 0 {
        let grace = GraceSpec {
            revision: step.to_revision.to_string(),
            container_images: step.change.images.clone(),
            grace_seconds: i64::from(grace_seconds),
            update_timestamp: step.now.to_string(),
        };
        let grace = serde_json::to_string(&grace).unwrap_or_default();
        ops.push(json!({"op": "add", "path": patch::annotation_path(keys::INPLACE_UPDATE_GRACE), "value": grace}));
    } else {
        ops.extend(apply_ops(step));
    }
    writes.push(PodWrite::Object(ops));
    let summary = if grace_seconds > 0 {
        format!("{} to {} after a {grace_seconds}s grace period", summary(step.change), step.to_revision)
    } else {
        format!("{} to {}", summary(step.change), step.to_revision)
    };
    PodChange { pod: PodRef::of(pod), reason: PatchReason::InPlaceUpdate, writes, summary }
}

/// When the grace period of a pod ends.
pub fn grace_ends_at(grace: &GraceSpec) -> Option<Timestamp> {
    let start: Timestamp = grace.update_timestamp.parse().ok()?;
    Timestamp::from_second(start.as_second().saturating_add(grace.grace_seconds)).ok()
}

/// The grace period is over: patch the images now (step 2).
pub fn finish_grace(step: &Step<'_>, grace_annotation: &str) -> PodChange {
    let mut ops = vec![json!({
        "op": "test", "path": patch::annotation_path(keys::INPLACE_UPDATE_GRACE), "value": grace_annotation
    })];
    ops.extend(patch::test_label(keys::CONTROLLER_REVISION_HASH, Some(step.from_revision)));
    ops.extend(apply_ops(step));
    ops.push(json!({"op": "remove", "path": patch::annotation_path(keys::INPLACE_UPDATE_GRACE)}));
    PodChange {
        pod: PodRef::of(step.pod),
        reason: PatchReason::InPlaceGraceEnded,
        writes: vec![PodWrite::Object(ops)],
        summary: format!("{} to {}", summary(step.change), step.to_revision),
    }
}

/// The target changed during the grace period: forget the planned update and put the pod back in service.
pub fn cancel_grace(pod: &Pod, grace_annotation: &str, now: Timestamp) -> PodChange {
    let mut ops = vec![
        json!({"op": "test", "path": patch::annotation_path(keys::INPLACE_UPDATE_GRACE), "value": grace_annotation}),
        json!({"op": "remove", "path": patch::annotation_path(keys::INPLACE_UPDATE_GRACE)}),
    ];
    ops.extend(lifecycle::set_state_ops(LifecycleState::Normal, now));
    let mut writes = vec![PodWrite::Object(ops)];
    if has_readiness_gate(pod) {
        writes.push(PodWrite::Status(patch::condition_ops(pod, keys::IN_PLACE_UPDATE_READY, "True", None, now)));
    }
    PodChange {
        pod: PodRef::of(pod),
        reason: PatchReason::InPlaceGraceCancelled,
        writes,
        summary: "the target revision changed during the grace period".into(),
    }
}

/// The new containers run: lifecycle back to `Normal`, then the readiness gate back to True (step 3).
pub fn complete(pod: &Pod, now: Timestamp) -> PodChange {
    complete_to(pod, now, LifecycleState::Normal)
}

/// [`complete`] into `state`: `Updated` while a post-inplace hook holds the pod's state. A pod already in `state`
/// (an update started straight to `Normal`) only gets its readiness condition back.
pub fn complete_to(pod: &Pod, now: Timestamp, state: LifecycleState) -> PodChange {
    let current = lifecycle::state_of(pod);
    let mut writes = Vec::new();
    if current != state {
        let mut ops: Vec<Value> = common::pod::label(pod, keys::LIFECYCLE_STATE)
            .map(|l| json!({"op": "test", "path": patch::label_path(keys::LIFECYCLE_STATE), "value": l}))
            .into_iter()
            .collect();
        ops.extend(lifecycle::set_state_ops(state, now));
        writes.push(PodWrite::Object(ops));
    }
    if has_readiness_gate(pod) && !gate_condition_true(pod) {
        writes.push(PodWrite::Status(patch::condition_ops(pod, keys::IN_PLACE_UPDATE_READY, "True", None, now)));
    }
    PodChange {
        pod: PodRef::of(pod),
        reason: PatchReason::InPlaceUpdateCompleted,
        writes,
        summary: format!(
            "running revision {}",
            common::pod::label(pod, keys::CONTROLLER_REVISION_HASH).unwrap_or("(unknown)")
        ),
    }
}

/// A pod with the readiness gate and nothing in progress whose condition is not True (a new pod, or one whose
/// update was interrupted before its images changed): put it in service. BCS only does this inside its update
/// loop, so pods created while paused never became Ready (BCS-G8); here it always happens.
pub fn mark_ready(pod: &Pod, now: Timestamp) -> Option<PodChange> {
    if !has_readiness_gate(pod) || gate_condition_true(pod) {
        return None;
    }
    Some(PodChange {
        pod: PodRef::of(pod),
        reason: PatchReason::ReadinessGate,
        writes: vec![PodWrite::Status(patch::condition_ops(pod, keys::IN_PLACE_UPDATE_READY, "True", None, now))],
        summary: format!("{} condition set True", keys::IN_PLACE_UPDATE_READY),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::pod_progress::{HOT_PATCH_SETTLE_SECONDS, is_complete};
    use common::cached_pod::{self, ContainerState, ContainerStatus, PodStatus};
    use k8s_openapi::api::core::v1::{Container, ContainerStateRunning, EnvVar, PodReadinessGate, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn template(image: &str, labels: &[(&str, &str)]) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![
                    Container { name: "main".into(), image: Some(image.into()), ..Default::default() },
                    Container { name: "sidecar".into(), image: Some("envoy:1".into()), ..Default::default() },
                ],
                ..Default::default()
            }),
        }
    }

    fn running_pod(image: &str, image_id: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-abcde".into()),
                uid: Some("u1".into()),
                labels: Some(
                    [("app".into(), "web".into()), (keys::CONTROLLER_REVISION_HASH.into(), "web-1".into())].into(),
                ),
                annotations: Some(BTreeMap::new()),
                ..Default::default()
            },
            spec: Some(cached_pod::PodSpec {
                containers: vec![
                    cached_pod::Container { name: "main".into(), image: Some(image.into()) },
                    cached_pod::Container { name: "sidecar".into(), image: Some("envoy:1".into()) },
                ],
                readiness_gates: Some(vec![PodReadinessGate { condition_type: keys::IN_PLACE_UPDATE_READY.into() }]),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "main".into(),
                    image: image.into(),
                    image_id: image_id.into(),
                    state: Some(ContainerState { running: Some(ContainerStateRunning::default()) }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn apply(pod: &Pod, ops: &[Value]) -> Pod {
        let mut doc = serde_json::to_value(pod).unwrap();
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.to_vec())).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        serde_json::from_value(doc).unwrap()
    }

    #[test]
    fn image_and_metadata_changes_are_in_place() {
        let change =
            diff(&template("nginx:1", &[("app", "web")]), &template("nginx:2", &[("app", "web"), ("v", "2")])).unwrap();
        assert_eq!(change.images, BTreeMap::from([("main".to_string(), "nginx:2".to_string())]));
        assert_eq!(change.labels_to.get("v").map(String::as_str), Some("2"));
    }

    #[test]
    fn other_changes_are_not() {
        let mut new = template("nginx:2", &[("app", "web")]);
        new.spec.as_mut().unwrap().containers[0].env = Some(vec![EnvVar { name: "A".into(), ..Default::default() }]);
        let err = diff(&template("nginx:1", &[("app", "web")]), &new).unwrap_err();
        assert!(err.contains("spec.containers"), "{err}");
        let mut new = template("nginx:1", &[("app", "web")]);
        new.spec.as_mut().unwrap().containers.pop();
        assert!(diff(&template("nginx:1", &[("app", "web")]), &new).is_err());
    }

    /// A revision BCS stored holds Go's spelling of the template (`cpu: "1"`, no `stdin: false`); the same
    /// template written otherwise (`1000m`, `stdin: false`) with a new image is still an image change, in place.
    /// A move to `:latest` is too: its default pull policy (`Always`) is set once, when a pod is created.
    #[test]
    fn spelling_differences_are_no_change() {
        let quantity = |t: &mut PodTemplateSpec, cpu: &str| {
            let c = &mut t.spec.as_mut().unwrap().containers[0];
            c.resources = Some(serde_json::from_value(json!({"limits": {"cpu": cpu}})).unwrap());
        };
        let mut stored = template("nginx:1", &[("app", "web")]);
        quantity(&mut stored, "1");
        let mut written = template("nginx:2", &[("app", "web")]);
        quantity(&mut written, "1000m");
        written.spec.as_mut().unwrap().containers[0].stdin = Some(false);
        let change = diff(&stored, &written).unwrap();
        assert_eq!(change.images, BTreeMap::from([("main".to_string(), "nginx:2".to_string())]));
        assert!(diff(&template("nginx:1", &[("app", "web")]), &template("nginx:latest", &[("app", "web")])).is_ok());
        // A revision from a defaulted object (a CloneSet's) writes the default pull policy out.
        let mut defaulted = template("nginx:1", &[("app", "web")]);
        defaulted.spec.as_mut().unwrap().containers[0].image_pull_policy = Some("IfNotPresent".into());
        assert!(diff(&defaulted, &template("nginx:2", &[("app", "web")])).is_ok());
        let mut always = template("nginx:2", &[("app", "web")]);
        always.spec.as_mut().unwrap().containers[0].image_pull_policy = Some("Always".into());
        assert!(diff(&defaulted, &always).is_err(), "another pull policy is not an image change");
        // The manifest writes IfNotPresent for `:latest` and for a tag: the policy in effect is the same.
        let mut latest = template("python:latest", &[("app", "web")]);
        latest.spec.as_mut().unwrap().containers[0].image_pull_policy = Some("IfNotPresent".into());
        let mut tagged = template("python:3.5", &[("app", "web")]);
        tagged.spec.as_mut().unwrap().containers[0].image_pull_policy = Some("IfNotPresent".into());
        assert!(diff(&latest, &tagged).is_ok());
        assert!(diff(&tagged, &latest).is_ok());
        quantity(&mut written, "2");
        assert!(diff(&stored, &written).is_err(), "a real resource change is not in place");
    }

    #[test]
    fn full_sequence_without_grace() {
        let now = Timestamp::from_second(1_000).unwrap();
        let pod = running_pod("nginx:1", "sha256:old");
        let change =
            diff(&template("nginx:1", &[("app", "web")]), &template("nginx:2", &[("app", "web"), ("v", "2")])).unwrap();
        let step = Step { pod: &pod, from_revision: "web-1", to_revision: "web-2", change: &change, now };
        let started = start(&step, 0);
        assert_eq!(started.writes.len(), 2);
        let PodWrite::Status(status_ops) = &started.writes[0] else { panic!("readiness gate first") };
        let PodWrite::Object(ops) = &started.writes[1] else { panic!() };
        let mut pod = apply(&apply(&pod, status_ops), ops);
        assert_eq!(common::pod::condition(&pod, keys::IN_PLACE_UPDATE_READY).unwrap().status, "False");
        assert_eq!(pod.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("nginx:2"));
        assert_eq!(common::pod::label(&pod, keys::CONTROLLER_REVISION_HASH), Some("web-2"));
        assert_eq!(common::pod::label(&pod, "v"), Some("2"));
        assert_eq!(lifecycle::state_of(&pod), LifecycleState::Updating);
        let Progress::Patched(state) = progress(&pod, Timestamp::UNIX_EPOCH) else {
            panic!("{:?}", progress(&pod, Timestamp::UNIX_EPOCH))
        };
        assert_eq!(state.last_container_statuses["main"].image_id, "sha256:old");

        // The kubelet restarts the container with the new image.
        let status = &mut pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
        status.image = "docker.io/library/nginx:2".into();
        status.image_id = "sha256:new".into();
        assert_eq!(progress(&pod, Timestamp::UNIX_EPOCH), Progress::Done);
        let done = complete(&pod, now);
        for w in &done.writes {
            let (PodWrite::Object(ops) | PodWrite::Status(ops)) = w;
            pod = apply(&pod, ops);
        }
        assert_eq!(lifecycle::state_of(&pod), LifecycleState::Normal);
        assert_eq!(common::pod::condition(&pod, keys::IN_PLACE_UPDATE_READY).unwrap().status, "True");
        assert_eq!(progress(&pod, Timestamp::UNIX_EPOCH), Progress::Idle);
    }

    #[test]
    fn a_stored_pod_is_read_again_under_a_new_resource_version_and_the_hot_patch_deadline_follows_the_clock() {
        let now = Timestamp::from_second(1_000).unwrap();
        let mut pod = running_pod("nginx:1", "sha256:old");
        pod.metadata.uid = Some("u-remembered".into());
        pod.metadata.resource_version = Some("5".into());
        assert_eq!(progress(&pod, now), Progress::Idle);
        // The hot patch's record arrives with a new resourceVersion: read again, not the remembered Idle.
        let state = InPlaceUpdateState {
            revision: "web-1".into(),
            update_timestamp: now.to_string(),
            last_container_statuses: BTreeMap::from([(
                "main".to_string(),
                LastContainerStatus { image_id: "sha256:old".into() },
            )]),
        };
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(keys::HOTPATCH_UPDATE_STATE.into(), serde_json::to_string(&state).unwrap());
        pod.spec.as_mut().unwrap().containers[0].image = Some("nginx:2".into());
        pod.metadata.resource_version = Some("6".into());
        let deadline = Timestamp::from_second(1_000 + HOT_PATCH_SETTLE_SECONDS).unwrap();
        assert_eq!(progress(&pod, now), Progress::HotPatching { deadline });
        // Remembered for this resourceVersion, the deadline still compares with the clock of each pass.
        assert_eq!(progress(&pod, deadline), Progress::Idle);
        assert_eq!(progress(&pod, now), Progress::HotPatching { deadline });
        // The containers report the new image (another resourceVersion): done, so idle.
        let status = &mut pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
        status.image = "nginx:2".into();
        status.image_id = "sha256:new".into();
        pod.metadata.resource_version = Some("7".into());
        assert_eq!(progress(&pod, now), Progress::Idle);
    }

    #[test]
    fn straight_to_normal_the_update_is_three_pod_writes() {
        let now = Timestamp::from_second(1_000).unwrap();
        let pod = running_pod("nginx:1", "sha256:old");
        let change = diff(&template("nginx:1", &[("app", "web")]), &template("nginx:2", &[("app", "web")])).unwrap();
        let step = Step { pod: &pod, from_revision: "web-1", to_revision: "web-2", change: &change, now };
        let started = start_to(&step, 0, Ending::Normal);
        assert_eq!(started.writes.len(), 2, "readiness gate False, then the image patch");
        let PodWrite::Status(status_ops) = &started.writes[0] else { panic!("readiness gate first") };
        let PodWrite::Object(ops) = &started.writes[1] else { panic!() };
        let mut pod = apply(&apply(&pod, status_ops), ops);
        assert_eq!(lifecycle::state_of(&pod), LifecycleState::Normal, "no Updating state");
        assert_eq!(pod.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("nginx:2"));
        assert!(matches!(progress(&pod, now), Progress::Patched(_)), "in progress while the condition is False");

        let status = &mut pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
        status.image = "nginx:2".into();
        status.image_id = "sha256:new".into();
        assert_eq!(progress(&pod, now), Progress::Done);
        let done = complete(&pod, now);
        assert_eq!(done.writes.len(), 1, "completion is the condition alone: {:?}", done.writes);
        let PodWrite::Status(ops) = &done.writes[0] else { panic!("a status write") };
        let pod = apply(&pod, ops);
        assert_eq!(common::pod::condition(&pod, keys::IN_PLACE_UPDATE_READY).unwrap().status, "True");
        assert_eq!(progress(&pod, now), Progress::Idle);

        // With a grace period the pod goes through Updating as before.
        let waiting = start_to(&step, 30, Ending::Normal);
        let PodWrite::Object(ops) = &waiting.writes[1] else { panic!() };
        assert_eq!(lifecycle::state_of(&apply(&step.pod.clone(), ops)), LifecycleState::Updating);
    }

    #[test]
    fn same_digest_new_tag_completes() {
        let mut pod = running_pod("nginx:2", "sha256:same");
        let state = InPlaceUpdateState {
            revision: "web-2".into(),
            update_timestamp: "1970-01-01T00:00:00Z".into(),
            last_container_statuses: [("main".into(), LastContainerStatus { image_id: "sha256:same".into() })].into(),
        };
        assert!(is_complete(&pod, &state));
        pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].image = "nginx:1".into();
        assert!(!is_complete(&pod, &state));
    }

    #[test]
    fn grace_period_defers_the_images() {
        let now = Timestamp::from_second(1_000).unwrap();
        let pod = running_pod("nginx:1", "sha256:old");
        let change = diff(&template("nginx:1", &[("app", "web")]), &template("nginx:2", &[("app", "web")])).unwrap();
        let step = Step { pod: &pod, from_revision: "web-1", to_revision: "web-2", change: &change, now };
        let started = start(&step, 30);
        let PodWrite::Object(ops) = &started.writes[1] else { panic!() };
        let pod = apply(&pod, ops);
        assert_eq!(pod.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("nginx:1"));
        assert_eq!(common::pod::label(&pod, keys::CONTROLLER_REVISION_HASH), Some("web-1"));
        let Progress::Grace(grace) = progress(&pod, Timestamp::UNIX_EPOCH) else { panic!() };
        assert_eq!(grace_ends_at(&grace), Some(Timestamp::from_second(1_030).unwrap()));

        let annotation = common::pod::annotation(&pod, keys::INPLACE_UPDATE_GRACE).unwrap().to_string();
        let later = Step { pod: &pod, from_revision: "web-1", to_revision: "web-2", change: &change, now };
        let PodWrite::Object(ops) = &finish_grace(&later, &annotation).writes[0] else { panic!() };
        let finished = apply(&pod, ops);
        assert_eq!(finished.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("nginx:2"));
        assert!(common::pod::annotation(&finished, keys::INPLACE_UPDATE_GRACE).is_none());
        assert!(matches!(progress(&finished, Timestamp::UNIX_EPOCH), Progress::Patched(_)));

        let cancelled = cancel_grace(&pod, &annotation, now);
        let mut back = pod.clone();
        for w in &cancelled.writes {
            let (PodWrite::Object(ops) | PodWrite::Status(ops)) = w;
            back = apply(&back, ops);
        }
        assert_eq!(progress(&back, Timestamp::UNIX_EPOCH), Progress::Idle);
        assert_eq!(lifecycle::state_of(&back), LifecycleState::Normal);
    }

    #[test]
    fn new_pods_are_marked_ready_once() {
        let now = Timestamp::from_second(1).unwrap();
        let pod = running_pod("nginx:1", "x");
        let change = mark_ready(&pod, now).unwrap();
        let PodWrite::Status(ops) = &change.writes[0] else { panic!() };
        let pod = apply(&pod, ops);
        assert!(mark_ready(&pod, now).is_none());
    }
}
