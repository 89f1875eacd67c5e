//! `hookPolicy` `Rollback` is a canary step's `onFailure` only: the GameDeployment CRD refuses it on the pod hooks
//! (`preDeleteUpdateStrategy`, `preInplaceUpdateStrategy`, `postInplaceUpdateStrategy`) and as a canary step's
//! `onTimeout`, with a rule whose message says what to use instead. (kube-sim records but does not evaluate these
//! CEL rules; the gamedeployment-operator refuses the same specs itself with `FailedUpdate`/`InvalidSpec`:
//! `planner::settings::tests::rollback_is_refused_outside_a_canary_steps_on_failure`.)

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{JSONSchemaProps, JSONSchemaPropsOrArray};

fn prop(s: &JSONSchemaProps, name: &str) -> JSONSchemaProps {
    s.properties.as_ref().and_then(|p| p.get(name)).cloned().unwrap_or_else(|| panic!("{name}"))
}

fn rules(s: &JSONSchemaProps) -> Vec<(String, String)> {
    let rules = s.x_kubernetes_validations.clone().unwrap_or_default();
    rules.into_iter().map(|r| (r.rule, r.message.unwrap_or_default())).collect()
}

#[test]
fn the_crd_refuses_rollback_outside_a_canary_steps_on_failure() {
    let (_, crd) = common::crd::all().into_iter().find(|(_, c)| c.spec.names.kind == "GameDeployment").expect("CRD");
    let root = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.clone()).expect("schema");
    let spec = prop(&root, "spec");
    for strategy in ["preDeleteUpdateStrategy", "preInplaceUpdateStrategy", "postInplaceUpdateStrategy"] {
        let rules = rules(&prop(&spec, strategy));
        assert!(
            rules.iter().any(|(rule, message)| rule.contains("self.hookPolicy.onFailure != 'Rollback'")
                && rule.contains("self.hookPolicy.onTimeout != 'Rollback'")
                && message.contains("only accepted in a canary step's hookPolicy.onFailure")),
            "{strategy}: {rules:?}"
        );
    }
    let steps = prop(&prop(&prop(&spec, "updateStrategy"), "canary"), "steps");
    let Some(JSONSchemaPropsOrArray::Schema(step)) = steps.items else { panic!("steps items") };
    let rules = rules(&step);
    assert!(rules.iter().any(|(rule, _)| rule.contains("self.hookPolicy.onTimeout != 'Rollback'")), "{rules:?}");
    assert!(!rules.iter().any(|(rule, _)| rule.contains("onFailure")), "onFailure: Rollback is accepted: {rules:?}");
    let policy = prop(&step, "hookPolicy");
    let values = prop(&policy, "onFailure").enum_.unwrap_or_default();
    assert!(values.iter().any(|v| v.0 == serde_json::json!("Rollback")), "{values:?}");
}
