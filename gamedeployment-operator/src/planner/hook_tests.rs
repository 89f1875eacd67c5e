//! Hook gates on the simulated cluster: runs are created once per pod and revision, a pod changes only with a
//! `Successful` run, failures are reported and held until `retry`, runs are cleaned up.

use common::api::{HookPhase, HookRunStatus};
use serde_json::json;

use super::sim_cluster::World;
use crate::action::Action;
use crate::fixtures::{gd, hook_template};
use crate::lifecycle::{self, LifecycleState};

fn hooked(replicas: i32, strategy: &str) -> World {
    let mut gd = gd(replicas, strategy);
    gd.spec.pre_delete_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
    let mut world = World::new(gd);
    world.hook_templates.push(hook_template());
    assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
    world
}

fn set_phase(world: &mut World, phase: HookPhase) {
    for run in &mut world.hook_runs {
        std::sync::Arc::make_mut(run).status = Some(HookRunStatus { phase: Some(phase), ..Default::default() });
    }
}

/// Runs passes, checking the invariant at each: a pod deleted or patched to a new revision has a Successful run.
fn passes(world: &mut World, n: usize) {
    for _ in 0..n {
        world.tick(1);
        let plan = world.plan();
        for action in &plan.actions {
            let pod = match action {
                Action::DeletePod { pod, .. } => Some(&pod.name),
                Action::PatchPod(c) if c.reason.changes_revision() => Some(&c.pod.name),
                _ => None,
            };
            if let Some(name) = pod {
                let id = name.rsplit('-').next().unwrap_or("");
                assert!(
                    world.hook_runs.iter().any(|r| r.metadata.name.as_deref().is_some_and(|n| n.contains(id))
                        && r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Successful)),
                    "{name} changed without a Successful run"
                );
            }
        }
        world.apply(&plan);
    }
}

#[test]
fn scale_in_waits_for_a_successful_run_then_cleans_up() {
    let mut world = hooked(3, "InplaceUpdate");
    world.gd.spec.replicas = Some(2);
    passes(&mut world, 5);
    assert_eq!(world.hook_runs.len(), 1, "one run, never duplicated");
    assert_eq!(world.active().len(), 3);
    let run = &world.hook_runs[0];
    assert!(run.metadata.name.as_deref().unwrap_or("").starts_with("predelete-game-"));
    assert!(run.spec.args.iter().any(|a| a.name == "PodIP" && a.value.is_some()));
    let held: Vec<_> =
        world.active().into_iter().filter(|p| lifecycle::state_of(p) == LifecycleState::PreparingDelete).collect();
    assert_eq!(held.len(), 1);
    let status = world.gd.status.clone().unwrap_or_default();
    assert_eq!(status.pre_delete_hook_condition.len(), 1);
    assert_eq!(status.pre_delete_hook_condition[0].phase, HookPhase::Pending);

    set_phase(&mut world, HookPhase::Successful);
    passes(&mut world, 5);
    assert_eq!(world.active().len(), 2);
    assert!(world.hook_runs.is_empty(), "the run of the deleted pod is removed");
    assert!(world.gd.status.clone().unwrap_or_default().pre_delete_hook_condition.is_empty());
}

#[test]
fn failure_holds_until_retry_and_retry_is_reset_after_acting() {
    let mut world = hooked(3, "InplaceUpdate");
    world.gd.spec.replicas = Some(2);
    passes(&mut world, 3);
    set_phase(&mut world, HookPhase::Failed);
    let plan = world.plan();
    assert!(plan.events.iter().any(|e| e.reason == "HookFailed"), "{:?}", plan.events);
    passes(&mut world, 5);
    assert_eq!(world.active().len(), 3, "a failed hook holds the pod");
    let status = world.gd.status.clone().unwrap_or_default();
    assert_eq!(status.pre_delete_hook_condition[0].phase, HookPhase::Failed);
    let message = status.pre_delete_hook_condition[0].message.clone().unwrap_or_default();
    assert!(
        message.ends_with(concat!(
            "fix the hook, then run it again: kubectl gd retry game -n default (or: kubectl patch gamedeployment game ",
            r#"-n default --type=merge -p '{"spec":{"preDeleteUpdateStrategy":{"retry":true}}}')"#
        )),
        "{message}"
    );

    let failed_uid = world.hook_runs[0].metadata.uid.clone();
    if let Some(s) = world.gd.spec.pre_delete_update_strategy.as_mut() {
        s.retry = true;
    }
    passes(&mut world, 3);
    assert!(!world.gd.spec.pre_delete_update_strategy.as_ref().is_some_and(|s| s.retry), "retry reset");
    assert_eq!(world.hook_runs.len(), 1);
    assert_ne!(world.hook_runs[0].metadata.uid, failed_uid, "a new run");
    set_phase(&mut world, HookPhase::Successful);
    passes(&mut world, 5);
    assert_eq!(world.active().len(), 2);
}

#[test]
fn a_retry_asked_while_the_cache_still_shows_the_run_running_is_kept_until_acted_on() {
    let mut world = hooked(3, "InplaceUpdate");
    world.gd.spec.replicas = Some(2);
    passes(&mut world, 3);
    set_phase(&mut world, HookPhase::Running);
    // The run just failed, but the cache still shows it Running when the person asks for a retry.
    if let Some(s) = world.gd.spec.pre_delete_update_strategy.as_mut() {
        s.retry = true;
    }
    let resets = |plan: &super::Plan| plan.actions.iter().filter(|a| matches!(a, Action::ResetRetry { .. })).count();
    assert_eq!(resets(&world.plan()), 0, "the request is not acknowledged before anything was retried");
    set_phase(&mut world, HookPhase::Failed);
    let plan = world.plan();
    assert!(plan.actions.iter().any(|a| matches!(a, Action::DeleteHookRun { .. })));
    assert_eq!(resets(&plan), 1, "acknowledged once the failed run is deleted");
}

#[test]
fn missing_template_blocks_only_the_pods_that_need_it() {
    let mut world = hooked(3, "InplaceUpdate");
    world.hook_templates.clear();
    world.gd.spec.replicas = Some(2);
    passes(&mut world, 3);
    let status = world.gd.status.clone().unwrap_or_default();
    let blocked = crate::planner::status::condition(&status, crate::planner::hooks::HOOK_BLOCKED).expect("HookBlocked");
    assert!(blocked.message.as_deref().unwrap_or("").contains("HookTemplate \"drain\" not found"), "{blocked:?}");
    // Scaling out is not blocked.
    world.gd.spec.replicas = Some(5);
    passes(&mut world, 5);
    assert_eq!(world.active().len(), 5);
    // The template appears: the condition goes once nothing needs it.
    world.hook_templates.push(hook_template());
    world.gd.spec.replicas = Some(4);
    passes(&mut world, 3);
    let status = world.gd.status.clone().unwrap_or_default();
    assert!(crate::planner::status::condition(&status, crate::planner::hooks::HOOK_BLOCKED).is_none());
    assert_eq!(world.hook_runs.len(), 1);
}

#[test]
fn in_place_update_falls_back_to_the_pre_delete_hook() {
    let mut world = hooked(3, "InplaceUpdate");
    if let Some(s) = world.gd.spec.template.spec.as_mut() {
        s.containers[0].image = Some("game:2".into());
    }
    world.gd.metadata.generation = Some(2);
    passes(&mut world, 4);
    assert!(!world.hook_runs.is_empty());
    assert!(world.hook_runs.iter().all(|r| r.metadata.name.as_deref().unwrap_or("").starts_with("predelete-")));
    let (updated, _) = world.revision_counts();
    assert_eq!(updated, 0, "nothing updated before its run succeeds");
    for _ in 0..10 {
        set_phase(&mut world, HookPhase::Successful);
        passes(&mut world, 3);
    }
    assert_eq!(world.revision_counts(), (3, 0));
    passes(&mut world, 3);
    assert!(world.hook_runs.is_empty(), "runs of updated pods are removed");
}

#[test]
fn post_inplace_hook_runs_after_the_update_and_does_not_block_others() {
    let mut gd = gd(3, "InplaceUpdate");
    gd.spec.post_inplace_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
    gd.spec.update_strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1));
    let mut world = World::new(gd);
    world.hook_templates.push(hook_template());
    assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
    if let Some(s) = world.gd.spec.template.spec.as_mut() {
        s.containers[0].image = Some("game:2".into());
    }
    world.gd.metadata.generation = Some(2);
    for _ in 0..30 {
        world.tick(1);
        let plan = world.plan();
        // No post run exists for a pod before its new containers run.
        for action in &plan.actions {
            if let Action::CreateHookRun(run) = action {
                assert!(run.metadata.name.as_deref().unwrap_or("").starts_with("postinplace-"));
            }
        }
        world.apply(&plan);
    }
    // Every pod was updated although no post hook succeeded: post hooks never block other pods.
    assert_eq!(world.revision_counts(), (3, 0));
    assert_eq!(world.hook_runs.len(), 3);
    let updated: Vec<_> =
        world.active().into_iter().filter(|p| lifecycle::state_of(p) == LifecycleState::Updated).collect();
    assert_eq!(updated.len(), 3, "each pod is held in Updated until its post hook succeeds");
    assert_eq!(world.gd.status.clone().unwrap_or_default().post_inplace_hook_condition.len(), 3);
    // The rollout is not done while post hooks run: `Progressing` says what it waits for (it said
    // `PartitionAvailable`, so `kubectl gd status` reported complete with every pod still held in `Updated`).
    let status = world.gd.status.clone().unwrap_or_default();
    let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing").expect("Progressing");
    assert_eq!(progressing.reason.as_deref(), Some("RolloutInProgress"), "{progressing:?}");
    let message = progressing.message.clone().unwrap_or_default();
    assert!(message.contains("waiting for the post-inplace hook of 3 pods"), "{message}");
    set_phase(&mut world, HookPhase::Successful);
    passes(&mut world, 4);
    assert!(world.active().iter().all(|p| lifecycle::state_of(p) == LifecycleState::Normal));
    assert!(world.hook_runs.is_empty());
    assert!(world.gd.status.clone().unwrap_or_default().post_inplace_hook_condition.is_empty());
}

#[test]
fn canary_steps_partition_pause_and_hook() {
    let mut gd = gd(4, "InplaceUpdate");
    gd.spec.update_strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2));
    gd.spec.update_strategy.canary = Some(
        serde_json::from_value(json!({"steps": [
            {"partition": 3}, {"pause": {}}, {"partition": 2}, {"pause": {"duration": 60}}, {"hook": {"templateName": "drain"}}
        ]}))
        .expect("valid steps"),
    );
    let mut world = World::new(gd);
    let mut t = hook_template();
    t.spec.args.clear();
    world.hook_templates.push(t);
    assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
    let status = world.gd.status.clone().unwrap_or_default();
    assert_eq!(status.current_step_index, Some(5), "a new GameDeployment skips its steps");

    if let Some(s) = world.gd.spec.template.spec.as_mut() {
        s.containers[0].image = Some("game:2".into());
    }
    world.gd.metadata.generation = Some(2);
    let index = |w: &World| w.gd.status.as_ref().and_then(|s| s.current_step_index);
    for _ in 0..20 {
        world.tick(1);
        world.pass();
    }
    assert_eq!(world.revision_counts().0, 1, "partition 3: one pod updated");
    assert_eq!(index(&world), Some(1));
    assert!(world.gd.spec.update_strategy.paused, "the pause step paused the rollout");
    let status = world.gd.status.clone().unwrap_or_default();
    assert_eq!(status.pause_conditions.len(), 1);
    // A person resumes.
    world.gd.spec.update_strategy.paused = false;
    for _ in 0..20 {
        world.tick(1);
        world.pass();
    }
    assert_eq!(world.revision_counts().0, 2, "partition 2");
    assert_eq!(index(&world), Some(3), "timed pause");
    world.tick(61);
    for _ in 0..5 {
        world.tick(1);
        world.pass();
    }
    assert_eq!(index(&world), Some(4), "the timed pause expired");
    assert!(!world.gd.spec.update_strategy.paused);
    assert_eq!(world.hook_runs.len(), 1);
    assert!(world.hook_runs[0].metadata.name.as_deref().unwrap_or("").starts_with("canary-"));
    set_phase(&mut world, HookPhase::Failed);
    for _ in 0..5 {
        world.tick(1);
        world.pass();
    }
    assert!(world.gd.spec.update_strategy.paused, "a failed step hook pauses");
    assert_eq!(index(&world), Some(4));
    world.gd.spec.update_strategy.paused = false;
    for _ in 0..30 {
        world.tick(1);
        world.pass();
    }
    assert_eq!(index(&world), Some(5));
    assert_eq!(world.revision_counts(), (4, 0), "all steps done: partition 0");

    // A new canary, rolled back to the stable revision while paused: straight through, pause lifted.
    let stable = world.update_revision();
    if let Some(s) = world.gd.spec.template.spec.as_mut() {
        s.containers[0].image = Some("game:3".into());
    }
    world.gd.metadata.generation = Some(3);
    for _ in 0..20 {
        world.tick(1);
        world.pass();
    }
    assert_eq!(index(&world), Some(1));
    assert!(world.gd.spec.update_strategy.paused);
    if let Some(s) = world.gd.spec.template.spec.as_mut() {
        s.containers[0].image = Some("game:2".into());
    }
    world.gd.metadata.generation = Some(4);
    for _ in 0..30 {
        world.tick(1);
        world.pass();
    }
    assert_eq!(world.update_revision(), stable);
    assert_eq!(index(&world), Some(5));
    assert!(!world.gd.spec.update_strategy.paused);
    assert_eq!(world.revision_counts(), (4, 0));
}

#[test]
fn scale_up_releases_a_pod_preparing_delete_and_drops_its_run() {
    let mut world = hooked(3, "InplaceUpdate");
    world.gd.spec.replicas = Some(2);
    passes(&mut world, 3);
    assert_eq!(world.hook_runs.len(), 1);
    world.gd.spec.replicas = Some(3);
    passes(&mut world, 3);
    assert_eq!(world.active().len(), 3);
    assert!(world.active().iter().all(|p| lifecycle::state_of(p) == LifecycleState::Normal));
    assert!(world.hook_runs.is_empty(), "a later scale-in asks the hook again");
    assert!(world.gd.status.clone().unwrap_or_default().pre_delete_hook_condition.is_empty());
}

#[test]
fn rollback_releases_pods_preparing_update_without_updating_them() {
    let mut world = hooked(3, "InplaceUpdate");
    let before = world.update_revision();
    if let Some(s) = world.gd.spec.template.spec.as_mut() {
        s.containers[0].image = Some("game:2".into());
    }
    world.gd.metadata.generation = Some(2);
    passes(&mut world, 3);
    assert!(!world.hook_runs.is_empty());
    assert!(world.active().iter().any(|p| lifecycle::state_of(p) == LifecycleState::PreparingUpdate));
    if let Some(s) = world.gd.spec.template.spec.as_mut() {
        s.containers[0].image = Some("game:1".into());
    }
    world.gd.metadata.generation = Some(3);
    passes(&mut world, 4);
    assert_eq!(world.update_revision(), before);
    assert_eq!(world.revision_counts(), (3, 0), "nobody was updated");
    assert!(world.active().iter().all(|p| lifecycle::state_of(p) == LifecycleState::Normal));
    assert!(world.hook_runs.is_empty());
}

/// A release record (`releasedBy`, kept for `RELEASE_RECORD_SECONDS`) expires when it says it does: the pass that
/// keeps it asks to run again at its expiry, and that pass drops it (before, it stayed until something else made
/// the operator run, and `kubectl gd status` waited on it).
#[test]
fn a_release_record_asks_for_a_pass_at_its_expiry_and_that_pass_drops_it() {
    use common::api::{HookCondition, HookReleaseReason};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let mut world = hooked(2, "RollingUpdate");
    let at = |seconds: i64| Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap());
    let record = HookCondition {
        pod_name: "game-gone1".into(),
        start_time: at(world.now - 250),
        phase: HookPhase::Error,
        hook_run: None,
        message: Some("released by the pod annotation".into()),
        released_by: Some(HookReleaseReason::Skipped),
        released_at: Some(at(world.now - 200)),
    };
    world.gd.status.get_or_insert_default().pre_delete_hook_condition = vec![record];
    let plan = world.plan();
    assert_eq!(plan.status.pre_delete_hook_condition.len(), 1, "the record is kept for now");
    let wait = plan.requeue_after.expect("a pass at the record's expiry").as_secs();
    assert!((99..=101).contains(&wait), "asked to look again in {wait} s, the record expires in 100 s");
    world.apply(&plan);
    world.tick(i64::try_from(wait).unwrap());
    assert!(world.plan().status.pre_delete_hook_condition.is_empty(), "the record is gone at its expiry");
}

#[test]
fn a_running_hook_whose_measurements_error_says_so_where_the_pod_is_held() {
    // A hook that cannot connect stays Running until its error limit; the hold reason (status, `kubectl get gd -o
    // wide`) must say what the HookRun says from the first error, not "is Running" (issue 34, item 7).
    let mut world = hooked(3, "InplaceUpdate");
    world.gd.spec.replicas = Some(2);
    passes(&mut world, 3);
    let error = "metric \"web\": 2 measurement error(s) in a row (the metric errors after more than 4): \
                 Get http://10.0.0.3:9091: connection refused";
    for run in &mut world.hook_runs {
        std::sync::Arc::make_mut(run).status =
            Some(HookRunStatus { phase: Some(HookPhase::Running), message: Some(error.into()), ..Default::default() });
    }
    passes(&mut world, 2);
    let status = world.gd.status.clone().unwrap_or_default();
    let held = status.pre_delete_hook_condition[0].message.clone().unwrap_or_default();
    assert!(
        held.contains("is Running: metric \"web\": 2 measurement error(s)") && held.contains("connection refused"),
        "{held}"
    );
    let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing").and_then(|c| c.message.clone());
    assert!(progressing.unwrap_or_default().contains("connection refused"), "{status:?}");
}
