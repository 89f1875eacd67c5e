//! Prometheus metrics, and the client layer that counts every API request the operator makes.
//!
//! Cardinality is bounded: the per-GameDeployment series (`{namespace,name}`: desired/updated/ready replicas,
//! rollout stuck seconds, pods held per hook) are removed when the GameDeployment is deleted ([`Metrics::forget`];
//! BCS never deleted its per-GameDeployment series, BCS-G31), and no metric has a per-pod label.

use std::collections::HashMap;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Method, Request};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

pub use common::runtime::metrics::{OperatorMetrics, ReasonLabels, ReconcileMetrics, ResultLabels};

/// One GameDeployment.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkloadLabels {
    /// The GameDeployment's namespace.
    pub namespace: String,
    /// The GameDeployment's name.
    pub name: String,
}

/// Pods of one GameDeployment that declare one server state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerStateLabels {
    /// The GameDeployment's namespace.
    pub namespace: String,
    /// The GameDeployment's name.
    pub name: String,
    /// `WaitToBeDeleted`, `Draining`, `Idle`, `Allocated` or `Maintaining` (`common::server_state::ServerState::DECLARED`:
    /// never a value a pod made up).
    pub state: String,
}

/// Pods of one GameDeployment held by one kind of hook.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabels {
    /// The GameDeployment's namespace.
    pub namespace: String,
    /// The GameDeployment's name.
    pub name: String,
    /// `predelete`, `preinplace`, `postinplace` or `canary`.
    pub hook: String,
}

/// One kind of hook gate.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabels {
    /// `predelete`, `preinplace`, `postinplace` or `canary`.
    pub hook: String,
}

/// How a HookRun of one kind of gate completed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `predelete`, `preinplace`, `postinplace` or `canary`.
    pub hook: String,
    /// `successful`, `failed`, `error`, `inconclusive` or `terminated`.
    pub outcome: String,
    /// `true` for a shadow hook's run (`shadowHook`: recorded, never deciding), else `false`.
    pub shadow: String,
}

/// A gate that let a pod (or canary step) go without a successful hook.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseLabels {
    /// `predelete`, `preinplace`, `postinplace` or `canary`.
    pub hook: String,
    /// `hard_deadline`, `soft_deadline`, `on_failure` or `skipped`.
    pub reason: String,
}

/// The hook label values, in the order the gauges are written.
pub const HOOKS: [&str; 4] = ["predelete", "preinplace", "postinplace", "canary"];

/// What a pass shows about one GameDeployment on the dashboard.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadView {
    /// `spec.replicas`.
    pub desired: i64,
    /// Pods on the update revision.
    pub updated: i64,
    /// Ready pods.
    pub ready: i64,
    /// Pods held, by hook (in [`HOOKS`] order).
    pub held: [i64; 4],
}

/// One kind of request to the Kubernetes API.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`.
    pub verb: String,
    /// Resource and subresource (`pods`, `pods/status`, `gamedeployments/status`, `events`...).
    pub resource: String,
}

common::metric_set! {
    /// Every metric of the operator.
    #[derive(Clone, Debug)]
    pub struct Metrics {
        /// `reconciles_total{result}` (`success`, `error`, `waiting` for expectations, `skipped` being deleted),
        /// `reconcile_errors_total{reason}`, `reconcile_duration_seconds`.
        pub reconcile: ReconcileMetrics = ReconcileMetrics::default() => { "GameDeployment reconcile passes" },
        /// `pods_created_total{reason}`: `replicas` or `surge`.
        pub pods_created: Family<ReasonLabels, Counter> = Family::default()
            => ("pods_created", "Pods created, by reason (replicas, surge)"),
        /// `pods_deleted_total{reason}`: `scale_in`, `pods_to_delete`, `rolling_update`, `recreate_fallback`.
        pub pods_deleted: Family<ReasonLabels, Counter> = Family::default()
            => ("pods_deleted", "Pods deleted, by reason (scale_in, pods_to_delete, rolling_update, \
               recreate_fallback)"),
        /// `pods_updated_total{reason}`: pod patches, by why (in-place update, hot patch, readiness gate, ...).
        pub pods_updated: Family<ReasonLabels, Counter> = Family::default()
            => ("pods_updated", "Pod patches, by reason (in_place_update, hot_patch_update, \
               in_place_update_completed, readiness_gate...)"),
        /// `pods_held{namespace,name,hook}`: pods a gate held in the last pass.
        pub pods_held: Family<HeldLabels, Gauge> = Family::default()
            => ("pods_held", "Pods held by a hook in the last pass, by GameDeployment and hook (predelete, \
               preinplace, postinplace, canary: old pods a canary step keeps back)"),
        /// `desired_replicas{namespace,name}`: `spec.replicas`.
        pub desired_replicas: Family<WorkloadLabels, Gauge> = Family::default()
            => ("desired_replicas", "spec.replicas of each GameDeployment"),
        /// `updated_replicas{namespace,name}`: pods on the update revision.
        pub updated_replicas: Family<WorkloadLabels, Gauge> = Family::default()
            => ("updated_replicas", "Pods running the update revision, by GameDeployment"),
        /// `ready_replicas{namespace,name}`.
        pub ready_replicas: Family<WorkloadLabels, Gauge> = Family::default()
            => ("ready_replicas", "Ready pods, by GameDeployment"),
        /// `rollout_stuck_seconds{namespace,name}`: since the rollout last moved while incomplete (0 when complete).
        pub rollout_stuck_seconds: Family<WorkloadLabels, Gauge> = Family::default()
            => ("rollout_stuck_seconds", "Seconds since the rollout last made progress while it is incomplete (0 \
               when complete)"),
        /// `progress_deadline_exceeded{namespace,name}`: 1 while `Progressing` says `ProgressDeadlineExceeded`.
        pub progress_deadline_exceeded: Family<WorkloadLabels, Gauge> = Family::default()
            => ("progress_deadline_exceeded", "1 while a GameDeployment's Progressing condition says \
               ProgressDeadlineExceeded (spec.progressDeadlineSeconds), else 0"),
        /// `server_states{namespace,name,state}`: pods declaring each server state.
        pub server_states: Family<ServerStateLabels, Gauge> = Family::default()
            => ("server_states", "Pods declaring each server state (label \
               gamedeployment.tkex.tencent.com/server-state), by GameDeployment"),
        /// `leader`, `events_dropped_total`, `events_combined_total`: the metrics both operators share.
        pub operator: OperatorMetrics = OperatorMetrics::default() => { "reconciles" },
        /// `gate_wait_seconds{hook}`: how long a pod was held, observed when its gate releases it.
        // 1 s … ~9 h.
        pub gate_wait: Family<HookLabels, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(1.0, 2.0, 16)))
            => ("gate_wait_seconds", "Time a pod spent held by a gate, observed when it is released, by hook"),
        /// `hook_outcomes_total{hook,outcome,shadow}`: completed HookRuns.
        pub hook_outcomes: Family<OutcomeLabels, Counter> = Family::default()
            => ("hook_outcomes", "HookRuns of GameDeployments that completed, by hook and outcome"),
        /// `hook_releases_total{hook,reason}`: pods a gate let go without a successful hook.
        pub hook_releases: Family<ReleaseLabels, Counter> = Family::default()
            => ("hook_releases", "Pods (and canary steps) a gate let go WITHOUT a successful hook, by hook and \
               reason (hard_deadline, soft_deadline, on_failure, skipped)"),
        /// Canaries rolled back by a failed hook step (`onFailure: Rollback`).
        pub canary_rollbacks: Counter = Counter::default()
            => ("canary_rollbacks", "Canaries rolled back to their stable revision by a failed hook step \
               (hookPolicy.onFailure: Rollback)"),
        /// `status_writes_total`: GameDeployment status writes.
        pub status_writes: Counter = Counter::default() => ("status_writes", "GameDeployment status writes"),
        /// Passes whose status waited for the next write (`--status-write-interval`).
        pub status_writes_deferred: Counter = Counter::default()
            => ("status_writes_deferred", "Passes whose status (replica counts and hook progress only) waited for \
               the next status write"),
        /// Passes that waited for their spacing (`--pass-spacing`), and how long in total.
        pub passes_spaced: Counter = Counter::default()
            => ("passes_spaced", "Passes that waited for their spacing after the previous pass of the same \
               GameDeployment (--pass-spacing)"),
        /// `pass_spacing_seconds_total`: the time those passes waited.
        pub pass_spacing_seconds: Counter<f64, std::sync::atomic::AtomicU64> = Counter::default()
            => ("pass_spacing_seconds", "Time passes waited for their spacing (--pass-spacing)"),
        /// Passes that create HookRuns and found the HookTemplate cache behind the API server (planned again), and
        /// those whose template read failed (no run created in that pass).
        pub hook_templates_behind: Counter = Counter::default()
            => ("hook_templates_behind", "Passes creating HookRuns that found the HookTemplate cache behind the API \
               server and planned again with the templates as read"),
        /// Passes whose read of the HookTemplates failed: they created no run (see `hook_templates_behind`).
        pub hook_template_reads_failed: Counter = Counter::default()
            => ("hook_template_reads_failed", "Passes creating HookRuns whose read of the HookTemplates failed: \
               they created no run"),
        /// `expectations_expired_total`: writes the watch cache did not show within the expectations timeout.
        pub expectations_expired: Counter = Counter::default()
            => ("expectations_expired", "Writes the watch cache did not show within the expectations timeout"),
        /// `api_requests_total{verb,resource}`: every request to the Kubernetes API ([`Metrics::request_counter`]).
        pub api_requests: Family<RequestLabels, Counter> = Family::default()
            => ("api_requests", "Requests sent to the Kubernetes API, by verb and resource"),
    }
}

impl Metrics {
    /// Creates the metrics and registers them under `gamedeployment_`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        metrics.register_into(registry.sub_registry_with_prefix("gamedeployment"));
        metrics
    }

    /// Counts one pass by result (`success`, `error`, `waiting`, `skipped`).
    pub fn reconciled(&self, result: &str) {
        self.reconcile.reconciled(result);
    }

    /// Counts one failed pass by reason.
    pub fn failed(&self, reason: &str) {
        self.reconcile.failed(reason);
    }

    /// Shows what a pass computed for one GameDeployment.
    pub fn show(&self, namespace: &str, name: &str, view: &WorkloadView) {
        let workload = WorkloadLabels { namespace: namespace.into(), name: name.into() };
        self.desired_replicas.get_or_create(&workload).set(view.desired);
        self.updated_replicas.get_or_create(&workload).set(view.updated);
        self.ready_replicas.get_or_create(&workload).set(view.ready);
        for (hook, held) in HOOKS.iter().zip(view.held) {
            let labels = HeldLabels { namespace: namespace.into(), name: name.into(), hook: (*hook).into() };
            self.pods_held.get_or_create(&labels).set(held);
        }
    }

    /// The server states a GameDeployment's pods declare (every named state, 0 when none does).
    pub fn show_server_states(&self, namespace: &str, name: &str, counts: &std::collections::BTreeMap<String, i32>) {
        for state in common::server_state::ServerState::DECLARED {
            let labels = ServerStateLabels { namespace: namespace.into(), name: name.into(), state: state.into() };
            self.server_states.get_or_create(&labels).set(i64::from(counts.get(state).copied().unwrap_or(0)));
        }
    }

    /// Removes every series of a GameDeployment (it was deleted).
    pub fn forget(&self, namespace: &str, name: &str) {
        let workload = WorkloadLabels { namespace: namespace.into(), name: name.into() };
        for family in [
            &self.desired_replicas,
            &self.updated_replicas,
            &self.ready_replicas,
            &self.rollout_stuck_seconds,
            &self.progress_deadline_exceeded,
        ] {
            family.remove(&workload);
        }
        for hook in HOOKS {
            self.pods_held.remove(&HeldLabels { namespace: namespace.into(), name: name.into(), hook: hook.into() });
        }
        for state in common::server_state::ServerState::DECLARED {
            let labels = ServerStateLabels { namespace: namespace.into(), name: name.into(), state: state.into() };
            self.server_states.remove(&labels);
        }
    }

    /// Records how long a pod was held by the `hook` gate that just released it.
    pub fn gate_released(&self, hook: &str, waited_seconds: f64) {
        self.gate_wait.get_or_create(&HookLabels { hook: hook.into() }).observe(waited_seconds.max(0.0));
    }

    /// Counts a pod (or canary step) the `hook` gate let go without a successful hook, and why.
    pub fn hook_released(&self, hook: &str, reason: &str) {
        self.hook_releases.get_or_create(&ReleaseLabels { hook: hook.into(), reason: reason.into() }).inc();
    }

    /// Counts a completed HookRun of the `hook` gate (a shadow hook's apart).
    pub fn hook_outcome(&self, hook: &str, outcome: &str, shadow: bool) {
        let labels = OutcomeLabels { hook: hook.into(), outcome: outcome.into(), shadow: shadow.to_string() };
        self.hook_outcomes.get_or_create(&labels).inc();
    }

    /// The client layer counting requests into [`Metrics::api_requests`].
    pub fn request_counter(&self) -> CountRequests {
        CountRequests { requests: self.api_requests.clone() }
    }
}

/// What counts as progress of a rollout: any change of these numbers (or of the revision or canary step).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutMark {
    /// `status.updateRevision`: a new template is progress.
    pub revision: Option<String>,
    /// The current canary step.
    pub step: Option<i32>,
    /// `status.replicas`.
    pub replicas: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// `status.updatedReplicas`.
    pub updated: i32,
    /// `status.updatedReadyReplicas`.
    pub updated_ready: i32,
}

/// When each GameDeployment's rollout last made progress, for `gamedeployment_rollout_stuck_seconds`. Kept in
/// memory: after a restart the clock starts at the first pass.
#[derive(Debug, Default)]
pub struct RolloutClock {
    entries: Mutex<Rollouts>,
}

/// By (namespace, name): the last progress seen, when it was first seen, and whether the rollout was complete.
type Rollouts = HashMap<(String, String), (RolloutMark, Instant, bool)>;

impl RolloutClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, Rollouts> {
        // A poisoned lock only means a pass panicked while holding it; the map stays usable.
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records what a pass saw; returns the seconds the rollout has not progressed (0 when complete).
    pub fn observe(&self, namespace: &str, name: &str, mark: RolloutMark, complete: bool, now: Instant) -> i64 {
        let mut entries = self.lock();
        let entry = entries.entry((namespace.into(), name.into())).or_insert_with(|| (mark.clone(), now, complete));
        if entry.0 != mark || entry.2 != complete {
            *entry = (mark, now, complete);
        }
        stuck_seconds(entry.1, entry.2, now)
    }

    /// Seconds stuck of every GameDeployment seen, at `now`.
    pub fn stuck(&self, now: Instant) -> Vec<(String, String, i64)> {
        self.lock()
            .iter()
            .map(|((namespace, name), (_, since, complete))| {
                (namespace.clone(), name.clone(), stuck_seconds(*since, *complete, now))
            })
            .collect()
    }

    /// Drops a deleted GameDeployment's clock.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock().remove(&(namespace.to_string(), name.to_string()));
    }
}

fn stuck_seconds(since: Instant, complete: bool, now: Instant) -> i64 {
    if complete { 0 } else { i64::try_from(now.saturating_duration_since(since).as_secs()).unwrap_or(i64::MAX) }
}

/// A tower layer counting the API requests of a kube client by verb and resource.
#[derive(Clone, Debug)]
pub struct CountRequests {
    requests: Family<RequestLabels, Counter>,
}

impl<S> Layer<S> for CountRequests {
    type Service = CountedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountedService { inner, requests: self.requests.clone() }
    }
}

/// A kube client's service wrapped by [`CountRequests`]: counts each request, then sends it on unchanged.
#[derive(Clone, Debug)]
pub struct CountedService<S> {
    inner: S,
    requests: Family<RequestLabels, Counter>,
}

impl<S, B> Service<Request<B>> for CountedService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.requests.get_or_create(&classify(request.method(), request.uri())).inc();
        self.inner.call(request)
    }
}

/// Verb and resource of an API request, from its method and path (`/api/v1/namespaces/ns/pods/x/status`).
pub fn classify(method: &Method, uri: &http::Uri) -> RequestLabels {
    let watch = uri.query().is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // Skip `api/v1` or `apis/<group>/<version>`, then `namespaces/<ns>` when present.
    let mut rest: &[&str] = match segments.first() {
        Some(&"api") => segments.get(2..).unwrap_or_default(),
        Some(&"apis") => segments.get(3..).unwrap_or_default(),
        _ => &segments,
    };
    if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        rest = &rest[2..];
    }
    let resource = match rest {
        [resource] | [resource, _] => (*resource).to_string(),
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        [] => uri.path().to_string(),
    };
    let named = rest.len() >= 2;
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    };
    RequestLabels { verb: verb.into(), resource }
}

/// Whether a request verb writes.
pub fn is_write(verb: &str) -> bool {
    matches!(verb, "create" | "update" | "patch" | "delete")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(method: Method, uri: &str) -> (String, String) {
        let l = classify(&method, &uri.parse().unwrap());
        (l.verb, l.resource)
    }

    #[test]
    fn classifies_requests() {
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(c(Method::GET, "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=5"), s("watch", "pods"));
        assert_eq!(c(Method::GET, "/api/v1/pods?limit=500"), s("list", "pods"));
        assert_eq!(c(Method::GET, "/api/v1/namespaces/ns/pods/p"), s("get", "pods"));
        assert_eq!(c(Method::PATCH, "/api/v1/namespaces/ns/pods/p/status"), s("patch", "pods/status"));
        assert_eq!(
            c(Method::PUT, "/apis/tkex.tencent.com/v1alpha1/namespaces/ns/gamedeployments/gd/status"),
            s("update", "gamedeployments/status")
        );
        assert_eq!(
            c(Method::POST, "/apis/apps/v1/namespaces/ns/controllerrevisions"),
            s("create", "controllerrevisions")
        );
        assert_eq!(c(Method::DELETE, "/api/v1/namespaces/ns/pods/p"), s("delete", "pods"));
        assert_eq!(c(Method::GET, "/api/v1/nodes"), s("list", "nodes"));
        assert!(is_write("patch") && !is_write("watch"));
    }

    #[test]
    fn registers_with_the_prefix() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.reconciled("success");
        metrics.pods_created.get_or_create(&ReasonLabels { reason: "replicas".into() }).inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("gamedeployment_reconciles_total{result=\"success\"} 1"), "{text}");
        assert!(text.contains("gamedeployment_pods_created_total{reason=\"replicas\"} 1"), "{text}");
    }

    #[test]
    fn the_rollout_clock_restarts_on_progress_and_reads_zero_when_complete() {
        let clock = RolloutClock::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        let mark = |updated: i32| RolloutMark { updated, ..RolloutMark::default() };
        assert_eq!(clock.observe("ns", "game", mark(1), false, t0), 0);
        assert_eq!(clock.observe("ns", "game", mark(1), false, at(30)), 30);
        assert_eq!(clock.stuck(at(45)), [("ns".to_string(), "game".to_string(), 45)]);
        assert_eq!(clock.observe("ns", "game", mark(2), false, at(50)), 0, "progress restarts the clock");
        assert_eq!(clock.observe("ns", "game", mark(2), false, at(60)), 10);
        assert_eq!(clock.observe("ns", "game", mark(2), true, at(70)), 0);
        assert_eq!(clock.observe("ns", "game", mark(2), true, at(700)), 0, "complete stays 0");
        clock.forget("ns", "game");
        assert!(clock.stuck(at(800)).is_empty());
    }

    fn encode(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    /// The names and labels the chart's dashboard and alerts use (`charts/gamedeployment-operators/metrics-used.txt`).
    #[test]
    fn dashboard_series_appear_and_go_with_their_game_deployment() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let view = WorkloadView { desired: 6, updated: 2, ready: 5, held: [1, 0, 2, 3] };
        metrics.show("ns", "game", &view);
        metrics.show("ns", "other", &WorkloadView::default());
        metrics
            .rollout_stuck_seconds
            .get_or_create(&WorkloadLabels { namespace: "ns".into(), name: "game".into() })
            .set(42);
        let _leading = metrics.operator.leading();
        metrics.show_server_states("ns", "game", &[("Idle".to_string(), 2)].into());
        metrics
            .progress_deadline_exceeded
            .get_or_create(&WorkloadLabels { namespace: "ns".into(), name: "game".into() })
            .set(1);
        metrics.gate_released("predelete", 3.5);
        metrics.hook_outcome("preinplace", "failed", false);
        metrics.hook_outcome("predelete", "failed", true);
        let text = encode(&registry);
        for line in [
            "gamedeployment_desired_replicas{namespace=\"ns\",name=\"game\"} 6",
            "gamedeployment_updated_replicas{namespace=\"ns\",name=\"game\"} 2",
            "gamedeployment_ready_replicas{namespace=\"ns\",name=\"game\"} 5",
            "gamedeployment_rollout_stuck_seconds{namespace=\"ns\",name=\"game\"} 42",
            "gamedeployment_pods_held{namespace=\"ns\",name=\"game\",hook=\"predelete\"} 1",
            "gamedeployment_pods_held{namespace=\"ns\",name=\"game\",hook=\"postinplace\"} 2",
            "gamedeployment_pods_held{namespace=\"ns\",name=\"game\",hook=\"canary\"} 3",
            "gamedeployment_leader 1",
            "gamedeployment_server_states{namespace=\"ns\",name=\"game\",state=\"Idle\"} 2",
            "gamedeployment_server_states{namespace=\"ns\",name=\"game\",state=\"Allocated\"} 0",
            "gamedeployment_server_states{namespace=\"ns\",name=\"game\",state=\"Draining\"} 0",
            "gamedeployment_progress_deadline_exceeded{namespace=\"ns\",name=\"game\"} 1",
            "gamedeployment_gate_wait_seconds_bucket{le=\"4.0\",hook=\"predelete\"} 1",
            "gamedeployment_hook_outcomes_total{hook=\"preinplace\",outcome=\"failed\",shadow=\"false\"} 1",
            "gamedeployment_hook_outcomes_total{hook=\"predelete\",outcome=\"failed\",shadow=\"true\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        metrics.forget("ns", "game");
        let text = encode(&registry);
        assert!(!text.contains("name=\"game\""), "{text}");
        assert!(text.contains("gamedeployment_desired_replicas{namespace=\"ns\",name=\"other\"} 0"), "{text}");
    }
}
