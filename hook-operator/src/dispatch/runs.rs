//! What the dispatcher remembers per run beyond its status: its id, the measurements in flight and finished, the
//! exact timestamps (status has whole seconds), the validation verdict per generation, the last status written (to
//! detect a stale cache: a round that sees the resourceVersion its own write replaced uses the written object
//! instead) and progress not written yet.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};

use common::api::{HookRun, HookRunSpec};
use k8s_openapi::jiff::Timestamp;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::Dispatcher;
use crate::engine::validate;
use crate::engine::{Finished, Precise};
use crate::providers::Kept;

/// A status planned and recorded in memory, not written yet.
pub(super) struct Unwritten {
    /// The stored object it was planned on (its status is what the API server has).
    pub(super) based_on: Arc<HookRun>,
    pub(super) status: common::api::HookRunStatus,
    /// When the first progress not written was recorded.
    pub(super) since: Instant,
}

/// Identifies a run across rounds. The uid keeps a deleted-and-recreated run from inheriting memory. Shared texts:
/// made once per run (kept in its slot), so a round or a measurement copies three pointers, not three strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId {
    /// The run's UID: what keeps a recreated run from inheriting memory.
    pub uid: Arc<str>,
    /// The run's namespace (the per-namespace share of measurement slots).
    pub namespace: Arc<str>,
    /// The run's name.
    pub name: Arc<str>,
}

/// The uid a run is tracked by: its own, or `namespace/name` for an object without one (`check`, tests).
pub(super) fn uid_of(run: &HookRun) -> std::borrow::Cow<'_, str> {
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
    /// The id of a run as read from the API.
    pub fn of(run: &HookRun) -> Self {
        let meta = &run.metadata;
        Self {
            uid: uid_of(run).into(),
            namespace: meta.namespace.as_deref().unwrap_or_default().into(),
            name: meta.name.as_deref().unwrap_or_default().into(),
        }
    }

    /// Whether this is the id of `run` (same uid, namespace and name).
    pub(super) fn is_of(&self, run: &HookRun) -> bool {
        let meta = &run.metadata;
        *self.uid == *uid_of(run)
            && *self.namespace == *meta.namespace.as_deref().unwrap_or_default()
            && *self.name == *meta.name.as_deref().unwrap_or_default()
    }
}

/// A measurement started for a metric: running, waiting for a slot, or armed (sleeping until it is due).
pub(super) struct InFlight {
    pub(super) token: u64,
    pub(super) task: Option<AbortHandle>,
    /// The run's generation it was planned on.
    pub(super) generation: Option<i64>,
    /// When it is due: until then it only sleeps, and may be called off.
    pub(super) due: Timestamp,
}

#[derive(Default)]
pub(super) struct Slot {
    /// The run's id, made by its first round and shared by the rounds and measurements after it.
    pub(super) id: Option<RunId>,
    /// Metric name → the measurement started for it.
    pub(super) in_flight: HashMap<String, InFlight>,
    /// The spec measurements are taken from, shared by their tasks (copied once per generation, not per measurement).
    pub(super) spec: Option<(Option<i64>, Arc<HookRunSpec>)>,
    pub(super) finished: Vec<Finished>,
    pub(super) precise: Precise,
    pub(super) validated: Option<(Option<i64>, Result<(), String>)>,
    /// (resourceVersion the write was based on, the object the API server returned).
    pub(super) last_write: Option<(String, Arc<HookRun>)>,
    /// When the status was last written, for coalescing writes.
    pub(super) last_write_at: Option<Instant>,
    /// Metrics whose next measurement is a retake ([`crate::engine::lost`]): a previous process may have taken one
    /// and lost its outcome. Cleared when the retake is delivered.
    pub(super) retakes: Vec<String>,
    /// Progress recorded by a round and not written yet (it waits for the write budget).
    pub(super) unwritten: Option<Unwritten>,
    /// The write budget granted this run its progress write: its next round writes.
    pub(super) granted: bool,
    /// The run's entry in the write queue (its sequence number), while it waits there.
    pub(super) queued: Option<u64>,
    /// The resourceVersion of the object the last round left stored, and when that round wants the next one
    /// (None: only when a measurement finishes). The same object again before then plans nothing new.
    pub(super) idle: Option<(String, Option<Timestamp>)>,
    /// The outline of the status the last round planned on, lent to each round (its strings and list reused).
    pub(super) outline: super::outline::Outline,
    /// Per metric (by index in `spec`), what its last measurement left for the next one: the rendered request and
    /// the buffers of the exchange (see [`Kept`]). Lent to each measurement task and handed back with its result;
    /// emptied when `spec` is replaced.
    pub(super) kept: Vec<Kept>,
    /// Metric names no longer in use (of a measurement no longer in flight, or recorded): a run names the same
    /// metrics over and over, and the next name it needs is written into one of these (at most [`SPARE_NAMES`]).
    pub(super) spare_names: Vec<String>,
    /// What the run's last committed round leaves for the next one to build its plan in (see
    /// [`crate::engine::Reuse`]), when its caller gave it back ([`Dispatcher::recycle`]).
    pub(super) reuse: Option<crate::engine::Reuse>,
}

/// Metric names a run keeps for reuse (see [`Slot::name`]): two per metric of a run with two metrics.
const SPARE_NAMES: usize = 4;

impl Slot {
    /// The run's id: the one made by its first round while it is the same run, else a new one.
    pub(super) fn id_for(&mut self, run: &HookRun) -> RunId {
        match &self.id {
            Some(id) if id.is_of(run) => id.clone(),
            _ => self.id.insert(RunId::of(run)).clone(),
        }
    }

    /// The object to plan on: `run` as seen, or our last write when `run` is the version that write replaced (the
    /// cache has not caught up with it yet).
    pub(super) fn newest(&mut self, run: Arc<HookRun>) -> Arc<HookRun> {
        // The cache caught up with our last write: its object is used and our copy released.
        if self.last_write.as_ref().is_some_and(|(_, w)| w.metadata.resource_version == run.metadata.resource_version) {
            self.last_write = None;
        }
        match (&self.last_write, &run.metadata.resource_version) {
            (Some((based_on, written)), Some(seen)) if based_on == seen => written.clone(),
            _ => run,
        }
    }

    /// The validation verdict of `run`'s spec, made once per generation.
    pub(super) fn validation(&mut self, run: &HookRun) -> Result<(), String> {
        let generation = run.metadata.generation;
        match &self.validated {
            Some((validated, verdict)) if *validated == generation && generation.is_some() => verdict.clone(),
            _ => {
                let verdict = validate::run(&run.spec);
                self.validated = Some((generation, verdict.clone()));
                verdict
            }
        }
    }

    /// What the run kept of metric `index` from its last measurement (nothing yet the first time), lent to its next.
    pub(super) fn take_kept(&mut self, index: usize) -> Kept {
        self.kept.get_mut(index).map(std::mem::take).unwrap_or_default()
    }

    /// Keeps what a measurement of metric `index` of `spec` leaves for the next one, while the run still measures
    /// that spec.
    pub(super) fn keep(&mut self, index: usize, spec: &Arc<HookRunSpec>, kept: Kept) {
        if self.spec.as_ref().is_some_and(|(_, current)| Arc::ptr_eq(current, spec)) {
            if self.kept.len() <= index {
                self.kept.resize_with(index + 1, Kept::default);
            }
            self.kept[index] = kept;
        }
    }

    /// Forgets the finished measurements a round recorded (`consumed`); their metric names are kept for reuse.
    pub(super) fn forget_recorded(&mut self, consumed: &[u64]) {
        let mut i = 0;
        while i < self.finished.len() {
            if consumed.contains(&self.finished[i].id) {
                let name = self.finished.remove(i).metric;
                self.spare(name);
            } else {
                i += 1;
            }
        }
    }

    /// The measurement in flight for `metric` is no longer: its entry is removed (and its name kept for reuse).
    pub(super) fn no_longer_in_flight(&mut self, metric: &str) {
        if let Some((name, _)) = self.in_flight.remove_entry(metric) {
            self.spare(name);
        }
    }

    /// Keeps a metric name no longer in use for [`Slot::name`].
    fn spare(&mut self, name: String) {
        if self.spare_names.len() < SPARE_NAMES {
            self.spare_names.push(name);
        }
    }

    /// `metric` as an owned name (a key of `in_flight`, a finished measurement's metric): written into a spare one
    /// when there is one, else copied.
    pub(super) fn name(&mut self, metric: &str) -> String {
        match self.spare_names.pop() {
            Some(mut name) => {
                name.clear();
                name.push_str(metric);
                name
            }
            None => metric.to_string(),
        }
    }

    /// Armed measurements planned on another generation of the spec are called off while they still sleep (the spec
    /// changed, e.g. its interval): this round plans them again. One that already started is left to finish.
    pub(super) fn call_off_stale(&mut self, generation: Option<i64>, now: Timestamp) {
        self.in_flight.retain(|_, f| {
            let stale = f.generation != generation && f.due > now;
            if stale && let Some(task) = &f.task {
                task.abort();
            }
            !stale
        });
    }
}

/// The slot of `uid`, made if the run is not tracked yet (looked up by reference first: the uid is copied only for a
/// new run).
pub(super) fn slot_of<'a>(slots: &'a mut HashMap<String, Slot>, uid: &str) -> Option<&'a mut Slot> {
    if !slots.contains_key(uid) {
        slots.insert(uid.to_string(), Slot::default());
    }
    slots.get_mut(uid)
}

impl Dispatcher {
    pub(super) fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // A poisoned lock only means another thread panicked while holding it; the map itself stays usable.
        self.inner.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

    /// How many runs the dispatcher keeps memory for (a gauge: it must follow the live runs, not grow).
    pub fn tracked_runs(&self) -> usize {
        self.slots().len()
    }
}
