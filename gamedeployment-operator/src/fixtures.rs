//! Test builders shared by every module's tests (as kube-rs `controller-rs` keeps its `fixtures.rs`): a
//! GameDeployment, pods in any state, HookTemplates. One place, so a change to what a pod or a GameDeployment
//! looks like is made once.

use common::api::{GameDeployment, HookTemplate};
use common::cached_pod::PodCondition;
use common::cached_pod::{Container, ContainerState, ContainerStatus, Pod, PodSpec, PodStatus};
use common::keys;
use k8s_openapi::api::core::v1::{ContainerStateRunning, PodReadinessGate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::lifecycle::LifecycleState;

/// UID of the GameDeployment [`gd`] builds.
pub(crate) const GD_UID: &str = "gd-uid";

/// `game` in namespace `default`: `replicas` pods of `game:1` (container `main`), selector `app=game`.
pub(crate) fn gd(replicas: i32, strategy: &str) -> GameDeployment {
    serde_json::from_value(json!({
        "apiVersion": "tkex.tencent.com/v1alpha1",
        "kind": "GameDeployment",
        "metadata": {"name": "game", "namespace": "default", "uid": GD_UID, "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "game"}},
            "template": {
                "metadata": {"labels": {"app": "game"}},
                "spec": {"containers": [{"name": "main", "image": "game:1"}]}
            },
            "updateStrategy": {"type": strategy}
        }
    }))
    .expect("valid GameDeployment")
}

/// [`gd`] with another image.
pub(crate) fn gd_with_image(image: &str) -> GameDeployment {
    let mut gd = gd(1, "RollingUpdate");
    if let Some(spec) = gd.spec.template.spec.as_mut() {
        spec.containers[0].image = Some(image.into());
    }
    gd
}

/// The HookTemplate `drain` (one web metric on `{{ args.PodIP }}`).
pub(crate) fn hook_template() -> HookTemplate {
    serde_json::from_value(json!({
        "apiVersion": "tkex.tencent.com/v1alpha1",
        "kind": "HookTemplate",
        "metadata": {"name": "drain", "namespace": "default"},
        "spec": {"args": [{"name": "PodIP"}], "metrics": [{"name": "m", "provider": {"web": {"url": "http://{{ args.PodIP }}"}}}]}
    }))
    .expect("valid template")
}

/// A pod with only a name; the builder methods add the rest.
pub(crate) fn pod(name: &str) -> PodBuilder {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    PodBuilder(pod)
}

pub(crate) struct PodBuilder(Pod);

impl PodBuilder {
    pub fn build(self) -> Pod {
        self.0
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.0.metadata.uid = Some(uid.into());
        self
    }

    pub fn resource_version(mut self, rv: &str) -> Self {
        self.0.metadata.resource_version = Some(rv.into());
        self
    }

    /// Sets the labels map (present even when empty).
    pub fn labels(mut self, pairs: &[(&str, &str)]) -> Self {
        let labels = self.0.metadata.labels.get_or_insert_with(Default::default);
        labels.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.annotations.get_or_insert_with(Default::default).insert(key.into(), value.into());
        self
    }

    /// Controlled by the GameDeployment with this UID.
    pub fn owned_by(mut self, uid: &str) -> Self {
        self.0.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "tkex.tencent.com/v1alpha1".into(),
            kind: "GameDeployment".into(),
            name: "game".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        self
    }

    pub fn created_at(mut self, second: i64) -> Self {
        self.0.metadata.creation_timestamp = Some(Time(ts(second)));
        self
    }

    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        self
    }

    /// Scheduled on `node` (None: unscheduled, with an empty spec).
    pub fn node(mut self, node: Option<&str>) -> Self {
        self.0.spec.get_or_insert_with(PodSpec::default).node_name = node.map(Into::into);
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.0.status.get_or_insert_with(PodStatus::default).phase = Some(phase.into());
        self
    }

    /// A `Ready` condition: True since `second`, or False.
    pub fn ready_at(mut self, second: Option<i64>) -> Self {
        let status = self.0.status.get_or_insert_with(PodStatus::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(PodCondition {
            type_: "Ready".into(),
            status: if second.is_some() { "True" } else { "False" }.into(),
            last_transition_time: second.map(|s| Time(ts(s))),
            ..Default::default()
        });
        self
    }

    /// A pod of `game` at `revision` that runs `image` and serves: scheduled, Running, containers running,
    /// `InPlaceUpdateReady` and `Ready` True since `since` — as the operator creates them once they started.
    pub fn serving(self, revision: &str, image: &str, since: i64) -> Self {
        let name = self.0.metadata.name.clone().unwrap_or_default();
        let id = name.rsplit('-').next().unwrap_or("").to_string();
        let mut pod = self
            .uid(&format!("uid-{name}"))
            .labels(&[
                ("app", "game"),
                (keys::CONTROLLER_REVISION_HASH, revision),
                (keys::INSTANCE_ID, &id),
                (keys::LIFECYCLE_STATE, LifecycleState::Normal.as_str()),
            ])
            .owned_by(GD_UID)
            .created_at(since)
            .node(Some("node-0"))
            .phase("Running")
            .ready_at(Some(since))
            .0;
        pod.metadata.annotations.get_or_insert_with(Default::default);
        pod.metadata.namespace = Some("default".into());
        let spec = pod.spec.get_or_insert_with(PodSpec::default);
        spec.containers = vec![Container { name: "main".into(), image: Some(image.into()) }];
        spec.readiness_gates = Some(vec![PodReadinessGate { condition_type: keys::IN_PLACE_UPDATE_READY.into() }]);
        let status = pod.status.get_or_insert_with(PodStatus::default);
        status.pod_ip = Some("127.0.0.1".into());
        status.container_statuses = Some(vec![ContainerStatus {
            name: "main".into(),
            image: image.into(),
            image_id: format!("id-{image}").into(),
            ready: true,
            state: Some(ContainerState { running: Some(ContainerStateRunning::default()) }),
            ..Default::default()
        }]);
        status.conditions.get_or_insert_with(Vec::new).push(PodCondition {
            type_: keys::IN_PLACE_UPDATE_READY.into(),
            status: "True".into(),
            last_transition_time: Some(Time(ts(since))),
            ..Default::default()
        });
        Self(pod)
    }

    /// Moves the pod to a lifecycle state.
    pub fn state(self, state: LifecycleState) -> Self {
        self.labels(&[(keys::LIFECYCLE_STATE, state.as_str())])
    }

    /// `Ready` False (the containers stopped being ready).
    pub fn not_ready(self) -> Self {
        self.ready_at(None)
    }
}

/// `second` seconds after the epoch.
pub(crate) fn ts(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH)
}
