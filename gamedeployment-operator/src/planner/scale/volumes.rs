//! PersistentVolumeClaims from `spec.volumeClaimTemplates`, with OpenKruise CloneSet's semantics (seed 003
//! "支持 PVC 模板"):
//!
//! - each pod gets one claim per template, named `<template>-<gamedeployment>-<instance id>` (CloneSet's
//!   `<claim>-<cloneset>-<instance-id>`, which is also `<template>-<pod name>`), labelled with the selector's
//!   `matchLabels` and the pod's instance id, controlled by the GameDeployment (so they go with it), and mounted as
//!   the pod volume named like the template (replacing a template volume of that name);
//! - when the operator deletes a pod (scale-in, `podsToDelete`, specified-delete, a recreate update) it deletes
//!   the pod's claims once the pod deletion went through; an in-place update keeps them;
//! - a claim whose pod disappeared out of band (its instance id is on no pod) is *free*: the next pod created
//!   takes that instance id — hence the same name and the same claims. With `scaleStrategy.disablePVCReuse` free
//!   claims are deleted instead.
//!
//! [`plan`] is the planner's last scaling step: it rewrites the pass's `CreatePod` actions (reused ids, volumes)
//! and adds the claim actions. Pure, like the rest of the planner.

use std::collections::{BTreeMap, BTreeSet};

use common::api::GameDeployment;
use common::cached_pod::Pod;
use common::keys;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::super::claim_names::{claim_name, template_name};
use crate::action::{Action, ClaimRef, PodRef};
use crate::ownership;

/// The instance id a claim belongs to.
pub fn instance_id(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim.metadata.labels.as_ref()?.get(keys::INSTANCE_ID).map(String::as_str)
}

/// The claims of the pod with instance id `id`, as they are created.
pub fn claims_for(gd: &GameDeployment, id: &str) -> Vec<PersistentVolumeClaim> {
    let gd_name = gd.metadata.name.as_deref().unwrap_or("");
    gd.spec
        .volume_claim_templates
        .iter()
        .map(|template| {
            let meta = &template.metadata;
            let mut labels: BTreeMap<String, String> = meta.labels.clone().unwrap_or_default();
            labels.extend(gd.spec.selector.match_labels.clone().unwrap_or_default());
            labels.insert(keys::INSTANCE_ID.into(), id.into());
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name(template_name(template), gd_name, id)),
                    namespace: gd.metadata.namespace.clone(),
                    labels: Some(labels),
                    annotations: meta.annotations.clone(),
                    finalizers: meta.finalizers.clone(),
                    owner_references: Some(vec![ownership::owner_reference(gd)]),
                    ..Default::default()
                },
                spec: template.spec.clone(),
                status: None,
            }
        })
        .collect()
}

/// Mounts the claims of instance `id` into `pod`: one volume per template, named like the template (a template
/// volume of the same name is replaced, as CloneSet's `UpdateStorage`).
pub fn attach(gd: &GameDeployment, id: &str, pod: &mut k8s_openapi::api::core::v1::Pod) {
    let templates = &gd.spec.volume_claim_templates;
    if templates.is_empty() {
        return;
    }
    let gd_name = gd.metadata.name.as_deref().unwrap_or("");
    let spec = pod.spec.get_or_insert_with(Default::default);
    let names: BTreeSet<&str> = templates.iter().map(template_name).collect();
    let mut volumes: Vec<Volume> = templates
        .iter()
        .map(|t| Volume {
            name: template_name(t).to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(template_name(t), gd_name, id),
                read_only: None,
            }),
            ..Default::default()
        })
        .collect();
    volumes.extend(spec.volumes.take().unwrap_or_default().into_iter().filter(|v| !names.contains(v.name.as_str())));
    spec.volumes = Some(volumes);
}

/// What [`plan`] looks at.
pub(crate) struct Claims<'a> {
    pub gd: &'a GameDeployment,
    /// The claims this GameDeployment controls (any state).
    pub claims: &'a [&'a PersistentVolumeClaim],
    /// Every pod of the namespace (a name taken by any pod is not free).
    pub namespace_pods: &'a [&'a Pod],
    /// The pods this GameDeployment owns, terminating ones too.
    pub owned: &'a [&'a Pod],
}

fn claim_ref(claim: &PersistentVolumeClaim) -> ClaimRef {
    ClaimRef {
        name: claim.metadata.name.clone().unwrap_or_default(),
        uid: claim.metadata.uid.clone().unwrap_or_default(),
    }
}

/// Adds the claim work to this pass's actions:
/// - each `DeletePod` of an owned pod gets a `DeleteClaims` for that pod's claims (sent only if the pod deletion
///   succeeds);
/// - each `CreatePod` takes a free instance id if there is one (its pod name and claims follow), gets its volumes,
///   and is preceded by a `CreateClaims` for the claims that do not exist yet;
/// - with `disablePVCReuse`, free claims are deleted instead of reused.
///
/// A new pod whose random id belongs to a claim still being deleted is left for a later pass (its claim could not
/// be created now).
pub(crate) fn plan(input: &Claims<'_>, actions: &mut Vec<Action>) {
    let gd = input.gd;
    if gd.spec.volume_claim_templates.is_empty() && input.claims.is_empty() {
        return;
    }
    let gd_name = gd.metadata.name.as_deref().unwrap_or("");
    fn id_of_pod(pod: &impl common::pod::PodFields) -> Option<String> {
        common::pod::label(pod, keys::INSTANCE_ID).map(str::to_string)
    }
    // An id is in use while an active pod has it. A terminating pod (deleted out of band) frees its id, but its
    // name stays taken until it is gone: its replacement waits for that (as CloneSet's, whose create fails on
    // the name until then); a finished pod that still exists keeps its name, so its id is not reused.
    let holder = |id: &str| -> Option<&Pod> {
        let name = format!("{gd_name}-{id}");
        input.namespace_pods.iter().find(|p| p.metadata.name.as_deref() == Some(name.as_str())).copied()
    };
    let ids_in_use: BTreeSet<String> =
        input.owned.iter().filter(common::pod::is_active).filter_map(id_of_pod).collect();
    let in_use =
        |id: &str| ids_in_use.contains(id) || holder(id).is_some_and(|p| p.metadata.deletion_timestamp.is_none());
    let terminating = |c: &&&PersistentVolumeClaim| c.metadata.deletion_timestamp.is_some();
    let live: Vec<&PersistentVolumeClaim> = input.claims.iter().filter(|c| !terminating(c)).copied().collect();
    let dying_ids: BTreeSet<&str> = input.claims.iter().filter(terminating).filter_map(|c| instance_id(c)).collect();
    let claims_of = |id: &str| -> Vec<ClaimRef> {
        live.iter().filter(|c| instance_id(c) == Some(id)).map(|c| claim_ref(c)).collect()
    };

    let mut free: Vec<String> = live
        .iter()
        .filter_map(|c| instance_id(c))
        .filter(|id| !in_use(id) && !dying_ids.contains(id))
        .map(str::to_string)
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    let mut extra = Vec::new();
    if gd.spec.scale_strategy.as_ref().is_some_and(|s| s.disable_pvc_reuse) {
        for id in free.drain(..) {
            extra.push(Action::DeleteClaims { pod: None, claims: claims_of(&id) });
        }
    }
    free.reverse();

    let mut created_ids: BTreeSet<String> = BTreeSet::new();
    let mut result = Vec::with_capacity(actions.len());
    for action in actions.drain(..) {
        match action {
            Action::DeletePod { pod, cause } => {
                let owned = input.owned.iter().find(|p| p.metadata.uid.as_deref() == Some(pod.uid.as_str()));
                let claims = owned.and_then(id_of_pod).map(|id| claims_of(&id)).unwrap_or_default();
                let target = pod.clone();
                result.push(Action::DeletePod { pod, cause });
                if !claims.is_empty() {
                    result.push(Action::DeleteClaims { pod: Some(target), claims });
                }
            }
            Action::CreatePod { mut pod, reason } => {
                let Some(mut id) = id_of_pod(&*pod) else {
                    result.push(Action::CreatePod { pod, reason });
                    continue;
                };
                if let Some(reused) = free.pop() {
                    if holder(&reused).is_some() {
                        // Its old pod is still terminating: this replacement is created once it is gone.
                        continue;
                    }
                    id = reused;
                    pod.metadata.name = Some(format!("{gd_name}-{id}"));
                    pod.metadata
                        .labels
                        .get_or_insert_with(Default::default)
                        .insert(keys::INSTANCE_ID.into(), id.clone());
                }
                if dying_ids.contains(id.as_str()) || !created_ids.insert(id.clone()) {
                    continue;
                }
                attach(gd, &id, &mut pod);
                let existing: BTreeSet<&str> = live
                    .iter()
                    .filter(|c| instance_id(c) == Some(id.as_str()))
                    .filter_map(|c| c.metadata.name.as_deref())
                    .collect();
                let missing: Vec<PersistentVolumeClaim> = claims_for(gd, &id)
                    .into_iter()
                    .filter(|c| !existing.contains(c.metadata.name.as_deref().unwrap_or("")))
                    .collect();
                if !missing.is_empty() {
                    let pod_name = pod.metadata.name.clone().unwrap_or_default();
                    result.push(Action::CreateClaims { pod: pod_name, claims: missing });
                }
                result.push(Action::CreatePod { pod, reason });
            }
            other => result.push(other),
        }
    }
    result.extend(extra);
    *actions = result;
}

/// The pod a `DeleteClaims` belongs to, for events.
pub(crate) fn describe(pod: Option<&PodRef>) -> String {
    match pod {
        Some(pod) => format!("with pod {}", pod.name),
        None => "whose pod is gone (disablePVCReuse)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::CreateReason;
    use crate::fixtures;
    use crate::gate::DeleteCause;
    use crate::planner::claim_names::validate;
    use serde_json::json;

    fn gd(reuse: bool) -> GameDeployment {
        let mut gd = fixtures::gd(3, "RollingUpdate");
        gd.spec.volume_claim_templates = vec![
            serde_json::from_value(json!({"metadata": {"name": "data-vol", "labels": {"tier": "disk"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}}))
            .unwrap(),
            serde_json::from_value(json!({"metadata": {"name": "logs"}, "spec": {"accessModes": ["ReadWriteOnce"]}}))
                .unwrap(),
        ];
        if !reuse {
            gd.spec.scale_strategy =
                Some(common::api::GameDeploymentScaleStrategy { disable_pvc_reuse: true, ..Default::default() });
        }
        gd
    }

    fn claim(gd: &GameDeployment, template: usize, id: &str, dying: bool) -> PersistentVolumeClaim {
        let mut c = claims_for(gd, id).remove(template);
        c.metadata.uid = Some(format!("uid-{}", c.metadata.name.as_deref().unwrap()));
        if dying {
            c.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(fixtures::ts(5)));
        }
        c
    }

    fn new_pod(gd: &GameDeployment, id: &str) -> Action {
        let pod = k8s_openapi::api::core::v1::Pod {
            metadata: fixtures::pod(&format!("game-{id}")).labels(&[(keys::INSTANCE_ID, id)]).build().metadata,
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                volumes: Some(vec![Volume { name: "data-vol".into(), ..Default::default() }]),
                ..Default::default()
            }),
            status: None,
        };
        let _ = gd;
        Action::CreatePod { pod: Box::new(pod), reason: CreateReason::Replicas }
    }

    fn summary(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                Action::CreatePod { pod, .. } => {
                    let volumes: Vec<String> = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.volumes.clone())
                        .unwrap_or_default()
                        .into_iter()
                        .map(|v| {
                            format!(
                                "{}={}",
                                v.name,
                                v.persistent_volume_claim.map(|c| c.claim_name).unwrap_or_default()
                            )
                        })
                        .collect();
                    format!("create pod {} [{}]", pod.metadata.name.as_deref().unwrap(), volumes.join(" "))
                }
                Action::CreateClaims { pod, claims } => format!(
                    "create claims for {pod}: {}",
                    claims.iter().map(|c| c.metadata.name.clone().unwrap()).collect::<Vec<_>>().join(" ")
                ),
                Action::DeletePod { pod, .. } => format!("delete pod {}", pod.name),
                Action::DeleteClaims { pod, claims } => format!(
                    "delete claims {}: {}",
                    describe(pod.as_ref()),
                    claims.iter().map(|c| c.name.clone()).collect::<Vec<_>>().join(" ")
                ),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn claims_are_named_labelled_and_owned_like_cloneset() {
        let gd = gd(true);
        let claims = claims_for(&gd, "abcde");
        let names: Vec<&str> = claims.iter().map(|c| c.metadata.name.as_deref().unwrap()).collect();
        assert_eq!(names, ["data-vol-game-abcde", "logs-game-abcde"]);
        let labels = claims[0].metadata.labels.as_ref().unwrap();
        assert_eq!(labels.get(keys::INSTANCE_ID).map(String::as_str), Some("abcde"));
        assert_eq!(labels.get("app").map(String::as_str), Some("game"), "selector labels");
        assert_eq!(labels.get("tier").map(String::as_str), Some("disk"), "template labels");
        let owner = &claims[0].metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), (fixtures::GD_UID, Some(true)));
        assert_eq!(claims[0].spec, gd.spec.volume_claim_templates[0].spec);
    }

    #[test]
    fn new_pods_mount_their_claims_and_create_them_first() {
        let gd = gd(true);
        let mut actions = vec![new_pod(&gd, "aaaaa")];
        plan(&Claims { gd: &gd, claims: &[], namespace_pods: &[], owned: &[] }, &mut actions);
        assert_eq!(
            summary(&actions),
            [
                "create claims for game-aaaaa: data-vol-game-aaaaa logs-game-aaaaa",
                // The template's own `data-vol` volume is replaced by the claim.
                "create pod game-aaaaa [data-vol=data-vol-game-aaaaa logs=logs-game-aaaaa]",
            ]
        );
    }

    #[test]
    fn deleted_pods_take_their_claims_along() {
        let gd = gd(true);
        let pod = fixtures::pod("game-bbbbb").uid("u1").labels(&[(keys::INSTANCE_ID, "bbbbb")]).build();
        let claims = [claim(&gd, 0, "bbbbb", false), claim(&gd, 1, "bbbbb", false), claim(&gd, 0, "other", false)];
        let claim_refs: Vec<&PersistentVolumeClaim> = claims.iter().collect();
        let other = fixtures::pod("game-other").uid("u2").labels(&[(keys::INSTANCE_ID, "other")]).build();
        let pods = [&pod, &other];
        let mut actions = vec![Action::DeletePod { pod: PodRef::of(&pod), cause: DeleteCause::ScaleIn }];
        plan(&Claims { gd: &gd, claims: &claim_refs, namespace_pods: &pods, owned: &pods }, &mut actions);
        assert_eq!(
            summary(&actions),
            ["delete pod game-bbbbb", "delete claims with pod game-bbbbb: data-vol-game-bbbbb logs-game-bbbbb"]
        );
    }

    #[test]
    fn a_replacement_reuses_the_instance_id_of_a_pod_gone_out_of_band() {
        let gd = gd(true);
        // Pod ccccc vanished; its claims remain. The second claim set is still in use by pod ddddd.
        let claims = [claim(&gd, 0, "ccccc", false), claim(&gd, 1, "ccccc", false), claim(&gd, 0, "ddddd", false)];
        let claim_refs: Vec<&PersistentVolumeClaim> = claims.iter().collect();
        let live = fixtures::pod("game-ddddd").uid("u4").labels(&[(keys::INSTANCE_ID, "ddddd")]).build();
        let pods = [&live];
        let mut actions = vec![new_pod(&gd, "zzzzz"), new_pod(&gd, "yyyyy")];
        plan(&Claims { gd: &gd, claims: &claim_refs, namespace_pods: &pods, owned: &pods }, &mut actions);
        assert_eq!(
            summary(&actions),
            [
                "create pod game-ccccc [data-vol=data-vol-game-ccccc logs=logs-game-ccccc]",
                "create claims for game-yyyyy: data-vol-game-yyyyy logs-game-yyyyy",
                "create pod game-yyyyy [data-vol=data-vol-game-yyyyy logs=logs-game-yyyyy]",
            ]
        );
        let Action::CreatePod { pod, .. } = &actions[0] else { unreachable!() };
        assert_eq!(common::pod::label(&**pod, keys::INSTANCE_ID), Some("ccccc"));
    }

    #[test]
    fn the_replacement_waits_for_its_terminating_predecessor() {
        let gd = gd(true);
        // Pod ccccc was deleted out of band and is still terminating: its claim is free, its name is not.
        let claims = [claim(&gd, 0, "ccccc", false), claim(&gd, 1, "ccccc", false)];
        let claim_refs: Vec<&PersistentVolumeClaim> = claims.iter().collect();
        let old = fixtures::pod("game-ccccc").uid("u9").labels(&[(keys::INSTANCE_ID, "ccccc")]).terminating().build();
        let pods = [&old];
        let mut actions = vec![new_pod(&gd, "zzzzz")];
        plan(&Claims { gd: &gd, claims: &claim_refs, namespace_pods: &pods, owned: &pods }, &mut actions);
        assert!(actions.is_empty(), "no new id while the old one is coming back: {:?}", summary(&actions));
        // Once it is gone, the replacement takes its name and claims.
        let mut actions = vec![new_pod(&gd, "zzzzz")];
        plan(&Claims { gd: &gd, claims: &claim_refs, namespace_pods: &[], owned: &[] }, &mut actions);
        assert_eq!(summary(&actions), ["create pod game-ccccc [data-vol=data-vol-game-ccccc logs=logs-game-ccccc]"]);
    }

    #[test]
    fn missing_claims_of_a_reused_id_are_created() {
        let gd = gd(true);
        let claims = [claim(&gd, 0, "ccccc", false)];
        let claim_refs: Vec<&PersistentVolumeClaim> = claims.iter().collect();
        let mut actions = vec![new_pod(&gd, "zzzzz")];
        plan(&Claims { gd: &gd, claims: &claim_refs, namespace_pods: &[], owned: &[] }, &mut actions);
        assert_eq!(summary(&actions)[0], "create claims for game-ccccc: logs-game-ccccc");
    }

    #[test]
    fn disable_pvc_reuse_deletes_free_claims_instead() {
        let gd = gd(false);
        let claims = [claim(&gd, 0, "ccccc", false), claim(&gd, 1, "ccccc", false)];
        let claim_refs: Vec<&PersistentVolumeClaim> = claims.iter().collect();
        let mut actions = vec![new_pod(&gd, "zzzzz")];
        plan(&Claims { gd: &gd, claims: &claim_refs, namespace_pods: &[], owned: &[] }, &mut actions);
        assert_eq!(
            summary(&actions),
            [
                "create claims for game-zzzzz: data-vol-game-zzzzz logs-game-zzzzz",
                "create pod game-zzzzz [data-vol=data-vol-game-zzzzz logs=logs-game-zzzzz]",
                "delete claims whose pod is gone (disablePVCReuse): data-vol-game-ccccc logs-game-ccccc",
            ]
        );
    }

    #[test]
    fn claims_being_deleted_are_not_reused_and_block_their_id() {
        let gd = gd(true);
        // A terminating pod still holds eeeee; its claims are going. No id is free.
        let claims = [claim(&gd, 0, "eeeee", true), claim(&gd, 0, "fffff", true)];
        let claim_refs: Vec<&PersistentVolumeClaim> = claims.iter().collect();
        let mut actions = vec![new_pod(&gd, "fffff"), new_pod(&gd, "ggggg")];
        plan(&Claims { gd: &gd, claims: &claim_refs, namespace_pods: &[], owned: &[] }, &mut actions);
        let summary = summary(&actions);
        assert_eq!(summary.len(), 2, "{summary:?}");
        assert!(summary[1].starts_with("create pod game-ggggg"), "{summary:?}");
    }

    #[test]
    fn templates_are_validated() {
        let mut g = gd(true);
        assert_eq!(validate(&g), Ok(()));
        g.spec.volume_claim_templates[1].metadata.name = Some("data-vol".into());
        assert!(validate(&g).unwrap_err().contains("used twice"));
        g.spec.volume_claim_templates[1].metadata.name = Some("Bad_Name".into());
        assert!(validate(&g).unwrap_err().contains("volumeClaimTemplates[1].metadata.name"));
        g.spec.volume_claim_templates[1].metadata.name = Some("a".repeat(63));
        g.metadata.name = Some("g".repeat(200));
        assert!(validate(&g).unwrap_err().contains("longer than 253"));
        // More templates than the CRD allows (an older CRD lets them through).
        let mut g = gd(true);
        g.spec.volume_claim_templates = (0..17)
            .map(|i| {
                let mut t = g.spec.volume_claim_templates[0].clone();
                t.metadata.name = Some(format!("v{i}"));
                t
            })
            .collect();
        assert!(validate(&g).unwrap_err().contains("17 templates, above the maximum 16"));
    }
}
