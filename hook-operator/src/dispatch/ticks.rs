//! Armed measurements wait here, by tick, not in tasks of their own. A round that records a measurement arms the
//! next one (see [`crate::engine::Plan::arm`]); before, each armed measurement was a task sleeping on its own timer,
//! so 10,000 runs measured once a second were 10,000 timers and 10,000 task wake-ups a second. Now the runs are
//! spread over a few shards (by uid); each shard keeps its armed measurements ordered by the tick (1 ms, tokio's
//! timer resolution) they are due in, and one task per shard sleeps on one timer until the next tick that has any.
//! When it wakes it takes every measurement due by then as one batch and starts them under one lock of the runs'
//! memory; each then runs as its own task (a hanging endpoint occupies only its task, and it can be aborted).
//!
//! A measurement called off while armed (the run forgotten, its spec edited) stays queued until its tick and is
//! dropped then: its run's memory no longer holds its token.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use common::api::HookRunSpec;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::runs::RunId;
use super::{Dispatcher, Inner};
use crate::engine::schedule;

/// The resolution measurements are started with: tokio's timer resolution.
const TICK: Duration = Duration::from_millis(1);

/// What a measurement task needs of its [`crate::engine::Start`] (the metric's name is in its spec, at `index`).
#[derive(Clone, Copy)]
pub(super) struct Armed {
    pub(super) index: usize,
    pub(super) due: Timestamp,
    pub(super) taken_before: i32,
    /// A retake ([`crate::engine::lost`]): its outcome counts only against the run.
    pub(super) retake: bool,
}

/// An armed measurement waiting for its tick.
pub(super) struct Waiting {
    pub(super) id: RunId,
    pub(super) armed: Armed,
    pub(super) spec: Arc<HookRunSpec>,
    /// What the run kept from its previous measurement of the metric.
    pub(super) kept: crate::providers::Kept,
}

/// One shard's armed measurements, by (tick, token).
#[derive(Default)]
struct Queue {
    due: BTreeMap<(u64, u64), Waiting>,
    /// Whether the shard's task runs.
    served: bool,
}

/// Shared by the dispatcher and the shard's task (which holds the dispatcher only while it starts a batch).
struct Shard {
    queue: Mutex<Queue>,
    /// Told when a measurement is queued ahead of the one the task sleeps for.
    earlier: Notify,
}

/// The shards and their clock.
pub(super) struct Ticks {
    shards: Box<[Arc<Shard>]>,
    /// Tick 0.
    origin: Instant,
    /// How long a tick is.
    tick: Duration,
    /// Times a shard's task woke and started a batch, and the measurements those batches started.
    batches: AtomicU64,
    started: AtomicU64,
}

impl Ticks {
    /// `shards` shards (at least one) of ticks of `tick` (at least 1 ms).
    pub(super) fn new(shards: usize, tick: Duration) -> Self {
        let shards =
            (0..shards.max(1)).map(|_| Arc::new(Shard { queue: Mutex::default(), earlier: Notify::new() })).collect();
        let tick = tick.max(TICK);
        Self { shards, origin: Instant::now(), tick, batches: AtomicU64::new(0), started: AtomicU64::new(0) }
    }

    /// One shard per core, the runtime's default worker count.
    pub(super) fn per_core() -> Self {
        Self::new(std::thread::available_parallelism().map_or(1, |n| n.get()).min(16), TICK)
    }

    fn shard_of(&self, uid: &str) -> usize {
        // FNV-1a: stable, cheap, and no allocation.
        let hash = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        (hash % self.shards.len() as u64) as usize
    }

    /// The first tick that starts at or after `at`.
    fn tick_at_or_after(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.origin);
        let nanos = since.as_nanos().div_ceil(self.tick.as_nanos());
        u64::try_from(nanos).unwrap_or(u64::MAX)
    }

    /// The tick `now` is in (the last that started).
    fn tick_of(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin);
        u64::try_from(since.as_nanos() / self.tick.as_nanos()).unwrap_or(u64::MAX)
    }

    fn start_of(&self, tick: u64) -> Instant {
        // In nanoseconds as u64: 584 years of ticks (a u32 count of milliseconds would end after 49 days).
        let nanos = u64::try_from(self.tick.as_nanos()).unwrap_or(u64::MAX).saturating_mul(tick);
        self.origin + Duration::from_nanos(nanos)
    }

    /// (batches, measurements started by them) so far.
    #[cfg(test)]
    pub(super) fn counts(&self) -> (u64, u64) {
        (self.batches.load(Ordering::Relaxed), self.started.load(Ordering::Relaxed))
    }
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // A poisoned lock only means another thread panicked while holding it; the queue itself stays usable.
    queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Dispatcher {
    /// Armed measurements wait in `shards` shards of ticks of `tick` instead of one shard per core and ticks of
    /// 1 ms. Call before the dispatcher is cloned or arms anything.
    #[cfg(test)]
    pub(super) fn with_ticks(mut self, shards: usize, tick: Duration) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.ticks = Ticks::new(shards, tick);
        }
        self
    }

    /// (batches started by the shards' tasks, measurements started by them) so far.
    #[cfg(test)]
    pub(super) fn tick_counts(&self) -> (u64, u64) {
        self.inner.ticks.counts()
    }

    /// Queues an armed measurement for the tick its due time falls in (never earlier): the wall-clock time until it
    /// is due, on the monotonic clock the shard sleeps on.
    pub(super) fn arm(&self, token: u64, waiting: Waiting) {
        let ticks = &self.inner.ticks;
        let now = Instant::now();
        let tick = ticks.tick_at_or_after(now + schedule::until(Timestamp::now(), waiting.armed.due));
        let index = ticks.shard_of(&waiting.id.uid);
        let shard = &ticks.shards[index];
        let (first, serve) = {
            let mut queue = lock(&shard.queue);
            let first = queue.due.first_key_value().is_none_or(|((t, _), _)| tick < *t);
            queue.due.insert((tick, token), waiting);
            (first, !std::mem::replace(&mut queue.served, true))
        };
        if serve {
            tokio::spawn(serve_shard(Arc::downgrade(&self.inner), shard.clone()));
        } else if first {
            shard.earlier.notify_one();
        }
    }

    /// Starts a batch (emptied): each measurement its run still waits for (its token is still the run's in-flight
    /// one) gets its task; the others were called off. Returns how many started.
    fn start_batch(&self, batch: &mut Vec<(u64, Waiting)>) -> u64 {
        let mut slots = self.slots();
        let mut started = 0;
        for (token, waiting) in batch.drain(..) {
            let Some(slot) = slots.get_mut(&*waiting.id.uid) else { continue };
            let Some(metric) = waiting.spec.metrics.get(waiting.armed.index) else { continue };
            let Some(in_flight) = slot.in_flight.get_mut(&metric.name).filter(|f| f.token == token) else { continue };
            let Waiting { id, armed, spec, kept } = waiting;
            let task = tokio::spawn(self.clone().measure(id, armed, spec, token, kept));
            in_flight.task = Some(task.abort_handle());
            started += 1;
        }
        started
    }
}

/// A shard's task: sleeps until the next tick that has measurements (or until one is queued ahead of it), then
/// starts everything due by the current tick as one batch. It holds its dispatcher only while it starts a batch, and
/// ends at its first wake-up after the dispatcher is gone.
async fn serve_shard(inner: Weak<Inner>, shard: Arc<Shard>) {
    // Reused from batch to batch.
    let mut batch: Vec<(u64, Waiting)> = Vec::new();
    loop {
        let Some(dispatcher) = inner.upgrade().map(|inner| Dispatcher { inner }) else { return };
        let ticks = &dispatcher.inner.ticks;
        let now = ticks.tick_of(Instant::now());
        let next = {
            let mut queue = lock(&shard.queue);
            while let Some(entry) = queue.due.first_entry().filter(|e| e.key().0 <= now) {
                let ((_, token), waiting) = entry.remove_entry();
                batch.push((token, waiting));
            }
            queue.due.first_key_value().map(|((tick, _), _)| *tick)
        };
        if !batch.is_empty() {
            let started = dispatcher.start_batch(&mut batch);
            ticks.batches.fetch_add(1, Ordering::Relaxed);
            ticks.started.fetch_add(started, Ordering::Relaxed);
        }
        let until = next.map(|tick| ticks.start_of(tick));
        drop(dispatcher);
        super::woken_or_until(shard.earlier.notified(), until).await;
    }
}
