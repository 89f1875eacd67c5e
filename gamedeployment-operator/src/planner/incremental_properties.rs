//! Property test of incremental planning: a pass planned with the pod facts remembered from earlier passes
//! ([`super::pod_facts::FactsCache`]) plans exactly what a pass from an empty cache plans — the same actions, in the
//! same order, the same status, events, held pods and requeue — over random rollouts on the simulated cluster
//! interleaved with random single-pod changes (readiness, a readiness gate's condition, lifecycle state,
//! `specified-delete`, quarantine, in-place records) and spec changes (image, `minReadySeconds`, the in-place handler).

use common::cached_pod::PodCondition;
use common::keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

use super::sim_cluster::World;
use super::{FactsCache, Plan, plan_with_facts};
use crate::fixtures::gd;
use crate::forecast::cluster::ts;
use crate::lifecycle::LifecycleState;

fn strategy_name(i: u8) -> &'static str {
    ["RollingUpdate", "InplaceUpdate", "HotPatchUpdate"][usize::from(i % 3)]
}

/// A pass over `world` as it is, with the pod facts of `facts`.
fn plan(world: &World, facts: &FactsCache) -> Plan {
    plan_with_facts(&world.observed(), facts)
}

/// One change between passes: to one pod (picked by index among the pods), to the spec, or the clock.
#[derive(Debug, Clone)]
enum Change {
    /// The pod's `Ready` condition True or False (the kubelet's probe), with a new transition time.
    Ready(bool),
    /// The pod's lifecycle-state label (a foreign value included).
    Lifecycle(u8),
    /// `apps.kruise.io/specified-delete: "true"`.
    SpecifiedDelete,
    /// The server state label `Maintaining` set or removed.
    Quarantine(bool),
    /// A readiness gate's condition (`InPlaceUpdateReady` or `KruisePodReady`) set False.
    GateFalse(bool),
    /// The in-place update state annotation removed (its record lost).
    ForgetInPlaceRecord,
    /// `spec.minReadySeconds`.
    MinReady(i32),
    /// A new image in the template.
    Image,
    /// An `inPlaceUpdate` lifecycle handler added.
    Handler,
    /// Only time passes.
    Tick(i64),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => any::<bool>().prop_map(Change::Ready),
        2 => (0u8..6).prop_map(Change::Lifecycle),
        1 => Just(Change::SpecifiedDelete),
        1 => any::<bool>().prop_map(Change::Quarantine),
        1 => Just(Change::ForgetInPlaceRecord),
        1 => any::<bool>().prop_map(Change::GateFalse),
        1 => (0i32..4).prop_map(Change::MinReady),
        1 => Just(Change::Image),
        1 => Just(Change::Handler),
        2 => (0i64..3).prop_map(Change::Tick),
    ]
}

fn apply(world: &mut World, pod: usize, change: &Change, image: &mut u32) {
    let now = world.now;
    let count = world.pods.len();
    let target = (count > 0).then(|| &mut world.pods[pod % count]);
    match (change, target) {
        (Change::Ready(ready), Some(pod)) => {
            let status = pod.status.get_or_insert_with(Default::default);
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            conditions.retain(|c| c.type_ != "Ready");
            conditions.push(PodCondition {
                type_: "Ready".into(),
                status: if *ready { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(ts(now))),
                ..Default::default()
            });
        }
        (Change::Lifecycle(i), Some(pod)) => {
            let value = match i {
                0 => LifecycleState::Normal.as_str(),
                1 => LifecycleState::PreparingUpdate.as_str(),
                2 => LifecycleState::Updating.as_str(),
                3 => LifecycleState::Updated.as_str(),
                4 => LifecycleState::PreparingDelete.as_str(),
                _ => "Foreign",
            };
            pod.metadata.labels.get_or_insert_with(Default::default).insert(keys::LIFECYCLE_STATE.into(), value.into());
        }
        (Change::SpecifiedDelete, Some(pod)) => {
            pod.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(keys::SPECIFIED_DELETE.into(), "true".into());
        }
        (Change::Quarantine(on), Some(pod)) => {
            let labels = pod.metadata.labels.get_or_insert_with(Default::default);
            if *on {
                labels.insert(keys::SERVER_STATE.into(), "Maintaining".into());
            } else {
                labels.remove(keys::SERVER_STATE);
            }
        }
        (Change::GateFalse(in_place), Some(pod)) => {
            let gate = if *in_place { keys::IN_PLACE_UPDATE_READY } else { crate::lifecycle::KRUISE_POD_READY };
            let conditions = pod.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new);
            conditions.retain(|c| c.type_ != gate);
            conditions.push(PodCondition {
                type_: gate.into(),
                status: "False".into(),
                last_transition_time: Some(Time(ts(now))),
                ..Default::default()
            });
        }
        (Change::ForgetInPlaceRecord, Some(pod)) => {
            if let Some(annotations) = pod.metadata.annotations.as_mut() {
                annotations.remove(keys::INPLACE_UPDATE_STATE);
            }
        }
        (Change::MinReady(seconds), _) => world.gd.spec.min_ready_seconds = *seconds,
        (Change::Image, _) => {
            *image += 1;
            if let Some(container) = world.gd.spec.template.spec.as_mut().and_then(|s| s.containers.first_mut()) {
                container.image = Some(format!("game:{image}"));
            }
            world.gd.metadata.generation = Some(world.gd.metadata.generation.unwrap_or(1) + 1);
        }
        (Change::Handler, _) => {
            let lifecycle = world.gd.spec.lifecycle.get_or_insert_with(Default::default);
            lifecycle.in_place_update = Some(common::api::LifecycleHook {
                labels_handler: [("example.com/serving".to_string(), "true".to_string())].into(),
                ..Default::default()
            });
            world.gd.metadata.generation = Some(world.gd.metadata.generation.unwrap_or(1) + 1);
        }
        (Change::Tick(seconds), _) => world.tick(*seconds),
        (_, None) => {}
    }
}

fn same(incremental: &Plan, scratch: &Plan, context: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(&incremental.actions, &scratch.actions, "actions differ {}", context);
    prop_assert_eq!(&incremental.status, &scratch.status, "status differs {}", context);
    prop_assert_eq!(&incremental.events, &scratch.events, "events differ {}", context);
    prop_assert_eq!(&incremental.held, &scratch.held, "held pods differ {}", context);
    prop_assert_eq!(incremental.requeue_after, scratch.requeue_after, "requeue differs {}", context);
    prop_assert_eq!(incremental.canary_held, scratch.canary_held, "canary hold differs {}", context);
    Ok(())
}

fn run(initial: i32, strategy: u8, changes: &[(usize, Change, usize)]) -> Result<(), TestCaseError> {
    let mut world = World::new(gd(initial, strategy_name(strategy)));
    prop_assert!(world.settle(60, |_, _| {}).is_some(), "initial creation did not settle");
    // Remembers the facts of every pass from here on, as the operator's process does.
    let warm = FactsCache::default();
    let mut image = 1;
    for (step, (pod, change, passes)) in changes.iter().enumerate() {
        apply(&mut world, *pod, change, &mut image);
        // Pods that changed get a new resourceVersion, as in the API server (and only those).
        world.send(&[]);
        for pass in 0..=*passes {
            let incremental = plan(&world, &warm);
            let scratch = plan(&world, &FactsCache::default());
            same(&incremental, &scratch, &format!("after change {step} ({change:?} to pod {pod}), pass {pass}"))?;
            world.finish_pass(&incremental);
            world.tick(1);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn an_incremental_pass_plans_what_a_pass_from_scratch_plans(
        initial in 1i32..6,
        strategy in 0u8..3,
        changes in prop::collection::vec((0usize..8, change(), 0usize..3), 1..12),
    ) {
        run(initial, strategy, &changes)?;
    }
}
