//! The decisions of one reconcile round of a HookRun, as a pure function of its spec, its stored status,
//! the measurements that finished since the last round and the clock.
//!
//! Rules (Argo-correct, fixing BCS; see the book's docs/src/hooks/semantics.md):
//! - measurement phase: from the conditions (see [`crate::conditions::evaluate::judge`]); provider problems are
//!   `Error`;
//! - counters: errors do not consume `count` and reset the success streak;
//! - metric phase, first match wins: `Failed` when failed > failureLimit (default 0; -1 disables);
//!   `Successful` when successful >= successfulLimit (if set); `Inconclusive` when inconclusive >
//!   inconclusiveLimit; `Error` when consecutiveError > consecutiveErrorLimit (default 4); `Successful` when
//!   consecutiveSuccessful >= consecutiveSuccessfulLimit (if set) or the effective count is reached;
//! - run phase: `Running` until every metric completed; as soon as one metric is `Failed`, `Error` or
//!   `Inconclusive` the others stop and the run takes the worst phase at once; `spec.terminate` stops it
//!   too; `Ordered` starts metric i only once metric i-1 is `Successful`; a completed run never changes.
//!
//! When a metric is measured next is `schedule`; whether a spec can run at all is [`validate`].

pub mod lost;
pub(crate) mod schedule;
pub mod validate;

use std::collections::{HashMap, HashSet};

use common::api::{HookPhase, HookPolicy, HookRunSpec, HookRunStatus, Measurement, Metric, MetricResult};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use self::schedule::PreciseFinish;
use crate::settings::{DEFAULT_CONSECUTIVE_ERROR_LIMIT, EngineSettings};

/// A measurement that finished since the last round.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// Unique within the process; used to acknowledge exactly what a round recorded.
    pub id: u64,
    /// The metric it measured.
    pub metric: String,
    /// The measurement as it goes into status.
    pub measurement: Measurement,
    /// `finishedAt` with full precision (status keeps whole seconds).
    pub finished_at: Timestamp,
    /// `schedule::taken()` of the metric when the measurement was started. A measurement is recorded only if
    /// the metric still has that many, so it is never counted twice (e.g. after an unacknowledged write).
    pub taken_before: i32,
    /// The measurement stands for an outcome a crash lost (a retake's success, see [`lost`]): recorded as an Error
    /// that says nothing of the endpoint, so it leaves `consecutiveError` as it was.
    pub lost: bool,
}

/// What this process remembers about a run beyond its status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Precise {
    /// When the run started, to the nanosecond (`status.startedAt` keeps whole seconds): `initialDelay` counts from it.
    pub started_at: Option<Timestamp>,
    /// Per metric, its last measurement's precise finish: the next one is due `interval` after it, not after the
    /// rounded time in status.
    pub last_finish: HashMap<String, PreciseFinish>,
}

/// Everything one round decides from.
pub struct Inputs<'a> {
    /// The run's spec.
    pub spec: &'a HookRunSpec,
    /// The stored status (`None` before the first round).
    pub status: Option<&'a HookRunStatus>,
    /// The first validation problem of the spec, if any.
    pub invalid: Option<&'a str>,
    /// Measurements that finished since the last round, to be recorded.
    pub finished: &'a [Finished],
    /// Metrics with a measurement under way: none is started twice.
    pub in_flight: &'a HashSet<String>,
    /// What this process remembers beyond the status.
    pub precise: &'a Precise,
    /// The round's clock.
    pub now: Timestamp,
    /// The engine settings.
    pub settings: &'a EngineSettings,
}

/// A measurement to start now.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// Index of the metric in `spec.metrics`.
    pub index: usize,
    /// Its name.
    pub metric: String,
    /// When it was due; `now - due` is the scheduling lag.
    pub due: Timestamp,
    /// `schedule::taken()` of the metric now: the measurement is recorded only if the metric still has that many.
    pub taken_before: i32,
}

/// Something worth an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// A metric reached its final phase.
    MetricCompleted {
        /// The metric's name.
        metric: String,
        /// Its final phase.
        phase: HookPhase,
        /// Why (`count (3) reached`, `failed (3) > failureLimit (2)`).
        message: String,
    },
    /// A measurement errored after one that did not (the first of a streak): worth a Warning while the run is
    /// still Running, because the run will only end after `consecutiveErrorLimit` more.
    MeasurementError {
        /// The metric's name.
        metric: String,
        /// The measurement's error.
        message: String,
    },
    /// The run reached its final phase: what the gamedeployment-operator waits for.
    RunCompleted {
        /// The run's final phase.
        phase: HookPhase,
        /// Why.
        message: String,
    },
}

/// What one round decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The status to store.
    pub status: HookRunStatus,
    /// Measurements to start now.
    pub start: Vec<Start>,
    /// Measurements due later, within [`EngineSettings::arm_ahead`]: started now, each waiting until its `due`.
    pub arm: Vec<Start>,
    /// When the next round is needed, unless a measurement finishing wakes the run earlier.
    pub wake_at: Option<Timestamp>,
    /// Events to publish about the run.
    pub notes: Vec<Note>,
    /// The run is completed (now or before); nothing will ever be measured again.
    pub completed: bool,
    /// Measurements (by id) this plan recorded or deliberately dropped.
    pub consumed: Vec<u64>,
    /// Precise times to remember once the status is stored.
    pub precise: Precise,
    /// Measurements recorded by this round (metric name, measurement), for live output; only with
    /// `EngineSettings::keep_recorded`.
    pub recorded: Vec<(String, Measurement)>,
    /// How many measurements this round recorded (whether or not they were copied into `recorded`).
    pub recorded_count: usize,
}

/// The order used to pick the run phase from its metrics: later is worse.
fn severity(phase: HookPhase) -> u8 {
    match phase {
        HookPhase::Successful => 0,
        HookPhase::Running => 1,
        HookPhase::Pending => 2,
        HookPhase::Inconclusive => 3,
        HookPhase::Error => 4,
        HookPhase::Failed => 5,
    }
}

/// The phase of a run from its metrics' phases: the worst one (`Failed` over `Error` over `Inconclusive` over
/// unfinished), `Successful` only when all are.
pub fn worst(phases: impl IntoIterator<Item = HookPhase>) -> HookPhase {
    phases.into_iter().max_by_key(|p| severity(*p)).unwrap_or(HookPhase::Successful)
}

fn is_bad(phase: Option<HookPhase>) -> bool {
    matches!(phase, Some(HookPhase::Failed | HookPhase::Error | HookPhase::Inconclusive))
}

/// Longest `message` or `value` kept in status (the whole status must stay far below the API's object limit).
pub const MAX_STATUS_TEXT: usize = 1024;

/// Adds one measurement to a result: counters first, then the bounded history.
pub fn record(result: &mut MetricResult, measurement: Measurement, history_limit: usize) {
    match measurement.phase {
        Some(HookPhase::Successful) => {
            result.successful += 1;
            result.count += 1;
            result.consecutive_error = 0;
            result.consecutive_successful += 1;
        }
        Some(HookPhase::Failed) => {
            result.failed += 1;
            result.count += 1;
            result.consecutive_error = 0;
            result.consecutive_successful = 0;
        }
        Some(HookPhase::Inconclusive) => {
            result.inconclusive += 1;
            result.count += 1;
            result.consecutive_error = 0;
            result.consecutive_successful = 0;
        }
        // Errors (and anything unexpected) never consume `count`: the measurement is retried.
        _ => {
            result.error += 1;
            result.consecutive_error += 1;
            result.consecutive_successful = 0;
        }
    }
    push_history(result, measurement, history_limit);
}

/// A copy of `measurement` for `result`'s history: made in the strings of the oldest entry when the history is full
/// (that entry leaves it as this one joins), so a run under way records its measurements without allocating.
fn copy_for_history(result: &mut MetricResult, measurement: &Measurement, history_limit: usize) -> Measurement {
    if result.measurements.is_empty() || result.measurements.len() < history_limit.max(1) {
        return measurement.clone();
    }
    let mut copy = result.measurements.remove(0);
    let Measurement { phase, message, started_at, finished_at, resume_at, value } = measurement;
    copy.phase = *phase;
    copy.message.clone_from(message);
    copy.started_at.clone_from(started_at);
    copy.finished_at.clone_from(finished_at);
    copy.resume_at.clone_from(resume_at);
    copy.value.clone_from(value);
    copy
}

/// Appends to the bounded history. Trimmed before the push: a history copied at its exact length then never grows
/// (no reallocation and copy of the whole history per measurement).
fn push_history(result: &mut MetricResult, mut measurement: Measurement, history_limit: usize) {
    for text in [&mut measurement.message, &mut measurement.value].into_iter().flatten() {
        if text.chars().count() > MAX_STATUS_TEXT {
            *text = crate::text::excerpt(text, MAX_STATUS_TEXT);
        }
    }
    let excess = (result.measurements.len() + 1).saturating_sub(history_limit.max(1));
    if excess > 0 {
        result.measurements.drain(..excess.min(result.measurements.len()));
    }
    result.measurements.push(measurement);
}

/// The metric phase from its counters, or `None` while it keeps running. First match wins.
pub fn assess(metric: &Metric, result: &MetricResult) -> Option<(HookPhase, String)> {
    if metric.failure_limit >= 0 && result.failed > metric.failure_limit {
        return Some((
            HookPhase::Failed,
            format!("failed ({}) > failureLimit ({})", result.failed, metric.failure_limit),
        ));
    }
    if metric.successful_limit > 0 && result.successful >= metric.successful_limit {
        return Some((
            HookPhase::Successful,
            format!("successful ({}) >= successfulLimit ({})", result.successful, metric.successful_limit),
        ));
    }
    if result.inconclusive > metric.inconclusive_limit {
        return Some((
            HookPhase::Inconclusive,
            format!("inconclusive ({}) > inconclusiveLimit ({})", result.inconclusive, metric.inconclusive_limit),
        ));
    }
    let error_limit = metric.consecutive_error_limit.unwrap_or(DEFAULT_CONSECUTIVE_ERROR_LIMIT);
    if result.consecutive_error > error_limit {
        return Some((
            HookPhase::Error,
            format!("consecutiveError ({}) > consecutiveErrorLimit ({error_limit})", result.consecutive_error),
        ));
    }
    if let Some(limit) = metric.consecutive_successful_limit
        && result.consecutive_successful >= limit
    {
        return Some((
            HookPhase::Successful,
            format!(
                "consecutiveSuccessful ({}) >= consecutiveSuccessfulLimit ({limit})",
                result.consecutive_successful
            ),
        ));
    }
    if let Some(count) = schedule::effective_count(metric)
        && result.count >= count
    {
        return Some((HookPhase::Successful, format!("count ({count}) reached")));
    }
    None
}

fn result_mut<'s>(status: &'s mut HookRunStatus, name: &str) -> &'s mut MetricResult {
    let index = match status.metric_results.iter().position(|r| r.name == name) {
        Some(index) => index,
        None => {
            status.metric_results.push(MetricResult {
                name: name.to_string(),
                phase: Some(HookPhase::Running),
                ..MetricResult::default()
            });
            status.metric_results.len() - 1
        }
    };
    &mut status.metric_results[index]
}

fn complete_metric(result: &mut MetricResult, phase: HookPhase, why: String, notes: &mut Vec<Note>) {
    let last_message = result.measurements.last().and_then(|m| m.message.clone()).filter(|m| !m.is_empty());
    let message = match last_message {
        Some(last) if phase != HookPhase::Successful => format!("{why}; last measurement: {last}"),
        _ => why,
    };
    let message = crate::text::excerpt(&message, MAX_STATUS_TEXT);
    result.phase = Some(phase);
    result.message = Some(message.clone());
    if let Some(last) = result.measurements.last_mut() {
        last.resume_at = None;
    }
    notes.push(Note::MetricCompleted { metric: result.name.clone(), phase, message });
}

/// `status.message` of a running run: the metrics whose latest measurement is an Error, with that error.
fn running_message(spec: &HookRunSpec, status: &HookRunStatus) -> Option<String> {
    let errors: Vec<String> = spec
        .metrics
        .iter()
        .filter_map(|m| status.metric_results.iter().find(|r| r.name == m.name))
        .filter(|r| !r.phase.is_some_and(HookPhase::is_completed) && r.consecutive_error > 0)
        .filter_map(|r| {
            let last = r.measurements.last().filter(|m| m.phase == Some(HookPhase::Error))?;
            let metric = spec.metrics.iter().find(|m| m.name == r.name)?;
            let limit = metric.consecutive_error_limit.unwrap_or(DEFAULT_CONSECUTIVE_ERROR_LIMIT);
            Some(format!(
                "metric {:?}: {} measurement error(s) in a row (the metric errors after more than {limit}): {}",
                r.name,
                r.consecutive_error,
                last.message.as_deref().unwrap_or("no message")
            ))
        })
        .collect();
    (!errors.is_empty()).then(|| crate::text::excerpt(&errors.join("; "), MAX_STATUS_TEXT))
}

/// One round's decisions (see the module docs for the rules).
pub fn plan(inputs: &Inputs<'_>) -> Plan {
    plan_on(inputs, inputs.status.cloned())
}

/// The parts of a run's last [`Plan`] its next round builds its own in ([`plan_reusing`]): the lists and the
/// precise-time map keep their memory, and the measurements it started lend their metric names to the next ones, so
/// a round of a run under way allocates nothing for them. What they held is overwritten: a plan made on them equals
/// one made from nothing.
#[derive(Debug, Default)]
pub struct Reuse {
    consumed: Vec<u64>,
    precise: Precise,
    start: Vec<Start>,
    arm: Vec<Start>,
}

impl Reuse {
    /// Takes back what a plan's next round of the same run reuses (the rest of the plan is dropped).
    pub fn of(plan: Plan) -> Self {
        let Plan { consumed, precise, start, arm, .. } = plan;
        Self { consumed, precise, start, arm }
    }
}

impl Precise {
    /// Becomes a copy of `other` in place: the map and its names stay (a derived `clone_from` copies both anew).
    pub fn assign(&mut self, other: &Precise) {
        let Precise { started_at, last_finish } = other;
        self.started_at = *started_at;
        self.last_finish.retain(|metric, _| last_finish.contains_key(metric));
        for (metric, finish) in last_finish {
            match self.last_finish.get_mut(metric) {
                Some(kept) => *kept = *finish,
                None => {
                    self.last_finish.insert(metric.clone(), *finish);
                }
            }
        }
    }
}

/// [`plan`] on a status the caller gives up (`inputs.status` is not read): the new status is built in it, so its
/// measurement history is not copied.
///
/// The steps of a round, in order; each may complete the run and end the round.
pub fn plan_on(inputs: &Inputs<'_>, status: Option<HookRunStatus>) -> Plan {
    plan_reusing(inputs, status, Reuse::default())
}

/// [`plan_on`], built in what the run's last plan leaves (see [`Reuse`]).
pub fn plan_reusing(inputs: &Inputs<'_>, status: Option<HookRunStatus>, reuse: Reuse) -> Plan {
    let mut plan = Plan::on(inputs, status, reuse);
    // `start` and `arm` still hold the last plan's entries: written over by this round's, the rest cut off here.
    let listed = decide(&mut plan, inputs);
    plan.start.truncate(listed.start);
    plan.arm.truncate(listed.arm);
    plan
}

/// How many entries of [`Plan::start`] and [`Plan::arm`] a round wrote.
#[derive(Default)]
struct Listed {
    start: usize,
    arm: usize,
}

/// The steps of a round on `plan` (see [`plan_on`]).
fn decide(plan: &mut Plan, inputs: &Inputs<'_>) -> Listed {
    if plan.status.phase.is_some_and(HookPhase::is_completed) {
        plan.completed = true;
        return Listed::default();
    }
    let started_at = mark_running(plan, inputs.now);
    if let Some(problem) = inputs.invalid {
        complete_invalid(plan, problem);
        return Listed::default();
    }
    record_finished(plan, inputs);
    let stopped_by = assess_metrics(plan, inputs.spec);
    if inputs.spec.terminate || stopped_by.is_some() {
        stop_run(plan, inputs.spec, stopped_by);
        return Listed::default();
    }
    if all_metrics_completed(inputs.spec, &plan.status) {
        complete_run(plan, None);
        return Listed::default();
    }
    // While running, the message says what is going wrong: the last error of a metric whose latest
    // measurement errored (otherwise the run looks healthy until consecutiveErrorLimit is reached).
    plan.status.message = running_message(inputs.spec, &plan.status);
    schedule_due(plan, inputs, started_at)
}

impl Plan {
    /// A plan that changes nothing yet: `status` as given, and every finished measurement consumed; built in `reuse`
    /// (its `start` and `arm` entries are the last plan's until [`plan_reusing`] cuts them to this round's).
    fn on(inputs: &Inputs<'_>, status: Option<HookRunStatus>, reuse: Reuse) -> Self {
        let Reuse { mut consumed, mut precise, start, arm } = reuse;
        consumed.clear();
        consumed.extend(inputs.finished.iter().map(|f| f.id));
        precise.assign(inputs.precise);
        Plan {
            status: status.unwrap_or_default(),
            start,
            arm,
            wake_at: None,
            notes: Vec::new(),
            completed: false,
            consumed,
            precise,
            recorded: Vec::new(),
            recorded_count: 0,
        }
    }
}

/// The run is `Running`; returns when it started (precise when this process knows it).
fn mark_running(plan: &mut Plan, now: Timestamp) -> Timestamp {
    let status = &mut plan.status;
    status.phase = Some(HookPhase::Running);
    match (&status.started_at, plan.precise.started_at) {
        (None, _) => {
            status.started_at = Some(Time(now));
            plan.precise.started_at = Some(now);
            now
        }
        (Some(_), Some(precise)) => precise,
        // Restarted: status only has whole seconds; assume the latest instant it can stand for.
        (Some(stored), None) => schedule::after(stored.0, std::time::Duration::from_secs(1)),
    }
}

/// An invalid spec ends the run `Error` with the problem as its message.
fn complete_invalid(plan: &mut Plan, problem: &str) {
    let message = format!("invalid HookRun: {problem}");
    plan.status.phase = Some(HookPhase::Error);
    plan.status.message = Some(message.clone());
    plan.notes.push(Note::RunCompleted { phase: HookPhase::Error, message });
    plan.completed = true;
}

/// Step 1: records what finished, oldest first (each measurement once: see [`Finished::taken_before`]).
fn record_finished(plan: &mut Plan, inputs: &Inputs<'_>) {
    // Usually one measurement, in order already: sorted (into a list of its own) only when it is not.
    if inputs.finished.is_sorted_by_key(|f| (f.finished_at, f.id)) {
        for f in inputs.finished {
            record_one(plan, inputs, f);
        }
    } else {
        let mut sorted: Vec<&Finished> = inputs.finished.iter().collect();
        sorted.sort_by_key(|f| (f.finished_at, f.id));
        for f in sorted {
            record_one(plan, inputs, f);
        }
    }
}

/// Records one finished measurement unless its metric completed or it was recorded already.
fn record_one(plan: &mut Plan, inputs: &Inputs<'_>, f: &Finished) {
    let Some(metric) = inputs.spec.metrics.iter().find(|m| m.name == f.metric) else { return };
    let result = result_mut(&mut plan.status, &f.metric);
    if result.phase.is_some_and(HookPhase::is_completed) || schedule::taken(result) != f.taken_before {
        return;
    }
    let mut measurement = copy_for_history(result, &f.measurement, inputs.settings.history_limit);
    let wait = schedule::wait_after(metric, measurement.phase, inputs.settings);
    measurement.resume_at = Some(Time(schedule::ceil_second(schedule::after(f.finished_at, wait))));
    plan.recorded_count += 1;
    if inputs.settings.keep_recorded {
        plan.recorded.push((f.metric.clone(), measurement.clone()));
    }
    let errored = measurement.phase == Some(HookPhase::Error) && !f.lost;
    // Only an error's message goes into a note.
    let message = if errored { measurement.message.clone().unwrap_or_default() } else { String::new() };
    if f.lost {
        lost::record(result, measurement, inputs.settings.history_limit);
    } else {
        record(result, measurement, inputs.settings.history_limit);
    }
    if errored && result.consecutive_error == 1 {
        plan.notes.push(Note::MeasurementError {
            metric: f.metric.clone(),
            message: crate::text::excerpt(&message, MAX_STATUS_TEXT),
        });
    }
    let finish = PreciseFinish { taken: schedule::taken(result), at: f.finished_at };
    // The metric's entry is there after its first measurement: replaced in place, its name not copied again.
    match plan.precise.last_finish.get_mut(&f.metric) {
        Some(last) => *last = finish,
        None => {
            plan.precise.last_finish.insert(f.metric.clone(), finish);
        }
    }
}

/// The first metric that completed badly: (its name, its phase, its message).
type StoppedBy = (String, HookPhase, String);

/// Step 2: assesses each metric from its counters; returns the first bad one, which stops the others.
fn assess_metrics(plan: &mut Plan, spec: &HookRunSpec) -> Option<StoppedBy> {
    let mut stopped_by: Option<StoppedBy> = None;
    for metric in &spec.metrics {
        let Some(result) = plan.status.metric_results.iter_mut().find(|r| r.name == metric.name) else { continue };
        if !result.phase.is_some_and(HookPhase::is_completed)
            && let Some((phase, why)) = assess(metric, result)
        {
            complete_metric(result, phase, why, &mut plan.notes);
        }
        if is_bad(result.phase) && stopped_by.is_none() {
            stopped_by = Some((
                metric.name.clone(),
                result.phase.unwrap_or(HookPhase::Error),
                result.message.clone().unwrap_or_default(),
            ));
        }
    }
    stopped_by
}

/// Step 3, terminating: stops every other metric now; the run takes the worst phase immediately.
fn stop_run(plan: &mut Plan, spec: &HookRunSpec, stopped_by: Option<StoppedBy>) {
    let why = match &stopped_by {
        Some((name, phase, _)) => format!("stopped: metric {name:?} completed {phase}"),
        None => "stopped: the run was terminated (spec.terminate)".to_string(),
    };
    for metric in &spec.metrics {
        let result = result_mut(&mut plan.status, &metric.name);
        if !result.phase.is_some_and(HookPhase::is_completed) {
            complete_metric(result, HookPhase::Successful, why.clone(), &mut plan.notes);
        }
    }
    let message = match stopped_by {
        Some((name, phase, message)) => format!("metric {name:?} completed {phase}: {message}"),
        None => "terminated (spec.terminate)".to_string(),
    };
    complete_run(plan, Some(message));
}

fn all_metrics_completed(spec: &HookRunSpec, status: &HookRunStatus) -> bool {
    spec.metrics
        .iter()
        .all(|m| status.metric_results.iter().any(|r| r.name == m.name && r.phase.is_some_and(HookPhase::is_completed)))
}

/// The run takes the worst phase of its metrics.
fn complete_run(plan: &mut Plan, message: Option<String>) {
    let status = &mut plan.status;
    let phase = worst(status.metric_results.iter().filter_map(|r| r.phase));
    let message = message.map(|m| crate::text::excerpt(&m, MAX_STATUS_TEXT));
    status.phase = Some(phase);
    status.message = message.clone();
    plan.notes.push(Note::RunCompleted { phase, message: message.unwrap_or_else(|| "all metrics completed".into()) });
    plan.completed = true;
}

/// Step 4, scheduling: what is due now (started), due within `arm_ahead` (armed), and when to look again.
fn schedule_due(plan: &mut Plan, inputs: &Inputs<'_>, started_at: Timestamp) -> Listed {
    let mut listed = Listed::default();
    let (status, now) = (&plan.status, inputs.now);
    let ordered = inputs.spec.policy == Some(HookPolicy::Ordered);
    for (i, metric) in inputs.spec.metrics.iter().enumerate() {
        let result = status.metric_results.iter().find(|r| r.name == metric.name);
        if result.is_some_and(|r| r.phase.is_some_and(HookPhase::is_completed)) {
            continue;
        }
        if ordered && i > 0 {
            let previous = &inputs.spec.metrics[i - 1].name;
            let previous_ok =
                status.metric_results.iter().any(|r| &r.name == previous && r.phase == Some(HookPhase::Successful));
            if !previous_ok {
                break;
            }
        }
        if inputs.in_flight.contains(&metric.name) {
            continue;
        }
        let precise = plan.precise.last_finish.get(&metric.name).copied();
        let due = schedule::due(metric, result, started_at, precise, inputs.settings);
        let taken_before = result.map_or(0, schedule::taken);
        if due <= now {
            put(&mut plan.start, &mut listed.start, (i, &metric.name), due, taken_before);
        } else if schedule::until(now, due) <= inputs.settings.arm_ahead {
            put(&mut plan.arm, &mut listed.arm, (i, &metric.name), due, taken_before);
        } else {
            plan.wake_at = Some(plan.wake_at.map_or(due, |w| w.min(due)));
        }
    }
    listed
}

/// Writes the start of metric `(index, name)` as entry `*written` of `list` (over the last plan's entry there, its
/// name's memory reused, or appended), and counts it.
fn put(list: &mut Vec<Start>, written: &mut usize, (index, metric): (usize, &str), due: Timestamp, taken_before: i32) {
    match list.get_mut(*written) {
        Some(entry) => {
            entry.metric.clear();
            entry.metric.push_str(metric);
            (entry.index, entry.due, entry.taken_before) = (index, due, taken_before);
        }
        None => list.push(Start { index, metric: metric.to_string(), due, taken_before }),
    }
    *written += 1;
}

#[cfg(test)]
mod tests;
