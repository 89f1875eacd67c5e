//! The `exec` provider (declared by the kourse API, never implemented by BCS nor here) is refused by the CRD
//! itself: a rule on `provider` with a message that says what to use instead, in both the HookTemplate and the
//! HookRun schema, so `kubectl apply` of such a template fails on a real API server instead of every run of it
//! ending `Error` later. (kube-sim records but does not evaluate CEL rules other than `self == oldSelf`; the
//! hook-operator's own validation refuses it there: `hook-operator/src/engine/validate.rs`.)

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{JSONSchemaProps, JSONSchemaPropsOrArray};

fn provider_schema(kind: &str) -> JSONSchemaProps {
    let (_, crd) = common::crd::all().into_iter().find(|(_, crd)| crd.spec.names.kind == kind).expect("CRD");
    let root = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.clone()).expect("schema");
    let prop = |s: &JSONSchemaProps, name: &str| s.properties.as_ref().and_then(|p| p.get(name)).cloned().expect(name);
    let metrics = prop(&prop(&root, "spec"), "metrics");
    let Some(JSONSchemaPropsOrArray::Schema(metric)) = metrics.items else { panic!("metrics items") };
    prop(&metric, "provider")
}

#[test]
fn the_crds_refuse_the_exec_provider_and_say_what_to_use() {
    for kind in ["HookTemplate", "HookRun"] {
        let provider = provider_schema(kind);
        let rules = provider.x_kubernetes_validations.clone().unwrap_or_default();
        let rule = rules.iter().find(|r| r.rule == "!has(self.exec)").unwrap_or_else(|| panic!("{kind}: {rules:?}"));
        let message = rule.message.as_deref().unwrap_or_default();
        assert!(message.contains("exec") && message.contains("web") && message.contains("kubernetes"), "{message}");
        assert!(provider.properties.as_ref().is_some_and(|p| p.contains_key("exec")), "{kind}: exec stays declared");
    }
}
