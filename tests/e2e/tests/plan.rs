//! `kubectl gd plan` against what really happens: the forecast of a change, then the same change applied with both
//! operators on kube-sim, the actual pod actions recorded from a watch on the pods and compared with the plan's
//! batches (existing pods by name and batch index, created pods by count per batch), and the plan's estimated
//! duration with the observed one.
//!
//! The walkthrough's image patch (seed 002, the BCS story): after the scale-in to 5, `python:3.5` goes to 3 pods in
//! place (partition 2, maxUnavailable 2): two pods, then one, each through its pre-delete HookRun (the example
//! template `test`, 3 measurements 60s apart, which the test hook-operator compresses 20x: `--interval-scale 0.05`,
//! given to the plan as `--hook-interval-scale 0.05`), a 30s grace period and `minReadySeconds: 30`.
//!
//! A race to empty under `--assume-hooks as-now`: planned once every candidate's run has read once, the plan's
//! winners are the pods deleted and its skipped pods the pods skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::api::GameDeployment;
use e2e::Cluster;
use e2e::gamedeployment::Columns;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;

use crate::kubectl_gd::kubectl_gd;
use crate::walkthrough_support::*;

const RACE_SKIPPED: &str = "gamedeployment.tkex.tencent.com/race-skipped";

const NEW_IMAGE: &str =
    r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value":"python:3.5"}]"#;

/// What a pod went through, as seen on the watch (times since the change was applied).
#[derive(Debug, Clone, Default)]
struct Seen {
    /// Held by a gate (`PreparingUpdate` / `PreparingDelete`).
    held: Option<Duration>,
    /// Its image changed in place.
    patched: Option<Duration>,
    deleted: Option<Duration>,
    /// It did not exist when the change was applied.
    created: Option<Duration>,
    /// Marked skipped by a race to empty (`race-skipped`).
    skipped: Option<Duration>,
    /// Back in service after its action (ready, `Normal`, on the new image), or gone.
    done: Option<Duration>,
}

impl Seen {
    fn started(&self) -> Option<Duration> {
        [self.held, self.patched, self.deleted, self.created].into_iter().flatten().min()
    }

    fn action(&self) -> &'static str {
        match (self.created, self.deleted, self.patched) {
            (Some(_), _, _) => "create",
            (None, Some(_), _) => "delete",
            (None, None, Some(_)) => "in-place-update",
            _ => "none",
        }
    }
}

/// Records every pod of the GameDeployment from now on.
struct PodWatch {
    seen: Arc<Mutex<BTreeMap<String, Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodWatch {
    async fn start(cluster: &Cluster, selector: &str, image: &str, since: Instant) -> Self {
        let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
        let existing: BTreeSet<String> = pods
            .list(&kube::api::ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        let seen: Arc<Mutex<BTreeMap<String, Seen>>> = Arc::default();
        let record = seen.clone();
        let image = image.to_string();
        let config = watcher::Config::default().labels(selector);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher::watcher(pods, config));
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) | watcher::Event::Delete(pod)) => {
                        pod
                    }
                    _ => continue,
                };
                let at = since.elapsed();
                let Some(name) = pod.metadata.name.clone() else { continue };
                let mut seen = record.lock().unwrap();
                let entry = seen.entry(name.clone()).or_default();
                if !existing.contains(&name) {
                    entry.created.get_or_insert(at);
                }
                let state = pod.metadata.labels.as_ref().and_then(|l| l.get("lifecycle.apps.kruise.io/state"));
                if state.is_some_and(|s| s == "PreparingUpdate" || s == "PreparingDelete") {
                    entry.held.get_or_insert(at);
                }
                if existing.contains(&name) && e2e::gamedeployment::image(&pod) == Some(image.as_str()) {
                    entry.patched.get_or_insert(at);
                }
                if e2e::gamedeployment::annotation(&pod, RACE_SKIPPED).is_some() {
                    entry.skipped.get_or_insert(at);
                }
                if pod.metadata.deletion_timestamp.is_some() {
                    entry.deleted.get_or_insert(at);
                    entry.done.get_or_insert(at);
                }
                let serving = e2e::gamedeployment::is_ready(&pod)
                    && state.is_none_or(|s| s == "Normal")
                    && e2e::gamedeployment::image(&pod) == Some(image.as_str());
                if serving && (entry.created.is_some() || entry.patched.is_some()) {
                    entry.done.get_or_insert(at);
                }
            }
        });
        Self { seen, task }
    }

    /// The pods acted on, grouped into batches: a pod whose action started more than `gap` after the first of the
    /// current batch opens the next batch.
    fn batches(&self, gap: Duration) -> Vec<Vec<(String, Seen)>> {
        self.grouped(|batch, start| start <= batch[0].1.started().unwrap_or_default() + gap)
    }

    /// The pods acted on, grouped into batches as the budget frees: a pod whose action started once a pod of the
    /// current batch was done (back in service, or gone) opens the next batch.
    fn batches_by_budget(&self) -> Vec<Vec<(String, Seen)>> {
        self.grouped(|batch, start| batch.iter().filter_map(|(_, s)| s.done).min().is_none_or(|freed| start < freed))
    }

    /// The pods acted on, in the order their actions started; a pod joins the current batch while `joins` says so.
    fn grouped(&self, joins: impl Fn(&[(String, Seen)], Duration) -> bool) -> Vec<Vec<(String, Seen)>> {
        let seen = self.seen.lock().unwrap();
        let mut acted: Vec<(String, Seen)> =
            seen.iter().filter(|(_, s)| s.started().is_some()).map(|(n, s)| (n.clone(), s.clone())).collect();
        acted.sort_by_key(|(_, s)| s.started());
        let mut batches: Vec<Vec<(String, Seen)>> = Vec::new();
        for (name, s) in acted {
            let start = s.started().unwrap_or_default();
            match batches.last_mut() {
                Some(batch) if joins(batch, start) => batch.push((name, s)),
                _ => batches.push(vec![(name, s)]),
            }
        }
        batches
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The plan's batches: existing pods by name, and how many pods each creates.
fn planned(plan: &serde_json::Value) -> Vec<(BTreeSet<String>, usize, BTreeSet<String>)> {
    plan["batches"]
        .as_array()
        .expect("batches")
        .iter()
        .map(|b| {
            let pods = b["pods"].as_array().expect("pods");
            let existing = pods.iter().filter(|p| p["new"] == false).map(|p| p["pod"].as_str().unwrap().to_string());
            // On the watch a recreated pod is a deleted one (its replacement is a created pod).
            let actions = pods.iter().map(|p| p["action"].as_str().unwrap().replace("recreate", "delete"));
            (existing.collect(), pods.iter().filter(|p| p["new"] == true).count(), actions.collect())
        })
        .collect()
}

fn observed(batches: &[Vec<(String, Seen)>]) -> Vec<(BTreeSet<String>, usize, BTreeSet<String>)> {
    batches
        .iter()
        .map(|b| {
            let existing = b.iter().filter(|(_, s)| s.created.is_none()).map(|(n, _)| n.clone()).collect();
            let created = b.iter().filter(|(_, s)| s.created.is_some()).count();
            let actions = b.iter().map(|(_, s)| s.action().to_string()).collect();
            (existing, created, actions)
        })
        .collect()
}

async fn wait_for_condition(cluster: &Cluster, want: impl Fn(&GameDeployment) -> bool) -> GameDeployment {
    e2e::wait_for("the GameDeployment to reach the expected state", LONG, || async {
        let gd = get_gd(cluster).await;
        want(&gd).then_some(gd)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_image_patch_goes_as_planned() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "hook-template-success.yaml").await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    wait_gd(&cluster, Columns::new(5, 5, 5, 5, 5)).await;
    wait_runs(&cluster, "the scale-in's HookRun to be removed", |rows| rows.is_empty()).await;
    // As in the walkthrough, the pods have long been available (`minReadySeconds: 30`).
    wait_for_condition(&cluster, |gd: &GameDeployment| gd.status.as_ref().is_some_and(|s| s.available_replicas == 5))
        .await;

    let args = ["plan", NAME, "--image", "python=python:3.5", "--hook-interval-scale", "0.05"];
    let text = kubectl_gd(&cluster, &args).await;
    assert_eq!(text.code, 0, "{}", text.stderr);
    let json = kubectl_gd(&cluster, &[&args[..], &["-o", "json"]].concat()).await;
    let plan: serde_json::Value = serde_json::from_str(&json.stdout).expect("-o json is JSON");
    let expected = planned(&plan);
    assert_eq!(expected.iter().map(|(e, c, _)| (e.len(), *c)).collect::<Vec<_>>(), [(2, 0), (1, 0)], "{}", text.stdout);
    assert_eq!(plan["stop"]["reason"], "partition");
    let estimate = plan["totalSeconds"].as_f64().expect("totalSeconds");

    let since = Instant::now();
    let watch = PodWatch::start(&cluster, &format!("app={NAME}"), "python:3.5", since).await;
    // The rollout is timed from the patch's commit to the status that says it is done, both as the watch delivered
    // them: not by this test's clock around a kubectl process and a poll.
    let gds = e2e::observe::Observer::<GameDeployment>::namespaced(&cluster, "default").await;
    let generation = get_gd(&cluster).await.metadata.generation.unwrap_or_default();
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    let patched = gds
        .wait("the patch", LONG, |seen| (seen.object.metadata.generation > Some(generation)).then_some(seen.at))
        .await;
    let done = gds
        .wait("the image patch to roll out", LONG, |seen| {
            let gd = &seen.object;
            let status = gd.status.as_ref()?;
            let done = status.observed_generation == gd.metadata.generation
                && gd.metadata.generation > Some(generation)
                && status.updated_available_replicas == 3
                && status.available_replicas == 5;
            done.then_some(seen.at)
        })
        .await;
    let took = done.duration_since(patched).as_secs_f64();
    show_gd(&cluster).await;

    let actual = watch.batches(Duration::from_secs(5));
    println!("planned: {expected:?}\nobserved: {:?}\n{actual:#?}", observed(&actual));
    assert_eq!(observed(&actual), expected, "the pods were acted on in the planned batches, with the planned actions");
    println!("estimated {estimate}s, observed {took:.1}s");
    assert!((estimate - took).abs() <= 0.2 * took, "the estimate {estimate}s is within 20% of the observed {took:.1}s");
}

/// A canary (`examples/canary-gamedeployment.yaml`: steps partition 3, then an indefinite pause): the plan updates
/// the one pod the first step lets go and stops at the pause; the operators update that very pod and pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_goes_as_planned_to_its_pause() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "canary-hooktemplate.yaml").await;
    example(&cluster, "canary-gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(4, 4, 4, 4, 4)).await;
    wait_for_condition(&cluster, |gd: &GameDeployment| {
        gd.status.as_ref().is_some_and(|s| s.current_step_index == Some(5) && s.available_replicas == 4)
    })
    .await;

    let plan = kubectl_gd(&cluster, &["plan", NAME, "--image", "python=python:3.5", "-o", "json"]).await;
    kubectl_gd(&cluster, &["plan", NAME, "--image", "python=python:3.5"]).await;
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).expect("-o json is JSON");
    let expected = planned(&plan);
    assert_eq!(expected.iter().map(|(e, c, _)| (e.len(), *c)).collect::<Vec<_>>(), [(1, 0)]);
    assert_eq!(plan["stop"]["reason"], "paused", "{plan}");

    let since = Instant::now();
    let watch = PodWatch::start(&cluster, &format!("app={NAME}"), "python:3.5", since).await;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", NEW_IMAGE]).await;
    wait_for_condition(&cluster, |gd: &GameDeployment| {
        gd.spec.update_strategy.paused
            && gd.status.as_ref().is_some_and(|s| s.current_step_index == Some(1) && s.updated_available_replicas == 1)
    })
    .await;
    // Paused: nothing more happens.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let actual = watch.batches_by_budget();
    println!("planned: {expected:?}\nobserved: {:?}\n{actual:#?}", observed(&actual));
    assert_eq!(observed(&actual), expected, "the planned pod, and only it, was updated before the pause");
}

/// A rolling update with surge (`examples/rolling-update.yaml`: 8 pods, partition 3, maxUnavailable 2, maxSurge 2):
/// the planned old pods recreated in the planned order, the surge first, as many pods created as planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_with_surge_goes_as_planned() {
    let cluster = Cluster::start().await;
    let (_hooks, _gd) = operators(&cluster).await;
    example(&cluster, "rolling-update.yaml").await;
    wait_gd(&cluster, Columns::new(8, 8, 8, 8, 8)).await;
    wait_for_condition(&cluster, |gd: &GameDeployment| gd.status.as_ref().is_some_and(|s| s.available_replicas == 8))
        .await;

    let args = ["plan", NAME, "--image", "python=python:3.6"];
    kubectl_gd(&cluster, &args).await;
    let plan = kubectl_gd(&cluster, &[&args[..], &["-o", "json"]].concat()).await;
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).expect("-o json is JSON");
    let expected = planned(&plan);
    assert_eq!(plan["stop"]["reason"], "partition", "{plan}");

    let since = Instant::now();
    let watch = PodWatch::start(&cluster, "app=test", "python:3.6", since).await;
    let patch = r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value":"python:3.6"}]"#;
    cluster.kubectl_ok(&["patch", "gamedeployment", NAME, "--type=json", "-p", patch]).await;
    wait_for_condition(&cluster, |gd: &GameDeployment| {
        gd.status.as_ref().is_some_and(|s| {
            s.observed_generation == gd.metadata.generation
                && s.updated_available_replicas == 5
                && s.available_replicas == 8
                && s.replicas == 8
        })
    })
    .await;
    show_gd(&cluster).await;
    let actual = watch.batches_by_budget();
    println!("planned: {expected:?}\nobserved: {:?}\n{actual:#?}", observed(&actual));
    let recreated = |b: &[(BTreeSet<String>, usize, BTreeSet<String>)]| -> BTreeSet<String> {
        b.iter().flat_map(|(e, _, _)| e.iter().cloned()).collect()
    };
    let created = |b: &[(BTreeSet<String>, usize, BTreeSet<String>)]| b.iter().map(|(_, c, _)| c).sum::<usize>();
    let observed = observed(&actual);
    assert_eq!(recreated(&observed), recreated(&expected), "the planned old pods, and only they, were recreated");
    assert_eq!(created(&observed), created(&expected), "as many pods created as planned");
    // The operators act milliseconds apart where the forecast steps a second, so passes cannot be told apart on the
    // watch; their order can: every old pod of a planned batch is deleted before any of a later batch, and the
    // pods the first batch creates (the surge) are created before the first deletion. When pods turn available
    // sooner than forecast, one pass deletes the pods of two planned batches; it sends them side by side (the write
    // window), so their order on the watch is arbitrary: deletions less than `SAME_PASS` apart count as one pass
    // (a pass's deletions show up within a millisecond; the next pass first waits to see them in its cache).
    const SAME_PASS: Duration = Duration::from_millis(20);
    let seen = watch.seen.lock().unwrap().clone();
    let deleted_at = |name: &String| seen.get(name).and_then(|s| s.deleted).expect("deleted");
    let old_batches: Vec<&BTreeSet<String>> = expected.iter().map(|(e, _, _)| e).filter(|e| !e.is_empty()).collect();
    for pair in old_batches.windows(2) {
        let last = pair[0].iter().map(deleted_at).max().expect("a planned batch has pods");
        let first = pair[1].iter().map(deleted_at).min().expect("a planned batch has pods");
        assert!(last <= first + SAME_PASS, "{:?} deleted before {:?}: {seen:#?}", pair[0], pair[1]);
    }
    let first_deletion = seen.values().filter_map(|s| s.deleted).min().expect("a deletion");
    let surge = seen.values().filter(|s| s.created.is_some_and(|c| c < first_deletion)).count();
    assert_eq!(surge, expected[0].1, "the surge pods come first: {seen:#?}");
}

/// `--assume-hooks as-now` on a scale-in held by a running hook whose first measurement failed (the walkthrough's
/// fail template: 3 measurements, failureLimit 2; the hook-operator at `--interval-scale 0.25`, so the run fails at
/// its third measurement, 30 s after it started): the plan says the held pod's hook fails and the pod stays, where
/// `succeed` would delete it; the operators then do what `as-now` said, about when it said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_now_forecasts_a_failing_running_hook() {
    use common::api::{HookPhase, HookRun};
    let cluster = Cluster::start().await;
    cluster.install_crds().await;
    let ip = e2e::hook::hook_pod(&cluster, "canary-hook").await;
    let resolve = format!("1.1.1.1:9091={ip}:9091");
    let _hooks = e2e::hook::start_operator_scaled(&cluster, "0.25", &["--web-resolve", &resolve]);
    let _gd = e2e::gamedeployment::start_operator(&cluster);
    example(&cluster, "hook-template-fail.yaml").await;
    example(&cluster, "gamedeployment.yaml").await;
    wait_gd(&cluster, Columns::new(6, 6, 6, 6, 6)).await;
    // The run is Running with one failure for one interval only: observed from a watch started before the scale-in.
    let runs = e2e::observe::Observer::<HookRun>::namespaced(&cluster, "default").await;
    cluster.kubectl_ok(&["scale", "--replicas=5", &format!("gamedeployment/{NAME}")]).await;
    let run = runs
        .wait("a running pre-delete run with one failed measurement", LONG, |seen| {
            let status = seen.object.status.as_ref()?;
            let one_failed = status.metric_results.first().is_some_and(|m| m.failed == 1);
            (status.phase == Some(HookPhase::Running) && one_failed).then(|| seen.object.clone())
        })
        .await;
    let run_name = run.metadata.name.clone().unwrap_or_default();
    let held = e2e::gamedeployment::live_pods(&cluster, NAME)
        .await
        .into_iter()
        .find(|p| e2e::gamedeployment::label(p, "lifecycle.apps.kruise.io/state") == Some("PreparingDelete"))
        .and_then(|p| p.metadata.name)
        .expect("a pod held by the run");

    let args = ["plan", NAME, "--replicas", "5", "--hook-interval-scale", "0.25"];
    kubectl_gd(&cluster, &[&args[..], &["--assume-hooks", "as-now"]].concat()).await;
    // The plan's "now" falls between these two readings of the clock the operators' timestamps use.
    let asked = k8s_openapi::jiff::Timestamp::now();
    let as_now = kubectl_gd(&cluster, &[&args[..], &["--assume-hooks", "as-now", "-o", "json"]].concat()).await;
    let answered = k8s_openapi::jiff::Timestamp::now();
    let succeed = kubectl_gd(&cluster, &[&args[..], &["-o", "json"]].concat()).await;
    let as_now: serde_json::Value = serde_json::from_str(&as_now.stdout).expect("JSON");
    let succeed: serde_json::Value = serde_json::from_str(&succeed.stdout).expect("JSON");
    let step = &as_now["batches"][0]["pods"][0];
    assert_eq!(as_now["batches"].as_array().map(Vec::len), Some(1), "{as_now}");
    assert_eq!(step["pod"], held.as_str());
    assert_eq!(step["hooks"][0]["run"], run_name.as_str(), "it waits on the running run");
    assert_eq!(step["hooks"][0]["outcome"], "Failed");
    assert!(step["acted"].is_null(), "{step}");
    assert_eq!(as_now["stop"]["reason"], "hook-failed");
    assert_eq!(succeed["stop"]["reason"], "complete", "assuming success the pod would go: {succeed}");
    let fails_in = step["hooks"][0]["completes"].as_f64().expect("it completes");

    // What happens: the run fails, the pod stays.
    let failed = runs
        .wait("the held pod's run to fail", LONG, |seen| {
            let status = seen.object.status.as_ref()?;
            (seen.name() == run_name && status.phase == Some(HookPhase::Failed)).then(|| status.clone())
        })
        .await;
    let gd = wait_for_condition(&cluster, |gd: &GameDeployment| {
        gd.status.as_ref().is_some_and(|s| {
            s.pre_delete_hook_condition.iter().any(|c| c.pod_name == held && c.phase == HookPhase::Failed)
        })
    })
    .await;
    assert!(gd.status.is_some());
    assert!(
        e2e::gamedeployment::live_pods(&cluster, NAME).await.iter().any(|p| p.metadata.name.as_deref() == Some(&held)),
        "the held pod stays"
    );
    // Within 20 % of the run's 30 s, as the plan said. Timed by the run's own record (its failing measurement's end,
    // written by the hook-operator) against the plan's moment, not by this test's clock after slow kubectl calls.
    let failed_at = failed
        .metric_results
        .iter()
        .flat_map(|m| &m.measurements)
        .filter_map(|m| m.finished_at.as_ref())
        .max()
        .expect("the failing measurement finished")
        .0;
    let seconds = |t: k8s_openapi::jiff::Timestamp| t.as_millisecond() as f64 / 1000.0;
    let (earliest, latest) = (seconds(asked) + fails_in - 6.0, seconds(answered) + fails_in + 6.0);
    println!(
        "forecast: fails {fails_in}s after the plan, made {:.1}s..{:.1}s before the run failed",
        seconds(failed_at) - seconds(answered),
        seconds(failed_at) - seconds(asked)
    );
    assert!(
        (earliest..=latest).contains(&seconds(failed_at)),
        "forecast {fails_in}s after the plan (made between {asked} and {answered}); the run failed at {failed_at}"
    );
}

/// A race to empty planned mid-race under `as-now`: 10 game servers (`e2e::players`); the scale-in to 7 races 3 pods
/// to delete and 3 extra candidates (`extraCandidates` is capped at the pods to delete), each through
/// `hooktemplate-empty-thrice` (3 measurements 100 s apart after 40 s, 5 s and 2 s at `--interval-scale 0.05`,
/// failureLimit 1: a run whose first reading found players is still `Running`). Once the candidates are known, 3 of
/// them are made empty; once every candidate's run has read once and none has completed, the plan with the same
/// inputs names the winners and the skipped pods (the 3 with players, whose places others take: how those read
/// as-now cannot know, and the plan says so). The race then deletes exactly the plan's winners and skips exactly the
/// plan's skipped pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_now_forecasts_the_race_to_empty_from_the_first_readings() {
    use common::api::{HookPhase, HookRun};
    const RACE: &str = "race";
    let cluster = Cluster::start().await;
    let (hooks, _gd) = operators(&cluster).await;
    let empty: Arc<Mutex<BTreeSet<String>>> = Default::default();
    let (address, _asked) = e2e::players::players_server(empty.clone()).await;
    let template = e2e::manifests::load!("hooktemplate-empty-thrice", address = address);
    e2e::gamedeployment::apply(&cluster, &template).await;
    let strategy = "    maxUnavailable: 100%\n  preDeleteUpdateStrategy:\n    hook:\n      templateName: empty-thrice\n  \
                    scaleStrategy:\n    scaleInPolicy:\n      mode: RaceToEmpty\n      extraCandidates: 3\n";
    let manifest = e2e::gamedeployment::manifest(RACE, 10, "InplaceUpdate", strategy, "python:latest");
    e2e::gamedeployment::apply(&cluster, &manifest).await;
    let before: BTreeSet<String> = e2e::wait_for("10 ready pods", LONG, || async {
        let pods = e2e::gamedeployment::live_pods(&cluster, RACE).await;
        (pods.len() == 10 && pods.iter().all(e2e::gamedeployment::is_ready))
            .then(|| pods.into_iter().filter_map(|p| p.metadata.name).collect())
    })
    .await;

    let watch = PodWatch::start(&cluster, &format!("app={RACE}"), "python:latest", Instant::now()).await;
    // The candidates must be known and made empty before their runs' first reading (2 s after each run starts, at
    // this scale), and the plan made while every run has read once and none has completed (the runs with players
    // fail at their second reading, 5 s later): the hook-operator is stopped across both, which no poll or kubectl
    // call on a loaded machine can race.
    let pods = e2e::observe::Observer::<Pod>::namespaced(&cluster, "default").await;
    let hook_runs = e2e::observe::Observer::<HookRun>::namespaced(&cluster, "default").await;
    let frozen = Frozen::new(&[&hooks]);
    cluster.kubectl_ok(&["scale", "gamedeployment", RACE, "--replicas=7"]).await;
    let racing: Vec<String> = pods
        .wait_state("6 candidates in PreparingDelete", LONG, |pods| {
            let racing: Vec<String> = pods
                .iter()
                .filter(|p| {
                    e2e::gamedeployment::label(p, "app") == Some(RACE) && p.metadata.deletion_timestamp.is_none()
                })
                .filter(|p| e2e::gamedeployment::label(p, "lifecycle.apps.kruise.io/state") == Some("PreparingDelete"))
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            (racing.len() == 6).then_some(racing)
        })
        .await;
    // In race order, as the plan lists them (the planner's deletion order: seniority, which a loaded machine spreads
    // over several seconds, then names): the page's block shows every other candidate, from the second, empty. The
    // order is read from the plan itself while no run has read yet (the hook-operator is stopped).
    let early =
        kubectl_gd(&cluster, &["plan", RACE, "--replicas", "7", "--assume-hooks", "as-now", "-o", "json"]).await;
    assert_eq!(early.code, 0, "{}", early.stderr);
    let early: serde_json::Value = serde_json::from_str(&early.stdout).expect("-o json is JSON");
    let racing: Vec<String> = early["race"]["candidates"]
        .as_array()
        .expect("the race's candidates")
        .iter()
        .map(|c| c["pod"].as_str().expect("a name").to_string())
        .filter(|pod| racing.contains(pod))
        .collect();
    assert_eq!(racing.len(), 6, "the plan lists the 6 pods in PreparingDelete first: {early}");
    // Before the first measurement (40 s, 2 s scaled, after each run starts): every other candidate is empty.
    let chosen: BTreeSet<String> = racing.iter().skip(1).step_by(2).cloned().collect();
    // The pods that race in the skipped ones' place find their servers empty too: their runs succeed (a reading
    // 5 s scaled after the winners' last, at the earliest), so the operator has that long to release them; a
    // failing one would fail 2 s after the winners and, on a loaded machine, could be skipped before the release.
    let later: BTreeSet<String> = before.iter().filter(|p| !racing.contains(p)).cloned().collect();
    *empty.lock().unwrap() = chosen.union(&later).cloned().collect();
    println!("candidates {racing:?}; empty servers: {chosen:?}");
    drop(frozen);
    let runs: Api<HookRun> = Api::namespaced(cluster.client(), "default");
    let read = |r: &HookRun| {
        r.status.as_ref().is_some_and(|s| s.metric_results.first().is_some_and(|m| !m.measurements.is_empty()))
    };
    let completed = |r: &HookRun| r.status.as_ref().and_then(|s| s.phase).is_some_and(HookPhase::is_completed);
    hook_runs
        .wait_state("6 pre-delete runs, each with one measurement", LONG, |list| {
            (list.len() == 6 && list.iter().all(|r| read(r))).then_some(())
        })
        .await;
    let frozen = Frozen::new(&[&hooks]);
    let now = hook_runs.current();
    assert!(!now.iter().any(completed), "a run completed at its first reading: {now:#?}");

    let args = ["plan", RACE, "--replicas", "7", "--assume-hooks", "as-now", "--hook-interval-scale", "0.05"];
    let json = kubectl_gd(&cluster, &[&args[..], &["-o", "json"]].concat()).await;
    assert_eq!(json.code, 0, "{}", json.stderr);
    let text = kubectl_gd(&cluster, &args).await;
    drop(frozen);
    assert_eq!(text.code, 0, "{}", text.stderr);
    e2e::book::Book::of_this_test().assert_output(
        "operating/kubectl-gd-plan.md",
        &format!("kubectl gd {}", args.join(" ")),
        &text.stdout,
    );
    let plan: serde_json::Value = serde_json::from_str(&json.stdout).expect("-o json is JSON");
    let set = |value: &serde_json::Value| -> BTreeSet<String> {
        value.as_array().expect("a list").iter().map(|p| p.as_str().expect("a name").to_string()).collect()
    };
    let race = &plan["race"];
    let candidates = race["candidates"].as_array().expect("the race's candidates");
    let measured: BTreeSet<String> = candidates
        .iter()
        .filter(|c| c["measured"] == true)
        .map(|c| c["pod"].as_str().expect("a name").to_string())
        .collect();
    assert_eq!(measured, racing.iter().cloned().collect(), "the candidates' runs had read once: {race}");
    // What as-now cannot know: only the runs of the pods that join later, never those that had read.
    let notes = plan["notes"].as_array().expect("notes");
    for note in notes.iter().filter_map(|n| n["text"].as_str()).filter(|t| t.contains("cannot know")) {
        assert!(measured.iter().all(|pod| !note.contains(pod.as_str())), "{note}");
    }
    let winners = set(&race["winners"]);
    let planned_skipped = set(&race["skipped"]);
    assert_eq!(plan["stop"]["reason"], "complete", "{plan}");

    let after: BTreeSet<String> = e2e::wait_for("7 pods, all serving, no run left", LONG, || async {
        let pods = e2e::gamedeployment::live_pods(&cluster, RACE).await;
        let settled = pods.len() == 7
            && pods.iter().all(|p| {
                e2e::gamedeployment::label(p, "lifecycle.apps.kruise.io/state") == Some("Normal")
                    && e2e::gamedeployment::annotation(p, RACE_SKIPPED).is_none()
            });
        let left = runs.list(&Default::default()).await.ok()?.items;
        (settled && left.is_empty()).then(|| pods.into_iter().filter_map(|p| p.metadata.name).collect())
    })
    .await;
    let deleted: BTreeSet<String> = before.difference(&after).cloned().collect();
    let skipped: BTreeSet<String> = {
        let seen = watch.seen.lock().unwrap();
        seen.iter().filter(|(_, s)| s.skipped.is_some()).map(|(n, _)| n.clone()).collect()
    };
    println!("planned winners {winners:?}, skipped {planned_skipped:?}; deleted {deleted:?}, skipped {skipped:?}");
    assert_eq!(deleted, winners, "the plan's winners, and only they, were deleted");
    assert_eq!(deleted.len(), 3);
    assert_eq!(deleted, chosen, "the empty servers");
    assert_eq!(skipped, planned_skipped, "the plan's skipped pods, and only they, were skipped");
    assert_eq!(skipped.len(), 3, "the candidates with players");
}
