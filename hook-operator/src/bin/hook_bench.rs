//! `hook-bench`: drives N HookRuns through the engine (dispatcher, web provider, expression evaluation,
//! status bookkeeping) against a local HTTP server with a configurable latency, and prints measurements/s,
//! scheduling lag percentiles, CPU seconds and peak RSS. The server runs in a child process so its CPU is
//! reported separately. Not a test: a command that prints figures.
//!
//! ```text
//! cargo run --release -p hook-operator --bin hook-bench -- --runs 10000 --interval 1s --latency 100ms
//! ```
//!
//! Every run has one web metric with `interval` and no `count` (it measures until the benchmark ends), the
//! walkthrough's `jsonPath: {$.age}` and `successCondition: asInt(result) > 30`. Runs are created spread over
//! the first interval, as a workload creates them over time. The API server is not involved: status is kept
//! in memory (the same code path as `hook-operator check`).

/// mimalloc: the engine allocates many small, short-lived values per measurement. Allocations are tallied (one
/// relaxed atomic add each) so the benchmark can print allocations per measurement: an exact figure, unlike CPU time
/// on a shared machine.
#[global_allocator]
static ALLOCATOR: Tally<hook_operator::conditions::budget::Counting<mimalloc::MiMalloc>> =
    Tally(hook_operator::conditions::budget::Counting(mimalloc::MiMalloc));

/// Allocations (including reallocations) made by this process so far.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

struct Tally<A>(A);

// SAFETY: every call is passed on unchanged to the inner allocator; only a counter is added.
unsafe impl<A: std::alloc::GlobalAlloc> std::alloc::GlobalAlloc for Tally<A> {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the inner allocator's.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}

use std::net::SocketAddr;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use clap::Parser;
use common::api::{HookRun, HookRunSpec, Metric, MetricProvider, WebMetric};
use common::runtime::flags::parse_duration;
use hook_operator::dispatch::Dispatcher;
use hook_operator::local::{self, Wakers};
use hook_operator::metrics::Metrics;
use hook_operator::providers::http::hyper_baseline::PlainClient;
use hook_operator::providers::{ProviderSettings, Providers};
use hook_operator::settings::EngineSettings;
use kube::api::ObjectMeta;
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Parser, Debug)]
#[command(name = "hook-bench", about = "Benchmark of the HookRun engine against a local HTTP server")]
struct Flags {
    /// Concurrent HookRuns.
    #[arg(long, default_value_t = 10_000)]
    runs: usize,
    /// `interval` of each run's metric.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Latency of the HTTP server's answers.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    latency: Duration,
    /// Measured window, after the warm-up.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Time before the measured window (runs being created, connections opened).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    warmup: Duration,
    /// `--max-inflight-measurements` of the dispatcher (the operator's default).
    #[arg(long, default_value_t = 2000)]
    max_in_flight: usize,
    /// Idle keep-alive connections kept per host (the operator's `--web-max-idle-per-host`).
    #[arg(long, default_value_t = 1024)]
    max_idle_per_host: usize,
    /// Window of the floor measurement: the same requests at the same rate from a minimal client (one raw
    /// keep-alive socket per run, no engine), whose CPU per request is the least this machine's kernel and
    /// runtime charge for one measurement's HTTP exchange. 0 skips it.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    floor_duration: Duration,
    /// The engine's `arm_ahead` (see `EngineSettings`): measurements due within it are armed by the round that
    /// records the previous one. `0s` plans a round at each due time instead (for comparisons).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    arm_ahead: Duration,
    /// Comparison: plan every round on a copy of the run's status (its measurement history cloned per round), as
    /// before the fifth round, instead of moving the status into the round.
    #[arg(long, hide = true)]
    copy_status: bool,
    /// The runs' `successCondition`. One with a predicate (`all([1, 2, 3], {# > 0}) && asInt(result) > 30`) is
    /// judged on the evaluation workers instead of inline.
    #[arg(long, default_value = "asInt(result) > 30")]
    condition: String,
    /// Namespaces next to the benchmark's whose runs hit their bounds at every measurement (the hostile corpus'
    /// CPU and memory inputs in turn), measured at the same interval on the same evaluation workers; their own
    /// measurements are not in the figures.
    #[arg(long, default_value_t = 0)]
    noisy_namespaces: usize,
    /// Where conditions that are not cheap run: `process` (the operator's default) or `thread`.
    #[arg(long, default_value = "process", value_parser = ["process", "thread"])]
    condition_isolation: String,
    /// The client of the engine's plain-HTTP requests, or several in turn, comma-separated (`own,hyper,own,hyper`):
    /// each runs the whole engine benchmark (warm-up and window) against the same server after the same floor, and a
    /// last line compares them. `own` is the operator's; `hyper` is hyper's `client::conn::http1` with the same
    /// bounds (`src/providers/http/hyper_baseline.rs`).
    #[arg(long, default_value = "own", value_delimiter = ',')]
    plain_http: Vec<PlainClient>,
    /// Internal: run only the HTTP server on this address and print the bound address.
    #[arg(long, hide = true)]
    serve: Option<SocketAddr>,
}

const BRYAN: &str = r#"{"name":"bryan","male":"yes","age":45}"#;

fn main() -> ExitCode {
    let flags = Flags::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hook-bench: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match flags.serve {
        Some(addr) => runtime.block_on(serve(addr, flags.latency)),
        None => runtime.block_on(bench(flags)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hook-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(addr: SocketAddr, latency: Duration) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("binding {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("{bound}");
    let router = Router::new().fallback(get(move || async move {
        tokio::time::sleep(latency).await;
        ([("content-type", "application/json")], BRYAN)
    }));
    axum::serve(listener, router).await.map_err(|e| e.to_string())
}

/// CPU seconds (user + system) of a process, from /proc.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15 (1-based).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Clock ticks are 100 per second on Linux (USER_HZ).
    Some((utime + stime) / 100.0)
}

/// `VmHWM` (peak) or `VmRSS` (current) of a process, in MiB.
fn rss_mib(pid: &str, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// `hook_operator_measurement_duration_seconds{provider="web"}`: cumulative bucket counts by upper bound, sum.
struct Durations {
    buckets: Vec<(f64, u64)>,
    sum: f64,
}

fn durations(registry: &prometheus_client::registry::Registry) -> Durations {
    let mut text = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    let mut buckets = Vec::new();
    let mut sum = 0.0;
    for line in text.lines().filter(|l| l.contains("provider=\"web\"")) {
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or_default();
        if line.starts_with("hook_operator_measurement_duration_seconds_bucket") {
            let le = line.split("le=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("+Inf");
            buckets.push((le.parse().unwrap_or(f64::INFINITY), value as u64));
        } else if line.starts_with("hook_operator_measurement_duration_seconds_sum") {
            sum = value;
        }
    }
    Durations { buckets, sum }
}

impl Durations {
    fn since(&self, before: &Durations) -> Durations {
        let buckets = self
            .buckets
            .iter()
            .map(|(le, n)| {
                let was = before.buckets.iter().find(|(l, _)| l == le).map_or(0, |(_, n)| *n);
                (*le, n.saturating_sub(was))
            })
            .collect();
        Durations { buckets, sum: self.sum - before.sum }
    }

    fn count(&self) -> u64 {
        self.buckets.last().map_or(0, |(_, n)| *n)
    }

    fn mean(&self) -> f64 {
        if self.count() == 0 { 0.0 } else { self.sum / self.count() as f64 }
    }

    /// The upper bound of the first bucket holding the `q` quantile.
    fn quantile(&self, q: f64) -> f64 {
        let want = (self.count() as f64 * q).ceil() as u64;
        self.buckets.iter().find(|(_, n)| *n >= want).map_or(0.0, |(le, _)| *le)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn run(i: usize, url: &str, interval: Duration, condition: &str, namespace: &str) -> HookRun {
    HookRun {
        metadata: ObjectMeta {
            name: Some(format!("{namespace}-{i}")),
            namespace: Some(namespace.into()),
            uid: Some(format!("{namespace}-{i}")),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        spec: HookRunSpec {
            metrics: vec![Metric {
                name: "webtest".into(),
                interval: Some(common::duration::format_go(interval)),
                success_condition: Some(condition.into()),
                provider: MetricProvider {
                    web: Some(WebMetric {
                        url: url.to_string(),
                        json_path: Some("{$.age}".into()),
                        ..WebMetric::default()
                    }),
                    ..MetricProvider::default()
                },
                ..Metric::default()
            }],
            ..HookRunSpec::default()
        },
        status: None,
    }
}

/// One raw keep-alive HTTP/1.1 exchange per `interval` on its own socket, as long as the benchmark runs: the
/// least work a client can do for the engine's traffic (no parsing beyond finding the end of the answer).
async fn floor_client(addr: SocketAddr, interval: Duration, start: tokio::time::Instant, done: Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio::time::sleep_until(start).await;
    let Ok(mut socket) = tokio::net::TcpStream::connect(addr).await else { return };
    let _ = socket.set_nodelay(true);
    let request = format!("GET / HTTP/1.1\r\nhost: {addr}\r\naccept: */*\r\n\r\n");
    let mut buffer = vec![0u8; 4096];
    loop {
        if socket.write_all(request.as_bytes()).await.is_err() {
            return;
        }
        // The answer is small and has a content-length: read until the header end plus that many bytes.
        let mut filled = 0;
        loop {
            match socket.read(&mut buffer[filled..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => filled += n,
            }
            let Some(end) = buffer[..filled].windows(4).position(|w| w == b"\r\n\r\n") else { continue };
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if filled >= end + 4 + length {
                break;
            }
        }
        done.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(interval).await;
    }
}

/// The floor: `runs` minimal clients (see [`floor_client`]) for `window` after a warm-up; returns (requests/s,
/// CPU µs per request) of this process.
async fn floor(addr: SocketAddr, runs: usize, interval: Duration, warmup: Duration, window: Duration) -> (f64, f64) {
    let done = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let stagger = interval.as_secs_f64() / runs.max(1) as f64;
    let clients: Vec<_> = (0..runs)
        .map(|i| {
            let at = start + Duration::from_secs_f64(stagger * i as f64);
            tokio::spawn(floor_client(addr, interval, at, done.clone()))
        })
        .collect();
    tokio::time::sleep(warmup).await;
    let (before, cpu_before, clock) =
        (done.load(Ordering::Relaxed), cpu_seconds("self").unwrap_or_default(), Instant::now());
    tokio::time::sleep(window).await;
    let requests = done.load(Ordering::Relaxed) - before;
    let cpu = cpu_seconds("self").unwrap_or_default() - cpu_before;
    let elapsed = clock.elapsed().as_secs_f64();
    for client in clients {
        client.abort();
    }
    (requests as f64 / elapsed, if requests > 0 { cpu * 1e6 / requests as f64 } else { 0.0 })
}

async fn bench(flags: Flags) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating myself: {e}"))?;
    let mut server = tokio::process::Command::new(exe)
        .args(["--serve", "127.0.0.1:0", "--latency", &common::duration::format_go(flags.latency)])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting the server: {e}"))?;
    let server_pid = server.id().map(|p| p.to_string()).unwrap_or_default();
    let stdout = server.stdout.take().ok_or("the server has no stdout")?;
    let addr = BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the server printed nothing")?;
    let url = format!("http://{addr}/");
    let floor = if flags.floor_duration.is_zero() {
        None
    } else {
        let socket: SocketAddr = addr.parse().map_err(|e| format!("the server printed {addr:?}: {e}"))?;
        let warmup = flags.warmup.min(Duration::from_secs(3)).max(flags.interval + flags.latency);
        Some(floor(socket, flags.runs, flags.interval, warmup, flags.floor_duration).await)
    };
    let mut figures: Vec<(PlainClient, f64, f64)> = Vec::new();
    for (phase, client) in flags.plain_http.iter().enumerate() {
        if phase > 0 {
            // The previous phase's connections close and its worker processes end before the next one starts.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let (cpu, allocations) = engine(&flags, &url, &server_pid, *client, floor).await?;
        figures.push((*client, cpu, allocations));
    }
    if figures.len() > 1 {
        println!("plain-HTTP clients compared in this run (engine CPU / measurement; allocations / measurement):");
        let mean = |client: PlainClient| {
            let of: Vec<_> = figures.iter().filter(|(c, ..)| *c == client).collect();
            let n = of.len().max(1) as f64;
            (!of.is_empty()).then(|| (of.iter().map(|f| f.1).sum::<f64>() / n, of.iter().map(|f| f.2).sum::<f64>() / n))
        };
        for (client, cpu, allocations) in &figures {
            println!("  {client:<6} {cpu:.1} µs; {allocations:.1}");
        }
        if let (Some(own), Some(hyper)) = (mean(PlainClient::Own), mean(PlainClient::Hyper)) {
            println!(
                "  mean   own {:.1} µs; {:.1}   hyper {:.1} µs; {:.1}   hyper ÷ own: CPU {:.2}×, allocations {:.2}×",
                own.0,
                own.1,
                hyper.0,
                hyper.1,
                hyper.0 / own.0.max(f64::MIN_POSITIVE),
                hyper.1 / own.1.max(f64::MIN_POSITIVE)
            );
        }
    }
    let _ = server.kill().await;
    Ok(())
}

/// One run of the engine benchmark with `client` on the plain-HTTP path: prints its figures and returns (engine CPU
/// µs per measurement, allocations per measurement).
async fn engine(
    flags: &Flags,
    url: &str,
    server_pid: &str,
    client: PlainClient,
    floor: Option<(f64, f64)>,
) -> Result<(f64, f64), String> {
    let url = url.to_string();

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let recording = Arc::new(AtomicBool::new(false));
    let lags: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::with_capacity(1 << 20)));
    let recorded = Arc::new(AtomicU64::new(0));
    let observer = {
        let (recording, lags, recorded) = (recording.clone(), lags.clone(), recorded.clone());
        Arc::new(move |lag: Duration| {
            if recording.load(Ordering::Relaxed) {
                recorded.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut lags) = lags.lock() {
                    lags.push(lag.as_secs_f64());
                }
            }
        })
    };
    let isolation = if flags.condition_isolation == "thread" {
        hook_operator::isolation::Isolation::Threads
    } else {
        hook_operator::isolation::processes_or_threads(None)
    };
    let settings = ProviderSettings {
        max_idle_per_host: flags.max_idle_per_host,
        isolation,
        plain_client: client,
        ..ProviderSettings::default()
    };
    let providers = Providers::new(&settings, None).map_err(|e| e.0)?;
    let wakers = Wakers::default();
    let dispatcher = Dispatcher::with_lag_observer(
        providers.clone(),
        metrics.clone(),
        EngineSettings { arm_ahead: flags.arm_ahead, keep_recorded: false, ..EngineSettings::default() },
        flags.max_in_flight,
        wakers.wake(),
        observer,
    );

    // Noisy neighbours: their own dispatcher (no lag observer), the same providers and evaluation workers.
    let noisy = Dispatcher::new(
        providers.clone(),
        Arc::new(Metrics::default()),
        EngineSettings { keep_recorded: false, ..EngineSettings::default() },
        flags.max_in_flight,
        wakers.wake(),
    );
    let hostile = hook_operator::testing::hostile::cases()?;
    let worst: Vec<&str> = ["sort-of-split-in-a-loop", "map-of-repeats"]
        .iter()
        .filter_map(|name| hostile.iter().find(|c| c.name == *name).map(|c| c.success_condition.as_str()))
        .collect();
    let mut tasks = Vec::with_capacity(flags.runs + flags.noisy_namespaces);
    for i in 0..flags.noisy_namespaces {
        let condition = worst.get(i % worst.len().max(1)).copied().unwrap_or("true");
        let hookrun = run(i, &url, flags.interval, condition, &format!("noisy-{i}"));
        let (noisy, wakers) = (noisy.clone(), wakers.clone());
        tasks.push(tokio::spawn(async move { local::drive_with(&noisy, &wakers, hookrun, |_| {}, true).await }));
    }

    let started = Instant::now();
    let stagger = flags.interval.as_secs_f64() / flags.runs.max(1) as f64;
    let copy_status = flags.copy_status;
    for i in 0..flags.runs {
        let offset = Duration::from_secs_f64(stagger * i as f64);
        let hookrun = run(i, &url, flags.interval, &flags.condition, "bench");
        let (dispatcher, wakers) = (dispatcher.clone(), wakers.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(started + offset)).await;
            local::drive_with(&dispatcher, &wakers, hookrun, |_| {}, !copy_status).await
        }));
    }

    tokio::time::sleep(flags.warmup).await;
    let durations_before = durations(&registry);
    let cpu_before = cpu_seconds("self").unwrap_or_default();
    let allocations_before = ALLOCATIONS.load(Ordering::Relaxed);
    let server_cpu_before = cpu_seconds(server_pid).unwrap_or_default();
    let window = Instant::now();
    recording.store(true, Ordering::Relaxed);
    tokio::time::sleep(flags.duration).await;
    recording.store(false, Ordering::Relaxed);
    let durations_in_window = durations(&registry).since(&durations_before);
    let elapsed = window.elapsed().as_secs_f64();
    let cpu = cpu_seconds("self").unwrap_or_default() - cpu_before;
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations_before;
    let server_cpu = cpu_seconds(server_pid).unwrap_or_default() - server_cpu_before;
    let measurements = recorded.load(Ordering::Relaxed);
    let rss_now = rss_mib("self", "VmRSS:").unwrap_or_default();
    let open_files = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or_default();
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
    let errors: u64 = ["Error", "Failed", "Inconclusive"]
        .iter()
        .map(|&phase| {
            metrics
                .measurements
                .get_or_create(&hook_operator::metrics::MeasurementLabels { provider: "web", phase })
                .get()
        })
        .sum();
    let mut lags = lags.lock().map(|l| l.clone()).unwrap_or_default();
    lags.sort_by(f64::total_cmp);
    let ceiling = flags.runs as f64 / (flags.interval + flags.latency).as_secs_f64();
    let rate = measurements as f64 / elapsed;
    println!(
        "hook-bench: {} runs, interval {:?}, server latency {:?}, window {:.1}s after {:?} warm-up",
        flags.runs, flags.interval, flags.latency, elapsed, flags.warmup
    );
    println!("  condition                {} ({} evaluation)", flags.condition, flags.condition_isolation);
    if flags.plain_http.len() > 1 {
        println!("  plain-HTTP client        {client}");
    }
    if flags.noisy_namespaces > 0 {
        let stats = match &providers.conditions {
            hook_operator::isolation::Evaluator::Processes(workers) => format!("{:?}", workers.stats()),
            hook_operator::isolation::Evaluator::Threads(_) => "threads".into(),
        };
        println!(
            "  noisy namespaces         {} at their bounds every measurement (workers: {stats})",
            flags.noisy_namespaces
        );
    }
    println!(
        "  measurements started     {measurements} ({rate:.0}/s; ceiling runs/(interval+latency) = {ceiling:.0}/s, {:.1}% of it)",
        100.0 * rate / ceiling
    );
    println!("  non-Successful (all time) {errors}");
    if flags.copy_status {
        println!("  (--copy-status: every round planned on a copy of the status, as before the fifth round)");
    }
    println!(
        "  scheduling lag           p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&lags, 0.50) * 1e3,
        percentile(&lags, 0.99) * 1e3,
        lags.last().copied().unwrap_or_default() * 1e3
    );
    println!(
        "  measurement time         mean {:.2} ms, p99 <= {:.0} ms (provider answer + reading + conditions, from the \
         duration histogram's buckets)",
        durations_in_window.mean() * 1e3,
        durations_in_window.quantile(0.99) * 1e3
    );
    println!("  engine CPU               {cpu:.2} s in {elapsed:.1} s ({:.0}% of one core)", 100.0 * cpu / elapsed);
    println!(
        "  engine CPU / measurement {:.1} µs (engine CPU time / measurements started in the window)",
        if measurements > 0 { cpu * 1e6 / measurements as f64 } else { 0.0 }
    );
    println!(
        "  allocations / measurement {:.1} (allocations and reallocations of the engine process in the window / \
         measurements started in it)",
        if measurements > 0 { allocations as f64 / measurements as f64 } else { 0.0 }
    );
    println!("  server CPU               {server_cpu:.2} s (separate process)");
    let per_measurement = if measurements > 0 { cpu * 1e6 / measurements as f64 } else { 0.0 };
    if let Some((rate, per_request)) = floor {
        println!(
            "  floor (raw sockets)      {per_request:.1} µs CPU per request at {rate:.0} requests/s: the engine costs {:.1}× the \
             least a client pays here for the same exchange",
            if per_request > 0.0 { per_measurement / per_request } else { 0.0 }
        );
    }
    println!(
        "  engine RSS               peak {:.1} MiB, at the end {rss_now:.1} MiB ({open_files} open file descriptors)",
        rss_mib("self", "VmHWM:").unwrap_or_default()
    );
    let allocations = if measurements > 0 { allocations as f64 / measurements as f64 } else { 0.0 };
    Ok((per_measurement, allocations))
}
