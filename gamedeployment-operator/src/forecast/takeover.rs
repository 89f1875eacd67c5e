//! Before (or just after) this operator takes over a fleet another operator ran (BCS's, or a CloneSet's pods
//! adopted): for each pod, whether the operator would change it and why — the dry run of the migration guide
//! (`kubectl gd plan NAME --takeover`). Pure: reads the live objects, decides nothing the planner does not.
//!
//! A pod is left alone when the revision it names (`controller-revision-hash`) is the update revision: the revision
//! that holds the current template, compared as Kubernetes stores templates ([`crate::revision::canonical`]). Any
//! other pod is outdated, and the verdict says how the update strategy would change it: in place (which images), or
//! recreated (which fields force it), or left until deleted (`OnDelete`).

use common::api::GameDeploymentUpdateStrategyType as Strategy;
use common::keys;
use serde::Serialize;

use super::{Live, Timeline};
use crate::planner::update::inplace::step;
use crate::revision::{self, RevisionChange};

/// What would happen to one pod, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodVerdict {
    /// The pod's name.
    pub pod: String,
    /// The revision the pod names, if it names one.
    pub revision: Option<String>,
    /// Whether the operator would change the pod (subject to partition and the update budget).
    pub would_change: bool,
    /// The reason in words: the revision it is already on, the images an in-place update would patch, the fields
    /// that force a recreate, or `OnDelete`.
    pub why: String,
}

/// The takeover dry run of one GameDeployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Takeover {
    /// The revision that holds the current template.
    pub update_revision: String,
    /// Whether that revision already exists (false: the operator would create it).
    pub revision_exists: bool,
    /// One verdict per live pod (terminating pods are left out: nothing is decided about them).
    pub pods: Vec<PodVerdict>,
}

impl Takeover {
    /// Pods the operator would change.
    pub fn changes(&self) -> usize {
        self.pods.iter().filter(|p| p.would_change).count()
    }

    /// The verdicts checked against the forecast of the same objects: an outdated pod the rollout leaves where it
    /// is (partition, a pause, a failing hook) is not changed, and a pod on the current template that the forecast
    /// acts on anyway (scale-in, `podsToDelete`) is.
    pub fn with_forecast(mut self, timeline: &Timeline) -> Self {
        for verdict in &mut self.pods {
            let step = timeline.batches.iter().flat_map(|b| &b.pods).find(|s| !s.new && s.pod == verdict.pod);
            match (verdict.would_change, step) {
                (true, None) => {
                    verdict.would_change = false;
                    verdict.why.push_str("; the rollout leaves it on its revision (partition, pause or a hook)");
                }
                (false, Some(step)) => {
                    verdict.would_change = true;
                    verdict.why.push_str(&format!("; the forecast: {} (scale or podsToDelete)", step.action.as_str()));
                }
                _ => {}
            }
        }
        self
    }
}

/// Whether `revision` is one of `gd`'s as the operator decides it (controlled by it, or an orphan given to it by
/// name): what `kubectl gd plan` reads.
pub fn is_revision_of(
    revision: &k8s_openapi::api::apps::v1::ControllerRevision,
    gd: &common::api::GameDeployment,
) -> bool {
    revision::is_of(revision, gd)
}

/// The per-pod verdicts for `live` as read (before any change is made to it).
pub fn takeover(live: &Live) -> Takeover {
    let revisions: Vec<_> = live.revisions.iter().collect();
    let resolution = revision::resolve(&live.gd, &revisions);
    let revision_exists = !matches!(resolution.change, Some(RevisionChange::Create(_)));
    let update = resolution.update_revision;
    let strategy = live.gd.spec.update_strategy.type_;
    let current = &live.gd.spec.template;
    let mut pods: Vec<PodVerdict> = live
        .pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|pod| {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let named = pod.metadata.labels.as_ref().and_then(|l| l.get(keys::CONTROLLER_REVISION_HASH)).cloned();
            let verdict = |would_change: bool, why: String| PodVerdict {
                pod: name.clone(),
                revision: named.clone(),
                would_change,
                why,
            };
            let Some(label) = named.as_deref() else {
                return verdict(true, format!("it names no revision ({}): outdated", keys::CONTROLLER_REVISION_HASH));
            };
            if label == update {
                return verdict(false, format!("runs {label}, which holds the current template"));
            }
            let Some(old) = revisions.iter().find(|r| r.metadata.name.as_deref() == Some(label)) else {
                return verdict(true, format!("its revision {label} is not one of the GameDeployment's: outdated"));
            };
            let how = match (strategy.behaves_as(), revision::template_of(old)) {
                (Strategy::OnDelete, _) => {
                    "it stays until it is deleted (OnDelete), then comes back on the new one".into()
                }
                (Strategy::RollingUpdate, _) => "it would be recreated (RollingUpdate)".to_string(),
                (_, None) => "its revision holds no template: it would be recreated".to_string(),
                (_, Some(old_template)) => match step::diff(&old_template, current) {
                    Ok(change) if change.images.is_empty() => "its labels or annotations would change in place".into(),
                    Ok(change) => {
                        let images: Vec<String> = change.images.iter().map(|(c, i)| format!("{c}={i}")).collect();
                        format!("it would be updated in place ({})", images.join(", "))
                    }
                    Err(why) => format!("it would be recreated: {why}"),
                },
            };
            verdict(true, format!("runs {label}, another template than {update}'s: {how}"))
        })
        .collect();
    pods.sort_by(|a, b| a.pod.cmp(&b.pod));
    Takeover { update_revision: update, revision_exists, pods }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn live(written_cpu: &str, stored_cpu: &str) -> Live {
        let mut gd = fixtures::gd(2, "InplaceUpdate");
        gd.spec.template = serde_json::from_value(json!({"metadata": {"labels": {"app": "game"}}, "spec": {
            "containers": [{"name": "main", "image": "game:1", "resources": {"limits": {"cpu": written_cpu}}}]}}))
        .unwrap();
        let mut bcs: ControllerRevision = revision::new_revision(&gd, None, 1);
        bcs.metadata.name = Some("game-bcs".into());
        bcs.data = RawExtension(json!({"spec": {"template": {"$patch": "replace",
            "metadata": {"creationTimestamp": null, "labels": {"app": "game"}},
            "spec": {"containers": [{"name": "main", "image": "game:1", "resources": {"limits": {"cpu": stored_cpu}}}]}}}}));
        let pods = ["game-a", "game-b"]
            .iter()
            .map(|n| fixtures::pod(n).labels(&[(keys::CONTROLLER_REVISION_HASH, "game-bcs")]).build())
            .chain([fixtures::pod("game-c").build()])
            .collect();
        Live {
            gd,
            pods,
            revisions: vec![bcs],
            hook_runs: Vec::new(),
            hook_templates: Vec::new(),
            node_costs: Default::default(),
            now: Timestamp::now(),
        }
    }

    #[test]
    fn a_pod_on_the_revision_bcs_wrote_for_the_same_template_is_left_alone() {
        let t = takeover(&live("1000m", "1"));
        assert_eq!((t.update_revision.as_str(), t.revision_exists), ("game-bcs", true));
        let verdicts: Vec<(&str, bool)> = t.pods.iter().map(|p| (p.pod.as_str(), p.would_change)).collect();
        assert_eq!(verdicts, [("game-a", false), ("game-b", false), ("game-c", true)]);
        assert!(t.pods[0].why.contains("holds the current template"), "{}", t.pods[0].why);
        assert!(t.pods[2].why.contains("names no revision"), "{}", t.pods[2].why);
        assert_eq!(t.changes(), 1);
    }

    /// A CloneSet's pods, orphaned and adopted, name the CloneSet's revision, which the GameDeployment does not own.
    #[test]
    fn a_pod_naming_a_revision_the_gamedeployment_does_not_own_is_outdated() {
        let mut live = live("1", "1");
        live.pods =
            vec![fixtures::pod("sample-abcde").labels(&[(keys::CONTROLLER_REVISION_HASH, "sample-5d8bf")]).build()];
        let t = takeover(&live);
        assert!(t.pods[0].would_change);
        assert!(
            t.pods[0].why.contains("its revision sample-5d8bf is not one of the GameDeployment's: outdated"),
            "{}",
            t.pods[0].why
        );
    }

    #[test]
    fn a_pod_on_another_template_says_how_it_would_change() {
        let t = takeover(&live("2", "1"));
        assert!(!t.revision_exists);
        assert!(t.pods[0].would_change);
        assert!(t.pods[0].why.contains("would be recreated"), "{}", t.pods[0].why);
        assert!(t.pods[0].why.contains("spec.containers"), "{}", t.pods[0].why);
    }
}
