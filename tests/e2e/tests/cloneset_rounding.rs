//! A percentage `maxUnavailable` resolves as Kruise resolves it for a CloneSet manifest (issue 48): Kruise's
//! `calculateDiffsWithExpectation` (openkruise/kruise `pkg/controller/cloneset/sync/cloneset_sync_utils.go`) calls
//! `GetValueFromIntOrPercent(maxUnavailable, replicas, maxSurge == 0)`, so without surge 20 % of 7 pods is 2 (1.4
//! rounded up). The operator rounded it down (1). A CloneSet with `InPlaceIfPossible`, `maxUnavailable: 20%`, no
//! surge and the `inPlaceUpdate` label handler (which holds each taken pod in `PreparingUpdate` until the test
//! releases it) takes 2 pods at once. The BCS type names keep the Deployment rule (rounded down): the compatibility
//! page lists it, `settings::tests::max_unavailable_percentages_round_as_kruise_for_cloneset_named_types`.

use e2e::gamedeployment::{Columns, Shape, apply, label, live_pods, manifest_shaped, start_operator, wait_columns};
use e2e::{Cluster, DEADLINE, wait_for};

const NAME: &str = "rounding";
const BLOCK_INPLACE: &str = "example.com/unready-blocker-inplace";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_percent_of_seven_without_surge_takes_two_pods_as_kruise() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let mut operator = start_operator(&cluster);
    let strategy = format!(
        "    maxUnavailable: \"20%\"\n    maxSurge: 0\n  lifecycle:\n    inPlaceUpdate:\n      labelsHandler:\n        {BLOCK_INPLACE}: \"true\"\n"
    );
    let shape = Shape { template_labels: &[(BLOCK_INPLACE, "true")], ..Shape::default() };
    let manifest = manifest_shaped(NAME, 7, "InPlaceIfPossible", &strategy, "python:3.5", shape);
    apply(&cluster, &manifest).await;
    wait_columns(&cluster, NAME, Columns::new(7, 7, 7, 7, 7)).await;
    e2e::gamedeployment::set_image(&cluster, "default", NAME, "python:3.6").await;
    // Nothing releases the taken pods: they stay in PreparingUpdate, and the budget shows in how many there are.
    let held = wait_for("2 pods taken (20% of 7, rounded up)", DEADLINE, || async {
        let held: Vec<String> = live_pods(&cluster, NAME)
            .await
            .iter()
            .filter(|p| label(p, "lifecycle.apps.kruise.io/state") == Some("PreparingUpdate"))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        (held.len() >= 2).then_some(held)
    })
    .await;
    assert_eq!(held.len(), 2, "no more than 2: {held:?}");
    assert!(operator.is_running());
    operator.kill().await;
    cluster.shutdown().await;
}
