//! Where reconcile rounds meet measurements. A round plans (pure, [`crate::engine::plan`]), the caller stores
//! the new status, then [`Dispatcher::commit`] starts the due measurements as independent tasks and returns
//! at once. When a measurement finishes, its result waits here and the run is woken; the next round records
//! it. So a reconcile never waits for a provider, a hanging webhook only occupies its own task (bounded by
//! its timeout), and `--max-in-flight` bounds the measurements running at any moment across all runs.
//!
//! Per run it also remembers what status cannot hold: exact timestamps (status has whole seconds), the
//! validation verdict per generation, and the last status written (to detect a stale cache: a round that
//! sees the resourceVersion its own write replaced uses the written object instead).

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use common::api::HookRun;
use futures::FutureExt;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;

use crate::engine::{self, Finished, Inputs, Plan, Precise};
use crate::measure;
use crate::metrics::{MeasurementLabels, Metrics, ProviderLabels};
use crate::providers::Providers;
use crate::schedule;
use crate::settings::EngineSettings;
use crate::validate;

/// Identifies a run across rounds. The uid keeps a deleted-and-recreated run from inheriting memory.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

impl RunId {
    pub fn of(run: &HookRun) -> Self {
        let meta = &run.metadata;
        Self {
            uid: meta.uid.clone().unwrap_or_else(|| {
                format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                )
            }),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

/// Called when a run should get another round (a measurement of it finished).
pub type Wake = Arc<dyn Fn(&RunId) + Send + Sync>;

#[derive(Default)]
struct Slot {
    /// Metric name → (token, task) of the measurement running for it.
    in_flight: HashMap<String, (u64, Option<AbortHandle>)>,
    finished: Vec<Finished>,
    precise: Precise,
    validated: Option<(Option<i64>, Result<(), String>)>,
    /// (resourceVersion the write was based on, the object the API server returned).
    last_write: Option<(String, Arc<HookRun>)>,
    /// When the status was last written, for coalescing writes.
    last_write_at: Option<std::time::Instant>,
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
}

/// See [`Dispatcher::with_fence`].
pub type Fence = Arc<dyn Fn(&str) -> bool + Send + Sync>;

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

    /// Checks `fence(uid)` right before each measurement starts (after waiting for its slot): when it says no
    /// (this replica no longer holds the run's shard), the measurement is not taken and nothing is recorded. Call
    /// before the dispatcher is cloned.
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

    /// Whether a round that changed the status may write it now: at once when the phase changes (or the run has
    /// no status yet), otherwise at most once per `min_interval` per run. `Some(wait)`: defer the round (do not
    /// write or commit it) and plan again after `wait`; the finished measurements stay here meanwhile.
    pub fn write_deferral(&self, round: &Round, min_interval: std::time::Duration) -> Option<std::time::Duration> {
        let stored_phase = round.run.status.as_ref().and_then(|s| s.phase);
        if !round.changed || round.plan.completed || stored_phase != round.plan.status.phase || stored_phase.is_none() {
            return None;
        }
        let slots = self.slots();
        let last = slots.get(&round.id.uid)?.last_write_at?;
        let since = last.elapsed();
        (since < min_interval).then(|| min_interval - since)
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
        let id = RunId::of(&run);
        let mut slots = self.slots();
        let slot = slots.entry(id.uid.clone()).or_default();
        let run = match (&slot.last_write, &run.metadata.resource_version) {
            (Some((based_on, written)), Some(seen)) if based_on == seen => written.clone(),
            _ => run,
        };
        let generation = run.metadata.generation;
        let validation = match &slot.validated {
            Some((validated, verdict)) if *validated == generation && generation.is_some() => verdict.clone(),
            _ => {
                let verdict = validate::run(&run.spec);
                slot.validated = Some((generation, verdict.clone()));
                verdict
            }
        };
        let in_flight: HashSet<String> = slot.in_flight.keys().cloned().collect();
        let plan = engine::plan(&Inputs {
            spec: &run.spec,
            status: run.status.as_ref(),
            invalid: validation.as_ref().err().map(String::as_str),
            finished: &slot.finished,
            in_flight: &in_flight,
            precise: &slot.precise,
            now,
            settings: &self.inner.settings,
        });
        let changed = run.status.as_ref().is_none_or(|s| *s != plan.status);
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
        let slot = slots.entry(round.id.uid.clone()).or_default();
        slot.finished.retain(|f| !round.plan.consumed.contains(&f.id));
        slot.precise = round.plan.precise.clone();
        if round.changed {
            slot.last_write_at = Some(std::time::Instant::now());
        }
        if let (Some(written), Some(based_on)) = (written, round.run.metadata.resource_version.clone()) {
            slot.last_write = Some((based_on, written));
        }
        for start in &round.plan.start {
            if slot.in_flight.contains_key(&start.metric) || start.index >= round.run.spec.metrics.len() {
                continue;
            }
            let token = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
            let task = tokio::spawn(self.clone().measure(round.id.clone(), start.clone(), round.run.clone(), token));
            slot.in_flight.insert(start.metric.clone(), (token, Some(task.abort_handle())));
        }
    }

    async fn measure(self, id: RunId, start: engine::Start, run: Arc<HookRun>, token: u64) {
        let metric = &run.spec.metrics[start.index];
        let metrics = &self.inner.metrics;
        metrics.waiting.inc();
        let waiting = GaugeGuard(&metrics.waiting);
        // The namespace's share first, then a global slot: a namespace at its share waits without holding a
        // global slot. The semaphores are never closed, so acquiring only fails if that invariant breaks.
        let namespace_permit = self.namespace_permits(&id.namespace).acquire_owned().await.ok();
        let permit = self.inner.permits.clone().acquire_owned().await.ok();
        drop(waiting);
        if let Some(fence) = &self.inner.fence
            && !fence(&id.uid)
        {
            // Not ours any more (a shard lost or given up): the new owner takes this slot.
            let mut slots = self.slots();
            if let Some(slot) = slots.get_mut(&id.uid)
                && slot.in_flight.get(&start.metric).is_some_and(|(t, _)| *t == token)
            {
                slot.in_flight.remove(&start.metric);
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
        let taken = match AssertUnwindSafe(measure::take_in(
            &self.inner.providers,
            &id.namespace,
            metric,
            &run.spec.args,
        ))
        .catch_unwind()
        .await
        {
            Ok(taken) => taken,
            Err(panic) => {
                let message = crate::budget::panic_message(panic.as_ref());
                tracing::error!(run = %id.name, namespace = %id.namespace, metric = %start.metric, %message, "a measurement panicked");
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
        // The run's object is not needed any more: released before the run is woken, so the next round can update
        // it in place instead of copying the whole HookRun (spec and status) because this task still held it.
        drop(run);
        let phase = taken.measurement.phase.map(|p| p.as_str()).unwrap_or("Unknown");
        metrics
            .measurements
            .get_or_create(&MeasurementLabels { provider: taken.provider.to_string(), phase: phase.to_string() })
            .inc();
        metrics
            .measurement_duration
            .get_or_create(&ProviderLabels { provider: taken.provider.to_string() })
            .observe(taken.latency.as_secs_f64());
        tracing::debug!(run = %id.name, namespace = %id.namespace, metric = %start.metric, phase, "measurement finished");
        let delivered = {
            let mut slots = self.slots();
            match slots.get_mut(&id.uid) {
                Some(slot) if slot.in_flight.get(&start.metric).is_some_and(|(t, _)| *t == token) => {
                    slot.in_flight.remove(&start.metric);
                    slot.finished.push(Finished {
                        id: token,
                        metric: start.metric.clone(),
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
            for (_, (_, task)) in slot.in_flight {
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

    fn dispatcher() -> Dispatcher {
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        Dispatcher::new(
            providers,
            Arc::new(Metrics::default()),
            EngineSettings::default(),
            10,
            Arc::new(|_: &RunId| {}),
        )
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

    #[tokio::test]
    async fn status_writes_of_a_running_run_are_coalesced() {
        let d = dispatcher();
        let first = d.plan(Arc::new(run("1", "1h")), Timestamp::now());
        assert_eq!(
            d.write_deferral(&first, std::time::Duration::from_secs(1)),
            None,
            "the first write is never deferred"
        );
        let mut written = run("2", "1h");
        written.status = Some(first.plan.status.clone());
        d.commit(&first, Some(Arc::new(written.clone())));
        // A change that keeps the phase, right after a write: deferred.
        let mut changed = Round { changed: true, ..d.plan(Arc::new(written.clone()), Timestamp::now()) };
        changed.plan.status.message = Some("something new".into());
        let wait = d.write_deferral(&changed, std::time::Duration::from_secs(1)).expect("deferred");
        assert!(wait <= std::time::Duration::from_secs(1));
        // A phase change is written at once.
        changed.plan.status.phase = Some(HookPhase::Error);
        assert_eq!(d.write_deferral(&changed, std::time::Duration::from_secs(1)), None);
        // With no interval nothing is deferred.
        changed.plan.status.phase = written.status.as_ref().and_then(|s| s.phase);
        assert_eq!(d.write_deferral(&changed, std::time::Duration::ZERO), None);
    }

    #[tokio::test]
    async fn a_fenced_run_is_not_measured() {
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        let woken = Arc::new(AtomicU64::new(0));
        let d = Dispatcher::new(providers, Arc::new(Metrics::default()), EngineSettings::default(), 10, {
            let woken = woken.clone();
            Arc::new(move |_: &RunId| {
                woken.fetch_add(1, Ordering::SeqCst);
            })
        })
        .with_fence(Arc::new(|uid: &str| uid != "uid-r"));
        let round = d.plan(Arc::new(run("1", "0s")), Timestamp::now());
        assert_eq!(round.plan.start.len(), 1);
        d.commit(&round, None);
        for _ in 0..200 {
            if d.slots().get("uid-r").is_some_and(|s| s.in_flight.is_empty()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let slots = d.slots();
        let slot = slots.get("uid-r").unwrap();
        assert!(slot.in_flight.is_empty() && slot.finished.is_empty(), "nothing measured, nothing recorded");
        assert_eq!(woken.load(Ordering::SeqCst), 0);
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
}
