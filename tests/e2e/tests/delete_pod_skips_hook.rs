//! The README's warning, proved: with the walkthrough's pre-delete hook configured, `kubectl delete pod` removes the
//! pod without any HookRun and the GameDeployment replaces it. This holds for GameDeployments that do not opt in to
//! the pod gate (annotation `gamedeployment.tkex.tencent.com/pod-gate: "true"`, README "Admission webhooks"): for
//! them the gate only covers the deletions the operator makes. An opted-in GameDeployment's pods are refused by the
//! pod-gate webhook and leave through their hook instead (`pod_gate_webhook.rs`, `sandbox.rs`). The gated way to
//! remove a given pod without the webhook is `spec.scaleStrategy.podsToDelete`
//! (`gate_integrity::pods_to_delete_consume_a_run_each`).

use std::sync::{Arc, Mutex};

use common::api::HookRun;
use e2e::gamedeployment::{Columns, pods, wait_columns};
use e2e::{Cluster, DEADLINE, wait_for};
use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher;

const NAME: &str = "test-gamedeployment";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_pod_skips_the_pre_delete_hook() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    // The hook would take 2 minutes (3 probes 60 s apart) at the walkthrough's pace.
    let _hooks = e2e::hook::start_operator_scaled(&cluster, "1", &[]);
    let _gd = e2e::gamedeployment::start_operator(&cluster);
    cluster.kubectl_ok(&["apply", "-f", "examples/hook-template-success.yaml"]).await;
    let manifest = std::fs::read_to_string(e2e::repo_root().join("examples/gamedeployment.yaml")).unwrap();
    let manifest = manifest.replace("replicas: 6", "replicas: 3").replace("minReadySeconds: 30", "minReadySeconds: 0");
    let file = cluster.dir().join("gd.yaml");
    std::fs::write(&file, manifest).unwrap();
    cluster.kubectl_ok(&["apply", "-f", &file.display().to_string()]).await;
    wait_columns(&cluster, NAME, Columns::new(3, 3, 3, 3, 3)).await;

    // Every HookRun that ever exists from now on is recorded.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    let recorder = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut events = watcher(runs, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(run) | watcher::Event::InitApply(run)) = event {
                    seen.lock().unwrap().push(run.metadata.name.unwrap_or_default());
                }
            }
        })
    };

    let victim = pods(&cluster, NAME).await.remove(0);
    let name = victim.metadata.name.clone().unwrap();
    let out = cluster.kubectl_ok(&["delete", "pod", &name, "--wait=false"]).await;
    println!("$ kubectl delete pod {name}\n{out}");
    wait_for("the pod to be gone and replaced", DEADLINE, || async {
        let now = pods(&cluster, NAME).await;
        let live = now.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count();
        (!now.iter().any(|p| p.metadata.uid == victim.metadata.uid) && live == 3).then_some(())
    })
    .await;
    let out = cluster.kubectl(&["get", "hookrun"]).await;
    println!("$ kubectl get hookrun\n{}{}", out.stdout, out.stderr);
    recorder.abort();
    let seen = seen.lock().unwrap().clone();
    assert!(seen.is_empty(), "no HookRun gated the deletion, none was created: {seen:?}");
    cluster.shutdown().await;
}
