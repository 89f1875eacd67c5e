//! `provider.web`: call an HTTP endpoint, read its JSON answer, pick a value with `jsonPath`.
//!
//! A run's template and args do not change between its measurements, so its request is rendered once and kept (in
//! the run's [`Kept`]) with the buffers of its exchange: a measurement then renders, parses and allocates nothing
//! for its request.

use std::sync::Arc;
use std::time::Duration;

use common::api::{Argument, Metric, WebMetric};
use reqwest::Method;

use super::http::Http;
use super::{Answer, AsyncProvider, Kept, Measured, ProviderError, Raw, Source};
use crate::answer::body_excerpt;
use crate::conditions::jsonpath;
use crate::conditions::template::render;

/// A web metric's timeout when `timeoutSeconds` is 0 or unset.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The web provider: one HTTP call per measurement, through the shared HTTP client.
pub struct Web {
    http: Arc<Http>,
}

impl Web {
    /// A provider sending its requests through `http`.
    pub fn new(http: Arc<Http>) -> Self {
        Self { http }
    }
}

/// A web metric's request as rendered from its template and the run's args.
#[derive(Debug)]
pub struct Request {
    /// The HTTP method.
    pub method: Method,
    /// The URL, rendered (credentials are redacted in messages).
    pub url: String,
    /// The header fields, their values rendered.
    pub headers: Vec<(String, String)>,
    /// The body, rendered.
    pub body: Option<String>,
    /// The parsed `jsonPath`, if any.
    pub path: Option<Arc<jsonpath::Path>>,
}

impl Request {
    /// Renders `web` with `args`.
    fn render(web: &WebMetric, args: &[Argument]) -> Result<Self, ProviderError> {
        let url = render("url", &web.url, args)?;
        let mut headers = Vec::with_capacity(web.headers.len());
        for header in &web.headers {
            headers.push((header.key.clone(), render(&format!("headers[{}]", header.key), &header.value, args)?));
        }
        let body = web.body.as_deref().map(|b| render("body", b, args)).transpose()?;
        let method = match web.method.as_deref() {
            None => Method::GET,
            Some(name) if name.eq_ignore_ascii_case("GET") => Method::GET,
            Some(name) if name.eq_ignore_ascii_case("POST") => Method::POST,
            Some(name) => {
                let name = name.to_ascii_uppercase();
                Method::from_bytes(name.as_bytes())
                    .map_err(|_| ProviderError(format!("invalid HTTP method {name:?}")))?
            }
        };
        let path = web
            .json_path
            .as_deref()
            .map(jsonpath::Path::cached)
            .transpose()
            .map_err(|e| ProviderError(e.to_string()))?;
        Ok(Self { method, url, headers, body, path })
    }
}

impl AsyncProvider for Web {
    const KIND: &'static str = "web";
    /// Everything a web measurement waits for is one [`Http::send_with`], which ends (with its own "no response
    /// within" message) when the metric's timeout has passed.
    const BOUNDS_ITSELF: bool = true;

    fn timeout(&self, metric: &Metric) -> Duration {
        match metric.provider.web.as_ref().and_then(|w| w.timeout_seconds) {
            Some(secs) if secs > 0 => Duration::from_secs(secs.unsigned_abs()),
            _ => DEFAULT_TIMEOUT,
        }
    }

    async fn measure(&self, namespace: &str, metric: &Metric, args: &[Argument], kept: &mut Kept) -> Measured {
        let web = metric.provider.web.as_ref().ok_or_else(|| ProviderError("provider.web is not set".into()))?;
        // Rendered by the run's first measurement (and again only when rendering failed: nothing is kept then).
        let request = match &kept.web {
            Some(request) => request.clone(),
            None => kept.web.insert(Arc::new(Request::render(web, args)?)).clone(),
        };
        let Request { method, url, headers, body, .. } = &*request;
        let timeout = self.timeout(metric);
        let outgoing = super::http::Outgoing { method, headers, body: body.as_deref() };
        let send = self.http.send_with(outgoing, url, timeout, web.insecure, &mut kept.buffers);
        let mut response = super::http::egress::in_namespace(namespace, url, send).await?;
        if !response.status.is_success() {
            let error = format!("{method} {url} returned HTTP {}: {}", response.status, body_excerpt(&response.body));
            kept.keep_answer(std::mem::take(&mut response.body));
            return Err(ProviderError(error));
        }
        // Read (decoded, narrowed) and judged under the evaluation bounds: see crate::isolation.
        Ok(Answer::Raw(Raw { response, source: Source::Web(request) }))
    }
}
