//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding (`admissionregistration.k8s.io/v1`): CEL
//! validations enforced on writes, refusals worded and coded as kube-apiserver's `ValidatingAdmissionPolicy` plugin.

use anyhow::Result;
use serde_json::{Value, json};

use crate::support::*;

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn policy(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("matchConstraints").is_none() {
        spec["matchConstraints"] = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]});
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": spec})
}

fn binding(name: &str, policy: &str, extra: Value) -> Value {
    let mut spec = json!({"policyName": policy, "validationActions": ["Deny"]});
    if let (Value::Object(s), Value::Object(e)) = (&mut spec, extra) {
        s.extend(e);
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name}, "spec": spec})
}

fn cm(name: &str, data: Value) -> Value {
    json!({"metadata": {"name": name}, "data": data})
}

async fn install(raw: &Raw, p: Value, b: Value) -> Result<()> {
    let r = raw.post(POLICIES, &p).await?;
    anyhow::ensure!(r.status == 201, "policy: {}", r.text);
    let r = raw.post(BINDINGS, &b).await?;
    anyhow::ensure!(r.status == 201, "binding: {}", r.text);
    Ok(())
}

/// A false validation refuses the write with `422 Invalid` (the default reason) or the validation's `reason`
/// (`Forbidden`: 403), the message `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy 'P' with binding
/// 'B' denied request: <message>` and that message as the one cause, as `celAdmissionController.Validate` words it;
/// `messageExpression` wins over `message`, and without either the message is `failed expression: <expression>`.
#[tokio::test]
async fn a_failed_validation_is_refused_as_the_real_plugin_refuses_it() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    install(
        &raw,
        policy("no-bad", json!({"validations": [
            {"expression": "!has(object.data) || !('k' in object.data) || object.data.k != 'bad'", "message": "k must not be bad"},
            {"expression": "!has(object.data) || !('f' in object.data)", "reason": "Forbidden",
             "messageExpression": "'f is ' + object.data.f"},
            {"expression": "!has(object.data) || !('z' in object.data)"},
        ]})),
        binding("no-bad-binding", "no-bad", json!({})),
    )
    .await?;
    let r = raw.post(CMS, &cm("c", json!({"k": "bad"}))).await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (422, Some("Invalid")), "{}", r.text);
    let cause = "ValidatingAdmissionPolicy 'no-bad' with binding 'no-bad-binding' denied request: k must not be bad";
    assert_eq!(r.body["message"], format!("configmaps \"c\" is forbidden: {cause}"));
    assert_eq!(r.body["details"], json!({"name": "c", "kind": "configmaps", "causes": [{"message": cause}]}));

    let r = raw.post(CMS, &cm("c", json!({"f": "x"}))).await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (403, Some("Forbidden")), "{}", r.text);
    assert_eq!(
        r.body["message"],
        "configmaps \"c\" is forbidden: ValidatingAdmissionPolicy 'no-bad' with binding 'no-bad-binding' denied \
         request: f is x"
    );
    let r = raw.post(CMS, &cm("c", json!({"z": "x"}))).await?;
    assert!(
        r.body["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("denied request: failed expression: !has(object.data) || !('z' in object.data)"),
        "{}",
        r.text
    );
    let r = raw.post(CMS, &cm("c", json!({"k": "good"}))).await?;
    assert_eq!(r.status, 201, "{}", r.text);
    // An update is admitted with the object it would store.
    let r = raw.put(&format!("{CMS}/c"), &cm("c", json!({"k": "bad"}))).await?;
    assert_eq!(r.status, 422, "{}", r.text);
    sim.shutdown().await;
    Ok(())
}

/// `matchConditions` (a false one skips the policy), `variables`, `oldObject`, `request` (`operation`,
/// `userInfo.username`), `failurePolicy` (an evaluation error refuses under `Fail`, is skipped under `Ignore`),
/// `validationActions` without `Deny` (not enforced) and the binding's `matchResources` narrowing the policy.
#[tokio::test]
async fn conditions_variables_old_objects_failure_policy_and_bindings() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("kube-sim-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,1001,\"system:masters\"\n")?;
    let sim = sim_with(kube_sim::SimConfig { kubelet: None, token_file: Some(tokens), ..Default::default() }).await?;
    let raw = Raw::new(&sim);
    install(
        &raw,
        policy(
            "frozen",
            json!({
                "matchConditions": [{"name": "alice-only", "expression": "request.userInfo.username == 'alice'"}],
                "variables": [{"name": "old", "expression": "oldObject == null ? {} : oldObject.data"}],
                "validations": [{"expression": "request.operation != 'UPDATE' || object.data == variables.old",
                                 "message": "frozen for alice"}],
            }),
        ),
        binding("frozen", "frozen", json!({})),
    )
    .await?;
    let alice = |method: &'static str, path: String, body: Value| {
        let raw = &raw;
        async move { raw.send_as("alice-token", method, &path, Some(&body)).await }
    };
    assert_eq!(alice("POST", CMS.into(), cm("a", json!({"k": "1"}))).await?.status, 201);
    let r = alice("PUT", format!("{CMS}/a"), cm("a", json!({"k": "2"}))).await?;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(r.body["message"].as_str().unwrap_or_default().ends_with("denied request: frozen for alice"));
    // The admin is not alice: the match condition is false, the policy does not apply.
    assert_eq!(raw.put(&format!("{CMS}/a"), &cm("a", json!({"k": "2"}))).await?.status, 200);

    // failurePolicy: an expression that cannot be evaluated.
    let broken = |name: &str, failure: &str| {
        policy(name, json!({"failurePolicy": failure, "validations": [{"expression": "object.data.missing == 'x'"}]}))
    };
    install(
        &raw,
        broken("broken-fail", "Fail"),
        binding(
            "broken-fail",
            "broken-fail",
            json!({"matchResources": {
        "objectSelector": {"matchLabels": {"broken": "fail"}}}}),
        ),
    )
    .await?;
    install(
        &raw,
        broken("broken-ignore", "Ignore"),
        binding(
            "broken-ignore",
            "broken-ignore",
            json!({"matchResources": {
        "objectSelector": {"matchLabels": {"broken": "ignore"}}}}),
        ),
    )
    .await?;
    let labelled =
        |name: &str, v: &str| json!({"metadata": {"name": name, "labels": {"broken": v}}, "data": {"k": "1"}});
    let r = raw.post(CMS, &labelled("b1", "fail")).await?;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(
        r.body["message"].as_str().unwrap_or_default().contains(
            "ValidatingAdmissionPolicy 'broken-fail' with binding 'broken-fail' denied request: expression \
             'object.data.missing == 'x'' resulted in error: "
        ),
        "{}",
        r.text
    );
    assert_eq!(raw.post(CMS, &labelled("b2", "ignore")).await?.status, 201);
    // The binding's objectSelector narrows the policy: an unlabelled ConfigMap is not checked.
    assert_eq!(raw.post(CMS, &cm("b3", json!({"k": "1"}))).await?.status, 201);

    // Bindings that only warn or audit are not enforced.
    install(
        &raw,
        policy("deny-all", json!({"validations": [{"expression": "false"}]})),
        binding("audit-only", "deny-all", json!({"validationActions": ["Audit"]})),
    )
    .await?;
    assert_eq!(raw.post(CMS, &cm("d", json!({}))).await?.status, 201);
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// What kube-sim cannot enforce is refused when the policy is stored: `paramKind`, and expressions that do not
/// compile (a real server keeps them and fails the requests they match).
#[tokio::test]
async fn policies_with_params_or_uncompilable_expressions_are_refused() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let r = raw
        .post(
            POLICIES,
            &policy(
                "p",
                json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "validations": [{"expression": "true"}]}),
            ),
        )
        .await?;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(r.body["message"].as_str().unwrap_or_default().contains("spec.paramKind: Forbidden"), "{}", r.text);
    let r = raw.post(POLICIES, &policy("q", json!({"validations": [{"expression": "object.data. =="}]}))).await?;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(r.body["message"].as_str().unwrap_or_default().contains("spec.validations[0].expression"), "{}", r.text);
    sim.shutdown().await;
    Ok(())
}
