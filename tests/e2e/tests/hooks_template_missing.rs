//! A missing HookTemplate blocks only the pods that need a HookRun: the walkthrough's GameDeployment applied
//! before its template holds the scale-in victim with the `HookBlocked` condition and a Warning Event, while
//! scaling out goes on (and releases the held pod); creating the template later is noticed at once and the
//! scale-in completes.

use crate::walkthrough_support;

use e2e::Cluster;
use e2e::gamedeployment::Columns;
use walkthrough_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_template_blocks_only_what_needs_it_until_it_appears() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    let watch = e2e::gate::GateChecker::start(&cluster, "default").await;

    let out = cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    println!("$ kubectl scale --replicas=5 gamedeployment/{NAME}\n{out}");
    let gd = e2e::wait_for("the HookBlocked condition", LONG, || async {
        let gd = get_gd(&cluster).await;
        let blocked = gd.status.as_ref()?.conditions.iter().find(|c| c.type_ == "HookBlocked")?.clone();
        Some((gd, blocked))
    })
    .await;
    let (gd, blocked) = gd;
    println!("HookBlocked: {blocked:?}");
    assert_eq!(blocked.status, "True");
    assert!(blocked.message.as_deref().unwrap_or("").contains("HookTemplate \"test\" not found"), "{blocked:?}");
    let held = &gd.status.as_ref().expect("status").pre_delete_hook_condition;
    assert_eq!(held.len(), 1, "{held:?}");
    let events = cluster.kubectl_ok(&["get", "events", "--field-selector", "reason=HookRunNotCreated"]).await;
    println!("$ kubectl get events --field-selector reason=HookRunNotCreated\n{events}");
    assert!(events.contains("Warning") && events.contains("not found"), "{events}");
    assert!(hookruns(&cluster, false).await.is_empty());

    // Scaling out is not blocked; the held pod is no longer wanted for deletion and returns to Normal.
    let out = cluster.kubectl_ok(&["scale", "--replicas=7", &format!("gamedeployment/{NAME}")]).await;
    println!("$ kubectl scale --replicas=7 gamedeployment/{NAME}\n{out}");
    wait_gd(&cluster, Columns::new(7, 7, 7, 7, 7)).await;
    let gd = get_gd(&cluster).await;
    assert!(gd.status.as_ref().is_some_and(|s| s.conditions.iter().all(|c| c.type_ != "HookBlocked")));

    // Scale in again, then the template appears: the run starts and the scale-in completes.
    cluster.kubectl_ok(&["scale", "--replicas=6", &format!("gamedeployment/{NAME}")]).await;
    e2e::wait_for("HookBlocked again", LONG, || async {
        let gd = get_gd(&cluster).await;
        gd.status.as_ref()?.conditions.iter().any(|c| c.type_ == "HookBlocked").then_some(())
    })
    .await;
    // The run succeeds within seconds and goes with its pod: observed from a watch started before the template.
    let runs = e2e::observe::Observer::<common::api::HookRun>::namespaced(&cluster, "default").await;
    example(&cluster, "hook-template-success.yaml").await;
    runs.wait("a pre-delete HookRun", LONG, |seen| seen.name().starts_with("predelete-").then_some(())).await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    wait_runs(&cluster, "every HookRun to be removed", |rows| rows.is_empty()).await;
    let gd = get_gd(&cluster).await;
    let status = gd.status.expect("status");
    assert!(status.conditions.iter().all(|c| c.type_ != "HookBlocked"));
    assert!(status.pre_delete_hook_condition.is_empty());

    let checked = watch.stop().await;
    assert!(checked.violations.is_empty(), "{:#?}", checked.violations);
    assert!(checked.gated_deletions >= 1, "{checked:?}");
}
