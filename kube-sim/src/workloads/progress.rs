//! A Deployment's status (`calculateStatus`, `syncRolloutStatus` in
//! `pkg/controller/deployment/{sync,progress}.go`): the replica counts summed over its
//! ReplicaSets, the `Available` condition, and the `Progressing` condition that `kubectl rollout
//! status` reads — `NewReplicaSetCreated`, `ReplicaSetUpdated` while counts improve,
//! `NewReplicaSetAvailable` once complete, `ProgressDeadlineExceeded` when nothing improved for
//! `progressDeadlineSeconds`.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

use crate::meta;

/// `math.MaxInt32`: `progressDeadlineSeconds` meaning "no deadline".
const NO_DEADLINE: i64 = i32::MAX as i64;

fn count(obj: &Value, path: &[&str]) -> i64 {
    meta::lookup(obj, path).and_then(Value::as_i64).unwrap_or(0)
}

/// The deployment's conditions.
pub(super) fn conditions(status: &Value) -> Vec<Value> {
    status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn find<'a>(conds: &'a [Value], type_: &str) -> Option<&'a Value> {
    conds.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

fn field<'a>(c: &'a Value, f: &str) -> &'a str {
    c.get(f).and_then(Value::as_str).unwrap_or("")
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": type_, "status": status, "lastUpdateTime": now, "lastTransitionTime": now, "reason": reason, "message": message})
}

/// `SetDeploymentCondition`: the same status and reason leave the condition as it is; a new one
/// keeps `lastTransitionTime` when the status did not change.
pub(super) fn set_condition(conds: &mut Vec<Value>, mut new: Value) {
    let type_ = field(&new, "type").to_string();
    if let Some(i) = conds.iter().position(|c| field(c, "type") == type_) {
        let cur = &conds[i];
        if field(cur, "status") == field(&new, "status") && field(cur, "reason") == field(&new, "reason") {
            return;
        }
        if field(cur, "status") == field(&new, "status") {
            new["lastTransitionTime"] = cur["lastTransitionTime"].clone();
        }
        conds.remove(i);
    }
    conds.push(new);
}

/// What the status is computed from.
pub(super) struct Inputs<'a> {
    pub deployment: &'a Value,
    /// The ReplicaSet with the current template, if there is one.
    pub new_rs: Option<&'a Value>,
    /// Every ReplicaSet of the Deployment, the new one included.
    pub all: &'a [&'a Value],
    /// The Deployment's `maxUnavailable` (0 for Recreate).
    pub max_unavailable: i64,
    /// Conditions as they stand after this sync's actions (a `NewReplicaSetCreated` just set).
    pub conditions: Vec<Value>,
    pub paused: bool,
    pub now: Timestamp,
}

/// The status to write and, while a rollout is under way with a deadline, how long until the
/// deadline is to be checked.
pub(super) fn status(i: Inputs<'_>) -> (Value, Option<std::time::Duration>) {
    let d = i.deployment;
    let desired = count(d, &["spec", "replicas"]);
    let now = meta::format_time(i.now);
    let sum = |path: &[&str]| i.all.iter().map(|rs| count(rs, path)).sum::<i64>();
    let replicas = sum(&["status", "replicas"]);
    let updated = i.new_rs.map_or(0, |rs| count(rs, &["status", "replicas"]));
    let ready = sum(&["status", "readyReplicas"]);
    let available = sum(&["status", "availableReplicas"]);
    let terminating = sum(&["status", "terminatingReplicas"]);
    let unavailable = (sum(&["spec", "replicas"]) - available).max(0);
    let mut conds = i.conditions;
    let max_unavailable = i.max_unavailable.min(desired).max(0);
    if available >= desired - max_unavailable {
        set_condition(
            &mut conds,
            condition("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.", &now),
        );
    } else {
        set_condition(
            &mut conds,
            condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                &now,
            ),
        );
    }
    let old = d.get("status").cloned().unwrap_or(json!({}));
    let generation = meta::generation(d);
    let mut recheck = None;
    let deadline =
        meta::lookup(d, &["spec", "progressDeadlineSeconds"]).and_then(Value::as_i64).filter(|s| *s != NO_DEADLINE);
    if i.paused {
        set_condition(
            &mut conds,
            condition("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused", &now),
        );
    } else if let Some(deadline) = deadline {
        let who = match i.new_rs {
            Some(rs) => format!("ReplicaSet {:?}", meta::name(rs)),
            None => format!("Deployment {:?}", meta::name(d)),
        };
        let current = find(&conds, "Progressing").cloned();
        let complete_before =
            current.as_ref().is_some_and(|c| field(c, "reason") == "NewReplicaSetAvailable") && replicas == updated;
        if !complete_before {
            let complete = updated == desired && replicas == desired && available == desired;
            let progressing = updated > count(&old, &["updatedReplicas"])
                || replicas - updated < count(&old, &["replicas"]) - count(&old, &["updatedReplicas"])
                || ready > count(&old, &["readyReplicas"])
                || available > count(&old, &["availableReplicas"]);
            if complete {
                set_condition(
                    &mut conds,
                    condition(
                        "Progressing",
                        "True",
                        "NewReplicaSetAvailable",
                        &format!("{who} has successfully progressed."),
                        &now,
                    ),
                );
            } else if progressing {
                let mut c =
                    condition("Progressing", "True", "ReplicaSetUpdated", &format!("{who} is progressing."), &now);
                if let Some(cur) = &current {
                    if field(cur, "status") == "True" {
                        c["lastTransitionTime"] = cur["lastTransitionTime"].clone();
                    }
                    conds.retain(|x| field(x, "type") != "Progressing");
                }
                conds.push(c);
            } else if let Some(cur) = &current {
                let reason = field(cur, "reason");
                let since = meta::parse_time(field(cur, "lastUpdateTime"));
                let due = since.and_then(|s| s.checked_add(SignedDuration::from_secs(deadline)).ok());
                match due {
                    _ if reason == "ProgressDeadlineExceeded" => {}
                    Some(due) if due < i.now => set_condition(
                        &mut conds,
                        condition(
                            "Progressing",
                            "False",
                            "ProgressDeadlineExceeded",
                            &format!("{who} has timed out progressing."),
                            &now,
                        ),
                    ),
                    Some(due) => {
                        let left = due.duration_since(i.now).as_millis().max(0) as u64 + 1000;
                        recheck = Some(std::time::Duration::from_millis(left));
                    }
                    None => {}
                }
            }
        }
    }
    let mut s = Map::new();
    for (k, v) in [
        ("observedGeneration", generation),
        ("replicas", replicas),
        ("updatedReplicas", updated),
        ("readyReplicas", ready),
        ("availableReplicas", available),
        ("unavailableReplicas", unavailable),
    ] {
        if v != 0 {
            s.insert(k.into(), json!(v));
        }
    }
    s.insert("terminatingReplicas".into(), json!(terminating));
    if let Some(c) = old.get("collisionCount") {
        s.insert("collisionCount".into(), c.clone());
    }
    if !conds.is_empty() {
        s.insert("conditions".into(), Value::Array(conds));
    }
    (Value::Object(s), recheck)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i64, status: Value) -> Value {
        json!({"metadata": {"name": "web", "generation": 3}, "spec": {"replicas": replicas, "progressDeadlineSeconds": 600}, "status": status})
    }

    fn rs(name: &str, replicas: i64, ready: i64, available: i64) -> Value {
        json!({"metadata": {"name": name}, "spec": {"replicas": replicas},
               "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": available}})
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn cond<'a>(status: &'a Value, t: &str) -> &'a Value {
        status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).unwrap()
    }

    #[test]
    fn a_complete_rollout_is_available_and_progressed() {
        let d = deployment(2, json!({}));
        let new = rs("web-1", 2, 2, 2);
        let (s, recheck) = status(Inputs {
            deployment: &d,
            new_rs: Some(&new),
            all: &[&new],
            max_unavailable: 0,
            conditions: vec![],
            paused: false,
            now: at("2026-01-01T00:00:00Z"),
        });
        assert_eq!(s["replicas"], 2);
        assert_eq!(s["updatedReplicas"], 2);
        assert_eq!(s["availableReplicas"], 2);
        assert_eq!(s["observedGeneration"], 3);
        assert_eq!(s.get("unavailableReplicas"), None);
        assert_eq!(cond(&s, "Available")["status"], "True");
        assert_eq!(cond(&s, "Progressing")["reason"], "NewReplicaSetAvailable");
        assert_eq!(cond(&s, "Progressing")["message"], "ReplicaSet \"web-1\" has successfully progressed.");
        assert_eq!(recheck, None);
    }

    #[test]
    fn a_stuck_rollout_times_out_after_the_deadline() {
        let stuck = json!([{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated", "message": "x",
                            "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        let d = deployment(
            2,
            json!({"replicas": 3, "updatedReplicas": 1, "readyReplicas": 2, "availableReplicas": 2, "conditions": stuck}),
        );
        let (new, old) = (rs("web-2", 1, 0, 0), rs("web-1", 2, 2, 2));
        let all = [&new, &old];
        let inputs = |now: &str| Inputs {
            deployment: &d,
            new_rs: Some(&new),
            all: &all,
            max_unavailable: 0,
            conditions: conditions(&d["status"]),
            paused: false,
            now: at(now),
        };
        let (s, recheck) = status(inputs("2026-01-01T00:05:00Z"));
        assert_eq!(cond(&s, "Progressing")["reason"], "ReplicaSetUpdated");
        assert_eq!(recheck, Some(std::time::Duration::from_secs(301)));
        let (s, _) = status(inputs("2026-01-01T00:10:01Z"));
        let c = cond(&s, "Progressing");
        assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("ProgressDeadlineExceeded")));
        assert_eq!(c["message"], "ReplicaSet \"web-2\" has timed out progressing.");
        assert_eq!(cond(&s, "Available")["status"], "True");
    }

    #[test]
    fn progress_renews_the_condition_but_keeps_its_transition_time() {
        let before = json!([{"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated", "message": "x",
                             "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        let d = deployment(2, json!({"replicas": 2, "availableReplicas": 2, "conditions": before}));
        let (new, old) = (rs("web-2", 1, 1, 1), rs("web-1", 2, 2, 2));
        let (s, _) = status(Inputs {
            deployment: &d,
            new_rs: Some(&new),
            all: &[&new, &old],
            max_unavailable: 0,
            conditions: conditions(&d["status"]),
            paused: false,
            now: at("2026-01-01T00:01:00Z"),
        });
        let c = cond(&s, "Progressing");
        assert_eq!(c["reason"], "ReplicaSetUpdated");
        assert_eq!(c["lastUpdateTime"], "2026-01-01T00:01:00Z");
        assert_eq!(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
    }

    #[test]
    fn too_few_available_replicas_make_it_unavailable() {
        let d = deployment(4, json!({}));
        let new = rs("web-1", 4, 2, 2);
        let (s, _) = status(Inputs {
            deployment: &d,
            new_rs: Some(&new),
            all: &[&new],
            max_unavailable: 1,
            conditions: vec![],
            paused: false,
            now: at("2026-01-01T00:00:00Z"),
        });
        assert_eq!(cond(&s, "Available")["reason"], "MinimumReplicasUnavailable");
        assert_eq!(s["unavailableReplicas"], 2);
    }
}
