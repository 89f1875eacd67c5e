//! JSONPath as Kubernetes (and therefore BCS) users write it — `{$.age}`, `{.items[0].name}`, `$.age`,
//! `{.metadata.labels.app-name}` — translated to RFC 9535 syntax and evaluated by `jsonpath-rust`.
//!
//! Values keep their JSON type: `45` stays a number and `"45"` a string, so conditions can tell them apart
//! and `asInt` works on both. One match gives that value; several give an array of them; none is an error
//! that shows what the document looks like.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use jsonpath_rust::parser::model::{JpQuery, Segment, Selector};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Parsed paths by text: every run of a template uses the same few paths, and parsing dominates extraction.
static PATHS: LazyLock<Mutex<HashMap<String, Arc<Path>>>> = LazyLock::new(Default::default);
const PATH_CACHE_LIMIT: usize = 4096;

/// Why a `jsonPath` cannot be used or found nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPathError {
    /// A Kubernetes JSONPath construct with no RFC 9535 translation (`range`/`end` templates).
    #[error("jsonPath `{path}` is not supported: {reason}")]
    Unsupported {
        /// The path as written.
        path: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// The translated path does not parse.
    #[error("jsonPath `{path}` does not parse (as `{normalized}`): {reason}")]
    Parse {
        /// The path as written.
        path: String,
        /// The RFC 9535 form it was translated to.
        normalized: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// The path matched nothing in the measured document.
    #[error("jsonPath `{path}` matched nothing in the response, which is {shape}")]
    NoMatch {
        /// The path as written.
        path: String,
        /// An outline of the document (its top-level keys or type), so the user sees where the path went wrong.
        shape: String,
    },
}

/// A parsed path, kept with the text the user wrote for messages.
#[derive(Debug, Clone)]
pub struct Path {
    written: String,
    query: JpQuery,
    /// For a path of member names only (`$.age`, `$.status.ready`): those names, so [`Path::pick`] can take the
    /// value straight from the JSON text.
    names: Option<Vec<String>>,
}

impl Path {
    /// Parses a path as Kubernetes users write it (`{$.age}`, `{.items[0].name}`, `$.age`), through the cache.
    pub fn parse(written: &str) -> Result<Self, JsonPathError> {
        let normalized = normalize(written)?;
        let query = jsonpath_rust::parser::parse_json_path(&normalized).map_err(|e| JsonPathError::Parse {
            path: written.to_string(),
            normalized: normalized.clone(),
            reason: e.to_string(),
        })?;
        let names = query
            .segments
            .iter()
            .map(|segment| match segment {
                Segment::Selector(Selector::Name(name)) => Some(name.clone()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .filter(|names| !names.is_empty());
        Ok(Self { written: written.to_string(), query, names })
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

    /// Whether the path is member names only (`{$.age}`, `{.status.ready}`): at most one match, never more than
    /// the document holds.
    pub fn is_members_only(&self) -> bool {
        self.names.is_some()
    }

    /// The path as the user wrote it, for messages.
    pub fn written(&self) -> &str {
        &self.written
    }

    /// What [`Path::extract`] gives for the JSON text `body`, taken straight from the text (nothing but the
    /// matched value is built) — for a path of member names whose value is there in a valid document. `None`
    /// otherwise (not such a path, not JSON, no match, or a document `serde_json::Value` decodes specially): the
    /// caller then decodes the document and extracts, which says what went wrong.
    ///
    /// Exact: the whole text is read with the same parser and the same checks as when decoding it into a `Value`
    /// (UTF-8, escapes and surrogates of every string, numbers, nesting depth, nothing after the document), and a
    /// member that occurs twice counts with its last value, as in the decoded object.
    pub fn pick(&self, body: &[u8]) -> Option<Value> {
        let names = self.names.as_deref()?;
        let mut document = serde_json::Deserializer::from_slice(body);
        let found = Pick(names).deserialize(&mut document).ok()??;
        document.end().ok()?;
        Some(found)
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

/// The member name `serde_json::Value` decodes specially (its `raw_value` feature): a document holding it is left
/// to the general way.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// The value at a chain of member names in the JSON value being read, or `None` when it is not there; every other
/// part of the value is read and checked but not kept.
struct Pick<'p>(&'p [String]);

impl<'de> DeserializeSeed<'de> for Pick<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        match self.0.split_first() {
            None => serde::Deserialize::deserialize(deserializer).map(Some),
            Some((name, rest)) => deserializer.deserialize_any(Member { name, rest }),
        }
    }
}

/// Looks for member `name` (then `rest` inside it) in an object; any other value has no members.
struct Member<'p> {
    name: &'p str,
    rest: &'p [String],
}

impl<'de> Visitor<'de> for Member<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(matches) = map.next_key_seed(Key(Some(self.name)))? {
            if matches {
                // A member that occurs twice: the last one counts, as in a decoded object.
                found = map.next_value_seed(Pick(self.rest))?;
            } else {
                map.next_value_seed(Skip)?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Skip.visit_seq(seq).map(|()| None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A member name: whether it is the one looked for (read as `serde_json::Value` reads names).
struct Key<'p>(Option<&'p str>);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<bool, E> {
        if name == RAW_VALUE_TOKEN {
            return Err(E::custom("a member name serde_json decodes specially"));
        }
        Ok(self.0 == Some(name))
    }
}

/// Reads and checks a value without keeping it.
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Key(None))?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
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

    /// `Path::extract` on the decoded document: what `Path::pick` must give whenever it gives anything.
    fn general(path: &Path, body: &[u8]) -> Option<Value> {
        path.extract(&serde_json::from_slice(body).ok()?).ok()
    }

    #[test]
    fn member_paths_are_picked_from_the_text() {
        let body = br#"{"name":"bryan","male":"yes","age":45,"status":{"ready":true,"age":"x"},"list":[1,{"age":2}]}"#;
        let cases = [
            ("{$.age}", Some(json!(45))),
            ("{.name}", Some(json!("bryan"))),
            ("{.status.ready}", Some(json!(true))),
            ("{.status}", Some(json!({"ready": true, "age": "x"}))),
            ("{.agee}", None),
            ("{.age.x}", None),
            ("{.list.age}", None),
        ];
        for (written, want) in cases {
            let path = Path::parse(written).unwrap();
            assert_eq!(path.pick(body), want, "{written}");
            assert_eq!(general(&path, body), want, "{written}");
        }
        // Not member names only: left to the general way.
        for written in ["{$}", "{.list[0]}", "{.list[*].age}", "{..age}", "{.items[?(@.ok == true)].name}"] {
            assert_eq!(Path::parse(written).unwrap().pick(body), None, "{written}");
        }
    }

    #[test]
    fn a_pick_reads_the_whole_document_as_decoding_does() {
        let age = Path::parse("{$.age}").unwrap();
        let deep = format!(r#"{{"age":45,"n":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        let cases: [&[u8]; 10] = [
            // A member twice: the last one counts.
            br#"{"age":1,"age":2}"#,
            br#"{"age":{"x":1},"age":3}"#,
            // Broken after the value, or text after the document.
            br#"{"age":45,"name":}"#,
            br#"{"age":45} x"#,
            // A lone surrogate or invalid UTF-8 in a string that is not kept.
            br#"{"age":45,"name":"\ud800"}"#,
            b"{\"age\":45,\"name\":\"\xff\"}",
            // A number out of range, too deep a nesting.
            br#"{"age":45,"n":1e999}"#,
            deep.as_bytes(),
            // The member name serde_json decodes specially.
            br#"{"$serde_json::private::RawValue":"{\"age\":1}","age":45}"#,
            br#"  {"age" : 45 }  "#,
        ];
        for body in cases {
            let (picked, general) = (age.pick(body), general(&age, body));
            let text = String::from_utf8_lossy(body);
            assert_eq!(picked.is_some(), general.is_some() && !text.contains(RAW_VALUE_TOKEN), "{text}");
            if picked.is_some() {
                assert_eq!(picked, general, "{text}");
            }
        }
        assert_eq!(age.pick(br#"{"age":1,"age":2}"#), Some(json!(2)));
        assert_eq!(age.pick(br#"{"age":{"x":1},"age":3}"#), Some(json!(3)));
        assert_eq!(Path::parse("{.age.x}").unwrap().pick(br#"{"age":{"x":1},"age":{"y":2}}"#), None);
    }

    mod picked {
        use super::*;
        use proptest::prelude::*;

        /// JSON text (not always valid: members twice, odd numbers and escapes, cuts and stray bytes) over a few
        /// member names.
        fn text() -> impl Strategy<Value = Vec<u8>> {
            let name = prop_oneof![
                Just("age".to_string()),
                Just("a".to_string()),
                Just(String::new()),
                Just(r"a\u0067e".to_string()),
                Just(r"\ud800".to_string()),
                Just(RAW_VALUE_TOKEN.to_string()),
            ];
            let scalar = prop_oneof![
                Just("45".to_string()),
                Just("-0.5e3".to_string()),
                Just("1e999".to_string()),
                Just("18446744073709551616".to_string()),
                Just("true".to_string()),
                Just("null".to_string()),
                Just(r#""x\n\u00e9""#.to_string()),
                Just(r#""\udc00""#.to_string()),
                Just("01".to_string()),
                Just(r#""{\"age\":1}""#.to_string()),
            ];
            let value = scalar.prop_recursive(4, 32, 4, move |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..4).prop_map(|items| format!("[{}]", items.join(","))),
                    proptest::collection::vec((name.clone(), inner), 0..4).prop_map(|members| {
                        let members: Vec<String> = members.iter().map(|(k, v)| format!(r#""{k}":{v}"#)).collect();
                        format!("{{{}}}", members.join(","))
                    }),
                ]
            });
            (value, 0..6u8, any::<usize>(), any::<u8>()).prop_map(|(text, damage, at, byte)| {
                let mut bytes = text.into_bytes();
                let at = at % (bytes.len() + 1);
                match damage {
                    0 => bytes.truncate(at),
                    1 => bytes.insert(at, byte),
                    _ => {}
                }
                bytes
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            /// Whatever the text, a pick is what decoding and extracting give, and a path of member names that
            /// matches in a valid document is picked (the general way is left only for misses and errors).
            #[test]
            fn a_pick_is_what_decoding_and_extracting_give(
                body in text(),
                names in proptest::collection::vec(prop_oneof![Just("age"), Just("a"), Just("ag")], 1..4),
            ) {
                let path = Path::parse(&format!("{{$.{}}}", names.join("."))).unwrap();
                let picked = path.pick(&body);
                let general = general(&path, &body);
                if picked.is_some() {
                    prop_assert_eq!(&picked, &general);
                }
                let special = String::from_utf8_lossy(&body).contains(RAW_VALUE_TOKEN);
                if general.is_some() && !special {
                    prop_assert!(picked.is_some(), "not picked: {}", String::from_utf8_lossy(&body));
                }
            }
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
