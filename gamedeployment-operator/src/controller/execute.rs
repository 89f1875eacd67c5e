//! Sends a plan's actions to the API, in a safe order: revisions, ownership, deletions, creations (slow start:
//! batches of 1, 2, 4... stopping at the first failing batch), pod patches, housekeeping. Every write is
//! recorded in the expectations first, and every outcome becomes an Event and a metric.
//!
//! A patch whose `test` precondition fails (422) or that conflicts (409) was planned on a stale cache: it is not
//! an error — the next pass, on fresher data, decides again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use common::api::{GameDeployment, HookRun};
use common::cached_pod::Pod;
use common::hookrun::HookKind;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod as ApiPod};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::cluster_writes::{ClusterWrites, RunCollection};
use super::ledger::Ledger;
use crate::action::{Action, ClaimRef, CreateReason, PatchReason, Phase, PodChange, PodRef, PodWrite};
use crate::action::{PlannedEvent, Related};
use crate::gate::{self, DeleteCause, GateKind};
use crate::lifecycle::{self, LifecycleState};
use crate::metrics::ReasonLabels;
use crate::ownership;
use crate::planner::Plan;
use crate::revision;

/// Pod UIDs per `deletecollection` of consumed HookRuns (keeps the label selector short).
const COLLECTION_CHUNK: usize = 64;

/// HookRun creates between two settlements of the expectations against the watch cache (see
/// [`Executor::settle_created_runs`]).
const SETTLE_EVERY: usize = 64;

/// A collection of consumed runs: hook type, revision, GameDeployment name label.
type BatchKey = (String, String, String);

/// A run to delete: name, UID, why, and the collection it belongs to with its pod's UID ([`Executor::batch_key`]).
type RunDeletion<'p> = (&'p str, &'p str, &'p str, Option<(BatchKey, String)>);

/// A run in a collection: name, UID, why, its pod's UID.
type Batched<'a> = (&'a str, &'a str, &'a str, String);

/// What happened when the plan was sent.
#[derive(Debug, Default)]
pub(crate) struct WriteOutcome {
    /// Writes that failed, by phase, with a message for the condition.
    pub failures: Vec<(Phase, String)>,
    /// Phases with at least one successful write.
    pub succeeded: BTreeSet<Phase>,
    /// Writes rejected because our cache was stale; the next pass retries.
    pub stale: usize,
    /// The new revision's name is taken by a different template: bump `collisionCount` and plan again.
    pub collision: bool,
    pub events: Vec<PlannedEvent>,
}

impl WriteOutcome {
    fn fail(&mut self, phase: Phase, event: PlannedEvent) {
        self.failures.push((phase, event.message.clone()));
        self.events.push(event);
    }
}

/// The hook whose gate a write released and since when its pod waited ([`Executor::gate_release`]).
type GateRelease = Option<(HookKind, k8s_openapi::jiff::Timestamp)>;

/// The gate a pod patch passes, by why it is sent (none: a lifecycle step, which may end a post-inplace wait).
fn gated_by(reason: PatchReason) -> Option<GateKind> {
    match reason {
        PatchReason::InPlaceUpdate => Some(GateKind::InPlaceUpdate),
        PatchReason::HotPatchUpdate => Some(GateKind::HotPatchUpdate),
        _ => None,
    }
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Sends a pass's actions through `writes` (the API server, or a simulated cluster: [`ClusterWrites`]) and records
/// them in `ledger`.
pub(crate) struct Executor<'a, W> {
    pub writes: &'a W,
    pub ledger: &'a Ledger<'a>,
    pub gd: &'a GameDeployment,
    pub key: &'a str,
    /// The cached pods the plan was made from, looked up by name and by UID, until the pod writes are sent
    /// ([`CachedPods`]); and the HookRuns it was made from by UID (for grouping deletions, see
    /// [`Executor::delete_hook_runs`]): a pass looks up every pod it patches and every run it deletes (a scan each was
    /// quadratic at 5,000 pods). Built on first use: most passes need none of them.
    pods: Mutex<CachedPods>,
    hook_runs: &'a [Arc<HookRun>],
    runs_by_uid: OnceLock<HashMap<&'a str, &'a HookRun>>,
    /// The revision pods are being moved to (for event messages).
    pub update_revision: &'a str,
}

impl<'a, W: ClusterWrites> Executor<'a, W> {
    /// `cached_pods` are the pass's own (taken from its snapshot): the executor lets them go once the pod writes
    /// are sent ([`Executor::run`]).
    pub fn new(
        writes: &'a W,
        ledger: &'a Ledger<'a>,
        gd: &'a GameDeployment,
        key: &'a str,
        cached_pods: Vec<Arc<Pod>>,
        hook_runs: &'a [Arc<HookRun>],
        update_revision: &'a str,
    ) -> Self {
        Self {
            writes,
            ledger,
            gd,
            key,
            pods: Mutex::new(CachedPods::new(cached_pods)),
            hook_runs,
            runs_by_uid: OnceLock::new(),
            update_revision,
        }
    }

    fn cached_pods(&self) -> std::sync::MutexGuard<'_, CachedPods> {
        self.pods.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn pod_named(&self, name: &str) -> Option<Arc<Pod>> {
        self.cached_pods().named(name)
    }

    fn pod_with_uid(&self, uid: &str) -> Option<Arc<Pod>> {
        self.cached_pods().with_uid(uid)
    }

    fn run_with_uid(&self, uid: &str) -> Option<&'a HookRun> {
        let index = self
            .runs_by_uid
            .get_or_init(|| self.hook_runs.iter().filter_map(|r| Some((r.metadata.uid.as_deref()?, &**r))).collect());
        index.get(uid).copied()
    }
}

/// The pass's cached pods, with their lookups by name and UID (positions sorted by the key, built on first use).
/// An executor holds them while it sends the pod writes and lets them go before the HookRun writes
/// ([`CachedPods::release`]): a hooked scale-in patches thousands of pods and then creates a run for each, and
/// while the runs are created the watch replaces every patched pod in the cache, so the pass's copies would be
/// the pods' old versions, kept alive by nothing else.
struct CachedPods {
    pods: Vec<Arc<Pod>>,
    /// Slots whose pod went ([`CachedPods::forget`]): they hold a stub with the pod's name and UID.
    forgotten: Vec<bool>,
    by_name: Option<Vec<usize>>,
    by_uid: Option<Vec<usize>>,
}

fn pod_name(pod: &Pod) -> Option<&str> {
    pod.metadata.name.as_deref()
}

fn pod_uid(pod: &Pod) -> Option<&str> {
    pod.metadata.uid.as_deref()
}

impl CachedPods {
    fn new(pods: Vec<Arc<Pod>>) -> Self {
        Self { forgotten: vec![false; pods.len()], pods, by_name: None, by_uid: None }
    }

    fn named(&mut self, name: &str) -> Option<Arc<Pod>> {
        let at = Self::position(&self.pods, &mut self.by_name, pod_name, name)?;
        (!self.forgotten[at]).then(|| Arc::clone(&self.pods[at]))
    }

    fn with_uid(&mut self, uid: &str) -> Option<Arc<Pod>> {
        let at = Self::position(&self.pods, &mut self.by_uid, pod_uid, uid)?;
        (!self.forgotten[at]).then(|| Arc::clone(&self.pods[at]))
    }

    /// The slot of the pod whose `key` is `wanted`, through `index` (the slots sorted by `key`, built on first use).
    fn position(
        pods: &[Arc<Pod>],
        index: &mut Option<Vec<usize>>,
        key: fn(&Pod) -> Option<&str>,
        wanted: &str,
    ) -> Option<usize> {
        let index = index.get_or_insert_with(|| {
            let mut positions: Vec<usize> = (0..pods.len()).filter(|&i| key(&pods[i]).is_some()).collect();
            positions.sort_by(|&a, &b| key(&pods[a]).cmp(&key(&pods[b])));
            positions
        });
        let at = index.partition_point(|&i| key(&pods[i]).is_some_and(|k| k < wanted));
        let &slot = index.get(at)?;
        (key(&pods[slot]) == Some(wanted)).then_some(slot)
    }

    /// Lets the pass's copy of `pod` go once its write is on its way: the slot keeps only the name and UID (so the
    /// lookups stay sorted) and is not found any more.
    fn forget(&mut self, pod: &PodRef) {
        let Some(at) = Self::position(&self.pods, &mut self.by_name, pod_name, &pod.name) else { return };
        if self.forgotten[at] || pod_uid(&self.pods[at]) != Some(pod.uid.as_str()) {
            return;
        }
        let mut stub = Pod::default();
        stub.metadata.name = Some(pod.name.clone());
        stub.metadata.uid = Some(pod.uid.clone());
        self.pods[at] = Arc::new(stub);
        self.forgotten[at] = true;
    }

    /// Lets the pods and their lookups go; lookups find nothing after.
    fn release(&mut self) {
        *self = Self::new(Vec::new());
    }
}

impl<W: ClusterWrites> Executor<'_, W> {
    fn cached(&self, pod: &PodRef) -> Option<Arc<Pod>> {
        self.pod_named(&pod.name).filter(|p| p.metadata.uid.as_deref() == Some(&pod.uid))
    }

    /// The plan's HookRuns to create are taken out of it (each goes once its create is answered).
    pub async fn run(&self, plan: &mut Plan) -> WriteOutcome {
        let mut outcome = WriteOutcome::default();
        let create_runs = take_hook_run_creates(&mut plan.actions);
        let actions = Grouped::of(&plan.actions);
        // The run deletions are grouped by their pods' revisions in the cache, read before the pod writes let the
        // pods go (the pass's cached pods do not change meanwhile).
        let delete_runs: Vec<RunDeletion<'_>> =
            actions.delete_runs.iter().map(|&(name, uid, why)| (name, uid, why, self.batch_key(uid))).collect();

        for action in actions.revisions {
            self.revision_change(action, &mut outcome).await;
            if outcome.collision || !outcome.failures.is_empty() {
                // Pods must not reference a revision that does not exist.
                return outcome;
            }
        }
        if !actions.adopt.is_empty() {
            self.adopt(&actions.adopt, &mut outcome).await;
        }
        for pod in actions.release {
            self.release(pod, &mut outcome).await;
        }
        let deleted = self.delete_pods(actions.deletes, &mut outcome).await;
        self.delete_claims(&actions.delete_claims, &deleted, &mut outcome).await;
        self.create_pods(actions.creates, &actions.claims, &mut outcome).await;
        self.patch_pods(actions.patches, &mut outcome).await;
        for action in actions.housekeeping {
            self.housekeeping(action, &mut outcome).await;
        }
        // The pod writes are sent: the HookRun writes need no pod, and the pass's copies go.
        self.cached_pods().release();
        let mut taken = Vec::new();
        let mut recorded = 0usize;
        let window = self.ledger.write_concurrency;
        create_all(self.writes, create_runs, window, |run, result| {
            let was_taken = matches!(&result, Err(e) if code(e) == Some(409));
            self.hook_run_created(&run, result, &mut outcome);
            if was_taken {
                taken.push(run);
            }
            recorded += 1;
            if recorded.is_multiple_of(SETTLE_EVERY) {
                self.settle_created_runs();
            }
        })
        .await;
        for run in taken {
            self.reveal_hook_run(&run).await;
        }
        let rolling = crate::planner::status::condition(&plan.status, crate::planner::status::PROGRESSING)
            .is_some_and(|c| c.reason.as_deref() == Some("RolloutInProgress"));
        let deletes_ok = self.delete_hook_runs(delete_runs, rolling, &mut outcome).await;
        for (paused, resource_version, why) in actions.set_paused {
            self.set_paused(paused, resource_version, why, &mut outcome).await;
        }
        // A retry is acknowledged only once the failed runs are really gone: otherwise the request stays.
        if deletes_ok {
            for (kind, resource_version) in actions.reset_retry {
                self.reset_retry(kind, resource_version, &mut outcome).await;
            }
        }
        outcome
    }

    async fn revision_change(&self, action: &Action, outcome: &mut WriteOutcome) {
        match action {
            Action::CreateRevision(r) => {
                let name = r.metadata.name.clone().unwrap_or_default();
                match self.writes.create_revision(r).await {
                    Ok(_) => {
                        self.ledger.expectations.expect_revision(self.key, &name, Instant::now());
                        outcome.succeeded.insert(Phase::Revisions);
                        outcome.events.push(
                            PlannedEvent::normal(
                                "RevisionCreated",
                                format!("created revision {name} (number {})", r.revision.unwrap_or(0)),
                            )
                            .about(Related::revision(&name)),
                        );
                    }
                    Err(e) if code(&e) == Some(409) => {
                        match self.writes.get_revision(&name).await {
                            // Created by an earlier pass our cache has not shown yet.
                            Ok(Some(existing)) if revision::holds_template(&existing, &self.gd.spec.template) => {
                                self.ledger.expectations.expect_revision(self.key, &name, Instant::now());
                            }
                            Ok(_) => {
                                outcome.collision = true;
                                outcome.events.push(PlannedEvent::warning(
                                "RevisionCollision",
                                format!("revision name {name} is taken by a different template; increasing collisionCount"),
                            ));
                            }
                            Err(e) => outcome.fail(
                                Phase::Revisions,
                                PlannedEvent::warning("FailedCreateRevision", format!("reading revision {name}: {e}")),
                            ),
                        }
                    }
                    Err(e) => outcome.fail(
                        Phase::Revisions,
                        PlannedEvent::warning("FailedCreateRevision", format!("creating revision {name}: {e}")),
                    ),
                }
            }
            Action::RenumberRevision { name, revision } => {
                let ops = [json!({"op": "replace", "path": "/revision", "value": revision})];
                match self.writes.patch_revision(name, &ops).await {
                    Ok(()) => {
                        outcome.succeeded.insert(Phase::Revisions);
                        outcome.events.push(
                            PlannedEvent::normal(
                                "RevisionRolledBack",
                                format!("rolled back to revision {name} (now number {revision})"),
                            )
                            .about(Related::revision(name)),
                        );
                    }
                    Err(e) => outcome.fail(
                        Phase::Revisions,
                        PlannedEvent::warning("FailedUpdateRevision", format!("renumbering revision {name}: {e}")),
                    ),
                }
            }
            _ => {}
        }
    }

    /// Adoption re-reads the GameDeployment from the API first (not the cache), as Kubernetes controllers do:
    /// a GameDeployment being deleted must not take new pods.
    async fn adopt(&self, pods: &[&PodRef], outcome: &mut WriteOutcome) {
        let name = self.gd.name_any();
        match self.writes.get_game_deployment(&name).await {
            Ok(Some(fresh))
                if fresh.metadata.uid == self.gd.metadata.uid && fresh.metadata.deletion_timestamp.is_none() => {}
            Ok(_) => return,
            Err(e) => {
                return outcome.fail(
                    Phase::Ownership,
                    PlannedEvent::warning(
                        "FailedAdoption",
                        format!("re-reading the GameDeployment before adopting: {e}"),
                    ),
                );
            }
        }
        let owner = serde_json::to_value(ownership::owner_reference(self.gd)).unwrap_or(Value::Null);
        for pod in pods {
            let Some(cached) = self.cached(pod) else { continue };
            let mut ops = vec![json!({"op": "test", "path": "/metadata/uid", "value": pod.uid})];
            if cached.metadata.owner_references.is_some() {
                ops.push(json!({"op": "add", "path": "/metadata/ownerReferences/-", "value": owner}));
            } else {
                ops.push(json!({"op": "add", "path": "/metadata/ownerReferences", "value": [owner]}));
            }
            self.ownership_patch(pod, &ops, "AdoptedPod", "FailedAdoption", outcome).await;
        }
    }

    async fn release(&self, pod: &PodRef, outcome: &mut WriteOutcome) {
        let Some(cached) = self.cached(pod) else { return };
        let Some(index) = cached
            .metadata
            .owner_references
            .iter()
            .flatten()
            .position(|o| o.controller == Some(true) && ownership::is_owned_by(o, self.gd))
        else {
            return;
        };
        let ops = vec![
            json!({"op": "test", "path": "/metadata/uid", "value": pod.uid}),
            json!({"op": "test", "path": format!("/metadata/ownerReferences/{index}/uid"), "value": self.gd.metadata.uid}),
            json!({"op": "remove", "path": format!("/metadata/ownerReferences/{index}")}),
        ];
        self.ownership_patch(pod, &ops, "ReleasedPod", "FailedRelease", outcome).await;
    }

    async fn ownership_patch(&self, pod: &PodRef, ops: &[Value], ok: &str, failed: &str, outcome: &mut WriteOutcome) {
        match self.writes.patch_pod(&pod.name, false, ops).await {
            Ok(resource_version) => {
                if let Some(rv) = resource_version.as_deref() {
                    self.ledger.expectations.expect_patch(self.key, &pod.name, rv, Instant::now());
                }
                outcome.succeeded.insert(Phase::Ownership);
                let verb = if ok == "AdoptedPod" { "adopted" } else { "released (its labels no longer match)" };
                outcome.events.push(PlannedEvent::normal(ok, format!("pod {} {verb}", pod.name)).about_pod(pod));
            }
            Err(e) if matches!(code(&e), Some(404 | 409 | 422)) => outcome.stale += 1,
            Err(e) => outcome
                .fail(Phase::Ownership, PlannedEvent::warning(failed, format!("pod {}: {e}", pod.name)).about_pod(pod)),
        }
    }

    /// Returns the UIDs of the pods deleted.
    async fn delete_pods(&self, deletes: Vec<(PodRef, DeleteCause)>, outcome: &mut WriteOutcome) -> BTreeSet<String> {
        let mut deleted = BTreeSet::new();
        if deletes.is_empty() {
            return deleted;
        }
        let now = Instant::now();
        for (pod, _) in &deletes {
            self.ledger.expectations.expect_delete(self.key, &pod.uid, now);
            self.ledger.deleting.deleting(&pod.uid);
        }
        let results: Vec<(PodRef, DeleteCause, GateRelease, Result<(), kube::Error>)> = futures::stream::iter(deletes)
            .map(|(pod, cause)| {
                // As for patches: what the delete releases is read now, and the pass's copy of the pod goes.
                let released = self.gate_release(&pod, Some(GateKind::Delete(cause)));
                self.cached_pods().forget(&pod);
                async move {
                    let result = self.writes.delete_pod(&pod.name, &pod.uid).await;
                    (pod, cause, released, result)
                }
            })
            .buffer_unordered(self.ledger.write_concurrency.max(1))
            .collect()
            .await;
        for (pod, cause, released, result) in results {
            let recreate = matches!(cause, DeleteCause::RollingUpdate | DeleteCause::RecreateFallback);
            let phase = if recreate { Phase::Update } else { Phase::Scale };
            match result {
                Ok(()) => {
                    deleted.insert(pod.uid.clone());
                    self.ledger
                        .metrics
                        .pods_deleted
                        .get_or_create(&ReasonLabels { reason: cause.as_str().into() })
                        .inc();
                    self.record_gate_release(released);
                    outcome.succeeded.insert(phase);
                    let (reason, message) = match cause {
                        DeleteCause::ScaleIn => ("SuccessfulDelete", format!("deleted pod {} (scale in)", pod.name)),
                        DeleteCause::PodsToDelete => {
                            ("SuccessfulDelete", format!("deleted pod {} (listed in podsToDelete)", pod.name))
                        }
                        DeleteCause::SpecifiedDelete => (
                            "SuccessfulDelete",
                            format!("deleted pod {} (labelled apps.kruise.io/specified-delete)", pod.name),
                        ),
                        DeleteCause::RollingUpdate => (
                            "SuccessfulUpdatePodReCreate",
                            format!("deleted pod {} to recreate it from revision {}", pod.name, self.update_revision),
                        ),
                        DeleteCause::RecreateFallback => (
                            "SuccessfulUpdatePodReCreate",
                            format!("deleted pod {}: its update cannot be made in place", pod.name),
                        ),
                    };
                    outcome.events.push(PlannedEvent::normal(reason, message).about_pod(&pod));
                }
                Err(e) if matches!(code(&e), Some(404 | 409)) => {
                    // Already gone, or a different pod now carries the name (UID precondition).
                    self.ledger.expectations.delete_failed(self.key, &pod.uid);
                    outcome.stale += 1;
                }
                Err(e) => {
                    self.ledger.expectations.delete_failed(self.key, &pod.uid);
                    let reason = if recreate { "FailedUpdatePodReCreate" } else { "FailedDelete" };
                    outcome.fail(
                        phase,
                        PlannedEvent::warning(reason, format!("deleting pod {}: {e}", pod.name)).about_pod(&pod),
                    );
                }
            }
        }
        deleted
    }

    async fn create_pods(
        &self,
        creates: Vec<(ApiPod, CreateReason)>,
        claims: &HashMap<&str, &[PersistentVolumeClaim]>,
        outcome: &mut WriteOutcome,
    ) {
        let mut remaining = creates.into_iter();
        let mut batch = 1usize;
        loop {
            let wave: Vec<(ApiPod, CreateReason)> = remaining.by_ref().take(batch).collect();
            if wave.is_empty() {
                return;
            }
            let now = Instant::now();
            for (pod, _) in &wave {
                self.ledger.expectations.expect_create(self.key, &pod.name_any(), now);
            }
            let sends = wave.into_iter().map(|(pod, reason)| {
                let pod_claims = claims.get(pod.name_any().as_str()).copied().unwrap_or_default();
                async move {
                    // The pod's claims first: a pod whose claim could not be made is not created.
                    if let Err(e) = self.create_claims(pod_claims).await {
                        return (pod, reason, Err(e));
                    }
                    let result = self.writes.create_pod(&pod).await;
                    (pod, reason, result)
                }
            });
            let results = at_most_in_flight(sends, self.ledger.write_concurrency).await;
            let mut failed = false;
            for (pod, reason, result) in results {
                let name = pod.name_any();
                let revision =
                    common::pod::label(&pod, common::keys::CONTROLLER_REVISION_HASH).unwrap_or("").to_string();
                match result {
                    Ok(_) => {
                        self.ledger
                            .metrics
                            .pods_created
                            .get_or_create(&ReasonLabels { reason: reason.as_str().into() })
                            .inc();
                        outcome.succeeded.insert(Phase::Scale);
                        let uid = pod.metadata.uid.as_deref();
                        outcome.events.push(
                            PlannedEvent::normal(
                                "SuccessfulCreate",
                                format!("created pod {name} (revision {revision})"),
                            )
                            .about(Related::pod(&name, uid)),
                        );
                    }
                    Err(e) => {
                        failed = true;
                        self.ledger.expectations.create_failed(self.key, &name);
                        outcome.fail(
                            Phase::Scale,
                            PlannedEvent::warning("FailedCreate", format!("creating pod {name}: {e}"))
                                .about(Related::pod(&name, None)),
                        );
                    }
                }
            }
            if failed {
                // Slow start: a failure (quota, admission, invalid template) stops before the next, larger batch.
                return;
            }
            batch = batch.saturating_mul(2);
        }
    }

    async fn patch_pods(&self, changes: Vec<PodChange>, outcome: &mut WriteOutcome) {
        let results: Vec<(PodChange, GateRelease, Result<Option<String>, kube::Error>)> =
            futures::stream::iter(changes)
                .map(|change| {
                    // What the write releases is read now, and the pass's copy of the pod goes: the watch is about to
                    // replace it in the cache, and nothing later in the pass reads it.
                    let released = self.gate_release(&change.pod, gated_by(change.reason));
                    self.cached_pods().forget(&change.pod);
                    async move {
                        let mut resource_version = None;
                        for write in &change.writes {
                            let (PodWrite::Status(ops) | PodWrite::Object(ops)) = write;
                            let status = matches!(write, PodWrite::Status(_));
                            match self.writes.patch_pod(&change.pod.name, status, ops).await {
                                Ok(written) => resource_version = written,
                                Err(e) => return (change, released, Err(e)),
                            }
                        }
                        (change, released, Ok(resource_version))
                    }
                })
                .buffer_unordered(self.ledger.write_concurrency.max(1))
                .collect()
                .await;
        for (change, released, result) in results {
            let phase = Action::PatchPod(change.clone()).phase();
            match result {
                Ok(resource_version) => {
                    if let Some(rv) = resource_version {
                        self.ledger.expectations.expect_patch(self.key, &change.pod.name, &rv, Instant::now());
                    }
                    self.ledger
                        .metrics
                        .pods_updated
                        .get_or_create(&ReasonLabels { reason: change.reason.as_str().into() })
                        .inc();
                    self.record_gate_release(released);
                    outcome.succeeded.insert(phase);
                    if let Some(event) = success_event(&change) {
                        outcome.events.push(event);
                    }
                }
                Err(e) if matches!(code(&e), Some(404 | 409 | 422)) => {
                    tracing::debug!(pod = %change.pod.name, error = %e, "pod changed since it was observed; replanning");
                    outcome.stale += 1;
                }
                Err(e) => {
                    let reason = match change.reason {
                        PatchReason::HotPatchUpdate => "FailedUpdatePodHotPatch",
                        PatchReason::Lifecycle | PatchReason::ReadinessGate => "FailedUpdatePod",
                        _ => "FailedUpdatePodInPlace",
                    };
                    outcome.fail(
                        phase,
                        PlannedEvent::warning(reason, format!("pod {}: {}: {e}", change.pod.name, change.summary))
                            .about_pod(&change.pod),
                    );
                }
            }
        }
    }

    /// For `gamedeployment_gate_wait_seconds` ([`Self::record_gate_release`]), read from the cached pod before its
    /// write: the hook whose gate a write of `pod` releases — a pod that waited in `PreparingDelete` /
    /// `PreparingUpdate` deleted or updated (`gated`), or a pod that waited in `Updated` for its post-inplace hook
    /// going back to `Normal` — and since when it waited (the lifecycle timestamp it got when it entered that state).
    fn gate_release(&self, pod: &PodRef, gated: Option<GateKind>) -> GateRelease {
        let cached = self.cached(pod)?;
        let state = lifecycle::state_of(&cached);
        let hook = match (state, gated) {
            (LifecycleState::PreparingDelete | LifecycleState::PreparingUpdate, Some(kind)) => {
                gate::hook_for(self.gd, kind).map(|(hook, _, _)| hook)
            }
            (LifecycleState::Updated, None) => self
                .gd
                .spec
                .post_inplace_update_strategy
                .as_ref()
                .and_then(|s| s.hook.as_ref())
                .map(|_| HookKind::PostInplace),
            _ => None,
        };
        let since = common::pod::annotation(&*cached, common::keys::LIFECYCLE_TIMESTAMP)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        Some((hook?, since?))
    }

    /// Observes the wait of a gate a successful write released.
    fn record_gate_release(&self, release: GateRelease) {
        if let Some((hook, since)) = release {
            let waited = k8s_openapi::jiff::Timestamp::now().as_millisecond().saturating_sub(since.as_millisecond());
            self.ledger.metrics.gate_released(hook.prefix(), waited as f64 / 1000.0);
        }
    }

    async fn housekeeping(&self, action: &Action, outcome: &mut WriteOutcome) {
        match action {
            Action::PrunePodsToDelete { expected, remaining } => {
                let ops = [
                    json!({"op": "test", "path": "/spec/scaleStrategy/podsToDelete", "value": expected}),
                    json!({"op": "replace", "path": "/spec/scaleStrategy/podsToDelete", "value": remaining}),
                ];
                match self.writes.patch_game_deployment(&self.gd.name_any(), &ops).await {
                    Ok(()) => {
                        let pruned: Vec<&String> = expected.iter().filter(|n| !remaining.contains(n)).collect();
                        outcome.events.push(PlannedEvent::normal(
                            "PrunedPodsToDelete",
                            format!("removed pods that no longer exist from podsToDelete: {pruned:?}"),
                        ));
                    }
                    Err(e) if matches!(code(&e), Some(409 | 422)) => outcome.stale += 1,
                    Err(e) => tracing::warn!(error = %e, "pruning podsToDelete failed"),
                }
            }
            Action::DeleteRevision { name } => match self.writes.delete_revision(name).await {
                Ok(_) => tracing::debug!(revision = %name, "deleted old revision"),
                Err(e) if code(&e) == Some(404) => {}
                Err(e) => tracing::warn!(revision = %name, error = %e, "deleting an old revision failed"),
            },
            _ => {}
        }
    }
}

/// Claims of `spec.volumeClaimTemplates` ([`crate::planner::scale::volumes`]).
impl<W: ClusterWrites> Executor<'_, W> {
    /// Creates a new pod's claims; one that exists already (an earlier pass made it) is fine.
    async fn create_claims(&self, claims: &[PersistentVolumeClaim]) -> Result<(), kube::Error> {
        for claim in claims {
            match self.writes.create_claim(claim).await {
                Ok(_) => {}
                Err(e) if code(&e) == Some(409) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Deletes the claims of the pods deleted this pass (`deleted`: their UIDs) and free claims (no pod). The
    /// claims of a pod whose deletion failed or found it gone stay (gone: it disappeared out of band, and its
    /// replacement reuses them).
    async fn delete_claims(
        &self,
        deletes: &[(Option<&PodRef>, &[ClaimRef])],
        deleted: &BTreeSet<String>,
        outcome: &mut WriteOutcome,
    ) {
        for (pod, claims) in deletes {
            if pod.is_some_and(|p| !deleted.contains(&p.uid)) {
                continue;
            }
            for claim in claims.iter() {
                let message = format!("claim {} {}", claim.name, crate::planner::scale::volumes::describe(*pod));
                match self.writes.delete_claim(&claim.name, &claim.uid).await {
                    Ok(_) => {
                        outcome.events.push(PlannedEvent::normal("SuccessfulDeletePVC", format!("deleted {message}")))
                    }
                    Err(e) if matches!(code(&e), Some(404 | 409)) => outcome.stale += 1,
                    Err(e) => outcome.fail(
                        Phase::Scale,
                        PlannedEvent::warning("FailedDeletePVC", format!("deleting {message}: {e}")),
                    ),
                }
            }
        }
    }
}

impl<W: ClusterWrites> Executor<'_, W> {
    /// A run holds the name of one we created: the operator watches only runs labelled with a GameDeployment's name
    /// (`gamedeployment.tkex.tencent.com/name`), so a run without that label (left by BCS, or made by someone else
    /// to take the name) is read here and shown to the next passes through the HookRun expectations, which judge it
    /// (a foreign run is skipped with the next `.N` name and reported, as when the cache showed every run).
    async fn reveal_hook_run(&self, run: &HookRun) {
        match self.writes.get_hook_run(&run.name_any()).await {
            Ok(Some(existing)) => self.ledger.hook_runs.created(existing),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(hookrun = %run.name_any(), error = %e, "reading a run that holds our name failed")
            }
        }
    }

    /// Forgets the created runs the watch cache shows already (same UID): see [`HookRunExpectations::settle`].
    ///
    /// [`HookRunExpectations::settle`]: super::stale_cache::hookrun_expectations::HookRunExpectations::settle
    fn settle_created_runs(&self) {
        if let Some(cached) = self.ledger.cached_run {
            self.ledger.hook_runs.settle(cached);
        }
    }

    /// Records the creation of a pass's HookRun ([`create_all`]).
    fn hook_run_created(&self, run: &HookRun, result: Result<HookRun, kube::Error>, outcome: &mut WriteOutcome) {
        let name = run.name_any();
        match result {
            Ok(created) => {
                let uid = created.metadata.uid.clone();
                self.ledger.hook_runs.created(created);
                outcome.succeeded.insert(Phase::Housekeeping);
                outcome.events.push(run_event(
                    PlannedEvent::normal(
                        "SuccessfulCreateHookRun",
                        format!("created HookRun {name} for {}", describe_run(run)),
                    ),
                    run,
                    uid.as_deref(),
                ));
            }
            // The run exists already: ours that the cache has not shown yet (same deterministic name for the same
            // pod, revision and template), or another's holding the name; `reveal_hook_run` shows it to the next pass.
            Err(e) if code(&e) == Some(409) => outcome.stale += 1,
            Err(e) => outcome.fail(
                Phase::Housekeeping,
                run_event(
                    PlannedEvent::warning(
                        "FailedCreateHookRun",
                        format!("creating HookRun {name} for {}: {e}", describe_run(run)),
                    ),
                    run,
                    None,
                ),
            ),
        }
    }

    /// Deletes the runs the plan no longer wants. Runs whose pod is gone or moved to another revision — every
    /// consumed pre-inplace run after its update, every pre-delete run after its deletion — can never be wanted
    /// again (no run is ever created for a pod at a revision it left, nor for a pod that is gone), so they go in
    /// one `deletecollection` per hook type and revision, selected by those labels, this GameDeployment's name
    /// label and the pods' UIDs: one write for a batch instead of one per pod. Every other run (a retry, a run of
    /// a pod that still waits) is deleted on its own with its UID as precondition. Where `deletecollection` is
    /// refused (403, or not served), each run of the batch is deleted on its own, and later passes do that
    /// directly. While the rollout is in progress (`rolling`) a batch smaller than [`COLLECTION_CHUNK`] waits for a
    /// later pass (such a run can open no gate: it is bound to its pod's earlier attempt), so a rollout's consumed
    /// runs go in a few writes rather than one per pass. Returns false if a deletion failed.
    async fn delete_hook_runs(&self, runs: Vec<RunDeletion<'_>>, rolling: bool, outcome: &mut WriteOutcome) -> bool {
        let mut ok = true;
        let mut batches: BTreeMap<BatchKey, Vec<Batched<'_>>> = BTreeMap::new();
        let collections = self.ledger.collection_deletes.load(std::sync::atomic::Ordering::Relaxed);
        for (name, uid, why, batch) in runs {
            match batch.filter(|_| collections) {
                Some((key, pod_uid)) => batches.entry(key).or_default().push((name, uid, why, pod_uid)),
                None => ok &= self.delete_hook_run(name, uid, why, outcome).await,
            }
        }
        for ((type_, revision, workload), runs) in batches {
            if rolling && runs.len() < COLLECTION_CHUNK {
                continue;
            }
            for chunk in runs.chunks(COLLECTION_CHUNK) {
                let collection = RunCollection {
                    type_: &type_,
                    revision: &revision,
                    workload: &workload,
                    pod_uids: chunk.iter().map(|(_, _, _, pod)| pod.as_str()).collect(),
                };
                match self.writes.delete_hook_runs(&collection).await {
                    Ok(_) => {
                        for (name, uid, why, _) in chunk {
                            self.ledger.hook_runs.deleted(uid);
                            outcome.events.push(
                                PlannedEvent::normal(
                                    "SuccessfulDeleteHookRun",
                                    format!("deleted HookRun {name}: {why}"),
                                )
                                .about(Related::hook_run(name, Some(uid))),
                            );
                        }
                    }
                    Err(e) if matches!(code(&e), Some(403..=405)) => {
                        tracing::warn!(error = %e, "deleting consumed HookRuns as a collection was refused; deleting them one by one from now on");
                        self.ledger.collection_deletes.store(false, std::sync::atomic::Ordering::Relaxed);
                        for (name, uid, why, _) in chunk {
                            ok &= self.delete_hook_run(name, uid, why, outcome).await;
                        }
                    }
                    Err(e) => {
                        ok = false;
                        outcome.fail(
                            Phase::Housekeeping,
                            PlannedEvent::warning(
                                "FailedDeleteHookRun",
                                format!(
                                    "deleting {} consumed HookRun(s) ({}): {e}",
                                    chunk.len(),
                                    collection.selector()
                                ),
                            ),
                        );
                    }
                }
            }
        }
        ok
    }

    /// The collection a run to delete belongs to — (hook type, revision, GameDeployment name label) — and its pod's
    /// UID, if its pod is gone or runs another revision; None for any other run.
    fn batch_key(&self, uid: &str) -> Option<(BatchKey, String)> {
        let run = self.run_with_uid(uid)?;
        let labels = run.metadata.labels.as_ref()?;
        let get = |k: &str| labels.get(k).filter(|v| !v.is_empty()).cloned();
        let type_ = get(common::keys::HOOKRUN_TYPE)?;
        if type_ == HookKind::CanaryStep.type_label() {
            return None;
        }
        let (revision, workload, pod_uid) = (
            get(common::keys::HOOKRUN_WORKLOAD_REVISION)?,
            get(common::keys::HOOKRUN_WORKLOAD_NAME)?,
            get(common::keys::HOOKRUN_POD_UID)?,
        );
        if crate::gate::attempt::controller_uid(run) != self.gd.metadata.uid.as_deref()
            || workload != common::hookrun::workload_label_value(&self.gd.name_any())
        {
            return None;
        }
        let pod = self.pod_with_uid(&pod_uid);
        let moved = pod
            .is_none_or(|p| common::pod::label(&*p, common::keys::CONTROLLER_REVISION_HASH) != Some(revision.as_str()));
        moved.then_some(((type_, revision, workload), pod_uid))
    }

    async fn delete_hook_run(&self, name: &str, uid: &str, why: &str, outcome: &mut WriteOutcome) -> bool {
        match self.writes.delete_hook_run(name, uid).await {
            Ok(_) => {
                self.ledger.hook_runs.deleted(uid);
                outcome.events.push(
                    PlannedEvent::normal("SuccessfulDeleteHookRun", format!("deleted HookRun {name}: {why}"))
                        .about(Related::hook_run(name, Some(uid))),
                );
                true
            }
            Err(e) if matches!(code(&e), Some(404 | 409)) => {
                self.ledger.hook_runs.deleted(uid);
                true
            }
            Err(e) => {
                outcome.fail(
                    Phase::Housekeeping,
                    PlannedEvent::warning("FailedDeleteHookRun", format!("deleting HookRun {name}: {e}"))
                        .about(Related::hook_run(name, Some(uid))),
                );
                false
            }
        }
    }

    async fn set_paused(&self, paused: bool, resource_version: &str, why: &str, outcome: &mut WriteOutcome) {
        let ops = [
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}),
            json!({"op": "add", "path": "/spec/updateStrategy/paused", "value": paused}),
        ];
        match self.writes.patch_game_deployment(&self.gd.name_any(), &ops).await {
            Ok(()) => outcome.events.push(pause_event(self.gd, paused, why)),
            Err(e) if matches!(code(&e), Some(409 | 422)) => outcome.stale += 1,
            Err(e) => tracing::warn!(error = %e, "setting spec.updateStrategy.paused failed"),
        }
    }

    async fn reset_retry(&self, kind: HookKind, resource_version: &str, outcome: &mut WriteOutcome) {
        let field = crate::gate::retry_field(kind);
        let ops = [
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}),
            json!({"op": "replace", "path": format!("/spec/{field}/retry"), "value": false}),
        ];
        match self.writes.patch_game_deployment(&self.gd.name_any(), &ops).await {
            Ok(()) => outcome.events.push(PlannedEvent::normal(
                "HookRetried",
                format!("restarted the failed {} HookRuns; spec.{field}.retry is false again", kind.type_label()),
            )),
            // The GameDeployment changed since this pass read it (maybe a new retry request): the next pass
            // decides again, so no request is lost.
            Err(e) if matches!(code(&e), Some(409 | 422)) => outcome.stale += 1,
            Err(e) => tracing::warn!(error = %e, field, "resetting the retry flag failed"),
        }
    }
}

/// A plan's actions sorted, in one pass, into the groups the executor sends in order (plan order within a group).
#[derive(Default)]
struct Grouped<'p> {
    revisions: Vec<&'p Action>,
    adopt: Vec<&'p PodRef>,
    release: Vec<&'p PodRef>,
    deletes: Vec<(PodRef, DeleteCause)>,
    creates: Vec<(ApiPod, CreateReason)>,
    patches: Vec<PodChange>,
    /// `PrunePodsToDelete` and `DeleteRevision`.
    housekeeping: Vec<&'p Action>,
    /// The claims to create before each new pod, by pod name.
    claims: HashMap<&'p str, &'p [PersistentVolumeClaim]>,
    delete_claims: Vec<(Option<&'p PodRef>, &'p [ClaimRef])>,
    delete_runs: Vec<(&'p str, &'p str, &'p str)>,
    set_paused: Vec<(bool, &'p str, &'p str)>,
    reset_retry: Vec<(HookKind, &'p str)>,
}

impl<'p> Grouped<'p> {
    fn of(actions: &'p [Action]) -> Self {
        let mut g = Self::default();
        for action in actions {
            match action {
                Action::CreateRevision(_) | Action::RenumberRevision { .. } => g.revisions.push(action),
                Action::AdoptPod(pod) => g.adopt.push(pod),
                Action::ReleasePod(pod) => g.release.push(pod),
                Action::DeletePod { pod, cause } => g.deletes.push((pod.clone(), *cause)),
                Action::CreatePod { pod, reason } => g.creates.push(((**pod).clone(), *reason)),
                Action::PatchPod(change) => g.patches.push(change.clone()),
                Action::PrunePodsToDelete { .. } | Action::DeleteRevision { .. } => g.housekeeping.push(action),
                // Taken out of the plan before grouping (`take_hook_run_creates`).
                Action::CreateHookRun(_) => {}
                Action::DeleteHookRun { name, uid, why } => g.delete_runs.push((name, uid, why)),
                Action::SetPaused { paused, resource_version, why } => {
                    g.set_paused.push((*paused, resource_version, why))
                }
                Action::ResetRetry { kind, resource_version } => g.reset_retry.push((*kind, resource_version)),
                Action::CreateClaims { pod, claims } => {
                    g.claims.insert(pod.as_str(), claims.as_slice());
                }
                Action::DeleteClaims { pod, claims } => g.delete_claims.push((pod.as_ref(), claims.as_slice())),
            }
        }
        g.patches.sort_by_key(|change| send_order(change.reason));
        g
    }
}

/// The order a pass sends its pod changes in (lowest first; plan order among equals). A pod a gate has just let
/// through goes first: its hook succeeded and it waits for nothing else, while a large pass also has hundreds of
/// holds and readiness flips to send with a bounded number in flight. Then the pods whose update completed (they
/// become available again, which makes room in the update budget for the next batch), then the rest.
fn send_order(reason: PatchReason) -> u8 {
    match reason {
        PatchReason::InPlaceUpdate | PatchReason::InPlaceGraceEnded | PatchReason::HotPatchUpdate => 0,
        PatchReason::InPlaceUpdateCompleted | PatchReason::ReadinessGate => 1,
        PatchReason::InPlaceGraceCancelled | PatchReason::Lifecycle => 2,
    }
}

/// The outputs of `sends`, in their order, with at most `concurrency` of them running at once. A slow-start wave of pod
/// creations doubles up to hundreds of pods: sent all at once, a 900-pod scale-out had 512 requests in flight, each
/// on a connection of its own (the client speaks HTTP/1.1), which the client then kept open (each with its buffers)
/// and which a real API server refuses past `--max-mutating-requests-inflight` (200 by default) with 429.
async fn at_most_in_flight<T>(sends: impl IntoIterator<Item = impl Future<Output = T>>, concurrency: usize) -> Vec<T> {
    futures::stream::iter(sends).buffered(concurrency.max(1)).collect().await
}

/// Creates a pass's HookRuns, up to `concurrency` at once (one at a time, 1,000 runs of a 5,000-pod batch made a
/// pass last seconds, and every pod whose hook succeeded meanwhile waited for the next pass). Results in any order.
async fn create_all<W: ClusterWrites>(
    writes: &W,
    runs: Vec<HookRun>,
    concurrency: usize,
    mut answered: impl FnMut(HookRun, Result<HookRun, kube::Error>),
) {
    // Each run moves into its request's future and is encoded when that request is about to be sent (the stream is
    // lazy), so a pass creating thousands of runs holds `concurrency` encoded bodies, not one per run, and each run
    // goes once its answer is handed on.
    let requests = futures::stream::iter(runs).map(|run| async move {
        let result = writes.create_hook_run(&run).await;
        (run, result)
    });
    // Each answer is handed on as it comes (not collected): a pass creating thousands of runs keeps only the
    // answers its expectations still need.
    requests
        .buffer_unordered(concurrency.max(1))
        .for_each(|(run, result)| {
            answered(run, result);
            futures::future::ready(())
        })
        .await;
}

/// The plan's HookRuns to create, taken out of its actions in their order (the executor sends them and lets each go).
fn take_hook_run_creates(actions: &mut Vec<Action>) -> Vec<HookRun> {
    if !actions.iter().any(|a| matches!(a, Action::CreateHookRun(_))) {
        return Vec::new();
    }
    let (runs, rest): (Vec<Action>, Vec<Action>) =
        std::mem::take(actions).into_iter().partition(|a| matches!(a, Action::CreateHookRun(_)));
    *actions = rest;
    runs.into_iter()
        .filter_map(|a| match a {
            Action::CreateHookRun(run) => Some(*run),
            _ => None,
        })
        .collect()
}

/// The pod a pod's HookRun is for (its `PodName` arg and `pod-uid` label); None for a canary step run.
fn run_pod(run: &HookRun) -> Option<(String, Option<String>)> {
    let name = run.spec.args.iter().find(|a| a.name == common::keys::hook_args::POD_NAME)?.value.clone()?;
    let uid = run.metadata.labels.as_ref().and_then(|l| l.get(common::keys::HOOKRUN_POD_UID)).cloned();
    Some((name, uid))
}

/// A HookRun's event is about its pod (so each pod's event stays its own), or about the run for a canary step.
fn run_event(event: PlannedEvent, run: &HookRun, uid: Option<&str>) -> PlannedEvent {
    match run_pod(run) {
        Some((pod, pod_uid)) => event.about(Related::pod(&pod, pod_uid.as_deref())),
        None => event.about(Related::hook_run(&run.name_any(), uid)),
    }
}

fn describe_run(run: &HookRun) -> String {
    let labels = run.metadata.labels.clone().unwrap_or_default();
    match (labels.get(common::keys::HOOKRUN_INSTANCE_ID), labels.get(common::keys::HOOKRUN_WORKLOAD_REVISION)) {
        (Some(id), Some(rev)) => match run_pod(run) {
            Some((pod, _)) => format!("pod {pod} (instance id {id}, revision {rev})"),
            None => format!("the pod with instance id {id} at revision {rev}"),
        },
        _ => labels
            .get(common::keys::HOOKRUN_CANARY_STEP_INDEX)
            // The label counts from 0 (`status.currentStepIndex`); people count steps from 1.
            .map_or_else(
                || "this GameDeployment".to_string(),
                |step| {
                    step.parse::<i64>()
                        .map_or_else(|_| format!("canary step index {step}"), |i| format!("canary step {}", i + 1))
                },
            ),
    }
}

fn success_event(change: &PodChange) -> Option<PlannedEvent> {
    let pod = &change.pod.name;
    let (reason, message) = match change.reason {
        PatchReason::InPlaceUpdate => ("SuccessfulUpdatePodInPlace", format!("pod {pod}: {}", change.summary)),
        PatchReason::InPlaceGraceEnded => {
            ("SuccessfulUpdatePodInPlace", format!("pod {pod}: grace period over, {}", change.summary))
        }
        PatchReason::InPlaceGraceCancelled => ("InPlaceUpdateCancelled", format!("pod {pod}: {}", change.summary)),
        PatchReason::InPlaceUpdateCompleted => ("InPlaceUpdateCompleted", format!("pod {pod}: {}", change.summary)),
        PatchReason::HotPatchUpdate => ("SuccessfulUpdatePodHotPatch", format!("pod {pod}: {}", change.summary)),
        PatchReason::Lifecycle => ("PodLifecycle", format!("pod {pod}: {}", change.summary)),
        // Every new pod passes here; an event each would only be noise.
        PatchReason::ReadinessGate => return None,
    };
    Some(PlannedEvent::normal(reason, message).about_pod(&change.pod))
}

/// The Event of a canary pause or resume: a pause says how to resume.
fn pause_event(gd: &GameDeployment, paused: bool, why: &str) -> PlannedEvent {
    if paused {
        let resume = crate::planner::status::resume_command(gd, None);
        PlannedEvent::normal(
            "CanaryPaused",
            format!("{why}; set spec.updateStrategy.paused: true; resume with {resume}"),
        )
    } else {
        PlannedEvent::normal("CanaryResumed", format!("{why}; set spec.updateStrategy.paused: false"))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    fn change(name: &str, reason: PatchReason) -> Action {
        Action::PatchPod(PodChange {
            pod: PodRef { name: name.into(), uid: format!("uid-{name}") },
            reason,
            writes: Vec::new(),
            summary: String::new(),
        })
    }

    #[test]
    fn pods_a_gate_let_through_are_sent_first_then_completions_then_the_rest() {
        let actions = [
            change("held", PatchReason::Lifecycle),
            change("ready", PatchReason::ReadinessGate),
            change("done", PatchReason::InPlaceUpdateCompleted),
            change("passed", PatchReason::InPlaceUpdate),
            change("held-2", PatchReason::Lifecycle),
            change("hot", PatchReason::HotPatchUpdate),
            change("grace-over", PatchReason::InPlaceGraceEnded),
            change("cancelled", PatchReason::InPlaceGraceCancelled),
        ];
        let order: Vec<String> = Grouped::of(&actions).patches.into_iter().map(|c| c.pod.name).collect();
        assert_eq!(order, ["passed", "hot", "grace-over", "ready", "done", "held", "held-2", "cancelled"]);
    }

    /// Waits `for_how_long` as one request in flight, recording in `most` the most in flight at once.
    async fn in_flight_for(in_flight: &AtomicUsize, most: &AtomicUsize, for_how_long: Duration) {
        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(for_how_long).await;
        in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// A client whose every request takes 20 ms and answers a HookRun; records the most requests in flight at once.
    fn slow_client(in_flight: Arc<AtomicUsize>, most: Arc<AtomicUsize>) -> kube::Client {
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let (in_flight, most) = (in_flight.clone(), most.clone());
            async move {
                in_flight_for(&in_flight, &most, Duration::from_millis(20)).await;
                let name = request.uri().path().rsplit('/').next().unwrap_or_default().to_string();
                let body = json!({"apiVersion": "tkex.tencent.com/v1alpha1", "kind": "HookRun",
                    "metadata": {"name": name, "namespace": "ns", "uid": "u"}, "spec": {"metrics": []}});
                let response = http::Response::builder()
                    .status(201)
                    .body(kube::client::Body::from(serde_json::to_vec(&body).expect("json")))
                    .expect("response");
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        kube::Client::new(service, "ns")
    }

    /// A slow-start wave of 512 pod creations: at most the write concurrency in flight, answers in the wave's order.
    #[tokio::test]
    async fn a_wave_of_pod_creations_sends_at_most_the_write_concurrency_at_once() {
        let (in_flight, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let wave = (0..512).map(|i| {
            let (in_flight, most) = (in_flight.clone(), most.clone());
            async move {
                in_flight_for(&in_flight, &most, Duration::from_millis(2)).await;
                i
            }
        });
        let answers = at_most_in_flight(wave, 16).await;
        assert_eq!(answers, (0..512).collect::<Vec<_>>(), "answers in the wave's order");
        assert_eq!(most.load(Ordering::SeqCst), 16, "the window fills, and never more");
    }

    #[tokio::test]
    async fn a_pass_creates_its_hook_runs_up_to_the_write_concurrency_at_once() {
        let (in_flight, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let client = slow_client(in_flight, most.clone());
        let runs: Vec<HookRun> = (0..40)
            .map(|i| {
                let mut run = HookRun::new(&format!("run-{i}"), Default::default());
                run.metadata.namespace = Some("ns".into());
                run
            })
            .collect();
        let mut created = Vec::new();
        let writes = super::super::cluster_writes::ApiWrites::new(client, "ns");
        create_all(&writes, runs, 8, |run, result| created.push((run, result))).await;
        assert_eq!(created.len(), 40);
        assert!(created.iter().all(|(_, result)| result.is_ok()), "{created:?}");
        // Each answer is the run the API server made (here: named after the request's path).
        assert!(
            created.iter().all(|(_, result)| result.as_ref().is_ok_and(|r| r.metadata.uid.as_deref() == Some("u")))
        );
        // Each request waits 20 ms, so the 8-wide window fills: one at a time would never exceed 1.
        assert_eq!(most.load(Ordering::SeqCst), 8);
    }

    #[test]
    fn cached_pods_are_found_by_name_and_uid_until_forgotten_or_released() {
        let pods: Vec<Arc<Pod>> = ["game-c", "game-a", "game-b"]
            .iter()
            .enumerate()
            .map(|(i, name)| Arc::new(crate::fixtures::pod(name).uid(&format!("uid-{i}")).build()))
            .collect();
        let unnamed = Arc::new(Pod::default());
        let mut cached = CachedPods::new(pods.iter().cloned().chain([unnamed]).collect());
        for pod in &pods {
            let (name, uid) = (pod.metadata.name.as_deref().unwrap(), pod.metadata.uid.as_deref().unwrap());
            assert!(cached.named(name).is_some_and(|found| Arc::ptr_eq(&found, pod)), "{name}");
            assert!(cached.with_uid(uid).is_some_and(|found| Arc::ptr_eq(&found, pod)), "{uid}");
        }
        assert!(cached.named("game-d").is_none() && cached.named("").is_none() && cached.with_uid("uid-9").is_none());
        // Forgotten: that pod's copy goes and it is not found; the others still are.
        let b = PodRef { name: "game-b".into(), uid: "uid-2".into() };
        cached.forget(&PodRef { name: "game-b".into(), uid: "another".into() });
        assert_eq!(Arc::strong_count(&pods[2]), 2, "not forgotten under another UID");
        cached.forget(&b);
        assert_eq!(Arc::strong_count(&pods[2]), 1);
        assert!(cached.named("game-b").is_none() && cached.with_uid("uid-2").is_none());
        assert!(
            cached.named("game-a").is_some() && cached.with_uid("uid-0").is_some() && cached.named("game-c").is_some()
        );
        // Released: the pass's copies are gone (only the test holds the pods now), and nothing is found.
        cached.release();
        assert!(pods.iter().all(|p| Arc::strong_count(p) == 1));
        assert!(cached.named("game-a").is_none() && cached.with_uid("uid-0").is_none());
    }

    #[test]
    fn the_runs_to_create_are_taken_out_of_the_plan_in_order_and_the_rest_stays() {
        let run = |name: &str| Action::CreateHookRun(Box::new(HookRun::new(name, Default::default())));
        let delete = |name: &str| Action::DeleteHookRun { name: name.into(), uid: "u".into(), why: "w".into() };
        let mut actions = vec![run("a"), delete("x"), run("b"), delete("y"), run("c")];
        let taken = take_hook_run_creates(&mut actions);
        assert_eq!(taken.iter().map(|r| r.name_any()).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!(
            matches!(&actions[..], [Action::DeleteHookRun { name: x, .. }, Action::DeleteHookRun { name: y, .. }] if x == "x" && y == "y")
        );
        assert!(take_hook_run_creates(&mut actions).is_empty() && actions.len() == 2);
    }
}
