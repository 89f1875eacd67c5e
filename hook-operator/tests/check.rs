//! `hook-operator check` reproduces the walkthrough's outcomes without a cluster: the unchanged BCS templates
//! against a local server answering `{"name":"bryan","male":"yes","age":45}`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;

const BRYAN: &str = r#"{"name":"bryan","male":"yes","age":45}"#;

/// Serves the walkthrough's hook endpoint on `ip:9091`, picking a free loopback address.
async fn hook_endpoint() -> SocketAddr {
    for i in 0..200u8 {
        let addr = SocketAddr::from(([127, 0, 91, 10 + i], 9091));
        if let Ok(listener) = tokio::net::TcpListener::bind(addr).await {
            let router = Router::new().fallback(get(|| async { BRYAN }));
            tokio::spawn(async move { axum::serve(listener, router).await });
            return addr;
        }
    }
    panic!("no free loopback address for port 9091");
}

async fn check(template: &str, extra: &[String]) -> (i32, String) {
    let file = format!("{}/../examples/{template}", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_hook-operator"))
            .args(["check", "-f", &file, "--interval-scale", "0.01"])
            .args(extra)
            .output(),
    )
    .await
    .expect("check finishes")
    .expect("check runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.code().unwrap_or(-1), format!("{stdout}{}", String::from_utf8_lossy(&output.stderr)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reproduces_the_walkthrough_outcomes() {
    let addr = hook_endpoint().await;
    let resolve = vec!["--web-resolve".to_string(), format!("1.1.1.1:9091={addr}")];

    let (code, out) = check("hook-template-success.yaml", &resolve).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("Successful  value=45").count(), 3, "{out}");
    assert!(out.contains("webtest: Successful — count (3) reached"), "{out}");

    let (code, out) = check("hook-template-fail.yaml", &resolve).await;
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.matches("Failed  value=45").count(), 3, "{out}");
    assert!(
        out.contains("result: Failed — metric \"webtest\" completed Failed: failed (3) > failureLimit (2)"),
        "{out}"
    );

    let args: Vec<String> = [
        format!("PodIP={}", addr.ip()),
        "PodName=test-gamedeployment-94pn2".into(),
        "PodNamespace=default".into(),
        "service-name=test-gamedeployment-svc.default.svc.cluster.local".into(),
    ]
    .into_iter()
    .flat_map(|a| ["--arg".to_string(), a])
    .collect();
    let (code, out) = check("hook-template-args.yaml", &args).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("Successful  value=45").count(), 3, "{out}");

    // An argument nobody supplied: the check cannot run (exit 2), naming it and how to give it, without measuring.
    let (code, out) = check("hook-template-args.yaml", &[]).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("argument \"PodIP\" has no value"), "{out}");
    assert!(out.contains("--arg NAME=VALUE"), "{out}");
    assert!(!out.contains("#1"), "{out}");

    let (code, out) = check("does-not-exist.yaml", &[]).await;
    assert_eq!(code, 2, "{out}");
}

#[tokio::test]
async fn json_output_has_one_object_per_measurement() {
    let addr = hook_endpoint().await;
    let (code, out) =
        check("hook-template-success.yaml", &["--json".into(), "--web-resolve".into(), format!("1.1.1.1:9091={addr}")])
            .await;
    assert_eq!(code, 0, "{out}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0]["phase"], "Successful");
    assert_eq!(lines[0]["value"], "45");
    assert_eq!(lines[3]["result"], "Successful");
    assert_eq!(lines[3]["status"]["metricResults"][0]["count"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_ends_check_quietly() {
    use tokio::io::AsyncBufReadExt;
    let addr = hook_endpoint().await;
    let file = format!("{}/../examples/hook-template-success.yaml", env!("CARGO_MANIFEST_DIR"));
    // `| head -1`: the reader takes the first line and goes away; the next line (6 s later) meets a closed pipe.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_hook-operator"))
        .args(["check", "-f", &file, "--interval-scale", "0.1", "--web-resolve", &format!("1.1.1.1:9091={addr}")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("check runs");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap_or_default();
    assert!(first.starts_with("checking "), "{first}");
    drop(lines);
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("check ends once nobody reads")
        .expect("check runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(141), "exits as a command stopped by SIGPIPE would: {stderr}");
}

/// An invalid template is not run: exit 2 with the words the admission webhook refuses it with (`invalid
/// HookTemplate NAME: ...`, every problem), never "invalid HookRun".
#[tokio::test]
async fn an_invalid_template_exits_2_with_the_admission_message() {
    let dir = std::env::temp_dir().join(format!("hook-check-invalid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "apiVersion: tkex.tencent.com/v1alpha1\nkind: HookTemplate\nmetadata: {name: bad}\nspec:\n  metrics:\n  \
         - name: webtest\n    successCondition: asInt(reslt) > 30\n    provider: {web: {url: 'http://127.0.0.1:1/'}}\n  \
         - name: second\n    successCondition: 'asInt(result) >'\n    provider: {web: {url: 'http://127.0.0.1:1/'}}\n",
    )
    .unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_hook-operator"))
        .args(["check", "-f", &file.display().to_string()])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let want = format!(
        "hook-operator check: {}: invalid HookTemplate bad: metrics[0] (webtest): successCondition `asInt(reslt) > 30` is not accepted: unknown name `reslt`",
        file.display()
    );
    assert!(stderr.starts_with(&want), "{stderr}");
    assert!(stderr.contains("; metrics[1] (second): successCondition `asInt(result) >` does not parse"), "{stderr}");
    assert!(!stderr.contains("HookRun"), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing is measured");
    let _ = std::fs::remove_dir_all(&dir);
}
