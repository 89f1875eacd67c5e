//! What one pass works with, resolved once from the spec and the observed objects: the [`Settings`] of the pass
//! (replicas, partition, budgets, strategy, revisions, the gate's view of the hooks, deletion costs) and one
//! [`PodInfo`] per owned, active pod. Every step of the planner reads these; none recomputes them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::api::GameDeploymentStatus;
use common::api::gamedeployment::{MAX_CANARY_STEPS, MAX_PODS_TO_DELETE, MAX_REPLICAS};
use common::api::{GameDeployment, GameDeploymentUpdateStrategyType, HookRun, HookTemplate};
use common::cached_pod::Pod;
use common::intstr::{self, Rounding};
use common::keys;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::pod_facts::FactsCache;
use super::pod_progress::Progress;
use crate::action::{Phase, PodRef};
use crate::gate::GateState;
use crate::lifecycle::{self, LifecycleState};
use crate::priority::DeletionCosts;

/// Everything a pass looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The GameDeployment being reconciled, spec and status.
    pub gd: &'a GameDeployment,
    /// Every pod of the GameDeployment's namespace (orphans can be adopted; names must stay unique).
    pub pods: Vec<&'a Pod>,
    /// The ControllerRevisions the GameDeployment controls.
    pub revisions: Vec<&'a ControllerRevision>,
    /// `io.tencent.bcs.dev/node-deletion-cost` of each node that has one.
    pub node_costs: &'a BTreeMap<String, f64>,
    /// The pass's clock: every deadline, grace period and `minReadySeconds` is judged against it, never read again.
    pub now: Timestamp,
    /// Seed for new instance ids (the caller passes a random one; tests a fixed one).
    pub seed: u64,
    /// The namespace's HookRuns (the gate reads those of this GameDeployment).
    pub hook_runs: &'a [Arc<HookRun>],
    /// The namespace's HookTemplates.
    pub hook_templates: &'a [HookTemplate],
    /// The PersistentVolumeClaims this GameDeployment controls (`spec.volumeClaimTemplates`, [`crate::planner::scale::volumes`]).
    pub claims: Vec<&'a k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    /// The keys that sign and verify the attempt stamps of pod HookRuns ([`crate::hookrun_keys`]).
    pub keys: &'a crate::hookrun_keys::Keyring,
}

/// The settings of one pass, resolved from the spec (int-or-percent values scaled, defaults applied) and the
/// observed revisions.
pub(crate) struct Settings<'a> {
    pub gd: &'a GameDeployment,
    pub now: Timestamp,
    pub replicas: i32,
    /// Pods kept on the old revision (already capped at `replicas`; a canary step may lower it).
    pub partition: i32,
    pub max_unavailable: i32,
    /// Extra pods allowed during a recreate or in-place update (0 for hot patches and `OnDelete`; while paused, only
    /// those that exist).
    pub max_surge: i32,
    pub create_batch: Option<i32>,
    /// `scaleStrategy.maxUnavailable` (rounded up): no pods are created while this many are unavailable.
    pub scale_max_unavailable: Option<i32>,
    /// The BCS strategy the spec's type behaves as ([`GameDeploymentUpdateStrategyType::behaves_as`]).
    pub strategy: GameDeploymentUpdateStrategyType,
    /// `InPlaceOnly`: a change that cannot be made in place is refused instead of recreating the pod.
    pub in_place_only: bool,
    pub paused: bool,
    pub min_ready_seconds: i32,
    pub grace_seconds: i32,
    /// The revision pods are driven to: the template's, or the stable one while a failed canary is rolled back
    /// (`status.canary.rollback`).
    pub update_revision: String,
    /// The revision of the current template (differs from `update_revision` only during a canary rollback).
    pub template_revision: String,
    pub current_revision: String,
    /// Template of every known revision, by name (the update revision's is the GameDeployment's template).
    pub templates: BTreeMap<String, PodTemplateSpec>,
    pub gate: GateState<'a>,
    pub costs: DeletionCosts<'a>,
    /// Whether the update settings resolved; if not, no pod is updated (FailedUpdate says why).
    pub update_settings_ok: bool,
    /// Whether the scale settings are within the CRD's maxima; if not, no pod is created or deleted (FailedScale
    /// says why).
    pub scale_settings_ok: bool,
}

/// One owned, active pod as the planner sees it.
#[derive(Debug, Clone)]
pub(crate) struct PodInfo<'a> {
    pub pod: &'a Pod,
    pub name: &'a str,
    pub revision: Option<&'a str>,
    /// Carries the update revision.
    pub updated: bool,
    pub state: LifecycleState,
    pub ready: bool,
    pub available: bool,
    pub progress: Progress,
    /// To be deleted and replaced: named in `spec.scaleStrategy.podsToDelete`, or labelled
    /// `apps.kruise.io/specified-delete: "true"` ([`lifecycle::specified_delete`]).
    pub specified: bool,
    /// In `Updated` with an `inPlaceUpdate` lifecycle handler: unavailable until its return to `Normal` is written —
    /// while the handler is missing (the outside controller has not put it back in service) and in the pass that
    /// sees it back, as Kruise's `IsPodAvailable` rejects any state but `Normal` (so the next pod is taken only
    /// after that write, never in the same pass).
    pub awaits_handler: bool,
    /// The server declares `Maintaining` ([`common::server_state`]): a quarantine. The operator never updates or
    /// deletes it (a person still may: `specified`), and it counts neither as available nor against the update
    /// budget.
    pub quarantined: bool,
    /// The `lifecycle-state` label is absent or `Normal` (read by [`Self::status_available`]).
    pub state_label_normal: bool,
    /// A readiness gate's condition is not True ([`super::pod_facts::PodFacts::gate_not_true`]).
    pub gate_not_true: bool,
    /// The server state the pod declares ([`super::pod_facts::PodFacts::declared_state`]).
    pub declared_state: Option<&'static str>,
    /// Marked skipped by a race to empty ([`super::pod_facts::PodFacts::race_skipped`]).
    pub race_skipped: bool,
}

impl PodInfo<'_> {
    /// Available and nothing pending: taking it down costs update budget. A pod held by a gate, or being
    /// updated, already counts as unavailable (CloneSet semantics).
    pub fn update_available(&self) -> bool {
        // `Updated` (a post-inplace hook still running) serves like `Normal`: the post hook never blocks others.
        self.available
            && matches!(self.state, LifecycleState::Normal | LifecycleState::Updated)
            && self.progress.is_idle()
            && !self.awaits_handler
    }

    /// Available as the status counts it (`availableReplicas`, `updatedAvailableReplicas`): Kruise's
    /// `IsPodAvailable` — available (ready for `minReadySeconds`, not quarantined) and in lifecycle state `Normal`
    /// or none. A pod in any other state (held by a gate or handler, being updated, waiting in `Updated`) is not.
    pub fn status_available(&self) -> bool {
        self.available && self.state_label_normal
    }

    pub fn pod_ref(&self) -> PodRef {
        PodRef::of(self.pod)
    }
}

/// Which failure condition (`FailedScale` / `FailedUpdate`) a problem belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Scale,
    Update,
}

impl Failure {
    /// The part of the plan whose writes this condition reports.
    pub fn phase(self) -> Phase {
        match self {
            Self::Scale => Phase::Scale,
            Self::Update => Phase::Update,
        }
    }
}

/// A pod count as the API's `int32` (saturating; a namespace never holds 2³¹ pods).
pub(crate) fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// How many pods satisfy `predicate`.
pub(crate) fn count_where(infos: &[PodInfo<'_>], predicate: impl Fn(&PodInfo<'_>) -> bool) -> i32 {
    count(infos.iter().filter(|i| predicate(i)).count())
}

/// The revision pods of the "old" side are created from: the recorded `status.currentRevision` while it still
/// exists, else the oldest revision an active pod runs, else the update revision.
pub(crate) fn current_revision(
    old: &GameDeploymentStatus,
    active: &[&Pod],
    revisions: &[&ControllerRevision],
    update_revision: &str,
) -> String {
    let known =
        |name: &str| name == update_revision || revisions.iter().any(|r| r.metadata.name.as_deref() == Some(name));
    if let Some(current) = old.current_revision.as_deref().filter(|c| known(c)) {
        return current.to_string();
    }
    let used: BTreeSet<&str> =
        active.iter().filter_map(|p| common::pod::label(p, keys::CONTROLLER_REVISION_HASH)).collect();
    revisions
        .iter()
        .filter(|r| r.metadata.name.as_deref().is_some_and(|n| used.contains(n)))
        .min_by_key(|r| r.revision.unwrap_or(0))
        .and_then(|r| r.metadata.name.clone())
        .unwrap_or_else(|| update_revision.to_string())
}

/// Resolves the settings of the pass. Spec values that do not resolve are reported in `problems` (and fall back
/// to a safe default: no update at all when an update setting is wrong).
pub(crate) fn resolve<'a>(
    observed: &Observed<'a>,
    problems: &mut Vec<(Failure, String)>,
    update_revision: String,
    current_revision: String,
    templates: BTreeMap<String, PodTemplateSpec>,
) -> Settings<'a> {
    let gd = observed.gd;
    let strategy = &gd.spec.update_strategy;
    let mut update_settings_ok = true;
    // The CRD's maxima, enforced here too: a CRD installed before they existed lets any value through.
    let mut scale_settings_ok = true;
    let spec_replicas = gd.spec.replicas.unwrap_or(1).max(0);
    if spec_replicas > MAX_REPLICAS {
        problems.push((
            Failure::Scale,
            format!("spec.replicas {spec_replicas} is above the maximum {MAX_REPLICAS}: not scaling"),
        ));
        scale_settings_ok = false;
    }
    let replicas = spec_replicas.min(MAX_REPLICAS);
    let pods_to_delete = gd.spec.scale_strategy.as_ref().map_or(0, |s| s.pods_to_delete.len());
    if pods_to_delete > MAX_PODS_TO_DELETE {
        problems.push((
            Failure::Scale,
            format!(
                "spec.scaleStrategy.podsToDelete has {pods_to_delete} names, above the maximum {MAX_PODS_TO_DELETE}: not scaling"
            ),
        ));
        scale_settings_ok = false;
    }
    let steps = strategy.canary.as_ref().map_or(0, |c| c.steps.len());
    if steps > MAX_CANARY_STEPS {
        problems.push((
            Failure::Update,
            format!(
                "spec.updateStrategy.canary.steps has {steps} steps, above the maximum {MAX_CANARY_STEPS}: not updating"
            ),
        ));
        update_settings_ok = false;
    }
    // As CloneSet: a percentage rounds up, keeping at least one old pod above 0 % and updating one below 100 %.
    let partition = intstr::partition(strategy.partition.as_ref(), replicas, "spec.updateStrategy.partition")
        .unwrap_or_else(|e| {
            problems.push((Failure::Update, e.to_string()));
            update_settings_ok = false;
            0
        });
    let mut resolve = |value, default: i32, rounding, field, failure| {
        intstr::scaled_value_or(value, default, replicas, rounding, field).unwrap_or_else(|e| {
            problems.push((failure, e.to_string()));
            if failure == Failure::Update {
                update_settings_ok = false;
            }
            default
        })
    };
    let surge_setting =
        resolve(strategy.max_surge.as_ref(), 0, Rounding::Up, "spec.updateStrategy.maxSurge", Failure::Update);
    let create_batch = gd.spec.scale_strategy.as_ref().and_then(|s| s.create_batch.as_ref()).map(|batch| {
        resolve(Some(batch), replicas, Rounding::Up, "spec.scaleStrategy.createBatch", Failure::Scale).max(1)
    });
    let scale_max_unavailable =
        gd.spec.scale_strategy.as_ref().and_then(|s| s.max_unavailable.as_ref()).map(|value| {
            resolve(Some(value), replicas, Rounding::Up, "spec.scaleStrategy.maxUnavailable", Failure::Scale)
        });
    if let Err(problem) = crate::priority::validate_update_order(strategy) {
        problems.push((Failure::Update, format!("{problem}: not updating")));
        update_settings_ok = false;
    }
    if let Some(problem) = in_place_policy_problem(gd) {
        problems.push((Failure::Update, problem));
        update_settings_ok = false;
    }
    if let Some(problem) = rollback_policy_problem(gd) {
        problems.push((Failure::Update, problem));
        update_settings_ok = false;
    }
    if let Err(problem) = crate::planner::claim_names::validate(gd) {
        problems.push((Failure::Scale, format!("{problem}: not scaling")));
        scale_settings_ok = false;
    }
    let unavailable_setting = strategy.max_unavailable.as_ref();
    // maxSurge applies to the updates that take pods out of service, recreate and in place, as CloneSet (whose
    // surge ignores the update type); hot patches keep every pod serving and `OnDelete` starts nothing. BCS also
    // surges for those (BCS-G26).
    let surges = matches!(
        strategy.type_.behaves_as(),
        GameDeploymentUpdateStrategyType::RollingUpdate | GameDeploymentUpdateStrategyType::InplaceUpdate
    );
    let surge_for_budget = if surges { Some(IntOrString::Int(surge_setting)) } else { None };
    let resolved = if cloneset_named(strategy.type_) {
        kruise_max_unavailable(surge_for_budget.as_ref(), unavailable_setting, replicas)
    } else {
        intstr::resolve_fenceposts(surge_for_budget.as_ref(), unavailable_setting, replicas)
    };
    let max_unavailable = match resolved {
        Ok((_, unavailable)) => unavailable,
        Err(e) => {
            problems.push((Failure::Update, e.to_string()));
            update_settings_ok = false;
            1
        }
    };
    let max_surge = if surges { surge_setting } else { 0 };
    let sort_method = gd.metadata.annotations.as_ref().and_then(|a| a.get(keys::POD_DELETION_COST_SORT_METHOD));
    Settings {
        gd,
        now: observed.now,
        replicas,
        partition,
        max_unavailable,
        max_surge,
        create_batch,
        scale_max_unavailable,
        strategy: strategy.type_.behaves_as(),
        in_place_only: strategy.type_ == GameDeploymentUpdateStrategyType::InPlaceOnly,
        paused: strategy.paused,
        min_ready_seconds: gd.spec.min_ready_seconds.max(0),
        grace_seconds: strategy.in_place_update_strategy.as_ref().map_or(0, |s| s.grace_period_seconds.max(0)),
        template_revision: update_revision.clone(),
        update_revision,
        current_revision,
        templates,
        gate: GateState {
            gd,
            hook_runs: observed.hook_runs,
            templates: observed.hook_templates,
            now: observed.now,
            names: None,
            keys: observed.keys,
        },
        costs: DeletionCosts::new(observed.node_costs, sort_method.map(String::as_str)),
        update_settings_ok,
        scale_settings_ok,
    }
}

/// `inPlaceUpdateStrategy.policy` `OrderedReady` / `OrderedUpdated` (kourse API, never implemented by BCS) asks
/// for the containers of a pod to be updated one after the other. The operator updates the changed containers of
/// a pod together, so with more than one container in the template it refuses the policy rather than ignore it;
/// with one container every policy is the same and nothing is refused.
fn in_place_policy_problem(gd: &GameDeployment) -> Option<String> {
    use common::api::InPlaceUpdatePolicy;
    let strategy = &gd.spec.update_strategy;
    let policy = strategy.in_place_update_strategy.as_ref()?.policy?;
    let in_place = matches!(
        strategy.type_.behaves_as(),
        GameDeploymentUpdateStrategyType::InplaceUpdate | GameDeploymentUpdateStrategyType::HotPatchUpdate
    );
    let containers = gd.spec.template.spec.as_ref().map_or(0, |s| s.containers.len());
    if policy == InPlaceUpdatePolicy::DisOrdered || !in_place || containers <= 1 {
        return None;
    }
    Some(format!(
        "spec.updateStrategy.inPlaceUpdateStrategy.policy {policy:?} is not supported with {containers} containers: \
         this operator updates the changed containers of a pod together (DisOrdered); set policy to DisOrdered or \
         remove it: not updating"
    ))
}

/// An update type written with OpenKruise CloneSet's name (`ReCreate`, `InPlaceIfPossible`, `InPlaceOnly`): a CloneSet
/// manifest with only its kind changed, whose int-or-percent fields resolve as Kruise resolves them.
fn cloneset_named(type_: GameDeploymentUpdateStrategyType) -> bool {
    matches!(
        type_,
        GameDeploymentUpdateStrategyType::ReCreate
            | GameDeploymentUpdateStrategyType::InPlaceIfPossible
            | GameDeploymentUpdateStrategyType::InPlaceOnly
    )
}

/// `maxUnavailable` as Kruise's `calculateDiffsWithExpectation` (openkruise/kruise
/// `pkg/controller/cloneset/sync/cloneset_sync_utils.go`) resolves it: `GetValueFromIntOrPercent(maxUnavailable,
/// replicas, maxSurge == 0)` — a percentage rounds **up** when `maxSurge` resolves to 0 (20 % of 7 is 2) and down
/// otherwise. Kruise's webhook refuses both 0; here, as for the BCS types, one pod may then be unavailable.
fn kruise_max_unavailable(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    replicas: i32,
) -> Result<(i32, i32), intstr::IntStrError> {
    let surge = intstr::scaled_value_or(max_surge, 0, replicas, Rounding::Up, "spec.updateStrategy.maxSurge")?;
    let rounding = if surge == 0 { Rounding::Up } else { Rounding::Down };
    let unavailable =
        intstr::scaled_value_or(max_unavailable, 0, replicas, rounding, "spec.updateStrategy.maxUnavailable")?;
    Ok(if surge == 0 && unavailable == 0 { (0, 1) } else { (surge, unavailable) })
}

/// `Rollback` is a canary step's `onFailure` only (a pod's hook has no revision of its own to go back to). The CRD
/// refuses it elsewhere with a CEL rule; this is the same answer for an API server that does not run the rule.
pub(crate) fn rollback_policy_problem(gd: &GameDeployment) -> Option<String> {
    use common::api::{HookFallback, HookGatePolicy};
    let rollback = |p: Option<&HookGatePolicy>, timeout_only: bool| {
        p.is_some_and(|p| {
            p.on_timeout == Some(HookFallback::Rollback)
                || (!timeout_only && p.on_failure == Some(HookFallback::Rollback))
        })
    };
    let spec = &gd.spec;
    let mut fields: Vec<String> = [
        ("spec.preDeleteUpdateStrategy", spec.pre_delete_update_strategy.as_ref().and_then(|s| s.hook_policy.as_ref())),
        (
            "spec.preInplaceUpdateStrategy",
            spec.pre_inplace_update_strategy.as_ref().and_then(|s| s.hook_policy.as_ref()),
        ),
        (
            "spec.postInplaceUpdateStrategy",
            spec.post_inplace_update_strategy.as_ref().and_then(|s| s.hook_policy.as_ref()),
        ),
    ]
    .into_iter()
    .filter(|(_, p)| rollback(*p, false))
    .map(|(field, _)| format!("{field}.hookPolicy"))
    .collect();
    let steps = spec.update_strategy.canary.as_ref().map_or(&[][..], |c| c.steps.as_slice());
    for (i, _) in steps.iter().enumerate().filter(|(_, s)| rollback(s.hook_policy.as_ref(), true)) {
        fields.push(format!("spec.updateStrategy.canary.steps[{i}].hookPolicy.onTimeout"));
    }
    let first = fields.first()?;
    Some(format!(
        "{first}{}: Rollback is only accepted in a canary step's hookPolicy.onFailure (use Hold or Proceed): not \
         updating",
        if fields.len() > 1 { format!(" (and {} more)", fields.len() - 1) } else { String::new() }
    ))
}

/// One [`PodInfo`] per active pod, sorted by name: each pod's own facts from `facts` (derived again only for the
/// pods whose resourceVersion changed since an earlier pass, [`super::pod_facts`]), with what the spec and the
/// clock make of them worked out here, in every pass.
pub(crate) fn pod_infos<'a>(settings: &Settings<'_>, active: &[&'a Pod], facts: &FactsCache) -> Vec<PodInfo<'a>> {
    let specified: BTreeSet<&str> = settings
        .gd
        .spec
        .scale_strategy
        .as_ref()
        .filter(|s| s.pods_to_delete.len() <= MAX_PODS_TO_DELETE)
        .map(|s| s.pods_to_delete.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let handler = lifecycle::handler(settings.gd, lifecycle::Handler::InPlaceUpdate).is_some();
    let mut facts = facts.pass();
    let infos: Vec<PodInfo<'a>> = sorted_by_name(active, |pod: &'a Pod| pod.metadata.name.as_deref().unwrap_or(""))
        .into_iter()
        .map(|pod| {
            let name = pod.metadata.name.as_deref().unwrap_or("");
            let revision = common::pod::label(pod, keys::CONTROLLER_REVISION_HASH);
            let own = facts.of(pod);
            PodInfo {
                pod,
                name,
                revision,
                updated: revision == Some(settings.update_revision.as_str()),
                state: own.state,
                ready: own.ready,
                available: !own.quarantined && own.running && own.available(settings.min_ready_seconds, settings.now),
                progress: own.progress(settings.now),
                specified: own.specified_delete || specified.contains(name),
                awaits_handler: own.state == LifecycleState::Updated && handler,
                quarantined: own.quarantined,
                state_label_normal: own.state_label_normal,
                gate_not_true: own.gate_not_true,
                declared_state: own.declared_state,
                race_skipped: own.race_skipped,
            }
        })
        .collect();
    drop(facts);
    infos
}

/// `items` in the order of their names, as `sort_unstable_by(|a, b| name(a).cmp(name(b)))` leaves them. Each item
/// is sorted as a small `(key, name, item)` entry, not moved as the planner's larger per-pod records, and a fleet's
/// pod names share their first bytes (the GameDeployment's name), where comparing two names byte by byte spends most
/// of its time: the key is the eight bytes after the prefix all names share, read as one integer, and the whole names
/// are compared only when two keys are equal. Pod names are unique in a namespace, so the unstable sort gives the
/// one order without the stable sort's buffer.
pub(crate) fn sorted_by_name<'a, T: Copy>(items: &[T], name: impl Fn(T) -> &'a str) -> Vec<T> {
    let shared = items.split_first().map_or(0, |(first, rest)| {
        let first = name(*first).as_bytes();
        rest.iter().fold(first.len(), |len, item| common_prefix(&first[..len], name(*item).as_bytes()))
    });
    let mut keyed: Vec<(u64, &'a str, T)> = items
        .iter()
        .map(|item| {
            let name = name(*item);
            (name_key(name, shared), name, *item)
        })
        .collect();
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    keyed.into_iter().map(|(_, _, item)| item).collect()
}

/// How many leading bytes `a` and `b` share.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The eight bytes of `name` from `skip` on, zero-padded, as a big-endian integer. Two keys order as the padded bytes
/// do, and a name that ends within them orders before a longer name it is a prefix of, as the strings do, so unequal
/// keys never disagree with the strings' order.
fn name_key(name: &str, skip: usize) -> u64 {
    let mut key = [0u8; 8];
    let tail = name.as_bytes().get(skip..).unwrap_or_default();
    let len = tail.len().min(8);
    key[..len].copy_from_slice(&tail[..len]);
    u64::from_be_bytes(key)
}

#[cfg(test)]
pub(crate) mod builder {
    //! [`Pass`]: the inputs of one pass, owned, for the step modules' unit tests.

    use std::collections::BTreeMap;

    use common::api::{GameDeployment, HookRun, HookTemplate};
    use common::cached_pod::Pod;
    use k8s_openapi::api::core::v1::PodTemplateSpec;

    use super::Failure;
    use super::Observed;
    use super::{PodInfo, Settings};
    use crate::fixtures::{self, ts};

    /// Revision of the GameDeployment's template in a [`Pass`].
    pub(crate) const NEW: &str = "new";
    /// The older revision (image `game:0`) in a [`Pass`].
    pub(crate) const OLD: &str = "old";

    /// A GameDeployment whose update revision is [`NEW`] (its template) and whose current revision is [`OLD`]
    /// (the same template with image `game:0`), with the pods, HookRuns and HookTemplates a test adds.
    pub(crate) struct Pass {
        pub gd: GameDeployment,
        pub pods: Vec<Pod>,
        pub hook_runs: Vec<std::sync::Arc<HookRun>>,
        pub hook_templates: Vec<HookTemplate>,
        pub node_costs: BTreeMap<String, f64>,
        /// Seconds since the epoch.
        pub now: i64,
    }

    impl Pass {
        pub fn new(gd: GameDeployment) -> Self {
            Self {
                gd,
                pods: Vec::new(),
                hook_runs: Vec::new(),
                hook_templates: Vec::new(),
                node_costs: BTreeMap::new(),
                now: 1_000,
            }
        }

        /// Adds `n` serving pods of the old revision (`game-o0`, `game-o1`...).
        pub fn old(mut self, n: usize) -> Self {
            for i in 0..n {
                self.pods.push(fixtures::pod(&format!("game-o{i}")).serving(OLD, "game:0", 10).build());
            }
            self
        }

        /// Adds `n` serving pods of the update revision (`game-n0`, `game-n1`...).
        pub fn updated(mut self, n: usize) -> Self {
            for i in 0..n {
                self.pods.push(fixtures::pod(&format!("game-n{i}")).serving(NEW, "game:1", 10).build());
            }
            self
        }

        pub fn pod(mut self, pod: Pod) -> Self {
            self.pods.push(pod);
            self
        }

        /// The settings and the spec problems found resolving them.
        pub fn resolve(&self) -> (Settings<'_>, Vec<(Failure, String)>) {
            let observed = Observed {
                gd: &self.gd,
                pods: self.pods.iter().collect(),
                revisions: Vec::new(),
                node_costs: &self.node_costs,
                now: ts(self.now),
                seed: 7,
                hook_runs: &self.hook_runs,
                hook_templates: &self.hook_templates,
                claims: Vec::new(),
                keys: crate::hookrun_keys::test_keys(),
            };
            let mut old: PodTemplateSpec = self.gd.spec.template.clone();
            if let Some(spec) = old.spec.as_mut() {
                spec.containers[0].image = Some("game:0".into());
            }
            let templates = BTreeMap::from([(OLD.to_string(), old), (NEW.to_string(), self.gd.spec.template.clone())]);
            let mut problems = Vec::new();
            let settings = super::resolve(&observed, &mut problems, NEW.into(), OLD.into(), templates);
            (settings, problems)
        }

        /// The settings (spec problems ignored).
        pub fn settings(&self) -> Settings<'_> {
            self.resolve().0
        }

        /// The pods as the planner sees them (every pod active and owned).
        pub fn infos<'a>(&'a self, settings: &Settings<'_>) -> Vec<PodInfo<'a>> {
            let pods: Vec<&Pod> = self.pods.iter().filter(common::pod::is_active).collect();
            super::pod_infos(settings, &pods, &super::FactsCache::default())
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::builder::{NEW, OLD, Pass};
    use super::*;
    use crate::fixtures::{self, gd};

    proptest::proptest! {
        /// The prefix-keyed sort orders names exactly as comparing the strings does: names with a long shared
        /// prefix, names that end inside the eight key bytes or are prefixes of others, and any bytes (NUL
        /// included, where zero padding could tie).
        #[test]
        fn pods_sort_by_name_as_the_strings_order(
            prefix in "(game-|)[a-z]{0,12}",
            tails in proptest::collection::vec("[a-c\\x00-\\x02]{0,11}", 0..40),
            seed in proptest::prelude::any::<u64>(),
        ) {
            let mut names: Vec<String> = tails.iter().map(|t| format!("{prefix}{t}")).collect();
            names.sort_unstable();
            names.dedup();
            let want = names.clone();
            // Shuffled (Fisher–Yates, xorshift from the drawn seed), so a failing case replays.
            let mut x = seed | 1;
            for i in (1..names.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                names.swap(i, usize::try_from(x % (i as u64 + 1)).unwrap_or(0));
            }
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            proptest::prop_assert_eq!(sorted_by_name(&refs, |n| n), want);
        }
    }

    #[test]
    fn bad_update_settings_are_reported_and_stop_updates_only() {
        let mut g = gd(4, "RollingUpdate");
        g.spec.update_strategy.partition = Some(IntOrString::String("lots".into()));
        g.spec.update_strategy.max_surge = Some(IntOrString::Int(1));
        g.spec.update_strategy.paused = true;
        let pass = Pass::new(g);
        let (settings, problems) = pass.resolve();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0, Failure::Update);
        assert!(problems[0].1.contains("partition"), "{problems:?}");
        assert!(!settings.update_settings_ok);
        // While paused the surge setting stays (existing surge pods are kept; diffs add none).
        assert_eq!((settings.partition, settings.max_surge), (0, 1));
    }

    #[test]
    fn rollback_is_refused_outside_a_canary_steps_on_failure() {
        fn policy<T: serde::de::DeserializeOwned>(json: serde_json::Value) -> T {
            serde_json::from_value(json).unwrap()
        }
        let mut g = gd(4, "InplaceUpdate");
        g.spec.update_strategy.canary = Some(policy(serde_json::json!({"steps": [
            {"hook": {"templateName": "t"}, "hookPolicy": {"onFailure": "Rollback"}}
        ]})));
        assert_eq!(rollback_policy_problem(&g), None, "a canary step's onFailure: accepted");
        let accepted = Pass::new(g.clone());
        let (settings, problems) = accepted.resolve();
        assert!(problems.is_empty() && settings.update_settings_ok, "{problems:?}");
        g.spec.pre_inplace_update_strategy =
            Some(policy(serde_json::json!({"hook": {"templateName": "t"}, "hookPolicy": {"onFailure": "Rollback"}})));
        g.spec.pre_delete_update_strategy =
            Some(policy(serde_json::json!({"hook": {"templateName": "t"}, "hookPolicy": {"onTimeout": "Rollback"}})));
        let pass = Pass::new(g.clone());
        let (settings, problems) = pass.resolve();
        assert!(!settings.update_settings_ok);
        let message = &problems.iter().find(|p| p.0 == Failure::Update).expect("an update problem").1;
        assert!(
            message.starts_with(
                "spec.preDeleteUpdateStrategy.hookPolicy (and 1 more): Rollback is only accepted in a \
                 canary step's hookPolicy.onFailure"
            ),
            "{message}"
        );
        g.spec.pre_inplace_update_strategy = None;
        g.spec.pre_delete_update_strategy = None;
        g.spec.update_strategy.canary = Some(policy(serde_json::json!({"steps": [
            {"hook": {"templateName": "t"}, "hookPolicy": {"onTimeout": "Rollback"}}
        ]})));
        let message = rollback_policy_problem(&g).expect("onTimeout refused");
        assert!(message.starts_with("spec.updateStrategy.canary.steps[0].hookPolicy.onTimeout:"), "{message}");
    }

    #[test]
    fn values_above_the_crd_maxima_are_refused() {
        use common::api::gamedeployment::{MAX_CANARY_STEPS, MAX_PODS_TO_DELETE, MAX_REPLICAS};
        // An old CRD without maxima lets these through; the operator refuses them itself.
        let mut g = gd(20_000_000, "InplaceUpdate");
        g.spec.scale_strategy = Some(common::api::GameDeploymentScaleStrategy {
            pods_to_delete: (0..=MAX_PODS_TO_DELETE).map(|i| format!("game-{i}")).collect(),
            create_batch: None,
            ..Default::default()
        });
        g.spec.update_strategy.canary =
            Some(common::api::CanaryStrategy { steps: vec![common::api::CanaryStep::default(); MAX_CANARY_STEPS + 1] });
        let pass = Pass::new(g).old(1);
        let (settings, problems) = pass.resolve();
        let scale: Vec<&String> = problems.iter().filter(|p| p.0 == Failure::Scale).map(|p| &p.1).collect();
        let update: Vec<&String> = problems.iter().filter(|p| p.0 == Failure::Update).map(|p| &p.1).collect();
        assert!(
            scale.iter().any(|m| m.contains("spec.replicas") && m.contains(&MAX_REPLICAS.to_string())),
            "{scale:?}"
        );
        assert!(scale.iter().any(|m| m.contains("podsToDelete")), "{scale:?}");
        assert!(update.iter().any(|m| m.contains("steps")), "{update:?}");
        assert!(!settings.scale_settings_ok && !settings.update_settings_ok);
        assert_eq!(settings.replicas, MAX_REPLICAS);
        // The refused list names no pod.
        assert!(pass.infos(&settings).iter().all(|i| !i.specified));
    }

    /// Kruise rounds a percentage `maxUnavailable` up when `maxSurge` is 0 (`GetValueFromIntOrPercent(…, maxSurge ==
    /// 0)` in `calculateDiffsWithExpectation`, openkruise/kruise `pkg/controller/cloneset/sync/
    /// cloneset_sync_utils.go`): a CloneSet-named type resolves it so; the BCS names keep the Deployment rule (rounded
    /// down), a difference the compatibility table lists.
    #[test]
    fn max_unavailable_percentages_round_as_kruise_for_cloneset_named_types() {
        let resolved = |strategy: &str, replicas: i32, unavailable: &str, surge: i32| {
            let mut g = gd(replicas, strategy);
            g.spec.update_strategy.max_unavailable = Some(IntOrString::String(unavailable.into()));
            g.spec.update_strategy.max_surge = Some(IntOrString::Int(surge));
            Pass::new(g).settings().max_unavailable
        };
        for cloneset in ["InPlaceIfPossible", "ReCreate", "InPlaceOnly"] {
            assert_eq!(resolved(cloneset, 7, "20%", 0), 2, "{cloneset}: 20% of 7 = 1.4, up without surge");
            assert_eq!(resolved(cloneset, 6, "20%", 0), 2, "{cloneset}: 1.2, up");
            assert_eq!(resolved(cloneset, 10, "20%", 0), 2, "{cloneset}: exact");
            assert_eq!(resolved(cloneset, 4, "0%", 0), 1, "{cloneset}: both 0: one pod may go");
        }
        for cloneset in ["InPlaceIfPossible", "ReCreate"] {
            assert_eq!(resolved(cloneset, 7, "20%", 1), 1, "{cloneset}: down with surge");
        }
        for bcs in ["InplaceUpdate", "RollingUpdate", "HotPatchUpdate"] {
            assert_eq!(resolved(bcs, 7, "20%", 0), 1, "{bcs}: the Deployment rule, rounded down");
        }
    }

    #[test]
    fn pod_infos_are_sorted_and_classified() {
        let mut g = gd(3, "InplaceUpdate");
        g.spec.scale_strategy = Some(common::api::GameDeploymentScaleStrategy {
            pods_to_delete: vec!["game-o0".into()],
            create_batch: None,
            ..Default::default()
        });
        let pass =
            Pass::new(g).updated(1).old(1).pod(fixtures::pod("game-a").serving(OLD, "game:0", 10).not_ready().build());
        let settings = pass.settings();
        let infos = pass.infos(&settings);
        let summary: Vec<(&str, bool, bool, bool)> =
            infos.iter().map(|i| (i.name, i.updated, i.ready, i.specified)).collect();
        assert_eq!(
            summary,
            [("game-a", false, false, false), ("game-n0", true, true, false), ("game-o0", false, true, true)]
        );
        assert_eq!(infos[1].revision, Some(NEW));
        assert_eq!(count_where(&infos, |i| i.update_available()), 2);
    }

    #[test]
    fn ordered_in_place_policies_are_refused_only_where_they_matter() {
        use common::api::{InPlaceUpdatePolicy, InPlaceUpdateStrategy};
        let run = |containers: usize, strategy: &str, policy: Option<InPlaceUpdatePolicy>| {
            let mut g = gd(2, strategy);
            let spec = g.spec.template.spec.as_mut().unwrap();
            let main = spec.containers[0].clone();
            spec.containers = (0..containers)
                .map(|i| k8s_openapi::api::core::v1::Container { name: format!("c{i}"), ..main.clone() })
                .collect();
            g.spec.update_strategy.in_place_update_strategy =
                Some(InPlaceUpdateStrategy { grace_period_seconds: 0, policy });
            let pass = Pass::new(g);
            let (settings, problems) = pass.resolve();
            (settings.update_settings_ok, problems.iter().map(|p| p.1.clone()).collect::<Vec<_>>())
        };
        let (ok, problems) = run(2, "InplaceUpdate", Some(InPlaceUpdatePolicy::OrderedReady));
        assert!(!ok);
        assert!(
            problems[0].contains(
                "spec.updateStrategy.inPlaceUpdateStrategy.policy OrderedReady is not supported with 2 containers"
            ),
            "{problems:?}"
        );
        assert!(!run(3, "HotPatchUpdate", Some(InPlaceUpdatePolicy::OrderedUpdated)).0);
        // One container: every order is the same. DisOrdered, RollingUpdate or no policy: nothing to order.
        assert_eq!(run(1, "InplaceUpdate", Some(InPlaceUpdatePolicy::OrderedReady)), (true, vec![]));
        assert_eq!(run(2, "InplaceUpdate", Some(InPlaceUpdatePolicy::DisOrdered)), (true, vec![]));
        assert_eq!(run(2, "RollingUpdate", Some(InPlaceUpdatePolicy::OrderedReady)), (true, vec![]));
        assert_eq!(run(2, "InplaceUpdate", None), (true, vec![]));
    }
}
