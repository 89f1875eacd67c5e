//! Runs the operator did not make cannot open a gate (issue 35). A pod is held by its Failed pre-delete run; a user
//! who may create HookRuns copies that run's owner, labels and annotations onto `<name>.1` with
//! `successCondition: "true"` and sets the spec-hash annotation to the SHA-256 of the new spec, computed as the
//! operator computes it. The run ends Successful — and before attempt stamps were signed, the held pod was deleted
//! on its word. Now the stamp's signature (an HMAC keyed by a secret only the operator holds) does not verify: the
//! run is ignored, a `ForgedHookRun` Warning says so, and the pod stays held until a run the operator made succeeds.
//! The strict gate checker watches throughout.

use crate::walkthrough_support;

use std::time::Duration;

use common::api::{HookPhase, HookRun};
use common::keys;
use e2e::gamedeployment::{Columns, apply, manifest, pods, wait_columns};
use e2e::gate::GateChecker;
use e2e::observe::Observer;
use e2e::wait_for;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use walkthrough_support::{LONG, operators, pre_delete};

/// The HookTemplate `failing` with `condition`: with [`FAILS`] it fails at its first measurement (the hook server
/// answers age 45).
fn failing(condition: &str) -> String {
    e2e::manifests::load!("hooktemplate-failing", condition = condition)
}

const FAILS: &str = "asInt(result) > 100";

fn lifecycle(pod: &Pod) -> &str {
    pod.metadata.labels.as_ref().and_then(|l| l.get(keys::LIFECYCLE_STATE)).map_or("", String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_successful_dot_1_run_never_opens_the_gate() {
    let cluster = e2e::Cluster::start().await;
    let _operators = operators(&cluster).await;
    apply(&cluster, &failing(FAILS)).await;
    apply(&cluster, &manifest("signed", 1, "RollingUpdate", &pre_delete("failing"), "python:latest")).await;
    wait_columns(&cluster, "signed", Columns::new(1, 1, 1, 1, 1)).await;
    let pod = pods(&cluster, "signed").await.remove(0);
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    let checker = GateChecker::start(&cluster, "default").await;

    // Scale in: the pod is held by its pre-delete run, which fails.
    cluster.kubectl_ok(&["scale", "--replicas=0", "gamedeployment/signed"]).await;
    let api: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    let selector = format!("{}={pod_uid}", keys::HOOKRUN_POD_UID);
    let real = wait_for("the pod's pre-delete run to fail", LONG, || {
        let (api, selector) = (api.clone(), selector.clone());
        async move {
            let runs = api.list(&ListParams::default().labels(&selector)).await.ok()?.items;
            runs.into_iter().find(|r| r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Failed))
        }
    })
    .await;
    let real_name = real.metadata.name.clone().unwrap_or_default();
    assert!(
        real.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(keys::HOOKRUN_SIGNATURE)),
        "the operator signs its runs: {:?}",
        real.metadata.annotations
    );
    wait_for("the pod to be held in PreparingDelete", LONG, || async {
        let now = pods(&cluster, "signed").await;
        now.iter()
            .any(|p| p.metadata.name.as_deref() == Some(&pod_name) && lifecycle(p) == "PreparingDelete")
            .then_some(())
    })
    .await;

    // The forgery: everything the real run carries, a spec that always succeeds and that spec's hash.
    let forged_name = format!("{real_name}.1");
    let mut forged = HookRun {
        metadata: ObjectMeta {
            name: Some(forged_name.clone()),
            namespace: Some("default".into()),
            labels: real.metadata.labels.clone(),
            annotations: real.metadata.annotations.clone(),
            owner_references: real.metadata.owner_references.clone(),
            ..ObjectMeta::default()
        },
        spec: real.spec.clone(),
        status: None,
    };
    forged.spec.metrics[0].success_condition = Some("true".into());
    let hash = common::hookrun::spec_hash(&forged.spec);
    forged.metadata.annotations.get_or_insert_with(Default::default).insert(keys::HOOKRUN_SPEC_HASH.into(), hash);
    // The pod, and the forged run (the operator need not keep a run it does not trust), watched from before the
    // forgery exists.
    let pod_versions = Observer::<Pod>::namespaced(&cluster, "default").await;
    let hook_runs = Observer::<HookRun>::namespaced(&cluster, "default").await;
    api.create(&PostParams::default(), &forged).await.expect("the forged run is created");
    hook_runs
        .wait("the forged run to succeed", LONG, |seen| {
            let phase = seen.object.status.as_ref()?.phase?;
            (seen.name() == forged_name && phase == HookPhase::Successful).then_some(())
        })
        .await;

    // It is reported: the operator has judged the forged run.
    wait_for("a ForgedHookRun Warning naming the forged run", LONG, || async {
        let out = cluster
            .kubectl(&[
                "get",
                "events",
                "--field-selector",
                "reason=ForgedHookRun",
                "-o",
                "jsonpath={.items[*].message}",
            ])
            .await;
        out.stdout.contains(&forged_name).then_some(out.stdout)
    })
    .await;
    // The pod stayed held: no version of it since the forgery was created let it go (a window of 3 s more, for a
    // decision made after the Warning).
    tokio::time::sleep(Duration::from_secs(3)).await;
    pod_versions.assert_never("the pod was let go on a forged run", |seen| {
        seen.uid() == pod_uid
            && (seen.deleted
                || seen.object.metadata.deletion_timestamp.is_some()
                || lifecycle(&seen.object) != "PreparingDelete")
    });

    // A run the operator makes still opens the gate: fix the hook and ask for a retry (the failed run is replaced).
    apply(&cluster, &failing("asInt(result) > 30")).await;
    let retry = r#"{"spec":{"preDeleteUpdateStrategy":{"retry":true}}}"#;
    cluster.kubectl_ok(&["patch", "gamedeployment", "signed", "--type=merge", "-p", retry]).await;
    wait_for("the held pod to be deleted after its own run succeeded", LONG, || async {
        let now = pods(&cluster, "signed").await;
        now.iter().all(|p| p.metadata.uid.as_deref() != Some(pod_uid.as_str())).then_some(())
    })
    .await;
    let report = checker.stop().await;
    report.assert_clean();
    assert_eq!(report.gated_deletions, 1, "{report:?}");
    cluster.shutdown().await;
}

/// A restart while the API server fails to hand out the key Secret keeps trusting the runs made before it. The
/// operator keeps its signing key in a Secret; if a transient error (500, 429, a timeout) when reading it made the
/// restarted operator sign with a key of its own, every run made before the restart would turn foreign and each held
/// pod would get a new attempt: a Failed hook record replaced by a fresh run, without anyone asking for a retry
/// (found by the fault round: a 500 on that one read at a restart). Transient errors are retried until the Secret
/// is read; only a refusal (RBAC) falls back to a key of this process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_the_key_secret_cannot_be_read_keeps_the_failed_record() {
    const USER: &str = "system:serviceaccount:kube-system:gamedeployment-operator";
    let cluster = e2e::Cluster::start().await;
    cluster.install_crds().await;
    let ip = e2e::hook::hook_pod(&cluster, "canary-hook").await;
    let _hooks =
        e2e::hook::start_operator_scaled(&cluster, "0.05", &["--web-resolve", &format!("1.1.1.1:9091={ip}:9091")]);
    let kubeconfig = cluster.dir().join("gd-user.kubeconfig");
    cluster.sim().write_kubeconfig_for_user(&kubeconfig, USER, &["system:masters"]).expect("kubeconfig");
    let mut gd = cluster.operator_with_kubeconfig(
        "gamedeployment-operator",
        "gamedeployment-operator",
        &kubeconfig,
        &["--expectations-timeout", "20s"],
    );
    apply(&cluster, &failing(FAILS)).await;
    apply(&cluster, &manifest("keyed", 1, "RollingUpdate", &pre_delete("failing"), "python:latest")).await;
    wait_columns(&cluster, "keyed", Columns::new(1, 1, 1, 1, 1)).await;
    let pod_uid = pods(&cluster, "keyed").await.remove(0).metadata.uid.unwrap_or_default();
    cluster.kubectl_ok(&["scale", "--replicas=0", "gamedeployment/keyed"]).await;
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    let selector = format!("{}={pod_uid}", keys::HOOKRUN_POD_UID);
    let failed = wait_for("the pod's pre-delete run to fail", LONG, || async {
        let list = runs.list(&ListParams::default().labels(&selector)).await.ok()?.items;
        list.into_iter().find(|r| r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Failed))
    })
    .await;
    let failed_name = failed.metadata.name.clone().unwrap_or_default();
    let attempts = Observer::start(
        "the pod's hook runs",
        runs.clone(),
        kube::runtime::watcher::Config::default().labels(&selector),
    )
    .await;

    // The restart meets 500s (then 429s) on every read of Secrets, for a few seconds.
    for code in [500, 429] {
        let rule = kube_sim::FaultRule {
            verbs: vec!["get".into()],
            resources: vec!["secrets".into()],
            error_rate: 1.0,
            error_code: Some(code),
            users: vec![USER.into()],
            ..Default::default()
        };
        cluster.sim().set_faults(kube_sim::FaultConfig { rules: vec![rule] });
        gd.restart().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.sim().set_faults(kube_sim::FaultConfig::default());
        // A window for a wrong new attempt, every change in it checked (one made and removed again included).
        tokio::time::sleep(Duration::from_secs(6)).await;
        attempts.assert_never(&format!("after {code}s: a new attempt"), |seen| seen.name() != failed_name);
        let list = runs.list(&ListParams::default().labels(&selector)).await.expect("runs listed").items;
        let names: Vec<_> = list.iter().filter_map(|r| r.metadata.name.clone()).collect();
        assert_eq!(names, vec![failed_name.clone()], "after {code}s: the failed run is kept");
        let api: Api<common::api::GameDeployment> = Api::namespaced(cluster.client(), "default");
        let status = api.get("keyed").await.expect("the GameDeployment").status.unwrap_or_default();
        assert!(
            status.pre_delete_hook_condition.iter().any(|c| c.phase == HookPhase::Failed),
            "after {code}s: the Failed record is gone: {:?}",
            status.pre_delete_hook_condition
        );
        assert!(gd.logs().contains("HookRun stamps signed with the key kept in the Secret"), "{}", gd.logs());
        assert!(!gd.logs().contains("a key of this process only"), "{}", gd.logs());
    }
    cluster.shutdown().await;
}
