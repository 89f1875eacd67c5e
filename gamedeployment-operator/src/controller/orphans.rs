//! Brings orphans into the operator's view. The pod watch selects only pods that carry the instance-id label
//! ([`WATCH_SELECTOR`]): every pod this operator (or BCS) creates has it, so the operator's memory follows its own
//! pods and not the cluster's. A pod made elsewhere that matches a GameDeployment's selector (an orphan the
//! GameDeployment should adopt, as a ReplicaSet would) has no such label, and so is found here instead: per
//! GameDeployment, a `LIST` of its namespace's pods with `<its selector>,!<instance-id label>`, when the
//! GameDeployment is first seen or its selector changes, and again every `--adoption-scan-interval`. Each pod found
//! is given the instance-id label (its name's last segment, as BCS derives an id), under a `resourceVersion`
//! precondition; the watch then brings it in and the planner adopts it (`ownership::claim`) through the usual
//! checks and Events.
//!
//! The same scan repairs a pod of the GameDeployment whose instance-id label someone removed: it left the watch
//! (the operator saw it as gone), matches the selector without the label, and is labelled back.
//!
//! Only pods that may be adopted are touched: not terminating, no other controller, a GameDeployment that is not
//! being deleted and whose selector is valid. Scans run one at a time, so they add at most one `LIST` in flight.
//!
//! ControllerRevisions are watched the same way, through the GameDeployment name label
//! ([`REVISION_WATCH_SELECTOR`]) the operator writes on every revision it creates; before the controller plans for
//! the first time, [`label_revisions`] gives that label to the revisions GameDeployments control that lack it
//! (written by BCS or by an earlier version), so no revision of a GameDeployment is out of view.

use std::collections::HashMap;
use std::time::Duration;

use common::api::GameDeployment;
use common::cached_pod::Pod;
use common::keys;
use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{ListParams, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::ownership;
/// Named here too, where the watch is explained (the controller's pod watch uses it).
pub(crate) use crate::ownership::WATCH_SELECTOR;

/// The label selector of the operator's ControllerRevision watch: revisions labelled with a GameDeployment's name
/// (StatefulSets' and DaemonSets' revisions, each a whole pod template, are not cached).
pub const REVISION_WATCH_SELECTOR: &str = keys::HOOKRUN_WORKLOAD_NAME;

/// Pages of this many pods per `LIST`.
const PAGE: u32 = 500;

/// The `LIST` selector of a GameDeployment's orphans, or None when it must not adopt (invalid selector, being
/// deleted).
pub fn orphan_selector(gd: &GameDeployment) -> Option<String> {
    if gd.metadata.deletion_timestamp.is_some() || ownership::validate_selector(gd).is_err() {
        return None;
    }
    Some(format!("{},!{}", ownership::selector_string(&gd.spec.selector), keys::INSTANCE_ID))
}

/// The instance id an orphan is labelled with: its name's last `-` segment (how BCS and [`crate::gate::instance_id`]
/// derive it), when that is a valid label value; None otherwise (the pod is left alone and logged).
pub fn instance_id_for(name: &str) -> Option<&str> {
    let id = name.rsplit('-').next()?;
    let valid = !id.is_empty()
        && id.len() <= 63
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id.ends_with(|c: char| c.is_ascii_alphanumeric());
    valid.then_some(id)
}

/// Whether an orphan found by the scan of `gd` may be labelled: alive, and controlled by nobody or by `gd` (a pod
/// whose instance-id label was removed).
fn may_label(pod: &PartialObjectMeta<Pod>, gd: &GameDeployment) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    match ownership::controller_of(pod.metadata.owner_references.as_ref()) {
        None => true,
        Some(owner) => ownership::is_owned_by(owner, gd),
    }
}

/// Runs until every sender of `changed` is gone (the controller stopped). `changed` names GameDeployments that were
/// created or changed; a zero `interval` scans only on changes.
pub async fn run(
    client: Client,
    gds: Store<GameDeployment>,
    interval: Duration,
    changed: mpsc::UnboundedReceiver<ObjectRef<GameDeployment>>,
) {
    enum Next {
        Changed(ObjectRef<GameDeployment>),
        Tick,
    }
    let changes = stream::unfold(changed, |mut rx| async move { rx.recv().await.map(|k| (Next::Changed(k), rx)) });
    let ticks = stream::unfold((), move |()| async move {
        if interval.is_zero() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(interval).await;
        Some((Next::Tick, ()))
    });
    // The changes end the run; the ticks do not keep it alive.
    let mut next = stream::select(changes.map(Some).chain(stream::once(async { None })), ticks.map(Some)).boxed();
    // The selector last scanned, per GameDeployment: a change of anything else needs no scan.
    let mut scanned: HashMap<ObjectRef<GameDeployment>, Option<String>> = HashMap::new();
    while let Some(Some(next)) = next.next().await {
        match next {
            Next::Changed(key) => {
                let Some(gd) = gds.get(&key) else {
                    scanned.remove(&key);
                    continue;
                };
                let selector = orphan_selector(&gd);
                if scanned.get(&key) != Some(&selector) {
                    scanned.insert(key, selector.clone());
                    if let Some(selector) = selector {
                        scan(&client, &gd, &selector).await;
                    }
                }
            }
            Next::Tick => {
                scanned.retain(|key, _| gds.get(key).is_some());
                for gd in gds.state() {
                    if let Some(selector) = orphan_selector(&gd) {
                        scan(&client, &gd, &selector).await;
                    }
                }
            }
        }
    }
}

/// Labels the orphans of `gd` (pages of [`PAGE`]); failures are logged and left to the next scan.
async fn scan(client: &Client, gd: &GameDeployment, selector: &str) {
    let Some(namespace) = gd.namespace() else { return };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut params = ListParams::default().labels(selector).limit(PAGE);
    loop {
        let page = match pods.list_metadata(&params).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(gamedeployment = %gd.name_any(), %namespace, error = %e, "listing orphans to adopt failed; the next scan retries");
                return;
            }
        };
        for pod in page.items.iter().filter(|p| may_label(p, gd)) {
            label(client, &namespace, pod, gd).await;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return,
        }
    }
}

async fn label(client: &Client, namespace: &str, pod: &PartialObjectMeta<Pod>, gd: &GameDeployment) {
    let name = pod.name_any();
    let Some(id) = instance_id_for(&name) else {
        tracing::warn!(pod = %name, %namespace, gamedeployment = %gd.name_any(), "an orphan whose name gives no valid instance id is not adopted");
        return;
    };
    let patch =
        json!({"metadata": {"labels": {keys::INSTANCE_ID: id}, "resourceVersion": pod.metadata.resource_version}});
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {
            tracing::info!(pod = %name, %namespace, gamedeployment = %gd.name_any(), instance_id = id, "labelled an orphan for adoption")
        }
        // Gone or changed since the LIST: the next scan looks again.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => {
            tracing::warn!(pod = %name, %namespace, error = %e, "labelling an orphan for adoption failed; the next scan retries")
        }
    }
}

/// Gives the GameDeployment name label to every ControllerRevision a GameDeployment controls that lacks it (in
/// `namespace`, or everywhere), and returns the revisions labelled: the caller waits for its watch to show them.
/// Pages of [`PAGE`]; a revision changed or gone since the `LIST` is skipped (the next call looks again).
pub async fn label_revisions(
    client: &Client,
    namespace: Option<&str>,
) -> Result<Vec<ObjectRef<ControllerRevision>>, kube::Error> {
    let all: Api<ControllerRevision> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut params = ListParams::default().labels(&format!("!{REVISION_WATCH_SELECTOR}")).limit(PAGE);
    let mut labelled = Vec::new();
    loop {
        let page = all.list_metadata(&params).await?;
        for revision in &page.items {
            let Some(owner) = ownership::controller_of(revision.metadata.owner_references.as_ref())
                .filter(|o| o.kind == ownership::OWNER_KIND && o.api_version.starts_with("tkex.tencent.com/"))
            else {
                continue;
            };
            let (name, Some(ns)) = (revision.name_any(), revision.namespace()) else { continue };
            let value = common::hookrun::workload_label_value(&owner.name);
            let patch = json!({"metadata": {"labels": {REVISION_WATCH_SELECTOR: value}, "resourceVersion": revision.metadata.resource_version}});
            let api: Api<ControllerRevision> = Api::namespaced(client.clone(), &ns);
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    tracing::info!(revision = %name, namespace = %ns, gamedeployment = %owner.name, "labelled a revision written without the GameDeployment name label");
                    labelled.push(ObjectRef::new(&name).within(&ns));
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(labelled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn an_orphan_is_labelled_with_its_names_last_segment() {
        assert_eq!(instance_id_for("web-7d9f-abcde"), Some("abcde"));
        assert_eq!(instance_id_for("bare"), Some("bare"));
        assert_eq!(instance_id_for("v1.2"), Some("v1.2"));
        // Not a label value: too long, or ends with '-'.
        assert_eq!(instance_id_for(&"x".repeat(64)), None);
        assert_eq!(instance_id_for("trailing-"), None);
    }

    #[test]
    fn the_scan_selects_the_gamedeployments_pods_without_an_instance_id() {
        let gd = fixtures::gd(2, "RollingUpdate");
        assert_eq!(orphan_selector(&gd).unwrap(), format!("app=game,!{}", keys::INSTANCE_ID));
        let mut deleting = gd.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(orphan_selector(&deleting), None, "a GameDeployment being deleted adopts nothing");
    }
}
