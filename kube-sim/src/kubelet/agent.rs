//! The event loop that turns watch events and timers into API writes: the imperative shell around
//! the pure runtime, status and scheduler modules.
//!
//! One task owns all state. Watch events only update the cached pods and mark them dirty; after
//! each batch of events every dirty pod is synced once (so a burst of 1,000 pod creations costs
//! 1,000 syncs, not more), and the writes a sync decides on run as separate tasks bounded by a
//! semaphore. A pod has at most one write in flight; whatever changed meanwhile is picked up by
//! the sync that follows the write's outcome.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Error;
use super::behaviour::PodBehaviour;
use super::config::ValidConfig;
use super::endpoint::{self, EndpointSpec, Endpoints, LogTarget};
use super::events;
use super::image;
use super::ipam::{self, PodIpPool};
use super::lean::LeanPod;
use super::node::FakeNode;
use super::process::{PodProcesses, ProcessRuntime, Settings};
use super::runtime::{KillReason, PodInput, PodRuntime, State, Timings, Transition, after};
use super::scheduler::{self, Decision, NodeInfo, Request};
use super::status::{self, StatusInput};
use super::writes::{Outcome, PodRef, WriteError, Writer};
use crate::logs::PodLogs;

/// How often pods that did not fit anywhere are tried again even if nothing seems to have changed
/// (the default scheduler flushes its unschedulable queue periodically too).
const UNSCHEDULABLE_RETRY: Duration = Duration::from_secs(10);
/// Upper bound of the retry back-off after failed writes.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(10);
/// Concurrent Event writes.
const EVENT_CONCURRENCY: usize = 4;
/// How soon a server that could not bind its address is tried again.
const ENDPOINT_RETRY: Duration = Duration::from_secs(1);
/// Events drained from a stream before the dirty pods are synced.
const MAX_BATCH: usize = 2048;

type EventStream<K> = Pin<Box<dyn Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send>>;

/// What the kubelet tracks about a pod.
struct PodEntry {
    pod: Pod,
    runtime: Option<PodRuntime>,
    /// A pod that had already finished before this kubelet saw it: never run again, only its IP
    /// is kept reserved and its deletion finished.
    finished_before_start: Option<Ipv4Addr>,
    inflight: bool,
    retry_attempt: u32,
    retry_at: Option<Instant>,
    wake: Option<Instant>,
    delete_issued: bool,
    /// Node the scheduler bound (or is binding) the pod to, until the watch shows `nodeName`.
    assumed_node: Option<String>,
    unschedulable_message: Option<String>,
    problems: Vec<String>,
    endpoint_failures: Vec<String>,
    /// The status patch in flight and the resourceVersion it was computed from.
    sent_status_patch: Option<(Option<String>, serde_json::Value)>,
    /// The last status patch the server accepted, with its resourceVersion.
    last_status_patch: Option<(Option<String>, serde_json::Value)>,
    /// The pod's containers that run as real processes (dropping it kills them).
    processes: Option<PodProcesses>,
}

impl PodEntry {
    fn new(pod: Pod) -> Self {
        Self {
            pod,
            runtime: None,
            finished_before_start: None,
            inflight: false,
            retry_attempt: 0,
            retry_at: None,
            wake: None,
            delete_issued: false,
            assumed_node: None,
            unschedulable_message: None,
            problems: Vec::new(),
            endpoint_failures: Vec::new(),
            sent_status_patch: None,
            last_status_patch: None,
            processes: None,
        }
    }

    fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    /// The node the pod is bound to according to the API.
    fn bound_node(&self) -> Option<&str> {
        self.pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()).filter(|name| !name.is_empty())
    }

    /// The node the pod is on, or is being bound to.
    fn node(&self) -> Option<&str> {
        self.bound_node().or(self.assumed_node.as_deref())
    }

    fn terminal(&self) -> bool {
        matches!(self.pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
    }
}

/// Runs API writes as bounded concurrent tasks reporting back to the loop.
struct Spawner {
    writer: Writer,
    permits: Arc<Semaphore>,
    /// Events have their own, smaller budget so that recording them never delays pod writes.
    event_permits: Arc<Semaphore>,
    events_enabled: bool,
    tasks: JoinSet<()>,
    outcomes_tx: mpsc::UnboundedSender<Outcome>,
}

impl Spawner {
    fn spawn<F, Fut>(&mut self, write: F)
    where
        F: FnOnce(Writer) -> Fut,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let permits = self.permits.clone();
        self.spawn_with(permits, write);
    }

    /// Records Events (unless disabled), best effort.
    fn record(&mut self, events: Vec<Event>) {
        if !self.events_enabled {
            return;
        }
        for event in events {
            let permits = self.event_permits.clone();
            self.spawn_with(permits, |writer| async move { writer.create_event(event).await });
        }
    }

    fn spawn_with<F, Fut>(&mut self, permits: Arc<Semaphore>, write: F)
    where
        F: FnOnce(Writer) -> Fut,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let write = write(self.writer.clone());
        let outcomes = self.outcomes_tx.clone();
        self.tasks.spawn(async move {
            // The semaphore is never closed, so acquiring only waits.
            let _permit = permits.acquire_owned().await;
            let outcome = write.await;
            // The loop may already have stopped; then nobody needs the outcome.
            let _ = outcomes.send(outcome);
        });
    }

    /// Sends the pod's write, marking it in flight so no second one starts before it ends.
    fn pod_write<F, Fut>(&mut self, entry: &mut PodEntry, write: F)
    where
        F: FnOnce(Writer, PodRef) -> Fut,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let Some(pod) = PodRef::of(&entry.pod) else {
            return;
        };
        entry.inflight = true;
        self.spawn(|writer| write(writer, pod));
    }
}

pub(crate) struct Agent {
    config: ValidConfig,
    timings: Timings,
    nodes: Vec<FakeNode>,
    node_objects: HashMap<String, Node>,
    registering: HashSet<String>,
    registration_attempts: HashMap<String, u32>,
    pods: HashMap<String, PodEntry>,
    /// UIDs listed since the last watcher restart; `Some` while a re-list is in progress.
    relisted: Option<HashSet<String>>,
    ips: PodIpPool,
    endpoints: Endpoints,
    timers: BinaryHeap<Reverse<(Instant, String)>>,
    node_timers: BinaryHeap<Reverse<(Instant, String)>>,
    dirty: HashSet<String>,
    schedule_needed: bool,
    spawner: Spawner,
    outcomes_rx: mpsc::UnboundedReceiver<Outcome>,
    /// The containers' simulated logs.
    logs: Arc<PodLogs>,
    /// Runs the containers of mapped images as processes (`None`: no image is mapped).
    processes: Option<ProcessRuntime>,
    /// UIDs of pods whose processes changed.
    process_rx: mpsc::UnboundedReceiver<String>,
}

impl Agent {
    pub(crate) fn new(client: Client, config: ValidConfig, logs: Arc<PodLogs>) -> Self {
        let raw = &config.raw;
        let timings = Timings {
            start_delay: raw.start_delay,
            ready_delay: raw.ready_delay,
            restart_delay: raw.container_restart_delay,
            crash_loop_backoff: raw.crash_loop_backoff,
            grace_period_scale: raw.grace_period_scale,
        };
        let nodes = config
            .node_names()
            .into_iter()
            .zip(1..)
            .map(|(name, index)| FakeNode { name, ip: ipam::node_ip(index) })
            .collect();
        let (outcomes_tx, outcomes_rx) = mpsc::unbounded_channel();
        let (process_tx, process_rx) = mpsc::unbounded_channel();
        let images = config.image_map();
        let processes = match raw.api_server {
            Some(api_server) if !images.is_empty() => {
                let allocatable = (
                    super::quantity::parse(&raw.node_cpu).unwrap_or_default(),
                    super::quantity::parse(&raw.node_memory).unwrap_or_default(),
                );
                let settings = Settings { images, api_server, timings, node_allocatable: allocatable };
                match ProcessRuntime::new(client.clone(), settings, logs.clone(), process_tx) {
                    Ok(runtime) => Some(runtime),
                    Err(e) => {
                        tracing::error!("the process runtime cannot run; every container is simulated: {e}");
                        None
                    }
                }
            }
            _ => None,
        };
        Self {
            timings,
            nodes,
            node_objects: HashMap::new(),
            registering: HashSet::new(),
            registration_attempts: HashMap::new(),
            pods: HashMap::new(),
            relisted: None,
            ips: PodIpPool::new(raw.pod_ip_start),
            endpoints: Endpoints::default(),
            timers: BinaryHeap::new(),
            node_timers: BinaryHeap::new(),
            dirty: HashSet::new(),
            schedule_needed: false,
            spawner: Spawner {
                writer: Writer::new(client),
                permits: Arc::new(Semaphore::new(raw.api_concurrency)),
                event_permits: Arc::new(Semaphore::new(EVENT_CONCURRENCY)),
                events_enabled: raw.events,
                tasks: JoinSet::new(),
                outcomes_tx,
            },
            outcomes_rx,
            config,
            logs,
            processes,
            process_rx,
        }
    }

    pub(crate) async fn run(mut self, client: Client, mut shutdown: watch::Receiver<bool>) -> Result<(), Error> {
        if *shutdown.borrow() {
            return Ok(());
        }
        let pods = watcher(Api::<LeanPod>::all(client.clone()), watcher::Config::default());
        let mut pod_events: EventStream<LeanPod> = Box::pin(pods.default_backoff());
        let nodes = watcher(Api::<Node>::all(client), watcher::Config::default());
        let mut node_events: EventStream<Node> = Box::pin(nodes.default_backoff());
        for node in self.nodes.clone() {
            self.register(&node);
        }
        let mut heartbeat = tokio::time::interval(self.config.raw.node_status_interval);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        heartbeat.reset(); // Registration has just posted the full status.
        let mut lease_renewal = tokio::time::interval(self.config.raw.node_lease_interval);
        lease_renewal.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut unschedulable_retry = tokio::time::interval(UNSCHEDULABLE_RETRY);
        tracing::info!(nodes = self.nodes.len(), "kubelet simulator started");

        loop {
            let next_timer =
                [self.timers.peek(), self.node_timers.peek()].into_iter().flatten().map(|Reverse((at, _))| *at).min();
            tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        break;
                    }
                }
                Some(event) = pod_events.next() => {
                    self.on_pod_event(event);
                    for _ in 0..MAX_BATCH {
                        match pod_events.next().now_or_never() {
                            Some(Some(event)) => self.on_pod_event(event),
                            _ => break,
                        }
                    }
                }
                Some(event) = node_events.next() => self.on_node_event(event),
                Some(outcome) = self.outcomes_rx.recv() => {
                    self.on_outcome(outcome);
                    while let Ok(outcome) = self.outcomes_rx.try_recv() {
                        self.on_outcome(outcome);
                    }
                }
                Some(uid) = self.process_rx.recv() => {
                    self.dirty.insert(uid);
                    while let Ok(uid) = self.process_rx.try_recv() {
                        self.dirty.insert(uid);
                    }
                }
                _ = sleep_until(next_timer), if next_timer.is_some() => self.fire_timers(),
                _ = heartbeat.tick() => self.heartbeat(),
                _ = lease_renewal.tick() => self.renew_leases(),
                _ = unschedulable_retry.tick() => self.schedule_needed = true,
            }
            while self.spawner.tasks.try_join_next().is_some() {}
            self.sync_dirty();
            if self.schedule_needed {
                self.schedule_pending();
            }
        }
        tracing::info!("kubelet simulator stopping");
        self.spawner.tasks.abort_all();
        // Every container process goes with the kubelet.
        for entry in self.pods.values_mut() {
            entry.processes = None;
        }
        Ok(())
    }

    // ----- watch events -------------------------------------------------------------------

    fn on_pod_event(&mut self, event: Result<watcher::Event<LeanPod>, watcher::Error>) {
        match event {
            Ok(watcher::Event::Apply(LeanPod(pod))) => self.observe(pod),
            Ok(watcher::Event::Delete(LeanPod(pod))) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    self.forget(uid);
                }
            }
            Ok(watcher::Event::Init) => self.relisted = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(LeanPod(pod))) => {
                if let (Some(seen), Some(uid)) = (self.relisted.as_mut(), pod.metadata.uid.clone()) {
                    seen.insert(uid);
                }
                self.observe(pod);
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(seen) = self.relisted.take() {
                    let gone: Vec<String> = self.pods.keys().filter(|uid| !seen.contains(*uid)).cloned().collect();
                    for uid in gone {
                        self.forget(&uid);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "pod watch failed; retrying"),
        }
    }

    fn observe(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let entry = self.pods.entry(uid.clone()).or_insert_with(|| PodEntry::new(pod.clone()));
        if is_newer(&pod, &entry.pod) {
            entry.pod = pod;
        }
        if entry.bound_node().is_none() {
            self.schedule_needed = true;
        }
        self.dirty.insert(uid);
    }

    /// The pod is gone from the API: stop its servers, free its IP, free its node capacity.
    fn forget(&mut self, uid: &str) {
        let Some(entry) = self.pods.remove(uid) else {
            return;
        };
        self.endpoints.remove_pod(uid);
        self.logs.remove_pod(uid);
        if let Some(runtime) = &entry.runtime {
            self.ips.release(runtime.ip);
        }
        if let Some(ip) = entry.finished_before_start {
            self.ips.release(ip);
        }
        self.schedule_needed = true;
    }

    fn on_node_event(&mut self, event: Result<watcher::Event<Node>, watcher::Error>) {
        let node = match event {
            Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => node,
            Ok(watcher::Event::Delete(node)) => {
                if let Some(name) = node.metadata.name.as_deref()
                    && self.node_objects.remove(name).is_some()
                {
                    tracing::warn!(node = name, "node deleted; no longer scheduling pods to it");
                }
                return;
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => return,
            Err(e) => {
                tracing::warn!(error = %e, "node watch failed; retrying");
                return;
            }
        };
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        let ours = self.nodes.iter().any(|n| n.name == name);
        if ours && !self.registering.contains(&name) {
            let newer = self.node_objects.get(&name).is_none_or(|old| is_newer(&node, old));
            if newer {
                self.node_objects.insert(name, node);
                self.schedule_needed = true;
            }
        }
    }

    // ----- outcomes of writes -------------------------------------------------------------

    fn on_outcome(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Status { uid, result } => {
                if let Some(entry) = self.pods.get_mut(&uid) {
                    let sent = entry.sent_status_patch.take();
                    entry.last_status_patch = if result.is_ok() { sent } else { None };
                }
                match result {
                    Ok(pod) => self.write_succeeded(&uid, Some(pod)),
                    Err(WriteError::Conflict(_) | WriteError::NotFound(_)) => self.refetch(&uid),
                    Err(e) => self.write_failed(&uid, &e),
                }
            }
            Outcome::Bound { uid, node, result } => match result {
                Ok(()) => {
                    tracing::debug!(%uid, %node, "pod bound");
                    if let Some(entry) = self.pods.get(&uid) {
                        self.spawner.record(vec![events::scheduled(&entry.pod, &node, Timestamp::now())]);
                    }
                    self.write_succeeded(&uid, None);
                }
                Err(e) => {
                    if let Some(entry) = self.pods.get_mut(&uid) {
                        entry.assumed_node = None;
                    }
                    self.schedule_needed = true;
                    match e {
                        WriteError::Conflict(_) | WriteError::NotFound(_) => self.refetch(&uid),
                        e => self.write_failed(&uid, &e),
                    }
                }
            },
            Outcome::Deleted { uid, result } => match result {
                Ok(still_there) => {
                    if let Some(entry) = self.pods.get_mut(&uid) {
                        entry.delete_issued = true;
                    }
                    self.write_succeeded(&uid, still_there);
                }
                // UID precondition failed or already gone: this pod no longer exists.
                Err(WriteError::Conflict(_) | WriteError::NotFound(_)) => self.forget(&uid),
                Err(e) => self.write_failed(&uid, &e),
            },
            Outcome::Fetched { uid, result } => match result {
                Ok(Some(pod)) => self.write_succeeded(&uid, Some(pod)),
                Ok(None) => self.forget(&uid),
                Err(e) => self.write_failed(&uid, &e),
            },
            Outcome::Node { name, registration, result } => self.on_node_outcome(name, registration, result),
            Outcome::Event { reason, result } => {
                if let Err(e) = result {
                    tracing::debug!(%reason, error = %e, "recording an event failed");
                }
            }
            Outcome::Lease { name, result } => {
                if let Err(e) = result {
                    tracing::debug!(node = %name, error = %e, "renewing the node lease failed");
                }
            }
        }
    }

    fn write_succeeded(&mut self, uid: &str, pod: Option<Pod>) {
        let Some(entry) = self.pods.get_mut(uid) else {
            return;
        };
        entry.inflight = false;
        entry.retry_attempt = 0;
        entry.retry_at = None;
        if let Some(pod) = pod
            && is_newer(&pod, &entry.pod)
        {
            entry.pod = pod;
        }
        self.dirty.insert(uid.to_owned());
    }

    fn write_failed(&mut self, uid: &str, error: &WriteError) {
        let Some(entry) = self.pods.get_mut(uid) else {
            return;
        };
        entry.inflight = false;
        let message = format!("API write failed: {error}");
        back_off(&mut self.timers, entry, uid, &message);
    }

    fn refetch(&mut self, uid: &str) {
        if let Some(entry) = self.pods.get_mut(uid) {
            self.spawner.pod_write(entry, |writer, pod| async move { writer.fetch(pod).await });
        }
    }

    fn on_node_outcome(&mut self, name: String, registration: bool, result: Result<Node, WriteError>) {
        if registration {
            self.registering.remove(&name);
        }
        match result {
            Ok(node) => {
                if registration {
                    tracing::info!(node = %name, "node registered");
                    self.registration_attempts.remove(&name);
                    if let Some(fake) = self.nodes.iter().find(|n| n.name == name) {
                        let lease = fake.lease(&node, Timestamp::now());
                        self.spawner.spawn(|writer| async move { writer.renew_lease(lease).await });
                    }
                }
                let newer = self.node_objects.get(&name).is_none_or(|old| is_newer(&node, old));
                if newer {
                    self.node_objects.insert(name, node);
                }
                self.schedule_needed = true;
            }
            Err(e) if registration => {
                let attempts = self.registration_attempts.entry(name.clone()).or_default();
                *attempts = attempts.saturating_add(1);
                let delay = retry_backoff(*attempts);
                tracing::warn!(node = %name, error = %e, retry_in = ?delay, "node registration failed");
                self.node_timers.push(Reverse((Instant::now() + delay, name)));
            }
            Err(WriteError::NotFound(_)) => {
                tracing::warn!(node = %name, "node no longer exists; not posting its status");
                self.node_objects.remove(&name);
            }
            Err(e) => tracing::debug!(node = %name, error = %e, "node heartbeat failed"),
        }
    }

    // ----- timers -------------------------------------------------------------------------

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((at, _))) = self.timers.peek()
            && *at <= now
        {
            let Some(Reverse((at, uid))) = self.timers.pop() else {
                break;
            };
            if let Some(entry) = self.pods.get_mut(&uid) {
                if entry.wake == Some(at) {
                    entry.wake = None;
                }
                if entry.retry_at.is_some_and(|retry| retry <= now) {
                    entry.retry_at = None;
                    if entry.node().is_none() {
                        self.schedule_needed = true;
                    }
                }
                self.dirty.insert(uid);
            }
        }
        while let Some(Reverse((at, _))) = self.node_timers.peek()
            && *at <= now
        {
            let Some(Reverse((_, name))) = self.node_timers.pop() else {
                break;
            };
            if let Some(node) = self.nodes.iter().find(|n| n.name == name).cloned() {
                self.register(&node);
            }
        }
    }

    // ----- nodes --------------------------------------------------------------------------

    fn register(&mut self, node: &FakeNode) {
        if !self.registering.insert(node.name.clone()) {
            return;
        }
        let object = node.object(&self.config, Timestamp::now());
        self.spawner.spawn(|writer| async move { writer.register_node(object).await });
    }

    fn heartbeat(&mut self) {
        let now = Timestamp::now();
        for node in &self.nodes {
            let Some(existing) = self.node_objects.get(&node.name) else {
                continue;
            };
            let patch = node.heartbeat(Some(existing), now);
            let name = node.name.clone();
            self.spawner.spawn(|writer| async move { writer.node_heartbeat(name, patch).await });
        }
    }

    fn renew_leases(&mut self) {
        let now = Timestamp::now();
        for node in &self.nodes {
            // A Lease is owned by its Node, so it is only created once the Node exists.
            let Some(object) = self.node_objects.get(&node.name) else {
                continue;
            };
            let lease = node.lease(object, now);
            self.spawner.spawn(|writer| async move { writer.renew_lease(lease).await });
        }
    }

    // ----- kubelet ------------------------------------------------------------------------

    fn sync_dirty(&mut self) {
        let dirty: Vec<String> = self.dirty.drain().collect();
        for uid in dirty {
            self.sync(&uid);
        }
    }

    /// Brings one pod on one of our nodes forward: runs due transitions, serves its endpoints,
    /// writes its status when it changed, and finishes its deletion.
    fn sync(&mut self, uid: &str) {
        let Some(entry) = self.pods.get_mut(uid) else {
            return;
        };
        if entry.inflight || entry.retry_at.is_some() {
            return;
        }
        let Some(node) = entry.bound_node().map(str::to_owned) else {
            return;
        };
        let Some(fake) = self.nodes.iter().find(|n| n.name == node) else {
            return;
        };
        entry.assumed_node = None;
        let host_ip = fake.ip;
        let now = Timestamp::now();
        let (behaviour, problems) = PodBehaviour::from_annotations(entry.pod.metadata.annotations.as_ref());
        if problems != entry.problems {
            for problem in &problems {
                tracing::warn!(pod = entry.name(), "ignoring {problem}");
            }
            entry.problems = problems;
        }
        let deleting = entry.pod.metadata.deletion_timestamp.is_some();

        if entry.runtime.is_none() && entry.finished_before_start.is_none() {
            let observed_ip =
                entry.pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()).and_then(|ip| ip.parse::<Ipv4Addr>().ok());
            if entry.terminal() {
                // Finished before this kubelet started: keep its IP reserved, never run it again.
                let ip = observed_ip.filter(|ip| self.ips.claim(*ip));
                entry.finished_before_start = Some(ip.unwrap_or(Ipv4Addr::UNSPECIFIED));
            } else if deleting {
                // Deleted before it ever ran here: there is nothing to stop.
                if !entry.delete_issued {
                    self.spawner.pod_write(entry, |w, pod| async move { w.delete(pod).await });
                }
                return;
            } else {
                let timings = &self.timings;
                let runtime = match observed_ip.filter(|ip| self.ips.claim(*ip)) {
                    Some(ip) => PodRuntime::adopt(&entry.pod, &node, ip, host_ip, timings, now),
                    None => match self.ips.allocate() {
                        Some(ip) => PodRuntime::start(&entry.pod, &node, ip, host_ip, timings, now),
                        None => {
                            tracing::error!(pod = entry.name(), "no loopback address left for pods");
                            return;
                        }
                    },
                };
                tracing::debug!(pod = entry.name(), ip = %runtime.ip, %node, "starting pod");
                let mut runtime = runtime;
                if let Some(processes) = &self.processes {
                    let names = processes.process_containers(&entry.pod);
                    if !names.is_empty() {
                        entry.processes = Some(processes.start(&entry.pod, &mut runtime, names));
                    }
                }
                entry.runtime = Some(runtime);
            }
        }

        let Some(runtime) = entry.runtime.as_mut() else {
            // Finished before start: only its deletion is left to finish.
            if deleting && !entry.delete_issued {
                self.spawner.pod_write(entry, |w, pod| async move { w.delete(pod).await });
            }
            return;
        };
        let timings = &self.timings;
        if let Some(processes) = &entry.processes {
            let grace = entry.pod.metadata.deletion_timestamp.as_ref().map(|_| {
                let seconds = entry
                    .pod
                    .metadata
                    .deletion_grace_period_seconds
                    .or_else(|| entry.pod.spec.as_ref()?.termination_grace_period_seconds)
                    .unwrap_or(super::runtime::DEFAULT_GRACE_SECONDS);
                timings.scaled_grace(seconds)
            });
            processes.update(&entry.pod, grace);
            let happened = processes.apply(runtime);
            runtime.transitions.extend(happened);
        }
        let mut wake = runtime.advance(&PodInput { pod: &entry.pod, behaviour: &behaviour, timings, now });
        let transitions = std::mem::take(&mut runtime.transitions);
        for transition in &transitions {
            // A process container's log is what the process prints, nothing else.
            if !is_process(runtime, transition) {
                log_transition(&self.logs, &entry.pod, uid, runtime.ip, transition, now);
            }
        }
        let happened: Vec<Event> = transitions
            .iter()
            .flat_map(|transition| events::for_transition(&entry.pod, &node, transition, now))
            .collect();
        self.spawner.record(happened);
        // Whole seconds, as the API keeps them, so the typed comparison below sees what a write would change.
        let desired = status::whole_seconds(status::generate(&StatusInput {
            pod: &entry.pod,
            runtime,
            behaviour: &behaviour,
            ready_delay: timings.ready_delay,
            now,
        }));
        let statuses = desired.container_statuses.iter().chain(desired.init_container_statuses.iter()).flatten();
        let processes: HashSet<&str> =
            runtime.all_containers().filter(|c| c.process.is_some()).map(|c| c.name.as_str()).collect();
        for ready in statuses.filter(|c| c.ready && !processes.contains(c.name.as_str())) {
            self.logs.ready(uid, &ready.name, now, || format!("[kube-sim] container {} is ready", ready.name));
        }
        let servers = desired_endpoints(&entry.pod, runtime, &behaviour, &self.logs);
        let stopped = runtime.stopped;
        let failures = self.endpoints.reconcile(uid, servers);
        if failures != entry.endpoint_failures {
            for failure in &failures {
                tracing::warn!(pod = entry.name(), "{failure}");
            }
            entry.endpoint_failures = failures;
        }
        if !entry.endpoint_failures.is_empty() {
            // The port may be freed soon (a server of a pod that just went away): try again.
            let retry = after(now, ENDPOINT_RETRY);
            wake = Some(wake.map_or(retry, |w| w.min(retry)));
        }

        if status::differs(entry.pod.status.as_ref(), &desired) {
            let patch = status::patch(&entry.pod, &desired);
            let attempt = (entry.pod.metadata.resource_version.clone(), patch);
            if entry.last_status_patch.as_ref() == Some(&attempt) {
                // This very patch already succeeded against this very version, yet the status
                // still differs: the server merged it unlike a kube-apiserver. Retrying at once
                // would spin; back off instead.
                let message = "status patch had no effect; the API server merged it differently";
                back_off(&mut self.timers, entry, uid, message);
                return;
            }
            let patch = attempt.1.clone();
            entry.sent_status_patch = Some(attempt);
            self.spawner
                .pod_write(entry, |writer, pod| async move { writer.patch_status(pod, patch, "kubelet").await });
        } else if stopped && deleting && !entry.delete_issued {
            self.spawner.pod_write(entry, |writer, pod| async move { writer.delete(pod).await });
        }
        if let Some(wake) = wake {
            schedule_wake(&mut self.timers, entry, uid, wake, now);
        }
    }

    // ----- scheduler ----------------------------------------------------------------------

    fn schedule_pending(&mut self) {
        self.schedule_needed = false;
        let mut pending: Vec<(&String, &PodEntry)> =
            self.pods.iter().filter(|(_, entry)| wants_scheduling(entry)).collect();
        if pending.is_empty() {
            return;
        }
        // Oldest first, like the scheduling queue without priorities.
        pending.sort_by_cached_key(|(_, e)| (e.pod.metadata.creation_timestamp.clone(), e.pod.metadata.name.clone()));
        let pending: Vec<String> = pending.into_iter().map(|(uid, _)| uid.clone()).collect();

        let mut nodes: Vec<NodeInfo> =
            self.nodes.iter().filter_map(|n| self.node_objects.get(&n.name)).map(NodeInfo::from_node).collect();
        for entry in self.pods.values().filter(|entry| !entry.terminal()) {
            if let Some(node) = entry.node().and_then(|name| nodes.iter_mut().find(|n| n.name == name)) {
                node.add(&Request::of(&entry.pod));
            }
        }

        for uid in pending {
            let Some(entry) = self.pods.get_mut(&uid) else {
                continue;
            };
            match scheduler::schedule(&entry.pod, &nodes) {
                Decision::Bind(node) => {
                    if let Some(info) = nodes.iter_mut().find(|n| n.name == node) {
                        info.add(&Request::of(&entry.pod));
                    }
                    entry.assumed_node = Some(node.clone());
                    entry.unschedulable_message = None;
                    self.spawner.pod_write(entry, |writer, pod| async move { writer.bind(pod, node).await });
                }
                Decision::Unschedulable(message) => {
                    if entry.unschedulable_message.as_ref() == Some(&message) {
                        continue;
                    }
                    tracing::info!(pod = entry.name(), "{message}");
                    entry.unschedulable_message = Some(message.clone());
                    self.spawner.record(vec![events::failed_scheduling(&entry.pod, &message, Timestamp::now())]);
                    let patch = serde_json::json!({
                        "status": { "conditions": [{
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": message,
                            "lastProbeTime": null,
                            "lastTransitionTime": Time(Timestamp::now()),
                        }]}
                    });
                    self.spawner.pod_write(entry, |writer, pod| async move {
                        writer.patch_status(pod, patch, "default-scheduler").await
                    });
                }
            }
        }
    }
}

/// Schedules a retry of the pod's sync with exponential back-off, logging the first failures.
fn back_off(timers: &mut BinaryHeap<Reverse<(Instant, String)>>, entry: &mut PodEntry, uid: &str, message: &str) {
    entry.retry_attempt = entry.retry_attempt.saturating_add(1);
    let delay = retry_backoff(entry.retry_attempt);
    let at = Instant::now() + delay;
    entry.retry_at = Some(at);
    if entry.retry_attempt <= 3 {
        tracing::warn!(pod = entry.name(), retry_in = ?delay, "{message}");
    } else {
        tracing::debug!(pod = entry.name(), retry_in = ?delay, "{message}");
    }
    timers.push(Reverse((at, uid.to_owned())));
}

/// Arms a timer for the pod's next transition, unless an earlier one is already armed (it will
/// re-arm this one when it fires).
fn schedule_wake(
    timers: &mut BinaryHeap<Reverse<(Instant, String)>>,
    entry: &mut PodEntry,
    uid: &str,
    wake: Timestamp,
    now: Timestamp,
) {
    let until = wake.duration_since(now).as_secs_f64().max(0.0);
    // A little slack so the wall clock has surely reached `wake` when the timer fires.
    let delay = Duration::try_from_secs_f64(until).unwrap_or(Duration::MAX) + Duration::from_millis(2);
    let current = Instant::now();
    let at = current.checked_add(delay).unwrap_or_else(|| current + Duration::from_secs(86_400));
    if entry.wake.is_some_and(|armed| armed <= at && armed > current) {
        return;
    }
    entry.wake = Some(at);
    timers.push(Reverse((at, uid.to_owned())));
}

/// Whether the scheduler should place this pod now.
fn wants_scheduling(entry: &PodEntry) -> bool {
    let pod = &entry.pod;
    let scheduler_name = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
    entry.node().is_none()
        && !entry.inflight
        && entry.retry_at.is_none()
        && pod.metadata.deletion_timestamp.is_none()
        && scheduler_name.is_none_or(|name| name == "default-scheduler")
        && !entry.terminal()
}

/// Whether a transition is one of a container running as a process.
fn is_process(runtime: &PodRuntime, transition: &Transition) -> bool {
    let name = match transition {
        Transition::Started { container, .. }
        | Transition::Killing { container, .. }
        | Transition::BackOff { container, .. } => container,
    };
    runtime.all_containers().any(|c| &c.name == name && c.process.is_some())
}

/// What the container would print about a transition of its simulated life.
fn log_transition(logs: &PodLogs, pod: &Pod, uid: &str, ip: Ipv4Addr, transition: &Transition, now: Timestamp) {
    match transition {
        Transition::Started { container, image, .. } => {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let line = format!(
                "[kube-sim] container {container} started from image {image} in pod {namespace}/{name}, pod IP {ip}"
            );
            logs.started(uid, container, now, line);
        }
        Transition::Killing { container, reason, .. } => {
            let line = match reason {
                KillReason::SpecChanged => "[kube-sim] stopping: the container's image changed (in-place update)",
                KillReason::PodDeleted => "[kube-sim] received SIGTERM: the pod is being deleted",
            };
            logs.line(uid, container, now, line.to_string());
        }
        Transition::BackOff { container, .. } => {
            logs.line(uid, container, now, format!("[kube-sim] container {container} exited"));
        }
    }
}

fn desired_endpoints(
    pod: &Pod,
    runtime: &PodRuntime,
    behaviour: &PodBehaviour,
    logs: &Arc<PodLogs>,
) -> Vec<EndpointSpec> {
    if runtime.stopped {
        return Vec::new();
    }
    let declared: Vec<_> =
        pod.spec.iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten())).collect();
    let mut servers: Vec<EndpointSpec> = Vec::new();
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let mut first_running = None;
    for container in runtime.all_containers() {
        // A process serves its own ports.
        if !matches!(container.state, State::Running { .. }) || container.process.is_some() {
            continue;
        }
        let target = LogTarget { logs: logs.clone(), pod_uid: uid.to_owned(), container: container.name.clone() };
        first_running.get_or_insert_with(|| target.clone());
        let Some(declared) = declared.iter().find(|c| c.name == container.name) else {
            continue;
        };
        // What runs is the instance's image, which lags behind the spec during a restart.
        let mut running = (*declared).clone();
        running.image = Some(container.image.clone());
        if let Some(server) = image::builtin_server(&running) {
            servers.extend(
                endpoint::builtin_specs(runtime.ip, &server)
                    .into_iter()
                    .map(|spec| EndpointSpec { log: Some(target.clone()), ..spec }),
            );
        }
    }
    if let Some(target) = first_running
        && let Some(http) = &behaviour.http
    {
        // The annotations' servers belong to the pod; the first running container logs their requests.
        servers.retain(|server| !http.ports.contains(&server.port));
        servers.extend(
            endpoint::annotation_specs(runtime.ip, http)
                .into_iter()
                .map(|spec| EndpointSpec { log: Some(target.clone()), ..spec }),
        );
    }
    let mut seen = HashSet::new();
    servers.retain(|server| seen.insert(server.port));
    servers
}

/// Whether `candidate` is at least as new as `current`. Resource versions are opaque, but every
/// API server in practice (etcd, kube-sim) issues increasing integers; when either is not one,
/// the latest arrival wins.
fn is_newer<K: kube::Resource>(candidate: &K, current: &K) -> bool {
    let parse = |k: &K| k.meta().resource_version.as_deref().and_then(|rv| rv.parse::<u64>().ok());
    match (parse(candidate), parse(current)) {
        (Some(a), Some(b)) => a >= b,
        _ => true,
    }
}

fn retry_backoff(attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(16));
    Duration::from_millis(100).saturating_mul(factor).min(MAX_RETRY_BACKOFF)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::runtime::Timings;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn with_rv(rv: &str) -> Pod {
        Pod { metadata: ObjectMeta { resource_version: Some(rv.into()), ..Default::default() }, ..Default::default() }
    }

    #[test]
    fn newer_resource_versions_win() {
        assert!(is_newer(&with_rv("10"), &with_rv("9")));
        assert!(is_newer(&with_rv("10"), &with_rv("10")));
        assert!(!is_newer(&with_rv("9"), &with_rv("10")), "a late watch event must not undo a write");
        assert!(is_newer(&with_rv("abc"), &with_rv("10")), "opaque versions: latest arrival wins");
    }

    #[test]
    fn retry_backoff_grows_and_is_capped() {
        assert_eq!(retry_backoff(1), Duration::from_millis(100));
        assert_eq!(retry_backoff(2), Duration::from_millis(200));
        assert_eq!(retry_backoff(50), MAX_RETRY_BACKOFF);
    }

    #[test]
    fn endpoints_follow_running_containers_and_annotations_override_images() {
        let container = |name: &str, image: &str, port: i32| Container {
            name: name.into(),
            image: Some(image.into()),
            ports: Some(vec![ContainerPort { container_port: port, ..Default::default() }]),
            ..Default::default()
        };
        let mut pod = Pod {
            metadata: ObjectMeta { uid: Some("u".into()), ..Default::default() },
            spec: Some(PodSpec { containers: vec![container("hook", "canary-hook:test", 9091)], ..Default::default() }),
            ..Default::default()
        };
        let timings = Timings {
            start_delay: Duration::ZERO,
            ready_delay: Duration::ZERO,
            restart_delay: Duration::from_secs(1),
            crash_loop_backoff: Duration::from_secs(1),
            grace_period_scale: 1.0,
        };
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let ip = Ipv4Addr::new(127, 3, 0, 1);
        let mut runtime = PodRuntime::start(&pod, "n", ip, Ipv4Addr::LOCALHOST, &timings, t0);
        let behaviour = PodBehaviour::default();
        assert!(desired_endpoints(&pod, &runtime, &behaviour, &Arc::default()).is_empty(), "not started yet");

        let advance = |runtime: &PodRuntime, pod: &Pod, now| {
            let mut rt = runtime.clone();
            rt.advance(&PodInput { pod, behaviour: &behaviour, timings: &timings, now });
            rt
        };
        runtime = advance(&runtime, &pod, t0);
        let servers = desired_endpoints(&pod, &runtime, &behaviour, &Arc::default());
        assert_eq!(servers.len(), 1);
        assert_eq!((servers[0].ip, servers[0].port), (ip, 9091));

        // Image changes to something without a server: gone during the restart and after it.
        pod.spec.as_mut().unwrap().containers[0].image = Some("python:3.5".into());
        runtime = advance(&runtime, &pod, t0);
        assert!(desired_endpoints(&pod, &runtime, &behaviour, &Arc::default()).is_empty());

        let annotations = [
            (crate::kubelet::behaviour::HTTP_PORT.to_string(), "9091".to_string()),
            (crate::kubelet::behaviour::HTTP_STATUS.to_string(), "500".to_string()),
        ]
        .into();
        let behaviour = PodBehaviour::from_annotations(Some(&annotations)).0;
        let later = t0.saturating_add(Duration::from_secs(2)).unwrap();
        let mut rt = runtime.clone();
        rt.advance(&PodInput { pod: &pod, behaviour: &behaviour, timings: &timings, now: later });
        let servers = desired_endpoints(&pod, &rt, &behaviour, &Arc::default());
        assert_eq!(servers.len(), 1);
        assert!(matches!(servers[0].responder, endpoint::Responder::Fixed { status: 500, .. }));
    }
}
