//! The operator's observability end to end: `/metrics` counts reconciles and pod actions, and a pass that has
//! nothing to do makes no write request at all.

use e2e::gamedeployment::{
    Columns, apply, manifest, metrics_address, scrape, start_operator, wait_columns, workload_writes,
};
use e2e::{Cluster, DEADLINE, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_op_passes_write_nothing_and_metrics_count_the_work() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let operator = start_operator(&cluster);
    let address = metrics_address(&operator).await;
    apply(&cluster, &manifest("quiet", 3, "InplaceUpdate", "", "python:latest")).await;
    wait_columns(&cluster, "quiet", Columns::new(3, 3, 3, 3, 3)).await;

    let settled = wait_for("the operator to go quiet", DEADLINE, || async {
        let first = scrape(address).await;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let second = scrape(address).await;
        (workload_writes(&first) == workload_writes(&second)).then_some(second)
    })
    .await;
    assert_eq!(settled.get("gamedeployment_pods_created_total{reason=\"replicas\"}"), Some(&3.0));
    assert!(settled.get("gamedeployment_reconciles_total{result=\"success\"}").is_some_and(|n| *n >= 1.0));
    let reconciles = settled.get("gamedeployment_reconciles_total{result=\"success\"}").copied().unwrap_or(0.0);

    // Touch the GameDeployment without changing what it asks for: a pass runs and writes nothing.
    cluster.kubectl_ok(&["annotate", "gamedeployment", "quiet", "example.com/touched=yes"]).await;
    let after = wait_for("a pass after the annotation", DEADLINE, || async {
        let now = scrape(address).await;
        let ran = now.get("gamedeployment_reconciles_total{result=\"success\"}").copied().unwrap_or(0.0) > reconciles;
        ran.then_some(now)
    })
    .await;
    assert_eq!(workload_writes(&after), workload_writes(&settled), "a no-op pass made write requests");
    assert_eq!(after.get("gamedeployment_status_writes_total"), settled.get("gamedeployment_status_writes_total"));
    cluster.shutdown().await;
}
