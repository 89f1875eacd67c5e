//! What `kubectl gd` observed about one GameDeployment, and the questions every view asks of it: which runs belong
//! to which pod, what phase a run shows, whether the GitOps-clean control surface is on. The [`crate::tree`], the
//! [`crate::rollout`] verdict and the [`crate::actions`] all read it; it reads nothing of theirs.

use common::api::{GameDeployment, HookPhase, HookRun};
use common::hookrun::HookKind;
use common::keys;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// Everything observed about one GameDeployment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The GameDeployment.
    pub gd: GameDeployment,
    /// The ControllerRevisions it controls.
    pub revisions: Vec<ControllerRevision>,
    /// The pods it controls.
    pub pods: Vec<Pod>,
    /// Its HookRuns: those it controls, and ownerless ones carrying its name label ([`Snapshot::owned`]).
    pub runs: Vec<HookRun>,
}

impl Snapshot {
    /// Keeps only what this GameDeployment controls (controller ownerReference to its UID); for HookRuns also
    /// those carrying its name label (a run whose owner is not set yet still belongs to the tree).
    pub fn owned(gd: GameDeployment, revisions: Vec<ControllerRevision>, pods: Vec<Pod>, runs: Vec<HookRun>) -> Self {
        let uid = gd.metadata.uid.clone().unwrap_or_default();
        let name = gd.metadata.name.clone().unwrap_or_default();
        let ours = |refs: &Option<Vec<OwnerReference>>| {
            refs.iter().flatten().any(|o| o.controller == Some(true) && o.uid == uid && o.kind == "GameDeployment")
        };
        let revisions = revisions.into_iter().filter(|r| ours(&r.metadata.owner_references)).collect();
        let pods = pods.into_iter().filter(|p| ours(&p.metadata.owner_references)).collect();
        let runs = runs
            .into_iter()
            .filter(|r| {
                ours(&r.metadata.owner_references)
                    || (r.metadata.owner_references.as_ref().is_none_or(Vec::is_empty)
                        && label(&r.metadata.labels, keys::HOOKRUN_WORKLOAD_NAME)
                            == Some(common::hookrun::workload_label_value(&name).as_str()))
            })
            .collect();
        Self { gd, revisions, pods, runs }
    }
}

/// Whether the GameDeployment opted in to the GitOps-clean control surface (no spec writes by anyone but Git).
pub fn gitops_clean(gd: &GameDeployment) -> bool {
    gd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::CONTROL))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(keys::CONTROL_ANNOTATIONS))
}

/// The pod's instance id (label, else the last segment of its name, as the operator derives it).
pub fn instance_id(pod: &Pod) -> &str {
    common::pod::label(pod, keys::INSTANCE_ID)
        .unwrap_or_else(|| pod.metadata.name.as_deref().and_then(|n| n.rsplit('-').next()).unwrap_or(""))
}

/// A shadow hook's run (`shadowHook`, type label `shadow-…`): shown with its pod, but it decides nothing, so no
/// verdict or action looks at it.
pub fn is_shadow(run: &HookRun) -> bool {
    label(&run.metadata.labels, keys::HOOKRUN_TYPE).is_some_and(|t| t.starts_with("shadow-"))
}

/// The runs of the pod's gates ([`runs_of`] without shadow runs).
pub fn gate_runs_of<'a>(pod: &Pod, runs: &'a [HookRun]) -> Vec<&'a HookRun> {
    runs_of(pod, runs).into_iter().filter(|r| !is_shadow(r)).collect()
}

/// Every run made for the pod (its gates' and its shadow hooks', not canary step runs): same instance id, by name.
pub fn runs_of<'a>(pod: &Pod, runs: &'a [HookRun]) -> Vec<&'a HookRun> {
    let id = instance_id(pod);
    let mut found: Vec<&HookRun> = runs
        .iter()
        .filter(|r| {
            label(&r.metadata.labels, keys::HOOKRUN_INSTANCE_ID) == Some(id)
                && label(&r.metadata.labels, keys::HOOKRUN_TYPE) != Some(HookKind::CanaryStep.type_label())
        })
        .collect();
    found.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    found
}

/// The phase a run shows (`Pending` until the hook-operator wrote one).
pub fn run_phase(run: &HookRun) -> HookPhase {
    run.status.as_ref().and_then(|s| s.phase).unwrap_or(HookPhase::Pending)
}

/// The value of label `key`, if set.
pub(crate) fn label<'a>(labels: &'a Option<std::collections::BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    labels.as_ref()?.get(key).map(String::as_str)
}
