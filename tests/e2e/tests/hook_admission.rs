//! Hook validation at admission (issue 49): the chart's validation webhook, served by the gamedeployment-operator,
//! on kube-sim with the real `kubectl`:
//!
//! - `kubectl apply` of a HookTemplate whose condition `hook-operator check` calls invalid (`asInt(reslt) > 30`,
//!   `asInt(result) >`) exits non-zero with the message `check` prints for the same file;
//! - a HookRun created by a user with an invalid condition is refused the same way;
//! - a GameDeployment naming a HookTemplate that does not exist applies, with a warning kubectl prints, and takes
//!   its template once it is created;
//! - with no replica answering, the failurePolicy `Ignore` admits everything (the blast radius of the webhook being
//!   down is "no check at apply", never "no writes"), and the hook-operator still reports the invalid template.

use std::process::Command;

use e2e::{DEADLINE, wait_for};

use crate::pod_gate_webhook::Gated;

/// What `hook-operator check -f FILE` prints on stderr for a file it cannot run (its exit code must be 2).
fn check_stderr(file: &str) -> String {
    let out = Command::new(e2e::binary("hook-operator", "hook-operator"))
        .args(["check", "-f", file])
        .current_dir(e2e::repo_root())
        .output()
        .expect("hook-operator check runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "check exits 2 for an invalid file: {stderr}");
    assert!(out.stdout.is_empty(), "nothing measured: {}", String::from_utf8_lossy(&out.stdout));
    stderr
}

/// What `hook-operator check -f FILE` says about an invalid file, without its prefix.
fn check_message(file: &str) -> String {
    let stderr = check_stderr(file);
    let prefix = format!("hook-operator check: {file}: ");
    stderr.trim().strip_prefix(&prefix).unwrap_or_else(|| panic!("{stderr}")).to_string()
}

/// The book's `hook-operator check` blocks of files it cannot run print what the pages show (no cluster needed).
#[test]
fn the_books_check_blocks_print_what_the_pages_show() {
    let book = e2e::book::Book::of_this_test();
    for file in ["examples/hook-template-args.yaml", "examples/admission/hook-template-unfinished.yaml"] {
        book.assert_output("hooks/check.md", &format!("hook-operator check -f {file}"), &check_stderr(file));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_hooks_are_refused_at_apply_with_the_check_message_and_missing_templates_warn() {
    let mut gated = Gated::start("Always", &[]).await;
    let cluster = &gated.cluster;
    // The webhooks page's block: both applies, and `check`'s words for the refused file.
    let book = e2e::book::Book::of_this_test();

    for file in ["examples/admission/hook-template-typo.yaml", "examples/admission/hook-template-unfinished.yaml"] {
        let want = check_message(file);
        let out = cluster.kubectl(&["apply", "-f", file]).await;
        println!("$ kubectl apply -f {file}\n{}{}", out.stdout, out.stderr);
        if file.ends_with("typo.yaml") {
            book.assert_output("webhooks.md", &format!("kubectl apply -f {file}"), &out.stderr);
            book.assert_output("webhooks.md", &format!("hook-operator check -f {file}"), &check_stderr(file));
        }
        assert!(!out.success, "refused: {}", out.stdout);
        assert!(
            out.stderr
                .contains("admission webhook \"hook-validation.gamedeployment.tkex.tencent.com\" denied the request"),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains(&want), "kubectl shows check's message {want:?}:\n{}", out.stderr);
    }
    assert!(cluster.kubectl(&["get", "hooktemplate", "typo"]).await.stderr.contains("NotFound"), "nothing stored");

    // A valid template applies; an update that breaks it is refused with the check's message too.
    cluster.kubectl_ok(&["apply", "-f", "examples/hook-template-success.yaml"]).await;
    let broken = std::fs::read_to_string(e2e::repo_root().join("examples/hook-template-success.yaml"))
        .unwrap()
        .replace("asInt(result) > 30", "asInt(reslt) > 30");
    let path = cluster.dir().join("broken.yaml");
    std::fs::write(&path, &broken).unwrap();
    let out = cluster.kubectl(&["apply", "-f", path.to_str().unwrap()]).await;
    assert!(!out.success && out.stderr.contains("invalid HookTemplate test: metrics[0] (webtest)"), "{}", out.stderr);

    // A user's HookRun with an invalid condition: refused with the words `check` prints for that run.
    let run = "apiVersion: tkex.tencent.com/v1alpha1\nkind: HookRun\nmetadata: {name: by-hand}\nspec:\n  metrics:\n  \
               - name: webtest\n    successCondition: 'asInt(result) >'\n    provider: {web: {url: 'http://127.0.0.1:1/'}}\n";
    let run_path = cluster.dir().join("hookrun.yaml");
    std::fs::write(&run_path, run).unwrap();
    let want = check_message(run_path.to_str().unwrap());
    assert!(want.starts_with("invalid HookRun by-hand: metrics[0] (webtest): successCondition"), "{want}");
    let out = cluster.kubectl(&["create", "-f", run_path.to_str().unwrap()]).await;
    assert!(!out.success && out.stderr.contains(&want), "{}", out.stderr);

    // A GameDeployment naming a template that does not exist: admitted, kubectl prints the warning.
    let file = "examples/admission/gamedeployment-missing-template.yaml";
    let out = cluster.kubectl(&["apply", "-f", file]).await;
    println!("$ kubectl apply -f {file}\n{}{}", out.stdout, out.stderr);
    assert!(out.success, "admitted: {}", out.stderr);
    // As a terminal shows it: the warning (stderr, sent while the request is answered), then the result.
    book.assert_output("webhooks.md", &format!("kubectl apply -f {file}"), &format!("{}{}", out.stderr, out.stdout));
    assert!(
        out.stderr.contains(
            "Warning: HookTemplate \"drain\" named by preDeleteUpdateStrategy.hook does not exist in namespace \
             \"default\": until it is created, a pod that reaches this hook waits for it (condition HookBlocked)"
        ),
        "{}",
        out.stderr
    );
    // Once the template exists, the same apply prints no warning.
    let drain = std::fs::read_to_string(e2e::repo_root().join("examples/hook-template-success.yaml"))
        .unwrap()
        .replace("name: test", "name: drain");
    let drain_path = cluster.dir().join("drain.yaml");
    std::fs::write(&drain_path, drain).unwrap();
    cluster.kubectl_ok(&["apply", "-f", drain_path.to_str().unwrap()]).await;
    let out = cluster.kubectl(&["apply", "-f", file]).await;
    assert!(out.success && !out.stderr.contains("Warning"), "{}", out.stderr);

    // Blast radius: with no replica answering, failurePolicy Ignore admits the invalid template (kube-sim logs the
    // failed call), and the hook-operator still reports it as before.
    gated.gamedeployment.kill().await;
    let cluster = &gated.cluster;
    let out = cluster.kubectl(&["apply", "-f", "examples/admission/hook-template-typo.yaml"]).await;
    assert!(out.success, "failurePolicy Ignore admits while the webhook is down: {}", out.stderr);
    wait_for("the hook-operator's InvalidHookTemplate Event", DEADLINE, || async {
        let out = cluster.kubectl_ok(&["get", "events.events.k8s.io", "-o", "json"]).await;
        let list: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["reason"] == "InvalidHookTemplate" && e["regarding"]["name"] == "typo")
            .then_some(())
    })
    .await;
    gated.cluster.shutdown().await;
}
