//! The GitOps-clean control surface (a kourse addition): requests a person (or `kubectl gd`) makes through
//! annotations, so that nothing the operator does needs it to write a GameDeployment's spec.
//!
//! BCS's operator writes the spec — it resets `retry`, sets `paused` for canary steps, prunes `podsToDelete` — which
//! GitOps tools (Argo CD, Flux) report as drift forever. A GameDeployment annotated
//! `gamedeployment.tkex.tencent.com/control: annotations` opts in: the operator then writes only its `status`, and
//! - **per-pod retry**: delete the failed HookRun (`kubectl gd retry NAME --pod POD`); the gate makes a new one;
//! - **resume a canary step** (end a pause, or go past a failed step hook): annotate the GameDeployment
//!   `gamedeployment.tkex.tencent.com/resume-step: <update revision>/<step index>`;
//! - **promote a canary** (skip its remaining steps): `gamedeployment.tkex.tencent.com/promote: <update revision>`;
//! - **skip a hook for one pod**: annotate the pod `gamedeployment.tkex.tencent.com/skip-hook: <change>` (`delete`,
//!   `inplace/<revision>`, `postinplace/<revision>`) — honoured with or without the opt-in, recorded as a release.
//!
//! Metadata annotations do not change `metadata.generation`; each request names what it is for (a revision and
//! step, a change), so one left in place never acts on a later rollout. Everything here is pure and only reads;
//! the planner drops the spec writes of an opted-in GameDeployment (`planner::keep_spec_untouched`).

use common::api::GameDeployment;
use common::cached_pod::Pod;
use common::keys;

fn gd_annotation<'a>(gd: &'a GameDeployment, key: &str) -> Option<&'a str> {
    gd.metadata.annotations.as_ref()?.get(key).map(|v| v.trim())
}

/// Whether the GameDeployment opted in to the GitOps-clean control surface: the operator writes only its status.
pub fn gitops_clean(gd: &GameDeployment) -> bool {
    gd_annotation(gd, keys::CONTROL).is_some_and(|v| v.eq_ignore_ascii_case(keys::CONTROL_ANNOTATIONS))
}

/// The value that resumes step `index` of the canary of `revision`.
pub fn resume_value(revision: &str, index: usize) -> String {
    format!("{revision}/{index}")
}

/// Whether the GameDeployment's annotations resume step `index` of the canary of `revision`.
pub fn resume_requested(gd: &GameDeployment, revision: &str, index: usize) -> bool {
    gd_annotation(gd, keys::RESUME_STEP) == Some(resume_value(revision, index).as_str())
}

/// Whether the GameDeployment's annotations promote the canary of `revision` (skip its remaining steps).
pub fn promote_requested(gd: &GameDeployment, revision: &str) -> bool {
    gd_annotation(gd, keys::PROMOTE) == Some(revision)
}

/// Whether the pod asks to skip the hook of `change` (the [`crate::gate::attempt::Change::annotation`] value).
pub fn skip_requested(pod: &Pod, change: &str) -> bool {
    common::pod::annotation(pod, keys::SKIP_HOOK).is_some_and(|v| v.trim() == change)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn gd(annotations: &[(&str, &str)]) -> GameDeployment {
        let mut gd = GameDeployment::new(
            "web",
            serde_json::from_value(serde_json::json!({
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}}
            }))
            .unwrap(),
        );
        gd.metadata.annotations =
            Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>());
        gd
    }

    #[test]
    fn the_opt_in_is_one_annotation() {
        assert!(!gitops_clean(&gd(&[])));
        assert!(gitops_clean(&gd(&[(keys::CONTROL, "annotations")])));
        assert!(!gitops_clean(&gd(&[(keys::CONTROL, "spec")])));
    }

    #[test]
    fn resume_and_promote_name_what_they_are_for() {
        let g = gd(&[(keys::RESUME_STEP, "web-2/1"), (keys::PROMOTE, "web-3")]);
        assert!(resume_requested(&g, "web-2", 1));
        assert!(!resume_requested(&g, "web-2", 2), "a left-over resume does not resume a later step");
        assert!(!resume_requested(&g, "web-3", 1), "nor the same step of a later rollout");
        assert!(promote_requested(&g, "web-3") && !promote_requested(&g, "web-2"));
    }

    #[test]
    fn a_skip_names_the_change() {
        let mut pod = Pod::default();
        assert!(!skip_requested(&pod, "delete"));
        pod.metadata.annotations = Some([(keys::SKIP_HOOK.to_string(), "inplace/web-2".to_string())].into());
        assert!(skip_requested(&pod, "inplace/web-2"));
        assert!(!skip_requested(&pod, "delete") && !skip_requested(&pod, "inplace/web-3"));
    }
}
