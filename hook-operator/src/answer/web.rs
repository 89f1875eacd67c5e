//! A web answer as the conditions see it: its JSON (or, without a jsonPath, its text) narrowed by the jsonPath.

use super::{Observation, ProviderError, body_excerpt, display};
use crate::conditions::evaluate::to_expr;
use crate::conditions::jsonpath;

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
