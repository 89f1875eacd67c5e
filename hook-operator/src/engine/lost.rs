//! Measurements whose outcome a crash may have lost, and how they count.
//!
//! A run's status is written before its first measurement starts (`Running`, `startedAt`), and every measurement
//! that was not Successful is written before the next one starts. What a crash can still lose is the last
//! measurement (or the successes batched before it) whose outcome was taken but whose write had not landed: the
//! stored status then says the next measurement is due, and nothing more.
//!
//! A process that meets a running run for the first time (a restart, a takeover, a shard gained) cannot tell
//! whether its predecessor took that due measurement. When the stored due time has passed (within
//! [`POSSIBLY_TAKEN_MARGIN`]), it assumes it did and that the outcome was lost: the metric's next measurement is a
//! **retake** that can only count against the run. A retake that is not Successful counts as it is (the failure it
//! finds is the best knowledge of what was lost); a Successful retake counts as an Error, because a lost outcome
//! must not be replaced by a success — F S F, with the first F lost, would otherwise be recorded S F S and pass.
//! An Error consumes no `count`, so the run measures once more; only a restart at a due time costs that.
//!
//! That Error stands for the lost outcome, not for the endpoint: [`record`] counts it in `error` but leaves
//! `consecutiveError` as it was, so restarts alone never end a run by `consecutiveErrorLimit` (the run still ends
//! by its measurements, its deadlines or its timeout).

use std::time::Duration;

use common::api::{HookPhase, HookPolicy, HookRunSpec, HookRunStatus, Measurement, MetricResult};
use k8s_openapi::jiff::Timestamp;

use super::schedule;
use crate::settings::EngineSettings;

/// A due time this close (or past) counts as reached: status times have whole seconds (a predecessor may have been
/// due up to 1 s before the stored `resumeAt`), plus 1 s for the clocks of two replicas to differ.
pub const POSSIBLY_TAKEN_MARGIN: Duration = Duration::from_secs(2);

/// The metrics of a running run whose next measurement a previous process may have taken without storing its
/// outcome: the run was written `Running` (a process starts measuring only after that write) and the metric's next
/// measurement was due by `now` (within [`POSSIBLY_TAKEN_MARGIN`]).
pub fn possibly_taken(
    spec: &HookRunSpec,
    status: Option<&HookRunStatus>,
    now: Timestamp,
    settings: &EngineSettings,
) -> Vec<String> {
    let Some(status) = status.filter(|s| s.phase == Some(HookPhase::Running)) else { return Vec::new() };
    let Some(started_at) = &status.started_at else { return Vec::new() };
    let ordered = spec.policy == Some(HookPolicy::Ordered);
    let mut lost = Vec::new();
    for (i, metric) in spec.metrics.iter().enumerate() {
        let result = status.metric_results.iter().find(|r| r.name == metric.name);
        if result.is_some_and(|r| r.phase.is_some_and(HookPhase::is_completed)) {
            continue;
        }
        if ordered && i > 0 {
            let previous = &spec.metrics[i - 1].name;
            if !status.metric_results.iter().any(|r| &r.name == previous && r.phase == Some(HookPhase::Successful)) {
                break;
            }
        }
        // The earliest instant the predecessor could have measured: the stored start, not the latest it stands for.
        let due = schedule::due(metric, result, started_at.0, None, settings);
        if schedule::after(now, POSSIBLY_TAKEN_MARGIN) >= due {
            lost.push(metric.name.clone());
        }
    }
    lost
}

/// How a retake (see the module doc) counts: a success as an Error saying why, anything else as it is, marked.
/// The flag says whether the measurement now stands for a lost outcome (to be counted by [`record`]).
pub fn retake(mut measurement: Measurement) -> (Measurement, bool) {
    let lost = measurement.phase == Some(HookPhase::Successful);
    if lost {
        measurement.phase = Some(HookPhase::Error);
        measurement.message = Some(
            "the operator restarted while this metric was due: the previous measurement's outcome may have been lost, \
             so this retake's success does not count (recorded as an Error; the metric measures again)"
                .into(),
        );
    } else {
        let found = measurement.message.take().unwrap_or_default();
        measurement.message = Some(crate::text::excerpt(
            &format!("retake after the operator restarted while this metric was due: {found}"),
            super::MAX_STATUS_TEXT,
        ));
    }
    (measurement, lost)
}

/// Records a lost outcome (a retake's success turned Error): counted in `error` and ending any success streak, but
/// `consecutiveError` is neither raised (the endpoint did not err) nor reset (nor did it answer well enough to count).
pub fn record(result: &mut MetricResult, measurement: Measurement, history_limit: usize) {
    result.error += 1;
    result.consecutive_successful = 0;
    super::push_history(result, measurement, history_limit);
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::api::Metric;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn spec() -> HookRunSpec {
        HookRunSpec {
            metrics: vec![Metric { name: "m".into(), count: 3, interval: Some("10s".into()), ..Metric::default() }],
            ..HookRunSpec::default()
        }
    }

    fn running(results: Vec<MetricResult>) -> HookRunStatus {
        HookRunStatus {
            phase: Some(HookPhase::Running),
            started_at: Some(Time(at(1000))),
            metric_results: results,
            ..HookRunStatus::default()
        }
    }

    fn after_one(resume_at: i64) -> MetricResult {
        MetricResult {
            name: "m".into(),
            phase: Some(HookPhase::Running),
            count: 1,
            successful: 1,
            measurements: vec![Measurement {
                phase: Some(HookPhase::Successful),
                finished_at: Some(Time(at(resume_at - 10))),
                resume_at: Some(Time(at(resume_at))),
                ..Measurement::default()
            }],
            ..MetricResult::default()
        }
    }

    #[test]
    fn a_measurement_is_possibly_taken_once_it_was_due() {
        let settings = EngineSettings::default();
        let spec = spec();
        // Never written Running: nobody measured it.
        assert!(possibly_taken(&spec, None, at(5000), &settings).is_empty());
        // Written Running, the first measurement due at its start: possibly taken.
        assert_eq!(possibly_taken(&spec, Some(&running(vec![])), at(1000), &settings), ["m"]);
        // The next one due at 1020: not before 1018, possibly from then on (whole seconds and clocks apart).
        let status = running(vec![after_one(1020)]);
        assert!(possibly_taken(&spec, Some(&status), at(1017), &settings).is_empty());
        assert_eq!(possibly_taken(&spec, Some(&status), at(1018), &settings), ["m"]);
        // A completed metric or run measures nothing more.
        let mut done = running(vec![after_one(1020)]);
        done.metric_results[0].phase = Some(HookPhase::Successful);
        assert!(possibly_taken(&spec, Some(&done), at(5000), &settings).is_empty());
        done.phase = Some(HookPhase::Successful);
        assert!(possibly_taken(&spec, Some(&done), at(5000), &settings).is_empty());
    }

    #[test]
    fn a_lost_outcome_counts_as_an_error_but_not_toward_consecutive_error_limit() {
        let mut result = MetricResult {
            name: "m".into(),
            consecutive_error: 2,
            consecutive_successful: 1,
            ..MetricResult::default()
        };
        for _ in 0..10 {
            let (measurement, lost) =
                retake(Measurement { phase: Some(HookPhase::Successful), ..Measurement::default() });
            assert!(lost);
            record(&mut result, measurement, 3);
        }
        assert_eq!(
            (result.error, result.count, result.consecutive_error, result.consecutive_successful),
            (10, 0, 2, 0)
        );
        assert_eq!(result.measurements.len(), 3, "the history stays bounded");
    }

    #[test]
    fn a_retake_counts_only_against_the_run() {
        let (success, lost) = retake(Measurement { phase: Some(HookPhase::Successful), ..Measurement::default() });
        assert!(lost);
        assert_eq!(success.phase, Some(HookPhase::Error));
        assert!(success.message.as_deref().is_some_and(|m| m.contains("does not count")));
        let (failure, lost) = retake(Measurement {
            phase: Some(HookPhase::Failed),
            message: Some("age 10".into()),
            ..Measurement::default()
        });
        assert!(!lost, "a failure found is the endpoint's own outcome");
        assert_eq!(failure.phase, Some(HookPhase::Failed));
        assert_eq!(
            failure.message.as_deref(),
            Some("retake after the operator restarted while this metric was due: age 10")
        );
    }
}
