//! The chart's security defaults, as the README's "Security" section states them: the hook-operator gets no
//! Secret access unless `hookOperator.secretArgs.enabled`, its `kubernetes` provider RBAC matches the kinds it is
//! told to allow, each operator reads and renews only its own Lease, and the NetworkPolicy is opt-in.

use e2e::helm;
use serde_json::{Value, json};

const CHART: &str = "charts/gamedeployment-operators";

async fn render(values: Value) -> Vec<Value> {
    let out =
        helm(&["render", CHART, "--release", "ops", "--namespace", "kourse-system", "--values", &values.to_string()])
            .await;
    serde_json::from_str(&out).expect("rendered JSON")
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter().find(|d| d["kind"] == kind && d["metadata"]["name"] == name).unwrap_or_else(|| panic!("{kind} {name}"))
}

fn hook_args(docs: &[Value]) -> Vec<String> {
    let deployment = named(docs, "Deployment", "ops-gamedeployment-operators-hook");
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn defaults_grant_no_secrets_and_only_the_own_lease() {
    let docs = render(json!({})).await;
    let hook = named(&docs, "ClusterRole", "ops-gamedeployment-operators-hook");
    let rules = hook["rules"].as_array().unwrap();
    assert!(!hook.to_string().contains("secrets"), "no Secret access by default: {hook}");
    assert!(!hook.to_string().contains("\"update\""), "status is patched, never updated: {hook}");
    let pods: Vec<&Value> = rules.iter().filter(|r| r["resources"] == json!(["pods"])).collect();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["verbs"], json!(["get", "patch"]));
    let args = hook_args(&docs);
    assert!(args.contains(&"--kubernetes-provider-kinds=pods".to_string()), "{args:?}");
    assert!(!args.contains(&"--secret-args".to_string()), "{args:?}");
    for operator in ["hook", "gamedeployment"] {
        let name = format!("ops-gamedeployment-operators-{operator}");
        let role = named(&docs, "Role", &format!("{name}-leader-election"));
        let rules = role["rules"].as_array().unwrap();
        for rule in rules {
            let verbs = rule["verbs"].as_array().unwrap();
            if verbs.iter().any(|v| v == "get" || v == "update") {
                assert_eq!(rule["resourceNames"], json!([name]), "{role}");
            } else {
                assert_eq!(verbs, &vec![json!("create")], "{role}");
            }
        }
    }
    assert!(!docs.iter().any(|d| d["kind"] == "NetworkPolicy"), "the NetworkPolicy is opt-in");
}

#[tokio::test]
async fn switches_add_exactly_what_they_say() {
    let docs = render(json!({"hookOperator": {
        "secretArgs": {"enabled": true},
        "kubernetesProviderKinds": ["pods", "tkex.tencent.com/gamedeployments"],
        "egress": {"denyCIDRs": ["10.1.0.0/16"], "allowCIDRs": ["169.254.10.0/24"]},
        "networkPolicy": {"enabled": true, "egressCIDRs": ["10.0.0.0/8"], "apiServerCIDRs": ["10.96.0.1/32"]},
    }}))
    .await;
    let hook = named(&docs, "ClusterRole", "ops-gamedeployment-operators-hook");
    let rules = hook["rules"].as_array().unwrap();
    assert!(rules.contains(&json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})), "{hook}");
    assert!(
        rules.contains(
            &json!({"apiGroups": ["tkex.tencent.com"], "resources": ["gamedeployments"], "verbs": ["get", "patch"]})
        ),
        "{hook}"
    );
    let args = hook_args(&docs);
    for want in [
        "--secret-args",
        "--kubernetes-provider-kinds=pods,tkex.tencent.com/gamedeployments",
        "--web-deny-cidr=10.1.0.0/16",
        "--web-allow-cidr=169.254.10.0/24",
    ] {
        assert!(args.contains(&want.to_string()), "{want} in {args:?}");
    }
    let policy = named(&docs, "NetworkPolicy", "ops-gamedeployment-operators-hook");
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert!(policy.to_string().contains("10.0.0.0/8") && policy.to_string().contains("10.96.0.1/32"), "{policy}");
}

/// The hook-operator evaluates what templates control in worker processes with hard bounds by default, and the
/// chart's memory limit holds the worst case: the operator's own ~60 MiB plus every worker (the normal ones and
/// the penalty lane's) holding an answer of `--max-body-bytes` (1 MiB), its memory budget and ~10 MiB of its own.
#[tokio::test]
async fn conditions_run_in_bounded_workers_that_fit_the_memory_limit() {
    let docs = render(json!({})).await;
    let args = hook_args(&docs);
    for flag in [
        "--condition-isolation=process",
        "--condition-timeout=1s",
        "--condition-memory-bytes=33554432",
        "--condition-threads=0",
        "--condition-penalty=5m",
    ] {
        assert!(args.contains(&flag.to_string()), "{flag} in {args:?}");
    }
    let limit = e2e::hook::chart_memory_limit();
    // --condition-threads=0 means 2 worker processes, plus the penalty lane's.
    let workers = 2 + 1;
    let worst = (60 << 20) + workers * ((32 << 20) + (1 << 20) + (10 << 20));
    assert!(worst <= limit, "{} MiB of workers and operator over the {} MiB limit", worst >> 20, limit >> 20);
    let docs = render(json!({"hookOperator": {"conditions": {"isolation": "thread", "workers": 4}}})).await;
    let args = hook_args(&docs);
    assert!(args.contains(&"--condition-isolation=thread".to_string()), "{args:?}");
    assert!(args.contains(&"--condition-threads=4".to_string()), "{args:?}");
}

/// Both operators run with mimalloc returning freed memory at once (`MIMALLOC_PURGE_DELAY=0`), as the evaluation
/// workers do: measured in `scripts/bench`, it lowers the operators' peak RSS at no measurable CPU cost.
#[tokio::test]
async fn both_operators_return_freed_memory_at_once() {
    let docs = render(json!({})).await;
    for name in ["ops-gamedeployment-operators-hook", "ops-gamedeployment-operators-gamedeployment"] {
        let env = &named(&docs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["env"];
        let purge = env.as_array().and_then(|vars| vars.iter().find(|v| v["name"] == "MIMALLOC_PURGE_DELAY"));
        assert_eq!(purge.map(|v| &v["value"]), Some(&json!("0")), "{name}: {env}");
    }
}
