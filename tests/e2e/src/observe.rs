//! Observing what happened instead of polling for it. A state that something later removes — a HookRun's phase
//! before the finished-run TTL or the workload operator deletes the run, a pod before its deletion, a status value a
//! later transition replaces — can fall between two polls on a loaded machine (a `kubectl get` may take longer
//! than the TTL), and then a poll never sees it. An [`Observer`] is a watch started before the action: it records
//! every version of every object the API server sends, in the API's order, so a wait looks through everything that
//! happened since the watch began and cannot miss a state that did not last.
//!
//! Start the observer before the action whose result it looks for; then wait on it:
//!
//! ```no_run
//! # async fn demo(cluster: &e2e::Cluster) {
//! use common::api::{HookPhase, HookRun};
//! use e2e::observe::Observer;
//! let runs = Observer::<HookRun>::namespaced(cluster, "default").await;
//! cluster.kubectl_ok(&["apply", "-f", "run.yaml"]).await;
//! runs.wait("run r to succeed", e2e::DEADLINE, |seen| {
//!     (seen.name() == "r" && seen.object.status.as_ref()?.phase? == HookPhase::Successful).then_some(())
//! })
//! .await;
//! # }
//! ```
//!
//! [`Observer::wait`] looks at single versions (one object at one moment); [`Observer::wait_state`] at the set of
//! objects that existed at each observed moment (a state of the whole collection, such as "6 pods and none
//! terminating", checked at every change rather than at poll times).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::{Cluster, DEADLINE};

/// One version of an object as a watch delivered it.
#[derive(Debug, Clone)]
pub struct Observed<K> {
    pub object: K,
    /// The watch reported this version as the object's deletion (its last state).
    pub deleted: bool,
    /// When the watch delivered it: a time for a timed check that does not count the test's own slow calls (a
    /// `kubectl` process, a poll's interval) between the change and the moment the test looked.
    pub at: Instant,
}

impl<K: Resource> Observed<K> {
    pub fn name(&self) -> &str {
        self.object.meta().name.as_deref().unwrap_or("")
    }

    pub fn uid(&self) -> &str {
        self.object.meta().uid.as_deref().unwrap_or("")
    }
}

/// Everything the watch delivered so far.
struct Log<K> {
    versions: Vec<Observed<K>>,
    /// The objects that exist, by uid, as of the last version.
    current: BTreeMap<String, K>,
    /// While a (re)list runs: the uids it listed, to drop the objects it no longer lists when it ends.
    listing: Option<BTreeSet<String>>,
    /// Times the watch had to list again after it began (a relist can hide versions between two lists).
    relists: usize,
    last_error: Option<String>,
}

/// A watch on one kind, recording every version it delivers. Dropping it stops the watch.
pub struct Observer<K> {
    what: String,
    log: Arc<Mutex<Log<K>>>,
    /// Counts recorded versions; waiters wake up on each change.
    ticks: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Observer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    /// Watches `K` in namespace `ns` of `cluster` (as the cluster's admin), from now on.
    pub async fn namespaced(cluster: &Cluster, ns: &str) -> Self
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Self::start(
            &format!("{} in {ns}", K::plural(&Default::default())),
            Api::namespaced(cluster.client(), ns),
            watcher::Config::default(),
        )
        .await
    }

    /// Watches `api` with `config`; returns once the watch's initial list is complete, so every change made after
    /// this returns is delivered (the watch continues from the list's resourceVersion). `what` names the watch in
    /// failure messages.
    pub async fn start(what: &str, api: Api<K>, config: watcher::Config) -> Self {
        let log = Arc::new(Mutex::new(Log {
            versions: Vec::new(),
            current: BTreeMap::new(),
            listing: None,
            relists: 0,
            last_error: None,
        }));
        let (tick, ticks) = watch::channel(0u64);
        let (listed_tx, listed_rx) = tokio::sync::oneshot::channel::<()>();
        let record = log.clone();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed_tx);
            // With a back-off: once the cluster is gone every retry fails at once, and a watch retried without one
            // never yields, so neither its abort nor the test's runtime shutdown can ever stop it.
            let mut stream = watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                let mut log = record.lock().unwrap_or_else(|e| e.into_inner());
                match event {
                    Ok(watcher::Event::Init) => {
                        if listed.is_none() {
                            log.relists += 1;
                        }
                        log.listing = Some(BTreeSet::new());
                    }
                    Ok(watcher::Event::InitApply(object)) => {
                        let uid = object.uid().unwrap_or_default();
                        if let Some(listing) = log.listing.as_mut() {
                            listing.insert(uid.clone());
                        }
                        log.current.insert(uid, object.clone());
                        log.versions.push(Observed { object, deleted: false, at: Instant::now() });
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(listing) = log.listing.take() {
                            log.current.retain(|uid, _| listing.contains(uid));
                        }
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(object)) => {
                        log.current.insert(object.uid().unwrap_or_default(), object.clone());
                        log.versions.push(Observed { object, deleted: false, at: Instant::now() });
                    }
                    Ok(watcher::Event::Delete(object)) => {
                        log.current.remove(&object.uid().unwrap_or_default());
                        log.versions.push(Observed { object, deleted: true, at: Instant::now() });
                    }
                    Err(e) => {
                        log.last_error = Some(e.to_string());
                        continue;
                    }
                }
                let n = log.versions.len() as u64;
                drop(log);
                tick.send_replace(n);
            }
        });
        let observer = Self { what: what.to_string(), log, ticks, task };
        if tokio::time::timeout(DEADLINE, listed_rx).await.is_err() {
            panic!("the watch on {} did not list within {DEADLINE:?}: {}", observer.what, observer.summary());
        }
        observer
    }

    /// Waits until a version observed since the watch began (before this call or after it) makes `pick` return
    /// `Some`, in the order the watch delivered them, and returns that. Fails the test with `what` after `timeout`.
    pub async fn wait<T>(&self, what: &str, timeout: Duration, mut pick: impl FnMut(&Observed<K>) -> Option<T>) -> T {
        let mut next = 0;
        self.wait_on(what, timeout, |log| {
            let found = log.versions[next..].iter().find_map(&mut pick);
            next = log.versions.len();
            found
        })
        .await
    }

    /// Waits until the objects that exist make `pick` return `Some`, checked now and again each time the watch
    /// delivers a change; returns that. For a settled state of the collection ("6 pods, none terminating"): a
    /// burst of changes delivered between two checks is looked at once, at its end, so a state of one object that
    /// does not last is waited for with [`Observer::wait`]. Fails the test with `what` after `timeout`.
    pub async fn wait_state<T>(&self, what: &str, timeout: Duration, mut pick: impl FnMut(&[&K]) -> Option<T>) -> T {
        self.wait_on(what, timeout, |log| {
            if log.listing.is_some() {
                return None;
            }
            let objects: Vec<&K> = log.current.values().collect();
            pick(&objects)
        })
        .await
    }

    async fn wait_on<T>(&self, what: &str, timeout: Duration, mut check: impl FnMut(&Log<K>) -> Option<T>) -> T {
        let mut ticks = self.ticks.clone();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            ticks.borrow_and_update();
            {
                let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(found) = check(&log) {
                    return found;
                }
            }
            match tokio::time::timeout_at(deadline, ticks.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => panic!("the watch on {} ended while waiting for {what}: {}", self.what, self.summary()),
                Err(_) => panic!("timed out after {timeout:?} waiting for {what}: {}", self.summary()),
            }
        }
    }

    /// Fails the test if any version observed so far makes `forbidden` true: a negative assertion over a window (from
    /// the watch's start to this call) that every change in it is checked against, where a single look at the end
    /// would miss a change undone before it (a pod deleted and replaced, a hold released and taken again).
    pub fn assert_never(&self, what: &str, mut forbidden: impl FnMut(&Observed<K>) -> bool) {
        let found = {
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            log.versions.iter().find(|v| forbidden(v)).map(|seen| {
                let rv = seen.object.meta().resource_version.clone().unwrap_or_default();
                let deleted = if seen.deleted { " (deleted)" } else { "" };
                format!("{}@{rv}{deleted}: {:?}", seen.name(), seen.object)
            })
        };
        if let Some(seen) = found {
            panic!("{what}: the watch on {} saw {seen}\n{}", self.what, self.summary());
        }
    }

    /// Every version observed so far, in the order the watch delivered them.
    pub fn versions(&self) -> Vec<Observed<K>> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).versions.clone()
    }

    /// The objects that exist as of the last observed version.
    pub fn current(&self) -> Vec<K> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).current.values().cloned().collect()
    }

    /// What the watch saw, for a failure message: its last versions by name and resourceVersion.
    fn summary(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let last: Vec<String> = log
            .versions
            .iter()
            .rev()
            .take(20)
            .rev()
            .map(|v| {
                let meta = v.object.meta();
                let name = meta.name.as_deref().unwrap_or("");
                let rv = meta.resource_version.as_deref().unwrap_or("");
                if v.deleted { format!("{name}@{rv} (deleted)") } else { format!("{name}@{rv}") }
            })
            .collect();
        format!(
            "the watch on {} saw {} versions ({} relists{}); the last: [{}]",
            self.what,
            log.versions.len(),
            log.relists,
            log.last_error.as_ref().map(|e| format!(", last error: {e}")).unwrap_or_default(),
            last.join(", ")
        )
    }
}

impl<K> Drop for Observer<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
