//! CloneSet semantics where the docs claim them (issue 48), each test against the Kruise code it follows
//! (openkruise/kruise, `pkg/controller/cloneset/`): a rollout on the simulated cluster, pass by pass.

use std::collections::BTreeSet;

use common::api::GameDeployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::sim_cluster::{World, in_state, set_image, settled};
use crate::action::{Action, PatchReason};
use crate::fixtures::gd;
use crate::lifecycle::LifecycleState;

/// The `inPlaceUpdate` handler label of Kruise's manual (seed 000): the outside controller removes it to release
/// a pod for its update, and puts it back once the pod is registered again.
const BLOCK_INPLACE: &str = "example.com/unready-blocker-inplace";

/// A settled GameDeployment with the `inPlaceUpdate` label handler (the template sets the label).
fn with_handler(mut gd: GameDeployment) -> World {
    gd.spec.lifecycle =
        Some(serde_json::from_value(json!({"inPlaceUpdate": {"labelsHandler": {BLOCK_INPLACE: "true"}}})).unwrap());
    let template = gd.spec.template.metadata.get_or_insert_with(Default::default);
    template.labels.get_or_insert_with(Default::default).insert(BLOCK_INPLACE.into(), "true".into());
    settled(gd)
}

fn set_label(world: &mut World, pod: &str, key: &str, value: &str) {
    let pod = world.pods.iter_mut().find(|p| p.metadata.name.as_deref() == Some(pod)).expect("the pod exists");
    pod.metadata.labels.get_or_insert_with(Default::default).insert(key.into(), value.into());
}

fn passes(world: &mut World, n: usize) {
    for _ in 0..n {
        world.tick(1);
        world.pass();
    }
}

/// The outside controller of Kruise's manual: releases a pod in `PreparingUpdate` (removes its handler label) and
/// registers it again once it is `Updated` (puts the label back).
fn outside_controller(world: &mut World) {
    for name in in_state(world, LifecycleState::PreparingUpdate) {
        set_label(world, &name, BLOCK_INPLACE, "false");
    }
    for name in in_state(world, LifecycleState::Updated) {
        set_label(world, &name, BLOCK_INPLACE, "true");
    }
}

/// Not available in Kruise's sense (`IsPodAvailable`, `pkg/controller/cloneset/sync/cloneset_sync_utils.go`): a
/// lifecycle state other than `Normal`, or not ready.
fn kruise_unavailable(world: &World) -> usize {
    world
        .active()
        .into_iter()
        .filter(|p| {
            let state = common::pod::label(*p, common::keys::LIFECYCLE_STATE);
            !(state.is_none() || state == Some("Normal")) || !common::pod::is_ready(p)
        })
        .count()
}

fn names(world: &World) -> BTreeSet<String> {
    world.active().iter().filter_map(|p| p.metadata.name.clone()).collect()
}

/// `maxSurge` with in-place updates, as Kruise's `calculateDiffsWithExpectation`
/// (`pkg/controller/cloneset/sync/cloneset_sync_utils.go`): `updateNum` is the smaller of `updateOldDiff` (old pods
/// beyond the partition) and `−updateNewDiff` (updated pods missing from `replicas − partition`), and the surge pod
/// is one of the updated pods. With 6 old pods and `maxSurge: 1`, 5 are updated in place and the 6th is scaled in
/// (`scaleDownNumOldRevision`) — the operator used to update all 6 and then delete one of them as the surplus, one
/// game server disrupted twice.
#[test]
fn surge_with_in_place_updates_the_old_pods_but_one_and_scales_that_one_in() {
    for strategy in ["InplaceUpdate", "InPlaceIfPossible"] {
        let mut g = gd(6, strategy);
        g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(0));
        g.spec.update_strategy.max_surge = Some(IntOrString::Int(1));
        let mut world = settled(g);
        let originals = names(&world);
        set_image(&mut world, "game:2");
        let (mut in_place, mut deleted) = (BTreeSet::new(), Vec::new());
        let settled = world.settle(150, |_, plan| {
            for action in &plan.actions {
                match action {
                    Action::PatchPod(c) if c.reason == PatchReason::InPlaceUpdate => {
                        in_place.insert(c.pod.name.clone());
                    }
                    Action::DeletePod { pod, .. } => deleted.push(pod.name.clone()),
                    _ => {}
                }
            }
        });
        assert!(settled.is_some(), "{strategy}: the rollout did not finish");
        assert_eq!(world.revision_counts(), (6, 0), "{strategy}");
        assert_eq!(in_place.len(), 5, "{strategy}: replicas − 1 updated in place: {in_place:?}");
        assert_eq!(deleted.len(), 1, "{strategy}: one pod scaled in: {deleted:?}");
        assert!(!in_place.contains(&deleted[0]), "{strategy}: the pod scaled in was just updated: {deleted:?}");
        assert!(originals.contains(&deleted[0]), "{strategy}: an old pod is scaled in, not the surge pod");
        assert_eq!(names(&world).intersection(&originals).count(), 5, "{strategy}");
    }
}

/// Status counts as Kruise's `calculateStatus` (`pkg/controller/cloneset/cloneset_status.go`): `availableReplicas`
/// and `updatedAvailableReplicas` count the pods `IsPodAvailable` accepts, and it accepts only the lifecycle state
/// `Normal` (or none). The scenario: 6 pods, a partition keeping 4, 2 updated of which one is held in
/// `Updated` by the `inPlaceUpdate` handler — Kruise shows 5 and 1; the operator showed 6 and 2.
#[test]
fn a_pod_held_in_updated_is_not_counted_as_available_in_the_status() {
    let mut g = gd(6, "InPlaceIfPossible");
    g.spec.update_strategy.partition = Some(IntOrString::String("60%".into()));
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(2));
    let mut world = with_handler(g);
    set_image(&mut world, "game:2");
    passes(&mut world, 3);
    let taken = in_state(&world, LifecycleState::PreparingUpdate);
    assert_eq!(taken.len(), 2, "60% of 6 keeps 4 (rounded up): 2 to update");
    for name in &taken {
        set_label(&mut world, name, BLOCK_INPLACE, "false");
    }
    passes(&mut world, 8);
    assert_eq!(in_state(&world, LifecycleState::Updated), taken, "both updated, waiting for the handler");
    // The outside controller registers the first one again: it goes back to Normal; the second stays in Updated.
    set_label(&mut world, &taken[0], BLOCK_INPLACE, "true");
    passes(&mut world, 3);
    assert_eq!(in_state(&world, LifecycleState::Updated), [taken[1].clone()]);
    let status = world.plan().status;
    assert_eq!(
        (status.replicas, status.ready_replicas, status.updated_replicas, status.updated_ready_replicas),
        (6, 6, 2, 2),
        "readiness is not a lifecycle matter (Kruise's IsPodUpdateReady)"
    );
    assert_eq!(
        (status.available_replicas, status.updated_available_replicas),
        (5, 1),
        "as Kruise's calculateStatus: the pod in Updated is not available"
    );
    // A pod held in PreparingUpdate is not available either (IsPodAvailable: state != Normal).
    let mut g = gd(3, "InPlaceIfPossible");
    g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
    let mut world = with_handler(g);
    set_image(&mut world, "game:2");
    passes(&mut world, 3);
    assert_eq!(in_state(&world, LifecycleState::PreparingUpdate).len(), 1);
    assert_eq!(world.plan().status.available_replicas, 2);
}

/// `maxUnavailable: 0` with `maxSurge: 1`: Kruise's `limitUpdateIndexes` (`pkg/controller/cloneset/sync/
/// cloneset_update.go`) takes a pod only while the pods `IsPodAvailable` rejects are fewer than
/// `updateMaxUnavailable = maxUnavailable + pods − replicas`, and a pod whose handler is back is still rejected
/// until its return to `Normal` is written (`refreshPodState` writes it, and that pass updates nothing). So no plan
/// may take a pod while as many pods are out of `Normal` as the budget allows: the operator used to take the next
/// pod in the very pass that wrote the previous one's `Normal`.
#[test]
fn the_next_pod_is_taken_only_once_the_previous_one_is_back_in_normal() {
    for strategy in ["InPlaceIfPossible", "InplaceUpdate"] {
        let mut g = gd(4, strategy);
        g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(0));
        g.spec.update_strategy.max_surge = Some(IntOrString::Int(1));
        let mut world = with_handler(g);
        set_image(&mut world, "game:2");
        let mut taken_total = 0;
        for pass in 0..200 {
            world.tick(1);
            let plan = world.plan();
            let before = kruise_unavailable(&world);
            let pods = world.active().len();
            let mut after = World::new(world.gd.clone());
            after.pods = world.pods.clone();
            after.revisions = world.revisions.clone();
            after.now = world.now;
            after.send(&plan.actions);
            let normal_before: BTreeSet<String> = in_state(&world, LifecycleState::Normal).into_iter().collect();
            let taken: Vec<String> = in_state(&after, LifecycleState::PreparingUpdate)
                .into_iter()
                .filter(|n| normal_before.contains(n))
                .collect();
            taken_total += taken.len();
            let allowed = pods.saturating_sub(4);
            assert!(
                taken.is_empty() || before + taken.len() <= allowed,
                "{strategy}, pass {pass}: took {taken:?} while {before} of {pods} pods are not available in \
                 Kruise's sense (budget {allowed})"
            );
            world.finish_pass(&plan);
            outside_controller(&mut world);
            if world.revision_counts() == (4, 0) && in_state(&world, LifecycleState::Normal).len() == 4 {
                break;
            }
        }
        assert_eq!(world.revision_counts(), (4, 0), "{strategy}: the rollout finished");
        assert_eq!(taken_total, 3, "{strategy}: 3 pods updated in place, the 4th scaled in");
    }
}
