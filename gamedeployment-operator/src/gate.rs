//! THE gate: every pod deletion and every in-place or hot-patch update the planner wants to make is first put to
//! [`check`], and happens only on [`GateDecision::Allow`]. There is no other path to a pod change, so the hook
//! invariant ("no gated pod changes without a `Successful` HookRun") has exactly one place to live.
//!
//! Today the gate allows everything: hooks (`preDeleteUpdateStrategy`, `preInplaceUpdateStrategy`) are issue 6.
//! The planner already treats `Wait` and `Blocked` the way hooks need: the pod is *held* — it keeps its
//! lifecycle state (`PreparingDelete` / `PreparingUpdate`), counts as unavailable for the update budget, is not
//! chosen a second time, and does not stop other pods from progressing.

use common::api::GameDeployment;
use k8s_openapi::api::core::v1::Pod;

/// Why a pod is about to be deleted. Hooks treat every cause the same (BCS gates scale-in, `podsToDelete` and
/// the delete half of a RollingUpdate with one hook); the cause is carried for events, metrics and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeleteCause {
    /// `spec.replicas` went down (or a surge pod is no longer needed).
    ScaleIn,
    /// The pod is named in `spec.scaleStrategy.podsToDelete`.
    PodsToDelete,
    /// RollingUpdate: the pod is replaced by one of the new revision.
    RollingUpdate,
    /// InplaceUpdate/HotPatchUpdate of a change that cannot be made in place: the pod is recreated.
    RecreateFallback,
}

impl DeleteCause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ScaleIn => "scale_in",
            Self::PodsToDelete => "pods_to_delete",
            Self::RollingUpdate => "rolling_update",
            Self::RecreateFallback => "recreate_fallback",
        }
    }
}

/// The pod change asking to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateKind {
    Delete(DeleteCause),
    InPlaceUpdate,
    HotPatchUpdate,
}

/// One request: this pod, this change, towards (or away from) this revision.
#[derive(Debug, Clone, Copy)]
pub struct GateRequest<'a> {
    pub kind: GateKind,
    pub pod: &'a Pod,
    /// The revision the pod runs (the key hook runs are bound to: a rollback makes an old result stale).
    pub pod_revision: Option<&'a str>,
    /// The revision the pod is being moved to (updates only).
    pub target_revision: Option<&'a str>,
}

/// What the gate knows about the world besides the pod: the GameDeployment (its hook configuration). Issue 6 adds
/// the observed HookRuns and HookTemplates here.
#[derive(Debug, Clone, Copy)]
pub struct GateState<'a> {
    pub gd: &'a GameDeployment,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    /// Go ahead now.
    Allow,
    /// Not yet (a hook is running); ask again on a later pass.
    Wait(String),
    /// Stopped until someone acts (a hook failed, its template is missing); the reason says what to do.
    Blocked(String),
}

impl GateDecision {
    pub fn is_allow(&self) -> bool {
        matches!(self, Self::Allow)
    }

    /// Why the pod is held, if it is.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Allow => None,
            Self::Wait(reason) | Self::Blocked(reason) => Some(reason),
        }
    }
}

/// Decides whether a pod change may happen now.
pub fn check(request: &GateRequest<'_>, state: &GateState<'_>) -> GateDecision {
    // Hook gates (issue 6) plug in here; without hooks every change is allowed, as in BCS.
    let _ = (request, state);
    GateDecision::Allow
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_hooks_everything_passes() {
        let gd = GameDeployment::new(
            "web",
            serde_json::from_value(serde_json::json!({
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}}
            }))
            .unwrap(),
        );
        let pod = Pod::default();
        for kind in [
            GateKind::Delete(DeleteCause::ScaleIn),
            GateKind::Delete(DeleteCause::PodsToDelete),
            GateKind::Delete(DeleteCause::RollingUpdate),
            GateKind::Delete(DeleteCause::RecreateFallback),
            GateKind::InPlaceUpdate,
            GateKind::HotPatchUpdate,
        ] {
            let request = GateRequest { kind, pod: &pod, pod_revision: Some("web-1"), target_revision: Some("web-2") };
            assert_eq!(check(&request, &GateState { gd: &gd }), GateDecision::Allow);
        }
        assert_eq!(GateDecision::Wait("hook running".into()).reason(), Some("hook running"));
    }
}
