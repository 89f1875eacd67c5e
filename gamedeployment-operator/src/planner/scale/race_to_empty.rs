//! Race to empty (`spec.scaleStrategy.scaleInPolicy.mode: RaceToEmpty`): a scale-in of N pods starts pre-delete
//! hooks on up to N + `extraCandidates` candidates (the first in [`race_order`]), deletes the first N whose gate
//! opens (their hook succeeded) and then releases the others; a candidate whose hook fails is skipped — released
//! and marked [`SKIPPED`], another candidate started in its place — instead of held. Scaling back up leaves no
//! scale-in to race for, so every candidate still in flight goes back to `Normal`
//! ([`super::super::housekeeping::release_unneeded_holds`]) without a pod created or deleted for it.
//!
//! [`decide`] is the whole decision, on the candidates' standings; [`plan`] reads the standings from the gate and
//! turns the decision into actions.
//!
//! Cost probe (`scaleInPolicy.costProbe`): before candidates start, every eligible pod (running, not in the race, not
//! skipped; the first [`MAX_COST_PROBES`] in deletion order) is asked its cost by a HookRun of its own made from the
//! probe's template (`hookrun-type: cost-probe`, which the pod-hook clean-up ignores). The cost is the number in
//! the last measurement of the run's first metric, once the run is `Successful` ([`probe_cost`]). Pods with a cost
//! race first, cheapest first; pods without one (the run failed, its value is not a number, the template is
//! missing, or no answer within `timeoutSeconds`, default 30) follow in deletion order ([`Probe`]). No candidate
//! starts while an answer is awaited (`may_start`). A probe run is deleted once its pod is decided (in the race,
//! skipped, gone) and every probe run once no scale-in is wanted ([`clear_probes`]).
//!
//! Crash safety: every input is in the API — in-flight candidates are the pods in `PreparingDelete`, their
//! standing is their HookRun's phase, skipped pods carry [`SKIPPED`] (removed once no scale-in is wanted).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use common::api::gamedeployment::{MAX_COST_PROBES, MAX_RACE_EXTRA_CANDIDATES};
use common::api::{CostProbe, HookPhase, HookRun, HookStep, ScaleInMode, ScaleInPolicy};
use common::hookrun::HookKind;
use common::intstr::{self, Rounding};
use common::keys;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::super::housekeeping::back_to_normal;
use super::super::plan_draft::Draft;
use super::super::settings::{PodInfo, Settings};
use crate::action::{Action, PlannedEvent};
use crate::gate::{self, DeleteCause, GateKind, GateRequest};
use crate::lifecycle::{self, Handler, LifecycleState};
use crate::{ownership, patch, priority};

/// On a pod whose pre-delete hook failed in a race to empty: when it was skipped ([`keys::RACE_SKIPPED`], read once
/// per pod version into its facts, `PodInfo::race_skipped`).
pub(crate) const SKIPPED: &str = keys::RACE_SKIPPED;

/// `hookrun-type` of a cost probe run.
pub(crate) const COST_PROBE: &str = "cost-probe";

/// How long candidates wait for the cost probes by default (`costProbe.timeoutSeconds`).
pub(crate) const DEFAULT_PROBE_TIMEOUT_SECONDS: i64 = 30;

/// A pod's answer to the cost probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Probe {
    /// No probe configured, or the pod is not asked (in the race, skipped, not running, past the bound).
    NotAsked,
    /// Asked; no answer yet and the timeout has not passed: no candidate starts.
    Awaited,
    /// Its cost: lower races first.
    Cost(f64),
    /// The probe failed, answered no number, could not be made, or did not answer in time: after the pods with a
    /// cost, in deletion order.
    NoCost,
}

impl Probe {
    /// Pods with a cost first, cheapest first; then every other pod, equal (deletion order decides).
    pub(crate) fn order(self, other: Self) -> Ordering {
        match (self, other) {
            (Self::Cost(a), Self::Cost(b)) => a.total_cmp(&b),
            (Self::Cost(_), _) => Ordering::Less,
            (_, Self::Cost(_)) => Ordering::Greater,
            _ => Ordering::Equal,
        }
    }
}

/// The cost a finished probe run answered: the last measured value of its first metric, as a number, if the run
/// is `Successful`.
pub(crate) fn probe_cost(run: &HookRun) -> Option<f64> {
    let status = run.status.as_ref()?;
    if status.phase != Some(HookPhase::Successful) {
        return None;
    }
    let first = run.spec.metrics.first().map(|m| m.name.as_str());
    let result = status
        .metric_results
        .iter()
        .find(|r| Some(r.name.as_str()) == first)
        .or_else(|| status.metric_results.first())?;
    let value = result.measurements.iter().rev().find_map(|m| m.value.as_deref())?;
    let cost: f64 = value.trim().trim_matches('"').trim().parse().ok()?;
    cost.is_finite().then_some(cost)
}

/// Where a probe run stands at `now`: its cost, awaited, or no cost (failed, or older than `timeout` seconds).
pub(crate) fn probe_state(run: &HookRun, now: Timestamp, timeout: i64) -> Probe {
    let phase = gate::run_phase(run);
    if phase.is_completed() {
        return probe_cost(run).map_or(Probe::NoCost, Probe::Cost);
    }
    let created = run.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    if now.as_second() - created.as_second() >= timeout { Probe::NoCost } else { Probe::Awaited }
}

/// The race-to-empty policy, if the GameDeployment opted in.
pub(crate) fn policy<'a>(settings: &Settings<'a>) -> Option<&'a ScaleInPolicy> {
    let policy = settings.gd.spec.scale_strategy.as_ref()?.scale_in_policy.as_ref()?;
    (policy.mode == ScaleInMode::RaceToEmpty).then_some(policy)
}

/// Candidates started besides the `wanted` pods: `extraCandidates` (default 100%) of them, rounded up, at most
/// `wanted` and [`MAX_RACE_EXTRA_CANDIDATES`]. A value the CRD should have refused counts as the default.
pub(crate) fn extra_candidates(policy: &ScaleInPolicy, wanted: usize) -> usize {
    let total = i32::try_from(wanted).unwrap_or(i32::MAX);
    let extra = policy
        .extra_candidates
        .as_ref()
        .and_then(|v| {
            intstr::scaled_value(v, total, Rounding::Up, "spec.scaleStrategy.scaleInPolicy.extraCandidates").ok()
        })
        .unwrap_or(total);
    usize::try_from(extra.min(total).clamp(0, MAX_RACE_EXTRA_CANDIDATES)).unwrap_or(0)
}

/// Where a candidate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Not started, or its hook is running (or waits for something else, e.g. a missing template).
    Racing,
    /// Its gate opens: the hook succeeded (or the pod needs none: not running, no hook configured).
    Won,
    /// Its hook ended `Failed`, `Error` or `Inconclusive`.
    Lost,
}

/// One pod of the group the scale-in takes from, in race order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub standing: Standing,
    /// In `PreparingDelete`: its hook was started (by this race, or earlier).
    pub in_flight: bool,
    /// Carries [`SKIPPED`].
    pub skipped: bool,
}

/// What to do with each entry (indices into the entries).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Moves {
    /// Delete now: the first `wanted` winners.
    pub delete: Vec<usize>,
    /// Start or keep racing (through the gate, held in `PreparingDelete`).
    pub race: Vec<usize>,
    /// Back to `Normal`: the race no longer needs them.
    pub release: Vec<usize>,
    /// Back to `Normal` and marked [`SKIPPED`]: their hook failed and another candidate can take their place.
    pub skip: Vec<usize>,
}

/// The race: `entries` in race order (in-flight pods first, skipped pods last), `wanted` pods to delete, `extra`
/// candidates besides them. `may_start`: new candidates may be started (false while a cost probe is awaited).
pub(crate) fn decide(entries: &[Entry], wanted: usize, extra: usize, may_start: bool) -> Moves {
    let delete: Vec<usize> =
        entries.iter().enumerate().filter(|(_, e)| e.standing == Standing::Won).map(|(i, _)| i).take(wanted).collect();
    let mut moves = Moves { delete, ..Moves::default() };
    let need = wanted - moves.delete.len();
    if need == 0 {
        // Enough winners: every other candidate goes back to serving now.
        moves.release = entries
            .iter()
            .enumerate()
            .filter(|(i, e)| e.in_flight && !moves.delete.contains(i))
            .map(|(i, _)| i)
            .collect();
        return moves;
    }
    let replacements = entries.iter().filter(|e| !e.in_flight && !e.skipped && e.standing != Standing::Won).count();
    let pool = need + extra;
    let mut racing = 0;
    for (i, entry) in entries.iter().enumerate() {
        if !entry.in_flight || moves.delete.contains(&i) {
            continue;
        }
        if entry.standing == Standing::Lost && replacements > 0 && may_start {
            moves.skip.push(i);
        } else {
            // A racing candidate is never dropped while winners are still needed (it may be about to win); a lost
            // one with nobody to replace it is held as in the default mode (`retry`, `hookPolicy`).
            moves.race.push(i);
            racing += 1;
        }
    }
    if may_start {
        for (i, entry) in entries.iter().enumerate() {
            if racing >= pool {
                break;
            }
            if entry.in_flight || moves.delete.contains(&i) {
                continue;
            }
            moves.race.push(i);
            racing += 1;
        }
    }
    moves
}

/// The race order of a group: in-flight pods first, pods not skipped before skipped ones, then the state the server
/// declares ([`common::server_state`]: a server that asked to go, an idle one, the rest, allocated ones last), then
/// the cost probe's answers ([`Probe::order`]: cheapest first, pods without a cost after), then
/// [`priority::deletion_order`] (unavailable pods, node and pod deletion costs, seniority).
fn race_order(settings: &Settings<'_>, probes: &BTreeMap<String, Probe>, a: &PodInfo<'_>, b: &PodInfo<'_>) -> Ordering {
    let key = |i: &PodInfo<'_>| {
        let declared = common::server_state::ServerState::of(i.pod).deletion_rank();
        (i.state != LifecycleState::PreparingDelete, i.race_skipped, declared)
    };
    let probe = |i: &PodInfo<'_>| probes.get(i.name).copied().unwrap_or(Probe::NotAsked);
    key(a)
        .cmp(&key(b))
        .then_with(|| probe(a).order(probe(b)))
        .then_with(|| priority::deletion_order(a.pod, b.pod, &settings.costs))
}

/// A candidate's standing, read from the gate without acting (the gate is asked again, with effect, for the pods
/// the race moves).
fn standing(settings: &Settings<'_>, info: &PodInfo<'_>) -> Standing {
    let request = GateRequest {
        kind: GateKind::Delete(DeleteCause::ScaleIn),
        pod: info.pod,
        pod_revision: info.revision,
        target_revision: None,
    };
    let verdict = gate::verdict(&request, &settings.gate, &[]);
    let in_flight = info.state == LifecycleState::PreparingDelete;
    let phase = verdict.hook.as_ref().map(|h| h.phase);
    if in_flight && phase.is_some_and(|p| p.is_completed() && p != HookPhase::Successful) {
        return Standing::Lost;
    }
    let handler_holds = lifecycle::holds_release(settings.gd, Handler::PreDelete, info.pod).is_some();
    if verdict.decision.is_allow() && !handler_holds { Standing::Won } else { Standing::Racing }
}

/// Races `wanted` deletions among `group` (the pods of one revision class the scale-in takes from).
pub(super) fn plan(
    settings: &Settings<'_>,
    policy: &ScaleInPolicy,
    group: Vec<&PodInfo<'_>>,
    wanted: usize,
    budget: &mut i32,
    kept: &mut BTreeSet<String>,
    draft: &mut Draft,
) {
    let mut group: Vec<&PodInfo<'_>> = group.into_iter().filter(|i| !draft.is_touched(i.name)).collect();
    let mut probes = BTreeMap::new();
    if let Some(probe) = policy.cost_probe.as_ref() {
        group.sort_by(|a, b| race_order(settings, &probes, a, b));
        probes = ask_costs(settings, probe, &group, kept, draft);
    }
    group.sort_by(|a, b| race_order(settings, &probes, a, b));
    let awaited = probes.values().any(|p| *p == Probe::Awaited);
    let entries: Vec<Entry> = group
        .iter()
        .map(|i| Entry {
            standing: standing(settings, i),
            in_flight: i.state == LifecycleState::PreparingDelete,
            skipped: i.race_skipped,
        })
        .collect();
    let moves = decide(&entries, wanted, extra_candidates(policy, wanted), !awaited);
    for &i in moves.delete.iter().chain(moves.race.iter()) {
        super::delete(settings, group[i], DeleteCause::ScaleIn, budget, draft);
    }
    for &i in &moves.release {
        let info = group[i];
        draft.touch(info.name);
        draft.actions.push(back_to_normal(
            settings,
            info,
            Vec::new(),
            "released: the race to empty has its winners".into(),
        ));
    }
    for &i in &moves.skip {
        let info = group[i];
        draft.touch(info.name);
        let mark = json!({"op": "add", "path": patch::annotation_path(SKIPPED), "value": settings.now.to_string()});
        draft.actions.push(back_to_normal(
            settings,
            info,
            vec![mark],
            "skipped: its pre-delete hook failed; another candidate races in its place".into(),
        ));
    }
}

/// The cost probe's answers for the pods of `group` (in race order without costs) that are asked: running, not in
/// the race, not skipped, the first [`MAX_COST_PROBES`]. Creates the runs still missing (their answer is awaited);
/// the names of the runs to keep are added to `kept`.
fn ask_costs(
    settings: &Settings<'_>,
    probe: &CostProbe,
    group: &[&PodInfo<'_>],
    kept: &mut BTreeSet<String>,
    draft: &mut Draft,
) -> BTreeMap<String, Probe> {
    let timeout = probe.timeout_seconds.map_or(DEFAULT_PROBE_TIMEOUT_SECONDS, i64::from).max(1);
    let step = HookStep { template_name: probe.template_name.clone(), args: probe.args.clone() };
    let asked = group
        .iter()
        .filter(|i| i.state != LifecycleState::PreparingDelete && !i.race_skipped && common::pod::is_running(i.pod))
        .take(MAX_COST_PROBES);
    let mut answers = BTreeMap::new();
    let mut failed = Vec::new();
    for info in asked {
        let name = probe_run_name(&probe.template_name, info);
        let found = settings.gate.hook_runs.iter().find(|r| r.metadata.name.as_deref() == Some(name.as_str()));
        let answer = match found {
            Some(run) if run.metadata.deletion_timestamp.is_some() => Probe::Awaited,
            Some(run) if trusted(settings, run, info) => {
                kept.insert(name.clone());
                let answer = probe_state(run, settings.now, timeout);
                if answer == Probe::Awaited {
                    let created = run.metadata.creation_timestamp.as_ref().map_or(settings.now, |t| t.0);
                    let due = created.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(timeout));
                    draft.requeue_at(settings.now, due.unwrap_or(settings.now));
                }
                answer
            }
            // Ours but for an earlier pod of that name (removed by `clear_probes`, asked again next pass).
            Some(run) if owned(settings, run) => Probe::Awaited,
            // Someone else's run under that name: no answer can be trusted.
            Some(_) => Probe::NoCost,
            None => match build_probe_run(settings, &step, info, name.clone()) {
                Ok(run) => {
                    kept.insert(name);
                    draft.actions.push(Action::CreateHookRun(Box::new(run)));
                    Probe::Awaited
                }
                Err(problem) => {
                    failed.push(problem);
                    Probe::NoCost
                }
            },
        };
        answers.insert(info.name.to_string(), answer);
    }
    if let Some(problem) = failed.first() {
        draft.events.push(PlannedEvent::warning(
            "FailedCostProbe",
            format!("{} pod(s) not asked their cost, ordered without it: {problem}", failed.len()),
        ));
    }
    answers
}

/// `costprobe-<revision>-<instance id>-<template>`.
fn probe_run_name(template: &str, info: &PodInfo<'_>) -> String {
    format!("costprobe-{}-{}-{template}", info.revision.unwrap_or(""), gate::instance_id(info.pod))
}

fn owned(settings: &Settings<'_>, run: &HookRun) -> bool {
    ownership::controller_of(run.metadata.owner_references.as_ref())
        .is_some_and(|o| ownership::is_owned_by(o, settings.gd))
}

fn label<'a>(run: &'a HookRun, key: &str) -> Option<&'a str> {
    run.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// A probe run whose answer counts: made by this GameDeployment for this pod, spec unchanged since.
fn trusted(settings: &Settings<'_>, run: &HookRun, info: &PodInfo<'_>) -> bool {
    let hash = run.metadata.annotations.as_ref().and_then(|a| a.get(keys::HOOKRUN_SPEC_HASH));
    owned(settings, run)
        && label(run, keys::HOOKRUN_TYPE) == Some(COST_PROBE)
        && label(run, keys::HOOKRUN_POD_UID).is_some_and(|uid| Some(uid) == info.pod.metadata.uid.as_deref())
        && hash.is_some_and(|h| *h == common::hookrun::spec_hash(&run.spec))
}

/// The probe run of a pod: built as its pre-delete hook run would be (pod args, owner), typed `cost-probe`, bound to
/// the pod's UID, its spec hash recorded.
fn build_probe_run(
    settings: &Settings<'_>,
    step: &HookStep,
    info: &PodInfo<'_>,
    name: String,
) -> Result<HookRun, String> {
    let revision = info.revision.unwrap_or("");
    let mut run = gate::build_pod_run(&settings.gate, HookKind::PreDelete, step, info.pod, revision, &[], name)?;
    let hash = common::hookrun::spec_hash(&run.spec);
    let labels = run.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(keys::HOOKRUN_TYPE.into(), COST_PROBE.into());
    labels.insert(keys::HOOKRUN_POD_UID.into(), info.pod.metadata.uid.clone().unwrap_or_default());
    run.metadata.annotations.get_or_insert_with(Default::default).insert(keys::HOOKRUN_SPEC_HASH.into(), hash);
    Ok(run)
}

/// Removes this GameDeployment's probe runs not in `kept`: their pod is decided (racing, skipped, deleted, gone) or
/// no scale-in asks costs any more.
pub(super) fn clear_probes(settings: &Settings<'_>, kept: &BTreeSet<String>, draft: &mut Draft) {
    for run in settings.gate.hook_runs {
        let name = run.metadata.name.clone().unwrap_or_default();
        if label(run, keys::HOOKRUN_TYPE) != Some(COST_PROBE)
            || !owned(settings, run)
            || kept.contains(&name)
            || run.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        draft.actions.push(Action::DeleteHookRun {
            name,
            uid: run.metadata.uid.clone().unwrap_or_default(),
            why: "cost probe no longer needed: its pod is decided or no scale-in asks costs".into(),
        });
    }
}

/// No scale-in is wanted: pods skipped by an earlier race lose their mark (they are ordinary candidates next time).
pub(super) fn clear_marks(infos: &[PodInfo<'_>], draft: &mut Draft) {
    for info in infos.iter().filter(|i| i.race_skipped && !i.state.is_preparing()) {
        if draft.is_touched(info.name) {
            continue;
        }
        draft.touch(info.name);
        draft.actions.push(crate::action::Action::PatchPod(crate::action::PodChange {
            pod: info.pod_ref(),
            reason: crate::action::PatchReason::Lifecycle,
            writes: vec![crate::action::PodWrite::Object(vec![
                json!({"op": "remove", "path": patch::annotation_path(SKIPPED)}),
            ])],
            summary: "the race to empty it was skipped in is over".into(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(standing: Standing, in_flight: bool) -> Entry {
        Entry { standing, in_flight, skipped: false }
    }
    const IDLE: Entry = Entry { standing: Standing::Racing, in_flight: false, skipped: false };
    const RUNNING: Entry = Entry { standing: Standing::Racing, in_flight: true, skipped: false };
    const WON: Entry = Entry { standing: Standing::Won, in_flight: true, skipped: false };
    const LOST: Entry = Entry { standing: Standing::Lost, in_flight: true, skipped: false };

    #[test]
    fn a_race_starts_wanted_plus_extra_candidates_cheapest_first() {
        let entries = [IDLE; 10];
        let moves = decide(&entries, 3, 3, true);
        assert_eq!(moves, Moves { race: vec![0, 1, 2, 3, 4, 5], ..Moves::default() });
        // Without extra candidates it is the default mode's choice.
        assert_eq!(decide(&entries, 3, 0, true).race, [0, 1, 2]);
    }

    #[test]
    fn the_first_winners_are_deleted_and_the_others_released_once_enough_won() {
        let entries = [RUNNING, WON, RUNNING, WON, WON, RUNNING, IDLE, IDLE];
        let moves = decide(&entries, 3, 3, true);
        assert_eq!(moves, Moves { delete: vec![1, 3, 4], release: vec![0, 2, 5], ..Moves::default() });
        // More winners than wanted: the surplus goes back to serving too.
        let entries = [WON, WON, WON, WON, IDLE];
        assert_eq!(decide(&entries, 2, 2, true), Moves { delete: vec![0, 1], release: vec![2, 3], ..Moves::default() });
    }

    #[test]
    fn winners_short_of_wanted_keep_the_others_racing_and_refill_the_pool() {
        // 1 of 3 won: the 5 others keep racing (never dropped while winners are needed), and the pool is refilled
        // to need + extra = 2 + 3 = 5: already full.
        let entries = [WON, RUNNING, RUNNING, RUNNING, RUNNING, RUNNING, IDLE];
        let moves = decide(&entries, 3, 3, true);
        assert_eq!(moves, Moves { delete: vec![0], race: vec![1, 2, 3, 4, 5], ..Moves::default() });
    }

    #[test]
    fn a_lost_candidate_is_skipped_and_replaced_not_held() {
        let entries = [LOST, RUNNING, RUNNING, IDLE, IDLE];
        let moves = decide(&entries, 2, 1, true);
        assert_eq!(moves, Moves { race: vec![1, 2, 3], skip: vec![0], ..Moves::default() });
    }

    #[test]
    fn a_lost_candidate_with_nobody_to_replace_it_is_held() {
        // Every other pod is in the race or was skipped before: holding (retry, hookPolicy) is all that is left.
        let skipped = Entry { skipped: true, ..IDLE };
        let entries = [LOST, RUNNING, skipped];
        let moves = decide(&entries, 2, 2, true);
        assert_eq!(moves, Moves { race: vec![0, 1, 2], ..Moves::default() });
    }

    #[test]
    fn nothing_new_starts_while_the_probe_is_awaited() {
        let entries = [RUNNING, LOST, IDLE, IDLE];
        let moves = decide(&entries, 2, 2, false);
        // In-flight candidates carry on; the lost one is held this pass, not replaced yet.
        assert_eq!(moves, Moves { race: vec![0, 1], ..Moves::default() });
    }

    #[test]
    fn pods_that_need_no_hook_win_at_once() {
        // Not running (or no hook configured): the gate allows them without starting anything.
        let entries = [entry(Standing::Won, false), IDLE, IDLE];
        assert_eq!(decide(&entries, 1, 1, true), Moves { delete: vec![0], ..Moves::default() });
    }

    fn probe_run(phase: Option<HookPhase>, values: &[&str], created: i64) -> HookRun {
        serde_json::from_value(json!({
            "apiVersion": "tkex.tencent.com/v1alpha1",
            "kind": "HookRun",
            "metadata": {"name": "p", "creationTimestamp": Timestamp::from_second(created).expect("valid").to_string()},
            "spec": {"metrics": [{"name": "cost", "provider": {"web": {"url": "http://x"}}}, {"name": "other", "provider": {"web": {"url": "http://y"}}}]},
            "status": {
                "phase": phase,
                "metricResults": [
                    {"name": "other", "measurements": [{"value": "0"}]},
                    {"name": "cost", "measurements": values.iter().map(|v| json!({"value": v})).collect::<Vec<_>>()},
                ],
            },
        }))
        .expect("valid run")
    }

    #[test]
    fn the_cost_is_the_last_value_of_the_first_metric_of_a_successful_run() {
        let ok = Some(HookPhase::Successful);
        assert_eq!(probe_cost(&probe_run(ok, &["9", " 4.5 "], 0)), Some(4.5));
        assert_eq!(probe_cost(&probe_run(ok, &["\"12\""], 0)), Some(12.0), "a JSON string holding a number");
        assert_eq!(probe_cost(&probe_run(ok, &["-3"], 0)), Some(-3.0));
        assert_eq!(probe_cost(&probe_run(ok, &["many"], 0)), None, "not a number");
        assert_eq!(probe_cost(&probe_run(ok, &["NaN"], 0)), None, "not a finite number");
        assert_eq!(probe_cost(&probe_run(ok, &[], 0)), None, "no measurement");
        assert_eq!(probe_cost(&probe_run(Some(HookPhase::Failed), &["1"], 0)), None, "a failed run answers nothing");
        assert_eq!(probe_cost(&probe_run(None, &["1"], 0)), None, "still running");
    }

    #[test]
    fn a_probe_is_awaited_until_it_answers_or_its_timeout_passes() {
        let now = Timestamp::from_second(1_000).expect("valid");
        let running = probe_run(Some(HookPhase::Running), &["1"], 990);
        assert_eq!(probe_state(&running, now, 30), Probe::Awaited);
        assert_eq!(probe_state(&running, now, 10), Probe::NoCost, "10 s old: timed out");
        assert_eq!(probe_state(&probe_run(None, &[], 999), now, 30), Probe::Awaited);
        assert_eq!(probe_state(&probe_run(Some(HookPhase::Successful), &["7"], 0), now, 30), Probe::Cost(7.0));
        assert_eq!(probe_state(&probe_run(Some(HookPhase::Error), &[], 990), now, 30), Probe::NoCost);
    }

    #[test]
    fn pods_with_a_cost_come_first_cheapest_first_then_the_others_unordered() {
        use Probe::*;
        let mut probes = [NoCost, Cost(5.0), NotAsked, Cost(-1.0), Awaited, Cost(2.0)];
        probes.sort_by(|a, b| a.order(*b));
        // A stable sort keeps the pods without a cost in their (deletion) order.
        assert_eq!(probes, [Cost(-1.0), Cost(2.0), Cost(5.0), NoCost, NotAsked, Awaited]);
    }

    #[test]
    fn extra_candidates_are_bounded_by_the_pods_to_delete_and_100() {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let with = |v: Option<IntOrString>| ScaleInPolicy {
            mode: ScaleInMode::RaceToEmpty,
            extra_candidates: v,
            ..ScaleInPolicy::default()
        };
        assert_eq!(extra_candidates(&with(None), 3), 3);
        assert_eq!(extra_candidates(&with(Some(IntOrString::Int(1))), 3), 1);
        assert_eq!(extra_candidates(&with(Some(IntOrString::Int(10))), 3), 3);
        assert_eq!(extra_candidates(&with(Some(IntOrString::String("50%".into()))), 3), 2);
        assert_eq!(extra_candidates(&with(None), 500), 100);
        assert_eq!(extra_candidates(&with(Some(IntOrString::String("bad".into()))), 4), 4);
    }
}

/// The race on the simulated cluster: runs created, pods deleted and released as a real pass would.
#[cfg(test)]
mod world_tests {
    use std::collections::BTreeSet;

    use common::api::{GameDeploymentScaleStrategy, HookPhase, HookRunStatus, ScaleInMode, ScaleInPolicy};
    use common::keys;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    use super::SKIPPED;
    use crate::action::Action;
    use crate::fixtures::{gd, hook_template};
    use crate::lifecycle::{self, LifecycleState};
    use crate::planner::sim_cluster::World;

    fn racing(replicas: i32, extra: Option<IntOrString>) -> World {
        let mut gd = gd(replicas, "RollingUpdate");
        // A candidate in PreparingDelete counts as unavailable: 50% of 7 leaves room for 6 (10 − (7 − 3)).
        gd.spec.update_strategy.max_unavailable = Some(IntOrString::String("50%".into()));
        gd.spec.pre_delete_update_strategy =
            Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
        gd.spec.scale_strategy = Some(GameDeploymentScaleStrategy {
            scale_in_policy: Some(ScaleInPolicy {
                mode: ScaleInMode::RaceToEmpty,
                extra_candidates: extra,
                ..ScaleInPolicy::default()
            }),
            ..Default::default()
        });
        let mut world = World::new(gd);
        world.hook_templates.push(hook_template());
        assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
        world
    }

    fn pod_of(run: &common::api::HookRun) -> String {
        run.spec.args.iter().find(|a| a.name == "PodName").and_then(|a| a.value.clone()).unwrap_or_default()
    }

    fn set(world: &mut World, pods: &[String], phase: HookPhase) {
        for run in &mut world.hook_runs {
            if pods.contains(&pod_of(run)) {
                std::sync::Arc::make_mut(run).status = Some(HookRunStatus { phase: Some(phase), ..Default::default() });
            }
        }
    }

    fn preparing(world: &World) -> Vec<String> {
        world
            .active()
            .into_iter()
            .filter(|p| lifecycle::state_of(p) == LifecycleState::PreparingDelete)
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    }

    fn names(world: &World) -> BTreeSet<String> {
        world.active().into_iter().filter_map(|p| p.metadata.name.clone()).collect()
    }

    /// Runs `n` passes; returns (pods created, pods deleted) by them.
    fn passes(world: &mut World, n: usize) -> (usize, Vec<String>) {
        let (mut created, mut deleted) = (0, Vec::new());
        for _ in 0..n {
            world.tick(1);
            let plan = world.pass();
            for action in &plan.actions {
                match action {
                    Action::CreatePod { .. } => created += 1,
                    Action::DeletePod { pod, .. } => deleted.push(pod.name.clone()),
                    _ => {}
                }
            }
        }
        (created, deleted)
    }

    #[test]
    fn the_first_three_whose_hook_succeeds_are_deleted_and_the_others_released_in_that_pass() {
        let mut world = racing(10, None);
        world.gd.spec.replicas = Some(7);
        passes(&mut world, 4);
        // 3 to delete + 100% extra: 6 candidates race, one run each.
        let candidates = preparing(&world);
        assert_eq!(candidates.len(), 6, "{candidates:?}");
        assert_eq!(world.hook_runs.len(), 6);
        // Any three of the six win.
        let winners: Vec<String> = candidates[3..].to_vec();
        set(&mut world, &winners, HookPhase::Successful);
        world.tick(1);
        let plan = world.pass();
        let deleted: BTreeSet<String> = plan
            .actions
            .iter()
            .filter_map(|a| if let Action::DeletePod { pod, .. } = a { Some(pod.name.clone()) } else { None })
            .collect();
        assert_eq!(deleted, winners.iter().cloned().collect(), "exactly the winners are deleted");
        // The losers go back to Normal in the same pass, without the game-pod-deleting annotation.
        assert!(preparing(&world).is_empty(), "{:?}", preparing(&world));
        for pod in world.active() {
            assert!(common::pod::annotation(pod, keys::GAME_POD_DELETING).is_none());
        }
        let (created, more) = passes(&mut world, 4);
        assert_eq!((created, more.len()), (0, 0), "no churn after the race");
        assert_eq!(names(&world).len(), 7);
        assert!(winners.iter().all(|w| !names(&world).contains(w)));
        assert!(world.hook_runs.is_empty(), "the losers' runs are removed: {:?}", world.hook_runs.len());
    }

    /// The state a server declares (`common::server_state`) is the race's first key after in-flight and skipped
    /// pods: servers that asked to go, then idle ones, race before the rest; allocated ones only when nothing else
    /// is left.
    #[test]
    fn servers_that_declare_they_can_go_race_first() {
        let mut world = racing(10, Some(IntOrString::Int(1)));
        let label = |world: &mut World, index: usize, value: &str| {
            let pod = &mut world.pods[index];
            pod.metadata.labels.get_or_insert_with(Default::default).insert(keys::SERVER_STATE.into(), value.into());
            pod.metadata.name.clone().unwrap_or_default()
        };
        let waiting = label(&mut world, 7, "WaitToBeDeleted");
        let idle = label(&mut world, 3, "Idle");
        let draining = label(&mut world, 9, "Draining");
        for index in [0, 1, 2, 4, 5, 6, 8] {
            label(&mut world, index, "Allocated");
        }
        world.gd.spec.replicas = Some(8);
        passes(&mut world, 4);
        let candidates: BTreeSet<String> = preparing(&world).into_iter().collect();
        assert_eq!(candidates, [waiting, idle, draining].into_iter().collect(), "2 + 1 extra, by declared state");
    }

    #[test]
    fn a_candidate_whose_hook_fails_is_skipped_and_another_starts() {
        let mut world = racing(10, Some(IntOrString::Int(1)));
        world.gd.spec.replicas = Some(8);
        passes(&mut world, 4);
        let candidates = preparing(&world);
        assert_eq!(candidates.len(), 3, "2 + 1 extra: {candidates:?}");
        let loser = candidates[0].clone();
        set(&mut world, std::slice::from_ref(&loser), HookPhase::Failed);
        let (created, deleted) = passes(&mut world, 4);
        assert_eq!((created, deleted.len()), (0, 0));
        let now = preparing(&world);
        assert_eq!(now.len(), 3, "a replacement races: {now:?}");
        assert!(!now.contains(&loser), "the loser is not held");
        let pod = world.active().into_iter().find(|p| p.metadata.name.as_deref() == Some(loser.as_str())).cloned();
        let pod = pod.expect("the loser still serves");
        assert_eq!(lifecycle::state_of(&pod), LifecycleState::Normal);
        assert!(common::pod::annotation(&pod, SKIPPED).is_some());
        assert!(common::pod::annotation(&pod, keys::GAME_POD_DELETING).is_none());
        assert!(!world.hook_runs.iter().any(|r| pod_of(r) == loser), "its failed run is removed");

        // Two win: deleted, the third released; once no scale-in is wanted the mark goes.
        set(&mut world, &now[..2], HookPhase::Successful);
        let (created, deleted) = passes(&mut world, 4);
        assert_eq!(created, 0);
        assert_eq!(deleted.iter().collect::<BTreeSet<_>>(), now[..2].iter().collect::<BTreeSet<_>>());
        assert_eq!(names(&world).len(), 8);
        assert!(preparing(&world).is_empty());
        assert!(world.active().iter().all(|p| common::pod::annotation(p, SKIPPED).is_none()), "marks cleared");
    }

    #[test]
    fn scaling_back_up_mid_race_releases_the_candidates_without_churn() {
        let mut world = racing(10, None);
        let before = names(&world);
        world.gd.spec.replicas = Some(7);
        passes(&mut world, 4);
        assert_eq!(preparing(&world).len(), 6);
        world.gd.spec.replicas = Some(10);
        let (created, deleted) = passes(&mut world, 4);
        assert_eq!((created, deleted.len()), (0, 0), "no pod created or deleted");
        assert!(preparing(&world).is_empty());
        assert_eq!(names(&world), before);
        assert!(world.hook_runs.is_empty());
    }

    #[test]
    fn candidates_stay_within_max_unavailable() {
        // maxUnavailable 1 of 7: 10 − (7 − 1) = 4 pods may leave service, so 4 of the 6 candidates start.
        let mut world = racing(10, None);
        world.gd.spec.update_strategy.max_unavailable = Some(IntOrString::Int(1));
        world.gd.spec.replicas = Some(7);
        passes(&mut world, 4);
        assert_eq!(preparing(&world).len(), 4);
    }

    /// 10 pods, race to empty with a cost probe, no extra candidate.
    fn probing(timeout: Option<i32>) -> World {
        let mut world = racing(10, Some(IntOrString::Int(0)));
        let mut template = crate::fixtures::hook_template();
        template.metadata.name = Some("cost".into());
        world.hook_templates.push(template);
        let policy = world.gd.spec.scale_strategy.as_mut().and_then(|s| s.scale_in_policy.as_mut()).expect("policy");
        policy.cost_probe =
            Some(common::api::CostProbe { template_name: "cost".into(), args: Vec::new(), timeout_seconds: timeout });
        world
    }

    fn probes(world: &World) -> Vec<String> {
        world
            .hook_runs
            .iter()
            .filter(|r| {
                r.metadata.labels.as_ref().and_then(|l| l.get(keys::HOOKRUN_TYPE)).map(String::as_str)
                    == Some(super::COST_PROBE)
            })
            .map(|r| pod_of(r))
            .collect()
    }

    /// Answers every probe run: `cost(pod)`.
    fn answer(world: &mut World, cost: impl Fn(&str) -> String) {
        for run in &mut world.hook_runs {
            if run.metadata.name.as_deref().is_some_and(|n| n.starts_with("costprobe-")) {
                let value = cost(&pod_of(run));
                std::sync::Arc::make_mut(run).status = Some(
                    serde_json::from_value(json!({
                        "phase": "Successful",
                        "metricResults": [{"name": "m", "phase": "Successful", "measurements": [{"value": value}]}],
                    }))
                    .expect("valid status"),
                );
            }
        }
    }

    #[test]
    fn with_the_cost_probe_the_cheapest_race_first() {
        let mut world = probing(None);
        let all: Vec<String> = names(&world).into_iter().collect();
        world.gd.spec.replicas = Some(7);
        passes(&mut world, 3);
        // Every pod is asked; nothing starts while the answers are awaited.
        assert_eq!(probes(&world).len(), 10, "{:?}", probes(&world));
        assert!(preparing(&world).is_empty(), "no candidate before the answers: {:?}", preparing(&world));
        // Costs against the name order: the last three names are the cheapest.
        let rank = |pod: &str| all.iter().position(|p| p == pod).expect("known pod");
        answer(&mut world, |pod| (100 - rank(pod)).to_string());
        passes(&mut world, 2);
        let mut candidates = preparing(&world);
        candidates.sort();
        assert_eq!(candidates, all[7..].to_vec(), "the 3 cheapest race");
        // The decided pods' probe runs are gone; the others stay while the scale-in lasts.
        let asked = probes(&world);
        assert!(candidates.iter().all(|c| !asked.contains(c)), "{asked:?}");
        assert_eq!(asked.len(), 7);
        // They win: deleted; no scale-in left, so every probe run is removed.
        set(&mut world, &candidates, HookPhase::Successful);
        let (created, deleted) = passes(&mut world, 4);
        assert_eq!(created, 0);
        assert_eq!(deleted.iter().cloned().collect::<BTreeSet<_>>(), candidates.iter().cloned().collect());
        assert!(probes(&world).is_empty(), "{:?}", probes(&world));
        assert!(world.hook_runs.is_empty());
    }

    #[test]
    fn pods_without_a_cost_follow_those_with_one() {
        let mut world = probing(None);
        let all: Vec<String> = names(&world).into_iter().collect();
        world.gd.spec.replicas = Some(7);
        passes(&mut world, 2);
        // Only the last two pods answer a number; the first one, a cheap-looking text.
        let (last, second_last, first) = (all[9].clone(), all[8].clone(), all[0].clone());
        answer(&mut world, |pod| {
            if pod == last {
                "3".into()
            } else if pod == second_last {
                "1".into()
            } else if pod == first {
                "none".into()
            } else {
                "oops".into()
            }
        });
        passes(&mut world, 2);
        let candidates = preparing(&world);
        assert_eq!(candidates.len(), 3, "{candidates:?}");
        assert!(candidates.contains(&last) && candidates.contains(&second_last), "{candidates:?}");
    }

    #[test]
    fn without_an_answer_candidates_start_at_the_timeout_in_deletion_order() {
        let mut world = probing(Some(10));
        world.gd.spec.replicas = Some(7);
        passes(&mut world, 5);
        assert!(preparing(&world).is_empty(), "waits for the probes");
        passes(&mut world, 10);
        assert_eq!(preparing(&world).len(), 3, "started at the timeout");
    }

    #[test]
    fn scaling_back_up_removes_the_probe_runs() {
        let mut world = probing(None);
        world.gd.spec.replicas = Some(7);
        passes(&mut world, 2);
        assert_eq!(probes(&world).len(), 10);
        world.gd.spec.replicas = Some(10);
        let (created, deleted) = passes(&mut world, 2);
        assert_eq!((created, deleted.len()), (0, 0));
        assert!(world.hook_runs.is_empty(), "{:?}", probes(&world));
    }

    #[test]
    fn a_lost_candidate_is_held_when_no_pod_is_left_to_replace_it() {
        // 3 pods, 2 to delete, 1 extra: every pod races; a failure has no replacement and is held as by default.
        let mut world = racing(3, None);
        world.gd.spec.replicas = Some(1);
        passes(&mut world, 4);
        let candidates = preparing(&world);
        assert_eq!(candidates.len(), 3);
        set(&mut world, &candidates[..1], HookPhase::Failed);
        passes(&mut world, 3);
        assert!(preparing(&world).contains(&candidates[0]), "held: nobody can take its place");
    }
}
