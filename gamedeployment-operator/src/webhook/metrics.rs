//! The webhooks' own metrics: every answer by webhook, verdict and reason, and the calls from callers the API
//! server's certificate does not vouch for. The pod gate and deletion protection ([`super::server`]) and the
//! HookTemplate validation ([`super::validation`]) count into the same families.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of `gamedeployment_webhook_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `pod-gate`, `deletion-protection` or `hook-validation`.
    pub webhook: String,
    /// `allowed`, `refused` or `retry` (could not judge within the budget: answered 429 with a retry hint).
    pub verdict: String,
    /// Why (`operator`, `bypass`, `deadline_passed`, `marked`, `cannot_judge`, …; a bounded set).
    pub reason: String,
}

/// Labels of `gamedeployment_webhook_unverified_requests_total`: callers without the API server's certificate.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnverifiedLabels {
    /// `pod-gate` or `deletion-protection`.
    pub webhook: String,
    /// What became of the write the answer asked for: `none` (nothing to write), `withheld` (not written: unverified
    /// callers may not cause writes) or `written` (`--webhook-unverified-may-mark`).
    pub write: String,
}

/// `gamedeployment_webhook_requests_total{webhook,verdict,reason}` and
/// `gamedeployment_webhook_unverified_requests_total{webhook,write}`.
#[derive(Clone, Debug, Default)]
pub struct WebhookMetrics {
    requests: Family<WebhookLabels, Counter>,
    unverified: Family<UnverifiedLabels, Counter>,
}

impl WebhookMetrics {
    /// Registers both families under the `gamedeployment` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.sub_registry_with_prefix("gamedeployment").register(
            "webhook_requests",
            "Admission webhook calls answered, by webhook, verdict and reason",
            metrics.requests.clone(),
        );
        registry.sub_registry_with_prefix("gamedeployment").register(
            "webhook_unverified_requests",
            "Admission webhook calls from callers without a verified client certificate (not the API server, or an API \
             server not configured to present one), by webhook and what became of the write the answer asked for",
            metrics.unverified.clone(),
        );
        metrics
    }

    pub(crate) fn count_unverified(&self, webhook: &str, write: &str) {
        self.unverified.get_or_create(&UnverifiedLabels { webhook: webhook.into(), write: write.into() }).inc();
    }

    pub(crate) fn count(&self, webhook: &str, verdict: &str, reason: &str) {
        self.requests
            .get_or_create(&WebhookLabels { webhook: webhook.into(), verdict: verdict.into(), reason: reason.into() })
            .inc();
    }
}
