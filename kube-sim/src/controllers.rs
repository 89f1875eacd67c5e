//! The control loops a cluster runs next to its API server, as far as API semantics depend on
//! them: the garbage collector (owner references, `orphan` and `foregroundDeletion`
//! finalizers, `blockOwnerDeletion`), the namespace lifecycle controller (emptying terminating
//! namespaces, then finalizing them), the service-account controller (the `default` account),
//! the CRD finalizer (deleting instances before a CRD goes away), the disruption controller
//! (PodDisruptionBudget status, [`crate::disruption`]) and the volume provisioner and claim
//! protection ([`crate::volumes`]).
//!
//! Like the real controllers they only observe committed changes and act through the registry,
//! so their effects are eventually consistent and visible to watchers as separate events.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::meta;
use crate::registry::{DeleteOptions, Endpoint, Propagation, Registry, WriteCtx};
use crate::resources::{ResourceDef, Special};
use crate::store::{Event, EventKind};

type Key = (Arc<str>, String);

const FINALIZER_ORPHAN: &str = "orphan";
const FINALIZER_FOREGROUND: &str = "foregroundDeletion";
const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";
const NAMESPACES: &str = "namespaces";
const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";

struct Controllers {
    registry: Arc<Registry>,
    /// uid -> where the object lives.
    by_uid: HashMap<String, Key>,
    /// owner uid -> dependents.
    dependents: HashMap<String, HashSet<Key>>,
    queue: VecDeque<Key>,
    queued: HashSet<Key>,
    dirty_namespaces: HashSet<String>,
    dirty_crds: HashSet<String>,
    /// Namespaces whose PodDisruptionBudgets need their status recomputed.
    dirty_budgets: HashSet<String>,
    /// Namespaces where volume claims need provisioning or protection checks.
    dirty_claims: HashSet<String>,
    defs: HashMap<String, Arc<ResourceDef>>,
    defs_generation: u64,
}

fn owner_uids(obj: &Value) -> Vec<String> {
    meta::owner_references(obj)
        .iter()
        .filter_map(|o| o.get("uid").and_then(Value::as_str).map(str::to_string))
        .collect()
}

impl Controllers {
    fn def(&mut self, storage: &str) -> Option<Arc<ResourceDef>> {
        let generation = self.registry.catalog.generation();
        if generation != self.defs_generation || self.defs.is_empty() {
            self.defs = self.registry.catalog.storages().into_iter().map(|d| (d.storage.clone(), d)).collect();
            self.defs_generation = generation;
        }
        self.defs.get(storage).cloned()
    }

    fn enqueue(&mut self, k: Key) {
        if self.queued.insert(k.clone()) {
            self.queue.push_back(k);
        }
    }

    fn observe(&mut self, e: &Event) {
        let key: Key = (e.storage.clone(), e.key.clone());
        let uid = meta::uid(&e.object).to_string();
        let old_owners = e.prev.as_deref().map(owner_uids).unwrap_or_default();
        let new_owners = if e.kind == EventKind::Deleted { vec![] } else { owner_uids(&e.object) };
        for o in old_owners.iter().filter(|o| !new_owners.contains(o)) {
            if let Some(set) = self.dependents.get_mut(o) {
                set.remove(&key);
                if set.is_empty() {
                    self.dependents.remove(o);
                }
            }
        }
        for o in &new_owners {
            self.dependents.entry(o.clone()).or_default().insert(key.clone());
        }
        match e.kind {
            EventKind::Deleted => {
                self.by_uid.remove(&uid);
                // Dependents may now be dangling; an owner waiting on this one may be unblocked.
                for d in self.dependents.get(&uid).cloned().unwrap_or_default() {
                    self.enqueue(d);
                }
                for o in old_owners {
                    if let Some(k) = self.by_uid.get(&o).cloned() {
                        self.enqueue(k);
                    }
                }
            }
            _ => {
                if !uid.is_empty() {
                    self.by_uid.insert(uid.clone(), key.clone());
                }
                let deleting = meta::deletion_timestamp(&e.object).is_some();
                let fins = meta::finalizers(&e.object);
                if !new_owners.is_empty()
                    || (deleting && fins.iter().any(|f| f == FINALIZER_ORPHAN || f == FINALIZER_FOREGROUND))
                {
                    self.enqueue(key.clone());
                }
                if deleting {
                    for d in self.dependents.get(&uid).cloned().unwrap_or_default() {
                        self.enqueue(d);
                    }
                    for o in &new_owners {
                        if let Some(k) = self.by_uid.get(o).cloned() {
                            self.enqueue(k);
                        }
                    }
                }
            }
        }
        // Namespace lifecycle.
        if &*e.storage == NAMESPACES {
            let name = meta::name(&e.object).to_string();
            if e.kind != EventKind::Deleted && meta::deletion_timestamp(&e.object).is_some() {
                self.dirty_namespaces.insert(name);
            }
        } else if let Some((ns, _)) = e.key.split_once('/') {
            if e.kind == EventKind::Deleted
                && let Some(nsobj) = self.registry.store.get(NAMESPACES, ns)
                && meta::deletion_timestamp(&nsobj).is_some()
            {
                self.dirty_namespaces.insert(ns.to_string());
            }
            if &*e.storage == "serviceaccounts" && e.kind == EventKind::Deleted && meta::name(&e.object) == "default" {
                self.ensure_default_service_account(ns);
            }
        }
        // Disruption budgets: pods, budgets and scalable controllers feed their status.
        if let Some((ns, _)) = e.key.split_once('/') {
            let storage = &*e.storage;
            if storage == "pods"
                || storage.starts_with("poddisruptionbudgets")
                || self.def(storage).is_some_and(|d| d.scale.is_some())
            {
                self.dirty_budgets.insert(ns.to_string());
            }
            if storage == "pods" || storage == "persistentvolumeclaims" {
                self.dirty_claims.insert(ns.to_string());
            }
        }
        // CRD lifecycle.
        if &*e.storage == CRDS && e.kind != EventKind::Deleted && meta::deletion_timestamp(&e.object).is_some() {
            self.dirty_crds.insert(meta::name(&e.object).to_string());
        } else if e.kind == EventKind::Deleted
            && let Some(rd) = self.def(&e.storage)
            && let Some(c) = &rd.custom
        {
            self.dirty_crds.insert(c.crd_name.clone());
        }
    }

    fn ensure_default_service_account(&self, ns: &str) {
        let Some(nsobj) = self.registry.store.get(NAMESPACES, ns) else { return };
        if meta::deletion_timestamp(&nsobj).is_some() {
            return;
        }
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns, "uid": meta::new_uid(), "creationTimestamp": meta::now()}});
        let _ = self.registry.store.create("serviceaccounts", &format!("{ns}/default"), sa);
    }

    fn ctx() -> WriteCtx {
        WriteCtx::internal("generic-garbage-collector")
    }

    fn name_ns(rd: &ResourceDef, key: &str) -> (String, String) {
        if rd.namespaced {
            let (ns, name) = key.split_once('/').unwrap_or(("", key));
            (ns.to_string(), name.to_string())
        } else {
            (String::new(), key.to_string())
        }
    }

    fn delete(&mut self, key: &Key, uid: &str, propagation: Propagation) {
        let Some(rd) = self.def(&key.0) else { return };
        let (ns, name) = Self::name_ns(&rd, &key.1);
        let opts = DeleteOptions {
            propagation: Some(propagation),
            precondition_uid: Some(uid.to_string()),
            ..DeleteOptions::default()
        };
        if let Err(e) = self.registry.delete(&rd, &ns, &name, opts, &mut Self::ctx())
            && e.code != 404
            && e.code != 409
        {
            tracing::warn!(resource = %rd.plural, %name, error = %e, "garbage collector could not delete dependent");
        }
    }

    fn remove_finalizer(&mut self, key: &Key, finalizer: &str) {
        let Some(rd) = self.def(&key.0) else { return };
        let (ns, name) = Self::name_ns(&rd, &key.1);
        let f = finalizer.to_string();
        let res = self.registry.guaranteed_update(&rd, &ns, &name, Endpoint::Main, &mut Self::ctx(), |cur| {
            let mut v = (*self.registry.view(&rd, cur)).clone();
            let fins: Vec<String> = meta::finalizers(&v).into_iter().filter(|x| *x != f).collect();
            meta::set_finalizers(&mut v, &fins);
            Ok(v)
        });
        if let Err(e) = res
            && e.code != 404
        {
            tracing::warn!(resource = %rd.plural, %name, error = %e, "could not remove finalizer {finalizer}");
        }
    }

    fn remove_owner_refs(&mut self, key: &Key, uids: &HashSet<String>) {
        let Some(rd) = self.def(&key.0) else { return };
        let (ns, name) = Self::name_ns(&rd, &key.1);
        let res = self.registry.guaranteed_update(&rd, &ns, &name, Endpoint::Main, &mut Self::ctx(), |cur| {
            let mut v = (*self.registry.view(&rd, cur)).clone();
            let kept: Vec<Value> = meta::owner_references(&v)
                .iter()
                .filter(|o| !o.get("uid").and_then(Value::as_str).is_some_and(|u| uids.contains(u)))
                .cloned()
                .collect();
            let m = meta::metadata_mut(&mut v);
            if kept.is_empty() {
                m.remove("ownerReferences");
            } else {
                m.insert("ownerReferences".into(), Value::Array(kept));
            }
            Ok(v)
        });
        if let Err(e) = res
            && e.code != 404
        {
            tracing::warn!(resource = %rd.plural, %name, error = %e, "could not remove owner references");
        }
    }

    /// Looks up an owner the way the GC does: by UID, in the dependent's namespace or cluster-wide.
    fn owner(&self, uid: &str, dependent_ns: &str) -> Option<Arc<Value>> {
        let (storage, key) = self.by_uid.get(uid)?;
        let obj = self.registry.store.get(storage, key)?;
        if meta::uid(&obj) != uid {
            return None;
        }
        let ns = meta::namespace(&obj);
        if !ns.is_empty() && ns != dependent_ns {
            return None;
        }
        Some(obj)
    }

    fn process(&mut self, key: Key) {
        let Some(obj) = self.registry.store.get(&key.0, &key.1) else { return };
        let uid = meta::uid(&obj).to_string();
        let fins = meta::finalizers(&obj);
        let deleting = meta::deletion_timestamp(&obj).is_some();
        let dependents: Vec<Key> = self.dependents.get(&uid).map(|s| s.iter().cloned().collect()).unwrap_or_default();
        if deleting && fins.iter().any(|f| f == FINALIZER_ORPHAN) {
            let mut set = HashSet::new();
            set.insert(uid.clone());
            for d in &dependents {
                self.remove_owner_refs(d, &set);
            }
            self.remove_finalizer(&key, FINALIZER_ORPHAN);
            return;
        }
        if deleting && fins.iter().any(|f| f == FINALIZER_FOREGROUND) {
            let mut blocking = 0;
            for d in &dependents {
                let Some(dep) = self.registry.store.get(&d.0, &d.1) else { continue };
                let blocks = meta::owner_references(&dep).iter().any(|o| {
                    o.get("uid").and_then(Value::as_str) == Some(uid.as_str())
                        && o.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
                });
                if blocks {
                    blocking += 1;
                }
                if meta::deletion_timestamp(&dep).is_none() {
                    self.enqueue(d.clone());
                }
            }
            if blocking == 0 {
                self.remove_finalizer(&key, FINALIZER_FOREGROUND);
            }
        }
        let owners = meta::owner_references(&obj).to_vec();
        if owners.is_empty() {
            return;
        }
        if deleting && !fins.iter().any(|f| f == FINALIZER_FOREGROUND) {
            return;
        }
        let ns = meta::namespace(&obj).to_string();
        let (mut solid, mut dangling, mut waiting) = (0, HashSet::new(), HashSet::new());
        for o in &owners {
            let ouid = o.get("uid").and_then(Value::as_str).unwrap_or("").to_string();
            match self.owner(&ouid, &ns) {
                None => {
                    dangling.insert(ouid);
                }
                Some(owner) => {
                    let owner_deleting = meta::deletion_timestamp(&owner).is_some();
                    if owner_deleting && meta::finalizers(&owner).iter().any(|f| f == FINALIZER_FOREGROUND) {
                        waiting.insert(ouid);
                    } else {
                        solid += 1;
                    }
                }
            }
        }
        if solid > 0 {
            if !dangling.is_empty() || !waiting.is_empty() {
                let remove: HashSet<String> = dangling.union(&waiting).cloned().collect();
                self.remove_owner_refs(&key, &remove);
            }
            return;
        }
        if deleting {
            return;
        }
        let has_dependents = self.dependents.get(&uid).is_some_and(|s| !s.is_empty());
        let policy = if !waiting.is_empty() && has_dependents {
            Propagation::Foreground
        } else if fins.iter().any(|f| f == FINALIZER_ORPHAN) {
            Propagation::Orphan
        } else if fins.iter().any(|f| f == FINALIZER_FOREGROUND) {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        self.delete(&key, &uid, policy);
    }

    /// Empties a terminating namespace, then removes the `kubernetes` finalizer.
    fn reconcile_namespace(&mut self, name: &str) {
        let Some(nsobj) = self.registry.store.get(NAMESPACES, name) else { return };
        if meta::deletion_timestamp(&nsobj).is_none() {
            return;
        }
        let spec_fins: Vec<String> = nsobj
            .get("spec")
            .and_then(|s| s.get("finalizers"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        if !spec_fins.iter().any(|f| f == "kubernetes") {
            return;
        }
        let mut remaining: Vec<(String, usize)> = Vec::new();
        let mut finalizers_left: HashMap<String, usize> = HashMap::new();
        for rd in self.registry.catalog.storages() {
            if !rd.namespaced || rd.special == Special::Review {
                continue;
            }
            let prefix = format!("{name}/");
            let items: Vec<(String, Arc<Value>)> =
                self.registry.store.snapshot(&rd.storage).into_iter().filter(|(k, _)| k.starts_with(&prefix)).collect();
            if items.is_empty() {
                continue;
            }
            for (_, obj) in &items {
                for f in meta::finalizers(obj) {
                    *finalizers_left.entry(f).or_default() += 1;
                }
                if meta::deletion_timestamp(obj).is_some() {
                    continue;
                }
                let opts = DeleteOptions { propagation: Some(Propagation::Background), ..DeleteOptions::default() };
                let _ = self.registry.delete(
                    &rd,
                    name,
                    meta::name(obj),
                    opts,
                    &mut WriteCtx::internal("namespace-controller"),
                );
            }
            let left = self.registry.store.count(&rd.storage, Some(name));
            if left > 0 {
                remaining.push((
                    if rd.group.is_empty() { rd.plural.clone() } else { format!("{}.{}", rd.plural, rd.group) },
                    left,
                ));
            }
        }
        let now = meta::now();
        let mut conditions = vec![
            json!({"type": "NamespaceDeletionDiscoveryFailure", "status": "False", "lastTransitionTime": now, "reason": "ResourcesDiscovered", "message": "All resources successfully discovered"}),
            json!({"type": "NamespaceDeletionGroupVersionParsingFailure", "status": "False", "lastTransitionTime": now, "reason": "ParsedGroupVersions", "message": "All legacy kube types successfully parsed"}),
            json!({"type": "NamespaceDeletionContentFailure", "status": "False", "lastTransitionTime": now, "reason": "ContentDeleted", "message": "All content successfully deleted, may be waiting on finalization"}),
        ];
        if remaining.is_empty() {
            conditions.push(json!({"type": "NamespaceContentRemaining", "status": "False", "lastTransitionTime": now, "reason": "ContentRemoved", "message": "All content successfully removed"}));
            conditions.push(json!({"type": "NamespaceFinalizersRemaining", "status": "False", "lastTransitionTime": now, "reason": "ContentHasNoFinalizers", "message": "All content-preserving finalizers finished"}));
        } else {
            remaining.sort();
            let msg =
                remaining.iter().map(|(r, n)| format!("{r} has {n} resource instances")).collect::<Vec<_>>().join(", ");
            conditions.push(json!({"type": "NamespaceContentRemaining", "status": "True", "lastTransitionTime": now, "reason": "SomeResourcesRemain", "message": format!("Some resources are remaining: {msg}")}));
            let mut fl: Vec<(String, usize)> = finalizers_left.into_iter().collect();
            fl.sort();
            if fl.is_empty() {
                conditions.push(json!({"type": "NamespaceFinalizersRemaining", "status": "False", "lastTransitionTime": now, "reason": "ContentHasNoFinalizers", "message": "All content-preserving finalizers finished"}));
            } else {
                let msg =
                    fl.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect::<Vec<_>>().join(", ");
                conditions.push(json!({"type": "NamespaceFinalizersRemaining", "status": "True", "lastTransitionTime": now, "reason": "SomeFinalizersRemain", "message": format!("Some content in the namespace has finalizers remaining: {msg}")}));
            }
        }
        let _ = self.registry.internal_update(NAMESPACES, name, |cur| {
            let existing = cur.get("status").and_then(|s| s.get("conditions")).cloned().unwrap_or(json!([]));
            let same = existing.as_array().is_some_and(|e| {
                e.len() == conditions.len()
                    && e.iter().zip(conditions.iter()).all(|(a, b)| {
                        a.get("type") == b.get("type")
                            && a.get("status") == b.get("status")
                            && a.get("message") == b.get("message")
                    })
            });
            if same {
                return Ok(None);
            }
            let mut next = (*cur).clone();
            if let Some(Value::Object(st)) = next.get_mut("status") {
                st.insert("conditions".into(), Value::Array(conditions.clone()));
            }
            Ok(Some(next))
        });
        if remaining.is_empty() {
            let Some(rd) = self.registry.catalog.get("", "v1", "namespaces") else { return };
            let finalize = self.registry.guaranteed_update(
                &rd,
                "",
                name,
                Endpoint::Finalize,
                &mut WriteCtx::internal("namespace-controller"),
                |cur| {
                    let mut v = (**cur).clone();
                    if let Some(Value::Object(spec)) = v.get_mut("spec") {
                        let fins: Vec<Value> = spec
                            .get("finalizers")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().filter(|f| f.as_str() != Some("kubernetes")).cloned().collect())
                            .unwrap_or_default();
                        spec.insert("finalizers".into(), Value::Array(fins));
                    }
                    Ok(v)
                },
            );
            if let Err(e) = finalize
                && e.code != 404
            {
                tracing::warn!(namespace = %name, error = %e, "could not finalize namespace");
            }
        }
    }

    /// Deletes a terminating CRD's instances, then lets the CRD go.
    fn reconcile_crd(&mut self, name: &str) {
        let Some(crd) = self.registry.store.get(CRDS, name) else { return };
        if meta::deletion_timestamp(&crd).is_none() || !meta::finalizers(&crd).iter().any(|f| f == CRD_CLEANUP) {
            return;
        }
        self.registry.establish_crd(&crd);
        let versions = self.registry.catalog.crd_versions(name);
        let Some(rd) = versions
            .iter()
            .find(|v| v.custom.as_ref().is_some_and(|c| c.storage_version))
            .or(versions.first())
            .cloned()
        else {
            self.remove_crd_finalizer(name);
            return;
        };
        let items = self.registry.store.snapshot(&rd.storage);
        for (key, obj) in &items {
            if meta::deletion_timestamp(obj).is_some() {
                continue;
            }
            let (ns, n) = Self::name_ns(&rd, key);
            let opts = DeleteOptions { propagation: Some(Propagation::Background), ..DeleteOptions::default() };
            let _ = self.registry.delete(&rd, &ns, &n, opts, &mut WriteCtx::internal("apiextensions-apiserver"));
        }
        if self.registry.store.count(&rd.storage, None) == 0 {
            self.remove_crd_finalizer(name);
        }
    }

    fn remove_crd_finalizer(&mut self, name: &str) {
        let Some(rd) = self.registry.catalog.get("apiextensions.k8s.io", "v1", "customresourcedefinitions") else {
            return;
        };
        let _ = self.registry.guaranteed_update(
            &rd,
            "",
            name,
            Endpoint::Main,
            &mut WriteCtx::internal("apiextensions-apiserver"),
            |cur| {
                let mut v = (**cur).clone();
                let fins: Vec<String> = meta::finalizers(&v).into_iter().filter(|f| f != CRD_CLEANUP).collect();
                meta::set_finalizers(&mut v, &fins);
                Ok(v)
            },
        );
    }

    fn drain(&mut self) {
        let mut budget = 100_000;
        while let Some(k) = self.queue.pop_front() {
            self.queued.remove(&k);
            self.process(k);
            budget -= 1;
            if budget == 0 {
                break;
            }
        }
        for ns in std::mem::take(&mut self.dirty_namespaces) {
            self.reconcile_namespace(&ns);
        }
        for crd in std::mem::take(&mut self.dirty_crds) {
            self.reconcile_crd(&crd);
        }
        for ns in std::mem::take(&mut self.dirty_budgets) {
            crate::disruption::sync_namespace(&self.registry, &ns);
        }
        for ns in std::mem::take(&mut self.dirty_claims) {
            crate::volumes::sync_namespace(&self.registry, &ns);
        }
    }

    /// Re-checks everything that is being deleted (a safety net for missed transitions).
    fn resync(&mut self) {
        for (_, ns) in self.registry.store.snapshot(NAMESPACES) {
            if meta::deletion_timestamp(&ns).is_some() {
                self.dirty_namespaces.insert(meta::name(&ns).to_string());
            }
        }
        for (_, crd) in self.registry.store.snapshot(CRDS) {
            if meta::deletion_timestamp(&crd).is_some() {
                self.dirty_crds.insert(meta::name(&crd).to_string());
            }
        }
        // Evictions that never completed expire from `disruptedPods`.
        let budgets = self.registry.catalog.get("policy", "v1", "poddisruptionbudgets").map(|d| d.storage.clone());
        for (key, _) in budgets.map(|b| self.registry.store.snapshot(&b)).unwrap_or_default() {
            if let Some((ns, _)) = key.split_once('/') {
                self.dirty_budgets.insert(ns.to_string());
            }
        }
    }
}

/// Runs the controllers until `shutdown` flips. `rx` must have been subscribed before any
/// object was created so the ownership graph is complete.
pub(crate) async fn run(
    registry: Arc<Registry>,
    mut rx: mpsc::UnboundedReceiver<Arc<Event>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut c = Controllers {
        registry,
        by_uid: HashMap::new(),
        dependents: HashMap::new(),
        queue: VecDeque::new(),
        queued: HashSet::new(),
        dirty_namespaces: HashSet::new(),
        dirty_crds: HashSet::new(),
        dirty_budgets: HashSet::new(),
        dirty_claims: HashSet::new(),
        defs: HashMap::new(),
        defs_generation: 0,
    };
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                if *shutdown.borrow() { return; }
            }
            ev = rx.recv() => {
                let Some(ev) = ev else { return };
                c.observe(&ev);
                while let Ok(ev) = rx.try_recv() {
                    c.observe(&ev);
                }
                c.drain();
            }
            _ = tick.tick() => {
                c.resync();
                c.drain();
            }
        }
    }
}
