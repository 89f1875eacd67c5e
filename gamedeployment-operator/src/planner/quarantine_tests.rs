//! `Maintaining` servers (`common::server_state`) on the simulated cluster: the operator never updates or deletes
//! them, they do not count as available nor against the update budget, and the rollout reports them.

use common::api::HookPhase;
use common::cached_pod::Pod;
use common::keys;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::sim_cluster::{World, store};
use super::status;
use crate::action::{Action, PatchReason};
use crate::fixtures::{gd, hook_template};
use crate::lifecycle::{self, LifecycleState};

fn settled(gd: common::api::GameDeployment) -> World {
    let mut world = World::new(gd);
    world.hook_templates.push(hook_template());
    assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
    world
}

fn names(world: &World) -> Vec<String> {
    world.active().iter().map(|p| p.metadata.name.clone().unwrap_or_default()).collect()
}

fn pod_mut<'w>(world: &'w mut World, name: &str) -> &'w mut Pod {
    world.pods.iter_mut().find(|p| p.metadata.name.as_deref() == Some(name)).expect("the pod exists")
}

fn declare(world: &mut World, name: &str, state: &str) {
    pod_mut(world, name)
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(keys::SERVER_STATE.into(), state.into());
    store(world);
}

fn image_of(world: &World, name: &str) -> String {
    let pod = world.pods.iter().find(|p| p.metadata.name.as_deref() == Some(name)).expect("the pod exists");
    pod.spec.as_ref().and_then(|s| s.containers[0].image.as_ref()).map(ToString::to_string).unwrap_or_default()
}

fn set_image(world: &mut World, image: &str) {
    world.gd.spec.template.spec.as_mut().expect("a pod spec").containers[0].image = Some(image.into());
    world.gd.metadata.generation = Some(world.gd.metadata.generation.unwrap_or(1) + 1);
}

fn progressing(world: &World) -> (String, String) {
    let c = world.gd.status.as_ref().and_then(|s| status::condition(s, status::PROGRESSING)).expect("Progressing");
    (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default())
}

/// Fails the test when a plan touches `name` (an update, a deletion or a move to a gate state).
fn never_touches(name: String) -> impl FnMut(&World, &super::Plan) {
    move |_, plan| {
        for action in &plan.actions {
            let touched = match action {
                Action::DeletePod { pod, .. } => Some(&pod.name),
                Action::PatchPod(c) if c.reason != PatchReason::ReadinessGate => Some(&c.pod.name),
                _ => None,
            };
            assert_ne!(touched, Some(&name), "the Maintaining server was acted on: {action:#?}");
        }
    }
}

#[test]
fn a_maintaining_server_keeps_its_revision_through_a_full_rollout_and_is_reported() {
    // maxUnavailable 1 of 6: were the quarantined server counted against the budget, nothing could move.
    let mut g = gd(6, "InplaceUpdate");
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
    let mut world = settled(g);
    let kept = names(&world)[2].clone();
    declare(&mut world, &kept, "Maintaining");
    set_image(&mut world, "game:2");
    assert!(world.settle(80, never_touches(kept.clone())).is_some(), "the rollout did not finish");
    assert_eq!(image_of(&world, &kept), "game:1");
    assert_eq!(world.revision_counts(), (5, 1));
    let status = world.gd.status.clone().expect("a status");
    assert_eq!((status.replicas, status.available_replicas, status.updated_available_replicas), (6, 5, 5));
    assert_eq!(status.server_states.get("Maintaining"), Some(&1));
    assert_ne!(status.current_revision, status.update_revision, "a pod still runs the old revision");
    let (reason, message) = progressing(&world);
    assert_eq!(reason, "RolloutComplete", "{message}");
    assert!(message.contains(&format!("1 server in Maintaining is left as it is: {kept}")), "{message}");
    assert!(message.starts_with("5 of 6 pods run revision"), "{message}");

    // Back in service: the server is updated like any other.
    pod_mut(&mut world, &kept).metadata.labels.as_mut().map(|l| l.remove(keys::SERVER_STATE));
    assert!(world.settle(40, |_, _| {}).is_some());
    assert_eq!(world.revision_counts(), (6, 0));
    assert_eq!(progressing(&world).0, "RolloutComplete");
}

#[test]
fn a_recreate_rollout_never_deletes_a_maintaining_server() {
    let mut world = settled(gd(4, "RollingUpdate"));
    let kept = names(&world)[0].clone();
    declare(&mut world, &kept, "Maintaining");
    set_image(&mut world, "game:2");
    assert!(world.settle(80, never_touches(kept.clone())).is_some(), "the rollout did not finish");
    assert!(names(&world).contains(&kept));
    assert_eq!(world.revision_counts(), (3, 1));
}

#[test]
fn scale_in_never_takes_a_maintaining_server_even_when_it_would_go_first() {
    let mut world = settled(gd(4, "InplaceUpdate"));
    let kept = names(&world)[1].clone();
    // The cheapest pod to lose, not ready: without the quarantine it is the first to go.
    let pod = pod_mut(&mut world, &kept);
    pod.metadata.annotations.get_or_insert_with(Default::default).insert(keys::POD_DELETION_COST.into(), "-100".into());
    declare(&mut world, &kept, "Maintaining");
    world.gd.spec.replicas = Some(1);
    assert!(world.settle(40, never_touches(kept.clone())).is_some(), "the scale-in did not finish");
    assert_eq!(names(&world), std::slice::from_ref(&kept));

    // Nothing else to take: the quarantined server stays and the rollout says why it cannot scale in.
    world.gd.spec.replicas = Some(0);
    for _ in 0..5 {
        world.tick(1);
        let plan = world.plan();
        never_touches(kept.clone())(&world, &plan);
        world.apply(&plan);
    }
    assert_eq!(names(&world), std::slice::from_ref(&kept));
    let (reason, message) = progressing(&world);
    assert_eq!(reason, "RolloutInProgress", "{message}");
    assert!(message.contains("scaling in to 0 pods"), "{message}");
    assert!(message.contains(&format!("1 server in Maintaining is left as it is: {kept}")), "{message}");
}

#[test]
fn a_person_may_still_delete_a_maintaining_server() {
    let mut g = gd(3, "InplaceUpdate");
    g.spec.pre_delete_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
    let mut world = settled(g);
    let kept = names(&world)[0].clone();
    declare(&mut world, &kept, "Maintaining");
    pod_mut(&mut world, &kept)
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(keys::SPECIFIED_DELETE.into(), "true".into());
    for _ in 0..3 {
        world.pass();
        world.tick(1);
    }
    assert!(names(&world).contains(&kept), "it waits for its pre-delete hook");
    assert_eq!(world.hook_runs.len(), 1, "{:?}", world.hook_runs);
    succeed_every_run(&mut world);
    assert!(world.settle(40, |_, _| {}).is_some());
    assert!(!names(&world).contains(&kept), "specified-delete is a person's request: honoured");
    assert_eq!(world.active().len(), 3);
}

#[test]
fn a_maintaining_server_on_the_old_revision_counts_towards_the_partition() {
    let mut g = gd(4, "InplaceUpdate");
    g.spec.update_strategy.partition = Some(IntOrString::Int(1));
    let mut world = settled(g);
    let kept = names(&world)[3].clone();
    declare(&mut world, &kept, "Maintaining");
    set_image(&mut world, "game:2");
    assert!(world.settle(80, never_touches(kept.clone())).is_some(), "the rollout did not finish");
    assert_eq!(world.revision_counts(), (3, 1), "the quarantined server is the one pod the partition keeps");
}

fn succeed_every_run(world: &mut World) {
    for run in &mut world.hook_runs {
        std::sync::Arc::make_mut(run).status =
            Some(common::api::HookRunStatus { phase: Some(HookPhase::Successful), ..Default::default() });
    }
}

#[test]
fn a_server_held_by_its_hook_that_enters_maintaining_goes_back_to_normal() {
    let mut g = gd(2, "InplaceUpdate");
    g.spec.pre_inplace_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(2));
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    for _ in 0..3 {
        world.pass();
        world.tick(1);
    }
    let held: Vec<String> = world
        .active()
        .iter()
        .filter(|p| lifecycle::state_of(p) == LifecycleState::PreparingUpdate)
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(held.len(), 2, "both wait for their pre-inplace hook");
    declare(&mut world, &held[0], "Maintaining");
    world.pass();
    world.tick(1);
    let state = |w: &World, name: &str| {
        lifecycle::state_of(w.pods.iter().find(|p| p.metadata.name.as_deref() == Some(name)).expect("the pod"))
    };
    assert_eq!(state(&world, &held[0]), LifecycleState::Normal, "the quarantined server is released");
    assert_eq!(state(&world, &held[1]), LifecycleState::PreparingUpdate, "the other keeps waiting");
    world.pass();
    let id = held[0].rsplit('-').next().unwrap_or_default().to_string();
    let runs: Vec<String> = world.hook_runs.iter().filter_map(|r| r.metadata.name.clone()).collect();
    assert!(!runs.iter().any(|r| r.contains(&id)), "its run is removed: {runs:?}");
    // Its hook succeeding (were it still there) changes nothing for it.
    succeed_every_run(&mut world);
    assert!(world.settle(40, never_touches(held[0].clone())).is_some());
    assert_eq!(image_of(&world, &held[0]), "game:1");
    assert_eq!(image_of(&world, &held[1]), "game:2");
}

#[test]
fn a_scale_in_victim_that_enters_maintaining_goes_back_and_another_server_goes_instead() {
    let mut g = gd(3, "InplaceUpdate");
    g.spec.pre_delete_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
    let mut world = settled(g);
    world.gd.spec.replicas = Some(2);
    for _ in 0..3 {
        world.pass();
        world.tick(1);
    }
    let preparing = |w: &World| -> Vec<String> {
        w.active()
            .iter()
            .filter(|p| lifecycle::state_of(p) == LifecycleState::PreparingDelete)
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    };
    let victim = preparing(&world);
    assert_eq!(victim.len(), 1, "one server waits for its pre-delete hook");
    let victim = victim[0].clone();
    declare(&mut world, &victim, "Maintaining");
    for _ in 0..3 {
        world.pass();
        world.tick(1);
    }
    let state =
        lifecycle::state_of(world.pods.iter().find(|p| p.metadata.name.as_deref() == Some(&victim)).expect("kept"));
    assert_eq!(state, LifecycleState::Normal, "the quarantined server is released");
    let next = preparing(&world);
    assert_eq!(next.len(), 1, "another server is taken instead: {next:?}");
    assert_ne!(next[0], victim);
    succeed_every_run(&mut world);
    assert!(world.settle(40, never_touches(victim.clone())).is_some());
    assert_eq!(world.active().len(), 2);
    assert!(names(&world).contains(&victim));
}

/// Issue 48: a rollout with `maxSurge` and a server in `Maintaining` used to settle with one pod too many for good
/// (the quarantined server, still old, kept asking for a surge pod). The quarantined server is one of the replicas:
/// the surge pod goes when every other server is updated, and the rollout completes naming it — for both update
/// types, with and without an unavailable budget.
#[test]
fn a_rollout_with_surge_and_a_maintaining_server_ends_with_replicas_pods() {
    for (replicas, strategy, max_unavailable) in [
        (6, "InplaceUpdate", Some(0)),
        (4, "InplaceUpdate", None),
        (4, "RollingUpdate", Some(0)),
        (6, "RollingUpdate", None),
    ] {
        let case = format!("{replicas} replicas, {strategy}, maxUnavailable {max_unavailable:?}");
        let mut g = gd(replicas, strategy);
        g.spec.update_strategy.max_surge = Some(IntOrString::Int(1));
        g.spec.update_strategy.max_unavailable = max_unavailable.map(IntOrString::Int);
        let mut world = settled(g);
        let kept = names(&world)[1].clone();
        declare(&mut world, &kept, "Maintaining");
        set_image(&mut world, "game:2");
        let mut most = 0;
        let mut guard = never_touches(kept.clone());
        let settled = world.settle(120, |w, p| {
            guard(w, p);
            most = most.max(w.active().len());
        });
        assert!(settled.is_some(), "{case}: the rollout did not finish");
        let replicas = usize::try_from(replicas).expect("a small count");
        assert_eq!(most, replicas + 1, "{case}: one surge pod at most");
        assert_eq!(world.active().len(), replicas, "{case}: the surge pod is gone at the end");
        assert_eq!(world.revision_counts(), (replicas - 1, 1), "{case}");
        assert_eq!(image_of(&world, &kept), "game:1", "{case}");
        let (reason, message) = progressing(&world);
        assert_eq!(reason, "RolloutComplete", "{case}: {message}");
        assert!(message.contains(&format!("1 server in Maintaining is left as it is: {kept}")), "{case}: {message}");
    }
}
