//! `{{ args.NAME }}` placeholders in urls, header values, bodies and queries.
//!
//! BCS substitutes with fasttemplate, where an argument may be named anything (`service-name`,
//! `PodContainer[0]`). Only argument tags exist: `{{ args.NAME }}` (also `{{{ args.NAME }}}` and without
//! spaces). Anything else between `{{` and `}}` — handlebars partials (`{{> x}}`), helpers (`{{lookup …}}`),
//! blocks (`{{#each}}`), comments — is rejected when the template is validated, so no template engine ever runs
//! on what a tenant wrote (handlebars partials can recurse without limit). `\{{` is a literal `{{`, as in
//! handlebars. Values are inserted as they are (no escaping). An argument that is referenced but missing or
//! without a value is reported by name.

use common::api::Argument;

/// Why a templated field cannot be rendered; reported when the template is validated, before any request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A placeholder names an argument the run does not declare.
    #[error("{field}: argument {name:?} is referenced but not declared in the run's args (declared: {declared})")]
    Missing {
        /// The templated field (`url`, `headers[0].value`, `body`, `query`).
        field: String,
        /// The argument's name.
        name: String,
        /// The arguments the run declares, listed.
        declared: String,
    },
    /// A placeholder names an argument that has no value.
    #[error("{field}: argument {name:?} has no value (it is declared without one and was never supplied)")]
    NoValue {
        /// The templated field (`url`, `headers[0].value`, `body`, `query`).
        field: String,
        /// The argument's name.
        name: String,
    },
    /// A `{{` without its `}}`.
    #[error("{field}: `{{{{` at byte {offset} is never closed by `}}}}`")]
    Unterminated {
        /// The templated field (`url`, `headers[0].value`, `body`, `query`).
        field: String,
        /// Byte offset of the tag in the field.
        offset: usize,
    },
    /// The field is longer than a template may be.
    #[error("{field}: the text is {length} bytes long; templates may have at most {MAX_TEMPLATE_BYTES}")]
    TooLong {
        /// The templated field (`url`, `headers[0].value`, `body`, `query`).
        field: String,
        /// The field's length in bytes.
        length: usize,
    },
    /// A tag that is not an argument placeholder: no template engine runs on what a tenant wrote.
    #[error(
        "{field}: `{tag}` at byte {offset} is not an argument placeholder; only {{{{ args.NAME }}}} is supported \
         (no partials, helpers, blocks or other variables; write \\{{{{ for a literal {{{{)"
    )]
    Unsupported {
        /// The templated field (`url`, `headers[0].value`, `body`, `query`).
        field: String,
        /// The tag as written.
        tag: String,
        /// Byte offset of the tag in the field.
        offset: usize,
    },
}

/// Longest text rendered or scanned (the CRD and validation bound every templated field well below this).
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;

/// A tag found in a template.
#[derive(Debug, PartialEq, Eq)]
struct Tag {
    start: usize,
    end: usize,
    /// `Some(name)` for `{{ args.NAME }}` (or `{{{ args.NAME }}}`), `None` for a `\{{` escape.
    arg: Option<String>,
}

fn scan(field: &str, text: &str) -> Result<Vec<Tag>, TemplateError> {
    if text.len() > MAX_TEMPLATE_BYTES {
        return Err(TemplateError::TooLong { field: field.to_string(), length: text.len() });
    }
    let mut tags = Vec::new();
    let mut cursor = 0;
    while let Some(found) = text[cursor..].find("{{") {
        let start = cursor + found;
        // Handlebars' escape: `\{{` is a literal `{{`.
        if start > 0 && text.as_bytes()[start - 1] == b'\\' {
            tags.push(Tag { start: start - 1, end: start + 2, arg: None });
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
        let name = inner.trim().strip_prefix("args.").map(str::trim).filter(|n| {
            !n.is_empty() && !n.chars().any(|c| c.is_whitespace() || matches!(c, '{' | '}' | '(' | ')' | '"' | '\''))
        });
        let Some(name) = name else {
            return Err(TemplateError::Unsupported {
                field: field.to_string(),
                tag: crate::text::excerpt(&text[start..end], 40),
                offset: start,
            });
        };
        tags.push(Tag { start, end, arg: Some(name.to_string()) });
        cursor = end;
    }
    Ok(tags)
}

/// The argument names a template refers to, for validation; fails on anything but argument tags.
pub fn referenced_args(field: &str, text: &str) -> Result<Vec<String>, TemplateError> {
    Ok(scan(field, text)?.into_iter().filter_map(|t| t.arg).collect())
}

/// Renders `text`, naming `field` (e.g. `url`, `headers[Authorization]`) in errors.
pub fn render(field: &str, text: &str, args: &[Argument]) -> Result<String, TemplateError> {
    if !text.contains("{{") {
        return Ok(text.to_string());
    }
    let tags = scan(field, text)?;
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0;
    for tag in &tags {
        out.push_str(&text[cursor..tag.start]);
        match &tag.arg {
            Some(name) => {
                let arg = args.iter().find(|a| &a.name == name).ok_or_else(|| TemplateError::Missing {
                    field: field.to_string(),
                    name: name.clone(),
                    declared: declared(args),
                })?;
                let value = arg
                    .value
                    .as_ref()
                    .ok_or_else(|| TemplateError::NoValue { field: field.to_string(), name: name.clone() })?;
                out.push_str(value);
            }
            None => out.push_str("{{"),
        }
        cursor = tag.end;
    }
    out.push_str(&text[cursor..]);
    Ok(out)
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
            Argument { name: "unset".into(), value: None, value_from: None },
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
        assert!(matches!(err, TemplateError::Unsupported { .. }), "{err}");
    }

    #[test]
    fn only_argument_tags_are_allowed() {
        let a = args();
        for (text, tag) in [
            ("http://{{> partial}}/", "{{> partial}}"),
            ("{{#each args}}{{this}}{{/each}}", "{{#each args}}"),
            ("{{lookup args 'PodIP'}}", "{{lookup args 'PodIP'}}"),
            ("{{!-- comment --}}", "{{!-- comment --}}"),
            ("{{ args }}", "{{ args }}"),
            ("{{ args. }}", "{{ args. }}"),
            ("{{ args.a b }}", "{{ args.a b }}"),
            ("{{#*inline \"p\"}}{{> p}}{{/inline}}{{> p}}", "{{#*inline \"p\"}}"),
        ] {
            let err = render("url", text, &a).unwrap_err();
            assert!(matches!(&err, TemplateError::Unsupported { tag: t, .. } if t == tag), "{text}: {err}");
            assert!(err.to_string().contains("only {{ args.NAME }} is supported"), "{err}");
            assert!(referenced_args("url", text).is_err(), "{text}");
        }
    }

    #[test]
    fn huge_texts_are_refused_without_scanning() {
        let huge = "{{ args.PodIP }}".repeat(1_000_000);
        let start = std::time::Instant::now();
        assert!(matches!(render("url", &huge, &args()), Err(TemplateError::TooLong { .. })));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn lists_referenced_args() {
        assert_eq!(
            referenced_args("url", "http://{{ args.PodIP }}:{{args.port}}/\\{{ other }}").unwrap(),
            vec!["PodIP".to_string(), "port".to_string()]
        );
    }
}
