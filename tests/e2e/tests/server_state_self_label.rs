//! A game server labels its own pod (`examples/server-state/`): the example's RBAC (`rbac.yaml`) and its curl client
//! (`label-self.sh`), run as a pod would run it — a ServiceAccount token from TokenRequest in the token file, the
//! namespace in the namespace file, `POD_NAME` as the downward API sets it — against kube-sim's plain-HTTP loopback.
//!
//! - with the Role bound, the script sets the server-state label of its pod, and only that label changes;
//! - without the RoleBinding, the same token gets `403 Forbidden`, and the script exits 1 with the server's message;
//! - with `policy.yaml` too (kube-sim's ValidatingAdmissionPolicy, pod-bound tokens from `kubectl create token
//!   --bound-object-kind Pod`), the token sets its own pod's state and nothing else, of its pod or another;
//! - the gamedeployment-operator next to the policy updates and scales in servers that label themselves;
//! - the chart renders the same policy when `serverStatePolicy.enabled`.

use std::path::{Path, PathBuf};

use e2e::{Cluster, DEADLINE, repo_root, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;

const NS: &str = "games";
const KEY: &str = "gamedeployment.tkex.tencent.com/server-state";

/// What one run of `label-self.sh` did.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stderr: String,
}

/// The files a pod's ServiceAccount volume holds (token and namespace), written under the cluster's scratch directory.
pub fn service_account_files(cluster: &Cluster, name: &str, token: &str) -> PathBuf {
    let dir = cluster.dir().join(format!("sa-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), token).unwrap();
    std::fs::write(dir.join("namespace"), NS).unwrap();
    dir
}

/// Runs `examples/server-state/label-self.sh STATE` as pod `pod` would, with the ServiceAccount files in `sa`.
pub async fn label_self(cluster: &Cluster, sa: &Path, pod: &str, state: &str) -> Run {
    let out = tokio::process::Command::new("sh")
        .arg(repo_root().join("examples/server-state/label-self.sh"))
        .arg(state)
        .env("TOKEN_FILE", sa.join("token"))
        .env("NAMESPACE_FILE", sa.join("namespace"))
        .env("CA_FILE", sa.join("ca.crt"))
        .env("POD_NAME", pod)
        .env("APISERVER", cluster.sim().url())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .await
        .unwrap();
    Run { code: out.status.code(), stderr: String::from_utf8_lossy(&out.stderr).into_owned() }
}

/// A pod of the game-server account (a plain pod: the label is the game server's, not the operator's).
pub async fn game_server_pod(cluster: &Cluster, name: &str) -> Pod {
    let manifest = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "game"}},
        "spec": {"serviceAccountName": "game-server", "containers": [{"name": "server", "image": "game:1",
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]},
    });
    let path = cluster.dir().join(format!("{name}.json"));
    std::fs::write(&path, manifest.to_string()).unwrap();
    cluster.kubectl_ok(&["apply", "-f", path.to_str().unwrap()]).await;
    let api: Api<Pod> = Api::namespaced(cluster.client(), NS);
    // Running: the kubelet is done writing its spec (node) and labels.
    wait_for(&format!("pod {name} running"), DEADLINE, || async {
        let pod = api.get(name).await.ok()?;
        (pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(pod)
    })
    .await
}

pub async fn pod(cluster: &Cluster, name: &str) -> Pod {
    let api: Api<Pod> = Api::namespaced(cluster.client(), NS);
    wait_for(&format!("pod {name}"), DEADLINE, || async { api.get(name).await.ok() }).await
}

pub fn state(pod: &Pod) -> Option<String> {
    pod.metadata.labels.as_ref()?.get(KEY).cloned()
}

/// The namespace with `rbac.yaml` applied.
pub async fn with_rbac(cluster: &Cluster) {
    cluster.kubectl_ok(&["create", "namespace", NS]).await;
    cluster.kubectl_ok(&["apply", "-n", NS, "-f", "examples/server-state/rbac.yaml"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_rbac_lets_the_client_label_its_own_pod_and_nothing_without_the_binding() {
    let cluster = Cluster::start().await;
    with_rbac(&cluster).await;
    let before = game_server_pod(&cluster, "gs-0").await;
    let token = cluster.kubectl_ok(&["create", "token", "-n", NS, "game-server"]).await;
    let sa = service_account_files(&cluster, "gs-0", token.trim());

    let run = label_self(&cluster, &sa, "gs-0", "Idle").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    let after = pod(&cluster, "gs-0").await;
    assert_eq!(state(&after).as_deref(), Some("Idle"));
    let mut labels = after.metadata.labels.clone().unwrap();
    labels.remove(KEY);
    assert_eq!(Some(labels), before.metadata.labels, "only the server-state label changed");
    assert_eq!(after.spec, before.spec);

    let run = label_self(&cluster, &sa, "gs-0", "Bogus").await;
    assert_eq!(run.code, Some(2), "an unknown state is a usage error: {run:?}");

    cluster.kubectl_ok(&["delete", "rolebinding", "-n", NS, "game-server-state"]).await;
    let run = label_self(&cluster, &sa, "gs-0", "Allocated").await;
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "HTTP 403: pods \"gs-0\" is forbidden: User \"system:serviceaccount:{NS}:game-server\" cannot patch \
             resource \"pods\" in API group \"\" in the namespace \"{NS}\""
        )),
        "{run:?}"
    );
    assert_eq!(state(&pod(&cluster, "gs-0").await).as_deref(), Some("Idle"), "the refused patch changed nothing");
    cluster.shutdown().await;
}

/// `PATCH` of pod `pod` with a JSON merge patch (a JSON patch when `patch` is an array) and `token`, as any client of that token could send it: the status
/// code and the API server's message.
pub async fn raw_patch(cluster: &Cluster, token: &str, pod: &str, patch: serde_json::Value) -> (u16, String) {
    let content_type = if patch.is_array() { "application/json-patch+json" } else { "application/merge-patch+json" };
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-X", "PATCH", "-w", "\n%{http_code}", "-H", &format!("Content-Type: {content_type}")])
        .args(["-H", &format!("Authorization: Bearer {token}"), "--data", &patch.to_string()])
        .arg(format!("{}/api/v1/namespaces/{NS}/pods/{pod}", cluster.sim().url()))
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap();
    let body: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    (code.trim().parse().unwrap(), body["message"].as_str().unwrap_or_default().to_string())
}

/// A token of `account` bound to pod `pod` (`kubectl create token --bound-object-kind Pod`), as the kubelet
/// projects it into the pod.
pub async fn bound_token(cluster: &Cluster, account: &str, pod: &str) -> String {
    let out = cluster
        .kubectl_ok(&["create", "token", "-n", NS, account, "--bound-object-kind", "Pod", "--bound-object-name", pod])
        .await;
    out.trim().to_string()
}

/// With `policy.yaml` as well, a game server's token can set the server-state label of its own pod and do nothing
/// else: not label another pod, not change its image, another label, an annotation, nor use an unlisted value; a
/// token not bound to a pod is refused outright. Another account's pod-bound token (as an operator running in the
/// cluster has) is not matched by the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_lets_a_server_set_only_its_own_state() {
    let cluster = Cluster::start().await;
    with_rbac(&cluster).await;
    cluster.kubectl_ok(&["apply", "-f", "examples/server-state/policy.yaml"]).await;
    game_server_pod(&cluster, "gs-0").await;
    game_server_pod(&cluster, "gs-1").await;
    let token = bound_token(&cluster, "game-server", "gs-0").await;
    let sa = service_account_files(&cluster, "gs-0", &token);

    let run = label_self(&cluster, &sa, "gs-0", "Allocated").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(state(&pod(&cluster, "gs-0").await).as_deref(), Some("Allocated"));
    let run = label_self(&cluster, &sa, "gs-0", "Maintaining").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(state(&pod(&cluster, "gs-0").await).as_deref(), Some("Maintaining"));

    let denied = "ValidatingAdmissionPolicy 'game-server-state' with binding 'game-server-state' denied request";
    // Another server's pod.
    let run = label_self(&cluster, &sa, "gs-1", "WaitToBeDeleted").await;
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "HTTP 403: pods \"gs-1\" is forbidden: {denied}: a game server labels only its own pod (gs-0), not gs-1"
        )),
        "{run:?}"
    );
    assert_eq!(state(&pod(&cluster, "gs-1").await), None);
    // Anything else of its own pod, with the same token.
    let own = |patch: serde_json::Value| raw_patch(&cluster, &token, "gs-0", patch);
    let (code, message) =
        own(serde_json::json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "evil:1"}])).await;
    assert_eq!(code, 403, "{message}");
    assert!(message.ends_with("a game server does not change its pod's spec"), "{message}");
    let (code, message) = own(serde_json::json!({"metadata": {"labels": {"app": "other"}}})).await;
    assert_eq!(code, 403, "{message}");
    assert!(message.ends_with("a game server changes no label but gamedeployment.tkex.tencent.com/server-state"));
    let (code, message) = own(serde_json::json!({"metadata": {"annotations": {"a": "b"}}})).await;
    assert_eq!(code, 403, "{message}");
    assert!(
        message.ends_with("a game server changes no annotation, owner reference or finalizer of its pod"),
        "{message}"
    );
    let (code, message) = own(serde_json::json!({"metadata": {"labels": {KEY: "Bogus"}}})).await;
    assert_eq!(code, 403, "{message}");
    assert!(message.ends_with("must be one of Idle, Allocated, WaitToBeDeleted, Draining, Maintaining, not Bogus"));
    let after = pod(&cluster, "gs-0").await;
    assert_eq!(after.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("game:1"));
    assert_eq!(state(&after).as_deref(), Some("Maintaining"));
    // A token of the account bound to no pod.
    let unbound = cluster.kubectl_ok(&["create", "token", "-n", NS, "game-server"]).await;
    let (code, message) =
        raw_patch(&cluster, unbound.trim(), "gs-0", serde_json::json!({"metadata": {"labels": {KEY: "Idle"}}})).await;
    assert_eq!(code, 403, "{message}");
    assert!(
        message.ends_with(
            "a game server labels its pod with a token bound to that pod (a projected service-account token)"
        )
    );

    // Another account's pod-bound token (the shape of an in-cluster operator's) is not the policy's business.
    cluster.kubectl_ok(&["create", "serviceaccount", "-n", NS, "ops"]).await;
    cluster
        .kubectl_ok(&[
            "create",
            "rolebinding",
            "-n",
            NS,
            "ops-edit",
            "--clusterrole=edit",
            &format!("--serviceaccount={NS}:ops"),
        ])
        .await;
    let manifest = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ops-0", "namespace": NS},
        "spec": {"serviceAccountName": "ops", "containers": [{"name": "c", "image": "ops:1"}]}});
    let path = cluster.dir().join("ops-0.json");
    std::fs::write(&path, manifest.to_string()).unwrap();
    cluster.kubectl_ok(&["apply", "-f", path.to_str().unwrap()]).await;
    let ops = bound_token(&cluster, "ops", "ops-0").await;
    let (code, message) = raw_patch(
        &cluster,
        &ops,
        "gs-1",
        serde_json::json!({"metadata": {"labels": {"team": "x"}, "annotations": {"a": "b"}}}),
    )
    .await;
    assert_eq!(code, 200, "{message}");

    cluster.shutdown().await;
}

/// Next to the policy, the gamedeployment-operator runs game servers of the `game-server` account: one of them
/// labels itself `WaitToBeDeleted` with its pod-bound token through `label-self.sh`, an in-place update patches
/// every server's image (the same pods), and a scale-in takes the one that asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_updates_and_scales_in_servers_that_label_themselves_under_the_policy() {
    let cluster = Cluster::start().await;
    with_rbac(&cluster).await;
    cluster.kubectl_ok(&["apply", "-f", "examples/server-state/policy.yaml"]).await;
    cluster.install_crds().await;
    let _operator = e2e::gamedeployment::start_operator(&cluster);
    let shape = e2e::gamedeployment::Shape { service_account: Some("game-server"), ..Default::default() };
    let gd = e2e::gamedeployment::manifest_shaped("servers", 3, "InplaceUpdate", "", "game:1", shape);
    let path = cluster.dir().join("servers.yaml");
    std::fs::write(&path, gd).unwrap();
    cluster.kubectl_ok(&["apply", "-n", NS, "-f", path.to_str().unwrap()]).await;
    let api: Api<Pod> = Api::namespaced(cluster.client(), NS);
    let servers = || async {
        let list = api.list(&kube::api::ListParams::default().labels("app=servers")).await.ok()?;
        Some(list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect::<Vec<Pod>>())
    };
    let running = |n: usize, image: &'static str| {
        let servers = &servers;
        async move {
            let pods = servers().await?;
            let ready = pods.len() == n
                && pods.iter().all(|p| {
                    p.spec.as_ref().is_some_and(|s| s.containers[0].image.as_deref() == Some(image))
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        && p.status
                            .as_ref()
                            .and_then(|s| s.container_statuses.as_ref())
                            .is_some_and(|cs| cs.iter().all(|c| c.ready))
                });
            ready.then_some(pods)
        }
    };
    let pods = wait_for("3 servers running", DEADLINE, || running(3, "game:1")).await;
    let leaving = pods[1].metadata.name.clone().unwrap();
    let token = bound_token(&cluster, "game-server", &leaving).await;
    let sa = service_account_files(&cluster, &leaving, &token);
    let run = label_self(&cluster, &sa, &leaving, "WaitToBeDeleted").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    e2e::gamedeployment::set_image(&cluster, NS, "servers", "game:2").await;
    let pods = wait_for("3 servers updated in place", DEADLINE, || running(3, "game:2")).await;
    assert!(
        pods.iter().any(|p| p.metadata.name.as_deref() == Some(leaving.as_str())),
        "updated in place, not recreated"
    );
    cluster.kubectl_ok(&["scale", "-n", NS, "--replicas=2", "gamedeployment/servers"]).await;
    let pods = wait_for("2 servers", DEADLINE, || running(2, "game:2")).await;
    assert!(pods.iter().all(|p| p.metadata.name.as_deref() != Some(leaving.as_str())), "the server that asked went");
    cluster.shutdown().await;
}

/// The chart offers the example's policy (`serverStatePolicy.enabled`, off by default) with the game servers'
/// account from the values: rendered, it is `examples/server-state/policy.yaml` (the chart's labels added), and the
/// account name is checked by the values schema.
#[tokio::test]
async fn the_chart_renders_the_example_policy_when_asked() {
    const CHART: &str = "charts/gamedeployment-operators";
    let render = |values: serde_json::Value| async move {
        let out = e2e::helm(&["render", CHART, "--values", &values.to_string()]).await;
        let docs: Vec<serde_json::Value> = serde_json::from_str(&out).expect("rendered JSON");
        docs.into_iter()
            .filter(|d| {
                d["apiVersion"] == "admissionregistration.k8s.io/v1" && d["kind"] != "ValidatingWebhookConfiguration"
            })
            .collect::<Vec<_>>()
    };
    assert!(render(serde_json::json!({})).await.is_empty(), "off by default");
    let enabled = serde_json::json!({"serverStatePolicy": {"enabled": true}});
    e2e::helm(&["lint", CHART, "--values", &enabled.to_string()]).await;
    let mut rendered = render(enabled).await;
    for d in &mut rendered {
        let labels = d["metadata"].as_object_mut().unwrap().remove("labels").expect("the chart's labels");
        assert_eq!(labels["app.kubernetes.io/part-of"], "gamedeployment-operators", "{labels}");
    }
    let text = std::fs::read_to_string(repo_root().join("examples/server-state/policy.yaml")).unwrap();
    let example: Vec<serde_json::Value> =
        serde_yaml::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
    assert_eq!(rendered, example);
    let other = render(serde_json::json!({"serverStatePolicy": {"enabled": true, "serviceAccount": "gs"}})).await;
    let condition = other[0]["spec"]["matchConditions"][0]["expression"].as_str().unwrap();
    assert!(condition.ends_with("request.userInfo.username.endsWith(':gs')"), "{condition}");
    let bad = serde_json::json!({"serverStatePolicy": {"enabled": true, "serviceAccount": "x') || true || ('"}});
    e2e::helm_fails(&["lint", CHART, "--values", &bad.to_string()]).await;
}
