//! Forecasts of changes to a settled simulated cluster: the walkthrough's image change through a pre-delete hook, a
//! partition, a canary pause step, a scale-in, a failing hook, a run the operator already made, a race to empty
//! (its candidates, winners and skipped pods, and what `as-now` cannot know of it), and pods held by lifecycle
//! handlers.

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

/// The race's template `empty`: 3 measurements 5s apart after 2s, failureLimit 1, so a run whose first reading
/// failed is still `Running` (and fails at its second).
fn empty_thrice_template() -> HookTemplate {
    serde_json::from_value(json!({
        "apiVersion": "tkex.tencent.com/v1alpha1",
        "kind": "HookTemplate",
        "metadata": {"name": "empty", "namespace": "default"},
        "spec": {"args": [{"name": "PodName"}],
                 "metrics": [{"name": "players", "count": 3, "interval": "5s", "initialDelay": "2s", "failureLimit": 1,
                              "successCondition": "asInt(result) == 0",
                              "provider": {"web": {"url": "http://players/{{ args.PodName }}", "jsonPath": "{$.players}"}}}]}
    }))
    .unwrap()
}

/// `replicas` pods racing to empty through the `empty` template, `extra` extra candidates, every pod allowed out of
/// service at once (maxUnavailable 100%), settled.
fn race_world(replicas: i32, extra: i32) -> SimCluster {
    let mut g = gd(replicas, "InplaceUpdate");
    g.spec.update_strategy =
        serde_json::from_value(json!({"type": "InplaceUpdate", "maxUnavailable": "100%"})).unwrap();
    g.spec.pre_delete_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "empty"}})).unwrap());
    g.spec.scale_strategy = Some(
        serde_json::from_value(json!({"scaleInPolicy": {"mode": "RaceToEmpty", "extraCandidates": extra}})).unwrap(),
    );
    let mut world = SimCluster::new(g);
    world.hook_templates.push(empty_thrice_template());
    assert!(world.settle(100, |_, _| {}).is_some(), "did not settle");
    world.tick(60);
    world.pass();
    world
}

fn names_in(world: &SimCluster, state: crate::lifecycle::LifecycleState) -> Vec<String> {
    world
        .active()
        .into_iter()
        .filter(|p| crate::lifecycle::state_of(p) == state)
        .map(|p| p.metadata.name.clone().unwrap())
        .collect()
}

/// Scales `world` to `replicas` as the operator would (passes until its candidates race); returns the candidates.
fn scale_in(world: &mut SimCluster, replicas: i32) -> Vec<String> {
    world.gd.spec.replicas = Some(replicas);
    world.gd.metadata.generation = Some(world.gd.metadata.generation.unwrap_or(1) + 1);
    for _ in 0..3 {
        world.tick(1);
        world.pass();
    }
    names_in(world, crate::lifecycle::LifecycleState::PreparingDelete)
}

/// The hook-operator's first reading of the run of each pod in `readings` (pod, success), a second ago.
fn first_reading(world: &mut SimCluster, readings: &[(String, bool)]) {
    let at = |s: i64| Timestamp::from_second(s).unwrap().to_string();
    let (started, finished) = (at(world.now - 3), at(world.now - 1));
    for run in &mut world.hook_runs {
        let pod = run.spec.args.iter().find(|a| a.name == "PodName").and_then(|a| a.value.clone()).unwrap_or_default();
        let Some((_, success)) = readings.iter().find(|(p, _)| *p == pod) else { continue };
        let (phase, counter) = if *success { ("Successful", "successful") } else { ("Failed", "failed") };
        std::sync::Arc::make_mut(run).status = Some(
            serde_json::from_value(json!({
                "phase": "Running", "startedAt": started,
                "metricResults": [{"name": "players", "phase": "Running", "count": 1, counter: 1,
                                   "measurements": [{"phase": phase, "startedAt": finished, "finishedAt": finished}]}]
            }))
            .unwrap(),
        );
    }
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

fn unknown_note(timeline: &Timeline) -> Option<&Note> {
    timeline.notes.iter().find(|n| n.text.contains("cannot know"))
}

/// 10 pods to 7: 3 to delete and 3 extra candidates race; each run has read once, 3 candidates were empty and 3
/// had players. Under as-now the 3 with players fail at their second reading and are skipped, 3 other pods race in
/// their place (their runs have no reading: assumed to succeed, which the plan says it cannot know), and the 3
/// empty ones win at their third reading, before the replacements could; the replacements are released.
#[test]
fn as_now_names_the_race_winners_and_skipped_pods_from_each_runs_first_reading() {
    let mut world = race_world(10, 3);
    let racing = scale_in(&mut world, 7);
    assert_eq!(racing.len(), 6, "3 + 3 extra");
    assert_eq!(world.hook_runs.len(), 6);
    let empty: Vec<String> = racing.iter().skip(1).step_by(2).cloned().collect();
    let full: Vec<String> = racing.iter().filter(|p| !empty.contains(p)).cloned().collect();
    let readings: Vec<(String, bool)> = racing.iter().map(|p| (p.clone(), empty.contains(p))).collect();
    first_reading(&mut world, &readings);
    let timeline = run(live(&world, |_| {}), Assume::AsNow);
    println!("{}", serde_json::to_string_pretty(&timeline).unwrap());
    let race = timeline.race.as_ref().expect("a race");
    let order: Vec<String> = race.candidates.iter().map(|c| c.pod.clone()).collect();
    assert_eq!(order.len(), 9, "the 6 in flight, then 3 in place of the skipped: {order:?}");
    assert_eq!(sorted(order[..6].to_vec()), sorted(racing.clone()), "the pods in flight race first");
    assert_eq!(sorted(race.winners.clone()), sorted(empty.clone()), "the empty servers win");
    assert_eq!(sorted(race.skipped.clone()), sorted(full.clone()), "those with players are skipped");
    for candidate in &race.candidates {
        let (result, outcome, decided) = if empty.contains(&candidate.pod) {
            (RaceResult::Won, HookPhase::Successful, 9..=12)
        } else if full.contains(&candidate.pod) {
            (RaceResult::Skipped, HookPhase::Failed, 4..=7)
        } else {
            (RaceResult::Released, HookPhase::Successful, 9..=12)
        };
        assert_eq!((candidate.result, candidate.outcome), (result, Some(outcome)), "{candidate:?}");
        assert!(candidate.decided.is_some_and(|d| decided.contains(&d)), "{candidate:?}");
        assert_eq!(candidate.measured, racing.contains(&candidate.pod), "{candidate:?}");
    }
    // What as-now cannot know: how the replacements' runs read.
    let note = unknown_note(&timeline).expect("a note");
    for candidate in &race.candidates {
        assert_eq!(note.text.contains(&candidate.pod), !candidate.measured, "{note:?}");
    }
    assert_eq!(note.at, race.candidates[6].joined, "said where the replacements join: {note:?}");
    assert_eq!(timeline.stop.reason, StopReason::Complete, "{:?}", timeline.stop);
    assert_eq!(timeline.after.replicas, 7);
    // The race ends with its winners: the released candidates' runs, removed then, do not count.
    assert!((9..=12).contains(&timeline.total_seconds), "{}", timeline.total_seconds);
    // Assuming success nothing is unknown (the assumption decides).
    let succeed = run(live(&world, |_| {}), Assume::Succeed);
    assert!(unknown_note(&succeed).is_none(), "{:?}", succeed.notes);
}

/// Every pod races at once (4 pods to 2, 2 extra candidates): a candidate whose hook fails has nobody to take its
/// place, so it is held until the race has its winners, then released — not skipped.
#[test]
fn when_every_pod_races_a_failed_candidate_is_released_not_skipped() {
    let mut world = race_world(4, 2);
    let racing = scale_in(&mut world, 2);
    assert_eq!(racing.len(), 4, "every pod races");
    let empty: Vec<String> = racing[2..].to_vec();
    let readings: Vec<(String, bool)> = racing.iter().map(|p| (p.clone(), empty.contains(p))).collect();
    first_reading(&mut world, &readings);
    let timeline = run(live(&world, |_| {}), Assume::AsNow);
    let race = timeline.race.as_ref().expect("a race");
    assert_eq!(race.candidates.len(), 4);
    assert_eq!(sorted(race.winners.clone()), sorted(empty.clone()));
    assert!(race.skipped.is_empty(), "{race:?}");
    for candidate in race.candidates.iter().filter(|c| !empty.contains(&c.pod)) {
        assert_eq!((candidate.result, candidate.outcome), (RaceResult::Released, Some(HookPhase::Failed)));
    }
    assert!(unknown_note(&timeline).is_none(), "every run has read: {:?}", timeline.notes);
    assert_eq!(timeline.stop.reason, StopReason::Complete, "{:?}", timeline.stop);
}

/// 10 pods to 8 with one extra candidate: 3 race. Only the first one's run has read (players); the other two have
/// not been measured: as-now cannot know how they read, assumes they succeed, and says so.
#[test]
fn runs_without_a_reading_are_named_as_unknown_under_as_now() {
    let mut world = race_world(10, 1);
    let racing = scale_in(&mut world, 8);
    assert_eq!(racing.len(), 3, "2 + 1 extra");
    let first = run(live(&world, |_| {}), Assume::AsNow).race.expect("a race").candidates[0].pod.clone();
    first_reading(&mut world, &[(first.clone(), false)]);
    let timeline = run(live(&world, |_| {}), Assume::AsNow);
    let race = timeline.race.as_ref().expect("a race");
    assert_eq!(race.skipped, std::slice::from_ref(&first));
    let others: Vec<String> = racing.iter().filter(|p| **p != first).cloned().collect();
    assert_eq!(sorted(race.winners.clone()), others);
    let note = unknown_note(&timeline).expect("a note");
    for pod in &others {
        assert!(note.text.contains(pod.as_str()), "{note:?}");
    }
    assert!(!note.text.contains(&first), "{note:?}");
}

/// With a cost probe (no extra candidate), the probes of 8 pods have answered a cost and 2 have not: the forecast
/// cannot know those 2 costs (the simulated hook-operator reads no value), races them as pods without a cost, and
/// says so; the answered costs order the race (the 3 cheapest answered race).
#[test]
fn unanswered_cost_probes_are_named_as_unknown() {
    let mut world = race_world(10, 0);
    let mut cost = empty_thrice_template();
    cost.metadata.name = Some("cost".into());
    world.hook_templates.push(cost);
    world.gd.spec.scale_strategy.as_mut().unwrap().scale_in_policy.as_mut().unwrap().cost_probe =
        Some(serde_json::from_value(json!({"templateName": "cost", "timeoutSeconds": 600})).unwrap());
    assert!(scale_in(&mut world, 7).is_empty(), "no candidate while the costs are awaited");
    let pod_of = |run: &common::api::HookRun| {
        run.spec.args.iter().find(|a| a.name == "PodName").and_then(|a| a.value.clone()).unwrap_or_default()
    };
    let mut pods: Vec<String> = world.hook_runs.iter().map(|r| pod_of(r)).collect();
    pods.sort();
    assert_eq!(pods.len(), 10, "every pod is asked");
    let (silent, answered) = pods.split_at(2);
    // Cheapest last in name order: the last three answered race.
    for run in &mut world.hook_runs {
        let pod = pod_of(run);
        let Some(rank) = answered.iter().position(|p| *p == pod) else { continue };
        std::sync::Arc::make_mut(run).status = Some(
            serde_json::from_value(json!({
                "phase": "Successful",
                "metricResults": [{"name": "players", "phase": "Successful", "count": 1, "successful": 1,
                                   "measurements": [{"phase": "Successful", "value": (100 - rank).to_string()}]}]
            }))
            .unwrap(),
        );
    }
    let timeline = run(live(&world, |_| {}), Assume::Succeed);
    let race = timeline.race.as_ref().expect("a race");
    assert_eq!(
        sorted(race.candidates.iter().map(|c| c.pod.clone()).collect()),
        answered[5..].to_vec(),
        "the 3 cheapest answered"
    );
    let note = timeline.notes.iter().find(|n| n.text.contains("cost probe")).expect("a note");
    for pod in silent {
        assert!(note.text.contains(pod.as_str()), "{note:?}");
    }
    for pod in answered {
        assert!(!note.text.contains(pod.as_str()), "{note:?}");
    }
}

/// Without a race no race is reported.
#[test]
fn a_scale_in_without_race_to_empty_has_no_race() {
    let world = settled(walkthrough_gd());
    let timeline = run(live(&world, |g| g.spec.replicas = Some(3)), Assume::Succeed);
    assert!(timeline.race.is_none());
    assert!(serde_json::to_value(&timeline).unwrap().get("race").is_none());
}

/// The walkthrough's GameDeployment without its hook, with the lifecycle handler `handler` (`preDelete`,
/// `inPlaceUpdate` or `preNormal`) on the label `example.com/hold: "true"`, settled; every pod carries the label when
/// `labelled`.
fn handled(handler: &str, labelled: bool) -> SimCluster {
    let mut g = walkthrough_gd();
    g.spec.pre_delete_update_strategy = None;
    let mut world = settled(g);
    world.gd.spec.lifecycle =
        Some(serde_json::from_value(json!({handler: {"labelsHandler": {"example.com/hold": "true"}}})).unwrap());
    if labelled {
        for pod in &mut world.pods {
            pod.metadata.labels.get_or_insert_with(Default::default).insert("example.com/hold".into(), "true".into());
        }
    }
    world
}

#[test]
fn a_pod_held_by_the_pre_delete_handler_is_named_with_what_releases_it() {
    let world = handled("preDelete", true);
    let timeline = run(live(&world, |g| g.spec.replicas = Some(4)), Assume::Succeed);
    println!("{}", serde_json::to_string_pretty(&timeline).unwrap());
    let [hold] = &timeline.lifecycle_holds[..] else { panic!("one hold: {:?}", timeline.lifecycle_holds) };
    assert_eq!((hold.state.as_str(), hold.handler.as_str()), ("PreparingDelete", "preDelete"));
    assert_eq!(hold.release, "an outside controller must remove label example.com/hold=true from the pod");
    assert!(hold.since.is_some_and(|s| (0..=2).contains(&s)), "{hold:?}");
    let step = &timeline.batches[0].pods[0];
    assert_eq!((step.pod.as_str(), step.action, step.acted), (hold.pod.as_str(), PodAction::Delete, None));
    assert_eq!(timeline.stop.reason, StopReason::LifecycleHold, "{:?}", timeline.stop);
    let waits = format!("pod {} in PreparingDelete waits for the preDelete lifecycle handler", hold.pod);
    assert!(timeline.stop.message.starts_with(&waits), "{:?}", timeline.stop);
}

#[test]
fn a_pod_held_by_the_in_place_update_handler_is_named() {
    let world = handled("inPlaceUpdate", true);
    let timeline = run(live(&world, set_image), Assume::Succeed);
    assert_eq!(timeline.lifecycle_holds.len(), 2, "partition 2 of 5, maxUnavailable 2: {:?}", timeline.lifecycle_holds);
    for hold in &timeline.lifecycle_holds {
        assert_eq!((hold.state.as_str(), hold.handler.as_str()), ("PreparingUpdate", "inPlaceUpdate"));
        assert!(hold.release.contains("remove label example.com/hold=true"), "{hold:?}");
    }
    assert_eq!(timeline.stop.reason, StopReason::LifecycleHold, "{:?}", timeline.stop);
}

/// A new pod waits in `PreparingNormal` until an outside controller adds the handler's label: named as the
/// batches name it ("new pod 1").
#[test]
fn a_new_pod_held_by_the_pre_normal_handler_is_named_with_what_it_waits_for() {
    let world = handled("preNormal", false);
    let timeline = run(live(&world, |g| g.spec.replicas = Some(6)), Assume::Succeed);
    println!("{}", serde_json::to_string_pretty(&timeline).unwrap());
    let [hold] = &timeline.lifecycle_holds[..] else { panic!("one hold: {:?}", timeline.lifecycle_holds) };
    assert_eq!(
        (hold.pod.as_str(), hold.state.as_str(), hold.handler.as_str()),
        ("new pod 1", "PreparingNormal", "preNormal")
    );
    assert_eq!(hold.release, "an outside controller must add label example.com/hold=true to the pod");
    assert_eq!(timeline.stop.reason, StopReason::LifecycleHold, "{:?}", timeline.stop);
}

/// A handler whose parts are not on the pod holds nothing: the scale-in completes.
#[test]
fn a_handler_the_pods_do_not_match_holds_nothing() {
    let world = handled("preDelete", false);
    let timeline = run(live(&world, |g| g.spec.replicas = Some(4)), Assume::Succeed);
    assert!(timeline.lifecycle_holds.is_empty(), "{:?}", timeline.lifecycle_holds);
    assert_eq!(timeline.stop.reason, StopReason::Complete, "{:?}", timeline.stop);
}

/// The simulated cluster changes a pod's resourceVersion when the pod changes and only then, as the API server
/// does: the planner remembers what it read from a pod by UID and resourceVersion, so a new one on every pass made
/// it read every pod again (the planner's cost measured on the simulated fleet, `plan-bench`, was the cost of a
/// cache that never hits), and a change without one would be read as it was.
#[test]
fn a_pod_gets_a_new_resource_version_when_it_changes_and_only_then() {
    let mut world = settled(walkthrough_gd());
    let versions = |w: &SimCluster| -> Vec<Option<String>> {
        w.pods.iter().map(|p| p.metadata.resource_version.clone()).collect()
    };
    let before = versions(&world);
    world.tick(1);
    world.pass();
    assert_eq!(versions(&world), before, "nothing changed: every pod keeps its resourceVersion");

    let labels = world.pods[0].metadata.labels.get_or_insert_with(Default::default);
    labels.insert("example.com/touched".into(), "yes".into());
    world.tick(1);
    let after = versions(&world);
    assert_ne!(after[0], before[0], "the changed pod has a new resourceVersion");
    assert_eq!(after[1..], before[1..], "the others keep theirs");
}

/// Issue 49, finding 2: a canary whose step hook fails with `onFailure: Rollback` ends rolled back — its own stop
/// reason, never "complete" (every pod is back on the stable revision, which `status.updateRevision` names
/// meanwhile) — and the timeline names the revision the change made, not the stable one.
#[test]
fn a_failed_canary_with_on_failure_rollback_ends_rolled_back_not_complete() {
    let mut g = walkthrough_gd();
    g.spec.pre_delete_update_strategy = None;
    g.spec.update_strategy.partition = None;
    g.spec.update_strategy.canary = Some(
        serde_json::from_value(json!({"steps": [{"partition": 3},
            {"hook": {"templateName": "test"}, "hookPolicy": {"onFailure": "Rollback"}}]}))
        .unwrap(),
    );
    let world = settled(g);
    let stable = world.update_revision().unwrap();
    let timeline = run(live(&world, set_image), Assume::Fail);
    println!("{}", serde_json::to_string_pretty(&timeline).unwrap());
    assert_eq!(timeline.stop.reason, StopReason::RolledBack, "{:?}", timeline.stop);
    assert!(timeline.stop.message.contains("Rollback"), "{:?}", timeline.stop);
    assert_eq!(timeline.rolled_back_to.as_deref(), Some(stable.as_str()));
    assert_ne!(timeline.update_revision.as_deref(), Some(stable.as_str()), "the change's revision, not the stable one");
    assert_eq!(serde_json::to_value(&timeline).unwrap()["stop"]["reason"], "rolled-back");
    // Under `succeed` the same canary completes.
    let timeline = run(live(&world, set_image), Assume::Succeed);
    assert_eq!(timeline.stop.reason, StopReason::Complete, "{:?}", timeline.stop);
    assert_eq!(timeline.rolled_back_to, None);
}

/// The operator's memos (run spec hashes, pod facts) are keyed by UID and shared by every pass in the process, so
/// two simulated clusters in one process (two forecasts of `kubectl gd plan`, the planner's tests) never give two
/// objects one UID: one cluster's run would be judged with the other's spec hash.
#[test]
fn simulated_clusters_in_one_process_never_share_a_uid() {
    let (mut a, mut b) = (SimCluster::new(gd(1, "InplaceUpdate")), SimCluster::new(gd(1, "InplaceUpdate")));
    let uids = [a.uid(), a.uid(), b.uid(), b.uid()];
    let distinct: std::collections::BTreeSet<&String> = uids.iter().collect();
    assert_eq!(distinct.len(), 4, "{uids:?}");
}

/// A run the simulated cluster creates is at generation 1 with a UID, as the API server creates a custom object:
/// the operator's memo of run spec hashes, keyed by both, then serves simulated passes as it serves real ones.
#[test]
fn simulated_runs_are_created_with_a_uid_at_generation_1() {
    let mut world = settled(walkthrough_gd());
    world.gd.spec.replicas = Some(3);
    for _ in 0..5 {
        if world.hook_runs.is_empty() {
            world.pass();
            world.tick(1);
        }
    }
    assert!(!world.hook_runs.is_empty(), "the scale-in made runs");
    for run in &world.hook_runs {
        assert_eq!((run.metadata.uid.is_some(), run.metadata.generation), (true, Some(1)), "{:?}", run.metadata);
    }
}
