//! `provider.web`: call an HTTP endpoint, read its JSON answer, pick a value with `jsonPath`.

use std::sync::Arc;
use std::time::Duration;

use common::api::{Argument, Metric};
use futures::FutureExt;
use futures::future::BoxFuture;
use reqwest::Method;

use super::http::{Http, body_excerpt};
use super::{Answer, Observation, Provider, ProviderError, Raw, Source, display};
use crate::conditions::evaluate::to_expr;
use crate::conditions::jsonpath;
use crate::conditions::template::render;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Web {
    http: Arc<Http>,
}

impl Web {
    pub fn new(http: Arc<Http>) -> Self {
        Self { http }
    }

    async fn call(&self, namespace: &str, metric: &Metric, args: &[Argument]) -> Result<Answer, ProviderError> {
        let web = metric.provider.web.as_ref().ok_or_else(|| ProviderError("provider.web is not set".into()))?;
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

        let send = self.http.send(method.clone(), &url, &headers, body, self.timeout(metric), web.insecure);
        let response = super::http::egress::in_namespace(namespace, &url, send).await?;
        if !response.status.is_success() {
            return Err(ProviderError(format!(
                "{method} {url} returned HTTP {}: {}",
                response.status,
                body_excerpt(&response.body)
            )));
        }
        // Read (decoded, narrowed) and judged under the evaluation bounds: see crate::isolation.
        Ok(Answer::Raw(Raw { response, source: Source::Web { method, url, path } }))
    }
}

/// [`interpret`], naming the request only when there is an error to report (no text built per measurement).
pub(crate) fn interpret_named(
    what: impl Fn() -> String,
    body: &[u8],
    path: Option<&jsonpath::Path>,
) -> Result<Observation, ProviderError> {
    // A path of member names takes its value straight from the text (the rest of the document is not built); the
    // general way below only when that finds nothing (and then says why).
    if let Some(value) = path.and_then(|path| path.pick(body)) {
        return Ok(Observation::judged(to_expr(&value), display(&value)));
    }
    let document: serde_json::Value = match serde_json::from_slice(body) {
        Ok(document) => document,
        // Without a jsonPath a plain-text answer is the result itself (as in Argo).
        Err(_) if path.is_none() => serde_json::Value::String(String::from_utf8_lossy(body).into_owned()),
        Err(e) => {
            return Err(ProviderError(format!(
                "{} did not return JSON ({e}), so jsonPath `{}` cannot apply; the body starts with: {}",
                what(),
                path.map(jsonpath::Path::written).unwrap_or_default(),
                body_excerpt(body)
            )));
        }
    };
    let value = match path {
        Some(path) => path.extract(&document).map_err(|e| ProviderError(e.to_string()))?,
        None => document,
    };
    Ok(Observation::judged(to_expr(&value), display(&value)))
}

/// A successful response as the conditions see it: the JSON document (or, without a jsonPath, a plain-text
/// body as a string), narrowed by the jsonPath. `what` (`GET <url>`) names the request in errors.
pub fn interpret(what: &str, body: &[u8], path: Option<&jsonpath::Path>) -> Result<Observation, ProviderError> {
    interpret_named(|| what.to_string(), body, path)
}

impl Provider for Web {
    fn kind(&self) -> &'static str {
        "web"
    }

    fn timeout(&self, metric: &Metric) -> Duration {
        match metric.provider.web.as_ref().and_then(|w| w.timeout_seconds) {
            Some(secs) if secs > 0 => Duration::from_secs(secs.unsigned_abs()),
            _ => DEFAULT_TIMEOUT,
        }
    }

    /// Everything [`Web::call`] waits for is one [`Http::send`], which ends (with its own "no response within"
    /// message) when [`Provider::timeout`] has passed.
    fn bounds_itself(&self) -> bool {
        true
    }

    fn measure<'a>(
        &'a self,
        namespace: &'a str,
        metric: &'a Metric,
        args: &'a [Argument],
    ) -> BoxFuture<'a, Result<Answer, ProviderError>> {
        self.call(namespace, metric, args).boxed()
    }
}
