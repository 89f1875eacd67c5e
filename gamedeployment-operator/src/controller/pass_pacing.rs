//! Pass pacing: spacing between the passes of one GameDeployment (`--pass-spacing`).
//!
//! Every pass plans the whole fleet, and during a roll every HookRun status write and pod change triggers the next
//! one, so a large GameDeployment's passes would run back to back, taking CPU the API server needs for the writes
//! those passes send. So the next pass of a GameDeployment starts no sooner than `ratio` × the previous pass's
//! planning time (observe + plan, the part that grows with the fleet) after the previous pass ended, and never
//! later than [`MAX_SPACING`]. Triggers that arrive meanwhile are coalesced by the controller (an object is never
//! reconciled twice at once), so a burst of HookRun updates becomes one pass.
//!
//! Off by default (`--pass-spacing 0`): fewer passes and less operator CPU, but the API server's load (the writes)
//! stays the same and the hook → pod latency rises, so a roll is no faster. It is for an operator that shares its
//! CPU among many large GameDeployments (`docs/src/operating/flags.md`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest a pass waits for spacing, whatever its predecessor's planning took.
pub const MAX_SPACING: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct PassSpacing {
    ratio: f64,
    /// Per GameDeployment key: when its next pass may start.
    not_before: Mutex<HashMap<String, Instant>>,
}

impl PassSpacing {
    /// `ratio` × planning time between passes; 0 (or less, or not a number) turns spacing off.
    pub fn new(ratio: f64) -> Self {
        let ratio = if ratio.is_finite() && ratio > 0.0 { ratio } else { 0.0 };
        Self { ratio, not_before: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.not_before.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long the pass of `key` starting at `now` waits first (None: it starts at once).
    pub fn wait(&self, key: &str, now: Instant) -> Option<Duration> {
        let not_before = *self.lock().get(key)?;
        not_before.checked_duration_since(now).filter(|w| !w.is_zero())
    }

    /// A pass of `key` ended at `now` after planning for `planning`.
    pub fn ended(&self, key: &str, planning: Duration, now: Instant) {
        if self.ratio == 0.0 {
            return;
        }
        let spacing = planning.mul_f64(self.ratio).min(MAX_SPACING);
        let mut map = self.lock();
        if spacing.is_zero() {
            map.remove(key);
        } else {
            map.insert(key.to_string(), now + spacing);
        }
    }

    /// The GameDeployment is gone.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_pass_waits_ratio_times_the_planning_time_after_the_last_ended() {
        let spacing = PassSpacing::new(1.0);
        let t0 = Instant::now();
        assert_eq!(spacing.wait("ns/gd", t0), None, "the first pass starts at once");
        spacing.ended("ns/gd", Duration::from_millis(60), t0);
        assert_eq!(spacing.wait("ns/gd", t0), Some(Duration::from_millis(60)));
        assert_eq!(spacing.wait("ns/gd", t0 + Duration::from_millis(20)), Some(Duration::from_millis(40)));
        assert_eq!(spacing.wait("ns/gd", t0 + Duration::from_millis(60)), None);
        assert_eq!(spacing.wait("ns/other", t0), None, "per GameDeployment");

        let double = PassSpacing::new(2.0);
        double.ended("ns/gd", Duration::from_millis(60), t0);
        assert_eq!(double.wait("ns/gd", t0), Some(Duration::from_millis(120)));
    }

    #[test]
    fn spacing_is_bounded_and_can_be_turned_off() {
        let t0 = Instant::now();
        let spacing = PassSpacing::new(3.0);
        spacing.ended("ns/gd", Duration::from_secs(5), t0);
        assert_eq!(spacing.wait("ns/gd", t0), Some(MAX_SPACING));
        spacing.forget("ns/gd");
        assert_eq!(spacing.wait("ns/gd", t0), None);
        // A pass that planned in no time clears an earlier spacing.
        spacing.ended("ns/gd", Duration::from_millis(10), t0);
        spacing.ended("ns/gd", Duration::ZERO, t0);
        assert_eq!(spacing.wait("ns/gd", t0), None);
        for off in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let spacing = PassSpacing::new(off);
            spacing.ended("ns/gd", Duration::from_millis(60), t0);
            assert_eq!(spacing.wait("ns/gd", t0), None, "ratio {off}");
        }
    }
}
