//! The simulated cluster: a plan is sent to it by the operator's own executor
//! ([`crate::controller::execute::Executor`]: its order, batches and slow start), whose requests it answers the way
//! the API server would ([`super::sim_writes`]: JSON patches with their `test` preconditions, graceful deletion,
//! names taken, UID preconditions, UIDs and creation times); and it runs a minimal kubelet (scheduling, containers
//! starting, restarting on an image change, `Ready` honouring readiness gates). The planner's own tests run on it,
//! and so does [`super::forecast`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use common::api::GameDeployment;
use common::cached_pod::{ContainerState, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{ContainerStateRunning, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::requests::{Fault, Sent};
use crate::controller::ledger::Standalone;
use crate::hookrun_keys::Keyring;
#[cfg(test)]
use crate::ownership;
use crate::planner::{Observed, Plan, plan};

/// Writes in flight at once in the simulated executor (the controller's default `--write-concurrency`).
pub(super) const WRITE_CONCURRENCY: usize = 16;

/// The objects of one namespace as the API server would hold them, and the clock.
pub struct SimCluster {
    /// The GameDeployment, status included, as the executor last wrote it.
    pub gd: GameDeployment,
    /// Its pods, terminating ones included until their grace period ends.
    pub pods: Vec<Pod>,
    /// Its ControllerRevisions.
    pub revisions: Vec<ControllerRevision>,
    /// `io.tencent.bcs.dev/node-deletion-cost` by node.
    pub node_costs: BTreeMap<String, f64>,
    /// Seconds since the epoch.
    pub now: i64,
    /// The seed new instance ids are drawn from; moved on after every pass, as the operator draws a new one.
    pub seed: u64,
    next_uid: u64,
    /// This cluster's number in the process: its UIDs are `sim-<cluster>-uid-<n>`, unique in the process as the API
    /// server's are in a cluster, because the operator's memos (run spec hashes, pod facts) are keyed by UID and
    /// shared by every pass of the process, simulated ones included.
    cluster: u64,
    /// Requests the "server" refused (a failed `test`, a name taken, a UID precondition, a missing object), for
    /// assertions; injected [`Fault`]s are not counted.
    pub rejected: usize,
    /// The claims of `spec.volumeClaimTemplates` the executor made.
    pub claims: Vec<PersistentVolumeClaim>,
    /// Requests that fail on purpose (tests).
    pub faults: Vec<Fault>,
    /// The requests of the last pass, in the order the executor sent them.
    pub sent: Vec<Sent>,
    /// The executor's expectations and metrics (a simulated pass never waits on them: it reads the cluster itself).
    pub(super) books: Option<Box<Standalone>>,
    /// The namespace's HookRuns (the executor creates and deletes them; a simulated hook-operator sets their phase).
    pub hook_runs: Vec<std::sync::Arc<common::api::HookRun>>,
    /// The namespace's HookTemplates, from which the executor makes runs.
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

/// The instant `second` seconds after the epoch (the epoch itself for one out of range): the simulated clock's
/// seconds as the planner's timestamps.
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
        gd.metadata.resource_version.get_or_insert_with(|| "sim-gd-1".into());
        Self {
            gd,
            pods: Vec::new(),
            revisions: Vec::new(),
            node_costs: BTreeMap::new(),
            now: 1_000_000,
            seed: 7,
            next_uid: 0,
            cluster: {
                static CLUSTERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            rejected: 0,
            claims: Vec::new(),
            faults: Vec::new(),
            sent: Vec::new(),
            books: None,
            hook_runs: Vec::new(),
            hook_templates: Vec::new(),
            keys,
            seen: HashMap::new(),
            #[cfg(test)]
            created: Vec::new(),
        }
    }

    /// What the planner decides for the cluster as it is now (the pass is not applied).
    pub fn plan(&self) -> Plan {
        plan(&self.observed())
    }

    /// The cluster as the operator observes it at the start of a pass.
    pub(crate) fn observed(&self) -> Observed<'_> {
        Observed {
            gd: &self.gd,
            pods: self.pods.iter().collect(),
            revisions: self.revisions.iter().collect(),
            node_costs: &self.node_costs,
            now: ts(self.now),
            seed: self.seed,
            hook_runs: &self.hook_runs,
            hook_templates: &self.hook_templates,
            claims: self.claims.iter().collect(),
            keys: &self.keys,
        }
    }

    /// Applies a pass's plan and moves on the seed of new instance ids (as the operator draws a new one per pass).
    pub fn finish_pass(&mut self, plan: &Plan) {
        self.apply(plan);
        self.seed = self.seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    }

    pub(super) fn uid(&mut self) -> String {
        self.next_uid += 1;
        format!("sim-{}-uid-{}", self.cluster, self.next_uid)
    }

    /// The GameDeployment was written: a new resourceVersion, as the API server gives (the planner's spec patches
    /// carry it as their precondition).
    pub(super) fn gd_written(&mut self) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(2);
        let rv = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.gd.metadata.resource_version = Some(format!("sim-gd-{rv}"));
    }

    /// Sends a pass's plan as the controller does ([`Self::execute`]), then writes the status it computed with what
    /// the writes did (`FailedScale` / `FailedUpdate`, a revision collision), as the controller's report does.
    pub fn apply(&mut self, plan: &Plan) {
        let mut plan = plan.clone();
        let outcome = self.execute(&mut plan);
        let mut status = plan.status;
        if outcome.collision {
            status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
        }
        crate::planner::status::apply_write_outcome(&mut status, &outcome.failures, &outcome.succeeded, ts(self.now));
        if self.gd.status.as_ref() != Some(&status) {
            self.gd.status = Some(status);
            self.gd_written();
        }
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

    /// `status.updateRevision` as last written: the revision the rollout moves pods to.
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
    /// Sends `actions` alone with the executor, the status left as it is (tests that look at what a plan's actions
    /// do, on a copy of the cluster).
    pub fn send(&mut self, actions: &[crate::action::Action]) {
        let mut plan = Plan {
            actions: actions.to_vec(),
            status: self.gd.status.clone().unwrap_or_default(),
            events: Vec::new(),
            held: Vec::new(),
            requeue_after: None,
            canary_held: 0,
        };
        self.execute(&mut plan);
        self.new_resource_versions();
    }

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
            s.node_name = Some(format!("node-{}", i % 3).into());
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
                    image_id: image_id(&image).into(),
                    restart_count: s.restart_count + 1,
                    ready: false,
                    ..s.clone()
                },
                None => ContainerStatus {
                    name: c.name.clone(),
                    image: image.clone(),
                    image_id: image_id(&image).into(),
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
