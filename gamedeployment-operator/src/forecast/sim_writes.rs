//! The simulated cluster's side of [`ClusterWrites`]: each request answered in memory as the API server would
//! answer it — JSON patches applied all or nothing with their `test` preconditions (422), names taken (409), UID
//! preconditions (409), objects missing (404), graceful deletion of pods, a `deletecollection` by labels — so the
//! operator's own [`Executor`] drives the forecast and the shell's unit tests
//! with its ordering, batches and slow start. A [`Fault`](super::requests::Fault) makes chosen requests fail (the
//! tests' failing writes and reads).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use common::api::{GameDeployment, HookRun};
use common::cached_pod::Pod;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod as ApiPod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::cluster::{SimCluster, WRITE_CONCURRENCY, ts};
use super::requests::{Request, Sent};
use crate::controller::cluster_writes::{ClusterWrites, RunCollection};
use crate::controller::execute::{Executor, WriteOutcome};
use crate::controller::ledger::Standalone;
use crate::planner::Plan;

/// The writes of one executor run, answered by the cluster it borrows.
pub(crate) struct SimWrites<'c> {
    cluster: Mutex<&'c mut SimCluster>,
}

fn api_error(code: u16, message: &str) -> kube::Error {
    let reason = match code {
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        403 => "Forbidden",
        _ => "InternalError",
    };
    kube::Error::Api(Box::new(kube::core::Status::failure(message, reason).with_code(code)))
}

/// `object` with the JSON patch `ops` applied, as the API server applies one: all operations or none (422).
fn patched<T: Serialize + DeserializeOwned>(object: &T, ops: &[Value]) -> Result<T, kube::Error> {
    let invalid = |e: String| api_error(422, &e);
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops.to_vec())).map_err(|e| invalid(e.to_string()))?;
    let mut doc = serde_json::to_value(object).map_err(|e| invalid(e.to_string()))?;
    json_patch::patch(&mut doc, &patch).map_err(|e| invalid(e.to_string()))?;
    serde_json::from_value(doc).map_err(|e| invalid(e.to_string()))
}

impl<'c> SimWrites<'c> {
    pub fn new(cluster: &'c mut SimCluster) -> Self {
        Self { cluster: Mutex::new(cluster) }
    }

    fn cluster(&self) -> MutexGuard<'_, &'c mut SimCluster> {
        self.cluster.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers one request: a fault if one matches, else `answer` on the cluster; records it in
    /// [`SimCluster::sent`] and counts what the server refused in [`SimCluster::rejected`].
    fn answer<T>(
        &self,
        request: Request,
        name: &str,
        answer: impl FnOnce(&mut SimCluster) -> Result<T, kube::Error>,
    ) -> Result<T, kube::Error> {
        let mut cluster = self.cluster();
        let fault = cluster
            .faults
            .iter()
            .find(|f| f.request == request && f.name.as_deref().is_none_or(|n| n == name))
            .cloned();
        let result = match &fault {
            Some(fault) => Err(api_error(fault.code, &format!("injected fault: {request:?} {name}"))),
            None => answer(&mut cluster),
        };
        let code = match &result {
            Ok(_) => None,
            Err(kube::Error::Api(status)) => Some(status.code),
            Err(_) => Some(500),
        };
        if code.is_some() && fault.is_none() {
            cluster.rejected += 1;
        }
        cluster.sent.push(Sent { request, name: name.to_string(), code });
        result
    }
}

fn not_found(kind: &str, name: &str) -> kube::Error {
    api_error(404, &format!("{kind} {name} not found"))
}

fn taken(kind: &str, name: &str) -> kube::Error {
    api_error(409, &format!("{kind} {name} already exists"))
}

fn uid_mismatch(kind: &str, name: &str) -> kube::Error {
    api_error(409, &format!("{kind} {name}: precondition failed: UID mismatch"))
}

impl SimCluster {
    /// The operator's executor sends `plan`'s actions to this cluster ([`SimWrites`], here rather than beside the cluster: the cluster knows nothing of the writes' side): in its order, its batches,
    /// with its slow start and what it does on a failure. The requests are in [`Self::sent`].
    pub(crate) fn execute(&mut self, plan: &mut Plan) -> WriteOutcome {
        self.sent.clear();
        let mut books = self.books.take().unwrap_or_else(|| Box::new(Standalone::new(WRITE_CONCURRENCY)));
        let gd = self.gd.clone();
        let key = format!(
            "{}/{}",
            gd.metadata.namespace.as_deref().unwrap_or_default(),
            gd.metadata.name.as_deref().unwrap_or_default()
        );
        let pods: Vec<Arc<Pod>> = self.pods.iter().cloned().map(Arc::new).collect();
        let hook_runs = self.hook_runs.clone();
        let update_revision = plan.status.update_revision.clone().unwrap_or_default();
        let outcome = {
            let writes = SimWrites::new(self);
            let ledger = books.lend();
            let executor = Executor::new(&writes, &ledger, &gd, &key, pods, &hook_runs, &update_revision);
            // Every answer is ready when asked for: nothing here waits on I/O.
            futures::executor::block_on(executor.run(plan))
        };
        books.forget(&key);
        self.books = Some(books);
        outcome
    }

    /// The GameDeployment's spec changed: a new generation and resourceVersion, as the API server gives.
    fn spec_written(&mut self) {
        self.gd.metadata.generation = Some(self.gd.metadata.generation.unwrap_or(1) + 1);
        self.gd_written();
    }
}

impl ClusterWrites for SimWrites<'_> {
    async fn create_revision(&self, revision: &ControllerRevision) -> Result<(), kube::Error> {
        let name = revision.metadata.name.clone().unwrap_or_default();
        self.answer(Request::CreateRevision, &name, |c| {
            if c.revisions.iter().any(|r| r.metadata.name == revision.metadata.name) {
                return Err(taken("controllerrevision", &name));
            }
            let mut revision = revision.clone();
            revision.metadata.uid = Some(c.uid());
            c.revisions.push(revision);
            Ok(())
        })
    }

    async fn get_revision(&self, name: &str) -> Result<Option<ControllerRevision>, kube::Error> {
        self.answer(Request::GetRevision, name, |c| {
            Ok(c.revisions.iter().find(|r| r.metadata.name.as_deref() == Some(name)).cloned())
        })
    }

    async fn patch_revision(&self, name: &str, ops: &[Value]) -> Result<(), kube::Error> {
        self.answer(Request::PatchRevision, name, |c| {
            let revision = c
                .revisions
                .iter_mut()
                .find(|r| r.metadata.name.as_deref() == Some(name))
                .ok_or_else(|| not_found("controllerrevision", name))?;
            *revision = patched(revision, ops)?;
            Ok(())
        })
    }

    async fn delete_revision(&self, name: &str) -> Result<(), kube::Error> {
        self.answer(Request::DeleteRevision, name, |c| {
            let before = c.revisions.len();
            c.revisions.retain(|r| r.metadata.name.as_deref() != Some(name));
            if c.revisions.len() == before {
                return Err(not_found("controllerrevision", name));
            }
            Ok(())
        })
    }

    async fn get_game_deployment(&self, name: &str) -> Result<Option<GameDeployment>, kube::Error> {
        self.answer(Request::GetGameDeployment, name, |c| {
            Ok((c.gd.metadata.name.as_deref().unwrap_or_default() == name).then(|| c.gd.clone()))
        })
    }

    async fn patch_game_deployment(&self, name: &str, ops: &[Value]) -> Result<(), kube::Error> {
        self.answer(Request::PatchGameDeployment, name, |c| {
            if c.gd.metadata.name.as_deref().unwrap_or_default() != name {
                return Err(not_found("gamedeployment", name));
            }
            let gd = patched(&c.gd, ops)?;
            let spec_changed = serde_json::to_value(&gd.spec).ok() != serde_json::to_value(&c.gd.spec).ok();
            c.gd = gd;
            if spec_changed {
                c.spec_written();
            } else {
                c.gd_written();
            }
            Ok(())
        })
    }

    async fn create_pod(&self, pod: &ApiPod) -> Result<(), kube::Error> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.answer(Request::CreatePod, &name, |c| {
            if c.pods.iter().any(|p| p.metadata.name == pod.metadata.name) {
                return Err(taken("pod", &name));
            }
            #[cfg(test)]
            c.created.push(pod.clone());
            let mut pod = Pod::from(pod.clone());
            pod.metadata.uid = Some(c.uid());
            pod.metadata.creation_timestamp = Some(Time(ts(c.now)));
            c.pods.push(pod);
            Ok(())
        })
    }

    /// The resourceVersion is given when the pass ends ([`SimCluster::apply`]): none is returned.
    async fn patch_pod(&self, name: &str, _status: bool, ops: &[Value]) -> Result<Option<String>, kube::Error> {
        self.answer(Request::PatchPod, name, |c| {
            let pod = c
                .pods
                .iter_mut()
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .ok_or_else(|| not_found("pod", name))?;
            *pod = patched(pod, ops)?;
            Ok(None)
        })
    }

    async fn delete_pod(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        self.answer(Request::DeletePod, name, |c| {
            let now = Time(ts(c.now));
            let pod = c
                .pods
                .iter_mut()
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .ok_or_else(|| not_found("pod", name))?;
            if pod.metadata.uid.as_deref() != Some(uid) {
                return Err(uid_mismatch("pod", name));
            }
            // Graceful: the pod terminates until the kubelet's next step ([`SimCluster::tick`]).
            pod.metadata.deletion_timestamp.get_or_insert(now);
            Ok(())
        })
    }

    async fn create_claim(&self, claim: &PersistentVolumeClaim) -> Result<(), kube::Error> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        self.answer(Request::CreateClaim, &name, |c| {
            if c.claims.iter().any(|x| x.metadata.name == claim.metadata.name) {
                return Err(taken("persistentvolumeclaim", &name));
            }
            let mut claim = claim.clone();
            claim.metadata.uid = Some(c.uid());
            c.claims.push(claim);
            Ok(())
        })
    }

    async fn delete_claim(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        self.answer(Request::DeleteClaim, name, |c| {
            let at = c
                .claims
                .iter()
                .position(|x| x.metadata.name.as_deref() == Some(name))
                .ok_or_else(|| not_found("persistentvolumeclaim", name))?;
            if c.claims[at].metadata.uid.as_deref() != Some(uid) {
                return Err(uid_mismatch("persistentvolumeclaim", name));
            }
            c.claims.remove(at);
            Ok(())
        })
    }

    async fn create_hook_run(&self, run: &HookRun) -> Result<HookRun, kube::Error> {
        let name = run.metadata.name.clone().unwrap_or_default();
        self.answer(Request::CreateHookRun, &name, |c| {
            if c.hook_runs.iter().any(|r| r.metadata.name == run.metadata.name) {
                return Err(taken("hookrun", &name));
            }
            let mut run = run.clone();
            run.metadata.uid = Some(c.uid());
            // As the API server: a custom object is created at generation 1 (the operator's memo of run spec
            // hashes is keyed by it).
            run.metadata.generation = Some(1);
            run.metadata.creation_timestamp = Some(Time(ts(c.now)));
            c.hook_runs.push(Arc::new(run.clone()));
            Ok(run)
        })
    }

    async fn get_hook_run(&self, name: &str) -> Result<Option<HookRun>, kube::Error> {
        self.answer(Request::GetHookRun, name, |c| {
            Ok(c.hook_runs.iter().find(|r| r.metadata.name.as_deref() == Some(name)).map(|r| (**r).clone()))
        })
    }

    async fn delete_hook_run(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        self.answer(Request::DeleteHookRun, name, |c| {
            let at = c
                .hook_runs
                .iter()
                .position(|r| r.metadata.name.as_deref() == Some(name))
                .ok_or_else(|| not_found("hookrun", name))?;
            if c.hook_runs[at].metadata.uid.as_deref() != Some(uid) {
                return Err(uid_mismatch("hookrun", name));
            }
            c.hook_runs.remove(at);
            Ok(())
        })
    }

    async fn delete_hook_runs(&self, collection: &RunCollection<'_>) -> Result<(), kube::Error> {
        self.answer(Request::DeleteHookRuns, &collection.selector(), |c| {
            c.hook_runs.retain(|r| !collection.contains(r));
            Ok(())
        })
    }
}
