//! Response encoding: JSON and YAML bodies, `Status` errors, `Warning` headers, and list
//! bodies streamed out of shared objects without copying them.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use hyper::{StatusCode, header};
use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;

use crate::json::{WireOrder, is_typed};
use crate::status::ApiError;

fn base(status: StatusCode, content_type: &'static str, body: impl Into<Body>) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache, private"));
    if let Ok(v) = header::HeaderValue::from_str(&crate::meta::new_uid()) {
        h.insert("audit-id", v);
    }
    r
}

/// `Warning: 299 - "<text>"` headers (RFC 7234), as the apiserver emits them.
pub(super) fn add_warnings(r: &mut Response, warnings: &[String]) {
    for w in warnings {
        let escaped: String = w
            .chars()
            .filter(|c| c.is_ascii() && !c.is_ascii_control())
            .collect::<String>()
            .replace('\\', "\\\\")
            .replace('"', "\\\"");
        if let Ok(v) = header::HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
}

pub(crate) fn json_response(status: StatusCode, v: &Value, warnings: &[String]) -> Response {
    let body = serde_json::to_vec(&WireOrder(v)).unwrap_or_default();
    let mut r = base(status, "application/json", body);
    add_warnings(&mut r, warnings);
    r
}

/// [`json_response`] of an object already encoded (shared bytes, not copied).
pub(super) fn shared_json_response(status: StatusCode, body: axum::body::Bytes, warnings: &[String]) -> Response {
    let mut r = base(status, "application/json", body);
    add_warnings(&mut r, warnings);
    r
}

/// A plain-text body (`pods/NAME/log`).
pub(super) fn text_response(status: StatusCode, text: String) -> Response {
    base(status, "text/plain", text)
}

/// A streamed plain-text body (`pods/NAME/log?follow=true`).
pub(super) fn text_stream_response(status: StatusCode, body: Body) -> Response {
    base(status, "text/plain", body)
}

pub(super) fn yaml_response(status: StatusCode, v: &Value, warnings: &[String]) -> Response {
    let body = serde_yaml::to_string(v).unwrap_or_default().into_bytes();
    let mut r = base(status, "application/yaml", body);
    add_warnings(&mut r, warnings);
    r
}

pub(super) fn bytes_response(status: StatusCode, body: Vec<u8>, warnings: &[String]) -> Response {
    let mut r = base(status, "application/json", body);
    add_warnings(&mut r, warnings);
    r
}

pub(crate) fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = bytes_response(status, serde_json::to_vec(&e.status_doc()).unwrap_or_default(), &[]);
    if let Some(s) = e.retry_after
        && let Ok(v) = header::HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

pub(super) fn discovery_response(v: &Value, version: &str) -> Response {
    let body = serde_json::to_vec(&WireOrder(v)).unwrap_or_default();
    let ct = if version == "v2beta1" {
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    } else {
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    };
    let mut r = base(StatusCode::OK, ct, body);
    r.headers_mut().insert(header::VARY, header::HeaderValue::from_static("Accept"));
    r
}

pub(super) fn openapi_response(hash: &str, bytes: Arc<Vec<u8>>, immutable: bool) -> Response {
    let mut r = base(StatusCode::OK, "application/json", bytes.as_ref().clone());
    if let Ok(v) = header::HeaderValue::from_str(&format!("\"{hash}\"")) {
        r.headers_mut().insert(header::ETAG, v);
    }
    if immutable {
        r.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("public, immutable"));
    }
    r
}

/// Serializes an object without `apiVersion`/`kind`, as typed list items are encoded.
struct WithoutTypeMeta<'a>(&'a Value);

impl Serialize for WithoutTypeMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(m) => {
                let mut map = s.serialize_map(None)?;
                for (k, v) in m {
                    if k != "apiVersion" && k != "kind" {
                        map.serialize_entry(k, v)?;
                    }
                }
                map.end()
            }
            other => other.serialize(s),
        }
    }
}

struct Items<'a> {
    items: &'a [Arc<Value>],
    strip_type_meta: bool,
}

impl Serialize for Items<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.items.len()))?;
        for i in self.items {
            if self.strip_type_meta {
                seq.serialize_element(&WithoutTypeMeta(i))?;
            } else {
                seq.serialize_element(&WireOrder(i))?;
            }
        }
        seq.end()
    }
}

/// A `<Kind>List` body. Built-in kinds omit `apiVersion`/`kind` on items like the typed
/// encoder does; custom resources (unstructured) keep them.
pub(super) fn list_body(
    list_kind: &str,
    api_version: &str,
    list_meta: &Value,
    items: &[Arc<Value>],
    strip_type_meta: bool,
) -> Vec<u8> {
    #[derive(Serialize)]
    struct ListDoc<'a> {
        kind: &'a str,
        #[serde(rename = "apiVersion")]
        api_version: &'a str,
        metadata: &'a Value,
        items: Items<'a>,
    }
    /// An unstructured list (custom resources): Go's encoder sorts the keys of the map.
    #[derive(Serialize)]
    struct UnstructuredListDoc<'a> {
        #[serde(rename = "apiVersion")]
        api_version: &'a str,
        items: Items<'a>,
        kind: &'a str,
        metadata: &'a Value,
    }
    let items = Items { items, strip_type_meta };
    if is_typed(api_version) {
        serde_json::to_vec(&ListDoc { kind: list_kind, api_version, metadata: list_meta, items })
    } else {
        serde_json::to_vec(&UnstructuredListDoc { api_version, items, kind: list_kind, metadata: list_meta })
    }
    .unwrap_or_default()
}
