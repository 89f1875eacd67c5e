//! The simulated cluster of the planner tests: [`crate::forecast::cluster::SimCluster`] (the one `kubectl gd plan`
//! forecasts on), under the name these tests know it by.

pub(crate) use crate::forecast::cluster::{SimCluster as World, serving};

use crate::lifecycle::{self, LifecycleState};

/// The names of the active pods in lifecycle `state`.
pub(crate) fn in_state(world: &World, state: LifecycleState) -> Vec<String> {
    world
        .active()
        .into_iter()
        .filter(|p| lifecycle::state_of(p) == state)
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// A world with `replicas` ready pods of the first template.
pub(crate) fn settled(gd: common::api::GameDeployment) -> World {
    let mut world = World::new(gd);
    assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
    world
}

/// The user's image change: the first container's image, and the generation bumped as the API server would.
pub(crate) fn set_image(world: &mut World, image: &str) {
    world.gd.spec.template.spec.as_mut().expect("a pod spec").containers[0].image = Some(image.into());
    world.gd.metadata.generation = Some(world.gd.metadata.generation.unwrap_or(1) + 1);
}

/// Pods a test changed in place get a new resourceVersion, as the API server gives every change to a stored pod:
/// a pass derives a pod's facts again only when its resourceVersion changed ([`super::pod_facts`]).
pub(crate) fn store(world: &mut World) {
    world.send(&[]);
}
