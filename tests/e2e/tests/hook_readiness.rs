//! The hook-operator's `/readyz` means "can do its job now" (issue 46): a replica that acts (leads, or runs without
//! leader election) is Ready once its HookRun cache has synced; a standby is Ready once the API server answers its
//! Lease requests, so it can take over. Before the fix no replica ever became Ready: the readiness task waited on the
//! store's one-shot "ready" channel beside the Controller, which alone was woken.
//!
//! The chart probes `/readyz` under a PodDisruptionBudget with `minAvailable: 1`: both replicas must be Ready for a
//! drain to evict either one, and the replica left must still be Ready to carry on.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use e2e::hook::FAST_ELECTION;
use e2e::{Cluster, Operator, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a normal start may take to Ready (issue 46's bound).
const READY_WITHIN: Duration = Duration::from_secs(10);

/// The address the operator serves `/readyz` on, from its log line "serving /metrics, /healthz, /readyz".
fn metrics_address(operator: &Operator) -> Option<String> {
    let logs = operator.logs();
    let line = logs.lines().rev().find(|l| l.contains("serving /metrics"))?;
    let plain: String = e2e::gamedeployment::strip_ansi(line);
    let at = plain.find("address=")? + "address=".len();
    Some(plain[at..].split_whitespace().next()?.to_string())
}

/// The status code `/readyz` answers with, None if the server does not answer.
async fn readyz(address: &str) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// Waits until the operator (started at `since`) answers `/readyz` with 200; fails after [`READY_WITHIN`].
async fn ready_within(operator: &Operator, since: Instant, who: &str) {
    loop {
        if let Some(address) = metrics_address(operator)
            && readyz(&address).await == Some(200)
        {
            eprintln!("{who}: Ready {:?} after its start", since.elapsed());
            return;
        }
        assert!(
            since.elapsed() < READY_WITHIN,
            "{who} was not Ready within {READY_WITHIN:?} of its start\n{}",
            operator.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Without leader election the replica acts: Ready once its HookRun cache has synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_leader_election_is_ready_once_its_cache_synced() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    // `operator` builds the binaries first when they are stale: the clock starts once the process is spawned.
    let operator = cluster.operator("hook-operator", "hook-operator", &[]);
    let started = Instant::now();
    ready_within(&operator, started, "the hook-operator").await;
    assert!(operator.logs().contains("HookRun cache synced; ready"), "{}", operator.logs());
    drop(operator);
    cluster.shutdown().await;
}

/// Two replicas with leader election, as the chart runs them: the leader and the standby are both Ready within 10 s
/// of their start. The leader is killed: the standby takes over and is Ready while it leads; a new standby started
/// beside it is Ready too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_and_the_standby_are_ready_and_stay_ready_across_a_takeover() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let args = |identity: &'static str| {
        let mut args = FAST_ELECTION.to_vec();
        args.extend(["--leader-elect-identity", identity]);
        args
    };
    let mut first = cluster.operator_named("hook-operator", "hook-operator", "first", &args("first"));
    let started = Instant::now();
    ready_within(&first, started, "the first replica (leader)").await;
    wait_for("the first replica to lead", e2e::DEADLINE, || async { first_leads(&first).then_some(()) }).await;
    let second = cluster.operator_named("hook-operator", "hook-operator", "second", &args("second"));
    let started = Instant::now();
    ready_within(&second, started, "the second replica (standby)").await;
    assert!(!second.logs().contains("acquired the lease"), "the second replica stands by\n{}", second.logs());

    // The leader dies; the standby takes over (after the Lease expires) and is Ready as the leader.
    first.kill().await;
    wait_for("the standby to take over", e2e::DEADLINE, || async {
        second.logs().contains("acquired the lease").then_some(())
    })
    .await;
    wait_for("the new leader to be Ready", e2e::DEADLINE, || async {
        let address = metrics_address(&second)?;
        (readyz(&address).await == Some(200)).then_some(())
    })
    .await;
    assert!(second.logs().contains("HookRun cache synced; ready"), "{}", second.logs());
    let third = cluster.operator_named("hook-operator", "hook-operator", "third", &args("third"));
    let started = Instant::now();
    ready_within(&third, started, "a new standby").await;
    drop((first, second, third));
    cluster.shutdown().await;
}

fn first_leads(operator: &Operator) -> bool {
    operator.logs().contains("acquired the lease")
}
