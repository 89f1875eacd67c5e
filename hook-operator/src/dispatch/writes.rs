//! Coalesced status writes ([`Dispatcher::with_status_writes`]): a round that only records progress of a running
//! run may keep its status in memory ([`Dispatcher::commit_unwritten`]: its measurements are recorded and the due
//! ones started, the write waits). Such a run is queued for one process-wide budget of progress writes: at most
//! `per_second` of them, granted oldest-waiting first (so no run starves), and each run at most once per
//! `min_interval`. Phase changes, completions and a run's first write (`Running`) never wait
//! ([`Dispatcher::write_now`]).
//!
//! Durability: a run's first write lands before its first measurement starts, and a round that records a
//! measurement that was not Successful, or otherwise moves a counter that decides against the run (failed,
//! inconclusive, error, consecutiveError), is written at once, before its commit starts the next measurement
//! ([`verdict_moved`]). What a crash can still lose is the outcome whose write was on its way (and successes waiting
//! in memory); the process that meets the run next sees that a measurement was due and counts its next measurement
//! as a retake that can only count against the run ([`crate::engine::lost`]), so a lost F is never replaced by a
//! fresh S. The cost: one write more per run (`Running` before the first measurement; a run that completed within
//! `min_interval` used to write only its completion).

use std::collections::BTreeMap;
use std::sync::{Arc, MutexGuard};

use common::api::HookRun;
use k8s_openapi::jiff::Timestamp;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::runs::{RunId, Slot, Unwritten, slot_of};
use super::{Dispatcher, Round};
use crate::engine::schedule;

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

/// What the write queue's task does next.
enum Next {
    Wait(Option<Instant>),
    Grant(u64, RunId),
}

/// The process-wide budget of progress writes and the runs waiting for it.
pub(super) struct WriteBudget {
    /// Least time between two writes of one running run.
    pub(super) min_interval: std::time::Duration,
    /// Progress writes per second for the whole process (0: unlimited).
    pub(super) per_second: f64,
    /// Tokens the bucket holds at most (a tenth of a second's writes, at least one).
    pub(super) burst: f64,
    pub(super) tokens: f64,
    pub(super) refilled_at: Instant,
    /// (when the run may write, sequence) → run, oldest first.
    pub(super) queue: BTreeMap<(Instant, u64), RunId>,
    pub(super) next_seq: u64,
}

impl WriteBudget {
    pub(super) fn new(min_interval: std::time::Duration, per_second: u32) -> Self {
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

    pub(super) fn refill(&mut self, now: Instant) {
        if self.per_second > 0.0 {
            let elapsed = now.saturating_duration_since(self.refilled_at).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        }
        self.refilled_at = now;
    }

    /// Takes a token if one is there.
    pub(super) fn take(&mut self, now: Instant) -> bool {
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
    pub(super) fn take_granted(&mut self, now: Instant) {
        if self.per_second > 0.0 {
            self.refill(now);
            self.tokens -= 1.0;
        }
    }

    /// What the queue task does next: wait (until a time, or until a run is queued) or grant the oldest waiting run
    /// its write (taken off the queue).
    fn next(&mut self, now: Instant) -> Next {
        match self.queue.first_key_value().map(|(key, _)| *key) {
            None => Next::Wait(None),
            Some((at, _)) if at > now => Next::Wait(Some(at)),
            Some(_) => {
                let wait = self.next_token(now);
                if !wait.is_zero() {
                    Next::Wait(Some(now + wait))
                } else if let Some(((_, seq), id)) = self.queue.pop_first() {
                    Next::Grant(seq, id)
                } else {
                    Next::Wait(None)
                }
            }
        }
    }

    /// Time until the next token (zero when one is there or the budget is unlimited).
    pub(super) fn next_token(&mut self, now: Instant) -> std::time::Duration {
        if self.per_second <= 0.0 {
            return std::time::Duration::ZERO;
        }
        self.refill(now);
        std::time::Duration::from_secs_f64(((1.0 - self.tokens) / self.per_second).max(0.0))
    }
}

impl Dispatcher {
    /// Coalesces status writes: progress of a running run is written at most once per `min_interval` per run and
    /// at most `per_second` times a second for the whole process (0: unlimited), oldest-waiting first; see
    /// [`Dispatcher::write_now`]. The budget is served by [`Dispatcher::start_status_writes`]. Without this call
    /// nothing waits. Call before the dispatcher is cloned.
    pub fn with_status_writes(self, min_interval: std::time::Duration, per_second: u32) -> Self {
        *self.budget() = WriteBudget::new(min_interval, per_second);
        self
    }

    pub(super) fn budget(&self) -> MutexGuard<'_, WriteBudget> {
        self.inner.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the status a round planned must be written now. Never for an unchanged status; always for a phase
    /// change, a completion, a measurement that was not Successful and the counters it moves (`verdict_moved`:
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
        // The first write (`Running`, `startedAt`) goes before the first measurement starts: a process that meets the
        // run later then knows it may have been measured (see `crate::engine::lost`).
        if round.plan.completed
            || stored_phase.is_none()
            || stored_phase != round.plan.status.phase
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
        if slot.last_write_at.is_some_and(|at| now.saturating_duration_since(at) < budget.min_interval)
            || completes_within(round, slot, budget.min_interval)
        {
            return false;
        }
        let someone_waits_longer =
            budget.queue.first_key_value().is_some_and(|((at, seq), _)| *at <= now && Some(*seq) != slot.queued);
        !someone_waits_longer && budget.take(now)
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

    /// Unwritten progress stays valid on top of a new version of the object as long as its status is the one the
    /// progress was planned on (someone changed the spec or metadata); status written by someone else wins.
    pub(super) fn rebase_unwritten(&self, slot: &mut Slot, run: &Arc<HookRun>) {
        let keep = match &slot.unwritten {
            Some(u) if u.based_on.metadata.resource_version == run.metadata.resource_version => true,
            Some(u) => u.based_on.status == run.status,
            None => true,
        };
        if !keep {
            self.drop_unwritten(slot);
        } else if let Some(u) = &mut slot.unwritten
            && !Arc::ptr_eq(&u.based_on, run)
        {
            u.based_on = run.clone();
        }
    }

    /// Forgets unwritten progress (written, superseded, or the run is gone); its queue entry is skipped later.
    pub(super) fn drop_unwritten(&self, slot: &mut Slot) {
        if slot.unwritten.take().is_some() {
            self.inner.metrics.status_writes_waiting.dec();
        }
        slot.granted = false;
        slot.queued = None;
    }

    /// Serves the write budget: grants queued runs their progress write, oldest first, at most `per_second` a
    /// second, each no earlier than `min_interval` after its last write, and wakes them (their next round writes).
    /// Runs until aborted.
    pub fn start_status_writes(&self) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                let next = this.budget().next(Instant::now());
                match next {
                    Next::Wait(until) => super::woken_or_until(this.inner.write_queued.notified(), until).await,
                    Next::Grant(seq, id) => {
                        if this.grant(seq, &id) {
                            this.budget().take_granted(Instant::now());
                            (this.inner.wake)(&id);
                        }
                    }
                }
            }
        })
    }

    /// Grants the run its progress write if it still waits for it under `seq`: written meanwhile (a phase change),
    /// superseded or gone, it spends no token.
    fn grant(&self, seq: u64, id: &RunId) -> bool {
        let mut slots = self.slots();
        match slots.get_mut(&*id.uid) {
            Some(slot) if slot.queued == Some(seq) && slot.unwritten.is_some() => {
                slot.queued = None;
                slot.granted = true;
                true
            }
            _ => false,
        }
    }
}
