//! Table and scenario tests of the planner, on the simulated cluster of [`super::sim_cluster`].

use common::api::{GameDeploymentScaleStrategy, GameDeploymentUpdateStrategyType as Strategy};
use common::cached_pod::Pod;
use common::keys;
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::sim_cluster::{World, serving, set_image, settled, store};
use super::status;
use crate::action::{Action, CreateReason, PatchReason};
use crate::fixtures::gd;
use crate::gate::DeleteCause;
use crate::lifecycle::{self, LifecycleState};

fn bump(world: &mut World) {
    world.gd.metadata.generation = Some(world.gd.metadata.generation.unwrap_or(1) + 1);
}

fn images(world: &World) -> Vec<String> {
    let mut v: Vec<String> = world
        .active()
        .iter()
        .map(|p| p.spec.as_ref().unwrap().containers[0].image.as_ref().map(ToString::to_string).unwrap_or_default())
        .collect();
    v.sort();
    v
}

fn creates(plan: &super::Plan) -> usize {
    plan.actions.iter().filter(|a| matches!(a, Action::CreatePod { .. })).count()
}

fn deletes(plan: &super::Plan) -> Vec<(String, DeleteCause)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { pod, cause } => Some((pod.name.clone(), *cause)),
            _ => None,
        })
        .collect()
}

fn patches(plan: &super::Plan, reason: PatchReason) -> usize {
    plan.actions.iter().filter(|a| matches!(a, Action::PatchPod(c) if c.reason == reason)).count()
}

fn condition(world: &World, type_: &str) -> Option<(String, String, String)> {
    let status = world.gd.status.as_ref()?;
    let c = status::condition(status, type_)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

/// Checks, before every pass, that the plan never takes availability below `replicas − maxUnavailable` by
/// itself, and returns the minimum number of serving pods seen.
fn guard(max_unavailable: usize) -> impl FnMut(&World, &super::Plan) {
    move |world: &World, plan: &super::Plan| {
        let replicas = usize::try_from(world.gd.spec.replicas.unwrap_or(1)).unwrap();
        let before = world.serving();
        let mut after = World::new(world.gd.clone());
        after.pods = world.pods.clone();
        after.revisions = world.revisions.clone();
        after.now = world.now;
        after.send(&plan.actions);
        let floor = before.min(replicas.saturating_sub(max_unavailable));
        assert!(
            after.serving() >= floor,
            "serving {} -> {} (floor {floor}): {:#?}",
            before,
            after.serving(),
            plan.actions
        );
    }
}

#[test]
fn creates_the_revision_and_the_pods_then_reports_them() {
    let mut world = World::new(gd(6, "InplaceUpdate"));
    let plan = world.pass();
    assert!(matches!(plan.actions[0], Action::CreateRevision(_)));
    assert_eq!(creates(&plan), 6);
    let revision = world.revisions[0].metadata.name.clone().unwrap();
    assert!(revision.starts_with("game-"));
    for pod in &world.pods {
        assert_eq!(common::pod::label(pod, keys::CONTROLLER_REVISION_HASH), Some(revision.as_str()));
        let id = common::pod::label(pod, keys::INSTANCE_ID).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some(format!("game-{id}").as_str()));
    }
    assert!(world.settle(20, |_, _| {}).is_some());
    let status = world.gd.status.clone().unwrap();
    assert_eq!(
        (
            status.replicas,
            status.ready_replicas,
            status.available_replicas,
            status.updated_replicas,
            status.updated_ready_replicas
        ),
        (6, 6, 6, 6, 6)
    );
    assert_eq!(status.update_revision.as_deref(), Some(revision.as_str()));
    assert_eq!(status.current_revision.as_deref(), Some(revision.as_str()));
    assert_eq!(status.label_selector.as_deref(), Some("app=game"));
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(condition(&world, status::PROGRESSING).unwrap().1, "RolloutComplete");
    // Settled: the next pass plans nothing and computes the same status (so nothing is written).
    let plan = world.plan();
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    assert_eq!(Some(&plan.status), world.gd.status.as_ref());
}

#[test]
fn pods_are_marked_ready_through_the_readiness_gate() {
    let mut world = World::new(gd(2, "RollingUpdate"));
    world.pass();
    world.tick(1);
    world.tick(1);
    assert!(world.pods.iter().all(|p| !common::pod::is_ready(p)), "the gate holds Ready until we set it");
    let plan = world.pass();
    assert_eq!(patches(&plan, PatchReason::ReadinessGate), 2);
    world.tick(1);
    assert!(world.pods.iter().all(common::pod::is_ready));
}

#[test]
fn scale_out_and_in() {
    let mut world = settled(gd(3, "InplaceUpdate"));
    world.gd.spec.replicas = Some(5);
    let plan = world.pass();
    assert_eq!(creates(&plan), 2);
    assert!(world.settle(20, |_, _| {}).is_some());
    assert_eq!(world.active().len(), 5);

    // Give one pod a low deletion cost and make one not ready: those two go first.
    let names: Vec<String> = world.active().iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    let (cheap, sick) = (names[3].clone(), names[4].clone());
    for pod in &mut world.pods {
        if pod.metadata.name.as_deref() == Some(&cheap) {
            pod.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(keys::POD_DELETION_COST.into(), "-5".into());
        }
        if pod.metadata.name.as_deref() == Some(&sick) {
            let cs = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
            cs.iter_mut().find(|c| c.type_ == "Ready").unwrap().status = "False".into();
        }
    }
    world.gd.spec.replicas = Some(3);
    let plan = world.pass();
    let mut victims: Vec<String> = deletes(&plan)
        .into_iter()
        .map(|(n, c)| {
            assert_eq!(c, DeleteCause::ScaleIn);
            n
        })
        .collect();
    victims.sort();
    let mut expected = vec![cheap, sick];
    expected.sort();
    assert_eq!(victims, expected);
    assert!(world.settle(20, |_, _| {}).is_some());
    assert_eq!(world.active().len(), 3);
    assert_eq!(world.gd.status.as_ref().unwrap().replicas, 3);
}

#[test]
fn inplace_update_respects_partition_and_max_unavailable() {
    let mut g = gd(6, "InplaceUpdate");
    g.spec.update_strategy.partition = Some(IntOrString::Int(2));
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(2));
    let mut world = settled(g);
    let uids: Vec<String> = world.pods.iter().map(|p| p.metadata.uid.clone().unwrap()).collect();
    set_image(&mut world, "game:2");
    let plan = world.pass();
    assert_eq!(patches(&plan, PatchReason::InPlaceUpdate), 2, "{:#?}", plan.actions);
    assert!(deletes(&plan).is_empty() && creates(&plan) == 0);
    let mut max_updated = 0;
    assert!(
        world
            .settle(60, |w, p| {
                guard(2)(w, p);
                max_updated = max_updated.max(w.revision_counts().0);
            })
            .is_some()
    );
    assert_eq!(world.revision_counts(), (4, 2));
    assert_eq!(max_updated, 4);
    assert_eq!(images(&world), ["game:1", "game:1", "game:2", "game:2", "game:2", "game:2"]);
    // In place: same pods (UIDs), restarted containers.
    let now: Vec<String> = world.pods.iter().map(|p| p.metadata.uid.clone().unwrap()).collect();
    assert_eq!(now, uids);
    let status = world.gd.status.clone().unwrap();
    assert_eq!((status.updated_replicas, status.updated_ready_replicas, status.ready_replicas), (4, 4, 6));
    assert_ne!(status.current_revision, status.update_revision, "partitioned: the old revision stays current");
    assert_eq!(condition(&world, status::PROGRESSING).unwrap().1, "PartitionAvailable");
    for pod in world.active() {
        assert_eq!(lifecycle::state_of(pod), LifecycleState::Normal);
        assert!(serving(pod));
    }
    // Partition 0 finishes the rollout.
    world.gd.spec.update_strategy.partition = Some(IntOrString::Int(0));
    assert!(world.settle(60, guard(2)).is_some());
    assert_eq!(world.revision_counts(), (6, 0));
    let status = world.gd.status.clone().unwrap();
    assert_eq!(status.current_revision, status.update_revision);
}

#[test]
fn rolling_update_recreates_within_budget() {
    let mut g = gd(6, "RollingUpdate");
    g.spec.update_strategy.partition = Some(IntOrString::Int(2));
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(2));
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    let plan = world.pass();
    let d = deletes(&plan);
    assert_eq!(d.len(), 2);
    assert!(d.iter().all(|(_, c)| *c == DeleteCause::RollingUpdate));
    assert!(world.settle(80, guard(2)).is_some());
    assert_eq!(world.revision_counts(), (4, 2));
    assert_eq!(world.active().len(), 6);
}

#[test]
fn rolling_update_with_surge_creates_first() {
    let mut g = gd(4, "RollingUpdate");
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(0));
    g.spec.update_strategy.max_surge = Some(IntOrString::Int(2));
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    let plan = world.pass();
    assert_eq!(creates(&plan), 2);
    assert!(plan.actions.iter().any(|a| matches!(a, Action::CreatePod { reason: CreateReason::Surge, .. })));
    assert!(deletes(&plan).is_empty());
    let mut most = 0;
    assert!(
        world
            .settle(80, |w, p| {
                guard(0)(w, p);
                most = most.max(w.active().len());
            })
            .is_some()
    );
    assert_eq!(most, 6);
    assert_eq!(world.revision_counts(), (4, 0));
}

/// `maxSurge` with an in-place update, as CloneSet (`calculateDiffsWithExpectation`: surge for the old pods beyond
/// the partition, whatever the update type): a surge pod of the update revision is created first, its
/// availability pays for one in-place update at a time, and once no old pod is left the surplus pod is scaled in.
/// With `maxUnavailable: 0` no pass ever takes availability below `replicas`.
#[test]
fn inplace_update_uses_surge_and_never_drops_below_replicas() {
    for strategy in ["InplaceUpdate", "InPlaceIfPossible"] {
        let mut g = gd(4, strategy);
        g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(0));
        g.spec.update_strategy.max_surge = Some(IntOrString::Int(1));
        let mut world = settled(g);
        let originals: Vec<String> = world.active().iter().filter_map(|p| p.metadata.name.clone()).collect();
        set_image(&mut world, "game:2");
        let plan = world.pass();
        assert_eq!(creates(&plan), 1, "{strategy}: the surge pod first");
        assert!(plan.actions.iter().any(|a| matches!(a, Action::CreatePod { reason: CreateReason::Surge, .. })));
        assert_eq!(patches(&plan, PatchReason::InPlaceUpdate), 0, "{strategy}: nothing taken down before it serves");
        let (mut most, mut in_place) = (0, 0);
        assert!(
            world
                .settle(80, |w, p| {
                    guard(0)(w, p);
                    most = most.max(w.active().len());
                    in_place += patches(p, PatchReason::InPlaceUpdate);
                })
                .is_some(),
            "{strategy}"
        );
        assert_eq!(most, 5, "{strategy}: one pod above replicas at most");
        assert!(in_place >= 3, "{strategy}: the old pods are updated in place ({in_place})");
        assert_eq!(world.revision_counts(), (4, 0), "{strategy}");
        let kept =
            world.active().iter().filter(|p| p.metadata.name.as_ref().is_some_and(|n| originals.contains(n))).count();
        assert!(kept >= 3, "{strategy}: pods keep their names ({kept} of 4)");
    }
}

/// Hot patches never take a pod out of service: no surge pod is made for them.
#[test]
fn surge_is_not_used_for_hot_patches() {
    let mut g = gd(4, "HotPatchUpdate");
    g.spec.update_strategy.max_surge = Some(IntOrString::String("50%".into()));
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    assert!(
        world
            .settle(80, |w, p| {
                assert_eq!(creates(p), 0);
                assert!(w.active().len() <= 4);
            })
            .is_some()
    );
    assert_eq!(world.revision_counts(), (4, 0));
}

#[test]
fn hot_patch_keeps_pods_in_service() {
    let mut g = gd(4, "HotPatchUpdate");
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    let plan = world.pass();
    assert_eq!(patches(&plan, PatchReason::HotPatchUpdate), 1);
    assert!(
        plan.actions.iter().all(|a| match a {
            Action::PatchPod(c) => c.writes.iter().all(|w| matches!(w, crate::action::PodWrite::Object(_))),
            _ => true,
        }),
        "no readiness flip"
    );
    assert!(world.settle(40, |_, _| {}).is_some());
    assert_eq!(world.revision_counts(), (4, 0));
    assert!(world.pods.iter().all(|p| common::pod::annotation(p, keys::HOTPATCH_CONTAINER) == Some("true")));
}

#[test]
fn on_delete_waits_for_the_user() {
    let mut world = settled(gd(3, "OnDelete"));
    set_image(&mut world, "game:2");
    assert!(world.settle(10, |_, p| assert!(deletes(p).is_empty())).is_some());
    assert_eq!(world.revision_counts(), (0, 3));
    assert_eq!(condition(&world, status::PROGRESSING).unwrap().1, "WaitingForDeletion");
    // The user deletes a pod: its replacement has the new template.
    let victim = world.pods[0].metadata.name.clone();
    world.pods.retain(|p| p.metadata.name != victim);
    assert!(world.settle(10, |_, _| {}).is_some());
    assert_eq!(world.revision_counts(), (1, 2));
}

#[test]
fn paused_stops_updates_but_not_scaling_or_readiness() {
    let mut g = gd(3, "InplaceUpdate");
    g.spec.update_strategy.paused = true;
    let mut world = settled(g);
    assert_eq!(world.active().len(), 3, "pods created while paused become ready");
    assert!(world.pods.iter().all(common::pod::is_ready));
    set_image(&mut world, "game:2");
    world.gd.spec.replicas = Some(4);
    assert!(world.settle(20, |_, p| assert_eq!(patches(p, PatchReason::InPlaceUpdate), 0)).is_some());
    assert_eq!(world.active().len(), 4);
    assert!(world.pods.iter().all(common::pod::is_ready));
    assert_eq!(condition(&world, status::PROGRESSING).unwrap().1, "Paused");
    assert!(world.gd.spec.update_strategy.paused, "the planner never unpauses");
    world.gd.spec.update_strategy.paused = false;
    assert!(world.settle(40, |_, _| {}).is_some());
    assert_eq!(world.revision_counts(), (4, 0));
}

#[test]
fn rollback_reuses_the_old_revision() {
    let mut world = settled(gd(3, "InplaceUpdate"));
    let first = world.update_revision().unwrap();
    set_image(&mut world, "game:2");
    assert!(world.settle(40, |_, _| {}).is_some());
    let second = world.update_revision().unwrap();
    assert_ne!(first, second);
    set_image(&mut world, "game:1");
    let plan = world.pass();
    assert!(plan.actions.iter().any(|a| matches!(a, Action::RenumberRevision { name, revision: 3 } if *name == first)));
    assert!(world.settle(40, |_, _| {}).is_some());
    assert_eq!(world.update_revision().as_deref(), Some(first.as_str()));
    assert_eq!(images(&world), ["game:1", "game:1", "game:1"]);
    assert_eq!(world.revisions.len(), 2);
}

#[test]
fn pods_to_delete_replaces_and_prunes() {
    let mut world = settled(gd(3, "RollingUpdate"));
    let victim = world.pods[1].metadata.name.clone().unwrap();
    world.gd.spec.scale_strategy = Some(GameDeploymentScaleStrategy {
        pods_to_delete: vec![victim.clone(), "gone-pod".into()],
        create_batch: None,
        ..Default::default()
    });
    let plan = world.pass();
    assert_eq!(deletes(&plan), [(victim.clone(), DeleteCause::PodsToDelete)]);
    assert!(
        plan.actions
            .iter()
            .any(|a| matches!(a, Action::PrunePodsToDelete { remaining, .. } if *remaining == [victim.clone()]))
    );
    assert!(world.settle(20, |_, _| {}).is_some());
    assert_eq!(world.active().len(), 3);
    assert!(world.pods.iter().all(|p| p.metadata.name.as_deref() != Some(&victim)));
    assert!(world.gd.spec.scale_strategy.as_ref().unwrap().pods_to_delete.is_empty());
}

#[test]
fn pods_to_delete_with_lower_replicas_is_a_targeted_scale_in() {
    let mut world = settled(gd(4, "RollingUpdate"));
    let victims: Vec<String> = world.pods[..2].iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    world.gd.spec.scale_strategy =
        Some(GameDeploymentScaleStrategy { pods_to_delete: victims.clone(), create_batch: None, ..Default::default() });
    world.gd.spec.replicas = Some(2);
    let plan = world.pass();
    let mut deleted: Vec<String> = deletes(&plan).into_iter().map(|(n, _)| n).collect();
    deleted.sort();
    let mut want = victims.clone();
    want.sort();
    assert_eq!(deleted, want);
    assert_eq!(creates(&plan), 0);
    assert!(world.settle(20, |_, p| assert_eq!(creates(p), 0)).is_some());
    assert_eq!(world.active().len(), 2);
}

#[test]
fn selector_that_misses_the_template_is_refused() {
    let mut g = gd(3, "RollingUpdate");
    g.spec.selector.match_labels = Some([("app".to_string(), "other".to_string())].into());
    let mut world = World::new(g);
    let plan = world.pass();
    assert_eq!(creates(&plan), 0);
    assert!(plan.events.iter().any(|e| e.reason == status::FAILED_SCALE && e.message.contains("does not match")));
    let (s, reason, message) = condition(&world, status::FAILED_SCALE).unwrap();
    assert_eq!((s.as_str(), reason.as_str()), ("True", status::REASON_INVALID_SPEC));
    assert!(message.contains("app=other"), "{message}");
    assert_eq!(condition(&world, status::PROGRESSING).unwrap().0, "False");
    // The event is not repeated on the next pass.
    let plan = world.pass();
    assert!(plan.events.is_empty() && creates(&plan) == 0);
    // Fixed: pods are created and the condition goes away.
    world.gd.spec.selector.match_labels = Some([("app".to_string(), "game".to_string())].into());
    assert!(world.settle(20, |_, _| {}).is_some());
    assert_eq!(world.active().len(), 3);
    assert!(condition(&world, status::FAILED_SCALE).is_none());
}

#[test]
fn non_image_change_falls_back_to_recreate() {
    let mut world = settled(gd(2, "InplaceUpdate"));
    world.gd.spec.template.spec.as_mut().unwrap().containers[0].env =
        Some(vec![EnvVar { name: "MODE".into(), value: Some("hard".into()), value_from: None }]);
    bump(&mut world);
    let plan = world.pass();
    assert_eq!(deletes(&plan).iter().filter(|(_, c)| *c == DeleteCause::RecreateFallback).count(), 1);
    assert!(
        plan.events.iter().any(|e| e.reason == "InPlaceUpdateNotPossible" && e.message.contains("spec.containers"))
    );
    assert!(world.settle(40, guard(1)).is_some());
    assert_eq!(world.revision_counts(), (2, 0));
    let sent = |name: &Option<String>| world.created.iter().rev().find(|c| &c.metadata.name == name).unwrap();
    assert!(world.active().iter().all(|p| sent(&p.metadata.name).spec.as_ref().unwrap().containers[0].env.is_some()));
}

#[test]
fn grace_period_delays_the_image_patch() {
    let mut g = gd(1, "InplaceUpdate");
    g.spec.update_strategy.in_place_update_strategy =
        Some(common::api::InPlaceUpdateStrategy { grace_period_seconds: 30, policy: None });
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    let plan = world.pass();
    assert_eq!(patches(&plan, PatchReason::InPlaceUpdate), 1);
    assert_eq!(plan.requeue_after, None, "the grace annotation is observed on the next pass");
    let plan = world.pass();
    assert_eq!(plan.requeue_after, Some(std::time::Duration::from_secs(30)));
    assert_eq!(images(&world), ["game:1"]);
    assert_eq!(world.revision_counts(), (0, 1), "the revision label flips only with the images");
    assert!(!serving(&world.pods[0]));
    world.tick(29);
    assert_eq!(patches(&world.pass(), PatchReason::InPlaceGraceEnded), 0);
    world.tick(1);
    assert_eq!(patches(&world.pass(), PatchReason::InPlaceGraceEnded), 1);
    assert!(world.settle(10, |_, _| {}).is_some());
    assert_eq!(images(&world), ["game:2"]);
}

#[test]
fn rollback_during_the_grace_period_cancels_it() {
    let mut g = gd(1, "InplaceUpdate");
    g.spec.update_strategy.in_place_update_strategy =
        Some(common::api::InPlaceUpdateStrategy { grace_period_seconds: 30, policy: None });
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    world.pass();
    set_image(&mut world, "game:1");
    let plan = world.pass();
    assert_eq!(patches(&plan, PatchReason::InPlaceGraceCancelled), 1);
    assert!(world.settle(10, |_, _| {}).is_some());
    assert_eq!(images(&world), ["game:1"]);
    assert!(serving(&world.pods[0]));
    assert_eq!(world.pods[0].status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].restart_count, 0);
}

#[test]
fn create_batch_limits_pods_starting_at_once() {
    let mut g = gd(10, "RollingUpdate");
    g.spec.scale_strategy = Some(GameDeploymentScaleStrategy {
        pods_to_delete: vec![],
        create_batch: Some(IntOrString::Int(3)),
        ..Default::default()
    });
    let mut world = World::new(g);
    let plan = world.pass();
    assert_eq!(creates(&plan), 3);
    assert!(
        world
            .settle(60, |w, p| {
                let starting = w.active().iter().filter(|p| !common::pod::is_ready(p)).count();
                assert!(starting + creates(p) <= 3, "{starting} starting + {} new", creates(p));
            })
            .is_some()
    );
    assert_eq!(world.active().len(), 10);
}

#[test]
fn index_injection_gives_unique_indices() {
    let mut g = gd(4, "RollingUpdate");
    g.metadata.annotations = Some(
        [
            (keys::INDEX_ON.to_string(), "true".to_string()),
            (keys::INDEX_RANGE.to_string(), r#"{"podStartIndex":10,"podEndIndex":20}"#.to_string()),
        ]
        .into(),
    );
    let world = settled(g);
    let mut indices: Vec<String> =
        world.pods.iter().map(|p| common::pod::annotation(p, keys::INDEX_ID).unwrap().to_string()).collect();
    indices.sort();
    assert_eq!(indices, ["10", "11", "12", "13"]);
    for pod in &world.pods {
        let sent = world.created.iter().find(|c| c.metadata.name == pod.metadata.name).unwrap();
        let env = sent.spec.as_ref().unwrap().containers[0].env.as_ref().unwrap();
        assert_eq!(
            env.iter().find(|e| e.name == "POD_INDEX").unwrap().value.as_deref(),
            common::pod::annotation(pod, keys::INDEX_ID)
        );
    }
    let mut too_small = world.gd.clone();
    too_small.spec.replicas = Some(11);
    let mut w = World::new(too_small);
    w.pods = world.pods.clone();
    w.revisions = world.revisions.clone();
    let plan = w.pass();
    assert_eq!(creates(&plan), 0);
    assert!(condition(&w, status::FAILED_SCALE).unwrap().2.contains("do not fit"));
}

#[test]
fn default_max_unavailable_rounds_down_with_a_floor_of_one() {
    // 20% of 6 = 1.2 -> 1 (Kubernetes rounding; BCS would round up to 2).
    let mut world = settled(gd(6, "InplaceUpdate"));
    set_image(&mut world, "game:2");
    assert_eq!(patches(&world.pass(), PatchReason::InPlaceUpdate), 1);
    // 0 with no surge would deadlock; Kubernetes allows one.
    let mut g = gd(3, "InplaceUpdate");
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(0));
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    assert_eq!(patches(&world.pass(), PatchReason::InPlaceUpdate), 1);
    assert!(world.settle(40, guard(1)).is_some());
}

#[test]
fn percent_partition() {
    let mut g = gd(5, "InplaceUpdate");
    g.spec.update_strategy.partition = Some(IntOrString::String("50%".into()));
    g.spec.update_strategy.max_unavailable = Some(IntOrString::String("100%".into()));
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    assert!(world.settle(40, |_, _| {}).is_some());
    // 50% of 5 rounds up, as CloneSet (`common::intstr::partition`): 3 pods kept, 2 updated.
    assert_eq!(world.revision_counts(), (2, 3));
    assert_eq!(world.gd.status.as_ref().map(|s| s.expected_updated_replicas), Some(2));
}

#[test]
fn scale_out_mid_rollout_keeps_the_partition() {
    let mut g = gd(4, "InplaceUpdate");
    g.spec.update_strategy.partition = Some(IntOrString::Int(3));
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    assert!(world.settle(40, |_, _| {}).is_some());
    assert_eq!(world.revision_counts(), (1, 3));
    // Scale in to 2 takes old pods first, down to... the partition is capped at replicas.
    world.gd.spec.replicas = Some(2);
    assert!(world.settle(40, |_, _| {}).is_some());
    assert_eq!(world.revision_counts(), (0, 2));
    // Scale out to 6: one pod of the old revision (to reach partition 3) and the rest new.
    world.gd.spec.replicas = Some(6);
    let plan = world.pass();
    let revisions: Vec<String> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { pod, .. } => {
                common::pod::label(&**pod, keys::CONTROLLER_REVISION_HASH).map(String::from)
            }
            _ => None,
        })
        .collect();
    let update = world.update_revision().unwrap();
    assert_eq!(revisions.iter().filter(|r| **r != update).count(), 1);
    assert_eq!(revisions.iter().filter(|r| **r == update).count(), 3);
    assert!(world.settle(40, |_, _| {}).is_some());
    assert_eq!(world.revision_counts(), (3, 3));
}

#[test]
fn adopts_orphans_and_releases_strays() {
    let mut world = settled(gd(2, "RollingUpdate"));
    let template = world.pods[0].clone();
    let mut orphan = template.clone();
    orphan.metadata = ObjectMeta {
        name: Some("hand-made".into()),
        uid: Some("hand-uid".into()),
        labels: Some([("app".to_string(), "game".to_string())].into()),
        ..Default::default()
    };
    world.pods.push(orphan);
    let plan = world.pass();
    assert!(plan.actions.iter().any(|a| matches!(a, Action::AdoptPod(p) if p.name == "hand-made")));
    assert!(world.settle(20, |_, _| {}).is_some());
    assert_eq!(world.active().len(), 2, "the adopted pod made one surplus");

    // A pod whose labels no longer match is released (and replaced).
    let stray = world.active()[0].metadata.name.clone().unwrap();
    for pod in &mut world.pods {
        if pod.metadata.name.as_deref() == Some(&stray) {
            pod.metadata.labels.as_mut().unwrap().insert("app".into(), "debug".into());
        }
    }
    let plan = world.pass();
    assert!(plan.actions.iter().any(|a| matches!(a, Action::ReleasePod(p) if p.name == stray)));
    assert!(world.settle(20, |_, _| {}).is_some());
    assert_eq!(world.active().len(), 2);
    let kept = world.pods.iter().find(|p| p.metadata.name.as_deref() == Some(&stray)).unwrap();
    assert!(kept.metadata.owner_references.iter().flatten().all(|o: &OwnerReference| o.controller != Some(true)));
}

#[test]
fn history_is_truncated_but_live_revisions_stay() {
    let mut g = gd(2, "InplaceUpdate");
    g.spec.revision_history_limit = Some(1);
    g.spec.update_strategy.partition = Some(IntOrString::Int(1));
    let mut world = settled(g);
    let first = world.update_revision().unwrap();
    for i in 2..=5 {
        set_image(&mut world, &format!("game:{i}"));
        assert!(world.settle(40, |_, _| {}).is_some());
    }
    let names: Vec<String> = world.revisions.iter().map(|r| r.metadata.name.clone().unwrap()).collect();
    // first (the partitioned pod still runs it), the update revision, and one more of history.
    assert!(names.contains(&first), "{names:?}");
    assert!(names.contains(&world.update_revision().unwrap()));
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn invalid_settings_are_reported_not_guessed() {
    let mut world = settled(gd(3, "InplaceUpdate"));
    world.gd.spec.update_strategy.max_unavailable = Some(IntOrString::String("lots".into()));
    set_image(&mut world, "game:2");
    let plan = world.pass();
    assert_eq!(patches(&plan, PatchReason::InPlaceUpdate), 0);
    assert!(plan.events.iter().any(|e| e.reason == status::FAILED_UPDATE && e.message.contains("maxUnavailable")));
    assert_eq!(condition(&world, status::FAILED_UPDATE).unwrap().1, status::REASON_INVALID_SPEC);
    world.gd.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
    assert!(world.settle(40, |_, _| {}).is_some());
    assert!(condition(&world, status::FAILED_UPDATE).is_none());
    assert_eq!(world.revision_counts(), (3, 0));
}

#[test]
fn held_states_left_over_are_released() {
    // After a restart the planner finds pods a previous pass left in PreparingDelete / PreparingUpdate that are
    // no longer wanted (replicas went back up): they return to Normal.
    let mut world = settled(gd(2, "InplaceUpdate"));
    for (pod, state) in world.pods.iter_mut().zip(["PreparingDelete", "PreparingUpdate"]) {
        pod.metadata.labels.as_mut().unwrap().insert(keys::LIFECYCLE_STATE.into(), state.into());
    }
    store(&mut world);
    let plan = world.pass();
    assert_eq!(patches(&plan, PatchReason::Lifecycle), 2);
    assert!(world.pods.iter().all(|p| lifecycle::state_of(p) == LifecycleState::Normal));
}

#[test]
fn restart_mid_update_resumes_from_the_pods() {
    // A pass started an in-place update and the operator died: a fresh planner (no memory) finishes it.
    let mut g = gd(3, "InplaceUpdate");
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
    let mut world = settled(g);
    set_image(&mut world, "game:2");
    world.pass();
    // Without a grace period or post-inplace hook the pod is back to Normal with its new image at once; its
    // readiness condition (False) says the update is in progress.
    let in_progress: Vec<String> = world
        .pods
        .iter()
        .filter(|p| {
            lifecycle::state_of(p) == LifecycleState::Normal
                && common::pod::condition(p, keys::IN_PLACE_UPDATE_READY).is_some_and(|c| c.status == "False")
        })
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(in_progress.len(), 1);
    world.tick(1);
    // The next planner sees the pod mid-update: it does not start a second pod (budget used) and does not touch
    // the first one again until its containers run.
    let plan = world.plan();
    assert_eq!(patches(&plan, PatchReason::InPlaceUpdate), 0, "{:#?}", plan.actions);
    assert!(world.settle(40, guard(1)).is_some());
    assert_eq!(world.revision_counts(), (3, 0));
}

#[test]
fn pods_of_other_owners_are_left_alone() {
    let mut world = settled(gd(1, "RollingUpdate"));
    let mut foreign: Pod = world.pods[0].clone();
    foreign.metadata.name = Some("foreign".into());
    foreign.metadata.uid = Some("foreign-uid".into());
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    world.pods.push(foreign);
    assert!(world.settle(10, |_, p| assert!(p.actions.iter().all(|a| a.pod_name() != Some("foreign")))).is_some());
    assert_eq!(world.active().len(), 1);
    assert_eq!(world.pods.len(), 2);
}

#[test]
fn strategies_parse_as_bcs_writes_them() {
    for (text, strategy) in [
        ("RollingUpdate", Strategy::RollingUpdate),
        ("InplaceUpdate", Strategy::InplaceUpdate),
        ("HotPatchUpdate", Strategy::HotPatchUpdate),
        ("OnDelete", Strategy::OnDelete),
        ("InPlaceIfPossible", Strategy::InPlaceIfPossible),
        ("InPlaceOnly", Strategy::InPlaceOnly),
        ("ReCreate", Strategy::ReCreate),
    ] {
        assert_eq!(gd(1, text).spec.update_strategy.type_, strategy);
    }
}

/// CloneSet's names: `InPlaceIfPossible` is our `InplaceUpdate` (in place, recreate when it cannot be) and
/// `ReCreate` is `RollingUpdate`, pass for pass.
#[test]
fn cloneset_update_types_behave_as_their_bcs_twins() {
    for (cloneset, bcs) in [("InPlaceIfPossible", "InplaceUpdate"), ("ReCreate", "RollingUpdate")] {
        for env_change in [false, true] {
            let run = |strategy: &str| {
                let mut world = settled(gd(2, strategy));
                if env_change {
                    world.gd.spec.template.spec.as_mut().unwrap().containers[0].env =
                        Some(vec![EnvVar { name: "MODE".into(), value: Some("hard".into()), value_from: None }]);
                    bump(&mut world);
                } else {
                    set_image(&mut world, "game:2");
                }
                let mut seen = Vec::new();
                for _ in 0..3 {
                    let plan = world.pass();
                    seen.push(format!("{:?}", plan.actions.iter().map(|a| a.pod_name()).collect::<Vec<_>>()));
                    seen.push(deletes(&plan).iter().map(|(_, c)| format!("{c:?}")).collect::<Vec<_>>().join(","));
                }
                assert!(world.settle(40, guard(1)).is_some(), "{strategy}");
                (seen, world.revision_counts())
            };
            assert_eq!(run(cloneset), run(bcs), "{cloneset} vs {bcs}, env change {env_change}");
        }
    }
}

/// `InPlaceOnly` (CloneSet): a change that cannot be made in place is refused — no pod is deleted or patched, and
/// `FailedUpdate` says why (an Event follows the condition); an image change still rolls in place.
#[test]
fn in_place_only_refuses_a_change_that_cannot_be_made_in_place() {
    let mut world = settled(gd(2, "InPlaceOnly"));
    world.gd.spec.template.spec.as_mut().unwrap().containers[0].env =
        Some(vec![EnvVar { name: "MODE".into(), value: Some("hard".into()), value_from: None }]);
    bump(&mut world);
    let plan = world.pass();
    assert!(deletes(&plan).is_empty(), "{:?}", plan.actions);
    assert!(!plan.actions.iter().any(|a| matches!(a, Action::PatchPod(_))), "{:?}", plan.actions);
    let (s, _, message) = condition(&world, status::FAILED_UPDATE).expect("FailedUpdate");
    assert_eq!(s, "True");
    assert!(message.contains("InPlaceOnly") && message.contains("spec.containers"), "{message}");
    assert!(plan.events.iter().any(|e| e.reason == status::FAILED_UPDATE && e.message.contains("InPlaceOnly")));
    for _ in 0..5 {
        let plan = world.pass();
        assert!(deletes(&plan).is_empty() && creates(&plan) == 0, "{:?}", plan.actions);
    }
    assert_eq!(world.revision_counts(), (0, 2));
    // Back to an image-only change: it rolls in place and the condition goes away.
    world.gd.spec.template.spec.as_mut().unwrap().containers[0].env = None;
    set_image(&mut world, "game:2");
    assert!(world.settle(40, |_, p| assert!(deletes(p).is_empty())).is_some());
    assert_eq!(images(&world), ["game:2", "game:2"]);
    assert!(condition(&world, status::FAILED_UPDATE).is_none());
}

#[test]
fn min_ready_seconds_delays_availability_and_the_rollout() {
    let mut g = gd(2, "InplaceUpdate");
    g.spec.min_ready_seconds = 10;
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
    let mut world = World::new(g);
    for _ in 0..4 {
        world.tick(1);
        world.pass();
    }
    let status = world.gd.status.clone().unwrap();
    assert_eq!((status.ready_replicas, status.available_replicas), (2, 0));
    let plan = world.plan();
    let wait = plan.requeue_after.expect("a pass is scheduled for when the pods become available");
    assert!(wait <= std::time::Duration::from_secs(10), "{wait:?}");
    world.tick(10);
    world.pass();
    assert_eq!(world.gd.status.as_ref().unwrap().available_replicas, 2);

    // A freshly updated pod must be available again before the next one goes.
    set_image(&mut world, "game:2");
    assert_eq!(patches(&world.pass(), PatchReason::InPlaceUpdate), 1);
    for _ in 0..5 {
        world.tick(1);
        assert_eq!(patches(&world.pass(), PatchReason::InPlaceUpdate), 0);
    }
    assert!(world.settle(60, guard(1)).is_some());
    assert_eq!(world.revision_counts(), (2, 0));
}
