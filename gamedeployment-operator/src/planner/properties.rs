//! Property tests: random rollouts on the simulated cluster, checked at every pass.
//!
//! Invariants: no pod is acted on twice in a pass; the plan never takes the number of serving pods below
//! `replicas − maxUnavailable` (or below what it was, if it was already lower); no pass moves the number of
//! old-revision pods below the partition; planning is deterministic; every rollout converges to exactly
//! `replicas` ready pods with `replicas − partition` of them updated.

use std::collections::BTreeSet;

use common::api::GameDeploymentScaleStrategy;
use common::intstr;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;

use super::Plan;
use super::sim_cluster::World;
use crate::action::Action;
use crate::fixtures::gd;
use crate::lifecycle::{self, LifecycleState};

fn strategy_name(i: u8) -> &'static str {
    ["RollingUpdate", "InplaceUpdate", "HotPatchUpdate"][usize::from(i % 3)]
}

fn no_pod_twice(plan: &Plan) -> Result<(), TestCaseError> {
    let mut seen = BTreeSet::new();
    for action in &plan.actions {
        let name = match action {
            Action::CreatePod { pod, .. } => pod.metadata.name.clone(),
            other => other.pod_name().map(String::from),
        };
        if let Some(name) = name {
            prop_assert!(seen.insert(name.clone()), "pod {name} acted on twice: {:#?}", plan.actions);
        }
    }
    Ok(())
}

fn old_count(world: &World) -> usize {
    world.revision_counts().1
}

#[derive(Debug, Clone)]
struct Scenario {
    initial: i32,
    replicas: i32,
    partition: i32,
    partition_percent: bool,
    max_unavailable: i32,
    max_surge: i32,
    strategy: u8,
    change_labels: bool,
    delete_first: bool,
}

prop_compose! {
    fn scenario()(
        initial in 0i32..7, replicas in 0i32..8, partition in 0i32..9, partition_percent in any::<bool>(),
        max_unavailable in 0i32..4, max_surge in 0i32..3, strategy in 0u8..3, change_labels in any::<bool>(),
        delete_first in any::<bool>()
    ) -> Scenario {
        Scenario {
            initial, replicas, partition, partition_percent, max_unavailable, max_surge, strategy, change_labels,
            delete_first,
        }
    }
}

fn run(s: &Scenario) -> Result<(), TestCaseError> {
    let mut world = World::new(gd(s.initial, strategy_name(s.strategy)));
    prop_assert!(world.settle(60, |_, _| {}).is_some(), "initial creation did not settle");

    let strategy = &mut world.gd.spec.update_strategy;
    strategy.partition = Some(if s.partition_percent {
        IntOrString::String(format!("{}%", s.partition * 12))
    } else {
        IntOrString::Int(s.partition)
    });
    strategy.max_unavailable = Some(IntOrString::Int(s.max_unavailable));
    strategy.max_surge = Some(IntOrString::Int(s.max_surge));
    world.gd.spec.replicas = Some(s.replicas);
    let template = &mut world.gd.spec.template;
    template.spec.as_mut().unwrap().containers[0].image = Some("game:2".into());
    if s.change_labels {
        template.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert("version".into(), "2".into());
    }
    if s.delete_first
        && let Some(name) = world.pods.first().and_then(|p| p.metadata.name.clone())
    {
        world.gd.spec.scale_strategy =
            Some(GameDeploymentScaleStrategy { pods_to_delete: vec![name], create_batch: None, ..Default::default() });
    }

    let replicas = s.replicas;
    let partition = intstr::partition(world.gd.spec.update_strategy.partition.as_ref(), replicas, "partition").unwrap();
    // Surge for RollingUpdate and InplaceUpdate, not for hot patches (`strategy_name`).
    let surges = s.strategy % 3 != 2;
    let surge = surges.then_some(IntOrString::Int(s.max_surge));
    let (_, max_unavailable) =
        intstr::resolve_fenceposts(surge.as_ref(), Some(&IntOrString::Int(s.max_unavailable)), replicas).unwrap();
    let floor = usize::try_from((replicas - max_unavailable).max(0)).unwrap();
    let partition_floor = usize::try_from(partition).unwrap();

    let mut failure: Option<String> = None;
    let settled = world.settle(300, |w, plan| {
        if failure.is_some() {
            return;
        }
        if let Err(e) = no_pod_twice(plan) {
            failure = Some(e.to_string());
            return;
        }
        // Deterministic: the same observation gives the same plan.
        let again = w.plan();
        if again.actions != plan.actions || again.status != plan.status {
            failure = Some("planning is not deterministic".into());
            return;
        }
        let (serving_before, old_before) = (w.serving(), old_count(w));
        let mut after = World::new(w.gd.clone());
        after.pods = w.pods.clone();
        after.revisions = w.revisions.clone();
        after.now = w.now;
        after.gd.status = Some(plan.status.clone());
        after.send(&plan.actions);
        let serving_after = after.serving();
        if serving_after < serving_before.min(floor) {
            failure = Some(format!("serving {serving_before} -> {serving_after}, floor {floor}: {:#?}", plan.actions));
            return;
        }
        // The partition bounds what the rollout does; a pod the user names in podsToDelete is replaced, not
        // updated, so it is left out.
        let mut rollout = World::new(w.gd.clone());
        rollout.pods = w.pods.clone();
        rollout.revisions = w.revisions.clone();
        rollout.now = w.now;
        rollout.gd.status = Some(plan.status.clone());
        let rolled: Vec<Action> = plan
            .actions
            .iter()
            .filter(|a| !matches!(a, Action::DeletePod { cause: crate::gate::DeleteCause::PodsToDelete, .. }))
            .cloned()
            .collect();
        rollout.send(&rolled);
        if w.update_revision() == after.update_revision() && old_count(&rollout) < old_before.min(partition_floor) {
            failure = Some(format!("old pods {old_before} -> {}, partition {partition_floor}", old_count(&rollout)));
        }
    });
    if let Some(failure) = failure {
        return Err(TestCaseError::fail(failure));
    }
    prop_assert!(settled.is_some(), "did not converge: {:?}", world.revision_counts());
    let (updated, old) = world.revision_counts();
    prop_assert_eq!(updated + old, usize::try_from(replicas).unwrap());
    prop_assert_eq!(old, partition_floor, "updated {} old {}", updated, old);
    for pod in world.active() {
        prop_assert!(common::pod::is_ready(pod));
        prop_assert_eq!(lifecycle::state_of(pod), LifecycleState::Normal);
    }
    let status = world.gd.status.clone().unwrap();
    prop_assert_eq!(status.replicas, replicas);
    prop_assert_eq!(status.ready_replicas, replicas);
    prop_assert_eq!(status.updated_replicas, i32::try_from(updated).unwrap());
    // Settled means quiet: nothing more to do, nothing to write.
    let last = world.plan();
    prop_assert!(last.actions.is_empty());
    prop_assert_eq!(Some(&last.status), world.gd.status.as_ref());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn rollouts_converge_within_their_budgets(s in scenario()) {
        run(&s)?;
    }
}
