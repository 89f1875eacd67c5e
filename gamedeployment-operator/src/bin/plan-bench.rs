//! `plan-bench`: the operator's planner alone, on a simulated fleet (`forecast::cluster`, no API server, no
//! network), so its cost per pod and pass is measured apart from the simulator and the machine's other load. A
//! command that prints figures, not a test.
//!
//! ```text
//! cargo run --release -p gamedeployment-operator --bin plan-bench -- --pods 5000 --passes 20
//! ```
//!
//! It settles a GameDeployment of `--pods` pods (InplaceUpdate, maxUnavailable 20 %, a preInplace hook of 3
//! measurements 1 s apart), then prints, for `--passes` passes with nothing to do, and for every pass of a hooked
//! in-place roll to a new image (the simulated hook-operator's runs succeeding as their schedule says, a simulated
//! second between passes), for the planner alone (not the simulated cluster):
//! It also prints, for `--passes` passes each, a full pass (no pod facts cached, as a process's first pass) and a
//! pass with one pod changed since the pass before (the other pods' facts remembered: [`FactsCache`]).
//! For each:
//! - CPU time of this thread per pod and pass (the scheduler's count: other processes' load does not count);
//! - heap allocations per pod and pass, counted by this binary's allocator (an exact figure, the same on any
//!   machine for the same code).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::api::{GameDeployment, HookTemplate};
use gamedeployment_operator::forecast::cluster::SimCluster;
use gamedeployment_operator::forecast::hook_operator::SimHookOperator;
use gamedeployment_operator::forecast::{Assume, Timing};
use gamedeployment_operator::hookrun_keys::Keyring;
use gamedeployment_operator::{FactsCache, Observed, Plan, plan_with_facts};
use serde_json::json;

/// mimalloc, as the operator, with every allocation counted.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;

// SAFETY: every call is forwarded unchanged to mimalloc; the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { INNER.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { INNER.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { INNER.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { INNER.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// CPU time this thread has used (the scheduler's own count, in nanoseconds: `/proc/thread-self/schedstat`);
/// zero where it cannot be read.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(stat.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0))
}

/// CPU time and allocations of `f`.
fn measure<T>(f: impl FnOnce() -> T) -> (T, Duration, u64) {
    let (cpu, allocations) = (thread_cpu(), ALLOCATIONS.load(Ordering::Relaxed));
    let out = f();
    (out, thread_cpu() - cpu, ALLOCATIONS.load(Ordering::Relaxed) - allocations)
}

fn fleet(pods: usize) -> Result<GameDeployment, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "tkex.tencent.com/v1alpha1",
        "kind": "GameDeployment",
        "metadata": {"name": "bench", "namespace": "default", "uid": "bench-uid", "generation": 1},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {"containers": [{"name": "game", "image": "game:1"}]}
            },
            "updateStrategy": {"type": "InplaceUpdate", "maxUnavailable": "20%",
                               "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}},
            "preInplaceUpdateStrategy": {"hook": {"templateName": "probe"}}
        }
    }))
}

fn probe_template() -> Result<HookTemplate, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "tkex.tencent.com/v1alpha1",
        "kind": "HookTemplate",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {"metrics": [{"name": "probe", "count": 3, "interval": "1s",
                              "provider": {"web": {"url": "http://127.0.0.1:9091/", "jsonPath": "{$.age}"}}}]}
    }))
}

/// Passes, a simulated second apart, until one plans nothing and every pod is ready and past `minReadySeconds`;
/// the number of passes.
fn settle(cluster: &mut SimCluster, max: usize) -> Option<usize> {
    for i in 0..max {
        cluster.tick(1);
        let plan = cluster.plan();
        let quiet = plan.actions.is_empty() && plan.requeue_after.is_none();
        cluster.finish_pass(&plan);
        if quiet && cluster.pods.iter().all(|p| common::pod::is_ready(p) || !common::pod::is_active(p)) {
            return Some(i + 1);
        }
    }
    None
}

/// A pass over the cluster as it is, with the pod facts of `facts` (an empty cache: every pod's derived again).
fn plan_with(cluster: &SimCluster, facts: &FactsCache) -> Plan {
    let observed = Observed {
        gd: &cluster.gd,
        pods: cluster.pods.iter().collect(),
        revisions: cluster.revisions.iter().collect(),
        node_costs: &cluster.node_costs,
        now: gamedeployment_operator::forecast::cluster::ts(cluster.now),
        seed: cluster.seed,
        hook_runs: &cluster.hook_runs,
        hook_templates: &cluster.hook_templates,
        claims: cluster.claims.iter().collect(),
        keys: &cluster.keys,
    };
    plan_with_facts(&observed, facts)
}

/// `--passes` pairs of passes over the settled fleet: one from scratch (an empty facts cache: every pod's facts
/// derived, as the first pass of a process), then one pod changed (an annotation no decision reads, so the pod gets
/// a new resourceVersion and nothing is planned) and a pass with the facts of the passes before (only that pod's
/// derived again).
fn full_and_one_pod_passes(cluster: &mut SimCluster, pods: usize, passes: usize) -> Result<(), String> {
    let warm = FactsCache::default();
    plan_with(cluster, &warm);
    let (mut full, mut one) = ((Duration::ZERO, 0), (Duration::ZERO, 0));
    for i in 0..passes {
        cluster.tick(1);
        let (plan, cpu, allocations) = measure(|| plan_with(cluster, &FactsCache::default()));
        if let Some(action) = plan.actions.first() {
            return Err(format!("a settled fleet planned an action from scratch: {action:?}"));
        }
        full = (full.0 + cpu, full.1 + allocations);
        let count = cluster.pods.len().max(1);
        if let Some(pod) = cluster.pods.get_mut(i % count) {
            pod.metadata.annotations.get_or_insert_with(Default::default).insert("bench/touched".into(), i.to_string());
        }
        cluster.tick(0);
        let (plan, cpu, allocations) = measure(|| plan_with(cluster, &warm));
        if let Some(action) = plan.actions.first() {
            return Err(format!("a settled fleet planned an action for one changed pod: {action:?}"));
        }
        one = (one.0 + cpu, one.1 + allocations);
    }
    for (what, (cpu, allocations)) in [("full pass (no facts cached)", full), ("pass with one pod changed", one)] {
        println!(
            "{what}: {:.2} µs and {:.1} allocations per pod ({passes} passes: {:.1} ms each)",
            per(cpu.as_secs_f64() * 1e6, pods, passes),
            per(allocations as f64, pods, passes),
            cpu.as_secs_f64() * 1e3 / passes.max(1) as f64,
        );
    }
    Ok(())
}

fn per(total: f64, pods: usize, passes: usize) -> f64 {
    total / (pods.max(1) * passes.max(1)) as f64
}

fn main() -> Result<(), String> {
    let mut pods = 1000usize;
    let mut passes = 20usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--pods" => pods = value()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--passes" => passes = value()?.parse().map_err(|e| format!("--passes: {e}"))?,
            "-h" | "--help" => {
                println!("plan-bench [--pods N (1000)] [--passes K (20)]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let (keys, _) = Keyring::generate().map_err(|e| e.to_string())?;
    let mut cluster = SimCluster::with_keys(fleet(pods).map_err(|e| e.to_string())?, Arc::new(keys));
    cluster.hook_templates.push(probe_template().map_err(|e| e.to_string())?);
    let settled = settle(&mut cluster, 10_000).ok_or("the fleet did not settle in 10,000 passes")?;
    println!("plan-bench: {pods} pods settled in {settled} passes");

    let (mut cpu, mut allocations) = (Duration::ZERO, 0);
    for _ in 0..passes {
        cluster.tick(1);
        let (plan, pass_cpu, pass_allocations) = measure(|| cluster.plan());
        if let Some(action) = plan.actions.first() {
            return Err(format!("a settled fleet planned an action: {action:?}"));
        }
        (cpu, allocations) = (cpu + pass_cpu, allocations + pass_allocations);
    }
    println!(
        "pass with nothing to do: {:.2} µs and {:.1} allocations per pod ({passes} passes: {:.1} ms each)",
        per(cpu.as_secs_f64() * 1e6, pods, passes),
        per(allocations as f64, pods, passes),
        cpu.as_secs_f64() * 1e3 / passes.max(1) as f64,
    );

    full_and_one_pod_passes(&mut cluster, pods, passes)?;

    if let Some(container) = cluster.gd.spec.template.spec.as_mut().and_then(|s| s.containers.first_mut()) {
        container.image = Some("game:2".into());
    }
    cluster.gd.metadata.generation = Some(cluster.gd.metadata.generation.unwrap_or(1) + 1);
    let mut hooks = SimHookOperator::new(Assume::Succeed, Timing::default());
    let (mut cpu, mut allocations, mut rolled) = (Duration::ZERO, 0, 0);
    for roll_passes in 1..=10_000usize {
        hooks.step(&mut cluster.hook_runs, cluster.now);
        let (plan, pass_cpu, pass_allocations) = measure(|| cluster.plan());
        (cpu, allocations) = (cpu + pass_cpu, allocations + pass_allocations);
        let quiet = plan.actions.is_empty();
        cluster.finish_pass(&plan);
        let status = plan.status;
        if quiet && status.updated_ready_replicas == i32::try_from(pods).unwrap_or(i32::MAX) {
            rolled = roll_passes;
            break;
        }
        cluster.tick(1);
    }
    if rolled == 0 {
        return Err("the roll did not complete in 10,000 passes".into());
    }
    println!(
        "hooked in-place roll: {rolled} passes, {:.2} µs and {:.1} allocations per pod and pass ({:.1} ms per pass, \
         {:.2} ms of planner CPU per pod rolled)",
        per(cpu.as_secs_f64() * 1e6, pods, rolled),
        per(allocations as f64, pods, rolled),
        cpu.as_secs_f64() * 1e3 / rolled as f64,
        cpu.as_secs_f64() * 1e3 / pods.max(1) as f64,
    );
    Ok(())
}
