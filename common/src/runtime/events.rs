//! Kubernetes Events for both operators, published from one background task per operator so that a slow or
//! failing Events API never delays a reconcile. The queue is bounded: when it is full, events are dropped and
//! counted (the `dropped` counter the operator registers), never waited for.
//!
//! An Event that repeats (same type, reason, action, reporter, regarding and related object) within
//! [`SERIES_TTL`] continues the first one as a series (`series.count`, `series.lastObservedTime`) instead of
//! creating another object: the events.k8s.io/v1 rules, as kube-runtime's `Recorder` applies them. That Recorder
//! was used before, but it scans its whole cache on every publish, and in a fleet rollout every pod's Event is
//! distinct, so publishing cost grew with the size of the roll (5 % of the gamedeployment-operator's CPU at 2,000
//! pods). [`Series`] expires in insertion order and remembers at most [`MAX_SERIES`] Events: constant work per
//! publish and bounded memory.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

/// How long after its last occurrence an Event can still be continued as a series (kube-runtime's Recorder: 6 min).
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// Events remembered for series at most; beyond that the oldest are forgotten (a repeat then creates a new Event).
pub const MAX_SERIES: usize = 8192;

/// The API limit of an Event note, in bytes.
pub const MAX_NOTE: usize = 1000;

/// An Event to publish about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    /// `reason` (CamelCase, machine-readable).
    pub reason: String,
    /// `note`, for people; cut to [`MAX_NOTE`] bytes.
    pub message: String,
    /// `action` (what the controller was doing).
    pub action: String,
}

struct Queued {
    regarding: ObjectReference,
    /// The other object the event is about (events.k8s.io `related`): part of the aggregation key, so events
    /// with one reason about different pods stay apart.
    related: Option<ObjectReference>,
    note: Note,
}

/// Where reconciles put Events. Cloning it is cheap; the publisher task ends when every clone is dropped.
#[derive(Clone, Debug)]
pub struct EventSink {
    sender: mpsc::Sender<Queued>,
    dropped: Counter,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").field("reason", &self.note.reason).finish()
    }
}

impl EventSink {
    /// Starts the publisher task with a queue of `capacity` events; `dropped` counts events the full queue
    /// refused.
    pub fn start(client: Client, reporter: Reporter, capacity: usize, dropped: Counter) -> Self {
        let (sender, receiver) = mpsc::channel::<Queued>(capacity.max(1));
        tokio::spawn(publish_all(client, reporter, receiver));
        Self { sender, dropped }
    }

    /// Queues an event about `regarding` and logs it; never waits.
    pub fn publish(&self, regarding: &ObjectReference, note: Note) {
        self.publish_related(regarding, None, note);
    }

    /// [`Self::publish`] with a `related` object (a pod of the workload): events that differ in it are never
    /// aggregated into one (the Recorder's key holds `related` but not the note).
    pub fn publish_related(&self, regarding: &ObjectReference, related: Option<ObjectReference>, note: Note) {
        let object = regarding.name.as_deref().unwrap_or_default();
        if note.warning {
            tracing::warn!(reason = %note.reason, object, "{}", note.message);
        } else {
            tracing::info!(reason = %note.reason, object, "{}", note.message);
        }
        self.enqueue(Queued { regarding: regarding.clone(), related, note });
    }

    /// Queues an event without logging it (the caller logs what matters).
    pub fn queue(&self, regarding: &ObjectReference, note: Note) {
        self.enqueue(Queued { regarding: regarding.clone(), related: None, note });
    }

    fn enqueue(&self, queued: Queued) {
        if self.sender.try_send(queued).is_err() {
            self.dropped.inc();
        }
    }

    /// A sink whose queue holds `capacity` events and is never drained, and the receiving end (tests).
    #[doc(hidden)]
    pub fn detached(capacity: usize, dropped: Counter) -> (Self, impl Send) {
        let (sender, receiver) = mpsc::channel::<Queued>(capacity.max(1));
        (Self { sender, dropped }, receiver)
    }
}

/// The identity of an object in an aggregation key (what kube-runtime's Recorder compares).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ObjectKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl ObjectKey {
    fn of(reference: &ObjectReference) -> Self {
        Self {
            api_version: reference.api_version.clone(),
            kind: reference.kind.clone(),
            namespace: reference.namespace.clone(),
            name: reference.name.clone(),
            uid: reference.uid.clone(),
        }
    }
}

/// What makes two Events one series: everything but the note and the time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    warning: bool,
    reason: String,
    action: String,
    regarding: ObjectKey,
    related: Option<ObjectKey>,
}

impl Key {
    fn of(queued: &Queued) -> Self {
        Self {
            warning: queued.note.warning,
            reason: queued.note.reason.clone(),
            action: queued.note.action.clone(),
            regarding: ObjectKey::of(&queued.regarding),
            related: queued.related.as_ref().map(ObjectKey::of),
        }
    }
}

/// A published Event that a repeat continues.
#[derive(Debug)]
struct Published {
    namespace: String,
    name: String,
    count: i32,
    /// Identifies its latest entry in [`Series::order`] (older entries for the same key are stale).
    stamp: u64,
}

/// What to do with an Event.
#[derive(Debug, PartialEq, Eq)]
enum Publish {
    /// Create a new Event object.
    Create,
    /// Patch the series of an existing one.
    Continue { namespace: String, name: String, count: i32 },
}

/// The Events published lately, oldest first, so that a repeat continues a series. Expiry pops from the front of
/// an insertion-ordered queue (constant work per publish, however many Events are remembered); at most `cap`
/// Events are kept, and the queue (one entry per publish, stale ones included) at most twice that.
#[derive(Debug)]
struct Series {
    ttl: Duration,
    cap: usize,
    by_key: HashMap<Arc<Key>, Published>,
    order: VecDeque<(Instant, u64, Arc<Key>)>,
    next_stamp: u64,
}

impl Series {
    fn new(ttl: Duration, cap: usize) -> Self {
        Self { ttl, cap: cap.max(1), by_key: HashMap::new(), order: VecDeque::new(), next_stamp: 0 }
    }

    /// Forgets what expired by `now`, and the oldest entries beyond the bounds.
    fn expire(&mut self, now: Instant) {
        while let Some((at, stamp, key)) = self.order.front() {
            let expired = now.saturating_duration_since(*at) >= self.ttl;
            let over = self.by_key.len() > self.cap || self.order.len() > 2 * self.cap;
            if !expired && !over {
                break;
            }
            if self.by_key.get(key).is_some_and(|p| p.stamp == *stamp) {
                self.by_key.remove(key);
            }
            self.order.pop_front();
        }
    }

    fn stamp(&mut self, key: Arc<Key>, now: Instant) -> u64 {
        self.next_stamp += 1;
        self.order.push_back((now, self.next_stamp, key));
        self.next_stamp
    }

    /// Whether an Event with `key` continues a series (and counts it) or must be created.
    fn observe(&mut self, key: &Key, now: Instant) -> Publish {
        self.expire(now);
        let Some((shared, _)) = self.by_key.get_key_value(key) else { return Publish::Create };
        let shared = shared.clone();
        let stamp = self.stamp(shared.clone(), now);
        let Some(published) = self.by_key.get_mut(&shared) else { return Publish::Create };
        published.count += 1;
        published.stamp = stamp;
        let continued = Publish::Continue {
            namespace: published.namespace.clone(),
            name: published.name.clone(),
            count: published.count,
        };
        self.expire(now);
        continued
    }

    /// Remembers an Event just created.
    fn created(&mut self, key: Key, namespace: String, name: String, now: Instant) {
        let key = Arc::new(key);
        let stamp = self.stamp(key.clone(), now);
        self.by_key.insert(key, Published { namespace, name, count: 1, stamp });
        self.expire(now);
    }

    /// Forgets an Event (its series could not be continued).
    fn forget(&mut self, key: &Key) {
        self.by_key.remove(key);
    }
}

/// The events.k8s.io/v1 Event for a queued note, as kube-runtime's Recorder builds it.
fn new_event(reporter: &Reporter, queued: &Queued, now: Timestamp) -> K8sEvent {
    let regarding = &queued.regarding;
    K8sEvent {
        action: Some(queued.note.action.clone()),
        reason: Some(queued.note.reason.clone()),
        note: Some(super::text::fit_bytes(&queued.note.message, MAX_NOTE)),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding.clone()),
        related: queued.related.clone(),
        metadata: ObjectMeta {
            namespace: Some(regarding.namespace.clone().unwrap_or_else(|| "default".into())),
            name: Some(format!(
                "{}.{:x}",
                regarding.name.as_deref().unwrap_or(&reporter.controller),
                now.as_nanosecond()
            )),
            ..ObjectMeta::default()
        },
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone().unwrap_or_else(|| reporter.controller.clone())),
        type_: Some(if queued.note.warning { "Warning" } else { "Normal" }.into()),
        ..K8sEvent::default()
    }
}

async fn publish_all(client: Client, reporter: Reporter, mut receiver: mpsc::Receiver<Queued>) {
    let mut series = Series::new(SERIES_TTL, MAX_SERIES);
    while let Some(queued) = receiver.recv().await {
        let key = Key::of(&queued);
        let now = Timestamp::now();
        if let Publish::Continue { namespace, name, count } = series.observe(&key, Instant::now()) {
            let api: Api<K8sEvent> = Api::namespaced(client.clone(), &namespace);
            let patch = serde_json::json!({ "series": { "count": count, "lastObservedTime": MicroTime(now) } });
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => continue,
                // Gone (the API server's Event TTL) or refused: this one starts a new Event.
                Err(e) => {
                    tracing::debug!(error = %e, event = %name, "continuing an event series failed; creating a new event");
                    series.forget(&key);
                }
            }
        }
        let event = new_event(&reporter, &queued, now);
        let (namespace, name) = (event.metadata.namespace.clone().unwrap_or_default(), event.metadata.name.clone());
        let api: Api<K8sEvent> = Api::namespaced(client.clone(), &namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => series.created(key, namespace, name.unwrap_or_default(), Instant::now()),
            Err(e) => tracing::warn!(error = %e, reason = %queued.note.reason, "publishing an event failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(reason: &str) -> Note {
        Note { warning: false, reason: reason.into(), message: "m".into(), action: "Test".into() }
    }

    fn queued(reason: &str, pod: &str) -> Queued {
        Queued {
            regarding: ObjectReference {
                kind: Some("GameDeployment".into()),
                name: Some("gd".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..ObjectReference::default()
            },
            related: Some(ObjectReference {
                kind: Some("Pod".into()),
                name: Some(pod.into()),
                ..ObjectReference::default()
            }),
            note: note(reason),
        }
    }

    fn cont(name: &str, count: i32) -> Publish {
        Publish::Continue { namespace: "ns".into(), name: name.into(), count }
    }

    #[test]
    fn a_repeated_event_continues_its_series_until_it_expires() {
        let t0 = Instant::now();
        let mut series = Series::new(Duration::from_secs(360), 100);
        let key = Key::of(&queued("SuccessfulUpdatePodInPlace", "p1"));
        assert_eq!(series.observe(&key, t0), Publish::Create);
        series.created(key.clone(), "ns".into(), "gd.1".into(), t0);
        assert_eq!(series.observe(&key, t0 + Duration::from_secs(10)), cont("gd.1", 2));
        assert_eq!(series.observe(&key, t0 + Duration::from_secs(300)), cont("gd.1", 3));
        // The TTL counts from the last occurrence: 300 s + 359 s is still the series.
        assert_eq!(series.observe(&key, t0 + Duration::from_secs(659)), cont("gd.1", 4));
        assert_eq!(series.observe(&key, t0 + Duration::from_secs(1100)), Publish::Create, "expired");
        // Another related pod or reason is another Event.
        series.created(key.clone(), "ns".into(), "gd.2".into(), t0 + Duration::from_secs(1100));
        let other_pod = Key::of(&queued("SuccessfulUpdatePodInPlace", "p2"));
        assert_eq!(series.observe(&other_pod, t0 + Duration::from_secs(1101)), Publish::Create);
        let other_reason = Key::of(&queued("SuccessfulCreate", "p1"));
        assert_eq!(series.observe(&other_reason, t0 + Duration::from_secs(1101)), Publish::Create);
        // Forgotten (its series could not be patched): the next one is created.
        series.forget(&key);
        assert_eq!(series.observe(&key, t0 + Duration::from_secs(1102)), Publish::Create);
    }

    #[test]
    fn memory_is_bounded_however_many_distinct_or_repeated_events_there_are() {
        let t0 = Instant::now();
        let mut series = Series::new(Duration::from_secs(360), 64);
        for i in 0..10_000 {
            let key = Key::of(&queued("SuccessfulCreateHookRun", &format!("pod-{i}")));
            if series.observe(&key, t0) == Publish::Create {
                series.created(key, "ns".into(), format!("gd.{i}"), t0);
            }
            assert!(
                series.by_key.len() <= 64 && series.order.len() <= 128,
                "{} / {}",
                series.by_key.len(),
                series.order.len()
            );
        }
        // The newest are remembered, the oldest forgotten.
        let newest = Key::of(&queued("SuccessfulCreateHookRun", "pod-9999"));
        assert_eq!(series.observe(&newest, t0), cont("gd.9999", 2));
        let oldest = Key::of(&queued("SuccessfulCreateHookRun", "pod-0"));
        assert_eq!(series.observe(&oldest, t0), Publish::Create);
        // One Event repeated forever: one entry, and the queue of stale entries stays bounded.
        let mut series = Series::new(Duration::from_secs(360), 64);
        let key = Key::of(&queued("HookBlocked", "p"));
        series.created(key.clone(), "ns".into(), "gd.x".into(), t0);
        for i in 0..10_000 {
            assert_eq!(series.observe(&key, t0 + Duration::from_millis(i)), cont("gd.x", i as i32 + 2));
            assert!(series.order.len() <= 128);
        }
    }

    #[test]
    fn events_are_built_as_the_events_api_wants_them() {
        let reporter = Reporter { controller: "gamedeployment-operator".into(), instance: Some("pod-a".into()) };
        let mut q = queued("SuccessfulCreate", "p1");
        q.note.message = "x".repeat(5000);
        q.note.warning = true;
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let event = new_event(&reporter, &q, now);
        assert_eq!(event.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(event.metadata.name, Some(format!("gd.{:x}", now.as_nanosecond())));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reason.as_deref(), Some("SuccessfulCreate"));
        assert_eq!(event.note.as_ref().map(String::len), Some(MAX_NOTE));
        assert_eq!(event.related.as_ref().and_then(|r| r.name.as_deref()), Some("p1"));
        assert_eq!(event.reporting_instance.as_deref(), Some("pod-a"));
        assert!(event.series.is_none());
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let dropped = Counter::default();
        let (sink, _receiver) = EventSink::detached(2, dropped.clone());
        let regarding = ObjectReference::default();
        for i in 0..5 {
            sink.queue(&regarding, note(&format!("R{i}")));
        }
        assert_eq!(dropped.get(), 3);
    }
}
