//! `{{ args.NAME }}` placeholders in urls, header values, bodies and queries.
//!
//! BCS substitutes with fasttemplate, where an argument may be named anything (`service-name`,
//! `PodContainer[0]`). Handlebars would read `args.PodContainer[0]` as an index and refuses some characters,
//! so every `{{ args.NAME }}` tag is first rewritten to a safe positional key, and only then rendered by
//! handlebars (strict mode: an unknown variable is an error; no HTML escaping: values are inserted as they
//! are). An argument that is referenced but missing or without a value is reported by name.

use std::sync::LazyLock;

use common::api::Argument;
use handlebars::Handlebars;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("{field}: argument {name:?} is referenced but not declared in the run's args (declared: {declared})")]
    Missing { field: String, name: String, declared: String },
    #[error("{field}: argument {name:?} has no value (it is declared without one and was never supplied)")]
    NoValue { field: String, name: String },
    #[error("{field}: `{{{{` at byte {offset} is never closed by `}}}}`")]
    Unterminated { field: String, offset: usize },
    #[error("{field}: {reason}")]
    Render { field: String, reason: String },
}

static HANDLEBARS: LazyLock<Handlebars<'static>> = LazyLock::new(|| {
    let mut handlebars = Handlebars::new();
    handlebars.set_strict_mode(true);
    handlebars.register_escape_fn(handlebars::no_escape);
    handlebars
});

/// A tag found in a template.
#[derive(Debug, PartialEq, Eq)]
struct Tag {
    start: usize,
    end: usize,
    /// `Some(name)` for `{{ args.NAME }}` (or `{{{ args.NAME }}}`), `None` for anything else.
    arg: Option<String>,
}

fn scan(field: &str, text: &str) -> Result<Vec<Tag>, TemplateError> {
    let mut tags = Vec::new();
    let mut cursor = 0;
    while let Some(found) = text[cursor..].find("{{") {
        let start = cursor + found;
        // Handlebars' escape: `\{{` is literal text.
        if start > 0 && text.as_bytes()[start - 1] == b'\\' {
            cursor = start + 2;
            continue;
        }
        let Some(close) = text[start + 2..].find("}}") else {
            return Err(TemplateError::Unterminated { field: field.to_string(), offset: start });
        };
        let mut end = start + 2 + close + 2;
        let mut inner = &text[start + 2..end - 2];
        if let Some(stripped) = inner.strip_prefix('{') {
            inner = stripped;
            if text[end..].starts_with('}') {
                end += 1;
            }
        }
        let arg = inner.trim().strip_prefix("args.").map(|name| name.trim().to_string());
        tags.push(Tag { start, end, arg });
        cursor = end;
    }
    Ok(tags)
}

/// The argument names a template refers to, for validation.
pub fn referenced_args(field: &str, text: &str) -> Result<Vec<String>, TemplateError> {
    Ok(scan(field, text)?.into_iter().filter_map(|t| t.arg).collect())
}

/// Renders `text`, naming `field` (e.g. `url`, `headers[Authorization]`) in errors.
pub fn render(field: &str, text: &str, args: &[Argument]) -> Result<String, TemplateError> {
    if !text.contains("{{") {
        return Ok(text.to_string());
    }
    let tags = scan(field, text)?;
    let mut rewritten = String::with_capacity(text.len());
    let mut values = serde_json::Map::new();
    let mut cursor = 0;
    for tag in &tags {
        rewritten.push_str(&text[cursor..tag.start]);
        match &tag.arg {
            Some(name) => {
                let index = args.iter().position(|a| &a.name == name).ok_or_else(|| TemplateError::Missing {
                    field: field.to_string(),
                    name: name.clone(),
                    declared: declared(args),
                })?;
                let value = args[index]
                    .value
                    .as_ref()
                    .ok_or_else(|| TemplateError::NoValue { field: field.to_string(), name: name.clone() })?;
                values.insert(format!("a{index}"), serde_json::Value::String(value.clone()));
                rewritten.push_str(&format!("{{{{args.a{index}}}}}"));
            }
            None => rewritten.push_str(&text[tag.start..tag.end]),
        }
        cursor = tag.end;
    }
    rewritten.push_str(&text[cursor..]);
    if tags.iter().all(|t| t.arg.is_some()) && !rewritten.contains('\\') {
        // Only argument tags: substitute directly; handlebars would produce the same text.
        return Ok(substitute(&rewritten, &values));
    }
    let data = serde_json::json!({ "args": values });
    HANDLEBARS.render_template(&rewritten, &data).map_err(|e| TemplateError::Render {
        field: field.to_string(),
        reason: format!("{} (only {{{{ args.NAME }}}} placeholders are defined)", e.reason()),
    })
}

fn substitute(rewritten: &str, values: &serde_json::Map<String, serde_json::Value>) -> String {
    let mut out = String::with_capacity(rewritten.len());
    let mut rest = rewritten;
    while let Some(start) = rest.find("{{args.a") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "{{args.".len()..];
        let end = after.find("}}").unwrap_or(after.len());
        if let Some(serde_json::Value::String(value)) = values.get(&after[..end]) {
            out.push_str(value);
        }
        rest = after.get(end + 2..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

fn declared(args: &[Argument]) -> String {
    if args.is_empty() {
        return "none".to_string();
    }
    args.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> Vec<Argument> {
        vec![
            Argument::new("PodIP", "127.0.0.9"),
            Argument::new("service-name", "svc.default.svc.cluster.local"),
            Argument::new("PodContainer[0]", "main"),
            Argument::new("quote", "a\"b<c>&d"),
            Argument { name: "unset".into(), value: None },
        ]
    }

    #[test]
    fn renders_bcs_placeholders() {
        let a = args();
        assert_eq!(render("url", "http://{{ args.PodIP }}:9091", &a).unwrap(), "http://127.0.0.9:9091");
        assert_eq!(render("url", "http://{{args.PodIP}}:9091/x", &a).unwrap(), "http://127.0.0.9:9091/x");
        assert_eq!(
            render("url", "http://{{ args.service-name }}/{{args.PodContainer[0]}}", &a).unwrap(),
            "http://svc.default.svc.cluster.local/main"
        );
        assert_eq!(render("body", "{\"q\":\"{{{ args.quote }}}\"}", &a).unwrap(), "{\"q\":\"a\"b<c>&d\"}");
        assert_eq!(render("body", "{{ args.quote }}", &a).unwrap(), "a\"b<c>&d");
        assert_eq!(render("url", "no placeholders", &a).unwrap(), "no placeholders");
        // An unused argument without a value does not matter (BCS failed every render in that case).
        assert_eq!(render("url", "{{ args.PodIP }}", &a).unwrap(), "127.0.0.9");
    }

    #[test]
    fn handlebars_escapes_still_work_around_args() {
        let a = args();
        assert_eq!(render("q", "{{ args.PodIP }} \\{{x}}", &a).unwrap(), "127.0.0.9 {{x}}");
        assert_eq!(render("q", "literal \\{{ args.PodIP }}", &a).unwrap(), "literal {{ args.PodIP }}");
    }

    #[test]
    fn errors_name_the_argument_and_the_field() {
        let a = args();
        let err = render("url", "http://{{ args.PodName }}", &a).unwrap_err();
        assert!(matches!(&err, TemplateError::Missing { name, .. } if name == "PodName"), "{err}");
        assert!(err.to_string().starts_with("url: argument \"PodName\""), "{err}");
        assert!(err.to_string().contains("PodIP, service-name"), "{err}");
        let err = render("headers[X]", "{{ args.unset }}", &a).unwrap_err();
        assert!(matches!(err, TemplateError::NoValue { .. }), "{err}");
        assert!(matches!(render("url", "http://{{ args.PodIP", &a), Err(TemplateError::Unterminated { .. })));
        let err = render("url", "{{ podIP }}", &a).unwrap_err();
        assert!(matches!(err, TemplateError::Render { .. }), "{err}");
    }

    #[test]
    fn lists_referenced_args() {
        assert_eq!(
            referenced_args("url", "http://{{ args.PodIP }}:{{args.port}}/{{ other }}").unwrap(),
            vec!["PodIP".to_string(), "port".to_string()]
        );
    }
}
