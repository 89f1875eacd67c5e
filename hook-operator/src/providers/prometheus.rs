//! `provider.prometheus`: an instant query. A scalar result is a number, an instant vector an array of
//! numbers (labels dropped), so `result > 0.9` and `result[0] > 0.9` work as in BCS and Argo.
//!
//! NaN: as in BCS, a NaN anywhere in the result makes the measurement Inconclusive without evaluating the
//! conditions (a NaN compares false with everything, which would otherwise read as a failure).

use std::sync::Arc;
use std::time::Duration;

use super::http::Http;
use super::{Answer, AsyncProvider, Kept, Measured, ProviderError, Raw, Source};
use crate::answer::body_excerpt;
use crate::conditions::template::render;
use common::api::{Argument, Metric};
use reqwest::{Method, Url};

/// The prometheus provider: one instant query per measurement, through the shared HTTP client.
pub struct Prometheus {
    http: Arc<Http>,
    timeout: Duration,
}

impl Prometheus {
    /// A provider sending its queries through `http`, each bounded by `timeout`.
    pub fn new(http: Arc<Http>, timeout: Duration) -> Self {
        Self { http, timeout }
    }
}

impl AsyncProvider for Prometheus {
    const KIND: &'static str = "prometheus";

    fn timeout(&self, _metric: &Metric) -> Duration {
        self.timeout
    }

    async fn measure(&self, namespace: &str, metric: &Metric, args: &[Argument], kept: &mut Kept) -> Measured {
        let spec = metric
            .provider
            .prometheus
            .as_ref()
            .ok_or_else(|| ProviderError("provider.prometheus is not set".into()))?;
        let query = render("query", &spec.query, args)?;
        let base = spec.address.trim().trim_end_matches('/');
        let mut url = Url::parse(&format!("{base}/api/v1/query"))
            .map_err(|e| ProviderError(format!("provider.prometheus.address {:?} is not a URL: {e}", spec.address)))?;
        url.query_pairs_mut().append_pair("query", &query);
        let outgoing = super::http::Outgoing { method: &Method::GET, headers: &[], body: None };
        let send = self.http.send_with(outgoing, url.as_str(), self.timeout, false, &mut kept.buffers);
        let response = super::http::egress::in_namespace(namespace, url.as_str(), send).await?;
        // Prometheus answers 400/422 with a JSON error body that says what is wrong with the query.
        if !response.status.is_success() && !matches!(response.status.as_u16(), 400 | 422 | 503) {
            return Err(ProviderError(format!(
                "GET {url} returned HTTP {}: {}",
                response.status,
                body_excerpt(&response.body)
            )));
        }
        // Read and judged under the evaluation bounds: see crate::isolation.
        Ok(Answer::Raw(Raw { response, source: Source::Prometheus { query } }))
    }
}
