//! Resource request handlers: decoding options from the query and body, calling the registry,
//! and encoding results in the representation the client negotiated.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use hyper::{Method, Request, StatusCode, header};
use serde_json::{Map, Value, json};

use super::AppState;
use super::request::{Query, Representation, ResourceRequest, negotiate, verb_for};
use super::response::{bytes_response, error_response, json_response, list_body, shared_json_response, yaml_response};
use crate::admission::Operation;
use crate::auth::{self, Attributes};
use crate::patch::PatchType;
use crate::registry::{DeleteOptions, Endpoint, FieldValidation, ListOptions, Propagation, Registry, WriteCtx};
use crate::resources::{ResourceDef, Special};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::table::{self, IncludeObject};
use crate::user::UserInfo;

struct Ctx {
    st: Arc<AppState>,
    rd: Arc<ResourceDef>,
    rr: ResourceRequest,
    query: Query,
    rep: Representation,
    user: UserInfo,
    user_agent: String,
    content_type: String,
    /// Set while a write runs through admission (see `admitted`); `write_ctx` hands it on.
    gate: std::sync::Mutex<Option<crate::admission::Gate>>,
}

pub(super) async fn resource(
    st: Arc<AppState>,
    user: UserInfo,
    requester: String,
    req: Request<Body>,
    rr: ResourceRequest,
    query: Query,
) -> Response {
    match resource_inner(st, user, requester, req, rr, query).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn parse_list_options(query: &Query) -> Result<ListOptions, ApiError> {
    let label_selector =
        LabelSelector::parse(query.get("labelSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    let field_selector =
        FieldSelector::parse(query.get("fieldSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    let limit = query.int("limit").map_err(ApiError::bad_request)?.filter(|l| *l > 0).map(|l| l as usize);
    Ok(ListOptions {
        label_selector,
        field_selector,
        limit,
        continue_token: query.get("continue").filter(|c| !c.is_empty()).map(str::to_string),
        resource_version: query.get("resourceVersion").map(str::to_string),
        resource_version_match: query.get("resourceVersionMatch").map(str::to_string),
    })
}

/// Attaches what a write produced to its response, for the audit log.
fn written(mut r: Response, obj: &Value) -> Response {
    let rv = crate::meta::resource_version(obj);
    r.extensions_mut().insert(crate::audit::Written {
        name: crate::meta::name(obj).to_string(),
        resource_version: (!rv.is_empty()).then(|| rv.to_string()),
    });
    r
}

async fn resource_inner(
    st: Arc<AppState>,
    user: UserInfo,
    requester: String,
    req: Request<Body>,
    rr: ResourceRequest,
    query: Query,
) -> Result<Response, ApiError> {
    let catalog = st.registry.catalog.clone();
    let rd = catalog.get(&rr.group, &rr.version, &rr.resource).ok_or_else(ApiError::not_found_path)?;
    if rd.namespaced != rr.namespace.is_some() && !(rd.namespaced && rr.name.is_none()) {
        return Err(ApiError::not_found_path());
    }
    let method = req.method().clone();
    let watch = rr.legacy_watch || query.flag("watch");
    let verb = verb_for(&method, rr.name.is_some(), watch);
    if verb == "unknown" {
        return Err(ApiError::method_not_allowed());
    }
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let rep = match negotiate(accept) {
        Some(Representation::Protobuf) | None => return Err(ApiError::not_acceptable()),
        Some(r) => r,
    };
    let user_agent = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let content_type =
        req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/json").to_string();
    // Authorization (the namespace of a namespace object is its own name, and a list or watch
    // pinned to one name by `fieldSelector=metadata.name=` is authorized as that name, as in
    // RequestInfo).
    let selected_name = if matches!(verb, "list" | "watch") && rr.name.is_none() {
        query
            .get("fieldSelector")
            .and_then(|f| FieldSelector::parse(f).ok())
            .and_then(|f| f.exact_name().map(str::to_string))
    } else {
        None
    };
    let attrs = Attributes {
        verb: verb.to_string(),
        resource_request: true,
        api_group: rd.group.clone(),
        api_version: rd.version.clone(),
        resource: rd.plural.clone(),
        subresource: rr.subresource.clone().unwrap_or_default(),
        name: rr.name.clone().or(selected_name).unwrap_or_default(),
        namespace: if rd.special == Special::Namespace {
            rr.name.clone().unwrap_or_default()
        } else {
            rr.namespace.clone().unwrap_or_default()
        },
        path: String::new(),
    };
    if !auth::allowed(&st.registry.store, &user, &attrs) {
        return Err(auth::forbidden(&user, &attrs));
    }
    let client = crate::faults::Client { user: &user.name, requester: &requester, user_agent: &user_agent };
    let gr = rd.group_resource();
    let decision = st.faults.decide(verb, &gr, rr.subresource.as_deref(), rr.name.as_deref().unwrap_or(""), &client);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    if decision.blackhole {
        super::wait_while_blackholed(&st.faults, verb, Some(&gr), rr.subresource.as_deref(), &client).await;
    }
    if let Some(e) = decision.error {
        return Err(e);
    }
    let watch_client = super::watch::WatchClient {
        faults: st.faults.clone(),
        gr: gr.clone(),
        user: user.name.clone(),
        requester: requester.clone(),
        user_agent: user_agent.clone(),
    };
    let body = if matches!(method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE) {
        axum::body::to_bytes(req.into_body(), st.max_body)
            .await
            .map_err(|_| {
                ApiError::request_entity_too_large(format!("Request entity too large: limit is {}", st.max_body))
            })?
            .to_vec()
    } else {
        Vec::new()
    };
    if !body.is_empty() {
        tracing::trace!(%method, body = %String::from_utf8_lossy(&body), "request body");
    }
    let c = Ctx {
        st: st.clone(),
        rd: rd.clone(),
        rr: rr.clone(),
        query,
        rep,
        user,
        user_agent,
        content_type,
        gate: std::sync::Mutex::new(None),
    };
    let ns = rr.namespace.clone().unwrap_or_default();
    // A verb the resource does not serve: kube-apiserver registers no route for it (405), and a watch of a
    // resource whose storage cannot watch is "not supported".
    if rr.subresource.is_none() && !rd.has_verb(verb) {
        return Err(if verb == "watch" {
            ApiError::method_not_supported(&rd.group_resource(), verb)
        } else {
            ApiError::method_not_allowed()
        });
    }
    let result = match rr.subresource.as_deref() {
        None if rd.special == Special::ComponentStatus => component_status(&c, verb, rr.name.as_deref()),
        None => match (verb, rr.name.as_deref()) {
            ("watch", _) => super::watch::serve(
                &c.st,
                &c.rd,
                rr.namespace.as_deref(),
                rr.name.as_deref(),
                &c.query,
                &c.rep,
                decision.watch_drop_after,
                watch_client,
            ),
            ("list", _) => list(&c),
            ("get", Some(name)) => get(&c, &ns, name),
            ("create", None) if c.rd.special != Special::Review => {
                admitted(&c, &ns, &[Operation::Create], &body, || create(&c, &ns, &body)).await
            }
            ("create", None) => create(&c, &ns, &body),
            ("update", Some(name)) => {
                admitted(&c, &ns, &[Operation::Update, Operation::Create], &body, || {
                    update(&c, &ns, name, &body, Endpoint::Main)
                })
                .await
            }
            ("patch", Some(name)) => {
                admitted(&c, &ns, &[Operation::Update, Operation::Create], &body, || {
                    patch(&c, &ns, name, &body, Endpoint::Main)
                })
                .await
            }
            ("delete", Some(name)) => {
                admitted(&c, &ns, &[Operation::Delete], &body, || delete(&c, &ns, name, &body)).await
            }
            ("deletecollection", None) => delete_collection(&c, &body).await,
            _ => Err(ApiError::method_not_allowed()),
        },
        Some("status") if rd.status_subresource => match (verb, rr.name.as_deref()) {
            ("get", Some(name)) => get(&c, &ns, name),
            ("update", Some(name)) => {
                admitted(&c, &ns, &[Operation::Update], &body, || update(&c, &ns, name, &body, Endpoint::Status)).await
            }
            ("patch", Some(name)) => {
                admitted(&c, &ns, &[Operation::Update], &body, || patch(&c, &ns, name, &body, Endpoint::Status)).await
            }
            _ => Err(ApiError::method_not_supported(&rd.group_resource(), verb)),
        },
        Some("scale") if rd.scale.is_some() => match (verb, rr.name.as_deref()) {
            ("get", Some(name)) => {
                Ok(object_response(&c, StatusCode::OK, &c.st.registry.get_scale(&rd, &ns, name)?, &[]))
            }
            ("update", Some(name)) => {
                admitted(&c, &ns, &[Operation::Update], &body, || scale_update(&c, &ns, name, &body)).await
            }
            ("patch", Some(name)) => {
                admitted(&c, &ns, &[Operation::Update], &body, || scale_patch(&c, &ns, name, &body)).await
            }
            _ => Err(ApiError::method_not_supported(&rd.group_resource(), verb)),
        },
        Some("binding") if rd.special == Special::Pod => match (verb, rr.name.as_deref()) {
            ("create", Some(name)) => {
                let b = parse_body(&body, &c.content_type, "io.k8s.api.core.v1.Binding")?;
                let warnings = admit_request_object(&c, &ns, name, &b, ("", "v1", "Binding")).await?;
                c.st.registry.bind_pod(&ns, name, &b)?;
                Ok(json_response(
                    StatusCode::CREATED,
                    &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                    &warnings,
                ))
            }
            _ => Err(ApiError::method_not_supported(&rd.group_resource(), verb)),
        },
        Some("eviction") if rd.special == Special::Pod => match (verb, rr.name.as_deref()) {
            ("create", Some(name)) => {
                let eviction = parse_body(&body, &c.content_type, "io.k8s.api.policy.v1.Eviction")?;
                // As the eviction REST does: the name check, then admission of the Eviction, then
                // the eviction itself (whose pod delete is not admitted again).
                if crate::meta::name(&eviction) != name {
                    return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
                }
                let warnings = admit_request_object(&c, &ns, name, &eviction, ("policy", "v1", "Eviction")).await?;
                let mut ctx = write_ctx(&c)?;
                let status = crate::disruption::evict(&c.st.registry, &ns, name, &eviction, &mut ctx)?;
                ctx.warnings.extend(warnings);
                let mut r = json_response(StatusCode::CREATED, &status, &ctx.warnings);
                r.extensions_mut().insert(crate::audit::Written { name: name.to_string(), resource_version: None });
                Ok(r)
            }
            _ => Err(ApiError::method_not_supported(&rd.group_resource(), verb)),
        },
        Some("log") if rd.special == Special::Pod => match (verb, rr.name.as_deref()) {
            ("get", Some(name)) => pod_log(&c, &ns, name),
            _ => Err(ApiError::method_not_supported(&rd.group_resource(), verb)),
        },
        Some("token") if rd.special == Special::ServiceAccount => match (verb, rr.name.as_deref()) {
            ("create", Some(name)) => {
                let request = parse_body(&body, &c.content_type, "io.k8s.api.authentication.v1.TokenRequest")?;
                let issued = c.st.auth.issue_token(&c.st.registry.store, &ns, name, &request)?;
                Ok(json_response(StatusCode::CREATED, &issued, &[]))
            }
            _ => Err(ApiError::method_not_supported(&rd.group_resource(), verb)),
        },
        Some("finalize") if rd.special == Special::Namespace => match (verb, rr.name.as_deref()) {
            ("update", Some(name)) => update(&c, "", name, &body, Endpoint::Finalize),
            _ => Err(ApiError::method_not_supported(&rd.group_resource(), verb)),
        },
        Some(_) => Err(ApiError::not_found_path()),
    };
    // An injected request timeout: the write happened, the client is told 504.
    match result {
        Ok(_) if decision.timeout_after_write => Err(crate::faults::Faults::timeout_error()),
        other => other,
    }
}

/// `GET pods/NAME/log`: the container's log as plain text, checked as the pod log REST and the kubelet
/// check it. `follow=true` streams a running process container's log until it ends; for a simulated container it
/// returns the log as it is (the stream ends at once).
fn pod_log(c: &Ctx, ns: &str, name: &str) -> Result<Response, ApiError> {
    let pod = c.st.registry.get(&c.rd, ns, name)?;
    let number = |key: &str| -> Result<Option<i64>, ApiError> {
        c.query
            .get(key)
            .map(|v| v.parse::<i64>().map_err(|_| ApiError::bad_request(format!("invalid {key}: {v:?}"))))
            .transpose()
    };
    let flag = |key: &str| c.query.get(key).is_some_and(|v| v == "true" || v == "1");
    let tail_lines = number("tailLines")?;
    let since_seconds = number("sinceSeconds")?;
    let limit_bytes = number("limitBytes")?;
    let mut errs = Vec::new();
    if tail_lines.is_some_and(|n| n < 0) {
        errs.push(crate::status::FieldError::invalid(
            "tailLines",
            json!(tail_lines),
            "must be greater than or equal to 0",
        ));
    }
    if limit_bytes.is_some_and(|n| n < 1) {
        errs.push(crate::status::FieldError::invalid("limitBytes", json!(limit_bytes), "must be greater than 0"));
    }
    if since_seconds.is_some_and(|n| n < 1) {
        errs.push(crate::status::FieldError::invalid("sinceSeconds", json!(since_seconds), "must be greater than 0"));
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid("PodLogOptions", "", name, &errs));
    }
    let names = |list: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .map(|cs| cs.iter().filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let (containers, init) = (names("containers"), names("initContainers"));
    let container = match c.query.get("container").filter(|s| !s.is_empty()) {
        Some(wanted) => {
            if !containers.iter().chain(&init).chain(&names("ephemeralContainers")).any(|n| n == wanted) {
                return Err(ApiError::bad_request(format!("container {wanted} is not valid for pod {name}")));
            }
            wanted.to_string()
        }
        None => match containers.as_slice() {
            [only] => only.clone(),
            [] => return Err(ApiError::bad_request(format!("a container name must be specified for pod {name}"))),
            many => {
                let mut message =
                    format!("a container name must be specified for pod {name}, choose one of: [{}]", many.join(" "));
                if !init.is_empty() {
                    message.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
                }
                return Err(ApiError::bad_request(message));
            }
        },
    };
    let text = if pod.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty) {
        // Not scheduled: the log location is empty, and so is the answer.
        String::new()
    } else {
        let now = k8s_openapi::jiff::Timestamp::now();
        let opts = crate::logs::LogOptions {
            previous: flag("previous"),
            timestamps: flag("timestamps"),
            tail_lines: tail_lines.map(|n| n as usize),
            since: since_seconds.and_then(|s| now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(s)).ok()),
            limit_bytes: limit_bytes.map(|n| n as usize),
        };
        if flag("follow")
            && !opts.previous
            && let Some(stream) = c.st.logs.follow(crate::meta::uid(&pod), &container, &opts)
        {
            // A running process's log streams until the instance ends, as from a kubelet.
            use futures::StreamExt;
            let body = Body::from_stream(stream.map(Ok::<_, std::convert::Infallible>));
            return Ok(super::response::text_stream_response(StatusCode::OK, body));
        }
        match c.st.logs.read(crate::meta::uid(&pod), &container, &opts) {
            Some(text) => text,
            None if opts.previous => {
                return Err(ApiError::bad_request(format!(
                    "previous terminated container \"{container}\" in pod \"{name}\" not found"
                )));
            }
            None => {
                return Err(ApiError::bad_request(format!(
                    "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
                )));
            }
        }
    };
    Ok(super::response::text_response(StatusCode::OK, text))
}

/// Decodes a request body; `definition` names the protobuf message for protobuf bodies.
fn parse_body(body: &[u8], content_type: &str, definition: &str) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("Object 'Kind' is missing in ''"));
    }
    let base = content_type.split(';').next().unwrap_or("").trim();
    if crate::protobuf::is_protobuf(base) {
        return crate::protobuf::decode(body, definition).map_err(|e| {
            ApiError::unsupported_media_type(
                base,
                &["application/json", "application/yaml", &format!("application/vnd.kubernetes.protobuf ({e})")],
            )
        });
    }
    match base {
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; yaml parse error: {e}"))),
        "application/cbor" => Err(ApiError::unsupported_media_type(base, &["application/json", "application/yaml"])),
        _ => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))),
    }
}

fn write_ctx(c: &Ctx) -> Result<WriteCtx, ApiError> {
    let manager = match c.query.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(m) => {
            if m.len() > 128 {
                return Err(ApiError::bad_request("fieldManager: Too long: may not be longer than 128"));
            }
            m.to_string()
        }
        None => {
            let prefix = c.user_agent.split('/').next().unwrap_or("").to_string();
            if prefix.is_empty() { "unknown".to_string() } else { prefix }
        }
    };
    let mut ctx = WriteCtx::new(manager);
    ctx.admission = c.gate.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for d in c.query.all("dryRun") {
        match d {
            "All" => ctx.dry_run = true,
            "" => {}
            other => return Err(ApiError::bad_request(format!("Invalid dry run value: {other}"))),
        }
    }
    ctx.field_validation = match c.query.get("fieldValidation").unwrap_or("") {
        "" | "Warn" => FieldValidation::Warn,
        "Strict" => FieldValidation::Strict,
        "Ignore" => FieldValidation::Ignore,
        other => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation: Invalid value: {other:?}: must be one of Ignore, Warn, or Strict"
            )));
        }
    };
    Ok(ctx)
}

/// Encodes one object in the negotiated representation.
fn object_response(c: &Ctx, status: StatusCode, obj: &Value, warnings: &[String]) -> Response {
    match c.rep {
        Representation::Yaml => yaml_response(status, obj, warnings),
        Representation::Table => {
            let include = IncludeObject::parse(c.query.get("includeObject"));
            let t = table::table(
                &c.rd,
                &[Arc::new(obj.clone())],
                include,
                json!({"resourceVersion": crate::meta::resource_version(obj)}),
                true,
            );
            json_response(status, &t, warnings)
        }
        Representation::PartialObjectMetadata | Representation::PartialObjectMetadataList => {
            json_response(status, &table::partial_object_metadata(obj), warnings)
        }
        _ => json_response(status, obj, warnings),
    }
}

/// [`object_response`] for the object a write returned: as JSON, when it is the stored object, its encoding is shared
/// with the watches that send the change (made once, by whichever comes first); the bytes are the same.
fn written_response(c: &Ctx, status: StatusCode, obj: &Arc<Value>, warnings: &[String]) -> Response {
    if matches!(c.rep, Representation::Json) {
        let key = Registry::key(&c.rd, crate::meta::namespace(obj), crate::meta::name(obj));
        if let Some(encoded) = c.st.registry.store.encoded_for(&c.rd.storage, &key, obj) {
            let body = encoded.object(&c.rd.api_version(), || (obj.clone(), true));
            return written(shared_json_response(status, body, warnings), obj);
        }
    }
    written(object_response(c, status, obj, warnings), obj)
}

/// `componentstatuses`: computed, never stored (`crate::componentstatus`), each answer with kube-apiserver's
/// deprecation warning.
fn component_status(c: &Ctx, verb: &str, name: Option<&str>) -> Result<Response, ApiError> {
    let warnings = [crate::componentstatus::DEPRECATION_WARNING.to_string()];
    match (verb, name) {
        ("get", Some(name)) => Ok(object_response(c, StatusCode::OK, &c.st.components.get(name)?, &warnings)),
        ("list", None) => {
            let opts = parse_list_options(&c.query)?;
            let items = c.st.components.list(&opts.label_selector, &opts.field_selector);
            let list_meta = json!({});
            match c.rep {
                Representation::Table => {
                    let include = IncludeObject::parse(c.query.get("includeObject"));
                    let items: Vec<Arc<Value>> = items.into_iter().map(Arc::new).collect();
                    Ok(json_response(StatusCode::OK, &table::table(&c.rd, &items, include, list_meta, true), &warnings))
                }
                Representation::Yaml => Ok(yaml_response(
                    StatusCode::OK,
                    &json!({"kind": c.rd.list_kind, "apiVersion": c.rd.api_version(), "metadata": list_meta, "items": items}),
                    &warnings,
                )),
                _ => {
                    // List items carry no kind or apiVersion, as in every built-in list.
                    let items: Vec<Value> = items
                        .into_iter()
                        .map(|mut s| {
                            if let Some(m) = s.as_object_mut() {
                                m.remove("kind");
                                m.remove("apiVersion");
                            }
                            s
                        })
                        .collect();
                    Ok(json_response(
                        StatusCode::OK,
                        &json!({"kind": c.rd.list_kind, "apiVersion": c.rd.api_version(), "metadata": list_meta, "items": items}),
                        &warnings,
                    ))
                }
            }
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn get(c: &Ctx, ns: &str, name: &str) -> Result<Response, ApiError> {
    let obj = c.st.registry.get(&c.rd, ns, name)?;
    Ok(object_response(c, StatusCode::OK, &obj, &[]))
}

fn list(c: &Ctx) -> Result<Response, ApiError> {
    let opts = parse_list_options(&c.query)?;
    let result = c.st.registry.list(&c.rd, c.rr.namespace.as_deref(), &opts)?;
    let mut list_meta = Map::new();
    list_meta.insert("resourceVersion".into(), json!(result.resource_version.to_string()));
    if let Some(t) = &result.continue_token {
        list_meta.insert("continue".into(), json!(t));
    }
    if let Some(r) = result.remaining {
        list_meta.insert("remainingItemCount".into(), json!(r));
    }
    let list_meta = Value::Object(list_meta);
    match c.rep {
        Representation::Table => {
            let include = IncludeObject::parse(c.query.get("includeObject"));
            Ok(json_response(StatusCode::OK, &table::table(&c.rd, &result.items, include, list_meta, true), &[]))
        }
        Representation::PartialObjectMetadata | Representation::PartialObjectMetadataList => {
            let items: Vec<Arc<Value>> =
                result.items.iter().map(|o| Arc::new(table::partial_object_metadata(o))).collect();
            Ok(bytes_response(
                StatusCode::OK,
                list_body("PartialObjectMetadataList", "meta.k8s.io/v1", &list_meta, &items, false),
                &[],
            ))
        }
        Representation::Yaml => {
            let items: Vec<Value> = result.items.iter().map(|i| (**i).clone()).collect();
            Ok(yaml_response(
                StatusCode::OK,
                &json!({"kind": c.rd.list_kind, "apiVersion": c.rd.api_version(), "metadata": list_meta, "items": items}),
                &[],
            ))
        }
        _ => Ok(bytes_response(
            StatusCode::OK,
            list_body(&c.rd.list_kind, &c.rd.api_version(), &list_meta, &result.items, !c.rd.is_custom()),
            &[],
        )),
    }
}

fn create(c: &Ctx, ns: &str, body: &[u8]) -> Result<Response, ApiError> {
    let obj = parse_body(body, &c.content_type, c.rd.definition.as_deref().unwrap_or(""))?;
    if c.rd.special == Special::Review && c.rd.kind == "TokenReview" {
        let out = c.st.auth.review_token(&c.st.registry.store, &obj)?;
        return Ok(object_response(c, StatusCode::CREATED, &out, &[]));
    }
    if c.rd.special == Special::Review {
        let out = auth::review(&c.st.registry.store, &c.rd.kind, ns, &obj, &c.user)?;
        return Ok(object_response(c, StatusCode::CREATED, &out, &[]));
    }
    if c.rd.namespaced && ns.is_empty() {
        return Err(ApiError::method_not_allowed());
    }
    let mut ctx = write_ctx(c)?;
    let created = c.st.registry.create(&c.rd, ns, obj, &mut ctx)?;
    Ok(written_response(c, StatusCode::CREATED, &created, &ctx.warnings))
}

fn update(c: &Ctx, ns: &str, name: &str, body: &[u8], endpoint: Endpoint) -> Result<Response, ApiError> {
    let obj = parse_body(body, &c.content_type, c.rd.definition.as_deref().unwrap_or(""))?;
    let mut ctx = write_ctx(c)?;
    let updated = c.st.registry.update(&c.rd, ns, name, obj, endpoint, &mut ctx)?;
    Ok(written_response(c, StatusCode::OK, &updated, &ctx.warnings))
}

fn patch_type(c: &Ctx) -> Result<PatchType, ApiError> {
    PatchType::from_content_type(&c.content_type).ok_or_else(|| {
        let mut accepted =
            vec!["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"];
        if !c.rd.is_custom() {
            accepted.push("application/strategic-merge-patch+json");
        }
        ApiError::unsupported_media_type(&c.content_type, &accepted)
    })
}

fn patch(c: &Ctx, ns: &str, name: &str, body: &[u8], endpoint: Endpoint) -> Result<Response, ApiError> {
    let pt = patch_type(c)?;
    let force = match c.query.get("force") {
        None | Some("" | "false") => false,
        Some("true") => true,
        Some(other) => return Err(ApiError::bad_request(format!("invalid force value {other:?}"))),
    };
    if force && pt != PatchType::Apply {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            &[crate::status::FieldError::forbidden("force", "may not be specified for non-apply patch")],
        ));
    }
    let mut ctx = write_ctx(c)?;
    if pt == PatchType::Apply && c.query.get("fieldManager").is_none_or(str::is_empty) {
        ctx.field_manager = String::new();
    }
    let (obj, created) = c.st.registry.patch(&c.rd, ns, name, pt, body, endpoint, force, &mut ctx)?;
    Ok(written_response(c, if created { StatusCode::CREATED } else { StatusCode::OK }, &obj, &ctx.warnings))
}

fn scale_update(c: &Ctx, ns: &str, name: &str, body: &[u8]) -> Result<Response, ApiError> {
    let desired = parse_body(body, &c.content_type, "io.k8s.api.autoscaling.v1.Scale")?;
    if desired.get("kind").and_then(Value::as_str).is_some_and(|k| k != "Scale") {
        return Err(ApiError::bad_request("the body of a scale update must be a Scale"));
    }
    let mut ctx = write_ctx(c)?;
    let scale = c.st.registry.write_scale(&c.rd, ns, name, &mut ctx, |_current| Ok(desired.clone()))?;
    Ok(written(object_response(c, StatusCode::OK, &scale, &ctx.warnings), &scale))
}

fn scale_patch(c: &Ctx, ns: &str, name: &str, body: &[u8]) -> Result<Response, ApiError> {
    let pt = patch_type(c)?;
    let mut ctx = write_ctx(c)?;
    let scale =
        c.st.registry
            .write_scale(&c.rd, ns, name, &mut ctx, |current| Registry::patch_scale_object(current, pt, body))?;
    Ok(written(object_response(c, StatusCode::OK, &scale, &ctx.warnings), &scale))
}

fn delete_options(c: &Ctx, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let mut opts = if body.is_empty() {
        DeleteOptions::default()
    } else {
        let v = parse_body(body, &c.content_type, crate::protobuf::DELETE_OPTIONS)?;
        DeleteOptions::from_body(&v)?
    };
    if let Some(g) = c.query.int("gracePeriodSeconds").map_err(ApiError::bad_request)? {
        opts.grace_period_seconds = Some(g);
    }
    if let Some(p) = c.query.get("propagationPolicy").filter(|p| !p.is_empty()) {
        opts.propagation = Some(Propagation::parse(p)?);
    }
    if let Some(o) = c.query.get("orphanDependents") {
        opts.orphan_dependents = Some(o == "true");
    }
    if c.query.all("dryRun").contains(&"All") {
        opts.dry_run = true;
    }
    Ok(opts)
}

fn delete(c: &Ctx, ns: &str, name: &str, body: &[u8]) -> Result<Response, ApiError> {
    let opts = delete_options(c, body)?;
    let orphan_false = opts.orphan_dependents == Some(false);
    let mut ctx = write_ctx(c)?;
    let outcome = c.st.registry.delete(&c.rd, ns, name, opts, &mut ctx)?;
    let returns_object = matches!(c.rd.special, Special::Pod | Special::Namespace | Special::Service);
    if !outcome.deleted || returns_object {
        let status = if !outcome.deleted && orphan_false { StatusCode::ACCEPTED } else { StatusCode::OK };
        return Ok(written(object_response(c, status, &outcome.object, &ctx.warnings), &outcome.object));
    }
    let mut details = Map::new();
    details.insert("name".into(), json!(name));
    if !c.rd.group.is_empty() {
        details.insert("group".into(), json!(c.rd.group));
    }
    details.insert("kind".into(), json!(c.rd.plural));
    details.insert("uid".into(), json!(crate::meta::uid(&outcome.object)));
    Ok(written(
        json_response(
            StatusCode::OK,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": Value::Object(details)}),
            &ctx.warnings,
        ),
        &outcome.object,
    ))
}

async fn delete_collection(c: &Ctx, body: &[u8]) -> Result<Response, ApiError> {
    let opts = delete_options(c, body)?;
    let list_opts = parse_list_options(&c.query)?;
    let mut ctx = write_ctx(c)?;
    let (items, rv, warnings) =
        if admission_request(c, c.rr.namespace.as_deref().unwrap_or(""), &[Operation::Delete]).1.is_empty() {
            let (items, rv) =
                c.st.registry.delete_collection(&c.rd, c.rr.namespace.as_deref(), &list_opts, &opts, &mut ctx)?;
            (items, rv, ctx.warnings)
        } else {
            // Each item's delete is admitted on its own, as `DeleteCollection` calls `Delete`.
            let mut list = list_opts.clone();
            list.limit = None;
            list.continue_token = None;
            let found = c.st.registry.list(&c.rd, c.rr.namespace.as_deref(), &list)?;
            let mut out = Vec::new();
            let mut warnings = Vec::new();
            for item in found.items {
                let (name, item_ns) = (crate::meta::name(&item).to_string(), crate::meta::namespace(&item).to_string());
                let result = admitted_with(c, &item_ns, &[Operation::Delete], body, || {
                    let mut ctx = write_ctx(c)?;
                    let o = c.st.registry.delete(&c.rd, &item_ns, &name, opts.clone(), &mut ctx)?;
                    Ok((o.object, ctx.warnings))
                })
                .await;
                match result {
                    Ok(((object, w), admission_warnings)) => {
                        out.push(object);
                        warnings.extend(w);
                        warnings.extend(admission_warnings);
                    }
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            (out, c.st.registry.store.current_rv(), warnings)
        };
    let list_meta = json!({"resourceVersion": rv.to_string()});
    Ok(bytes_response(
        StatusCode::OK,
        list_body(&c.rd.list_kind, &c.rd.api_version(), &list_meta, &items, !c.rd.is_custom()),
        &warnings,
    ))
}

/// What admission reads of the cluster: the registry's store and catalog.
fn admission_cluster(c: &Ctx) -> crate::admission::Cluster<'_> {
    crate::admission::Cluster { store: &c.st.registry.store, catalog: &c.st.registry.catalog }
}

/// The admission view of this request and the webhooks that may apply to it.
fn admission_request<'a>(
    c: &'a Ctx,
    ns: &'a str,
    ops: &[Operation],
) -> (crate::admission::Request<'a>, crate::admission::Candidates) {
    let dry_run = c.query.all("dryRun").contains(&"All");
    let req = crate::admission::Request {
        rd: &c.rd,
        subresource: c.rr.subresource.as_deref().unwrap_or(""),
        namespace: ns,
        user: &c.user,
        dry_run,
    };
    let hooks = c.st.admission.candidates(admission_cluster(c), &req, ops);
    (req, hooks)
}

/// Runs a write through validating admission: see [`admitted_with`].
async fn admitted(
    c: &Ctx,
    ns: &str,
    ops: &[Operation],
    body: &[u8],
    run: impl Fn() -> Result<Response, ApiError>,
) -> Result<Response, ApiError> {
    let (mut r, warnings) = admitted_with(c, ns, ops, body, run).await?;
    super::response::add_warnings(&mut r, &warnings);
    Ok(r)
}

/// Runs a registry write through validating admission (`crate::admission::gate`): a probe run
/// stops at the commit point with the old and new objects, the matching webhooks are called
/// with them, and the write is run again to commit — or probed again if another write changed
/// the object meanwhile. Without matching webhooks the write runs once, untouched.
async fn admitted_with<T>(
    c: &Ctx,
    ns: &str,
    ops: &[Operation],
    body: &[u8],
    run: impl Fn() -> Result<T, ApiError>,
) -> Result<(T, Vec<String>), ApiError> {
    use crate::admission::{Attempt, Gate};
    let (mut req, hooks) = admission_request(c, ns, ops);
    if hooks.is_empty() {
        return Ok((run()?, Vec::new()));
    }
    let set_gate = |g: Option<Gate>| *c.gate.lock().unwrap_or_else(|p| p.into_inner()) = g;
    for _ in 0..16 {
        let probe = Gate::probe();
        set_gate(Some(probe.clone()));
        let outcome = run();
        set_gate(None);
        let Some(probed) = probe.probed() else {
            // No write reached its commit point (an error, or nothing to write).
            return outcome.map(|t| (t, Vec::new()));
        };
        let operation = crate::admission::Operation::of(&probed);
        let view = |o: &Option<serde_json::Value>| {
            o.as_ref().map(|v| (*c.st.registry.view(&c.rd, &std::sync::Arc::new(v.clone()))).clone())
        };
        let (mut object, mut old_object) = (view(&probed.new), view(&probed.old));
        let mut kind = (c.rd.group.clone(), c.rd.version.clone(), c.rd.kind.clone());
        if c.rr.subresource.as_deref() == Some("scale") {
            // The scale subresource is admitted with its autoscaling/v1 Scale objects.
            let scale = |o: &mut Option<serde_json::Value>| {
                if let Some(v) = o.as_mut() {
                    *v = crate::registry::scale::to_scale(&c.rd, v);
                }
            };
            scale(&mut object);
            scale(&mut old_object);
            kind = ("autoscaling".into(), "v1".into(), "Scale".into());
        }
        let name =
            object.as_ref().or(old_object.as_ref()).map(|o| crate::meta::name(o).to_string()).unwrap_or_default();
        let delete_body = (operation == Operation::Delete).then(|| delete_options_value(c, body));
        if let Some(d) = &delete_body
            && d.get("dryRun").and_then(serde_json::Value::as_array).is_some_and(|a| a.iter().any(|x| x == "All"))
        {
            req.dry_run = true;
        }
        let field_manager = c.query.get("fieldManager");
        let attempt = Attempt {
            operation,
            kind,
            name,
            object,
            old_object,
            options: crate::admission::options(operation, req.dry_run, field_manager, delete_body.as_ref()),
        };
        let warnings = c.st.admission.admit(admission_cluster(c), &hooks, &req, &attempt).await?;
        set_gate(Some(Gate::commit(probed)));
        let outcome = run();
        set_gate(None);
        match outcome {
            Err(e) if Gate::is_stale(&e) => continue,
            other => return other.map(|t| (t, warnings)),
        }
    }
    Err(ApiError::modified(&c.rd.group_resource(), c.rr.name.as_deref().unwrap_or("")))
}

/// Admission of a subresource create whose object is the request body (`pods/eviction`,
/// `pods/binding`): nothing is probed, the body is the object.
async fn admit_request_object(
    c: &Ctx,
    ns: &str,
    name: &str,
    obj: &serde_json::Value,
    (group, version, kind): (&str, &str, &str),
) -> Result<Vec<String>, ApiError> {
    let (req, hooks) = admission_request(c, ns, &[Operation::Create]);
    if hooks.is_empty() {
        return Ok(Vec::new());
    }
    let mut object = obj.clone();
    if let serde_json::Value::Object(m) = &mut object {
        let api_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
        m.entry("apiVersion").or_insert_with(|| json!(api_version));
        m.entry("kind").or_insert_with(|| json!(kind));
    }
    let attempt = crate::admission::Attempt {
        operation: Operation::Create,
        kind: (group.to_string(), version.to_string(), kind.to_string()),
        name: name.to_string(),
        object: Some(object),
        old_object: None,
        options: crate::admission::options(Operation::Create, req.dry_run, c.query.get("fieldManager"), None),
    };
    c.st.admission.admit(admission_cluster(c), &hooks, &req, &attempt).await
}

/// The request's `DeleteOptions` as sent (body and query), for the AdmissionReview.
fn delete_options_value(c: &Ctx, body: &[u8]) -> serde_json::Value {
    let mut m = if body.is_empty() {
        serde_json::Map::new()
    } else {
        match parse_body(body, &c.content_type, crate::protobuf::DELETE_OPTIONS) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        }
    };
    if let Ok(Some(g)) = c.query.int("gracePeriodSeconds") {
        m.insert("gracePeriodSeconds".into(), json!(g));
    }
    if let Some(p) = c.query.get("propagationPolicy").filter(|p| !p.is_empty()) {
        m.insert("propagationPolicy".into(), json!(p));
    }
    if let Some(o) = c.query.get("orphanDependents") {
        m.insert("orphanDependents".into(), json!(o == "true"));
    }
    m.remove("kind");
    m.remove("apiVersion");
    serde_json::Value::Object(m)
}
