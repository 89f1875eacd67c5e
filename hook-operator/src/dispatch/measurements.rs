//! A measurement's task, from start to result: armed (sleeping until due, holding no slot), waiting for its
//! namespace's share and a global slot, checked against the fence, measured (a panic becomes an Error
//! measurement), and delivered back to its run, which is woken.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::api::{Argument, HookRunSpec, Metric};
use futures::FutureExt;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::runs::{InFlight, RunId, Slot};
use super::ticks::{Armed, Waiting};
use super::{Dispatcher, Fence, Round};
use crate::engine::{Finished, schedule};
use crate::measure;
use crate::metrics::{MeasurementLabels, ProviderLabels};
use crate::providers::Kept;

/// What a finished measurement is delivered with, besides its result.
struct Delivery<'a> {
    /// The measurement's token: delivered only while its run still waits for it.
    token: u64,
    /// See [`Finished::taken_before`].
    taken_before: i32,
    /// The measurement stands for an outcome a crash lost (see `engine::lost`).
    lost: bool,
    /// The metric's index in the spec the measurement was taken on, and that spec (what the run keeps for the
    /// metric's next measurement is kept only while the run measures that same spec).
    index: usize,
    spec: &'a Arc<HookRunSpec>,
}

/// Decrements a gauge when dropped, so aborted tasks are accounted for too.
struct GaugeGuard<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Dispatcher {
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

    /// Starts a task for each measurement the round started, and queues each it armed for its tick (see
    /// [`super::ticks`]), unless one is in flight for the metric already.
    pub(super) fn start_measurements(&self, slot: &mut Slot, round: &Round) {
        let generation = round.run.metadata.generation;
        let armed_from = round.plan.start.len();
        for (i, start) in round.plan.start.iter().chain(&round.plan.arm).enumerate() {
            if slot.in_flight.contains_key(&start.metric) || start.index >= round.run.spec.metrics.len() {
                continue;
            }
            let spec = match &slot.spec {
                Some((g, spec)) if *g == generation && generation.is_some() => spec.clone(),
                _ => {
                    let spec = Arc::new(round.run.spec.clone());
                    slot.spec = Some((generation, spec.clone()));
                    // What the run kept from its measurements was made from the spec before.
                    slot.kept.clear();
                    spec
                }
            };
            let kept = slot.take_kept(start.index);
            let token = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
            let armed = Armed {
                index: start.index,
                due: start.due,
                taken_before: start.taken_before,
                retake: slot.retakes.contains(&start.metric),
            };
            let task = if i < armed_from {
                Some(tokio::spawn(self.clone().measure(round.id.clone(), armed, spec, token, kept)).abort_handle())
            } else {
                // Armed: its task is made when its tick comes.
                self.arm(token, Waiting { id: round.id.clone(), armed, spec, kept });
                None
            };
            let entry = InFlight { token, task, generation, due: start.due };
            let name = slot.name(&start.metric);
            slot.in_flight.insert(name, entry);
        }
    }

    /// A measurement's task, in steps: a slot, the fence, the measurement, its delivery. `kept`: what the run kept
    /// from its previous measurement of the metric, handed back with this one's result.
    pub(super) async fn measure(self, id: RunId, start: Armed, spec: Arc<HookRunSpec>, token: u64, mut kept: Kept) {
        // Started at its tick, never before its due time; the wall clock may still be short of it by a hair (the
        // shard sleeps on the monotonic clock): the rest is waited here (holding no slot).
        let early = schedule::until(Timestamp::now(), start.due);
        if !early.is_zero() {
            tokio::time::sleep(early).await;
        }
        let metric = &spec.metrics[start.index];
        let (namespace_permit, permit) = self.slot_for(&id.namespace).await;
        if let Some(fence) = &self.inner.fence
            && !fence(&id)
        {
            self.call_off(&id, &metric.name, token);
            return;
        }
        self.observe_lag(start.due);
        let taken = self.take(&id, metric, &spec.args, &mut kept).await;
        drop(permit);
        drop(namespace_permit);
        self.count(&id, &metric.name, &taken);
        let (taken, lost) = if start.retake {
            let (measurement, lost) = crate::engine::lost::retake(taken.measurement);
            (measure::Taken { measurement, ..taken }, lost)
        } else {
            (taken, false)
        };
        let delivery = Delivery { token, taken_before: start.taken_before, lost, index: start.index, spec: &spec };
        self.deliver(&id, &metric.name, delivery, taken, kept);
    }

    /// Waits for the namespace's share first, then a global slot: a namespace at its share waits without holding a
    /// global slot. The semaphores are never closed, so acquiring only fails if that invariant breaks.
    async fn slot_for(&self, namespace: &str) -> (Option<OwnedSemaphorePermit>, Option<OwnedSemaphorePermit>) {
        let metrics = &self.inner.metrics;
        metrics.waiting.inc();
        let _waiting = GaugeGuard(&metrics.waiting);
        let namespace_permit = self.namespace_permits(namespace).acquire_owned().await.ok();
        let permit = self.inner.permits.clone().acquire_owned().await.ok();
        (namespace_permit, permit)
    }

    /// The fence said no: the run is gone, or not ours any more (a shard lost or given up), and the new owner takes
    /// this slot. Nothing is recorded.
    fn call_off(&self, id: &RunId, metric: &str, token: u64) {
        let called_off = {
            let mut slots = self.slots();
            match slots.get_mut(&*id.uid) {
                Some(slot) if slot.in_flight.get(metric).is_some_and(|f| f.token == token) => {
                    slot.in_flight.remove(metric);
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
            (self.inner.wake)(id);
        }
    }

    fn observe_lag(&self, due: Timestamp) {
        let lag = schedule::until(due, Timestamp::now());
        self.inner.metrics.scheduling_lag.observe(lag.as_secs_f64());
        if let Some(observer) = &self.inner.lag_observer {
            observer(lag);
        }
    }

    /// Takes the measurement. A panic anywhere in it becomes an Error measurement, so its in-flight entry is cleared
    /// and the run moves on (a task that panicked used to leave the run Running forever).
    async fn take(&self, id: &RunId, metric: &Metric, args: &[Argument], kept: &mut Kept) -> measure::Taken {
        let metrics = &self.inner.metrics;
        metrics.in_flight.inc();
        let _running = GaugeGuard(&metrics.in_flight);
        let started_at = Timestamp::now();
        // Boxed: the measurement's state (HTTP exchange and all) is allocated only while it runs, so an armed task
        // that sleeps until its due time stays small (and spawning it copies little).
        let taking = Box::pin(measure::take_kept(&self.inner.providers, &id.namespace, metric, args, kept));
        let outcome = AssertUnwindSafe(taking).catch_unwind().await;
        match outcome {
            Ok(taken) => taken,
            Err(panic) => {
                // Whatever the measurement left half done is not reused.
                *kept = Kept::default();
                let message = crate::conditions::budget::panic_message(panic.as_ref());
                tracing::error!(run = %id.name, namespace = %id.namespace, metric = %metric.name, %message, "a measurement panicked");
                measure::failed(
                    started_at,
                    format!(
                        "the operator failed while measuring (internal error: {message}); the measurement is retried"
                    ),
                )
            }
        }
    }

    fn count(&self, id: &RunId, metric: &str, taken: &measure::Taken) {
        let metrics = &self.inner.metrics;
        let phase = taken.measurement.phase.map(|p| p.as_str()).unwrap_or("Unknown");
        metrics.measurements.get_or_create(&MeasurementLabels { provider: taken.provider, phase }).inc();
        metrics
            .measurement_duration
            .get_or_create(&ProviderLabels { provider: taken.provider })
            .observe(taken.latency.as_secs_f64());
        tracing::debug!(run = %id.name, namespace = %id.namespace, metric = %metric, phase, "measurement finished");
    }

    /// Hands the measurement to its run (unless the run forgot it meanwhile), with what it keeps for the next one,
    /// and wakes the run.
    fn deliver(&self, id: &RunId, metric: &str, delivery: Delivery<'_>, taken: measure::Taken, kept: Kept) {
        let Delivery { token, taken_before, lost, index, spec } = delivery;
        let delivered = {
            let mut slots = self.slots();
            match slots.get_mut(&*id.uid) {
                Some(slot) if slot.in_flight.get(metric).is_some_and(|f| f.token == token) => {
                    slot.no_longer_in_flight(metric);
                    slot.retakes.retain(|m| m != metric);
                    slot.keep(index, spec, kept);
                    let metric = slot.name(metric);
                    slot.finished.push(Finished {
                        id: token,
                        metric,
                        measurement: taken.measurement,
                        finished_at: taken.finished_at,
                        taken_before,
                        lost,
                    });
                    true
                }
                _ => false,
            }
        };
        if delivered {
            (self.inner.wake)(id);
        }
    }
}
