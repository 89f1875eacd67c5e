//! Server state with surge completes (issue 48): a rollout with `maxSurge: 1` and one server in `Maintaining` used to
//! settle with one pod too many for good ("scaling in to 4 pods"), and `kubectl gd status` never exited 0. The
//! quarantined server is one of the replicas: the surge pod is created, serves while the other servers move, and is
//! gone when they are done; `kubectl gd status` exits 0 naming the quarantined server, which keeps its image. No
//! hooks, 4 replicas, for both update types (in place and recreate).
//!
//! Kruise has no quarantine; its `calculateDiffsWithExpectation` (`pkg/controller/cloneset/sync/cloneset_sync_utils.go`)
//! asks for surge only while old pods beyond the partition are left to update (`updateOldDiff` against
//! `updateNewDiff`): a pod the rollout will never move asks for none here either.

use crate::kubectl_gd::kubectl_gd;
use crate::server_state::quarantine_second;

use common::api::GameDeployment;
use e2e::gamedeployment::{Columns, apply, image, live_pods, manifest, pods, set_image, start_operator, wait_columns};
use e2e::{Cluster, DEADLINE, wait_for};
use kube::Api;

const NAME: &str = "quarantine-surge";

async fn completes_around_a_maintaining_server(strategy: &str) {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut operator = start_operator(&cluster);
    apply(&cluster, &manifest(NAME, 4, strategy, "    maxUnavailable: 0\n    maxSurge: 1\n", "python:latest")).await;
    wait_columns(&cluster, NAME, Columns::new(4, 4, 4, 4, 4)).await;
    let kept = quarantine_second(&cluster, NAME).await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    wait_for("the quarantined server to be counted", DEADLINE, || async {
        let status = api.get(NAME).await.ok()?.status?;
        (status.server_states.get("Maintaining") == Some(&1)).then_some(())
    })
    .await;

    set_image(&cluster, "default", NAME, "python:3.6").await;
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "3m"]).await;
    assert_eq!(out.code, 0, "{strategy}: the rollout completes around the quarantined server: {out:?}");
    let said = format!("1 server in Maintaining is left as it is: {kept}");
    assert!(out.stdout.contains(&said) || out.stderr.contains(&said), "{strategy}: {out:?}");
    // The surge pod is gone: 4 pods, none terminating, the quarantined one on its old image.
    let live = wait_for("4 pods and no more", DEADLINE, || async {
        let all = pods(&cluster, NAME).await;
        let live = live_pods(&cluster, NAME).await;
        (all.len() == 4 && live.len() == 4).then_some(live)
    })
    .await;
    for pod in &live {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let want = if name == kept { "python:latest" } else { "python:3.6" };
        assert_eq!(image(pod), Some(want), "{strategy}: {name}");
    }
    let status = api.get(NAME).await.expect("the GameDeployment").status.unwrap_or_default();
    assert_eq!((status.replicas, status.updated_replicas, status.available_replicas), (4, 3, 3), "{status:?}");
    assert!(operator.is_running());
    operator.kill().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_rollout_with_surge_completes_around_a_maintaining_server() {
    completes_around_a_maintaining_server("InplaceUpdate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreate_rollout_with_surge_completes_around_a_maintaining_server() {
    completes_around_a_maintaining_server("RollingUpdate").await;
}
