//! The fake nodes the kubelet registers, shaped like what a real kubelet posts so `kubectl get
//! nodes -o wide` and `kubectl describe node` read naturally.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use super::config::ValidConfig;

/// Namespace of node Leases.
pub(super) const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// A kubelet's default `nodeLeaseDurationSeconds`.
const NODE_LEASE_DURATION_SECONDS: i32 = 40;

/// One fake node: its name and InternalIP.
#[derive(Clone, Debug)]
pub(super) struct FakeNode {
    pub name: String,
    pub ip: Ipv4Addr,
}

impl FakeNode {
    /// The Node object to register.
    pub(super) fn object(&self, config: &ValidConfig, now: Timestamp) -> Node {
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname", self.name.as_str()),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("beta.kubernetes.io/os", "linux"),
            ("beta.kubernetes.io/arch", "amd64"),
            ("node.kubernetes.io/instance-type", "kube-sim"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let annotations =
            [("node.alpha.kubernetes.io/ttl", "0"), ("volumes.kubernetes.io/controller-managed-attach-detach", "true")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        Node {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(labels),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: Some(NodeSpec { provider_id: Some(format!("kube-sim://{}", self.name)), ..Default::default() }),
            status: Some(self.status(config, now)),
        }
    }

    /// The full node status, with every condition's heartbeat and transition at `now`.
    pub(super) fn status(&self, config: &ValidConfig, now: Timestamp) -> NodeStatus {
        let raw = &config.raw;
        let resources: BTreeMap<String, Quantity> = [
            ("cpu", raw.node_cpu.clone()),
            ("memory", raw.node_memory.clone()),
            ("pods", raw.max_pods_per_node.to_string()),
            ("ephemeral-storage", "100Gi".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Quantity(v)))
        .collect();
        NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(conditions(now)),
            addresses: Some(vec![
                NodeAddress { type_: "InternalIP".into(), address: self.ip.to_string() },
                NodeAddress { type_: "Hostname".into(), address: self.name.clone() },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints { kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }) }),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                boot_id: format!("kube-sim-boot-{}", self.name),
                container_runtime_version: "docker://kube-sim".into(),
                kernel_version: "kube-sim".into(),
                kube_proxy_version: String::new(),
                kubelet_version: crate::version::KUBELET_VERSION.into(),
                machine_id: format!("kube-sim-{}", self.name),
                operating_system: "linux".into(),
                os_image: "kube-sim simulated node".into(),
                system_uuid: format!("kube-sim-{}", self.name),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The node's Lease in `kube-node-lease`, renewed now, owned by the Node (so it goes with it).
    pub(super) fn lease(&self, node: &Node, now: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                owner_references: node.metadata.uid.clone().map(|uid| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: self.name.clone(),
                        uid,
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.name.clone()),
                lease_duration_seconds: Some(NODE_LEASE_DURATION_SECONDS),
                renew_time: Some(MicroTime(now)),
                ..Default::default()
            }),
        }
    }

    /// The heartbeat: a strategic merge patch of `nodes/status` refreshing every condition's
    /// `lastHeartbeatTime` (conditions merge by type, so transition times already stored stay
    /// unless the condition's status changed, which never happens for a simulated node).
    pub(super) fn heartbeat(&self, existing: Option<&Node>, now: Timestamp) -> Value {
        let previous = existing.and_then(|node| node.status.as_ref()).and_then(|status| status.conditions.as_ref());
        let conditions: Vec<NodeCondition> = conditions(now)
            .into_iter()
            .map(|mut condition| {
                let kept = previous
                    .into_iter()
                    .flatten()
                    .find(|c| c.type_ == condition.type_ && c.status == condition.status)
                    .and_then(|c| c.last_transition_time.clone());
                if let Some(kept) = kept {
                    condition.last_transition_time = Some(kept);
                }
                condition
            })
            .collect();
        json!({ "status": { "conditions": conditions } })
    }
}

fn conditions(now: Timestamp) -> Vec<NodeCondition> {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    vec![
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::KubeletConfig;
    use crate::kubelet::scheduler::NodeInfo;

    #[test]
    fn registered_node_is_ready_and_schedulable() {
        let config = KubeletConfig::default().validate().unwrap();
        let node = FakeNode { name: "kube-sim-node-1".into(), ip: Ipv4Addr::new(127, 0, 100, 1) };
        let object = node.object(&config, Timestamp::now());
        let status = object.status.as_ref().unwrap();
        let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(status.addresses.as_ref().unwrap()[0].address, "127.0.100.1");
        let info = NodeInfo::from_node(&object);
        assert_eq!(info.allocatable_pods, 1000);
        assert_eq!(info.allocatable_cpu_milli, 32_000.0);
        assert!(!info.unschedulable);
        assert_eq!(info.labels["kubernetes.io/hostname"], "kube-sim-node-1");
    }

    #[test]
    fn the_node_reports_its_api_servers_release() {
        let config = KubeletConfig::default().validate().unwrap();
        let node = FakeNode { name: "kube-sim-node-1".into(), ip: Ipv4Addr::new(127, 0, 100, 1) };
        let info = node.status(&config, Timestamp::now()).node_info.unwrap();
        let server = crate::version::info();
        let server = server["gitVersion"].as_str().unwrap();
        assert_eq!(info.kubelet_version, format!("{server}-kube-sim"));
        assert_eq!(info.kubelet_version, crate::version::KUBELET_VERSION);
        assert_eq!(info.kube_proxy_version, "", "no kube-proxy runs");
    }

    #[test]
    fn lease_is_held_by_the_node_and_owned_by_it() {
        let config = KubeletConfig::default().validate().unwrap();
        let fake = FakeNode { name: "n".into(), ip: Ipv4Addr::new(127, 0, 100, 1) };
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let mut node = fake.object(&config, now);
        node.metadata.uid = Some("node-uid".into());
        let lease = fake.lease(&node, now);
        assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-node-lease"));
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("n"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        let owner = &lease.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Node", "node-uid"));
    }

    #[test]
    fn heartbeat_keeps_transition_times() {
        let config = KubeletConfig::default().validate().unwrap();
        let node = FakeNode { name: "n".into(), ip: Ipv4Addr::new(127, 0, 100, 1) };
        let registered_at = Timestamp::from_second(1_700_000_000).unwrap();
        let object = node.object(&config, registered_at);
        let later = Timestamp::from_second(1_700_000_100).unwrap();
        let patch = node.heartbeat(Some(&object), later);
        let ready = patch["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["lastTransitionTime"], "2023-11-14T22:13:20Z");
        assert_eq!(ready["lastHeartbeatTime"], "2023-11-14T22:15:00Z");
    }
}
