//! Pod ordering rules, in one place: which pod is deleted first on scale-in, which is updated first (with
//! CloneSet's `priorityStrategy` and `scatterStrategy`, [`update_sequence`]).
//!
//! Both start from Kubernetes `controller.ActivePods` (pods that cost least to lose go first: unscheduled,
//! pending, not ready, recently ready, restarting, young). Deletion puts the state the game server declares first
//! ([`common::server_state`]: `WaitToBeDeleted`, `Idle`, the rest, `Allocated` last), and adds the deletion costs
//! between readiness and age: node cost (`io.tencent.bcs.dev/node-deletion-cost` on the node, ascending), then pod cost
//! (`controller.kubernetes.io/pod-deletion-cost`, ascending, or descending when the GameDeployment annotation
//! `io.tencent.bcs.dev/pod-deletion-cost-sort-method` is `descend`).
//!
//! Differences from BCS (BCS-G29): the sort is total and stable (ties end on the name), a missing or
//! unparsable cost is 0 as in Kubernetes (BCS: "delete last"), and a not-ready pod is always deleted before a
//! ready one whatever the costs (BCS lets a low cost override readiness).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use common::api::GameDeploymentUpdateStrategy;
use common::api::gamedeployment::{MAX_UPDATE_ORDER_TERMS, UpdateScatterTerm};
use common::cached_pod::Pod;
use common::keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;

use crate::lifecycle::{self, LifecycleState};
use crate::ownership;

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

/// Scale-in order: pods already waiting to be deleted first, then the state the server declares
/// ([`common::server_state`]), [`availability`], costs, [`seniority`].
pub fn deletion_order(a: &Pod, b: &Pod, costs: &DeletionCosts<'_>) -> Ordering {
    let preparing = |p: &Pod| lifecycle::state_of(p) != LifecycleState::PreparingDelete;
    let declared = |p: &Pod| common::server_state::ServerState::of(p).deletion_rank();
    preparing(a)
        .cmp(&preparing(b))
        .then_with(|| declared(a).cmp(&declared(b)))
        .then_with(|| availability(a, b))
        .then_with(|| costs.node_cost(a).total_cmp(&costs.node_cost(b)))
        .then_with(|| {
            let (x, y) = (pod_cost(a), pod_cost(b));
            if costs.descending_pod_cost { y.total_cmp(&x) } else { x.total_cmp(&y) }
        })
        .then_with(|| seniority(a, b))
}

/// The order `candidates` are updated in, as indices into `candidates` (OpenKruise `SortUpdateIndexes`):
/// the default order (unavailable before available, then [`seniority`]), then `priorityStrategy` (stable: equal priorities keep the
/// default order), then `scatterStrategy`, then pods already held by a gate first. `all` is every active pod of
/// the GameDeployment: scattering spreads a label over the whole pod set, not only over the candidates.
pub fn update_sequence(candidates: &[&Pod], all: &[&Pod], strategy: &GameDeploymentUpdateStrategy) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    // The comparison's facts read once per pod (labels, conditions, timestamps), not twice per comparison: the
    // same order as `availability` then `seniority` (`update_keys_order_as_the_comparison_does`).
    let keys: Vec<ActiveKey<'_>> = candidates.iter().map(|p| ActiveKey::of(p)).collect();
    order.sort_by(|&a, &b| keys[a].cmp_active(&keys[b]));
    if let Some(priority) = &strategy.priority_strategy {
        if !priority.weight_priority.is_empty() {
            let weight = |pod: &Pod| -> i64 {
                let empty = BTreeMap::new();
                let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
                priority
                    .weight_priority
                    .iter()
                    .filter(|term| ownership::selector_matches(&term.match_selector, labels))
                    .map(|term| i64::from(term.weight))
                    .sum()
            };
            // Higher weight first.
            order.sort_by_cached_key(|&i| std::cmp::Reverse(weight(candidates[i])));
        } else if !priority.order_priority.is_empty() {
            // The first key the pod carries decides (a pod with none of them ranks before all others, as
            // CloneSet's level -1), then the higher trailing integer.
            let rank = |pod: &Pod| -> (i64, std::cmp::Reverse<i64>) {
                for (level, term) in priority.order_priority.iter().enumerate() {
                    if let Some(value) = common::pod::label(pod, &term.ordered_key) {
                        return (i64::try_from(level).unwrap_or(i64::MAX), std::cmp::Reverse(trailing_integer(value)));
                    }
                }
                (-1, std::cmp::Reverse(0))
            };
            order.sort_by_cached_key(|&i| rank(candidates[i]));
        }
    }
    for term in scatter_terms(candidates, &order, &strategy.scatter_strategy) {
        order = scatter(candidates, all, order, &term);
    }
    let preparing: Vec<bool> = candidates.iter().map(|p| lifecycle::state_of(p).is_preparing()).collect();
    order.sort_by_key(|&i| !preparing[i]);
    order
}

/// What `availability` and `seniority` compare, read from a pod once.
struct ActiveKey<'a> {
    scheduled: bool,
    phase: u8,
    ready: bool,
    ready_since: Option<Timestamp>,
    restarts: i32,
    created: Option<Timestamp>,
    name: &'a str,
}

impl<'a> ActiveKey<'a> {
    fn of(pod: &'a Pod) -> Self {
        Self {
            scheduled: node_name(pod).is_some(),
            phase: phase_rank(pod),
            ready: common::pod::is_ready(pod),
            ready_since: ready_since(pod),
            restarts: common::pod::restart_count(pod),
            created: created(pod),
            name: name(pod),
        }
    }

    /// `availability(a, b).then_with(|| seniority(a, b))`.
    fn cmp_active(&self, other: &Self) -> Ordering {
        let (a, b) = (self, other);
        let ready = match (a.ready_since, b.ready_since) {
            (Some(x), Some(y)) => y.cmp(&x),
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        a.scheduled
            .cmp(&b.scheduled)
            .then_with(|| a.phase.cmp(&b.phase))
            .then_with(|| a.ready.cmp(&b.ready))
            .then(ready)
            .then_with(|| b.restarts.cmp(&a.restarts))
            .then_with(|| b.created.cmp(&a.created))
            .then_with(|| a.name.cmp(b.name))
    }
}

/// The integer a label value ends with (`"sts-10"` → 10); 0 without trailing digits or when it overflows (Go's
/// `strconv.ParseInt` failing in CloneSet).
pub fn trailing_integer(value: &str) -> i64 {
    let digits = value.bytes().rev().take_while(u8::is_ascii_digit).count();
    value[value.len() - digits..].parse().unwrap_or(0)
}

fn has_term(pod: &Pod, term: &UpdateScatterTerm) -> bool {
    common::pod::label(pod, &term.key) == Some(term.value.as_str())
}

/// The scatter terms in the order they are applied: with several terms, the one matching most candidates first
/// (ties keep the spec's order); terms matching no candidate are skipped.
fn scatter_terms(candidates: &[&Pod], order: &[usize], terms: &[UpdateScatterTerm]) -> Vec<UpdateScatterTerm> {
    if terms.len() <= 1 {
        return terms.to_vec();
    }
    let mut counted: Vec<(usize, UpdateScatterTerm)> = Vec::new();
    for term in terms {
        if counted.iter().any(|(_, t)| t == term) {
            continue;
        }
        let n = order.iter().filter(|&&i| has_term(candidates[i], term)).count();
        if n > 0 {
            counted.push((n, term.clone()));
        }
    }
    counted.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    counted.into_iter().map(|(_, t)| t).collect()
}

/// Spreads the candidates carrying `term` through `order`. The spread is CloneSet's `scatterPodsByRule` applied to
/// the whole pod set (`all`): the last labelled pod goes to the very end, the others each lead a group of about
/// `unlabelled / (labelled − 1)` unlabelled pods — with 3 labelled pods of 10 they are 1st, 6th and 10th. That
/// pattern is then continued from where the rollout stands: the pods of `all` that are not candidates (updated
/// already, or kept aside this pass) took its first places, so the `k`-th update of the rollout takes a labelled pod
/// exactly where the pattern has one, also when pods are updated one pass at a time (CloneSet sorts only the
/// remaining pods each pass, so there the pattern shifts as the rollout goes on).
fn scatter(candidates: &[&Pod], all: &[&Pod], order: Vec<usize>, term: &UpdateScatterTerm) -> Vec<usize> {
    let (matched, unmatched): (Vec<usize>, Vec<usize>) = order.iter().partition(|&&i| has_term(candidates[i], term));
    let total_matched = all.iter().filter(|p| has_term(p, term)).count().max(matched.len());
    let total_unmatched = all.iter().filter(|p| !has_term(p, term)).count().max(unmatched.len());
    if total_matched <= 1 || total_unmatched <= 1 || matched.is_empty() || unmatched.is_empty() {
        return order;
    }
    let done = (total_matched + total_unmatched).saturating_sub(order.len());
    let pattern = scatter_pattern(total_matched, total_unmatched);
    let (mut matched, mut unmatched) = (matched.into_iter(), unmatched.into_iter());
    let mut result = Vec::with_capacity(order.len());
    for labelled in pattern.into_iter().skip(done) {
        let next = if labelled {
            matched.next().or_else(|| unmatched.next())
        } else {
            unmatched.next().or_else(|| matched.next())
        };
        result.extend(next);
    }
    result.extend(matched);
    result.extend(unmatched);
    result
}

/// CloneSet's scatter order of `matched` labelled and `unmatched` other pods (`true` = labelled): the last labelled
/// pod at the end; before it, groups of `round(matched' / n)` labelled then `round(unmatched / n)` other pods, with
/// `n = min(matched', unmatched)` and `matched' = matched − 1` (`math.Round`: halves away from zero); the rest after.
fn scatter_pattern(matched: usize, unmatched: usize) -> Vec<bool> {
    let leading = matched.saturating_sub(1);
    let groups = leading.min(unmatched).max(1);
    let size = |n: usize| ((n as f64) / (groups as f64)).round() as usize;
    let (matched_size, unmatched_size) = (size(leading), size(unmatched));
    let (mut m, mut u) = (leading, unmatched);
    let mut pattern = Vec::with_capacity(matched + unmatched);
    for _ in 0..groups {
        let take = matched_size.min(m);
        pattern.extend(std::iter::repeat_n(true, take));
        m -= take;
        let take = unmatched_size.min(u);
        pattern.extend(std::iter::repeat_n(false, take));
        u -= take;
    }
    pattern.extend(std::iter::repeat_n(true, m));
    pattern.extend(std::iter::repeat_n(false, u));
    pattern.push(true);
    pattern
}

/// Checks `priorityStrategy` and `scatterStrategy` as CloneSet's webhook does; the message names the field.
/// The CRD checks the same bounds; this also covers a CRD installed before the fields existed.
pub fn validate_update_order(strategy: &GameDeploymentUpdateStrategy) -> Result<(), String> {
    let field = "spec.updateStrategy";
    if let Some(priority) = &strategy.priority_strategy {
        let field = format!("{field}.priorityStrategy");
        if !priority.weight_priority.is_empty() && !priority.order_priority.is_empty() {
            return Err(format!("{field}: only one of weightPriority and orderPriority may be set"));
        }
        if priority.weight_priority.len() > MAX_UPDATE_ORDER_TERMS
            || priority.order_priority.len() > MAX_UPDATE_ORDER_TERMS
        {
            return Err(format!("{field}: at most {MAX_UPDATE_ORDER_TERMS} terms"));
        }
        for (i, term) in priority.weight_priority.iter().enumerate() {
            if !(1..=100).contains(&term.weight) {
                return Err(format!("{field}.weightPriority[{i}].weight is {}: it must be 1 to 100", term.weight));
            }
            if let Some(problem) = selector_problem(&term.match_selector) {
                return Err(format!("{field}.weightPriority[{i}].matchSelector: {problem}"));
            }
        }
        for (i, term) in priority.order_priority.iter().enumerate() {
            if let Some(problem) = label_key_problem(&term.ordered_key) {
                return Err(format!("{field}.orderPriority[{i}].orderedKey {:?}: {problem}", term.ordered_key));
            }
        }
    }
    if strategy.scatter_strategy.len() > MAX_UPDATE_ORDER_TERMS {
        return Err(format!("{field}.scatterStrategy: at most {MAX_UPDATE_ORDER_TERMS} terms"));
    }
    for (i, term) in strategy.scatter_strategy.iter().enumerate() {
        if let Some(problem) = label_key_problem(&term.key) {
            return Err(format!("{field}.scatterStrategy[{i}].key {:?}: {problem}", term.key));
        }
        if let Some(problem) = label_value_problem(&term.value) {
            return Err(format!("{field}.scatterStrategy[{i}].value {:?}: {problem}", term.value));
        }
        if strategy.scatter_strategy[..i].contains(term) {
            return Err(format!("{field}.scatterStrategy[{i}]: {}={} is listed twice", term.key, term.value));
        }
    }
    Ok(())
}

fn selector_problem(selector: &LabelSelector) -> Option<String> {
    for (key, value) in selector.match_labels.iter().flatten() {
        if let Some(problem) = label_key_problem(key).or_else(|| label_value_problem(value)) {
            return Some(format!("{key}={value}: {problem}"));
        }
    }
    for r in selector.match_expressions.iter().flatten() {
        let values = r.values.as_ref().map_or(0, Vec::len);
        let problem = match r.operator.as_str() {
            "In" | "NotIn" if values == 0 => "operator In/NotIn needs at least one value",
            "Exists" | "DoesNotExist" if values > 0 => "operator Exists/DoesNotExist takes no values",
            "In" | "NotIn" | "Exists" | "DoesNotExist" => continue,
            _ => "operator must be In, NotIn, Exists or DoesNotExist",
        };
        return Some(format!("requirement on {:?}: {problem}", r.key));
    }
    None
}

fn name_part_ok(part: &str) -> bool {
    let bytes = part.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Kubernetes qualified-name rules for a label key (`[prefix/]name`).
pub(crate) fn label_key_problem(key: &str) -> Option<&'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let dns = prefix.len() <= 253
            && prefix.split('.').all(|l| {
                let b = l.as_bytes();
                !b.is_empty()
                    && b[0].is_ascii_alphanumeric()
                    && b[b.len() - 1].is_ascii_alphanumeric()
                    && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            });
        if !dns {
            return Some("the prefix must be a DNS subdomain (lower-case letters, digits, '-' and '.')");
        }
    }
    if !name_part_ok(name) {
        return Some(
            "a label key is at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit (optionally after a DNS prefix and '/')",
        );
    }
    None
}

/// Kubernetes rules for a label value (may be empty).
pub(crate) fn label_value_problem(value: &str) -> Option<&'static str> {
    if value.is_empty() || name_part_ok(value) {
        None
    } else {
        Some(
            "a label value is empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
        )
    }
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

    /// Server-declared state (`common::server_state`) comes before readiness, costs and age: a server that asked to
    /// go, then an idle one, then the rest, allocated servers last; a pod already in `PreparingDelete` still first.
    #[test]
    fn scale_in_takes_servers_by_their_declared_state_first() {
        let nodes = BTreeMap::new();
        let costs = DeletionCosts::new(&nodes, None);
        let state = |name: &str, value: Option<&str>, ready_at: Option<i64>, cost: &str| {
            let mut pod = fixtures::pod(name).created_at(0).phase("Running").ready_at(ready_at);
            pod = pod.annotation(keys::POD_DELETION_COST, cost);
            if let Some(value) = value {
                pod = pod.labels(&[(keys::SERVER_STATE, value)]);
            }
            pod.build()
        };
        let pods = vec![
            state("allocated-not-ready", Some("Allocated"), None, "-100"),
            state("unlabelled-cheap", None, Some(10), "-50"),
            state("idle", Some("Idle"), Some(10), "100"),
            state("waiting", Some("WaitToBeDeleted"), Some(10), "100"),
            state("allocated", Some("Allocated"), Some(10), "-100"),
            state("draining", Some("Draining"), Some(10), "200"),
            fixtures::pod("leaving")
                .created_at(0)
                .phase("Running")
                .ready_at(Some(10))
                .labels(&[(keys::SERVER_STATE, "Allocated"), (keys::LIFECYCLE_STATE, "PreparingDelete")])
                .build(),
        ];
        assert_eq!(
            sorted(pods, &costs),
            ["leaving", "waiting", "draining", "idle", "unlabelled-cheap", "allocated-not-ready", "allocated"]
        );
    }

    #[test]
    fn update_keys_order_as_the_comparison_does() {
        // Every combination of the compared facts (node, phase, readiness and its time, restarts, age, name): the
        // keys read once per pod sort exactly as `availability` then `seniority` compare the pods.
        let mut pods = Vec::new();
        for node in [None, Some("n")] {
            for phase in ["Pending", "Running", "Succeeded"] {
                for ready_at in [None, Some(10), Some(50)] {
                    for restarts in [0, 2] {
                        for created in [0, 5] {
                            for suffix in ["a", "b"] {
                                let name =
                                    format!("p-{}-{phase}-{ready_at:?}-{restarts}-{created}-{suffix}", node.is_some());
                                let mut pod = fixtures::pod(&name)
                                    .created_at(created)
                                    .node(node)
                                    .phase(phase)
                                    .ready_at(ready_at)
                                    .build();
                                if restarts > 0 {
                                    let status = pod.status.get_or_insert_with(Default::default);
                                    status.container_statuses = Some(vec![common::cached_pod::ContainerStatus {
                                        name: "c".into(),
                                        restart_count: restarts,
                                        ..Default::default()
                                    }]);
                                }
                                pods.push(pod);
                            }
                        }
                    }
                }
            }
        }
        // A fixed shuffle, so the sort has work to do.
        let n = pods.len();
        let refs: Vec<&Pod> = (0..n).map(|i| &pods[(i * 37) % n]).collect();
        let mut by_comparison = refs.clone();
        by_comparison.sort_by(|a, b| availability(a, b).then_with(|| seniority(a, b)));
        let strategy = GameDeploymentUpdateStrategy::default();
        let by_keys: Vec<&Pod> = update_sequence(&refs, &refs, &strategy).into_iter().map(|i| refs[i]).collect();
        let names = |v: &[&Pod]| v.iter().map(|p| name(p).to_string()).collect::<Vec<_>>();
        assert_eq!(names(&by_keys), names(&by_comparison));
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

    /// `n` ready, running pods `p0..`, with the labels `labelled(i)` gives pod `i`.
    fn numbered(n: usize, labelled: impl Fn(usize) -> Vec<(&'static str, String)>) -> Vec<Pod> {
        (0..n)
            .map(|i| {
                let labels = labelled(i);
                let pairs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                fixtures::pod(&format!("p{i}"))
                    .created_at(0)
                    .node(Some("n"))
                    .phase("Running")
                    .ready_at(Some(10))
                    .labels(&pairs)
                    .build()
            })
            .collect()
    }

    fn strategy(yaml: serde_json::Value) -> GameDeploymentUpdateStrategy {
        serde_json::from_value(yaml).unwrap()
    }

    fn sequence(pods: &[Pod], strategy: &GameDeploymentUpdateStrategy) -> Vec<String> {
        let refs: Vec<&Pod> = pods.iter().collect();
        update_sequence(&refs, &refs, strategy).into_iter().map(|i| name(refs[i]).to_string()).collect()
    }

    #[test]
    fn weight_priority_as_the_seed_example() {
        // Seed 003: test-key=foo weighs 50, test-key=bar 30: foo pods first, then bar, then the rest.
        let s = strategy(serde_json::json!({"priorityStrategy": {"weightPriority": [
            {"weight": 50, "matchSelector": {"matchLabels": {"test-key": "foo"}}},
            {"weight": 30, "matchSelector": {"matchLabels": {"test-key": "bar"}}}
        ]}}));
        let value = ["none", "bar", "foo", "bar", "none", "foo"];
        let pods = numbered(6, |i| vec![("test-key", value[i].to_string())]);
        assert_eq!(sequence(&pods, &s), ["p2", "p5", "p1", "p3", "p0", "p4"]);
        // Weights add up: a pod matching both terms (60 + 50) beats one matching the heavier term only.
        let s = strategy(serde_json::json!({"priorityStrategy": {"weightPriority": [
            {"weight": 60, "matchSelector": {"matchLabels": {"a": "x"}}},
            {"weight": 50, "matchSelector": {"matchExpressions": [{"key": "b", "operator": "Exists"}]}}
        ]}}));
        let pods = numbered(3, |i| match i {
            0 => vec![("a", "x".to_string())],
            1 => vec![("a", "x".to_string()), ("b", "y".to_string())],
            _ => vec![],
        });
        assert_eq!(sequence(&pods, &s), ["p1", "p0", "p2"]);
    }

    #[test]
    fn order_priority_takes_the_trailing_integer_higher_first() {
        // Seed 003: value "5" has priority 5, "sts-10" priority 10: the higher priority is updated first.
        let s = strategy(serde_json::json!({"priorityStrategy": {"orderPriority": [
            {"orderedKey": "some-label-key"}, {"orderedKey": "second"}
        ]}}));
        let pods = numbered(6, |i| match i {
            0 => vec![("some-label-key", "5".to_string())],
            1 => vec![("some-label-key", "sts-10".to_string())],
            2 => vec![("some-label-key", "sts-7".to_string())],
            3 => vec![("second", "100".to_string())],
            4 => vec![],
            _ => vec![("some-label-key", "no-digits".to_string())],
        });
        // CloneSet ranks pods without any of the keys before all others (level -1), then pods with the first
        // key (higher number first, no digits = 0), then pods with only the second key.
        assert_eq!(sequence(&pods, &s), ["p4", "p1", "p2", "p0", "p5", "p3"]);
        assert_eq!(trailing_integer("sts-10"), 10);
        assert_eq!(trailing_integer("5"), 5);
        assert_eq!(trailing_integer("v2-beta"), 0);
        assert_eq!(trailing_integer("x99999999999999999999999"), 0, "overflow is 0, as strconv.ParseInt fails");
    }

    #[test]
    fn scatter_puts_3_labelled_pods_of_10_first_sixth_and_tenth() {
        // Seed 003's example: replicas 10, 3 pods labelled foo=bar, scatterStrategy [{key: foo, value: bar}].
        let s = strategy(serde_json::json!({"scatterStrategy": [{"key": "foo", "value": "bar"}]}));
        for labelled in [[0, 1, 2], [7, 8, 9], [2, 5, 9]] {
            let pods = numbered(10, |i| if labelled.contains(&i) { vec![("foo", "bar".to_string())] } else { vec![] });
            let order = sequence(&pods, &s);
            let positions: Vec<usize> = order
                .iter()
                .enumerate()
                .filter(|(_, n)| labelled.iter().any(|l| **n == format!("p{l}")))
                .map(|(at, _)| at + 1)
                .collect();
            assert_eq!(positions, [1, 6, 10], "labelled {labelled:?}: {order:?}");
        }
    }

    #[test]
    fn scatter_keeps_the_pattern_when_pods_are_updated_one_pass_at_a_time() {
        // maxUnavailable 1: each pass takes only the first candidate; the rollout as a whole still updates the
        // labelled pods 1st, 6th and 10th.
        let s = strategy(serde_json::json!({"scatterStrategy": [{"key": "foo", "value": "bar"}]}));
        let pods = numbered(10, |i| if [1, 4, 8].contains(&i) { vec![("foo", "bar".to_string())] } else { vec![] });
        let all: Vec<&Pod> = pods.iter().collect();
        let mut remaining = all.clone();
        let mut updated = Vec::new();
        while !remaining.is_empty() {
            let first = update_sequence(&remaining, &all, &s)[0];
            updated.push(name(remaining.remove(first)).to_string());
        }
        let positions: Vec<usize> = updated
            .iter()
            .enumerate()
            .filter(|(_, n)| ["p1", "p4", "p8"].contains(&n.as_str()))
            .map(|(at, _)| at + 1)
            .collect();
        assert_eq!(positions, [1, 6, 10], "{updated:?}");
    }

    #[test]
    fn scatter_patterns_and_small_groups() {
        let show = |m, u| -> String { scatter_pattern(m, u).iter().map(|&l| if l { 'L' } else { '.' }).collect() };
        assert_eq!(show(3, 7), "L....L...L");
        assert_eq!(show(2, 6), "L......L");
        assert_eq!(show(4, 4), "L.L.L..L");
        assert_eq!(show(5, 2), "LL.LL.L");
        let s = strategy(serde_json::json!({"scatterStrategy": [{"key": "foo", "value": "bar"}]}));
        // One labelled pod: nothing to spread.
        let pods = numbered(4, |i| if i == 3 { vec![("foo", "bar".to_string())] } else { vec![] });
        assert_eq!(sequence(&pods, &s), ["p0", "p1", "p2", "p3"]);
    }

    #[test]
    fn held_pods_stay_first_whatever_the_strategy() {
        let s = strategy(serde_json::json!({"priorityStrategy": {"weightPriority": [
            {"weight": 100, "matchSelector": {"matchLabels": {"hot": "yes"}}}
        ]}}));
        let mut pods = numbered(3, |i| if i == 2 { vec![("hot", "yes".to_string())] } else { vec![] });
        pods[1].metadata.labels.get_or_insert_default().insert(keys::LIFECYCLE_STATE.into(), "PreparingUpdate".into());
        assert_eq!(sequence(&pods, &s), ["p1", "p2", "p0"]);
    }

    #[test]
    fn bad_update_order_settings_are_refused_with_the_field_named() {
        let cases = [
            (
                serde_json::json!({"priorityStrategy": {"weightPriority": [{"weight": 1, "matchSelector": {}}],
                "orderPriority": [{"orderedKey": "k"}]}}),
                "only one of",
            ),
            (
                serde_json::json!({"priorityStrategy": {"weightPriority": [{"weight": 0, "matchSelector": {}}]}}),
                "weightPriority[0].weight",
            ),
            (
                serde_json::json!({"priorityStrategy": {"weightPriority": [{"weight": 5, "matchSelector":
                {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]}}),
                "weightPriority[0].matchSelector",
            ),
            (
                serde_json::json!({"priorityStrategy": {"orderPriority": [{"orderedKey": "bad key!"}]}}),
                "orderPriority[0].orderedKey",
            ),
            (
                serde_json::json!({"scatterStrategy": [{"key": "a", "value": "b"}, {"key": "a", "value": "b"}]}),
                "scatterStrategy[1]",
            ),
            (serde_json::json!({"scatterStrategy": [{"key": "", "value": "b"}]}), "scatterStrategy[0].key"),
            (serde_json::json!({"scatterStrategy": [{"key": "a", "value": "-b"}]}), "scatterStrategy[0].value"),
        ];
        for (yaml, want) in cases {
            let problem = validate_update_order(&strategy(yaml.clone())).expect_err(&yaml.to_string());
            assert!(problem.contains(want), "{yaml}: {problem}");
        }
        let many: Vec<serde_json::Value> =
            (0..=MAX_UPDATE_ORDER_TERMS).map(|i| serde_json::json!({"key": "k", "value": format!("v{i}")})).collect();
        let problem = validate_update_order(&strategy(serde_json::json!({"scatterStrategy": many}))).unwrap_err();
        assert!(problem.contains("at most 32 terms"), "{problem}");
        let fine = strategy(serde_json::json!({
            "priorityStrategy": {"orderPriority": [{"orderedKey": "example.com/order"}]},
            "scatterStrategy": [{"key": "zone", "value": "a"}, {"key": "zone", "value": ""}]
        }));
        assert_eq!(validate_update_order(&fine), Ok(()));
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
        let pods = [pod("other", None, "Pending", None, None), held];
        let refs: Vec<&Pod> = pods.iter().collect();
        let order = update_sequence(&refs, &refs, &GameDeploymentUpdateStrategy::default());
        assert_eq!(name(refs[order[0]]), "held");
    }
}
