//! Pod ordering rules, in one place: which pod is deleted first on scale-in, which is updated first.
//!
//! Both start from Kubernetes `controller.ActivePods` (pods that cost least to lose go first: unscheduled,
//! pending, not ready, recently ready, restarting, young). Deletion adds the deletion costs between readiness and
//! age: node cost (`io.tencent.bcs.dev/node-deletion-cost` on the node, ascending), then pod cost
//! (`controller.kubernetes.io/pod-deletion-cost`, ascending, or descending when the GameDeployment annotation
//! `io.tencent.bcs.dev/pod-deletion-cost-sort-method` is `descend`).
//!
//! Differences from BCS (bug list §7.29): the sort is total and stable (ties end on the name), a missing or
//! unparsable cost is 0 as in Kubernetes (BCS: "delete last"), and a not-ready pod is always deleted before a
//! ready one whatever the costs (BCS lets a low cost override readiness).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use common::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::lifecycle::{self, LifecycleState};

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

fn phase_rank(pod: &Pod) -> u8 {
    match common::pod::phase(pod) {
        Some("Pending") | None => 0,
        Some("Running") => 2,
        _ => 1,
    }
}

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    common::pod::condition(pod, "Ready").filter(|c| c.status == "True")?.last_transition_time.as_ref().map(|t| t.0)
}

fn created(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

/// A cost annotation value; missing or unparsable (or not finite) is 0.
pub fn parse_cost(value: Option<&str>) -> f64 {
    value.and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| v.is_finite()).unwrap_or(0.0)
}

/// The `controller.ActivePods` comparison without its final tie-breakers: `Less` means "less valuable, goes
/// first".
fn availability(a: &Pod, b: &Pod) -> Ordering {
    node_name(a)
        .is_some()
        .cmp(&node_name(b).is_some())
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| common::pod::is_ready(a).cmp(&common::pod::is_ready(b)))
}

fn seniority(a: &Pod, b: &Pod) -> Ordering {
    // Ready more recently goes first (a missing time counts as "just now").
    let ready = match (ready_since(a), ready_since(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    ready
        .then_with(|| common::pod::restart_count(b).cmp(&common::pod::restart_count(a)))
        .then_with(|| created(b).cmp(&created(a)))
        .then_with(|| name(a).cmp(name(b)))
}

/// What deletion order needs besides the pods: node costs and the sort direction of pod costs.
#[derive(Debug, Clone, Copy)]
pub struct DeletionCosts<'a> {
    pub node_costs: &'a BTreeMap<String, f64>,
    pub descending_pod_cost: bool,
}

impl<'a> DeletionCosts<'a> {
    pub fn new(node_costs: &'a BTreeMap<String, f64>, sort_method: Option<&str>) -> Self {
        Self { node_costs, descending_pod_cost: sort_method.is_some_and(|m| m.eq_ignore_ascii_case("descend")) }
    }

    fn node_cost(&self, pod: &Pod) -> f64 {
        node_name(pod).and_then(|n| self.node_costs.get(n)).copied().unwrap_or(0.0)
    }
}

fn pod_cost(pod: &Pod) -> f64 {
    parse_cost(common::pod::annotation(pod, keys::POD_DELETION_COST))
}

/// Scale-in order: pods already waiting to be deleted first, then [`availability`], costs, [`seniority`].
pub fn deletion_order(a: &Pod, b: &Pod, costs: &DeletionCosts<'_>) -> Ordering {
    let preparing = |p: &Pod| lifecycle::state_of(p) != LifecycleState::PreparingDelete;
    preparing(a)
        .cmp(&preparing(b))
        .then_with(|| availability(a, b))
        .then_with(|| costs.node_cost(a).total_cmp(&costs.node_cost(b)))
        .then_with(|| {
            let (x, y) = (pod_cost(a), pod_cost(b));
            if costs.descending_pod_cost { y.total_cmp(&x) } else { x.total_cmp(&y) }
        })
        .then_with(|| seniority(a, b))
}

/// Update order: pods already chosen (held by a gate) first, then unavailable before available, then
/// [`seniority`]. The pods at the end of this order are the ones `partition` keeps on the old revision.
pub fn update_order(a: &Pod, b: &Pod) -> Ordering {
    let chosen = |p: &Pod| !lifecycle::state_of(p).is_preparing();
    chosen(a).cmp(&chosen(b)).then_with(|| availability(a, b)).then_with(|| seniority(a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn pod(name: &str, node: Option<&str>, phase: &str, ready_at: Option<i64>, cost: Option<&str>) -> Pod {
        let pod = fixtures::pod(name).created_at(0).node(node).phase(phase).ready_at(ready_at);
        match cost {
            Some(cost) => pod.annotation(keys::POD_DELETION_COST, cost).build(),
            None => pod.build(),
        }
    }

    fn sorted(mut pods: Vec<Pod>, costs: &DeletionCosts<'_>) -> Vec<String> {
        pods.sort_by(|a, b| deletion_order(a, b, costs));
        pods.into_iter().map(|p| p.metadata.name.unwrap()).collect()
    }

    #[test]
    fn not_ready_before_costs_before_age() {
        let nodes = BTreeMap::from([("cheap".to_string(), -5.0), ("dear".to_string(), 10.0)]);
        let costs = DeletionCosts::new(&nodes, None);
        let pods = vec![
            pod("ready-old", Some("n"), "Running", Some(10), None),
            pod("ready-young", Some("n"), "Running", Some(50), None),
            pod("cost-low", Some("n"), "Running", Some(10), Some("-10")),
            pod("cost-high", Some("n"), "Running", Some(50), Some("100")),
            pod("not-ready", Some("n"), "Running", None, Some("1000")),
            pod("pending", Some("n"), "Pending", None, None),
            pod("unscheduled", None, "Pending", None, None),
            pod("cheap-node", Some("cheap"), "Running", Some(10), Some("100")),
            pod("dear-node", Some("dear"), "Running", Some(10), Some("-100")),
        ];
        assert_eq!(
            sorted(pods, &costs),
            [
                "unscheduled",
                "pending",
                "not-ready",
                "cheap-node",
                "cost-low",
                "ready-young",
                "ready-old",
                "cost-high",
                "dear-node"
            ]
        );
    }

    #[test]
    fn descending_pod_cost_and_bad_values() {
        let nodes = BTreeMap::new();
        let costs = DeletionCosts::new(&nodes, Some("descend"));
        let pods = vec![
            pod("low", Some("n"), "Running", Some(10), Some("1")),
            pod("high", Some("n"), "Running", Some(10), Some("9")),
            pod("garbage", Some("n"), "Running", Some(10), Some("lots")),
        ];
        assert_eq!(sorted(pods, &costs), ["high", "low", "garbage"]);
        assert_eq!(parse_cost(Some(" 2.5 ")), 2.5);
        assert_eq!(parse_cost(Some("NaN")), 0.0);
    }

    #[test]
    fn preparing_pods_go_first() {
        let nodes = BTreeMap::new();
        let costs = DeletionCosts::new(&nodes, None);
        let mut held = pod("held", Some("n"), "Running", Some(1), Some("100"));
        held.metadata.labels = Some([(keys::LIFECYCLE_STATE.to_string(), "PreparingDelete".to_string())].into());
        let pods = vec![pod("other", None, "Pending", None, None), held.clone()];
        assert_eq!(sorted(pods, &costs), ["held", "other"]);

        held.metadata.labels = Some([(keys::LIFECYCLE_STATE.to_string(), "PreparingUpdate".to_string())].into());
        let mut pods = [pod("other", None, "Pending", None, None), held];
        pods.sort_by(update_order);
        assert_eq!(pods[0].metadata.name.as_deref(), Some("held"));
    }
}
