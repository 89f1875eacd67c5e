//! An answer as the conditions see it: what a provider saw ([`Observation`]), or why it saw nothing
//! ([`ProviderError`]), and how a web or Prometheus answer's bytes become that value ([`web`], [`prometheus`]). The
//! providers read small answers here on the calling thread; the evaluation workers ([`crate::isolation`]) read the
//! others, so this sits below both and uses neither.

pub mod prometheus;
pub mod web;

use common::api::HookPhase;

/// What a provider saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// `result` in the conditions.
    pub result: expr::Value,
    /// The value as stored in `measurement.value` (strings unquoted, everything else as JSON).
    pub display: String,
    /// A phase decided by the provider itself (Prometheus NaN, a kubernetes `get` without conditions), with
    /// its message. `None`: judge `result` with the metric's conditions.
    pub verdict: Option<(HookPhase, String)>,
}

impl Observation {
    /// A value for the metric's conditions to judge (no verdict of the provider's own).
    pub fn judged(result: expr::Value, display: String) -> Self {
        Self { result, display, verdict: None }
    }
}

/// Why a measurement could not be taken; the text becomes the measurement's message, so it says exactly
/// what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProviderError(pub String);

impl From<crate::conditions::template::TemplateError> for ProviderError {
    fn from(e: crate::conditions::template::TemplateError) -> Self {
        Self(e.to_string())
    }
}

/// The text stored in `measurement.value`: strings as they are, other JSON compactly, capped so a large
/// response cannot bloat the HookRun (BCS stored whatever came back).
pub fn display(value: &serde_json::Value) -> String {
    let text = match value {
        serde_json::Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
        other => std::borrow::Cow::Owned(other.to_string()),
    };
    // Copied once: a short value (the usual case) is kept as made, only a long one is cut.
    if text.chars().count() <= 1024 { text.into_owned() } else { crate::text::excerpt(&text, 1024) }
}

/// The start of a body for error messages.
pub fn body_excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() { "(empty body)".to_string() } else { crate::text::excerpt(text, 200) }
}
