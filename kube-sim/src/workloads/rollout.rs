//! The Deployment controller's arithmetic (`pkg/controller/deployment/{rolling,recreate}.go` and
//! `util/deployment_util.go`), pure: given the Deployment's strategy and its ReplicaSets' counts,
//! which ReplicaSet goes to how many replicas next.

use serde_json::Value;

/// The counts of one ReplicaSet the decisions read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ReplicaSetCounts {
    pub name: String,
    /// `creationTimestamp` (RFC 3339, so it sorts as text) for oldest-first scale-down.
    pub created: String,
    pub spec_replicas: i64,
    pub status_replicas: i64,
    pub available: i64,
}

/// A ReplicaSet's next `spec.replicas`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Scale {
    pub name: String,
    pub from: i64,
    pub to: i64,
}

/// `intstr.GetScaledValueFromIntOrPercent`.
fn scaled(v: Option<&Value>, total: i64, round_up: bool, default_percent: i64) -> i64 {
    let percent = |p: i64| if round_up { (p * total + 99) / 100 } else { p * total / 100 };
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(p) => percent(p),
            None => s.parse().unwrap_or(0),
        },
        _ => percent(default_percent),
    }
}

/// `ResolveFenceposts`: `(maxSurge, maxUnavailable)` for `desired` replicas; both zero is not
/// allowed, so `maxUnavailable` becomes 1.
pub(super) fn fenceposts(rolling_update: Option<&Value>, desired: i64) -> (i64, i64) {
    let surge = scaled(rolling_update.and_then(|r| r.get("maxSurge")), desired, true, 25);
    let unavailable = scaled(rolling_update.and_then(|r| r.get("maxUnavailable")), desired, false, 25);
    if surge == 0 && unavailable == 0 { (0, 1) } else { (surge, unavailable) }
}

/// `NewRSNewReplicas` for a rolling update: the new ReplicaSet grows as far as `maxSurge` allows.
pub(super) fn new_rs_replicas(desired: i64, max_surge: i64, new_rs: i64, all_spec_replicas: i64) -> i64 {
    let max_total = desired + max_surge;
    if all_spec_replicas >= max_total {
        return new_rs;
    }
    let up = (max_total - all_spec_replicas).min(desired - new_rs);
    new_rs + up.max(0)
}

/// One step of a rolling update (`rolloutRolling`): scale the new ReplicaSet up (or down to
/// `desired`); if it did not move, scale old ones down as far as `maxUnavailable` allows —
/// unhealthy replicas first, then oldest ReplicaSets first.
pub(super) fn rolling_step(
    desired: i64,
    rolling_update: Option<&Value>,
    new: &ReplicaSetCounts,
    old: &[ReplicaSetCounts],
) -> Vec<Scale> {
    let (max_surge, max_unavailable) = fenceposts(rolling_update, desired);
    let all_spec: i64 = new.spec_replicas + old.iter().map(|r| r.spec_replicas).sum::<i64>();
    // reconcileNewReplicaSet
    if new.spec_replicas != desired {
        let to = if new.spec_replicas > desired {
            desired
        } else {
            new_rs_replicas(desired, max_surge, new.spec_replicas, all_spec)
        };
        if to != new.spec_replicas {
            return vec![Scale { name: new.name.clone(), from: new.spec_replicas, to }];
        }
    }
    // reconcileOldReplicaSets
    let old_spec: i64 = old.iter().map(|r| r.spec_replicas).sum();
    if old_spec == 0 {
        return vec![];
    }
    let min_available = desired - max_unavailable;
    let new_unavailable = new.spec_replicas - new.available;
    let max_scaled_down = all_spec - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return vec![];
    }
    let mut sorted: Vec<ReplicaSetCounts> = old.to_vec();
    sorted.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
    let mut targets: Vec<(String, i64, i64)> =
        sorted.iter().map(|r| (r.name.clone(), r.spec_replicas, r.spec_replicas)).collect();
    // cleanupUnhealthyReplicas
    let mut cleaned = 0;
    for (i, r) in sorted.iter().enumerate() {
        if cleaned >= max_scaled_down {
            break;
        }
        if r.spec_replicas == 0 || r.spec_replicas == r.available {
            continue;
        }
        let unhealthy = r.spec_replicas - r.available;
        let down = unhealthy.min(max_scaled_down - cleaned);
        targets[i].2 -= down;
        cleaned += down;
    }
    // scaleDownOldReplicaSetsForRollingUpdate
    let available: i64 = new.available + sorted.iter().map(|r| r.available).sum::<i64>();
    if available > min_available {
        let total = available - min_available;
        let mut done = 0;
        for t in targets.iter_mut() {
            if done >= total {
                break;
            }
            if t.2 == 0 {
                continue;
            }
            let down = t.2.min(total - done);
            t.2 -= down;
            done += down;
        }
    }
    targets.into_iter().filter(|(_, from, to)| from != to).map(|(name, from, to)| Scale { name, from, to }).collect()
}

/// One step of a Recreate rollout: every old ReplicaSet to zero; only once no old pod runs the
/// new one goes to `desired`. `old_pods_running` is `oldPodsRunning` (an old ReplicaSet still
/// reports replicas, or a pod of one has not finished).
pub(super) fn recreate_step(
    desired: i64,
    new: Option<&ReplicaSetCounts>,
    old: &[ReplicaSetCounts],
    old_pods_running: bool,
) -> (Vec<Scale>, bool) {
    let downs: Vec<Scale> = old
        .iter()
        .filter(|r| r.spec_replicas != 0)
        .map(|r| Scale { name: r.name.clone(), from: r.spec_replicas, to: 0 })
        .collect();
    if !downs.is_empty() || old_pods_running {
        return (downs, false);
    }
    match new {
        Some(n) if n.spec_replicas != desired => {
            (vec![Scale { name: n.name.clone(), from: n.spec_replicas, to: desired }], true)
        }
        Some(_) => (vec![], true),
        None => (vec![], true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rs(name: &str, created: &str, spec: i64, available: i64) -> ReplicaSetCounts {
        ReplicaSetCounts {
            name: name.into(),
            created: created.into(),
            spec_replicas: spec,
            status_replicas: spec,
            available,
        }
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        assert_eq!(fenceposts(None, 10), (3, 2));
        assert_eq!(fenceposts(Some(&json!({"maxSurge": 0, "maxUnavailable": 0})), 3), (0, 1));
        assert_eq!(fenceposts(Some(&json!({"maxSurge": "50%", "maxUnavailable": 1})), 3), (2, 1));
        assert_eq!(fenceposts(Some(&json!({"maxSurge": 1, "maxUnavailable": "0%"})), 2), (1, 0));
    }

    #[test]
    fn a_rolling_update_surges_then_waits_for_availability() {
        // 4 replicas, maxSurge 1, maxUnavailable 0: the new set gets one pod.
        let ru = json!({"maxSurge": 1, "maxUnavailable": 0});
        let old = [rs("old", "1", 4, 4)];
        let step = rolling_step(4, Some(&ru), &rs("new", "2", 0, 0), &old);
        assert_eq!(step, vec![Scale { name: "new".into(), from: 0, to: 1 }]);
        // The new pod is not available yet: nothing may go.
        assert!(rolling_step(4, Some(&ru), &rs("new", "2", 1, 0), &old).is_empty());
        // Once it is, one old pod goes.
        let step = rolling_step(4, Some(&ru), &rs("new", "2", 1, 1), &old);
        assert_eq!(step, vec![Scale { name: "old".into(), from: 4, to: 3 }]);
    }

    #[test]
    fn max_unavailable_lets_old_pods_go_before_new_ones_are_ready() {
        let ru = json!({"maxSurge": 0, "maxUnavailable": 1});
        let step = rolling_step(3, Some(&ru), &rs("new", "2", 0, 0), &[rs("old", "1", 3, 3)]);
        assert_eq!(step, vec![Scale { name: "old".into(), from: 3, to: 2 }]);
        let step = rolling_step(3, Some(&ru), &rs("new", "2", 0, 0), &[rs("old", "1", 2, 2)]);
        assert_eq!(step, vec![Scale { name: "new".into(), from: 0, to: 1 }]);
    }

    #[test]
    fn unhealthy_old_replicas_go_first_and_oldest_sets_first() {
        let ru = json!({"maxSurge": 0, "maxUnavailable": 2});
        let old = [rs("older", "1", 2, 2), rs("old", "2", 2, 0)];
        let step = rolling_step(4, Some(&ru), &rs("new", "3", 0, 0), &old);
        // Two unhealthy replicas of "old" can go without losing availability; then nothing more
        // (2 available == 4 - 2).
        assert_eq!(step, vec![Scale { name: "old".into(), from: 2, to: 0 }]);
    }

    #[test]
    fn a_finished_rollout_follows_the_replica_count() {
        assert_eq!(
            rolling_step(5, None, &rs("new", "1", 3, 3), &[]),
            vec![Scale { name: "new".into(), from: 3, to: 5 }]
        );
        assert_eq!(
            rolling_step(1, None, &rs("new", "1", 3, 3), &[]),
            vec![Scale { name: "new".into(), from: 3, to: 1 }]
        );
    }

    /// kube-controller-manager spreads a resize in the middle of a rollout over the ReplicaSets in
    /// proportion to their size (`scale`); kube-sim lets the rolling steps absorb it: the new
    /// ReplicaSet takes the added replicas.
    #[test]
    fn a_resize_mid_rollout_goes_to_the_new_replica_set() {
        let step = rolling_step(8, None, &rs("new", "2", 2, 2), &[rs("old", "1", 3, 3)]);
        assert_eq!(step, vec![Scale { name: "new".into(), from: 2, to: 7 }]);
    }

    #[test]
    fn recreate_waits_for_old_pods_to_finish() {
        let old = [rs("old", "1", 2, 2)];
        let (s, create) = recreate_step(2, None, &old, true);
        assert_eq!((s, create), (vec![Scale { name: "old".into(), from: 2, to: 0 }], false));
        assert_eq!(recreate_step(2, None, &[rs("old", "1", 0, 0)], true), (vec![], false));
        assert_eq!(recreate_step(2, None, &[rs("old", "1", 0, 0)], false), (vec![], true));
        assert_eq!(
            recreate_step(2, Some(&rs("new", "2", 0, 0)), &[rs("old", "1", 0, 0)], false),
            (vec![Scale { name: "new".into(), from: 0, to: 2 }], true)
        );
    }
}
