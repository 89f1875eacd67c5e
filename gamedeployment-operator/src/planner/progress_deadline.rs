//! `spec.progressDeadlineSeconds`, with Deployment's and Argo Rollouts' meaning: a rollout that makes no progress for
//! that long is reported — `Progressing` turns `False` with reason `ProgressDeadlineExceeded`, saying what it waits
//! for — and nothing else changes: the deadline stops nothing and releases nothing.
//!
//! - **Progress** is any change of what a rollout moves ([`Mark`]: the observed generation, the update revision, the
//!   replica counts, the canary step), and the move from a state that does not count (paused, complete, partition
//!   reached, invalid spec, `OnDelete` waiting for deletions, nothing recorded yet) back to a rollout in progress.
//!   Its time is `Progressing.lastUpdateTime`, as Deployment keeps it, so a restarted operator goes on counting.
//! - Only a rollout **in progress** (`RolloutInProgress`) counts: a paused rollout waits for a person, a complete one
//!   for nothing.
//! - Once exceeded, the condition stays `ProgressDeadlineExceeded` until progress is made; the pass that finds the
//!   deadline ahead asks to be run again when it passes, so it is reported at the deadline and not before.

use common::api::GameDeploymentStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::conditions::{PROGRESSING, condition, set_condition};

/// The reason `Progressing` takes when the deadline passed.
pub(crate) const EXCEEDED: &str = "ProgressDeadlineExceeded";

/// What a rollout moves: a change of any of it is progress.
#[derive(Debug, PartialEq, Eq)]
struct Mark<'a> {
    generation: Option<i64>,
    revision: Option<&'a str>,
    counts: [i32; 6],
    step: Option<i32>,
}

impl<'a> Mark<'a> {
    fn of(status: &'a GameDeploymentStatus) -> Self {
        Self {
            generation: status.observed_generation,
            revision: status.update_revision.as_deref(),
            counts: status.replica_counts(),
            step: status.current_step_index,
        }
    }
}

fn reason(status: &GameDeploymentStatus) -> Option<&str> {
    condition(status, PROGRESSING).and_then(|c| c.reason.as_deref())
}

/// Whether `reason` is a rollout that is moving (or should be), so that time without progress counts.
fn counts(reason: Option<&str>) -> bool {
    matches!(reason, Some("RolloutInProgress" | EXCEEDED))
}

/// Applies the deadline of `deadline_seconds` (the spec's, `None` = off) to the `Progressing` condition of `status`,
/// computed this pass from the pods; `old` is the status the pass started from. Returns when to look again: the
/// deadline, while it is ahead.
pub(crate) fn apply(
    deadline_seconds: Option<i32>,
    old: &GameDeploymentStatus,
    status: &mut GameDeploymentStatus,
    now: Timestamp,
) -> Option<Timestamp> {
    let Some(seconds) = deadline_seconds.filter(|s| *s > 0) else {
        // Off: no clock is kept.
        for c in status.conditions.iter_mut().filter(|c| c.type_ == PROGRESSING) {
            c.last_update_time = None;
        }
        return None;
    };
    let last_update = progress_time(old, status, now);
    let progressing = status.conditions.iter_mut().find(|c| c.type_ == PROGRESSING)?;
    progressing.last_update_time = Some(Time(last_update));
    if progressing.reason.as_deref() != Some("RolloutInProgress") {
        return None;
    }
    let deadline = last_update.checked_add(SignedDuration::from_secs(i64::from(seconds))).ok()?;
    if now < deadline {
        return Some(deadline);
    }
    let waiting = progressing.message.clone().unwrap_or_default();
    let message = format!(
        "no progress for {seconds}s (spec.progressDeadlineSeconds), since {}: {waiting}",
        Timestamp::from_second(last_update.as_second()).unwrap_or(last_update)
    );
    set_condition(&mut status.conditions, PROGRESSING, "False", EXCEEDED, &message, now);
    None
}

/// When the rollout last made progress: now if it did this pass (or if nothing was recorded), else what `old`
/// recorded.
fn progress_time(old: &GameDeploymentStatus, new: &GameDeploymentStatus, now: Timestamp) -> Timestamp {
    let recorded = condition(old, PROGRESSING).and_then(|c| c.last_update_time.as_ref()).map(|t| t.0);
    let moved = Mark::of(old) != Mark::of(new);
    let resumed = !counts(reason(old)) && counts(reason(new));
    match recorded {
        Some(at) if !moved && !resumed => at,
        _ => now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn in_progress(updated: i32, since: i64) -> GameDeploymentStatus {
        let mut status = GameDeploymentStatus { replicas: 4, updated_replicas: updated, ..Default::default() };
        set_condition(&mut status.conditions, PROGRESSING, "True", "RolloutInProgress", "waiting for x", at(since));
        status
    }

    fn progressing(status: &GameDeploymentStatus) -> (String, String, Option<i64>) {
        let c = condition(status, PROGRESSING).unwrap();
        (
            c.status.clone(),
            c.reason.clone().unwrap_or_default(),
            c.last_update_time.as_ref().map(|t| t.0.as_second() - 1_700_000_000),
        )
    }

    /// Situation → the condition after the pass, the clock it records and when to look again.
    #[test]
    fn the_deadline_counts_from_the_last_progress_and_only_while_in_progress() {
        // First pass with a deadline: the clock starts now; the deadline is 60 s ahead.
        let old = in_progress(1, 0);
        let mut new = in_progress(1, 0);
        assert_eq!(apply(Some(60), &old, &mut new, at(10)), Some(at(70)));
        assert_eq!(progressing(&new), ("True".into(), "RolloutInProgress".into(), Some(10)));

        // Nothing moved since: the clock stays; 1 s before the deadline nothing is reported.
        let old = new.clone();
        let mut new = in_progress(1, 0);
        assert_eq!(apply(Some(60), &old, &mut new, at(69)), Some(at(70)));
        assert_eq!(progressing(&new).1, "RolloutInProgress");

        // At the deadline: exceeded, saying since when and what it waits for.
        let mut late = in_progress(1, 0);
        assert_eq!(apply(Some(60), &old, &mut late, at(70)), None);
        assert_eq!(progressing(&late), ("False".into(), EXCEEDED.into(), Some(10)));
        let message = condition(&late, PROGRESSING).unwrap().message.clone().unwrap();
        assert_eq!(
            message,
            "no progress for 60s (spec.progressDeadlineSeconds), since 2023-11-14T22:13:30Z: waiting for x"
        );

        // It stays exceeded while nothing moves …
        let mut still = in_progress(1, 0);
        apply(Some(60), &late, &mut still, at(100));
        assert_eq!(progressing(&still).1, EXCEEDED);
        // … and progress (one more pod updated) starts the clock again.
        let mut moved = in_progress(2, 0);
        assert_eq!(apply(Some(60), &still, &mut moved, at(101)), Some(at(161)));
        assert_eq!(progressing(&moved), ("True".into(), "RolloutInProgress".into(), Some(101)));

        // Paused: never exceeded, however long; resuming counts as progress.
        let mut paused = in_progress(2, 0);
        set_condition(&mut paused.conditions, PROGRESSING, "Unknown", "Paused", "paused", at(0));
        assert_eq!(apply(Some(60), &moved, &mut paused, at(1000)), None);
        assert_eq!(progressing(&paused).1, "Paused");
        let mut resumed = in_progress(2, 0);
        assert_eq!(apply(Some(60), &paused, &mut resumed, at(2000)), Some(at(2060)));
        assert_eq!(progressing(&resumed).2, Some(2000));

        // Off: no clock, never exceeded.
        let mut off = in_progress(2, 0);
        assert_eq!(apply(None, &resumed, &mut off, at(9000)), None);
        assert_eq!(progressing(&off), ("True".into(), "RolloutInProgress".into(), None));
    }
}
