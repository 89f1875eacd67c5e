//! Deadlines, fallbacks and automatic retries of a hook gate (`hookPolicy`, a kourse addition): the pure decision of
//! what a gate does with its current HookRun once time has passed or the run failed.
//!
//! BCS holds a pod forever after a failed hook, until someone sets `retry: true`. With a [`HookGatePolicy`]:
//! - a **soft deadline** (`softDeadlineSeconds`, counted from the current run's creation) decides a run that is still
//!   `Pending`/`Running` by `onTimeout`: `Hold` keeps waiting, `Proceed` releases the pod;
//! - a **hard deadline** (`hardDeadlineSeconds`, counted from when the gate started holding: the pod's entry into
//!   its Preparing / `Updated` state, a canary step's first run) releases the pod whatever the hook says — except
//!   when the hook already succeeded, which is a success;
//! - a failed run (`Failed`, `Error`, `Inconclusive`) is retried by a new run `backoffSeconds` after it finished,
//!   up to `autoRetry.limit` times; then `onFailure` decides: `Hold` or `Proceed`.
//!
//! A release is never a success: the caller records it in the hook condition (`releasedBy`), a Warning Event and a
//! metric. This module knows nothing of pods or the API; [`crate::gate`] and the planner feed it [`Facts`].

use common::api::{HookFallback, HookGatePolicy, HookPhase, HookReleaseReason};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Back-off of an automatic retry when `backoffSeconds` is not set.
pub const DEFAULT_BACKOFF_SECONDS: i64 = 10;

/// What the gate knows about its hook at this instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Phase of the current (latest) run.
    pub phase: HookPhase,
    /// When the current run was created.
    pub run_started: Timestamp,
    /// When the current run completed (its last measurement finished), if it did.
    pub run_finished: Option<Timestamp>,
    /// When the gate started holding (None: unknown, so no hard deadline can be counted).
    pub hold_started: Option<Timestamp>,
    /// Runs that came before the current one in this attempt (automatic retries already made).
    pub retries_used: i32,
    pub now: Timestamp,
}

/// What to do with the hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The policy changes nothing now: success opens the gate, a running hook waits, a failure holds. Look again at
    /// `recheck_at` (the next deadline or back-off end), if any.
    AsAlways { recheck_at: Option<Timestamp> },
    /// Let the pod go although its hook did not succeed.
    Release { reason: HookReleaseReason, message: String },
    /// The run failed: start retry number `retry` (1-based) now.
    RetryNow { retry: i32 },
    /// The run failed: retry number `retry` starts at `at`.
    RetryAt { retry: i32, at: Timestamp },
}

fn after(t: Timestamp, seconds: i64) -> Timestamp {
    t.checked_add(SignedDuration::from_secs(seconds)).unwrap_or(Timestamp::MAX)
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn failed(phase: HookPhase) -> bool {
    phase.is_completed() && phase != HookPhase::Successful
}

/// Decides what the policy does now. `None` (no policy) is always [`Decision::AsAlways`] without a recheck: the
/// BCS behaviour.
pub fn decide(policy: Option<&HookGatePolicy>, facts: &Facts) -> Decision {
    let Some(policy) = policy else { return Decision::AsAlways { recheck_at: None } };
    if facts.phase == HookPhase::Successful {
        return Decision::AsAlways { recheck_at: None };
    }
    let hard_end = policy.hard_deadline_seconds.zip(facts.hold_started).map(|(s, start)| after(start, s));
    if let (Some(end), Some(seconds)) = (hard_end, policy.hard_deadline_seconds)
        && end <= facts.now
    {
        return Decision::Release {
            reason: HookReleaseReason::HardDeadline,
            message: format!(
                "released at its hard deadline ({seconds}s held) while its hook was {}: the hook did not succeed",
                facts.phase
            ),
        };
    }
    if failed(facts.phase) {
        if let Some(retry) = policy.auto_retry.as_ref().filter(|r| facts.retries_used < r.limit) {
            let backoff = retry.backoff_seconds.unwrap_or(DEFAULT_BACKOFF_SECONDS);
            let at = after(facts.run_finished.unwrap_or(facts.run_started), backoff);
            let number = facts.retries_used + 1;
            return if at <= facts.now {
                Decision::RetryNow { retry: number }
            } else {
                Decision::RetryAt { retry: number, at }
            };
        }
        if policy.on_failure == Some(HookFallback::Proceed) {
            let retried = if facts.retries_used > 0 {
                format!(" after {} automatic retries", facts.retries_used)
            } else {
                String::new()
            };
            return Decision::Release {
                reason: HookReleaseReason::OnFailure,
                message: format!(
                    "released by onFailure: Proceed although its hook ended {}{retried}: the hook did not succeed",
                    facts.phase
                ),
            };
        }
        return Decision::AsAlways { recheck_at: hard_end };
    }
    // Pending or Running.
    let soft_end = policy.soft_deadline_seconds.map(|s| after(facts.run_started, s));
    if let (Some(end), Some(seconds)) = (soft_end, policy.soft_deadline_seconds)
        && end <= facts.now
    {
        if policy.on_timeout == Some(HookFallback::Proceed) {
            return Decision::Release {
                reason: HookReleaseReason::SoftDeadline,
                message: format!(
                    "released by onTimeout: Proceed: its hook was still {} after its soft deadline ({seconds}s): the hook did not succeed",
                    facts.phase
                ),
            };
        }
        return Decision::AsAlways { recheck_at: hard_end };
    }
    Decision::AsAlways { recheck_at: earliest(soft_end, hard_end) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::api::HookAutoRetry;

    fn t(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn facts(phase: HookPhase, now: i64) -> Facts {
        Facts { phase, run_started: t(0), run_finished: None, hold_started: Some(t(0)), retries_used: 0, now: t(now) }
    }

    fn policy(json: serde_json::Value) -> HookGatePolicy {
        serde_json::from_value(json).unwrap()
    }

    fn reason(decision: &Decision) -> Option<HookReleaseReason> {
        match decision {
            Decision::Release { reason, .. } => Some(*reason),
            _ => None,
        }
    }

    #[test]
    fn without_a_policy_nothing_changes() {
        for phase in [HookPhase::Running, HookPhase::Failed, HookPhase::Successful] {
            assert_eq!(decide(None, &facts(phase, 1_000_000)), Decision::AsAlways { recheck_at: None });
        }
    }

    #[test]
    fn the_hard_deadline_releases_whatever_the_hook_says_but_never_overrides_a_success() {
        let p = policy(serde_json::json!({"hardDeadlineSeconds": 60}));
        assert_eq!(decide(Some(&p), &facts(HookPhase::Running, 59)), Decision::AsAlways { recheck_at: Some(t(60)) });
        for phase in
            [HookPhase::Pending, HookPhase::Running, HookPhase::Failed, HookPhase::Error, HookPhase::Inconclusive]
        {
            let d = decide(Some(&p), &facts(phase, 60));
            assert_eq!(reason(&d), Some(HookReleaseReason::HardDeadline), "{phase}");
            let Decision::Release { message, .. } = d else { unreachable!() };
            assert!(message.contains("did not succeed") && message.contains("60s"), "{message}");
        }
        assert_eq!(decide(Some(&p), &facts(HookPhase::Successful, 600)), Decision::AsAlways { recheck_at: None });
        // No known hold start: no hard deadline.
        let unknown = Facts { hold_started: None, ..facts(HookPhase::Running, 600) };
        assert_eq!(decide(Some(&p), &unknown), Decision::AsAlways { recheck_at: None });
    }

    #[test]
    fn the_soft_deadline_decides_a_running_hook_by_on_timeout() {
        let hold = policy(serde_json::json!({"softDeadlineSeconds": 10, "hardDeadlineSeconds": 100}));
        assert_eq!(decide(Some(&hold), &facts(HookPhase::Running, 5)), Decision::AsAlways { recheck_at: Some(t(10)) });
        // Hold (default): keep waiting, up to the hard deadline.
        assert_eq!(
            decide(Some(&hold), &facts(HookPhase::Running, 10)),
            Decision::AsAlways { recheck_at: Some(t(100)) }
        );
        let proceed = policy(serde_json::json!({"softDeadlineSeconds": 10, "onTimeout": "Proceed"}));
        assert_eq!(
            reason(&decide(Some(&proceed), &facts(HookPhase::Pending, 10))),
            Some(HookReleaseReason::SoftDeadline)
        );
        // The soft deadline counts from the current run: a retried run gets its own.
        let retried = Facts { run_started: t(20), ..facts(HookPhase::Running, 25) };
        assert_eq!(decide(Some(&proceed), &retried), Decision::AsAlways { recheck_at: Some(t(30)) });
        // It decides running hooks only: a failure is onFailure's.
        assert_eq!(decide(Some(&proceed), &facts(HookPhase::Failed, 50)), Decision::AsAlways { recheck_at: None });
    }

    #[test]
    fn a_failed_hook_is_held_or_released_by_on_failure() {
        let hold = policy(serde_json::json!({"onFailure": "Hold"}));
        assert_eq!(decide(Some(&hold), &facts(HookPhase::Failed, 5)), Decision::AsAlways { recheck_at: None });
        let proceed = policy(serde_json::json!({"onFailure": "Proceed"}));
        for phase in [HookPhase::Failed, HookPhase::Error, HookPhase::Inconclusive] {
            assert_eq!(reason(&decide(Some(&proceed), &facts(phase, 5))), Some(HookReleaseReason::OnFailure));
        }
        assert_eq!(decide(Some(&proceed), &facts(HookPhase::Running, 5)), Decision::AsAlways { recheck_at: None });
    }

    #[test]
    fn automatic_retries_wait_their_back_off_and_stop_at_the_limit() {
        let p = HookGatePolicy {
            auto_retry: Some(HookAutoRetry { limit: 2, backoff_seconds: Some(30) }),
            on_failure: Some(HookFallback::Proceed),
            ..Default::default()
        };
        let failed_at =
            |used, now| Facts { run_finished: Some(t(100)), retries_used: used, ..facts(HookPhase::Failed, now) };
        assert_eq!(decide(Some(&p), &failed_at(0, 110)), Decision::RetryAt { retry: 1, at: t(130) });
        assert_eq!(decide(Some(&p), &failed_at(0, 130)), Decision::RetryNow { retry: 1 });
        assert_eq!(decide(Some(&p), &failed_at(1, 200)), Decision::RetryNow { retry: 2 });
        // Used up: onFailure decides, and says how many retries were made.
        let d = decide(Some(&p), &failed_at(2, 200));
        assert_eq!(reason(&d), Some(HookReleaseReason::OnFailure));
        let Decision::Release { message, .. } = d else { unreachable!() };
        assert!(message.contains("after 2 automatic retries"), "{message}");
        // Without a finish time the back-off counts from the run's creation; the default back-off is 10 s.
        let default = policy(serde_json::json!({"autoRetry": {"limit": 1}}));
        assert_eq!(decide(Some(&default), &facts(HookPhase::Error, 3)), Decision::RetryAt { retry: 1, at: t(10) });
        // The hard deadline still wins over a pending retry.
        let both =
            policy(serde_json::json!({"autoRetry": {"limit": 3, "backoffSeconds": 60}, "hardDeadlineSeconds": 120}));
        assert_eq!(reason(&decide(Some(&both), &failed_at(1, 120))), Some(HookReleaseReason::HardDeadline));
    }
}
