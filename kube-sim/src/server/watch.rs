//! Watch streams: newline-delimited `{"type":...,"object":...}` events over a chunked
//! response, starting from a resource version (or with the current state as synthetic ADDED
//! events), with bookmarks, `sendInitialEvents`, `timeoutSeconds`, `410 Gone` as an ERROR
//! event, Table-formatted events for `kubectl get -w`, and injected connection drops.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::body::Bytes;
use axum::response::Response;
use hyper::{StatusCode, header};
use rand::RngExt;
use serde_json::{Value, json};

use super::AppState;
use super::request::{Query, Representation};
use crate::faults::WatchFault;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{EventKind, StoreError, WatchFrom, WatchItem};
use crate::table::{self, IncludeObject};

/// The real apiserver's default `--min-request-timeout` (watches last 1-2x this long).
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

#[derive(Clone, Copy)]
enum Format {
    Json,
    Table(IncludeObject),
    Metadata,
}

fn encode(rd: &ResourceDef, format: &Format, kind: &str, object: &Value, first: &mut bool) -> Bytes {
    let object = match format {
        // Written around the object instead of cloning it into a wrapper (a deep copy and drop of every object, for
        // every watcher of every change), with `type` first so clients need not buffer the object until they learn
        // the event's type.
        Format::Json => {
            return crate::store::watch_line(kind, object).0;
        }
        Format::Metadata => table::partial_object_metadata(object),
        Format::Table(include) => {
            let t = table::table(
                rd,
                &[Arc::new(object.clone())],
                *include,
                json!({"resourceVersion": crate::meta::resource_version(object)}),
                *first,
            );
            *first = false;
            t
        }
    };
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

fn bookmark(rd: &ResourceDef, format: &Format, rv: u64, initial_events_end: bool) -> Bytes {
    let mut md = serde_json::Map::new();
    md.insert("resourceVersion".into(), json!(rv.to_string()));
    md.insert("creationTimestamp".into(), Value::Null);
    if initial_events_end {
        md.insert("annotations".into(), json!({"k8s.io/initial-events-end": "true"}));
    }
    let object = match format {
        Format::Table(_) => {
            json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": Value::Object(md), "columnDefinitions": null, "rows": null})
        }
        Format::Metadata => {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": Value::Object(md)})
        }
        Format::Json => json!({"kind": rd.kind, "apiVersion": rd.api_version(), "metadata": Value::Object(md)}),
    };
    let mut line = b"{\"type\":\"BOOKMARK\",\"object\":".to_vec();
    let _ = serde_json::to_writer(&mut line, &crate::json::WireOrder(&object));
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn error_event(e: &ApiError) -> Bytes {
    let mut line = b"{\"type\":\"ERROR\",\"object\":".to_vec();
    let _ = serde_json::to_writer(&mut line, &e.status_doc());
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn stream_response(
    chunks: impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
) -> Response {
    let mut r = Response::new(Body::from_stream(chunks));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    r.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache, private"));
    r
}

/// Who holds a watch, so fault rules changed while it is open apply to it (a partition freezes
/// or closes the watches of the partitioned client).
pub(super) struct WatchClient {
    pub faults: Arc<crate::faults::Faults>,
    pub gr: crate::status::GroupResource,
    pub user: String,
    pub requester: String,
    pub user_agent: String,
}

impl WatchClient {
    fn fault(&self) -> WatchFault {
        let client =
            crate::faults::Client { user: &self.user, requester: &self.requester, user_agent: &self.user_agent };
        self.faults.watch_fault(&self.gr, &client)
    }
}

/// Events already queued for a watch are sent together in one chunk up to about this many bytes.
const COALESCE_BYTES: usize = 256 * 1024;

/// How often an open watch re-checks changed fault rules.
const FAULT_RECHECK: Duration = Duration::from_millis(50);

#[allow(clippy::too_many_arguments)]
pub(super) fn serve(
    st: &Arc<AppState>,
    rd: &Arc<ResourceDef>,
    namespace: Option<&str>,
    name: Option<&str>,
    query: &Query,
    rep: &Representation,
    drop_after: Option<Duration>,
    client: WatchClient,
) -> Result<Response, ApiError> {
    let label = LabelSelector::parse(query.get("labelSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    let mut field = FieldSelector::parse(query.get("fieldSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    if let Some(n) = name {
        // `GET .../pods/name?watch=true` is a watch restricted to that name.
        field.requirements.push(crate::selector::FieldRequirement {
            field: "metadata.name".into(),
            value: n.into(),
            negated: false,
        });
    }
    let filter = st.registry.filter(rd, &label, &field)?.unwrap_or_else(|| Arc::new(|_: &Value| true));
    let bookmarks = query.flag("allowWatchBookmarks");
    let send_initial = query.flag("sendInitialEvents");
    let rv = query.get("resourceVersion").filter(|r| !r.is_empty());
    let rv_match = query.get("resourceVersionMatch").filter(|m| !m.is_empty());
    if send_initial && (!bookmarks || rv_match != Some("NotOlderThan")) {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            &[crate::status::FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan",
            )],
        ));
    }
    if !send_initial && rv_match.is_some() {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            &[crate::status::FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )],
        ));
    }
    let from = if send_initial {
        WatchFrom::CurrentState { end_bookmark: true }
    } else {
        match rv {
            None | Some("0") => WatchFrom::CurrentState { end_bookmark: false },
            Some(v) => WatchFrom::Version(
                v.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resource version: {v:?}")))?,
            ),
        }
    };
    let timeout = match query.int("timeoutSeconds").map_err(ApiError::bad_request)? {
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        _ => MIN_REQUEST_TIMEOUT.mul_f64(1.0 + rand::rng().random::<f64>()),
    };
    let timeout = drop_after.map_or(timeout, |d| d.min(timeout));
    let format = match rep {
        Representation::Table => Format::Table(IncludeObject::parse(query.get("includeObject"))),
        Representation::PartialObjectMetadata | Representation::PartialObjectMetadataList => Format::Metadata,
        _ => Format::Json,
    };
    let ns = if rd.namespaced { namespace } else { None };
    if matches!(from, WatchFrom::Version(_)) {
        let c =
            crate::faults::Client { user: &client.user, requester: &client.requester, user_agent: &client.user_agent };
        if client.faults.watch_expired(&client.gr, &c) {
            let e = ApiError::expired("too old resource version (kube-sim injected fault)");
            return Ok(stream_response(futures::stream::iter(vec![Ok(error_event(&e))])));
        }
    }
    let reg = match st.registry.store.watch(&rd.storage, ns, filter, from, bookmarks || send_initial) {
        Ok(r) => r,
        Err(StoreError::Expired { requested, oldest }) => {
            let e = ApiError::expired(format!("too old resource version: {requested} ({oldest})"));
            let chunk = error_event(&e);
            return Ok(stream_response(futures::stream::iter(vec![Ok(chunk)])));
        }
        Err(StoreError::TooLarge { requested, current }) => return Err(crate::registry::too_large(requested, current)),
        Err(e) => return Err(ApiError::internal(format!("{e:?}"))),
    };
    let registry = st.registry.clone();
    let rd = rd.clone();
    let api_version: Arc<str> = rd.api_version().into();
    let deadline = tokio::time::Instant::now() + timeout;
    struct StreamState {
        backlog: std::vec::IntoIter<WatchItem>,
        rx: tokio::sync::mpsc::Receiver<WatchItem>,
        _guard: crate::store::WatcherGuard,
        first: bool,
        /// Fault-rule generation last found harmless for this watch.
        fault_generation: Option<u64>,
    }
    let state = StreamState {
        backlog: reg.backlog.into_iter(),
        rx: reg.rx,
        _guard: reg.guard,
        first: true,
        fault_generation: None,
    };
    let client = Arc::new(client);
    let stream = futures::stream::unfold(state, move |mut s| {
        let registry = registry.clone();
        let rd = rd.clone();
        let client = client.clone();
        let api_version = api_version.clone();
        async move {
            let render = |item: WatchItem, first: &mut bool| -> Option<Bytes> {
                Some(match item {
                    WatchItem::Event { kind, object, encoded } => {
                        let kind = match kind {
                            EventKind::Added => "ADDED",
                            EventKind::Modified => "MODIFIED",
                            EventKind::Deleted => "DELETED",
                        };
                        match (&format, encoded) {
                            (Format::Json, Some(shared)) => shared.line(&api_version, kind, || {
                                let view = registry.view(&rd, &object);
                                let stored = Arc::ptr_eq(&view, &object);
                                (view, stored)
                            }),
                            _ => encode(&rd, &format, kind, &registry.view(&rd, &object), first),
                        }
                    }
                    WatchItem::Bookmark { rv, initial_events_end } => {
                        if !bookmarks {
                            return None;
                        }
                        bookmark(&rd, &format, rv, initial_events_end)
                    }
                })
            };
            loop {
                // Rules set while the watch is open: a blackhole freezes it, a rule failing every
                // request of this client closes it. Re-evaluated only when the rules changed.
                let generation = client.faults.generation();
                if s.fault_generation != Some(generation) {
                    match client.fault() {
                        WatchFault::Close => return None,
                        WatchFault::Freeze => {
                            if tokio::time::Instant::now() >= deadline {
                                return None;
                            }
                            tokio::time::sleep(FAULT_RECHECK).await;
                            continue;
                        }
                        WatchFault::None => s.fault_generation = Some(generation),
                    }
                }
                let item = match s.backlog.next() {
                    Some(i) => i,
                    None => {
                        let wake = deadline.min(tokio::time::Instant::now() + FAULT_RECHECK);
                        match tokio::time::timeout_at(wake, s.rx.recv()).await {
                            Ok(Some(i)) => i,
                            // Channel closed (dropped by fault injection or overflow).
                            Ok(None) => return None,
                            Err(_) if tokio::time::Instant::now() >= deadline => return None,
                            // Idle: re-check the fault rules.
                            Err(_) => continue,
                        }
                    }
                };
                let Some(chunk) = render(item, &mut s.first) else { continue };
                // Events already queued behind this one go out in the same chunk: one socket write and one wake-up
                // of the reader for a burst (a pass of an operator writing hundreds of pods) instead of one each.
                let mut more: Option<Vec<u8>> = None;
                while more.as_ref().map_or(chunk.len(), Vec::len) < COALESCE_BYTES {
                    let next = match s.backlog.next() {
                        Some(i) => i,
                        None => match s.rx.try_recv() {
                            Ok(i) => i,
                            Err(_) => break,
                        },
                    };
                    if let Some(line) = render(next, &mut s.first) {
                        more.get_or_insert_with(|| chunk.to_vec()).extend_from_slice(&line);
                    }
                }
                let chunk = more.map_or(chunk, Bytes::from);
                return Some((Ok::<Bytes, std::convert::Infallible>(chunk), s));
            }
        }
    });
    Ok(stream_response(stream))
}
