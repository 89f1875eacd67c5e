//! What every replica's webhook judges from: watch caches of the GameDeployments and of the operator's own pods (the
//! instance-id label, as the controller watches them), kept by every replica, leader or not.
//!
//! A webhook that reads the API for each answer cannot answer when the API is slow or failing, and an answer that
//! does not come in time is the failurePolicy's to decide. From a cache the answer needs no read: a pod that is not
//! the operator's, or whose GameDeployment does not gate it, is allowed at once whatever the API does, and a gated
//! pod is refused (and marked) from what the cache holds. A cache answers for what it does not hold only while its
//! watch is known to be current ([`Lookup::Absent`]); otherwise the server reads the object within its budget and
//! answers "retry" when that read cannot be had ([`Lookup::Unknown`]).
//!
//! A cached object is as fresh as the watch (milliseconds normally): a change made within that delay may be judged
//! on the object before it, as the controller judges on the same caches.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::api::GameDeployment;
use common::cached_pod::Pod;
use common::runtime::kube_api::api;
use futures::StreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::verdict;
use crate::ownership::WATCH_SELECTOR;

/// Where one watch stands: listed at least once (`synced`), and nothing failed since its last event (`current`).
#[derive(Clone, Debug, Default)]
struct WatchState {
    synced: Arc<AtomicBool>,
    current: Arc<AtomicBool>,
}

impl WatchState {
    fn note<K>(&self, event: &Result<watcher::Event<K>, watcher::Error>) {
        match event {
            // A relist is under way: the store holds the state before it until `InitDone` swaps it in.
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => self.current.store(false, Ordering::Release),
            Ok(watcher::Event::InitDone) => {
                self.synced.store(true, Ordering::Release);
                self.current.store(true, Ordering::Release);
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => self.current.store(true, Ordering::Release),
            // The watcher retries with a backoff; until it delivers again, what the store lacks may exist.
            Err(e) => {
                tracing::debug!(error = %e, "webhook cache watch failed; retrying");
                self.current.store(false, Ordering::Release);
            }
        }
    }

    fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The store holds every object that exists (up to the watch's delay): an object it lacks is gone.
    fn vouches(&self) -> bool {
        self.synced() && self.current.load(Ordering::Acquire)
    }
}

/// What a cache says about one object.
#[derive(Debug, Clone)]
pub enum Lookup<K> {
    /// The cached object.
    Found(Arc<K>),
    /// Not there, and the watch is current: the object does not exist (or is not one of the operator's).
    Absent,
    /// Not there, and the cache cannot vouch for that (not listed yet, or its watch failed since its last event).
    Unknown,
}

/// The webhook's caches (cheap to clone).
#[derive(Clone)]
pub struct GateCaches {
    pods: Store<Pod>,
    pods_watch: WatchState,
    gds: Store<GameDeployment>,
    gds_watch: WatchState,
}

/// Runs one reflector for the life of the process, noting its state.
fn reflect<K>(api: Api<K>, config: watcher::Config, what: &'static str) -> (Store<K>, WatchState)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = kube::runtime::reflector::store::<K>();
    let state = WatchState::default();
    // Managed fields are never read here and are most of a small object's size.
    let stream = watcher(api, config)
        .default_backoff()
        .modify(|object| {
            object.meta_mut().managed_fields = None;
        })
        .reflect(writer);
    tokio::spawn({
        let state = state.clone();
        stream.for_each(move |event| {
            state.note(&event);
            if let Err(e) = &event {
                tracing::warn!(error = %e, cache = what, "webhook cache watch failed (answers read what it lacks)");
            }
            futures::future::ready(())
        })
    });
    (reader, state)
}

impl GateCaches {
    /// Starts the watches (within `namespace` when the operator is scoped to one). Their tasks run until the
    /// process ends.
    pub fn start(client: &Client, namespace: Option<&str>) -> Self {
        let (pods, pods_watch) = reflect(
            api::<Pod>(client, namespace),
            watcher::Config::default().labels(WATCH_SELECTOR).any_semantic(),
            "pods",
        );
        let (gds, gds_watch) = reflect(
            api::<GameDeployment>(client, namespace),
            watcher::Config::default().any_semantic(),
            "gamedeployments",
        );
        Self { pods, pods_watch, gds, gds_watch }
    }

    /// Both caches listed at least once: the webhook can answer from them.
    pub fn is_synced(&self) -> bool {
        self.pods_watch.synced() && self.gds_watch.synced()
    }

    /// Resolves once both caches are listed (never, if the process ends first).
    pub async fn wait_until_synced(&self) {
        let _ = futures::future::join(self.pods.wait_until_ready(), self.gds.wait_until_ready()).await;
        while !self.is_synced() {
            // The stores are ready as `InitDone` is applied; the state is noted just after it.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// One of the operator's pods.
    pub fn pod(&self, namespace: &str, name: &str) -> Lookup<Pod> {
        lookup(&self.pods, &self.pods_watch, &ObjectRef::new(name).within(namespace))
    }

    /// A GameDeployment (the owner of a pod being judged).
    pub fn gamedeployment(&self, namespace: &str, name: &str) -> Lookup<GameDeployment> {
        lookup(&self.gds, &self.gds_watch, &ObjectRef::new(name).within(namespace))
    }

    /// Whether a pod of `namespace` can be gated at all: some GameDeployment there opted in to the pod gate with a
    /// pre-delete hook (or the cache has not been listed yet, so it cannot say). A pod of any other namespace is
    /// answered without a look at the pod.
    pub fn namespace_may_gate(&self, namespace: &str) -> bool {
        if !self.gds_watch.synced() {
            return true;
        }
        self.gds.state().iter().any(|gd| {
            gd.metadata.namespace.as_deref() == Some(namespace)
                && verdict::opted_in(gd)
                && gd.spec.pre_delete_update_strategy.as_ref().is_some_and(|s| s.hook.is_some())
        })
    }

    /// The GameDeployments of `namespace`, or `None` while the cache cannot vouch for the list.
    pub fn gamedeployments_in(&self, namespace: &str) -> Option<Vec<Arc<GameDeployment>>> {
        self.gds_watch.vouches().then(|| {
            self.gds.state().into_iter().filter(|gd| gd.metadata.namespace.as_deref() == Some(namespace)).collect()
        })
    }
}

fn lookup<K>(store: &Store<K>, state: &WatchState, key: &ObjectRef<K>) -> Lookup<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    match store.get(key) {
        Some(object) => Lookup::Found(object),
        None if state.vouches() => Lookup::Absent,
        None => Lookup::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_vouches_for_absence_only_while_current() {
        let state = WatchState::default();
        let event = |e: watcher::Event<Pod>| -> Result<watcher::Event<Pod>, watcher::Error> { Ok(e) };
        assert!(!state.vouches(), "not listed yet");
        state.note(&event(watcher::Event::Init));
        state.note(&event(watcher::Event::InitApply(Pod::default())));
        assert!(!state.vouches(), "listing");
        state.note(&event(watcher::Event::InitDone));
        assert!(state.vouches());
        state.note::<Pod>(&Err(watcher::Error::NoResourceVersion));
        assert!(!state.vouches(), "failed since its last event");
        assert!(state.synced(), "still listed once");
        state.note(&event(watcher::Event::Apply(Pod::default())));
        assert!(state.vouches(), "delivering again");
        state.note(&event(watcher::Event::Init));
        assert!(!state.vouches(), "relisting: the store still holds the state before it");
    }
}
