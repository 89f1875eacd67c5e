//! `kubectl drain NODE --ignore-daemonsets` with the real kubectl, as on a cluster: the node is
//! cordoned, its pods are evicted through the Eviction API one at a time as their
//! PodDisruptionBudget allows (kubectl retries the 429s), replacements land on the other nodes,
//! and the drain completes once every pod is gone.

use crate::kubelet_support;

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kubelet_support::*;
use serde_json::json;

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref()?.node_name.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_evicts_through_the_budget_and_replacements_land_elsewhere() -> Result<()> {
    let sim = start().await?; // 3 nodes
    let dir = tempfile_dir("kubelet-drain")?;
    let kubeconfig = dir.join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig)?;
    let client = sim.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let owner = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "owner"}}))?)
        .await?;
    let uid = owner.metadata.uid.clone().context("uid")?;
    // Six pods pinned round-robin over the nodes, each "owned" by a controller (kubectl drain
    // refuses unreplicated pods); the test plays that controller and replaces evicted pods.
    let make = move |name: String, node: Option<String>| -> Result<Pod> {
        let mut spec = json!({"containers": [{"name": "c", "image": "python:latest"}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        Ok(serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "game"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "controller": true}]},
            "spec": spec}))?)
    };
    for i in 0..6 {
        pods.create(&PostParams::default(), &make(format!("game-{i}"), Some(format!("kube-sim-node-{}", i % 3 + 1)))?)
            .await?;
    }
    eventually("6 ready pods", || async {
        let l = pods.list(&ListParams::default()).await?;
        Ok((l.items.iter().filter(|p| is_ready(p)).count() == 6).then_some(()))
    })
    .await?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(
        json!({"metadata": {"name": "game"}, "spec": {"minAvailable": 5, "selector": {"matchLabels": {"app": "game"}}}}),
    )?;
    pdbs.create(&PostParams::default(), &pdb).await?;

    // The controller: whenever fewer than 6 pods are not terminating, create a replacement
    // (unpinned: the scheduler places it).
    let controller = {
        let pods = pods.clone();
        let make = make.clone();
        tokio::spawn(async move {
            let mut n = 6;
            loop {
                if let Ok(l) = pods.list(&ListParams::default()).await {
                    let live = l.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count();
                    for _ in live..6 {
                        if let Ok(p) = make(format!("game-{n}"), None) {
                            let _ = pods.create(&PostParams::default(), &p).await;
                        }
                        n += 1;
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        })
    };

    let output = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["drain", "kube-sim-node-1", "--ignore-daemonsets", "--timeout=120s"])
        .env("KUBECACHEDIR", dir.join("cache"))
        .output()
        .await
        .context("running kubectl")?;
    controller.abort();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!("kubectl drain failed:\n{stdout}\n{stderr}");
    }
    assert!(stdout.contains("node/kube-sim-node-1 cordoned"), "{stdout}");
    assert!(stdout.contains("evicting pod default/game-0"), "{stdout}");
    assert!(stdout.contains("node/kube-sim-node-1 drained"), "{stdout}");
    // With minAvailable 5 of 6 only one pod may be missing at a time: the second eviction waited
    // for the first replacement (kubectl printed the 429 and retried).
    assert!(
        stderr.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "kubectl retried a 429:\n{stderr}"
    );
    let node: Node = Api::<Node>::all(client.clone()).get("kube-sim-node-1").await?;
    assert_eq!(node.spec.and_then(|s| s.unschedulable), Some(true));
    let l = pods.list(&ListParams::default()).await?;
    let on_drained: Vec<&Pod> = l.items.iter().filter(|p| node_of(p).as_deref() == Some("kube-sim-node-1")).collect();
    assert!(on_drained.is_empty(), "pods left on the drained node: {on_drained:?}");
    let replacement_nodes: BTreeSet<String> = l
        .items
        .iter()
        .filter(|p| p.metadata.name.as_deref().is_some_and(|n| n >= "game-6"))
        .filter_map(node_of)
        .collect();
    assert!(!replacement_nodes.is_empty() && !replacement_nodes.contains("kube-sim-node-1"), "{replacement_nodes:?}");
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "pdb", "game"])
        .env("KUBECACHEDIR", dir.join("cache"))
        .output()
        .await?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("NAME"), "{table}");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn tempfile_dir(prefix: &str) -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}
