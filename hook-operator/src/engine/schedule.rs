//! When a metric is measured next. Pure functions of the spec, the stored status and the clock.
//!
//! Status times are stored with one-second precision (`metav1.Time`), so the operator remembers the exact
//! instants in memory while it runs. After a restart it only has status: it then reads `resumeAt` (written
//! rounded *up*) or adds one second to `finishedAt`/`startedAt`, so a measurement may be up to a second late
//! after a restart but is never taken early.

use std::time::Duration;

use common::api::{HookPhase, Measurement, Metric, MetricResult};
use k8s_openapi::jiff::Timestamp;

use crate::settings::EngineSettings;

/// How many measurements count towards completion ([`Metric::effective_count`], shared with the forecast).
pub fn effective_count(metric: &Metric) -> Option<i32> {
    metric.effective_count()
}

fn parse(field: Option<&str>) -> Duration {
    // Validation rejects unparsable durations before anything is scheduled; treat leftovers as zero.
    field.map(str::trim).filter(|s| !s.is_empty()).and_then(|s| common::duration::parse_go(s).ok()).unwrap_or_default()
}

pub fn interval(metric: &Metric) -> Option<Duration> {
    metric.interval.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(|s| parse(Some(s)))
}

pub fn initial_delay(metric: &Metric, settings: &EngineSettings) -> Duration {
    settings.scale(parse(metric.initial_delay.as_deref()))
}

/// Time between the end of a measurement and the start of the next: the interval, or after an error without
/// an interval the error retry delay. Errors do not consume `count`, so a single-shot metric is retried.
pub fn wait_after(metric: &Metric, last: Option<HookPhase>, settings: &EngineSettings) -> Duration {
    match (interval(metric), last) {
        (Some(interval), _) => settings.scale(interval.max(settings.min_interval)),
        (None, Some(HookPhase::Error)) => settings.scale(settings.error_retry),
        (None, _) => Duration::ZERO,
    }
}

pub fn after(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

/// `to - from`, zero when `to` is not later.
pub fn until(from: Timestamp, to: Timestamp) -> Duration {
    let span = to.duration_since(from);
    // Checked first: converting a negative span fails with an error that is allocated only to be thrown away (twice
    // per measurement: a task started at its due time, the next one armed after it).
    if span.is_negative() {
        return Duration::ZERO;
    }
    Duration::try_from(span).unwrap_or_default()
}

/// Rounds up to the next whole second, the precision of status times.
pub fn ceil_second(t: Timestamp) -> Timestamp {
    if t.subsec_nanosecond() == 0 {
        return t;
    }
    Timestamp::from_second(t.as_second() + 1).unwrap_or(Timestamp::MAX)
}

/// Measurements taken so far (errors included); identifies "the last measurement" across rounds.
pub fn taken(result: &MetricResult) -> i32 {
    result.successful + result.failed + result.inconclusive + result.error
}

/// What the engine knows precisely about a metric's last measurement (from this process' memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreciseFinish {
    /// `taken()` of the result right after that measurement was recorded.
    pub taken: i32,
    pub at: Timestamp,
}

/// When `metric` is due. `started_at` is the precise run start when known, else `status.startedAt + 1s`.
pub fn due(
    metric: &Metric,
    result: Option<&MetricResult>,
    started_at: Timestamp,
    precise_finish: Option<PreciseFinish>,
    settings: &EngineSettings,
) -> Timestamp {
    let Some((result, last)) = result.and_then(|r| r.measurements.last().map(|m| (r, m))) else {
        return after(started_at, initial_delay(metric, settings));
    };
    let wait = wait_after(metric, last.phase, settings);
    if let Some(precise) = precise_finish.filter(|p| p.taken == taken(result)) {
        return after(precise.at, wait);
    }
    stored_due(last, wait)
}

fn stored_due(last: &Measurement, wait: Duration) -> Timestamp {
    if let Some(resume_at) = &last.resume_at {
        return resume_at.0;
    }
    match &last.finished_at {
        Some(finished) => after(after(finished.0, Duration::from_secs(1)), wait),
        // A measurement without finishedAt was never written by this operator; measure again now.
        None => Timestamp::UNIX_EPOCH,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn metric(count: i32, interval: Option<&str>, initial_delay: Option<&str>) -> Metric {
        Metric {
            name: "m".into(),
            count,
            interval: interval.map(Into::into),
            initial_delay: initial_delay.map(Into::into),
            ..Metric::default()
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn effective_counts() {
        assert_eq!(effective_count(&metric(0, None, None)), Some(1));
        assert_eq!(effective_count(&metric(0, Some("5s"), None)), None);
        assert_eq!(effective_count(&metric(3, Some("5s"), None)), Some(3));
        assert_eq!(effective_count(&metric(1, Some("5s"), None)), Some(1));
        assert_eq!(effective_count(&metric(0, Some(""), None)), Some(1));
    }

    #[test]
    fn first_measurement_waits_for_the_initial_delay_from_run_start() {
        let s = EngineSettings::default();
        assert_eq!(due(&metric(0, None, None), None, at(100), None, &s), at(100));
        assert_eq!(due(&metric(0, None, Some("30s")), None, at(100), None, &s), at(130));
        let scaled = EngineSettings { interval_scale: 0.1, ..EngineSettings::default() };
        assert_eq!(due(&metric(0, None, Some("30s")), None, at(100), None, &scaled), at(103));
    }

    #[test]
    fn next_measurement_is_an_interval_after_the_previous_finished() {
        let s = EngineSettings::default();
        let m = metric(3, Some("60s"), None);
        let precise = at(100).checked_add(Duration::from_millis(250)).unwrap();
        let mut result = MetricResult { successful: 1, count: 1, ..MetricResult::default() };
        result.measurements.push(Measurement {
            phase: Some(HookPhase::Successful),
            finished_at: Some(Time(at(100))),
            resume_at: Some(Time(at(161))),
            ..Measurement::default()
        });
        // In memory: exact.
        let finish = PreciseFinish { taken: 1, at: precise };
        assert_eq!(due(&m, Some(&result), at(0), Some(finish), &s), after(precise, Duration::from_secs(60)));
        // Memory about an older measurement is ignored; status' resumeAt (rounded up) is used.
        let stale = PreciseFinish { taken: 0, at: precise };
        assert_eq!(due(&m, Some(&result), at(0), Some(stale), &s), at(161));
        // Without resumeAt: finishedAt + 1s + interval, never early.
        result.measurements[0].resume_at = None;
        assert_eq!(due(&m, Some(&result), at(0), None, &s), at(161));
    }

    #[test]
    fn errors_retry_after_the_interval_or_ten_seconds() {
        let s = EngineSettings::default();
        assert_eq!(wait_after(&metric(0, None, None), Some(HookPhase::Error), &s), Duration::from_secs(10));
        assert_eq!(wait_after(&metric(0, Some("3s"), None), Some(HookPhase::Error), &s), Duration::from_secs(3));
        assert_eq!(wait_after(&metric(0, None, None), Some(HookPhase::Successful), &s), Duration::ZERO);
    }

    #[test]
    fn intervals_below_the_minimum_are_raised_to_it() {
        let s = EngineSettings::default();
        assert_eq!(wait_after(&metric(0, Some("1ms"), None), Some(HookPhase::Successful), &s), Duration::from_secs(1));
        assert_eq!(wait_after(&metric(0, Some("0s"), None), Some(HookPhase::Error), &s), Duration::from_secs(1));
        assert_eq!(wait_after(&metric(0, Some("5s"), None), None, &s), Duration::from_secs(5));
        let scaled = EngineSettings { interval_scale: 0.01, ..EngineSettings::default() };
        assert_eq!(wait_after(&metric(0, Some("1ms"), None), None, &scaled), Duration::from_millis(10));
    }

    #[test]
    fn rounding_up_to_seconds() {
        assert_eq!(ceil_second(at(5)), at(5));
        assert_eq!(ceil_second(at(5).checked_add(Duration::from_nanos(1)).unwrap()), at(6));
        assert_eq!(until(at(5), at(3)), Duration::ZERO);
        assert_eq!(until(at(3), at(5)), Duration::from_secs(2));
    }
}
