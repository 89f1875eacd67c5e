//! What the validation webhook answers, as pure functions of the request's objects: a HookTemplate or a HookRun is
//! refused with the words `hook-operator check` prints (one function decides both:
//! `hook_operator::engine::validate`), and a GameDeployment is told which HookTemplates it names that are missing.

use std::collections::BTreeMap;

use common::api::{GameDeploymentSpec, HookRunSpec, HookStep, HookTemplateSpec};
use hook_operator::engine::validate;

/// Why an object is admitted without a check, or refused (the `reason` label of
/// `gamedeployment_webhook_requests_total{webhook="hook-validation"}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecVerdict {
    /// Valid.
    Valid,
    /// An update that leaves the spec as it was (labels, annotations, finalizers, `spec.terminate`): admitted, so
    /// an object stored before the webhook existed can still be labelled, terminated or cleaned up.
    Unchanged,
    /// A HookRun the gamedeployment-operator creates: admitted, so that a run copied from a template the webhook
    /// never saw still ends as a phase with a message (`Error`, `invalid HookRun …`) that its GameDeployment's
    /// status and Events show, instead of a create the operator would retry forever.
    Operator,
    /// Refused with this message.
    Invalid(String),
}

impl SpecVerdict {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Valid => "valid",
            Self::Unchanged => "unchanged",
            Self::Operator => "operator",
            Self::Invalid(_) => "invalid",
        }
    }
}

/// A HookTemplate create or update (`old`: the stored spec of an update).
pub fn hook_template(name: &str, spec: &HookTemplateSpec, old: Option<&HookTemplateSpec>) -> SpecVerdict {
    if old == Some(spec) {
        return SpecVerdict::Unchanged;
    }
    match validate::template_refusal(name, spec) {
        Some(message) => SpecVerdict::Invalid(message),
        None => SpecVerdict::Valid,
    }
}

/// A HookRun create (its spec is immutable: updates never change what it measures). `by_operator`: the request is
/// the gamedeployment-operator's own.
pub fn hook_run(name: &str, spec: &HookRunSpec, by_operator: bool) -> SpecVerdict {
    if by_operator {
        return SpecVerdict::Operator;
    }
    match validate::run_refusal(name, spec) {
        Some(message) => SpecVerdict::Invalid(message),
        None => SpecVerdict::Valid,
    }
}

/// Every HookTemplate a GameDeployment names, each with the fields that name it (`preDeleteUpdateStrategy.hook`,
/// `updateStrategy.canary.steps[1].shadowHook`, …), in field order.
pub fn named_templates(spec: &GameDeploymentSpec) -> BTreeMap<String, Vec<String>> {
    let mut named: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut add = |field: String, step: Option<&HookStep>| {
        if let Some(step) = step.filter(|s| !s.template_name.is_empty()) {
            named.entry(step.template_name.clone()).or_default().push(field);
        }
    };
    if let Some(s) = &spec.pre_delete_update_strategy {
        add("preDeleteUpdateStrategy.hook".into(), s.hook.as_ref());
        add("preDeleteUpdateStrategy.shadowHook".into(), s.shadow_hook.as_ref());
    }
    if let Some(s) = &spec.pre_inplace_update_strategy {
        add("preInplaceUpdateStrategy.hook".into(), s.hook.as_ref());
        add("preInplaceUpdateStrategy.shadowHook".into(), s.shadow_hook.as_ref());
    }
    if let Some(s) = &spec.post_inplace_update_strategy {
        add("postInplaceUpdateStrategy.hook".into(), s.hook.as_ref());
        add("postInplaceUpdateStrategy.shadowHook".into(), s.shadow_hook.as_ref());
    }
    for (i, step) in spec.update_strategy.canary.iter().flat_map(|c| c.steps.iter()).enumerate() {
        add(format!("updateStrategy.canary.steps[{i}].hook"), step.hook.as_ref());
        add(format!("updateStrategy.canary.steps[{i}].shadowHook"), step.shadow_hook.as_ref());
    }
    if let Some(probe) =
        spec.scale_strategy.as_ref().and_then(|s| s.scale_in_policy.as_ref()).and_then(|p| p.cost_probe.as_ref())
        && !probe.template_name.is_empty()
    {
        named.entry(probe.template_name.clone()).or_default().push("scaleStrategy.scaleInPolicy.costProbe".into());
    }
    named
}

/// The warning for a named HookTemplate that does not exist (yet), with what that means for the fields that name
/// it. Admitted all the same: apply order stays free (a GameDeployment may be applied before its templates), and
/// nothing needs the template until a pod reaches its hook.
pub fn missing_template(namespace: &str, template: &str, fields: &[String]) -> String {
    let gates = fields.iter().any(|f| f.ends_with(".hook"));
    let probes = fields.iter().any(|f| f.ends_with("costProbe"));
    let consequence = if gates {
        "a pod that reaches this hook waits for it (condition HookBlocked)"
    } else if probes {
        "the cost probe gives no cost, so pods race in deletion order"
    } else {
        "the shadow hook reports it in an Event and holds nothing"
    };
    format!(
        "HookTemplate {template:?} named by {} does not exist in namespace {namespace:?}: until it is created, \
         {consequence}",
        fields.join(", ")
    )
}

/// The warning when the webhook could not find out whether a named template exists (the look-up failed or was slow).
pub fn unknown_template(namespace: &str, template: &str, why: &str) -> String {
    format!("HookTemplate {template:?} in namespace {namespace:?} could not be looked up ({why}); not checked")
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::api::{Metric, MetricProvider, WebMetric};

    fn metric(condition: &str) -> Metric {
        Metric {
            name: "webtest".into(),
            success_condition: Some(condition.into()),
            provider: MetricProvider {
                web: Some(WebMetric { url: "http://x".into(), ..WebMetric::default() }),
                ..MetricProvider::default()
            },
            ..Metric::default()
        }
    }

    fn template(condition: &str) -> HookTemplateSpec {
        HookTemplateSpec { metrics: vec![metric(condition)], ..HookTemplateSpec::default() }
    }

    #[test]
    fn a_template_is_refused_with_the_words_of_hook_operator_check() {
        for bad in ["asInt(reslt) > 30", "asInt(result) >"] {
            let SpecVerdict::Invalid(message) = hook_template("bad", &template(bad), None) else {
                panic!("{bad} is admitted")
            };
            assert_eq!(Some(message), validate::template_refusal("bad", &template(bad)));
        }
        assert_eq!(hook_template("good", &template("asInt(result) > 30"), None), SpecVerdict::Valid);
        // A fixed template is admitted; a stored invalid one may still be relabelled.
        let stored = template("asInt(reslt) > 30");
        assert_eq!(hook_template("bad", &template("asInt(result) > 30"), Some(&stored)), SpecVerdict::Valid);
        assert_eq!(hook_template("bad", &stored, Some(&stored)), SpecVerdict::Unchanged);
        assert!(matches!(hook_template("bad", &stored, Some(&template("result == 1"))), SpecVerdict::Invalid(_)));
    }

    #[test]
    fn a_run_is_refused_unless_the_operator_makes_it() {
        let run = HookRunSpec { metrics: vec![metric("asInt(result) >")], ..HookRunSpec::default() };
        let SpecVerdict::Invalid(message) = hook_run("r", &run, false) else { panic!("admitted") };
        assert!(message.starts_with("invalid HookRun r: metrics[0] (webtest): successCondition"), "{message}");
        assert_eq!(hook_run("r", &run, true), SpecVerdict::Operator);
        let good = HookRunSpec { metrics: vec![metric("asInt(result) > 1")], ..HookRunSpec::default() };
        assert_eq!(hook_run("r", &good, false), SpecVerdict::Valid);
    }

    #[test]
    fn every_field_naming_a_template_is_listed() {
        let spec: GameDeploymentSpec = serde_json::from_value(serde_json::json!({
            "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
            "preDeleteUpdateStrategy": {"hook": {"templateName": "drain"}, "shadowHook": {"templateName": "trial"}},
            "preInplaceUpdateStrategy": {"hook": {"templateName": "drain"}},
            "updateStrategy": {"canary": {"steps": [{"partition": 1}, {"hook": {"templateName": "canary"}}]}},
            "scaleStrategy": {"scaleInPolicy": {"costProbe": {"templateName": "cost"}}},
        }))
        .expect("a GameDeployment spec");
        let named = named_templates(&spec);
        assert_eq!(named["drain"], ["preDeleteUpdateStrategy.hook", "preInplaceUpdateStrategy.hook"]);
        assert_eq!(named["trial"], ["preDeleteUpdateStrategy.shadowHook"]);
        assert_eq!(named["canary"], ["updateStrategy.canary.steps[1].hook"]);
        assert_eq!(named["cost"], ["scaleStrategy.scaleInPolicy.costProbe"]);
        assert_eq!(named.len(), 4);
        let warning = missing_template("default", "drain", &named["drain"]);
        assert_eq!(
            warning,
            "HookTemplate \"drain\" named by preDeleteUpdateStrategy.hook, preInplaceUpdateStrategy.hook does not \
             exist in namespace \"default\": until it is created, a pod that reaches this hook waits for it \
             (condition HookBlocked)"
        );
        assert!(missing_template("d", "trial", &named["trial"]).ends_with("reports it in an Event and holds nothing"));
        assert!(missing_template("d", "cost", &named["cost"]).contains("pods race in deletion order"));
    }
}
