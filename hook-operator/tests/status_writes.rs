//! Status writes through a real API server (kube-sim, in this process): progress of many running runs stays within
//! `--max-status-writes-per-second` however many runs are live, and every run still gets its progress written (no
//! run starves). The budget's order and the in-memory progress are unit-tested in `dispatch::tests`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use common::api::{HookPhase, HookRun};
use kube::Api;
use kube::api::PostParams;
use kube_sim::testing::wait_for;

use crate::finished_runs::{cluster, endpoint, hookrun, options, start};
use hook_operator::controller::Options;

const DEADLINE: Duration = Duration::from_secs(60);
/// Runs measured every 100 ms (`interval: 1s` at `--interval-scale 0.1`): 120 progress changes a second.
const RUNS: usize = 12;
/// Progress writes a second allowed for the whole process.
const BUDGET: u32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_writes_stay_within_the_budget_and_every_run_gets_its_turn() {
    let (sim, client) = cluster().await;
    let url = format!("http://{}/", endpoint().await);
    // No per-run interval: only the process-wide budget holds progress back.
    let shutdown =
        start(client.clone(), Options { max_status_writes_per_second: BUDGET, ..options(Duration::ZERO, 10) });
    let runs: Api<HookRun> = Api::namespaced(client.clone(), "default");
    let before_runs = sim.audit().items.last().map_or(0, |e| e.id);
    for i in 0..RUNS {
        let run = hookrun(&format!("r{i}"), &url, "asInt(result) > 30", None, None);
        runs.create(&PostParams::default(), &run).await.unwrap();
    }
    // A run's first write (its phase) never waits for the budget.
    wait_for("every run to be Running", DEADLINE, || async {
        let list = runs.list(&Default::default()).await.ok()?;
        let running = list.items.iter().filter(|r| r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Running));
        (running.count() == RUNS).then_some(())
    })
    .await;
    let from = sim.audit().items.last().map_or(0, |e| e.id);
    let started = Instant::now();
    // Every run's progress reaches the API server (its first write had no measurement; 3 needs a progress write).
    wait_for("every run's progress to be written", DEADLINE, || async {
        let list = runs.list(&Default::default()).await.ok()?;
        let written =
            |r: &HookRun| r.status.as_ref().and_then(|s| s.metric_results.first()).is_some_and(|m| m.successful >= 3);
        (list.items.len() == RUNS && list.items.iter().all(written)).then_some(())
    })
    .await;
    let writes = sim
        .audit_since(from)
        .items
        .iter()
        .filter(|e| e.resource == "hookruns" && e.subresource.as_deref() == Some("status") && e.verb == "patch")
        .count();
    let elapsed = started.elapsed().as_secs_f64();
    // The bucket holds one token; a few writes granted before `from` may be logged after it.
    let bound = (f64::from(BUDGET) * elapsed).ceil() as usize + 1 + 3;
    eprintln!("{writes} status writes in {elapsed:.1} s for {RUNS} runs measured every 100 ms (bound {bound})");
    assert!(writes <= bound, "{writes} status writes in {elapsed:.1} s: more than the budget of {BUDGET}/s allows");
    // Every run got its turn: a progress write after its first (`Running`), counted from before the runs existed (on
    // a loaded machine some progress is written before every run is seen Running, so before `from`).
    let audit = sim.audit_since(before_runs);
    for i in 0..RUNS {
        let name = format!("r{i}");
        let own = audit
            .items
            .iter()
            .filter(|e| e.resource == "hookruns" && e.subresource.as_deref() == Some("status") && e.verb == "patch")
            .filter(|e| e.name == name)
            .count();
        assert!(own >= 2, "run {name} had its progress written after its first write: {own} status writes");
    }
    shutdown.trigger();
    sim.shutdown().await;
}

/// A new run's first write (`Running`) goes before its first measurement, whatever `--status-write-interval` says
/// (durability: a process that meets the run later knows it may have been measured, see `engine::lost`), so a run
/// that completes within the interval writes its status twice: `Running`, then its completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_writes_running_before_it_measures_and_then_its_completion() {
    const INTERVAL: Duration = Duration::from_secs(4);
    let (sim, client) = cluster().await;
    let url = format!("http://{}/", endpoint().await);
    let from = sim.audit().items.last().map_or(0, |e| e.id);
    let shutdown = start(client.clone(), Options { status_write_interval: INTERVAL, ..options(Duration::ZERO, 10) });
    let runs: Api<HookRun> = Api::namespaced(client.clone(), "default");
    // One measurement each (at once, against a local endpoint): done long before the interval is over.
    for i in 0..RUNS {
        let run = hookrun(&format!("quick{i}"), &url, "asInt(result) > 30", Some(1), None);
        runs.create(&PostParams::default(), &run).await.unwrap();
    }
    runs.create(&PostParams::default(), &hookrun("forever", &url, "asInt(result) > 30", None, None)).await.unwrap();
    wait_for("every quick run to be Successful", DEADLINE, || async {
        let list = runs.list(&Default::default()).await.ok()?;
        let done = list.items.iter().filter(|r| {
            r.metadata.name.as_deref().is_some_and(|n| n.starts_with("quick"))
                && r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Successful)
        });
        (done.count() == RUNS).then_some(())
    })
    .await;
    wait_for("the long run to be Running", DEADLINE, || async {
        let run = runs.get("forever").await.ok()?;
        (run.status?.phase == Some(HookPhase::Running)).then_some(())
    })
    .await;
    let audit = sim.audit_since(from);
    let status_writes = |name: &str| {
        audit
            .items
            .iter()
            .filter(|e| e.resource == "hookruns" && e.subresource.as_deref() == Some("status") && e.name == name)
            .count()
    };
    for i in 0..RUNS {
        assert_eq!(status_writes(&format!("quick{i}")), 2, "quick{i}: Running, then its completion");
    }
    shutdown.trigger();
    sim.shutdown().await;
}
