//! Shadow hooks (`shadowHook`): a HookTemplate trialled on live servers. Its runs are made and measured like a real
//! hook's and recorded (`status.shadowHookResults`, an Event, `kubectl gd get`), but they never hold or release a
//! pod; the strict gate checker leaves them out, so a change only a shadow run let through would be a violation.

use crate::kubectl_gd::kubectl_gd;
use crate::walkthrough_support;

use common::api::{GameDeployment, HookPhase};
use e2e::gamedeployment::{Columns, apply, live_pods, manifest, wait_columns};
use e2e::gate::GateChecker;
use e2e::{Cluster, wait_for};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use walkthrough_support::{LONG, QUICK, operators};

const NAME: &str = "shadowed";
const FAIL: &str = e2e::manifests::load!("hooktemplate-fail");

/// A real hook that takes about 10 s under the suite's interval scale (`initialDelay: 200s` × 0.05).
const HELD: &str = "apiVersion: tkex.tencent.com/v1alpha1\nkind: HookTemplate\nmetadata:\n  name: held\nspec:\n  metrics:\n    - name: webtest\n      initialDelay: 200s\n      successCondition: \"asInt(result) > 30\"\n      provider:\n        web:\n          url: http://1.1.1.1:9091\n          jsonPath: \"{$.age}\"\n";

async fn results(api: &Api<GameDeployment>) -> Vec<common::api::ShadowHookResult> {
    api.get(NAME).await.ok().and_then(|g| g.status).map(|s| s.shadow_hook_results).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_shadow_pre_delete_hook_never_holds_a_pod_and_is_recorded() {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    apply(&cluster, FAIL).await;
    let strategy = "  preDeleteUpdateStrategy:\n    shadowHook:\n      templateName: fail\n";
    apply(&cluster, &manifest(NAME, 3, "RollingUpdate", strategy, "python:latest")).await;
    wait_columns(&cluster, NAME, Columns::new(3, 3, 3, 3, 3)).await;
    let before: Vec<String> = live_pods(&cluster, NAME).await.into_iter().filter_map(|p| p.metadata.name).collect();
    let checker = GateChecker::start(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "--replicas=2", &format!("gamedeployment/{NAME}")]).await;
    wait_columns(&cluster, NAME, Columns::new(2, 2, 2, 2, 2)).await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let recorded = wait_for("the shadow run's result in the status", LONG, || async {
        let r = results(&api).await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    let after: Vec<String> = live_pods(&cluster, NAME).await.into_iter().filter_map(|p| p.metadata.name).collect();
    let gone: Vec<&String> = before.iter().filter(|p| !after.contains(p)).collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!((recorded[0].phase, recorded[0].gate.as_str()), (HookPhase::Failed, "no hook"), "{recorded:?}");
    assert_eq!(gone, [&recorded[0].pod_name], "the shadow run was made for the deleted pod");
    let events: Api<Event> = Api::namespaced(cluster.client(), "default");
    wait_for("a ShadowHookFailed Event", LONG, || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.into_iter().find(|e| e.reason.as_deref() == Some("ShadowHookFailed"))
    })
    .await;
    let out = kubectl_gd(&cluster, &["get", NAME]).await;
    assert!(
        out.stdout.contains("Shadow:    1 results, 0 successful; latest: preDelete fail hook shadow-predelete-"),
        "{}",
        out.stdout
    );
    let report = checker.stop().await;
    report.assert_clean();
    assert_eq!(report.shadow_runs.len(), 1, "{report:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_hook_beside_a_real_one_never_shortens_its_hold() {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    apply(&cluster, QUICK).await;
    apply(&cluster, HELD).await;
    let strategy =
        "  preDeleteUpdateStrategy:\n    hook:\n      templateName: held\n    shadowHook:\n      templateName: quick\n";
    apply(&cluster, &manifest(NAME, 3, "RollingUpdate", strategy, "python:latest")).await;
    wait_columns(&cluster, NAME, Columns::new(3, 3, 3, 3, 3)).await;
    let checker = GateChecker::start(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "--replicas=2", &format!("gamedeployment/{NAME}")]).await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let recorded = wait_for("the shadow run's result in the status", LONG, || async {
        let r = results(&api).await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(recorded[0].phase, HookPhase::Successful, "{recorded:?}");
    assert_ne!(recorded[0].gate, "no hook", "{recorded:?}");
    // The shadow run said yes; the pod still waits for the real one.
    let held = live_pods(&cluster, NAME).await;
    assert!(held.iter().any(|p| p.metadata.name.as_deref() == Some(recorded[0].pod_name.as_str())), "still there");
    wait_columns(&cluster, NAME, Columns::new(2, 2, 2, 2, 2)).await;
    let report = checker.stop().await;
    report.assert_clean();
    assert_eq!(report.gated_deletions, 1, "the real hook's run let it go: {report:?}");
    assert_eq!(report.shadow_runs.len(), 1, "{report:?}");
    cluster.shutdown().await;
}
