//! Pod hook bookkeeping around the [`crate::gate`]: which HookRuns to remove (their pod is gone or moved on, or a
//! `retry` starts them again), the `status.*HookCondition` lists, the `HookBlocked` condition and the Warning
//! Events that tell a person a pod is held and why.
//!
//! Retry never loses a request: the failed runs are deleted first, and `retry` is set back to `false` by a patch
//! that only applies if the GameDeployment is still at the resourceVersion this pass read — so a `retry: true`
//! written after that read is seen by the next pass.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use common::api::{GameDeploymentStatus, HookCondition, HookPhase, HookRun};
use common::cached_pod::Pod;
use common::hookrun::HookKind;
use common::keys;

use super::conditions;
use super::plan_draft::Draft;
use super::settings::{PodInfo, Settings};
use crate::action::{Action, PlannedEvent};
use crate::gate::attempt;
use crate::gate::{self, GateDecision};
use crate::lifecycle::{self, LifecycleState};
use crate::ownership;

/// Condition type set while some pod's hook cannot even be started (missing template, unresolved arg).
pub const HOOK_BLOCKED: &str = "HookBlocked";

/// How long the condition entry of a pod released without a successful hook (`releasedBy`) stays, as a record.
pub const RELEASE_RECORD_SECONDS: i64 = 300;

/// Whether an old entry is the record of a release that should still be shown.
fn release_record_kept(entry: &HookCondition, now: k8s_openapi::jiff::Timestamp) -> bool {
    entry.released_by.is_some()
        && entry.released_at.as_ref().is_some_and(|at| now.as_second() - at.0.as_second() < RELEASE_RECORD_SECONDS)
}

/// When the first release record of `status` expires (no longer [`release_record_kept`]): the planner asks for a pass
/// then, so a record goes when it says it does, not when something else makes the operator run.
pub(crate) fn records_expire_at(status: &GameDeploymentStatus) -> Option<k8s_openapi::jiff::Timestamp> {
    [&status.pre_delete_hook_condition, &status.pre_inplace_hook_condition, &status.post_inplace_hook_condition]
        .into_iter()
        .flatten()
        .filter(|c| c.released_by.is_some())
        .filter_map(|c| c.released_at.as_ref())
        .filter_map(|at| k8s_openapi::jiff::Timestamp::from_second(at.0.as_second() + RELEASE_RECORD_SECONDS).ok())
        .min()
}

/// Entries released this pass (`new`) that `old` did not show yet: a Warning Event each, once. A terminated run's
/// release has its own Event (`HookRunTerminated`, planned where the gate let the pod go).
fn announce_releases(old: &ByPod<'_>, new: &[HookCondition], infos: &[PodInfo<'_>], events: &mut Vec<PlannedEvent>) {
    let announced =
        |e: &&HookCondition| e.released_by.is_some_and(|reason| reason != common::api::HookReleaseReason::Terminated);
    for entry in new.iter().filter(announced) {
        let known = old.of_pod(&entry.pod_name).any(|o| o.released_by.is_some() && o.hook_run == entry.hook_run);
        if !known {
            events.push(about_pod(
                PlannedEvent::warning(
                    "HookReleased",
                    format!(
                        "pod {} released without a successful hook: {}",
                        entry.pod_name,
                        entry.message.as_deref().unwrap_or_default()
                    ),
                ),
                infos,
                &entry.pod_name,
            ));
        }
    }
}

fn label<'a>(run: &'a HookRun, key: &str) -> Option<&'a str> {
    run.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// A status list's entries by pod name, in list order within a pod: each lookup of a pass is a binary search, not a
/// scan of the list (a hooked scale-in of 5,000 pods has 2,500 entries and 2,500 held pods in one pass).
struct ByPod<'a>(Vec<&'a HookCondition>);

impl<'a> ByPod<'a> {
    fn of(list: &'a [HookCondition]) -> Self {
        let mut sorted: Vec<&HookCondition> = list.iter().collect();
        // Stable: the entries of one pod keep their list order, so the first found is the one a scan finds.
        sorted.sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
        Self(sorted)
    }

    /// The entries of `pod`, in list order.
    fn of_pod<'s>(&'s self, pod: &'s str) -> impl Iterator<Item = &'a HookCondition> + 's {
        let start = self.0.partition_point(|c| c.pod_name.as_str() < pod);
        self.0[start..].iter().take_while(move |c| c.pod_name == pod).copied()
    }
}

/// The GameDeployment's pods by UID, and by instance id when a run made before pods were bound by UID asks (each the
/// first of the list, as a scan finds it): the housekeeping looks up the pod of every owned run. Each index is built
/// by the first look-up that needs it, so a pass with no runs to look at builds none.
struct OwnedPods<'a> {
    owned: &'a [&'a Pod],
    by_uid: OnceLock<HashMap<&'a str, &'a Pod>>,
    by_instance_id: OnceLock<HashMap<&'a str, &'a Pod>>,
}

impl<'a> OwnedPods<'a> {
    fn of(owned: &'a [&'a Pod]) -> Self {
        Self { owned, by_uid: OnceLock::new(), by_instance_id: OnceLock::new() }
    }

    fn with_uid(&self, uid: &str) -> Option<&'a Pod> {
        self.by_uid.get_or_init(|| first_by(self.owned, |pod| pod.metadata.uid.as_deref())).get(uid).copied()
    }

    fn with_instance_id(&self, id: &str) -> Option<&'a Pod> {
        self.by_instance_id.get_or_init(|| first_by(self.owned, |pod| Some(gate::instance_id(pod)))).get(id).copied()
    }
}

/// `pods` by `key`, each key to the first pod of the list that has it (as a scan finds it).
fn first_by<'a>(pods: &[&'a Pod], key: impl Fn(&'a Pod) -> Option<&'a str>) -> HashMap<&'a str, &'a Pod> {
    let mut index = HashMap::with_capacity(pods.len());
    for pod in pods {
        if let Some(k) = key(pod) {
            index.entry(k).or_insert(*pod);
        }
    }
    index
}

fn kind_of(run: &HookRun) -> Option<HookKind> {
    let type_ = label(run, keys::HOOKRUN_TYPE)?;
    [HookKind::PreDelete, HookKind::PreInplace, HookKind::PostInplace, HookKind::CanaryStep]
        .into_iter()
        .find(|k| k.type_label() == type_)
}

/// Runs this GameDeployment created (controller reference to it).
pub(crate) fn owned_runs<'a>(settings: &Settings<'a>) -> impl Iterator<Item = &'a HookRun> + 'a {
    let gd = settings.gd;
    settings.gate.hook_runs.iter().map(AsRef::as_ref).filter(move |r: &&HookRun| {
        ownership::controller_of(r.metadata.owner_references.as_ref()).is_some_and(|o| ownership::is_owned_by(o, gd))
    })
}

pub(crate) fn retry_requested(settings: &Settings<'_>, kind: HookKind) -> bool {
    // GitOps-clean: `retry` is never reset by the operator, so it is not read either (a `true` left in Git would
    // retry every failure forever); delete the failed HookRun instead.
    if crate::gate::gitops_control::gitops_clean(settings.gd) {
        return false;
    }
    let spec = &settings.gd.spec;
    match kind {
        HookKind::PreDelete => spec.pre_delete_update_strategy.as_ref().is_some_and(|s| s.retry),
        HookKind::PreInplace => spec.pre_inplace_update_strategy.as_ref().is_some_and(|s| s.retry),
        HookKind::PostInplace => spec.post_inplace_update_strategy.as_ref().is_some_and(|s| s.retry),
        HookKind::CanaryStep => false,
    }
}

pub(crate) fn failed(phase: HookPhase) -> bool {
    phase.is_completed() && phase != HookPhase::Successful
}

/// Plans the removal of runs nobody needs any more, and the retries asked for. `owned` are all the pods the
/// GameDeployment owns, terminating ones included (a run stays until its pod is gone).
pub(crate) fn housekeeping(settings: &Settings<'_>, owned: &[&Pod], draft: &mut Draft) {
    let held_runs: BTreeSet<String> =
        draft.held.iter().filter_map(|h| h.hook.as_ref().map(|g| g.run_name.clone())).collect();
    let mut retried: BTreeSet<&'static str> = BTreeSet::new();
    let pods = OwnedPods::of(owned);
    for run in owned_runs(settings) {
        let Some(kind) = kind_of(run) else { continue };
        if kind == HookKind::CanaryStep {
            continue;
        }
        let name = run.metadata.name.clone().unwrap_or_default();
        if run.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if retry_requested(settings, kind) && failed(gate::run_phase(run)) {
            retried.insert(kind.type_label());
            draft.actions.push(Action::DeleteHookRun {
                name,
                uid: run.metadata.uid.clone().unwrap_or_default(),
                why: format!("retry requested in spec.{}", gate::retry_field(kind)),
            });
            continue;
        }
        if draft.passed_runs.contains(&name) || held_runs.contains(&name) {
            continue;
        }
        if let Some(why) = stale(settings, run, kind, &pods) {
            draft.actions.push(Action::DeleteHookRun { name, uid: run.metadata.uid.clone().unwrap_or_default(), why });
        }
    }
    orphans(settings, draft);
    for kind in HookKind::POD_HOOKS {
        // The request is acknowledged only once acted on — a failed run deleted — or when nothing of that kind is
        // still running: a retry asked while our cache still shows a run Running (that in fact just failed) waits.
        if retry_requested(settings, kind) && (retried.contains(kind.type_label()) || !in_flight(settings, kind)) {
            draft.actions.push(Action::ResetRetry {
                kind,
                resource_version: settings.gd.metadata.resource_version.clone().unwrap_or_default(),
            });
        }
    }
}

fn in_flight(settings: &Settings<'_>, kind: HookKind) -> bool {
    owned_runs(settings).any(|r| kind_of(r) == Some(kind) && !gate::run_phase(r).is_completed())
}

/// Why a pod run is no longer wanted: its pod is gone or moved to another revision, it no longer waits, or the
/// pod's current attempt is another one (a later visit of its Preparing state, another target revision).
fn stale(settings: &Settings<'_>, run: &HookRun, kind: HookKind, owned: &OwnedPods<'_>) -> Option<String> {
    let revision = label(run, keys::HOOKRUN_WORKLOAD_REVISION).unwrap_or("");
    let pod = match label(run, keys::HOOKRUN_POD_UID) {
        Some(uid) => owned.with_uid(uid),
        // Runs made before pods were bound by UID: by instance id.
        None => owned.with_instance_id(label(run, keys::HOOKRUN_INSTANCE_ID).unwrap_or("")),
    };
    let Some(pod) = pod else { return Some("its pod is gone".to_string()) };
    let pod_revision = common::pod::label(pod, keys::CONTROLLER_REVISION_HASH).unwrap_or("");
    let state = lifecycle::state_of(pod);
    if pod_revision != revision {
        return Some(format!("its pod moved to revision {pod_revision}"));
    }
    if common::pod::is_terminating(pod) {
        return None;
    }
    let waits = if kind == HookKind::PostInplace {
        state == LifecycleState::Updated || state == LifecycleState::Updating
    } else {
        state.is_preparing()
    };
    if !waits {
        return Some(format!("its pod is {} and no longer waits for it", state.as_str()));
    }
    let annotation = |key: &str| run.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str);
    let prepared = annotation(keys::HOOKRUN_PREPARED_AT);
    let pod_stamp = common::pod::annotation(pod, keys::LIFECYCLE_TIMESTAMP);
    // A post-inplace run is created in the pass that moves its pod to Updated: until then the pod shows Updating.
    if prepared.is_some() && prepared != pod_stamp && state != LifecycleState::Updating {
        return Some("it was made for an earlier attempt of its pod".to_string());
    }
    if let Some(target) = annotation(keys::HOOKRUN_CHANGE).and_then(|c| c.strip_prefix("inplace/"))
        && state == LifecycleState::PreparingUpdate
        && target != settings.update_revision
    {
        return Some(format!(
            "it was made for an update to {target}; the update now targets {}",
            settings.update_revision
        ));
    }
    None
}

/// Runs left by an earlier GameDeployment of the same name (deleted with `--cascade=orphan`, so the garbage
/// collector removed their owner instead of them): never trusted by the gate, and removed here.
fn orphans(settings: &Settings<'_>, draft: &mut Draft) {
    let Some(gd_name) = settings.gd.metadata.name.as_deref() else { return };
    let ours = common::hookrun::workload_label_value(gd_name);
    let uid = settings.gd.metadata.uid.as_deref();
    for run in settings.gate.hook_runs {
        let labelled = label(run, keys::HOOKRUN_WORKLOAD_NAME) == Some(ours.as_str());
        let controller = attempt::controller_uid(run);
        if !labelled || controller == uid || run.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let from_gd = run.metadata.owner_references.iter().flatten().all(|o| o.kind == "GameDeployment");
        if !from_gd {
            continue;
        }
        draft.actions.push(Action::DeleteHookRun {
            name: run.metadata.name.clone().unwrap_or_default(),
            uid: run.metadata.uid.clone().unwrap_or_default(),
            why: format!("it was left by an earlier GameDeployment named {gd_name} (no longer its owner)"),
        });
    }
}

/// The event, about the named pod too (so events of different pods are never aggregated into one).
fn about_pod(event: PlannedEvent, infos: &[PodInfo<'_>], pod: &str) -> PlannedEvent {
    match infos.iter().find(|i| i.name == pod) {
        Some(info) => event.about_pod(&info.pod_ref()),
        None => event.about(crate::action::Related::pod(pod, None)),
    }
}

fn list_mut(status: &mut GameDeploymentStatus, kind: HookKind) -> Option<&mut Vec<HookCondition>> {
    match kind {
        HookKind::PreDelete => Some(&mut status.pre_delete_hook_condition),
        HookKind::PreInplace => Some(&mut status.pre_inplace_hook_condition),
        HookKind::PostInplace => Some(&mut status.post_inplace_hook_condition),
        HookKind::CanaryStep => None,
    }
}

fn list(status: &GameDeploymentStatus, kind: HookKind) -> &[HookCondition] {
    match kind {
        HookKind::PreDelete => &status.pre_delete_hook_condition,
        HookKind::PreInplace => &status.pre_inplace_hook_condition,
        HookKind::PostInplace => &status.post_inplace_hook_condition,
        HookKind::CanaryStep => &[],
    }
}

/// Fills the pre-delete / pre-inplace condition lists from this pass's gate decisions: a held pod shows its run's
/// phase; a pod that passed is removed; a pod the gate did not look at this pass keeps its entry while it still
/// waits (`PreparingDelete` / `PreparingUpdate`). Sets `HookBlocked` and plans the Events.
pub(crate) fn status(
    settings: &Settings<'_>,
    infos: &[PodInfo<'_>],
    draft: &Draft,
    old: &GameDeploymentStatus,
    new: &mut GameDeploymentStatus,
    events: &mut Vec<PlannedEvent>,
) {
    let checked: BTreeSet<&str> = draft.held.iter().map(|h| h.name.as_str()).collect();
    // Sets, not scans: a 5,000-pod roll has a thousand entries and a thousand held pods in every pass.
    let preparing: BTreeSet<&str> = infos.iter().filter(|i| i.state.is_preparing()).map(|i| i.name).collect();
    for kind in [HookKind::PreDelete, HookKind::PreInplace] {
        let held_by_kind: BTreeSet<&str> = draft
            .held
            .iter()
            .filter(|h| h.hook.as_ref().is_some_and(|g| g.kind == kind))
            .map(|h| h.name.as_str())
            .collect();
        let mut entries: Vec<HookCondition> = list(old, kind)
            .iter()
            .filter(|c| !checked.contains(c.pod_name.as_str()) && !draft.is_touched(&c.pod_name))
            .filter(|c| c.released_by.is_none())
            .filter(|c| preparing.contains(c.pod_name.as_str()))
            .cloned()
            .collect();
        let released: Vec<&HookCondition> = draft.released.iter().filter(|(k, _)| *k == kind).map(|(_, c)| c).collect();
        let released_pods: BTreeSet<&str> = released.iter().map(|r| r.pod_name.as_str()).collect();
        let old_entries = ByPod::of(list(old, kind));
        // Records of earlier releases stay a while (the pod itself is gone or going).
        for c in list(old, kind) {
            let superseded = released_pods.contains(c.pod_name.as_str()) || held_by_kind.contains(c.pod_name.as_str());
            if release_record_kept(c, settings.now) && !superseded {
                entries.push(c.clone());
            }
        }
        for r in released {
            // A pod released in an earlier pass keeps the time of its first release.
            let before = old_entries.of_pod(&r.pod_name).find(|c| c.released_by.is_some() && c.hook_run == r.hook_run);
            entries.push(HookCondition {
                released_at: before.map_or(r.released_at.clone(), |b| b.released_at.clone()),
                ..r.clone()
            });
        }
        for held in &draft.held {
            let Some(hook) = held.hook.as_ref().filter(|h| h.kind == kind) else { continue };
            let message = match (&hook.problem, &held.decision) {
                (Some(problem), _) => problem.clone(),
                (None, GateDecision::Wait(m) | GateDecision::Blocked(m)) => m.clone(),
                (None, GateDecision::Allow) => continue,
            };
            let same_run =
                old_entries.of_pod(&held.name).find(|c| c.hook_run.as_deref() == Some(hook.run_name.as_str()));
            entries.push(HookCondition {
                pod_name: held.name.clone(),
                // A run being created keeps the time its entry was first written.
                start_time: match (&hook.create, same_run) {
                    (Some(_), Some(c)) => c.start_time.clone(),
                    _ => hook.started.clone(),
                },
                phase: hook.phase,
                hook_run: hook.problem.is_none().then(|| hook.run_name.clone()),
                message: Some(message),
                released_by: None,
                released_at: None,
            });
        }
        entries.sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
        for entry in &entries {
            let before = old_entries.of_pod(&entry.pod_name).next();
            if entry.released_by.is_none()
                && failed(entry.phase)
                && before.is_none_or(|b| b.phase != entry.phase || b.hook_run != entry.hook_run)
            {
                events.push(about_pod(
                    PlannedEvent::warning(
                        "HookFailed",
                        format!("pod {} is held: {}", entry.pod_name, entry.message.as_deref().unwrap_or_default()),
                    ),
                    infos,
                    &entry.pod_name,
                ));
            }
        }
        announce_releases(&old_entries, &entries, infos, events);
        if let Some(target) = list_mut(new, kind) {
            *target = entries;
        }
    }
    let mut post = draft.post_hooks.clone();
    post.sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
    // A post hook that failed before keeps its start time; a failure is announced once.
    let old_post = ByPod::of(&old.post_inplace_hook_condition);
    for entry in &mut post {
        let before = old_post.of_pod(&entry.pod_name).next();
        if let Some(b) = before.filter(|b| b.hook_run == entry.hook_run && entry.phase == HookPhase::Pending) {
            entry.start_time = b.start_time.clone();
        }
        if let Some(b) = before.filter(|b| b.released_by.is_some() && b.hook_run == entry.hook_run) {
            entry.released_at = b.released_at.clone().or(entry.released_at.take());
        }
        if entry.released_by.is_none() && failed(entry.phase) && before.is_none_or(|b| b.phase != entry.phase) {
            events.push(about_pod(
                PlannedEvent::warning(
                    "PostHookFailed",
                    format!("pod {}: {}", entry.pod_name, entry.message.as_deref().unwrap_or_default()),
                ),
                infos,
                &entry.pod_name,
            ));
        }
    }
    // Pods the refresh did not look at this pass (touched by something else) keep their entry.
    let updated: BTreeSet<&str> = infos.iter().filter(|i| i.state == LifecycleState::Updated).map(|i| i.name).collect();
    let mut listed: BTreeSet<&str> = draft.post_hooks.iter().map(|p| p.pod_name.as_str()).collect();
    for c in &old.post_inplace_hook_condition {
        if !listed.contains(c.pod_name.as_str())
            && draft.is_touched(&c.pod_name)
            && updated.contains(c.pod_name.as_str())
        {
            listed.insert(&c.pod_name);
            post.push(c.clone());
        }
    }
    for c in &old.post_inplace_hook_condition {
        if release_record_kept(c, settings.now) && !listed.contains(c.pod_name.as_str()) {
            listed.insert(&c.pod_name);
            post.push(c.clone());
        }
    }
    post.sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
    announce_releases(&old_post, &post, infos, events);
    new.post_inplace_hook_condition = post;
    let problems: Vec<String> = [HookKind::PreDelete, HookKind::PreInplace]
        .into_iter()
        .flat_map(|k| list(new, k).iter())
        .filter(|c| c.hook_run.is_none())
        .map(|c| format!("pod {}: {}", c.pod_name, c.message.as_deref().unwrap_or_default()))
        .collect();
    if problems.is_empty() {
        conditions::remove_condition(&mut new.conditions, HOOK_BLOCKED);
    } else {
        let message = problems.join("; ");
        let changed =
            conditions::condition(old, HOOK_BLOCKED).and_then(|c| c.message.as_deref()) != Some(message.as_str());
        conditions::set_condition(
            &mut new.conditions,
            HOOK_BLOCKED,
            "True",
            "HookRunNotCreated",
            &message,
            settings.now,
        );
        if changed {
            events.push(PlannedEvent::warning("HookRunNotCreated", message));
        }
    }
}

#[cfg(test)]
mod index_tests {
    use super::*;
    use crate::fixtures::pod;

    fn entry(pod_name: &str, run: &str) -> HookCondition {
        HookCondition {
            pod_name: pod_name.into(),
            start_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            phase: HookPhase::Running,
            hook_run: Some(run.into()),
            message: None,
            released_by: None,
            released_at: None,
        }
    }

    #[test]
    fn by_pod_finds_what_a_scan_finds_in_list_order() {
        let list = vec![entry("b", "b1"), entry("a", "a1"), entry("c", "c1"), entry("a", "a2"), entry("b", "b2")];
        let index = ByPod::of(&list);
        for name in ["a", "b", "c", "d", ""] {
            let scanned: Vec<&HookCondition> = list.iter().filter(|c| c.pod_name == name).collect();
            let found: Vec<&HookCondition> = index.of_pod(name).collect();
            assert_eq!(found.len(), scanned.len(), "{name}");
            assert!(found.iter().zip(&scanned).all(|(f, s)| std::ptr::eq(*f, *s)), "{name}: the list's order");
        }
    }

    #[test]
    fn owned_pods_finds_the_first_pod_a_scan_finds() {
        let pods = [
            pod("game-x").uid("u1").labels(&[(keys::INSTANCE_ID, "x")]).build(),
            pod("game-y").uid("u2").labels(&[(keys::INSTANCE_ID, "y")]).build(),
            pod("game-x2").uid("u1").labels(&[(keys::INSTANCE_ID, "x")]).build(),
            pod("game-z").build(),
        ];
        let owned: Vec<&Pod> = pods.iter().collect();
        let index = OwnedPods::of(&owned);
        for uid in ["u1", "u2", "u3"] {
            let scanned = owned.iter().find(|p| p.metadata.uid.as_deref() == Some(uid)).copied();
            assert_eq!(index.with_uid(uid).map(|p| p as *const Pod), scanned.map(|p| p as *const Pod), "{uid}");
        }
        for id in ["x", "y", "z", "w"] {
            let scanned = owned.iter().find(|p| gate::instance_id(p) == id).copied();
            assert_eq!(index.with_instance_id(id).map(|p| p as *const Pod), scanned.map(|p| p as *const Pod), "{id}");
        }
    }
}
