//! What the operator keeps of each of its pods in the cache: the fields it reads, nothing else.
//!
//! A cached pod is a k8s-openapi `Pod`: about 2.5 KB of inline structs (a `Container` alone is 2.3 KB, set or not)
//! plus every string, list and map the API server sent: in a large fleet the pod store is the largest share of the
//! gamedeployment-operator's heap (heaptrack at the peak of a hooked roll). [`slim`] drops what no step reads
//! before the pod is stored. What stays, and why:
//!
//! - metadata (names, labels, annotations, owners, versions, timestamps): identity, selection, lifecycle state and
//!   every `test` precondition of a patch;
//! - `spec.containers[].name` and `.image` (in-place updates patch images by index, checked by name), the readiness
//!   gates, the node (deletion cost, spreading), the grace period;
//! - the status: phase, conditions (patched by index in `markPodNotReady`), the pod and host IP (hook arguments),
//!   each container status' name, image, image ID, readiness, start and restart count and state (in-place update
//!   progress), the start time.
//!
//! Every write names its own fields (JSON patches), so nothing dropped here is ever written back; the pod
//! template diff reads revisions, never a pod. The test below plans a hooked rolling update and a hooked scale-in on
//! pods shaped as the API server sends them, and on the same pods slimmed, and requires the same plan at every
//! pass.

use k8s_openapi::api::core::v1::Pod;

/// Drops from `pod` every field no step of the operator reads (see the module docs).
pub fn slim(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = None;
        spec.tolerations = None;
        spec.affinity = None;
        spec.security_context = None;
        spec.dns_policy = None;
        spec.dns_config = None;
        spec.scheduler_name = None;
        spec.service_account = None;
        spec.service_account_name = None;
        spec.preemption_policy = None;
        spec.priority_class_name = None;
        spec.restart_policy = None;
        spec.node_selector = None;
        spec.host_aliases = None;
        spec.hostname = None;
        spec.subdomain = None;
        spec.image_pull_secrets = None;
        spec.topology_spread_constraints = None;
        spec.overhead = None;
        spec.runtime_class_name = None;
        spec.scheduling_gates = None;
        spec.resource_claims = None;
        spec.ephemeral_containers = None;
        for container in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
            container.volume_mounts = None;
            container.env = None;
            container.env_from = None;
            container.resources = None;
            container.liveness_probe = None;
            container.readiness_probe = None;
            container.startup_probe = None;
            container.security_context = None;
            container.command = None;
            container.args = None;
            container.working_dir = None;
            container.ports = None;
            container.lifecycle = None;
            container.termination_message_path = None;
            container.termination_message_policy = None;
            container.image_pull_policy = None;
            container.resize_policy = None;
            container.volume_devices = None;
        }
    }
    if let Some(status) = pod.status.as_mut() {
        status.pod_ips = None;
        status.host_ips = None;
        status.qos_class = None;
        status.nominated_node_name = None;
        status.ephemeral_container_statuses = None;
        status.resource_claim_statuses = None;
        for container in status.container_statuses.iter_mut().chain(status.init_container_statuses.iter_mut()).flatten()
        {
            container.last_state = None;
            container.container_id = None;
            container.allocated_resources = None;
            container.allocated_resources_status = None;
            container.resources = None;
            container.volume_mounts = None;
            container.user = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    use super::slim;
    use crate::fixtures::{gd, hook_template};
    use crate::forecast::cluster::{SimCluster, ts};
    use crate::planner::{Observed, Plan, plan};

    /// What an API server adds to a pod the simulated cluster builds (kube-sim's defaults and status, as `kubectl
    /// get pod -o json` shows them), merged into each of its pods before planning.
    fn as_served(pod: &Pod) -> Pod {
        let served: Value =
            serde_json::from_str(include_str!("../../testdata/pod-as-served.json")).expect("valid test data");
        let mut doc = serde_json::to_value(pod).expect("a pod encodes");
        merge(&mut doc, &served);
        serde_json::from_value(doc).expect("still a pod")
    }

    /// Objects merge key by key; a served list of one object merges into every item of the pod's list (each
    /// served container onto every container); anything else is set where the pod has nothing.
    fn merge(doc: &mut Value, served: &Value) {
        match (doc, served) {
            (Value::Object(doc), Value::Object(served)) => {
                for (key, value) in served {
                    match doc.get_mut(key) {
                        Some(existing) if !existing.is_null() => merge(existing, value),
                        // Served container fields complete the pod's own containers (which must be named) only.
                        _ if key == "containers" || key == "containerStatuses" => {}
                        _ => {
                            doc.insert(key.clone(), value.clone());
                        }
                    }
                }
            }
            (Value::Array(doc), Value::Array(served)) if served.len() == 1 && served[0].is_object() => {
                for item in doc.iter_mut() {
                    merge(item, &served[0]);
                }
            }
            _ => {}
        }
    }

    fn plan_on(world: &SimCluster, pods: &[Pod]) -> Plan {
        plan(&Observed {
            gd: &world.gd,
            pods: pods.iter().collect(),
            revisions: world.revisions.iter().collect(),
            node_costs: &BTreeMap::new(),
            now: ts(world.now),
            seed: world.seed,
            hook_runs: &world.hook_runs,
            hook_templates: &world.hook_templates,
            claims: Vec::new(),
            keys: &world.keys,
        })
    }

    /// Passes until the world settles, each planned on pods as served and on the same pods slimmed: the plans must
    /// be the same. Every run the plans create succeeds at once. Returns how many passes changed something.
    fn same_plans_until_settled(world: &mut SimCluster) -> usize {
        let mut changed = 0;
        for _ in 0..60 {
            world.tick(1);
            let served: Vec<Pod> = world.pods.iter().map(as_served).collect();
            let slimmed: Vec<Pod> = served
                .iter()
                .cloned()
                .map(|mut p| {
                    slim(&mut p);
                    p
                })
                .collect();
            let (full, lean) = (plan_on(world, &served), plan_on(world, &slimmed));
            assert_eq!(format!("{:?}", full.actions), format!("{:?}", lean.actions));
            assert_eq!(format!("{:?}", full.status), format!("{:?}", lean.status));
            assert_eq!(full.requeue_after, lean.requeue_after);
            if full.actions.is_empty() && full.requeue_after.is_none() {
                return changed;
            }
            changed += usize::from(!full.actions.is_empty());
            world.finish_pass(&full);
            for run in &mut world.hook_runs {
                std::sync::Arc::make_mut(run).status = Some(common::api::HookRunStatus {
                    phase: Some(common::api::HookPhase::Successful),
                    ..Default::default()
                });
            }
        }
        changed
    }

    #[test]
    fn the_plans_on_slimmed_pods_are_the_plans_on_pods_as_served() {
        let mut gd = gd(4, "InplaceUpdate");
        let strategy = json!({"hook": {"templateName": "drain"}});
        gd.spec.pre_delete_update_strategy = Some(serde_json::from_value(strategy.clone()).expect("valid strategy"));
        gd.spec.pre_inplace_update_strategy = Some(serde_json::from_value(strategy).expect("valid strategy"));
        let mut world = SimCluster::new(gd);
        world.hook_templates.push(hook_template());
        assert!(same_plans_until_settled(&mut world) > 0, "the pods were created");
        // A hooked in-place roll...
        world.gd.spec.template.spec.as_mut().expect("a pod spec").containers[0].image = Some("game:2".into());
        world.gd.metadata.generation = Some(2);
        assert!(same_plans_until_settled(&mut world) > 0, "the roll changed pods");
        // ...and a hooked scale-in.
        world.gd.spec.replicas = Some(1);
        world.gd.metadata.generation = Some(3);
        assert!(same_plans_until_settled(&mut world) > 0, "the scale-in deleted pods");
        assert_eq!(world.active().len(), 1);
    }

    #[test]
    fn slimming_drops_what_the_server_adds_and_keeps_what_is_read() {
        let mut pod = as_served(&crate::fixtures::pod("game-a").serving("rev-1", "game:1", 10).build());
        let before = serde_json::to_value(&pod).expect("a pod encodes");
        slim(&mut pod);
        let after = serde_json::to_value(&pod).expect("a pod encodes");
        for dropped in ["/spec/volumes", "/spec/tolerations", "/spec/containers/0/ports", "/status/podIPs"] {
            assert!(before.pointer(dropped).is_some() && after.pointer(dropped).is_none(), "{dropped}");
        }
        for kept in [
            "/metadata/labels",
            "/spec/containers/0/name",
            "/spec/containers/0/image",
            "/spec/nodeName",
            "/status/conditions",
            "/status/podIP",
            "/status/containerStatuses/0/imageID",
        ] {
            assert!(after.pointer(kept).is_some() && before.pointer(kept) == after.pointer(kept), "{kept}");
        }
    }
}
