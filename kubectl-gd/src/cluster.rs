//! The imperative shell: read the objects of one GameDeployment (once, or as a stream of snapshots driven by
//! watches — never by polling) and send the writes the actions decided on.

use std::collections::BTreeMap;

use common::api::{GameDeployment, HookRun};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::actions::Write;
use crate::snapshot::Snapshot;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("gamedeployment {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("cannot reach the cluster: {0}")]
    Config(String),
}

/// Where to talk to: the client and the namespace (`-n`, else the kubeconfig context's, else `default`).
#[derive(Clone)]
pub struct Target {
    pub client: Client,
    pub namespace: String,
}

impl Target {
    pub async fn connect(
        kubeconfig: Option<&std::path::Path>,
        context: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Self, Error> {
        let options = kube::config::KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
        let config = match kubeconfig {
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| Error::Config(e.to_string()))?;
                kube::Config::from_custom_kubeconfig(kc, &options).await.map_err(|e| Error::Config(e.to_string()))?
            }
            None if context.is_some() => {
                kube::Config::from_kubeconfig(&options).await.map_err(|e| Error::Config(e.to_string()))?
            }
            None => kube::Config::infer().await.map_err(|e| Error::Config(e.to_string()))?,
        };
        let default_namespace = config.default_namespace.clone();
        let client = Client::try_from(config).map_err(|e| Error::Config(e.to_string()))?;
        Ok(Self { client, namespace: namespace.map(str::to_string).unwrap_or(default_namespace) })
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn gd(&self, name: &str) -> Result<GameDeployment, Error> {
        self.api::<GameDeployment>()
            .get_opt(name)
            .await?
            .ok_or_else(|| Error::NotFound { namespace: self.namespace.clone(), name: name.to_string() })
    }

    /// Everything about `name`, read once.
    pub async fn snapshot(&self, name: &str) -> Result<Snapshot, Error> {
        let gd = self.gd(name).await?;
        let pods = ListParams::default().labels(&pod_selector(&gd));
        let runs = ListParams::default().labels(&run_selector(name));
        let (revision_api, pod_api, run_api) =
            (self.api::<ControllerRevision>(), self.api::<Pod>(), self.api::<HookRun>());
        let (revisions, pods, runs) =
            futures::try_join!(revision_api.list(&pods), pod_api.list(&pods), run_api.list(&runs))?;
        Ok(Snapshot::owned(gd, revisions.items, pods.items, runs.items))
    }

    /// A snapshot after every change of the GameDeployment, its pods, revisions or HookRuns (`None` while the
    /// GameDeployment does not exist). Four watches; nothing is polled.
    pub async fn watch(&self, name: &str) -> Result<impl Stream<Item = Option<Snapshot>> + use<>, Error> {
        // One read first, so a missing GameDeployment or a forbidden list fails now with the API's message instead
        // of the watches retrying silently. The pod selector comes from the GameDeployment (changing it orphans
        // pods, so it does not change under a running watch in practice).
        let first = self.snapshot(name).await?;
        let pods = pod_selector(&first.gd);
        let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let streams = vec![
            changes(self.api::<GameDeployment>(), by_name).map(|e| Change::Gd(Box::new(e))).boxed(),
            changes(self.api::<Pod>(), watcher::Config::default().labels(&pods))
                .map(|e| Change::Pod(Box::new(e)))
                .boxed(),
            changes(self.api::<ControllerRevision>(), watcher::Config::default().labels(&pods))
                .map(|e| Change::Revision(Box::new(e)))
                .boxed(),
            changes(self.api::<HookRun>(), watcher::Config::default().labels(&run_selector(name)))
                .map(|e| Change::Run(Box::new(e)))
                .boxed(),
        ];
        let mut state = Mirror::default();
        Ok(futures::stream::select_all(streams).filter_map(move |change| {
            let snapshot = state.apply(change);
            futures::future::ready(snapshot)
        }))
    }

    /// Sends one write.
    pub async fn send(&self, write: &Write) -> Result<(), Error> {
        // Named, so the objects' managedFields say which client wrote (a terminated HookRun's completion names it).
        let params = PatchParams { field_manager: Some("kubectl-gd".into()), ..PatchParams::default() };
        match write {
            Write::MergeGd { name, patch } => {
                self.api::<GameDeployment>().patch(name, &params, &Patch::Merge(patch)).await?;
            }
            Write::MergeRun { name, patch } => {
                self.api::<HookRun>().patch(name, &params, &Patch::Merge(patch)).await?;
            }
            Write::MergePod { name, patch } => {
                self.api::<Pod>().patch(name, &params, &Patch::Merge(patch)).await?;
            }
            Write::DeleteRun { name, uid } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
                    ..DeleteParams::default()
                };
                self.api::<HookRun>().delete(name, &dp).await?;
            }
        }
        Ok(())
    }

    pub async fn pod(&self, name: &str) -> Result<Option<Pod>, Error> {
        Ok(self.api::<Pod>().get_opt(name).await?)
    }
}

/// The label selector of the GameDeployment's pods: `status.labelSelector`, else `spec.selector.matchLabels`.
pub fn pod_selector(gd: &GameDeployment) -> String {
    if let Some(s) = gd.status.as_ref().and_then(|s| s.label_selector.clone()).filter(|s| !s.is_empty()) {
        return s;
    }
    gd.spec.selector.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// HookRuns the operator made for `name` carry its name label (shortened past 63 characters, as the operator
/// writes it).
pub fn run_selector(name: &str) -> String {
    format!("{}={}", common::keys::HOOKRUN_WORKLOAD_NAME, common::hookrun::workload_label_value(name))
}

// Boxed: the events differ a lot in size and flow through one merged stream.
enum Change {
    Gd(Box<Event<GameDeployment>>),
    Pod(Box<Event<Pod>>),
    Revision(Box<Event<ControllerRevision>>),
    Run(Box<Event<HookRun>>),
}

/// Watch events of one kind, restarted with backoff on errors (a dropped watch resumes by itself).
fn changes<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = Event<K>> + Send
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, config).default_backoff().filter_map(|e| futures::future::ready(e.ok()))
}

/// One kind's objects as the watch has shown them, keyed by UID; ready after the first complete list.
struct Objects<K> {
    items: BTreeMap<String, K>,
    buffer: BTreeMap<String, K>,
    ready: bool,
}

impl<K> Default for Objects<K> {
    fn default() -> Self {
        Self { items: BTreeMap::new(), buffer: BTreeMap::new(), ready: false }
    }
}

impl<K: Resource + Clone> Objects<K> {
    fn apply(&mut self, event: Event<K>) {
        let key = |k: &K| k.meta().uid.clone().or_else(|| k.meta().name.clone()).unwrap_or_default();
        match event {
            Event::Init => self.buffer.clear(),
            Event::InitApply(k) => {
                self.buffer.insert(key(&k), k);
            }
            Event::InitDone => {
                self.items = std::mem::take(&mut self.buffer);
                self.ready = true;
            }
            Event::Apply(k) => {
                self.items.insert(key(&k), k);
            }
            Event::Delete(k) => {
                self.items.remove(&key(&k));
            }
        }
    }

    fn all(&self) -> Vec<K> {
        self.items.values().cloned().collect()
    }
}

#[derive(Default)]
struct Mirror {
    gds: Objects<GameDeployment>,
    pods: Objects<Pod>,
    revisions: Objects<ControllerRevision>,
    runs: Objects<HookRun>,
}

impl Mirror {
    /// Applies a change; returns the snapshot when every kind has been listed once.
    fn apply(&mut self, change: Change) -> Option<Option<Snapshot>> {
        match change {
            Change::Gd(e) => self.gds.apply(*e),
            Change::Pod(e) => self.pods.apply(*e),
            Change::Revision(e) => self.revisions.apply(*e),
            Change::Run(e) => self.runs.apply(*e),
        }
        if !(self.gds.ready && self.pods.ready && self.revisions.ready && self.runs.ready) {
            return None;
        }
        let Some(gd) = self.gds.items.values().next().cloned() else { return Some(None) };
        Some(Some(Snapshot::owned(gd, self.revisions.all(), self.pods.all(), self.runs.all())))
    }
}
