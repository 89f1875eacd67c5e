//! Planning a round on what the dispatcher remembers of its run, and committing it once its status is stored.

use std::collections::HashSet;
use std::sync::Arc;

use common::api::HookRun;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::Dispatcher;
use super::outline::Outline;
use super::runs::{RunId, Slot, slot_of, uid_of};
use crate::engine::{self, Inputs, Plan};

/// The outcome of planning one round.
#[derive(Debug, Clone)]
pub struct Round {
    /// The run the round is about.
    pub id: RunId,
    /// The object the round was based on (the cached one, or our last write when the cache was stale).
    pub run: Arc<HookRun>,
    /// What the engine decided: the new status and the measurements to start.
    pub plan: Plan,
    /// The status differs from the stored one and must be written.
    pub changed: bool,
}

impl Dispatcher {
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

    /// A round in steps: the run's memory, the object to plan on, the unwritten progress kept or dropped, the
    /// validation verdict, stale armed measurements called off, then the engine's plan.
    fn plan_with(&self, run: Arc<HookRun>, now: Timestamp, move_status: bool) -> Round {
        let uid = uid_of(&run);
        let mut slots = self.slots();
        // Looked up by reference: the uid is copied only for a run not tracked yet.
        let slot = match slots.get_mut(&*uid) {
            Some(slot) => slot,
            None => {
                // Met for the first time by this process: a predecessor may have taken a measurement it never stored.
                let retakes = engine::lost::possibly_taken(&run.spec, run.status.as_ref(), now, &self.inner.settings);
                if !retakes.is_empty() {
                    tracing::info!(run = ?run.metadata.name, namespace = ?run.metadata.namespace, metrics = ?retakes,
                        "a measurement was due before this process took the run over and its outcome may be lost; \
                         the next measurement of each metric counts only against the run");
                }
                slots.entry(uid.into_owned()).or_insert_with(|| Slot { retakes, ..Slot::default() })
            }
        };
        let id = slot.id_for(&run);
        let run = slot.newest(run);
        self.rebase_unwritten(slot, &run);
        let validation = slot.validation(&run);
        slot.call_off_stale(run.metadata.generation, now);
        // The slot's outline is lent to the round (see `Outline`).
        let mut outline = std::mem::take(&mut slot.outline);
        let invalid = validation.as_ref().err().map(String::as_str);
        let reuse = slot.reuse.take().unwrap_or_default();
        let round = self.plan_on_slot(slot, id, run, (invalid, now, move_status), &mut outline, reuse);
        slot.outline = outline;
        round
    }

    /// The engine's plan for `run` on what `slot` remembers, built in `reuse`. With `move_status` (see
    /// [`Dispatcher::plan_owned`]) the stored status is moved out of `run` into the plan when nothing is unwritten and
    /// no one else holds `run`.
    fn plan_on_slot(
        &self,
        slot: &Slot,
        id: RunId,
        mut run: Arc<HookRun>,
        (invalid, now, move_status): (Option<&str>, Timestamp, bool),
        outline: &mut Outline,
        reuse: engine::Reuse,
    ) -> Round {
        let in_flight: HashSet<String> = slot.in_flight.keys().cloned().collect();
        // The stored status, moved out of the run (only when asked, nothing is unwritten and no one else holds it).
        let mut moved = match Arc::get_mut(&mut run) {
            Some(owned) if move_status && slot.unwritten.is_none() => owned.status.take(),
            _ => None,
        };
        // Its outline, to tell whether the plan changed it.
        if let Some(stored) = &moved {
            outline.take(stored);
        }
        let inputs = Inputs {
            spec: &run.spec,
            status: slot.unwritten.as_ref().map(|u| &u.status).or(run.status.as_ref()),
            invalid,
            finished: &slot.finished,
            in_flight: &in_flight,
            precise: &slot.precise,
            now,
            settings: &self.inner.settings,
        };
        let (plan, changed) = match moved.take() {
            Some(stored) => {
                let plan = engine::plan_reusing(&inputs, Some(stored), reuse);
                let changed = !outline.is_of(&plan.status);
                (plan, changed)
            }
            None => {
                let plan = engine::plan_reusing(&inputs, inputs.status.cloned(), reuse);
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

    /// Takes back a round its caller is done with (after [`Dispatcher::commit`] or
    /// [`Dispatcher::commit_unwritten`]): the run's next round builds its plan in this one's lists and maps (see
    /// [`engine::Reuse`]) instead of new ones. Optional: a round not given back is dropped, and the next one allocates
    /// its own.
    pub fn recycle(&self, id: &RunId, plan: Plan) {
        let reuse = engine::Reuse::of(plan);
        if let Some(slot) = self.slots().get_mut(&*id.uid) {
            slot.reuse = Some(reuse);
        }
    }

    /// The part of a commit that does not depend on the write: forget what the round recorded, remember its precise
    /// times and start its due measurements.
    pub(super) fn record(&self, slot: &mut Slot, round: &Round) {
        slot.forget_recorded(&round.plan.consumed);
        // Into the slot's own map and strings (no new allocation once a metric has been recorded).
        slot.precise.assign(&round.plan.precise);
        self.start_measurements(slot, round);
    }
}
