//! The workload controllers of kube-controller-manager, as far as the product and its users'
//! tooling depend on them: Deployments ([`deployment`]), ReplicaSets ([`replicaset`]) and the
//! Endpoints/EndpointSlices of Services ([`endpoints`]).
//!
//! Each acts only on objects of its own kind that exist: pods another controller owns (a
//! GameDeployment's) are never claimed, Services without a selector are never given endpoints.
//! Decisions are pure functions ([`rollout`], [`revision`], [`progress`], the `plan` of
//! [`replicaset`], the `members` of [`endpoints`]); this loop routes committed changes to the
//! objects they concern and runs their syncs through the registry, one at a time, as the
//! controllers' work queues do (a sync may ask to run again later: `minReadySeconds`,
//! `progressDeadlineSeconds`).

mod admitted;
mod deployment;
pub(crate) mod endpoints;
mod events;
mod io;
mod lagged;
mod pods;
mod progress;
mod replicaset;
mod revision;
mod rollout;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::meta;
use crate::registry::Registry;
use crate::selector::object_labels;
use crate::store::{Event, EventKind};

/// Settings of the workload controllers.
#[derive(Clone, Debug, Default)]
pub(crate) struct WorkloadConfig {
    /// How long after a pod's change its Services' endpoints follow.
    pub endpoint_propagation_delay: Duration,
}

/// A unit of work: an object to sync.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Work {
    Deployment(String, String),
    ReplicaSet(String, String),
    Service(String, String),
}

struct Loop {
    registry: Arc<Registry>,
    /// Validating admission, which the ReplicaSet controller's pod writes go through.
    admission: Arc<crate::admission::Admission>,
    pods: lagged::LaggedPods,
    /// Work and when it is due.
    due: HashMap<Work, Instant>,
    rs_storage: String,
    deploy_storage: String,
}

fn split(key: &str) -> Option<(String, String)> {
    key.split_once('/').map(|(ns, name)| (ns.to_string(), name.to_string()))
}

impl Loop {
    fn schedule(&mut self, work: Work, at: Instant) {
        let e = self.due.entry(work).or_insert(at);
        if at < *e {
            *e = at;
        }
    }

    /// The owner Deployment of ReplicaSet `ns/name`, if it has one.
    fn deployment_of_rs(&self, ns: &str, rs: &str) -> Option<Work> {
        let obj = self.registry.store.get(&self.rs_storage, &format!("{ns}/{rs}"))?;
        match pods::controller_kind_name(&obj) {
            Some(("Deployment", d)) => Some(Work::Deployment(ns.to_string(), d.to_string())),
            _ => None,
        }
    }

    fn observe(&mut self, e: &Event, now: Instant) {
        let Some((ns, name)) = split(&e.key) else { return };
        let storage = &*e.storage;
        let objects = [Some(&e.object), e.prev.as_ref()];
        if storage == self.deploy_storage {
            self.schedule(Work::Deployment(ns, name), now);
        } else if storage == self.rs_storage {
            for o in objects.into_iter().flatten() {
                if let Some(("Deployment", d)) = pods::controller_kind_name(o) {
                    self.schedule(Work::Deployment(ns.clone(), d.to_string()), now);
                }
            }
            if e.kind != EventKind::Deleted {
                self.schedule(Work::ReplicaSet(ns, name), now);
            }
        } else if storage == "pods" {
            let mut owned = false;
            for o in objects.into_iter().flatten() {
                if let Some(("ReplicaSet", rs)) = pods::controller_kind_name(o) {
                    owned = true;
                    self.schedule(Work::ReplicaSet(ns.clone(), rs.to_string()), now);
                    // Recreate waits for old pods to be gone.
                    if e.kind == EventKind::Deleted
                        && let Some(d) = self.deployment_of_rs(&ns, rs)
                    {
                        self.schedule(d, now);
                    }
                }
            }
            if !owned && e.kind != EventKind::Deleted && pods::controller_ref(&e.object).is_none() {
                self.orphan(&ns, &e.object, now);
            }
            let pod = (e.kind != EventKind::Deleted).then(|| e.object.clone());
            self.pods.observe(e.key.clone(), pod, now);
        } else if storage == "services" {
            self.schedule(Work::Service(ns, name), now);
        }
    }

    /// An orphan pod: the ReplicaSets whose selector matches it may adopt it.
    fn orphan(&mut self, ns: &str, pod: &Value, now: Instant) {
        let labels = object_labels(pod);
        if labels.is_empty() {
            return;
        }
        for rs in io::list(&self.registry, &self.rs_storage, ns) {
            if replicaset::selector(&rs).is_some_and(|s| s.matches(&labels)) {
                self.schedule(Work::ReplicaSet(ns.to_string(), meta::name(&rs).to_string()), now);
            }
        }
    }

    /// Pod changes that became visible to the endpoint controllers: their Services sync.
    fn promote(&mut self, now: Instant) {
        for (before, after) in self.pods.promote(now) {
            let Some(pod) = after.as_ref().or(before.as_ref()) else { continue };
            let ns = meta::namespace(pod).to_string();
            for svc in io::list(&self.registry, "services", &ns) {
                let Some(sel) = endpoints::selector(&svc) else { continue };
                if [&before, &after].into_iter().flatten().any(|p| endpoints::selects(&sel, p)) {
                    self.schedule(Work::Service(ns.clone(), meta::name(&svc).to_string()), now);
                }
            }
        }
    }

    async fn run_due(&mut self, now: Instant) {
        let ready: Vec<Work> = self.due.iter().filter(|(_, at)| **at <= now).map(|(w, _)| w.clone()).collect();
        for work in ready {
            self.due.remove(&work);
            let again = match &work {
                Work::Deployment(ns, name) => deployment::sync(&self.registry, ns, name),
                Work::ReplicaSet(ns, name) => replicaset::sync(&self.registry, &self.admission, ns, name).await,
                Work::Service(ns, name) => {
                    endpoints::sync(&self.registry, ns, name, &self.pods.in_namespace(ns));
                    None
                }
            };
            if let Some(after) = again {
                self.schedule(work, Instant::now() + after);
            }
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        self.due.values().copied().chain(self.pods.next_due()).min()
    }
}

/// Runs the workload controllers until `shutdown` flips. `rx` must have been subscribed before
/// any object was created, so every pod is seen.
pub(crate) async fn run(
    registry: Arc<Registry>,
    admission: Arc<crate::admission::Admission>,
    config: WorkloadConfig,
    mut rx: mpsc::UnboundedReceiver<Arc<Event>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let storage = |g: &str, p: &str| io::storage(&registry, g, p).unwrap_or_default();
    let mut l = Loop {
        pods: lagged::LaggedPods::new(config.endpoint_propagation_delay),
        due: HashMap::new(),
        rs_storage: storage("apps", "replicasets"),
        deploy_storage: storage("apps", "deployments"),
        registry,
        admission,
    };
    loop {
        let wake = l.next_wake().unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = shutdown.changed() => {
                if *shutdown.borrow() { return; }
            }
            ev = rx.recv() => {
                let Some(ev) = ev else { return };
                let now = Instant::now();
                l.observe(&ev, now);
                while let Ok(ev) = rx.try_recv() {
                    l.observe(&ev, now);
                }
            }
            _ = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        l.promote(now);
        l.run_due(now).await;
    }
}
