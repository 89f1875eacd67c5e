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
