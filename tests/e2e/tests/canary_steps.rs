//! Canary steps end to end with the shipped `examples/canary-gamedeployment.yaml` and
//! `examples/canary-hooktemplate.yaml` (steps: partition 3, pause, partition 2, pause 60 s, hook): each partition
//! step updates its pods, the indefinite pause waits for `kubectl patch ... paused false`, the timed pause ends by
//! itself, the step hook (its template expects `age < 30`, the server answers 45) fails and pauses the rollout with
//! `PausedByStepBasedHook`, and resuming it runs the rollout to completion.

use crate::walkthrough_support;

use common::api::PauseReason;
use e2e::Cluster;
use e2e::gamedeployment::Columns;
use walkthrough_support::*;

const NEW_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value":"python:3.5"}]"#;
const RESUME: &str = r#"[{"op": "replace", "path": "/spec/updateStrategy/paused", "value":false}]"#;

async fn wait_step(cluster: &Cluster, index: i32, paused: Option<PauseReason>) -> common::api::GameDeployment {
    let gd = e2e::wait_for(&format!("canary step {index} (pause {paused:?})"), LONG, || async {
        let gd = get_gd(cluster).await;
        let status = gd.status.clone()?;
        let reasons: Vec<PauseReason> = status.pause_conditions.iter().map(|c| c.reason).collect();
        let pause_ok = match paused {
            Some(reason) => reasons == [reason] && gd.spec.update_strategy.paused,
            None => reasons.is_empty(),
        };
        (status.current_step_index == Some(index) && pause_ok).then_some(gd)
    })
    .await;
    let out = cluster
        .kubectl_ok(&[
            "get",
            "gamedeployment",
            NAME,
            "-o",
            "jsonpath={.status.currentStepIndex} {.spec.updateStrategy.paused} {.status.pauseConditions} {.status.canary}",
        ])
        .await;
    println!("$ kubectl get gamedeployment {NAME} -o jsonpath=... (step, paused, pauseConditions, canary)\n{out}\n");
    gd
}

async fn resume(cluster: &Cluster) {
    let out = cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", RESUME]).await;
    println!("$ kubectl patch gamedeployment {NAME} --type='json' -p='{RESUME}'\n{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_runs_its_steps_and_pauses_on_a_failing_hook() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "canary-hooktemplate.yaml").await;
    example(&cluster, "canary-gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(4, 4, 4, 4, 4)).await;
    let gd = wait_step(&cluster, 5, None).await;
    let stable = gd.status.and_then(|s| s.update_revision).expect("an update revision");

    let out = cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    println!("$ kubectl patch gamedeployment {NAME} --type='json' -p='{NEW_IMAGE}'\n{out}");
    // Step 0 (partition 3) updates one pod; step 1 pauses until a person resumes.
    let gd = wait_step(&cluster, 1, Some(PauseReason::PausedByCanaryPauseStep)).await;
    assert_eq!(gd.status.as_ref().and_then(|s| s.canary.as_ref()).and_then(|c| c.revision.clone()), Some(stable));
    wait_gd(&cluster, Columns::new(4, 1, 1, 4, 4)).await;
    resume(&cluster).await;
    // Step 2 (partition 2) updates a second pod; step 3 pauses for 60 s and ends by itself.
    wait_step(&cluster, 3, Some(PauseReason::PausedByCanaryPauseStep)).await;
    wait_gd(&cluster, Columns::new(4, 2, 2, 4, 4)).await;
    // Step 4: the hook fails (age 45 is not < 30) and pauses the rollout.
    let gd = wait_step(&cluster, 4, Some(PauseReason::PausedByStepBasedHook)).await;
    let run = gd.status.as_ref().and_then(|s| s.canary.as_ref()).and_then(|c| c.current_step_hook_run.clone());
    let run = run.expect("the step's HookRun is recorded");
    assert!(run.starts_with(&format!("canary-{NAME}-")) && run.ends_with("-4-test"), "{run}");
    let rows = hookruns(&cluster, false).await;
    assert!(rows.iter().any(|r| r.name == run && r.phase == "Failed"), "{rows:?}");
    let events = cluster.kubectl_ok(&["get", "events", "--field-selector", "reason=CanaryHookFailed"]).await;
    println!("$ kubectl get events --field-selector reason=CanaryHookFailed\n{events}");
    assert!(events.contains("Warning") && events.contains(&run), "{events}");
    assert_eq!(show_gd(&cluster).await, Some(Columns::new(4, 2, 2, 4, 4)), "paused: nothing more is updated");
    // Resuming overrides the failed hook: the last step is done and every pod is updated.
    resume(&cluster).await;
    wait_step(&cluster, 5, None).await;
    wait_gd(&cluster, Columns::new(4, 4, 4, 4, 4)).await;
    let gd = get_gd(&cluster).await;
    assert!(!gd.spec.update_strategy.paused);
}
