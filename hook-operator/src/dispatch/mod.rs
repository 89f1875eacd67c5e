//! Where reconcile rounds meet measurements. A round plans (pure, [`crate::engine::plan`]), the caller stores
//! the new status, then [`Dispatcher::commit`] starts the due measurements as independent tasks and returns
//! at once. When a measurement finishes, its result waits here and the run is woken; the next round records
//! it. So a reconcile never waits for a provider, a hanging webhook only occupies its own task (bounded by
//! its timeout), and `--max-in-flight` bounds the measurements running at any moment across all runs.
//!
//! Per run it also remembers what status cannot hold: exact timestamps (status has whole seconds), the
//! validation verdict per generation, and the last status written (to detect a stale cache: a round that
//! sees the resourceVersion its own write replaced uses the written object instead).
//!
//! Status writes are coalesced ([`Dispatcher::with_status_writes`]): a round that only records progress of a
//! running run may keep its status in memory ([`Dispatcher::commit_unwritten`]: its measurements are recorded and
//! the due ones started, the write waits). Such a run is queued for one process-wide budget of progress writes:
//! at most `per_second` of them, granted oldest-waiting first (so no run starves), and each run at most once per
//! `min_interval`. Phase changes and completions never wait; a run's first write (`Running`) waits `min_interval`
//! from its first round but no token, so a run that completes sooner writes only its completion
//! ([`Dispatcher::write_now`]).
//!
//! Durability: a round that records a measurement that was not Successful, or otherwise moves a counter that decides
//! against the run (failed, inconclusive, error, consecutiveError), is written at once, before its commit starts the
//! next measurement ([`verdict_moved`]). A restart then never measures such a measurement again: it could answer
//! differently (F S F recorded as S F S ended Successful). Only successes wait in memory; one lost to a restart is
//! measured again, which can only delay a success.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use common::api::{HookRun, HookRunSpec};
use futures::FutureExt;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{Notify, Semaphore};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

use crate::engine::schedule;
use crate::engine::validate;
use crate::engine::{self, Finished, Inputs, Plan, Precise};
use crate::measure;
use crate::metrics::{MeasurementLabels, Metrics, ProviderLabels};
use crate::providers::Providers;
use crate::settings::EngineSettings;

/// Identifies a run across rounds. The uid keeps a deleted-and-recreated run from inheriting memory. Shared texts:
/// made once per run (kept in its slot), so a round or a measurement copies three pointers, not three strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId {
    pub uid: Arc<str>,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

/// The uid a run is tracked by: its own, or `namespace/name` for an object without one (`check`, tests).
fn uid_of(run: &HookRun) -> std::borrow::Cow<'_, str> {
    let meta = &run.metadata;
    match &meta.uid {
        Some(uid) => std::borrow::Cow::Borrowed(uid),
        None => std::borrow::Cow::Owned(format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        )),
    }
}

impl RunId {
    pub fn of(run: &HookRun) -> Self {
        let meta = &run.metadata;
        Self {
            uid: uid_of(run).into(),
            namespace: meta.namespace.as_deref().unwrap_or_default().into(),
            name: meta.name.as_deref().unwrap_or_default().into(),
        }
    }

    /// Whether this is the id of `run` (same uid, namespace and name).
    fn is_of(&self, run: &HookRun) -> bool {
        let meta = &run.metadata;
        *self.uid == *uid_of(run)
            && *self.namespace == *meta.namespace.as_deref().unwrap_or_default()
            && *self.name == *meta.name.as_deref().unwrap_or_default()
    }
}

/// Called when a run should get another round (a measurement of it finished).
pub type Wake = Arc<dyn Fn(&RunId) + Send + Sync>;

/// What a measurement task needs of its [`engine::Start`] (the metric's name is in its spec, at `index`).
#[derive(Clone, Copy)]
struct Armed {
    index: usize,
    due: Timestamp,
    taken_before: i32,
}

/// A measurement started for a metric: running, waiting for a slot, or armed (sleeping until it is due).
struct InFlight {
    token: u64,
    task: Option<AbortHandle>,
    /// The run's generation it was planned on.
    generation: Option<i64>,
    /// When it is due: until then it only sleeps, and may be called off.
    due: Timestamp,
}

#[derive(Default)]
struct Slot {
    /// The run's id, made by its first round and shared by the rounds and measurements after it.
    id: Option<RunId>,
    /// Metric name → the measurement started for it.
    in_flight: HashMap<String, InFlight>,
    /// The spec measurements are taken from, shared by their tasks (copied once per generation, not per measurement).
    spec: Option<(Option<i64>, Arc<HookRunSpec>)>,
    finished: Vec<Finished>,
    precise: Precise,
    validated: Option<(Option<i64>, Result<(), String>)>,
    /// (resourceVersion the write was based on, the object the API server returned).
    last_write: Option<(String, Arc<HookRun>)>,
    /// When the status was last written, for coalescing writes.
    last_write_at: Option<Instant>,
    /// When this process first planned the run: its first write (`Running`) is due `min_interval` later.
    first_seen: Option<Instant>,
    /// Progress recorded by a round and not written yet (it waits for the write budget).
    unwritten: Option<Unwritten>,
    /// The write budget granted this run its progress write: its next round writes.
    granted: bool,
    /// The run's entry in the write queue (its sequence number), while it waits there.
    queued: Option<u64>,
    /// The resourceVersion of the object the last round left stored, and when that round wants the next one
    /// (None: only when a measurement finishes). The same object again before then plans nothing new.
    idle: Option<(String, Option<Timestamp>)>,
}

/// A status planned and recorded in memory, not written yet.
struct Unwritten {
    /// The stored object it was planned on (its status is what the API server has).
    based_on: Arc<HookRun>,
    status: common::api::HookRunStatus,
    /// When the first progress not written was recorded.
    since: Instant,
}

/// Whether the run completes with measurements due within `within`: every metric still running has one counted
/// measurement left, started or armed (by this round or before) and due by then, and its last measurement was not an
/// error (errors consume no `count`). Its progress is then not written: the completion, written at once, carries it.
fn completes_within(round: &Round, slot: &Slot, within: std::time::Duration) -> bool {
    let by = schedule::after(Timestamp::now(), within);
    let metrics = &round.run.spec.metrics;
    !within.is_zero()
        && !metrics.is_empty()
        && metrics.iter().all(|metric| {
            let Some(result) = round.plan.status.metric_results.iter().find(|r| r.name == metric.name) else {
                return false;
            };
            if result.phase.is_some_and(|p| p.is_completed()) {
                return true;
            }
            let due = slot.in_flight.get(&metric.name).map(|f| f.due).or_else(|| {
                round.plan.start.iter().chain(&round.plan.arm).find(|s| s.metric == metric.name).map(|s| s.due)
            });
            schedule::effective_count(metric).is_some_and(|count| count - result.count == 1)
                && result.consecutive_error == 0
                && due.is_some_and(|due| due <= by)
        })
}

/// Whether `planned` moves, for some metric, a counter that decides against the run compared with `stored` (what
/// the API server holds): a measurement that was not Successful was recorded (failed, inconclusive or error grew), or
/// a success ended an error streak (consecutiveError reset: losing that reset to a restart could let the next errors
/// reach `consecutiveErrorLimit` when they would not have). Such a status is written before the next measurement.
fn verdict_moved(stored: Option<&common::api::HookRunStatus>, planned: &common::api::HookRunStatus) -> bool {
    let counters = |r: &common::api::MetricResult| (r.failed, r.inconclusive, r.error, r.consecutive_error);
    planned.metric_results.iter().any(|metric| {
        let before = stored.and_then(|s| s.metric_results.iter().find(|r| r.name == metric.name)).map(counters);
        before.unwrap_or_default() != counters(metric)
    })
}

/// `f` on `status` with its measurement histories set aside (put back after).
fn histories_aside<R>(status: &mut common::api::HookRunStatus, f: impl FnOnce(&common::api::HookRunStatus) -> R) -> R {
    let histories: Vec<_> = status.metric_results.iter_mut().map(|r| std::mem::take(&mut r.measurements)).collect();
    let result = f(status);
    for (metric, history) in status.metric_results.iter_mut().zip(histories) {
        metric.measurements = history;
    }
    result
}

/// A copy of `status` without the measurement histories (cheap: no measurement is copied).
fn without_histories(status: &mut common::api::HookRunStatus) -> common::api::HookRunStatus {
    histories_aside(status, Clone::clone)
}

/// Whether `status` equals `skeleton` (see [`without_histories`]) apart from the histories. For a status the engine
/// planned on top of the one `skeleton` was taken from this is exactly "unchanged": the engine changes a history only
/// when it records a measurement (which also counts it) or completes a metric (which also sets its phase).
fn same_but_histories(skeleton: &common::api::HookRunStatus, status: &mut common::api::HookRunStatus) -> bool {
    histories_aside(status, |status| skeleton == status)
}

/// The slot of `uid`, made if the run is not tracked yet (looked up by reference first: the uid is copied only for a
/// new run).
fn slot_of<'a>(slots: &'a mut HashMap<String, Slot>, uid: &str) -> Option<&'a mut Slot> {
    if !slots.contains_key(uid) {
        slots.insert(uid.to_string(), Slot::default());
    }
    slots.get_mut(uid)
}

/// The process-wide budget of progress writes and the runs waiting for it.
struct WriteBudget {
    /// Least time between two writes of one running run.
    min_interval: std::time::Duration,
    /// Progress writes per second for the whole process (0: unlimited).
    per_second: f64,
    /// Tokens the bucket holds at most (a tenth of a second's writes, at least one).
    burst: f64,
    tokens: f64,
    refilled_at: Instant,
    /// (when the run may write, sequence) → run, oldest first.
    queue: BTreeMap<(Instant, u64), RunId>,
    next_seq: u64,
}

impl WriteBudget {
    fn new(min_interval: std::time::Duration, per_second: u32) -> Self {
        let burst = (f64::from(per_second) / 10.0).max(1.0);
        Self {
            min_interval,
            per_second: f64::from(per_second),
            burst,
            tokens: burst,
            refilled_at: Instant::now(),
            queue: BTreeMap::new(),
            next_seq: 1,
        }
    }

    fn refill(&mut self, now: Instant) {
        if self.per_second > 0.0 {
            let elapsed = now.saturating_duration_since(self.refilled_at).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        }
        self.refilled_at = now;
    }

    /// Takes a token if one is there.
    fn take(&mut self, now: Instant) -> bool {
        if self.per_second <= 0.0 {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Takes a token even if a direct write took it meanwhile (the bucket goes into debt, paid back before the next
    /// grant), so grants plus direct writes never exceed the rate.
    fn take_granted(&mut self, now: Instant) {
        if self.per_second > 0.0 {
            self.refill(now);
            self.tokens -= 1.0;
        }
    }

    /// Time until the next token (zero when one is there or the budget is unlimited).
    fn next_token(&mut self, now: Instant) -> std::time::Duration {
        if self.per_second <= 0.0 {
            return std::time::Duration::ZERO;
        }
        self.refill(now);
        std::time::Duration::from_secs_f64(((1.0 - self.tokens) / self.per_second).max(0.0))
    }
}

struct Inner {
    slots: Mutex<HashMap<String, Slot>>,
    permits: Arc<Semaphore>,
    providers: Arc<Providers>,
    metrics: Arc<Metrics>,
    settings: EngineSettings,
    wake: Wake,
    next_id: AtomicU64,
    lag_observer: Option<LagObserver>,
    /// Measurements one namespace may have in flight at once, and the slots per namespace.
    namespace_cap: usize,
    namespace_permits: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Whether this process may measure the run with this uid now (sharding's fence); none: always.
    fence: Option<Fence>,
    /// Coalesced status writes (see the module's documentation). Lock order: `slots`, then `writes`.
    writes: Mutex<WriteBudget>,
    /// Told when a run joins the write queue.
    write_queued: Notify,
}

/// See [`Dispatcher::with_fence`].
pub type Fence = Arc<dyn Fn(&RunId) -> bool + Send + Sync>;

/// Receives every scheduling lag (the benchmark records exact percentiles with it).
pub type LagObserver = Arc<dyn Fn(std::time::Duration) + Send + Sync>;

#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

/// The outcome of planning one round.
#[derive(Debug, Clone)]
pub struct Round {
    pub id: RunId,
    /// The object the round was based on (the cached one, or our last write when the cache was stale).
    pub run: Arc<HookRun>,
    pub plan: Plan,
    /// The status differs from the stored one and must be written.
    pub changed: bool,
}

/// Decrements a gauge when dropped, so aborted tasks are accounted for too.
struct GaugeGuard<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Dispatcher {
    pub fn new(
        providers: Arc<Providers>,
        metrics: Arc<Metrics>,
        settings: EngineSettings,
        max_in_flight: usize,
        wake: Wake,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                slots: Mutex::new(HashMap::new()),
                permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
                providers,
                metrics,
                settings,
                wake,
                next_id: AtomicU64::new(1),
                lag_observer: None,
                namespace_cap: max_in_flight.max(1),
                namespace_permits: Mutex::new(HashMap::new()),
                fence: None,
                writes: Mutex::new(WriteBudget::new(std::time::Duration::ZERO, 0)),
                write_queued: Notify::new(),
            }),
        }
    }

    /// Like [`Dispatcher::new`], also reporting every scheduling lag to `observer`.
    pub fn with_lag_observer(
        providers: Arc<Providers>,
        metrics: Arc<Metrics>,
        settings: EngineSettings,
        max_in_flight: usize,
        wake: Wake,
        observer: LagObserver,
    ) -> Self {
        let mut dispatcher = Self::new(providers, metrics, settings, max_in_flight, wake);
        if let Some(inner) = Arc::get_mut(&mut dispatcher.inner) {
            inner.lag_observer = Some(observer);
        }
        dispatcher
    }

    /// Limits each namespace to `percent` of the in-flight slots (at least one), so one tenant's slow endpoints
    /// cannot hold every slot. Call before the dispatcher is cloned.
    pub fn with_namespace_share(mut self, percent: u8) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            let total = inner.permits.available_permits();
            inner.namespace_cap = (total * usize::from(percent.clamp(1, 100)) / 100).max(1);
        }
        self
    }

    /// Checks `fence(run)` right before each measurement starts (after waiting for its slot): when it says no (the
    /// run was deleted, or this replica no longer holds its shard), the measurement is not taken and nothing is
    /// recorded. Call before the dispatcher is cloned.
    pub fn with_fence(mut self, fence: Fence) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.fence = Some(fence);
        }
        self
    }

    fn namespace_permits(&self, namespace: &str) -> Arc<Semaphore> {
        let mut map = self.inner.namespace_permits.lock().unwrap_or_else(|p| p.into_inner());
        // Looked up by reference first: the namespace is copied only the first time it is seen.
        if let Some(permits) = map.get(namespace) {
            return permits.clone();
        }
        map.entry(namespace.to_string()).or_insert_with(|| Arc::new(Semaphore::new(self.inner.namespace_cap))).clone()
    }

    /// Coalesces status writes: progress of a running run is written at most once per `min_interval` per run and
    /// at most `per_second` times a second for the whole process (0: unlimited), oldest-waiting first; see
    /// [`Dispatcher::write_now`]. The budget is served by [`Dispatcher::start_status_writes`]. Without this call
    /// nothing waits. Call before the dispatcher is cloned.
    pub fn with_status_writes(self, min_interval: std::time::Duration, per_second: u32) -> Self {
        *self.budget() = WriteBudget::new(min_interval, per_second);
        self
    }

    fn budget(&self) -> MutexGuard<'_, WriteBudget> {
        self.inner.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the status a round planned must be written now. Never for an unchanged status; always for a phase
    /// change, a completion, a measurement that was not Successful and the counters it moves ([`verdict_moved`]:
    /// durable before the next measurement, on the first write too and without a token) and a run the budget
    /// granted its write; for a run without stored status once its first
    /// round is `min_interval` old (no token: a phase change, only later). Otherwise (progress
    /// only) when the run's last write is `min_interval` old, no run waits longer in the queue and the budget has a
    /// token, which this takes. `false`: call [`Dispatcher::commit_unwritten`] instead of writing.
    pub fn write_now(&self, round: &Round) -> bool {
        if !round.changed {
            return false;
        }
        let stored_phase = round.run.status.as_ref().and_then(|s| s.phase);
        if round.plan.completed
            || (stored_phase.is_some() && stored_phase != round.plan.status.phase)
            || verdict_moved(round.run.status.as_ref(), &round.plan.status)
        {
            return true;
        }
        let slots = self.slots();
        let Some(slot) = slots.get(&*round.id.uid) else { return true };
        if slot.granted {
            return true;
        }
        let now = Instant::now();
        let mut budget = self.budget();
        if stored_phase.is_none() {
            // The first write (`Running`, `startedAt` and what was measured so far) waits `min_interval` from the
            // run's first round, needs no token, and a run completed by then writes only its completion.
            return slot.first_seen.is_none_or(|at| now.saturating_duration_since(at) >= budget.min_interval);
        }
        if slot.last_write_at.is_some_and(|at| now.saturating_duration_since(at) < budget.min_interval)
            || completes_within(round, slot, budget.min_interval)
        {
            return false;
        }
        let someone_waits_longer =
            budget.queue.first_key_value().is_some_and(|((at, seq), _)| *at <= now && Some(*seq) != slot.queued);
        !someone_waits_longer && budget.take(now)
    }

    /// Whether a round for `run` now would plan exactly what the last one did: the same object (by resourceVersion,
    /// typically the watch event of our own status write), no measurement finished since, no write granted, and
    /// the last round's wake-up not reached. `Some(wake_at)`: nothing to do until then (None: until woken).
    pub fn idle(&self, run: &HookRun, now: Timestamp) -> Option<Option<Timestamp>> {
        let slots = self.slots();
        let slot = slots.get(run.metadata.uid.as_deref()?)?;
        let (rv, wake_at) = slot.idle.as_ref()?;
        let same = run.metadata.resource_version.as_ref() == Some(rv);
        (same && slot.finished.is_empty() && !slot.granted && wake_at.is_none_or(|at| at > now)).then_some(*wake_at)
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.inner.settings
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // A poisoned lock only means another thread panicked while holding it; the map itself stays usable.
        self.inner.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Plans a round for `run` as last seen (usually from the informer cache).
    pub fn plan(&self, run: Arc<HookRun>, now: Timestamp) -> Round {
        self.plan_with(run, now, false)
    }

    /// [`Dispatcher::plan`] for a caller that keeps the run's status itself (in memory: `check`, the benchmark) and
    /// stores the plan's status as the next one: when `run` is not shared and nothing is unwritten, its status is
    /// moved into the plan instead of copied (the measurement history is not cloned per round). The round's `run`
    /// then has no status: not for [`Dispatcher::write_now`] or [`Dispatcher::commit_unwritten`].
    pub fn plan_owned(&self, run: Arc<HookRun>, now: Timestamp) -> Round {
        self.plan_with(run, now, true)
    }

    fn plan_with(&self, run: Arc<HookRun>, now: Timestamp, move_status: bool) -> Round {
        let uid = uid_of(&run);
        let mut slots = self.slots();
        // Looked up by reference: the uid is copied only for a run not tracked yet.
        let slot = match slots.get_mut(&*uid) {
            Some(slot) => slot,
            None => slots
                .entry(uid.into_owned())
                .or_insert_with(|| Slot { first_seen: Some(Instant::now()), ..Slot::default() }),
        };
        let id = match &slot.id {
            Some(id) if id.is_of(&run) => id.clone(),
            _ => slot.id.insert(RunId::of(&run)).clone(),
        };
        // The cache caught up with our last write: its object is used and our copy released.
        if slot.last_write.as_ref().is_some_and(|(_, w)| w.metadata.resource_version == run.metadata.resource_version) {
            slot.last_write = None;
        }
        let mut run = match (&slot.last_write, &run.metadata.resource_version) {
            (Some((based_on, written)), Some(seen)) if based_on == seen => written.clone(),
            _ => run,
        };
        // Unwritten progress stays valid on top of a new version of the object as long as its status is the one the
        // progress was planned on (someone changed the spec or metadata); status written by someone else wins.
        let keep = match &slot.unwritten {
            Some(u) if u.based_on.metadata.resource_version == run.metadata.resource_version => true,
            Some(u) => u.based_on.status == run.status,
            None => true,
        };
        if !keep {
            self.drop_unwritten(slot);
        } else if let Some(u) = &mut slot.unwritten
            && !Arc::ptr_eq(&u.based_on, &run)
        {
            u.based_on = run.clone();
        }
        let generation = run.metadata.generation;
        let validation = match &slot.validated {
            Some((validated, verdict)) if *validated == generation && generation.is_some() => verdict.clone(),
            _ => {
                let verdict = validate::run(&run.spec);
                slot.validated = Some((generation, verdict.clone()));
                verdict
            }
        };
        // Armed measurements planned on another generation of the spec are called off while they still sleep (the
        // spec changed, e.g. its interval): this round plans them again. One that already started is left to finish.
        slot.in_flight.retain(|_, f| {
            let stale = f.generation != generation && f.due > now;
            if stale && let Some(task) = &f.task {
                task.abort();
            }
            !stale
        });
        let in_flight: HashSet<String> = slot.in_flight.keys().cloned().collect();
        // The stored status, moved out of the run (only when asked, nothing is unwritten and no one else holds it).
        let mut moved = match Arc::get_mut(&mut run) {
            Some(owned) if move_status && slot.unwritten.is_none() => owned.status.take(),
            _ => None,
        };
        // Without its histories, to tell whether the plan changed it (see `same_but_histories`).
        let skeleton = moved.as_mut().map(without_histories);
        let inputs = Inputs {
            spec: &run.spec,
            status: slot.unwritten.as_ref().map(|u| &u.status).or(run.status.as_ref()),
            invalid: validation.as_ref().err().map(String::as_str),
            finished: &slot.finished,
            in_flight: &in_flight,
            precise: &slot.precise,
            now,
            settings: &self.inner.settings,
        };
        let (plan, changed) = match moved.take() {
            Some(stored) => {
                let mut plan = engine::plan_on(&inputs, Some(stored));
                let changed = !skeleton.is_some_and(|skeleton| same_but_histories(&skeleton, &mut plan.status));
                (plan, changed)
            }
            None => {
                let plan = engine::plan(&inputs);
                let changed = run.status.as_ref().is_none_or(|s| *s != plan.status);
                (plan, changed)
            }
        };
        Round { id, run, plan, changed }
    }

    /// Call once the round's status is stored (`written` is what the API server returned, if a write was
    /// needed and the caller has one). Forgets the recorded measurements and starts the due ones.
    pub fn commit(&self, round: &Round, written: Option<Arc<HookRun>>) {
        if round.plan.completed {
            self.forget(&round.id.uid);
            return;
        }
        let mut slots = self.slots();
        let Some(slot) = slot_of(&mut slots, &round.id.uid) else { return };
        self.record(slot, round);
        if round.changed {
            slot.last_write_at = Some(Instant::now());
            if let Some(unwritten) = &slot.unwritten {
                self.inner.metrics.status_write_delay.observe(unwritten.since.elapsed().as_secs_f64());
            }
        }
        // What was waiting is stored now (or it equals what is stored).
        self.drop_unwritten(slot);
        slot.idle = match (&written, round.changed) {
            (Some(w), _) => w.metadata.resource_version.clone().map(|rv| (rv, round.plan.wake_at)),
            // Stored by the caller some other way (in memory): its version is unknown.
            (None, true) => None,
            (None, false) => round.run.metadata.resource_version.clone().map(|rv| (rv, round.plan.wake_at)),
        };
        if let (Some(written), Some(based_on)) = (written, round.run.metadata.resource_version.clone()) {
            slot.last_write = Some((based_on, written));
        }
    }

    /// Like [`Dispatcher::commit`] for a round whose status is not written now ([`Dispatcher::write_now`] said no):
    /// its measurements are recorded in memory (the next round plans on top of them), the due ones start, and the
    /// run waits in the write queue for its turn. Takes the round's status (left empty).
    pub fn commit_unwritten(&self, round: &mut Round) {
        if round.plan.completed || !round.changed {
            return self.commit(round, None);
        }
        let now = Instant::now();
        let mut slots = self.slots();
        let Some(slot) = slot_of(&mut slots, &round.id.uid) else { return };
        self.record(slot, round);
        // Counted once per new piece of progress kept in memory (not again for rounds that only start measurements).
        if slot.unwritten.is_none() || round.plan.recorded_count > 0 {
            self.inner.metrics.status_writes_deferred.inc();
        }
        // Held for a completion that is due soon: the measurement finishing wakes the run, and its round writes
        // (the completion) or decides again (an error).
        let held = completes_within(round, slot, self.budget().min_interval);
        let status = std::mem::take(&mut round.plan.status);
        match &mut slot.unwritten {
            Some(unwritten) => unwritten.status = status,
            None => {
                slot.unwritten = Some(Unwritten { based_on: round.run.clone(), status, since: now });
                self.inner.metrics.status_writes_waiting.inc();
            }
        }
        if round.run.status.as_ref().and_then(|s| s.phase).is_none() {
            // The first write: due `min_interval` after the first round, outside the budget (see `write_now`).
            let due = slot.first_seen.map_or(now, |at| at + self.budget().min_interval);
            let at = Timestamp::now() + due.saturating_duration_since(now);
            round.plan.wake_at = Some(round.plan.wake_at.map_or(at, |wake| wake.min(at)));
            slot.idle = round.run.metadata.resource_version.clone().map(|rv| (rv, round.plan.wake_at));
            return;
        }
        slot.idle = round.run.metadata.resource_version.clone().map(|rv| (rv, round.plan.wake_at));
        if slot.queued.is_none() && !slot.granted && !held {
            let mut budget = self.budget();
            let eligible = slot.last_write_at.map_or(now, |at| (at + budget.min_interval).max(now));
            let seq = budget.next_seq;
            budget.next_seq += 1;
            budget.queue.insert((eligible, seq), round.id.clone());
            slot.queued = Some(seq);
            drop(budget);
            self.inner.write_queued.notify_one();
        }
    }

    /// Forgets unwritten progress (written, superseded, or the run is gone); its queue entry is skipped later.
    fn drop_unwritten(&self, slot: &mut Slot) {
        if slot.unwritten.take().is_some() {
            self.inner.metrics.status_writes_waiting.dec();
        }
        slot.granted = false;
        slot.queued = None;
    }

    /// The part of a commit that does not depend on the write: forget what the round recorded, remember its precise
    /// times and start its due measurements.
    fn record(&self, slot: &mut Slot, round: &Round) {
        slot.finished.retain(|f| !round.plan.consumed.contains(&f.id));
        // Into the slot's own map and strings (no new allocation once a metric has been recorded).
        slot.precise.clone_from(&round.plan.precise);
        let generation = round.run.metadata.generation;
        for start in round.plan.start.iter().chain(&round.plan.arm) {
            if slot.in_flight.contains_key(&start.metric) || start.index >= round.run.spec.metrics.len() {
                continue;
            }
            let spec = match &slot.spec {
                Some((g, spec)) if *g == generation && generation.is_some() => spec.clone(),
                _ => {
                    let spec = Arc::new(round.run.spec.clone());
                    slot.spec = Some((generation, spec.clone()));
                    spec
                }
            };
            let token = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
            let armed = Armed { index: start.index, due: start.due, taken_before: start.taken_before };
            let task = tokio::spawn(self.clone().measure(round.id.clone(), armed, spec, token));
            let entry = InFlight { token, task: Some(task.abort_handle()), generation, due: start.due };
            slot.in_flight.insert(start.metric.clone(), entry);
        }
    }

    /// Serves the write budget: grants queued runs their progress write, oldest first, at most `per_second` a
    /// second, each no earlier than `min_interval` after its last write, and wakes them (their next round writes).
    /// Runs until aborted.
    pub fn start_status_writes(&self) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            enum Next {
                Wait(Option<Instant>),
                Grant(u64, RunId),
            }
            loop {
                let next = {
                    let mut budget = this.budget();
                    let now = Instant::now();
                    match budget.queue.first_key_value().map(|(key, _)| *key) {
                        None => Next::Wait(None),
                        Some((at, _)) if at > now => Next::Wait(Some(at)),
                        Some(_) => {
                            let wait = budget.next_token(now);
                            if !wait.is_zero() {
                                Next::Wait(Some(now + wait))
                            } else if let Some(((_, seq), id)) = budget.queue.pop_first() {
                                Next::Grant(seq, id)
                            } else {
                                Next::Wait(None)
                            }
                        }
                    }
                };
                match next {
                    Next::Wait(until) => {
                        let queued = this.inner.write_queued.notified();
                        match until {
                            Some(at) => {
                                tokio::select! {
                                    _ = queued => {}
                                    _ = tokio::time::sleep_until(at) => {}
                                }
                            }
                            None => queued.await,
                        }
                    }
                    Next::Grant(seq, id) => {
                        let granted = {
                            let mut slots = this.slots();
                            match slots.get_mut(&*id.uid) {
                                Some(slot) if slot.queued == Some(seq) && slot.unwritten.is_some() => {
                                    slot.queued = None;
                                    slot.granted = true;
                                    true
                                }
                                // Written meanwhile (a phase change), superseded or gone: no token spent.
                                _ => false,
                            }
                        };
                        if granted {
                            this.budget().take_granted(Instant::now());
                            (this.inner.wake)(&id);
                        }
                    }
                }
            }
        })
    }

    async fn measure(self, id: RunId, start: Armed, spec: Arc<HookRunSpec>, token: u64) {
        // Armed: sleep until due (holding no slot).
        let early = schedule::until(Timestamp::now(), start.due);
        if !early.is_zero() {
            tokio::time::sleep(early).await;
        }
        let metric = &spec.metrics[start.index];
        let metrics = &self.inner.metrics;
        metrics.waiting.inc();
        let waiting = GaugeGuard(&metrics.waiting);
        // The namespace's share first, then a global slot: a namespace at its share waits without holding a
        // global slot. The semaphores are never closed, so acquiring only fails if that invariant breaks.
        let namespace_permit = self.namespace_permits(&id.namespace).acquire_owned().await.ok();
        let permit = self.inner.permits.clone().acquire_owned().await.ok();
        drop(waiting);
        if let Some(fence) = &self.inner.fence
            && !fence(&id)
        {
            // Gone, or not ours any more (a shard lost or given up): the new owner takes this slot.
            let called_off = {
                let mut slots = self.slots();
                match slots.get_mut(&*id.uid) {
                    Some(slot) if slot.in_flight.get(&metric.name).is_some_and(|f| f.token == token) => {
                        slot.in_flight.remove(&metric.name);
                        // Not idle any more: the next round must plan (and start it again if the shard comes back).
                        slot.idle = None;
                        true
                    }
                    _ => false,
                }
            };
            // The run decides in a round: a run that exists and is ours after all (a fence that was wrong for a
            // moment) plans the measurement again instead of waiting for nothing; one that is gone or another
            // replica's is forgotten there.
            if called_off {
                (self.inner.wake)(&id);
            }
            return;
        }
        let lag = schedule::until(start.due, Timestamp::now());
        metrics.scheduling_lag.observe(lag.as_secs_f64());
        if let Some(observer) = &self.inner.lag_observer {
            observer(lag);
        }
        metrics.in_flight.inc();
        let running = GaugeGuard(&metrics.in_flight);
        // A panic anywhere in the measurement becomes an Error measurement, so its in-flight entry is cleared and
        // the run moves on (a task that panicked used to leave the run Running forever).
        let started_at = Timestamp::now();
        // Boxed: the measurement's state (HTTP exchange and all) is allocated only while it runs, so an armed task
        // that sleeps until its due time stays small (and spawning it copies little).
        let taken = match AssertUnwindSafe(Box::pin(measure::take_in(
            &self.inner.providers,
            &id.namespace,
            metric,
            &spec.args,
        )))
        .catch_unwind()
        .await
        {
            Ok(taken) => taken,
            Err(panic) => {
                let message = crate::conditions::budget::panic_message(panic.as_ref());
                tracing::error!(run = %id.name, namespace = %id.namespace, metric = %metric.name, %message, "a measurement panicked");
                measure::failed(
                    started_at,
                    format!(
                        "the operator failed while measuring (internal error: {message}); the measurement is retried"
                    ),
                )
            }
        };
        drop(running);
        drop(permit);
        drop(namespace_permit);
        let phase = taken.measurement.phase.map(|p| p.as_str()).unwrap_or("Unknown");
        metrics.measurements.get_or_create(&MeasurementLabels { provider: taken.provider, phase }).inc();
        metrics
            .measurement_duration
            .get_or_create(&ProviderLabels { provider: taken.provider })
            .observe(taken.latency.as_secs_f64());
        tracing::debug!(run = %id.name, namespace = %id.namespace, metric = %metric.name, phase, "measurement finished");
        let delivered = {
            let mut slots = self.slots();
            match slots.get_mut(&*id.uid) {
                Some(slot) if slot.in_flight.get(&metric.name).is_some_and(|f| f.token == token) => {
                    slot.in_flight.remove(&metric.name);
                    slot.finished.push(Finished {
                        id: token,
                        metric: metric.name.clone(),
                        measurement: taken.measurement,
                        finished_at: taken.finished_at,
                        taken_before: start.taken_before,
                    });
                    true
                }
                _ => false,
            }
        };
        if delivered {
            (self.inner.wake)(&id);
        }
    }

    /// Drops everything about a run and cancels its measurements (it completed or was deleted).
    pub fn forget(&self, uid: &str) {
        if let Some(slot) = self.slots().remove(uid) {
            if slot.unwritten.is_some() {
                self.inner.metrics.status_writes_waiting.dec();
            }
            for (_, InFlight { task, .. }) in slot.in_flight {
                if let Some(task) = task {
                    task.abort();
                }
            }
        }
    }

    /// Forgets every run for which `keep` is false (runs deleted while this process was not looking).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self.slots().keys().filter(|uid| !keep(uid)).cloned().collect();
        for uid in gone {
            self.forget(&uid);
        }
    }

    pub fn tracked_runs(&self) -> usize {
        self.slots().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::api::{HookPhase, HookRunSpec, Metric, MetricProvider, WebMetric};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    use crate::providers::ProviderSettings;

    fn run(rv: &str, initial_delay: &str) -> HookRun {
        HookRun {
            metadata: ObjectMeta {
                name: Some("r".into()),
                namespace: Some("ns".into()),
                uid: Some("uid-r".into()),
                resource_version: Some(rv.into()),
                generation: Some(1),
                ..ObjectMeta::default()
            },
            spec: HookRunSpec {
                metrics: vec![Metric {
                    name: "m".into(),
                    initial_delay: Some(initial_delay.into()),
                    provider: MetricProvider {
                        web: Some(WebMetric { url: "http://127.0.0.1:1/".into(), ..WebMetric::default() }),
                        ..MetricProvider::default()
                    },
                    ..Metric::default()
                }],
                ..HookRunSpec::default()
            },
            status: None,
        }
    }

    /// Every measurement started by a round at its due time (nothing armed): the tests of writes, fences and
    /// caches then see only the measurements they finish themselves. Arming has its own tests.
    fn classic() -> EngineSettings {
        EngineSettings { arm_ahead: std::time::Duration::ZERO, ..EngineSettings::default() }
    }

    fn dispatcher() -> Dispatcher {
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        Dispatcher::new(providers, Arc::new(Metrics::default()), classic(), 10, Arc::new(|_: &RunId| {}))
    }

    /// A run's id is made by its first round and shared after (its texts are not copied per round); an object that
    /// is not the same run (another uid, or no uid and another name) gets its own.
    #[tokio::test]
    async fn rounds_of_a_run_share_its_id() {
        let d = dispatcher();
        let first = d.plan(Arc::new(run("1", "1h")), Timestamp::now());
        d.commit(&first, None);
        let second = d.plan(Arc::new(run("2", "1h")), Timestamp::now());
        assert_eq!(second.id, first.id);
        assert!(Arc::ptr_eq(&first.id.uid, &second.id.uid) && Arc::ptr_eq(&first.id.name, &second.id.name));
        let mut other = run("1", "1h");
        other.metadata.uid = Some("uid-other".into());
        assert_eq!(&*d.plan(Arc::new(other), Timestamp::now()).id.uid, "uid-other");
        let mut unnamed = run("1", "1h");
        unnamed.metadata.uid = None;
        let id = d.plan(Arc::new(unnamed.clone()), Timestamp::now()).id;
        assert_eq!((&*id.uid, &*id.namespace, &*id.name), ("ns/r", "ns", "r"));
        unnamed.metadata.name = Some("s".into());
        assert_eq!(&*d.plan(Arc::new(unnamed), Timestamp::now()).id.uid, "ns/s");
    }

    #[tokio::test]
    async fn a_stale_cache_is_replaced_by_our_own_last_write() {
        let d = dispatcher();
        let cached = Arc::new(run("1", "1h"));
        let round = d.plan(cached.clone(), Timestamp::now());
        assert!(round.changed, "the first round starts the run");
        let mut written = run("2", "1h");
        written.status = Some(round.plan.status.clone());
        d.commit(&round, Some(Arc::new(written)));

        // The informer has not delivered our write yet: the next round must not start the run again.
        let again = d.plan(cached, Timestamp::now());
        assert_eq!(again.run.metadata.resource_version.as_deref(), Some("2"));
        assert!(!again.changed, "nothing to write: the write already happened");
        assert_eq!(again.plan.status.started_at, round.plan.status.started_at);

        // Once the cache has caught up, it is used as it is.
        let mut fresh = run("2", "1h");
        fresh.status = Some(round.plan.status.clone());
        let caught_up = d.plan(Arc::new(fresh), Timestamp::now());
        assert!(!caught_up.changed);
    }

    /// A run measured every second forever (the first measurement an hour away, so nothing starts by itself),
    /// named `uid-<name>`.
    fn running(name: &str, rv: &str) -> HookRun {
        let mut r = run(rv, "1h");
        r.metadata.name = Some(name.into());
        r.metadata.uid = Some(format!("uid-{name}"));
        r.spec.metrics[0].interval = Some("1s".into());
        r
    }

    /// A measurement of metric `m` that finished (as if its task had delivered it).
    fn finish(d: &Dispatcher, uid: &str, id: u64, taken_before: i32) {
        finish_as(d, uid, id, taken_before, HookPhase::Successful);
    }

    /// [`finish`] with the measurement's phase.
    fn finish_as(d: &Dispatcher, uid: &str, id: u64, taken_before: i32, phase: HookPhase) {
        let now = Timestamp::now();
        let mut slots = d.slots();
        slots.get_mut(uid).expect("tracked").finished.push(Finished {
            id,
            metric: "m".into(),
            measurement: common::api::Measurement {
                phase: Some(phase),
                started_at: Some(Time(now)),
                finished_at: Some(Time(now)),
                value: Some("45".into()),
                ..Default::default()
            },
            finished_at: now,
            taken_before,
        });
    }

    fn successful(round: &Round) -> i32 {
        round.plan.status.metric_results.first().map_or(0, |m| m.successful)
    }

    /// The first round of `obj`, written: the API server returned it with resourceVersion `rv`.
    /// The run's first round is taken as long past, so its first write is due (see
    /// `a_new_run_writes_running_with_its_first_progress_or_only_its_completion` for the wait).
    fn first_write(d: &Dispatcher, obj: &HookRun, rv: &str) -> HookRun {
        let round = d.plan(Arc::new(obj.clone()), Timestamp::now());
        d.slots().get_mut(&*round.id.uid).expect("tracked").first_seen = None;
        assert!(round.changed && d.write_now(&round), "the first write is due");
        let mut written = obj.clone();
        written.metadata.resource_version = Some(rv.into());
        written.status = Some(round.plan.status.clone());
        d.commit(&round, Some(Arc::new(written.clone())));
        written
    }

    /// What the API server returns for a write of `round`.
    fn written(round: &Round, rv: &str) -> HookRun {
        let mut w = (*round.run).clone();
        w.metadata.resource_version = Some(rv.into());
        w.status = Some(round.plan.status.clone());
        w
    }

    /// `plan_owned` (the status is moved into the round, its history not copied) plans exactly what `plan` does:
    /// the same status, `changed`, starts, wake-ups, notes and recorded measurements, round after round — through
    /// recordings, a full history being trimmed, errors, unchanged rounds and the run's completion.
    #[tokio::test]
    async fn planning_on_the_moved_status_plans_what_planning_on_a_copy_does() {
        let (copying, moving) = (dispatcher(), dispatcher());
        let mut obj = running("a", "1");
        obj.spec.metrics[0].count = 100;
        obj.spec.metrics[0].consecutive_error_limit = Some(3);
        obj.spec.metrics[0].inconclusive_limit = 100;
        // About 25 measurements then a failure: the history (10) is trimmed, errors come and go, the run fails.
        let phases =
            [HookPhase::Successful, HookPhase::Error, HookPhase::Error, HookPhase::Successful, HookPhase::Inconclusive];
        let start = Timestamp::now();
        let mut stored = obj.clone();
        let mut id = 0;
        for step in 0..40 {
            let now = start + std::time::Duration::from_secs(step);
            // Every third round nothing finished (an unchanged round).
            if step > 0 && step % 3 != 0 {
                id += 1;
                let phase = if step == 38 { HookPhase::Failed } else { phases[step as usize % phases.len()] };
                let taken = stored
                    .status
                    .as_ref()
                    .and_then(|s| s.metric_results.first())
                    .map_or(0, crate::engine::schedule::taken);
                for d in [&copying, &moving] {
                    d.slots().get_mut("uid-a").expect("tracked").finished.push(Finished {
                        id,
                        metric: "m".into(),
                        measurement: common::api::Measurement {
                            phase: Some(phase),
                            message: (phase != HookPhase::Successful).then(|| format!("{phase:?} #{id}")),
                            started_at: Some(Time(now)),
                            finished_at: Some(Time(now)),
                            value: Some(format!("{id}")),
                            ..Default::default()
                        },
                        finished_at: now,
                        taken_before: taken,
                    });
                }
            }
            let copied = copying.plan(Arc::new(stored.clone()), now);
            let moved = moving.plan_owned(Arc::new(stored.clone()), now);
            assert_eq!(copied.plan, moved.plan, "step {step}");
            assert_eq!(copied.changed, moved.changed, "step {step}");
            assert_eq!(copied.changed, step % 3 != 0 || step == 0, "step {step}: changed only when something finished");
            copying.commit(&copied, None);
            moving.commit(&moved, None);
            stored.status = Some(copied.plan.status.clone());
            if copied.plan.completed {
                assert_eq!(stored.status.as_ref().and_then(|s| s.phase), Some(HookPhase::Failed));
                return;
            }
        }
        panic!("the run never completed: {:?}", stored.status);
    }

    #[tokio::test]
    async fn status_writes_of_a_running_run_are_coalesced() {
        let d = dispatcher().with_status_writes(std::time::Duration::from_secs(1), 0);
        let stored = first_write(&d, &running("a", "1"), "2");
        // Progress right after a write (same phase): kept in memory.
        finish(&d, "uid-a", 100, 0);
        let mut progress = d.plan(Arc::new(stored.clone()), Timestamp::now());
        assert!(progress.changed && successful(&progress) == 1);
        assert!(!d.write_now(&progress), "progress within --status-write-interval of the last write waits");
        // A phase change is written at once.
        let mut failed = progress.clone();
        failed.plan.status.phase = Some(HookPhase::Error);
        assert!(d.write_now(&failed));
        let mut done = progress.clone();
        done.plan.completed = true;
        assert!(d.write_now(&done), "a completion is written at once");
        d.commit_unwritten(&mut progress);
        // Without an interval nor a budget nothing waits.
        let d = dispatcher().with_status_writes(std::time::Duration::ZERO, 0);
        let stored = first_write(&d, &running("a", "1"), "2");
        finish(&d, "uid-a", 100, 0);
        assert!(d.write_now(&d.plan(Arc::new(stored), Timestamp::now())));
    }

    /// A measurement that is not Successful, and the counters it moves, are written before the run measures again
    /// (the caller writes before [`Dispatcher::commit`] starts the next measurement): a restart between it and a
    /// batched write would measure again and lose it, and `count: 3, failureLimit: 1` could record S F S for F S F
    /// and end Successful. Also before a new run's first write, and without a token. A success that ends an error
    /// streak is written too (it resets `consecutiveError`); other successes still wait for the budget.
    #[tokio::test]
    async fn a_measurement_that_is_not_successful_is_written_before_the_next_one() {
        let d = dispatcher().with_status_writes(std::time::Duration::from_secs(60), 1);
        let mut obj = running("a", "1");
        let metric = &mut obj.spec.metrics[0];
        (metric.failure_limit, metric.inconclusive_limit, metric.consecutive_error_limit) = (5, 5, Some(5));
        // A new run: its first write waits, unless what it recorded is a failure.
        let mut first = d.plan(Arc::new(obj.clone()), Timestamp::now());
        assert!(!d.write_now(&first));
        d.commit_unwritten(&mut first);
        finish_as(&d, "uid-a", 100, 0, HookPhase::Failed);
        let round = d.plan(Arc::new(obj.clone()), Timestamp::now());
        assert_eq!(round.plan.status.phase, Some(HookPhase::Running), "still running: no phase change");
        assert!(round.changed && d.write_now(&round), "a failure is written before the first write is due");
        let mut stored = written(&round, "2");
        d.commit(&round, Some(Arc::new(stored.clone())));
        // The budget's only token is taken: durability needs none.
        assert!(d.budget().take(Instant::now()));
        let steps = [
            (HookPhase::Successful, false, "a success waits"),
            (HookPhase::Failed, true, "a failure"),
            (HookPhase::Inconclusive, true, "an inconclusive measurement"),
            (HookPhase::Error, true, "an error"),
            (HookPhase::Error, true, "an error in a row"),
            (HookPhase::Successful, true, "a success that resets consecutiveError"),
            (HookPhase::Successful, false, "a success after a success waits"),
        ];
        // Measurements taken so far, the unwritten ones included (a finished measurement records how many it followed).
        let mut taken = stored.status.as_ref().and_then(|s| s.metric_results.first()).map_or(0, schedule::taken);
        for (step, (phase, durable, what)) in steps.into_iter().enumerate() {
            finish_as(&d, "uid-a", 101 + step as u64, taken, phase);
            let mut round = d.plan(Arc::new(stored.clone()), Timestamp::now());
            taken = round.plan.status.metric_results.first().map_or(0, schedule::taken);
            assert_eq!(round.plan.status.phase, Some(HookPhase::Running), "{what}");
            assert!(round.changed);
            assert_eq!(d.write_now(&round), durable, "{what}");
            if durable {
                stored = written(&round, &format!("{}", 3 + step));
                d.commit(&round, Some(Arc::new(stored.clone())));
            } else {
                d.commit_unwritten(&mut round);
            }
        }
        let result = &stored.status.as_ref().expect("written").metric_results[0];
        assert_eq!((result.failed, result.inconclusive, result.error, result.consecutive_error), (2, 1, 2, 0));
        d.forget("uid-a");
    }

    /// A new run's first write (`Running`, `startedAt`) waits `min_interval` from its first round, outside the
    /// budget, and carries what was measured meanwhile; a run that completes sooner writes only its completion.
    #[tokio::test(start_paused = true)]
    async fn a_new_run_writes_running_with_its_first_progress_or_only_its_completion() {
        let d = dispatcher().with_status_writes(std::time::Duration::from_secs(1), 1);
        // The budget's only token is taken: the first write must not need one.
        assert!(d.budget().take(Instant::now()));
        let obj = running("a", "1");
        let mut first = d.plan(Arc::new(obj.clone()), Timestamp::now());
        assert!(first.changed && first.plan.status.phase == Some(HookPhase::Running));
        assert!(!d.write_now(&first), "the first write waits --status-write-interval");
        d.commit_unwritten(&mut first);
        assert!(d.budget().queue.is_empty(), "it waits outside the progress budget");
        let wake = first.plan.wake_at.expect("woken for its first write");
        let until = schedule::until(Timestamp::now(), wake);
        assert!(until <= std::time::Duration::from_secs(1), "woken within the interval, not {until:?}");
        // A measurement finishes meanwhile: recorded in memory, still not written.
        finish(&d, "uid-a", 100, 0);
        let mut progress = d.plan(Arc::new(obj.clone()), Timestamp::now());
        assert_eq!(successful(&progress), 1);
        assert!(!d.write_now(&progress));
        d.commit_unwritten(&mut progress);
        // Once the interval is over the write goes, Running with the measurement, with no token left.
        tokio::time::advance(std::time::Duration::from_millis(1001)).await;
        let due = d.plan(Arc::new(obj.clone()), Timestamp::now());
        assert!(d.write_now(&due), "written {until:?} after the first round");
        assert_eq!((due.plan.status.phase, successful(&due)), (Some(HookPhase::Running), 1));
        assert!(due.plan.status.started_at.is_some());
        d.commit(&due, Some(Arc::new(written(&due, "2"))));
        // A run that completes within the interval writes once: its completion.
        let other = running("b", "1");
        let mut first = d.plan(Arc::new(other.clone()), Timestamp::now());
        assert!(!d.write_now(&first));
        d.commit_unwritten(&mut first);
        let mut done = d.plan(Arc::new(other), Timestamp::now());
        done.plan.completed = true;
        done.plan.status.phase = Some(HookPhase::Successful);
        assert!(d.write_now(&done), "a completion is written at once");
        // Without an interval the first write goes at once, as before.
        let d = dispatcher().with_status_writes(std::time::Duration::ZERO, 1);
        assert!(d.write_now(&d.plan(Arc::new(running("c", "1")), Timestamp::now())));
    }

    #[tokio::test]
    async fn a_deferred_round_records_its_measurements_and_keeps_measuring() {
        let d = dispatcher().with_status_writes(std::time::Duration::from_secs(60), 0);
        let stored = Arc::new(first_write(&d, &running("a", "1"), "2"));
        for taken in 0..3 {
            finish(&d, "uid-a", 100 + taken as u64, taken);
            let mut round = d.plan(stored.clone(), Timestamp::now());
            assert_eq!(
                successful(&round),
                taken + 1,
                "planned from the unwritten status: nothing lost or counted twice"
            );
            assert!(round.changed, "the stored status is still the first one");
            assert!(!d.write_now(&round));
            d.commit_unwritten(&mut round);
            assert!(d.slots()["uid-a"].finished.is_empty(), "recorded in memory");
        }
        assert_eq!(d.inner.metrics.status_writes_waiting.get(), 1);
        assert_eq!(d.inner.metrics.status_writes_deferred.get(), 3);
        // The measurement due now is started although the status is not written.
        let later = Timestamp::now() + std::time::Duration::from_secs(5);
        let mut round = d.plan(stored.clone(), later);
        assert_eq!(round.plan.start.len(), 1, "due measurements do not wait for the write");
        d.commit_unwritten(&mut round);
        assert!(d.slots()["uid-a"].in_flight.contains_key("m"));
        // Written at last: memory cleared, the write's age observed.
        let mut granted = d.plan(stored.clone(), later);
        d.slots().get_mut("uid-a").unwrap().granted = true;
        assert!(d.write_now(&granted) && successful(&granted) == 3);
        let w = written(&granted, "3");
        d.commit(&granted, Some(Arc::new(w.clone())));
        assert!(d.slots()["uid-a"].unwritten.is_none());
        assert_eq!(d.inner.metrics.status_writes_waiting.get(), 0);
        granted = d.plan(Arc::new(w), later);
        assert!(!granted.changed);
        d.forget("uid-a");
    }

    #[tokio::test]
    async fn unwritten_progress_survives_a_spec_edit_but_not_someone_elses_status() {
        let d = dispatcher().with_status_writes(std::time::Duration::from_secs(60), 0);
        let stored = first_write(&d, &running("a", "1"), "2");
        finish(&d, "uid-a", 100, 0);
        let mut round = d.plan(Arc::new(stored.clone()), Timestamp::now());
        d.commit_unwritten(&mut round);
        // A label added by someone: a new resourceVersion, the same status. The progress stays.
        let mut labelled = stored.clone();
        labelled.metadata.resource_version = Some("3".into());
        labelled.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        let round = d.plan(Arc::new(labelled.clone()), Timestamp::now());
        assert_eq!(successful(&round), 1);
        assert_eq!(round.run.metadata.resource_version.as_deref(), Some("3"), "written on top of the new version");
        // Someone else wrote status (e.g. another replica): ours is dropped, theirs is used.
        let mut theirs = labelled.clone();
        theirs.metadata.resource_version = Some("4".into());
        theirs.status.as_mut().unwrap().message = Some("theirs".into());
        let round = d.plan(Arc::new(theirs), Timestamp::now());
        assert_eq!(successful(&round), 0);
        assert_eq!(d.inner.metrics.status_writes_waiting.get(), 0);
    }

    #[tokio::test]
    async fn our_own_write_echoing_back_is_not_planned_again() {
        let d = dispatcher();
        let obj = running("a", "1");
        let round = d.plan(Arc::new(obj.clone()), Timestamp::now());
        assert_eq!(d.idle(&obj, Timestamp::now()), None, "never planned: plan");
        let w = written(&round, "2");
        d.commit(&round, Some(Arc::new(w.clone())));
        let now = Timestamp::now();
        let wake = d.idle(&w, now).expect("the echo of our write is idle");
        assert_eq!(wake, round.plan.wake_at);
        assert!(
            wake.is_some_and(|at| at > now + std::time::Duration::from_secs(3000)),
            "the first measurement is 1h away"
        );
        assert_eq!(d.idle(&w, now + std::time::Duration::from_secs(3601)), None, "due: plan");
        let mut edited = w.clone();
        edited.metadata.resource_version = Some("3".into());
        assert_eq!(d.idle(&edited, now), None, "another version: plan");
        finish(&d, "uid-a", 100, 0);
        assert_eq!(d.idle(&w, now), None, "a measurement finished: plan");
        d.slots().get_mut("uid-a").unwrap().finished.clear();
        d.slots().get_mut("uid-a").unwrap().granted = true;
        assert_eq!(d.idle(&w, now), None, "granted a write: plan");
    }

    /// Defers one progress write for each of `names` (in this order); returns the stored objects.
    fn defer_progress(d: &Dispatcher, names: &[String]) -> HashMap<String, HookRun> {
        let mut stored = HashMap::new();
        for name in names {
            let s = first_write(d, &running(name, "1"), "2");
            finish(d, &format!("uid-{name}"), 100, 0);
            let mut round = d.plan(Arc::new(s.clone()), Timestamp::now());
            if d.write_now(&round) {
                let w = written(&round, "3");
                d.commit(&round, Some(Arc::new(w.clone())));
                stored.insert(name.clone(), w);
            } else {
                d.commit_unwritten(&mut round);
                stored.insert(name.clone(), s);
            }
        }
        stored
    }

    #[tokio::test(start_paused = true)]
    async fn progress_writes_share_one_budget_oldest_first() {
        let woken = Arc::new(Mutex::new(Vec::<String>::new()));
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        let d = Dispatcher::new(providers, Arc::new(Metrics::default()), classic(), 10, {
            let woken = woken.clone();
            Arc::new(move |id: &RunId| woken.lock().unwrap().push(id.name.to_string()))
        })
        .with_status_writes(std::time::Duration::ZERO, 10);
        let flusher = d.start_status_writes();
        let names: Vec<String> = (0..40).map(|i| format!("r{i:02}")).collect();
        let stored = defer_progress(&d, &names);
        let immediate = names.iter().filter(|n| d.slots()[&format!("uid-{n}")].unwritten.is_none()).count();
        assert_eq!(immediate, 1, "the bucket holds one token at 10/s: the first write goes at once");
        // Two seconds: about 20 more grants, in the order the runs started waiting.
        tokio::time::sleep(std::time::Duration::from_millis(2050)).await;
        let grants = woken.lock().unwrap().clone();
        assert!((19..=21).contains(&grants.len()), "{} grants in 2 s at 10/s", grants.len());
        assert_eq!(grants, names[1..=grants.len()].to_vec(), "oldest unwritten first");
        // The granted runs write (their next round), the others still wait.
        for name in &grants {
            let round = d.plan(Arc::new(stored[name].clone()), Timestamp::now());
            assert!(d.write_now(&round), "{name} was granted its write");
            d.commit(&round, Some(Arc::new(written(&round, "3"))));
        }
        assert_eq!(d.inner.metrics.status_writes_waiting.get() as usize, 39 - grants.len());
        // A phase change never waits for the budget, even with every token taken.
        let late = &names[39];
        let mut round = d.plan(Arc::new(stored[late].clone()), Timestamp::now());
        assert!(!d.write_now(&round), "still in the queue");
        round.plan.status.phase = Some(HookPhase::Failed);
        assert!(d.write_now(&round));
        // Nobody starves: every run is granted within 40 / 10 s.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let grants = woken.lock().unwrap().clone();
        assert_eq!(grants, names[1..].to_vec());
        flusher.abort();
    }

    /// What a finished measurement adds to /metrics: its count by provider and phase, its duration by provider.
    #[tokio::test]
    async fn a_measurement_is_counted_by_provider_and_phase() {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut registry);
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        let woken = Arc::new(AtomicU64::new(0));
        let d = Dispatcher::new(providers, metrics, classic(), 10, {
            let woken = woken.clone();
            Arc::new(move |_: &RunId| {
                woken.fetch_add(1, Ordering::SeqCst);
            })
        });
        let round = d.plan(Arc::new(run("1", "0s")), Timestamp::now());
        d.commit(&round, None);
        for _ in 0..2000 {
            if woken.load(Ordering::SeqCst) > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        // 127.0.0.1:1 refuses: one web measurement, an Error.
        assert!(text.contains("hook_operator_measurements_total{provider=\"web\",phase=\"Error\"} 1\n"), "{text}");
        assert!(text.contains("hook_operator_measurement_duration_seconds_count{provider=\"web\"} 1\n"), "{text}");
    }

    /// The precise finish time a round records is remembered by its commit: the next round (nothing new finished)
    /// schedules the next measurement `interval` after that instant, not after the whole second status keeps.
    #[tokio::test]
    async fn the_next_round_plans_from_the_precise_finish_its_predecessor_committed() {
        let d = dispatcher();
        let stored = first_write(&d, &running("a", "1"), "2");
        let finished_at = Timestamp::from_nanosecond(Timestamp::now().as_nanosecond() / 1_000_000_000 * 1_000_000_000)
            .unwrap()
            + std::time::Duration::from_millis(1500);
        finish(&d, "uid-a", 100, 0);
        d.slots().get_mut("uid-a").unwrap().finished[0].finished_at = finished_at;
        let now = finished_at + std::time::Duration::from_millis(100);
        let recorded = d.plan(Arc::new(stored), now);
        assert_eq!(successful(&recorded), 1);
        let w = written(&recorded, "3");
        d.commit(&recorded, Some(Arc::new(w.clone())));
        let mut edited = w;
        edited.metadata.resource_version = Some("4".into());
        let next = d.plan(Arc::new(edited), now);
        assert!(next.plan.start.is_empty() && next.plan.arm.is_empty());
        assert_eq!(next.plan.wake_at, Some(finished_at + std::time::Duration::from_secs(1)), "interval 1s after it");
    }

    #[tokio::test]
    async fn a_fenced_run_is_not_measured() {
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        let woken = Arc::new(AtomicU64::new(0));
        let d = Dispatcher::new(providers, Arc::new(Metrics::default()), classic(), 10, {
            let woken = woken.clone();
            Arc::new(move |_: &RunId| {
                woken.fetch_add(1, Ordering::SeqCst);
            })
        })
        .with_fence(Arc::new(|id: &RunId| &*id.uid != "uid-r"));
        let round = d.plan(Arc::new(run("1", "0s")), Timestamp::now());
        assert_eq!(round.plan.start.len(), 1);
        d.commit(&round, None);
        for _ in 0..2000 {
            if woken.load(Ordering::SeqCst) > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let slots = d.slots();
        let slot = slots.get("uid-r").unwrap();
        assert!(slot.in_flight.is_empty() && slot.finished.is_empty(), "nothing measured, nothing recorded");
        assert_eq!(woken.load(Ordering::SeqCst), 1, "woken once: a round decides (a gone run is forgotten there)");
        assert!(slot.idle.is_none(), "and that round plans instead of taking the run for idle");
    }

    #[tokio::test]
    async fn completed_runs_are_forgotten_and_their_measurements_cancelled() {
        let d = dispatcher();
        let round = d.plan(Arc::new(run("1", "0s")), Timestamp::now());
        assert_eq!(round.plan.start.len(), 1);
        d.commit(&round, None);
        assert_eq!(d.tracked_runs(), 1);
        let mut done = run("3", "0s");
        done.status = Some(common::api::HookRunStatus { phase: Some(HookPhase::Successful), ..Default::default() });
        let round = d.plan(Arc::new(done), Timestamp::now());
        assert!(round.plan.completed && !round.changed);
        d.commit(&round, None);
        assert_eq!(d.tracked_runs(), 0);
        d.retain(|_| false);
    }

    /// A dispatcher that arms measurements (the production setting), counting the wake-ups of its runs.
    fn arming() -> (Dispatcher, Arc<AtomicU64>) {
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        let woken = Arc::new(AtomicU64::new(0));
        let d = Dispatcher::new(providers, Arc::new(Metrics::default()), EngineSettings::default(), 10, {
            let woken = woken.clone();
            Arc::new(move |_: &RunId| {
                woken.fetch_add(1, Ordering::SeqCst);
            })
        });
        (d, woken)
    }

    #[tokio::test]
    async fn an_armed_measurement_starts_when_due_without_another_round() {
        let (d, woken) = arming();
        // Every 3 s: the "not yet" check below has seconds of margin on a loaded machine.
        let mut every_3s = running("a", "1");
        every_3s.spec.metrics[0].interval = Some("3s".into());
        let stored = first_write(&d, &every_3s, "2");
        finish(&d, "uid-a", 100, 0);
        let round = d.plan(Arc::new(stored), Timestamp::now());
        assert!(round.plan.start.is_empty(), "the next measurement is 3 s away");
        assert_eq!(round.plan.arm.len(), 1);
        assert_eq!(round.plan.wake_at, None, "no round is needed to start it");
        d.commit(&round, Some(Arc::new(written(&round, "3"))));
        assert!(d.slots()["uid-a"].in_flight.contains_key("m"), "armed: counted as in flight, never started twice");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(woken.load(Ordering::SeqCst), 0, "not due yet: not measured");
        assert!(d.slots()["uid-a"].finished.is_empty());
        let mut waited = 0;
        while woken.load(Ordering::SeqCst) == 0 && waited < 300 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            waited += 1;
        }
        assert_eq!(woken.load(Ordering::SeqCst), 1, "measured once it was due, and the run woken to record it");
        let slots = d.slots();
        let slot = &slots["uid-a"];
        assert!(slot.in_flight.is_empty());
        assert_eq!(slot.finished.len(), 1);
        assert_eq!(slot.finished[0].taken_before, 1, "recorded on top of the measurement that armed it");
        // The endpoint (127.0.0.1:1) refuses: an Error measurement, taken no earlier than it was due.
        assert_eq!(slot.finished[0].measurement.phase, Some(HookPhase::Error));
        let started = slot.finished[0].measurement.started_at.as_ref().map(|t| t.0);
        assert!(
            started.is_some_and(|t| t >= round.plan.arm[0].due),
            "started {started:?}, due {}",
            round.plan.arm[0].due
        );
    }

    /// 10,000 runs keep 10,000 armed tasks asleep: each must stay small (the HTTP exchange's state, ~2.6 KiB, is
    /// boxed and allocated only once the measurement runs).
    #[tokio::test]
    async fn an_armed_measurement_is_a_small_task() {
        let (d, _) = arming();
        let start = Armed { index: 0, due: Timestamp::now(), taken_before: 0 };
        let task = d.clone().measure(RunId::of(&running("a", "1")), start, Arc::new(running("a", "1").spec), 1);
        let size = std::mem::size_of_val(&task);
        assert!(size <= 1024, "the measurement task is {size} bytes");
    }

    /// Progress is not written when the measurement that completes the run is started or armed and due within
    /// `min_interval`: the completion, written at once, carries it. An error (no count consumed) ends that.
    #[tokio::test]
    async fn progress_waits_for_a_completion_due_within_the_write_interval() {
        let (d, _) = arming();
        let d = d.with_status_writes(std::time::Duration::from_secs(60), 0);
        // `count: 2`, every 30 s: after the first measurement, the second completes the run and is due within 60 s.
        let progress_after_first = |count: i32, phase: HookPhase| {
            let name = format!("c{count}-{phase:?}");
            let uid = format!("uid-{name}");
            let mut obj = running(&name, "1");
            obj.spec.metrics[0].count = count;
            obj.spec.metrics[0].interval = Some("30s".into());
            let stored = first_write(&d, &obj, "2");
            finish(&d, &uid, 100, 0);
            d.slots().get_mut(&uid).unwrap().finished[0].measurement.phase = Some(phase);
            let mut round = d.plan(Arc::new(stored), Timestamp::now());
            assert_eq!(round.plan.arm.len(), 1, "{name}: the next measurement is armed");
            // The interval since the last write is over: only the coming completion can hold the progress back.
            d.slots().get_mut(&uid).unwrap().last_write_at = None;
            let now = d.write_now(&round);
            if !now {
                d.commit_unwritten(&mut round);
            }
            let queued = d.slots()[&uid].queued.is_some();
            d.forget(&uid);
            (now, queued)
        };
        assert_eq!(
            progress_after_first(2, HookPhase::Successful),
            (false, false),
            "held for the completion, not queued"
        );
        assert_eq!(progress_after_first(3, HookPhase::Successful), (true, false), "two more to go: written");
        assert_eq!(progress_after_first(2, HookPhase::Error), (true, false), "an error consumed no count: written");
    }

    #[tokio::test]
    async fn an_armed_measurement_is_called_off_when_the_spec_changes() {
        let (d, woken) = arming();
        let stored = first_write(&d, &running("a", "1"), "2");
        finish(&d, "uid-a", 100, 0);
        let round = d.plan(Arc::new(stored), Timestamp::now());
        let w = written(&round, "3");
        d.commit(&round, Some(Arc::new(w.clone())));
        let armed = d.slots()["uid-a"].in_flight["m"].token;
        // The interval is raised to 10 minutes (a new generation) while the measurement sleeps.
        let mut edited = w;
        edited.metadata.resource_version = Some("4".into());
        edited.metadata.generation = Some(2);
        edited.spec.metrics[0].interval = Some("10m".into());
        let replanned = d.plan(Arc::new(edited), Timestamp::now());
        assert!(!d.slots()["uid-a"].in_flight.contains_key("m"), "called off while it slept");
        assert!(replanned.plan.arm.is_empty() && replanned.plan.start.is_empty());
        assert!(replanned.plan.wake_at.is_some(), "due in 10 minutes (beyond arm_ahead): the run is woken then");
        d.commit(&replanned, None);
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        assert_eq!(woken.load(Ordering::SeqCst), 0, "the called-off measurement was never taken");
        assert!(d.slots()["uid-a"].in_flight.values().all(|f| f.token != armed));
    }
}
