//! The Helm chart: lint (Helm v4, strict), render with least privilege and hardened pods, and a real
//! install / upgrade / uninstall into kube-sim.

use e2e::{Cluster, DEADLINE, helm, helm_fails, wait_for};
use serde_json::{Value, json};

const CHART: &str = "charts/gamedeployment-operators";

async fn render(values: Value) -> Vec<Value> {
    let out = helm(&["render", CHART, "--values", &values.to_string()]).await;
    serde_json::from_str(&out).expect("rendered JSON")
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

#[tokio::test]
async fn chart_lints_clean() {
    helm(&["lint", CHART]).await;
    helm(&["lint", CHART, "--values", r#"{"watchNamespace":"games","hookOperator":{"enabled":false}}"#]).await;
}

/// `values.schema.json` makes Helm itself refuse what the chart would silently ignore: a misspelt key, a wrong type,
/// a value outside its set; `helm lint` and `helm install` both fail and name the key.
#[tokio::test]
async fn misspelt_or_mistyped_values_fail_lint_and_install() {
    let wrong = [
        (json!({"gamedeploymentOperator": {"replica": 2}}), "replica"),
        (json!({"gamedeploymentOperator": {"webhook": {"failurepolicy": "Fail"}}}), "failurepolicy"),
        (json!({"hookOperator": {"concurrency": "eight"}}), "concurrency"),
        (json!({"logFormat": "yaml"}), "logFormat"),
        (json!({"gamedeploymentOperator": {"webhook": {"failurePolicy": "Sometimes"}}}), "failurePolicy"),
        (json!({"hookOperator": {"conditions": {"isolation": "container"}}}), "isolation"),
    ];
    for (values, key) in &wrong {
        let error = helm_fails(&["lint", CHART, "--values", &values.to_string()]).await;
        assert!(error.contains(key), "lint of {values} does not name {key}:\n{error}");
    }
    // Every documented form is accepted: one policy for the three gate webhooks, or one each; and neither makes Helm
    // warn (issue 49: with a map as the default, the single value printed "cannot overwrite table with non table").
    helm(&["lint", CHART, "--values", r#"{"gamedeploymentOperator":{"webhook":{"failurePolicy":"Fail"}}}"#]).await;
    for values in [
        r#"{"gamedeploymentOperator":{"webhook":{"failurePolicy":"Fail"}}}"#,
        r#"{"gamedeploymentOperator":{"webhook":{"failurePolicy":{"podGate":"Ignore","hookValidation":"Fail"}}}}"#,
    ] {
        let out = tokio::process::Command::new(e2e::helm_python())
            .arg(e2e::repo_root().join("tests/e2e/helm/chart.py"))
            .args(["render", CHART, "--values", values])
            .current_dir(e2e::repo_root())
            .output()
            .await
            .expect("python runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !stderr.contains("warning"), "{values}: {stderr}");
    }
    helm(&["lint", CHART, "--values", r#"{"gamedeploymentOperator":{"podDisruptionBudget":{"minAvailable":"50%"}}}"#])
        .await;
    let cluster = Cluster::start().await;
    let kubeconfig = cluster.kubeconfig().to_str().unwrap().to_string();
    let (values, key) = &wrong[0];
    let error = helm_fails(&[
        "install",
        CHART,
        "schema-test",
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        "default",
        "--values",
        &values.to_string(),
    ])
    .await;
    assert!(error.contains(key), "install with {values} does not name {key}:\n{error}");
    let releases = helm(&["list", "--kubeconfig", &kubeconfig, "--namespace", "default"]).await;
    assert_eq!(releases.trim(), "[]", "nothing was installed");
    cluster.shutdown().await;
}

#[tokio::test]
async fn rendered_pods_are_hardened_and_rbac_has_no_wildcards() {
    let docs = render(json!({})).await;
    let deployments = of_kind(&docs, "Deployment");
    assert_eq!(deployments.len(), 2);
    for d in &deployments {
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{}", d["metadata"]["name"]);
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        let args: Vec<&str> = c["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(args.contains(&"--leader-elect"), "{args:?}");
        assert!(args.iter().any(|a| a.starts_with("--concurrency=")), "{args:?}");
    }
    for role in of_kind(&docs, "ClusterRole").into_iter().chain(of_kind(&docs, "Role")) {
        for rule in role["rules"].as_array().unwrap() {
            for field in ["apiGroups", "resources", "verbs"] {
                let values = rule[field].as_array().unwrap();
                assert!(!values.iter().any(|v| v == "*"), "wildcard in {}: {rule}", role["metadata"]["name"]);
            }
        }
    }
}

#[tokio::test]
async fn values_switch_scope_and_operators() {
    let docs = render(json!({"watchNamespace": "games", "gamedeploymentOperator": {"readNodes": false}})).await;
    assert!(of_kind(&docs, "ClusterRole").is_empty(), "namespace scope must not create ClusterRoles");
    let roles = of_kind(&docs, "Role");
    assert!(roles.iter().any(|r| r["metadata"]["namespace"] == "games"));
    let args = &of_kind(&docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(args.as_array().unwrap().iter().any(|a| a == "--namespace=games"), "{args}");

    let docs = render(json!({"hookOperator": {"enabled": false}})).await;
    let names: Vec<&str> = docs.iter().filter_map(|d| d["metadata"]["name"].as_str()).collect();
    assert!(!names.iter().any(|n| n.contains("-hook")), "{names:?}");
    assert_eq!(of_kind(&docs, "Deployment").len(), 1);

    let docs =
        render(json!({"logFormat": "json", "hookOperator": {"replicas": 2, "nodeSelector": {"pool": "ops"}}})).await;
    let hook = of_kind(&docs, "Deployment")
        .into_iter()
        .find(|d| d["metadata"]["name"].as_str().unwrap().ends_with("-hook"))
        .unwrap();
    assert_eq!(hook["spec"]["replicas"], 2);
    assert_eq!(hook["spec"]["template"]["spec"]["nodeSelector"]["pool"], "ops");
    assert!(
        hook["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--log-format=json")
    );
}

/// The key that signs pod HookRuns' attempt stamps: a Secret with a random key, mounted and named by
/// `--hookrun-key-file`; or a Secret of the user's own (`gamedeploymentOperator.hookRunKey.existingSecret`).
#[tokio::test]
async fn the_hookrun_key_secret_is_made_or_brought_and_mounted() {
    let key_volume = |docs: &[Value]| -> (Vec<String>, Value) {
        let gd = of_kind(docs, "Deployment")
            .into_iter()
            .find(|d| d["metadata"]["name"].as_str().unwrap().ends_with("-gamedeployment"))
            .cloned()
            .unwrap();
        let pod = &gd["spec"]["template"]["spec"];
        let args = pod["containers"][0]["args"].as_array().unwrap().iter().filter_map(|a| a.as_str()).map(String::from);
        let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "hookrun-key").cloned().unwrap();
        (args.collect(), volume)
    };
    let docs = render(json!({})).await;
    let secret = docs
        .iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"].as_str().unwrap().ends_with("-signing-key"))
        .expect("the chart makes the key Secret");
    // 48 random characters and a newline, base64: 68 characters.
    assert_eq!(secret["data"]["keys"].as_str().unwrap().len(), 68, "{secret}");
    let (args, volume) = key_volume(&docs);
    assert!(args.contains(&"--hookrun-key-file=/etc/gamedeployment-operator/hookrun-key/keys".to_string()), "{args:?}");
    assert_eq!(volume["secret"]["secretName"], secret["metadata"]["name"]);

    let docs = render(json!({"gamedeploymentOperator": {"hookRunKey": {"existingSecret": "my-keys"}}})).await;
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"] == "Secret" && d["metadata"]["name"].as_str().unwrap().ends_with("-signing-key"))
    );
    assert_eq!(key_volume(&docs).1["secret"]["secretName"], "my-keys");
}

#[tokio::test(flavor = "multi_thread")]
async fn install_upgrade_uninstall_on_kube_sim() {
    let cluster = Cluster::start().await;
    let kc = cluster.kubeconfig().to_str().unwrap().to_string();
    cluster.kubectl_ok(&["create", "namespace", "kourse-system"]).await;
    let common = ["--kubeconfig", kc.as_str(), "--namespace", "kourse-system"];

    let mut install = vec!["install", CHART, "ops"];
    install.extend(common);
    helm(&install).await;

    // The CRDs from the chart's crds/ are registered and served.
    for crd in ["gamedeployments.tkex.tencent.com", "hooktemplates.tkex.tencent.com", "hookruns.tkex.tencent.com"] {
        cluster.kubectl_ok(&["get", "crd", crd]).await;
    }
    wait_for("gamedeployments to be served", DEADLINE, || async {
        cluster.kubectl(&["get", "gamedeployments", "-A"]).await.success.then_some(())
    })
    .await;
    let deploy = cluster
        .kubectl_ok(&["-n", "kourse-system", "get", "deployment", "ops-gamedeployment-operators-hook", "-o", "json"])
        .await;
    let deploy: Value = serde_json::from_str(&deploy).unwrap();
    assert_eq!(deploy["spec"]["replicas"], 2, "two replicas by default (issue 35)");
    for object in [
        "clusterrole/ops-gamedeployment-operators-gamedeployment",
        "clusterrolebinding/ops-gamedeployment-operators-hook",
        "role/ops-gamedeployment-operators-hook-leader-election",
        "serviceaccount/ops-gamedeployment-operators-gamedeployment",
        "service/ops-gamedeployment-operators-hook-metrics",
    ] {
        cluster.kubectl_ok(&["-n", "kourse-system", "get", object]).await;
    }
    // The HookRun key is made on install and kept on upgrade (`lookup`): a new key would orphan the runs of held pods.
    let key_of = || async {
        let secret = "secret/ops-gamedeployment-operators-gamedeployment-signing-key";
        cluster.kubectl_ok(&["-n", "kourse-system", "get", secret, "-o", "jsonpath={.data.keys}"]).await
    };
    let key = key_of().await;
    assert_eq!(key.len(), 68, "{key}");
    let mut list = vec!["list"];
    list.extend(common);
    assert!(helm(&list).await.contains("\"ops\""));

    let mut upgrade =
        vec!["upgrade", CHART, "ops", "--values", r#"{"hookOperator":{"replicas":2},"logFormat":"json"}"#];
    upgrade.extend(common);
    helm(&upgrade).await;
    let deploy = cluster
        .kubectl_ok(&["-n", "kourse-system", "get", "deployment", "ops-gamedeployment-operators-hook", "-o", "json"])
        .await;
    let deploy: Value = serde_json::from_str(&deploy).unwrap();
    assert_eq!(deploy["spec"]["replicas"], 2);
    let args = deploy["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--log-format=json"), "{args}");
    assert_eq!(key_of().await, key, "the HookRun key survives the upgrade");

    let mut uninstall = vec!["uninstall", "ops"];
    uninstall.extend(common);
    helm(&uninstall).await;
    wait_for("the release's objects to be deleted", DEADLINE, || async {
        let out = cluster.kubectl(&["-n", "kourse-system", "get", "deployments", "-o", "name"]).await;
        (out.success && out.stdout.trim().is_empty()).then_some(())
    })
    .await;
    // Helm keeps CRDs on uninstall (so custom resources survive); that is the documented Helm policy.
    cluster.kubectl_ok(&["get", "crd", "gamedeployments.tkex.tencent.com"]).await;
    cluster.shutdown().await;
}

/// The image is not built here (no container engine), so what ties the chart to it is checked instead: each
/// Deployment runs a binary the `Dockerfile` copies into the image, under the user the image declares, and the
/// binary of that name — the one the tests run — accepts every flag the chart gives it (`--help` after them: the
/// parser rejects an unknown flag or a malformed value before it reaches `--help`).
#[tokio::test]
async fn the_chart_runs_the_image_s_binaries_with_flags_they_accept() {
    let dockerfile = std::fs::read_to_string(e2e::repo_root().join("Dockerfile")).expect("the Dockerfile");
    let docs = render(json!({})).await;
    let deployments = of_kind(&docs, "Deployment");
    assert_eq!(deployments.len(), 2);
    for d in deployments {
        let pod = &d["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let command = container["command"].as_array().expect("a command");
        let path = command[0].as_str().expect("a path");
        assert!(dockerfile.contains(&format!("COPY --from=build {path} {path}")), "{path} is not in the image");
        assert!(dockerfile.contains("USER 65532:65532"));
        assert_eq!(pod["securityContext"]["runAsUser"].as_i64().or(Some(65532)), Some(65532), "{pod}");
        let name = path.trim_start_matches('/');
        let binary = e2e::binary(name, name);
        let args: Vec<&str> = container["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        let out = tokio::process::Command::new(&binary).args(&args).arg("--help").output().await.expect("runs");
        assert!(
            out.status.success(),
            "{name} refuses the chart's flags {args:?}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
