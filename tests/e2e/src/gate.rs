//! The strict gate invariant, checked from watch streams in the API's own order (resourceVersion):
//!
//! **each** deletion of a Running pod and **each** image change of a pod whose GameDeployment configures a hook for
//! it consumes one distinct `Successful` HookRun that was made
//! - by that GameDeployment (controller ownerReference UID),
//! - for that pod (label `gamedeployment.tkex.tencent.com/pod-uid`),
//! - for that change (annotation `…/change`: `delete`, or `inplace/<the revision the pod moves to>`),
//! - for that attempt: created after the pod last entered its Preparing state, with `…/prepared-at` equal to the
//!   pod's lifecycle timestamp of that visit,
//! - and whose spec is what the operator created: unchanged between the run's first appearance and its success
//!   (terminate aside), and hashing to its `…/spec-hash`.
//!
//! Shadow runs (`shadowHook`, type label `shadow-…`) are never such a run: the checker leaves them out, so a change
//! a shadow run alone let through is a violation; it also checks that no shadow run carries a gate's stamps.
//!
//! kube-sim's resourceVersions are global and increase with every commit (like etcd's), so sorting every event by
//! resourceVersion replays the cluster's history in commit order, whatever order the watches delivered it in.
//! Watches start before the story and must see every event (the checker reports a gap in a watch as a
//! violation rather than guessing).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::api::{GameDeployment, HookPhase, HookRun};
use common::keys;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;

use crate::Cluster;

/// What the checker found.
#[derive(Debug, Default, Clone)]
pub struct GateReport {
    pub violations: Vec<String>,
    /// Gated pod deletions checked (each consumed a run).
    pub gated_deletions: usize,
    /// Gated image changes checked (each consumed a run).
    pub gated_updates: usize,
    /// Deletions and image changes that needed no run (no hook configured, pod not Running).
    pub ungated_changes: usize,
    /// Runs that opened a gate because a person terminated them (`spec.terminate: true`).
    pub terminated_runs_used: usize,
    /// Pods that went from a Preparing state back to `Normal` without the change happening (`pod: from`).
    pub released: Vec<String>,
    /// Shadow runs seen (names): never counted as a gate's run.
    pub shadow_runs: BTreeSet<String>,
}

impl GateReport {
    /// Panics with every violation.
    pub fn assert_clean(&self) {
        assert!(self.violations.is_empty(), "gate invariant violated:\n  {}", self.violations.join("\n  "));
    }
}

#[derive(Debug, Clone)]
enum Seen {
    Pod { pod: Box<Pod>, deleted: bool },
    Run(Box<HookRun>),
    Gd(Box<GameDeployment>),
}

/// Watches pods, HookRuns and GameDeployments of a namespace from now on.
pub struct GateChecker {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    events: Arc<Mutex<Vec<(u64, Seen)>>>,
    /// Watch restarts (a relist could hide events between two versions).
    gaps: Arc<Mutex<Vec<String>>>,
    client: kube::Client,
    namespace: String,
}

fn rv(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Starts a watch recording every version; `listed` fires once its initial list is complete (from then on every
/// change is delivered: the watch continues from the list's resourceVersion).
fn spawn_watch<K, F>(
    api: Api<K>,
    what: &'static str,
    gaps: Arc<Mutex<Vec<String>>>,
    listed: tokio::sync::oneshot::Sender<()>,
    mut record: F,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: FnMut(K, bool) + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        let mut initialised = false;
        let mut listed = Some(listed);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => {
                    if initialised {
                        gaps.lock().unwrap_or_else(|e| e.into_inner()).push(format!("the {what} watch relisted"));
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    initialised = true;
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                }
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => record(o, false),
                Ok(watcher::Event::Delete(o)) => record(o, true),
                Err(_) => {}
            }
        }
    })
}

impl GateChecker {
    /// Starts watching `namespace`; returns once every watch has listed, so everything the story does after this
    /// returns is delivered (a fixed pause could end before a watch on a loaded machine is established, and a
    /// change made before its list would be judged without what preceded it). Call before the story begins.
    pub async fn start(cluster: &Cluster, namespace: &str) -> Self {
        let events: Arc<Mutex<Vec<(u64, Seen)>>> = Arc::default();
        let gaps: Arc<Mutex<Vec<String>>> = Arc::default();
        let client = cluster.client();
        let push = |events: &Arc<Mutex<Vec<(u64, Seen)>>>| {
            let events = events.clone();
            move |rv: u64, seen: Seen| events.lock().unwrap_or_else(|e| e.into_inner()).push((rv, seen))
        };
        let (pods_listed, runs_listed, gds_listed) =
            (tokio::sync::oneshot::channel(), tokio::sync::oneshot::channel(), tokio::sync::oneshot::channel());
        let record = push(&events);
        let pods = spawn_watch(
            Api::<Pod>::namespaced(client.clone(), namespace),
            "pod",
            gaps.clone(),
            pods_listed.0,
            move |p: Pod, deleted| record(rv(&p.metadata), Seen::Pod { pod: Box::new(p), deleted }),
        );
        let record = push(&events);
        let runs = spawn_watch(
            Api::<HookRun>::namespaced(client.clone(), namespace),
            "HookRun",
            gaps.clone(),
            runs_listed.0,
            move |r: HookRun, deleted| {
                if !deleted {
                    record(rv(&r.metadata), Seen::Run(Box::new(r)))
                }
            },
        );
        let record = push(&events);
        let gds = spawn_watch(
            Api::<GameDeployment>::namespaced(client.clone(), namespace),
            "GameDeployment",
            gaps.clone(),
            gds_listed.0,
            move |g: GameDeployment, deleted| {
                if !deleted {
                    record(rv(&g.metadata), Seen::Gd(Box::new(g)))
                }
            },
        );
        for (what, listed) in [("pod", pods_listed.1), ("HookRun", runs_listed.1), ("GameDeployment", gds_listed.1)] {
            if !matches!(tokio::time::timeout(crate::DEADLINE, listed).await, Ok(Ok(()))) {
                panic!("the gate checker's {what} watch in {namespace} did not list within {:?}", crate::DEADLINE);
            }
        }
        Self { tasks: vec![pods, runs, gds], events, gaps, client, namespace: namespace.to_string() }
    }

    /// Stops watching once every watch has delivered the versions a list made now shows (on a loaded machine a
    /// fixed pause can end before the last events arrive), then replays everything in commit order.
    pub async fn stop(self) -> GateReport {
        self.caught_up().await;
        // Deletions are not in a list: a moment more for one still on its way.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        for task in &self.tasks {
            task.abort();
        }
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // Within one version (a delete event repeats the last version), the pod state comes last.
        events.sort_by_key(|(rv, seen)| (*rv, matches!(seen, Seen::Pod { .. })));
        let mut report = replay(events);
        report.violations.extend(self.gaps.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned());
        report
    }

    /// Waits (up to [`crate::DEADLINE`]) until every object a list shows now was recorded at least at its listed
    /// resourceVersion.
    async fn caught_up(&self) {
        let listed = async {
            let pods = Api::<Pod>::namespaced(self.client.clone(), &self.namespace).list(&Default::default()).await;
            let runs = Api::<HookRun>::namespaced(self.client.clone(), &self.namespace).list(&Default::default()).await;
            let gds =
                Api::<GameDeployment>::namespaced(self.client.clone(), &self.namespace).list(&Default::default()).await;
            let mut wanted: BTreeMap<String, u64> = BTreeMap::new();
            for meta in pods.ok()?.items.iter().map(|o| &o.metadata) {
                wanted.insert(meta.uid.clone()?, rv(meta));
            }
            for meta in runs.ok()?.items.iter().map(|o| &o.metadata) {
                wanted.insert(meta.uid.clone()?, rv(meta));
            }
            for meta in gds.ok()?.items.iter().map(|o| &o.metadata) {
                wanted.insert(meta.uid.clone()?, rv(meta));
            }
            Some(wanted)
        };
        let Some(wanted) = listed.await else { return };
        let deadline = std::time::Instant::now() + crate::DEADLINE;
        loop {
            let missing: Vec<String> = {
                let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
                let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
                for (rv, what) in events.iter() {
                    let uid = match what {
                        Seen::Pod { pod, .. } => pod.metadata.uid.as_deref(),
                        Seen::Run(run) => run.metadata.uid.as_deref(),
                        Seen::Gd(gd) => gd.metadata.uid.as_deref(),
                    };
                    if let Some(uid) = uid {
                        let at = seen.entry(uid).or_default();
                        *at = (*at).max(*rv);
                    }
                }
                wanted
                    .iter()
                    .filter(|(uid, rv)| seen.get(uid.as_str()).is_none_or(|at| at < *rv))
                    .map(|(uid, rv)| format!("{uid}@{rv}"))
                    .collect()
            };
            if missing.is_empty() {
                return;
            }
            if std::time::Instant::now() > deadline {
                panic!("the gate checker's watches did not deliver {} listed versions: {missing:?}", missing.len());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What the replay knows about one pod.
#[derive(Debug, Default)]
struct PodState {
    images: Vec<Option<String>>,
    revision: Option<String>,
    lifecycle: Option<String>,
    /// Resource version at which the pod last entered a Preparing state, and its lifecycle timestamp then.
    prepared: Option<(u64, Option<String>)>,
    running: bool,
    owner_uid: Option<String>,
    deleting: bool,
}

/// What the replay knows about one run (by UID).
#[derive(Debug)]
struct RunState {
    name: String,
    first_rv: u64,
    spec_at_creation: serde_json::Value,
    successful: bool,
    terminated: bool,
    consumed: bool,
    run: Box<HookRun>,
}

fn spec_without_terminate(run: &HookRun) -> serde_json::Value {
    let mut value = serde_json::to_value(&run.spec).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.remove("terminate");
    }
    value
}

fn label<'a>(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn controller_uid(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true)).map(|o| o.uid.clone())
}

/// Which gated changes a GameDeployment's spec asks hooks for.
#[derive(Debug, Default, Clone, Copy)]
struct Hooks {
    pre_delete: bool,
    pre_inplace: bool,
}

fn hooks_of(gd: &GameDeployment) -> Hooks {
    Hooks {
        pre_delete: gd.spec.pre_delete_update_strategy.as_ref().is_some_and(|s| s.hook.is_some()),
        pre_inplace: gd.spec.pre_inplace_update_strategy.as_ref().is_some_and(|s| s.hook.is_some()),
    }
}

fn replay(events: Vec<(u64, Seen)>) -> GateReport {
    let mut report = GateReport::default();
    let mut gds: BTreeMap<String, (Hooks, bool)> = BTreeMap::new();
    let mut pods: BTreeMap<String, PodState> = BTreeMap::new();
    let mut runs: BTreeMap<String, RunState> = BTreeMap::new();
    for (version, seen) in events {
        match seen {
            Seen::Gd(gd) => {
                let uid = gd.metadata.uid.clone().unwrap_or_default();
                gds.insert(uid, (hooks_of(&gd), gd.metadata.deletion_timestamp.is_some()));
            }
            Seen::Run(run) => {
                if label(&run.metadata, keys::HOOKRUN_TYPE).is_some_and(|t| t.starts_with("shadow-")) {
                    let name = run.metadata.name.clone().unwrap_or_default();
                    let stamps = [keys::HOOKRUN_CHANGE, keys::HOOKRUN_PREPARED_AT, keys::HOOKRUN_SIGNATURE];
                    let annotations = run.metadata.annotations.clone().unwrap_or_default();
                    if stamps.iter().any(|k| annotations.contains_key(*k)) {
                        report.violations.push(format!("shadow HookRun {name} carries a gate stamp: {annotations:?}"));
                    }
                    report.shadow_runs.insert(name);
                    continue;
                }
                let uid = run.metadata.uid.clone().unwrap_or_default();
                let entry = runs.entry(uid).or_insert_with(|| RunState {
                    name: run.metadata.name.clone().unwrap_or_default(),
                    first_rv: version,
                    spec_at_creation: spec_without_terminate(&run),
                    successful: false,
                    terminated: false,
                    consumed: false,
                    run: run.clone(),
                });
                if spec_without_terminate(&run) != entry.spec_at_creation {
                    report
                        .violations
                        .push(format!("HookRun {}: spec edited after creation (at version {version})", entry.name));
                    entry.spec_at_creation = serde_json::Value::Null;
                }
                if run.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Successful) && !entry.successful {
                    entry.successful = true;
                    entry.terminated = run.spec.terminate;
                }
                entry.run = run;
            }
            Seen::Pod { pod, deleted } => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let name = pod.metadata.name.clone().unwrap_or_default();
                let images: Vec<Option<String>> =
                    pod.spec.iter().flat_map(|s| s.containers.iter()).map(|c| c.image.clone()).collect();
                let revision = label(&pod.metadata, keys::CONTROLLER_REVISION_HASH).map(String::from);
                let lifecycle = label(&pod.metadata, keys::LIFECYCLE_STATE).map(String::from);
                let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                let first = !pods.contains_key(&uid);
                let state = pods.entry(uid.clone()).or_default();
                let owner = controller_uid(&pod.metadata);
                let hooks = owner.as_ref().and_then(|o| gds.get(o)).copied();
                if first {
                    state.images = images.clone();
                }
                // The controller can change (an orphan is adopted).
                if owner.is_some() {
                    state.owner_uid = owner.clone();
                }
                let preparing = |l: &Option<String>| l.as_deref().is_some_and(|l| l.starts_with("Preparing"));
                if preparing(&lifecycle) && (!preparing(&state.lifecycle) || state.lifecycle != lifecycle) {
                    state.prepared =
                        Some((version, annotation(&pod.metadata, keys::LIFECYCLE_TIMESTAMP).map(String::from)));
                }
                // An image change.
                let changed = !first && images != state.images;
                if changed {
                    let gated = hooks.is_some_and(|(h, gd_deleting)| !gd_deleting && (h.pre_inplace || h.pre_delete));
                    if gated && state.running {
                        report.gated_updates += 1;
                        let change = format!("inplace/{}", revision.clone().unwrap_or_default());
                        consume(&mut report, &mut runs, state, &uid, &name, &[change.as_str()], version);
                    } else {
                        report.ungated_changes += 1;
                    }
                    state.images = images;
                }
                // A deletion (the first time the pod shows a deletionTimestamp, or vanishes without one).
                let deleting = pod.metadata.deletion_timestamp.is_some() || deleted;
                if deleting && !state.deleting {
                    state.deleting = true;
                    let (pre_delete, pre_inplace, gd_deleting) =
                        hooks.map_or((false, false, true), |(h, d)| (h.pre_delete, h.pre_inplace, d));
                    // Without a pre-delete hook, a recreate during an in-place update is gated by the in-place hook.
                    let recreate = pre_inplace && state.lifecycle.as_deref() == Some("PreparingUpdate");
                    if state.running && !gd_deleting && (pre_delete || recreate) {
                        report.gated_deletions += 1;
                        let accepted: &[&str] = if pre_delete { &["delete"] } else { &["delete", "inplace/"] };
                        consume(&mut report, &mut runs, state, &uid, &name, accepted, version);
                    } else {
                        report.ungated_changes += 1;
                    }
                }
                // Back to Normal without the change (an in-place update may go straight to Normal with its image).
                if preparing(&state.lifecycle) && lifecycle.as_deref() == Some("Normal") && !state.deleting && !changed
                {
                    report.released.push(format!("{name}: {}", state.lifecycle.clone().unwrap_or_default()));
                }
                state.revision = revision;
                state.lifecycle = lifecycle;
                state.running = running;
            }
        }
    }
    report
}

/// Finds and consumes the run that opens this pod change, or records why none does.
fn consume(
    report: &mut GateReport,
    runs: &mut BTreeMap<String, RunState>,
    pod: &PodState,
    pod_uid: &str,
    pod_name: &str,
    changes: &[&str],
    version: u64,
) {
    let matches_change = |change: Option<&str>| {
        change.is_some_and(|c| {
            changes.iter().any(|want| if want.ends_with('/') { c.starts_with(want) } else { c == *want })
        })
    };
    let mut reasons: Vec<String> = Vec::new();
    let mut candidates: BTreeSet<String> = BTreeSet::new();
    for (uid, run) in runs.iter() {
        let meta = &run.run.metadata;
        if label(meta, keys::HOOKRUN_POD_UID) != Some(pod_uid) {
            continue;
        }
        let why_not = if !run.successful {
            Some("not Successful".to_string())
        } else if run.consumed {
            Some("already consumed by an earlier change".into())
        } else if controller_uid(meta) != pod.owner_uid {
            Some("not made by the pod's GameDeployment (controller UID)".into())
        } else if !matches_change(annotation(meta, keys::HOOKRUN_CHANGE)) {
            Some(format!("made for change {:?}, not {changes:?}", annotation(meta, keys::HOOKRUN_CHANGE)))
        } else if let Some((prepared_rv, stamp)) = &pod.prepared {
            if run.first_rv <= *prepared_rv {
                Some(format!("created at version {} before the pod entered Preparing at {prepared_rv}", run.first_rv))
            } else if annotation(meta, keys::HOOKRUN_PREPARED_AT) != stamp.as_deref() {
                Some(format!(
                    "made for the attempt prepared at {:?}, the pod's is {stamp:?}",
                    annotation(meta, keys::HOOKRUN_PREPARED_AT)
                ))
            } else if run.spec_at_creation.is_null() {
                Some("its spec was edited".into())
            } else if annotation(meta, keys::HOOKRUN_SPEC_HASH)
                != Some(common::hookrun::spec_hash(&run.run.spec).as_str())
            {
                Some("its spec does not hash to the recorded spec-hash".into())
            } else {
                None
            }
        } else {
            Some("the pod never entered a Preparing state".into())
        };
        match why_not {
            None => {
                candidates.insert(uid.clone());
            }
            Some(why) => reasons.push(format!("{}: {why}", run.name)),
        }
    }
    match candidates.iter().next() {
        Some(uid) => {
            if let Some(run) = runs.get_mut(uid) {
                run.consumed = true;
                if run.terminated {
                    report.terminated_runs_used += 1;
                }
            }
        }
        None => report.violations.push(format!(
            "pod {pod_name} ({changes:?} at version {version}) without a fresh Successful HookRun; runs for it: [{}]",
            reasons.join("; ")
        )),
    }
}
