//! Scaling: which pods to delete and which to create, to match the counts of [`super::diffs`].
//!
//! - `podsToDelete` pods and pods labelled `apps.kruise.io/specified-delete: "true"` are deleted first and replaced
//!   (the list plus lower replicas is a targeted scale-in);
//! - scale-in victims are chosen by [`victims`]: old-revision pods first, down to `partition`, then updated
//!   pods, each group in [`crate::priority::deletion_order`]; a quarantined server (`Maintaining`) is never one;
//! - deleting an available pod costs one of the unavailable budget, so no deletion takes availability below
//!   `replicas − maxUnavailable`; unavailable pods are deleted freely;
//! - new pods get unique names and indices (`create`), the first `create_old` of the current revision;
//! - `RaceToEmpty` scale-in and its cost probes: [`race_to_empty`];
//! - last, [`volumes`] gives created pods their PersistentVolumeClaims (reusing free ones) and deletes the claims
//!   of deleted pods.

pub(crate) mod create;
pub(crate) mod race_to_empty;
pub(crate) mod volumes;

use std::collections::BTreeSet;

use common::cached_pod::Pod;

use super::diffs::Diffs;
use super::plan_draft::Draft;
use super::settings::{PodInfo, Settings, count};
use crate::action::{Action, CreateReason};
use crate::gate::{DeleteCause, GateKind};
use crate::{lifecycle, priority};
use create::{IdSource, NewPod};

/// Pods created per pass at most, as ReplicaSets' slow-start burst (`BurstReplicas` 500): a huge `replicas`
/// never builds its whole pod set in memory; the rest are created in later passes (the planner requeues).
pub(crate) const CREATE_BURST: usize = 500;

/// What scaling did this pass.
#[derive(Debug, Default)]
pub(crate) struct Scaled {
    /// Something was created, deleted or moved to a gate state: the update step waits for the next pass.
    pub acted: bool,
    /// A configuration problem that stopped (part of) the scaling; reported as `FailedScale`.
    pub problem: Option<String>,
}

/// The scale-in victims, in the order they are deleted: `diffs.delete_old` old-revision pods and
/// `diffs.delete_new` updated pods (pods named in `podsToDelete` are not among them), each the first in
/// [`priority::deletion_order`]. The one place that decides which pods a scale-in takes.
pub(crate) fn victims<'i, 'a>(
    settings: &Settings<'_>,
    diffs: &Diffs,
    infos: &'i [PodInfo<'a>],
) -> Vec<&'i PodInfo<'a>> {
    let by_deletion = |a: &&PodInfo<'_>, b: &&PodInfo<'_>| priority::deletion_order(a.pod, b.pod, &settings.costs);
    let group = |updated: bool, n: i32| {
        if n <= 0 {
            // Nothing to take: no sort of every pod (most passes, e.g. each pass of a 5,000-pod roll).
            return Vec::new();
        }
        let mut group: Vec<&'i PodInfo<'a>> =
            infos.iter().filter(|i| !i.specified && !i.quarantined && i.updated == updated).collect();
        group.sort_by(by_deletion);
        group.truncate(usize::try_from(n).unwrap_or(0));
        group
    };
    let mut victims = group(false, diffs.delete_old);
    victims.extend(group(true, diffs.delete_new));
    victims.sort_by(by_deletion);
    victims
}

/// Plans this pass's scaling. `namespace_pods` keeps new names unique, `owned` (every owned pod, terminating
/// ones too) keeps indices unique.
pub(crate) fn plan(
    settings: &Settings<'_>,
    diffs: &Diffs,
    infos: &[PodInfo<'_>],
    namespace_pods: &[&Pod],
    owned: &[&Pod],
    seed: u64,
    draft: &mut Draft,
) -> Scaled {
    let before = draft.actions.len();
    let mut scaled = Scaled::default();
    if !settings.scale_settings_ok {
        // A value above the CRD's maxima (reported as FailedScale by the settings): no pod is created or deleted.
        return scaled;
    }
    let mut budget = diffs.budget;

    // podsToDelete.
    let mut specified: Vec<&PodInfo<'_>> = infos.iter().filter(|i| i.specified).collect();
    specified.sort_by(|a, b| priority::deletion_order(a.pod, b.pod, &settings.costs));
    for info in &specified {
        let listed =
            settings.gd.spec.scale_strategy.as_ref().is_some_and(|s| s.pods_to_delete.iter().any(|n| n == info.name));
        let cause = if listed { DeleteCause::PodsToDelete } else { DeleteCause::SpecifiedDelete };
        delete(settings, info, cause, &mut budget, draft);
    }

    // Scale in (`scaleInPolicy.mode: RaceToEmpty`: raced among more candidates, `race`).
    let mut probes_kept = std::collections::BTreeSet::new();
    if let Some(policy) = race_to_empty::policy(settings) {
        for (updated, wanted) in [(false, diffs.delete_old), (true, diffs.delete_new)] {
            let group: Vec<&PodInfo<'_>> =
                infos.iter().filter(|i| !i.specified && !i.quarantined && i.updated == updated).collect();
            if let Ok(wanted @ 1..) = usize::try_from(wanted) {
                race_to_empty::plan(settings, policy, group, wanted, &mut budget, &mut probes_kept, draft);
            }
        }
    } else {
        for info in victims(settings, diffs, infos) {
            delete(settings, info, DeleteCause::ScaleIn, &mut budget, draft);
        }
    }
    if diffs.delete_old == 0 && diffs.delete_new == 0 {
        race_to_empty::clear_marks(infos, draft);
    }
    race_to_empty::clear_probes(settings, &probes_kept, draft);

    // Scale out.
    if diffs.create > 0 {
        scaled.problem = create(settings, diffs, namespace_pods, owned, seed, draft);
    }
    scaled.acted = draft.actions.len() > before;
    scaled
}

/// Creates `diffs.create` pods, at most [`CREATE_BURST`] (fewer when the index range runs out: the problem is
/// returned).
fn create(
    settings: &Settings<'_>,
    diffs: &Diffs,
    namespace_pods: &[&Pod],
    owned: &[&Pod],
    seed: u64,
    draft: &mut Draft,
) -> Option<String> {
    let mut problem = None;
    let mut to_create = diffs.create.min(count(CREATE_BURST));
    if to_create < diffs.create {
        // The rest in the next pass (the created pods' watch events usually come first).
        draft.requeue_at(settings.now, settings.now);
    }
    let index = match create::index_range(settings.gd, settings.replicas) {
        Ok(range) => range,
        Err(e) => {
            problem = Some(e);
            to_create = 0;
            None
        }
    };
    let wanted = usize::try_from(to_create).unwrap_or(0);
    let mut free_indices = index.map(|range| create::free_indices(range, owned, wanted)).unwrap_or_default();
    if index.is_some() && count(free_indices.len()) < to_create {
        problem = Some(format!(
            "the index range has {} free indices but {to_create} pods are to be created",
            free_indices.len()
        ));
        to_create = count(free_indices.len());
    }
    let taken: BTreeSet<String> = namespace_pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
    let gd_name = settings.gd.metadata.name.as_deref().unwrap_or("");
    let ids = IdSource::new(seed).unique_ids(gd_name, usize::try_from(to_create).unwrap_or(0), &taken);
    if ids.len() < usize::try_from(to_create).unwrap_or(0) {
        problem = Some(format!(
            "only {} unused pod names could be found for {to_create} new pods (names are {gd_name}-<5 characters>)",
            ids.len()
        ));
    }
    free_indices.reverse();
    for (k, id) in ids.iter().enumerate() {
        let k = count(k);
        let wanted =
            if k < diffs.create_old { settings.current_revision.as_str() } else { settings.update_revision.as_str() };
        // The current revision always has a template (it is kept in history); fall back to the update
        // revision rather than not creating the pod.
        let (revision, template) = match settings.templates.get(wanted) {
            Some(t) => (wanted, t),
            None => (settings.update_revision.as_str(), &settings.gd.spec.template),
        };
        let mut pod = create::build(&NewPod {
            gd: settings.gd,
            template,
            revision,
            id,
            index: if index.is_some() { free_indices.pop() } else { None },
            now: settings.now,
        });
        with_lifecycle(settings.gd, &mut pod);
        let reason = if k < diffs.create_for_replicas { CreateReason::Replicas } else { CreateReason::Surge };
        draft.actions.push(Action::CreatePod { pod: Box::new(pod), reason });
    }
    problem
}

/// The CloneSet lifecycle handlers on a new pod: with a `preNormal` handler it starts in `PreparingNormal`; with
/// `markPodNotReady` it carries the `KruisePodReady` readiness gate (set True by the refresh step).
fn with_lifecycle(gd: &common::api::GameDeployment, pod: &mut k8s_openapi::api::core::v1::Pod) {
    if lifecycle::handler(gd, lifecycle::Handler::PreNormal).is_some() {
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(common::keys::LIFECYCLE_STATE.into(), lifecycle::LifecycleState::PreparingNormal.as_str().into());
    }
    if lifecycle::wants_kruise_gate(gd) {
        let gates = pod.spec.get_or_insert_with(Default::default).readiness_gates.get_or_insert_with(Vec::new);
        if !gates.iter().any(|g| g.condition_type == lifecycle::KRUISE_POD_READY) {
            gates.push(k8s_openapi::api::core::v1::PodReadinessGate {
                condition_type: lifecycle::KRUISE_POD_READY.into(),
            });
        }
    }
}

/// Deletes one pod through the gate, paying budget if the pod is available.
fn delete(settings: &Settings<'_>, info: &PodInfo<'_>, cause: DeleteCause, budget: &mut i32, draft: &mut Draft) {
    if draft.is_touched(info.name) {
        return;
    }
    if info.update_available() {
        if *budget <= 0 {
            return;
        }
        *budget -= 1;
    }
    draft.touch(info.name);
    if draft.pass_gate(settings, info, GateKind::Delete(cause)) {
        draft.actions.push(Action::DeletePod { pod: info.pod_ref(), cause });
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::fixtures::{self, gd};
    use crate::planner::diffs;
    use crate::planner::settings::builder::{NEW, OLD, Pass};

    fn deleted(draft: &Draft) -> Vec<(String, DeleteCause)> {
        draft
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod { pod, cause } => Some((pod.name.clone(), *cause)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn victims_are_old_pods_first_in_deletion_order() {
        let mut g = gd(3, "InplaceUpdate");
        g.spec.update_strategy.partition = Some(IntOrString::Int(1));
        let pass = Pass::new(g)
            .old(2)
            .updated(2)
            .pod(fixtures::pod("game-sick").serving(OLD, "game:0", 10).not_ready().build());
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        let names: Vec<&str> = victims(&settings, &diffs, &infos).iter().map(|i| i.name).collect();
        // 5 pods, 3 wanted, 3 old of which 1 is kept by the partition: the not-ready pod goes first.
        assert_eq!(names.len(), 2);
        assert_eq!(names[0], "game-sick");
        assert!(names.iter().all(|n| n.starts_with("game-o") || *n == "game-sick"), "{names:?}");
    }

    /// One scale pass over `pass` with its settings as resolved (seed 7): what it drafted and what it did.
    fn scale_pass(pass: &Pass) -> (Draft, Scaled) {
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        let mut draft = Draft::default();
        let pods: Vec<&Pod> = pass.pods.iter().collect();
        let scaled = plan(&settings, &diffs, &infos, &pods, &pods, 7, &mut draft);
        (draft, scaled)
    }

    #[test]
    fn deletions_of_available_pods_stay_within_the_budget() {
        let mut g = gd(3, "RollingUpdate");
        g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
        g.spec.scale_strategy = Some(common::api::GameDeploymentScaleStrategy {
            pods_to_delete: vec!["game-n0".into(), "game-n1".into()],
            create_batch: None,
            ..Default::default()
        });
        let pass = Pass::new(g).updated(3);
        let (draft, scaled) = scale_pass(&pass);
        assert!(scaled.acted && scaled.problem.is_none());
        assert_eq!(deleted(&draft).len(), 1, "one available pod may go (maxUnavailable 1)");
        assert_eq!(deleted(&draft)[0].1, DeleteCause::PodsToDelete);
    }

    #[test]
    fn a_pod_labelled_specified_delete_is_deleted_through_the_gate_and_replaced() {
        // CloneSet's `apps.kruise.io/specified-delete: "true"`: the pod is deleted (through the pre-delete hook) and
        // replaced, without editing the GameDeployment.
        let marked = |name: &str| {
            fixtures::pod(name).serving(NEW, "game:1", 10).labels(&[(common::keys::SPECIFIED_DELETE, "true")]).build()
        };
        let not_marked = fixtures::pod("game-x")
            .serving(NEW, "game:1", 10)
            .labels(&[(common::keys::SPECIFIED_DELETE, "false")])
            .build();
        let pass = Pass::new(gd(3, "RollingUpdate")).updated(1).pod(marked("game-m")).pod(not_marked);
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        // No other pod is taken for it; the replacement is created once it is gone (as for podsToDelete).
        assert_eq!((diffs.create, diffs.delete_old + diffs.delete_new), (0, 0), "{diffs:?}");
        let (draft, _) = scale_pass(&pass);
        assert_eq!(deleted(&draft), [("game-m".to_string(), DeleteCause::SpecifiedDelete)]);

        // With a pre-delete hook the pod is first held in PreparingDelete (the gate), not deleted.
        let mut g = gd(3, "RollingUpdate");
        g.spec.pre_delete_update_strategy =
            Some(serde_json::from_value(serde_json::json!({"hook": {"templateName": "drain"}})).unwrap());
        let mut pass = Pass::new(g).updated(2).pod(marked("game-m"));
        pass.hook_templates.push(fixtures::hook_template());
        let (draft, _) = scale_pass(&pass);
        assert!(deleted(&draft).is_empty());
        assert!(draft.is_held("game-m"));
        assert_eq!(draft.held[0].kind, GateKind::Delete(DeleteCause::SpecifiedDelete));
    }

    #[test]
    fn specified_deletes_of_available_pods_stay_within_the_budget() {
        let mut g = gd(3, "RollingUpdate");
        g.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
        let marked = |name: &str| {
            fixtures::pod(name).serving(NEW, "game:1", 10).labels(&[(common::keys::SPECIFIED_DELETE, "true")]).build()
        };
        let pass = Pass::new(g).updated(1).pod(marked("game-a")).pod(marked("game-b"));
        let (draft, _) = scale_pass(&pass);
        assert_eq!(deleted(&draft).len(), 1, "one available pod may go (maxUnavailable 1)");
        assert_eq!(deleted(&draft)[0].1, DeleteCause::SpecifiedDelete);
    }

    #[test]
    fn scale_out_creates_old_revision_pods_up_to_the_partition_then_new_ones() {
        let mut g = gd(4, "InplaceUpdate");
        g.spec.update_strategy.partition = Some(IntOrString::Int(2));
        let pass = Pass::new(g).old(1);
        let (draft, _) = scale_pass(&pass);
        let revisions: Vec<String> = draft
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::CreatePod { pod, reason } => {
                    assert_eq!(*reason, CreateReason::Replicas);
                    common::pod::label(&**pod, common::keys::CONTROLLER_REVISION_HASH).map(String::from)
                }
                _ => None,
            })
            .collect();
        assert_eq!(revisions, [OLD, NEW, NEW]);
    }

    #[test]
    fn creates_per_pass_are_capped_at_the_burst() {
        // 100,000 missing replicas (the CRD's maximum): one pass plans at most the burst, the rest come in later
        // passes.
        let max = common::api::gamedeployment::MAX_REPLICAS;
        let pass = Pass::new(gd(max, "RollingUpdate"));
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        assert_eq!(diffs.create, max);
        let mut draft = Draft::default();
        let start = std::time::Instant::now();
        let scaled = plan(&settings, &diffs, &infos, &[], &[], 7, &mut draft);
        let creates = draft.actions.iter().filter(|a| matches!(a, Action::CreatePod { .. })).count();
        assert_eq!(creates, CREATE_BURST);
        assert!(scaled.acted && scaled.problem.is_none());
        // The next pass comes soon even if no watch event arrives.
        assert!(draft.requeue_after().is_some());
        // Not a timing assertion: printed for the record.
        println!("planned {creates} creates of {max} in {:?}", start.elapsed());
    }

    #[test]
    fn replicas_above_the_maximum_scale_nothing() {
        // 20,000,000 replicas from an old CRD: refused (FailedScale from the settings), nothing planned.
        let pass = Pass::new(gd(20_000_000, "RollingUpdate")).updated(1);
        let (settings, problems) = pass.resolve();
        assert!(problems.iter().any(|p| p.1.contains("spec.replicas 20000000")), "{problems:?}");
        let infos = pass.infos(&settings);
        let diffs = diffs::compute(&settings, &infos);
        let mut draft = Draft::default();
        let pods: Vec<&Pod> = pass.pods.iter().collect();
        let scaled = plan(&settings, &diffs, &infos, &pods, &pods, 7, &mut draft);
        assert!(!scaled.acted && draft.actions.is_empty());
    }
}
