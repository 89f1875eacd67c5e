//! Kubernetes Events for both operators, published from one background task per operator so that a slow or
//! failing Events API never delays a reconcile. The queue is bounded: when it is full, events are dropped and
//! counted (the `dropped` counter the operator registers), never waited for.
//!
//! Two rules keep the Events API writes of a large rollout bounded while every Event stays readable:
//!
//! - **Series.** An Event that repeats (same type, reason, action, reporter, regarding and related object) within
//!   [`SERIES_TTL`] continues the first one as a series (`series.count`, `series.lastObservedTime`) instead of
//!   creating another object: the events.k8s.io/v1 rules, as kube-runtime's `Recorder` applies them. The repeats
//!   are counted in memory: the first repeat is written at once, later ones at most once per
//!   [`EventSettings::flush`] per Event (client-go's events library writes the second occurrence and then only a
//!   30-minute heartbeat). Repeats counted but not written yet are lost if the operator stops before the flush
//!   (at most one flush interval of them).
//! - **Similar events are combined** (client-go's `EventAggregator`: 10 within 10 minutes). Events that differ
//!   only in their related object and note — a rollout's `SuccessfulUpdatePodInPlace` for each of 5,000 pods — are
//!   published one by one for the first [`EventSettings::combine_after`] related objects within
//!   [`EventSettings::combine_window`] of each other; the later ones continue one Event per (type, reason, action,
//!   regarding) whose note is `(combined from similar events): <the latest note>` and whose `series.count` counts
//!   them. Every event is still logged, one line each. Before this rule a 5,000-pod roll asked for ~25,000 Events,
//!   more than the queue could hold, so which ones reached the API (a Warning among them, or not) was chance.
//!
//! kube-runtime's `Recorder` was used before, but it scans its whole cache on every publish, and in a fleet rollout
//! every pod's Event is distinct, so publishing cost grew with the size of the roll (5 % of the
//! gamedeployment-operator's CPU at 2,000 pods). `Series` expires in insertion order and remembers at most
//! [`MAX_SERIES`] Events, `Similar` at most as many keys: constant work per publish and bounded memory.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long after its last occurrence an Event can still be continued as a series (kube-runtime's Recorder: 6 min).
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// Events remembered for series at most; beyond that the oldest are forgotten (a repeat then creates a new Event).
pub const MAX_SERIES: usize = 8192;

/// The API limit of an Event note, in bytes.
pub const MAX_NOTE: usize = 1000;

/// How the note of a combined Event starts (client-go's aggregator writes the same words).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// How the publisher batches and combines; [`Default`] is what the operators use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSettings {
    /// Events waiting to be published at most; more are dropped and counted.
    pub capacity: usize,
    /// The shortest time between two writes of one Event's series.
    pub flush: Duration,
    /// Related objects published one by one per (type, reason, action, regarding) before the rest are combined.
    pub combine_after: usize,
    /// How long after the last similar event the count of related objects starts again.
    pub combine_window: Duration,
}

impl Default for EventSettings {
    fn default() -> Self {
        Self {
            capacity: 4096,
            flush: Duration::from_secs(5),
            combine_after: 10,
            combine_window: Duration::from_secs(10 * 60),
        }
    }
}

/// What the publisher counts for the operator's metrics.
#[derive(Debug, Clone, Default)]
pub struct EventCounters {
    /// Events the full queue refused.
    pub dropped: Counter,
    /// Events counted into a combined Event instead of being published on their own.
    pub combined: Counter,
}

/// An Event to publish about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// A `Warning` Event (something a person may have to act on) rather than `Normal`.
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
    /// Starts the publisher task with `settings`, counting into `counters`.
    pub fn start_with(client: Client, reporter: Reporter, settings: EventSettings, counters: EventCounters) -> Self {
        let (sender, receiver) = mpsc::channel::<Queued>(settings.capacity.max(1));
        let publisher = Publisher::new(client, reporter, settings, counters.combined);
        tokio::spawn(publisher.run(receiver));
        Self { sender, dropped: counters.dropped }
    }

    /// Queues an event about `regarding` and logs it; never waits.
    pub fn publish(&self, regarding: &ObjectReference, note: Note) {
        self.publish_related(regarding, None, note);
    }

    /// [`Self::publish`] with a `related` object (a pod of the workload): events that differ in it are never
    /// continued as one series (the Recorder's key holds `related` but not the note); beyond
    /// [`EventSettings::combine_after`] of them they are combined (see the module documentation).
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
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

/// What makes two Events one series: everything but the time — the note included, as in client-go's events library
/// (kube-runtime's Recorder leaves it out, and a series then kept showing its first text: `held in PreparingUpdate`
/// long after the pod had moved on to `PreparingDelete`). A changed text is a new Event.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key {
    warning: bool,
    reason: String,
    action: String,
    regarding: ObjectKey,
    related: Option<ObjectKey>,
    /// The note; empty in a combining key (a combined Event shows the latest note of its similar events).
    note: String,
    /// The Event combining similar events (see [`Similar`]); never equal to an Event published on its own.
    combined: bool,
}

impl Key {
    fn of(queued: &Queued) -> Self {
        Self {
            warning: queued.note.warning,
            reason: queued.note.reason.clone(),
            action: queued.note.action.clone(),
            regarding: ObjectKey::of(&queued.regarding),
            related: queued.related.as_ref().map(ObjectKey::of),
            note: queued.note.message.clone(),
            combined: false,
        }
    }

    /// The key of the Event that combines the events similar to this one (all but the related object): also the
    /// key similar events are grouped under.
    fn combining(mut self) -> Self {
        self.related = None;
        self.note = String::new();
        self.combined = true;
        self
    }
}

/// Which events are combined: per (type, reason, action, regarding), the related objects seen since the last
/// pause of [`EventSettings::combine_window`], up to [`EventSettings::combine_after`] of them.
#[derive(Debug)]
struct Similar {
    after: usize,
    window: Duration,
    cap: usize,
    groups: HashMap<Key, Group>,
}

#[derive(Debug)]
struct Group {
    related: HashSet<Option<ObjectKey>>,
    last: Instant,
}

impl Similar {
    fn new(after: usize, window: Duration, cap: usize) -> Self {
        Self { after, window, cap: cap.max(1), groups: HashMap::new() }
    }

    /// Whether an event with `key` is combined with the similar ones (true) or published on its own.
    fn combines(&mut self, key: &Key, now: Instant) -> bool {
        let group_key = key.clone().combining();
        if !self.groups.contains_key(&group_key) && self.groups.len() >= self.cap {
            let window = self.window;
            self.groups.retain(|_, g| now.saturating_duration_since(g.last) < window);
            if self.groups.len() >= self.cap {
                // Every group is recent: start over rather than grow (some events are published on their own
                // again, which is what happens after a pause anyway).
                self.groups.clear();
            }
        }
        let group = self.groups.entry(group_key).or_insert_with(|| Group { related: HashSet::new(), last: now });
        if now.saturating_duration_since(group.last) >= self.window {
            group.related.clear();
        }
        group.last = now;
        if group.related.contains(&key.related) {
            return false;
        }
        if group.related.len() < self.after {
            group.related.insert(key.related.clone());
            return false;
        }
        true
    }
}

/// A published Event that a repeat continues.
#[derive(Debug)]
struct Published {
    namespace: String,
    name: String,
    /// Occurrences so far, and how many the API has been told of.
    count: i32,
    written: i32,
    written_at: Instant,
    /// The latest occurrence and its note (a combined Event shows the latest one).
    last_seen: Timestamp,
    note: String,
    /// A flush is queued for it.
    scheduled: bool,
    /// Identifies its latest entry in [`Series::order`] (older entries for the same key are stale).
    stamp: u64,
}

/// What a repeat asks of the publisher.
#[derive(Debug, PartialEq, Eq)]
enum Observed {
    /// No Event to continue: create one.
    New,
    /// Counted; its series is due to be written now.
    WriteNow,
    /// Counted; a flush writes it later.
    Later,
}

/// A series write to send.
#[derive(Debug, PartialEq, Eq)]
struct SeriesWrite {
    namespace: String,
    name: String,
    count: i32,
    last_seen: Timestamp,
    /// The latest note; written only for a combined Event (the others keep their first).
    note: String,
    combined: bool,
}

/// The Events published lately, oldest first, so that a repeat continues a series. Expiry pops from the front of
/// an insertion-ordered queue (constant work per publish, however many Events are remembered); at most `cap`
/// Events are kept, and the queue (one entry per publish, stale ones included) at most twice that. Writes of a
/// series wait in `due` until [`EventSettings::flush`] after the Event's previous write.
#[derive(Debug)]
struct Series {
    ttl: Duration,
    cap: usize,
    flush: Duration,
    by_key: HashMap<Arc<Key>, Published>,
    order: VecDeque<(Instant, u64, Arc<Key>)>,
    due: BinaryHeap<Reverse<(Instant, u64, Arc<Key>)>>,
    next_stamp: u64,
}

impl Series {
    fn new(ttl: Duration, cap: usize, flush: Duration) -> Self {
        Self {
            ttl,
            cap: cap.max(1),
            flush,
            by_key: HashMap::new(),
            order: VecDeque::new(),
            due: BinaryHeap::new(),
            next_stamp: 0,
        }
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

    /// Counts an occurrence of `key` (with its `note`, seen at `seen`): whether it continues a series, and when to
    /// write it.
    fn observe(&mut self, key: &Key, note: &str, seen: Timestamp, now: Instant) -> Observed {
        self.expire(now);
        let Some((shared, _)) = self.by_key.get_key_value(key) else { return Observed::New };
        let shared = shared.clone();
        let stamp = self.stamp(shared.clone(), now);
        let flush = self.flush;
        let Some(published) = self.by_key.get_mut(&shared) else { return Observed::New };
        published.count += 1;
        published.stamp = stamp;
        published.last_seen = seen;
        if published.note != note {
            published.note = note.to_string();
        }
        // The first repeat makes the Event a series at once (as client-go's events library does); later ones wait.
        let observed = if published.written <= 1 || now >= published.written_at + flush {
            Observed::WriteNow
        } else {
            if !published.scheduled {
                published.scheduled = true;
                self.due.push(Reverse((published.written_at + flush, stamp, shared)));
            }
            Observed::Later
        };
        self.expire(now);
        observed
    }

    /// The write that brings `key`'s series up to date, if it has occurrences not written yet.
    fn pending(&self, key: &Key) -> Option<SeriesWrite> {
        let p = self.by_key.get(key)?;
        (p.count > p.written).then(|| SeriesWrite {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            count: p.count,
            last_seen: p.last_seen,
            note: p.note.clone(),
            combined: key.combined,
        })
    }

    /// Records that `count` occurrences of `key` were written at `now`.
    fn written(&mut self, key: &Key, count: i32, now: Instant) {
        if let Some(p) = self.by_key.get_mut(key) {
            p.written = p.written.max(count);
            p.written_at = now;
        }
    }

    /// The earliest queued flush.
    fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Takes the keys whose flush is due by `now` (all of them when `now` is `None`).
    fn take_due(&mut self, now: Option<Instant>) -> Vec<Arc<Key>> {
        let mut keys = Vec::new();
        while let Some(Reverse((at, _, _))) = self.due.peek() {
            if now.is_some_and(|now| *at > now) {
                break;
            }
            let Some(Reverse((_, _, key))) = self.due.pop() else { break };
            if let Some(p) = self.by_key.get_mut(&key)
                && p.scheduled
            {
                p.scheduled = false;
                keys.push(key);
            }
        }
        keys
    }

    /// Remembers an Event just created.
    fn created(&mut self, key: Key, namespace: String, name: String, note: String, seen: Timestamp, now: Instant) {
        let key = Arc::new(key);
        let stamp = self.stamp(key.clone(), now);
        let published = Published {
            namespace,
            name,
            count: 1,
            written: 1,
            written_at: now,
            last_seen: seen,
            note,
            scheduled: false,
            stamp,
        };
        self.by_key.insert(key, published);
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

/// The publisher task's state: what it published lately and which events it combines.
struct Publisher {
    client: Client,
    reporter: Reporter,
    series: Series,
    similar: Similar,
    combined: Counter,
}

impl Publisher {
    fn new(client: Client, reporter: Reporter, settings: EventSettings, combined: Counter) -> Self {
        Self {
            client,
            reporter,
            series: Series::new(SERIES_TTL, MAX_SERIES, settings.flush),
            similar: Similar::new(settings.combine_after, settings.combine_window, MAX_SERIES),
            combined,
        }
    }

    async fn run(mut self, mut receiver: mpsc::Receiver<Queued>) {
        loop {
            let next = self.series.next_due();
            tokio::select! {
                received = receiver.recv() => match received {
                    Some(queued) => self.publish(queued).await,
                    None => {
                        // Every sender is gone (the operator stops): write what was counted.
                        self.flush(None).await;
                        return;
                    }
                },
                () = sleep_until(next), if next.is_some() => self.flush(Some(Instant::now())).await,
            }
        }
    }

    async fn publish(&mut self, mut queued: Queued) {
        let now = Instant::now();
        let seen = Timestamp::now();
        let mut key = Key::of(&queued);
        if self.similar.combines(&key, now) {
            self.combined.inc();
            key = key.combining();
            queued.related = None;
            queued.note.message = format!("{COMBINED_PREFIX}{}", queued.note.message);
        }
        let note = super::text::fit_bytes(&queued.note.message, MAX_NOTE);
        match self.series.observe(&key, &note, seen, now) {
            Observed::Later => {}
            Observed::WriteNow => {
                if self.write_series(&key).await.is_err() {
                    self.create(key, &queued, seen).await;
                }
            }
            Observed::New => self.create(key, &queued, seen).await,
        }
    }

    /// Writes the series of every Event whose flush is due (all when `now` is `None`).
    async fn flush(&mut self, now: Option<Instant>) {
        for key in self.series.take_due(now) {
            if let Err(failed) = self.write_series(&key).await {
                // Gone (the API server's Event TTL) or refused: the occurrences start a new Event.
                let queued = Queued {
                    regarding: reference_of(&key.regarding),
                    related: key.related.as_ref().map(reference_of),
                    note: Note {
                        warning: key.warning,
                        reason: key.reason.clone(),
                        message: failed.note,
                        action: key.action.clone(),
                    },
                };
                self.create(Key::clone(&key), &queued, failed.last_seen).await;
            }
        }
    }

    /// Patches `key`'s series up to its count; the write when the Event could not be patched (it is forgotten).
    async fn write_series(&mut self, key: &Key) -> Result<(), SeriesWrite> {
        let Some(write) = self.series.pending(key) else { return Ok(()) };
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &write.namespace);
        let mut patch = serde_json::json!({
            "series": { "count": write.count, "lastObservedTime": MicroTime(write.last_seen) }
        });
        if write.combined {
            patch["note"] = serde_json::Value::String(write.note.clone());
        }
        match api.patch(&write.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                self.series.written(key, write.count, Instant::now());
                Ok(())
            }
            Err(e) => {
                tracing::debug!(error = %e, event = %write.name, "continuing an event series failed; creating a new event");
                self.series.forget(key);
                Err(write)
            }
        }
    }

    async fn create(&mut self, key: Key, queued: &Queued, seen: Timestamp) {
        let event = new_event(&self.reporter, queued, seen);
        let (namespace, name) = (event.metadata.namespace.clone().unwrap_or_default(), event.metadata.name.clone());
        let note = event.note.clone().unwrap_or_default();
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => self.series.created(key, namespace, name.unwrap_or_default(), note, seen, Instant::now()),
            Err(e) => tracing::warn!(error = %e, reason = %queued.note.reason, "publishing an event failed"),
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn reference_of(key: &ObjectKey) -> ObjectReference {
    ObjectReference {
        api_version: key.api_version.clone(),
        kind: key.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        uid: key.uid.clone(),
        ..ObjectReference::default()
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

    fn ts() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    /// A series that writes every repeat at once (no flush interval).
    fn eager(cap: usize) -> Series {
        Series::new(Duration::from_secs(360), cap, Duration::ZERO)
    }

    fn create(series: &mut Series, key: &Key, name: &str, now: Instant) {
        series.created(key.clone(), "ns".into(), name.into(), "m".into(), ts(), now);
    }

    /// Observes a repeat and, when it is due, writes it; the name and count written.
    fn repeat(series: &mut Series, key: &Key, now: Instant) -> Option<(String, i32)> {
        match series.observe(key, "m", ts(), now) {
            Observed::New => None,
            Observed::Later => Some((String::new(), 0)),
            Observed::WriteNow => {
                let write = series.pending(key)?;
                series.written(key, write.count, now);
                Some((write.name, write.count))
            }
        }
    }

    fn cont(name: &str, count: i32) -> Option<(String, i32)> {
        Some((name.into(), count))
    }

    #[test]
    fn a_repeated_event_continues_its_series_until_it_expires() {
        let t0 = Instant::now();
        let mut series = eager(100);
        let key = Key::of(&queued("SuccessfulUpdatePodInPlace", "p1"));
        assert_eq!(series.observe(&key, "m", ts(), t0), Observed::New);
        create(&mut series, &key, "gd.1", t0);
        assert_eq!(repeat(&mut series, &key, t0 + Duration::from_secs(10)), cont("gd.1", 2));
        assert_eq!(repeat(&mut series, &key, t0 + Duration::from_secs(300)), cont("gd.1", 3));
        // The TTL counts from the last occurrence: 300 s + 359 s is still the series.
        assert_eq!(repeat(&mut series, &key, t0 + Duration::from_secs(659)), cont("gd.1", 4));
        assert_eq!(repeat(&mut series, &key, t0 + Duration::from_secs(1100)), None, "expired");
        // Another related pod or reason is another Event.
        create(&mut series, &key, "gd.2", t0 + Duration::from_secs(1100));
        let other_pod = Key::of(&queued("SuccessfulUpdatePodInPlace", "p2"));
        assert_eq!(repeat(&mut series, &other_pod, t0 + Duration::from_secs(1101)), None);
        let other_reason = Key::of(&queued("SuccessfulCreate", "p1"));
        assert_eq!(repeat(&mut series, &other_reason, t0 + Duration::from_secs(1101)), None);
        // Forgotten (its series could not be patched): the next one is created.
        series.forget(&key);
        assert_eq!(repeat(&mut series, &key, t0 + Duration::from_secs(1102)), None);
    }

    #[test]
    fn repeats_are_written_at_most_once_per_flush_interval() {
        let t0 = Instant::now();
        let secs = |n: u64| t0 + Duration::from_secs(n);
        let mut series = Series::new(Duration::from_secs(360), 100, Duration::from_secs(5));
        let key = Key::of(&queued("HookBlocked", "p1"));
        create(&mut series, &key, "gd.1", t0);
        // The first repeat makes it a series at once.
        assert_eq!(repeat(&mut series, &key, t0), cont("gd.1", 2));
        // Later ones within 5 s of that write: counted, one flush queued for 5 s after it.
        for n in 1..=4 {
            assert_eq!(series.observe(&key, "m", ts(), secs(n)), Observed::Later);
        }
        assert_eq!(series.next_due(), Some(secs(5)));
        assert!(series.take_due(Some(secs(4))).is_empty(), "not due yet");
        let due = series.take_due(Some(secs(5)));
        assert_eq!(due.len(), 1);
        let write = series.pending(&due[0]).expect("four repeats to write");
        assert_eq!((write.name.as_str(), write.count, write.combined), ("gd.1", 6, false));
        series.written(&key, write.count, secs(5));
        assert_eq!(series.pending(&key), None, "up to date");
        // Written at 5 s: a repeat at 6 s waits until 10 s; one at 20 s (nothing queued) is written at once.
        assert_eq!(series.observe(&key, "m", ts(), secs(6)), Observed::Later);
        assert_eq!(series.observe(&key, "m", ts(), secs(7)), Observed::Later);
        assert_eq!(series.next_due(), Some(secs(10)), "one flush queued per Event");
        assert_eq!(series.take_due(None).len(), 1, "a final flush takes everything");
        series.written(&key, 8, secs(8));
        assert_eq!(series.observe(&key, "m", ts(), secs(20)), Observed::WriteNow);
        assert_eq!(series.pending(&key).map(|w| w.count), Some(9));
    }

    #[test]
    fn similar_events_beyond_ten_related_objects_are_combined() {
        let t0 = Instant::now();
        let mut similar = Similar::new(10, Duration::from_secs(600), 100);
        let key = |pod: &str| Key::of(&queued("SuccessfulUpdatePodInPlace", pod));
        for i in 0..10 {
            assert!(!similar.combines(&key(&format!("p{i}")), t0), "pod {i} is published on its own");
        }
        assert!(similar.combines(&key("p10"), t0), "the 11th related pod is combined");
        assert!(similar.combines(&key("p11"), t0 + Duration::from_secs(599)));
        assert!(!similar.combines(&key("p3"), t0 + Duration::from_secs(599)), "a repeat continues its own series");
        assert!(!similar.combines(&Key::of(&queued("SuccessfulCreate", "p10")), t0), "another reason");
        let mut other_gd = queued("SuccessfulUpdatePodInPlace", "p10");
        other_gd.regarding.name = Some("other".into());
        assert!(!similar.combines(&Key::of(&other_gd), t0), "another GameDeployment");
        // 10 minutes after the last similar event the count starts again.
        assert!(!similar.combines(&key("p12"), t0 + Duration::from_secs(1200)));
        // The combining key is one Event per reason and object, apart from the events published on their own.
        let combining = key("p10").combining();
        assert_eq!(combining, key("p11").combining());
        assert_ne!(combining, Key { related: None, ..key("p10") });
    }

    #[test]
    fn similar_groups_are_bounded() {
        let t0 = Instant::now();
        let mut similar = Similar::new(2, Duration::from_secs(600), 8);
        for i in 0..1000 {
            let mut q = queued("SuccessfulCreate", &format!("p{i}"));
            q.regarding.name = Some(format!("gd-{i}"));
            similar.combines(&Key::of(&q), t0 + Duration::from_millis(i));
            assert!(similar.groups.len() <= 8);
            assert!(similar.groups.values().all(|g| g.related.len() <= 2));
        }
    }

    #[test]
    fn memory_is_bounded_however_many_distinct_or_repeated_events_there_are() {
        let t0 = Instant::now();
        let mut series = eager(64);
        for i in 0..10_000 {
            let key = Key::of(&queued("SuccessfulCreateHookRun", &format!("pod-{i}")));
            if series.observe(&key, "m", ts(), t0) == Observed::New {
                create(&mut series, &key, &format!("gd.{i}"), t0);
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
        assert_eq!(repeat(&mut series, &newest, t0), cont("gd.9999", 2));
        let oldest = Key::of(&queued("SuccessfulCreateHookRun", "pod-0"));
        assert_eq!(repeat(&mut series, &oldest, t0), None);
        // One Event repeated forever: one entry, and the queue of stale entries stays bounded.
        let mut series = eager(64);
        let key = Key::of(&queued("HookBlocked", "p"));
        create(&mut series, &key, "gd.x", t0);
        for i in 0..10_000 {
            assert_eq!(repeat(&mut series, &key, t0 + Duration::from_millis(i)), cont("gd.x", i as i32 + 2));
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
