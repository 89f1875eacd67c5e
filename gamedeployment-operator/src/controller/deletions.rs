//! Pods of a GameDeployment deleted by someone else (`kubectl delete pod`, another controller) while a pre-delete
//! hook is configured: their hook never ran, because the gate only covers deletions the operator makes. Each such
//! pod gets one Warning Event `PodDeletedWithoutHook` naming it and the gated ways (the `apps.kruise.io/specified-delete` label, `podsToDelete`).

use std::collections::HashSet;

use common::api::GameDeployment;
use common::cached_pod::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::action::{PlannedEvent, Related};
use crate::gate::{self, DeleteCause, GateKind};
use crate::ownership;

/// Event reason.
pub(crate) const REASON: &str = "PodDeletedWithoutHook";

/// The pods of `gd` that were deleted without their pre-delete hook: owned by it, terminating, running when the
/// deletion was asked, not deleted by this operator (`ours`, the UIDs it sent deletions for) and deleted after
/// `started` (deletions older than the process are not known to be ours or not, so they are not reported).
pub(crate) fn unguarded<'a>(
    gd: &GameDeployment,
    pods: impl IntoIterator<Item = &'a Pod>,
    ours: &HashSet<String>,
    started: Timestamp,
) -> Vec<&'a Pod> {
    if gd.metadata.deletion_timestamp.is_some() || gate::hook_for(gd, GateKind::Delete(DeleteCause::ScaleIn)).is_none()
    {
        return Vec::new();
    }
    pods.into_iter()
        .filter(|p| {
            ownership::controller_of(p.metadata.owner_references.as_ref())
                .is_some_and(|o| ownership::is_owned_by(o, gd))
        })
        .filter(common::pod::is_running)
        .filter(|p| !p.metadata.uid.as_ref().is_some_and(|uid| ours.contains(uid)))
        .filter(|p| {
            let Some(at) = p.metadata.deletion_timestamp.as_ref() else { return false };
            let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(0);
            let asked = at.0.checked_sub(SignedDuration::from_secs(grace)).unwrap_or(at.0);
            asked >= started
        })
        .collect()
}

/// The Warning Event for one such pod.
pub(crate) fn event(gd: &GameDeployment, pod: &Pod) -> PlannedEvent {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let template = gate::hook_for(gd, GateKind::Delete(DeleteCause::ScaleIn))
        .map(|(_, step, _)| step.template_name.clone())
        .unwrap_or_default();
    // A pod that already carries the label was on its way out through the hook: the advice is to let the operator
    // delete it, not to add the label it has.
    let labelled = common::pod::label(pod, common::keys::SPECIFIED_DELETE).is_some_and(|v| v == "true");
    let advice = if labelled {
        format!(
            "it was labelled {}=true, so the operator would have deleted it through the hook: leave such a pod to the \
             operator instead of deleting it",
            common::keys::SPECIFIED_DELETE
        )
    } else {
        format!(
            "to delete a pod through the hook, label it {}=true or list it in spec.scaleStrategy.podsToDelete",
            common::keys::SPECIFIED_DELETE
        )
    };
    PlannedEvent::warning(
        REASON,
        format!(
            "pod {name} was deleted by someone other than the operator, so its pre-delete hook (HookTemplate \
             {template}) did not run; {advice}"
        ),
    )
    .about(Related::pod(name, pod.metadata.uid.as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::gd;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn with_hook() -> GameDeployment {
        let mut g = gd(3, "InplaceUpdate");
        g.spec.pre_delete_update_strategy =
            Some(serde_json::from_value(serde_json::json!({"hook": {"templateName": "drain"}})).unwrap());
        g
    }

    fn pod(g: &GameDeployment, name: &str, deleted_at: Option<i64>, phase: &str) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "namespace": "default"},
            "status": {"phase": phase}
        }))
        .unwrap();
        p.metadata.owner_references = Some(vec![ownership::owner_reference(g)]);
        if let Some(at) = deleted_at {
            p.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(at).unwrap()));
            p.metadata.deletion_grace_period_seconds = Some(30);
        }
        p
    }

    #[test]
    fn only_pods_someone_else_deleted_while_a_hook_is_configured() {
        let g = with_hook();
        let started = Timestamp::from_second(1_000).unwrap();
        let pods = [
            pod(&g, "kept", None, "Running"),
            pod(&g, "theirs", Some(1_100), "Running"),
            pod(&g, "mine", Some(1_100), "Running"),
            pod(&g, "pending", Some(1_100), "Pending"),
            // Asked at 1000 - 30 + ... : deletion asked before this process started.
            pod(&g, "before-start", Some(1_020), "Running"),
        ];
        let ours = HashSet::from(["uid-mine".to_string()]);
        let found: Vec<&str> =
            unguarded(&g, &pods, &ours, started).iter().map(|p| p.metadata.name.as_deref().unwrap()).collect();
        assert_eq!(found, ["theirs"]);
        let event =
            event(&g, found.first().and_then(|n| pods.iter().find(|p| p.metadata.name.as_deref() == Some(n))).unwrap());
        assert_eq!(event.reason, REASON);
        assert!(
            event.message.contains("pod theirs was deleted") && event.message.contains("podsToDelete"),
            "{event:?}"
        );
        assert_eq!(event.related.map(|r| r.name), Some("theirs".to_string()));

        // Issue 49, finding 8: a pod already labelled for a gated deletion is not told to get the label it has.
        let mut labelled = pod(&g, "labelled", Some(1_100), "Running");
        labelled.metadata.labels = Some([(common::keys::SPECIFIED_DELETE.to_string(), "true".to_string())].into());
        let warning = super::event(&g, &labelled);
        assert!(!warning.message.contains("label it"), "{warning:?}");
        assert!(warning.message.contains("leave such a pod to the operator"), "{warning:?}");

        // Without a pre-delete hook there is nothing to warn about.
        let plain = gd(3, "InplaceUpdate");
        let pods = [pod(&plain, "theirs", Some(1_100), "Running")];
        assert!(unguarded(&plain, &pods, &HashSet::new(), started).is_empty());
    }
}
