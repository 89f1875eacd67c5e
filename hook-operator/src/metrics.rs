//! The operator's Prometheus metrics. Labels are bounded (phase, provider, reason): no per-run series, which
//! BCS had and never deleted (BCS-H11).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// HookRuns by phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The run's phase (`Pending`, `Running`, `Successful`, ...).
    pub phase: String,
}

/// Static texts (provider names and phases are fixed): counting a measurement allocates nothing.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MeasurementLabels {
    /// `web`, `prometheus` or `kubernetes`.
    pub provider: &'static str,
    /// The measurement's phase.
    pub phase: &'static str,
}

/// One provider.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// `web`, `prometheus` or `kubernetes`.
    pub provider: &'static str,
}

pub use common::runtime::metrics::{LeaderGuard, OperatorMetrics, ReasonLabels, ReconcileMetrics};

common::metric_set! {
    /// Every metric of the hook-operator, under the `hook_operator_` prefix.
    pub struct Metrics {
        /// `hookruns{phase}`: HookRuns this operator sees.
        pub hookruns: Family<PhaseLabels, Gauge> = Family::default()
            => ("hookruns", "HookRuns seen by this operator, by phase"),
        /// `measurements_total{provider,phase}`.
        pub measurements: Family<MeasurementLabels, Counter> = Family::default()
            => ("measurements", "Measurements taken, by provider and phase"),
        /// `measurement_duration_seconds{provider}`: how long a provider took to answer.
        pub measurement_duration: Family<ProviderLabels, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 16)))
            => ("measurement_duration_seconds", "Time a provider took to answer one measurement"),
        /// `scheduling_lag_seconds`: from when a measurement was due to when it started (a loaded operator shows here
        /// first).
        pub scheduling_lag: Histogram = Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            => ("scheduling_lag_seconds", "Delay between the time a measurement was due and the time it started"),
        /// `measurements_in_flight`.
        pub in_flight: Gauge = Gauge::default() => ("measurements_in_flight", "Measurements currently running"),
        /// `measurements_waiting`: due measurements waiting for a slot (`--max-in-flight`).
        pub waiting: Gauge = Gauge::default()
            => ("measurements_waiting", "Measurements due but waiting for a slot (--max-in-flight)"),
        /// `reconciles_total{result}` (`success`, `error`), `reconcile_errors_total{reason}`,
        /// `reconcile_duration_seconds`.
        pub reconcile: ReconcileMetrics = ReconcileMetrics::default() => { "HookRun reconcile rounds" },
        /// `status_writes_total`: HookRun status updates sent.
        pub status_writes: Counter = Counter::default()
            => ("status_writes", "HookRun status updates sent to the API server"),
        /// Rounds whose status change was kept in memory (recorded, measurements started) instead of written at once:
        /// progress of a running run waiting for `--status-write-interval` or `--max-status-writes-per-second`.
        pub status_writes_deferred: Counter = Counter::default()
            => ("status_writes_deferred", "Rounds whose progress was kept in memory instead of written at once \
               (write interval or budget)"),
        /// Runs with progress recorded in memory and not written yet (what a restart would take again).
        pub status_writes_waiting: Gauge = Gauge::default()
            => ("status_writes_waiting", "HookRuns with recorded progress not written yet (a restart measures it \
               again)"),
        /// How long progress waited in memory before it was written (the age of what a restart re-measures).
        pub status_write_delay: Histogram = Histogram::new(exponential_buckets(0.01, 2.0, 16))
            => ("status_write_delay_seconds", "How long recorded progress waited in memory before its status write"),
        /// `invalid_hooktemplates`: HookTemplates with validation problems.
        pub invalid_templates: Gauge = Gauge::default()
            => ("invalid_hooktemplates", "HookTemplates with validation problems"),
        /// `leader` (1 while this replica runs the controller: it holds the Lease, or leader election is off),
        /// `events_dropped_total`, `events_combined_total`: the metrics both operators share.
        pub operator: OperatorMetrics = OperatorMetrics::default() => { "runs HookRuns" },
        /// Finished ownerless HookRuns deleted after `--finished-run-ttl`.
        pub runs_collected: Counter = Counter::default()
            => ("hookruns_collected", "Finished HookRuns without an owner deleted after --finished-run-ttl"),
    }
}

impl Metrics {
    /// Creates the metrics and registers them under the `hook_operator` prefix.
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Arc::new(Self::default());
        metrics.register_into(registry.sub_registry_with_prefix("hook_operator"));
        metrics
    }

    /// Marks this replica as leading until the returned guard is dropped (the controller stops or the lease is
    /// lost).
    pub fn leading(&self) -> LeaderGuard {
        self.operator.leading()
    }

    /// Counts a failed reconcile by reason.
    pub fn reconcile_error(&self, reason: &str) {
        self.reconcile.failed(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_gauge_is_one_exactly_while_the_guard_lives() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let text = |registry: &Registry| {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
            out
        };
        assert!(text(&registry).contains("hook_operator_leader 0"));
        let guard = metrics.leading();
        assert!(text(&registry).contains("hook_operator_leader 1"));
        drop(guard);
        assert!(text(&registry).contains("hook_operator_leader 0"));
    }
}
