//! `kubectl gd` as a user runs it: the `kubectl-gd` binary on the PATH, invoked through the real `kubectl`'s plugin
//! mechanism, against kube-sim with both operators — during the walkthrough (`examples/` unchanged).
//!
//! - success template: `kubectl gd get` shows the held pod (`PreparingDelete`), its HookRun, the last measured
//!   value (45) and the phase; `kubectl gd status` exits 0 once the scale-in completed;
//! - fail template: `kubectl gd status` exits 1 naming the pod and the HookRun; after fixing the template,
//!   `kubectl gd retry` makes the scale-in complete (`status` exits 0);
//! - `skip-hook` terminates a running HookRun and the pod goes; `pause` / `restart` / `resume` drive a rollout
//!   through the gates with `status` exiting 3 while paused and 0 once done.

use crate::walkthrough_support;

use std::path::PathBuf;
use std::process::Stdio;

use e2e::Cluster;
use e2e::gamedeployment::Columns;
use walkthrough_support::*;

/// Output and exit code of one `kubectl gd` run.
#[derive(Debug)]
pub(crate) struct Gd {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// The directory holding `kubectl-gd`, built once per test process.
fn plugin_dir() -> PathBuf {
    let binary = e2e::binary("kubectl-gd", "kubectl-gd");
    binary.parent().expect("the binary has a directory").to_path_buf()
}

/// `kubectl gd <args>`, printed to the test log.
pub(crate) async fn kubectl_gd(cluster: &Cluster, args: &[&str]) -> Gd {
    let out = kubectl_gd_quiet(cluster, args).await;
    println!("$ kubectl gd {}\n{}{}(exit {})", args.join(" "), out.stdout, out.stderr, out.code);
    out
}

/// `kubectl gd <args>` with the plugin directory first on the PATH, as a user who installed it would.
async fn kubectl_gd_quiet(cluster: &Cluster, args: &[&str]) -> Gd {
    let path = std::env::join_paths(
        std::iter::once(plugin_dir()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH joins");
    let output = tokio::process::Command::new("kubectl")
        .arg("gd")
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("KUBECACHEDIR", cluster.dir().join("kube-cache"))
        .current_dir(e2e::repo_root())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("kubectl runs");
    Gd {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `kubectl __complete <words>`: what kubectl's shell completion asks; for `gd …` kubectl runs
/// `kubectl_complete-gd` from the PATH (here the plugin binary, linked under that name as the README says).
async fn complete(cluster: &Cluster, words: &[&str]) -> Vec<String> {
    let link_dir = cluster.dir().join("completion");
    let link = link_dir.join("kubectl_complete-gd");
    if !link.exists() {
        std::fs::create_dir_all(&link_dir).expect("completion dir");
        std::os::unix::fs::symlink(plugin_dir().join("kubectl-gd"), &link).expect("symlink");
    }
    let path = std::env::join_paths(
        [link_dir, plugin_dir()]
            .into_iter()
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH joins");
    let output = tokio::process::Command::new("kubectl")
        .arg("__complete")
        .args(words)
        .env("PATH", path)
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("KUBECACHEDIR", cluster.dir().join("kube-cache"))
        .stdin(Stdio::null())
        .output()
        .await
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("$ kubectl __complete {}\n{stdout}", words.join(" "));
    stdout.lines().map(|l| l.split('\t').next().unwrap_or("").to_string()).collect()
}

fn predelete_run_of(tree: &str) -> Option<String> {
    tree.split_whitespace()
        .find(|w| w.starts_with(&format!("predelete-{NAME}-")) && w.ends_with("-test"))
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_shows_the_held_pod_and_status_waits_for_the_scale_in() {
    let cluster = Cluster::start().await;
    let (hooks, gd) = operators(&cluster).await;
    example(&cluster, "hook-template-success.yaml").await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "4m"]).await;
    assert_eq!(out.code, 0, "the first rollout completes: {out:?}");
    assert!(out.stdout.contains("rollout complete"), "{}", out.stdout);
    // `kubectl gd <TAB>`: subcommands, then the GameDeployments of the namespace.
    let words = complete(&cluster, &["gd", "s"]).await;
    assert!(words.contains(&"status".to_string()) && words.contains(&"skip-hook".to_string()), "{words:?}");
    let words = complete(&cluster, &["gd", "get", ""]).await;
    assert!(words.contains(&NAME.to_string()), "{words:?}");
    assert_eq!(words.last().map(String::as_str), Some(":4"), "no file completion: {words:?}");

    // The run completes a few seconds after its first measurement and goes with its pod: the measured run is
    // observed from a watch started before the scale-in, and both operators are frozen while `kubectl gd get` reads.
    let runs = e2e::observe::Observer::<common::api::HookRun>::namespaced(&cluster, "default").await;
    let pods = e2e::observe::Observer::<k8s_openapi::api::core::v1::Pod>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    pods.wait("a pod held in PreparingDelete", LONG, |seen| {
        (e2e::gamedeployment::label(&seen.object, "lifecycle.apps.kruise.io/state") == Some("PreparingDelete"))
            .then_some(())
    })
    .await;
    runs.wait("the pre-delete HookRun to measure 45 while Running", LONG, |seen| {
        let status = seen.object.status.as_ref()?;
        let measured = status.metric_results.first()?.measurements.iter().any(|m| m.value.as_deref() == Some("45"));
        (status.phase == Some(common::api::HookPhase::Running) && measured).then_some(())
    })
    .await;
    let frozen = Frozen::new(&[&hooks, &gd]);
    // While the pod is held: its lifecycle state, its HookRun, the phase and the last measured value.
    let out = kubectl_gd_quiet(&cluster, &["get", NAME]).await;
    drop(frozen);
    let tree = out.stdout;
    println!("$ kubectl gd get {NAME}\n{tree}");
    assert_eq!(out.code, 0, "{}", out.stderr);
    // What the kubectl gd page shows for this moment, names and times masked (issue 49: the page had drifted).
    e2e::book::Book::of_this_test().assert_output("operating/kubectl-gd.md", &format!("kubectl gd get {NAME}"), &tree);
    assert!(tree.contains("PreparingDelete") && tree.contains("value 45,"), "{tree}");
    assert!(!tree.contains('\x1b'), "not a terminal: plain text");
    let run = predelete_run_of(&tree).expect("a pre-delete HookRun");
    let id = run.trim_end_matches("-test").rsplit('-').next().expect("instance id");
    let pod_line = tree.lines().find(|l| l.contains(&format!("pod {NAME}-{id}"))).expect("the held pod's line");
    assert!(pod_line.contains("PreparingDelete") && pod_line.contains("ready"), "{pod_line}");
    let run_line = tree.lines().find(|l| l.contains(&format!("hookrun {run}"))).expect("the HookRun's line");
    assert!(run_line.contains("Running") || run_line.contains("Successful"), "the phase: {run_line}");
    assert!(run_line.contains("elapsed") || run_line.contains("took"), "{run_line}");
    assert!(tree.contains("last:      value 45, Successful"), "{tree}");
    // The hook-operator here measures 20x faster than the template says (`--interval-scale 0.05`): the view says so.
    assert!(tree.contains("judged by: success: asInt(result) > 30; count 3, every 60s (~"), "{tree}");
    assert!(tree.contains("s apart here: this hook-operator scales intervals), failureLimit 2"), "{tree}");

    let json = kubectl_gd(&cluster, &["get", NAME, "-o", "json"]).await;
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("-o json is JSON");
    assert_eq!(json["name"], NAME);
    assert_eq!(json["strategy"]["type"], "InplaceUpdate");

    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "4m"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(show_gd(&cluster).await, Some(Columns::new(5, 5, 5, 5, 5)), "status returned after the scale-in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_fails_naming_pod_and_hookrun_and_retry_completes_the_scale_in() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "hook-template-fail.yaml").await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;

    cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    let rows = wait_runs(&cluster, "one pre-delete HookRun", |rows| rows.len() == 1).await;
    let run = rows[0].name.clone();
    let id = run.trim_end_matches("-test").rsplit('-').next().expect("instance id").to_string();
    let pod = format!("{NAME}-{id}");
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "4m"]).await;
    assert_eq!(out.code, 1, "a failed hook fails the status: {out:?}");
    assert!(out.stderr.contains(&pod) && out.stderr.contains(&run), "names the pod and the HookRun: {}", out.stderr);
    assert!(out.stderr.contains("Failed") && out.stderr.contains("kubectl gd retry"), "{}", out.stderr);

    let tree = kubectl_gd(&cluster, &["get", NAME]).await.stdout;
    assert!(tree.starts_with(&format!("Name:      {NAME}")), "{tree}");
    assert!(tree.contains("Status:    Failed:"), "{tree}");
    assert!(tree.contains("judged by: success: asInt(result) < 30"), "{tree}");
    // Nothing to skip: the run is complete (terminate would not change it).
    let skip = kubectl_gd(&cluster, &["skip-hook", &pod]).await;
    assert_eq!(skip.code, 5, "{skip:?}");
    assert!(skip.stderr.contains(&format!("`kubectl gd retry {NAME} -n default --pod {pod}`")), "{}", skip.stderr);
    assert!(
        skip.stderr.contains(&format!(
            "`kubectl annotate pod {pod} -n default gamedeployment.tkex.tencent.com/skip-hook=delete`"
        )),
        "{}",
        skip.stderr
    );

    // Fix the hook, retry with the plugin: the BCS retry flag, reset by the operator.
    example(&cluster, "hook-template-success.yaml").await;
    let out = kubectl_gd(&cluster, &["retry", NAME]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("spec.preDeleteUpdateStrategy.retry set to true"), "{}", out.stdout);
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "4m"]).await;
    assert_eq!(out.code, 0, "the scale-in completes after the retry: {out:?}");
    wait_gd(&cluster, Columns::new(5, 5, 5, 5, 5)).await;
    let gd = get_gd(&cluster).await;
    assert!(!gd.spec.pre_delete_update_strategy.is_some_and(|s| s.retry), "the operator reset the flag");
    let nothing = kubectl_gd(&cluster, &["retry", NAME]).await;
    assert_eq!(nothing.code, 5, "nothing left to retry: {nothing:?}");
}

/// A template whose single measurement is due only after a long initial delay, so a run stays Running until
/// something ends it.
const SLOW_TEMPLATE: &str = e2e::manifests::load!("hooktemplate-test-slow");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_hook_terminates_the_run_and_the_pod_goes() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    let path = cluster.dir().join("slow-template.yaml");
    std::fs::write(&path, SLOW_TEMPLATE).expect("template written");
    cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;

    // The terminated run goes with its pod: its completion is observed from a watch started before the action.
    let runs = e2e::observe::Observer::<common::api::HookRun>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    let rows =
        wait_runs(&cluster, "a running pre-delete HookRun", |rows| rows.len() == 1 && rows[0].phase == "Running").await;
    let run = rows[0].name.clone();
    let id = run.trim_end_matches("-test").rsplit('-').next().expect("instance id").to_string();
    let pod = format!("{NAME}-{id}");
    let status = kubectl_gd(&cluster, &["status", NAME, "--timeout", "3s"]).await;
    assert_eq!(status.code, 4, "held by a running hook: still progressing at the timeout: {status:?}");

    let out = kubectl_gd(&cluster, &["skip-hook", &pod]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&format!("hookrun {run} terminated")), "{}", out.stdout);
    let ended = runs
        .wait("the terminated run to complete", LONG, |seen| {
            let status = seen.object.status.as_ref()?;
            (seen.name() == run && status.phase.is_some_and(|p| p.is_completed())).then(|| status.clone())
        })
        .await;
    assert_eq!(ended.phase, Some(common::api::HookPhase::Successful));
    // The completion names the client that set spec.terminate (hook-operator's controller::terminate).
    let message = ended.message.as_deref().unwrap_or_default();
    assert!(message.starts_with("terminated (spec.terminate) by field manager \"kubectl-gd\""), "{message}");
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "4m"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    wait_gd(&cluster, Columns::new(5, 5, 5, 5, 5)).await;
    let pods = e2e::gamedeployment::pods(&cluster, NAME).await;
    assert!(pods.iter().all(|p| p.metadata.name.as_deref() != Some(pod.as_str())), "pod {pod} was deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_restart_resume_roll_the_pods_through_the_gates() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "hook-template-success.yaml").await;
    let manifest = e2e::gamedeployment::manifest(
        NAME,
        3,
        "InplaceUpdate",
        "    maxUnavailable: 1\n  preDeleteUpdateStrategy:\n    hook:\n      templateName: test\n",
        "python:latest",
    );
    e2e::gamedeployment::apply(&cluster, &manifest).await;
    wait_gd(&cluster, Columns::new(3, 3, 3, 3, 3)).await;
    let before = get_gd(&cluster).await.status.and_then(|s| s.update_revision).expect("a revision");

    let out = kubectl_gd(&cluster, &["pause", NAME]).await;
    assert!(out.code == 0 && out.stdout.contains("paused set to true"), "{out:?}");
    let out = kubectl_gd(&cluster, &["restart", NAME]).await;
    assert!(out.code == 0 && out.stdout.contains("kubectl.kubernetes.io/restartedAt"), "{out:?}");
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "4m"]).await;
    assert_eq!(out.code, 3, "paused with pods to update: {out:?}");
    assert!(out.stderr.contains("kubectl gd resume"), "{}", out.stderr);
    assert!(get_gd(&cluster).await.status.is_some_and(|s| s.updated_replicas == 0), "nothing moved while paused");

    let out = kubectl_gd(&cluster, &["resume", NAME]).await;
    assert!(out.code == 0 && out.stdout.contains("paused set to false"), "{out:?}");
    let out = kubectl_gd(&cluster, &["status", NAME, "--timeout", "4m"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let gd = get_gd(&cluster).await;
    let status = gd.status.expect("status");
    assert_ne!(status.update_revision.as_deref(), Some(before.as_str()), "a new revision");
    assert_eq!(status.updated_replicas, 3, "every pod moved to it");
    let tree = kubectl_gd(&cluster, &["get", NAME]).await.stdout;
    assert!(tree.contains("Status:    Complete"), "{tree}");
    assert!(tree.contains("3 pods") && tree.contains("no pods"), "the new revision has the pods: {tree}");
}
