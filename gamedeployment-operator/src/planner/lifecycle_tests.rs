//! CloneSet lifecycle handlers (`spec.lifecycle`) on the simulated cluster: a pod matching the `preDelete` handler
//! waits in `PreparingDelete` until an outside controller removed the label / finalizer; `inPlaceUpdate` holds
//! `PreparingUpdate`, then `Updating`, `Updated` until the handler is back; `preNormal` holds new pods in
//! `PreparingNormal`; handlers compose with HookRun gates (both needed, checked concurrently); `markPodNotReady`
//! flips `KruisePodReady`; the BCS `game-pod-deleting` annotation comes with a pre-delete run and goes on release.

use common::api::{HookPhase, HookRunStatus};
use common::cached_pod::Pod;
use common::keys;
use serde_json::json;

use super::sim_cluster::{World, in_state};
use crate::action::Action;
use crate::fixtures::{gd, hook_template};
use crate::lifecycle::{self, LifecycleState};

const BLOCK_DELETE: &str = "example.com/unready-blocker-delete";
const BLOCK_INPLACE: &str = "example.com/unready-blocker-inplace";
const REGISTERED: &str = "example.com/registered";
const FINALIZER: &str = "example.io/unready-blocker";

/// A settled GameDeployment with `lifecycle` and the template labels `labels`.
fn world(replicas: i32, strategy: &str, lifecycle: serde_json::Value, labels: &[(&str, &str)]) -> World {
    let mut gd = gd(replicas, strategy);
    gd.spec.lifecycle = Some(serde_json::from_value(lifecycle).expect("valid lifecycle"));
    let template_labels =
        gd.spec.template.metadata.get_or_insert_with(Default::default).labels.get_or_insert_with(Default::default);
    for (k, v) in labels {
        template_labels.insert((*k).into(), (*v).into());
    }
    let mut world = World::new(gd);
    world.hook_templates.push(hook_template());
    assert!(world.settle(60, |_, _| {}).is_some(), "did not settle");
    world
}

fn with_hook(world: &mut World) {
    world.gd.spec.pre_delete_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
}

fn passes(world: &mut World, n: usize) -> Vec<Action> {
    let mut actions = Vec::new();
    for _ in 0..n {
        world.tick(1);
        actions.extend(world.pass().actions);
    }
    actions
}

fn pod_mut<'a>(world: &'a mut World, name: &str) -> &'a mut Pod {
    world.pods.iter_mut().find(|p| p.metadata.name.as_deref() == Some(name)).expect("pod exists")
}

fn set_label(world: &mut World, pod: &str, key: &str, value: Option<&str>) {
    let labels = pod_mut(world, pod).metadata.labels.get_or_insert_with(Default::default);
    match value {
        Some(v) => labels.insert(key.into(), v.into()),
        None => labels.remove(key),
    };
}

fn deleted(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| if let Action::DeletePod { pod, .. } = a { Some(pod.name.clone()) } else { None })
        .collect()
}

fn images(world: &World) -> Vec<String> {
    world.active().iter().filter_map(|p| Some(p.spec.as_ref()?.containers[0].image.as_ref()?.to_string())).collect()
}

fn set_runs(world: &mut World, phase: HookPhase) {
    for run in &mut world.hook_runs {
        std::sync::Arc::make_mut(run).status = Some(HookRunStatus { phase: Some(phase), ..Default::default() });
    }
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    common::pod::condition(pod, type_).map(|c| c.status.to_string())
}

#[test]
fn pre_delete_handler_holds_until_the_label_is_removed() {
    let mut world = world(
        3,
        "RollingUpdate",
        json!({"preDelete": {"labelsHandler": {BLOCK_DELETE: "true"}}}),
        &[(BLOCK_DELETE, "true")],
    );
    world.gd.spec.replicas = Some(2);
    let actions = passes(&mut world, 5);
    assert!(deleted(&actions).is_empty(), "nothing deleted while the handler matches");
    let held = in_state(&world, LifecycleState::PreparingDelete);
    assert_eq!(held.len(), 1, "one pod waits in PreparingDelete");
    assert!(world.pass().held.iter().any(|h| h.name == held[0]
        && h.decision.reason().is_some_and(|r| r.contains("preDelete") && r.contains(BLOCK_DELETE))));

    // The outside controller unregisters the pod and releases it ("false" no longer matches "true").
    set_label(&mut world, &held[0], BLOCK_DELETE, Some("false"));
    let actions = passes(&mut world, 2);
    assert_eq!(deleted(&actions), held);
    assert_eq!(world.active().len(), 2);
}

#[test]
fn a_pod_not_matching_the_pre_delete_handler_is_deleted_at_once() {
    // CloneSet: "如果没有定义 lifecycle hook 或者 Pod 不符合 preDelete 条件，则直接删除".
    let mut world = world(3, "RollingUpdate", json!({"preDelete": {"labelsHandler": {BLOCK_DELETE: "true"}}}), &[]);
    world.gd.spec.replicas = Some(2);
    let actions = passes(&mut world, 1);
    assert_eq!(deleted(&actions).len(), 1);
    assert!(in_state(&world, LifecycleState::PreparingDelete).is_empty());
}

#[test]
fn pre_delete_finalizer_handler_holds_until_the_finalizer_is_removed() {
    let mut world = world(2, "RollingUpdate", json!({"preDelete": {"finalizersHandler": [FINALIZER]}}), &[]);
    for pod in &mut world.pods {
        pod.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    world.gd.spec.replicas = Some(1);
    assert!(deleted(&passes(&mut world, 4)).is_empty());
    let held = in_state(&world, LifecycleState::PreparingDelete);
    assert_eq!(held.len(), 1);
    pod_mut(&mut world, &held[0]).metadata.finalizers = Some(Vec::new());
    assert_eq!(deleted(&passes(&mut world, 2)), held);
}

#[test]
fn in_place_update_handler_goes_through_preparing_updating_updated_and_back_to_normal() {
    let mut world = world(
        1,
        "InplaceUpdate",
        json!({"inPlaceUpdate": {"labelsHandler": {BLOCK_INPLACE: "true"}}}),
        &[(BLOCK_INPLACE, "true")],
    );
    let name = world.active()[0].metadata.name.clone().unwrap();
    world.gd.spec.template.spec.as_mut().unwrap().containers[0].image = Some("game:2".into());
    passes(&mut world, 4);
    assert_eq!(in_state(&world, LifecycleState::PreparingUpdate), std::slice::from_ref(&name));
    assert_eq!(images(&world), ["game:1"], "not updated while the handler matches");

    // Unregistered: the update goes ahead.
    set_label(&mut world, &name, BLOCK_INPLACE, Some("false"));
    passes(&mut world, 6);
    assert_eq!(images(&world), ["game:2"]);
    assert_eq!(
        in_state(&world, LifecycleState::Updated),
        std::slice::from_ref(&name),
        "Updated until the handler is back"
    );
    passes(&mut world, 3);
    assert_eq!(in_state(&world, LifecycleState::Updated), std::slice::from_ref(&name));

    // Registered again: Normal.
    set_label(&mut world, &name, BLOCK_INPLACE, Some("true"));
    passes(&mut world, 2);
    assert_eq!(in_state(&world, LifecycleState::Normal), [name]);
}

#[test]
fn a_pod_held_in_updated_by_the_handler_counts_as_unavailable() {
    // maxUnavailable 1: the second pod is not taken while the first waits in Updated (unregistered).
    let mut world = world(
        2,
        "InplaceUpdate",
        json!({"inPlaceUpdate": {"labelsHandler": {BLOCK_INPLACE: "true"}}}),
        &[(BLOCK_INPLACE, "true")],
    );
    world.gd.spec.update_strategy.max_unavailable =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1));
    world.gd.spec.template.spec.as_mut().unwrap().containers[0].image = Some("game:2".into());
    passes(&mut world, 3);
    let first = in_state(&world, LifecycleState::PreparingUpdate);
    assert_eq!(first.len(), 1);
    set_label(&mut world, &first[0], BLOCK_INPLACE, Some("false"));
    passes(&mut world, 8);
    assert_eq!(in_state(&world, LifecycleState::Updated), first);
    assert!(in_state(&world, LifecycleState::PreparingUpdate).is_empty(), "the second pod waits for the first");
    set_label(&mut world, &first[0], BLOCK_INPLACE, Some("true"));
    passes(&mut world, 3);
    assert_eq!(in_state(&world, LifecycleState::PreparingUpdate).len(), 1, "then the second pod is taken");
}

#[test]
fn pre_normal_handler_holds_new_pods_until_it_matches() {
    let mut gd = gd(2, "RollingUpdate");
    gd.spec.lifecycle =
        Some(serde_json::from_value(json!({"preNormal": {"labelsHandler": {REGISTERED: "true"}}})).unwrap());
    let mut world = World::new(gd);
    passes(&mut world, 5);
    assert_eq!(in_state(&world, LifecycleState::PreparingNormal).len(), 2);
    assert!(world.plan().status.conditions.iter().all(|c| c.reason.as_deref() != Some("RolloutComplete")));
    let names = in_state(&world, LifecycleState::PreparingNormal);
    set_label(&mut world, &names[0], REGISTERED, Some("true"));
    passes(&mut world, 2);
    assert_eq!(in_state(&world, LifecycleState::Normal), std::slice::from_ref(&names[0]));
    assert_eq!(in_state(&world, LifecycleState::PreparingNormal), std::slice::from_ref(&names[1]));
}

#[test]
fn hook_and_handler_both_release_a_deletion_in_either_order() {
    for hook_first in [true, false] {
        let mut world = world(
            2,
            "RollingUpdate",
            json!({"preDelete": {"labelsHandler": {BLOCK_DELETE: "true"}}}),
            &[(BLOCK_DELETE, "true")],
        );
        with_hook(&mut world);
        world.gd.spec.replicas = Some(1);
        passes(&mut world, 3);
        let held = in_state(&world, LifecycleState::PreparingDelete);
        assert_eq!(held.len(), 1);
        assert_eq!(world.hook_runs.len(), 1, "the run starts while the handler holds too (concurrently)");
        if hook_first {
            set_runs(&mut world, HookPhase::Successful);
        } else {
            set_label(&mut world, &held[0], BLOCK_DELETE, None);
        }
        assert!(deleted(&passes(&mut world, 3)).is_empty(), "hook_first={hook_first}: one of two is not enough");
        if hook_first {
            set_label(&mut world, &held[0], BLOCK_DELETE, None);
        } else {
            set_runs(&mut world, HookPhase::Successful);
        }
        assert_eq!(deleted(&passes(&mut world, 2)), held, "hook_first={hook_first}");
    }
}

#[test]
fn a_pod_labelled_specified_delete_waits_for_the_handler() {
    let mut world = world(
        2,
        "RollingUpdate",
        json!({"preDelete": {"labelsHandler": {BLOCK_DELETE: "true"}}}),
        &[(BLOCK_DELETE, "true")],
    );
    let name = world.active()[0].metadata.name.clone().unwrap();
    set_label(&mut world, &name, keys::SPECIFIED_DELETE, Some("true"));
    assert!(deleted(&passes(&mut world, 3)).is_empty());
    assert_eq!(in_state(&world, LifecycleState::PreparingDelete), std::slice::from_ref(&name));
    set_label(&mut world, &name, BLOCK_DELETE, None);
    assert_eq!(deleted(&passes(&mut world, 2)), std::slice::from_ref(&name));
    passes(&mut world, 4);
    assert_eq!(world.active().len(), 2, "replaced");
}

#[test]
fn mark_pod_not_ready_flips_kruise_pod_ready_while_held_and_back_on_release() {
    let mut world = world(
        2,
        "RollingUpdate",
        json!({"preDelete": {"labelsHandler": {BLOCK_DELETE: "true"}, "markPodNotReady": true}}),
        &[(BLOCK_DELETE, "true")],
    );
    for pod in world.active() {
        let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.clone()).unwrap_or_default();
        assert!(gates.iter().any(|g| g.condition_type == lifecycle::KRUISE_POD_READY), "new pods get the gate");
        assert_eq!(condition(pod, lifecycle::KRUISE_POD_READY).as_deref(), Some("True"));
        assert!(common::pod::is_ready(pod));
    }
    world.gd.spec.replicas = Some(1);
    passes(&mut world, 3);
    let held = in_state(&world, LifecycleState::PreparingDelete);
    assert_eq!(held.len(), 1);
    let pod = world.active().into_iter().find(|p| p.metadata.name.as_ref() == Some(&held[0])).unwrap().clone();
    assert_eq!(condition(&pod, lifecycle::KRUISE_POD_READY).as_deref(), Some("False"));
    assert!(!common::pod::is_ready(&pod), "out of Service endpoints while held");

    // Replicas back up: released, Ready again.
    world.gd.spec.replicas = Some(2);
    passes(&mut world, 4);
    let pod = world.active().into_iter().find(|p| p.metadata.name.as_ref() == Some(&held[0])).unwrap().clone();
    assert_eq!(lifecycle::state_of(&pod), LifecycleState::Normal);
    assert_eq!(condition(&pod, lifecycle::KRUISE_POD_READY).as_deref(), Some("True"));
    assert!(common::pod::is_ready(&pod));
}

#[test]
fn game_pod_deleting_is_set_with_the_pre_delete_run_and_removed_on_release() {
    let mut gd = gd(2, "RollingUpdate");
    gd.spec.pre_delete_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
    let mut world = World::new(gd);
    world.hook_templates.push(hook_template());
    assert!(world.settle(60, |_, _| {}).is_some());
    let deleting = |world: &World| -> Vec<String> {
        world
            .active()
            .into_iter()
            .filter(|p| common::pod::annotation(p, keys::GAME_POD_DELETING) == Some("true"))
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    };
    assert!(deleting(&world).is_empty());
    world.gd.spec.replicas = Some(1);
    passes(&mut world, 3);
    assert_eq!(world.hook_runs.len(), 1);
    assert_eq!(deleting(&world), in_state(&world, LifecycleState::PreparingDelete));
    assert_eq!(deleting(&world).len(), 1);
    world.gd.spec.replicas = Some(2);
    passes(&mut world, 3);
    assert!(deleting(&world).is_empty(), "removed when the pod is released (BCS never removes it)");
    assert!(in_state(&world, LifecycleState::PreparingDelete).is_empty());
}

#[test]
fn without_lifecycle_pods_are_created_normal_and_have_no_kruise_gate() {
    let mut world = World::new(gd(2, "RollingUpdate"));
    assert!(world.settle(60, |_, _| {}).is_some());
    for pod in world.active() {
        assert_eq!(lifecycle::state_of(pod), LifecycleState::Normal);
        let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.clone()).unwrap_or_default();
        assert!(gates.iter().all(|g| g.condition_type != lifecycle::KRUISE_POD_READY));
    }
}

#[test]
fn a_hot_patch_is_not_held_by_the_in_place_update_handler() {
    let mut world = world(
        1,
        "HotPatchUpdate",
        json!({"inPlaceUpdate": {"labelsHandler": {BLOCK_INPLACE: "true"}}}),
        &[(BLOCK_INPLACE, "true")],
    );
    world.gd.spec.template.spec.as_mut().unwrap().containers[0].image = Some("game:2".into());
    passes(&mut world, 3);
    assert_eq!(images(&world), ["game:2"]);
    assert!(in_state(&world, LifecycleState::PreparingUpdate).is_empty());
}
