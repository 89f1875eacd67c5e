//! `kubectl gd check` is the hook-operator's local check: the walkthrough's templates against a local server
//! answering the BCS demo JSON (`{"age":45}`), through `--web-resolve` as in the README. And `--help` has examples.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;

/// A tiny HTTP server answering every request with the demo JSON; returns its address.
fn demo_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = r#"{"name":"bryan","male":"yes","age":45}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

fn check(template: &str, server: &str) -> std::process::Output {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    Command::new(env!("CARGO_BIN_EXE_kubectl-gd"))
        .current_dir(root)
        .args(["check", "-f", template, "--interval-scale", "0.01", "--web-resolve"])
        .arg(format!("1.1.1.1:9091={server}"))
        .output()
        .expect("kubectl-gd runs")
}

#[test]
fn check_runs_the_template_locally_with_the_hook_operators_engine() {
    let server = demo_server();
    let ok = check("examples/hook-template-success.yaml", &server);
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{stdout}{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(stdout.matches("value=45").count(), 3, "three measurements of 45: {stdout}");
    assert!(stdout.contains("result: Successful"), "{stdout}");

    let failed = check("examples/hook-template-fail.yaml", &server);
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert_eq!(failed.status.code(), Some(1), "{stdout}{}", String::from_utf8_lossy(&failed.stderr));
    assert!(stdout.contains("result: Failed"), "{stdout}");
}

#[test]
fn help_has_examples_and_completion_scripts_are_generated() {
    let help = Command::new(env!("CARGO_BIN_EXE_kubectl-gd")).arg("--help").output().expect("runs");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success());
    for needle in
        ["Usage: kubectl gd", "Examples:", "kubectl gd status test-gamedeployment --timeout 10m", "Exit codes"]
    {
        assert!(text.contains(needle), "{needle} missing from --help:\n{text}");
    }
    let bash = Command::new(env!("CARGO_BIN_EXE_kubectl-gd")).args(["completion", "bash"]).output().expect("runs");
    let script = String::from_utf8_lossy(&bash.stdout);
    assert!(bash.status.success() && script.contains("complete") && script.contains("skip-hook"), "{script}");
}
