//! Where reconcile rounds meet measurements. A round plans (pure, [`crate::engine::plan`]), the caller stores
//! the new status, then [`Dispatcher::commit`] starts the due measurements as independent tasks and returns
//! at once. When a measurement finishes, its result waits here and the run is woken; the next round records
//! it. So a reconcile never waits for a provider, a hanging webhook only occupies its own task (bounded by
//! its timeout), and `--max-in-flight` bounds the measurements running at any moment across all runs.
//!
//! One file per concept, in the order a round meets them:
//!
//! - `runs.rs`: what is remembered per run beyond its status (exact timestamps, the validation verdict per
//!   generation, the last status written, the measurements in flight and finished);
//! - `outline.rs`: a run's status apart from its histories, kept in its memory to tell a changed status cheaply;
//! - `rounds.rs`: planning a round on that memory and committing it;
//! - `writes.rs`: the status-write budget, which decides whether a round's status is written now or waits in
//!   memory, and the task that serves its queue;
//! - `ticks.rs`: armed measurements waiting for their tick, per shard, started in batches by one task per shard;
//! - `measurements.rs`: a measurement's task, from started through its slot to the result delivered back to its
//!   run.

mod measurements;
mod outline;
mod rounds;
mod runs;
#[cfg(test)]
mod tests;
mod ticks;
mod writes;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, Semaphore};

use crate::metrics::Metrics;
use crate::providers::Providers;
use crate::settings::EngineSettings;

pub use rounds::Round;
pub use runs::RunId;
use runs::Slot;
use writes::WriteBudget;

/// Called when a run should get another round (a measurement of it finished).
pub type Wake = Arc<dyn Fn(&RunId) + Send + Sync>;

/// See [`Dispatcher::with_fence`].
pub type Fence = Arc<dyn Fn(&RunId) -> bool + Send + Sync>;

/// Receives every scheduling lag (the benchmark records exact percentiles with it).
pub type LagObserver = Arc<dyn Fn(std::time::Duration) + Send + Sync>;

/// Plans rounds on what it remembers of each run, decides their status writes and runs their measurements.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

/// The dispatcher's state, shared by its clones and its tasks.
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
    /// Coalesced status writes (see [`writes`]). Lock order: `slots`, then `writes`.
    writes: Mutex<WriteBudget>,
    /// Told when a run joins the write queue.
    write_queued: Notify,
    /// Armed measurements by shard and tick (see [`ticks`]).
    ticks: ticks::Ticks,
}

impl Dispatcher {
    /// A dispatcher measuring through `providers`, at most `max_in_flight` measurements at once, calling `wake` when
    /// a run's measurement finished.
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
                ticks: ticks::Ticks::per_core(),
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

    /// The engine settings runs are planned with.
    pub fn settings(&self) -> &EngineSettings {
        &self.inner.settings
    }
}

/// Waits until `woken` (a [`Notify`]'s `notified()`) or until `until`, whichever comes first; with no `until`, for
/// `woken` alone. How both of the dispatcher's background loops sleep: a shard until its next tick or an earlier
/// arrival, the status writer until its next grant or a new write.
async fn woken_or_until(woken: tokio::sync::futures::Notified<'_>, until: Option<tokio::time::Instant>) {
    match until {
        Some(at) => {
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(at) => {}
            }
        }
        None => woken.await,
    }
}
