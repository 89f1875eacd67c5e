//! The controller's shell — the executor that sends a pass's actions, and the report's status-write decision —
//! tested without a server: the executor runs against the simulated cluster ([`crate::forecast::sim_writes`]),
//! whose requests can be made to fail ([`Fault`]); [`SimCluster::sent`] is what the executor sent, in its order.

use common::hookrun::HookKind;
use k8s_openapi::api::core::v1::Pod as ApiPod;
use serde_json::json;

use crate::action::{Action, CreateReason, PatchReason, Phase, PodChange, PodRef, PodWrite};
use crate::forecast::cluster::SimCluster;
use crate::forecast::requests::{Fault, Request};
use crate::gate::DeleteCause;
use crate::planner::Plan;

fn fault(request: Request, name: Option<&str>, code: u16) -> Fault {
    Fault { request, name: name.map(str::to_string), code }
}

/// The names of the pods a plan creates, in its order.
fn creates(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { pod, .. } => pod.metadata.name.clone(),
            _ => None,
        })
        .collect()
}

/// The objects of the requests of this kind the last pass sent, in their order.
fn sent(world: &SimCluster, request: Request) -> Vec<String> {
    world.sent.iter().filter(|s| s.request == request).map(|s| s.name.clone()).collect()
}

/// A cluster whose `replicas` pods are ready.
fn settled(replicas: i32) -> SimCluster {
    let mut world = SimCluster::new(crate::fixtures::gd(replicas, "RollingUpdate"));
    assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
    world
}

fn pod_ref(world: &SimCluster, at: usize) -> PodRef {
    let pod = &world.pods[at];
    PodRef { name: pod.metadata.name.clone().unwrap_or_default(), uid: pod.metadata.uid.clone().unwrap_or_default() }
}

/// `actions` as a pass's plan (the status as the cluster shows it).
fn plan_of(world: &SimCluster, actions: Vec<Action>) -> Plan {
    let mut plan = world.plan();
    plan.actions = actions;
    plan
}

fn terminating(world: &SimCluster, name: &str) -> bool {
    world.pods.iter().any(|p| p.metadata.name.as_deref() == Some(name) && p.metadata.deletion_timestamp.is_some())
}

/// Slow start, as Kubernetes' ReplicaSet controller and Kruise's CloneSet do: batches of 1, 2, 4...; a batch with a
/// failure is finished (its requests are in flight together) and no larger batch follows.
#[test]
fn a_failing_create_stops_the_creations_after_its_batch() {
    let mut world = SimCluster::new(crate::fixtures::gd(10, "RollingUpdate"));
    let mut plan = world.plan();
    let names = creates(&plan);
    assert_eq!(names.len(), 10, "{:?}", plan.actions);
    world.faults.push(fault(Request::CreatePod, Some(&names[1]), 500));
    let outcome = world.execute(&mut plan);
    // Batch 1: the first pod; batch 2: the second (fails) and the third; batch 4 is never sent.
    assert_eq!(sent(&world, Request::CreatePod), names[..3]);
    assert_eq!(world.pods.len(), 2);
    assert_eq!(outcome.failures.len(), 1, "{:?}", outcome.failures);
    assert_eq!(outcome.failures[0].0, Phase::Scale);
    assert!(
        outcome.events.iter().any(|e| e.reason == "FailedCreate" && e.message.contains(&names[1])),
        "{:?}",
        outcome.events
    );
    assert!(outcome.succeeded.contains(&Phase::Scale), "two pods were created");
}

/// Every pass starts its slow start again at one pod: a pass whose first create fails sends no other; once the
/// cause is gone, a pass sends them all.
#[test]
fn each_pass_starts_the_slow_start_again_at_one_pod() {
    let mut world = SimCluster::new(crate::fixtures::gd(6, "RollingUpdate"));
    world.faults.push(fault(Request::CreatePod, None, 403));
    let mut plan = world.plan();
    assert_eq!(creates(&plan).len(), 6);
    let outcome = world.execute(&mut plan);
    assert_eq!(sent(&world, Request::CreatePod).len(), 1, "one batch of one");
    assert!(outcome.failures.iter().all(|(phase, _)| *phase == Phase::Scale) && outcome.failures.len() == 1);
    world.faults.clear();
    world.tick(1);
    let mut plan = world.plan();
    let names = creates(&plan);
    assert_eq!(names.len(), 6);
    let outcome = world.execute(&mut plan);
    assert_eq!(sent(&world, Request::CreatePod), names);
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
}

/// Revisions first (a pod must not name a revision that does not exist), then deletions, then creations, then
/// pod patches — whatever the plan's order.
#[test]
fn a_pass_sends_revisions_then_deletions_then_creations_then_patches() {
    let mut world = settled(3);
    let (gone, patched) = (pod_ref(&world, 0), pod_ref(&world, 1));
    let mut revision = world.revisions[0].clone();
    revision.metadata.name = Some("game-other".into());
    let mut new_pod: ApiPod = world.created[0].clone();
    new_pod.metadata.name = Some("game-new".into());
    let patch = PodChange {
        pod: patched.clone(),
        reason: PatchReason::Lifecycle,
        writes: vec![PodWrite::Object(vec![
            json!({"op": "test", "path": "/metadata/uid", "value": patched.uid}),
            json!({"op": "add", "path": "/metadata/labels/marked", "value": "yes"}),
        ])],
        summary: "marked".into(),
    };
    let mut plan = plan_of(
        &world,
        vec![
            Action::PatchPod(patch),
            Action::CreatePod { pod: Box::new(new_pod), reason: CreateReason::Replicas },
            Action::DeletePod { pod: gone.clone(), cause: DeleteCause::ScaleIn },
            Action::CreateRevision(Box::new(revision)),
        ],
    );
    let outcome = world.execute(&mut plan);
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    let order: Vec<(Request, String)> = world.sent.iter().map(|s| (s.request, s.name.clone())).collect();
    assert_eq!(
        order,
        [
            (Request::CreateRevision, "game-other".to_string()),
            (Request::DeletePod, gone.name.clone()),
            (Request::CreatePod, "game-new".to_string()),
            (Request::PatchPod, patched.name.clone()),
        ]
    );
    assert!(terminating(&world, &gone.name));
    let marked = world.pods.iter().find(|p| p.metadata.name.as_deref() == Some(patched.name.as_str()));
    assert_eq!(marked.and_then(|p| common::pod::label(p, "marked")), Some("yes"));
}

/// Fail closed: when the new revision cannot be written, no pod is touched in that pass (none may reference a
/// revision that does not exist); the failure is the pass's.
#[test]
fn a_failed_revision_write_sends_no_pod_write() {
    let mut world = settled(3);
    crate::planner::sim_cluster::set_image(&mut world, "game:2");
    let mut plan = world.plan();
    assert!(plan.actions.iter().any(|a| matches!(a, Action::CreateRevision(_))));
    assert!(plan.actions.iter().any(|a| matches!(a, Action::DeletePod { .. } | Action::PatchPod(_))), "{plan:?}");
    world.faults.push(fault(Request::CreateRevision, None, 500));
    let outcome = world.execute(&mut plan);
    assert_eq!(world.sent.iter().map(|s| s.request).collect::<Vec<_>>(), [Request::CreateRevision]);
    assert_eq!(outcome.failures.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [Phase::Revisions]);
    assert!(world.pods.iter().all(|p| p.metadata.deletion_timestamp.is_none()));
}

/// A revision name taken by another template (a hash collision): no pod is touched, and the status the pass
/// writes counts the collision, so the next pass names the revision differently.
#[test]
fn a_revision_name_taken_by_another_template_counts_a_collision_and_writes_no_pod() {
    let mut world = settled(3);
    crate::planner::sim_cluster::set_image(&mut world, "game:2");
    let plan = world.plan();
    let Some(Action::CreateRevision(wanted)) = plan.actions.iter().find(|a| matches!(a, Action::CreateRevision(_)))
    else {
        panic!("no revision planned: {plan:?}")
    };
    let mut squatter = (**wanted).clone();
    squatter.data = k8s_openapi::apimachinery::pkg::runtime::RawExtension(json!({"spec": "another"}));
    world.revisions.push(squatter);
    world.apply(&plan);
    let requests: Vec<Request> = world.sent.iter().map(|s| s.request).collect();
    assert_eq!(requests, [Request::CreateRevision, Request::GetRevision]);
    assert_eq!(world.gd.status.as_ref().and_then(|s| s.collision_count), Some(1));
}

/// Adoption re-reads the GameDeployment from the API first (a GameDeployment being deleted must not take pods):
/// when that read fails, the orphan stays an orphan and the pass reports the failure.
#[test]
fn an_orphan_is_not_adopted_when_the_game_deployment_cannot_be_read() {
    let mut world = settled(3);
    world.pods[2].metadata.owner_references = None;
    let orphan = pod_ref(&world, 2);
    let mut plan = world.plan();
    assert!(plan.actions.iter().any(|a| matches!(a, Action::AdoptPod(p) if p.name == orphan.name)), "{plan:?}");
    world.faults.push(fault(Request::GetGameDeployment, None, 500));
    let outcome = world.execute(&mut plan);
    assert!(sent(&world, Request::PatchPod).is_empty());
    assert!(world.pods[2].metadata.owner_references.is_none());
    assert!(outcome.failures.iter().any(|(p, m)| *p == Phase::Ownership && m.contains("re-reading")));
    // Once it can be read, the next pass adopts.
    world.faults.clear();
    let mut plan = world.plan();
    let outcome = world.execute(&mut plan);
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    assert_eq!(sent(&world, Request::PatchPod), vec![orphan.name]);
    assert!(world.pods[2].metadata.owner_references.as_ref().is_some_and(|r| !r.is_empty()));
}

/// A patch planned on a stale cache (its `test` precondition fails: 422) is no failure: nothing changes, and the
/// next pass, on fresher data, decides again.
#[test]
fn a_stale_pod_patch_is_counted_stale_not_failed() {
    let mut world = settled(2);
    let pod = pod_ref(&world, 0);
    let change = PodChange {
        pod: pod.clone(),
        reason: PatchReason::Lifecycle,
        writes: vec![PodWrite::Object(vec![
            json!({"op": "test", "path": "/metadata/uid", "value": "another-uid"}),
            json!({"op": "add", "path": "/metadata/labels/marked", "value": "yes"}),
        ])],
        summary: "marked".into(),
    };
    let mut plan = plan_of(&world, vec![Action::PatchPod(change)]);
    let outcome = world.execute(&mut plan);
    assert_eq!(outcome.stale, 1);
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    assert_eq!(world.sent.iter().map(|s| s.code).collect::<Vec<_>>(), [Some(422)]);
    assert!(common::pod::label(&world.pods[0], "marked").is_none(), "all or nothing");
}

/// A deletion the API refuses is a failure with a Warning about the pod; the pod stays.
#[test]
fn a_refused_pod_deletion_is_a_failure_and_the_pod_stays() {
    let mut world = settled(2);
    let pod = pod_ref(&world, 1);
    world.faults.push(fault(Request::DeletePod, Some(&pod.name), 500));
    let mut plan = plan_of(&world, vec![Action::DeletePod { pod: pod.clone(), cause: DeleteCause::ScaleIn }]);
    let outcome = world.execute(&mut plan);
    assert_eq!(outcome.failures.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [Phase::Scale]);
    let event = outcome.events.iter().find(|e| e.reason == "FailedDelete").expect("a FailedDelete event");
    assert_eq!(event.related.as_ref().map(|r| r.name.as_str()), Some(pod.name.as_str()));
    assert!(!terminating(&world, &pod.name));
    // A deletion of a pod that another now replaces (UID precondition: 409) is stale, not failed.
    world.faults.clear();
    let stale = PodRef { name: pod.name.clone(), uid: "an-older-pod".into() };
    let mut plan = plan_of(&world, vec![Action::DeletePod { pod: stale, cause: DeleteCause::ScaleIn }]);
    let outcome = world.execute(&mut plan);
    assert!(outcome.failures.is_empty() && outcome.stale == 1, "{outcome:?}");
    assert!(!terminating(&world, &pod.name));
}

/// A `retry` request is acknowledged (the flag set back to false) only once the failed runs are really gone:
/// while their deletion fails, the request stays, and the next pass tries again.
#[test]
fn the_retry_flag_is_reset_only_after_the_failed_runs_are_deleted() {
    let mut gd = crate::fixtures::gd(1, "RollingUpdate");
    gd.spec.pre_delete_update_strategy =
        Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}, "retry": true})).expect("strategy"));
    let mut world = SimCluster::new(gd);
    let mut run = common::api::HookRun::new("game-failed-run", Default::default());
    run.metadata.uid = Some("run-uid".into());
    world.hook_runs.push(std::sync::Arc::new(run));
    let rv = world.gd.metadata.resource_version.clone().unwrap_or_default();
    let actions = vec![
        Action::DeleteHookRun { name: "game-failed-run".into(), uid: "run-uid".into(), why: "retry".into() },
        Action::ResetRetry { kind: HookKind::PreDelete, resource_version: rv },
    ];
    world.faults.push(fault(Request::DeleteHookRun, None, 500));
    let outcome = world.execute(&mut plan_of(&world, actions.clone()));
    assert!(sent(&world, Request::PatchGameDeployment).is_empty());
    assert!(world.gd.spec.pre_delete_update_strategy.as_ref().is_some_and(|s| s.retry));
    assert_eq!(outcome.failures.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [Phase::Housekeeping]);
    world.faults.clear();
    let outcome = world.execute(&mut plan_of(&world, actions));
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    assert_eq!(sent(&world, Request::PatchGameDeployment).len(), 1);
    assert!(world.hook_runs.is_empty());
    assert!(world.gd.spec.pre_delete_update_strategy.as_ref().is_some_and(|s| !s.retry));
    assert!(outcome.events.iter().any(|e| e.reason == "HookRetried"));
}

/// The HookRuns a pass creates are taken out of its plan and sent after the pod writes; a name that is taken
/// (409) is read back, so the next pass sees who holds it.
#[test]
fn hook_runs_are_created_after_the_pod_writes_and_a_taken_name_is_read_back() {
    let mut world = settled(2);
    let pod = pod_ref(&world, 0);
    let run = |name: &str| {
        let mut run = common::api::HookRun::new(name, Default::default());
        run.metadata.namespace = Some("default".into());
        Action::CreateHookRun(Box::new(run))
    };
    let mut taken = common::api::HookRun::new("game-taken", Default::default());
    taken.metadata.uid = Some("someone-else".into());
    world.hook_runs.push(std::sync::Arc::new(taken));
    let mut plan = plan_of(
        &world,
        vec![run("game-run"), run("game-taken"), Action::DeletePod { pod: pod.clone(), cause: DeleteCause::ScaleIn }],
    );
    let outcome = world.execute(&mut plan);
    let order: Vec<(Request, Option<u16>)> = world.sent.iter().map(|s| (s.request, s.code)).collect();
    assert_eq!(
        order,
        [
            (Request::DeletePod, None),
            (Request::CreateHookRun, None),
            (Request::CreateHookRun, Some(409)),
            (Request::GetHookRun, None),
        ]
    );
    assert!(plan.actions.iter().all(|a| !matches!(a, Action::CreateHookRun(_))), "taken out of the plan");
    assert_eq!(outcome.stale, 1);
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    assert!(world.hook_runs.iter().any(|r| r.metadata.name.as_deref() == Some("game-run") && r.metadata.uid.is_some()));
}

mod status_writes {
    use std::time::{Duration, Instant};

    use common::api::GameDeploymentStatus;

    use super::super::{StatusWrite, status_write};

    const INTERVAL: Duration = Duration::from_secs(1);

    fn counted(replicas: i32) -> GameDeploymentStatus {
        GameDeploymentStatus { replicas, observed_generation: Some(1), ..Default::default() }
    }

    /// A pass that computes the status the API holds writes nothing, however long ago the last write was.
    #[test]
    fn a_status_the_api_holds_is_not_written() {
        let now = Instant::now();
        let held = counted(3);
        for last in [None, Some(now), Some(now - Duration::from_secs(60))] {
            assert_eq!(status_write(Some(&held), &counted(3), last, INTERVAL, now), StatusWrite::Unchanged);
        }
    }

    /// Progress every pass recomputes (the replica counts) waits for the rest of the interval after the last
    /// write; with no write yet, or once the interval is over, it is written.
    #[test]
    fn recomputable_progress_waits_for_the_interval_after_the_last_write() {
        let now = Instant::now();
        let (held, new) = (counted(3), counted(4));
        let last = now - Duration::from_millis(400);
        assert_eq!(
            status_write(Some(&held), &new, Some(last), INTERVAL, now),
            StatusWrite::Defer(Duration::from_millis(600))
        );
        assert_eq!(status_write(Some(&held), &new, None, INTERVAL, now), StatusWrite::Now);
        let long_ago = now - Duration::from_secs(2);
        assert_eq!(status_write(Some(&held), &new, Some(long_ago), INTERVAL, now), StatusWrite::Now);
        assert_eq!(status_write(Some(&held), &new, Some(last), Duration::ZERO, now), StatusWrite::Now);
    }

    /// Anything a person or the planner reads back (here the observed generation) is written in the pass that
    /// computes it, even right after another write.
    #[test]
    fn a_change_that_must_be_seen_is_written_at_once() {
        let now = Instant::now();
        let held = counted(3);
        let new = GameDeploymentStatus { observed_generation: Some(2), ..counted(3) };
        assert_eq!(status_write(Some(&held), &new, Some(now), INTERVAL, now), StatusWrite::Now);
    }
}

/// Consumed pre-delete runs (their pods are gone) go in one `deletecollection` per hook type and revision; while a
/// rollout is in progress a batch smaller than a collection chunk waits for a later pass (such a run can open no
/// gate), so a rollout's consumed runs go in a few writes rather than one per pass.
#[test]
fn consumed_runs_wait_for_a_full_collection_while_the_rollout_is_in_progress() {
    let mut world = SimCluster::new(crate::fixtures::gd(1, "RollingUpdate"));
    let owner = crate::ownership::owner_reference(&world.gd);
    let consumed = |i: usize| {
        let mut run = common::api::HookRun::new(&format!("game-consumed-{i}"), Default::default());
        run.metadata.uid = Some(format!("run-{i}"));
        run.metadata.owner_references = Some(vec![owner.clone()]);
        run.metadata.labels = Some(
            [
                (common::keys::HOOKRUN_TYPE, HookKind::PreDelete.type_label().to_string()),
                (common::keys::HOOKRUN_WORKLOAD_REVISION, "game-old".to_string()),
                (common::keys::HOOKRUN_WORKLOAD_NAME, common::hookrun::workload_label_value("game")),
                (common::keys::HOOKRUN_POD_UID, format!("gone-pod-{i}")),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        );
        std::sync::Arc::new(run)
    };
    world.hook_runs = (0..3).map(consumed).collect();
    let deletions: Vec<Action> = (0..3)
        .map(|i| Action::DeleteHookRun {
            name: format!("game-consumed-{i}"),
            uid: format!("run-{i}"),
            why: "consumed".into(),
        })
        .collect();
    let mut rolling = plan_of(&world, deletions.clone());
    crate::planner::status::set_condition(
        &mut rolling.status.conditions,
        crate::planner::status::PROGRESSING,
        "True",
        "RolloutInProgress",
        "rolling",
        crate::forecast::cluster::ts(world.now),
    );
    let outcome = world.execute(&mut rolling);
    assert!(world.sent.is_empty(), "{:?}", world.sent);
    assert_eq!(world.hook_runs.len(), 3);
    assert!(outcome.failures.is_empty());
    // The rollout is over: the batch goes, as one collection.
    let mut settled = plan_of(&world, deletions);
    settled.status.conditions.clear();
    let outcome = world.execute(&mut settled);
    assert_eq!(world.sent.iter().map(|s| s.request).collect::<Vec<_>>(), [Request::DeleteHookRuns]);
    assert!(world.hook_runs.is_empty());
    assert_eq!(outcome.events.iter().filter(|e| e.reason == "SuccessfulDeleteHookRun").count(), 3);
}
