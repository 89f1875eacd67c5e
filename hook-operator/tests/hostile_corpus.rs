//! The hostile-input corpus (`testdata/hostile.yaml`) through `hook-operator check`: each input's measurement ends
//! `Error` with a message naming the bound it hit, the check process (with its evaluation workers) stays under
//! 100 MiB of resident memory, and it returns promptly, not after the input's work is done.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use hook_operator::testing::hostile::{self, Case, tree_rss};

/// Serves each case's answer at `/<name>`.
async fn endpoint(cases: &[Case]) -> SocketAddr {
    let bodies: std::collections::HashMap<String, Vec<u8>> =
        cases.iter().map(|c| (c.name.clone(), c.answer.body())).collect();
    let bodies = std::sync::Arc::new(bodies);
    let router = Router::new().route(
        "/{name}",
        get(move |Path(name): Path<String>| {
            let bodies = bodies.clone();
            async move { bodies.get(&name).cloned().unwrap_or_default() }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_input_ends_at_a_named_bound_within_memory_and_time() {
    let cases = hostile::cases().unwrap();
    let addr = endpoint(&cases).await;
    let dir = std::env::temp_dir().join(format!("hostile-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut report = Vec::new();
    for case in &cases {
        let file = dir.join(format!("{}.yaml", case.name));
        std::fs::write(&file, hostile::template(case, &format!("http://{addr}/{}", case.name))).unwrap();
        let started = Instant::now();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_hook-operator"))
            .args(["check", "--json", "-f", &file.display().to_string(), "--max-body-bytes", "16777216"])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = child.id().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let read = tokio::spawn(async move {
            let mut out = String::new();
            tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut out).await.unwrap();
            out
        });
        let mut peak = 0;
        let status = loop {
            peak = peak.max(tree_rss(pid));
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "{}: check still runs after a minute", case.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let took = started.elapsed();
        let out = read.await.unwrap();
        report.push(format!("{:40} {:>4} MiB {:>6} ms", case.name, peak >> 20, took.as_millis()));
        assert_eq!(status.code(), Some(1), "{}: {out}", case.name);
        let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap_or("{}")).unwrap();
        assert_eq!(first["phase"], "Error", "{}: {out}", case.name);
        let message = first["message"].as_str().unwrap_or_default();
        assert!(message.contains(&case.expect), "{}: {message:?} does not say {:?}", case.name, case.expect);
        assert!(peak < 100 << 20, "{}: the check took {} MiB", case.name, peak >> 20);
        // Generous for a loaded machine: unbounded, these inputs take tens of seconds to minutes.
        assert!(took < Duration::from_secs(20), "{}: the check took {took:?}", case.name);
    }
    println!("case                                     peak RSS   time\n{}", report.join("\n"));
}
