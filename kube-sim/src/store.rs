//! The storage layer: an in-memory etcd stand-in with one global, monotonically increasing
//! resource version, a bounded per-resource event history (the watch cache), point-in-time
//! reconstruction for paginated lists, and fan-out of events to watchers.
//!
//! Everything happens under one mutex so that a commit, its resource version and its delivery
//! to watchers are a single atomic step: a watch opened at version N sees exactly the events
//! after N, in order, which is the guarantee clients rely on.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use axum::body::Bytes;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::meta;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    Added,
    Modified,
    Deleted,
}

impl EventKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One committed change. `object` is the new state (for deletions: the last state, stamped
/// with the deletion's resource version, as etcd-backed watches report it).
#[derive(Debug)]
pub(crate) struct Event {
    pub kind: EventKind,
    pub rv: u64,
    pub storage: Arc<str>,
    pub key: String,
    pub object: Arc<Value>,
    pub prev: Option<Arc<Value>>,
}

/// The watch line of an event's object as one API version serves it (`{"type":KIND,"object":OBJECT}` and a newline,
/// KIND the committed change's), made by the first watcher that sends it (or by the write's response) and shared by
/// the others: each change is serialized once and its line written once, not once per watch. It also remembers
/// whether the served object is the stored one (not a conversion of it), for the history to keep the object's
/// encoding (a slice of the line).
#[derive(Debug)]
pub(crate) struct Encoded {
    kind: &'static str,
    line: OnceLock<EncodedLine>,
}

#[derive(Debug)]
struct EncodedLine {
    api_version: String,
    line: Bytes,
    /// Where the object's JSON lies in `line`.
    object: std::ops::Range<usize>,
    stored: bool,
}

/// `{"type":KIND,"object":` + the object's JSON + `}\n`, and where the object lies in it.
pub(crate) fn watch_line(kind: &str, object: &Value) -> (Bytes, std::ops::Range<usize>) {
    let mut line = line_start(kind, 512);
    let start = line.len();
    let _ = serde_json::to_writer(&mut line, &crate::json::WireOrder(object));
    let end = line.len();
    line.extend_from_slice(b"}\n");
    (Bytes::from(line), start..end)
}

/// [`watch_line`] around an object already encoded.
pub(crate) fn watch_line_around(kind: &str, object: &[u8]) -> Bytes {
    let mut line = line_start(kind, object.len() + 32);
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

/// `{"type":KIND,"object":`, in a buffer of `capacity`.
fn line_start(kind: &str, capacity: usize) -> Vec<u8> {
    let mut line = Vec::with_capacity(capacity);
    line.extend_from_slice(b"{\"type\":");
    let _ = serde_json::to_writer(&mut line, kind);
    line.extend_from_slice(b",\"object\":");
    line
}

impl Encoded {
    pub(crate) fn new(kind: EventKind) -> Self {
        Self { kind: kind.as_str(), line: OnceLock::new() }
    }

    /// The kept line if it is for `api_version`, making it when there is none yet; `view` gives the object as that
    /// version serves it and says whether it is the stored one. `None`: the kept line is another served version's.
    fn kept(&self, api_version: &str, view: impl FnOnce() -> (Arc<Value>, bool)) -> Result<&EncodedLine, Arc<Value>> {
        if let Some(e) = self.line.get() {
            return if e.api_version == api_version { Ok(e) } else { Err(view().0) };
        }
        let (object, stored) = view();
        let (line, range) = watch_line(self.kind, &object);
        let _ = self.line.set(EncodedLine { api_version: api_version.to_string(), line, object: range, stored });
        // Another thread may have set it first, with the same bytes (or another version's: then encode our own).
        match self.line.get() {
            Some(e) if e.api_version == api_version => Ok(e),
            _ => Err(object),
        }
    }

    /// The watch line for `kind` (the change's own or, for a filtered watch, the one it translates to) and
    /// `api_version` (see [`Self::kept`]); a watch of another served version of the same storage encodes its own.
    pub(crate) fn line(
        &self,
        api_version: &str,
        kind: &'static str,
        view: impl FnOnce() -> (Arc<Value>, bool),
    ) -> Bytes {
        match self.kept(api_version, view) {
            Ok(e) if kind == self.kind => e.line.clone(),
            Ok(e) => watch_line_around(kind, &e.line[e.object.clone()]),
            Err(object) => watch_line(kind, &object).0,
        }
    }

    /// The object's JSON as `api_version` serves it (a slice of the kept line when it is that version's).
    pub(crate) fn object(&self, api_version: &str, view: impl FnOnce() -> (Arc<Value>, bool)) -> Bytes {
        match self.kept(api_version, view) {
            Ok(e) => e.line.slice(e.object.clone()),
            Err(object) => Bytes::from(serde_json::to_vec(&crate::json::WireOrder(&object)).unwrap_or_default()),
        }
    }

    /// The encoding of the stored object, if a watch made one (a slice of its line, not a copy).
    fn stored_form(&self) -> Option<Bytes> {
        self.line.get().filter(|e| e.stored).map(|e| e.line.slice(e.object.clone()))
    }
}

/// A version of an object kept in the watch history: the parsed object while it is the stored one, afterwards (when
/// a watch has encoded it as stored) only that JSON encoding, a fraction of the parsed object's memory. Decoding the
/// encoding gives back an equal object (`superseded_versions_are_kept_encoded_and_read_back_equal`).
#[derive(Debug, Clone)]
enum Version {
    Object(Arc<Value>),
    Encoded(Bytes),
}

impl Version {
    fn value(&self) -> Arc<Value> {
        match self {
            Version::Object(v) => v.clone(),
            Version::Encoded(bytes) => Arc::new(serde_json::from_slice(bytes).unwrap_or(Value::Null)),
        }
    }
}

/// One committed change as the history keeps it (see [`Event`]).
#[derive(Debug)]
struct Past {
    kind: EventKind,
    rv: u64,
    key: String,
    object: Version,
    prev: Option<Version>,
    /// Shared with the watches that receive the change, until the object is superseded: then its encoding (if a
    /// watch made it) replaces the parsed object here.
    encoded: Option<Arc<Encoded>>,
}

impl Past {
    fn event(&self, storage: &Arc<str>) -> Event {
        Event {
            kind: self.kind,
            rv: self.rv,
            storage: storage.clone(),
            key: self.key.clone(),
            object: self.object.value(),
            prev: self.prev.as_ref().map(Version::value),
        }
    }
}

/// What a watcher receives.
#[derive(Clone, Debug)]
pub(crate) enum WatchItem {
    Event {
        kind: EventKind,
        object: Arc<Value>,
        /// Shared with the other watchers of the same committed event (`None`: the object is this watcher's own).
        encoded: Option<Arc<Encoded>>,
    },
    /// A progress notification: every event up to this resource version has been delivered.
    Bookmark { rv: u64, initial_events_end: bool },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StoreError {
    NotFound,
    AlreadyExists,
    /// The object changed since the caller read it (resource version or UID precondition).
    Conflict {
        current: Option<Arc<Value>>,
    },
    /// The requested resource version is older than the retained history.
    Expired {
        requested: u64,
        oldest: u64,
    },
    /// The requested resource version is newer than anything committed.
    TooLarge {
        requested: u64,
        current: u64,
    },
}

/// Selects which objects a watcher or a list is interested in.
pub(crate) type Filter = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

struct Watcher {
    id: u64,
    namespace: Option<String>,
    filter: Filter,
    bookmarks: bool,
    tx: mpsc::Sender<WatchItem>,
}

#[derive(Default)]
struct Bucket {
    objects: BTreeMap<String, Arc<Value>>,
    history: VecDeque<Past>,
    /// The resource version of each key's newest entry in `history`.
    latest: HashMap<String, u64>,
    /// Every event with `rv <= compacted` may have been dropped from `history`.
    compacted: u64,
    watchers: Vec<Watcher>,
}

struct Inner {
    rv: u64,
    buckets: HashMap<Arc<str>, Bucket>,
    next_watcher: u64,
    listeners: Vec<mpsc::UnboundedSender<Arc<Event>>>,
}

pub(crate) struct Store {
    inner: Mutex<Inner>,
    history_limit: usize,
    watcher_capacity: usize,
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WatchFrom {
    /// Synthetic ADDED events for the current state, then changes (resourceVersion unset or "0").
    CurrentState { end_bookmark: bool },
    /// Changes strictly after this resource version.
    Version(u64),
}

/// A registered watch: the backlog to send first, then the live channel.
pub(crate) struct WatchRegistration {
    pub backlog: Vec<WatchItem>,
    pub rx: mpsc::Receiver<WatchItem>,
    pub guard: WatcherGuard,
}

/// Unregisters the watcher when the HTTP stream ends.
pub(crate) struct WatcherGuard {
    store: Arc<Store>,
    storage: Arc<str>,
    id: u64,
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        let mut inner = self.store.lock();
        if let Some(b) = inner.buckets.get_mut(&self.storage) {
            b.watchers.retain(|w| w.id != self.id);
        }
    }
}

/// A page of a list.
pub(crate) struct ListPage {
    pub items: Vec<Arc<Value>>,
    /// The resource version the page reflects.
    pub rv: u64,
    /// The key to continue after, when more matching items may exist.
    pub continue_after: Option<String>,
    pub remaining: Option<u64>,
}

pub(crate) struct ListRequest<'a> {
    pub namespace: Option<&'a str>,
    pub filter: Option<Filter>,
    pub limit: Option<usize>,
    pub start_after: Option<&'a str>,
    /// Serve the state as of this resource version (pagination, `resourceVersionMatch=Exact`).
    pub at: Option<u64>,
}

pub(crate) fn object_key(namespace: &str, name: &str) -> String {
    if namespace.is_empty() { name.to_string() } else { format!("{namespace}/{name}") }
}

fn parse_rv(obj: &Value) -> u64 {
    meta::resource_version(obj).parse().unwrap_or(0)
}

fn with_rv(mut obj: Value, rv: u64) -> Value {
    meta::metadata_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
    obj
}

impl Store {
    pub(crate) fn new(history_limit: usize, watcher_capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner { rv: 1, buckets: HashMap::new(), next_watcher: 1, listeners: Vec::new() }),
            history_limit: history_limit.max(1),
            watcher_capacity: watcher_capacity.max(16),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated in a way later
        // readers could misinterpret (every mutation is a single insert/remove), so recover.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Internal controllers (garbage collector, namespace lifecycle) observe every commit.
    pub(crate) fn subscribe_all(&self) -> mpsc::UnboundedReceiver<Arc<Event>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().listeners.push(tx);
        rx
    }

    pub(crate) fn get(&self, storage: &str, key: &str) -> Option<Arc<Value>> {
        self.lock().buckets.get(storage).and_then(|b| b.objects.get(key).cloned())
    }

    pub(crate) fn count(&self, storage: &str, namespace: Option<&str>) -> usize {
        let inner = self.lock();
        let Some(b) = inner.buckets.get(storage) else { return 0 };
        match namespace {
            None => b.objects.len(),
            Some(ns) => {
                let prefix = format!("{ns}/");
                b.objects.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).count()
            }
        }
    }

    pub(crate) fn create(&self, storage: &str, key: &str, obj: Value) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let storage = intern(&mut inner, storage);
        if inner.buckets.get(&storage).is_some_and(|b| b.objects.contains_key(key)) {
            return Err(StoreError::AlreadyExists);
        }
        let rv = inner.rv + 1;
        inner.rv = rv;
        let obj = Arc::new(with_rv(obj, rv));
        self.commit(&mut inner, storage, key, EventKind::Added, obj.clone(), None, rv);
        Ok(obj)
    }

    /// Compare-and-swap on the resource version the caller read. A write that changes nothing
    /// is not committed and keeps the old resource version, as in the real apiserver.
    pub(crate) fn update(
        &self,
        storage: &str,
        key: &str,
        obj: Value,
        expected_rv: u64,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let storage = intern(&mut inner, storage);
        let current =
            inner.buckets.get(&storage).and_then(|b| b.objects.get(key).cloned()).ok_or(StoreError::NotFound)?;
        if parse_rv(&current) != expected_rv {
            return Err(StoreError::Conflict { current: Some(current) });
        }
        let candidate = with_rv(obj, expected_rv);
        if crate::json::eq(&candidate, &current) {
            return Ok(current);
        }
        let rv = inner.rv + 1;
        inner.rv = rv;
        let obj = Arc::new(with_rv(candidate, rv));
        self.commit(&mut inner, storage, key, EventKind::Modified, obj.clone(), Some(current), rv);
        Ok(obj)
    }

    /// Removes an object if it still has the resource version the caller decided on.
    pub(crate) fn delete(&self, storage: &str, key: &str, expected_rv: Option<u64>) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let storage = intern(&mut inner, storage);
        let current =
            inner.buckets.get(&storage).and_then(|b| b.objects.get(key).cloned()).ok_or(StoreError::NotFound)?;
        if let Some(expected) = expected_rv
            && parse_rv(&current) != expected
        {
            return Err(StoreError::Conflict { current: Some(current) });
        }
        let rv = inner.rv + 1;
        inner.rv = rv;
        let last = Arc::new(with_rv((*current).clone(), rv));
        self.commit(&mut inner, storage, key, EventKind::Deleted, last.clone(), Some(current), rv);
        Ok(last)
    }

    #[allow(clippy::too_many_arguments)] // one commit = one event's fields
    fn commit(
        &self,
        inner: &mut Inner,
        storage: Arc<str>,
        key: &str,
        kind: EventKind,
        obj: Arc<Value>,
        prev: Option<Arc<Value>>,
        rv: u64,
    ) {
        let event =
            Arc::new(Event { kind, rv, storage: storage.clone(), key: key.to_string(), object: obj.clone(), prev });
        let bucket = inner.buckets.entry(storage).or_default();
        match kind {
            EventKind::Deleted => {
                bucket.objects.remove(key);
            }
            _ => {
                bucket.objects.insert(key.to_string(), obj.clone());
            }
        }
        // The version this change supersedes is the newest history entry of the key: if a watch encoded it, the
        // history keeps only the encoding from now on (here and as this change's `prev`).
        let mut prev_version = event.prev.clone().map(Version::Object);
        if let (Some(prev), Some(&last)) = (&event.prev, bucket.latest.get(key))
            && let Ok(i) = bucket.history.binary_search_by_key(&last, |e| e.rv)
        {
            let entry = &mut bucket.history[i];
            if let Version::Object(o) = &entry.object
                && Arc::ptr_eq(o, prev)
                && let Some(bytes) = entry.encoded.as_ref().and_then(|e| e.stored_form())
            {
                entry.object = Version::Encoded(bytes.clone());
                prev_version = Some(Version::Encoded(bytes));
            }
            entry.encoded = None;
        }
        // Shared by the watch items and this change's history entry (until the object is superseded).
        let encoded = Arc::new(Encoded::new(kind));
        bucket.history.push_back(Past {
            kind,
            rv,
            key: key.to_string(),
            object: Version::Object(obj),
            prev: prev_version,
            encoded: Some(encoded.clone()),
        });
        bucket.latest.insert(key.to_string(), rv);
        while bucket.history.len() > self.history_limit {
            if let Some(old) = bucket.history.pop_front() {
                bucket.compacted = old.rv;
                if bucket.latest.get(&old.key) == Some(&old.rv) {
                    bucket.latest.remove(&old.key);
                }
            }
        }
        let ns = key.split_once('/').map(|(ns, _)| ns);
        bucket.watchers.retain(|w| {
            if let Some(wanted) = &w.namespace
                && ns != Some(wanted.as_str())
            {
                return true;
            }
            match translate(&event, &w.filter, Some(&encoded)) {
                None => true,
                Some(item) => w.tx.try_send(item).is_ok(),
            }
        });
        inner.listeners.retain(|l| l.send(event.clone()).is_ok());
    }

    /// The shared encoding of `object` if it is the stored object of `key` (the newest change of the key, as
    /// committed), for a write's response to reuse what its watchers send (or to make it for them).
    pub(crate) fn encoded_for(&self, storage: &str, key: &str, object: &Arc<Value>) -> Option<Arc<Encoded>> {
        let inner = self.lock();
        let bucket = inner.buckets.get(storage)?;
        let rv = *bucket.latest.get(key)?;
        let i = bucket.history.binary_search_by_key(&rv, |e| e.rv).ok()?;
        let entry = &bucket.history[i];
        match &entry.object {
            Version::Object(o) if Arc::ptr_eq(o, object) && entry.kind != EventKind::Deleted => entry.encoded.clone(),
            _ => None,
        }
    }

    /// Sends a progress bookmark to every watcher that asked for bookmarks.
    pub(crate) fn broadcast_bookmarks(&self) {
        let mut inner = self.lock();
        let rv = inner.rv;
        for bucket in inner.buckets.values_mut() {
            bucket.watchers.retain(|w| {
                !w.bookmarks
                    || !matches!(
                        w.tx.try_send(WatchItem::Bookmark { rv, initial_events_end: false }),
                        Err(mpsc::error::TrySendError::Closed(_))
                    )
            });
        }
    }

    pub(crate) fn watch(
        self: &Arc<Self>,
        storage: &str,
        namespace: Option<&str>,
        filter: Filter,
        from: WatchFrom,
        bookmarks: bool,
    ) -> Result<WatchRegistration, StoreError> {
        let mut inner = self.lock();
        let storage = intern(&mut inner, storage);
        let current_rv = inner.rv;
        let id = inner.next_watcher;
        inner.next_watcher += 1;
        let bucket = inner.buckets.entry(storage.clone()).or_default();
        let in_ns = |key: &str| match namespace {
            None => true,
            Some(ns) => key.split_once('/').is_some_and(|(k, _)| k == ns),
        };
        let mut backlog = Vec::new();
        match from {
            WatchFrom::CurrentState { end_bookmark } => {
                for (key, obj) in &bucket.objects {
                    if in_ns(key) && filter(obj) {
                        backlog.push(WatchItem::Event { kind: EventKind::Added, object: obj.clone(), encoded: None });
                    }
                }
                if end_bookmark {
                    backlog.push(WatchItem::Bookmark { rv: current_rv, initial_events_end: true });
                }
            }
            WatchFrom::Version(v) => {
                if v > current_rv {
                    return Err(StoreError::TooLarge { requested: v, current: current_rv });
                }
                if v < bucket.compacted {
                    let oldest = bucket.history.front().map_or(current_rv, |e| e.rv);
                    return Err(StoreError::Expired { requested: v, oldest });
                }
                for e in bucket.history.iter().filter(|e| e.rv > v) {
                    if in_ns(&e.key)
                        && let Some(item) = translate(&e.event(&storage), &filter, None)
                    {
                        backlog.push(item);
                    }
                }
            }
        }
        let (tx, rx) = mpsc::channel(self.watcher_capacity);
        bucket.watchers.push(Watcher { id, namespace: namespace.map(str::to_string), filter, bookmarks, tx });
        drop(inner);
        Ok(WatchRegistration { backlog, rx, guard: WatcherGuard { store: self.clone(), storage, id } })
    }

    /// Lists objects in key order, optionally as of an earlier resource version (rebuilt from the
    /// event history) and a page at a time.
    pub(crate) fn list(&self, storage: &str, req: &ListRequest<'_>) -> Result<ListPage, StoreError> {
        let inner = self.lock();
        let current_rv = inner.rv;
        let empty = Bucket::default();
        let bucket = inner.buckets.get(storage).unwrap_or(&empty);
        let prefix = req.namespace.map(|ns| format!("{ns}/"));
        let lower = match (req.start_after, &prefix) {
            (Some(s), _) => std::ops::Bound::Excluded(s.to_string()),
            (None, Some(p)) => std::ops::Bound::Included(p.clone()),
            (None, None) => std::ops::Bound::Unbounded,
        };
        let in_range = |k: &str| prefix.as_ref().is_none_or(|p| k.starts_with(p.as_str()));
        let matches = |o: &Value| req.filter.as_ref().is_none_or(|f| f(o));
        let limit = req.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut continue_after = None;
        let mut remaining = None;

        let rv = match req.at {
            Some(at) if at < current_rv => {
                if at < bucket.compacted {
                    let oldest = bucket.history.front().map_or(current_rv, |e| e.rv);
                    return Err(StoreError::Expired { requested: at, oldest });
                }
                // State at `at`: the `prev` of the first later event of each key, else current.
                let mut overrides: HashMap<&str, Option<Arc<Value>>> = HashMap::new();
                for e in bucket.history.iter().filter(|e| e.rv > at) {
                    overrides.entry(e.key.as_str()).or_insert_with(|| e.prev.as_ref().map(Version::value));
                }
                let mut keys: BTreeSet<&str> = bucket
                    .objects
                    .range((lower.clone(), std::ops::Bound::Unbounded))
                    .map(|(k, _)| k.as_str())
                    .collect();
                for k in overrides.keys() {
                    let after_lower = match &lower {
                        std::ops::Bound::Excluded(s) => *k > s.as_str(),
                        std::ops::Bound::Included(s) => *k >= s.as_str(),
                        std::ops::Bound::Unbounded => true,
                    };
                    if after_lower {
                        keys.insert(k);
                    }
                }
                let mut iter = keys.into_iter().take_while(|k| in_range(k)).filter_map(|k| {
                    let v = match overrides.get(k) {
                        Some(v) => v.clone(),
                        None => bucket.objects.get(k).cloned(),
                    };
                    v.filter(|o| matches(o)).map(|o| (k, o))
                });
                collect_page(&mut iter, limit, &mut items, &mut continue_after, &mut remaining, req.filter.is_none());
                at
            }
            _ => {
                let mut iter = bucket
                    .objects
                    .range((lower, std::ops::Bound::Unbounded))
                    .take_while(|(k, _)| in_range(k))
                    .filter(|(_, o)| matches(o))
                    .map(|(k, o)| (k.as_str(), o.clone()));
                collect_page(&mut iter, limit, &mut items, &mut continue_after, &mut remaining, req.filter.is_none());
                current_rv
            }
        };
        Ok(ListPage { items, rv, continue_after, remaining })
    }

    /// Objects of a bucket, for internal controllers (no filtering, current state).
    pub(crate) fn snapshot(&self, storage: &str) -> Vec<(String, Arc<Value>)> {
        let inner = self.lock();
        inner
            .buckets
            .get(storage)
            .map(|b| b.objects.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Names of the buckets that currently hold objects.
    pub(crate) fn buckets(&self) -> Vec<String> {
        self.lock().buckets.iter().filter(|(_, b)| !b.objects.is_empty()).map(|(k, _)| k.to_string()).collect()
    }

    /// Closes every watch on a bucket (fault injection: dropped watch connections).
    pub(crate) fn drop_watchers(&self, storage: Option<&str>) -> usize {
        let mut inner = self.lock();
        let mut n = 0;
        for (name, b) in inner.buckets.iter_mut() {
            if storage.is_none_or(|s| s == &**name) {
                n += b.watchers.len();
                b.watchers.clear();
            }
        }
        n
    }
}

fn collect_page(
    iter: &mut dyn Iterator<Item = (&str, Arc<Value>)>,
    limit: Option<usize>,
    items: &mut Vec<Arc<Value>>,
    continue_after: &mut Option<String>,
    remaining: &mut Option<u64>,
    count_remaining: bool,
) {
    let mut last_key: Option<&str> = None;
    #[allow(clippy::while_let_on_iterator)]
    while let Some((k, o)) = iter.next() {
        items.push(o);
        last_key = Some(k);
        if limit.is_some_and(|l| items.len() >= l) {
            break;
        }
    }
    if limit.is_some_and(|l| items.len() >= l) {
        let rest = iter.count() as u64;
        if rest > 0 {
            *continue_after = last_key.map(str::to_string);
            if count_remaining {
                *remaining = Some(rest);
            }
        }
    }
}

fn intern(inner: &mut Inner, storage: &str) -> Arc<str> {
    if let Some((k, _)) = inner.buckets.get_key_value(storage) {
        return k.clone();
    }
    let k: Arc<str> = Arc::from(storage);
    inner.buckets.insert(k.clone(), Bucket::default());
    k
}

/// Converts a committed event into what a filtered watcher must see: objects moving into the
/// selection are ADDED, moving out are DELETED (with the event's resource version).
fn translate(event: &Event, filter: &Filter, encoded: Option<&Arc<Encoded>>) -> Option<WatchItem> {
    let cur = event.kind != EventKind::Deleted && filter(&event.object);
    let old = event.prev.as_ref().is_some_and(|p| filter(p));
    match (cur, old, event.kind) {
        (false, false, EventKind::Deleted) => {
            // A deletion of an object that matched before its last state.
            if event.prev.is_none() && filter(&event.object) {
                Some(WatchItem::Event {
                    kind: EventKind::Deleted,
                    object: event.object.clone(),
                    encoded: encoded.cloned(),
                })
            } else {
                None
            }
        }
        (false, false, _) => None,
        (true, false, _) => {
            Some(WatchItem::Event { kind: EventKind::Added, object: event.object.clone(), encoded: encoded.cloned() })
        }
        (true, true, _) => {
            Some(WatchItem::Event { kind: event.kind, object: event.object.clone(), encoded: encoded.cloned() })
        }
        (false, true, EventKind::Deleted) => {
            Some(WatchItem::Event { kind: EventKind::Deleted, object: event.object.clone(), encoded: encoded.cloned() })
        }
        (false, true, _) => {
            let prev = event.prev.as_ref().map(|p| with_rv((**p).clone(), event.rv)).unwrap_or(Value::Null);
            Some(WatchItem::Event { kind: EventKind::Deleted, object: Arc::new(prev), encoded: None })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, label: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": label}}})
    }

    fn all() -> Filter {
        Arc::new(|_| true)
    }

    #[test]
    fn resource_versions_increase_and_conflicts_are_detected() {
        let s = Store::new(100, 100);
        let a = s.create("pods", "default/a", pod("a", "x")).unwrap();
        let rv = parse_rv(&a);
        let b = s.update("pods", "default/a", pod("a", "y"), rv).unwrap();
        assert!(parse_rv(&b) > rv);
        assert!(matches!(s.update("pods", "default/a", pod("a", "z"), rv), Err(StoreError::Conflict { .. })));
        // no-op update keeps the version
        let c = s.update("pods", "default/a", pod("a", "y"), parse_rv(&b)).unwrap();
        assert_eq!(parse_rv(&c), parse_rv(&b));
        assert!(matches!(s.create("pods", "default/a", pod("a", "x")), Err(StoreError::AlreadyExists)));
    }

    #[test]
    fn paginated_list_is_a_consistent_snapshot() {
        let s = Store::new(100, 100);
        for i in 0..5 {
            s.create("pods", &format!("default/p{i}"), pod(&format!("p{i}"), "x")).unwrap();
        }
        let first = s
            .list(
                "pods",
                &ListRequest { namespace: Some("default"), filter: None, limit: Some(2), start_after: None, at: None },
            )
            .unwrap();
        assert_eq!(first.items.len(), 2);
        assert_eq!(first.remaining, Some(3));
        // Changes after the first page must not show up in later pages.
        s.delete("pods", "default/p3", None).unwrap();
        s.create("pods", "default/p9", pod("p9", "x")).unwrap();
        let second = s
            .list(
                "pods",
                &ListRequest {
                    namespace: Some("default"),
                    filter: None,
                    limit: Some(10),
                    start_after: first.continue_after.as_deref(),
                    at: Some(first.rv),
                },
            )
            .unwrap();
        let names: Vec<&str> = second.items.iter().map(|o| meta::name(o)).collect();
        assert_eq!(names, vec!["p2", "p3", "p4"]);
        assert!(second.continue_after.is_none());
    }

    #[test]
    fn watch_from_version_replays_history_and_expires() {
        let s = Store::new(3, 100);
        let a = s.create("pods", "default/a", pod("a", "x")).unwrap();
        let rv = parse_rv(&a);
        for l in ["b", "c", "d", "e"] {
            let cur = s.get("pods", "default/a").unwrap();
            s.update("pods", "default/a", pod("a", l), parse_rv(&cur)).unwrap();
        }
        assert!(matches!(s.watch("pods", None, all(), WatchFrom::Version(rv), false), Err(StoreError::Expired { .. })));
        let cur = parse_rv(&s.get("pods", "default/a").unwrap());
        let reg = s.watch("pods", None, all(), WatchFrom::Version(cur - 1), false).unwrap();
        assert_eq!(reg.backlog.len(), 1);
    }

    /// What a watch reads of its items: the kind and the object, encoded as the stored object (as the server's
    /// watches encode a built-in), so the history can keep the encoding.
    fn drain(reg: &mut WatchRegistration) -> Vec<(EventKind, Value)> {
        std::iter::from_fn(|| reg.rx.try_recv().ok())
            .filter_map(|i| match i {
                WatchItem::Event { kind, object, encoded } => {
                    if let Some(e) = encoded {
                        e.line("v1", kind.as_str(), || (object.clone(), true));
                    }
                    Some((kind, (*object).clone()))
                }
                WatchItem::Bookmark { .. } => None,
            })
            .collect()
    }

    fn replay(s: &Arc<Store>, filter: Filter, from: u64) -> Vec<(EventKind, Value)> {
        let reg = s.watch("pods", None, filter, WatchFrom::Version(from), false).unwrap();
        reg.backlog
            .into_iter()
            .filter_map(|i| match i {
                WatchItem::Event { kind, object, .. } => Some((kind, (*object).clone())),
                WatchItem::Bookmark { .. } => None,
            })
            .collect()
    }

    #[test]
    fn superseded_versions_are_kept_encoded_and_read_back_equal() {
        let s = Store::new(100, 100);
        let labelled: Filter =
            Arc::new(|o: &Value| meta::labels(o).and_then(|l| l.get("app")).and_then(Value::as_str) == Some("x"));
        let start = s.current_rv();
        let mut all_watch = s.watch("pods", None, all(), WatchFrom::Version(start), false).unwrap();
        let mut some_watch = s.watch("pods", None, labelled.clone(), WatchFrom::Version(start), false).unwrap();
        let mut live = Vec::new();
        let mut live_filtered = Vec::new();
        let mut versions: Vec<Arc<Value>> = Vec::new();
        for (i, label) in ["x", "y", "x", "x", "y", "x"].into_iter().enumerate() {
            let mut obj = pod("a", label);
            obj["spec"] =
                json!({"n": i, "f": 0.1 * i as f64, "big": u64::MAX, "neg": -3, "s": "é\"\n\u{1}", "z": null});
            let stored = match versions.last() {
                None => s.create("pods", "default/a", obj).unwrap(),
                Some(v) => s.update("pods", "default/a", obj, parse_rv(v)).unwrap(),
            };
            versions.push(stored);
            s.create("pods", &format!("default/other-{i}"), pod("other", label)).unwrap();
            live.extend(drain(&mut all_watch));
            live_filtered.extend(drain(&mut some_watch));
        }
        {
            let inner = s.lock();
            let history = &inner.buckets.get("pods").unwrap().history;
            let encoded = history.iter().filter(|e| matches!(e.object, Version::Encoded(_))).count();
            // Every version of `a` but the stored one; the `other-*` objects were never superseded.
            assert_eq!(encoded, versions.len() - 1);
        }
        assert_eq!(replay(&s, all(), start), live);
        assert_eq!(replay(&s, labelled, start), live_filtered);
        assert!(live_filtered.iter().any(|(k, _)| *k == EventKind::Deleted), "{live_filtered:?}");
        for v in &versions {
            let page = s
                .list(
                    "pods",
                    &ListRequest {
                        namespace: None,
                        filter: None,
                        limit: None,
                        start_after: None,
                        at: Some(parse_rv(v)),
                    },
                )
                .unwrap();
            let a: Vec<&Value> = page.items.iter().map(|o| &**o).filter(|o| meta::name(o) == "a").collect();
            assert_eq!(a, vec![&**v]);
        }
    }

    #[test]
    fn filtered_watch_translates_modifications_into_added_and_deleted() {
        let s = Store::new(100, 100);
        let filter: Filter =
            Arc::new(|o: &Value| meta::labels(o).and_then(|l| l.get("app")).and_then(Value::as_str) == Some("x"));
        let mut reg = s.watch("pods", None, filter, WatchFrom::Version(s.current_rv()), false).unwrap();
        let a = s.create("pods", "default/a", pod("a", "y")).unwrap();
        let b = s.update("pods", "default/a", pod("a", "x"), parse_rv(&a)).unwrap();
        s.update("pods", "default/a", pod("a", "y"), parse_rv(&b)).unwrap();
        let kinds: Vec<EventKind> = std::iter::from_fn(|| reg.rx.try_recv().ok())
            .filter_map(|i| match i {
                WatchItem::Event { kind, .. } => Some(kind),
                WatchItem::Bookmark { .. } => None,
            })
            .collect();
        assert_eq!(kinds, vec![EventKind::Added, EventKind::Deleted]);
    }

    /// A write's response and its watches share one encoding: the object's bytes are those of `serde_json::to_vec`, the
    /// line's are `{"type":KIND,"object":…}` around them, a watch that translates the change to another kind gets its
    /// own line around the same bytes, and only the key's newest stored object has one.
    #[test]
    fn the_stored_objects_encoding_is_shared_by_the_response_and_the_watches() {
        let s = Store::new(100, 100);
        let mut reg = s.watch("pods", None, all(), WatchFrom::Version(s.current_rv()), false).unwrap();
        let a = s.create("pods", "default/a", pod("a", "x")).unwrap();
        let b = s.update("pods", "default/a", pod("a", "y"), parse_rv(&a)).unwrap();
        assert!(s.encoded_for("pods", "default/a", &a).is_none(), "superseded");
        assert!(s.encoded_for("pods", "default/a", &Arc::new((*b).clone())).is_none(), "not the stored object");
        assert!(s.encoded_for("pods", "default/b", &b).is_none());
        let shared = s.encoded_for("pods", "default/a", &b).expect("the newest version's encoding");
        let object = shared.object("v1", || (b.clone(), true));
        assert_eq!(object, serde_json::to_vec(&crate::json::WireOrder(&b)).unwrap());
        let items: Vec<WatchItem> = std::iter::from_fn(|| reg.rx.try_recv().ok()).collect();
        let WatchItem::Event { kind: EventKind::Modified, encoded: Some(e), .. } = &items[1] else {
            panic!("{items:?}")
        };
        assert!(Arc::ptr_eq(e, &shared));
        let line = e.line("v1", "MODIFIED", || unreachable!("made by the response"));
        let mut expected = br#"{"type":"MODIFIED","object":"#.to_vec();
        expected.extend_from_slice(&object);
        expected.extend_from_slice(b"}\n");
        assert_eq!(line, expected);
        assert_eq!(e.line("v1", "ADDED", || unreachable!()), watch_line("ADDED", &b).0);
        // Another served version encodes its own (and does not replace the kept one).
        let other = Arc::new(json!({"apiVersion": "v2"}));
        assert_eq!(e.object("v2", || (other.clone(), false)), serde_json::to_vec(&*other).unwrap());
        assert_eq!(e.stored_form().unwrap(), object);
    }
}
