//! Every end-to-end suite in one test binary: each file under `tests/` is a module here. One binary instead of one
//! per file keeps the test build small (each binary statically links kube, kube-sim and the TLS stack: ~170 MB
//! apiece) and links once instead of 32 times. Run one suite with its module name as the filter:
//! `cargo test -p e2e --test suites -- faults::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

// kube-sim runs in this process and allocates per request and watch event: mimalloc, as fleet-bench and the
// operators use, instead of the system allocator (about a quarter of kube-sim's CPU in a perf profile).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod takeover_support;
mod walkthrough_support;

mod bcs_takeover;
mod book_blocks;
mod canary_rollback;
mod canary_steps;
mod chart;
mod chart_observability;
mod chart_pods;
mod chart_rbac;
mod chart_security;
mod cloneset_availability;
mod cloneset_rounding;
mod cloneset_surge;
mod cloneset_takeover;
mod cloneset_update_types;
mod delete_pod_skips_hook;
mod dependencies;
mod dependency_direction;
mod events_per_pod;
mod examples_complete;
mod explain;
mod faults;
mod gamedeployment_leader;
mod gamedeployment_lifecycle;
mod gamedeployment_metrics;
mod gamedeployment_restart;
mod gamedeployment_rollout;
mod gate_cluster_operations;
mod gate_integrity;
mod gate_signed_runs;
mod gitops_clean;
mod hints;
mod hook_admission;
mod hook_deadlines;
mod hook_durability;
mod hook_lost_outcomes;
mod hook_readiness;
mod hook_shards;
mod hook_template_freshness;
mod hook_terminate;
mod hookrun_templates;
mod hooks_inplace;
mod hooks_template_missing;
mod hostile_hooks;
mod inplace_surge;
mod kubectl_gd;
mod kubectl_gd_verdicts;
mod leader_lease_crates;
mod leader_partition;
mod lifecycle_handlers;
mod observe;
mod own_pods;
mod plan;
mod pod_gate_webhook;
mod printer_columns;
mod progress_deadline;
mod pvc_templates;
mod race_to_empty;
mod sandbox;
mod server_state;
mod server_state_self_label;
mod server_state_surge;
mod shadow_hooks;
mod test_layout;
mod update_order;
mod walkthrough_hooks;
mod webhook_connection_bounds;
mod writes_per_pod;
