//! Shared by the gamedeployment-operator and the hook-operator: the `tkex.tencent.com/v1alpha1` API types and
//! the pure logic both need (int-or-percent arithmetic, label/annotation keys, pod predicates, durations).

pub mod api;
pub mod cached_pod;
pub mod crd;
pub mod duration;
pub mod hint;
pub mod hookrun;
pub mod intstr;
pub mod keys;
pub mod lean_meta;
pub mod pod;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod server_state;
