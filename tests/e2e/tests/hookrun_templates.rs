//! The hook-operator end to end on kube-sim, with the real binary and the real `kubectl`: the walkthrough's
//! three HookTemplates (seed 002) run unchanged against a pod of the walkthrough's hook image and end
//! `Successful` / `Failed` / `Successful` with the seed's values and counters; a restart neither repeats
//! nor skips a measurement; terminate, the kubernetes provider, template validation Events and leader
//! election on a Lease.
//!
//! The templates call `http://1.1.1.1:9091` (an address outside the sandbox); `--web-resolve` points that
//! unchanged URL at the hook pod, and `--interval-scale` compresses their `60s` intervals.

use common::api::{HookPhase, HookRun};
use e2e::hook::{
    FAST_ELECTION, apply_example, assert_completed, create_run, get_run, hook_pod, phase, start_gaps, start_operator,
};
use e2e::{Cluster, DEADLINE, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

fn first_result(run: &HookRun) -> common::api::MetricResult {
    run.status.as_ref().and_then(|s| s.metric_results.first().cloned()).expect("a metric result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walkthrough_templates_end_as_in_the_seed() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let ip = hook_pod(&cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");
    let _operator = start_operator(&cluster, &["--web-resolve", &resolve]);

    // hook-template-success.yaml: asInt(result) > 30 on {$.age} = 45, count 3 → Successful.
    apply_example(&cluster, "hook-template-success.yaml").await;
    create_run(&cluster, "test", "pre-delete-hook-success", &[]).await;
    assert_completed(&cluster, "pre-delete-hook-success", "Successful").await;
    let run = get_run(&cluster, "pre-delete-hook-success").await;
    let result = first_result(&run);
    assert_eq!(
        (result.name.as_str(), result.phase, result.count, result.successful, result.failed, result.error),
        ("webtest", Some(HookPhase::Successful), 3, 3, 0, 0)
    );
    assert_eq!(result.measurements.len(), 3);
    assert!(
        result.measurements.iter().all(|m| m.phase == Some(HookPhase::Successful) && m.value.as_deref() == Some("45"))
    );
    assert!(run.status.as_ref().unwrap().started_at.is_some());
    let table = cluster.kubectl_ok(&["get", "hookrun"]).await;
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PHASE", "AGE"], "{table}");
    assert!(table.contains("pre-delete-hook-success") && table.contains("Successful"), "{table}");

    // hook-template-fail.yaml: asInt(result) < 30, failureLimit 2 → Failed after the third failure.
    apply_example(&cluster, "hook-template-fail.yaml").await;
    create_run(&cluster, "test", "pre-delete-hook-fail", &[]).await;
    assert_completed(&cluster, "pre-delete-hook-fail", "Failed").await;
    let run = get_run(&cluster, "pre-delete-hook-fail").await;
    let result = first_result(&run);
    assert_eq!((result.phase, result.count, result.successful, result.failed), (Some(HookPhase::Failed), 3, 0, 3));
    assert!(result.measurements.iter().all(|m| m.phase == Some(HookPhase::Failed) && m.value.as_deref() == Some("45")));
    let message = run.status.as_ref().and_then(|s| s.message.clone()).unwrap_or_default();
    assert!(message.contains("failed (3) > failureLimit (2)"), "{message}");

    // hook-template-args.yaml: url http://{{ args.PodIP }}:9091 with the pod's own IP, as the
    // gamedeployment-operator injects it (no --web-resolve involved).
    apply_example(&cluster, "hook-template-args.yaml").await;
    create_run(
        &cluster,
        "test",
        "pre-delete-hook-args",
        &[
            ("PodIP", &ip),
            ("PodName", "canary-hook"),
            ("PodNamespace", "default"),
            ("service-name", "test-gamedeployment-svc.default.svc.cluster.local"),
        ],
    )
    .await;
    assert_completed(&cluster, "pre-delete-hook-args", "Successful").await;
    let run = get_run(&cluster, "pre-delete-hook-args").await;
    let result = first_result(&run);
    assert_eq!((result.count, result.successful), (3, 3));
    let args: Vec<(String, Option<String>)> = run.spec.args.iter().map(|a| (a.name.clone(), a.value.clone())).collect();
    assert!(args.contains(&("service-name".into(), Some("test-gamedeployment-svc.default.svc.cluster.local".into()))));

    // Events explain the outcomes.
    let events =
        cluster.kubectl_ok(&["get", "events", "--field-selector", "involvedObject.name=pre-delete-hook-fail"]).await;
    assert!(events.contains("HookRunFailed") && events.contains("MetricFailed"), "{events}");
    let events =
        cluster.kubectl_ok(&["get", "events", "--field-selector", "involvedObject.name=pre-delete-hook-success"]).await;
    assert!(events.contains("HookRunSuccessful"), "{events}");

    // A completed run is frozen: editing it changes nothing.
    cluster
        .kubectl_ok(&[
            "patch",
            "hookrun",
            "pre-delete-hook-fail",
            "--type=merge",
            "-p",
            r#"{"spec":{"terminate":true}}"#,
        ])
        .await;
    let frozen = get_run(&cluster, "pre-delete-hook-fail").await;
    // Every version of it over a window of 2 s: the status never moves (one look at the end would miss a change
    // undone within the window).
    let versions = e2e::observe::Observer::start(
        "the frozen run",
        kube::Api::<common::api::HookRun>::namespaced(cluster.client(), "default"),
        kube::runtime::watcher::Config::default().fields("metadata.name=pre-delete-hook-fail"),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    versions.assert_never("a completed run's status changed", |seen| seen.object.status != frozen.status);
    assert_eq!(get_run(&cluster, "pre-delete-hook-fail").await.status, frozen.status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_neither_repeats_nor_skips_a_measurement() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let ip = hook_pod(&cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");
    // 60s × 0.1 = 6 s between measurements: the kill lands between the first and the second, even when the
    // machine is loaded (a kill while a measurement is in flight is a lost outcome, retaken as an Error by design:
    // hook_lost_outcomes covers that case).
    let mut operator = e2e::hook::start_operator_scaled(&cluster, "0.1", &["--web-resolve", &resolve]);
    apply_example(&cluster, "hook-template-success.yaml").await;
    // The first measurement's record is seen from a watch started before the run, not from polls that take seconds
    // under load and let the second measurement begin before the kill.
    let runs = e2e::observe::Observer::<HookRun>::namespaced(&cluster, "default").await;
    create_run(&cluster, "test", "restarted", &[]).await;
    runs.wait("the first measurement of HookRun restarted", DEADLINE, |seen| {
        let result = seen.object.status.as_ref()?.metric_results.first()?;
        (seen.object.metadata.name.as_deref() == Some("restarted") && result.count >= 1).then_some(())
    })
    .await;
    operator.restart().await;
    assert_completed(&cluster, "restarted", "Successful").await;
    let run = get_run(&cluster, "restarted").await;
    let result = first_result(&run);
    assert_eq!(
        (result.count, result.successful, result.error, result.measurements.len()),
        (3, 3, 0, 3),
        "no measurement repeated"
    );
    // Stored times have whole seconds: 6 s apart (plus latency) can show as 5 s, never less.
    for gap in start_gaps(&run) {
        assert!(gap >= 5, "a measurement was taken early: gaps {:?}", start_gaps(&run));
    }
    assert!(operator.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_validation_events_and_the_kubernetes_provider() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let _operator = start_operator(&cluster, &[]);
    hook_pod(&cluster, "game-1").await;

    // An invalid template is reported as a Warning Event when applied, not minutes later.
    // (Durations are already checked by the CRD schema; expressions, JSONPaths and args are not.)
    let invalid = e2e::manifests::load!("hooktemplate-broken");
    let path = cluster.dir().join("broken.yaml");
    std::fs::write(&path, invalid).unwrap();
    cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
    let events = wait_for("an InvalidHookTemplate event", DEADLINE, || async {
        let out = cluster.kubectl_ok(&["describe", "hooktemplate", "broken"]).await;
        out.contains("InvalidHookTemplate").then_some(out)
    })
    .await;
    for problem in
        ["successCondition `asInt(result) >` does not parse", "jsonPath `{.a}{.b}`", "does not declare \"port\""]
    {
        assert!(events.contains(problem), "missing {problem:?} in:\n{events}");
    }

    // terminate: a run polling forever completes at once when terminated.
    let poll = e2e::manifests::load!("hookrun-poll-forever");
    let path = cluster.dir().join("poll.yaml");
    std::fs::write(&path, poll).unwrap();
    cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
    wait_for("the run to start", DEADLINE, || async {
        (phase(&get_run(&cluster, "poll-forever").await) == Some(HookPhase::Running)).then_some(())
    })
    .await;
    cluster
        .kubectl_ok(&["patch", "hookrun", "poll-forever", "--type=merge", "-p", r#"{"spec":{"terminate":true}}"#])
        .await;
    assert_completed(&cluster, "poll-forever", "Successful").await;
    let message = get_run(&cluster, "poll-forever").await.status.and_then(|s| s.message).unwrap_or_default();
    // The completion names the client that set the field (its managedFields entry): kubectl patch's field manager.
    assert!(
        message.starts_with(r#"terminated (spec.terminate) by field manager "kubectl-patch" (Update at "#),
        "{message}"
    );

    // kubernetes provider, Ordered: patch an annotation (key with a slash, value with quotes),
    // then read it back.
    let drain_run = |name: &str, key: &str| {
        e2e::manifests::load!(
            "hookrun-drain-flag",
            name = name,
            key = key,
            pod = "game-1",
            namespace = "default",
            value = r#"'say "bye"'"#
        )
    };
    let kube_run = drain_run("drain-flag", "example.com/drain-state");
    let path = cluster.dir().join("drain.yaml");
    std::fs::write(&path, &kube_run).unwrap();
    cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
    assert_completed(&cluster, "drain-flag", "Successful").await;
    let annotation = cluster
        .kubectl_ok(&["get", "pod", "game-1", "-o", r#"jsonpath={.metadata.annotations.example\.com/drain-state}"#])
        .await;
    assert_eq!(annotation, r#"say "bye""#);
    let run = get_run(&cluster, "drain-flag").await;
    let results = run.status.unwrap().metric_results;
    assert_eq!(
        results.iter().map(|r| (r.name.as_str(), r.phase)).collect::<Vec<_>>(),
        [("mark", Some(HookPhase::Successful)), ("verify", Some(HookPhase::Successful))]
    );

    // A patch the API server rejects is an Error whose message is the server's reason, not a retry loop.
    let rejected = drain_run("bad-key", "example.com/drain~state");
    let path = cluster.dir().join("bad-key.yaml");
    std::fs::write(&path, rejected).unwrap();
    cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
    let run = assert_completed(&cluster, "bad-key", "Error").await;
    let message = run.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.contains("consecutiveError (5) > consecutiveErrorLimit (4)") && message.contains("drain~state"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_runs_hooks_and_a_successor_takes_over() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let ip = hook_pod(&cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");
    let args = |id: &'static str| {
        let mut a: Vec<&str> = FAST_ELECTION.to_vec();
        a.extend(["--leader-elect-identity", id, "--web-resolve"]);
        a
    };
    let mut a_args = args("operator-a");
    a_args.push(&resolve);
    let mut b_args = args("operator-b");
    b_args.push(&resolve);
    let mut a = start_operator(&cluster, &a_args);
    let mut b = start_operator(&cluster, &b_args);
    let leases: Api<Lease> = Api::namespaced(cluster.client(), "default");
    let holder = || {
        let leases = leases.clone();
        async move { leases.get_opt("hook-operator").await.ok().flatten()?.spec?.holder_identity.filter(|h| !h.is_empty()) }
    };
    let first = wait_for("a leader", DEADLINE, holder).await;
    apply_example(&cluster, "hook-template-success.yaml").await;
    create_run(&cluster, "test", "under-first-leader", &[]).await;
    assert_completed(&cluster, "under-first-leader", "Successful").await;

    // Kill the leader: the other one takes the lease over and runs the next hook.
    let (leader, standby) = if first == "operator-a" { (&mut a, &mut b) } else { (&mut b, &mut a) };
    leader.kill().await;
    let second =
        wait_for("the standby to take over", DEADLINE, || async { holder().await.filter(|h| *h != first) }).await;
    assert_ne!(second, first);
    create_run(&cluster, "test", "under-second-leader", &[]).await;
    assert_completed(&cluster, "under-second-leader", "Successful").await;
    let result = first_result(&get_run(&cluster, "under-second-leader").await);
    assert_eq!((result.count, result.successful), (3, 3));
    assert!(standby.is_running());
    let lease = leases.get("hook-operator").await.unwrap();
    assert!(lease.spec.unwrap().lease_transitions.unwrap_or_default() >= 1);
}
