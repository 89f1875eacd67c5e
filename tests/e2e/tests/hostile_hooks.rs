//! Hostile and careless hooks against the real hook-operator binary on kube-sim: a condition that used to abort
//! the process (`len(0..1000000000000) > 0`) ends its HookRun `Error` with a message, a HookTemplate carrying it
//! gets a Warning Event before any run exists, the operator's memory stays under the chart's limit, and another
//! HookRun keeps completing on time. A run whose probe keeps failing says so while it is still Running
//! (`status.message`, `kubectl get hr -o wide`, a `MeasurementError` Event).

use std::time::{Duration, Instant};

use e2e::hook::{assert_completed, get_run, hook_pod, start_operator};
use e2e::{Cluster, DEADLINE, repo_root, wait_for};

const HOSTILE: &str = "len(0..1000000000000) > 0";

fn run_manifest(name: &str, url: &str, condition: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: tkex.tencent.com/v1alpha1
kind: HookRun
metadata:
  name: {name}
spec:
  metrics:
    - name: webtest
      interval: 60s
      count: 3
      successCondition: "{condition}"
{extra}      provider:
        web:
          url: {url}
          jsonPath: "{{$.age}}"
"#
    )
}

async fn apply(cluster: &Cluster, name: &str, text: &str) {
    let path = cluster.dir().join(format!("{name}.yaml"));
    std::fs::write(&path, text).expect("manifest written");
    cluster.kubectl_ok(&["apply", "-f", &path.display().to_string()]).await;
}

/// The chart's memory limit of the hook-operator, in bytes (`hookOperator.resources.limits.memory`).
fn chart_memory_limit() -> u64 {
    let values = std::fs::read_to_string(repo_root().join("charts/gamedeployment-operators/values.yaml")).unwrap();
    let values: serde_yaml::Value = serde_yaml::from_str(&values).unwrap();
    let limit = values["hookOperator"]["resources"]["limits"]["memory"].as_str().expect("a memory limit").to_string();
    let (number, unit) = limit.split_at(limit.find(|c: char| !c.is_ascii_digit()).unwrap_or(limit.len()));
    let factor = match unit {
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ki" => 1 << 10,
        "" => 1,
        other => panic!("unit {other}"),
    };
    number.parse::<u64>().unwrap() * factor
}

/// Resident memory of the hook-operator started for this cluster (found by its kubeconfig on the command line).
fn operator_rss(cluster: &Cluster) -> Option<u64> {
    let kubeconfig = cluster.kubeconfig().display().to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline);
        if !(cmdline.contains("hook-operator") && cmdline.contains(&kubeconfig)) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
        let kb: u64 = status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()?;
        return Some(kb * 1024);
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_condition_ends_its_run_and_hurts_nobody_else() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let ip = hook_pod(&cluster, "canary-hook").await;
    let mut operator = start_operator(&cluster, &[]);
    let url = format!("http://{ip}:9091");

    // A template with the condition: a Warning Event before any run exists, with the reason as a sentence.
    let template = format!(
        r#"apiVersion: tkex.tencent.com/v1alpha1
kind: HookTemplate
metadata:
  name: hostile
spec:
  metrics:
    - name: webtest
      successCondition: "{HOSTILE}"
      provider:
        web:
          url: {url}
"#
    );
    apply(&cluster, "hostile-template", &template).await;
    let event = wait_for("an InvalidHookTemplate Event", DEADLINE, || async {
        let out = cluster.kubectl(&["get", "events", "-o", "json"]).await;
        let events: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
        events["items"].as_array()?.iter().find_map(|e| {
            let note = e["note"].as_str().or(e["message"].as_str())?;
            (e["reason"] == "InvalidHookTemplate" && note.contains("1000000000001")).then(|| note.to_string())
        })
    })
    .await;
    assert!(event.contains("has 1000000000001 elements"), "{event}");

    // A well-behaved run, then the hostile one, then another well-behaved one.
    let started = Instant::now();
    apply(&cluster, "before", &run_manifest("before", &url, "asInt(result) > 30", "")).await;
    apply(&cluster, "hostile", &run_manifest("hostile", &url, HOSTILE, "")).await;
    apply(&cluster, "after", &run_manifest("after", &url, "asInt(result) > 30", "")).await;

    let hostile = assert_completed(&cluster, "hostile", "Error").await;
    let message = hostile.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains("successCondition") && message.contains("elements"), "{message}");
    for name in ["before", "after"] {
        assert_completed(&cluster, name, "Successful").await;
    }
    // 3 measurements 0.6 s apart (60 s scaled by 0.01): well under half a minute even on a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(45), "the other runs took {:?}", started.elapsed());

    let rss = operator_rss(&cluster).expect("the hook-operator process");
    let limit = chart_memory_limit();
    println!("hook-operator RSS {} MiB (chart limit {} MiB)", rss >> 20, limit >> 20);
    assert!(rss < limit, "RSS {rss} >= chart limit {limit}");
    assert!(operator.is_running(), "the operator never exits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_probe_keeps_failing_says_so_while_running() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let _operator = start_operator(&cluster, &[]);
    // A loopback port nobody listens on: connections are refused.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let extra = "      consecutiveErrorLimit: 1000\n";
    apply(&cluster, "failing", &run_manifest("failing", &format!("http://{closed}/"), "asInt(result) > 30", extra))
        .await;

    let message = wait_for("status.message to show the error while Running", DEADLINE, || async {
        let run = get_run(&cluster, "failing").await;
        let status = run.status?;
        (status.phase == Some(common::api::HookPhase::Running)).then_some(())?;
        status.message.filter(|m| m.contains("measurement error(s) in a row"))
    })
    .await;
    assert!(message.contains("cannot connect"), "{message}");

    let wide = cluster.kubectl_ok(&["get", "hookrun", "failing", "-o", "wide"]).await;
    let header: Vec<&str> = wide.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "PHASE", "AGE", "METRIC", "VALUE", "SUCCESSFUL", "FAILED", "ERRORS", "MESSAGE"],
        "{wide}"
    );
    assert!(wide.contains("Running") && wide.contains("webtest") && wide.contains("cannot connect"), "{wide}");
    let default = cluster.kubectl_ok(&["get", "hookrun", "failing"]).await;
    assert!(!default.contains("MESSAGE"), "the extra columns are -o wide only:\n{default}");

    let note = wait_for("a MeasurementError Event", DEADLINE, || async {
        let out = cluster.kubectl(&["get", "events", "-o", "json"]).await;
        let events: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
        let matching: Vec<String> = events["items"]
            .as_array()?
            .iter()
            .filter(|e| e["reason"] == "MeasurementError")
            .filter_map(|e| e["note"].as_str().or(e["message"].as_str()).map(str::to_string))
            .collect();
        matching.into_iter().next()
    })
    .await;
    assert!(note.contains("webtest") && note.contains("cannot connect"), "{note}");
}
