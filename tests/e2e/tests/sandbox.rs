//! `scripts/sandbox` as a user runs it: two sandboxes side by side on different ports each get their own demo web
//! server (and state directory) and point their hook-operator at it; a demo server that dies is reported by its
//! own sandbox only; a second sandbox on a port in use refuses to start without touching the first one's state;
//! and a child that cannot start (here the demo server, its address taken) fails the start-up instead of a
//! "ready" that is not true. In both modes (default and `--helm`) the sandbox runs the pod-gate webhook: once the
//! walkthrough's GameDeployment opts in, `kubectl delete pod` is refused with the webhook's message and the pod
//! leaves through its pre-delete hook and is replaced.

use std::process::Command;
use std::time::{Duration, Instant};

use common::api::{HookPhase, HookRun};
use e2e::observe::Observer;
use e2e::sandbox::{READY, START, Sandbox, bindable, ensure_binaries, free_base, kubectl, kubectl_ok};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The body of `GET /` at `addr`, or None when nothing answers.
async fn get(addr: &str) -> Option<String> {
    let mut stream =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await.ok()?.ok()?;
    stream.write_all(b"GET / HTTP/1.0\r\nHost: 1.1.1.1:9091\r\n\r\n").await.ok()?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response)).await.ok()?.ok()?;
    Some(response)
}

/// The `--web-resolve` argument the sandbox gave its hook-operator.
fn web_resolve_of(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let i = args.iter().position(|a| a == "--web-resolve")?;
    args.get(i + 1).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sandboxes_side_by_side_never_share_a_demo_server() {
    ensure_binaries();
    let port_a = free_base();
    let mut a = Sandbox::start(port_a);
    a.wait_ready().await;
    let port_b = free_base();
    let mut b = Sandbox::start(port_b);
    b.wait_ready().await;
    println!("--- sandbox A (port {port_a}) ---\n{}\n--- sandbox B (port {port_b}) ---\n{}", a.output(), b.output());

    // Each has its own demo server, derived from its port, and its hook-operator is pointed at it.
    let (demo_a, demo_b) = (a.demo_address(), b.demo_address());
    assert_eq!(demo_a, format!("127.0.0.200:{}", port_a + 3));
    assert_eq!(demo_b, format!("127.0.0.200:{}", port_b + 3));
    for (sandbox, demo) in [(&a, &demo_a), (&b, &demo_b)] {
        let body = get(demo).await.unwrap_or_else(|| panic!("nothing answers on {demo}"));
        assert!(body.contains(r#"{"name":"bryan","male":"yes","age":45}"#), "{demo}: {body}");
        let resolve = web_resolve_of(sandbox.pid_of("hook-operator"));
        assert_eq!(resolve, Some(format!("1.1.1.1:9091={demo}")), "port {}", sandbox.port);
        assert!(sandbox.output().contains(&format!("--web-resolve 1.1.1.1:9091={demo}")), "the check command");
        assert!(sandbox.output().contains(&format!("export KUBECONFIG={}/kubeconfig", sandbox.state().display())));
        assert!(sandbox.output().contains("export PATH="), "the PATH line");
    }

    // The README's `check` command, as the sandbox prints it, works against the sandbox's demo server.
    let check = Command::new(e2e::binary("hook-operator", "hook-operator"))
        .args(["check", "-f", "examples/hook-template-success.yaml", "--web-resolve"])
        .arg(format!("1.1.1.1:9091={demo_b}"))
        .args(["--interval-scale", "0.01"])
        .current_dir(e2e::repo_root())
        .output()
        .expect("hook-operator check runs");
    let text = String::from_utf8_lossy(&check.stdout);
    println!(
        "$ hook-operator check -f examples/hook-template-success.yaml --web-resolve 1.1.1.1:9091={demo_b} ...\n{text}"
    );
    assert!(check.status.success(), "{text}{}", String::from_utf8_lossy(&check.stderr));
    assert_eq!(text.matches("Successful  value=45").count(), 3, "{text}");
    assert!(text.lines().last().is_some_and(|l| l.starts_with("result: Successful")), "{text}");
    // The check page shows it against the default sandbox's demo server; the output does not name the address.
    e2e::book::Book::of_this_test().assert_output(
        "hooks/check.md",
        "hook-operator check -f examples/hook-template-success.yaml --web-resolve 1.1.1.1:9091=127.0.0.200:9091 \
         --interval-scale 0.01",
        &text,
    );

    // A second sandbox on A's port refuses to start, leaving A's kubeconfig alone.
    let mut again = Sandbox::start(port_a);
    again.owns_state = false;
    let code = again.wait_exit().await;
    let out = again.output();
    println!("--- a second sandbox on port {port_a} ---\n{out}");
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("another sandbox") && !out.contains(READY), "{out}");
    drop(again);
    assert!(a.state().join("kubeconfig").exists(), "A's kubeconfig survived");

    // A's demo server dies: A reports it (naming the address), B does not, and B's server still answers.
    let demo_pid = a.pid_of("demo-webserver");
    assert!(Command::new("kill").args(["-TERM", &demo_pid.to_string()]).status().unwrap().success());
    let start = Instant::now();
    while !a.output().contains("demo-webserver exited") {
        assert!(start.elapsed() < START, "sandbox A did not report its demo server's death:\n{}", a.output());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = a.output();
    println!("--- sandbox A after its demo server was killed ---\n{out}");
    let report = out.lines().find(|l| l.contains("demo-webserver exited")).unwrap();
    assert!(report.contains(&demo_a), "{report}");
    assert!(get(&demo_a).await.is_none(), "A's demo server is gone");
    assert!(!b.output().contains("exited"), "B reported nothing:\n{}", b.output());
    assert!(get(&demo_b).await.is_some_and(|body| body.contains("bryan")), "B's demo server still answers");
    assert!(matches!(a.child.try_wait(), Ok(None)), "A stays up so the cluster can be inspected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_cannot_start_fails_the_start_up() {
    ensure_binaries();
    let port = free_base();
    let demo = format!("127.0.0.200:{}", port + 3);
    let _taken = std::net::TcpListener::bind(&demo).expect("the demo address is free to take");
    let mut sandbox = Sandbox::start(port);
    let code = sandbox.wait_exit().await;
    let out = sandbox.output();
    println!("--- sandbox on port {port}, {demo} taken ---\n{out}");
    assert_ne!(code, Some(0));
    assert!(!out.contains(READY), "{out}");
    let line = out.lines().find(|l| l.contains("demo-webserver exited during start-up")).expect("the failure");
    assert!(line.contains(&demo), "{line}");
    assert!(out.contains("Address already in use"), "the demo server's own error is shown:\n{out}");
    // Everything it had started is stopped: nothing serves its API port any more.
    assert!(bindable(&format!("127.0.0.1:{port}")), "kube-sim was stopped");
}

/// The README's pod-gate lines in a sandbox (`--fast`, so the walkthrough's hook takes 12 s): the walkthrough's
/// GameDeployment opts in, `kubectl delete pod` is refused with the webhook's message, the pod stays Running in
/// `PreparingDelete` while its HookRun runs, then the operator deletes it and creates its replacement.
async fn kubectl_delete_pod_goes_through_the_hook_in_a_sandbox(flags: &[&str]) {
    ensure_binaries();
    let port = free_base();
    let mut sandbox = Sandbox::start_with(port, &[&["--fast"][..], flags].concat());
    sandbox.wait_ready().await;
    let out = sandbox.output();
    let helm = flags.contains(&"--helm");
    // Without --helm the operator process serves the webhook on PORT+4; with it the chart's pods serve it on their
    // IPs, behind the chart's Service (which kube-sim routes to their Ready endpoints).
    let (webhook, webhook_address) = if helm {
        let service = "gdo-gamedeployment-operators-gamedeployment-webhook";
        let ip = kubectl_ok(
            &sandbox,
            &["-n", "kourse-system", "get", "endpoints", service, "-o", "jsonpath={.subsets[0].addresses[0].ip}"],
        );
        (format!("pod-gate webhook on https://{service}.kourse-system.svc"), format!("{}:9443", ip.trim()))
    } else {
        (format!("pod-gate webhook on https://127.0.0.1:{}", port + 4), format!("127.0.0.1:{}", port + 4))
    };
    assert!(out.lines().any(|l| l.contains(&webhook) && l.contains("failurePolicy Ignore")), "{out}");
    if helm {
        // No operator process of the sandbox's own: the operators are the chart's pods, two Ready replicas each.
        assert!(
            !sandbox.state().join("gamedeployment-operator.pid").exists() && !out.contains("starting hook-operator")
        );
        for app in ["hook-operator", "gamedeployment-operator"] {
            let ready = kubectl_ok(
                &sandbox,
                &[
                    "-n",
                    "kourse-system",
                    "get",
                    "pods",
                    "-l",
                    &format!("app.kubernetes.io/name={app}"),
                    "-o",
                    "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
                ],
            );
            assert_eq!(ready.lines().filter(|l| *l == "True").count(), 2, "{app}: {ready}");
        }
    }
    assert!(
        out.contains(
            "kubectl annotate gamedeployment test-gamedeployment gamedeployment.tkex.tencent.com/pod-gate=true"
        )
    );

    // Hook validation (issue 49): an invalid template is refused at apply, with `hook-operator check`'s words.
    let (ok, _, err) = kubectl(&sandbox, &["apply", "-f", "examples/admission/hook-template-typo.yaml"]);
    println!("$ kubectl apply -f examples/admission/hook-template-typo.yaml\n{err}");
    assert!(!ok && err.contains("invalid HookTemplate typo: metrics[0] (webtest): successCondition"), "{err}");

    kubectl_ok(&sandbox, &["apply", "-f", "examples/hook-template-success.yaml", "-f", "examples/gamedeployment.yaml"]);
    let running = "jsonpath={range .items[?(@.status.phase==\"Running\")]}{.metadata.name}{\"\\n\"}{end}";
    e2e::wait_for("the 6 pods to run", START, || async {
        let out = kubectl_ok(&sandbox, &["get", "pods", "-o", running]);
        (out.lines().count() == 6).then_some(())
    })
    .await;
    println!("$ kubectl annotate gd test-gamedeployment gamedeployment.tkex.tencent.com/pod-gate=true");
    print!(
        "{}",
        kubectl_ok(
            &sandbox,
            &["annotate", "gd", "test-gamedeployment", "gamedeployment.tkex.tencent.com/pod-gate=true"]
        )
    );
    let running_pods: Vec<String> =
        kubectl_ok(&sandbox, &["get", "pods", "-o", running]).lines().map(str::to_string).collect();
    let pod = running_pods[0].clone();
    // A forged AdmissionReview POSTed straight to the webhook port (no client certificate: not kube-sim) is
    // answered but marks nothing (issue 35; the sandbox verifies kube-sim's client certificate).
    let other = &running_pods[1];
    e2e::wait_for("the pod-gate label on the other pod", START, || async {
        let label = "jsonpath={.metadata.labels.gamedeployment\\.tkex\\.tencent\\.com/pod-gate}";
        (kubectl_ok(&sandbox, &["get", "pod", other, "-o", label]).trim() == "true").then_some(())
    })
    .await;
    let victim = kubectl_ok(&sandbox, &["get", "pod", other, "-o", "json"]);
    let review = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"forged","kind":{{"group":"","version":"v1","kind":"Pod"}},"resource":{{"group":"","version":"v1","resource":"pods"}},"name":"{other}","namespace":"default","operation":"DELETE","userInfo":{{"username":"mallory"}},"oldObject":{victim}}}}}"#
    );
    let forged = Command::new("curl")
        .args(["-sSk", "--max-time", "10", "-H", "Content-Type: application/json", "--data-binary", &review])
        .arg(format!("https://{webhook_address}/validate-pods"))
        .output()
        .expect("curl runs");
    let answer = String::from_utf8_lossy(&forged.stdout);
    println!("forged review: {answer}");
    assert!(answer.contains("\"allowed\":false") && answer.contains("NOT marked"), "{answer}");
    let mark = "jsonpath={.metadata.labels.apps\\.kruise\\.io/specified-delete}";
    assert_eq!(kubectl_ok(&sandbox, &["get", "pod", other, "-o", mark]).trim(), "", "a forged review marks no pod");
    // What lasts only while the hook runs (the pod's PreparingDelete, the run's Successful before its collection) is
    // observed from watches started before the delete, never polled for.
    let client = sandbox.client().await;
    let pods = Observer::<Pod>::start(
        "the refused pod",
        Api::namespaced(client.clone(), "default"),
        watcher::Config::default().fields(&format!("metadata.name={pod}")),
    )
    .await;
    let runs =
        Observer::<HookRun>::start("HookRuns", Api::namespaced(client, "default"), watcher::Config::default()).await;
    // Refused as soon as the pod carries the label (set at once by the labeller for pods created before opt-in).
    let refusal = e2e::wait_for("kubectl delete pod to be refused", START, || async {
        let (ok, out, err) = kubectl(&sandbox, &["delete", "pod", &pod, "--wait=false"]);
        assert!(!ok, "{pod} was deleted without its hook: {out}{err}");
        err.contains("denied the request").then_some(err)
    })
    .await;
    println!("$ kubectl delete pod {pod}\n{refusal}");
    assert!(refusal.starts_with(
        "Error from server (Forbidden): admission webhook \"pod-gate.gamedeployment.tkex.tencent.com\" denied the request: "
    ), "{refusal}");
    assert!(
        refusal.contains(&format!("pod {pod} is a game server of GameDeployment test-gamedeployment")),
        "{refusal}"
    );
    assert!(refusal.contains("marked for deletion (apps.kruise.io/specified-delete=true)"), "{refusal}");

    // Held in PreparingDelete while its HookRun runs, then deleted by the operator and replaced.
    let state = "jsonpath={.metadata.labels.lifecycle\\.apps\\.kruise\\.io/state} {.status.phase}";
    assert_eq!(kubectl_ok(&sandbox, &["get", "pod", &pod, "-o", state]).trim().split(' ').nth(1), Some("Running"));
    pods.wait("the refused pod to be PreparingDelete and Running", START, |seen| {
        let state = seen.object.metadata.labels.as_ref()?.get("lifecycle.apps.kruise.io/state")?;
        let phase = seen.object.status.as_ref()?.phase.as_deref()?;
        (state == "PreparingDelete" && phase == "Running").then_some(())
    })
    .await;
    // predelete-<gd>-<revision>-<pod id>-<template>
    let id = pod.rsplit('-').next().unwrap();
    let hookrun =
        |name: &str| name.starts_with("predelete-test-gamedeployment-") && name.ends_with(&format!("-{id}-test"));
    runs.wait("the pod's HookRun to be Successful", START, |seen| {
        let phase = seen.object.status.as_ref()?.phase?;
        (hookrun(seen.name()) && phase == HookPhase::Successful).then_some(())
    })
    .await;
    e2e::wait_for("the operator to delete the pod and replace it", START, || async {
        // Gone (NotFound) or terminating (its grace period), and six other pods run.
        let (found, deleted_at, _) =
            kubectl(&sandbox, &["get", "pod", &pod, "-o", "jsonpath={.metadata.deletionTimestamp}"]);
        let others = kubectl_ok(&sandbox, &["get", "pods", "-o", running]);
        let replaced = others.lines().filter(|p| *p != pod).count() == 6;
        (replaced && (!found || !deleted_at.trim().is_empty())).then_some(())
    })
    .await;
    println!("{}", kubectl_ok(&sandbox, &["get", "pod", "-L", "lifecycle.apps.kruise.io/state"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_gates_kubectl_delete_pod_through_the_hook() {
    kubectl_delete_pod_goes_through_the_hook_in_a_sandbox(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helm_sandbox_gates_kubectl_delete_pod_through_the_hook() {
    e2e::helm_python(); // the chart needs Helm's SDK in .venv (scripts/test makes it)
    kubectl_delete_pod_goes_through_the_hook_in_a_sandbox(&["--helm"]).await;
}
