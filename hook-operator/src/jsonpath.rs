//! JSONPath as Kubernetes (and therefore BCS) users write it — `{$.age}`, `{.items[0].name}`, `$.age`,
//! `{.metadata.labels.app-name}` — translated to RFC 9535 syntax and evaluated by `jsonpath-rust`.
//!
//! Values keep their JSON type: `45` stays a number and `"45"` a string, so conditions can tell them apart
//! and `asInt` works on both. One match gives that value; several give an array of them; none is an error
//! that shows what the document looks like.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use jsonpath_rust::parser::model::JpQuery;
use serde_json::Value;

/// Parsed paths by text: every run of a template uses the same few paths, and parsing dominates extraction.
static PATHS: LazyLock<Mutex<HashMap<String, Arc<Path>>>> = LazyLock::new(Default::default);
const PATH_CACHE_LIMIT: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPathError {
    #[error("jsonPath `{path}` is not supported: {reason}")]
    Unsupported { path: String, reason: String },
    #[error("jsonPath `{path}` does not parse (as `{normalized}`): {reason}")]
    Parse { path: String, normalized: String, reason: String },
    #[error("jsonPath `{path}` matched nothing in the response, which is {shape}")]
    NoMatch { path: String, shape: String },
}

/// A parsed path, kept with the text the user wrote for messages.
#[derive(Debug, Clone)]
pub struct Path {
    written: String,
    query: JpQuery,
}

impl Path {
    pub fn parse(written: &str) -> Result<Self, JsonPathError> {
        let normalized = normalize(written)?;
        let query = jsonpath_rust::parser::parse_json_path(&normalized).map_err(|e| JsonPathError::Parse {
            path: written.to_string(),
            normalized: normalized.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self { written: written.to_string(), query })
    }

    /// [`Path::parse`], remembering the result for the next measurement.
    pub fn cached(written: &str) -> Result<Arc<Self>, JsonPathError> {
        if let Some(path) = PATHS.lock().ok().and_then(|cache| cache.get(written).cloned()) {
            return Ok(path);
        }
        let path = Arc::new(Self::parse(written)?);
        if let Ok(mut cache) = PATHS.lock() {
            if cache.len() >= PATH_CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(written.to_string(), path.clone());
        }
        Ok(path)
    }

    pub fn written(&self) -> &str {
        &self.written
    }

    /// The matched value: itself for one match, an array for several.
    pub fn extract(&self, document: &Value) -> Result<Value, JsonPathError> {
        let found = jsonpath_rust::query::js_path_process(&self.query, document)
            .map_err(|e| JsonPathError::Unsupported { path: self.written.clone(), reason: e.to_string() })?;
        match found.len() {
            0 => Err(JsonPathError::NoMatch { path: self.written.clone(), shape: shape(document) }),
            1 => Ok(found[0].clone().val().clone()),
            _ => Ok(Value::Array(found.into_iter().map(|r| r.val().clone()).collect())),
        }
    }
}

/// Kubernetes template syntax to RFC 9535.
pub fn normalize(written: &str) -> Result<String, JsonPathError> {
    let unsupported =
        |reason: &str| JsonPathError::Unsupported { path: written.to_string(), reason: reason.to_string() };
    let trimmed = written.trim();
    if trimmed.is_empty() {
        return Ok("$".to_string());
    }
    let inner = if let Some(rest) = trimmed.strip_prefix('{') {
        let close = matching_brace(rest).ok_or_else(|| unsupported("the opening `{` is never closed"))?;
        if close + 1 != rest.len() {
            return Err(unsupported(
                "only one {expression} is supported, without literal text around it (write e.g. {$.age})",
            ));
        }
        rest[..close].trim()
    } else if trimmed.contains('{') {
        return Err(unsupported(
            "only one {expression} is supported, without literal text around it (write e.g. {$.age})",
        ));
    } else {
        trimmed
    };
    if inner.starts_with("range ") || inner == "end" {
        return Err(unsupported("range/end templates are not supported; select the values with [*] instead"));
    }
    let rooted = if inner.starts_with('$') {
        inner.to_string()
    } else if inner.starts_with('.') || inner.starts_with('[') {
        format!("${inner}")
    } else {
        format!("$.{inner}")
    };
    Ok(bracket_unusual_names(&rooted))
}

/// Index of the `}` closing a template whose `{` was just consumed, skipping quoted text.
fn matching_brace(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// `.app-name` is fine for Kubernetes but not RFC 9535 shorthand: write such names as `['app-name']`.
fn bracket_unusual_names(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    let chars: Vec<char> = path.chars().collect();
    let mut i = 0;
    let mut bracket_depth = 0usize;
    let mut quote: Option<char> = None;
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = quote {
            out.push(c);
            if c == '\\' && i + 1 < chars.len() {
                out.push(chars[i + 1]);
                i += 2;
                continue;
            }
            if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        match c {
            '\'' | '"' if bracket_depth > 0 => {
                quote = Some(c);
                out.push(c);
                i += 1;
            }
            '[' => {
                bracket_depth += 1;
                out.push(c);
                i += 1;
            }
            ']' => {
                bracket_depth = bracket_depth.saturating_sub(1);
                out.push(c);
                i += 1;
            }
            '.' if bracket_depth == 0 => {
                out.push('.');
                i += 1;
                if i < chars.len() && chars[i] == '.' {
                    out.push('.');
                    i += 1;
                }
                let start = i;
                while i < chars.len() && !matches!(chars[i], '.' | '[') {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                let plain = name == "*"
                    || name
                        .chars()
                        .next()
                        .is_some_and(|first| first.is_alphabetic() || first == '_' || !first.is_ascii())
                        && name.chars().all(|ch| ch.is_alphanumeric() || ch == '_' || !ch.is_ascii());
                if plain || name.is_empty() {
                    out.push_str(&name);
                } else {
                    // `.name` → `['name']`; for `..name` the dots stay: `..['name']`.
                    if out.ends_with("..") {
                        out.push_str(&format!("['{}']", name.replace('\\', "\\\\").replace('\'', "\\'")));
                    } else {
                        out.pop();
                        out.push_str(&format!("['{}']", name.replace('\\', "\\\\").replace('\'', "\\'")));
                    }
                }
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// A short description of a document, for "matched nothing" errors.
pub fn shape(document: &Value) -> String {
    match document {
        Value::Object(map) if map.is_empty() => "an empty object".to_string(),
        Value::Object(map) => {
            // Bounded however hostile the document: at most 20 keys of at most 40 characters each.
            let keys: Vec<String> = map.keys().take(20).map(|k| crate::text::excerpt(k, 40)).collect();
            let more = if map.len() > 20 { format!(" and {} more", map.len() - 20) } else { String::new() };
            format!("an object with keys {}{more}", keys.join(", "))
        }
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::String(s) => format!("the string {}", crate::text::excerpt(&format!("{s:?}"), 80)),
        Value::Number(n) => format!("the number {}", crate::text::excerpt(&n.to_string(), 40)),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Null => "null".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn normalizes_kubernetes_syntax() {
        let cases = [
            ("{$.age}", "$.age"),
            ("{.age}", "$.age"),
            ("$.age", "$.age"),
            (".age", "$.age"),
            ("age", "$.age"),
            ("{$}", "$"),
            ("", "$"),
            ("{.items[0].name}", "$.items[0].name"),
            ("{.metadata.labels.app-name}", "$.metadata.labels['app-name']"),
            ("{..app-name}", "$..['app-name']"),
            ("{.items[?(@.status==\"a.b\")].name}", "$.items[?(@.status==\"a.b\")].name"),
            ("{.items[*].name}", "$.items[*].name"),
            ("{ .age }", "$.age"),
        ];
        for (written, want) in cases {
            assert_eq!(normalize(written).unwrap(), want, "{written}");
        }
        assert!(normalize("{.a}{.b}").is_err());
        assert!(normalize("age: {.age}").is_err());
        assert!(normalize("{range .items[*]}{.name}{end}").is_err());
        assert!(normalize("{.age").is_err());
    }

    #[test]
    fn extracts_typed_values() {
        let doc = json!({"name":"bryan","male":"yes","age":45,"ratio":0.5,
            "items":[{"name":"a","ok":true},{"name":"b","ok":false}],
            "metadata":{"labels":{"app-name":"game"}}});
        let cases = [
            ("{$.age}", json!(45)),
            ("{.name}", json!("bryan")),
            ("$.ratio", json!(0.5)),
            ("{.items[0].name}", json!("a")),
            ("{.items[*].name}", json!(["a", "b"])),
            ("{.items[?(@.ok == true)].name}", json!("a")),
            ("{.metadata.labels.app-name}", json!("game")),
            ("{$}", doc.clone()),
        ];
        for (path, want) in cases {
            assert_eq!(Path::parse(path).unwrap().extract(&doc).unwrap(), want, "{path}");
        }
    }

    #[test]
    fn a_miss_describes_the_document() {
        let doc = json!({"name":"bryan","male":"yes","age":45});
        let err = Path::parse("{$.agee}").unwrap().extract(&doc).unwrap_err();
        assert_eq!(
            err.to_string(),
            "jsonPath `{$.agee}` matched nothing in the response, which is an object with keys name, male, age"
        );
        let hostile: serde_json::Map<String, Value> =
            (0..10_000).map(|i| (format!("{i}{}", "k".repeat(10_000)), json!(1))).collect();
        let err = Path::parse("{$.x}").unwrap().extract(&Value::Object(hostile)).unwrap_err();
        assert!(err.to_string().len() < 1500, "{}", err.to_string().len());
        assert!(err.to_string().contains("and 9980 more"));
        let err = Path::parse("{.items[3]}").unwrap().extract(&json!({"items": [1]})).unwrap_err();
        assert!(err.to_string().contains("keys items"), "{err}");
        assert!(Path::parse("{$.a[}").is_err());
    }
}
