//! Two operator replicas with `--leader-elect`: only the Lease holder reconciles (`gamedeployment_leader` 1; the
//! standby is Ready too — readiness means "can do its job now", and a standby's job is to stand by, so a rollout of
//! the operator can proceed); when the leader dies the other takes over and carries on.

use e2e::gamedeployment::{Columns, apply, http_status, manifest, nth_metrics_address, scrape, wait_columns};
use e2e::{Cluster, DEADLINE, FAST_ELECTION, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_standby_takes_over() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let args: Vec<&str> = FAST_ELECTION.to_vec();
    let mut first = cluster.operator(
        "gamedeployment-operator",
        "gamedeployment-operator",
        &[&args[..], &["--leader-elect-identity", "first"]].concat(),
    );
    // Both replicas log to the same file, in start order.
    let first_address = nth_metrics_address(&first, 0).await;
    let leads = |address| async move { scrape(address).await.get("gamedeployment_leader").copied() == Some(1.0) };
    wait_for("the first replica to lead", DEADLINE, || async { leads(first_address).await.then_some(()) }).await;
    assert_eq!(http_status(first_address, "/readyz").await, Some(200), "the leader is ready");

    let second = cluster.operator(
        "gamedeployment-operator",
        "gamedeployment-operator",
        &[&args[..], &["--leader-elect-identity", "second"]].concat(),
    );
    let second_address = nth_metrics_address(&second, 1).await;
    wait_for("the standby to serve /healthz", DEADLINE, || async {
        (http_status(second_address, "/healthz").await == Some(200)).then_some(())
    })
    .await;
    wait_for("the standby to be ready", DEADLINE, || async {
        (http_status(second_address, "/readyz").await == Some(200)).then_some(())
    })
    .await;
    assert!(!leads(second_address).await, "the standby does not lead");

    apply(&cluster, &manifest("led", 2, "InplaceUpdate", "", "python:latest")).await;
    wait_columns(&cluster, "led", Columns::new(2, 2, 2, 2, 2)).await;
    let holder =
        cluster.kubectl_ok(&["get", "lease", "gamedeployment-operator", "-o", "jsonpath={.spec.holderIdentity}"]).await;
    assert_eq!(holder, "first");

    first.kill().await;
    let killed = std::time::Instant::now();
    wait_for("the standby to take over", DEADLINE, || async { leads(second_address).await.then_some(()) }).await;
    eprintln!("standby took over after {:?}", killed.elapsed());
    cluster.kubectl_ok(&["scale", "--replicas=4", "gamedeployment/led"]).await;
    wait_columns(&cluster, "led", Columns::new(4, 4, 4, 4, 4)).await;
    let holder =
        cluster.kubectl_ok(&["get", "lease", "gamedeployment-operator", "-o", "jsonpath={.spec.holderIdentity}"]).await;
    assert_eq!(holder, "second");
    drop(second);
    cluster.shutdown().await;
}
