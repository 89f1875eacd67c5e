//! `HotPatchUpdate` (BCS semantics): swap the images of a running pod without taking it out of service — no
//! readiness flip, no grace period. The pod gets the `hotpatch-update-state` annotation (same shape as
//! `inplace-update-state`) and `io.kubernetes.hotpatch.container: "true"`, which a hot-patch-capable runtime
//! (BCS's patched kubelet and dockerd) reads to replace the image without restarting the container; the
//! application must reload itself. On a stock kubelet the change behaves like an in-place update whose
//! container restart is not announced to Services: use `InplaceUpdate` there.
//!
//! As in BCS, the pod counts as updated as soon as the patch is accepted (completion is not observable).

use std::collections::BTreeMap;

use common::keys;
use serde_json::json;

use super::step::{self as inplace, Step};
use crate::action::{PatchReason, PodChange, PodRef, PodWrite};
use crate::patch;

/// The single write of a hot-patch update.
pub fn update(step: &Step<'_>) -> PodChange {
    let pod = step.pod;
    let mut ops = patch::ensure_maps(pod);
    ops.extend(patch::test_label(keys::CONTROLLER_REVISION_HASH, Some(step.from_revision)));
    let (images, last) = inplace::image_ops(step);
    ops.extend(images);
    ops.extend(patch::map_ops(
        "/metadata/labels",
        pod.metadata.labels.as_ref(),
        &without_own_keys(&step.change.labels_from),
        &without_own_keys(&step.change.labels_to),
    ));
    ops.extend(patch::map_ops(
        "/metadata/annotations",
        pod.metadata.annotations.as_ref(),
        &without_own_keys(&step.change.annotations_from),
        &without_own_keys(&step.change.annotations_to),
    ));
    ops.extend(inplace::revision_ops(step, keys::HOTPATCH_UPDATE_STATE, last));
    ops.push(json!({"op": "add", "path": patch::annotation_path(keys::HOTPATCH_CONTAINER), "value": "true"}));
    let images = step.change.images.iter().map(|(c, i)| format!("{c}={i}")).collect::<Vec<_>>().join(", ");
    PodChange {
        pod: PodRef::of(pod),
        reason: PatchReason::HotPatchUpdate,
        writes: vec![PodWrite::Object(ops)],
        summary: format!("{images} to {} (hot patch)", step.to_revision),
    }
}

fn without_own_keys(map: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    map.iter()
        .filter(|(k, _)| {
            ![keys::CONTROLLER_REVISION_HASH, keys::INSTANCE_ID, keys::LIFECYCLE_STATE, keys::HOTPATCH_CONTAINER]
                .contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::step::TemplateChange;
    use super::*;
    use common::cached_pod::{Container, ContainerState, ContainerStatus, Pod, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::Value;

    #[test]
    fn patches_images_revision_and_marks_hot_patch() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("gd-abcde".into()),
                labels: Some([(keys::CONTROLLER_REVISION_HASH.to_string(), "gd-1".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container { name: "main".into(), image: Some("main:v1".into()) }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "main".into(),
                    image: "main:v1".into(),
                    image_id: "id-v1".into(),
                    state: Some(ContainerState { running: Some(Default::default()) }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        let change = TemplateChange { images: [("main".into(), "main:v2".into())].into(), ..Default::default() };
        let step =
            Step { pod: &pod, from_revision: "gd-1", to_revision: "gd-2", change: &change, now: Timestamp::UNIX_EPOCH };
        let PodWrite::Object(ops) = &update(&step).writes[0] else { panic!() };
        let mut doc = serde_json::to_value(&pod).unwrap();
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.clone())).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        let pod: Pod = serde_json::from_value(doc).unwrap();
        assert_eq!(pod.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("main:v2"));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[keys::CONTROLLER_REVISION_HASH], "gd-2");
        let annotations = pod.metadata.annotations.clone().unwrap();
        assert_eq!(annotations[keys::HOTPATCH_CONTAINER], "true");
        assert!(annotations[keys::HOTPATCH_UPDATE_STATE].contains("\"revision\":\"gd-2\""));

        // Until the container reports the new image (or the settle time passes) the pod is being updated.
        use crate::planner::pod_progress::{HOT_PATCH_SETTLE_SECONDS, Progress, progress};
        let mut pod = pod;
        assert!(matches!(progress(&pod, Timestamp::UNIX_EPOCH), Progress::HotPatching { .. }));
        assert_eq!(progress(&pod, Timestamp::from_second(HOT_PATCH_SETTLE_SECONDS).unwrap()), Progress::Idle);
        pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].image = "main:v2".into();
        assert_eq!(progress(&pod, Timestamp::UNIX_EPOCH), Progress::Idle);
    }
}
