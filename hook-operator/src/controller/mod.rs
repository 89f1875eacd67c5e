//! The Kubernetes shell around the engine: a kube-runtime `Controller` on HookRuns. Each reconcile plans a
//! round, writes the status at most once (and only when it changed, with a resourceVersion precondition so
//! a stale cache cannot overwrite newer status), publishes Events, hands due measurements to the
//! dispatcher and requeues exactly at the next due time. Finished measurements wake their run through
//! `reconcile_on`.
//!
//! Beside it: [`shards`] (which replica acts on which runs) and `gc` (finished runs nobody owns).

pub(crate) mod gc;
pub mod shards;
pub(crate) mod terminate;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::api::{HookPhase, HookRun, HookTemplate};
use common::runtime::Shutdown;
use common::runtime::events::{EventSettings, EventSink, Note as EventNote};
use common::runtime::kube_api::api;
use common::runtime::lean::{self, LeanHookRun};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::dispatch::{Dispatcher, Round, RunId};
use crate::engine::Note;
use crate::engine::{schedule, validate};
use crate::metrics::{Metrics, PhaseLabels};
use crate::providers::Providers;
use crate::readiness::Readiness;
use crate::settings::EngineSettings;

/// The component name: the default Lease name (and the shard Leases' base name) and the Events' reporting
/// controller.
pub const COMPONENT: &str = "hook-operator";

/// Why a reconcile of one HookRun failed; the run is retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The run changed between the read and the status write: re-read and decide again.
    #[error("HookRun {namespace}/{name} changed since it was read (resourceVersion conflict); retrying")]
    Conflict {
        /// The HookRun's namespace.
        namespace: String,
        /// The HookRun's name.
        name: String,
    },
    /// The status write failed for another reason.
    #[error("writing the status of HookRun {namespace}/{name}: {source}")]
    WriteStatus {
        /// The HookRun's namespace.
        namespace: String,
        /// The HookRun's name.
        name: String,
        /// The API's error.
        source: kube::Error,
    },
}

impl Error {
    fn reason(&self) -> &'static str {
        match self {
            Self::Conflict { .. } => "conflict",
            Self::WriteStatus { .. } => "write_status",
        }
    }
}

/// What the controller is told to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Only this namespace (None: all).
    pub namespace: Option<String>,
    /// Only HookRuns matching this label selector (sharding between operator instances).
    pub label_selector: Option<String>,
    /// Concurrent reconciles (0: unbounded).
    pub concurrency: u16,
    /// Measurements running at once, across all runs.
    pub max_in_flight: usize,
    /// How runs are measured and judged (interval scale, history, limits).
    pub engine: EngineSettings,
    /// This replica's identity (the Lease holder, the shard member).
    pub identity: String,
    /// Share of the in-flight slots one namespace may hold, in percent.
    pub namespace_share_percent: u8,
    /// Least time between two status writes of a running run (phase changes are written at once).
    pub status_write_interval: Duration,
    /// Progress-only status writes per second for the whole process (0: unlimited); see `Dispatcher::write_now`.
    pub max_status_writes_per_second: u32,
    /// Finished ownerless runs are deleted this long after they finished (zero: never); see `gc`.
    pub finished_run_ttl: Duration,
    /// Deletes the collector sends per second at most.
    pub gc_deletes_per_second: u32,
    /// Automatic sharding (`--shards`): only runs of the shards held now are measured and written. None: all.
    pub shards: Option<Arc<shards::Ownership>>,
}

/// What every reconcile shares: the client, the dispatcher that runs measurements, metrics and Events.
pub struct Context {
    client: Client,
    shards: Option<Arc<shards::Ownership>>,
    dispatcher: Dispatcher,
    metrics: Arc<Metrics>,
    events: EventSink,
    /// When a `MeasurementError` Event was last published, per (run uid, metric): at most one a minute.
    error_events: std::sync::Mutex<std::collections::HashMap<(String, String), Instant>>,
}

/// Events waiting to be published at most; more are dropped and counted (`hook_operator_events_dropped_total`).
const EVENT_QUEUE: usize = 4096;

/// Least time between two `MeasurementError` Events of the same metric of a run.
const ERROR_EVENT_INTERVAL: Duration = Duration::from_secs(60);

impl Context {
    /// Whether this replica may act on `run` now (always without sharding).
    fn owns(&self, run: &HookRun) -> bool {
        self.shards.as_ref().is_none_or(|shards| shards.owns(run.metadata.uid.as_deref().unwrap_or_default()))
    }

    /// Whether a `MeasurementError` Event for this metric may be published now (and notes that it is).
    fn error_event_due(&self, uid: &str, metric: &str) -> bool {
        let mut last = self.error_events.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.len() > 10_000 {
            last.retain(|_, at| now.duration_since(*at) < ERROR_EVENT_INTERVAL);
        }
        let key = (uid.to_string(), metric.to_string());
        if last.get(&key).is_some_and(|at| now.duration_since(*at) < ERROR_EVENT_INTERVAL) {
            return false;
        }
        last.insert(key, now);
        true
    }
}

fn event_for(note: &Note) -> EventNote {
    let (warning, reason, note_text) = match note {
        Note::MetricCompleted { metric, phase, message } => (
            *phase != HookPhase::Successful,
            format!("Metric{phase}"),
            format!("metric {metric:?} completed {phase}: {message}"),
        ),
        Note::MeasurementError { metric, message } => (
            true,
            "MeasurementError".to_string(),
            format!("metric {metric:?}: a measurement failed (the run keeps retrying): {message}"),
        ),
        // A person (or a client) ended it: a Warning naming who (see `terminate`), whatever the phase.
        Note::RunCompleted { phase, message } if message.starts_with("terminated (spec.terminate)") => {
            (true, "HookRunTerminated".to_string(), format!("hook completed {phase}: {message}"))
        }
        Note::RunCompleted { phase, message } => {
            (*phase != HookPhase::Successful, format!("HookRun{phase}"), format!("hook completed {phase}: {message}"))
        }
    };
    EventNote { warning, reason, message: crate::text::excerpt(&note_text, 1000), action: "Assess".into() }
}

/// The Events of a round's notes. A run that completes Successful publishes one Event that also names the outcome
/// of each metric completing with it, instead of a `MetricSuccessful` Event per metric plus its own (at fleet scale
/// that was half of this operator's Events). `MetricSuccessful` stays for a metric that completes while others still
/// run, and every metric that does not succeed keeps its own Warning.
fn events_for(notes: &[&Note]) -> Vec<EventNote> {
    let run_succeeds = notes.iter().any(|n| matches!(n, Note::RunCompleted { phase: HookPhase::Successful, .. }));
    let mut folded = Vec::new();
    let mut events = Vec::new();
    for note in notes {
        match note {
            Note::MetricCompleted { metric, phase: HookPhase::Successful, message } if run_succeeds => {
                folded.push(format!("metric {metric:?}: {message}"));
            }
            Note::RunCompleted { phase: HookPhase::Successful, message } if !folded.is_empty() => {
                let message = format!("{message}; {}", folded.join("; "));
                events.push(event_for(&Note::RunCompleted { phase: HookPhase::Successful, message }));
            }
            other => events.push(event_for(other)),
        }
    }
    events
}

/// The merge patch of a status write, serialized straight from the planned status (no JSON tree in between).
#[derive(Debug, serde::Serialize)]
struct StatusPatch<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<VersionPrecondition<'a>>,
    status: &'a common::api::HookRunStatus,
}

#[derive(Debug, serde::Serialize)]
struct VersionPrecondition<'a> {
    #[serde(rename = "resourceVersion")]
    resource_version: &'a str,
}

async fn write_status(client: &Client, round: &Round) -> Result<HookRun, Error> {
    let (namespace, name) = (round.id.namespace.to_string(), round.id.name.to_string());
    let api: Api<HookRun> = Api::namespaced(client.clone(), &namespace);
    let body = StatusPatch {
        metadata: round.run.metadata.resource_version.as_deref().map(|rv| VersionPrecondition { resource_version: rv }),
        status: &round.plan.status,
    };
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body)).await.map_err(|source| match source {
        kube::Error::Api(status) if status.code == 409 => Error::Conflict { namespace, name },
        source => {
            Error::WriteStatus { namespace: round.id.namespace.to_string(), name: round.id.name.to_string(), source }
        }
    })
}

async fn reconcile(run: Arc<HookRun>, ctx: Arc<Context>) -> Result<Action, Error> {
    let clock = Instant::now();
    let outcome = reconcile_round(run, &ctx).await;
    ctx.metrics.reconcile.reconciled(if outcome.is_ok() { "success" } else { "error" });
    ctx.metrics.reconcile.observe(clock.elapsed());
    outcome
}

async fn reconcile_round(run: Arc<HookRun>, ctx: &Arc<Context>) -> Result<Action, Error> {
    if run.metadata.deletion_timestamp.is_some() {
        ctx.dispatcher.forget(&RunId::of(&run).uid);
        return Ok(Action::await_change());
    }
    if !ctx.owns(&run) {
        // Another replica's shard (or none held): nothing to do until the shard is ours.
        ctx.dispatcher.forget(&RunId::of(&run).uid);
        return Ok(Action::await_change());
    }
    // The object this process left stored, seen again before anything is due (usually the watch event of our own
    // status write): nothing to plan.
    if let Some(wake_at) = ctx.dispatcher.idle(&run, Timestamp::now()) {
        return Ok(requeue_at(wake_at));
    }
    let mut round = ctx.dispatcher.plan(run, Timestamp::now());
    if round.changed && round.plan.completed {
        name_terminator(ctx, &mut round).await;
    }
    // Coalesced writes (`Dispatcher::write_now`): phase changes, completions and measurements that were not Successful
    // (with the counters they move) at once, so they are stored before `commit` below starts the next measurement;
    // successes of a running run at most once per --status-write-interval per run and --max-status-writes-per-second
    // for the process, oldest waiting first. Successes that wait are recorded in memory and the due measurements start
    // anyway; a restart meanwhile measures them again. A failed write commits nothing: the next round writes again.
    let written = if round.changed && ctx.dispatcher.write_now(&round) {
        // The shard's fence again, right before the write (planning took a moment).
        if !ctx.owns(&round.run) {
            ctx.dispatcher.forget(&round.id.uid);
            return Ok(Action::await_change());
        }
        ctx.metrics.status_writes.inc();
        Some(Arc::new(write_status(&ctx.client, &round).await?))
    } else {
        None
    };
    if round.changed && written.is_none() {
        ctx.dispatcher.commit_unwritten(&mut round);
    } else {
        ctx.dispatcher.commit(&round, written.clone());
    }
    publish(ctx, &round, written.as_deref());
    let (completed, wake_at) = (round.plan.completed, round.plan.wake_at);
    ctx.dispatcher.recycle(&round.id, round.plan);
    if completed {
        return Ok(Action::await_change());
    }
    Ok(requeue_at(wake_at))
}

/// A run completing because of `spec.terminate` names who set it, in its message and its Event ([`terminate`]): one
/// read of the run with its `managedFields`, only then. Without an answer the completion goes as planned.
async fn name_terminator(ctx: &Arc<Context>, round: &mut Round) {
    const TERMINATED: &str = "terminated (spec.terminate)";
    if !round.run.spec.terminate || round.plan.status.message.as_deref() != Some(TERMINATED) {
        return;
    }
    let api: Api<HookRun> = Api::namespaced(ctx.client.clone(), &round.id.namespace);
    let by = match api.get(&round.id.name).await {
        Ok(run) => terminate::terminated_by(run.metadata.managed_fields.as_deref().unwrap_or_default()),
        Err(e) => {
            tracing::warn!(run = %round.id.name, namespace = %round.id.namespace, error = %e,
                "reading who terminated the run failed; its completion does not name them");
            None
        }
    };
    let message = terminate::name_in(TERMINATED, by.as_deref());
    round.plan.status.message = Some(message.clone());
    for note in &mut round.plan.notes {
        if let Note::RunCompleted { message: note, .. } = note {
            *note = message.clone();
        }
    }
}

/// The round's notes: Events on the object as written (or as planned on), a measurement error only when
/// [`Context::error_event_due`] allows it, and a log line for a completed run.
fn publish(ctx: &Arc<Context>, round: &Round, written: Option<&HookRun>) {
    if round.plan.notes.is_empty() {
        return;
    }
    let reference = written.unwrap_or(&round.run).object_ref(&());
    let notes: Vec<&Note> = round
        .plan
        .notes
        .iter()
        .filter(|note| match note {
            Note::MeasurementError { metric, .. } => ctx.error_event_due(&round.id.uid, metric),
            _ => true,
        })
        .collect();
    let events = events_for(&notes);
    for note in &round.plan.notes {
        if let Note::RunCompleted { phase, message } = note {
            tracing::info!(run = %round.id.name, namespace = %round.id.namespace, %phase, %message, "HookRun completed");
        }
    }
    // Queued on the bounded sink (a full queue drops and counts them, never waits, never spawns a task).
    for event in events {
        ctx.events.queue(&reference, event);
    }
}

fn requeue_at(wake_at: Option<Timestamp>) -> Action {
    match wake_at {
        Some(at) => Action::requeue(schedule::until(Timestamp::now(), at).max(Duration::from_millis(1))),
        None => Action::await_change(),
    }
}

fn error_policy(run: Arc<HookRun>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_error(error.reason());
    match error {
        // The watch event with the newer object is on its way; look again shortly.
        Error::Conflict { .. } => {
            tracing::debug!(run = %run.name_any(), "status write conflict, retrying");
            Action::requeue(Duration::from_millis(200))
        }
        Error::WriteStatus { .. } => {
            tracing::warn!(error = %error, "reconcile failed");
            Action::requeue(Duration::from_secs(2))
        }
    }
}

/// Validates HookTemplates whenever they change and reports problems as Warning Events on the template.
async fn watch_templates(
    client: Client,
    namespace: Option<String>,
    events: EventSink,
    metrics: Arc<Metrics>,
    settings: EngineSettings,
) {
    let api: Api<HookTemplate> = api(&client, namespace.as_deref());
    let mut seen: std::collections::HashMap<String, (Option<i64>, bool)> = std::collections::HashMap::new();
    let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        let template = match event {
            Ok(watcher::Event::Apply(t) | watcher::Event::InitApply(t)) => t,
            Ok(watcher::Event::Delete(t)) => {
                seen.remove(&t.uid().unwrap_or_default());
                metrics.invalid_templates.set(seen.values().filter(|(_, bad)| *bad).count() as i64);
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "watching HookTemplates failed; retrying");
                continue;
            }
        };
        let uid = template.uid().unwrap_or_default();
        let generation = template.metadata.generation;
        if seen.get(&uid).is_some_and(|(g, _)| *g == generation && generation.is_some()) {
            continue;
        }
        let problems = validate::template(&template.spec);
        let warnings = validate::template_warnings(&template.spec, &settings);
        seen.insert(uid, (generation, !problems.is_empty()));
        metrics.invalid_templates.set(seen.values().filter(|(_, bad)| *bad).count() as i64);
        if problems.is_empty() && warnings.is_empty() {
            continue;
        }
        let reason = if problems.is_empty() { "HookTemplateWarning" } else { "InvalidHookTemplate" };
        let text = problems.into_iter().chain(warnings).collect::<Vec<_>>().join("; ");
        tracing::warn!(template = %template.name_any(), namespace = ?template.namespace(), problems = %text, "invalid HookTemplate");
        let event = EventNote {
            warning: true,
            reason: reason.into(),
            message: crate::text::excerpt(&text, 1000),
            action: "Validate".into(),
        };
        events.queue(&template.object_ref(&()), event);
    }
}

/// Keeps the `hookruns{phase}` gauge current and forgets runs that disappeared.
async fn housekeeping(store: Store<HookRun>, dispatcher: Dispatcher, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        let runs = store.state();
        let mut counts: std::collections::HashMap<&'static str, i64> = std::collections::HashMap::new();
        let mut uids = HashSet::new();
        for run in &runs {
            let phase = run.status.as_ref().and_then(|s| s.phase).map(HookPhase::as_str).unwrap_or("New");
            *counts.entry(phase).or_default() += 1;
            uids.insert(RunId::of(run).uid);
        }
        for phase in ["New", "Pending", "Running", "Successful", "Failed", "Error", "Inconclusive"] {
            metrics
                .hookruns
                .get_or_create(&PhaseLabels { phase: phase.into() })
                .set(counts.get(phase).copied().unwrap_or(0));
        }
        if !runs.is_empty() || dispatcher.tracked_runs() > 0 {
            dispatcher.retain(|uid| uids.contains(uid));
        }
    }
}

/// Deletes finished ownerless runs once their TTL has passed (see [`gc`]), at most `rate` deletes a
/// second. Each delete is preconditioned on the run's uid; a run already gone (404) or replaced (409) is skipped.
async fn collect_finished_runs(
    client: Client,
    store: Store<HookRun>,
    ttl: Duration,
    rate: u32,
    metrics: Arc<Metrics>,
    shards: Option<Arc<shards::Ownership>>,
) {
    if ttl.is_zero() {
        return;
    }
    let mut pace = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::time::sleep(gc::scan_period(ttl)).await;
        let runs = store.state();
        let ours = runs
            .iter()
            .map(|r| r.as_ref())
            .filter(|r| shards.as_ref().is_none_or(|s| s.owns(r.metadata.uid.as_deref().unwrap_or_default())));
        for expired in gc::expired(ours, Timestamp::now(), ttl) {
            pace.tick().await;
            let api: Api<HookRun> = Api::namespaced(client.clone(), &expired.namespace);
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(expired.uid.clone()), resource_version: None }),
                ..DeleteParams::default()
            };
            match api.delete(&expired.name, &params).await {
                Ok(_) => {
                    metrics.runs_collected.inc();
                    tracing::debug!(run = %expired.name, namespace = %expired.namespace, "deleted a finished HookRun past its TTL");
                }
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                Err(e) => tracing::warn!(run = %expired.name, namespace = %expired.namespace, error = %e,
                    "deleting a finished HookRun past its TTL failed; retrying at the next scan"),
            }
        }
    }
}

/// Follows the shards this replica holds: on a newly held shard every run of it is reconciled (it may have
/// been waiting since its previous owner died); on a shard no longer held (lost, given up, or past its fencing
/// deadline) its measurements are cancelled and its runs forgotten, unwritten results included (the new owner
/// takes them again).
async fn follow_shards(
    shards: Arc<shards::Ownership>,
    store: Store<HookRun>,
    dispatcher: Dispatcher,
    wake: crate::dispatch::Wake,
) {
    let mut held: HashSet<u32> = HashSet::new();
    loop {
        let changed = shards.changed();
        let now: HashSet<u32> = shards.held().into_iter().collect();
        let lost: HashSet<u32> = held.difference(&now).copied().collect();
        if !lost.is_empty() {
            dispatcher.retain(|uid| !lost.contains(&shards.shard_of(uid)));
        }
        let gained: HashSet<u32> = now.difference(&held).copied().collect();
        if !gained.is_empty() {
            for run in store.state() {
                if gained.contains(&shards.shard_of(run.metadata.uid.as_deref().unwrap_or_default())) {
                    wake(&RunId::of(&run));
                }
            }
        }
        held = now;
        changed.await;
    }
}

/// Whether a measurement of a run may start now: the run still exists (the same uid in the cache: a measurement
/// armed before the run was deleted must not probe its endpoint afterwards) and, with sharding, its shard is held.
fn fence(store: Store<HookRun>, shards: Option<Arc<shards::Ownership>>) -> crate::dispatch::Fence {
    Arc::new(move |id: &RunId| {
        let present = store
            .get(&ObjectRef::new(&id.name).within(&id.namespace))
            .is_some_and(|run| run.metadata.uid.as_deref() == Some(&*id.uid));
        present && shards.as_ref().is_none_or(|shards| shards.owns(&id.uid))
    })
}

/// Runs the controller until `shutdown`.
pub async fn run(
    client: Client,
    options: Options,
    providers: Arc<Providers>,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: Shutdown,
) {
    let (wake_tx, wake_rx) = mpsc::unbounded_channel::<ObjectRef<HookRun>>();
    let wake: crate::dispatch::Wake = Arc::new(move |id: &RunId| {
        let _ = wake_tx.send(ObjectRef::new(&id.name).within(&id.namespace));
    });
    let wake_all = wake.clone();
    let reporter = Reporter { controller: COMPONENT.into(), instance: Some(options.identity.clone()) };
    let events = EventSink::start_with(
        client.clone(),
        reporter,
        EventSettings { capacity: EVENT_QUEUE, ..EventSettings::default() },
        metrics.operator.events.clone(),
    );

    let mut watch_config = watcher::Config::default();
    if let Some(selector) = &options.label_selector {
        watch_config = watch_config.labels(selector);
    }
    // Runs decoded without their managedFields (`lean`): the cache never holds that field, and it is never built.
    let runs = api::<LeanHookRun>(&client, options.namespace.as_deref());
    let (store, writer) = kube::runtime::reflector::store::<HookRun>();
    // Ready once the store holds the initial list: seen on the stream itself, after the reflector applied it.
    // (`Store::wait_until_ready` cannot be used here: the Controller waits on the same one-shot channel, which wakes
    // only its most recent waiter, so a second waiter never woke and the operator never became Ready.)
    let synced = readiness.clone();
    let run_stream = watcher(runs, watch_config)
        .default_backoff()
        .map_ok(lean::full_event)
        .reflect(writer)
        .inspect_ok(move |event| {
            if matches!(event, watcher::Event::InitDone) && !synced.has_synced() {
                synced.cache_synced(true);
                tracing::info!("HookRun cache synced; ready");
            }
        })
        .applied_objects();
    let controller = Controller::for_stream(run_stream, store)
        .with_config(ControllerConfig::default().concurrency(options.concurrency))
        .reconcile_on(tokio_stream_from(wake_rx))
        .graceful_shutdown_on({
            let shutdown = shutdown.clone();
            async move { shutdown.wait().await }
        });
    let store = controller.store();
    let dispatcher = Dispatcher::new(providers, metrics.clone(), options.engine.clone(), options.max_in_flight, wake)
        .with_namespace_share(options.namespace_share_percent)
        .with_status_writes(options.status_write_interval, options.max_status_writes_per_second)
        .with_fence(fence(store.clone(), options.shards.clone()));
    let context = Arc::new(Context {
        client: client.clone(),
        shards: options.shards.clone(),
        dispatcher: dispatcher.clone(),
        metrics: metrics.clone(),
        events: events.clone(),
        error_events: Default::default(),
    });

    let templates = tokio::spawn(watch_templates(
        client.clone(),
        options.namespace.clone(),
        events,
        metrics.clone(),
        options.engine.clone(),
    ));
    let status_writes = dispatcher.start_status_writes();
    let chores = tokio::spawn(housekeeping(store.clone(), dispatcher.clone(), metrics.clone()));
    let collector = tokio::spawn(collect_finished_runs(
        client.clone(),
        store.clone(),
        options.finished_run_ttl,
        options.gc_deletes_per_second,
        metrics.clone(),
        options.shards.clone(),
    ));
    let shard_follower = options
        .shards
        .clone()
        .map(|shards| tokio::spawn(follow_shards(shards, store.clone(), dispatcher.clone(), wake_all.clone())));
    tracing::info!(namespace = ?options.namespace, selector = ?options.label_selector, "hook-operator controller starting");
    controller
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile error");
            }
        })
        .await;
    readiness.cache_synced(false);
    templates.abort();
    chores.abort();
    status_writes.abort();
    collector.abort();
    if let Some(task) = shard_follower {
        task.abort();
    }
    tracing::info!("hook-operator controller stopped");
}

/// `reconcile_on` wants a `Stream`; an unbounded receiver becomes one without another dependency.
fn tokio_stream_from<T: Send + 'static>(mut rx: mpsc::UnboundedReceiver<T>) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(name: &str, phase: HookPhase, message: &str) -> Note {
        Note::MetricCompleted { metric: name.into(), phase, message: message.into() }
    }

    fn reasons(events: &[EventNote]) -> Vec<&str> {
        events.iter().map(|e| e.reason.as_str()).collect()
    }

    fn hookrun(name: &str, uid: &str) -> HookRun {
        let mut run = HookRun::new(name, common::api::HookRunSpec::default());
        run.metadata.namespace = Some("ns".into());
        run.metadata.uid = Some(uid.into());
        run
    }

    fn id(name: &str, uid: &str) -> RunId {
        RunId { uid: uid.into(), namespace: "ns".into(), name: name.into() }
    }

    #[test]
    fn measurements_of_deleted_or_replaced_runs_are_fenced() {
        let (store, mut writer) = kube::runtime::reflector::store::<HookRun>();
        writer.apply_watcher_event(&watcher::Event::Apply(hookrun("a", "uid-1")));
        let fence = fence(store, None);
        assert!(fence(&id("a", "uid-1")), "in the cache: measured");
        assert!(!fence(&id("a", "uid-0")), "deleted and created again under the same name: not the same run");
        assert!(!fence(&id("b", "uid-2")), "not in the cache (deleted): not measured");
        writer.apply_watcher_event(&watcher::Event::Delete(hookrun("a", "uid-1")));
        assert!(!fence(&id("a", "uid-1")), "deleted after it was armed: not measured");
    }

    #[test]
    fn a_successful_run_publishes_one_event_that_names_its_metrics() {
        let notes = [
            metric("webtest", HookPhase::Successful, "count (3) reached"),
            Note::RunCompleted { phase: HookPhase::Successful, message: "all metrics completed".into() },
        ];
        let events = events_for(&notes.iter().collect::<Vec<_>>());
        assert_eq!(reasons(&events), ["HookRunSuccessful"]);
        assert!(!events[0].warning);
        assert_eq!(
            events[0].message,
            "hook completed Successful: all metrics completed; metric \"webtest\": count (3) reached"
        );
    }

    #[test]
    fn metrics_that_fail_or_complete_early_keep_their_own_events() {
        // A metric succeeding while another still runs: its own Event.
        let early = [metric("a", HookPhase::Successful, "count (1) reached")];
        assert_eq!(reasons(&events_for(&early.iter().collect::<Vec<_>>())), ["MetricSuccessful"]);
        // A failing metric ends the run: both Events, Warnings, and the other metric's stop is not hidden.
        let failed = [
            metric("a", HookPhase::Failed, "failed (1) > failureLimit (0)"),
            metric("b", HookPhase::Successful, "stopped: metric \"a\" completed Failed"),
            Note::RunCompleted { phase: HookPhase::Failed, message: "metric \"a\" completed Failed".into() },
        ];
        let events = events_for(&failed.iter().collect::<Vec<_>>());
        assert_eq!(reasons(&events), ["MetricFailed", "MetricSuccessful", "HookRunFailed"]);
        assert!(events[0].warning && events[2].warning);
    }
}
