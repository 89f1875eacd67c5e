//! How far the pods are from the spec, in numbers, computed once per pass — OpenKruise's `expectationDiffs`
//! (`calculateDiffsWithExpectation`). [`compute`] is the only place these counts are worked out; the scale and
//! update steps only pick pods to match them.
//!
//! - surge (recreate and in-place updates, as CloneSet; not hot patches): `min(maxSurge, max(update, pods named for
//!   deletion that the budget cannot let go))` extra pods (Kruise's `updateSurge` and `scaleSurge`), counting only old pods the rollout can move (a quarantined server is one of the replicas, not a pod to
//!   replace); while paused only the surge pods that exist (a paused rollout neither adds nor removes pods);
//! - the unavailable budget: `available pods − max(replicas − maxUnavailable, 0)` available pods may be taken
//!   down this pass (by scale-in deletions and by updates alike; unavailable pods cost nothing);
//! - scale-in (`pods − podsToDelete − (replicas + surge)`): old-revision pods first, down to `partition`, then
//!   updated pods;
//! - scale-out (`replicas + surge − pods`), capped by `createBatch` minus the pods not yet ready (the batch):
//!   the first `partition − old pods` new pods are of the current revision (so scaling out mid-rollout keeps
//!   `partition` pods old), the rest of the update revision; those beyond `replicas − pods` are surge;
//! - update: old pods (not named in `podsToDelete`) beyond the partition, but no more than the updated pods still
//!   missing from `replicas − partition` (Kruise's `updateNum = min(updateOldDiff, −updateNewDiff)`): a surge pod
//!   counts as one of those, so the last old pod is scaled in rather than updated and then deleted as surplus.
//!
//! A quarantined server (`Maintaining`, [`PodInfo::quarantined`]) is never a scale-in victim nor an update: it
//! keeps its place among the pods (and, on the old revision, counts towards the partition), and the budget's floor
//! leaves it out (`replicas − quarantined − maxUnavailable`), so one server in maintenance does not stall a rollout
//! whose `maxUnavailable` is 1.
//!
//! All arithmetic saturates: an old CRD without maxima can hand in `i32::MAX` for any of these.

use super::settings::{PodInfo, Settings, count, count_where};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Diffs {
    /// Pods kept on the old revision this pass.
    pub partition: i32,
    /// Extra pods above `replicas` this pass.
    pub surge: i32,
    /// Available pods this pass may take down.
    pub budget: i32,
    /// Scale-in: old-revision pods to delete.
    pub delete_old: i32,
    /// Scale-in: updated pods to delete.
    pub delete_new: i32,
    /// Pods to create this pass (already capped by `createBatch`).
    pub create: i32,
    /// The first this many created pods are of the current (old) revision.
    pub create_old: i32,
    /// The first this many created pods replace missing replicas; the rest are surge.
    pub create_for_replicas: i32,
    /// Old pods (not named in `podsToDelete`) that should move to the update revision.
    pub update: i32,
}

impl Diffs {
    /// The update count once `elsewhere` of the old pods were claimed by another step of the pass (they stay
    /// where they are this pass, like pods of the partition).
    pub fn update_after(&self, elsewhere: i32) -> i32 {
        self.update.saturating_sub(elsewhere).max(0)
    }
}

/// The numbers of this pass.
pub(crate) fn compute(settings: &Settings<'_>, infos: &[PodInfo<'_>]) -> Diffs {
    let partition = settings.partition;
    let pods = count(infos.len());
    let old = count_where(infos, |i| !i.updated);
    let specified = count_where(infos, |i| i.specified);
    let old_kept = count_where(infos, |i| !i.updated && !i.specified);
    let quarantined = count_where(infos, |i| i.quarantined && !i.specified);
    // The pods the operator may delete or update (not quarantined).
    let old_movable = count_where(infos, |i| !i.updated && !i.specified && !i.quarantined);
    let new_movable = count_where(infos, |i| i.updated && !i.specified && !i.quarantined);
    // The old pods this rollout will still move: those beyond the partition, but never a quarantined server (it is
    // one of the replicas and stays on its revision), so a surge pod is never asked for on its behalf.
    let to_move = (old - partition).max(0).min(old_movable);
    // Kruise's `updateNewDiff`: how many more updated pods the rollout wants — `replicas − partition`, less the old
    // pods that stay (quarantined servers beyond the partition), less the updated pods there are. A surge pod is one
    // of them, so it is not counted twice: with `maxSurge: 1` and 6 old pods, 5 are updated and the 6th is the one
    // scaled in at the end (never a pod this rollout has just updated).
    let staying_old = partition.max(old_kept - old_movable);
    let new_kept = count_where(infos, |i| i.updated && !i.specified);
    let new_missing = settings.replicas.saturating_sub(staying_old).saturating_sub(new_kept).max(0);
    // Kruise's `updateNum` (and `updateSurge`): the smaller of the two sides.
    let update = to_move.min(new_missing).min((old_kept - partition).max(0));
    // Kruise's `scaleSurge`: pods named for deletion are replaced first by surge pods as far as the unavailable
    // budget would not let them go (so `maxUnavailable: 0` with `podsToDelete` still moves).
    let unavailable_kept = count_where(infos, |i| !i.specified && !i.quarantined && !i.update_available());
    let scale_surge =
        unavailable_kept.saturating_add(specified).saturating_sub(settings.max_unavailable).max(0).min(specified);
    let mut surge = if settings.max_surge > 0 { settings.max_surge.min(update.max(scale_surge)) } else { 0 };
    if settings.paused {
        // Paused freezes the pod set: surge pods that exist stay (deleting them, or old pods in their place, would
        // move the rollout), none are added.
        surge = surge.min(pods.saturating_sub(specified).saturating_sub(settings.replicas).max(0));
    }
    // Kruise's `useSurgeOldRevision`: surge pods that stand in for old pods named for deletion are of the old
    // revision, so the partition keeps its old pods once those are gone.
    let specified_new = count_where(infos, |i| i.specified && i.updated);
    let surge_old = if scale_surge >= update { surge.min((scale_surge - specified_new).max(0)) } else { 0 };
    let expected = settings.replicas.saturating_add(surge);
    let available = count_where(infos, |i| i.update_available());
    let mut diffs = Diffs {
        partition,
        surge,
        // At most every available pod (maxUnavailable above replicas allows no more); saturating throughout.
        budget: available
            .saturating_sub(
                settings.replicas.saturating_sub(quarantined).saturating_sub(settings.max_unavailable).max(0),
            )
            .max(0),
        update,
        ..Diffs::default()
    };
    let down = pods.saturating_sub(specified).saturating_sub(expected);
    if down > 0 {
        let from_old = down.min((old_kept - partition).max(0)).min(old_movable);
        let from_new = (down - from_old).min(new_movable);
        diffs.delete_old = (down - from_new).min(old_movable);
        diffs.delete_new = from_new;
    }
    let up = expected.saturating_sub(pods);
    if up > 0 {
        let not_ready = count_where(infos, |i| !i.ready);
        let window = settings.create_batch.map_or(up, |batch| batch.saturating_sub(not_ready).max(0));
        // scaleStrategy.maxUnavailable (CloneSet `scaleUpLimit`): unavailable pods use up the room for new ones.
        let unavailable = count_where(infos, |i| !i.specified && !i.quarantined && !i.update_available());
        let limit = settings.scale_max_unavailable.map_or(up, |max| max.saturating_sub(unavailable).max(0));
        diffs.create = up.min(window).min(limit);
        diffs.create_old = diffs.create.min(partition.saturating_add(surge_old).saturating_sub(old).max(0));
        diffs.create_for_replicas = settings.replicas.saturating_sub(pods).max(0);
    }
    diffs
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::fixtures::{self, gd};
    use crate::planner::settings::builder::{OLD, Pass};

    fn int(n: i32) -> Option<IntOrString> {
        Some(IntOrString::Int(n))
    }

    fn percent(p: &str) -> Option<IntOrString> {
        Some(IntOrString::String(p.into()))
    }

    struct Row {
        name: &'static str,
        strategy: &'static str,
        replicas: i32,
        partition: Option<IntOrString>,
        max_unavailable: Option<IntOrString>,
        max_surge: Option<IntOrString>,
        paused: bool,
        create_batch: Option<IntOrString>,
        old: usize,
        updated: usize,
        not_ready_old: usize,
        want: Diffs,
    }

    fn row(name: &'static str, strategy: &'static str, replicas: i32, old: usize, updated: usize) -> Row {
        Row {
            name,
            strategy,
            replicas,
            partition: None,
            max_unavailable: None,
            max_surge: None,
            paused: false,
            create_batch: None,
            old,
            updated,
            not_ready_old: 0,
            want: Diffs::default(),
        }
    }

    #[test]
    fn table() {
        let rows = [
            Row {
                max_surge: int(2),
                max_unavailable: int(0),
                want: Diffs { surge: 2, create: 2, update: 4, ..Diffs::default() },
                ..row("surge creates first, no budget", "RollingUpdate", 4, 4, 0)
            },
            Row {
                max_surge: int(5),
                max_unavailable: int(1),
                partition: int(2),
                // Surge never exceeds the pods still to move.
                want: Diffs { partition: 2, surge: 2, budget: 1, create: 2, update: 2, ..Diffs::default() },
                ..row("surge capped by old pods beyond the partition", "RollingUpdate", 4, 4, 0)
            },
            Row {
                max_surge: int(2),
                // As CloneSet: surge pods first for an in-place update too; 20% of 4 is 0 unavailable.
                want: Diffs { surge: 2, create: 2, update: 4, budget: 0, ..Diffs::default() },
                ..row("surge for in-place updates", "InplaceUpdate", 4, 4, 0)
            },
            Row {
                max_surge: int(1),
                max_unavailable: int(0),
                // Kruise's `calculateDiffsWithExpectation`: `updateNum = min(updateOldDiff 6, −updateNewDiff 5)`; the
                // surge pod is one of the 6 updated pods wanted, so one old pod is left to be scaled in at the end.
                want: Diffs { surge: 1, budget: 1, update: 5, ..Diffs::default() },
                ..row("the surge pod counts towards replicas − partition", "InplaceUpdate", 6, 6, 1)
            },
            Row {
                max_surge: int(1),
                max_unavailable: int(0),
                // The end of that rollout: 1 old, 6 new. Nothing left to update, no surge: the old pod is scaled in.
                want: Diffs { budget: 1, delete_old: 1, ..Diffs::default() },
                ..row("the last old pod is scaled in, not updated", "InplaceUpdate", 6, 1, 6)
            },
            Row {
                max_surge: int(2),
                want: Diffs { update: 4, budget: 1, ..Diffs::default() },
                ..row("no surge for hot patches", "HotPatchUpdate", 4, 4, 0)
            },
            Row {
                partition: int(2),
                max_unavailable: int(2),
                want: Diffs { partition: 2, budget: 2, update: 4, ..Diffs::default() },
                ..row("int partition", "InplaceUpdate", 6, 6, 0)
            },
            Row {
                partition: percent("50%"),
                max_unavailable: percent("100%"),
                // 50% of 5 rounds up to 3 kept, as CloneSet (`intstr::partition`); 100% of 5 is 5 unavailable.
                want: Diffs { partition: 3, budget: 5, update: 2, ..Diffs::default() },
                ..row("percent partition", "InplaceUpdate", 5, 5, 0)
            },
            Row {
                partition: int(9),
                want: Diffs { partition: 3, budget: 1, ..Diffs::default() },
                ..row("partition capped at replicas", "InplaceUpdate", 3, 3, 0)
            },
            Row {
                max_unavailable: int(0),
                max_surge: int(0),
                // Both 0 would deadlock: one pod may be unavailable (Kubernetes fenceposts).
                want: Diffs { budget: 1, update: 3, ..Diffs::default() },
                ..row("maxUnavailable 0 and maxSurge 0", "RollingUpdate", 3, 3, 0)
            },
            Row {
                want: Diffs { budget: 1, update: 6, ..Diffs::default() },
                ..row("default maxUnavailable 20% rounds down", "InplaceUpdate", 6, 6, 0)
            },
            Row {
                max_surge: int(2),
                max_unavailable: int(0),
                paused: true,
                // No new surge while paused; the update count stays (status says "Paused"), the update step waits.
                want: Diffs { update: 4, ..Diffs::default() },
                ..row("paused", "RollingUpdate", 4, 4, 0)
            },
            Row {
                max_surge: int(2),
                max_unavailable: int(0),
                paused: true,
                // Paused with 2 surge pods (4 old + 2 new for 4 replicas): they stay, and no old pod is deleted in
                // their place (the rollout does not advance while paused). 2 old pods are left to update: the 2 new
                // ones already count towards `replicas − partition`.
                want: Diffs { surge: 2, budget: 2, update: 2, ..Diffs::default() },
                ..row("paused with surge pods deletes nothing", "RollingUpdate", 4, 4, 2)
            },
            Row {
                partition: int(1),
                max_unavailable: int(2),
                // 5 pods, 3 wanted: old pods go first, down to the partition. Nothing to update: the 2 new pods are
                // all `replicas − partition` wants (Kruise's `updateNewDiff` is 0).
                want: Diffs { partition: 1, budget: 4, delete_old: 2, update: 0, ..Diffs::default() },
                ..row("scale-in during an update takes old pods", "InplaceUpdate", 3, 3, 2)
            },
            Row {
                partition: int(2),
                max_unavailable: int(2),
                // Only one old pod is beyond the partition: the second deletion takes an updated pod (and none is
                // updated: 2 new pods are more than `replicas − partition` already).
                want: Diffs { partition: 2, budget: 4, delete_old: 1, delete_new: 1, update: 0, ..Diffs::default() },
                ..row("scale-in during an update keeps the partition", "InplaceUpdate", 3, 3, 2)
            },
            Row {
                partition: int(3),
                // Scale-out mid-rollout: one new pod of the old revision keeps 3 old.
                want: Diffs { partition: 3, create: 4, create_old: 1, create_for_replicas: 4, ..Diffs::default() },
                ..row("scale-out during an update keeps the partition", "InplaceUpdate", 6, 2, 0)
            },
            Row {
                create_batch: int(3),
                not_ready_old: 1,
                // 1 pod not ready yet: 2 more may start.
                want: Diffs { create: 2, create_for_replicas: 9, update: 1, ..Diffs::default() },
                ..row("createBatch counts pods not ready yet", "RollingUpdate", 10, 0, 0)
            },
            // Values at i32::MAX (an old CRD has no maxima): saturating arithmetic, no overflow panic.
            Row {
                max_unavailable: int(i32::MAX),
                // Every available pod may go, no more.
                want: Diffs { budget: 6, update: 6, ..Diffs::default() },
                ..row("maxUnavailable i32::MAX", "InplaceUpdate", 6, 6, 0)
            },
            Row {
                max_surge: int(i32::MAX),
                max_unavailable: int(i32::MAX),
                partition: int(i32::MAX),
                create_batch: int(i32::MAX),
                // The partition is capped at replicas (nothing to update, so no surge); the rest is creates.
                want: Diffs {
                    partition: i32::MAX,
                    budget: 4,
                    create: i32::MAX - 4,
                    create_old: i32::MAX - 4,
                    create_for_replicas: i32::MAX - 4,
                    ..Diffs::default()
                },
                ..row("everything i32::MAX", "RollingUpdate", i32::MAX, 4, 0)
            },
            Row {
                max_surge: int(i32::MAX),
                max_unavailable: int(0),
                // Surge limited by the old pods; replicas + surge saturates.
                want: Diffs {
                    surge: 4,
                    create: i32::MAX - 4,
                    create_for_replicas: i32::MAX - 4,
                    update: 4,
                    ..Diffs::default()
                },
                ..row("replicas and maxSurge i32::MAX", "RollingUpdate", i32::MAX, 4, 0)
            },
        ];
        for r in rows {
            let unbounded_partition = r.partition == int(i32::MAX);
            let mut g = gd(r.replicas, r.strategy);
            let strategy = &mut g.spec.update_strategy;
            (strategy.partition, strategy.max_unavailable, strategy.max_surge, strategy.paused) =
                (r.partition, r.max_unavailable, r.max_surge, r.paused);
            if let Some(batch) = r.create_batch {
                g.spec.scale_strategy = Some(common::api::GameDeploymentScaleStrategy {
                    pods_to_delete: vec![],
                    create_batch: Some(batch),
                    ..Default::default()
                });
            }
            let mut pass = Pass::new(g).old(r.old).updated(r.updated);
            for i in 0..r.not_ready_old {
                pass = pass.pod(fixtures::pod(&format!("game-s{i}")).serving(OLD, "game:0", 10).not_ready().build());
            }
            let mut settings = pass.settings();
            if r.replicas > common::api::gamedeployment::MAX_REPLICAS {
                // The settings clamp replicas to the CRD maximum; the diffs must not overflow even past it.
                settings.replicas = r.replicas;
                settings.partition = if unbounded_partition { r.replicas } else { settings.partition };
            }
            let infos = pass.infos(&settings);
            assert_eq!(compute(&settings, &infos), r.want, "{}", r.name);
        }
    }

    #[test]
    fn pods_to_delete_are_replaced_not_counted_as_scale_in() {
        let mut g = gd(3, "InplaceUpdate");
        g.spec.scale_strategy = Some(common::api::GameDeploymentScaleStrategy {
            pods_to_delete: vec!["game-o0".into()],
            create_batch: None,
            ..Default::default()
        });
        let pass = Pass::new(g).old(3);
        let settings = pass.settings();
        let diffs = compute(&settings, &pass.infos(&settings));
        // The named pod is deleted by its own rule; it is neither a scale-in victim nor an update candidate.
        assert_eq!((diffs.delete_old + diffs.delete_new, diffs.create, diffs.update), (0, 0, 2));
        assert_eq!(diffs.update_after(1), 1);
        assert_eq!(diffs.update_after(5), 0);
    }

    #[test]
    fn scale_strategy_max_unavailable_limits_scale_out_by_the_unavailable_pods() {
        // CloneSet `scaleStrategy.maxUnavailable`: 5 wanted, 3 exist of which 1 is not ready; at most 2 unavailable.
        let run = |limit: Option<IntOrString>| {
            let mut g = gd(5, "RollingUpdate");
            g.spec.scale_strategy =
                Some(common::api::GameDeploymentScaleStrategy { max_unavailable: limit, ..Default::default() });
            let pass =
                Pass::new(g).old(2).pod(fixtures::pod("game-sick").serving(OLD, "game:0", 10).not_ready().build());
            let settings = pass.settings();
            compute(&settings, &pass.infos(&settings)).create
        };
        assert_eq!(run(None), 2, "no limit");
        assert_eq!(run(int(2)), 1, "2 − 1 unavailable");
        assert_eq!(run(int(1)), 0, "the not-ready pod uses up the room");
        assert_eq!(run(percent("40%")), 1, "40% of 5 = 2, rounded up");
    }
}
