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
//! Crash safety: every input is in the API — in-flight candidates are the pods in `PreparingDelete`, their
//! standing is their HookRun's phase, skipped pods carry [`SKIPPED`] (removed once no scale-in is wanted).

use std::cmp::Ordering;

use common::api::gamedeployment::MAX_RACE_EXTRA_CANDIDATES;
use common::api::{HookPhase, ScaleInMode, ScaleInPolicy};
use common::intstr::{self, Rounding};
use serde_json::json;

use super::super::draft::Draft;
use super::super::housekeeping::back_to_normal;
use super::super::settings::{PodInfo, Settings};
use crate::gate::{self, DeleteCause, GateKind, GateRequest};
use crate::lifecycle::{self, Handler, LifecycleState};
use crate::{patch, priority};

/// On a pod whose pre-delete hook failed in a race to empty: when it was skipped. It is not a candidate again for
/// as long as others are (the race would otherwise restart its hook at once); removed when no scale-in is wanted.
pub(crate) const SKIPPED: &str = "gamedeployment.tkex.tencent.com/race-skipped";

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

/// The race order of a group: in-flight pods first, pods not skipped before skipped ones, then
/// [`priority::deletion_order`] (unavailable pods, node and pod deletion costs, seniority).
fn race_order(settings: &Settings<'_>, a: &PodInfo<'_>, b: &PodInfo<'_>) -> Ordering {
    let key = |i: &PodInfo<'_>| (i.state != LifecycleState::PreparingDelete, skipped(i));
    key(a).cmp(&key(b)).then_with(|| priority::deletion_order(a.pod, b.pod, &settings.costs))
}

fn skipped(info: &PodInfo<'_>) -> bool {
    common::pod::annotation(info.pod, SKIPPED).is_some()
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
    draft: &mut Draft,
) {
    let mut group: Vec<&PodInfo<'_>> = group.into_iter().filter(|i| !draft.is_touched(i.name)).collect();
    group.sort_by(|a, b| race_order(settings, a, b));
    let entries: Vec<Entry> = group
        .iter()
        .map(|i| Entry {
            standing: standing(settings, i),
            in_flight: i.state == LifecycleState::PreparingDelete,
            skipped: skipped(i),
        })
        .collect();
    let moves = decide(&entries, wanted, extra_candidates(policy, wanted), true);
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

/// No scale-in is wanted: pods skipped by an earlier race lose their mark (they are ordinary candidates next time).
pub(super) fn clear_marks(infos: &[PodInfo<'_>], draft: &mut Draft) {
    for info in infos.iter().filter(|i| skipped(i) && !i.state.is_preparing()) {
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

    #[test]
    fn extra_candidates_are_bounded_by_the_pods_to_delete_and_100() {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let with = |v: Option<IntOrString>| ScaleInPolicy { mode: ScaleInMode::RaceToEmpty, extra_candidates: v };
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
    use crate::planner::world::World;

    fn racing(replicas: i32, extra: Option<IntOrString>) -> World {
        let mut gd = gd(replicas, "RollingUpdate");
        // A candidate in PreparingDelete counts as unavailable: 50% of 7 leaves room for 6 (10 − (7 − 3)).
        gd.spec.update_strategy.max_unavailable = Some(IntOrString::String("50%".into()));
        gd.spec.pre_delete_update_strategy =
            Some(serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("valid strategy"));
        gd.spec.scale_strategy = Some(GameDeploymentScaleStrategy {
            scale_in_policy: Some(ScaleInPolicy { mode: ScaleInMode::RaceToEmpty, extra_candidates: extra }),
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
                run.status = Some(HookRunStatus { phase: Some(phase), ..Default::default() });
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
