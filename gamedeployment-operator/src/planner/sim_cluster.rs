//! The simulated cluster of the planner tests: [`crate::forecast::cluster::SimCluster`] (the one `kubectl gd plan`
//! forecasts on), under the name these tests know it by.

pub(crate) use crate::forecast::cluster::{SimCluster as World, serving};
