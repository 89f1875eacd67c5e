//! The registry: the semantics of every verb on every resource, independent of HTTP.
//!
//! It mirrors `k8s.io/apiserver/pkg/registry/generic/registry.Store`: decode and default the
//! request, run the kind's strategy, validate, track field ownership, then commit with
//! optimistic concurrency (retrying internally when the caller gave no resource version, the
//! way `GuaranteedUpdate` does). Controllers inside kube-sim (garbage collector, namespace and
//! CRD lifecycle) use the same entry points as HTTP clients.

pub(crate) mod claims;
pub(crate) mod crd;
pub(crate) mod defaults;
mod delete;
pub(crate) mod events;
pub(crate) mod fields;
pub(crate) mod scale;
pub(crate) mod strategy;
mod unchanged;

use std::sync::Arc;

use serde_json::{Map, Value, json};

pub(crate) use delete::{DeleteOptions, Propagation};
pub(crate) use strategy::Endpoint;

use crate::managed::{self, Scope};
use crate::meta;
use crate::patch::{self, PatchType};
use crate::resources::{Catalog, ResourceDef, Special};
use crate::schema::Cursor;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, FieldError, GroupResource};
use crate::store::{Filter, ListRequest, Store, StoreError, object_key};

/// How a write reports fields its kind does not declare (`fieldValidation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

/// Per-request write settings and the warnings the request collects.
#[derive(Clone, Debug)]
pub(crate) struct WriteCtx {
    pub dry_run: bool,
    pub field_manager: String,
    pub field_validation: FieldValidation,
    pub warnings: Vec<String>,
    /// Set while a server-side apply runs: ownership was already computed.
    skip_managed: bool,
    /// Validating admission webhooks: checked right before the write is committed.
    pub admission: Option<crate::admission::Gate>,
}

impl WriteCtx {
    pub(crate) fn new(field_manager: impl Into<String>) -> Self {
        Self {
            dry_run: false,
            field_manager: field_manager.into(),
            field_validation: FieldValidation::Warn,
            warnings: Vec::new(),
            skip_managed: false,
            admission: None,
        }
    }

    /// Context for kube-sim's own controllers.
    pub(crate) fn internal(manager: &str) -> Self {
        let mut c = Self::new(manager);
        c.field_validation = FieldValidation::Ignore;
        c
    }
}

/// List parameters (`ListOptions`).
#[derive(Clone, Debug, Default)]
pub(crate) struct ListOptions {
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

pub(crate) struct ListResult {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

pub(crate) struct Registry {
    pub store: Arc<Store>,
    pub catalog: Arc<Catalog>,
}

const MAX_UPDATE_ATTEMPTS: usize = 64;

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

fn scope_of(rd: &ResourceDef, endpoint: Endpoint) -> Scope {
    match endpoint {
        Endpoint::Status => Scope::Status,
        _ => Scope::Main { status_subresource: rd.status_subresource },
    }
}

impl Registry {
    pub(crate) fn new(store: Arc<Store>, catalog: Arc<Catalog>) -> Self {
        Self { store, catalog }
    }

    pub(crate) fn key(rd: &ResourceDef, ns: &str, name: &str) -> String {
        if rd.namespaced { object_key(ns, name) } else { name.to_string() }
    }

    fn store_error(&self, rd: &ResourceDef, name: &str, e: StoreError) -> ApiError {
        let gr = rd.group_resource();
        match e {
            StoreError::NotFound => ApiError::not_found(&gr, name),
            StoreError::AlreadyExists => ApiError::already_exists(&gr, name),
            StoreError::Conflict { .. } => ApiError::modified(&gr, name),
            StoreError::Expired { requested, oldest } => {
                ApiError::expired(format!("too old resource version: {requested} ({oldest})"))
            }
            StoreError::TooLarge { requested, current } => too_large(requested, current),
        }
    }

    /// The object as the requested version shows it (conversion and read-time defaulting).
    pub(crate) fn view(&self, rd: &ResourceDef, stored: &Arc<Value>) -> Arc<Value> {
        match rd.special {
            Special::CustomResource => {
                // Stored objects were defaulted when written: most reads change nothing and share the stored object.
                let api_version = rd.api_version();
                let defaults = rd.custom.as_ref().is_some_and(|c| c.has_defaults).then(|| rd.cursor()).flatten();
                if stored.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str())
                    && defaults.is_none_or(|c| !crate::schema::defaulting::defaults_would_change(c, stored))
                {
                    return stored.clone();
                }
                let mut v = (**stored).clone();
                if let Value::Object(m) = &mut v {
                    m.insert("apiVersion".into(), json!(rd.api_version()));
                }
                if rd.custom.as_ref().is_some_and(|c| c.has_defaults)
                    && let Some(c) = rd.cursor()
                {
                    crate::schema::defaulting::apply_defaults(c, &mut v);
                }
                Arc::new(v)
            }
            Special::EventsV1 => Arc::new(events::from_core(stored)),
            _ => stored.clone(),
        }
    }

    fn to_storage(&self, rd: &ResourceDef, v: Value) -> Value {
        match rd.special {
            Special::CustomResource => {
                let mut v = v;
                if let Value::Object(m) = &mut v {
                    m.insert("apiVersion".into(), json!(rd.storage_api_version));
                }
                v
            }
            Special::EventsV1 => events::to_core(&v),
            _ => v,
        }
    }

    pub(crate) fn get(&self, rd: &ResourceDef, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        let stored = self
            .store
            .get(&rd.storage, &Self::key(rd, ns, name))
            .ok_or_else(|| ApiError::not_found(&rd.group_resource(), name))?;
        Ok(self.view(rd, &stored))
    }

    /// The filter a list or watch applies (namespace is handled by the store).
    pub(crate) fn filter(
        &self,
        rd: &Arc<ResourceDef>,
        label: &LabelSelector,
        field: &FieldSelector,
    ) -> Result<Option<Filter>, ApiError> {
        fields::check_supported(rd, field).map_err(ApiError::bad_request)?;
        if label.is_empty() && field.is_empty() {
            return Ok(None);
        }
        let rd = rd.clone();
        let label = label.clone();
        let field = field.clone();
        Ok(Some(Arc::new(move |o: &Value| {
            label.matches_object(o) && (field.is_empty() || field.matches(&fields::field_values(&rd, o)))
        })))
    }

    pub(crate) fn list(
        &self,
        rd: &Arc<ResourceDef>,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ListResult, ApiError> {
        let filter = self.filter(rd, &opts.label_selector, &opts.field_selector)?;
        let mut at = None;
        let mut start_after: Option<String> = None;
        if let Some(token) = opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
            if opts.resource_version.as_deref().is_some_and(|r| !r.is_empty()) {
                return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
            }
            let (rv, start) = decode_continue(token)?;
            at = Some(rv);
            start_after = Some(start);
        } else {
            match (
                opts.resource_version.as_deref().filter(|r| !r.is_empty()),
                opts.resource_version_match.as_deref().filter(|m| !m.is_empty()),
            ) {
                (None, Some(_)) => {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                (Some(rv), Some("Exact")) => {
                    let rv = parse_rv(rv)?;
                    if rv == 0 {
                        return Err(ApiError::bad_request(
                            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                        ));
                    }
                    let current = self.store.current_rv();
                    if rv > current {
                        return Err(too_large(rv, current));
                    }
                    at = Some(rv);
                }
                (Some(rv), Some("NotOlderThan") | None) => {
                    let rv = parse_rv(rv)?;
                    let current = self.store.current_rv();
                    if rv > current {
                        return Err(too_large(rv, current));
                    }
                }
                (_, Some(other)) => {
                    return Err(ApiError::bad_request(format!("{other:?} is not a valid resourceVersionMatch")));
                }
                (None, None) => {}
            }
        }
        let namespace = if rd.namespaced { ns.filter(|n| !n.is_empty()) } else { None };
        let req = ListRequest { namespace, filter, limit: opts.limit, start_after: start_after.as_deref(), at };
        let page = match self.store.list(&rd.storage, &req) {
            Ok(p) => p,
            Err(StoreError::Expired { .. }) if opts.continue_token.is_some() => {
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ));
            }
            Err(e) => return Err(self.store_error(rd, "", e)),
        };
        let items = page.items.iter().map(|o| self.view(rd, o)).collect();
        Ok(ListResult {
            items,
            resource_version: page.rv,
            continue_token: page.continue_after.map(|k| encode_continue(page.rv, &k)),
            remaining: page.remaining,
        })
    }

    fn check_namespace_for_create(&self, rd: &ResourceDef, ns: &str, name: &str) -> Result<(), ApiError> {
        if !rd.namespaced {
            return Ok(());
        }
        match self.store.get("namespaces", ns) {
            None => Err(ApiError::not_found(&GroupResource::new("", "namespaces"), ns)),
            Some(n)
                if meta::deletion_timestamp(&n).is_some()
                    || n.get("status").and_then(|s| s.get("phase")).and_then(Value::as_str) == Some("Terminating") =>
            {
                Err(ApiError::namespace_terminating(&rd.group_resource(), name, ns))
            }
            Some(_) => Ok(()),
        }
    }

    /// Decodes a request body into the resource's version: type checks, unknown fields
    /// (per `fieldValidation`), pruning and defaulting.
    pub(crate) fn decode(
        &self,
        rd: &ResourceDef,
        body: Value,
        ctx: &mut WriteCtx,
        report_unknown: bool,
    ) -> Result<Value, ApiError> {
        let Value::Object(mut m) = body else {
            return Err(ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: expected an object",
                rd.kind
            )));
        };
        match m.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("apiVersion".into(), json!(rd.api_version()));
            }
            Some(av) if av != rd.api_version() => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({})",
                    rd.api_version()
                )));
            }
            _ => {}
        }
        match m.get("kind").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("kind".into(), json!(rd.kind));
            }
            Some(k) if k != rd.kind => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    rd.kind
                )));
            }
            _ => {}
        }
        if let Some(md) = m.get("metadata")
            && !md.is_object()
            && !md.is_null()
        {
            return Err(self.cannot_handle(rd, "metadata must be an object"));
        }
        let v = Value::Object(m);
        let (obj, unknown) = match &rd.codec {
            Some(codec) => {
                let d = codec.decode(v).map_err(|e| self.cannot_handle(rd, &e))?;
                (d.object, d.unknown_fields)
            }
            None => {
                let mut v = v;
                let unknown = match rd.cursor() {
                    Some(c) => crate::schema::pruning::prune_object(c, &mut v),
                    None => vec![],
                };
                if let Some(c) = rd.cursor() {
                    crate::schema::defaulting::apply_defaults(c, &mut v);
                }
                (v, unknown)
            }
        };
        if report_unknown {
            self.report_unknown(rd, &unknown, ctx)?;
        }
        Ok(obj)
    }

    fn report_unknown(&self, rd: &ResourceDef, unknown: &[String], ctx: &mut WriteCtx) -> Result<(), ApiError> {
        if unknown.is_empty() {
            return Ok(());
        }
        // Sorted: the order must not depend on how the JSON map iterates (serde_json's `preserve_order` is
        // enabled by other crates of the workspace), and the apiserver reports them sorted too.
        let mut unknown = unknown.to_vec();
        unknown.sort();
        match ctx.field_validation {
            FieldValidation::Ignore => Ok(()),
            FieldValidation::Warn => {
                ctx.warnings.extend(unknown.iter().map(|u| format!("unknown field {u:?}")));
                Ok(())
            }
            FieldValidation::Strict => {
                let list: Vec<String> = unknown.iter().map(|u| format!("unknown field {u:?}")).collect();
                Err(self.cannot_handle(rd, &format!("strict decoding error: {}", list.join(", "))))
            }
        }
    }

    fn cannot_handle(&self, rd: &ResourceDef, detail: &str) -> ApiError {
        ApiError::bad_request(format!(
            "{} in version {:?} cannot be handled as a {}: {detail}",
            rd.kind, rd.version, rd.kind
        ))
    }

    pub(crate) fn create(
        &self,
        rd: &Arc<ResourceDef>,
        ns: &str,
        body: Value,
        ctx: &mut WriteCtx,
    ) -> Result<Arc<Value>, ApiError> {
        let obj = self.decode(rd, body, ctx, true)?;
        self.create_decoded(rd, ns, obj, ctx)
    }

    fn create_decoded(
        &self,
        rd: &Arc<ResourceDef>,
        ns: &str,
        mut obj: Value,
        ctx: &mut WriteCtx,
    ) -> Result<Arc<Value>, ApiError> {
        let req_ns = if rd.namespaced { ns } else { "" };
        {
            let m = meta::metadata_mut(&mut obj);
            let obj_ns = m.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
            if !rd.namespaced {
                m.remove("namespace");
            } else if obj_ns.is_empty() {
                m.insert("namespace".into(), json!(req_ns));
            } else if obj_ns != req_ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            let name = m.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            let generate = m.get("generateName").and_then(Value::as_str).unwrap_or("").to_string();
            if name.is_empty() && !generate.is_empty() {
                m.insert("name".into(), json!(meta::generate_name(&generate)));
            }
            if m.get("resourceVersion").and_then(Value::as_str).is_some_and(|r| !r.is_empty()) {
                return Err(ApiError::internal("resourceVersion should not be set on objects to be created"));
            }
            m.insert("uid".into(), json!(meta::new_uid()));
            m.insert("creationTimestamp".into(), json!(meta::now()));
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("selfLink");
            m.remove("resourceVersion");
            if !ctx.skip_managed {
                m.remove("managedFields");
            }
        }
        let name = meta::name(&obj).to_string();
        if rd.special == Special::Namespace && meta::metadata(&obj).is_some_and(|m| m.contains_key("namespace")) {
            meta::metadata_mut(&mut obj).remove("namespace");
        }
        self.check_namespace_for_create(rd, req_ns, &name)?;
        let mut sa_automount = true;
        if rd.special == Special::Pod {
            let sa = obj
                .get("spec")
                .and_then(|s| s.get("serviceAccountName").or_else(|| s.get("serviceAccount")))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or("default")
                .to_string();
            match self.store.get("serviceaccounts", &object_key(req_ns, &sa)) {
                None => {
                    return Err(ApiError::forbidden(
                        &rd.group_resource(),
                        &name,
                        &format!("error looking up service account {req_ns}/{sa}: serviceaccount {sa:?} not found"),
                    ));
                }
                Some(account) => {
                    sa_automount = account.get("automountServiceAccountToken").and_then(Value::as_bool).unwrap_or(true)
                }
            }
        }
        let mut obj = self.to_storage(rd, obj);
        if rd.special == Special::PersistentVolumeClaim {
            claims::admit_claim(self, &mut obj);
        }
        strategy::prepare_create(rd, &mut obj, sa_automount);
        if rd.special == Special::Service {
            self.allocate_service(&mut obj);
        }
        let mut errs = crate::validation::validate_object_meta(&obj, rd.namespaced, rd.name_rule);
        errs.extend(strategy::validate_create(rd, &obj));
        if rd.special == Special::Crd {
            errs.extend(crd::validate(&obj));
        }
        errs.extend(self.schema_errors(rd, &obj, None, &errs));
        if !errs.is_empty() {
            return Err(ApiError::invalid(&rd.kind, &rd.group, &name, &errs));
        }
        if !ctx.skip_managed {
            managed::record_update(
                None,
                &mut obj,
                rd.cursor(),
                &ctx.field_manager,
                &rd.api_version(),
                scope_of(rd, Endpoint::Main),
            );
        }
        if let Some(w) = rd.custom.as_ref().and_then(|c| {
            c.deprecation_warning
                .clone()
                .or_else(|| c.deprecated.then(|| format!("{} is deprecated", rd.api_version())))
        }) {
            ctx.warnings.push(w);
        }
        if let Some(gate) = &ctx.admission {
            gate.check(None, Some(&mut obj))?;
        }
        // (Admission may pin the name generated when the webhooks were called.)
        let name = meta::name(&obj).to_string();
        if ctx.dry_run {
            return Ok(self.view(rd, &Arc::new(obj)));
        }
        let key = Self::key(rd, req_ns, &name);
        let stored = self.store.create(&rd.storage, &key, obj).map_err(|e| self.store_error(rd, &name, e))?;
        self.after_write(rd, None, Some(&stored));
        Ok(self.view(rd, &stored))
    }

    /// OpenAPI schema validation of a custom resource, then its CEL rules as far as kube-sim
    /// evaluates them (presence rules, and transition rules on updates, given `old`), unless `earlier` or the schema
    /// validation found a blocking error, as the customresource strategy does.
    fn schema_errors(
        &self,
        rd: &ResourceDef,
        obj: &Value,
        old: Option<&Value>,
        earlier: &[FieldError],
    ) -> Vec<FieldError> {
        if !rd.is_custom() {
            return vec![];
        }
        let Some(c) = rd.cursor() else { return vec![] };
        let mut errs = crate::schema::validate::validate_object(c, obj);
        if c.schema.set.has_cel_rules {
            let all: Vec<FieldError> = earlier.iter().chain(&errs).cloned().collect();
            match crate::schema::transition::blocking_error(&all) {
                Some(blocked) => errs.push(blocked),
                None => {
                    errs.extend(crate::schema::transition::validate_presence(c, obj));
                    if let Some(old) = old {
                        errs.extend(crate::schema::transition::validate_update(c, obj, old));
                    }
                }
            }
        }
        errs
    }

    /// Replaces an object (`PUT`), on the main resource or a subresource.
    pub(crate) fn update(
        &self,
        rd: &Arc<ResourceDef>,
        ns: &str,
        name: &str,
        body: Value,
        endpoint: Endpoint,
        ctx: &mut WriteCtx,
    ) -> Result<Arc<Value>, ApiError> {
        let new = self.decode(rd, body, ctx, true)?;
        let body_name = meta::name(&new);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = meta::namespace(&new);
        if rd.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(format!(
                "the namespace of the object ({body_ns}) does not match the namespace on the URL ({ns})"
            )));
        }
        self.guaranteed_update_shared(rd, ns, name, endpoint, ctx, |_current| Ok(new.clone()))
    }

    /// Patches an object (`PATCH`); a server-side apply may create it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &self,
        rd: &Arc<ResourceDef>,
        ns: &str,
        name: &str,
        patch_type: PatchType,
        body: &[u8],
        endpoint: Endpoint,
        force: bool,
        ctx: &mut WriteCtx,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        if patch_type == PatchType::Strategic && rd.is_custom() {
            return Err(ApiError::unsupported_media_type(
                patch_type.content_type(),
                &["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"],
            ));
        }
        if patch_type == PatchType::Apply {
            return self.apply(rd, ns, name, body, endpoint, force, ctx);
        }
        if force {
            return Err(ApiError::bad_request("force is not allowed for non-apply patches"));
        }
        let gr = rd.group_resource();
        let result = self.guaranteed_update_shared(rd, ns, name, endpoint, ctx, |current| {
            // One deep copy of the stored object (the view of a built-in is the stored Arc itself).
            let base = Arc::unwrap_or_clone(self.view(rd, current));
            let patched = match patch_type {
                PatchType::Json => patch::json_patch_owned(base, body)?,
                PatchType::Merge => patch::merge_patch_owned(base, body)?,
                PatchType::Strategic => patch::strategic_merge_patch_owned(base, body, rd.cursor())?,
                PatchType::Apply => return Err(ApiError::internal("apply handled separately")),
            };
            let _ = &gr;
            Ok(patched)
        })?;
        Ok((result, false))
    }

    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        rd: &Arc<ResourceDef>,
        ns: &str,
        name: &str,
        body: &[u8],
        endpoint: Endpoint,
        force: bool,
        ctx: &mut WriteCtx,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        if ctx.field_manager.is_empty() || ctx.field_manager == "unknown" {
            return Err(ApiError::invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                &[FieldError::required("fieldManager", "is required for apply patch")],
            ));
        }
        let applied: Value =
            serde_yaml::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        let Value::Object(mut am) = applied else {
            return Err(ApiError::bad_request("apply patch must be an object"));
        };
        match am.get("apiVersion").and_then(Value::as_str) {
            Some(av) if av == rd.api_version() => {}
            Some(av) => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({})",
                    rd.api_version()
                )));
            }
            None => return Err(ApiError::bad_request("apiVersion must be set in apply patch")),
        }
        match am.get("kind").and_then(Value::as_str) {
            Some(k) if k == rd.kind => {}
            Some(k) => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    rd.kind
                )));
            }
            None => return Err(ApiError::bad_request("kind must be set in apply patch")),
        }
        let body_name = am.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(Value::Object(md)) = am.get_mut("metadata") {
            md.remove("managedFields");
        }
        let mut applied = Value::Object(am);
        if let Some(c) = rd.cursor() {
            let unknown = crate::schema::pruning::prune_object(c, &mut applied);
            self.report_unknown(rd, &unknown, ctx)?;
        }
        let manager = ctx.field_manager.clone();
        let api_version = rd.api_version();
        let scope = scope_of(rd, endpoint);
        let key = Self::key(rd, ns, name);
        if self.store.get(&rd.storage, &key).is_none() {
            if endpoint != Endpoint::Main {
                return Err(ApiError::not_found(&rd.group_resource(), name));
            }
            let merged = managed::apply(None, &applied, rd.cursor(), &manager, &api_version, force, scope)
                .map_err(|c| self.apply_conflict(rd, name, &c))?;
            let merged = self.decode(rd, merged, ctx, false)?;
            let mut cctx = ctx.clone();
            cctx.skip_managed = true;
            let mut merged = merged;
            meta::metadata_mut(&mut merged).insert("name".into(), json!(name));
            let created = self.create_decoded(rd, ns, merged, &mut cctx);
            ctx.warnings = cctx.warnings;
            return match created {
                Ok(v) => Ok((v, true)),
                // Lost a race with a concurrent create: apply onto the object that now exists.
                Err(e) if e.reason == "AlreadyExists" => self.apply(rd, ns, name, body, endpoint, force, ctx),
                Err(e) => Err(e),
            };
        }
        let mut uctx = ctx.clone();
        uctx.skip_managed = true;
        let result = self.guaranteed_update_shared(rd, ns, name, endpoint, &mut uctx, |current| {
            let live = self.view(rd, current);
            let merged = managed::apply(Some(&live), &applied, rd.cursor(), &manager, &api_version, force, scope)
                .map_err(|c| self.apply_conflict(rd, name, &c))?;
            Ok(merged)
        });
        ctx.warnings = uctx.warnings;
        Ok((result?, false))
    }

    fn apply_conflict(&self, rd: &ResourceDef, name: &str, conflicts: &[managed::Conflict]) -> ApiError {
        let mut e = ApiError::new(409, "Conflict", managed::conflict_message(conflicts));
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {:?} using {}", c.manager, c.api_version), "field": c.path}))
            .collect();
        let mut d = Map::new();
        d.insert("name".into(), json!(name));
        if !rd.group.is_empty() {
            d.insert("group".into(), json!(rd.group));
        }
        d.insert("kind".into(), json!(rd.plural));
        d.insert("causes".into(), Value::Array(causes));
        e.details = Some(Box::new(Value::Object(d)));
        e
    }

    /// Read-modify-write with optimistic concurrency. `mutate` gets the stored object and
    /// returns the desired object in the request's version.
    pub(crate) fn guaranteed_update(
        &self,
        rd: &Arc<ResourceDef>,
        ns: &str,
        name: &str,
        endpoint: Endpoint,
        ctx: &mut WriteCtx,
        mutate: impl FnMut(&Arc<Value>) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        self.guaranteed_update_shared(rd, ns, name, endpoint, ctx, mutate).map(Arc::unwrap_or_clone)
    }

    /// [`Self::guaranteed_update`], returning the object as served without copying it out of the store (the
    /// response of a patch or update is encoded from it).
    pub(crate) fn guaranteed_update_shared(
        &self,
        rd: &Arc<ResourceDef>,
        ns: &str,
        name: &str,
        endpoint: Endpoint,
        ctx: &mut WriteCtx,
        mut mutate: impl FnMut(&Arc<Value>) -> Result<Value, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        let key = Self::key(rd, ns, name);
        let gr = rd.group_resource();
        for _ in 0..MAX_UPDATE_ATTEMPTS {
            let current = self.store.get(&rd.storage, &key).ok_or_else(|| ApiError::not_found(&gr, name))?;
            let mut desired = mutate(&current)?;
            // Sections the write left as stored (a status write's spec, an image patch's status) stay out of the
            // decode round trip: they decode to themselves (unchanged.rs). Not for events.k8s.io Events, stored as
            // core Events: their stored sections are another kind's.
            let kept = match &rd.codec {
                Some(codec) if rd.special != Special::EventsV1 => {
                    unchanged::take(codec.as_ref(), &current, &mut desired)
                }
                _ => unchanged::Kept::default(),
            };
            // managedFields the write left as stored (every patch and most updates) stay out of the decode round trip,
            // which would only rebuild them (they were written by kube-sim, and decoding them is stable): an empty
            // list holds their place in the metadata meanwhile.
            let stored_fields = meta::metadata(&current).and_then(|m| m.get("managedFields"));
            let unchanged_fields = match desired.get_mut("metadata").and_then(|m| m.get_mut("managedFields")) {
                Some(fields)
                    if crate::json::opt_eq(stored_fields, Some(fields))
                        && fields.as_array().is_some_and(|a| !a.is_empty()) =>
                {
                    Some(std::mem::replace(fields, Value::Array(Vec::new())))
                }
                _ => None,
            };
            let mut desired = if ctx.skip_managed {
                self.decode(rd, desired, ctx, false)?
            } else {
                self.decode_patched(rd, desired, ctx)?
            };
            unchanged::restore(kept, &mut desired);
            if let Some(fields) = unchanged_fields {
                meta::metadata_mut(&mut desired).insert("managedFields".into(), fields);
            }
            let requested_rv = meta::resource_version(&desired).to_string();
            let explicit_rv = !requested_rv.is_empty();
            if explicit_rv && requested_rv != meta::resource_version(&current) {
                return Err(ApiError::modified(&gr, name));
            }
            let mut new = self.to_storage(rd, desired);
            self.carry_system_metadata(&current, &mut new, !ctx.skip_managed);
            strategy::prepare_update(rd, endpoint, &current, &mut new);
            let mut errs = crate::validation::validate_object_meta_update(&new, &current);
            if errs.is_empty() {
                errs.extend(crate::validation::validate_object_meta(&new, rd.namespaced, rd.name_rule));
            }
            errs.extend(strategy::validate_update(rd, endpoint, &current, &new));
            errs.extend(strategy::finalizer_errors(&current, &new));
            if rd.special == Special::Crd && endpoint == Endpoint::Main {
                errs.extend(crd::validate_update(&current, &new));
            }
            let so_far = errs.clone();
            errs.extend(self.schema_errors(rd, &new, Some(&current), &so_far));
            if !errs.is_empty() {
                return Err(ApiError::invalid(&rd.kind, &rd.group, name, &errs));
            }
            if !ctx.skip_managed {
                managed::record_update(
                    Some(&current),
                    &mut new,
                    rd.cursor(),
                    &ctx.field_manager,
                    &rd.api_version(),
                    scope_of(rd, endpoint),
                );
            }
            if let Some(gate) = &ctx.admission {
                gate.check(Some(&current), Some(&mut new))?;
            }
            let current_rv: u64 = meta::resource_version(&current).parse().unwrap_or(0);
            if self.should_delete_during_update(rd, &current, &new) {
                if ctx.dry_run {
                    return Ok(self.view(rd, &Arc::new(new)));
                }
                match self.store.delete(&rd.storage, &key, Some(current_rv)) {
                    Ok(last) => {
                        self.after_write(rd, Some(&current), None);
                        let mut out = new;
                        meta::metadata_mut(&mut out)
                            .insert("resourceVersion".into(), json!(meta::resource_version(&last)));
                        return Ok(self.view(rd, &Arc::new(out)));
                    }
                    // Another write landed since `current` was read: the next attempt starts from it (a request
                    // that named a resourceVersion then fails the check above, as in the API server).
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(self.store_error(rd, name, e)),
                }
            }
            if ctx.dry_run {
                meta::metadata_mut(&mut new).insert("resourceVersion".into(), json!(meta::resource_version(&current)));
                return Ok(self.view(rd, &Arc::new(new)));
            }
            match self.store.update(&rd.storage, &key, new, current_rv) {
                Ok(stored) => {
                    if !Arc::ptr_eq(&stored, &current) {
                        self.after_write(rd, Some(&current), Some(&stored));
                    }
                    return Ok(self.view(rd, &stored));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(self.store_error(rd, name, e)),
            }
        }
        Err(ApiError::modified(&gr, name))
    }

    /// Patch results are decoded like request bodies (strict field validation applies).
    fn decode_patched(&self, rd: &ResourceDef, v: Value, ctx: &mut WriteCtx) -> Result<Value, ApiError> {
        self.decode(rd, v, ctx, true)
    }

    fn carry_system_metadata(&self, current: &Value, new: &mut Value, restore_managed_fields: bool) {
        // Borrowed, not cloned: the stored metadata holds managedFields, the largest part of it.
        let empty = Map::new();
        let cm = meta::metadata(current).unwrap_or(&empty);
        let m = meta::metadata_mut(new);
        if m.get("uid").and_then(Value::as_str).is_none_or(str::is_empty)
            && let Some(u) = cm.get("uid")
        {
            m.insert("uid".into(), u.clone());
        }
        for k in ["creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "selfLink"] {
            match cm.get(k) {
                Some(v) => m.insert(k.into(), v.clone()),
                None => m.remove(k),
            };
        }
        if m.get("name").and_then(Value::as_str).is_none_or(str::is_empty)
            && let Some(n) = cm.get("name")
        {
            m.insert("name".into(), n.clone());
        }
        if m.get("namespace").and_then(Value::as_str).is_none_or(str::is_empty)
            && let Some(n) = cm.get("namespace")
        {
            m.insert("namespace".into(), n.clone());
        }
        // Ownership is recomputed from the stored entries unless a client explicitly resets it.
        let reset = m.get("managedFields").and_then(Value::as_array).is_some_and(Vec::is_empty);
        if restore_managed_fields && !reset {
            match cm.get("managedFields") {
                // Most writes carry the stored entries already (a patch starts from the stored object): no copy.
                Some(v) if crate::json::opt_eq(m.get("managedFields"), Some(v)) => None,
                Some(v) => m.insert("managedFields".into(), v.clone()),
                None => m.remove("managedFields"),
            };
        }
    }

    fn should_delete_during_update(&self, rd: &ResourceDef, current: &Value, new: &Value) -> bool {
        if !meta::finalizers(new).is_empty() || meta::deletion_timestamp(current).is_none() {
            return false;
        }
        if rd.special == Special::Namespace
            && new
                .get("spec")
                .and_then(|s| s.get("finalizers"))
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty())
        {
            return false;
        }
        meta::deletion_grace_period(current).is_none_or(|g| g == 0)
    }

    /// Updates a stored object directly (kube-sim's own controllers and system subresources
    /// like `pods/binding`), retrying on conflicts. `f` returns `None` to leave it unchanged.
    pub(crate) fn internal_update(
        &self,
        storage: &str,
        key: &str,
        mut f: impl FnMut(&Value) -> Result<Option<Value>, ApiError>,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        for _ in 0..MAX_UPDATE_ATTEMPTS {
            let Some(current) = self.store.get(storage, key) else { return Ok(None) };
            let Some(new) = f(&current)? else { return Ok(Some(current)) };
            let rv: u64 = meta::resource_version(&current).parse().unwrap_or(0);
            match self.store.update(storage, key, new, rv) {
                Ok(s) => return Ok(Some(s)),
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound) => return Ok(None),
                Err(e) => return Err(ApiError::internal(format!("{e:?}"))),
            }
        }
        Err(ApiError::internal(format!("too many conflicts updating {storage}/{key}")))
    }

    /// Hooks after a commit (`old` None = created, `new` None = deleted).
    fn after_write(&self, rd: &ResourceDef, old: Option<&Arc<Value>>, new: Option<&Arc<Value>>) {
        match (rd.special, new) {
            (Special::Namespace, Some(ns)) if old.is_none() => {
                let name = meta::name(ns).to_string();
                let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name, "uid": meta::new_uid(), "creationTimestamp": meta::now()}});
                let _ = self.store.create("serviceaccounts", &object_key(&name, "default"), sa);
            }
            (Special::Crd, Some(crd)) => {
                let spec_changed = old.is_none_or(|o| {
                    o.get("spec") != crd.get("spec") || meta::deletion_timestamp(o) != meta::deletion_timestamp(crd)
                });
                if spec_changed {
                    self.establish_crd(crd);
                    self.sync_crd_api_services();
                }
            }
            (Special::Crd, None) => {
                if let Some(o) = old {
                    self.catalog.set_crd(meta::name(o), vec![]);
                    self.sync_crd_api_services();
                }
            }
            _ => {}
        }
    }

    /// Keeps one APIService per group version custom resources are served at, as the CRD registration
    /// controller does: creates the missing ones, deletes those (`automanaged: true`) no CRD serves any more.
    fn sync_crd_api_services(&self) {
        const API_SERVICES: &str = "apiservices.apiregistration.k8s.io";
        let desired = crate::discovery::crd_api_services(&self.catalog);
        let existing = self.store.snapshot(API_SERVICES);
        for (key, o) in &existing {
            let managed =
                o.pointer("/metadata/labels/kube-aggregator.kubernetes.io~1automanaged") == Some(&json!("true"));
            if managed && !desired.iter().any(|d| meta::name(d) == key) {
                let _ = self.store.delete(API_SERVICES, key, None);
            }
        }
        for mut d in desired {
            let name = meta::name(&d).to_string();
            if existing.iter().any(|(key, _)| *key == name) {
                continue;
            }
            let md = meta::metadata_mut(&mut d);
            md.insert("uid".into(), json!(meta::new_uid()));
            md.insert("creationTimestamp".into(), json!(meta::now()));
            let _ = self.store.create(API_SERVICES, &name, d);
        }
    }

    /// Registers a CRD's versions and records the accepted names and `Established`.
    pub(crate) fn establish_crd(&self, crd: &Value) {
        let name = meta::name(crd).to_string();
        let group = crd.get("spec").and_then(|s| s.get("group")).and_then(Value::as_str).unwrap_or("");
        let plural = crd
            .get("spec")
            .and_then(|s| s.get("names"))
            .and_then(|n| n.get("plural"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = crd
            .get("spec")
            .and_then(|s| s.get("names"))
            .and_then(|n| n.get("kind"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let conflict = self.catalog.name_conflict(&name, group, plural, kind);
        if conflict.is_none() {
            match crate::resources::crd_to_defs(crd) {
                Ok(defs) => self.catalog.set_crd(&name, defs),
                Err(e) => tracing::warn!(crd = %name, error = %e, "cannot serve CRD"),
            }
        }
        let _ = self.write_status_if_changed("customresourcedefinitions.apiextensions.k8s.io", &name, |cur| {
            crd::accepted_status(cur, conflict.as_deref())
        });
    }

    /// Sets `status` to what `compute` derives from the stored object, writing only if it
    /// changed (controllers' status updates).
    pub(crate) fn write_status_if_changed(
        &self,
        storage: &str,
        key: &str,
        compute: impl Fn(&Value) -> Value,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        self.internal_update(storage, key, |cur| {
            let status = compute(cur);
            if cur.get("status") == Some(&status) {
                return Ok(None);
            }
            let mut next = cur.clone();
            if let Value::Object(m) = &mut next {
                m.insert("status".into(), status);
            }
            Ok(Some(next))
        })
    }

    fn allocate_service(&self, svc: &mut Value) {
        let used_ips: std::collections::HashSet<String> = self
            .store
            .snapshot("services")
            .iter()
            .filter_map(|(_, s)| {
                s.get("spec").and_then(|sp| sp.get("clusterIP")).and_then(Value::as_str).map(str::to_string)
            })
            .collect();
        let used_ports: std::collections::HashSet<i64> = self
            .store
            .snapshot("services")
            .iter()
            .flat_map(|(_, s)| {
                s.get("spec")
                    .and_then(|sp| sp.get("ports"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
            })
            .collect();
        let Some(Value::Object(spec)) = svc.get_mut("spec") else { return };
        let ty = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP").to_string();
        spec.insert("type".into(), json!(ty));
        spec.entry("sessionAffinity").or_insert_with(|| json!("None"));
        if ty != "ExternalName" {
            let ip = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
            let ip = if ip.is_empty() {
                let mut n: u32 = 1;
                loop {
                    let candidate = format!("10.96.{}.{}", n / 254, n % 254 + 1);
                    if !used_ips.contains(&candidate) || n > 65_000 {
                        break candidate;
                    }
                    n += 1;
                }
            } else {
                ip
            };
            spec.insert("clusterIP".into(), json!(ip));
            spec.insert("clusterIPs".into(), json!([ip]));
            spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
            spec.entry("ipFamilyPolicy").or_insert_with(|| json!("SingleStack"));
            spec.entry("internalTrafficPolicy").or_insert_with(|| json!("Cluster"));
        }
        let node_ports = ty == "NodePort" || ty == "LoadBalancer";
        if node_ports {
            spec.entry("externalTrafficPolicy").or_insert_with(|| json!("Cluster"));
        }
        if ty == "LoadBalancer" {
            spec.entry("allocateLoadBalancerNodePorts").or_insert_with(|| json!(true));
        }
        let mut next_port = 30000;
        if let Some(Value::Array(ports)) = spec.get_mut("ports") {
            for p in ports {
                let Value::Object(p) = p else { continue };
                p.entry("protocol").or_insert_with(|| json!("TCP"));
                if !p.contains_key("targetPort")
                    && let Some(port) = p.get("port").cloned()
                {
                    p.insert("targetPort".into(), port);
                }
                if node_ports && p.get("nodePort").and_then(Value::as_i64).is_none() {
                    while used_ports.contains(&next_port) && next_port < 32767 {
                        next_port += 1;
                    }
                    p.insert("nodePort".into(), json!(next_port));
                    next_port += 1;
                }
            }
        }
        if let Value::Object(m) = svc {
            m.insert("status".into(), json!({"loadBalancer": {}}));
        }
    }

    /// `pods/binding`: the scheduler's way to set `spec.nodeName`.
    pub(crate) fn bind_pod(&self, ns: &str, name: &str, binding: &Value) -> Result<(), ApiError> {
        let node = binding.get("target").and_then(|t| t.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
        if node.is_empty() {
            return Err(ApiError::invalid("Binding", "", name, &[FieldError::required("target.name", "")]));
        }
        let gr = GroupResource::new("", "pods/binding");
        let annotations =
            binding.get("metadata").and_then(|m| m.get("annotations")).and_then(Value::as_object).cloned();
        let result = self.internal_update("pods", &object_key(ns, name), |cur| {
            if meta::deletion_timestamp(cur).is_some() {
                return Err(ApiError::conflict(&gr, name, &format!("pod {name} is being deleted, cannot be assigned to a host")));
            }
            let assigned = cur.get("spec").and_then(|s| s.get("nodeName")).and_then(Value::as_str).unwrap_or("");
            if !assigned.is_empty() {
                return Err(ApiError::conflict(&gr, name, &format!("pod {name} is already assigned to node {assigned:?}")));
            }
            let mut next = cur.clone();
            if let Some(Value::Object(spec)) = next.get_mut("spec") {
                spec.insert("nodeName".into(), json!(node));
            }
            if let Some(a) = &annotations {
                let m = meta::metadata_mut(&mut next).entry("annotations").or_insert_with(|| json!({}));
                if let Value::Object(m) = m {
                    for (k, v) in a {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            if let Value::Object(m) = &mut next {
                let status = m.entry("status").or_insert_with(|| json!({}));
                if let Value::Object(st) = status {
                    let conds = st.entry("conditions").or_insert_with(|| json!([]));
                    if let Value::Array(cs) = conds {
                        cs.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
                        cs.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": meta::now()}));
                    }
                }
            }
            Ok(Some(next))
        })?;
        match result {
            Some(_) => Ok(()),
            None => Err(ApiError::not_found(&GroupResource::new("", "pods"), name)),
        }
    }

    /// `GET .../scale`
    pub(crate) fn get_scale(&self, rd: &ResourceDef, ns: &str, name: &str) -> Result<Value, ApiError> {
        let stored = self
            .store
            .get(&rd.storage, &Self::key(rd, ns, name))
            .ok_or_else(|| ApiError::not_found(&rd.group_resource(), name))?;
        Ok(scale::to_scale(rd, &self.view(rd, &stored)))
    }

    /// `PUT`/`PATCH .../scale`: `make_scale` turns the current Scale into the desired one.
    pub(crate) fn write_scale(
        &self,
        rd: &Arc<ResourceDef>,
        ns: &str,
        name: &str,
        ctx: &mut WriteCtx,
        mut make_scale: impl FnMut(&Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let updated = self.guaranteed_update(rd, ns, name, Endpoint::Scale, ctx, |current| {
            let mut obj = (*self.view(rd, current)).clone();
            let current_scale = scale::to_scale(rd, &obj);
            let desired = make_scale(&current_scale)?;
            let rv =
                desired.get("metadata").and_then(|m| m.get("resourceVersion")).and_then(Value::as_str).unwrap_or("");
            if !rv.is_empty() && rv != meta::resource_version(current) {
                return Err(ApiError::modified(&rd.group_resource(), name));
            }
            let replicas = desired.get("spec").and_then(|s| s.get("replicas")).and_then(Value::as_i64).unwrap_or(0);
            if replicas < 0 {
                return Err(ApiError::invalid(
                    "Scale",
                    "autoscaling",
                    name,
                    &[FieldError::invalid("spec.replicas", json!(replicas), "must be greater than or equal to 0")],
                ));
            }
            scale::apply_scale(rd, &mut obj, replicas);
            meta::metadata_mut(&mut obj).remove("resourceVersion");
            Ok(obj)
        })?;
        Ok(scale::to_scale(rd, &updated))
    }

    /// The schema of Scale (strategic merge patches of the scale subresource).
    pub(crate) fn scale_schema() -> Option<crate::schema::Schema> {
        crate::resources::BUILTINS.schemas.schema("io.k8s.api.autoscaling.v1.Scale")
    }

    /// Resolves a patch of a Scale object.
    pub(crate) fn patch_scale_object(scale_obj: &Value, patch_type: PatchType, body: &[u8]) -> Result<Value, ApiError> {
        match patch_type {
            PatchType::Json => patch::json_patch(scale_obj, body),
            PatchType::Merge => patch::merge_patch(scale_obj, body),
            PatchType::Strategic => {
                let s = Self::scale_schema();
                patch::strategic_merge_patch(scale_obj, body, s.as_ref().map(Cursor::root))
            }
            PatchType::Apply => {
                let applied: Value = serde_yaml::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
                let mut out = scale_obj.clone();
                managed::merge_applied(&mut out, &applied, None);
                Ok(out)
            }
        }
    }
}

/// `504` for a resourceVersion newer than the store has (lists and watches answer it the same way).
pub(crate) fn too_large(requested: u64, current: u64) -> ApiError {
    let mut e = ApiError::timeout(format!("Too large resource version: {requested}, current: {current}"));
    e.details = Some(Box::new(
        json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
    ));
    e.retry_after = Some(1);
    e
}

/// `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>\u0000"}` in base64, like the etcd3 store.
pub(crate) fn encode_continue(rv: u64, last_key: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{last_key}\u{0}")});
    data_encoding::BASE64.encode(token.to_string().as_bytes())
}

pub(crate) fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    let invalid = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let bytes = data_encoding::BASE64
        .decode(token.as_bytes())
        .or_else(|_| data_encoding::BASE64URL.decode(token.as_bytes()))
        .map_err(|_| invalid("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|_| invalid("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(invalid("server does not recognize this encoded version"));
    }
    let rv = v
        .get("rv")
        .and_then(Value::as_u64)
        .filter(|r| *r > 0)
        .ok_or_else(|| invalid("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
    let start = v.get("start").and_then(Value::as_str).unwrap_or("").trim_end_matches('\u{0}').to_string();
    Ok((rv, start))
}
