//! Deletion: preconditions, graceful deletion (pods), finalizers, the garbage collector's
//! `orphan` / `foregroundDeletion` finalizers from the propagation policy, and namespaces'
//! two-phase deletion — ported from `registry.Store.Delete` and `rest.BeforeDelete`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{ListOptions, Registry, WriteCtx};
use crate::meta;
use crate::resources::{ResourceDef, Special};
use crate::status::{ApiError, GroupResource};
use crate::store::StoreError;

pub(super) const FINALIZER_ORPHAN: &str = "orphan";
pub(super) const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Propagation {
    Orphan,
    Background,
    Foreground,
}

impl Propagation {
    pub(crate) fn parse(s: &str) -> Result<Self, ApiError> {
        match s {
            "Orphan" => Ok(Propagation::Orphan),
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            other => Err(ApiError::invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                &[crate::status::FieldError::not_supported(
                    "propagationPolicy",
                    json!(other),
                    &["Foreground".into(), "Background".into(), "Orphan".into(), "nil".into()],
                )],
            )),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation: Option<Propagation>,
    pub orphan_dependents: Option<bool>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Checks the preconditions against `current`, the object to delete, as apimachinery's `Preconditions.Check`:
    /// a 409 Conflict for the first that does not hold (an empty one holds). `pinned_rv` stands for a
    /// resourceVersion precondition the options do not give (an eviction pins the version it checked budgets at).
    pub(crate) fn check_preconditions(
        &self,
        gr: &GroupResource,
        name: &str,
        current: &Value,
        pinned_rv: Option<&str>,
    ) -> Result<(), ApiError> {
        if let Some(uid) = self.precondition_uid.as_deref().filter(|u| !u.is_empty())
            && uid != meta::uid(current)
        {
            let cause =
                format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", meta::uid(current));
            return Err(ApiError::conflict(gr, name, &cause));
        }
        if let Some(rv) = self.precondition_rv.as_deref().filter(|r| !r.is_empty()).or(pinned_rv)
            && rv != meta::resource_version(current)
        {
            let cause = format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta::resource_version(current)
            );
            return Err(ApiError::conflict(gr, name, &cause));
        }
        Ok(())
    }

    /// Reads a `DeleteOptions` body (query parameters are merged by the caller).
    pub(crate) fn from_body(v: &Value) -> Result<Self, ApiError> {
        let mut o = Self {
            grace_period_seconds: v.get("gracePeriodSeconds").and_then(Value::as_i64),
            orphan_dependents: v.get("orphanDependents").and_then(Value::as_bool),
            ..Self::default()
        };
        if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
            o.propagation = Some(Propagation::parse(p)?);
        }
        if let Some(pre) = v.get("preconditions") {
            o.precondition_uid = pre.get("uid").and_then(Value::as_str).map(str::to_string);
            o.precondition_rv = pre.get("resourceVersion").and_then(Value::as_str).map(str::to_string);
        }
        if let Some(d) = v.get("dryRun").and_then(Value::as_array) {
            o.dry_run = d.iter().any(|x| x == "All");
        }
        if o.orphan_dependents.is_some() && o.propagation.is_some() {
            return Err(ApiError::invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                &[crate::status::FieldError::invalid(
                    "propagationPolicy",
                    json!(o.propagation.map(|p| format!("{p:?}"))),
                    "orphanDependents and deletionPropagation cannot be both set",
                )],
            ));
        }
        Ok(o)
    }
}

/// What a delete did.
pub(crate) struct DeleteOutcome {
    /// The object after the call: still present (graceful deletion, finalizers) or as deleted.
    pub object: Arc<Value>,
    pub deleted: bool,
}

fn should_orphan(finalizers: &[String], o: &DeleteOptions) -> bool {
    if let Some(orphan) = o.orphan_dependents {
        return orphan;
    }
    match o.propagation {
        Some(Propagation::Orphan) => return true,
        Some(_) => return false,
        None => {}
    }
    for f in finalizers {
        if f == FINALIZER_ORPHAN {
            return true;
        }
        if f == FINALIZER_FOREGROUND {
            return false;
        }
    }
    false
}

fn should_delete_dependents(finalizers: &[String], o: &DeleteOptions) -> bool {
    if o.orphan_dependents.is_some() {
        return false;
    }
    match o.propagation {
        Some(Propagation::Foreground) => return true,
        Some(_) => return false,
        None => {}
    }
    finalizers.iter().any(|f| f == FINALIZER_FOREGROUND)
}

/// `deletionFinalizersForGarbageCollection`: the finalizer set the options ask for, if it differs.
pub(super) fn gc_finalizers(obj: &Value, o: &DeleteOptions) -> Option<Vec<String>> {
    let current = meta::finalizers(obj);
    let mut next: Vec<String> =
        current.iter().filter(|f| *f != FINALIZER_ORPHAN && *f != FINALIZER_FOREGROUND).cloned().collect();
    if should_orphan(&current, o) {
        next.push(FINALIZER_ORPHAN.into());
    }
    if should_delete_dependents(&current, o) {
        next.push(FINALIZER_FOREGROUND.into());
    }
    let a: std::collections::BTreeSet<&String> = current.iter().collect();
    let b: std::collections::BTreeSet<&String> = next.iter().collect();
    if a == b { None } else { Some(next) }
}

enum Graceful {
    /// Delete now (unless finalizers hold the object).
    No,
    /// Mark with a deletion timestamp and keep the object for the grace period.
    Yes,
    /// A longer or equal grace period was already pending: nothing changes.
    Pending,
}

/// `rest.BeforeDelete` with the pod strategy's `CheckGracefulDelete`.
fn before_delete(rd: &ResourceDef, obj: &mut Value, o: &mut DeleteOptions) -> Graceful {
    if let Some(g) = o.grace_period_seconds
        && g < 0
    {
        o.grace_period_seconds = Some(1);
    }
    if rd.special != Special::Pod {
        return Graceful::No;
    }
    if meta::deletion_timestamp(obj).is_some() {
        let current = meta::deletion_grace_period(obj);
        let Some(current) = current.filter(|c| *c > 0) else { return Graceful::No };
        let Some(period) = o.grace_period_seconds else { return Graceful::Pending };
        if period >= current {
            return Graceful::Pending;
        }
        let dts = meta::deletion_timestamp(obj).and_then(meta::parse_time);
        let m = meta::metadata_mut(obj);
        if let Some(dts) = dts {
            let shifted = dts.as_second() - current + period;
            if let Ok(t) = k8s_openapi::jiff::Timestamp::from_second(shifted) {
                m.insert("deletionTimestamp".into(), json!(meta::format_time(t)));
            }
        }
        m.insert("deletionGracePeriodSeconds".into(), json!(period));
        return if period > 0 { Graceful::Yes } else { Graceful::No };
    }
    let spec = obj.get("spec");
    let mut period = o.grace_period_seconds.unwrap_or_else(|| {
        spec.and_then(|s| s.get("terminationGracePeriodSeconds")).and_then(Value::as_i64).unwrap_or(0)
    });
    if spec.and_then(|s| s.get("nodeName")).and_then(Value::as_str).is_none_or(str::is_empty) {
        period = 0;
    }
    let phase = obj.get("status").and_then(|s| s.get("phase")).and_then(Value::as_str).unwrap_or("");
    if phase == "Failed" || phase == "Succeeded" {
        period = 0;
    }
    o.grace_period_seconds = Some(period);
    if period == 0 {
        return Graceful::No;
    }
    let when = k8s_openapi::jiff::Timestamp::now().as_second() + period;
    let generation = meta::generation(obj);
    let m = meta::metadata_mut(obj);
    if let Ok(t) = k8s_openapi::jiff::Timestamp::from_second(when) {
        m.insert("deletionTimestamp".into(), json!(meta::format_time(t)));
    }
    m.insert("deletionGracePeriodSeconds".into(), json!(period));
    if generation > 0 {
        m.insert("generation".into(), json!(generation + 1));
    }
    Graceful::Yes
}

/// `markAsDeleting`: finalizers hold an object that is otherwise deleted at once.
fn mark_as_deleting(obj: &mut Value) {
    let generation = meta::generation(obj);
    let had = meta::deletion_timestamp(obj).is_some();
    let m = meta::metadata_mut(obj);
    if !had {
        if generation > 0 {
            m.insert("generation".into(), json!(generation + 1));
        }
        m.insert("deletionTimestamp".into(), json!(meta::now()));
    }
    m.insert("deletionGracePeriodSeconds".into(), json!(0));
}

const MAX_ATTEMPTS: usize = 64;

impl Registry {
    pub(crate) fn delete(
        &self,
        rd: &Arc<ResourceDef>,
        ns: &str,
        name: &str,
        mut opts: DeleteOptions,
        ctx: &mut WriteCtx,
    ) -> Result<DeleteOutcome, ApiError> {
        let gr = rd.group_resource();
        let key = Self::key(rd, ns, name);
        opts.dry_run |= ctx.dry_run;
        if rd.special == Special::Namespace && ["default", "kube-system", "kube-public"].contains(&name) {
            return Err(ApiError::forbidden(&gr, name, "this namespace may not be deleted"));
        }
        for _ in 0..MAX_ATTEMPTS {
            let current = self.store.get(&rd.storage, &key).ok_or_else(|| ApiError::not_found(&gr, name))?;
            opts.check_preconditions(&gr, name, &current, None)?;
            let current_rv: u64 = meta::resource_version(&current).parse().unwrap_or(0);
            if rd.special == Special::Namespace {
                if let Some(gate) = &ctx.admission {
                    gate.check(Some(&current), None)?;
                }
                match self.delete_namespace(rd, &key, &current, current_rv, &opts)? {
                    Some(outcome) => return Ok(outcome),
                    None => continue,
                }
            }
            let mut obj = (*current).clone();
            let graceful = before_delete(rd, &mut obj, &mut opts);
            if matches!(graceful, Graceful::Pending) {
                return Ok(DeleteOutcome { object: self.view(rd, &current), deleted: false });
            }
            // Validating admission sees the stored object, as `deleteValidation` does.
            if let Some(gate) = &ctx.admission {
                gate.check(Some(&current), None)?;
            }
            let had_finalizers = !meta::finalizers(&obj).is_empty();
            let gc = gc_finalizers(&obj, &opts);
            let is_graceful = matches!(graceful, Graceful::Yes);
            if is_graceful || had_finalizers || gc.is_some() {
                if let Some(f) = &gc {
                    meta::set_finalizers(&mut obj, f);
                }
                let pending_finalizers = !meta::finalizers(&obj).is_empty();
                if !is_graceful && pending_finalizers {
                    mark_as_deleting(&mut obj);
                }
                if is_graceful || pending_finalizers {
                    if opts.dry_run {
                        return Ok(DeleteOutcome { object: self.view(rd, &Arc::new(obj)), deleted: false });
                    }
                    match self.store.update(&rd.storage, &key, obj, current_rv) {
                        Ok(stored) => {
                            self.after_write(rd, Some(&current), Some(&stored));
                            return Ok(DeleteOutcome { object: self.view(rd, &stored), deleted: false });
                        }
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(StoreError::NotFound) => return Err(ApiError::not_found(&gr, name)),
                        Err(e) => return Err(ApiError::internal(format!("{e:?}"))),
                    }
                }
            }
            if opts.dry_run {
                return Ok(DeleteOutcome { object: self.view(rd, &current), deleted: true });
            }
            match self.store.delete(&rd.storage, &key, Some(current_rv)) {
                Ok(last) => {
                    self.after_write(rd, Some(&current), None);
                    return Ok(DeleteOutcome { object: self.view(rd, &last), deleted: true });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound) => return Err(ApiError::not_found(&gr, name)),
                Err(e) => return Err(ApiError::internal(format!("{e:?}"))),
            }
        }
        Err(ApiError::modified(&gr, name))
    }

    /// Namespaces: the first delete marks them `Terminating`; the namespace controller empties
    /// them and removes the `kubernetes` finalizer, after which they are removed.
    fn delete_namespace(
        &self,
        rd: &Arc<ResourceDef>,
        key: &str,
        current: &Arc<Value>,
        current_rv: u64,
        opts: &DeleteOptions,
    ) -> Result<Option<DeleteOutcome>, ApiError> {
        let spec_finalizers = current
            .get("spec")
            .and_then(|s| s.get("finalizers"))
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if meta::deletion_timestamp(current).is_none() {
            let mut obj = (**current).clone();
            meta::metadata_mut(&mut obj).insert("deletionTimestamp".into(), json!(meta::now()));
            if let Value::Object(m) = &mut obj {
                let status = m.entry("status").or_insert_with(|| json!({}));
                if let Value::Object(s) = status {
                    s.insert("phase".into(), json!("Terminating"));
                }
            }
            if let Some(f) = gc_finalizers(&obj, opts) {
                meta::set_finalizers(&mut obj, &f);
            }
            if opts.dry_run {
                return Ok(Some(DeleteOutcome { object: Arc::new(obj), deleted: false }));
            }
            return match self.store.update(&rd.storage, key, obj, current_rv) {
                Ok(stored) => {
                    self.after_write(rd, Some(current), Some(&stored));
                    Ok(Some(DeleteOutcome { object: stored, deleted: false }))
                }
                Err(StoreError::Conflict { .. }) => Ok(None),
                Err(e) => Err(ApiError::internal(format!("{e:?}"))),
            };
        }
        if spec_finalizers || !meta::finalizers(current).is_empty() {
            return Ok(Some(DeleteOutcome { object: current.clone(), deleted: false }));
        }
        if opts.dry_run {
            return Ok(Some(DeleteOutcome { object: current.clone(), deleted: true }));
        }
        match self.store.delete(&rd.storage, key, Some(current_rv)) {
            Ok(last) => {
                self.after_write(rd, Some(current), None);
                Ok(Some(DeleteOutcome { object: last, deleted: true }))
            }
            Err(StoreError::Conflict { .. }) => Ok(None),
            Err(StoreError::NotFound) => {
                Err(ApiError::not_found(&GroupResource::new("", "namespaces"), meta::name(current)))
            }
            Err(e) => Err(ApiError::internal(format!("{e:?}"))),
        }
    }

    /// `deletecollection`: deletes every matching object with the same options.
    pub(crate) fn delete_collection(
        &self,
        rd: &Arc<ResourceDef>,
        ns: Option<&str>,
        list: &ListOptions,
        opts: &DeleteOptions,
        ctx: &mut WriteCtx,
    ) -> Result<(Vec<Arc<Value>>, u64), ApiError> {
        let mut list = list.clone();
        list.limit = None;
        list.continue_token = None;
        let found = self.list(rd, ns, &list)?;
        let mut out = Vec::new();
        for item in found.items {
            let name = meta::name(&item).to_string();
            let item_ns = meta::namespace(&item).to_string();
            match self.delete(rd, &item_ns, &name, opts.clone(), ctx) {
                Ok(o) => out.push(o.object),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok((out, self.store.current_rv()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_finalizers_follow_propagation() {
        let obj = json!({"metadata": {"finalizers": ["x"]}});
        let fg = DeleteOptions { propagation: Some(Propagation::Foreground), ..Default::default() };
        assert_eq!(gc_finalizers(&obj, &fg), Some(vec!["x".to_string(), "foregroundDeletion".to_string()]));
        let bg = DeleteOptions { propagation: Some(Propagation::Background), ..Default::default() };
        assert_eq!(gc_finalizers(&obj, &bg), None);
        let orphan = DeleteOptions { orphan_dependents: Some(true), ..Default::default() };
        assert_eq!(gc_finalizers(&obj, &orphan), Some(vec!["x".to_string(), "orphan".to_string()]));
        let keep = json!({"metadata": {"finalizers": ["foregroundDeletion"]}});
        assert_eq!(gc_finalizers(&keep, &DeleteOptions::default()), None);
    }
}
