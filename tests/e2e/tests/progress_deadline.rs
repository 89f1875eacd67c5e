//! `spec.progressDeadlineSeconds` (issue 33): a scale-in held by a hook that never succeeds makes no progress; at
//! the deadline — not before — `Progressing` turns `False` with reason `ProgressDeadlineExceeded`, saying what the
//! rollout waits for, a Warning Event says so and `kubectl gd status` exits 6. Letting the pod go (its `skip-hook`
//! annotation) is progress: the condition comes back and the rollout completes. Times are the API server's: the
//! condition's `lastTransitionTime` against its `lastUpdateTime` (the last progress). The manifests are the page's
//! files, `examples/progress-deadline/`, as shipped.

use crate::kubectl_gd::kubectl_gd;
use crate::walkthrough_support;

use common::api::GameDeployment;
use e2e::gamedeployment::{Columns, wait_columns};
use e2e::{Cluster, wait_for};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use walkthrough_support::{LONG, operators};

const NAME: &str = "stalls";
const DEADLINE_SECONDS: i64 = 8;

fn progressing(gd: &GameDeployment) -> Option<common::api::GameDeploymentCondition> {
    gd.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Progressing").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_rollout_is_reported_at_its_deadline_and_not_before() {
    let cluster = Cluster::start().await;
    let _operators = operators(&cluster).await;
    // The page's block, command by command, compared with what it shows; the files it relies on, as shipped.
    let book = e2e::book::Book::of_this_test();
    let mut shell = e2e::book::Reader::new(cluster.kubeconfig());
    let page = "api/progress-deadline.md";
    shell.run_next(&book, page, Some("kubectl scale")).await;
    let api: Api<GameDeployment> = Api::namespaced(cluster.client(), "default");
    let spec = api.get(NAME).await.expect("the example's GameDeployment").spec;
    assert_eq!(spec.progress_deadline_seconds.map(i64::from), Some(DEADLINE_SECONDS), "the page's deadline");
    wait_columns(&cluster, NAME, Columns::new(2, 2, 2, 2, 2)).await;

    shell.run_next(&book, page, Some("kubectl get")).await;
    let exceeded = wait_for("Progressing to say ProgressDeadlineExceeded", LONG, || async {
        let c = progressing(&api.get(NAME).await.ok()?)?;
        (c.reason.as_deref() == Some("ProgressDeadlineExceeded")).then_some(c)
    })
    .await;
    println!("Progressing: {exceeded:?}");
    assert_eq!(exceeded.status, "False");
    let since = exceeded.last_update_time.clone().expect("the last progress is recorded").0;
    let at = exceeded.last_transition_time.clone().expect("a transition time").0;
    let after = at.as_second() - since.as_second();
    assert!(
        (DEADLINE_SECONDS..=DEADLINE_SECONDS + 3).contains(&after),
        "reported {after}s after the last progress (deadline {DEADLINE_SECONDS}s)"
    );
    let message = exceeded.message.clone().unwrap_or_default();
    assert!(message.starts_with(&format!("no progress for {DEADLINE_SECONDS}s (spec.progressDeadlineSeconds)")));
    assert!(message.contains("waiting for the pre-delete hook of 1 pod"), "{message}");

    let events: Api<Event> = Api::namespaced(cluster.client(), "default");
    wait_for("a ProgressDeadlineExceeded Warning", LONG, || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.into_iter()
            .find(|e| e.reason.as_deref() == Some("ProgressDeadlineExceeded") && e.type_.as_deref() == Some("Warning"))
    })
    .await;
    shell.run_next(&book, page, None).await;
    drop(book);
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "30s"]).await;
    assert_eq!(out.code, 6, "{out:?}");
    assert!(out.stderr.contains("exceeded its progress deadline: no progress for"), "{}", out.stderr);

    // Progress: the held pod is let go, and the rollout completes.
    let held = api.get(NAME).await.expect("the GameDeployment").status.unwrap_or_default().pre_delete_hook_condition;
    let pod = held.first().expect("a held pod").pod_name.clone();
    cluster.kubectl_ok(&["annotate", "pod", &pod, "gamedeployment.tkex.tencent.com/skip-hook=delete"]).await;
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "2m"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let done = progressing(&api.get(NAME).await.expect("the GameDeployment")).expect("Progressing");
    assert_eq!((done.status.as_str(), done.reason.as_deref()), ("True", Some("RolloutComplete")), "{done:?}");
    cluster.shutdown().await;
}
