//! Choosing a node for a pod, as the default scheduler would for what the simulator models.
//!
//! Filters: `spec.nodeSelector`, cordoned nodes (`spec.unschedulable`), `NoSchedule`/`NoExecute`
//! taints against tolerations, the `pods` count and CPU/memory requests against allocatable.
//! Score: fewest pods, then least requested CPU, then name — which spreads pods evenly like the
//! default `LeastAllocated` + `BalancedAllocation` scoring does on identical nodes. Node affinity,
//! pod (anti-)affinity and topology spread constraints are not modelled.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};

use super::quantity;

/// A node as the scheduler sees it, including what is already placed on it.
#[derive(Clone, Debug)]
pub(super) struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
    pub allocatable_pods: u64,
    pub allocatable_cpu_milli: f64,
    pub allocatable_memory: f64,
    pub pods: u64,
    pub requested_cpu_milli: f64,
    pub requested_memory: f64,
}

impl NodeInfo {
    /// A node with nothing placed on it yet.
    pub(super) fn from_node(node: &Node) -> Self {
        let status = node.status.as_ref();
        let allocatable = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
        let get = |name: &str| allocatable.and_then(|a| a.get(name)).and_then(|q| quantity::parse(&q.0));
        let spec = node.spec.as_ref();
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            allocatable_pods: get("pods").map_or(0, |pods| pods as u64),
            allocatable_cpu_milli: get("cpu").map_or(0.0, |cores| cores * 1000.0),
            allocatable_memory: get("memory").unwrap_or(0.0),
            pods: 0,
            requested_cpu_milli: 0.0,
            requested_memory: 0.0,
        }
    }

    /// Accounts for a pod placed on this node.
    pub(super) fn add(&mut self, request: &Request) {
        self.pods += 1;
        self.requested_cpu_milli += request.cpu_milli;
        self.requested_memory += request.memory;
    }
}

/// The resources a pod asks for: the sum over its containers, or the largest init container's
/// request if that is bigger (init containers run before, not beside, the others).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Request {
    pub cpu_milli: f64,
    pub memory: f64,
}

impl Request {
    pub(super) fn of(pod: &Pod) -> Self {
        let Some(spec) = pod.spec.as_ref() else {
            return Self::default();
        };
        let of_container = |container: &k8s_openapi::api::core::v1::Container| {
            let resources = container.resources.as_ref();
            let get = |name: &str| {
                let requests = resources.and_then(|r| r.requests.as_ref());
                let limits = resources.and_then(|r| r.limits.as_ref());
                requests
                    .and_then(|r| r.get(name))
                    .or_else(|| limits.and_then(|l| l.get(name)))
                    .and_then(|q| quantity::parse(&q.0))
                    .unwrap_or(0.0)
            };
            Self { cpu_milli: get("cpu") * 1000.0, memory: get("memory") }
        };
        let mut total = spec
            .containers
            .iter()
            .map(of_container)
            .fold(Self::default(), |a, b| Self { cpu_milli: a.cpu_milli + b.cpu_milli, memory: a.memory + b.memory });
        for init in spec.init_containers.iter().flatten().map(of_container) {
            total.cpu_milli = total.cpu_milli.max(init.cpu_milli);
            total.memory = total.memory.max(init.memory);
        }
        total
    }
}

/// The scheduler's verdict.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Decision {
    Bind(String),
    /// No node fits; the message is the one the default scheduler writes into `PodScheduled`.
    Unschedulable(String),
}

/// Picks the node for `pod`.
pub(super) fn schedule(pod: &Pod, nodes: &[NodeInfo]) -> Decision {
    let request = Request::of(pod);
    let spec = pod.spec.as_ref();
    let selector = spec.and_then(|s| s.node_selector.as_ref());
    let tolerations: &[Toleration] = spec.and_then(|s| s.tolerations.as_deref()).unwrap_or(&[]);
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<&NodeInfo> = None;
    for node in nodes {
        match unfit_reason(node, selector, tolerations, &request) {
            Some(reason) => *reasons.entry(reason).or_default() += 1,
            None => {
                let better = best.is_none_or(|b| {
                    (node.pods, node.requested_cpu_milli, &node.name)
                        .partial_cmp(&(b.pods, b.requested_cpu_milli, &b.name))
                        .is_some_and(|o| o.is_lt())
                });
                if better {
                    best = Some(node);
                }
            }
        }
    }
    match best {
        Some(node) => Decision::Bind(node.name.clone()),
        None => {
            let details: Vec<String> = reasons.iter().map(|(reason, count)| format!("{count} {reason}")).collect();
            let mut message = format!("0/{} nodes are available", nodes.len());
            if !details.is_empty() {
                message.push_str(": ");
                message.push_str(&details.join(", "));
            }
            message.push('.');
            Decision::Unschedulable(message)
        }
    }
}

/// Why `node` cannot take the pod, in the default scheduler's words; `None` if it fits.
fn unfit_reason(
    node: &NodeInfo,
    selector: Option<&BTreeMap<String, String>>,
    tolerations: &[Toleration],
    request: &Request,
) -> Option<String> {
    let selected = selector.into_iter().flatten().all(|(key, value)| node.labels.get(key) == Some(value));
    if !selected {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    if node.unschedulable {
        let cordon =
            Taint { key: "node.kubernetes.io/unschedulable".into(), effect: "NoSchedule".into(), ..Default::default() };
        if !tolerations.iter().any(|t| tolerates(t, &cordon)) {
            return Some("node(s) were unschedulable".into());
        }
    }
    let blocking = node
        .taints
        .iter()
        .filter(|taint| taint.effect == "NoSchedule" || taint.effect == "NoExecute")
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)));
    if let Some(taint) = blocking {
        let value = taint.value.as_deref().unwrap_or_default();
        return Some(format!("node(s) had untolerated taint {{{}: {value}}}", taint.key));
    }
    if node.pods + 1 > node.allocatable_pods {
        return Some("Too many pods".into());
    }
    if node.requested_cpu_milli + request.cpu_milli > node.allocatable_cpu_milli {
        return Some("Insufficient cpu".into());
    }
    if node.requested_memory + request.memory > node.allocatable_memory {
        return Some("Insufficient memory".into());
    }
    None
}

/// `Toleration.ToleratesTaint` of Kubernetes.
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_matches = toleration.effect.as_deref().is_none_or(|e| e.is_empty() || e == taint.effect);
    if !effect_matches {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            !key.is_empty()
                && toleration.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node(name: &str, pods: u64) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            labels: [("kubernetes.io/hostname".to_string(), name.to_string())].into(),
            unschedulable: false,
            taints: vec![],
            allocatable_pods: 110,
            allocatable_cpu_milli: 4000.0,
            allocatable_memory: 8e9,
            pods,
            requested_cpu_milli: 0.0,
            requested_memory: 0.0,
        }
    }

    fn pod(cpu: Option<&str>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    resources: cpu.map(|cpu| ResourceRequirements {
                        requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn picks_the_least_loaded_node() {
        let nodes = [node("a", 3), node("b", 1), node("c", 2)];
        assert_eq!(schedule(&pod(None), &nodes), Decision::Bind("b".into()));
        let nodes = [node("b", 1), node("a", 1)];
        assert_eq!(schedule(&pod(None), &nodes), Decision::Bind("a".into()), "ties by name");
    }

    #[test]
    fn spreads_a_burst_evenly() {
        let mut nodes = vec![node("a", 0), node("b", 0), node("c", 0)];
        let pod = pod(Some("100m"));
        for _ in 0..30 {
            let Decision::Bind(name) = schedule(&pod, &nodes) else { panic!() };
            nodes.iter_mut().find(|n| n.name == name).unwrap().add(&Request::of(&pod));
        }
        assert!(nodes.iter().all(|n| n.pods == 10), "{nodes:?}");
    }

    #[test]
    fn respects_capacity_and_explains_why_not() {
        let mut full = node("a", 110);
        full.allocatable_pods = 110;
        let mut busy = node("b", 0);
        busy.requested_cpu_milli = 3900.0;
        let mut cordoned = node("c", 0);
        cordoned.unschedulable = true;
        let Decision::Unschedulable(message) = schedule(&pod(Some("200m")), &[full, busy, cordoned]) else { panic!() };
        assert_eq!(
            message,
            "0/3 nodes are available: 1 Insufficient cpu, 1 Too many pods, 1 node(s) were \
             unschedulable."
        );
    }

    #[test]
    fn node_selector_and_taints() {
        let mut tainted = node("a", 0);
        tainted.taints = vec![Taint {
            key: "dedicated".into(),
            value: Some("game".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        let plain = node("b", 5);
        let mut selective = pod(None);
        selective.spec.as_mut().unwrap().node_selector =
            Some([("kubernetes.io/hostname".to_string(), "a".to_string())].into());
        let Decision::Unschedulable(message) = schedule(&selective, &[tainted.clone(), plain.clone()]) else {
            panic!()
        };
        assert_eq!(
            message,
            "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, \
             1 node(s) had untolerated taint {dedicated: game}."
        );
        selective.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("game".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }]);
        assert_eq!(schedule(&selective, &[tainted, plain]), Decision::Bind("a".into()));
    }

    #[test]
    fn toleration_matching() {
        let taint =
            Taint { key: "k".into(), value: Some("v".into()), effect: "NoSchedule".into(), ..Default::default() };
        let exists_all = Toleration { operator: Some("Exists".into()), ..Default::default() };
        assert!(tolerates(&exists_all, &taint));
        let wrong_value = Toleration { key: Some("k".into()), value: Some("x".into()), ..Default::default() };
        assert!(!tolerates(&wrong_value, &taint));
        let wrong_effect = Toleration {
            key: Some("k".into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        };
        assert!(!tolerates(&wrong_effect, &taint));
    }

    #[test]
    fn requests_default_to_limits_and_init_containers_take_the_max() {
        let mut pod = pod(Some("250m"));
        let spec = pod.spec.as_mut().unwrap();
        spec.containers.push(Container {
            name: "side".into(),
            resources: Some(ResourceRequirements {
                limits: Some([("memory".to_string(), Quantity("1Gi".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        spec.init_containers = Some(vec![Container {
            name: "init".into(),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity("2".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        assert_eq!(Request::of(&pod), Request { cpu_milli: 2000.0, memory: 1024.0 * 1024.0 * 1024.0 });
    }
}
