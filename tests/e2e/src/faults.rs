//! The walkthrough under faults, shared by the CI-sized test (`tests/faults.rs`) and the soak command
//! (`fault-soak`): both operators run as their own kube-sim users, and kube-sim injects, for those users only,
//! about 5 % API errors (500, `429` with `Retry-After`, `409` on writes, writes carried out but answered `504`),
//! cuts every watch after a few seconds and answers some resumed watches `410 Gone`; a seeded killer SIGKILLs
//! either operator at random moments and starts it again. Everyone else (the test's own client, `kubectl`, the
//! gate checker) is the admin, whom no rule touches, so what the test observes is the cluster's real history.
//!
//! One round replays, on a GameDeployment with a pre-delete and a pre-inplace hook:
//! 1. scale-in 6 → 5 through a pre-delete HookRun;
//! 2. an in-place image update with `partition: 2`, `maxUnavailable: 2` (two batches, a pre-inplace run per pod);
//! 3. a failing hook: scale-in 5 → 4 holds the pod with a `Failed` condition, both operators are killed while it
//!    is held, the template is fixed and `retry: true` is set, and the pod goes;
//! 4. canary steps `[partition 2, pause, partition 0]` with a new image: the rollout stops at the pause step
//!    (`currentStepIndex` 1, `paused`), both operators are killed while it is paused, then it is resumed and
//!    completes.
//!
//! What a round checks (see [`RoundReport::problems`]): the strict gate invariant ([`crate::gate`]); nothing is
//! lost, judged on every version of the GameDeployment the admin's watch saw — the `Failed` hook condition stays
//! until the retry is asked for, the retry request is acted on (a new run, the pod deleted, `retry` set back to
//! `false` once), the canary step index never goes back within a revision, the pause step keeps
//! `currentStepIndex` and `paused` until the resume; and each phase converges (generous deadlines; a phase that
//! does not converge panics with what it waited for).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::api::{GameDeployment, HookPhase, PauseReason};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube_sim::{FaultConfig, FaultCounts, FaultRule};
use serde_json::json;

use crate::gamedeployment::{apply, image, is_ready};
use crate::gate::{GateChecker, GateReport};
use crate::{Cluster, FAST_ELECTION, Operator, wait_for};
use kube_sim::testing::eventually_within;

const NAME: &str = "faulty";
const NS: &str = "default";
/// The kube-sim users the operators run as; the fault rules name them.
pub const GD_USER: &str = "gamedeployment-operator";
pub const HOOK_USER: &str = "hook-operator";
/// Deadline of one phase: generous, because operators are killed and requests fail all along.
const PHASE_DEADLINE: Duration = Duration::from_secs(180);

/// A small seeded generator (SplitMix64), so a failing round can be replayed from its printed seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A duration uniformly in `[low, high]`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high.saturating_sub(low).as_millis() as u64;
        low + Duration::from_millis(if span == 0 { 0 } else { self.next_u64() % (span + 1) })
    }
}

/// A seed from the clock, for runs that do not name one.
pub fn fresh_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// How hard one round is.
#[derive(Debug, Clone)]
pub struct Settings {
    pub seed: u64,
    /// Probability that an operator's request fails with `500` (the other kinds are fixed fractions of it).
    pub error_rate: f64,
    /// An operator is killed after a pause drawn from this range, then started again after a pause in
    /// `restart_after`.
    pub kill_every: (Duration, Duration),
    pub restart_after: (Duration, Duration),
    /// Every operator watch is cut after this long.
    pub watch_drop_after: Duration,
    /// Probability that a resumed operator watch is answered `410 Gone`.
    pub watch_expire_rate: f64,
}

impl Settings {
    /// The CI-sized round: about 5 % errors in all, a kill every 4–12 s.
    pub fn ci(seed: u64) -> Self {
        Self {
            seed,
            error_rate: 0.03,
            kill_every: (Duration::from_secs(4), Duration::from_secs(12)),
            restart_after: (Duration::from_millis(0), Duration::from_millis(1500)),
            watch_drop_after: Duration::from_secs(5),
            watch_expire_rate: 0.25,
        }
    }

    /// The fault rules, scoped to the operators' users: `error_rate` of 500s, a third of that as `429` with
    /// `Retry-After: 1` and as writes answered `504` after they happened, two thirds as `409` on updates and
    /// patches; every watch cut after `watch_drop_after`, a share of resumed watches answered `410 Gone`.
    pub fn rules(&self) -> FaultConfig {
        let users = vec![GD_USER.to_string(), HOOK_USER.to_string()];
        let rule = |r: FaultRule| FaultRule { users: users.clone(), ..r };
        FaultConfig {
            rules: vec![
                rule(FaultRule { error_rate: self.error_rate, error_code: Some(500), ..Default::default() }),
                rule(FaultRule { error_rate: self.error_rate / 3.0, error_code: Some(429), ..Default::default() }),
                rule(FaultRule {
                    conflict_rate: self.error_rate * 2.0 / 3.0,
                    timeout_rate: self.error_rate / 3.0,
                    ..Default::default()
                }),
                rule(FaultRule {
                    verbs: vec!["watch".into()],
                    watch_drop_after_ms: Some(self.watch_drop_after.as_millis() as u64),
                    watch_expire_rate: self.watch_expire_rate,
                    ..Default::default()
                }),
            ],
        }
    }
}

/// What one round did and found.
#[derive(Debug, Default)]
pub struct RoundReport {
    pub seed: u64,
    /// Convergence time of each phase, in order.
    pub phases: Vec<(&'static str, Duration)>,
    /// From turning the faults on until the last phase converged.
    pub total: Duration,
    /// Cluster, operators (built first if stale) and the first 6 ready pods, before any fault.
    pub setup: Duration,
    /// Faults kube-sim injected.
    pub faults: FaultCounts,
    /// SIGKILLs per operator.
    pub kills: BTreeMap<&'static str, u32>,
    /// The operators' writes as the audit log recorded them, by answer code.
    pub writes_by_code: BTreeMap<u16, u64>,
    /// Failed operator writes followed by a successful write of the same object (the operator tried again).
    pub retried_writes: u64,
    pub gate: GateReport,
    /// State that was lost or went backwards (empty when the round is clean).
    pub lost: Vec<String>,
}

impl RoundReport {
    /// Every invariant violation of the round.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self.gate.violations.iter().map(|v| format!("gate: {v}")).collect();
        out.extend(self.lost.iter().map(|l| format!("lost: {l}")));
        if self.gate.gated_deletions < 2 || self.gate.gated_updates < 3 {
            out.push(format!(
                "the gate checker saw too few gated changes ({} deletions, {} updates): it did not watch the story",
                self.gate.gated_deletions, self.gate.gated_updates
            ));
        }
        out
    }

    /// One paragraph for logs.
    pub fn summary(&self) -> String {
        let phases: Vec<String> = self.phases.iter().map(|(p, d)| format!("{p} {:.1}s", d.as_secs_f64())).collect();
        let f = &self.faults;
        let errors: Vec<String> = f.errors.iter().map(|(code, n)| format!("{code}×{n}")).collect();
        let writes: Vec<String> = self.writes_by_code.iter().map(|(code, n)| format!("{code}×{n}")).collect();
        let kills: Vec<String> = self.kills.iter().map(|(who, n)| format!("{who} {n}")).collect();
        format!(
            "seed {seed}: converged in {total:.1}s under faults ({phases}; setup {setup:.1}s)\n  injected: errors [{errors}], 409×{conflicts}, \
             504-after-write×{timeouts}, watches cut {cut}, watches expired (410) {expired}\n  operator writes by \
             code [{writes}], retried after a failure {retried}; SIGKILLs: {kills}\n  gate: {gd} gated deletions, {gu} \
             gated updates, {violations} violations; lost state: {lost}",
            seed = self.seed,
            total = self.total.as_secs_f64(),
            setup = self.setup.as_secs_f64(),
            phases = phases.join(", "),
            errors = errors.join(" "),
            conflicts = f.conflicts,
            timeouts = f.timeouts_after_write,
            cut = f.watches_cut,
            expired = f.watches_expired,
            writes = writes.join(" "),
            retried = self.retried_writes,
            kills = kills.join(", "),
            gd = self.gate.gated_deletions,
            gu = self.gate.gated_updates,
            violations = self.gate.violations.len(),
            lost = self.lost.len(),
        )
    }
}

fn template(fail: bool) -> String {
    let condition = if fail { "asInt(result) < 30" } else { "asInt(result) > 30" };
    crate::manifests::load!("hooktemplate-gate", condition = condition)
}

fn gamedeployment() -> String {
    crate::manifests::load!("gamedeployment-faulty", name = NAME)
}

type Shared = Arc<tokio::sync::Mutex<Operator>>;

/// Kills one of the operators at seeded random moments until told to stop.
struct Killer {
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<BTreeMap<&'static str, u32>>>,
}

impl Drop for Killer {
    /// A round that panicked must not leave a task restarting operators.
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl Killer {
    fn start(operators: Vec<(&'static str, Shared)>, settings: &Settings) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut rng = Rng::new(settings.seed ^ 0x5EED);
        let (every, restart) = (settings.kill_every, settings.restart_after);
        let task = tokio::spawn(async move {
            let mut kills = BTreeMap::new();
            loop {
                let pause = rng.between(every.0, every.1);
                let until = tokio::time::Instant::now() + pause;
                while tokio::time::Instant::now() < until {
                    if flag.load(Ordering::SeqCst) {
                        return kills;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let (who, op) = &operators[(rng.next_u64() % operators.len() as u64) as usize];
                let down = rng.between(restart.0, restart.1);
                let mut op = op.lock().await;
                op.kill().await;
                *kills.entry(*who).or_insert(0) += 1;
                tokio::time::sleep(down).await;
                op.restart().await;
            }
        });
        Self { stop, task: Some(task) }
    }

    async fn stop(mut self) -> BTreeMap<&'static str, u32> {
        self.stop.store(true, Ordering::SeqCst);
        match self.task.take() {
            Some(task) => task.await.unwrap_or_default(),
            None => BTreeMap::new(),
        }
    }
}

/// Every version of the GameDeployment, as the admin's watch delivered it.
struct History {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<Mutex<Vec<GameDeployment>>>,
}

fn rv_of(gd: &GameDeployment) -> u64 {
    gd.metadata.resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0)
}

impl History {
    fn start(client: kube::Client) -> Self {
        let seen: Arc<Mutex<Vec<GameDeployment>>> = Arc::default();
        let out = seen.clone();
        let api: Api<GameDeployment> = Api::namespaced(client, NS);
        let task = tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default().fields(&format!("metadata.name={NAME}"))).boxed();
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(gd) | watcher::Event::InitApply(gd)) = event {
                    out.lock().unwrap_or_else(|p| p.into_inner()).push(gd);
                }
            }
        });
        Self { task, seen }
    }

    /// Versions in commit order with resourceVersion in `(from, to]`.
    fn between(&self, from: u64, to: u64) -> Vec<GameDeployment> {
        let mut all: Vec<GameDeployment> = self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        all.sort_by_key(rv_of);
        all.dedup_by_key(|g| rv_of(g));
        all.into_iter().filter(|g| rv_of(g) > from && rv_of(g) <= to).collect()
    }

    fn stop(self) -> Vec<GameDeployment> {
        self.between(0, u64::MAX)
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lifecycle(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get(common::keys::LIFECYCLE_STATE).map(String::as_str)
}

async fn live_pods(cluster: &Cluster) -> Vec<Pod> {
    crate::gamedeployment::pods(cluster, NAME)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// The GameDeployment settled: status for the current generation, `replicas` live pods all ready and `Normal`,
/// `updated` of them on `updated_image` (when given), and `check` on the object. On timeout it panics with what it
/// last saw (the status and each live pod) and prints the tail of both operators' logs.
async fn converge(
    cluster: &Cluster,
    what: &str,
    replicas: usize,
    updated: Option<(&str, usize)>,
    check: impl Fn(&GameDeployment) -> bool,
) -> GameDeployment {
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    let settled = eventually_within(what, PHASE_DEADLINE, || async {
        let gd = api.get(NAME).await?;
        let status = gd.status.clone().unwrap_or_default();
        let pods = live_pods(cluster).await;
        let current = status.observed_generation == gd.metadata.generation;
        let settled = pods.len() == replicas
            && status.replicas as usize == replicas
            && status.ready_replicas as usize == replicas
            && pods.iter().all(|p| is_ready(p) && lifecycle(p) == Some("Normal"));
        let updated_ok = updated.is_none_or(|(want, n)| {
            pods.iter().filter(|p| image(p) == Some(want)).count() == n && status.updated_replicas as usize == n
        });
        if current && settled && updated_ok && check(&gd) {
            return Ok(Some(gd));
        }
        let seen: Vec<String> = pods
            .iter()
            .map(|p| {
                let name = p.metadata.name.as_deref().unwrap_or("?");
                format!("{name} ready={} lifecycle={:?} image={:?}", is_ready(p), lifecycle(p), image(p))
            })
            .collect();
        anyhow::bail!(
            "generation {:?} observed {:?}; spec {}; status {}; live pods [{}]",
            gd.metadata.generation,
            status.observed_generation,
            serde_json::to_string(&gd.spec).unwrap_or_default(),
            serde_json::to_string(&status).unwrap_or_default(),
            seen.join("; ")
        )
    })
    .await;
    match settled {
        Ok(gd) => gd,
        Err(e) => {
            print_operator_logs(cluster);
            print_runs_and_events(cluster).await;
            panic!("{e:#}")
        }
    }
}

/// Every HookRun (name, UID, phase, created) and the Events of the namespace, oldest first: what the operators did.
async fn print_runs_and_events(cluster: &Cluster) {
    let runs: Api<common::api::HookRun> = Api::namespaced(cluster.client(), NS);
    for run in runs.list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
        eprintln!(
            "run {} uid={} phase={:?} created={:?} deleting={}",
            run.metadata.name.as_deref().unwrap_or("?"),
            run.metadata.uid.as_deref().unwrap_or("?"),
            run.status.as_ref().map(|s| s.phase),
            run.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()),
            run.metadata.deletion_timestamp.is_some()
        );
    }
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(cluster.client(), NS);
    let mut events = events.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
    events.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0)));
    for e in events {
        let at = e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0));
        let what = e.involved_object.name.as_deref().unwrap_or("?");
        eprintln!(
            "event {at:?} {what} {} x{}: {}",
            e.reason.as_deref().unwrap_or(""),
            e.count.unwrap_or(1),
            e.message.as_deref().unwrap_or("")
        );
    }
}

/// The last lines of every operator log in the cluster's directory: the operators are shared with the killer's
/// task, so their own drop does not print them when a round panics.
fn print_operator_logs(cluster: &Cluster) {
    let Ok(entries) = std::fs::read_dir(cluster.dir()) else { return };
    for path in entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "log")) {
        crate::print_log_tail(&path, 120);
    }
}

async fn patch(cluster: &Cluster, patch: Patch<serde_json::Value>) -> u64 {
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    let gd = api.patch(NAME, &PatchParams::default(), &patch).await.expect("the admin's patch is accepted");
    rv_of(&gd)
}

async fn current_rv(cluster: &Cluster) -> u64 {
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    api.get(NAME).await.map(|g| rv_of(&g)).unwrap_or(0)
}

/// Kills both operators (whatever the killer is doing) and starts them again: a crash at a moment the story
/// chooses, on top of the random ones.
async fn crash_both(operators: &[(&'static str, Shared)], kills: &mut BTreeMap<&'static str, u32>) {
    for (who, op) in operators {
        let mut op = op.lock().await;
        op.restart().await;
        *kills.entry(*who).or_insert(0) += 1;
    }
}

/// Failed operator writes followed by a successful write of the same object, and all operator writes by code.
fn audit_figures(cluster: &Cluster) -> (BTreeMap<u16, u64>, u64) {
    let log = cluster.sim().audit();
    let mut by_code = BTreeMap::new();
    let mut failed: BTreeMap<(String, String, String), bool> = BTreeMap::new();
    let mut retried = 0;
    for e in log.items.iter().filter(|e| e.user == GD_USER || e.user == HOOK_USER) {
        *by_code.entry(e.code).or_insert(0) += 1;
        let key = (e.resource.clone(), e.namespace.clone(), e.name.clone());
        if (200..300).contains(&e.code) {
            if failed.remove(&key).is_some() {
                retried += 1;
            }
        } else {
            failed.insert(key, true);
        }
    }
    (by_code, retried)
}

/// Runs one round on a fresh cluster. Panics when a phase does not converge (the operator logs are printed);
/// invariant violations are returned in the report.
pub async fn run_round(settings: Settings) -> RoundReport {
    let started = Instant::now();
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let ip = crate::hook::hook_pod(&cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");

    let start = |package: &str, bin: &str, user: &str, extra: &[&str]| {
        let kubeconfig = cluster.dir().join(format!("{user}.kubeconfig"));
        cluster.sim().write_kubeconfig_for_user(&kubeconfig, user, &["system:masters"]).expect("kubeconfig");
        let mut args: Vec<&str> = FAST_ELECTION.to_vec();
        args.extend_from_slice(extra);
        Arc::new(tokio::sync::Mutex::new(cluster.operator_with_kubeconfig(package, bin, &kubeconfig, &args)))
    };
    let gd_op =
        start("gamedeployment-operator", "gamedeployment-operator", GD_USER, &["--expectations-timeout", "10s"]);
    let hook_op =
        start("hook-operator", "hook-operator", HOOK_USER, &["--interval-scale", "0.1", "--web-resolve", &resolve]);
    let operators: Vec<(&'static str, Shared)> = vec![("gamedeployment-operator", gd_op), ("hook-operator", hook_op)];

    apply(&cluster, &template(false)).await;
    apply(&cluster, &gamedeployment()).await;
    converge(&cluster, "6 ready pods before the faults start", 6, Some(("python:latest", 6)), |_| true).await;

    let setup = started.elapsed();
    let started = Instant::now();
    let gate = GateChecker::start(&cluster, NS).await;
    let history = History::start(cluster.client());
    cluster.sim().set_faults(settings.rules());
    let killer = Killer::start(operators.clone(), &settings);
    let mut report = RoundReport { seed: settings.seed, setup, ..Default::default() };
    let mut extra_kills = BTreeMap::new();
    let mut phase_start = Instant::now();
    let mut phase = |report: &mut RoundReport, name: &'static str| {
        report.phases.push((name, phase_start.elapsed()));
        phase_start = Instant::now();
    };

    // 1. Scale-in through a pre-delete hook.
    patch(&cluster, Patch::Merge(json!({"spec": {"replicas": 5}}))).await;
    converge(&cluster, "scale-in to 5 through the pre-delete hook", 5, Some(("python:latest", 5)), |_| true).await;
    phase(&mut report, "scale-in");

    // 2. In-place update in two batches, a pre-inplace run per pod; partition 2 keeps two pods.
    patch(
        &cluster,
        Patch::Json(
            serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "python:3.5"}
            ]))
            .expect("a JSON patch"),
        ),
    )
    .await;
    converge(&cluster, "in-place update of 3 of 5 pods", 5, Some(("python:3.5", 3)), |_| true).await;
    phase(&mut report, "in-place update");

    // 3. A failing hook holds the pod; crashes while it is held lose nothing; retry lets it go.
    apply(&cluster, &template(true)).await;
    patch(&cluster, Patch::Merge(json!({"spec": {"replicas": 4}}))).await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    let (held, failed_at) = wait_for("the pre-delete hook to fail and be recorded", PHASE_DEADLINE, || async {
        let gd = api.get(NAME).await.ok()?;
        let failed = gd.status.as_ref()?.pre_delete_hook_condition.iter().find(|c| c.phase == HookPhase::Failed)?;
        Some((failed.pod_name.clone(), rv_of(&gd)))
    })
    .await;
    // Every version of the held pod from here on is checked, not one look at the end of the window.
    let held_pod = crate::observe::Observer::<Pod>::namespaced(&cluster, NS).await;
    crash_both(&operators, &mut extra_kills).await;
    // Long enough for the restarted operators to win the Lease (3 s) and reconcile a few times.
    tokio::time::sleep(Duration::from_secs(6)).await;
    held_pod
        .assert_never(&format!("seed {}: pod {held} was deleted although its hook failed", settings.seed), |seen| {
            seen.name() == held && (seen.deleted || seen.object.metadata.deletion_timestamp.is_some())
        });
    drop(held_pod);
    assert!(
        live_pods(&cluster).await.iter().any(|p| p.metadata.name.as_deref() == Some(held.as_str())),
        "seed {}: pod {held} was deleted although its hook failed",
        settings.seed
    );
    apply(&cluster, &template(false)).await;
    let retry_at = patch(&cluster, Patch::Merge(json!({"spec": {"preDeleteUpdateStrategy": {"retry": true}}}))).await;
    let gd = converge(&cluster, "the retried scale-in to 4", 4, None, |gd| {
        !gd.spec.pre_delete_update_strategy.as_ref().is_some_and(|s| s.retry)
            && gd.status.as_ref().is_some_and(|s| s.pre_delete_hook_condition.is_empty())
    })
    .await;
    let held_gone = live_pods(&cluster).await.iter().all(|p| p.metadata.name.as_deref() != Some(held.as_str()));
    if !held_gone {
        report.lost.push(format!("the retry did not delete the held pod {held}"));
    }
    let retry_done = rv_of(&gd);
    phase(&mut report, "failed hook + retry");

    // 4. Canary: partition 2, pause, partition 0.
    patch(
        &cluster,
        Patch::Merge(json!({"spec": {"updateStrategy": {"partition": null, "canary": {"steps": [
            {"partition": 2}, {"pause": {}}, {"partition": 0}
        ]}}}})),
    )
    .await;
    converge(&cluster, "the canary steps to be adopted (done for the current revision)", 4, None, |gd| {
        gd.status.as_ref().and_then(|s| s.current_step_index) == Some(3)
    })
    .await;
    let image_at = patch(
        &cluster,
        Patch::Json(
            serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "python:3.6"}
            ]))
            .expect("a JSON patch"),
        ),
    )
    .await;
    let paused = converge(
        &cluster,
        "the canary to stop at its pause step with 2 pods updated",
        4,
        Some(("python:3.6", 2)),
        |gd| {
            let status = gd.status.as_ref();
            status.and_then(|s| s.current_step_index) == Some(1)
                && gd.spec.update_strategy.paused
                && status.is_some_and(|s| {
                    s.pause_conditions.iter().any(|c| c.reason == PauseReason::PausedByCanaryPauseStep)
                })
        },
    )
    .await;
    let paused_at = rv_of(&paused);
    crash_both(&operators, &mut extra_kills).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let still = current_rv(&cluster).await;
    let resume_at = patch(&cluster, Patch::Merge(json!({"spec": {"updateStrategy": {"paused": false}}}))).await;
    converge(&cluster, "the resumed canary to complete", 4, Some(("python:3.6", 4)), |gd| {
        gd.status.as_ref().and_then(|s| s.current_step_index) == Some(3) && !gd.spec.update_strategy.paused
    })
    .await;
    phase(&mut report, "canary pause + resume");

    report.total = started.elapsed();
    let killed = killer.stop().await;
    cluster.sim().set_faults(FaultConfig::default());
    report.faults = cluster.sim().fault_counts();
    for (who, n) in killed.into_iter().chain(extra_kills) {
        *report.kills.entry(who).or_insert(0) += n;
    }
    (report.writes_by_code, report.retried_writes) = audit_figures(&cluster);
    report.gate = gate.stop().await;
    let versions = history.stop();
    let window = |from: u64, to: u64| versions.iter().filter(move |g| rv_of(g) > from && rv_of(g) <= to);

    // The Failed condition stays from when it was recorded until the retry was asked for.
    for gd in window(failed_at, retry_at.saturating_sub(1)) {
        let kept = gd.status.as_ref().is_some_and(|s| {
            s.pre_delete_hook_condition.iter().any(|c| c.pod_name == held && c.phase == HookPhase::Failed)
        });
        if !kept {
            report.lost.push(format!(
                "version {}: the Failed pre-delete condition of pod {held} is gone before the retry ({:?})",
                rv_of(gd),
                gd.status.as_ref().map(|s| &s.pre_delete_hook_condition)
            ));
        }
    }
    // The retry request is set once and cleared once, after it was acted on.
    let flags: Vec<bool> = window(failed_at, retry_done)
        .map(|g| g.spec.pre_delete_update_strategy.as_ref().is_some_and(|s| s.retry))
        .collect();
    let mut changes = flags.windows(2).filter(|w| w[0] != w[1]).count();
    if flags.first() == Some(&true) {
        changes += 1;
    }
    if changes != 2 {
        report.lost.push(format!("the retry flag changed {changes} times (want: set once, cleared once): {flags:?}"));
    }
    // The canary step index never goes back within one update revision, and the pause holds until the resume.
    let mut last: Option<(String, i32)> = None;
    for gd in window(image_at, u64::MAX) {
        let status = gd.status.as_ref();
        let (Some(revision), Some(step)) =
            (status.and_then(|s| s.update_revision.clone()), status.and_then(|s| s.current_step_index))
        else {
            continue;
        };
        if let Some((rev, prev)) = &last
            && *rev == revision
            && step < *prev
        {
            report.lost.push(format!("version {}: canary step went back from {prev} to {step}", rv_of(gd)));
        }
        last = Some((revision, step));
    }
    for gd in window(paused_at, resume_at.saturating_sub(1)) {
        let step = gd.status.as_ref().and_then(|s| s.current_step_index);
        if step != Some(1) || !gd.spec.update_strategy.paused {
            report.lost.push(format!(
                "version {}: during the pause step the GameDeployment showed step {step:?}, paused {}",
                rv_of(gd),
                gd.spec.update_strategy.paused
            ));
        }
    }
    if still < paused_at {
        report.lost.push("the GameDeployment went back in time".into());
    }
    drop(operators);
    cluster.shutdown().await;
    report
}
