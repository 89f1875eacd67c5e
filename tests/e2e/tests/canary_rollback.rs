//! A failed canary rolls back by itself (`hookPolicy.onFailure: Rollback`): 4 pods with a pre-inplace hook and a
//! canary (partition 2, then a hook step whose HookTemplate fails). The image is patched; the partition step updates
//! 2 pods, the step hook fails, and the operator records `status.canary.rollback` (never a spec write), says so in
//! `Progressing` (`False`, `CanaryRolledBack`) and a Warning Event `CanaryRolledBack`, and brings the 2 updated pods
//! back to the stable image in place — each change through its pre-inplace hook under the strict gate checker (4
//! gated updates: 2 forward, 2 back). The rollback holds: a scale-out afterwards creates its pod on the stable
//! revision. A new template ends it and starts its canary at step 0 again. The GitOps-clean variant checks that the
//! spec and `metadata.generation` only moved with the test's own writes.

use crate::kubectl_gd::kubectl_gd;
use crate::walkthrough_support;

use common::api::{CanaryRollback, GameDeployment};
use common::keys;
use e2e::gamedeployment::{Columns, apply, image, live_pods, manifest, revision, wait_columns};
use e2e::gate::GateChecker;
use e2e::{Cluster, wait_for};
use kube::Api;
use walkthrough_support::{LONG, QUICK, operators, pre_inplace};

const FAIL: &str = e2e::manifests::load!("hooktemplate-fail");
const STABLE: &str = "python:latest";

fn patch_image(image: &str) -> String {
    format!(r#"[{{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "{image}"}}]"#)
}

/// The canary: partition 2, then the `fail` hook with `onFailure: Rollback`; in-place updates gated by `quick`.
fn strategy() -> String {
    let canary = "    maxUnavailable: 1\n    canary:\n      steps:\n        - partition: 2\n        - hook:\n            \
                  templateName: fail\n          hookPolicy:\n            onFailure: Rollback\n";
    format!("{canary}{}", pre_inplace("quick"))
}

async fn get(api: &Api<GameDeployment>, name: &str) -> GameDeployment {
    api.get(name).await.expect("the GameDeployment exists")
}

fn rollback(gd: &GameDeployment) -> Option<CanaryRollback> {
    gd.status.as_ref()?.canary.as_ref()?.rollback.clone()
}

fn progressing(gd: &GameDeployment) -> Option<(String, String, String)> {
    let c = gd.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Progressing")?;
    Some((c.status.clone(), c.reason.clone()?, c.message.clone()?))
}

async fn story(name: &str, gitops_clean: bool) {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    apply(&cluster, QUICK).await;
    apply(&cluster, FAIL).await;
    apply(&cluster, &manifest(name, 4, "InplaceUpdate", &strategy(), STABLE)).await;
    wait_columns(&cluster, name, Columns::new(4, 4, 4, 4, 4)).await;
    if gitops_clean {
        cluster.kubectl_ok(&["annotate", "gamedeployment", name, &format!("{}=annotations", keys::CONTROL)]).await;
    }
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let stable = stable_revision(&api, name).await;

    let checker = GateChecker::start(&cluster, "default").await;
    cluster.kubectl_ok(&["patch", "gamedeployment", name, "--type=json", "-p", &patch_image("python:3.5")]).await;
    let patched = get(&api, name).await;
    let record = wait_for("the canary to be rolled back", LONG, || async { rollback(&get(&api, name).await) }).await;
    println!("status.canary.rollback: {record:?}");
    assert_eq!(record.stable_revision, stable);
    assert_ne!(record.failed_revision, stable);
    assert_eq!(record.step, 1, "the hook step failed");
    assert!(record.hook_run.ends_with("-1-fail"), "{record:?}");
    // Every pod back on the stable revision and image, through the usual machinery.
    wait_columns(&cluster, name, Columns::new(4, 4, 4, 4, 4)).await;
    let gd = wait_for("every pod back on the stable revision", LONG, || async {
        let gd = get(&api, name).await;
        let pods = live_pods(&cluster, name).await;
        let back = pods.len() == 4
            && pods.iter().all(|p| revision(p) == Some(stable.as_str()) && image(p) == Some(STABLE))
            && gd.status.as_ref()?.update_revision.as_deref() == Some(stable.as_str());
        back.then_some(gd)
    })
    .await;
    let (status, reason, message) = progressing(&gd).expect("a Progressing condition");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "CanaryRolledBack"), "{message}");
    assert!(message.contains(&record.hook_run) && message.contains(&stable), "{message}");
    let events = cluster.kubectl_ok(&["get", "events", "--field-selector", "reason=CanaryRolledBack"]).await;
    println!("$ kubectl get events --field-selector reason=CanaryRolledBack\n{events}");
    assert!(events.contains("Warning") && events.contains(&record.hook_run), "{events}");
    let shown = kubectl_gd(&cluster, &["get", name]).await;
    println!("$ kubectl gd get {name}\n{}", shown.stdout);
    assert!(shown.stdout.contains("rolled back"), "{}", shown.stdout);
    // The spec is the one the test wrote: the rollback lives in the status.
    assert_eq!(gd.spec, patched.spec, "no spec write");
    assert_eq!(gd.metadata.generation, patched.metadata.generation);

    // The rollback holds: a scale-out creates its pod on the stable revision.
    cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{name}")]).await;
    wait_columns(&cluster, name, Columns::new(5, 5, 5, 5, 5)).await;
    let pods = live_pods(&cluster, name).await;
    assert!(pods.iter().all(|p| image(p) == Some(STABLE)), "every pod stays on the stable image");
    let report = checker.stop().await;
    report.assert_clean();
    assert_eq!(report.gated_updates, 4, "2 pods forward and back, each through its hook: {report:?}");

    // A new template ends the rollback and starts its canary at step 0 (whose hook fails again).
    cluster.kubectl_ok(&["patch", "gamedeployment", name, "--type=json", "-p", &patch_image("python:3.6")]).await;
    let again = wait_for("the new template's canary to run and roll back", LONG, || async {
        rollback(&get(&api, name).await).filter(|r| r.failed_revision != record.failed_revision)
    })
    .await;
    assert_eq!(again.stable_revision, stable);
    let events = cluster.kubectl_ok(&["get", "events", "--field-selector", "reason=SetStepIndex"]).await;
    assert!(events.contains("the rollback of revision"), "{events}");
    let gd = get(&api, name).await;
    if gitops_clean {
        assert!(!gd.spec.update_strategy.paused, "never paused in the spec");
    }
    // The scale-out and the second image patch: nothing else moved the generation.
    assert_eq!(gd.metadata.generation.map(|g| g - 2), patched.metadata.generation, "only the test's writes");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_canary_rolls_back_every_updated_pod_through_its_gate() {
    story("rollback", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitops_clean_canary_rolls_back_without_a_spec_write() {
    story("rollback-clean", true).await;
}

/// The canary page's sandbox scene, with the files it relies on as shipped (`examples/canary-rollback.yaml`,
/// `examples/hook-template-fail.yaml`): 4 servers, an image patch to `python:3.6`, the two canary pods updated in
/// place and brought back when the step hook fails; `kubectl gd status` exits 7 saying so, a `CanaryRolledBack`
/// Warning is recorded, every pod runs the stable image again while the spec keeps `python:3.6`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_rollback_example_rolls_back_as_the_page_shows() {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    let book = e2e::book::Book::of_this_test();
    let mut shell = e2e::book::Reader::new(cluster.kubeconfig());
    let page = "concepts/canary.md";
    shell.run_next(&book, page, Some("kubectl patch")).await;
    let name = "test-gamedeployment";
    wait_columns(&cluster, name, Columns::new(4, 4, 4, 4, 4)).await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let stable = stable_revision(&api, name).await;
    // The page's commands from the image patch on, each compared with the page, names and times masked: the
    // `kubectl gd status` line (exit 7), the Warning, each canary pod restarted twice (forward and back).
    shell.run_next(&book, page, None).await;
    let record = wait_for("the canary to be rolled back", LONG, || async { rollback(&get(&api, name).await) }).await;
    assert_eq!(record.stable_revision, stable);
    wait_for("every pod back on the stable image", LONG, || async {
        let pods = live_pods(&cluster, name).await;
        (pods.len() == 4 && pods.iter().all(|p| image(p) == Some(STABLE) && revision(p) == Some(stable.as_str())))
            .then_some(())
    })
    .await;
    let out = kubectl_gd(&cluster, &["status", name, "--timeout", "1m"]).await;
    assert_eq!(out.code, 7, "a rollback is its own verdict and exit code: {out:?}");
    let want = format!(
        "error: gamedeployment {name}: canary rolled back: HookRun {} of canary step 2 of 2 ended Failed \
         (hookPolicy.onFailure: Rollback): revision {} is rolled back to the stable revision {stable}; change the \
         template to try again (all 4 pods run revision {stable} and are available)",
        record.hook_run, record.failed_revision
    );
    assert!(out.stderr.contains(&want), "the page's line, names aside:\n{want}\n{}", out.stderr);
    let spec_image =
        get(&api, name).await.spec.template.spec.and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
    assert_eq!(spec_image.as_deref(), Some("python:3.6"), "the spec keeps the patched image");
    drop(book);
    cluster.shutdown().await;
}

async fn stable_revision(api: &Api<GameDeployment>, name: &str) -> String {
    wait_for("the first revision to be the stable one", LONG, || async {
        let status = get(api, name).await.status?;
        let stable = status.canary?.revision?;
        (status.current_step_index == Some(2)).then_some(stable)
    })
    .await
}
