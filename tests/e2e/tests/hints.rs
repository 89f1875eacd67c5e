//! Every hint the operator and `kubectl gd` print is a command that works as printed (issue 34). Each scenario makes
//! the situation that prints a hint, takes the commands out of the printed text (`e2e::hint_commands`) and runs them
//! one by one through a shell — from a kubeconfig whose context selects another namespace, so a command that forgets
//! `-n` fails — and checks that each did what the hint says. The GameDeployments live outside `default`, so every
//! hint has to name its namespace. All scenarios run at once, each in its own namespace:
//!
//! - a failed pre-delete hook: the condition's `kubectl gd retry` and its `kubectl patch … retry: true`,
//!   `kubectl gd status`'s `kubectl gd retry`, then `kubectl gd skip-hook`'s refusal (the run is completed) with
//!   its `kubectl gd retry --pod` and the pod's `skip-hook` annotation, which lets the pod go;
//! - the same on a GitOps-clean GameDeployment: `kubectl gd retry --pod` and `kubectl delete hookrun`, then
//!   `kubectl gd status`'s `kubectl gd retry`;
//! - a failed post-inplace hook: the condition's `kubectl gd retry` and `kubectl patch … postInplaceUpdateStrategy`;
//! - canary pause steps: the condition's `kubectl gd resume` and `kubectl patch … paused: false`, `kubectl gd
//!   status`'s `kubectl gd resume` and `kubectl gd promote`;
//! - GitOps-clean canary pause steps: the condition's `kubectl annotate … resume-step=…` and `kubectl gd resume`.
//!
//! The pod-gate webhook's hints (`kubectl label pod … specified-delete=true`, `kubectl annotate pod …
//! gate-bypass=true`) are run by `pod_gate_webhook`.

use crate::kubectl_gd::kubectl_gd;
use crate::walkthrough_support;

use common::api::{GameDeployment, HookCondition, HookPhase};
use common::keys;
use e2e::hint_commands::{commands, run_ok};
use e2e::{Cluster, wait_for};
use kube::Api;
use walkthrough_support::{LONG, operators, pre_delete};

const NAME: &str = "web";

/// Fails at its first measurement (the hook server answers age 45).
fn failing() -> String {
    e2e::manifests::load!("hooktemplate-failing", condition = "asInt(result) > 100")
}

async fn apply(cluster: &Cluster, ns: &str, manifest: &str) {
    let path = cluster.dir().join(format!("hints-{ns}-{}.yaml", manifest.len()));
    std::fs::write(&path, manifest).expect("manifest written");
    cluster.kubectl_ok(&["apply", "-n", ns, "-f", &path.display().to_string()]).await;
}

/// A namespace with the failing template and a GameDeployment `web` of `replicas` available pods.
async fn setup(cluster: &Cluster, ns: &str, replicas: i32, strategy: &str, extra: &str, clean: bool) {
    cluster.kubectl_ok(&["create", "namespace", ns]).await;
    apply(cluster, ns, &failing()).await;
    let control = [(keys::CONTROL, keys::CONTROL_ANNOTATIONS)];
    let annotations: &[(&str, &str)] = if clean { &control } else { &[] };
    let shape = e2e::gamedeployment::Shape { annotations, ..Default::default() };
    let gd = e2e::gamedeployment::manifest_shaped(NAME, replicas, strategy, extra, "python:latest", shape);
    apply(cluster, ns, &gd).await;
    wait_for(&format!("{ns}: {replicas} available pods"), LONG, || async {
        let gd = gd_in(cluster, ns).await?;
        (gd.status?.available_replicas == replicas).then_some(())
    })
    .await;
}

async fn gd_in(cluster: &Cluster, ns: &str) -> Option<GameDeployment> {
    Api::<GameDeployment>::namespaced(cluster.client(), ns).get(NAME).await.ok()
}

/// Waits for a HookRun that failed and is not one of `seen` (by UID: a retried run may take the old one's name),
/// reported in the status list `list` with its hint; records its UID in `seen` and returns the entry.
async fn next_failure(
    cluster: &Cluster,
    ns: &str,
    seen: &mut Vec<String>,
    list: fn(&common::api::GameDeploymentStatus) -> &Vec<HookCondition>,
) -> HookCondition {
    let runs: Api<common::api::HookRun> = Api::namespaced(cluster.client(), ns);
    let known = seen.clone();
    let (uid, entry) = wait_for(&format!("{ns}: a new Failed hook (after {} runs)", known.len()), LONG, || async {
        let failed = runs.list(&Default::default()).await.ok()?.items.into_iter().find(|r| {
            r.status.as_ref().and_then(|s| s.phase) == Some(HookPhase::Failed)
                && r.metadata.deletion_timestamp.is_none()
                && r.metadata.uid.as_ref().is_some_and(|u| !known.contains(u))
        })?;
        let status = gd_in(cluster, ns).await?.status?;
        let entry = list(&status).iter().find(|c| {
            c.phase == HookPhase::Failed
                && c.hook_run == failed.metadata.name
                && c.message.as_deref().is_some_and(|m| m.contains("kubectl gd retry"))
        })?;
        Some((failed.metadata.uid.clone().unwrap_or_default(), entry.clone()))
    })
    .await;
    seen.push(uid);
    entry
}

fn pre_delete_list(s: &common::api::GameDeploymentStatus) -> &Vec<HookCondition> {
    &s.pre_delete_hook_condition
}

fn post_inplace_list(s: &common::api::GameDeploymentStatus) -> &Vec<HookCondition> {
    &s.post_inplace_hook_condition
}

/// The hints printed by `kubectl gd status` (exit 1: a failed hook, 3: paused), run from the hints' kubeconfig so it
/// too must name the namespace the way a user types it.
async fn status_hints(cluster: &Cluster, ns: &str, want_code: i32) -> Vec<String> {
    let out = kubectl_gd(cluster, &["status", NAME, "-n", ns, "--timeout", "5s"]).await;
    assert_eq!(out.code, want_code, "{ns}: kubectl gd status: {}{}", out.stdout, out.stderr);
    commands(&format!("{}{}", out.stdout, out.stderr))
}

/// The ways out of a failed hook whose retry writes the spec: `kubectl gd retry`, and the merge patch that sets
/// `spec.<strategy>.retry` (`strategy`: `preDeleteUpdateStrategy`, `postInplaceUpdateStrategy`).
fn spec_retry_hints(ns: &str, strategy: &str) -> Vec<String> {
    vec![
        format!("kubectl gd retry {NAME} -n {ns}"),
        format!(
            "kubectl patch gamedeployment {NAME} -n {ns} --type=merge -p \
             '{{\"spec\":{{\"{strategy}\":{{\"retry\":true}}}}}}'"
        ),
    ]
}

/// Runs each hint in turn: each retry starts a new run, which fails again (the template still fails).
async fn retry_each(
    cluster: &Cluster,
    ns: &str,
    hints: &[String],
    seen: &mut Vec<String>,
    list: fn(&common::api::GameDeploymentStatus) -> &Vec<HookCondition>,
) {
    for hint in hints {
        run_ok(cluster, hint).await;
        next_failure(cluster, ns, seen, list).await;
    }
}

/// Failed pre-delete hook, spec-driven retry: every way out the operator and `kubectl gd` print.
async fn failed_pre_delete(cluster: &Cluster) {
    let ns = "hint-retry";
    setup(cluster, ns, 2, "RollingUpdate", &pre_delete("failing"), false).await;
    cluster.kubectl_ok(&["scale", "-n", ns, "--replicas=1", &format!("gamedeployment/{NAME}")]).await;
    let mut seen = Vec::new();
    let failed = next_failure(cluster, ns, &mut seen, pre_delete_list).await;
    let pod = failed.pod_name.clone();
    let hints = commands(failed.message.as_deref().unwrap_or_default());
    assert_eq!(hints, spec_retry_hints(ns, "preDeleteUpdateStrategy"), "{failed:?}");
    retry_each(cluster, ns, &hints, &mut seen, pre_delete_list).await;
    let from_status = status_hints(cluster, ns, 1).await;
    assert_eq!(from_status, vec![format!("kubectl gd retry {NAME} -n {ns}")], "kubectl gd status");
    run_ok(cluster, &from_status[0]).await;
    next_failure(cluster, ns, &mut seen, pre_delete_list).await;

    // `kubectl gd skip-hook` on a completed run is refused with both ways out.
    let out = kubectl_gd(cluster, &["skip-hook", &pod, "-n", ns]).await;
    assert_ne!(out.code, 0, "a Failed run cannot be skipped");
    let ways = commands(&out.stderr);
    assert_eq!(
        ways,
        vec![
            format!("kubectl gd retry {NAME} -n {ns} --pod {pod}"),
            format!("kubectl annotate pod {pod} -n {ns} {}=delete", keys::SKIP_HOOK),
        ],
        "{}",
        out.stderr
    );
    run_ok(cluster, &ways[0]).await;
    next_failure(cluster, ns, &mut seen, pre_delete_list).await;
    run_ok(cluster, &ways[1]).await;
    wait_for(&format!("{ns}: the skipped pod to go"), LONG, || async {
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.client(), ns);
        let pods = e2e::gamedeployment::live(api.list(&Default::default()).await.ok()?.items);
        pods.iter().all(|p| p.metadata.name.as_deref() != Some(pod.as_str())).then_some(())
    })
    .await;
}

/// Failed pre-delete hook on a GitOps-clean GameDeployment: the ways out delete runs, never write the spec.
async fn failed_pre_delete_gitops_clean(cluster: &Cluster) {
    let ns = "hint-clean";
    setup(cluster, ns, 2, "RollingUpdate", &pre_delete("failing"), true).await;
    cluster.kubectl_ok(&["scale", "-n", ns, "--replicas=1", &format!("gamedeployment/{NAME}")]).await;
    let mut seen = Vec::new();
    let failed = next_failure(cluster, ns, &mut seen, pre_delete_list).await;
    let (pod, run) = (failed.pod_name.clone(), failed.hook_run.clone().unwrap_or_default());
    let hints = commands(failed.message.as_deref().unwrap_or_default());
    assert_eq!(
        hints,
        vec![format!("kubectl gd retry {NAME} -n {ns} --pod {pod}"), format!("kubectl delete hookrun {run} -n {ns}"),],
        "{failed:?}"
    );
    let generation = gd_in(cluster, ns).await.and_then(|g| g.metadata.generation);
    run_ok(cluster, &hints[0]).await;
    let again = next_failure(cluster, ns, &mut seen, pre_delete_list).await;
    // The second hint names the run that failed then; the same command for the new run is what a user now reads.
    let hints = commands(again.message.as_deref().unwrap_or_default());
    run_ok(cluster, &hints[1]).await;
    next_failure(cluster, ns, &mut seen, pre_delete_list).await;
    let from_status = status_hints(cluster, ns, 1).await;
    assert_eq!(from_status, vec![format!("kubectl gd retry {NAME} -n {ns}")], "kubectl gd status");
    run_ok(cluster, &from_status[0]).await;
    next_failure(cluster, ns, &mut seen, pre_delete_list).await;
    assert_eq!(gd_in(cluster, ns).await.and_then(|g| g.metadata.generation), generation, "no spec write");
}

/// Failed post-inplace hook: the pod runs its new revision and stays `Updated`; both retries run the hook again.
async fn failed_post_inplace(cluster: &Cluster) {
    let ns = "hint-post";
    let extra = "  postInplaceUpdateStrategy:\n    hook:\n      templateName: failing\n";
    setup(cluster, ns, 1, "InplaceUpdate", extra, false).await;
    image_patch(cluster, ns).await;
    let mut seen = Vec::new();
    let failed = next_failure(cluster, ns, &mut seen, post_inplace_list).await;
    let hints = commands(failed.message.as_deref().unwrap_or_default());
    assert_eq!(hints, spec_retry_hints(ns, "postInplaceUpdateStrategy"), "{failed:?}");
    retry_each(cluster, ns, &hints, &mut seen, post_inplace_list).await;
}

/// The `Progressing` message while a canary step pauses at `index` (counted from 0, as `currentStepIndex`).
async fn paused_at(cluster: &Cluster, ns: &str, index: i32) -> String {
    wait_for(&format!("{ns}: the canary paused at step index {index}"), LONG, || async {
        let status = gd_in(cluster, ns).await?.status?;
        let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing")?;
        (status.current_step_index == Some(index) && progressing.reason.as_deref() == Some("Paused"))
            .then(|| progressing.message.clone().unwrap_or_default())
    })
    .await
}

/// Canary pause steps, spec-driven: four pauses, each ended by another printed command.
async fn canary_pauses(cluster: &Cluster) {
    let ns = "hint-canary";
    let extra = "    canary:\n      steps:\n        - partition: 3\n        - pause: {}\n        - partition: 2\n        \
                 - pause: {}\n        - partition: 1\n        - pause: {}\n        - partition: 1\n        - pause: {}\n        \
                 - partition: 0\n";
    setup(cluster, ns, 4, "InplaceUpdate", extra, false).await;
    image_patch(cluster, ns).await;
    let message = paused_at(cluster, ns, 1).await;
    let hints = commands(&message);
    assert_eq!(
        hints,
        vec![
            format!("kubectl gd resume {NAME} -n {ns}"),
            format!(
                "kubectl patch gamedeployment {NAME} -n {ns} --type=merge -p \
                 '{{\"spec\":{{\"updateStrategy\":{{\"paused\":false}}}}}}'"
            ),
        ],
        "{message}"
    );
    run_ok(cluster, &hints[0]).await;
    paused_at(cluster, ns, 3).await;
    run_ok(cluster, &hints[1]).await;
    paused_at(cluster, ns, 5).await;
    let from_status = status_hints(cluster, ns, 3).await;
    assert_eq!(
        from_status,
        vec![format!("kubectl gd resume {NAME} -n {ns}"), format!("kubectl gd promote {NAME} -n {ns}")],
        "kubectl gd status"
    );
    run_ok(cluster, &from_status[0]).await;
    paused_at(cluster, ns, 7).await;
    run_ok(cluster, &from_status[1]).await;
    wait_for(&format!("{ns}: promoted to the end"), LONG, || async {
        let status = gd_in(cluster, ns).await?.status?;
        (status.updated_ready_replicas == 4).then_some(())
    })
    .await;
}

/// Canary pause steps on a GitOps-clean GameDeployment: the annotation and `kubectl gd resume`.
async fn canary_pauses_gitops_clean(cluster: &Cluster) {
    let ns = "hint-canary-clean";
    let extra = "    canary:\n      steps:\n        - partition: 2\n        - pause: {}\n        - partition: 1\n        \
                 - pause: {}\n        - partition: 0\n";
    setup(cluster, ns, 3, "InplaceUpdate", extra, true).await;
    let generation = gd_in(cluster, ns).await.and_then(|g| g.metadata.generation);
    image_patch(cluster, ns).await;
    let message = paused_at(cluster, ns, 1).await;
    let hints = commands(&message);
    assert_eq!(hints.len(), 2, "{message}");
    assert_eq!(hints[0], format!("kubectl gd resume {NAME} -n {ns}"), "{message}");
    assert!(
        hints[1]
            .starts_with(&format!("kubectl annotate gamedeployment {NAME} -n {ns} --overwrite {}=", keys::RESUME_STEP)),
        "{message}"
    );
    run_ok(cluster, &hints[1]).await;
    let message = paused_at(cluster, ns, 3).await;
    run_ok(cluster, &commands(&message)[0]).await;
    wait_for(&format!("{ns}: every pod updated"), LONG, || async {
        let status = gd_in(cluster, ns).await?.status?;
        (status.updated_ready_replicas == 3).then_some(())
    })
    .await;
    // One spec write: the image patch of this test; the operator and the hints wrote none.
    assert_eq!(gd_in(cluster, ns).await.and_then(|g| g.metadata.generation), generation.map(|g| g + 1));
}

async fn image_patch(cluster: &Cluster, ns: &str) {
    e2e::gamedeployment::set_image(cluster, ns, NAME, "python:3.6").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_printed_hint_works_as_printed() {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    tokio::join!(
        failed_pre_delete(&cluster),
        failed_pre_delete_gitops_clean(&cluster),
        failed_post_inplace(&cluster),
        canary_pauses(&cluster),
        canary_pauses_gitops_clean(&cluster),
    );
    cluster.shutdown().await;
}
