//! CloneSet semantics where the docs claim them (issue 48), each test against the Kruise code it follows
//! (openkruise/kruise, `pkg/controller/cloneset/`): a rollout on the simulated cluster, pass by pass.

use std::collections::BTreeSet;

use common::api::GameDeployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::sim_cluster::World;
use crate::action::{Action, PatchReason};
use crate::fixtures::gd;

fn settled(gd: GameDeployment) -> World {
    let mut world = World::new(gd);
    assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
    world
}

fn set_image(world: &mut World, image: &str) {
    world.gd.spec.template.spec.as_mut().expect("a pod spec").containers[0].image = Some(image.into());
    world.gd.metadata.generation = Some(world.gd.metadata.generation.unwrap_or(1) + 1);
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
