//! Three hook-operator replicas with `--shards 6` split the HookRuns between them; one is SIGKILLed while its runs
//! are measuring. Every run completes; the endpoint (a test HTTP server counting requests per run) never sees two
//! requests of one run at the same time (no two replicas measure a run at once), the runs of the surviving
//! replicas' shards are measured exactly `count` times, and the killed replica's shards are taken over once their
//! Leases expire.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::api::{HookPhase, HookRun};
use e2e::{Cluster, DEADLINE, FAST_LEASES, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;

const SHARDS: u32 = 6;
const RUNS: usize = 36;
const COUNT: i32 = 6;
const LEASE: Duration = Duration::from_secs(3);

/// Per run: (start, end) of every request, in arrival order.
type Requests = Arc<Mutex<HashMap<String, Vec<(Instant, Instant)>>>>;

/// A keep-alive HTTP/1.1 server answering `GET /run/<name>` with `{"age":45}` after 50 ms, recording each request.
async fn endpoint(requests: Requests) -> std::net::SocketAddr {
    e2e::hook::serve_http(move |path| {
        let requests = requests.clone();
        Box::pin(async move {
            let started = Instant::now();
            tokio::time::sleep(Duration::from_millis(50)).await;
            let name = path.trim_start_matches("/run/").to_string();
            requests.lock().unwrap().entry(name).or_default().push((started, Instant::now()));
            Some(("200 OK", br#"{"age":45}"#.to_vec()))
        })
    })
    .await
}

/// Holder of each shard Lease.
async fn holders(leases: &Api<Lease>) -> BTreeMap<u32, String> {
    let mut holders = BTreeMap::new();
    for i in 0..SHARDS {
        if let Some(holder) = leases
            .get_opt(&format!("hook-operator-shard-{i}"))
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty())
        {
            holders.insert(i, holder);
        }
    }
    holders
}

fn per_replica(holders: &BTreeMap<u32, String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for holder in holders.values() {
        *counts.entry(holder.clone()).or_default() += 1;
    }
    counts
}

/// FNV-1a of the uid modulo the shard count: the operator's `shards::shard_of`.
fn shard_of(uid: &str) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in uid.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(SHARDS)) as u32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_the_runs_and_a_killed_replicas_shards_are_taken_over() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let requests: Requests = Arc::default();
    let addr = endpoint(requests.clone()).await;
    let shards = SHARDS.to_string();
    let replica = |identity: &str| {
        let mut args = vec!["--shards", &shards, "--leader-elect-identity", identity];
        args.extend_from_slice(FAST_LEASES);
        args.extend(["--interval-scale", "0.25", "--status-write-interval", "0s"]);
        cluster.operator("hook-operator", "hook-operator", &args)
    };
    let mut replicas = vec![replica("r0"), replica("r1"), replica("r2")];
    let leases: Api<Lease> = Api::namespaced(cluster.client(), "default");
    wait_for("each replica to hold its fair share (2 of 6 shards)", DEADLINE, || async {
        let counts = per_replica(&holders(&leases).await);
        (counts.len() == 3 && counts.values().all(|&c| c == 2)).then_some(())
    })
    .await;

    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    let mut uids = HashMap::new();
    for i in 0..RUNS {
        let name = format!("run-{i}");
        let created = runs
            .create(
                &PostParams::default(),
                &e2e::hook::age_run(&name, format!("http://{addr}/run/{name}"), COUNT, "2s"),
            )
            .await
            .unwrap();
        uids.insert(name, created.metadata.uid.unwrap());
    }
    // Kill r0 while every run is measuring (each needs 6 measurements 0.5 s apart).
    wait_for("every run to have measured once", DEADLINE, || async {
        let guard = requests.lock().unwrap();
        (guard.len() == RUNS).then_some(())
    })
    .await;
    let before = holders(&leases).await;
    let killed_shards: BTreeSet<u32> = before.iter().filter(|(_, h)| *h == "r0").map(|(s, _)| *s).collect();
    assert_eq!(killed_shards.len(), 2, "{before:?}");
    replicas[0].kill().await;
    let killed = Instant::now();

    let taken_over = wait_for("the killed replica's shards to be taken over", DEADLINE, || async {
        let now = holders(&leases).await;
        killed_shards.iter().all(|s| now.get(s).is_some_and(|h| h != "r0")).then(|| killed.elapsed())
    })
    .await;
    eprintln!(
        "the killed replica's shards were taken over {taken_over:?} after the SIGKILL (lease duration {LEASE:?})"
    );

    wait_for("every run to complete", DEADLINE, || async {
        let list = runs.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .all(|r| r.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p.is_completed()))
            .then_some(())
    })
    .await;
    wait_for("the survivors to share the shards (3 each)", DEADLINE, || async {
        let counts = per_replica(&holders(&leases).await);
        (counts.len() == 2 && counts.values().all(|&c| c == 3)).then_some(())
    })
    .await;

    let list = runs.list(&Default::default()).await.unwrap();
    let requests = requests.lock().unwrap().clone();
    let mut repeated = Vec::new();
    for run in &list.items {
        let name = run.metadata.name.clone().unwrap();
        let status = run.status.as_ref().unwrap();
        assert_eq!(status.phase, Some(HookPhase::Successful), "{name}: {:?}", status.message);
        let metric = &status.metric_results[0];
        assert_eq!(metric.successful, COUNT, "{name}: exactly count measurements recorded");
        let seen = &requests[&name];
        // Never two requests of one run at the same time: no two replicas measured it at once.
        for pair in seen.windows(2) {
            assert!(pair[1].0 >= pair[0].1, "{name}: overlapping requests {seen:?}");
        }
        let shard = shard_of(&uids[&name]);
        if killed_shards.contains(&shard) {
            // A request in flight at the SIGKILL was never recorded; the new owner takes that slot again. A new owner
            // that meets the run with a measurement already due retakes it, and a retake that succeeds is recorded
            // as an Error (a lost outcome never counts as a success: engine::lost), so each Error is one more request.
            assert!(seen.len() as i32 <= COUNT + 1 + metric.error, "{name}: {} requests, {metric:?}", seen.len());
            if seen.len() as i32 > COUNT {
                repeated.push(name.clone());
            }
        } else {
            assert_eq!(seen.len() as i32, COUNT, "{name} (a surviving replica's shard): each slot measured once");
        }
    }
    eprintln!("runs of the killed replica whose in-flight slot was measured again: {repeated:?}");
    assert!(replicas[1].is_running() && replicas[2].is_running());
    drop(replicas);
    cluster.shutdown().await;
}
