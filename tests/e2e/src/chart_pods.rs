//! The Helm chart's operators as a cluster runs them: kube-sim in the test process maps the chart's image to the
//! workspace's operator binaries (`--chart-images`), so `helm install` of `charts/gamedeployment-operators` gets two
//! Deployments whose pods are real processes of those binaries — the chart's arguments, mounted Secrets, projected
//! ServiceAccount tokens, probes, PodDisruptionBudgets, and the webhook Service routed to its Ready endpoints.
//! Nothing else starts an operator.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_sim::SimConfig;
use serde_json::Value;

use crate::{Cluster, wait_for};

pub const CHART: &str = "charts/gamedeployment-operators";
pub const RELEASE: &str = "gdo";
pub const NS: &str = "kourse-system";
/// The hook-operator's Deployment (and ServiceAccount, Lease, PodDisruptionBudget) in release `gdo`.
pub const HOOK: &str = "gdo-gamedeployment-operators-hook";
/// The gamedeployment-operator's Deployment (and ServiceAccount, Lease) in release `gdo`.
pub const GAMEDEPLOYMENT: &str = "gdo-gamedeployment-operators-gamedeployment";
/// Both operator Deployments.
pub const OPERATORS: [&str; 2] = [HOOK, GAMEDEPLOYMENT];

/// Long enough for a rolling replacement of operator pods whose old replicas drain for the chart's shutdown period.
pub const ROLLOUT: Duration = Duration::from_secs(300);

/// kube-sim with three nodes running the chart's image as processes, with the kubelet's real grace periods (the
/// operators' drain period must not be cut short) and endpoints withdrawn one second after a pod stops being
/// Ready, as a cluster's endpoint propagation takes a moment.
pub async fn cluster() -> Cluster {
    // The pods run target/debug's binaries: bring them up to date first (a no-op when they are).
    crate::binary("hook-operator", "hook-operator");
    crate::binary("gamedeployment-operator", "gamedeployment-operator");
    let mut config = SimConfig { endpoint_propagation_delay: Duration::from_secs(1), ..SimConfig::default() };
    if let Some(kubelet) = config.kubelet.as_mut() {
        kubelet.chart_images = true;
        kubelet.grace_period_scale = 1.0;
        kubelet.nodes = 3;
    }
    Cluster::start_with(config).await
}

/// `helm install gdo charts/gamedeployment-operators -n kourse-system` with the chart's defaults plus `values`, then
/// gives kube-sim the client certificate the chart generated for the API server (as a cluster's admission
/// configuration names it), and waits until both Deployments are Available with every replica.
pub async fn install(cluster: &Cluster, values: Value) {
    cluster.kubectl_ok(&["create", "namespace", NS]).await;
    let kubeconfig = cluster.kubeconfig().display().to_string();
    let all = values.to_string();
    crate::helm(&["install", CHART, RELEASE, "--kubeconfig", &kubeconfig, "--namespace", NS, "--values", &all]).await;
    let client = secret(cluster, &format!("{GAMEDEPLOYMENT}-webhook-client")).await;
    if let (Some(cert), Some(key)) = (client.get("tls.crt"), client.get("tls.key")) {
        let host = format!("{GAMEDEPLOYMENT}-webhook.{NS}.svc");
        cluster.sim().set_admission_client_auth(kube_sim::ClientAuth::single(&host, cert.as_bytes(), key.as_bytes()));
    }
    for deployment in OPERATORS {
        wait_available(cluster, deployment).await;
    }
}

/// The decoded data of Secret `name` in the release namespace (empty when it does not exist).
pub async fn secret(cluster: &Cluster, name: &str) -> std::collections::BTreeMap<String, String> {
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(cluster.client(), NS);
    let Ok(Some(secret)) = api.get_opt(name).await else { return Default::default() };
    secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned())).collect()
}

/// Whether Deployment `d` has rolled out: its controller saw the newest spec, and every replica is updated and
/// available (each passed the chart's readiness probe), with the `Available` condition `True` — what `kubectl
/// rollout status` and `helm install --wait` wait for.
pub fn rolled_out(d: &Deployment) -> bool {
    let want = d.spec.replicas.unwrap_or(1);
    let Some(status) = &d.status else { return false };
    let available = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True"));
    status.observed_generation >= d.metadata.generation
        && status.updated_replicas == Some(want)
        && status.available_replicas == Some(want)
        && status.replicas == Some(want)
        && available
}

/// Waits until Deployment `name` of the release [`rolled_out`].
pub async fn wait_available(cluster: &Cluster, name: &str) -> Deployment {
    let api: Api<Deployment> = Api::namespaced(cluster.client(), NS);
    wait_for(&format!("deployment/{name} to be Available with every replica"), ROLLOUT, || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok().flatten().filter(rolled_out) }
    })
    .await
}

/// The live (not terminating) pods of operator Deployment `name`.
pub async fn operator_pods(cluster: &Cluster, name: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(cluster.client(), NS);
    let selector = format!("app.kubernetes.io/instance={RELEASE},app.kubernetes.io/name={}", app_name(name));
    let pods = api.list(&ListParams::default().labels(&selector)).await.map(|l| l.items).unwrap_or_default();
    pods.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// The `app.kubernetes.io/name` of an operator Deployment's pods.
pub fn app_name(deployment: &str) -> &'static str {
    if deployment == HOOK { "hook-operator" } else { "gamedeployment-operator" }
}

/// Prints the release's pods, Deployments and each operator's log (`kubectl logs deploy/…`), for a failing test.
pub async fn show(cluster: &Cluster) {
    let out = cluster.kubectl(&["-n", NS, "get", "deployments,replicasets,pods,endpoints,pdb", "-o", "wide"]).await;
    println!("$ kubectl -n {NS} get deployments,replicasets,pods,endpoints,pdb -o wide\n{}{}", out.stdout, out.stderr);
    for deployment in OPERATORS {
        let out = cluster.kubectl(&["-n", NS, "logs", &format!("deploy/{deployment}"), "--tail", "40"]).await;
        println!("$ kubectl -n {NS} logs deploy/{deployment} --tail 40\n{}{}", out.stdout, out.stderr);
    }
}
