//! Forecasts of changes to a settled simulated cluster: the walkthrough's image change through a pre-delete hook, a
//! partition, a canary pause step, a scale-in, a failing hook, and a run the operator already made.

use common::api::{GameDeployment, HookPhase, HookTemplate};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::cluster::SimCluster;
use super::*;
use crate::fixtures::gd;

/// The walkthrough's template: 3 measurements 60s apart, failureLimit 2.
fn walkthrough_template() -> HookTemplate {
    serde_json::from_value(json!({
        "apiVersion": "tkex.tencent.com/v1alpha1",
        "kind": "HookTemplate",
        "metadata": {"name": "test", "namespace": "default"},
        "spec": {"metrics": [{"name": "webtest", "count": 3, "interval": "60s", "failureLimit": 2,
                              "successCondition": "asInt(result) > 30",
                              "provider": {"web": {"url": "http://1.1.1.1:9091", "jsonPath": "{$.age}"}}}]}
    }))
    .unwrap()
}

/// The walkthrough's GameDeployment, scaled to 5: InplaceUpdate, partition 2, maxUnavailable 2, grace period 30s,
/// minReadySeconds 30, pre-delete hook `test`.
fn walkthrough_gd() -> GameDeployment {
    let mut g = gd(5, "InplaceUpdate");
    g.spec.min_ready_seconds = 30;
    g.spec.update_strategy = serde_json::from_value(json!({
        "type": "InplaceUpdate", "partition": 2, "maxUnavailable": 2,
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 30}
    }))
    .unwrap();
    g.spec.pre_delete_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "test"}})).unwrap());
    g
}

/// `gd` settled on the simulated cluster, every pod available for longer than `minReadySeconds`.
fn settled(gd: GameDeployment) -> SimCluster {
    let mut world = SimCluster::new(gd);
    world.hook_templates.push(walkthrough_template());
    assert!(world.settle(100, |_, _| {}).is_some(), "did not settle");
    world.tick(60);
    world.pass();
    world
}

/// The objects as the API server would give them: with resourceVersions of their own (unique in the process, as
/// the planner remembers what it read by UID and resourceVersion).
fn live(world: &SimCluster, change: impl FnOnce(&mut GameDeployment)) -> Live {
    static READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let read = READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut pods = world.pods.clone();
    for pod in &mut pods {
        pod.metadata.resource_version = Some(format!("live-{read}"));
    }
    let mut gd = world.gd.clone();
    change(&mut gd);
    gd.metadata.generation = Some(gd.metadata.generation.unwrap_or(1) + 1);
    Live {
        gd,
        pods,
        revisions: world.revisions.clone(),
        hook_runs: world.hook_runs.iter().map(|r| (**r).clone()).collect(),
        hook_templates: world.hook_templates.clone(),
        node_costs: Default::default(),
        now: Timestamp::from_second(world.now).unwrap(),
    }
}

fn set_image(gd: &mut GameDeployment) {
    gd.spec.template.spec.as_mut().unwrap().containers[0].image = Some("game:2".into());
}

fn run(live: Live, assume: Assume) -> Timeline {
    forecast(live, &Options { assume, ..Options::default() }).unwrap()
}

fn shape(timeline: &Timeline) -> Vec<Vec<(bool, PodAction, usize)>> {
    timeline.batches.iter().map(|b| b.pods.iter().map(|p| (p.new, p.action, p.hooks.len())).collect()).collect()
}

#[test]
fn the_walkthrough_image_change_goes_in_two_batches_through_the_pre_delete_hook() {
    let world = settled(walkthrough_gd());
    let names: Vec<String> = world.active().iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    let timeline = run(live(&world, set_image), Assume::Succeed);
    println!("{}", serde_json::to_string_pretty(&timeline).unwrap());
    assert_eq!(
        shape(&timeline),
        vec![vec![(false, PodAction::InPlaceUpdate, 1); 2], vec![(false, PodAction::InPlaceUpdate, 1)]],
        "partition 2 of 5, maxUnavailable 2: two pods, then one"
    );
    let [first, second] = &timeline.batches[..] else { panic!("two batches") };
    for step in first.pods.iter().chain(&second.pods) {
        assert!(names.contains(&step.pod), "existing pods by name: {}", step.pod);
        let hook = &step.hooks[0];
        assert_eq!((hook.kind.as_str(), hook.template.as_str()), ("preDelete", "test"));
        assert_eq!(hook.schedule, "3 measurements 60s apart");
        assert_eq!(hook.completes.map(|c| c - hook.starts), Some(120));
        assert_eq!(hook.outcome, HookPhase::Successful);
        // The images change when the hook succeeded and the 30s grace period ended.
        let acted = step.acted.unwrap();
        assert!(acted >= hook.completes.unwrap(), "{step:?}");
        // Available again after minReadySeconds.
        assert!(step.done.unwrap() >= acted + 30, "{step:?}");
    }
    assert!(first.starts <= 1, "the first pass after the change (the revision is made first)");
    assert!(second.starts >= first.ends.unwrap(), "the second batch waits for the first to be available again");
    // Each batch: hook 120s + grace 30s + restart + minReadySeconds 30s.
    let batch = first.ends.unwrap() - first.starts;
    assert!((180..=190).contains(&batch), "{batch}");
    assert!((360..=385).contains(&timeline.total_seconds), "{}", timeline.total_seconds);
    assert_eq!(timeline.stop.reason, StopReason::Partition, "{:?}", timeline.stop);
    assert_eq!((timeline.after.updated, timeline.after.replicas), (3, 5));
}

#[test]
fn a_partition_change_alone_updates_down_to_it() {
    let mut g = walkthrough_gd();
    g.spec.pre_delete_update_strategy = None;
    g.spec.update_strategy.partition = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(5));
    let mut world = settled(g);
    set_image(&mut world.gd);
    world.gd.metadata.generation = Some(2);
    for _ in 0..5 {
        world.tick(1);
        world.pass();
    }
    assert_eq!(world.revision_counts(), (0, 5), "partition 5: nobody updated yet");
    let timeline = run(
        live(&world, |g| {
            g.spec.update_strategy.partition = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(3))
        }),
        Assume::Succeed,
    );
    assert_eq!(shape(&timeline), vec![vec![(false, PodAction::InPlaceUpdate, 0); 2]]);
    assert_eq!(timeline.stop.reason, StopReason::Partition);
    assert_eq!(timeline.after.updated, 2);
}

#[test]
fn a_canary_pause_step_stops_the_forecast_where_it_pauses() {
    let mut g = walkthrough_gd();
    g.spec.pre_delete_update_strategy = None;
    g.spec.update_strategy.partition = None;
    g.spec.update_strategy.canary =
        Some(serde_json::from_value(json!({"steps": [{"partition": 4}, {"pause": {}}, {"partition": 0}]})).unwrap());
    let world = settled(g);
    let timeline = run(live(&world, set_image), Assume::Succeed);
    assert_eq!(shape(&timeline), vec![vec![(false, PodAction::InPlaceUpdate, 0)]], "one pod, then the pause");
    assert_eq!(timeline.stop.reason, StopReason::Paused, "{:?}", timeline.stop);
    assert!(timeline.notes.iter().any(|n| n.text.starts_with("paused")), "{:?}", timeline.notes);
}

#[test]
fn a_scale_in_deletes_through_the_hook() {
    let world = settled(walkthrough_gd());
    let timeline = run(live(&world, |g| g.spec.replicas = Some(3)), Assume::Succeed);
    let steps: Vec<&PodStep> = timeline.batches.iter().flat_map(|b| &b.pods).collect();
    assert_eq!(steps.len(), 2, "{:?}", shape(&timeline));
    assert!(steps.iter().all(|s| s.action == PodAction::Delete && s.hooks.len() == 1 && s.acted.is_some()));
    assert_eq!(timeline.stop.reason, StopReason::Complete, "{:?}", timeline.stop);
    assert_eq!(timeline.after.replicas, 3);
}

#[test]
fn under_fail_the_rollout_stops_at_the_first_batch() {
    let world = settled(walkthrough_gd());
    let timeline = run(live(&world, set_image), Assume::Fail);
    assert_eq!(shape(&timeline), vec![vec![(false, PodAction::InPlaceUpdate, 1); 2]]);
    let steps = &timeline.batches[0].pods;
    assert!(steps.iter().all(|s| s.acted.is_none() && s.hooks[0].outcome == HookPhase::Failed), "{steps:?}");
    assert_eq!(timeline.stop.reason, StopReason::HookFailed, "{:?}", timeline.stop);
    let hook = &steps[0].hooks[0];
    assert_eq!(
        hook.completes.map(|c| c - hook.starts),
        Some(120),
        "failed (3) > failureLimit (2) at the third measurement"
    );
    assert_eq!(Some(timeline.total_seconds), hook.completes, "the rollout ends where its hooks fail");
}

#[test]
fn a_run_the_operator_already_made_is_trusted_and_waited_on_not_made_again() {
    let mut world = settled(walkthrough_gd());
    world.gd.spec.replicas = Some(4);
    for _ in 0..5 {
        if world.hook_runs.is_empty() {
            world.tick(1);
            world.pass();
        }
    }
    world.tick(10);
    let made: Vec<String> = world.hook_runs.iter().map(|r| r.metadata.name.clone().unwrap()).collect();
    assert_eq!(made.len(), 1, "the operator started the pre-delete hook");
    // The forecast has a key of its own: it re-signs its copy of the run and waits on it.
    let timeline = run(live(&world, |_| {}), Assume::Succeed);
    let steps: Vec<&PodStep> = timeline.batches.iter().flat_map(|b| &b.pods).collect();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].hooks.iter().map(|h| h.run.clone()).collect::<Vec<_>>(), made, "no new run");
    assert_eq!(steps[0].hooks[0].starts, -10);
    assert_eq!(steps[0].acted, Some(110), "deleted when the run completes: 120s after it started");
    assert_eq!(timeline.stop.reason, StopReason::Complete);
}

/// A scale-out under a partition: the new pods run the update revision and are waited for until available
/// (`minReadySeconds`), and the rollout is then complete — not "stopped at the partition" before they are.
#[test]
fn a_scale_out_waits_for_the_new_pods_to_become_available() {
    let world = settled(walkthrough_gd());
    let timeline = run(live(&world, |gd| gd.spec.replicas = Some(7)), Assume::Succeed);
    assert_eq!(timeline.stop.reason, StopReason::Complete, "{:?}", timeline.stop);
    assert!(timeline.stop.at >= 30, "minReadySeconds is waited for: {:?}", timeline.stop);
    assert_eq!(timeline.after.available, 7, "{:?}", timeline.after);
}
