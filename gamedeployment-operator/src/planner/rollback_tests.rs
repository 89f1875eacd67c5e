//! A failed canary rolled back (`hookPolicy.onFailure: Rollback`) on the simulated cluster: the rollback is recorded
//! in the status only, the updated pods go back to the stable revision in place through their pre-inplace gate, the
//! rollback holds until the template changes, and a new template starts its canary at step 0.

use common::api::{HookPhase, HookRunStatus};
use common::hookrun::HookKind;
use common::keys;
use serde_json::json;

use super::sim_cluster::World;
use crate::action::Action;
use crate::fixtures::{gd, hook_template};

/// 4 pods, in-place updates gated by `drain`, and a canary: partition 2, then the `check` hook with `onFailure:
/// Rollback` (and `extra` in its policy).
fn canary(extra: serde_json::Value) -> World {
    canary_with("InplaceUpdate", extra)
}

fn canary_with(strategy: &str, extra: serde_json::Value) -> World {
    let mut gd = gd(4, strategy);
    gd.spec.pre_inplace_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
    let mut policy = json!({"onFailure": "Rollback"});
    if let (Some(p), Some(e)) = (policy.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    gd.spec.update_strategy.canary = Some(
        serde_json::from_value(
            json!({"steps": [{"partition": 2}, {"hook": {"templateName": "check"}, "hookPolicy": policy}]}),
        )
        .expect("valid canary"),
    );
    let mut world = World::new(gd);
    world.hook_templates.push(hook_template());
    let mut check = hook_template();
    check.metadata.name = Some("check".into());
    check.spec.args.clear();
    world.hook_templates.push(check);
    assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
    world
}

fn kind(run: &common::api::HookRun) -> Option<&str> {
    run.metadata.labels.as_ref()?.get(keys::HOOKRUN_TYPE).map(String::as_str)
}

/// The hook-operator's part: pre-inplace runs succeed, canary step runs fail.
fn judge_runs(world: &mut World) {
    for run in &mut world.hook_runs {
        if run.status.as_ref().and_then(|s| s.phase).is_some() {
            continue;
        }
        let phase = if kind(run) == Some(HookKind::CanaryStep.type_label()) {
            HookPhase::Failed
        } else {
            HookPhase::Successful
        };
        std::sync::Arc::make_mut(run).status = Some(HookRunStatus { phase: Some(phase), ..Default::default() });
    }
}

/// Passes until nothing is planned, checking at each: no spec write, and every pod moved to another revision has a
/// Successful pre-inplace run made for that revision. Returns the events and the pods moved (pod, revision).
fn run(world: &mut World, max: usize) -> (Vec<crate::action::PlannedEvent>, Vec<(String, String)>) {
    let mut events = Vec::new();
    let mut moved = Vec::new();
    for _ in 0..max {
        world.tick(1);
        judge_runs(world);
        let plan = world.plan();
        for action in &plan.actions {
            assert!(
                !matches!(action, Action::SetPaused { .. } | Action::ResetRetry { .. }),
                "a spec write: {action:?}"
            );
            let Action::PatchPod(change) = action else { continue };
            if !change.reason.changes_revision() {
                continue;
            }
            let id = change.pod.name.rsplit('-').next().unwrap_or("");
            let target = plan.status.update_revision.clone().unwrap_or_default();
            assert!(
                world.hook_runs.iter().any(|r| {
                    let change = r.metadata.annotations.as_ref().and_then(|a| a.get(keys::HOOKRUN_CHANGE));
                    r.metadata.name.as_deref().is_some_and(|n| n.contains(id))
                        && change == Some(&format!("inplace/{target}"))
                        && r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Successful)
                }),
                "{} moved to {target} without a Successful run for it",
                change.pod.name
            );
            moved.push((change.pod.name.clone(), target));
        }
        events.extend(plan.events.iter().cloned());
        let quiet = plan.actions.is_empty()
            && plan.requeue_after.is_none()
            && world.pods.iter().all(|p| common::pod::is_ready(p) || !common::pod::is_active(p));
        world.apply(&plan);
        if quiet {
            break;
        }
    }
    (events, moved)
}

fn images(world: &World) -> Vec<String> {
    world
        .active()
        .iter()
        .map(|p| {
            p.spec.as_ref().and_then(|s| s.containers[0].image.as_ref()).map(ToString::to_string).unwrap_or_default()
        })
        .collect()
}

fn set_image(world: &mut World, image: &str) {
    if let Some(spec) = world.gd.spec.template.spec.as_mut() {
        spec.containers[0].image = Some(image.into());
    }
    world.gd.metadata.generation = world.gd.metadata.generation.map(|g| g + 1);
}

#[test]
fn a_failed_step_hook_rolls_every_updated_pod_back_through_its_gate_and_holds_until_a_new_template() {
    let mut world = canary(json!({}));
    let stable = world.update_revision().expect("a revision");
    let spec_before = world.gd.spec.clone();
    set_image(&mut world, "game:2");
    let spec_after = world.gd.spec.clone();
    let (events, moved) = run(&mut world, 200);
    let status = world.gd.status.clone().unwrap_or_default();
    let rollback = status.canary.as_ref().and_then(|c| c.rollback.clone()).expect("the rollback is recorded");
    assert_eq!(rollback.stable_revision, stable);
    assert_ne!(rollback.failed_revision, stable);
    assert_eq!((rollback.step, rollback.phase), (1, HookPhase::Failed));
    assert!(rollback.hook_run.starts_with("canary-") && rollback.hook_run.ends_with("-1-check"), "{rollback:?}");
    let rolled_back: Vec<_> = events.iter().filter(|e| e.reason == "CanaryRolledBack").collect();
    assert_eq!(rolled_back.len(), 1, "announced once: {events:?}");
    assert!(rolled_back[0].message.contains(&rollback.hook_run), "{}", rolled_back[0].message);
    // Every pod back on the stable revision and image; the status says so.
    assert_eq!(images(&world), ["game:1"; 4]);
    assert_eq!(world.revision_counts(), (4, 0));
    assert_eq!(status.update_revision.as_deref(), Some(stable.as_str()));
    let progressing = super::status::condition(&status, super::status::PROGRESSING).expect("Progressing");
    assert_eq!((progressing.status.as_str(), progressing.reason.as_deref()), ("False", Some("CanaryRolledBack")));
    assert!(progressing.message.as_deref().unwrap_or_default().contains("all 4 pods run revision"), "{progressing:?}");
    // Through the gates: 2 pods forward, the same 2 back, each with its own Successful pre-inplace run (checked in
    // `run` at each move).
    let forward: Vec<&String> = moved.iter().filter(|(_, r)| *r == rollback.failed_revision).map(|(p, _)| p).collect();
    let back: Vec<&String> = moved.iter().filter(|(_, r)| *r == stable).map(|(p, _)| p).collect();
    assert_eq!((forward.len(), back.len()), (2, 2), "{moved:?}");
    assert!(back.iter().all(|p| forward.contains(p)), "the pods that moved forward move back: {moved:?}");
    assert_eq!(world.gd.spec, spec_after, "no spec write");
    assert_ne!(spec_before, spec_after);

    // It holds: more passes, a resume annotation for the failed step, and a scale-out change nothing of it.
    let annotations = world.gd.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(keys::RESUME_STEP.into(), format!("{}/1", rollback.failed_revision));
    annotations.insert(keys::PROMOTE.into(), rollback.failed_revision.clone());
    world.gd.spec.replicas = Some(5);
    let (_, moved) = run(&mut world, 100);
    assert!(moved.is_empty(), "{moved:?}");
    assert_eq!(images(&world), ["game:1"; 5], "the new pod is made from the stable revision");
    assert_eq!(
        world.gd.status.as_ref().and_then(|s| s.canary.as_ref()).and_then(|c| c.rollback.clone()),
        Some(rollback.clone())
    );

    // A new template ends the rollback and starts its canary at step 0: 3 pods updated, then its hook fails too.
    set_image(&mut world, "game:3");
    world.tick(1);
    let plan = world.plan();
    let canary = plan.status.canary.clone().unwrap_or_default();
    assert_eq!(canary.rollback, None);
    assert_eq!(plan.status.current_step_index, Some(0));
    assert!(plan.events.iter().any(|e| e.reason == "SetStepIndex" && e.message.contains("the rollback of revision")));
    world.apply(&plan);
    let (events, _) = run(&mut world, 200);
    let again = world.gd.status.as_ref().and_then(|s| s.canary.as_ref()).and_then(|c| c.rollback.clone());
    let again = again.expect("the new canary failed and rolled back too");
    assert_ne!(again.failed_revision, rollback.failed_revision);
    assert_eq!(again.stable_revision, stable);
    assert!(events.iter().any(|e| e.reason == "CanaryRolledBack"));
    assert_eq!(images(&world), ["game:1"; 5]);
}

#[test]
fn rolling_the_template_back_to_the_stable_revision_ends_the_rollback_and_skips_the_steps() {
    let mut world = canary(json!({}));
    set_image(&mut world, "game:2");
    run(&mut world, 200);
    assert!(world.gd.status.as_ref().and_then(|s| s.canary.as_ref()).and_then(|c| c.rollback.as_ref()).is_some());
    set_image(&mut world, "game:1");
    run(&mut world, 100);
    let status = world.gd.status.clone().unwrap_or_default();
    assert_eq!(status.canary.as_ref().and_then(|c| c.rollback.as_ref()), None);
    assert_eq!(status.current_step_index, Some(2), "every step skipped");
    let progressing = super::status::condition(&status, super::status::PROGRESSING).expect("Progressing");
    assert_eq!(progressing.reason.as_deref(), Some("RolloutComplete"));
}

#[test]
fn automatic_retries_come_before_the_rollback() {
    let mut world = canary(json!({"autoRetry": {"limit": 1, "backoffSeconds": 5}}));
    set_image(&mut world, "game:2");
    let (events, _) = run(&mut world, 200);
    let retried = events.iter().position(|e| e.reason == "CanaryHookRetried").expect("retried first");
    let rolled_back = events.iter().position(|e| e.reason == "CanaryRolledBack").expect("then rolled back");
    assert!(retried < rolled_back);
    let rollback = world.gd.status.as_ref().and_then(|s| s.canary.as_ref()).and_then(|c| c.rollback.clone());
    assert!(rollback.is_some_and(|r| r.hook_run.ends_with("-1-check.1")), "the retry's run decided");
}

#[test]
fn a_recreate_strategy_rolls_back_by_recreating_the_pods() {
    let mut world = canary_with("RollingUpdate", json!({}));
    let stable = world.update_revision().expect("a revision");
    set_image(&mut world, "game:2");
    let (events, _) = run(&mut world, 300);
    assert!(events.iter().any(|e| e.reason == "CanaryRolledBack"), "{events:?}");
    assert_eq!(world.update_revision(), Some(stable));
    assert_eq!(images(&world), ["game:1"; 4]);
    assert_eq!(world.revision_counts(), (4, 0));
}
