//! What `kubectl get gamedeployment` shows, with the real kubectl: the default view keeps exactly the BCS columns
//! (`DESIRED UPDATED UPDATED_READY READY TOTAL AGE`), and `-o wide` adds the state — `STATUS` (the reason of the
//! Progressing condition), `PAUSED`, the canary `STEP` and the `MESSAGE` saying what the rollout waits for — so a
//! mistake such as a selector that does not match the template is visible without `describe`. A missing value
//! (no canary: no STEP) is an empty cell, as a real API server's table for a CRD leaves it.

use std::collections::BTreeMap;

use e2e::gamedeployment::{Columns, Shape, apply, manifest, manifest_shaped, wait_columns};
use e2e::{Cluster, DEADLINE, wait_for};

const DEFAULT: [&str; 7] = ["NAME", "DESIRED", "UPDATED", "UPDATED_READY", "READY", "TOTAL", "AGE"];
const WIDE: [&str; 11] =
    ["NAME", "DESIRED", "UPDATED", "UPDATED_READY", "READY", "TOTAL", "AGE", "STATUS", "PAUSED", "STEP", "MESSAGE"];

/// One row of `kubectl get gamedeployment NAME [-o wide]`, cut at the header's column offsets (MESSAGE has spaces).
async fn row(cluster: &Cluster, name: &str, wide: bool, quiet: bool) -> BTreeMap<String, String> {
    let mut args = vec!["get", "gamedeployment", name];
    if wide {
        args.extend(["-o", "wide"]);
    }
    let out = cluster.kubectl_ok(&args).await;
    if !quiet {
        println!("$ kubectl {}\n{out}", args.join(" "));
    }
    let mut lines = out.lines();
    let header = lines.next().expect("a header");
    let line = lines.next().expect("a row");
    let names: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(names, if wide { &WIDE[..] } else { &DEFAULT[..] }, "{out}");
    let starts: Vec<usize> = names.iter().map(|n| header.find(&format!("{n} ")).or(header.rfind(n)).unwrap()).collect();
    let mut cells = BTreeMap::new();
    for (i, n) in names.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(line.len()).min(line.len());
        cells.insert(n.to_string(), line.get(starts[i]..end).unwrap_or("").trim().to_string());
    }
    cells
}

/// Waits until the wide row satisfies `want`, printing it.
async fn wait_wide(cluster: &Cluster, name: &str, what: &str, want: impl Fn(&BTreeMap<String, String>) -> bool) {
    let cells = wait_for(what, DEADLINE, || async {
        let cells = row(cluster, name, true, true).await;
        want(&cells).then_some(cells)
    })
    .await;
    row(cluster, name, true, false).await;
    println!("{cells:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_view_shows_the_state_and_the_default_view_stays_bcs() {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let _operator = e2e::gamedeployment::start_operator(&cluster);

    // A healthy GameDeployment: RolloutComplete, not paused, no canary step.
    apply(&cluster, &manifest("healthy", 2, "InplaceUpdate", "", "python:latest")).await;
    wait_columns(&cluster, "healthy", Columns::new(2, 2, 2, 2, 2)).await;
    let cells = row(&cluster, "healthy", false, false).await;
    assert_eq!(cells["DESIRED"], "2");
    wait_wide(&cluster, "healthy", "healthy: RolloutComplete", |c| {
        c["STATUS"] == "RolloutComplete"
            && c["PAUSED"] == "false"
            && c["STEP"].is_empty()
            && c["MESSAGE"].contains("2 pods")
    })
    .await;

    // The issue's mistake: a selector that does not match the template. The default view only shows zeros;
    // the wide view says why.
    let shape = Shape { selector_app: Some("other"), ..Shape::default() };
    let mismatch = manifest_shaped("mismatch", 2, "InplaceUpdate", "", "python:latest", shape);
    assert!(mismatch.contains("app: other"));
    apply(&cluster, &mismatch).await;
    wait_wide(&cluster, "mismatch", "mismatch: InvalidSpec", |c| {
        c["STATUS"] == "InvalidSpec" && c["MESSAGE"].contains("selector") && c["TOTAL"] == "0"
    })
    .await;
    let cells = row(&cluster, "mismatch", false, false).await;
    assert_eq!(cells["TOTAL"], "0");

    // Paused by the user.
    cluster
        .kubectl_ok(&[
            "patch",
            "gamedeployment",
            "healthy",
            "--type=merge",
            "-p",
            r#"{"spec":{"updateStrategy":{"paused":true}}}"#,
        ])
        .await;
    wait_wide(&cluster, "healthy", "healthy: PAUSED true", |c| c["PAUSED"] == "true").await;

    // A canary rollout stopped at its indefinite pause step: STEP counts steps from 1, as the MESSAGE beside it and
    // every other view do (issue 49, finding 3: it showed the 0-based index, 1 beside "step 2 of 2"); PAUSED true.
    let steps = "    canary:\n      steps:\n        - partition: 1\n        - pause: {}\n";
    let canary = manifest("canary", 2, "InplaceUpdate", steps, "python:latest");
    apply(&cluster, &canary).await;
    wait_columns(&cluster, "canary", Columns::new(2, 2, 2, 2, 2)).await;
    wait_wide(&cluster, "canary", "canary: all steps done", |c| c["STEP"] == "done").await;
    apply(&cluster, &manifest("canary", 2, "InplaceUpdate", steps, "python:3.5")).await;
    wait_wide(&cluster, "canary", "canary: paused at step 2 of 2", |c| {
        c["STEP"] == "2/2" && c["PAUSED"] == "true" && c["MESSAGE"].contains("paused at canary step 2 of 2")
    })
    .await;

    cluster.shutdown().await;
}
