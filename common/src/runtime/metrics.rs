//! The reconcile metrics both operators export, each under its own prefix (`gamedeployment_`,
//! `hook_operator_`): passes by result, failures by reason, and how long a pass took. One definition, so the two
//! operators' dashboards read the same way.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A bounded cause (an error kind, a create reason), never an object name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// How a pass ended (`success`, `error`, and whatever bounded set an operator adds).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

/// `reconciles_total{result}`, `reconcile_errors_total{reason}`, `reconcile_duration_seconds`.
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    pub reconciles: Family<ResultLabels, Counter>,
    pub errors: Family<ReasonLabels, Counter>,
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

    pub fn reconciled(&self, result: &str) {
        self.reconciles.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub fn failed(&self, reason: &str) {
        self.errors.get_or_create(&ReasonLabels { reason: reason.into() }).inc();
    }

    pub fn observe(&self, took: Duration) {
        self.duration.observe(took.as_secs_f64());
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
}
