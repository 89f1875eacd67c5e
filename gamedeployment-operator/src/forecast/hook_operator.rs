//! The simulated hook-operator: when and how a HookRun completes, from its metrics' schedule and what its
//! measurements are assumed to read ([`Assume`]).
//!
//! It follows the hook-operator's engine (`hook-operator/src/engine`): the first measurement of a metric is due
//! `initialDelay` after the run started, each next one `interval` (raised to the one-second minimum) after the
//! previous; a metric completes at the first measurement after which its counters decide, checked in the engine's
//! order — `failed > failureLimit` (unless `failureLimit` is -1) fails it, `successful >= successfulLimit`,
//! `consecutiveSuccessful >= consecutiveSuccessfulLimit` or the effective `count` (1 when neither `count` nor
//! `interval` is set, unbounded with an interval alone) ends it `Successful`. Metrics run in parallel: the run
//! completes when the last one does, or at once when one fails; under the `Ordered` policy a metric starts once the
//! one before it succeeded (its first measurement not before its own `initialDelay` from the run's start). A run
//! that already recorded measurements goes on from its counters and its last measurement's time. Measurements take
//! no time here (a web probe answers in milliseconds).

use std::time::Duration;

use common::api::{HookPhase, HookPolicy, HookRun, Measurement, Metric, MetricResult};

/// What the measurements of runs that have not completed are assumed to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Assume {
    /// Every measurement succeeds.
    #[default]
    Succeed,
    /// Every measurement fails: a run fails at its first measurement that exceeds a `failureLimit`.
    Fail,
    /// Runs go on as they are now: a metric's next measurements read what its last one read (success when it has
    /// none yet), so a new run succeeds; completed runs keep their phase (as under the other assumptions).
    AsNow,
}

/// The least `interval` the hook-operator uses (its `--min-interval` default).
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Measurements simulated per metric at most: a metric that none of its limits ends within this many never
/// completes (an `interval` without `count` and every measurement succeeding).
const MAX_MEASUREMENTS: i32 = 10_000;

/// The hook-operator's timing settings that change a schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// The hook-operator's `--interval-scale` (1.0 in production): multiplies `interval` and `initialDelay`.
    pub interval_scale: f64,
}

impl Default for Timing {
    fn default() -> Self {
        Self { interval_scale: 1.0 }
    }
}

impl Timing {
    fn scale(&self, d: Duration) -> Duration {
        Duration::try_from_secs_f64(d.as_secs_f64() * self.interval_scale).unwrap_or(Duration::MAX)
    }
}

fn parse(field: Option<&str>) -> Option<Duration> {
    field.map(str::trim).filter(|s| !s.is_empty()).and_then(|s| common::duration::parse_go(s).ok())
}

/// Time between two measurements (before scaling, the interval is raised to the minimum).
fn wait(metric: &Metric, timing: Timing) -> Duration {
    timing.scale(parse(metric.interval.as_deref()).unwrap_or_default().max(MIN_INTERVAL))
}

fn initial_delay(metric: &Metric, timing: Timing) -> Duration {
    timing.scale(parse(metric.initial_delay.as_deref()).unwrap_or_default())
}

/// The metric phase from its counters, `None` while it runs: the engine's `assess`, for the readings simulated here
/// (success and failure; errors and inconclusive readings are never assumed).
fn assess(metric: &Metric, result: &MetricResult) -> Option<HookPhase> {
    if metric.failure_limit >= 0 && result.failed > metric.failure_limit {
        return Some(HookPhase::Failed);
    }
    if metric.successful_limit > 0 && result.successful >= metric.successful_limit {
        return Some(HookPhase::Successful);
    }
    if metric.consecutive_successful_limit.is_some_and(|limit| result.consecutive_successful >= limit) {
        return Some(HookPhase::Successful);
    }
    if metric.effective_count().is_some_and(|count| result.count >= count) {
        return Some(HookPhase::Successful);
    }
    None
}

fn record(result: &mut MetricResult, success: bool) {
    result.count += 1;
    if success {
        result.successful += 1;
        result.consecutive_successful += 1;
    } else {
        result.failed += 1;
        result.consecutive_successful = 0;
    }
}

/// Milliseconds since the epoch.
type Millis = i64;

fn millis(d: Duration) -> Millis {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn at_millis(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Millis {
    t.0.as_millisecond()
}

/// When a metric's next measurement is due, given its recorded history (the engine's `due`, from status).
fn next_due(metric: &Metric, last: Option<&Measurement>, first_due: Millis, timing: Timing) -> Millis {
    let Some(last) = last else { return first_due };
    if let Some(resume) = &last.resume_at {
        return at_millis(resume);
    }
    match &last.finished_at {
        Some(finished) => at_millis(finished) + 1_000 + millis(wait(metric, timing)),
        None => first_due,
    }
}

/// When (ms since the epoch) and how one metric completes, if it does; `first_due` is its first measurement's
/// time when it has none recorded.
fn metric_outcome(
    metric: &Metric,
    recorded: Option<&MetricResult>,
    first_due: Millis,
    assume: Assume,
    timing: Timing,
) -> Option<(Millis, HookPhase)> {
    let mut result = recorded.cloned().unwrap_or_default();
    let last = result.measurements.last().cloned();
    if let Some(phase) = result.phase.filter(|p| p.is_completed()) {
        let at = last.as_ref().and_then(|m| m.finished_at.as_ref()).map_or(first_due, at_millis);
        return Some((at, phase));
    }
    let success = match assume {
        Assume::Succeed => true,
        Assume::Fail => false,
        Assume::AsNow => last.as_ref().and_then(|m| m.phase).is_none_or(|p| p == HookPhase::Successful),
    };
    let step = millis(wait(metric, timing));
    let mut due = next_due(metric, last.as_ref(), first_due, timing);
    for _ in 0..MAX_MEASUREMENTS {
        record(&mut result, success);
        if let Some(phase) = assess(metric, &result) {
            return Some((due, phase));
        }
        due = due.saturating_add(step);
    }
    None
}

/// How a run ends under an assumption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// When it completes (ms since the epoch); `None`: never (an unbounded metric).
    pub at: Option<Millis>,
    /// The phase it completes with, as the assumption and the run's limits decide.
    pub phase: HookPhase,
}

/// When and how `run` completes: from its recorded status (completed runs keep their phase and time) and its
/// start (`status.startedAt`, else its creation, else `created`).
pub fn outcome(run: &HookRun, created: Millis, assume: Assume, timing: Timing) -> Outcome {
    let status = run.status.as_ref();
    let started = status
        .and_then(|s| s.started_at.as_ref())
        .or(run.metadata.creation_timestamp.as_ref())
        .map_or(created, at_millis);
    if let Some(phase) = status.and_then(|s| s.phase).filter(|p| p.is_completed()) {
        return Outcome { at: Some(started), phase };
    }
    if run.spec.terminate {
        return Outcome { at: Some(started), phase: HookPhase::Successful };
    }
    let results = status.map(|s| s.metric_results.as_slice()).unwrap_or_default();
    let ordered = run.spec.policy == Some(HookPolicy::Ordered);
    let mut previous_done = started;
    let mut last_success = started;
    let mut first_bad: Option<(Millis, HookPhase)> = None;
    for metric in &run.spec.metrics {
        let recorded = results.iter().find(|r| r.name == metric.name);
        let own_first = started + millis(initial_delay(metric, timing));
        let first_due = if ordered { own_first.max(previous_done) } else { own_first };
        match metric_outcome(metric, recorded, first_due, assume, timing) {
            Some((at, HookPhase::Successful)) => {
                last_success = last_success.max(at);
                previous_done = at;
            }
            Some((at, phase)) => {
                if first_bad.is_none_or(|(t, _)| at < t) {
                    first_bad = Some((at, phase));
                }
                if ordered {
                    break;
                }
            }
            None if ordered => return Outcome { at: None, phase: HookPhase::Running },
            None => last_success = Millis::MAX,
        }
    }
    match first_bad {
        Some((at, phase)) => Outcome { at: Some(at), phase },
        None if last_success == Millis::MAX => Outcome { at: None, phase: HookPhase::Running },
        None => Outcome { at: Some(last_success), phase: HookPhase::Successful },
    }
}

fn seconds_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) { format!("{}s", ms / 1000) } else { format!("{:.1}s", d.as_secs_f64()) }
}

/// The probe schedule of one metric in words: "3 measurements 60s apart", "1 measurement after 30s",
/// "a measurement every 5s until a limit decides".
pub fn schedule_text(metric: &Metric, timing: Timing) -> String {
    let delay = initial_delay(metric, timing);
    let after = if delay.is_zero() { String::new() } else { format!(" after {}", seconds_text(delay)) };
    let limits = [
        metric.effective_count(),
        (metric.successful_limit > 0).then_some(metric.successful_limit),
        metric.consecutive_successful_limit,
    ];
    match limits.into_iter().flatten().min() {
        Some(1) => format!("1 measurement{after}"),
        Some(n) => format!("{n} measurements {} apart{after}", seconds_text(wait(metric, timing))),
        None => format!("a measurement every {}{after} until a limit decides", seconds_text(wait(metric, timing))),
    }
}

/// The schedule of every metric of a run's spec, `; `-separated, each named when there are several.
pub fn run_schedule_text(metrics: &[Metric], timing: Timing) -> String {
    match metrics {
        [one] => schedule_text(one, timing),
        many => many.iter().map(|m| format!("{}: {}", m.name, schedule_text(m, timing))).collect::<Vec<_>>().join("; "),
    }
}

/// Completes the simulated cluster's HookRuns as the hook-operator would: each run's [`Outcome`] is computed when
/// it is first seen, and its phase is written when the clock reaches it.
#[derive(Debug, Default)]
pub struct SimHookOperator {
    assume: Assume,
    timing: Timing,
    /// By run UID.
    outcomes: std::collections::BTreeMap<String, Outcome>,
}

impl SimHookOperator {
    /// A hook-operator whose runs end as `assume` says, with probes timed by `timing`.
    pub fn new(assume: Assume, timing: Timing) -> Self {
        Self { assume, timing, outcomes: Default::default() }
    }

    /// One round at `now` (seconds): runs whose outcome is due get their phase. Returns whether any did.
    pub fn step(&mut self, runs: &mut [std::sync::Arc<HookRun>], now: i64) -> bool {
        let mut changed = false;
        for run in runs.iter_mut() {
            if run.status.as_ref().and_then(|s| s.phase).is_some_and(HookPhase::is_completed) {
                continue;
            }
            let uid = run.metadata.uid.clone().unwrap_or_else(|| run.metadata.name.clone().unwrap_or_default());
            let outcome =
                *self.outcomes.entry(uid).or_insert_with(|| outcome(run, now * 1000, self.assume, self.timing));
            let due = outcome.at.is_some_and(|at| at <= now * 1000);
            let run = std::sync::Arc::make_mut(run);
            let status = run.status.get_or_insert_with(Default::default);
            if status.started_at.is_none() {
                status.started_at = run.metadata.creation_timestamp.clone();
            }
            let phase = if due { outcome.phase } else { HookPhase::Running };
            if status.phase != Some(phase) {
                status.phase = Some(phase);
                changed = true;
            }
        }
        changed
    }

    /// The next time (seconds, rounded up) a run completes, if any will.
    pub fn next_completion(&self, runs: &[std::sync::Arc<HookRun>]) -> Option<i64> {
        runs.iter()
            .filter(|r| !r.status.as_ref().and_then(|s| s.phase).is_some_and(HookPhase::is_completed))
            .filter_map(|r| {
                let uid = r.metadata.uid.clone().unwrap_or_else(|| r.metadata.name.clone().unwrap_or_default());
                self.outcomes.get(&uid)?.at
            })
            .min()
            .map(|ms| (ms + 999).div_euclid(1000))
    }

    /// Runs that never complete under the assumption (an unbounded metric), by name.
    pub fn never_completing(&self, runs: &[std::sync::Arc<HookRun>]) -> Vec<String> {
        runs.iter()
            .filter(|r| !r.status.as_ref().and_then(|s| s.phase).is_some_and(HookPhase::is_completed))
            .filter(|r| {
                let uid = r.metadata.uid.clone().unwrap_or_else(|| r.metadata.name.clone().unwrap_or_default());
                self.outcomes.get(&uid).is_some_and(|o| o.at.is_none())
            })
            .filter_map(|r| r.metadata.name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::api::HookRunSpec;

    /// A metric `m` with the fields `key: value, …` (numbers as numbers, the rest as strings).
    fn metric(fields: &str) -> Metric {
        let mut value = serde_json::json!({"name": "m", "provider": {"web": {"url": "http://x"}}});
        for field in fields.split(", ") {
            let (key, v) = field.split_once(": ").unwrap();
            let v = v.trim_matches('\'');
            value[key] = v.parse::<i64>().map_or_else(|_| serde_json::json!(v), |n| serde_json::json!(n));
        }
        serde_json::from_value(value).unwrap()
    }

    fn run(metrics: Vec<Metric>, policy: Option<HookPolicy>) -> HookRun {
        HookRun::new("r", HookRunSpec { metrics, policy, ..HookRunSpec::default() })
    }

    fn done(run: &HookRun, assume: Assume) -> (Option<i64>, HookPhase) {
        let o = outcome(run, 0, assume, Timing::default());
        (o.at.map(|ms| ms / 1000), o.phase)
    }

    #[test]
    fn a_metric_ends_after_its_count_and_fails_at_the_first_measurement_over_its_failure_limit() {
        // The walkthrough's template: 3 measurements 60s apart, failureLimit 2.
        let walkthrough = run(vec![metric("count: 3, interval: 60s, failureLimit: 2")], None);
        assert_eq!(done(&walkthrough, Assume::Succeed), (Some(120), HookPhase::Successful));
        assert_eq!(done(&walkthrough, Assume::Fail), (Some(120), HookPhase::Failed), "failed (3) > failureLimit (2)");
        let strict = run(vec![metric("count: 3, interval: 60s, initialDelay: 10s")], None);
        assert_eq!(done(&strict, Assume::Fail), (Some(10), HookPhase::Failed), "the first failure fails");
        assert_eq!(done(&strict, Assume::Succeed), (Some(130), HookPhase::Successful));
        let single = run(vec![metric("successCondition: 'true'")], None);
        assert_eq!(done(&single, Assume::Succeed), (Some(0), HookPhase::Successful), "one measurement at once");
        let tolerant = run(vec![metric("count: 2, interval: 5s, failureLimit: -1")], None);
        assert_eq!(done(&tolerant, Assume::Fail), (Some(5), HookPhase::Successful), "count reached wins");
        let unbounded = run(vec![metric("interval: 5s")], None);
        assert_eq!(done(&unbounded, Assume::Succeed), (None, HookPhase::Running));
        let limited = run(vec![metric("interval: 5s, consecutiveSuccessfulLimit: 4")], None);
        assert_eq!(done(&limited, Assume::Succeed), (Some(15), HookPhase::Successful));
        let fast = run(vec![metric("count: 3, interval: 10ms")], None);
        assert_eq!(done(&fast, Assume::Succeed), (Some(2), HookPhase::Successful), "intervals under 1s are 1s");
    }

    #[test]
    fn metrics_run_in_parallel_unless_ordered_and_a_failure_ends_the_run_at_once() {
        let a = metric("count: 2, interval: 10s");
        let mut b = metric("count: 4, interval: 10s, initialDelay: 5s");
        b.name = "b".into();
        assert_eq!(done(&run(vec![a.clone(), b.clone()], None), Assume::Succeed), (Some(35), HookPhase::Successful));
        assert_eq!(
            done(&run(vec![a.clone(), b.clone()], Some(HookPolicy::Ordered)), Assume::Succeed),
            (Some(40), HookPhase::Successful),
            "b starts when a succeeded (10s), after its own initialDelay"
        );
        assert_eq!(done(&run(vec![a, b], None), Assume::Fail), (Some(0), HookPhase::Failed));
    }

    #[test]
    fn a_running_run_goes_on_from_its_counters_and_completed_runs_keep_their_phase() {
        let mut r = run(vec![metric("count: 3, interval: 60s, failureLimit: 2")], None);
        let status: common::api::HookRunStatus = serde_json::from_value(serde_json::json!({
            "phase": "Running", "startedAt": "1970-01-01T00:01:40Z",
            "metricResults": [{"name": "m", "count": 1, "failed": 1, "measurements": [
                {"phase": "Failed", "finishedAt": "1970-01-01T00:01:40Z", "resumeAt": "1970-01-01T00:02:41Z"}]}]
        }))
        .unwrap();
        r.status = Some(status);
        assert_eq!(done(&r, Assume::Succeed), (Some(221), HookPhase::Successful), "two more, from resumeAt");
        assert_eq!(done(&r, Assume::AsNow), (Some(221), HookPhase::Failed), "it keeps failing: 3 > 2");
        r.status.as_mut().unwrap().phase = Some(HookPhase::Failed);
        assert_eq!(done(&r, Assume::Succeed), (Some(100), HookPhase::Failed));
    }

    #[test]
    fn schedules_in_words() {
        let t = Timing::default();
        assert_eq!(schedule_text(&metric("count: 3, interval: 60s"), t), "3 measurements 60s apart");
        assert_eq!(schedule_text(&metric("initialDelay: 30s"), t), "1 measurement after 30s");
        assert_eq!(schedule_text(&metric("interval: 5s"), t), "a measurement every 5s until a limit decides");
        let scaled = Timing { interval_scale: 0.05 };
        assert_eq!(schedule_text(&metric("count: 3, interval: 60s"), scaled), "3 measurements 3s apart");
        assert_eq!(schedule_text(&metric("count: 2, interval: 10s"), scaled), "2 measurements 0.5s apart");
    }
}
