//! Helm v4 (the Go SDK, through PyPI's `helm-python-sdk`) installs, upgrades, lists and
//! uninstalls a small chart on kube-sim. It exercises what Helm sends: protobuf release
//! Secrets, label-selected lists, server-side apply of the chart's objects, and watches for
//! `wait="watcher"`.
//!
//! The test creates a Python virtualenv under the cargo target directory on first use
//! (`python3 -m venv` + `pip install helm-python-sdk==0.2.2`); it needs PyPI to be reachable then.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};
use kube_sim::SimConfig;
use serde_json::{Value, json};

const HELM_SDK: &str = "helm-python-sdk==0.2.2";

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/helm")
}

/// The virtualenv's python, creating the venv if needed.
async fn python() -> Result<PathBuf> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kube-sim-helm-venv");
    let py = venv.join("bin/python");
    let ready = venv.join(".installed");
    if ready.exists() {
        return Ok(py);
    }
    let out = tokio::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .await
        .context("running python3 -m venv")?;
    if !out.status.success() {
        bail!("python3 -m venv failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::new(&py).args(["-m", "pip", "install", "--quiet", HELM_SDK]).output(),
    )
    .await
    .context("pip install timed out")?
    .context("running pip")?;
    if !out.status.success() {
        bail!(
            "pip install {HELM_SDK} failed (is PyPI reachable?):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::write(&ready, HELM_SDK)?;
    Ok(py)
}

#[tokio::test]
async fn helm_installs_upgrades_lists_and_uninstalls_a_chart() -> Result<()> {
    let py = python().await?;
    let sim = kube_sim::start(SimConfig { kubelet: None, ..SimConfig::default() }).await?;
    let dir = std::env::temp_dir().join(format!("kube-sim-helm-{}", sim.addr().port()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig)?;
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new(&py)
            .arg(testdata().join("release.py"))
            .arg(&kubeconfig)
            .arg(testdata().join("kube-sim-demo"))
            .env("HOME", &dir)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("helm script timed out")??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("helm script failed:\n{stdout}\n{stderr}");
    }
    let steps: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let step = |name: &str| steps.iter().find(|s| s["step"] == name).map(|s| s["value"].clone()).unwrap_or(Value::Null);
    assert_eq!(step("install"), json!({"name": "demo", "revision": 1, "status": "deployed"}));
    assert_eq!(step("list"), json!([{"name": "demo", "revision": 1, "status": "deployed"}]));
    assert_eq!(step("upgrade"), json!({"name": "demo", "revision": 2, "status": "deployed"}));
    assert_eq!(step("values"), json!({"greeting": "bye", "replicas": 3}));
    assert_eq!(step("history"), json!([1, 2]));
    assert_eq!(step("install-wait"), json!({"name": "waited", "revision": 1, "status": "deployed"}));
    assert_eq!(step("list-after-uninstall"), json!(["demo"]));

    // What Helm left in the cluster, seen through kube-rs.
    let client = sim.client().await;
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let releases = secrets.list(&ListParams::default().labels("owner=helm,name=demo")).await?;
    let mut revisions: Vec<String> =
        releases.items.iter().filter_map(|s| s.metadata.labels.as_ref()?.get("version").cloned()).collect();
    revisions.sort();
    assert_eq!(revisions, vec!["1", "2"]);
    assert!(releases.items.iter().all(|s| s.type_.as_deref() == Some("helm.sh/release.v1")));
    let cm: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let config = cm.get("demo-config").await?;
    assert_eq!(config.data.unwrap_or_default().get("greeting").map(String::as_str), Some("bye"));
    let annotations = config.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get("meta.helm.sh/release-name").map(String::as_str), Some("demo"));
    assert!(
        config.metadata.managed_fields.unwrap_or_default().iter().any(|m| m.operation.as_deref() == Some("Apply")),
        "Helm 4 uses server-side apply"
    );
    let deploys: Api<Deployment> = Api::default_namespaced(client.clone());
    assert_eq!(deploys.get("demo-web").await?.spec.replicas, Some(3));
    assert!(cm.get_opt("waited-config").await?.is_none(), "uninstall deleted the release's objects");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
