//! Knobs of the engine that are not part of the API: how much history to keep, how long to wait before
//! retrying an error, and the test aid that compresses time.

use std::time::Duration;

/// Argo's default: a metric errors after more than 4 consecutive errors.
pub const DEFAULT_CONSECUTIVE_ERROR_LIMIT: i32 = 4;

/// The documented minimum `interval` (`--min-interval`).
pub const DEFAULT_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// How the engine measures and judges runs; the same for the controller, `check` and the benchmark.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Multiplies every `interval`, `initialDelay` and the error retry delay. 1.0 in production; tests and the
    /// `check` command use e.g. 0.01 to run a `60s` template in well under a minute.
    pub interval_scale: f64,
    /// Measurements kept per metric in status (counters are never trimmed).
    pub history_limit: usize,
    /// Delay before retrying after an Error measurement when the metric has no `interval`.
    pub error_retry: Duration,
    /// Least time between measurements: a shorter `interval` is raised to this (before scaling).
    pub min_interval: Duration,
    /// A measurement due within this time is started by the round that planned it, as a task that sleeps until it
    /// is due, instead of by another round at that time: one round per measurement instead of two (the round that
    /// records a measurement arms the next). Later ones wake their run when due. Zero: never armed.
    pub arm_ahead: Duration,
    /// Keep a copy of each measurement a round records in `Plan::recorded` (`check` prints them as they come). Off
    /// in the operator and `hook-bench`, where nobody reads them: two allocations per measurement saved.
    pub keep_recorded: bool,
}

/// See [`EngineSettings::arm_ahead`]: long enough for every common interval, short enough that a sleeping
/// measurement (a small task holding the run's spec) is not kept for hours.
pub const DEFAULT_ARM_AHEAD: Duration = Duration::from_secs(300);

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            interval_scale: 1.0,
            history_limit: 10,
            error_retry: Duration::from_secs(10),
            min_interval: DEFAULT_MIN_INTERVAL,
            arm_ahead: DEFAULT_ARM_AHEAD,
            keep_recorded: true,
        }
    }
}

impl EngineSettings {
    /// `duration` times `interval_scale` (saturating): every wait the engine schedules goes through it.
    pub fn scale(&self, duration: Duration) -> Duration {
        if self.interval_scale == 1.0 {
            return duration;
        }
        Duration::try_from_secs_f64(duration.as_secs_f64() * self.interval_scale).unwrap_or(Duration::MAX)
    }

    /// Rejects scales that would make timing meaningless.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.interval_scale.is_finite() && self.interval_scale > 0.0) {
            return Err(format!("--interval-scale must be a positive number, got {}", self.interval_scale));
        }
        if self.history_limit == 0 {
            return Err("--measurement-history must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling() {
        let s = EngineSettings { interval_scale: 0.01, ..EngineSettings::default() };
        assert_eq!(s.scale(Duration::from_secs(60)), Duration::from_millis(600));
        assert_eq!(EngineSettings::default().scale(Duration::from_secs(60)), Duration::from_secs(60));
        assert!(EngineSettings { interval_scale: 0.0, ..EngineSettings::default() }.validate().is_err());
        assert!(EngineSettings { interval_scale: f64::NAN, ..EngineSettings::default() }.validate().is_err());
    }
}
