//! Kubernetes `Status` errors, shaped exactly like `k8s.io/apimachinery/pkg/api/errors`.
//!
//! Clients (client-go, kube-rs, kubectl) branch on `code` and `reason`, and people read `message`,
//! so every constructor reproduces the real apiserver's wording, including its quirks
//! (`details.kind` holds the *resource* name for most errors, but the *kind* for `Invalid`).

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq};
use serde_json::{Map, Value, json};

/// A group-qualified resource name (`pods`, `deployments.apps`), as used in error messages.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> Self {
        Self { group: group.to_string(), resource: resource.to_string() }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// The kinds of field errors of `k8s.io/apimachinery/pkg/util/validation/field`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorType {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
    TypeInvalid,
}

impl FieldErrorType {
    fn label(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "Not found",
            FieldErrorType::Required => "Required value",
            FieldErrorType::Duplicate => "Duplicate value",
            FieldErrorType::Invalid | FieldErrorType::TypeInvalid => "Invalid value",
            FieldErrorType::NotSupported => "Unsupported value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::TooLong => "Too long",
            FieldErrorType::TooMany => "Too many",
            FieldErrorType::Internal => "Internal error",
        }
    }

    fn cause(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "FieldValueNotFound",
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Duplicate => "FieldValueDuplicate",
            FieldErrorType::Invalid => "FieldValueInvalid",
            FieldErrorType::NotSupported => "FieldValueNotSupported",
            FieldErrorType::Forbidden => "FieldValueForbidden",
            FieldErrorType::TooLong => "FieldValueTooLong",
            FieldErrorType::TooMany => "FieldValueTooMany",
            FieldErrorType::Internal => "InternalError",
            FieldErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }
}

/// One field validation failure (`field.Error`).
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub kind: FieldErrorType,
    pub field: String,
    /// `None` means the value is omitted from the message (Go's `omitValue`).
    pub bad_value: Option<Value>,
    pub detail: String,
}

impl FieldError {
    pub fn new(
        kind: FieldErrorType,
        field: impl Into<String>,
        bad_value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self { kind, field: field.into(), bad_value, detail: detail.into() }
    }
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorType::Required, field, None, detail)
    }
    pub fn invalid(field: impl Into<String>, value: Value, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorType::Invalid, field, Some(value), detail)
    }
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorType::Forbidden, field, None, detail)
    }
    pub fn not_supported(field: impl Into<String>, value: Value, supported: &[String]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(FieldErrorType::NotSupported, field, Some(value), detail)
    }
    pub fn duplicate(field: impl Into<String>, value: Value) -> Self {
        Self::new(FieldErrorType::Duplicate, field, Some(value), "")
    }
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self::new(FieldErrorType::TooLong, field, None, format!("may not be more than {max} bytes"))
    }

    /// `ErrorBody()`: the message without the field path.
    pub fn body(&self) -> String {
        let mut s = match (&self.kind, &self.bad_value) {
            (
                FieldErrorType::Required
                | FieldErrorType::Forbidden
                | FieldErrorType::TooLong
                | FieldErrorType::Internal,
                _,
            )
            | (_, None) => self.kind.label().to_string(),
            (_, Some(v)) => format!("{}: {}", self.kind.label(), go_value(v)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Renders a JSON value the way Go's `%v`/`%q` would render the decoded value in field errors.
pub(crate) fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(_) => format!("[]interface {{}}{}", go_composite(v)),
        Value::Object(_) => format!("map[string]interface {{}}{}", go_composite(v)),
    }
}

fn go_composite(v: &Value) -> String {
    match v {
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_composite).collect();
            format!("{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map.iter().map(|(k, v)| format!("{k:?}:{}", go_composite(v))).collect();
            format!("{{{}}}", inner.join(", "))
        }
        other => go_value(other),
    }
}

/// An API error that is rendered as a `Status` object.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    /// Boxed: with serde_json's `preserve_order` (enabled elsewhere in the workspace) a `Value` is large, and
    /// this error travels through every handler's `Result`.
    pub details: Option<Box<Value>>,
    /// Seconds for the `Retry-After` header (429 and some 5xx).
    pub retry_after: Option<u64>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

fn details(gr: &GroupResource, name: &str) -> Value {
    let mut d = Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !gr.group.is_empty() {
        d.insert("group".into(), json!(gr.group));
    }
    d.insert("kind".into(), json!(gr.resource));
    Value::Object(d)
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self { code, reason: reason.to_string(), message: message.into(), details: None, retry_after: None }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// The `Status` object sent to clients, in the real server's field order (`kind`, `apiVersion`, `metadata`, `status`, `message`, `reason`,
    /// `details`, `code`: the Go struct's), whatever order the JSON maps keep.
    pub fn status_doc(&self) -> StatusDoc<'_> {
        StatusDoc(self)
    }

    pub fn not_found(gr: &GroupResource, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{gr} {name:?} not found")).with_details(details(gr, name))
    }

    /// The router's 404 for paths that name no known resource.
    pub fn not_found_path() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource").with_details(json!({}))
    }

    pub fn already_exists(gr: &GroupResource, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{gr} {name:?} already exists")).with_details(details(gr, name))
    }

    pub fn conflict(gr: &GroupResource, name: &str, cause: &str) -> Self {
        Self::new(409, "Conflict", format!("Operation cannot be fulfilled on {gr} {name:?}: {cause}"))
            .with_details(details(gr, name))
    }

    /// The optimistic-concurrency failure clients retry on.
    pub fn modified(gr: &GroupResource, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Self {
        let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let message = match errors.len() {
            0 => format!("{qualified} {name:?} is invalid"),
            1 => format!("{qualified} {name:?} is invalid: {}", errors[0]),
            _ => {
                let all: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                format!("{qualified} {name:?} is invalid: [{}]", all.join(", "))
            }
        };
        let causes: Vec<Value> =
            errors.iter().map(|e| json!({"reason": e.kind.cause(), "message": e.body(), "field": e.field})).collect();
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        d.insert("kind".into(), json!(kind));
        d.insert("causes".into(), Value::Array(causes));
        Self::new(422, "Invalid", message).with_details(Value::Object(d))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn forbidden(gr: &GroupResource, name: &str, cause: &str) -> Self {
        let message = if name.is_empty() {
            format!("{gr} is forbidden: {cause}")
        } else {
            format!("{gr} {name:?} is forbidden: {cause}")
        };
        Self::new(403, "Forbidden", message).with_details(details(gr, name))
    }

    pub fn forbidden_path(user: &str, verb: &str, path: &str) -> Self {
        Self::new(403, "Forbidden", format!("forbidden: User {user:?} cannot {verb} path {path:?}"))
            .with_details(json!({}))
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn method_not_supported(gr: &GroupResource, action: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("{action} is not supported on resources of kind {:?}", gr.to_string()),
        )
        .with_details(json!({"group": gr.group, "kind": gr.resource}))
    }

    pub fn method_not_allowed() -> Self {
        Self::new(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            .with_details(json!({}))
    }

    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        let _ = content_type;
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    pub fn not_acceptable() -> Self {
        Self::new(406, "NotAcceptable", "the server was unable to respond with a content type that the client supports")
    }

    /// `410 Gone` with reason `Expired`, as the watch cache and paginated lists return it.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(cause: impl std::fmt::Display) -> Self {
        let cause = cause.to_string();
        Self::new(500, "InternalError", format!("Internal error occurred: {cause}"))
            .with_details(json!({"causes": [{"message": cause}]}))
    }

    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// `NewTooManyRequests`: a zero `retry_after` is omitted (no `Retry-After` header either).
    pub fn too_many_requests(message: impl Into<String>, retry_after: u64) -> Self {
        if retry_after == 0 {
            return Self::new(429, "TooManyRequests", message).with_details(json!({}));
        }
        let mut e = Self::new(429, "TooManyRequests", message).with_details(json!({"retryAfterSeconds": retry_after}));
        e.retry_after = Some(retry_after);
        e
    }

    pub fn request_entity_too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// The error a write into a terminating namespace gets (`NamespaceTerminating` cause).
    pub fn namespace_terminating(gr: &GroupResource, name: &str, namespace: &str) -> Self {
        let mut e = Self::forbidden(
            gr,
            name,
            &format!("unable to create new content in namespace {namespace} because it is being terminated"),
        );
        if let Some(Value::Object(d)) = e.details.as_deref_mut() {
            d.insert(
                "causes".into(),
                json!([{"reason": "NamespaceTerminating", "message": format!("namespace {namespace} is being terminated"), "field": "metadata.namespace"}]),
            );
        }
        e
    }
}

/// [`ApiError::status_doc`].
pub struct StatusDoc<'a>(&'a ApiError);

/// A map written with `order`'s keys first (in that order), then its other keys.
struct Ordered<'a>(&'a Map<String, Value>, &'static [&'static str]);

/// `StatusDetails`' fields in the Go struct's order.
const DETAILS_ORDER: &[&str] = &["name", "group", "kind", "uid", "causes", "retryAfterSeconds"];
/// `StatusCause`'s fields in the Go struct's order.
const CAUSE_ORDER: &[&str] = &["reason", "message", "field"];

struct Causes<'a>(&'a [Value]);

impl Serialize for Causes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for c in self.0 {
            match c {
                Value::Object(m) => seq.serialize_element(&Ordered(m, CAUSE_ORDER))?,
                other => seq.serialize_element(other)?,
            }
        }
        seq.end()
    }
}

impl Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Ordered(m, order) = *self;
        let mut map = s.serialize_map(Some(m.len()))?;
        let mut entry = |k: &str, v: &Value| match (k, v) {
            ("causes", Value::Array(c)) if order == DETAILS_ORDER => map.serialize_entry(k, &Causes(c)),
            _ => map.serialize_entry(k, v),
        };
        for k in order {
            if let Some(v) = m.get(*k) {
                entry(k, v)?;
            }
        }
        for (k, v) in m {
            if !order.contains(&k.as_str()) {
                entry(k, v)?;
            }
        }
        map.end()
    }
}

impl Serialize for StatusDoc<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("kind", "Status")?;
        map.serialize_entry("apiVersion", "v1")?;
        map.serialize_entry("metadata", &Map::new())?;
        map.serialize_entry("status", "Failure")?;
        map.serialize_entry("message", &e.message)?;
        if !e.reason.is_empty() {
            map.serialize_entry("reason", &e.reason)?;
        }
        match e.details.as_deref() {
            Some(Value::Object(d)) => map.serialize_entry("details", &Ordered(d, DETAILS_ORDER))?,
            Some(d) => map.serialize_entry("details", d)?,
            None => {}
        }
        map.serialize_entry("code", &e.code)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_message_matches_apimachinery_for_one_and_many_errors() {
        let one = ApiError::invalid(
            "GameDeployment",
            "tkex.tencent.com",
            "web",
            &[FieldError::invalid(
                "spec.replicas",
                json!(-1),
                "spec.replicas in body should be greater than or equal to 0",
            )],
        );
        assert_eq!(
            one.message,
            "GameDeployment.tkex.tencent.com \"web\" is invalid: spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        );
        let many = ApiError::invalid(
            "Pod",
            "",
            "p",
            &[FieldError::required("spec.containers", ""), FieldError::invalid("metadata.name", json!("A"), "bad")],
        );
        assert_eq!(
            many.message,
            "Pod \"p\" is invalid: [spec.containers: Required value, metadata.name: Invalid value: \"A\": bad]"
        );
        assert_eq!(many.code, 422);
        assert_eq!(
            serde_json::to_value(many.status_doc()).unwrap()["details"]["causes"][0]["reason"],
            "FieldValueRequired"
        );
    }

    #[test]
    fn not_found_uses_group_resource_and_resource_as_kind() {
        let e = ApiError::not_found(&GroupResource::new("apps", "deployments"), "web");
        assert_eq!(e.message, "deployments.apps \"web\" not found");
        assert_eq!(
            serde_json::to_value(e.status_doc()).unwrap()["details"],
            json!({"name": "web", "group": "apps", "kind": "deployments"})
        );
    }

    #[test]
    fn not_supported_lists_quoted_values() {
        let e = FieldError::not_supported("spec.x", json!("Foo"), &["A".to_string(), "B".to_string()]);
        assert_eq!(e.to_string(), "spec.x: Unsupported value: \"Foo\": supported values: \"A\", \"B\"");
    }
}
