//! `status`: the counts BCS shows (and `kubectl get gamedeployment` prints), the revisions, and conditions that
//! are actually written — `FailedScale` / `FailedUpdate` when something fails (BCS builds them but never persists
//! them, bug list §7.16) and `Progressing`, which says what the rollout is waiting for.

use std::collections::BTreeSet;

use common::api::{GameDeploymentCondition, GameDeploymentStatus, GameDeploymentUpdateStrategyType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::diffs::Diffs;
use super::draft::Draft;
use super::settings::{PodInfo, Settings, count, count_where};
use super::update::inplace::Progress;
use super::update::ondelete;
use crate::action::{EventType, Phase, PlannedEvent};
use crate::lifecycle::LifecycleState;
use crate::ownership;

pub const FAILED_SCALE: &str = "FailedScale";
pub const FAILED_UPDATE: &str = "FailedUpdate";
pub const PROGRESSING: &str = "Progressing";

/// Reason of a failure condition caused by the spec itself (not by an API call).
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";

pub(crate) use super::settings::Failure;

/// The condition type a failure is reported under.
pub fn condition_type(failure: Failure) -> &'static str {
    match failure {
        Failure::Scale => FAILED_SCALE,
        Failure::Update => FAILED_UPDATE,
    }
}

/// Reason of a failure condition caused by a write the API refused.
pub const REASON_WRITE_FAILED: &str = "WriteFailed";

/// What the executor's writes did to the conditions (a pure function, so the mapping is tested without a
/// server): a failed write of the scale (update) part of the plan sets `FailedScale` (`FailedUpdate`) True with
/// reason `WriteFailed` and the first message; a part with a successful write and no failure clears a
/// `WriteFailed` condition of its type. Spec problems (`InvalidSpec`) are left as the planner set them.
pub(crate) fn apply_write_outcome(
    status: &mut GameDeploymentStatus,
    failures: &[(Phase, String)],
    succeeded: &BTreeSet<Phase>,
    now: Timestamp,
) {
    for failure in [Failure::Scale, Failure::Update] {
        let phase = failure.phase();
        let messages: Vec<&str> = failures.iter().filter(|(p, _)| *p == phase).map(|(_, m)| m.as_str()).collect();
        let type_ = condition_type(failure);
        if let Some(first) = messages.first() {
            let message = if messages.len() > 1 {
                format!("{first} (and {} more)", messages.len() - 1)
            } else {
                first.to_string()
            };
            set_condition(&mut status.conditions, type_, "True", REASON_WRITE_FAILED, &message, now);
        } else if succeeded.contains(&phase)
            && condition(status, type_).is_some_and(|c| c.reason.as_deref() == Some(REASON_WRITE_FAILED))
        {
            remove_condition(&mut status.conditions, type_);
        }
    }
}

/// Sets (or replaces) a condition; the transition time only moves when the status does.
pub fn set_condition(
    conditions: &mut Vec<GameDeploymentCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let since = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    conditions.retain(|c| c.type_ != type_);
    conditions.push(GameDeploymentCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        last_transition_time: Some(since),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
    });
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

pub fn remove_condition(conditions: &mut Vec<GameDeploymentCondition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

pub fn condition<'a>(status: &'a GameDeploymentStatus, type_: &str) -> Option<&'a GameDeploymentCondition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// A short list of pod names for messages ("a, b, c and 4 more").
fn names<'a>(pods: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = pods.collect();
    let shown = all.iter().take(3).copied().collect::<Vec<_>>().join(", ");
    if all.len() > 3 { format!("{shown} and {} more", all.len() - 3) } else { shown }
}

/// The status of this pass, from what was observed.
pub(crate) fn compute(
    settings: &Settings<'_>,
    diffs: &Diffs,
    old: &GameDeploymentStatus,
    infos: &[PodInfo<'_>],
    draft: &Draft,
    problems: &[(Failure, String)],
) -> GameDeploymentStatus {
    let replicas = count(infos.len());
    let updated = count_where(infos, |i| i.updated);
    let settled = replicas == settings.replicas
        && updated == replicas
        && infos.iter().all(|i| i.state == LifecycleState::Normal && i.progress.is_idle());
    let mut status = GameDeploymentStatus {
        observed_generation: settings.gd.metadata.generation,
        replicas,
        ready_replicas: count_where(infos, |i| i.ready),
        available_replicas: count_where(infos, |i| i.available),
        updated_replicas: updated,
        updated_ready_replicas: count_where(infos, |i| i.updated && i.ready),
        current_revision: Some(if settled {
            settings.update_revision.clone()
        } else {
            settings.current_revision.clone()
        }),
        update_revision: Some(settings.update_revision.clone()),
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        label_selector: Some(ownership::selector_string(&settings.gd.spec.selector)),
        // Canary progress and hook conditions are kept as they are (issue 6 manages them), except entries of
        // pods that no longer exist.
        pause_conditions: old.pause_conditions.clone(),
        current_step_index: old.current_step_index,
        current_step_hash: old.current_step_hash.clone(),
        canary: old.canary.clone(),
        pre_delete_hook_condition: old.pre_delete_hook_condition.clone(),
        pre_inplace_hook_condition: old.pre_inplace_hook_condition.clone(),
        post_inplace_hook_condition: old.post_inplace_hook_condition.clone(),
    };
    let exists = |name: &str| infos.iter().any(|i| i.name == name);
    status.pre_delete_hook_condition.retain(|c| exists(&c.pod_name));
    status.pre_inplace_hook_condition.retain(|c| exists(&c.pod_name));
    status.post_inplace_hook_condition.retain(|c| exists(&c.pod_name));

    let now = settings.now;
    let scale_settled = replicas == settings.replicas && !infos.iter().any(|i| i.specified);
    let update_settled = diffs.update == 0 && infos.iter().all(|i| i.progress.is_idle());
    for failure in [Failure::Scale, Failure::Update] {
        let type_ = condition_type(failure);
        let mine: Vec<&str> = problems.iter().filter(|(f, _)| *f == failure).map(|(_, m)| m.as_str()).collect();
        if !mine.is_empty() {
            set_condition(&mut status.conditions, type_, "True", REASON_INVALID_SPEC, &mine.join("; "), now);
            continue;
        }
        let stale_spec_problem =
            condition(&status, type_).is_some_and(|c| c.reason.as_deref() == Some(REASON_INVALID_SPEC));
        let settled = match failure {
            Failure::Scale => scale_settled,
            Failure::Update => update_settled,
        };
        if settled || stale_spec_problem {
            remove_condition(&mut status.conditions, type_);
        }
    }
    let (progress_status, reason, message) = progressing(settings, diffs, infos, draft, problems, settled);
    set_condition(&mut status.conditions, PROGRESSING, progress_status, reason, &message, now);
    status
}

/// `Progressing`: what the rollout waits for, in words.
fn progressing(
    settings: &Settings<'_>,
    diffs: &Diffs,
    infos: &[PodInfo<'_>],
    draft: &Draft,
    problems: &[(Failure, String)],
    settled: bool,
) -> (&'static str, &'static str, String) {
    if let Some((_, problem)) = problems.first() {
        return ("False", REASON_INVALID_SPEC, problem.clone());
    }
    let replicas = count(infos.len());
    let updated = count_where(infos, |i| i.updated);
    let target = settings.replicas - settings.partition;
    let head = format!(
        "{updated} of {} pods run revision {} (target {target}, partition {})",
        settings.replicas, settings.update_revision, settings.partition
    );
    let need = diffs.update;
    if need > 0 && settings.paused {
        return ("Unknown", "Paused", format!("{head}; updates are paused by spec.updateStrategy.paused"));
    }
    if need > 0 && settings.strategy == GameDeploymentUpdateStrategyType::OnDelete {
        return ("True", "WaitingForDeletion", format!("{head}; {}", ondelete::WAITING_FOR_DELETION));
    }
    let mut waiting: Vec<String> = Vec::new();
    if replicas < settings.replicas {
        waiting.push(format!("{} pods to be created", settings.replicas - replicas));
    }
    if !draft.held.is_empty() {
        let held = draft
            .held
            .iter()
            .map(|h| format!("{} ({})", h.name, h.decision.reason().unwrap_or("held")))
            .collect::<Vec<_>>();
        waiting.push(format!("gates holding {}", names(held.iter().map(String::as_str))));
    }
    let grace: Vec<&str> = infos.iter().filter(|i| matches!(i.progress, Progress::Grace(_))).map(|i| i.name).collect();
    if !grace.is_empty() {
        waiting.push(format!("in-place grace period of {}", names(grace.into_iter())));
    }
    let patching: Vec<&str> =
        infos.iter().filter(|i| matches!(i.progress, Progress::Patched(_) | Progress::Done)).map(|i| i.name).collect();
    if !patching.is_empty() {
        waiting.push(format!("new containers of {}", names(patching.into_iter())));
    }
    let unavailable: Vec<&str> =
        infos.iter().filter(|i| !i.available && i.progress.is_idle()).map(|i| i.name).collect();
    if !unavailable.is_empty() {
        waiting.push(format!("{} to become available", names(unavailable.into_iter())));
    }
    if replicas > settings.replicas {
        waiting.push(format!("{} surplus pods to be deleted", replicas - settings.replicas));
    }
    if need > 0 && waiting.is_empty() {
        waiting.push(format!("update budget (maxUnavailable {})", settings.max_unavailable));
    }
    if !waiting.is_empty() || need > 0 {
        return ("True", "RolloutInProgress", format!("{head}; waiting for {}", waiting.join(", ")));
    }
    if settled {
        return (
            "True",
            "RolloutComplete",
            format!("all {} pods run revision {} and are available", settings.replicas, settings.update_revision),
        );
    }
    (
        "True",
        "PartitionAvailable",
        format!("{head}; {} pods are kept on older revisions by the partition", replicas - updated),
    )
}

/// Events for conditions the planner itself decided (a spec problem appearing, a rollout completing).
pub(crate) fn transition_events(old: &GameDeploymentStatus, new: &GameDeploymentStatus) -> Vec<PlannedEvent> {
    let mut events = Vec::new();
    for type_ in [FAILED_SCALE, FAILED_UPDATE] {
        let Some(c) = condition(new, type_).filter(|c| c.reason.as_deref() == Some(REASON_INVALID_SPEC)) else {
            continue;
        };
        if condition(old, type_).map(|o| (&o.reason, &o.message)) != Some((&c.reason, &c.message)) {
            events.push(PlannedEvent {
                type_: EventType::Warning,
                reason: type_.to_string(),
                message: c.message.clone().unwrap_or_default(),
            });
        }
    }
    let reason = |s: &GameDeploymentStatus| condition(s, PROGRESSING).and_then(|c| c.reason.clone());
    if let Some(now) = reason(new).filter(|r| r == "RolloutComplete" || r == "PartitionAvailable")
        && reason(old).as_deref() != Some(now.as_str())
    {
        let message = condition(new, PROGRESSING).and_then(|c| c.message.clone()).unwrap_or_default();
        events.push(PlannedEvent::normal(&now, message));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let t1 = Timestamp::from_second(10).unwrap();
        let t2 = Timestamp::from_second(20).unwrap();
        let mut conditions = Vec::new();
        set_condition(&mut conditions, PROGRESSING, "True", "RolloutInProgress", "a", t1);
        set_condition(&mut conditions, PROGRESSING, "True", "RolloutInProgress", "b", t2);
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Some(Time(t1)));
        assert_eq!(conditions[0].message.as_deref(), Some("b"));
        set_condition(&mut conditions, PROGRESSING, "Unknown", "Paused", "c", t2);
        assert_eq!(conditions[0].last_transition_time, Some(Time(t2)));
        set_condition(&mut conditions, FAILED_SCALE, "True", "x", "y", t2);
        assert_eq!(conditions.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(), [FAILED_SCALE, PROGRESSING]);
        remove_condition(&mut conditions, FAILED_SCALE);
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn name_lists_are_short() {
        assert_eq!(names(["a", "b"].into_iter()), "a, b");
        assert_eq!(names(["a", "b", "c", "d", "e"].into_iter()), "a, b, c and 2 more");
    }
}

#[cfg(test)]
mod step_tests {
    use super::*;
    use crate::fixtures::gd;
    use crate::planner::diffs;
    use crate::planner::settings::builder::{NEW, OLD, Pass};

    fn status_of(pass: &Pass) -> GameDeploymentStatus {
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        compute(&settings, &diffs, &GameDeploymentStatus::default(), &infos, &Draft::default(), &[])
    }

    #[test]
    fn counts_revisions_and_progress() {
        let status = status_of(&Pass::new(gd(3, "InplaceUpdate")).updated(3));
        assert_eq!((status.replicas, status.ready_replicas, status.updated_replicas), (3, 3, 3));
        assert_eq!(status.current_revision.as_deref(), Some(NEW), "settled: the update revision is current");
        assert_eq!(condition(&status, PROGRESSING).and_then(|c| c.reason.as_deref()), Some("RolloutComplete"));

        let status = status_of(&Pass::new(gd(3, "InplaceUpdate")).old(2).updated(1));
        assert_eq!((status.updated_replicas, status.current_revision.as_deref()), (1, Some(OLD)));
        let progressing = condition(&status, PROGRESSING).unwrap();
        assert_eq!(progressing.reason.as_deref(), Some("RolloutInProgress"));
        assert!(progressing.message.as_deref().unwrap().contains("update budget"), "{progressing:?}");
    }

    #[test]
    fn write_failures_become_conditions_and_clear_on_success() {
        let now = Timestamp::UNIX_EPOCH;
        let mut status = GameDeploymentStatus::default();
        let failures = vec![(Phase::Update, "a".to_string()), (Phase::Update, "b".to_string())];
        apply_write_outcome(&mut status, &failures, &BTreeSet::new(), now);
        let failed = condition(&status, FAILED_UPDATE).unwrap();
        assert_eq!(
            (failed.reason.as_deref(), failed.message.as_deref()),
            (Some(REASON_WRITE_FAILED), Some("a (and 1 more)"))
        );
        assert!(condition(&status, FAILED_SCALE).is_none());
        // A later successful write of that part clears it; a success elsewhere does not.
        apply_write_outcome(&mut status, &[], &BTreeSet::from([Phase::Scale]), now);
        assert!(condition(&status, FAILED_UPDATE).is_some());
        apply_write_outcome(&mut status, &[], &BTreeSet::from([Phase::Update]), now);
        assert!(condition(&status, FAILED_UPDATE).is_none());
        // A spec problem is not a write failure: it stays.
        set_condition(&mut status.conditions, FAILED_SCALE, "True", REASON_INVALID_SPEC, "bad", now);
        apply_write_outcome(&mut status, &[], &BTreeSet::from([Phase::Scale]), now);
        assert!(condition(&status, FAILED_SCALE).is_some());
        assert_eq!(Failure::Scale.phase(), Phase::Scale);
    }
}
