//! Every measurement that can change a verdict is durable before the next one is taken (issue 35). An endpoint
//! answers by a script (pass, fail, error, in the order it answers requests) and the hook-operator is SIGKILLed and
//! started again after **each** measurement, at the moment the next measurement's request arrives (that request is
//! never answered). Every measurement that was not Successful must be in the stored status by then; a success may
//! still be batched, so one lost with the kill is measured again and the script answers it the same. The run must
//! end exactly as it would without restarts.
//!
//! `--status-write-interval 5s` makes the batching visible: without durability, the first failure waited for the
//! run's first write (5 s) while the next measurement was due after 1 s, and a restart measured again — F S F
//! recorded S F S and ended Successful; five errors in a row never reached `consecutiveErrorLimit`.
//!
//! Each restart here happens after a measurement was due (its request had arrived), so the restarted operator's
//! next measurement is a retake that can only count against the run (`hook_operator::engine::lost`): the S it is
//! answered with after the first kill is recorded as an Error. `hook_lost_outcomes` kills at random instants
//! while status writes are slow.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::api::{HookPhase, HookRun};
use e2e::{Cluster, Operator, wait_for};
use kube::Api;
use kube::api::PostParams;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `{"age":45}`: the success condition holds.
    Pass,
    /// `{"age":10}`: it does not (Failed).
    Fail,
    /// HTTP 500 (Error).
    Error,
}

/// The endpoint's state: the script, how far it got, and what the kills found.
struct Script {
    answers: Vec<Answer>,
    /// Requests answered so far (the index of the next answer).
    answered: usize,
    /// After how many answers the operator was killed (once each).
    killed_after: std::collections::BTreeSet<usize>,
    /// Non-successful measurements missing from status when the next measurement started.
    violations: Vec<String>,
}

struct Endpoint {
    script: Mutex<Script>,
    operator: tokio::sync::Mutex<Option<Operator>>,
    runs: Api<HookRun>,
    run: String,
}

/// Measurements of the run's first metric in its stored status.
async fn stored_measurements(runs: &Api<HookRun>, name: &str) -> usize {
    let Some(run) = runs.get_opt(name).await.ok().flatten() else { return 0 };
    let Some(result) = run.status.and_then(|s| s.metric_results.into_iter().next()) else { return 0 };
    (result.successful + result.failed + result.inconclusive + result.error) as usize
}

impl Endpoint {
    /// What to do with a request: `Some(answer)` to answer it, `None` after killing the operator (the request came
    /// from the killed process and is not answered).
    async fn on_request(&self) -> Option<Answer> {
        let answered = {
            let mut script = self.script.lock().unwrap();
            let answered = script.answered;
            // Killed after each measurement of the script but its last (which completes the run), once each.
            if answered == 0 || answered >= script.answers.len() || script.killed_after.contains(&answered) {
                let answer = script.answers.get(answered).copied().unwrap_or(Answer::Pass);
                script.answered += 1;
                return Some(answer);
            }
            answered
        };
        // The run measures again after `answered` answers, the first time: kill the operator now. What it measured
        // must be stored, except successes (they may be batched): those lost are measured again and answered the
        // same (the script goes back to them); any other measurement lost is a violation.
        let stored = stored_measurements(&self.runs, &self.run).await;
        {
            let mut script = self.script.lock().unwrap();
            script.killed_after.insert(answered);
            if stored < answered {
                let lost: Vec<Answer> =
                    (stored..answered).map(|i| script.answers.get(i).copied().unwrap_or(Answer::Pass)).collect();
                if lost.iter().all(|a| *a == Answer::Pass) {
                    script.answered = stored;
                } else {
                    script.violations.push(format!(
                        "after {answered} answers {lost:?} the status held {stored} measurement(s) when the run \
                         measured again"
                    ));
                }
            }
        }
        let mut operator = self.operator.lock().await;
        if let Some(operator) = operator.as_mut() {
            operator.restart().await;
        }
        None
    }
}

/// A keep-alive HTTP/1.1 server answering by the script.
async fn serve(endpoint: Arc<Endpoint>) -> std::net::SocketAddr {
    e2e::hook::serve_http(move |_| {
        let endpoint = endpoint.clone();
        Box::pin(async move {
            let (status, body) = match endpoint.on_request().await? {
                Answer::Pass => ("200 OK", r#"{"age":45}"#),
                Answer::Fail => ("200 OK", r#"{"age":10}"#),
                Answer::Error => ("500 Internal Server Error", r#"{"error":"scripted"}"#),
            };
            Some((status, body.as_bytes().to_vec()))
        })
    })
    .await
}

/// Runs `run` against the script with a kill after each measurement; returns the completed run and the endpoint.
async fn scripted(answers: &[Answer], count: i32, failure_limit: i32) -> (HookRun, Arc<Endpoint>) {
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    let endpoint = Arc::new(Endpoint {
        script: Mutex::new(Script {
            answers: answers.to_vec(),
            answered: 0,
            killed_after: Default::default(),
            violations: Vec::new(),
        }),
        operator: tokio::sync::Mutex::new(None),
        runs: runs.clone(),
        run: "scripted".into(),
    });
    let addr = serve(endpoint.clone()).await;
    *endpoint.operator.lock().await =
        Some(cluster.operator("hook-operator", "hook-operator", &["--status-write-interval", "5s"]));
    let started = Instant::now();
    runs.create(&PostParams::default(), &e2e::hook::scripted_age_run("scripted", addr, count, failure_limit))
        .await
        .unwrap();
    let done = wait_for("the scripted run to complete", Duration::from_secs(180), || async {
        let run = runs.get_opt("scripted").await.ok().flatten()?;
        run.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p.is_completed()).then_some(run)
    })
    .await;
    eprintln!(
        "completed after {:?} with {} kill(s): {:?}",
        started.elapsed(),
        endpoint.script.lock().unwrap().killed_after.len(),
        done.status.as_ref().and_then(|s| s.message.clone())
    );
    // Logs are printed by the operator's Drop if an assertion below fails; keep it until then.
    let operator = endpoint.operator.lock().await.take();
    let answered = endpoint.script.lock().unwrap().answered;
    assert!(answered >= answers.len(), "the script was played to its end ({answered} answers)");
    drop(operator);
    cluster.shutdown().await;
    (done, endpoint)
}

/// `count: 3, failureLimit: 1`, the endpoint answering F, S, F: Failed (2 failures > 1), whatever restarts happen
/// between the measurements. The S answers the retake after the first kill and counts as an Error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_survives_a_restart_and_f_s_f_ends_failed() {
    let script = [Answer::Fail, Answer::Pass, Answer::Fail];
    let (run, endpoint) = scripted(&script, 3, 1).await;
    let status = run.status.as_ref().unwrap();
    let violations = endpoint.script.lock().unwrap().violations.clone();
    assert!(violations.is_empty(), "{violations:#?}\nstatus: {status:#?}");
    assert_eq!(status.phase, Some(HookPhase::Failed), "{status:#?}");
    let metric = &status.metric_results[0];
    assert_eq!((metric.failed, metric.successful, metric.error, metric.count), (2, 0, 1, 2), "{metric:#?}");
    let phases: Vec<_> = metric.measurements.iter().map(|m| m.phase).collect();
    assert_eq!(phases, [Some(HookPhase::Failed), Some(HookPhase::Error), Some(HookPhase::Failed)]);
    let retake = metric.measurements[1].message.as_deref().unwrap_or_default();
    assert!(retake.contains("does not count"), "the retake's success is an Error: {retake}");
    let kills: Vec<usize> = endpoint.script.lock().unwrap().killed_after.iter().copied().collect();
    assert_eq!(kills, [1, 2], "killed after the first and the second measurement");
}

/// Five errors in a row (default `consecutiveErrorLimit` 4), a kill after each: Error, with `consecutiveError` 5 —
/// the counter is not reset by a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_errors_survive_restarts_and_five_end_the_run() {
    let script = [Answer::Error; 5];
    let (run, endpoint) = scripted(&script, 3, 0).await;
    let status = run.status.as_ref().unwrap();
    let violations = endpoint.script.lock().unwrap().violations.clone();
    assert!(violations.is_empty(), "{violations:#?}\nstatus: {status:#?}");
    assert_eq!(status.phase, Some(HookPhase::Error), "{status:#?}");
    let metric = &status.metric_results[0];
    assert_eq!((metric.error, metric.consecutive_error, metric.count), (5, 5, 0), "{metric:#?}");
    let kills: Vec<usize> = endpoint.script.lock().unwrap().killed_after.iter().copied().collect();
    assert_eq!(kills, [1, 2, 3, 4], "killed after each of the first four errors");
}
