//! The simulated cluster: it applies plans the way the API server would (JSON patches with their `test`
//! preconditions, graceful deletion, `generateName`-free names the planner chose, UIDs and creation times) and runs
//! a minimal kubelet (scheduling, containers starting, restarting on an image change, `Ready` honouring readiness
//! gates). The planner's own tests run on it, and so does [`super::forecast`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use common::api::GameDeployment;
use common::cached_pod::{ContainerState, ContainerStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{ContainerStateRunning, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::action::{Action, PodWrite};
use crate::hookrun_keys::Keyring;
use crate::ownership;
use crate::planner::{Observed, Plan, plan};

/// The objects of one namespace as the API server would hold them, and the clock.
pub struct SimCluster {
    pub gd: GameDeployment,
    pub pods: Vec<Pod>,
    pub revisions: Vec<ControllerRevision>,
    pub node_costs: BTreeMap<String, f64>,
    /// Seconds since the epoch.
    pub now: i64,
    pub seed: u64,
    next_uid: u64,
    /// Patches the "server" rejected (failed `test`), for assertions.
    pub rejected: usize,
    pub hook_runs: Vec<std::sync::Arc<common::api::HookRun>>,
    pub hook_templates: Vec<common::api::HookTemplate>,
    /// The keys the simulated operator signs and verifies attempt stamps with.
    pub keys: Arc<Keyring>,
    /// Each pod as it was when it last got its resourceVersion, by name and UID ([`Self::new_resource_versions`]).
    seen: HashMap<(String, String), Pod>,
    /// Every pod created, as the operator sent it (the cache keeps only what the operator reads), for assertions
    /// on fields the operator writes but never reads, as a container's `env`.
    #[cfg(test)]
    pub created: Vec<k8s_openapi::api::core::v1::Pod>,
}

pub fn ts(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH)
}

#[cfg(test)]
impl SimCluster {
    /// A cluster with `gd` alone, signing with a fixed test key.
    pub fn new(gd: GameDeployment) -> Self {
        let keys = Keyring::parse("test-key-0123456789-0123456789-0123456789").unwrap_or_else(|e| panic!("{e}"));
        Self::with_keys(gd, Arc::new(keys))
    }
}

impl SimCluster {
    /// A cluster with `gd` alone (given a UID, namespace and generation if it has none), at a fixed clock.
    pub fn with_keys(mut gd: GameDeployment, keys: Arc<Keyring>) -> Self {
        gd.metadata.uid.get_or_insert_with(|| "gd-uid".into());
        gd.metadata.namespace.get_or_insert_with(|| "default".into());
        gd.metadata.generation.get_or_insert(1);
        Self {
            gd,
            pods: Vec::new(),
            revisions: Vec::new(),
            node_costs: BTreeMap::new(),
            now: 1_000_000,
            seed: 7,
            next_uid: 0,
            rejected: 0,
            hook_runs: Vec::new(),
            hook_templates: Vec::new(),
            keys,
            seen: HashMap::new(),
            #[cfg(test)]
            created: Vec::new(),
        }
    }

    pub fn plan(&self) -> Plan {
        let observed = Observed {
            gd: &self.gd,
            pods: self.pods.iter().collect(),
            revisions: self.revisions.iter().collect(),
            node_costs: &self.node_costs,
            now: ts(self.now),
            seed: self.seed,
            hook_runs: &self.hook_runs,
            hook_templates: &self.hook_templates,
            claims: Vec::new(),
            keys: &self.keys,
        };
        plan(&observed)
    }

    /// Applies a pass's plan and moves on the seed of new instance ids (as the operator draws a new one per pass).
    pub fn finish_pass(&mut self, plan: &Plan) {
        self.apply(plan);
        self.seed = self.seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    }

    fn uid(&mut self) -> String {
        self.next_uid += 1;
        format!("sim-uid-{}", self.next_uid)
    }

    pub fn apply(&mut self, plan: &Plan) {
        for action in &plan.actions {
            self.apply_action(action);
        }
        self.gd.status = Some(plan.status.clone());
        self.new_resource_versions();
    }

    /// Gives every pod that changed since the last call a new resourceVersion, as the API server does on each write
    /// (and only then): the planner remembers what it read from a pod by UID and resourceVersion
    /// (`planner::update::inplace::step`), so a pod changed here without a new one would be read as it was, and a
    /// pod given a new one without a change would be read again for nothing, which no real pass does. A change is
    /// anything that differs from the copy kept at the last call, however it was made (actions, the kubelet, a
    /// test's own edit). Unique in the process: forecasts running side by side never share one.
    fn new_resource_versions(&mut self) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mut seen = std::mem::take(&mut self.seen);
        let mut kept = HashMap::with_capacity(self.pods.len());
        for pod in &mut self.pods {
            let key = (pod.metadata.name.clone().unwrap_or_default(), pod.metadata.uid.clone().unwrap_or_default());
            let unchanged = pod.metadata.resource_version.is_some() && seen.get(&key).is_some_and(|last| last == pod);
            let last = match seen.remove(&key) {
                Some(last) if unchanged => last,
                _ => {
                    let rv = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    pod.metadata.resource_version = Some(format!("sim-{rv}"));
                    pod.clone()
                }
            };
            kept.insert(key, last);
        }
        self.seen = kept;
    }

    fn pod_mut(&mut self, name: &str, uid: &str) -> Option<&mut Pod> {
        self.pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some(name) && p.metadata.uid.as_deref() == Some(uid))
    }

    pub fn apply_action(&mut self, action: &Action) {
        let now = ts(self.now);
        match action {
            Action::CreateRevision(r) => {
                if !self.revisions.iter().any(|x| x.metadata.name == r.metadata.name) {
                    self.revisions.push((**r).clone());
                }
            }
            Action::RenumberRevision { name, revision } => {
                if let Some(r) = self.revisions.iter_mut().find(|r| r.metadata.name.as_deref() == Some(name)) {
                    r.revision = Some(*revision);
                }
            }
            Action::DeleteRevision { name } => self.revisions.retain(|r| r.metadata.name.as_deref() != Some(name)),
            Action::AdoptPod(p) => {
                let owner = ownership::owner_reference(&self.gd);
                if let Some(pod) = self.pod_mut(&p.name, &p.uid) {
                    pod.metadata.owner_references.get_or_insert_with(Vec::new).push(owner);
                }
            }
            Action::ReleasePod(p) => {
                if let Some(pod) = self.pod_mut(&p.name, &p.uid)
                    && let Some(refs) = pod.metadata.owner_references.as_mut()
                {
                    refs.retain(|r| r.controller != Some(true));
                }
            }
            Action::CreatePod { pod, .. } => {
                if self.pods.iter().any(|p| p.metadata.name == pod.metadata.name) {
                    self.rejected += 1;
                    return;
                }
                #[cfg(test)]
                self.created.push((**pod).clone());
                let mut pod = Pod::from((**pod).clone());
                pod.metadata.uid = Some(self.uid());
                pod.metadata.creation_timestamp = Some(Time(now));
                self.pods.push(pod);
            }
            Action::DeletePod { pod, .. } => {
                if let Some(pod) = self.pod_mut(&pod.name, &pod.uid) {
                    pod.metadata.deletion_timestamp.get_or_insert(Time(now));
                }
            }
            Action::PatchPod(change) => {
                let Some(index) = self.pods.iter().position(|p| {
                    p.metadata.name.as_deref() == Some(&change.pod.name)
                        && p.metadata.uid.as_deref() == Some(&change.pod.uid)
                }) else {
                    self.rejected += 1;
                    return;
                };
                for write in &change.writes {
                    let (PodWrite::Status(ops) | PodWrite::Object(ops)) = write;
                    let mut doc = serde_json::to_value(&self.pods[index]).unwrap_or(Value::Null);
                    let Ok(patch) = serde_json::from_value::<json_patch::Patch>(Value::Array(ops.clone())) else {
                        self.rejected += 1;
                        return;
                    };
                    if json_patch::patch(&mut doc, &patch).is_err() {
                        self.rejected += 1;
                        return;
                    }
                    match serde_json::from_value(doc) {
                        Ok(pod) => self.pods[index] = pod,
                        Err(_) => {
                            self.rejected += 1;
                            return;
                        }
                    }
                }
            }
            Action::CreateHookRun(run) => {
                if self.hook_runs.iter().any(|r| r.metadata.name == run.metadata.name) {
                    self.rejected += 1;
                    return;
                }
                let mut run = (**run).clone();
                run.metadata.uid = Some(self.uid());
                run.metadata.creation_timestamp = Some(Time(now));
                self.hook_runs.push(std::sync::Arc::new(run));
            }
            Action::DeleteHookRun { name, uid, .. } => self.hook_runs.retain(|r| {
                r.metadata.name.as_deref() != Some(name.as_str()) || r.metadata.uid.as_deref() != Some(uid.as_str())
            }),
            Action::SetPaused { paused, .. } => self.gd.spec.update_strategy.paused = *paused,
            Action::ResetRetry { kind, .. } => {
                let spec = &mut self.gd.spec;
                match kind {
                    common::hookrun::HookKind::PreDelete => {
                        if let Some(s) = spec.pre_delete_update_strategy.as_mut() {
                            s.retry = false;
                        }
                    }
                    common::hookrun::HookKind::PreInplace => {
                        if let Some(s) = spec.pre_inplace_update_strategy.as_mut() {
                            s.retry = false;
                        }
                    }
                    common::hookrun::HookKind::PostInplace => {
                        if let Some(s) = spec.post_inplace_update_strategy.as_mut() {
                            s.retry = false;
                        }
                    }
                    common::hookrun::HookKind::CanaryStep => {}
                }
            }
            Action::PrunePodsToDelete { expected, remaining } => {
                if let Some(strategy) = self.gd.spec.scale_strategy.as_mut() {
                    if &strategy.pods_to_delete == expected {
                        strategy.pods_to_delete = remaining.clone();
                    } else {
                        self.rejected += 1;
                    }
                }
            }
            // Claims are not simulated here (the simulated cluster has no volumeClaimTemplates); `crate::planner::scale::volumes` tests them.
            Action::CreateClaims { .. } | Action::DeleteClaims { .. } => {}
        }
    }

    /// The kubelet and garbage collection catch up by one step, and the clock moves `seconds`.
    pub fn tick(&mut self, seconds: i64) {
        self.now += seconds;
        let now = ts(self.now);
        self.pods.retain(|p| p.metadata.deletion_timestamp.is_none());
        for (i, pod) in self.pods.iter_mut().enumerate() {
            kubelet(pod, now, i);
        }
        self.new_resource_versions();
    }

    pub fn update_revision(&self) -> Option<String> {
        self.gd.status.as_ref().and_then(|s| s.update_revision.clone())
    }
}

#[cfg(test)]
use crate::lifecycle::{self, LifecycleState};
#[cfg(test)]
use common::keys;

#[cfg(test)]
impl SimCluster {
    /// One reconcile pass: plan and apply. Returns the plan.
    pub fn pass(&mut self) -> Plan {
        let plan = self.plan();
        self.finish_pass(&plan);
        plan
    }

    /// Pods of this GameDeployment that are not terminating.
    pub fn active(&self) -> Vec<&Pod> {
        self.pods
            .iter()
            .filter(common::pod::is_active)
            .filter(|p| {
                ownership::controller_of(p.metadata.owner_references.as_ref())
                    .is_some_and(|o| ownership::is_owned_by(o, &self.gd))
            })
            .collect()
    }

    /// Active pods on the update revision, and on any other revision.
    pub fn revision_counts(&self) -> (usize, usize) {
        let update = self.update_revision();
        let active = self.active();
        let updated = active
            .iter()
            .filter(|p| common::pod::label(p, keys::CONTROLLER_REVISION_HASH) == update.as_deref())
            .count();
        (updated, active.len() - updated)
    }

    /// Pods that serve traffic and have nothing pending: what `maxUnavailable` protects.
    pub fn serving(&self) -> usize {
        self.active().into_iter().filter(|p| serving(p)).count()
    }

    /// Passes (each after a one-second tick) until a pass plans nothing. Returns the number of passes, or None
    /// if it did not settle within `max`.
    pub fn settle(&mut self, max: usize, mut check: impl FnMut(&SimCluster, &Plan)) -> Option<usize> {
        for i in 0..max {
            self.tick(1);
            let plan = self.plan();
            check(self, &plan);
            let quiet = plan.actions.is_empty() && plan.requeue_after.is_none();
            self.finish_pass(&plan);
            if quiet && self.pods.iter().all(|p| common::pod::is_ready(p) || !common::pod::is_active(p)) {
                return Some(i + 1);
            }
        }
        None
    }
}

#[cfg(test)]
/// Ready, in service (`InPlaceUpdateReady` not False) and in state `Normal`.
pub(crate) fn serving(pod: &Pod) -> bool {
    common::pod::is_active(pod)
        && common::pod::is_ready(pod)
        && common::pod::condition(pod, keys::IN_PLACE_UPDATE_READY).is_none_or(|c| c.status == "True")
        && lifecycle::state_of(pod) == LifecycleState::Normal
}

fn image_id(image: &str) -> String {
    format!("sha256:{}", crate::revision::fnv32a(image.as_bytes()))
}

/// One kubelet step for one pod.
fn kubelet(pod: &mut Pod, now: Timestamp, i: usize) {
    let spec: PodSpec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.get_or_insert_with(PodStatus::default);
    if spec.node_name.is_none() {
        if let Some(s) = pod.spec.as_mut() {
            s.node_name = Some(format!("node-{}", i % 3));
        }
        status.phase = Some("Pending".into());
        return;
    }
    let first_start = status.phase.as_deref() != Some("Running");
    status.phase = Some("Running".into());
    let old: Vec<ContainerStatus> = status.container_statuses.clone().unwrap_or_default();
    let statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| {
            let image = c.image.clone().unwrap_or_default();
            match old.iter().find(|s| s.name == c.name) {
                Some(s) if s.image == image => ContainerStatus { ready: true, ..s.clone() },
                Some(s) => ContainerStatus {
                    image: image.clone(),
                    image_id: image_id(&image),
                    restart_count: s.restart_count + 1,
                    ready: false,
                    ..s.clone()
                },
                None => ContainerStatus {
                    name: c.name.clone(),
                    image: image.clone(),
                    image_id: image_id(&image),
                    ready: !first_start,
                    state: Some(ContainerState { running: Some(ContainerStateRunning::default()) }),
                    ..Default::default()
                },
            }
        })
        .collect();
    let containers_ready = statuses.iter().all(|s| s.ready);
    status.container_statuses = Some(statuses);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let gates_ok = spec
        .readiness_gates
        .iter()
        .flatten()
        .all(|g| conditions.iter().any(|c| c.type_ == g.condition_type && c.status == "True"));
    let ready = if containers_ready && gates_ok { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(c) if c.status == ready => {}
        Some(c) => {
            c.status = ready.into();
            c.last_transition_time = Some(Time(now));
        }
        None => conditions.push(PodCondition {
            type_: "Ready".into(),
            status: ready.into(),
            last_transition_time: Some(Time(now)),
            ..Default::default()
        }),
    }
}
