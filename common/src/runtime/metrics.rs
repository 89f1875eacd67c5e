//! The metrics both operators export, each under its own prefix (`gamedeployment_`, `hook_operator_`): passes by
//! result, failures by reason, and how long a pass took ([`ReconcileMetrics`]); leadership and the Event
//! publisher's counters ([`OperatorMetrics`]). One definition, so the two operators' dashboards read the same way.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::events::EventCounters;

/// A bounded cause (an error kind, a create reason), never an object name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The cause, from a fixed set chosen by the caller.
    pub reason: String,
}

/// How a pass ended (`success`, `error`, and whatever bounded set an operator adds).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The outcome, from a fixed set chosen by the caller.
    pub result: String,
}

/// `reconciles_total{result}`, `reconcile_errors_total{reason}`, `reconcile_duration_seconds`.
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    /// `reconciles_total{result}`: every pass, by how it ended.
    pub reconciles: Family<ResultLabels, Counter>,
    /// `reconcile_errors_total{reason}`: the passes that failed, by why.
    pub errors: Family<ReasonLabels, Counter>,
    /// `reconcile_duration_seconds`: how long each pass took.
    pub duration: Histogram,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            // 0.5 ms to ~16 s.
            duration: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
        }
    }
}

impl ReconcileMetrics {
    /// Registers the three metrics in `registry` (already prefixed by the caller); `what` names a pass in the
    /// help texts ("GameDeployment reconcile passes", "HookRun reconcile rounds").
    pub fn register(&self, registry: &mut Registry, what: &str) {
        registry.register("reconciles", format!("{what}, by result"), self.reconciles.clone());
        registry.register("reconcile_errors", format!("Failed {what}, by reason"), self.errors.clone());
        registry.register("reconcile_duration_seconds", format!("Duration of {what}"), self.duration.clone());
    }

    /// Counts one pass that ended with `result`.
    pub fn reconciled(&self, result: &str) {
        self.reconciles.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    /// Counts one failed pass, by `reason` (a bounded error kind, never an object name).
    pub fn failed(&self, reason: &str) {
        self.errors.get_or_create(&ReasonLabels { reason: reason.into() }).inc();
    }

    /// Records how long one pass took.
    pub fn observe(&self, took: Duration) {
        self.duration.observe(took.as_secs_f64());
    }
}

/// The metrics both operators have for the runtime they share: leadership (`leader`, a gauge) and the Event
/// publisher's counters (`events_dropped_total`, `events_combined_total`, [`EventCounters`]). Defined and
/// registered once, under each operator's prefix, so `gamedeployment_leader` and `hook_operator_leader` mean
/// the same.
#[derive(Clone, Debug, Default)]
pub struct OperatorMetrics {
    /// `leader`: 1 while this replica leads, else 0 ([`OperatorMetrics::leading`]).
    pub leader: Gauge,
    /// `events_dropped_total` and `events_combined_total`, counted by the Event publisher.
    pub events: EventCounters,
}

impl OperatorMetrics {
    /// Registers the three metrics in `registry` (already prefixed by the caller); `leads` says in the help text
    /// what a leader does ("reconciles", "runs HookRuns").
    pub fn register(&self, registry: &mut Registry, leads: &str) {
        registry.register("leader", format!("1 while this replica leads ({leads}), else 0"), self.leader.clone());
        registry.register(
            "events_dropped",
            "Kubernetes Events dropped because the event queue was full",
            self.events.dropped.clone(),
        );
        registry.register(
            "events_combined",
            "Kubernetes Events counted into one combining similar events (more than 10 related objects per reason)",
            self.events.combined.clone(),
        );
    }

    /// Marks this replica as leading until the returned guard is dropped (the controller stops or the lease is
    /// lost).
    pub fn leading(&self) -> LeaderGuard {
        self.leader.set(1);
        LeaderGuard(self.leader.clone())
    }
}

/// Sets `leader` back to 0 when dropped: however the leading task ends, the gauge does not say it still leads.
#[derive(Debug)]
pub struct LeaderGuard(Gauge);

impl Drop for LeaderGuard {
    fn drop(&mut self) {
        self.0.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_operators_get_the_same_three_metrics_under_their_prefix() {
        let mut registry = Registry::default();
        let metrics = ReconcileMetrics::default();
        metrics.register(registry.sub_registry_with_prefix("op"), "passes");
        metrics.reconciled("success");
        metrics.failed("conflict");
        metrics.observe(Duration::from_millis(3));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("op_reconciles_total{result=\"success\"} 1"), "{text}");
        assert!(text.contains("op_reconcile_errors_total{reason=\"conflict\"} 1"), "{text}");
        assert!(text.contains("op_reconcile_duration_seconds_count 1"), "{text}");
    }

    #[test]
    fn the_shared_operator_metrics_appear_under_the_prefix_and_the_leader_gauge_follows_its_guard() {
        let mut registry = Registry::default();
        let metrics = OperatorMetrics::default();
        metrics.register(registry.sub_registry_with_prefix("op"), "reconciles");
        let text = |registry: &Registry| {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
            out
        };
        metrics.events.dropped.inc();
        metrics.events.combined.inc_by(2);
        assert!(text(&registry).contains("op_leader 0"));
        assert!(text(&registry).contains("# HELP op_leader 1 while this replica leads (reconciles), else 0."));
        assert!(text(&registry).contains("op_events_dropped_total 1"));
        assert!(text(&registry).contains("op_events_combined_total 2"));
        let guard = metrics.leading();
        assert!(text(&registry).contains("op_leader 1"));
        drop(guard);
        assert!(text(&registry).contains("op_leader 0"));
    }
}
