//! The harness's watch-based waits (`e2e::observe`): a state that is gone before anyone polls for it is still
//! observed, because the watch started before the action records every version in the API's order.

use std::time::Duration;

use e2e::observe::Observer;
use e2e::{Cluster, DEADLINE};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": {"state": value},
    }))
    .expect("a ConfigMap")
}

/// An object created, changed and deleted before the test looks: a poll finds nothing, the observer started
/// before the action sees each version (and the deletion), in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_gone_before_the_test_looks_is_observed() {
    let cluster = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let seen = Observer::<ConfigMap>::namespaced(&cluster, "default").await;

    api.create(&PostParams::default(), &config_map("brief", "preparing")).await.expect("created");
    api.replace("brief", &PostParams::default(), &config_map("brief", "done")).await.expect("replaced");
    api.delete("brief", &DeleteParams::default()).await.expect("deleted");
    assert!(api.get_opt("brief").await.expect("read").is_none(), "a poll now finds nothing");

    let state = |value: &'static str| {
        move |v: &e2e::observe::Observed<ConfigMap>| {
            (v.name() == "brief" && v.object.data.as_ref()?.get("state")? == value).then_some(v.deleted)
        }
    };
    assert!(!seen.wait("the brief ConfigMap while preparing", DEADLINE, state("preparing")).await);
    seen.wait("the brief ConfigMap done", DEADLINE, state("done")).await;
    seen.wait("the brief ConfigMap deleted", DEADLINE, |v| (v.name() == "brief" && v.deleted).then_some(())).await;
    let order: Vec<(String, bool)> = seen
        .versions()
        .iter()
        .filter(|v| v.name() == "brief")
        .map(|v| (v.object.data.clone().unwrap_or_default().get("state").cloned().unwrap_or_default(), v.deleted))
        .collect();
    assert_eq!(
        order,
        [("preparing".into(), false), ("done".into(), false), ("done".into(), true)],
        "every version, in the API's order"
    );
    seen.wait_state("no ConfigMap named brief", DEADLINE, |all| {
        all.iter().all(|c| c.metadata.name.as_deref() != Some("brief")).then_some(())
    })
    .await;
    cluster.shutdown().await;
}

/// A wait for something that never happens fails with what it waited for and what the watch saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(
    expected = "timed out after 1s waiting for a ConfigMap that never comes: the watch on configmaps in default saw"
)]
async fn a_wait_that_never_succeeds_says_what_the_watch_saw() {
    let cluster = Cluster::start().await;
    let seen = Observer::<ConfigMap>::namespaced(&cluster, "default").await;
    seen.wait("a ConfigMap that never comes", Duration::from_secs(1), |v| (v.name() == "never").then_some(())).await;
}
