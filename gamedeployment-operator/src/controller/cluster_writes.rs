//! The writes (and the few reads) the executor sends, behind one trait — the shape of Kruise's
//! `cloneset/sync.Interface`: [`super::execute::Executor`] decides the order, the batches, the slow start, what a
//! failure stops and what is recorded; a [`ClusterWrites`] only sends one request and answers as the API server
//! would. [`ApiWrites`] sends them to the API server; the forecast's simulated cluster
//! ([`crate::forecast::sim_writes`]) answers them in memory, so `kubectl gd plan` and the shell's unit tests run the
//! operator's own executor.
//!
//! Errors are [`kube::Error`]s as the API server gives them (an `Api` status with its code): the executor tells a
//! stale cache (404, 409, 422) from a failure by the code, whichever side answered.

use common::api::{GameDeployment, HookRun};
use common::cached_pod::Pod;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod as ApiPod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, Resource};
use serde_json::Value;

/// Consumed HookRuns deleted in one `deletecollection`: those of one hook type, revision and GameDeployment (name
/// label), for the pods with these UIDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunCollection<'a> {
    pub type_: &'a str,
    pub revision: &'a str,
    pub workload: &'a str,
    pub pod_uids: Vec<&'a str>,
}

impl RunCollection<'_> {
    /// The label selector of the collection, as the API server gets it.
    pub fn selector(&self) -> String {
        format!(
            "{}={},{}={},{}={},{} in ({})",
            common::keys::HOOKRUN_TYPE,
            self.type_,
            common::keys::HOOKRUN_WORKLOAD_REVISION,
            self.revision,
            common::keys::HOOKRUN_WORKLOAD_NAME,
            self.workload,
            common::keys::HOOKRUN_POD_UID,
            self.pod_uids.join(",")
        )
    }

    /// Whether a run's labels put it in the collection (what the API server's selector matches).
    pub fn contains(&self, run: &HookRun) -> bool {
        let Some(labels) = run.metadata.labels.as_ref() else { return false };
        let is = |key: &str, value: &str| labels.get(key).is_some_and(|v| v == value);
        is(common::keys::HOOKRUN_TYPE, self.type_)
            && is(common::keys::HOOKRUN_WORKLOAD_REVISION, self.revision)
            && is(common::keys::HOOKRUN_WORKLOAD_NAME, self.workload)
            && labels.get(common::keys::HOOKRUN_POD_UID).is_some_and(|uid| self.pod_uids.contains(&uid.as_str()))
    }
}

/// One request each, in the GameDeployment's namespace. JSON patches are given as their operations (`test`
/// preconditions included): the implementation applies them as the API server does, all or nothing.
#[allow(async_fn_in_trait)] // Used in this crate only, with concrete types (the controller's futures stay `Send`).
pub(crate) trait ClusterWrites {
    async fn create_revision(&self, revision: &ControllerRevision) -> Result<(), kube::Error>;
    async fn get_revision(&self, name: &str) -> Result<Option<ControllerRevision>, kube::Error>;
    async fn patch_revision(&self, name: &str, ops: &[Value]) -> Result<(), kube::Error>;
    async fn delete_revision(&self, name: &str) -> Result<(), kube::Error>;
    /// Read from the API, not a cache (adoption re-reads the GameDeployment first).
    async fn get_game_deployment(&self, name: &str) -> Result<Option<GameDeployment>, kube::Error>;
    /// A patch of the GameDeployment's spec (`paused`, `retry`, `podsToDelete`), never its status.
    async fn patch_game_deployment(&self, name: &str, ops: &[Value]) -> Result<(), kube::Error>;
    async fn create_pod(&self, pod: &ApiPod) -> Result<(), kube::Error>;
    /// A patch of the pod (of its status subresource if `status`); the resourceVersion it produced, if known.
    async fn patch_pod(&self, name: &str, status: bool, ops: &[Value]) -> Result<Option<String>, kube::Error>;
    /// Deletes the pod `name` only if it still has `uid` (409 otherwise).
    async fn delete_pod(&self, name: &str, uid: &str) -> Result<(), kube::Error>;
    async fn create_claim(&self, claim: &PersistentVolumeClaim) -> Result<(), kube::Error>;
    async fn delete_claim(&self, name: &str, uid: &str) -> Result<(), kube::Error>;
    /// The run as created (with its UID).
    async fn create_hook_run(&self, run: &HookRun) -> Result<HookRun, kube::Error>;
    async fn get_hook_run(&self, name: &str) -> Result<Option<HookRun>, kube::Error>;
    async fn delete_hook_run(&self, name: &str, uid: &str) -> Result<(), kube::Error>;
    /// One `deletecollection` (403–405 where the API refuses it).
    async fn delete_hook_runs(&self, collection: &RunCollection<'_>) -> Result<(), kube::Error>;
}

/// The writes sent to the API server.
pub(crate) struct ApiWrites {
    client: Client,
    namespace: String,
    /// `Pod::url_path` of the namespace, for the lean pod patches ([`ApiWrites::patch_pod`]).
    pod_url: String,
    hook_run_url: String,
}

impl ApiWrites {
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            pod_url: Pod::url_path(&(), Some(namespace)),
            hook_run_url: HookRun::url_path(&(), Some(namespace)),
            client,
            namespace: namespace.to_string(),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

fn json_patch(ops: &[Value]) -> Result<Patch<()>, kube::Error> {
    Ok(Patch::Json(serde_json::from_value(Value::Array(ops.to_vec())).map_err(kube::Error::SerdeError)?))
}

fn uid_precondition(uid: &str) -> Option<Preconditions> {
    Some(Preconditions { uid: Some(uid.to_string()), resource_version: None })
}

/// The part of a written object the executor reads.
#[derive(serde::Deserialize)]
struct Written {
    metadata: WrittenMeta,
}

#[derive(serde::Deserialize)]
struct WrittenMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl ClusterWrites for ApiWrites {
    async fn create_revision(&self, revision: &ControllerRevision) -> Result<(), kube::Error> {
        self.api::<ControllerRevision>().create(&PostParams::default(), revision).await.map(|_| ())
    }

    async fn get_revision(&self, name: &str) -> Result<Option<ControllerRevision>, kube::Error> {
        self.api::<ControllerRevision>().get_opt(name).await
    }

    async fn patch_revision(&self, name: &str, ops: &[Value]) -> Result<(), kube::Error> {
        self.api::<ControllerRevision>().patch(name, &PatchParams::default(), &json_patch(ops)?).await.map(|_| ())
    }

    async fn delete_revision(&self, name: &str) -> Result<(), kube::Error> {
        self.api::<ControllerRevision>().delete(name, &DeleteParams::default()).await.map(|_| ())
    }

    async fn get_game_deployment(&self, name: &str) -> Result<Option<GameDeployment>, kube::Error> {
        self.api::<GameDeployment>().get_opt(name).await
    }

    async fn patch_game_deployment(&self, name: &str, ops: &[Value]) -> Result<(), kube::Error> {
        self.api::<GameDeployment>().patch(name, &PatchParams::default(), &json_patch(ops)?).await.map(|_| ())
    }

    /// Sent as the API's type (the template's every field); the answer is not read past its status code.
    async fn create_pod(&self, pod: &ApiPod) -> Result<(), kube::Error> {
        self.api::<ApiPod>().create(&PostParams::default(), pod).await.map(|_| ())
    }

    /// Reads only the resourceVersion of the answer (for the expectations): decoding the whole pod — its
    /// managedFields into JSON values — for each of a roll's writes was a visible part of the operator's CPU at
    /// 2,000 pods.
    async fn patch_pod(&self, name: &str, status: bool, ops: &[Value]) -> Result<Option<String>, kube::Error> {
        let patch = json_patch(ops)?;
        let request = kube::core::Request::new(&self.pod_url);
        let params = PatchParams::default();
        let mut request = if status {
            request.patch_subresource("status", name, &params, &patch)
        } else {
            request.patch(name, &params, &patch)
        }
        .map_err(kube::Error::BuildRequest)?;
        request.extensions_mut().insert(if status { "patch_status" } else { "patch" });
        let written: Written = self.client.request(request).await?;
        Ok(written.metadata.resource_version)
    }

    async fn delete_pod(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        let params = DeleteParams { preconditions: uid_precondition(uid), ..DeleteParams::default() };
        self.api::<Pod>().delete(name, &params).await.map(|_| ())
    }

    async fn create_claim(&self, claim: &PersistentVolumeClaim) -> Result<(), kube::Error> {
        self.api::<PersistentVolumeClaim>().create(&PostParams::default(), claim).await.map(|_| ())
    }

    async fn delete_claim(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        let params = DeleteParams { preconditions: uid_precondition(uid), ..DeleteParams::default() };
        self.api::<PersistentVolumeClaim>().delete(name, &params).await.map(|_| ())
    }

    /// The `POST` as `Api::create` sends it, its answer decoded without its managedFields
    /// ([`common::runtime::lean::LeanHookRun`]): the HookRun expectations keep the run, never that field.
    async fn create_hook_run(&self, run: &HookRun) -> Result<HookRun, kube::Error> {
        let body = serde_json::to_vec(run).map_err(kube::Error::SerdeError)?;
        let mut request = kube::core::Request::new(&self.hook_run_url)
            .create(&PostParams::default(), body)
            .map_err(kube::Error::BuildRequest)?;
        request.extensions_mut().insert("create");
        self.client.request::<common::runtime::lean::LeanHookRun>(request).await.map(|r| r.0)
    }

    async fn get_hook_run(&self, name: &str) -> Result<Option<HookRun>, kube::Error> {
        self.api::<HookRun>().get_opt(name).await
    }

    async fn delete_hook_run(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        let params = DeleteParams { preconditions: uid_precondition(uid), ..DeleteParams::background() };
        self.api::<HookRun>().delete(name, &params).await.map(|_| ())
    }

    async fn delete_hook_runs(&self, collection: &RunCollection<'_>) -> Result<(), kube::Error> {
        let params = ListParams::default().labels(&collection.selector());
        self.api::<HookRun>().delete_collection(&DeleteParams::background(), &params).await.map(|_| ())
    }
}
