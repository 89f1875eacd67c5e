//! kube-sim: a local, in-memory Kubernetes API server built for fidelity to kube-apiserver.

pub mod codec;
pub mod kubelet;
pub mod managed;
pub mod meta;
pub mod patch;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod status;
pub mod store;
pub mod validation;
