//! The evaluation workers (`hook_operator::isolation`) with the real `hook-operator` executable: a job past its
//! deadline or its memory budget is stopped *while it runs* (the worker is killed or aborts), a fresh worker serves
//! the next job at once, and the namespace that hit the bound is served by the penalty lane only, so another
//! namespace's job does not wait behind it.

use std::time::{Duration, Instant};

use common::api::HookPhase;
use hook_operator::conditions::budget::Limits;
use hook_operator::isolation::workers::{Settings, Workers};
use hook_operator::isolation::{Job, Reading, Stopped, Verdict};

fn workers(normal: usize, timeout: Duration) -> std::sync::Arc<Workers> {
    Workers::start(Settings {
        binary: env!("CARGO_BIN_EXE_hook-operator").into(),
        workers: normal,
        limits: Limits { timeout, memory: 32 << 20 },
        max_body_bytes: 16 << 20,
        penalty: Duration::from_secs(300),
        queue_timeout: Duration::from_secs(60),
    })
    .unwrap()
}

fn job(condition: &str) -> Job {
    Job {
        reading: Reading::Web { what: "GET http://x/".into(), path: Some("{$.age}".into()) },
        success: Some(condition.into()),
        failure: None,
    }
}

const BRYAN: &[u8] = br#"{"name":"bryan","age":45}"#;
const SPIN: &str = "all(0..9999, {len(sort(split(repeat('a,', 32000), ','))) > 0})";
const GROW: &str = "len(map(0..9999, {repeat('a', 60000)})) > 0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_stopped_at_its_bound_and_a_fresh_worker_takes_the_next() {
    // 2 s: the memory job below reaches its cap in milliseconds, even on a busy CI machine.
    let pool = workers(1, Duration::from_secs(2));
    let outcome = pool.run("a", job("asInt(result) > 30 && all([1], {# > 0})"), BRYAN.to_vec()).await.unwrap();
    assert_eq!(outcome.verdict, Verdict::Judged(HookPhase::Successful));
    assert_eq!(outcome.display.as_deref(), Some("45"));

    // Unbounded, this runs for about 20 s: stopped at 2 s.
    let started = Instant::now();
    assert_eq!(pool.run("a", job(SPIN), BRYAN.to_vec()).await, Err(Stopped::Time));
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());

    // Unbounded, this allocates 600 MB: refused past 32 MiB.
    assert_eq!(pool.run("b", job(GROW), BRYAN.to_vec()).await, Err(Stopped::Memory));

    // A fresh worker serves the next job of a namespace in good standing.
    let outcome = pool.run("c", job("asInt(result) > 30 && all([1], {# > 0})"), BRYAN.to_vec()).await.unwrap();
    assert_eq!(outcome.verdict, Verdict::Judged(HookPhase::Successful));
    let stats = pool.stats();
    assert_eq!((stats.stopped_time, stats.stopped_memory, stats.evaluated), (1, 1, 2), "{stats:?}");
    assert!(pool.penalised("a") && pool.penalised("b") && !pool.penalised("c"));
    let mut registry = prometheus_client::registry::Registry::default();
    pool.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        r#"hook_operator_evaluations_total{end="time"} 1"#,
        r#"hook_operator_evaluations_total{end="memory"} 1"#,
        r#"hook_operator_evaluations_total{end="verdict"} 2"#,
        "hook_operator_evaluation_workers_started_total 3",
        "hook_operator_penalised_namespaces 2",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_at_its_bounds_waits_in_the_penalty_lane_only() {
    // Each noisy job holds the penalty lane for 5 s; the polite one must be answered while the first still runs.
    let pool = workers(1, Duration::from_secs(5));
    // The first stop moves "noisy" to the penalty lane.
    assert_eq!(pool.run("noisy", job(SPIN), BRYAN.to_vec()).await, Err(Stopped::Time));
    assert!(pool.penalised("noisy"));
    // Keep the penalty lane busy with noisy jobs, then time a polite namespace's job on the normal lane.
    let noisy: Vec<_> = (0..4)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.run("noisy", job(SPIN), BRYAN.to_vec()).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The penalty lane's worker runs at the lowest CPU priority.
    let nice = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name: state is the 3rd field, nice the 19th.
        stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().nth(16)?.parse::<i32>().ok())
    };
    let niceness: Vec<Option<i32>> = children(std::process::id()).into_iter().map(nice).collect();
    assert!(niceness.contains(&Some(19)), "a worker at nice 19 among {niceness:?}");
    let started = Instant::now();
    let polite = pool.run("polite", job("all([1, 2, 3], {# > 0}) && asInt(result) > 30"), BRYAN.to_vec()).await;
    let took = started.elapsed();
    assert_eq!(polite.unwrap().verdict, Verdict::Judged(HookPhase::Successful));
    println!("polite job next to a busy penalty lane: {took:?}");
    // Behind even one noisy job it would have waited for that job's 5 s bound: no noisy job has ended yet.
    assert!(noisy.iter().all(|handle| !handle.is_finished()), "the polite job waited behind a noisy one ({took:?})");
    // The first noisy job ends at its bound; the rest are dropped with the pool.
    let mut noisy = noisy.into_iter();
    assert_eq!(noisy.next().unwrap().await.unwrap(), Err(Stopped::Time));
    noisy.for_each(|handle| handle.abort());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_read_under_the_bounds_too() {
    let pool = workers(1, Duration::from_secs(1));
    // 200,000 numbers under one key: `{$.*[*]}` copies the path for every match.
    let numbers: Vec<String> = (0..200_000).map(|i| i.to_string()).collect();
    let body = format!(r#"{{"k":[{}]}}"#, numbers.join(",")).into_bytes();
    let wide = Job {
        reading: Reading::Web { what: "GET http://x/".into(), path: Some("{$.*[*]}".into()) },
        success: Some("len(result) > 0".into()),
        failure: None,
    };
    let outcome = pool.run("wide", wide, body).await;
    assert!(matches!(outcome, Err(Stopped::Memory | Stopped::Time)), "{outcome:?}");
    // A body over the worker's limit is refused before it is sent.
    let big = vec![b' '; (16 << 20) + 1];
    assert_eq!(pool.run("big", job("true"), big).await, Err(Stopped::Memory));
}

/// A worker's start (exec, loading the binary: slow on a loaded node) is not the job's time: the clock starts when
/// the worker says it is ready, so a polite job is never stopped, nor its namespace penalised, for a slow start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_worker_start_does_not_count_against_the_job() {
    let dir = std::env::temp_dir().join(format!("worker-slow-start-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let slow = dir.join("slow-hook-operator");
    std::fs::write(&slow, format!("#!/bin/sh\nsleep 1\nexec '{}' \"$@\"\n", env!("CARGO_BIN_EXE_hook-operator")))
        .unwrap();
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let pool = Workers::start(Settings {
        binary: slow,
        workers: 1,
        limits: Limits { timeout: Duration::from_millis(300), memory: 32 << 20 },
        max_body_bytes: 16 << 20,
        penalty: Duration::from_secs(300),
        queue_timeout: Duration::from_secs(60),
    })
    .unwrap();
    let outcome = pool.run("polite", job("asInt(result) > 30"), BRYAN.to_vec()).await;
    assert_eq!(outcome.map(|o| o.verdict), Ok(Verdict::Judged(HookPhase::Successful)));
    assert!(!pool.penalised("polite"));
    // The bound still holds for the job itself.
    assert_eq!(pool.run("noisy", job(SPIN), BRYAN.to_vec()).await, Err(Stopped::Time));
    std::fs::remove_dir_all(&dir).ok();
}

/// The children of process `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let child: u32 = entry.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            let parent = status.lines().find_map(|l| l.strip_prefix("PPid:"))?.trim().parse::<u32>().ok()?;
            (parent == pid).then_some(child)
        })
        .collect()
}

/// A worker busy with a long job ends with the operator that started it, even when the operator is SIGKILLed
/// (`PR_SET_PDEATHSIG`): no orphan keeps burning a CPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_dies_with_its_operator() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = axum::Router::new().fallback(axum::routing::get(|| async { r#"{"age":45}"# }));
    tokio::spawn(async move { axum::serve(listener, router).await });
    let dir = std::env::temp_dir().join(format!("worker-orphan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("spin.yaml");
    let template = format!(
        "apiVersion: tkex.tencent.com/v1alpha1\nkind: HookTemplate\nmetadata: {{name: spin}}\nspec:\n  metrics:\n  - \
         name: spin\n    successCondition: \"{SPIN}\"\n    provider:\n      web:\n        url: http://{addr}/\n        \
         jsonPath: '{{$.age}}'\n"
    );
    std::fs::write(&file, template).unwrap();
    let mut check = tokio::process::Command::new(env!("CARGO_BIN_EXE_hook-operator"))
        .args(["check", "-f", &file.display().to_string(), "--condition-timeout", "60s"])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = check.id().unwrap();
    let started = Instant::now();
    let worker = loop {
        if let Some(worker) = children(pid).first().copied() {
            break worker;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no evaluation worker started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Let it get busy with the job. It writes no core file when it aborts at its memory cap, and returns freed
    // memory at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let limits = std::fs::read_to_string(format!("/proc/{worker}/limits")).unwrap();
    let core = limits.lines().find(|l| l.starts_with("Max core file size")).unwrap();
    assert_eq!(core.split_whitespace().nth(4), Some("0"), "{core}");
    let environ = std::fs::read(format!("/proc/{worker}/environ")).unwrap();
    assert!(
        environ.split(|b| *b == 0).any(|v| v == b"MIMALLOC_PURGE_DELAY=0"),
        "{:?}",
        String::from_utf8_lossy(&environ)
    );
    // Then kill the operator the hard way.
    check.kill().await.unwrap();
    let killed = Instant::now();
    while std::path::Path::new(&format!("/proc/{worker}")).exists() {
        // A zombie waiting for its reaper counts as gone: it holds no memory and runs nothing.
        let state = std::fs::read_to_string(format!("/proc/{worker}/stat")).unwrap_or_default();
        if state.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')) {
            break;
        }
        assert!(killed.elapsed() < Duration::from_secs(10), "worker {worker} outlived its operator");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An HTTP server on loopback answering every request on a connection with `body` (keep-alive).
async fn answering(body: &'static str) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 1024];
                while let Ok(n @ 1..) = socket.read(&mut buffer).await {
                    request.extend_from_slice(&buffer[..n]);
                    // Requests without a body: each ends at its blank line.
                    while let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        request.drain(..end + 4);
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// The common case stays off the workers' path: with worker processes configured (the operator's default), a small
/// answer read by member names (`{$.age}`) and judged by a loop-free condition on a scalar is read and judged on the
/// measuring task, and no worker process is started for it; a condition with a predicate on the same answer goes to
/// a worker (which shows the counters count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthroughs_measurement_starts_no_worker() {
    use common::api::{Metric, MetricProvider, WebMetric};
    use hook_operator::isolation::{Evaluator, Isolation};
    use hook_operator::providers::{ProviderSettings, Providers};

    let addr = answering(r#"{"name":"bryan","male":"yes","age":45}"#).await;
    let settings = ProviderSettings {
        isolation: Isolation::Processes(env!("CARGO_BIN_EXE_hook-operator").into()),
        ..ProviderSettings::default()
    };
    let providers = Providers::new(&settings, None).unwrap();
    let Evaluator::Processes(workers) = &providers.conditions else { panic!("worker processes were configured") };
    let metric = |condition: &str| Metric {
        name: "webtest".into(),
        success_condition: Some(condition.into()),
        provider: MetricProvider {
            web: Some(WebMetric {
                url: format!("http://{addr}/"),
                json_path: Some("{$.age}".into()),
                ..WebMetric::default()
            }),
            ..MetricProvider::default()
        },
        ..Metric::default()
    };
    let cheap = metric("asInt(result) > 30");
    for _ in 0..3 {
        let taken = hook_operator::measure::take_in(&providers, "tenant", &cheap, &[]).await;
        assert_eq!(taken.measurement.phase, Some(HookPhase::Successful), "{:?}", taken.measurement);
    }
    let stats = workers.stats();
    assert_eq!((stats.spawned, stats.evaluated), (0, 0), "{stats:?}");

    let predicate = metric("all([1, 2, 3], {# > 0}) && asInt(result) > 30");
    let taken = hook_operator::measure::take_in(&providers, "tenant", &predicate, &[]).await;
    assert_eq!(taken.measurement.phase, Some(HookPhase::Successful), "{:?}", taken.measurement);
    let stats = workers.stats();
    assert_eq!((stats.spawned, stats.evaluated), (1, 1), "{stats:?}");
}
