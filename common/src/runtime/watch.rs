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
    cached_selected(api, None)
}

/// [`cached`] of the objects with the labels `selector` selects (all with None).
pub fn cached_selected<K>(
    api: Api<K>,
    selector: Option<&str>,
) -> (Store<K>, impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store::<K>();
    let config = watcher::Config::default().any_semantic();
    let config = match selector {
        Some(selector) => config.labels(selector),
        None => config,
    };
    let stream = watcher(api, config)
        .default_backoff()
        .modify(|object| {
            object.meta_mut().managed_fields = None;
        })
        .reflect(writer);
    (reader, stream)
}
