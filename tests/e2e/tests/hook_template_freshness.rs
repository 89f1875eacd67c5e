//! A HookRun is built from the HookTemplate the API server holds when the run is created, not from the
//! gamedeployment-operator's cache of templates. The documented way out of a failed hook is "fix the template,
//! then retry": if the retry's run were built from a cache that has not seen the fix yet, it would fail again at
//! once and the retry would be spent. Here the operator's template watch is silenced (a kube-sim rule for its user
//! only: its open watches stop delivering and new ones hang), so its cache keeps the failing version; the fixed
//! template still runs and the held pod goes.

use common::api::{GameDeployment, HookPhase};
use e2e::gamedeployment::{Columns, apply, live_pods, wait_columns};
use e2e::{Cluster, wait_for};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_sim::{FaultConfig, FaultRule};
use serde_json::json;

const NAME: &str = "fresh";
const NS: &str = "default";
const GD_USER: &str = "gamedeployment-operator";
/// The hook pod answers `{"age": 45}`: `< 30` fails at the first measurements, `> 30` succeeds.
fn template(fail: bool) -> String {
    let condition = if fail { "asInt(result) < 30" } else { "asInt(result) > 30" };
    e2e::manifests::load!("hooktemplate-gate", condition = condition)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_template_fix_runs_the_fixed_template_while_the_operator_cache_lags() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let ip = e2e::hook::hook_pod(&cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");
    let kubeconfig = cluster.dir().join("gd.kubeconfig");
    cluster.sim().write_kubeconfig_for_user(&kubeconfig, GD_USER, &["system:masters"]).expect("kubeconfig");
    let gd_op =
        cluster.operator_with_kubeconfig("gamedeployment-operator", "gamedeployment-operator", &kubeconfig, &[]);
    let _hook_op =
        cluster.operator("hook-operator", "hook-operator", &["--interval-scale", "0.1", "--web-resolve", &resolve]);

    apply(&cluster, &template(true)).await;
    apply(&cluster, &e2e::manifests::load!("gamedeployment-faulty", name = NAME)).await;
    wait_columns(&cluster, NAME, Columns::new(6, 6, 6, 6, 6)).await;

    // Strict gate invariant: each pod deletion consumes one fresh Successful run for that pod and attempt.
    let gate = e2e::gate::GateChecker::start(&cluster, NS).await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), NS);
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.expect("scaled");
    let held = wait_for("the pre-delete hook to fail and hold its pod", e2e::DEADLINE, || async {
        let gd = api.get(NAME).await.ok()?;
        let failed = gd.status?.pre_delete_hook_condition.into_iter().find(|c| c.phase == HookPhase::Failed)?;
        Some(failed.pod_name)
    })
    .await;

    // From here on the operator's cache of templates never changes.
    cluster.sim().set_faults(FaultConfig {
        rules: vec![FaultRule {
            users: vec![GD_USER.into()],
            resources: vec!["hooktemplates.tkex.tencent.com".into()],
            verbs: vec!["list".into(), "watch".into()],
            blackhole: true,
            ..Default::default()
        }],
    });
    apply(&cluster, &template(false)).await;
    api.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"preDeleteUpdateStrategy": {"retry": true}}})),
    )
    .await
    .expect("retry requested");

    wait_for("the retried run to pass and the held pod to go", e2e::DEADLINE, || async {
        let gd = api.get(NAME).await.ok()?;
        let status = gd.status?;
        let pods = live_pods(&cluster, NAME).await;
        let gone = pods.iter().all(|p| p.metadata.name.as_deref() != Some(held.as_str()));
        (gone && pods.len() == 5 && status.replicas == 5 && status.pre_delete_hook_condition.is_empty()).then_some(())
    })
    .await;
    let metrics = e2e::gamedeployment::scrape(e2e::gamedeployment::metrics_address(&gd_op).await).await;
    let behind = metrics.get("gamedeployment_hook_templates_behind_total").copied().unwrap_or(0.0);
    assert!(behind >= 1.0, "the pass that made the retried run found the cache behind: {behind}");
    let checked = gate.stop().await;
    assert!(checked.violations.is_empty(), "{:#?}", checked.violations);
    assert!(checked.gated_deletions >= 1, "{checked:?}");
}
