//! kube-sim API conformance tests driven through kube-rs and raw HTTP.

#![recursion_limit = "256"]

mod audit;
mod components;
mod crd;
mod crud;
mod differences;
mod encoding;
mod eviction;
mod faults;
mod gc;
mod list;
mod patch;
mod policy;
mod rbac;
mod support;
mod volumes;
mod watch;
