//! The watch → reflector pipeline the controllers build for every kind they cache.

use futures::Stream;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

/// A reflector cache of `api` (any resourceVersion semantics, default backoff, managed fields dropped to save
/// memory) and its event stream, to be turned into triggers by the caller (`touched_objects()`,
/// `applied_objects()`…).
pub fn cached<K>(api: Api<K>) -> (Store<K>, impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .modify(|object| {
            object.meta_mut().managed_fields = None;
        })
        .reflect(writer);
    (reader, stream)
}
