//! `preInplaceUpdateStrategy` and `postInplaceUpdateStrategy` end to end: each pod's in-place update waits for its
//! `preinplace-` HookRun (args carry `ModifiedContainer[0]`), and once its new containers run a `postinplace-`
//! HookRun holds its state in `Updated` until it succeeds; every run is removed at the end and every pod is back to
//! `Normal`. The watcher checks that no image changes without a `Successful` pre-inplace run.

use crate::walkthrough_support;

use e2e::Cluster;
use e2e::gamedeployment::{Columns, apply, manifest};
use walkthrough_support::*;

const HOOKS: &str = "    maxUnavailable: 2
  preInplaceUpdateStrategy:
    hook:
      templateName: test
  postInplaceUpdateStrategy:
    hook:
      templateName: test
";
const NEW_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value":"python:3.5"}]"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_and_post_inplace_hooks() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "hook-template-success.yaml").await;
    apply(&cluster, &manifest(NAME, 4, "InplaceUpdate", HOOKS, "python:latest")).await;
    wait_gd(&cluster, Columns::new(4, 4, 4, 4, 4)).await;
    let watch = e2e::gate::GateChecker::start(&cluster, "default").await;

    // Each run succeeds within seconds and is removed once its pod moves on: observed from a watch started before
    // the patch.
    let runs = e2e::observe::Observer::<common::api::HookRun>::namespaced(&cluster, "default").await;
    let out = cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    println!("$ kubectl patch gamedeployment {NAME} --type='json' -p='{NEW_IMAGE}'\n{out}");
    let named = |prefix: String| {
        move |seen: &e2e::observe::Observed<common::api::HookRun>| {
            seen.name().starts_with(&prefix).then(|| seen.object.clone())
        }
    };
    let run = runs.wait("pre-inplace HookRuns", LONG, named(format!("preinplace-{NAME}-"))).await;
    let arg = |name: &str| run.spec.args.iter().find(|a| a.name == name).and_then(|a| a.value.clone());
    assert_eq!(arg("ModifiedContainer[0]").as_deref(), Some("python"));
    assert_eq!(arg("PodContainer[0]").as_deref(), Some("python"));
    assert_eq!(
        run.metadata.labels.as_ref().and_then(|l| l.get("hookrun-type")).map(String::as_str),
        Some("pre-inplace-step")
    );
    runs.wait("post-inplace HookRuns", LONG, named(format!("postinplace-{NAME}-"))).await;
    wait_gd(&cluster, Columns::new(4, 4, 4, 4, 4)).await;
    wait_runs(&cluster, "every HookRun to be removed", |rows| rows.is_empty()).await;
    let pods = e2e::wait_for("every pod back to Normal", LONG, || async {
        let pods = e2e::gamedeployment::pods(&cluster, NAME).await;
        let live: Vec<_> = pods.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        let normal = live.iter().all(|p| {
            p.metadata.labels.as_ref().and_then(|l| l.get("lifecycle.apps.kruise.io/state")).map(String::as_str)
                == Some("Normal")
        });
        (live.len() == 4 && normal).then_some(live)
    })
    .await;
    assert!(pods.iter().all(|p| e2e::gamedeployment::image(p) == Some("python:3.5")));
    let gd = get_gd(&cluster).await;
    let status = gd.status.expect("status");
    assert!(status.pre_inplace_hook_condition.is_empty() && status.post_inplace_hook_condition.is_empty());

    let checked = watch.stop().await;
    assert!(checked.violations.is_empty(), "{:#?}", checked.violations);
    assert_eq!(checked.gated_updates, 4, "{checked:?}");
}
