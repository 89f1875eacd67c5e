//! Scaling: how many pods to create or delete, and which.
//!
//! Counts follow CloneSet's `calculateDiffsWithExpectation` (itself a cleaned-up BCS `calculateDiffs`):
//! - `podsToDelete` pods are deleted first and replaced (the list plus lower replicas is a targeted scale-in);
//! - the target is `replicas + surge`, where surge (RollingUpdate only) is `min(maxSurge, old pods − partition)`;
//! - scale-in takes old-revision pods first, down to `partition`, then updated pods, each group in
//!   [`crate::priority::deletion_order`];
//! - scale-out creates `max(0, partition − old pods)` pods of the current revision (so scaling out mid-rollout
//!   keeps `partition` pods old) and the rest of the update revision;
//! - deleting an available pod costs budget, `maxUnavailable + (pods − replicas) − unavailable pods`, so no
//!   deletion takes availability below `replicas − maxUnavailable`; unavailable pods are deleted freely;
//! - `scaleStrategy.createBatch` caps how many created pods may be not-yet-ready at once (slow start by batch).

pub mod create;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

use crate::action::{Action, CreateReason};
use crate::gate::{DeleteCause, GateKind};
use crate::planner::{Ctx, Draft, PodInfo};
use crate::priority;
use create::{IdSource, NewPod};

/// What scaling did this pass.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Something was created, deleted or moved to a gate state: the update step waits for the next pass.
    pub acted: bool,
    /// A configuration problem that stopped (part of) the scaling; reported as `FailedScale`.
    pub problem: Option<String>,
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Plans this pass's scaling. `namespace_pods` keeps new names unique, `owned` (every owned pod, terminating
/// ones too) keeps indices unique.
pub(crate) fn plan(
    ctx: &Ctx<'_>,
    infos: &[PodInfo<'_>],
    namespace_pods: &[&Pod],
    owned: &[&Pod],
    seed: u64,
    draft: &mut Draft,
) -> Outcome {
    let before = draft.actions.len();
    let mut outcome = Outcome::default();
    let n = count(infos.len());
    let old_count = count(infos.iter().filter(|i| !i.updated).count());
    let surge =
        if ctx.max_surge > 0 && old_count > ctx.partition { ctx.max_surge.min(old_count - ctx.partition) } else { 0 };
    let expected = ctx.replicas + surge;
    let unavailable = count(infos.iter().filter(|i| !i.update_available()).count());
    let mut budget = (ctx.max_unavailable + (n - ctx.replicas) - unavailable).max(0);
    let by_deletion = |a: &&PodInfo<'_>, b: &&PodInfo<'_>| priority::deletion_order(a.pod, b.pod, &ctx.costs);

    // podsToDelete.
    let mut specified: Vec<&PodInfo<'_>> = infos.iter().filter(|i| i.specified).collect();
    specified.sort_by(by_deletion);
    for info in &specified {
        delete(ctx, info, DeleteCause::PodsToDelete, &mut budget, draft);
    }

    // Scale in.
    let down = n - count(specified.len()) - expected;
    if down > 0 {
        let mut old: Vec<&PodInfo<'_>> = infos.iter().filter(|i| !i.specified && !i.updated).collect();
        let mut new: Vec<&PodInfo<'_>> = infos.iter().filter(|i| !i.specified && i.updated).collect();
        old.sort_by(by_deletion);
        new.sort_by(by_deletion);
        let from_old = down.min((count(old.len()) - ctx.partition).max(0));
        let from_new = (down - from_old).min(count(new.len()));
        let from_old = (down - from_new).min(count(old.len()));
        let mut victims: Vec<&PodInfo<'_>> = old.iter().take(usize::try_from(from_old).unwrap_or(0)).copied().collect();
        victims.extend(new.iter().take(usize::try_from(from_new).unwrap_or(0)).copied());
        victims.sort_by(by_deletion);
        for info in victims {
            delete(ctx, info, DeleteCause::ScaleIn, &mut budget, draft);
        }
    }

    // Scale out.
    let up = expected - n;
    if up > 0 {
        let not_ready = count(infos.iter().filter(|i| !i.ready).count());
        let window = ctx.create_batch.map_or(up, |batch| (batch - not_ready).max(0));
        let mut to_create = up.min(window);
        let index = match create::index_range(ctx.gd, ctx.replicas) {
            Ok(range) => range,
            Err(problem) => {
                outcome.problem = Some(problem);
                to_create = 0;
                None
            }
        };
        let mut free_indices = index.map(|range| create::free_indices(range, owned)).unwrap_or_default();
        if index.is_some() && count(free_indices.len()) < to_create {
            outcome.problem = Some(format!(
                "the index range has {} free indices but {to_create} pods are to be created",
                free_indices.len()
            ));
            to_create = count(free_indices.len());
        }
        let old_to_create = to_create.min((ctx.partition - old_count).max(0));
        let for_replicas = (ctx.replicas - n).max(0);
        let taken: BTreeSet<String> = namespace_pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
        let gd_name = ctx.gd.metadata.name.as_deref().unwrap_or("");
        let ids = IdSource::new(seed).unique_ids(gd_name, usize::try_from(to_create).unwrap_or(0), &taken);
        free_indices.reverse();
        for (k, id) in ids.iter().enumerate() {
            let k = count(k);
            let wanted = if k < old_to_create { ctx.current_revision.as_str() } else { ctx.update_revision.as_str() };
            // The current revision always has a template (it is kept in history); fall back to the update
            // revision rather than not creating the pod.
            let (revision, template) = match ctx.templates.get(wanted) {
                Some(t) => (wanted, t),
                None => (ctx.update_revision.as_str(), &ctx.gd.spec.template),
            };
            let pod = create::build(&NewPod {
                gd: ctx.gd,
                template,
                revision,
                id,
                index: if index.is_some() { free_indices.pop() } else { None },
                now: ctx.now,
            });
            let reason = if k < for_replicas { CreateReason::Replicas } else { CreateReason::Surge };
            draft.actions.push(Action::CreatePod { pod: Box::new(pod), reason });
        }
    }
    outcome.acted = draft.actions.len() > before;
    outcome
}

/// Deletes one pod through the gate, paying budget if the pod is available.
fn delete(ctx: &Ctx<'_>, info: &PodInfo<'_>, cause: DeleteCause, budget: &mut i32, draft: &mut Draft) {
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
    if draft.pass_gate(ctx, info, GateKind::Delete(cause)) {
        draft.actions.push(Action::DeletePod { pod: info.pod_ref(), cause });
    }
}
