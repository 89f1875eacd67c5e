//! The imperative shell: watches (GameDeployments, Pods, ControllerRevisions, Node deletion costs) feed
//! reflector caches; each reconcile observes (the caches, corrected by [`stale_cache`]), asks the
//! [`crate::planner`] what to do, sends it ([`execute`](mod@execute)), and writes the status only when it changed.
//!
//! One pass (`reconcile` → `pass`), in order: [`pass_pacing`] may delay it; `observe` reads the caches once they
//! show our writes ([`stale_cache::write_expectations`]), reports pods someone else deleted ([`deletions`]) and
//! lays our own HookRun writes over the cached runs ([`stale_cache::hookrun_expectations`]); `plan` calls
//! [`crate::planner::plan`]; `execute` sends the actions ([`execute`](mod@execute)); `report` writes the status.
//! [`orphans`] runs beside the passes: it labels orphan pods so that the watch brings them to the planner.
//!
//! Event-driven: a pod or revision event reconciles its owner (and, for an orphan pod, every GameDeployment whose
//! selector matches it); GameDeployment events reconcile only when something other than the status changed (our
//! own status writes do not trigger a pass, BCS-G37). A pass asks to run again only for time-based work
//! (grace periods, `minReadySeconds`, expectations).

pub(crate) mod cluster_writes;
mod deletions;
pub(crate) mod execute;
pub(crate) mod ledger;
pub(crate) mod orphans;
mod pass_pacing;
#[cfg(test)]
mod shell_tests;
mod stale_cache;
mod template_freshness;
mod watches;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::api::{GameDeployment, GameDeploymentStatus, HookPhase, HookRun, HookTemplate};
use common::cached_pod::Pod;
use common::hookrun::HookKind;
use common::keys;
use futures::{StreamExt, future};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use k8s_openapi::jiff::Timestamp;
use kube::api::{PartialObjectMeta, PostParams};
use kube::runtime::Controller;
use kube::runtime::controller::{Action as Requeue, Config as ControllerConfig};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::mpsc;

use common::runtime::events::{EventSettings, EventSink, Note};

use crate::action::{EventType, PlannedEvent};
use crate::hookrun_keys::Keyring;
use crate::metrics::{Metrics, RolloutClock, RolloutMark, WorkloadLabels, WorkloadView};
use crate::ownership;
use crate::planner::{self, Observed, Plan, status};
use crate::priority::parse_cost;
use crate::webhook::labeller;
use stale_cache::hookrun_expectations::HookRunExpectations;
use stale_cache::write_expectations::{Check, Expectations};

/// Errors of one reconcile pass (the controller retries with backoff) or of the controller itself.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The GameDeployment came without a namespace: refused rather than guessed (its pods would be looked for in
    /// the wrong place).
    #[error("GameDeployment {0} has no namespace")]
    NoNamespace(String),
    /// The status write failed; the pass is retried with backoff.
    #[error("writing the status of {key}: {source}")]
    WriteStatus {
        /// `namespace/name` of the GameDeployment.
        key: String,
        /// The API's error.
        source: kube::Error,
    },
    /// Some of the pass's writes failed (the status' `FailedScale`/`FailedUpdate` conditions say so too); the pass is
    /// retried with backoff.
    #[error("{count} write(s) for {key} failed, first: {first}")]
    Writes {
        /// `namespace/name` of the GameDeployment.
        key: String,
        /// How many writes failed.
        count: usize,
        /// The first failure, in words.
        first: String,
    },
}

impl Error {
    fn metric_reason(&self) -> &'static str {
        match self {
            Self::NoNamespace(_) => "no_namespace",
            Self::WriteStatus { .. } => "write_status",
            Self::Writes { .. } => "writes",
        }
    }
}

/// Settings of the controller (from the binary's flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// Only this namespace (default: all).
    pub namespace: Option<String>,
    /// GameDeployments reconciled at the same time.
    pub concurrency: u16,
    /// Pod writes in flight at once within one pass.
    pub write_concurrency: usize,
    /// How long a write may stay invisible in the cache before planning resumes anyway.
    pub expectations_timeout: Duration,
    /// Watch Nodes for `io.tencent.bcs.dev/node-deletion-cost` (needs list/watch on nodes).
    pub node_costs: bool,
    /// Coalesce triggers arriving within this window into one pass.
    pub debounce: Duration,
    /// Capacity of the Event queue.
    pub event_queue: usize,
    /// A status whose only changes are progress every pass recomputes (replica counts, the `Progressing`
    /// message, pods still held by a hook: [`status::must_write_now`]) is written at most once per this interval
    /// per GameDeployment; anything else is written in the pass that computes it. Zero: every change at once.
    pub status_write_interval: Duration,
    /// The next pass of a GameDeployment starts no sooner than this many times the previous pass's planning time
    /// after it ended ([`pass_pacing`]); 0 (the default): back to back.
    pub pass_spacing: f64,
    /// The keys that sign pod HookRuns' attempt stamps ([`crate::hookrun_keys::load`]); None: a key of this process
    /// only, made when the controller starts.
    pub hookrun_keys: Option<Arc<Keyring>>,
    /// How often each GameDeployment's namespace is searched for orphans to adopt ([`orphans`]); zero: only when a
    /// GameDeployment is created or its selector changes.
    pub adoption_scan_interval: Duration,
    /// Keep the pod-gate label on the pods of opted-in GameDeployments ([`crate::webhook::labeller`]): on when the
    /// operator serves the webhooks.
    pub pod_gate_labels: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace: None,
            concurrency: 4,
            write_concurrency: 16,
            expectations_timeout: Duration::from_secs(30),
            node_costs: true,
            debounce: Duration::ZERO,
            event_queue: 4096,
            status_write_interval: Duration::from_secs(1),
            pass_spacing: 0.0,
            hookrun_keys: None,
            adoption_scan_interval: Duration::from_secs(60),
            pod_gate_labels: false,
        }
    }
}

/// Shared by every reconcile.
pub struct Context {
    /// The client every write and fresh read goes through (with the request-counting layer).
    pub client: Client,
    /// The controller's own GameDeployment cache: a pass that waited for its spacing plans from the newest one.
    gds: Store<GameDeployment>,
    spacing: pass_pacing::PassSpacing,
    /// The pods the operator watches, decoded lean ([`common::cached_pod`]).
    pub pods: Store<Pod>,
    /// The ControllerRevisions the operator watches.
    pub revisions: Store<ControllerRevision>,
    /// The HookRuns the operator watches: a run turning `Successful` wakes its GameDeployment's pass.
    pub hook_runs: Store<HookRun>,
    /// The HookTemplates runs are made from (checked against a fresh read before a run is created).
    pub hook_templates: Store<HookTemplate>,
    /// PersistentVolumeClaims carrying an instance-id label (those of `spec.volumeClaimTemplates`).
    pub claims: Store<PersistentVolumeClaim>,
    /// Set once the claim cache holds its first full list. Only GameDeployments with `volumeClaimTemplates` wait
    /// for it, so a cluster where the operator may not read claims still runs every other GameDeployment.
    claims_synced: Arc<AtomicBool>,
    /// HookRuns we created or deleted that the cache does not show yet.
    hookrun_expectations: HookRunExpectations,
    /// Node metadata, for node deletion costs; `None` when they are off (`--node-costs`).
    pub nodes: Option<Store<PartialObjectMeta<Node>>>,
    /// Writes this process made that the caches do not show yet: a pass waits for them instead of planning from
    /// a stale cache and acting twice.
    pub expectations: Expectations,
    /// The operator's metrics.
    pub metrics: Metrics,
    /// Publishes the Events that explain each decision.
    pub events: EventSink,
    /// The controller's settings (flags).
    pub config: Config,
    /// Signs the attempt stamps of the runs this operator creates and verifies those of the runs it finds.
    keys: Arc<Keyring>,
    /// Consecutive failures per GameDeployment, for the retry backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// When each rollout last made progress (`gamedeployment_rollout_stuck_seconds`).
    rollouts: RolloutClock,
    /// UIDs of the completed HookRuns already counted in `gamedeployment_hook_outcomes_total`, per GameDeployment.
    counted_runs: Mutex<HashMap<String, HashSet<String>>>,
    /// Set once the pod, revision, HookRun and HookTemplate caches hold their first full list. Passes do not wait on the stores
    /// themselves: a store wakes only one of its concurrent waiters, so a second one could sleep for a minute.
    synced: Arc<AtomicBool>,
    /// The last status written per GameDeployment, with the resourceVersion it produced: until the cache shows
    /// that version, passes plan from (and compare against) this status instead of the cache's older one, so a
    /// pass right after a status write neither repeats it nor re-emits its events.
    written: Mutex<HashMap<String, (String, GameDeploymentStatus)>>,
    /// Status writes per GameDeployment: when the last one was sent, and the status computed since that waits
    /// for the next write (`Config::status_write_interval`). Passes plan from the waiting status, so its Events
    /// are not emitted twice; a restart loses it and recomputes it from the pods and HookRuns.
    paces: Mutex<HashMap<String, Pace>>,
    /// UIDs of the pods this process sent a deletion for, and of pods already reported as deleted by someone
    /// else (both pruned to pods that still exist).
    deleted: Mutex<Deletions>,
    /// When this controller started: pod deletions asked earlier are not reported.
    started: Timestamp,
    /// Consumed HookRuns are deleted as collections until the API refuses `deletecollection` once.
    collection_deletes: AtomicBool,
}

#[derive(Default)]
struct Pace {
    last_write: Option<Instant>,
    waiting: Option<GameDeploymentStatus>,
}

#[derive(Default)]
struct Deletions {
    ours: HashSet<String>,
    reported: HashSet<String>,
}

fn key_of(gd: &GameDeployment) -> String {
    format!("{}/{}", gd.namespace().unwrap_or_default(), gd.name_any())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a reconcile panicked while holding it; the data is still consistent enough for
    // counters.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records a pod deletion this operator sends (it is not reported as someone else's).
impl ledger::DeletionLog for Context {
    fn deleting(&self, uid: &str) {
        lock(&self.deleted).ours.insert(uid.to_string());
    }
}

impl Context {
    fn node_costs(&self) -> BTreeMap<String, f64> {
        let Some(nodes) = &self.nodes else { return BTreeMap::new() };
        nodes
            .state()
            .iter()
            .filter_map(|n| {
                let cost = n.metadata.annotations.as_ref()?.get(keys::NODE_DELETION_COST)?;
                Some((n.name_any(), parse_cost(Some(cost))))
            })
            .collect()
    }

    /// The GameDeployment as the planner should see it: the cached one, with our own last status write if the
    /// cache does not show it yet, and with the status waiting to be written if there is one. Also returns the
    /// resourceVersion to write against and the status as written (what the API holds).
    fn effective(
        &self,
        key: &str,
        gd: &GameDeployment,
    ) -> (GameDeployment, Option<String>, Option<GameDeploymentStatus>) {
        let (mut gd, rv) = self.effective_written(key, gd);
        let written = gd.status.clone();
        if let Some(waiting) = lock(&self.paces).get(key).and_then(|p| p.waiting.clone()) {
            gd.status = Some(waiting);
        }
        (gd, rv, written)
    }

    fn effective_written(&self, key: &str, gd: &GameDeployment) -> (GameDeployment, Option<String>) {
        let mut written = lock(&self.written);
        let cached_rv = gd.metadata.resource_version.clone();
        if let Some((rv, status)) = written.get(key) {
            let newer = match (rv.parse::<u64>(), cached_rv.as_deref().map(str::parse::<u64>)) {
                (Ok(ours), Some(Ok(cached))) => ours > cached,
                _ => false,
            };
            if newer {
                let mut effective = gd.clone();
                effective.status = Some(status.clone());
                return (effective, Some(rv.clone()));
            }
            written.remove(key);
        }
        (gd.clone(), cached_rv)
    }

    fn record_written(&self, key: &str, resource_version: Option<String>, status: GameDeploymentStatus) {
        let mut written = lock(&self.written);
        match resource_version {
            Some(rv) => {
                written.insert(key.to_string(), (rv, status));
            }
            None => {
                written.remove(key);
            }
        }
    }

    /// Drops what the controller remembers about a GameDeployment that is going away, and its metric series.
    fn forget(&self, namespace: &str, name: &str) {
        let key = format!("{namespace}/{name}");
        self.expectations.forget(&key);
        self.record_written(&key, None, Default::default());
        lock(&self.paces).remove(&key);
        lock(&self.counted_runs).remove(&key);
        self.spacing.forget(&key);
        self.rollouts.forget(namespace, name);
        self.metrics.forget(namespace, name);
    }

    /// The dashboard metrics of one pass: replica counts, pods held per hook, how long the rollout has not
    /// progressed, and the HookRuns that completed since the last pass.
    fn show(&self, snapshot: &Snapshot, plan: &Plan) {
        let (namespace, name) = (snapshot.namespace.as_str(), snapshot.gd.name_any());
        let status = &plan.status;
        let held_by =
            |kind: HookKind| plan.held.iter().filter(|h| h.hook.as_ref().is_some_and(|g| g.kind == kind)).count();
        let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let view = WorkloadView {
            desired: i64::from(snapshot.gd.spec.replicas.unwrap_or(1).max(0)),
            updated: i64::from(status.updated_replicas),
            ready: i64::from(status.ready_replicas),
            held: [
                as_i64(held_by(HookKind::PreDelete)),
                as_i64(held_by(HookKind::PreInplace)),
                as_i64(status.post_inplace_hook_condition.len()),
                i64::from(plan.canary_held),
            ],
        };
        self.metrics.show(namespace, &name, &view);
        let mark = RolloutMark {
            revision: status.update_revision.clone(),
            step: status.current_step_index,
            replicas: status.replicas,
            ready: status.ready_replicas,
            available: status.available_replicas,
            updated: status.updated_replicas,
            updated_ready: status.updated_ready_replicas,
        };
        let complete = status::condition(status, status::PROGRESSING)
            .and_then(|c| c.reason.as_deref())
            .is_some_and(|r| r == "RolloutComplete" || r == "PartitionAvailable");
        self.metrics.show_server_states(namespace, &name, &status.server_states);
        let exceeded = status::condition(status, status::PROGRESSING)
            .is_some_and(|c| c.reason.as_deref() == Some(crate::planner::progress_deadline::EXCEEDED));
        self.metrics
            .progress_deadline_exceeded
            .get_or_create(&WorkloadLabels { namespace: namespace.into(), name: name.clone() })
            .set(i64::from(exceeded));
        let stuck = self.rollouts.observe(namespace, &name, mark, complete, Instant::now());
        self.metrics
            .rollout_stuck_seconds
            .get_or_create(&WorkloadLabels { namespace: namespace.into(), name: name.clone() })
            .set(stuck);

        // Pods and canary steps released without a successful hook: each counted when the status first shows it.
        let before = snapshot.gd.status.clone().unwrap_or_default();
        for (hook, now, then) in [
            (HookKind::PreDelete, &status.pre_delete_hook_condition, &before.pre_delete_hook_condition),
            (HookKind::PreInplace, &status.pre_inplace_hook_condition, &before.pre_inplace_hook_condition),
            (HookKind::PostInplace, &status.post_inplace_hook_condition, &before.post_inplace_hook_condition),
        ] {
            for entry in now {
                let Some(reason) = entry.released_by else { continue };
                if !then
                    .iter()
                    .any(|o| o.pod_name == entry.pod_name && o.released_by.is_some() && o.hook_run == entry.hook_run)
                {
                    self.metrics.hook_released(hook.prefix(), reason.as_label());
                }
            }
        }
        // A canary rollback: counted when the status first shows it.
        let rollback = |s: &common::api::GameDeploymentStatus| s.canary.as_ref().and_then(|c| c.rollback.clone());
        if rollback(status).is_some_and(|r| rollback(&before).as_ref() != Some(&r)) {
            self.metrics.canary_rollbacks.inc();
        }
        let old_steps = before.canary.as_ref().map_or(&[][..], |c| c.step_releases.as_slice());
        for release in status.canary.as_ref().map_or(&[][..], |c| c.step_releases.as_slice()) {
            if !old_steps.contains(release) {
                self.metrics.hook_released(HookKind::CanaryStep.prefix(), release.released_by.as_label());
            }
        }
        // HookRuns that completed: each counted once (a restart counts the completed runs it finds again).
        // The labels (the outcome reads the spec through JSON) only for runs not counted yet: every pass sees
        // every completed run of a roll until they are deleted together at its end.
        let completed = snapshot.hook_runs.iter().filter(|r| {
            r.status.as_ref().and_then(|s| s.phase).is_some_and(HookPhase::is_completed)
                && ownership::controller_of(r.metadata.owner_references.as_ref())
                    .is_some_and(|o| ownership::is_owned_by(o, &snapshot.gd))
        });
        let mut counted = lock(&self.counted_runs);
        let seen = counted.entry(snapshot.key.clone()).or_default();
        let mut now_seen = HashSet::new();
        for run in completed {
            let shadow = crate::planner::shadow::kind_of(run);
            let Some(hook) = shadow.map(HookKind::prefix).or_else(|| hook_label(run)) else { continue };
            let uid = run.metadata.uid.clone().unwrap_or_default();
            if !seen.contains(&uid)
                && let Some(outcome) = outcome_label(run)
            {
                self.metrics.hook_outcome(hook, outcome, shadow.is_some());
            }
            now_seen.insert(uid);
        }
        *seen = now_seen;
        // A canary hook step that completed this pass: how long its run held the rollout.
        let old = snapshot.gd.status.clone().unwrap_or_default();
        if let Some(run_name) = old.canary.as_ref().and_then(|c| c.current_step_hook_run.as_deref())
            && status.current_step_index > old.current_step_index
            && let Some(run) = snapshot.hook_runs.iter().find(|r| r.metadata.name.as_deref() == Some(run_name))
            && let Some(created) = run.metadata.creation_timestamp.as_ref()
        {
            let waited = Timestamp::now().as_millisecond().saturating_sub(created.0.as_millisecond());
            self.metrics.gate_released(HookKind::CanaryStep.prefix(), waited as f64 / 1000.0);
        }
    }
}

/// The `hook` label of a run (`predelete`, `preinplace`, `postinplace`, `canary`).
fn hook_label(run: &HookRun) -> Option<&'static str> {
    let type_ = run.metadata.labels.as_ref()?.get(keys::HOOKRUN_TYPE)?;
    [HookKind::PreDelete, HookKind::PreInplace, HookKind::PostInplace, HookKind::CanaryStep]
        .into_iter()
        .find(|k| k.type_label() == type_)
        .map(HookKind::prefix)
}

/// The `outcome` label of a completed run (None while it runs). A run a person terminated
/// (`spec.terminate: true`) is `terminated`, whatever phase it ended in.
fn outcome_label(run: &HookRun) -> Option<&'static str> {
    let phase = run.status.as_ref().and_then(|s| s.phase)?;
    if !phase.is_completed() {
        return None;
    }
    // Read through JSON: `spec.terminate` is an optional field of the HookRun API.
    let terminated = serde_json::to_value(&run.spec)
        .ok()
        .and_then(|spec| spec.get("terminate").and_then(serde_json::Value::as_bool))
        .unwrap_or(false);
    Some(match phase {
        _ if terminated => "terminated",
        HookPhase::Successful => "successful",
        HookPhase::Failed => "failed",
        HookPhase::Error => "error",
        HookPhase::Inconclusive => "inconclusive",
        HookPhase::Pending | HookPhase::Running => return None,
    })
}

/// What decides that a GameDeployment change needs a pass: anything but the status.
fn spec_fingerprint(gd: &GameDeployment) -> Option<u64> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    gd.metadata.generation.hash(&mut hasher);
    gd.metadata.labels.hash(&mut hasher);
    gd.metadata.annotations.hash(&mut hasher);
    gd.metadata.deletion_timestamp.as_ref().map(|t| t.0.as_second()).hash(&mut hasher);
    gd.metadata.uid.hash(&mut hasher);
    Some(hasher.finish())
}

fn random_seed() -> u64 {
    // RandomState is seeded from the OS per instance; hashing the clock on top varies it per call.
    std::collections::hash_map::RandomState::new().hash_one(Instant::now())
}

async fn reconcile(gd: Arc<GameDeployment>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let key = key_of(&gd);
    let gd = match ctx.spacing.wait(&key, Instant::now()) {
        Some(wait) => {
            // Triggers arriving meanwhile are held by the controller and run as one pass after this one.
            ctx.metrics.passes_spaced.inc();
            ctx.metrics.pass_spacing_seconds.inc_by(wait.as_secs_f64());
            tokio::time::sleep(wait).await;
            match ctx.gds.get(&ObjectRef::from_obj(gd.as_ref())) {
                Some(newest) => newest,
                None => {
                    // Deleted while this pass waited: nothing to plan (as when the controller finds it gone).
                    ctx.forget(gd.namespace().as_deref().unwrap_or_default(), &gd.name_any());
                    return Ok(Requeue::await_change());
                }
            }
        }
        None => gd,
    };
    let started = Instant::now();
    let (result, planning) = pass(&gd, &ctx).await;
    ctx.metrics.reconcile.observe(started.elapsed());
    ctx.spacing.ended(&key, planning, Instant::now());
    match &result {
        Ok(_) => {
            lock(&ctx.failures).remove(&key);
        }
        Err(e) => {
            ctx.metrics.reconciled("error");
            ctx.metrics.failed(e.metric_reason());
        }
    }
    result
}

/// One pass, as named steps: observe → plan → execute → report. Also returns how long observing and planning
/// took (the pass's spacing).
async fn pass(cached: &GameDeployment, ctx: &Context) -> (Result<Requeue, Error>, Duration) {
    let started = Instant::now();
    let mut snapshot = match observe(cached, ctx) {
        Ok(Observation::Ready(snapshot)) => snapshot,
        Ok(Observation::NotYet(requeue)) => return (Ok(requeue), started.elapsed()),
        Err(e) => return (Err(e), started.elapsed()),
    };
    let mut plan = plan_with_current_templates(ctx, &mut snapshot).await;
    let planning = started.elapsed();
    let outcome = execute(ctx, &mut snapshot, &mut plan).await;
    (report(ctx, &snapshot, &plan, outcome).await, planning)
}

/// The plan, made from the HookTemplates the API server holds whenever it creates HookRuns
/// ([`template_freshness`]): planned again if the cache is behind; without its run creations (and a look again
/// within a second) if the templates cannot be read.
async fn plan_with_current_templates(ctx: &Context, snapshot: &mut Snapshot) -> Plan {
    let creates_run = |a: &crate::action::Action| matches!(a, crate::action::Action::CreateHookRun(_));
    let first = plan(snapshot, &ctx.keys);
    if !first.actions.iter().any(creates_run) {
        return first;
    }
    match template_freshness::check(&ctx.client, &snapshot.namespace, &snapshot.gd, &snapshot.hook_templates).await {
        Ok(template_freshness::Freshness::Current) => first,
        Ok(template_freshness::Freshness::Behind(templates)) => {
            tracing::info!(gamedeployment = %snapshot.key, "the HookTemplate cache is behind the API server: planning with the templates as read");
            ctx.metrics.hook_templates_behind.inc();
            snapshot.hook_templates = templates;
            plan(snapshot, &ctx.keys)
        }
        Err(e) if template_freshness::read_failed(&e) == template_freshness::ReadFailed::UseTheCache => {
            tracing::warn!(gamedeployment = %snapshot.key, error = %e, "reading the HookTemplates is forbidden: HookRuns are built from the cache, which may lag a template edit (grant get on hooktemplates, as the chart does)");
            first
        }
        Err(e) => {
            tracing::warn!(gamedeployment = %snapshot.key, error = %e, "reading the HookTemplates failed: no HookRun is created in this pass");
            ctx.metrics.hook_template_reads_failed.inc();
            let mut plan = first;
            plan.actions.retain(|a| !creates_run(a));
            let soon = Duration::from_secs(1);
            plan.requeue_after = Some(plan.requeue_after.map_or(soon, |r| r.min(soon)));
            plan
        }
    }
}

/// What a pass observed: the GameDeployment as the planner should see it and the cached objects of its
/// namespace.
struct Snapshot {
    key: String,
    namespace: String,
    gd: GameDeployment,
    /// The resourceVersion the status is written against.
    write_rv: Option<String>,
    /// The status the API holds (our last write); `gd.status` may be a newer one waiting to be written.
    written_status: Option<GameDeploymentStatus>,
    pods: Vec<Arc<Pod>>,
    revisions: Vec<Arc<ControllerRevision>>,
    hook_runs: Vec<Arc<HookRun>>,
    hook_templates: Vec<HookTemplate>,
    node_costs: BTreeMap<String, f64>,
    claims: Vec<Arc<PersistentVolumeClaim>>,
}

enum Observation {
    Ready(Box<Snapshot>),
    /// Nothing to plan now (caches not synced, our writes not visible yet, the GameDeployment is being deleted).
    NotYet(Requeue),
}

/// Observe: the GameDeployment (with our own last status write), and the caches — only once they hold the
/// first full list and show every write of earlier passes (expectations).
fn observe(cached: &GameDeployment, ctx: &Context) -> Result<Observation, Error> {
    let key = key_of(cached);
    let (gd, write_rv, written_status) = ctx.effective(&key, cached);
    let namespace = gd.namespace().ok_or_else(|| Error::NoNamespace(gd.name_any()))?;
    if !ctx.synced.load(Ordering::Acquire) {
        // Planning from a half-filled cache would create pods that exist; the first list is moments away.
        ctx.metrics.reconciled("waiting");
        return Ok(Observation::NotYet(Requeue::requeue(Duration::from_millis(250))));
    }
    let expired = ctx.expectations.expire(Instant::now());
    ctx.metrics.expectations_expired.inc_by(u64::try_from(expired).unwrap_or(0));
    report_unguarded_deletions(ctx, &gd, &namespace);

    if gd.metadata.deletion_timestamp.is_some() {
        ctx.forget(&namespace, &gd.name_any());
        ctx.metrics.reconciled("skipped");
        return Ok(Observation::NotYet(Requeue::await_change()));
    }

    let in_namespace = |ns: Option<String>| ns.as_deref() == Some(namespace.as_str());
    let pods: Vec<Arc<Pod>> = ctx.pods.state().into_iter().filter(|p| in_namespace(p.namespace())).collect();
    let revisions: Vec<Arc<ControllerRevision>> = ctx
        .revisions
        .state()
        .into_iter()
        .filter(|r| in_namespace(r.namespace()))
        .filter(|r| crate::revision::is_of(r, &gd))
        .collect();
    {
        let pod_refs: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
        let revision_refs: Vec<&ControllerRevision> = revisions.iter().map(AsRef::as_ref).collect();
        match ctx.expectations.check(&key, &pod_refs, &revision_refs, Instant::now()) {
            Check::Satisfied { expired } => {
                if expired > 0 {
                    ctx.metrics.expectations_expired.inc_by(u64::try_from(expired).unwrap_or(0));
                    tracing::warn!(gamedeployment = %key, expired, "writes never showed up in the cache; planning anyway");
                }
            }
            Check::Waiting { outstanding, retry_after } => {
                tracing::debug!(gamedeployment = %key, outstanding, "waiting for the cache to show our writes");
                ctx.metrics.reconciled("waiting");
                return Ok(Observation::NotYet(Requeue::requeue(retry_after)));
            }
        }
    }
    // Shared with the cache, not copied: a roll of thousands of pods keeps about a thousand runs alive.
    let cached_runs: Vec<Arc<HookRun>> =
        ctx.hook_runs.state().into_iter().filter(|r| in_namespace(r.namespace())).collect();
    let hook_runs = ctx.hookrun_expectations.apply(&namespace, cached_runs);
    let hook_templates: Vec<HookTemplate> =
        ctx.hook_templates.state().iter().filter(|t| in_namespace(t.namespace())).map(|t| t.as_ref().clone()).collect();
    if !gd.spec.volume_claim_templates.is_empty() && !ctx.claims_synced.load(Ordering::Acquire) {
        // Without the claims, a pod gone out of band would get fresh claims instead of its own.
        ctx.metrics.reconciled("waiting");
        return Ok(Observation::NotYet(Requeue::requeue(Duration::from_secs(1))));
    }
    let claims: Vec<Arc<PersistentVolumeClaim>> = ctx
        .claims
        .state()
        .into_iter()
        .filter(|c| in_namespace(c.namespace()))
        .filter(|c| {
            ownership::controller_of(c.metadata.owner_references.as_ref())
                .is_some_and(|o| ownership::is_owned_by(o, &gd))
        })
        .collect();
    Ok(Observation::Ready(Box::new(Snapshot {
        key,
        namespace,
        gd,
        write_rv,
        written_status,
        pods,
        revisions,
        hook_runs,
        hook_templates,
        node_costs: ctx.node_costs(),
        claims,
    })))
}

/// A Warning Event, once per pod, for pods of `gd` someone else deleted while a pre-delete hook is configured.
fn report_unguarded_deletions(ctx: &Context, gd: &GameDeployment, namespace: &str) {
    let pods_of_all = ctx.pods.state();
    let pods: Vec<&Pod> =
        pods_of_all.iter().map(AsRef::as_ref).filter(|p| p.metadata.namespace.as_deref() == Some(namespace)).collect();
    let mut deleted = lock(&ctx.deleted);
    let found: Vec<&Pod> = deletions::unguarded(gd, pods.iter().copied(), &deleted.ours, ctx.started);
    let regarding = gd.object_ref(&());
    for pod in found {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if deleted.reported.insert(uid) {
            let event = deletions::event(gd, pod);
            ctx.events.publish_related(&regarding, related(&event, namespace), note(&event));
        }
    }
    // Forget pods that are gone (of every namespace this pass can see: the cache is namespace-wide). Nothing to
    // forget in an in-place roll: no set of every pod's UID then.
    let Deletions { ours, reported } = &mut *deleted;
    if ours.is_empty() && reported.is_empty() {
        return;
    }
    let all: HashSet<&str> = pods_of_all.iter().filter_map(|p| p.metadata.uid.as_deref()).collect();
    reported.retain(|u| all.contains(u.as_str()));
    ours.retain(|u| all.contains(u.as_str()));
}

/// Plan: the pure planner on the snapshot.
fn plan(snapshot: &Snapshot, keys: &Keyring) -> Plan {
    let observed = Observed {
        gd: &snapshot.gd,
        pods: snapshot.pods.iter().map(AsRef::as_ref).collect(),
        revisions: snapshot.revisions.iter().map(AsRef::as_ref).collect(),
        node_costs: &snapshot.node_costs,
        now: Timestamp::now(),
        seed: random_seed(),
        hook_runs: &snapshot.hook_runs,
        hook_templates: &snapshot.hook_templates,
        claims: snapshot.claims.iter().map(AsRef::as_ref).collect(),
        keys,
    };
    planner::plan(&observed)
}

/// Execute: send the plan's actions.
/// The executor takes the snapshot's pods (nothing after it reads them) and lets them go once the pod writes are
/// sent, and the plan's HookRuns to create (the report reads the plan's status, events and held pods, not them).
async fn execute(ctx: &Context, snapshot: &mut Snapshot, plan: &mut Plan) -> execute::WriteOutcome {
    let update_revision = plan.status.update_revision.clone().unwrap_or_default();
    let pods = std::mem::take(&mut snapshot.pods);
    let writes = cluster_writes::ApiWrites::new(ctx.client.clone(), &snapshot.namespace);
    let cached_run = |run: &HookRun| {
        ctx.hook_runs.get(&ObjectRef::from_obj(run)).is_some_and(|cached| cached.metadata.uid == run.metadata.uid)
    };
    let ledger = ledger::Ledger {
        expectations: &ctx.expectations,
        hook_runs: &ctx.hookrun_expectations,
        metrics: &ctx.metrics,
        deleting: ctx,
        collection_deletes: &ctx.collection_deletes,
        write_concurrency: ctx.config.write_concurrency,
        cached_run: Some(&cached_run),
    };
    let executor = execute::Executor::new(
        &writes,
        &ledger,
        &snapshot.gd,
        &snapshot.key,
        pods,
        &snapshot.hook_runs,
        &update_revision,
    );
    executor.run(plan).await
}

/// What the report does with the status a pass computed.
#[derive(Debug, PartialEq, Eq)]
enum StatusWrite {
    /// The API holds it already: no write, and nothing waits.
    Unchanged,
    /// Only progress every pass recomputes changed ([`status::must_write_now`]) and a status write went out less
    /// than `--status-write-interval` ago: the status waits this long for the next write.
    Defer(Duration),
    /// Written in this pass.
    Now,
}

/// Whether `status` is written now, waits, or needs no write, given the status the API holds (`written`, our
/// last write) and when the last write of this GameDeployment went out.
fn status_write(
    written: Option<&GameDeploymentStatus>,
    status: &GameDeploymentStatus,
    last_write: Option<Instant>,
    interval: Duration,
    now: Instant,
) -> StatusWrite {
    if written == Some(status) {
        return StatusWrite::Unchanged;
    }
    let none = GameDeploymentStatus::default();
    let wait = match last_write {
        Some(at) if !status::must_write_now(written.unwrap_or(&none), status) => {
            interval.checked_sub(now.saturating_duration_since(at))
        }
        _ => None,
    };
    wait.filter(|w| !w.is_zero()).map_or(StatusWrite::Now, StatusWrite::Defer)
}

/// Report: the status with what the writes did, the Events, the status write (only when it changed), and when
/// to look again.
async fn report(
    ctx: &Context,
    snapshot: &Snapshot,
    plan: &Plan,
    outcome: execute::WriteOutcome,
) -> Result<Requeue, Error> {
    let gd = &snapshot.gd;
    let key = snapshot.key.clone();
    let mut status = plan.status.clone();
    if outcome.collision {
        status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
    }
    status::apply_write_outcome(&mut status, &outcome.failures, &outcome.succeeded, Timestamp::now());
    ctx.show(snapshot, plan);
    let regarding = gd.object_ref(&());
    for event in plan.events.iter().chain(outcome.events.iter()) {
        ctx.events.publish_related(&regarding, related(event, &snapshot.namespace), note(event));
    }

    let mut status_due: Option<Duration> = None;
    let now = Instant::now();
    let last_write = lock(&ctx.paces).get(&key).and_then(|p| p.last_write);
    match status_write(snapshot.written_status.as_ref(), &status, last_write, ctx.config.status_write_interval, now) {
        StatusWrite::Unchanged => {
            // Back to what the API holds: nothing waits.
            if let Some(pace) = lock(&ctx.paces).get_mut(&key) {
                pace.waiting = None;
            }
        }
        StatusWrite::Defer(wait) => {
            lock(&ctx.paces).entry(key.clone()).or_default().waiting = Some(status);
            ctx.metrics.status_writes_deferred.inc();
            status_due = Some(wait);
        }
        StatusWrite::Now => {
            let mut updated = gd.clone();
            updated.status = Some(status.clone());
            updated.metadata.managed_fields = None;
            updated.metadata.resource_version = snapshot.write_rv.clone();
            let api: Api<GameDeployment> = Api::namespaced(ctx.client.clone(), &snapshot.namespace);
            let result = api.replace_status(&gd.name_any(), &PostParams::default(), &updated).await;
            {
                let mut paces = lock(&ctx.paces);
                let pace = paces.entry(key.clone()).or_default();
                pace.last_write = Some(now);
                pace.waiting = None;
            }
            match result {
                Ok(written) => {
                    ctx.metrics.status_writes.inc();
                    ctx.record_written(&key, written.metadata.resource_version, status);
                }
                // Our cached GameDeployment is stale (a user edit or our previous status write is on its way):
                // the watch event brings the fresh one; look again shortly in case it does not trigger a pass.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    ctx.metrics.reconciled("conflict");
                    return Ok(Requeue::requeue(Duration::from_millis(500)));
                }
                Err(source) => return Err(Error::WriteStatus { key, source }),
            }
        }
    }

    if let Some((_, first)) = outcome.failures.first() {
        return Err(Error::Writes { key, count: outcome.failures.len(), first: first.clone() });
    }
    ctx.metrics.reconciled("success");
    if outcome.collision || outcome.stale > 0 {
        return Ok(Requeue::requeue(Duration::from_millis(200)));
    }
    let after = match (plan.requeue_after, status_due) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(after.map_or_else(Requeue::await_change, Requeue::requeue))
}

fn error_policy(gd: Arc<GameDeployment>, error: &Error, ctx: Arc<Context>) -> Requeue {
    let key = key_of(&gd);
    let failures = {
        let mut map = lock(&ctx.failures);
        let n = map.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    // 250 ms, 500 ms, 1 s ... capped at 2 minutes.
    let delay = Duration::from_millis(250)
        .saturating_mul(1u32 << failures.min(9).saturating_sub(1))
        .min(Duration::from_secs(120));
    tracing::warn!(gamedeployment = %key, error = %error, retry_in = ?delay, "reconcile failed");
    Requeue::requeue(delay)
}

/// Maps a pod event to the GameDeployments that care: its controller, or (for an orphan) every GameDeployment
/// of its namespace whose selector matches it.
fn pod_owners(pod: &Pod, gds: &Store<GameDeployment>) -> Vec<ObjectRef<GameDeployment>> {
    let namespace = pod.namespace().unwrap_or_default();
    if let Some(owner) = ownership::controller_of(pod.metadata.owner_references.as_ref()) {
        if owner.kind == ownership::OWNER_KIND && owner.api_version.starts_with("tkex.tencent.com/") {
            return vec![ObjectRef::new(&owner.name).within(&namespace)];
        }
        return Vec::new();
    }
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    gds.state()
        .iter()
        .filter(|gd| gd.namespace().as_deref() == Some(&namespace))
        .filter(|gd| ownership::validate_selector(gd).is_ok() && ownership::selector_matches(&gd.spec.selector, labels))
        .map(|gd| ObjectRef::from_obj(gd.as_ref()))
        .collect()
}

/// GameDeployments of the template's namespace that name it in a hook (creating a missing template unblocks them
/// at once; changing one matters to runs created from now on).
fn template_users(template: &HookTemplate, gds: &Store<GameDeployment>) -> Vec<ObjectRef<GameDeployment>> {
    let namespace = template.namespace().unwrap_or_default();
    let name = template.name_any();
    gds.state()
        .iter()
        .filter(|gd| gd.namespace().as_deref() == Some(&namespace))
        .filter(|gd| gd.spec.hook_template_names().any(|t| t == name))
        .map(|gd| ObjectRef::from_obj(gd.as_ref()))
        .collect()
}

/// The event's `related` object reference (same namespace as the GameDeployment).
fn related(event: &PlannedEvent, namespace: &str) -> Option<k8s_openapi::api::core::v1::ObjectReference> {
    let r = event.related.as_ref()?;
    Some(k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(r.api_version.to_string()),
        kind: Some(r.kind.to_string()),
        name: Some(r.name.clone()),
        namespace: Some(namespace.to_string()),
        uid: r.uid.clone(),
        ..Default::default()
    })
}

/// A planned event as the Events API gets it (the reason doubles as the action).
fn note(event: &PlannedEvent) -> Note {
    Note {
        warning: event.type_ == EventType::Warning,
        reason: event.reason.clone(),
        message: event.message.clone(),
        action: event.reason.clone(),
    }
}

/// [`orphans::label_revisions`], retried every 2 s until it succeeds (the controller does not plan before: a
/// revision out of view would be created again).
async fn label_revisions_until_done(client: &Client, namespace: Option<&str>) -> Vec<ObjectRef<ControllerRevision>> {
    loop {
        match orphans::label_revisions(client, namespace).await {
            Ok(labelled) => return labelled,
            Err(e) => {
                tracing::warn!(error = %e, "labelling the revisions of GameDeployments failed; retrying in 2 s");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// A background task that ends with the controller, even when the controller's future is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Marks the caches synced and calls `on_ready` once the pod, revision, HookRun and HookTemplate caches hold their
/// first full list and every revision labelled for the watch shows in it. The only waiter on these stores (the
/// controller itself waits on the GameDeployment store).
fn caches_synced(
    ctx: &Context,
    namespace: Option<String>,
    on_ready: impl FnOnce() + Send + 'static,
) -> impl future::Future<Output = ()> + Send + 'static {
    let (pods, revisions) = (ctx.pods.clone(), ctx.revisions.clone());
    let (runs, templates) = (ctx.hook_runs.clone(), ctx.hook_templates.clone());
    let (client, synced) = (ctx.client.clone(), ctx.synced.clone());
    async move {
        let (p, r) = future::join(pods.wait_until_ready(), revisions.wait_until_ready()).await;
        let (h, t) = future::join(runs.wait_until_ready(), templates.wait_until_ready()).await;
        let labelled = label_revisions_until_done(&client, namespace.as_deref()).await;
        // The watch shows a revision once it carries the label: plan only when every one labelled is there.
        let shown = || labelled.iter().all(|r| revisions.get(r).is_some());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !shown() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if p.is_ok() && r.is_ok() && h.is_ok() && t.is_ok() {
            tracing::info!("caches synced");
            synced.store(true, Ordering::Release);
            on_ready();
        }
    }
}

/// Keeps `gamedeployment_rollout_stuck_seconds` growing between passes, and drops the series of GameDeployments
/// that are gone (a deleted object gets no pass).
async fn refresh_rollout_metrics(ctx: Arc<Context>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        for (namespace, name, stuck) in ctx.rollouts.stuck(Instant::now()) {
            if ctx.gds.get(&ObjectRef::new(&name).within(&namespace)).is_none() {
                ctx.forget(&namespace, &name);
                continue;
            }
            ctx.metrics.rollout_stuck_seconds.get_or_create(&WorkloadLabels { namespace, name }).set(stuck);
        }
    }
}

/// Runs the controller until `shutdown` resolves. `on_ready` is called once the caches are filled.
pub async fn run(
    client: Client,
    config: Config,
    metrics: Metrics,
    reporter: Reporter,
    shutdown: impl future::Future<Output = ()> + Send + Sync + 'static,
    on_ready: impl FnOnce() + Send + 'static,
) {
    // This function runs only while this replica leads (or when leader election is off): `gamedeployment_leader`
    // is 1 until `_leading` drops.
    let _leading = metrics.operator.leading();
    let keys = match config.hookrun_keys.clone() {
        Some(keys) => keys,
        None => match Keyring::generate() {
            Ok((keys, _)) => Arc::new(keys),
            Err(e) => {
                tracing::error!(error = %e, "no key to sign HookRuns with: not reconciling");
                return;
            }
        },
    };
    let namespace = config.namespace.as_deref();
    // GameDeployments that changed, told to the adoption scan and the pod-gate labeller, which read the caches below
    // instead of watching on their own (one cache per kind).
    let (orphan_tx, orphan_rx) = mpsc::unbounded_channel();
    let (label_tx, label_rx) = match config.pod_gate_labels {
        true => {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        }
        false => (None, None),
    };
    let listeners = watches::GdListeners { orphans: orphan_tx, labeller: label_tx.clone() };
    let (gd_reader, gd_stream) = watches::game_deployments(&client, namespace, listeners);
    let (pod_reader, pod_stream) = watches::pods(&client, namespace, label_tx);
    let (revision_reader, revision_stream) = watches::revisions(&client, namespace);
    let (hook_run_reader, hook_run_stream) = watches::hook_runs(&client, namespace);
    let (template_reader, template_stream) = watches::hook_templates(&client, namespace);
    let (claim_reader, claim_stream) = watches::claims(&client, namespace);
    let nodes = watches::node_costs(&client, config.node_costs);

    let events = EventSink::start_with(
        client.clone(),
        reporter,
        EventSettings { capacity: config.event_queue, ..EventSettings::default() },
        metrics.operator.events.clone(),
    );
    let synced = Arc::new(AtomicBool::new(false));
    let claims_synced = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let (claims, synced) = (claim_reader.clone(), claims_synced.clone());
        async move {
            if claims.wait_until_ready().await.is_ok() {
                synced.store(true, Ordering::Release);
            }
        }
    });
    let ctx = Arc::new(Context {
        client,
        keys,
        gds: gd_reader.clone(),
        spacing: pass_pacing::PassSpacing::new(config.pass_spacing),
        pods: pod_reader.clone(),
        revisions: revision_reader.clone(),
        hook_runs: hook_run_reader.clone(),
        hook_templates: template_reader.clone(),
        claims: claim_reader.clone(),
        claims_synced: claims_synced.clone(),
        hookrun_expectations: HookRunExpectations::new(config.expectations_timeout),
        nodes,
        expectations: Expectations::new(config.expectations_timeout),
        metrics,
        events,
        config: config.clone(),
        failures: Mutex::new(HashMap::new()),
        rollouts: RolloutClock::default(),
        counted_runs: Mutex::new(HashMap::new()),
        written: Mutex::new(HashMap::new()),
        paces: Mutex::new(HashMap::new()),
        deleted: Mutex::new(Deletions::default()),
        started: Timestamp::now(),
        collection_deletes: AtomicBool::new(true),
        synced: synced.clone(),
    });

    tokio::spawn(caches_synced(&ctx, config.namespace.clone(), on_ready));

    let _refresher = AbortOnDrop(tokio::spawn(refresh_rollout_metrics(ctx.clone())));
    let _orphans = AbortOnDrop(tokio::spawn(orphans::run(
        ctx.client.clone(),
        gd_reader.clone(),
        config.adoption_scan_interval,
        orphan_rx,
    )));
    let _labeller = label_rx.map(|rx| {
        AbortOnDrop(tokio::spawn(labeller::run(ctx.client.clone(), gd_reader.clone(), pod_reader.clone(), rx)))
    });
    let gone = ctx.clone();
    let mapper_store = gd_reader.clone();
    let template_store = gd_reader.clone();
    Controller::for_stream(gd_stream, gd_reader)
        .with_config(ControllerConfig::default().concurrency(config.concurrency).debounce(config.debounce))
        .watches_stream(pod_stream, move |pod: Pod| pod_owners(&pod, &mapper_store))
        .owns_stream(revision_stream)
        .owns_stream(hook_run_stream)
        .owns_stream(claim_stream)
        .watches_stream(template_stream, move |t: HookTemplate| template_users(&t, &template_store))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            match result {
                Ok((object, _)) => tracing::trace!(gamedeployment = %object, "reconciled"),
                Err(kube::runtime::controller::Error::ObjectNotFound(object)) => {
                    gone.forget(object.namespace.as_deref().unwrap_or_default(), &object.name);
                    tracing::debug!(gamedeployment = %object, "gone before its pass");
                }
                Err(e) => tracing::debug!(error = %e, "controller"),
            }
            future::ready(())
        })
        .await;
}
