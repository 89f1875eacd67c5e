//! Which pods belong to a GameDeployment: label selectors, controller ownerReferences, adoption of orphans and
//! release of pods that stopped matching.
//!
//! BCS releases owned pods that are terminating, Succeeded or Failed (its claim filter treats "inactive" as "not
//! matching"), which orphans evicted pods so they are never garbage-collected (BCS-G11). Here only a
//! selector mismatch releases a pod; inactive pods stay owned and go away with the GameDeployment.

use std::collections::BTreeMap;

use common::api::GameDeployment;
use common::cached_pod::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, OwnerReference};
use kube::Resource;
use kube::core::{Selector, SelectorExt};

/// Kind and API version written into (and expected in) controller ownerReferences.
pub const OWNER_KIND: &str = "GameDeployment";

/// The label selector of the operator's pod watch, and of every replica's webhook cache: pods with an instance id
/// (every pod the operator creates, adopts, or that BCS created). Removing this label from a pod takes it out of the
/// operator's view until the next adoption scan (`controller::orphans`) labels it back.
pub const WATCH_SELECTOR: &str = common::keys::INSTANCE_ID;

/// Why a selector cannot be used to claim pods. Each one would make BCS create pods forever or claim every pod
/// of the namespace, so the GameDeployment is stopped with a condition instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorProblem {
    #[error("spec.selector is empty: it would select every pod in the namespace")]
    Empty,
    #[error("spec.selector has an invalid requirement on {key:?}: {reason}")]
    InvalidRequirement { key: String, reason: String },
    #[error("spec.selector ({selector}) does not match the labels of spec.template.metadata.labels ({labels})")]
    TemplateMismatch { selector: String, labels: String },
}

/// Checks that the selector is usable and selects the pods the template produces.
pub fn validate_selector(gd: &GameDeployment) -> Result<(), SelectorProblem> {
    let selector = &gd.spec.selector;
    let no_labels = selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty);
    let no_expressions = selector.match_expressions.as_ref().is_none_or(Vec::is_empty);
    if no_labels && no_expressions {
        return Err(SelectorProblem::Empty);
    }
    for requirement in selector.match_expressions.iter().flatten() {
        requirement_problem(requirement)?;
    }
    let empty = BTreeMap::new();
    let labels = gd.spec.template.metadata.as_ref().and_then(|m| m.labels.as_ref()).unwrap_or(&empty);
    if !selector_matches(selector, labels) {
        return Err(SelectorProblem::TemplateMismatch {
            selector: selector_string(selector),
            labels: labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","),
        });
    }
    Ok(())
}

fn requirement_problem(r: &LabelSelectorRequirement) -> Result<(), SelectorProblem> {
    let values = r.values.as_ref().map_or(0, Vec::len);
    let reason = match r.operator.as_str() {
        "In" | "NotIn" if values == 0 => "operator In/NotIn needs at least one value",
        "Exists" | "DoesNotExist" if values > 0 => "operator Exists/DoesNotExist takes no values",
        "In" | "NotIn" | "Exists" | "DoesNotExist" => return Ok(()),
        _ => "operator must be In, NotIn, Exists or DoesNotExist",
    };
    Err(SelectorProblem::InvalidRequirement { key: r.key.clone(), reason: reason.to_string() })
}

/// Kubernetes label-selector semantics, by kube's [`Selector`]: every `matchLabels` pair and every expression must
/// hold; an empty selector matches every pod (as Go's `metav1.LabelSelectorAsSelector`; a GameDeployment's own
/// empty selector is refused earlier, [`validate_selector`]). A selector kube cannot read (an unknown operator,
/// `In`/`NotIn` without `values`) matches nothing, as Go's conversion error does, so a broken selector never
/// claims pods.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    Selector::try_from(selector.clone()).is_ok_and(|selector| selector.matches(labels))
}

/// The selector as `kubectl get -l` writes it (`metav1.FormatLabelSelector`), for `status.labelSelector`, which
/// the scale subresource hands to HPA.
///
/// Not kube's `Selector` `Display`: it writes `matchLabels` first and then the expressions in manifest order,
/// where Go sorts every requirement by key, and BCS's `status.labelSelector` is Go's string
/// (`kube_selector_text_is_not_sorted_by_key` pins the difference).
pub fn selector_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<(String, String)> = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        parts.push((k.clone(), format!("{k}={v}")));
    }
    for r in selector.match_expressions.iter().flatten() {
        let mut values: Vec<&str> = r.values.iter().flatten().map(String::as_str).collect();
        values.sort_unstable();
        let text = match r.operator.as_str() {
            "In" => format!("{} in ({})", r.key, values.join(",")),
            "NotIn" => format!("{} notin ({})", r.key, values.join(",")),
            "Exists" => r.key.clone(),
            "DoesNotExist" => format!("!{}", r.key),
            other => format!("{} {other} ({})", r.key, values.join(",")),
        };
        parts.push((r.key.clone(), text));
    }
    parts.sort();
    parts.into_iter().map(|(_, text)| text).collect::<Vec<_>>().join(",")
}

/// The controller ownerReference of an object, if any.
pub fn controller_of(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    owners?.iter().find(|o| o.controller == Some(true))
}

/// The ownerReference the GameDeployment writes on everything it creates. `blockOwnerDeletion` makes foreground
/// deletion of the GameDeployment wait for its pods.
pub fn owner_reference(gd: &GameDeployment) -> OwnerReference {
    OwnerReference {
        api_version: GameDeployment::api_version(&()).into_owned(),
        kind: OWNER_KIND.to_string(),
        name: gd.metadata.name.clone().unwrap_or_default(),
        uid: gd.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `owner` is this GameDeployment (same UID; kind and group checked so a UID clash across kinds, which
/// cannot happen on a real server, cannot confuse us either).
pub fn is_owned_by(owner: &OwnerReference, gd: &GameDeployment) -> bool {
    owner.kind == OWNER_KIND
        && owner.api_version.starts_with("tkex.tencent.com/")
        && Some(&owner.uid) == gd.metadata.uid.as_ref()
}

/// The result of matching the namespace's pods against a GameDeployment.
#[derive(Debug, Default)]
pub struct Claim<'a> {
    /// Pods this GameDeployment controls and that match its selector (active or not).
    pub owned: Vec<&'a Pod>,
    /// Orphans that match and should be adopted.
    pub adopt: Vec<&'a Pod>,
    /// Pods it controls that no longer match and should be released.
    pub release: Vec<&'a Pod>,
}

/// Sorts the namespace's pods into owned / to adopt / to release. `may_adopt` is false while the selector is
/// invalid or the GameDeployment is being deleted: then nothing new is claimed.
pub fn claim<'a>(gd: &GameDeployment, pods: &[&'a Pod], may_adopt: bool) -> Claim<'a> {
    let mut claim = Claim::default();
    let empty = BTreeMap::new();
    // [`selector_matches`], with the selector converted once for every pod of the pass (each conversion clones it).
    let selector = if may_adopt { Selector::try_from(gd.spec.selector.clone()).ok() } else { None };
    for pod in pods {
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let matches = selector.as_ref().is_some_and(|selector| selector.matches(labels));
        match controller_of(pod.metadata.owner_references.as_ref()) {
            Some(owner) if is_owned_by(owner, gd) => {
                if matches || !may_adopt {
                    // While the selector is invalid we keep what we have rather than releasing everything.
                    claim.owned.push(pod);
                } else if common::pod::is_terminating(pod) {
                    // Releasing a pod on its way out only makes it escape garbage collection.
                    claim.owned.push(pod);
                } else {
                    claim.release.push(pod);
                }
            }
            Some(_) => {}
            None => {
                if matches && common::pod::is_active(pod) {
                    claim.adopt.push(pod);
                }
            }
        }
    }
    claim
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn gd(selector: LabelSelector, template_labels: &[(&str, &str)]) -> GameDeployment {
        let mut gd = fixtures::gd(1, "RollingUpdate");
        gd.spec.selector = selector;
        gd.spec.template.metadata.get_or_insert_with(Default::default).labels = Some(labels(template_labels));
        gd
    }

    fn by_labels(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector { match_labels: Some(labels(pairs)), match_expressions: None }
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: if values.is_empty() { None } else { Some(values.iter().map(|v| v.to_string()).collect()) },
        }
    }

    fn pod(name: &str, pod_labels: &[(&str, &str)], owner_uid: Option<&str>) -> Pod {
        let pod = fixtures::pod(name).labels(pod_labels);
        match owner_uid {
            Some(uid) => pod.owned_by(uid).build(),
            None => pod.build(),
        }
    }

    #[test]
    fn expressions_follow_kubernetes_semantics() {
        let l = labels(&[("app", "web"), ("tier", "game")]);
        let sel = |e: Vec<LabelSelectorRequirement>| LabelSelector { match_labels: None, match_expressions: Some(e) };
        assert!(selector_matches(&sel(vec![expr("tier", "In", &["game", "db"])]), &l));
        assert!(!selector_matches(&sel(vec![expr("tier", "NotIn", &["game"])]), &l));
        assert!(selector_matches(&sel(vec![expr("zone", "NotIn", &["a"])]), &l));
        assert!(selector_matches(&sel(vec![expr("app", "Exists", &[])]), &l));
        assert!(!selector_matches(&sel(vec![expr("app", "DoesNotExist", &[])]), &l));
        assert!(!selector_matches(&sel(vec![expr("app", "Bogus", &["web"])]), &l));
        assert!(!selector_matches(&by_labels(&[("app", "other")]), &l));
        // Unreadable requirements match nothing (Go's LabelSelectorAsSelector refuses them).
        let no_values = LabelSelectorRequirement { key: "zone".into(), operator: "NotIn".into(), values: None };
        assert!(!selector_matches(&sel(vec![no_values]), &l));
        // The empty selector selects everything.
        assert!(selector_matches(&LabelSelector::default(), &l));
        assert!(selector_matches(&sel(vec![]), &l));
    }

    #[test]
    fn kube_selector_text_is_not_sorted_by_key() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![expr("tier", "In", &["b", "a"]), expr("canary", "DoesNotExist", &[])]),
        };
        let kube = Selector::try_from(selector.clone()).unwrap().to_string();
        assert_eq!(kube, "app=web,tier in (a,b),!canary");
        assert_ne!(kube, selector_string(&selector), "kube now sorts like Go: use its Display in selector_string");
    }

    #[test]
    fn selector_string_is_sorted_like_kubectl() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![expr("tier", "In", &["b", "a"]), expr("canary", "DoesNotExist", &[])]),
        };
        assert_eq!(selector_string(&selector), "app=web,!canary,tier in (a,b)");
    }

    #[test]
    fn selector_validation() {
        assert_eq!(validate_selector(&gd(by_labels(&[("app", "web")]), &[("app", "web"), ("x", "y")])), Ok(()));
        assert_eq!(validate_selector(&gd(LabelSelector::default(), &[("app", "web")])), Err(SelectorProblem::Empty));
        let mismatch = validate_selector(&gd(by_labels(&[("app", "web")]), &[("app", "db")])).unwrap_err();
        assert!(mismatch.to_string().contains("app=web") && mismatch.to_string().contains("app=db"), "{mismatch}");
        let bad = LabelSelector { match_labels: None, match_expressions: Some(vec![expr("app", "In", &[])]) };
        assert!(matches!(
            validate_selector(&gd(bad, &[("app", "web")])),
            Err(SelectorProblem::InvalidRequirement { .. })
        ));
    }

    #[test]
    fn claims_adopts_and_releases() {
        let gd = gd(by_labels(&[("app", "web")]), &[("app", "web")]);
        let owned = pod("owned", &[("app", "web")], Some("gd-uid"));
        let orphan = pod("orphan", &[("app", "web")], None);
        let stray = pod("stray", &[("app", "other")], Some("gd-uid"));
        let foreign = pod("foreign", &[("app", "web")], Some("other-uid"));
        let unrelated = pod("unrelated", &[("app", "other")], None);
        let leaving = fixtures::pod("leaving").labels(&[("app", "other")]).owned_by("gd-uid").terminating().build();
        let pods = [&owned, &orphan, &stray, &foreign, &unrelated, &leaving];
        let c = claim(&gd, &pods, true);
        let names = |v: &[&Pod]| v.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>();
        assert_eq!(names(&c.owned), ["owned", "leaving"]);
        assert_eq!(names(&c.adopt), ["orphan"]);
        assert_eq!(names(&c.release), ["stray"]);

        let frozen = claim(&gd, &pods, false);
        assert_eq!(names(&frozen.owned), ["owned", "stray", "leaving"]);
        assert!(frozen.adopt.is_empty() && frozen.release.is_empty());
    }
}
