use std::sync::atomic::Ordering;

use common::api::{HookPhase, HookRun, HookRunSpec, Metric, MetricProvider, WebMetric};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use tokio::time::Instant;

use super::ticks::Armed;
use super::*;
use crate::engine::{Finished, schedule};
use crate::providers::ProviderSettings;

fn run(rv: &str, initial_delay: &str) -> HookRun {
    HookRun {
        metadata: ObjectMeta {
            name: Some("r".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-r".into()),
            resource_version: Some(rv.into()),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        spec: HookRunSpec {
            metrics: vec![Metric {
                name: "m".into(),
                initial_delay: Some(initial_delay.into()),
                provider: MetricProvider {
                    web: Some(WebMetric { url: "http://127.0.0.1:1/".into(), ..WebMetric::default() }),
                    ..MetricProvider::default()
                },
                ..Metric::default()
            }],
            ..HookRunSpec::default()
        },
        status: None,
    }
}

/// Every measurement started by a round at its due time (nothing armed): the tests of writes, fences and
/// caches then see only the measurements they finish themselves. Arming has its own tests.
fn classic() -> EngineSettings {
    EngineSettings { arm_ahead: std::time::Duration::ZERO, ..EngineSettings::default() }
}

fn dispatcher() -> Dispatcher {
    let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
    Dispatcher::new(providers, Arc::new(Metrics::default()), classic(), 10, Arc::new(|_: &RunId| {}))
}

/// A run's id is made by its first round and shared after (its texts are not copied per round); an object that
/// is not the same run (another uid, or no uid and another name) gets its own.
#[tokio::test]
async fn rounds_of_a_run_share_its_id() {
    let d = dispatcher();
    let first = d.plan(Arc::new(run("1", "1h")), Timestamp::now());
    d.commit(&first, None);
    let second = d.plan(Arc::new(run("2", "1h")), Timestamp::now());
    assert_eq!(second.id, first.id);
    assert!(Arc::ptr_eq(&first.id.uid, &second.id.uid) && Arc::ptr_eq(&first.id.name, &second.id.name));
    let mut other = run("1", "1h");
    other.metadata.uid = Some("uid-other".into());
    assert_eq!(&*d.plan(Arc::new(other), Timestamp::now()).id.uid, "uid-other");
    let mut unnamed = run("1", "1h");
    unnamed.metadata.uid = None;
    let id = d.plan(Arc::new(unnamed.clone()), Timestamp::now()).id;
    assert_eq!((&*id.uid, &*id.namespace, &*id.name), ("ns/r", "ns", "r"));
    unnamed.metadata.name = Some("s".into());
    assert_eq!(&*d.plan(Arc::new(unnamed), Timestamp::now()).id.uid, "ns/s");
}

#[tokio::test]
async fn a_stale_cache_is_replaced_by_our_own_last_write() {
    let d = dispatcher();
    let cached = Arc::new(run("1", "1h"));
    let round = d.plan(cached.clone(), Timestamp::now());
    assert!(round.changed, "the first round starts the run");
    let mut written = run("2", "1h");
    written.status = Some(round.plan.status.clone());
    d.commit(&round, Some(Arc::new(written)));

    // The informer has not delivered our write yet: the next round must not start the run again.
    let again = d.plan(cached, Timestamp::now());
    assert_eq!(again.run.metadata.resource_version.as_deref(), Some("2"));
    assert!(!again.changed, "nothing to write: the write already happened");
    assert_eq!(again.plan.status.started_at, round.plan.status.started_at);

    // Once the cache has caught up, it is used as it is.
    let mut fresh = run("2", "1h");
    fresh.status = Some(round.plan.status.clone());
    let caught_up = d.plan(Arc::new(fresh), Timestamp::now());
    assert!(!caught_up.changed);
}

/// A run measured every second forever (the first measurement an hour away, so nothing starts by itself),
/// named `uid-<name>`.
fn running(name: &str, rv: &str) -> HookRun {
    let mut r = run(rv, "1h");
    r.metadata.name = Some(name.into());
    r.metadata.uid = Some(format!("uid-{name}"));
    r.spec.metrics[0].interval = Some("1s".into());
    r
}

/// A measurement of metric `m` that finished (as if its task had delivered it).
fn finish(d: &Dispatcher, uid: &str, id: u64, taken_before: i32) {
    finish_as(d, uid, id, taken_before, HookPhase::Successful);
}

/// [`finish`] with the measurement's phase.
fn finish_as(d: &Dispatcher, uid: &str, id: u64, taken_before: i32, phase: HookPhase) {
    let now = Timestamp::now();
    let mut slots = d.slots();
    slots.get_mut(uid).expect("tracked").finished.push(Finished {
        id,
        metric: "m".into(),
        measurement: common::api::Measurement {
            phase: Some(phase),
            started_at: Some(Time(now)),
            finished_at: Some(Time(now)),
            value: Some("45".into()),
            ..Default::default()
        },
        finished_at: now,
        taken_before,
        lost: false,
    });
}

fn successful(round: &Round) -> i32 {
    round.plan.status.metric_results.first().map_or(0, |m| m.successful)
}

/// The first round of `obj`, written: the API server returned it with resourceVersion `rv`.
fn first_write(d: &Dispatcher, obj: &HookRun, rv: &str) -> HookRun {
    let round = d.plan(Arc::new(obj.clone()), Timestamp::now());
    assert!(round.changed && d.write_now(&round), "the first write is due");
    let mut written = obj.clone();
    written.metadata.resource_version = Some(rv.into());
    written.status = Some(round.plan.status.clone());
    d.commit(&round, Some(Arc::new(written.clone())));
    written
}

/// What the API server returns for a write of `round`.
fn written(round: &Round, rv: &str) -> HookRun {
    let mut w = (*round.run).clone();
    w.metadata.resource_version = Some(rv.into());
    w.status = Some(round.plan.status.clone());
    w
}

/// `plan_owned` (the status is moved into the round, its history not copied) plans exactly what `plan` does:
/// the same status, `changed`, starts, wake-ups, notes and recorded measurements, round after round — through
/// recordings, a full history being trimmed, errors, unchanged rounds and the run's completion.
#[tokio::test]
async fn planning_on_the_moved_status_plans_what_planning_on_a_copy_does() {
    let (copying, moving) = (dispatcher(), dispatcher());
    let mut obj = running("a", "1");
    obj.spec.metrics[0].count = 100;
    obj.spec.metrics[0].consecutive_error_limit = Some(3);
    obj.spec.metrics[0].inconclusive_limit = 100;
    // About 25 measurements then a failure: the history (10) is trimmed, errors come and go, the run fails.
    let phases =
        [HookPhase::Successful, HookPhase::Error, HookPhase::Error, HookPhase::Successful, HookPhase::Inconclusive];
    let start = Timestamp::now();
    let mut stored = obj.clone();
    let mut id = 0;
    for step in 0..40 {
        let now = start + std::time::Duration::from_secs(step);
        // Every third round nothing finished (an unchanged round).
        if step > 0 && step % 3 != 0 {
            id += 1;
            let phase = if step == 38 { HookPhase::Failed } else { phases[step as usize % phases.len()] };
            let taken =
                stored.status.as_ref().and_then(|s| s.metric_results.first()).map_or(0, crate::engine::schedule::taken);
            for d in [&copying, &moving] {
                d.slots().get_mut("uid-a").expect("tracked").finished.push(Finished {
                    id,
                    metric: "m".into(),
                    measurement: common::api::Measurement {
                        phase: Some(phase),
                        message: (phase != HookPhase::Successful).then(|| format!("{phase:?} #{id}")),
                        started_at: Some(Time(now)),
                        finished_at: Some(Time(now)),
                        value: Some(format!("{id}")),
                        ..Default::default()
                    },
                    finished_at: now,
                    taken_before: taken,
                    lost: false,
                });
            }
        }
        let copied = copying.plan(Arc::new(stored.clone()), now);
        let moved = moving.plan_owned(Arc::new(stored.clone()), now);
        assert_eq!(copied.plan, moved.plan, "step {step}");
        assert_eq!(copied.changed, moved.changed, "step {step}");
        assert_eq!(copied.changed, step % 3 != 0 || step == 0, "step {step}: changed only when something finished");
        copying.commit(&copied, None);
        moving.commit(&moved, None);
        stored.status = Some(copied.plan.status.clone());
        if copied.plan.completed {
            assert_eq!(stored.status.as_ref().and_then(|s| s.phase), Some(HookPhase::Failed));
            return;
        }
    }
    panic!("the run never completed: {:?}", stored.status);
}

#[tokio::test]
async fn status_writes_of_a_running_run_are_coalesced() {
    let d = dispatcher().with_status_writes(std::time::Duration::from_secs(1), 0);
    let stored = first_write(&d, &running("a", "1"), "2");
    // Progress right after a write (same phase): kept in memory.
    finish(&d, "uid-a", 100, 0);
    let mut progress = d.plan(Arc::new(stored.clone()), Timestamp::now());
    assert!(progress.changed && successful(&progress) == 1);
    assert!(!d.write_now(&progress), "progress within --status-write-interval of the last write waits");
    // A phase change is written at once.
    let mut failed = progress.clone();
    failed.plan.status.phase = Some(HookPhase::Error);
    assert!(d.write_now(&failed));
    let mut done = progress.clone();
    done.plan.completed = true;
    assert!(d.write_now(&done), "a completion is written at once");
    d.commit_unwritten(&mut progress);
    // Without an interval nor a budget nothing waits.
    let d = dispatcher().with_status_writes(std::time::Duration::ZERO, 0);
    let stored = first_write(&d, &running("a", "1"), "2");
    finish(&d, "uid-a", 100, 0);
    assert!(d.write_now(&d.plan(Arc::new(stored), Timestamp::now())));
}

/// A measurement that is not Successful, and the counters it moves, are written before the run measures again
/// (the caller writes before [`Dispatcher::commit`] starts the next measurement): a restart between it and a
/// batched write would measure again and lose it, and `count: 3, failureLimit: 1` could record S F S for F S F
/// and end Successful. Without a token. A success that ends an error streak is written too (it resets
/// `consecutiveError`); other successes still wait for the budget.
#[tokio::test]
async fn a_measurement_that_is_not_successful_is_written_before_the_next_one() {
    let d = dispatcher().with_status_writes(std::time::Duration::from_secs(60), 1);
    let mut obj = running("a", "1");
    let metric = &mut obj.spec.metrics[0];
    (metric.failure_limit, metric.inconclusive_limit, metric.consecutive_error_limit) = (5, 5, Some(5));
    // A new run: its first write (`Running`) goes before its first measurement.
    let mut stored = first_write(&d, &obj, "2");
    // The budget's only token is taken: durability needs none.
    assert!(d.budget().take(Instant::now()));
    let steps = [
        (HookPhase::Failed, true, "a failure"),
        (HookPhase::Successful, false, "a success waits"),
        (HookPhase::Failed, true, "a failure"),
        (HookPhase::Inconclusive, true, "an inconclusive measurement"),
        (HookPhase::Error, true, "an error"),
        (HookPhase::Error, true, "an error in a row"),
        (HookPhase::Successful, true, "a success that resets consecutiveError"),
        (HookPhase::Successful, false, "a success after a success waits"),
    ];
    // Measurements taken so far, the unwritten ones included (a finished measurement records how many it followed).
    let mut taken = stored.status.as_ref().and_then(|s| s.metric_results.first()).map_or(0, schedule::taken);
    for (step, (phase, durable, what)) in steps.into_iter().enumerate() {
        finish_as(&d, "uid-a", 101 + step as u64, taken, phase);
        let mut round = d.plan(Arc::new(stored.clone()), Timestamp::now());
        taken = round.plan.status.metric_results.first().map_or(0, schedule::taken);
        assert_eq!(round.plan.status.phase, Some(HookPhase::Running), "{what}");
        assert!(round.changed);
        assert_eq!(d.write_now(&round), durable, "{what}");
        if durable {
            stored = written(&round, &format!("{}", 3 + step));
            d.commit(&round, Some(Arc::new(stored.clone())));
        } else {
            d.commit_unwritten(&mut round);
        }
    }
    let result = &stored.status.as_ref().expect("written").metric_results[0];
    assert_eq!((result.failed, result.inconclusive, result.error, result.consecutive_error), (2, 1, 2, 0));
    d.forget("uid-a");
}

/// A new run's first write (`Running`, `startedAt`) goes at once, outside the budget, before its first
/// measurement starts: a process that meets the run later knows it may have been measured (`engine::lost`).
#[tokio::test(start_paused = true)]
async fn a_new_run_writes_running_before_its_first_measurement() {
    let d = dispatcher().with_status_writes(std::time::Duration::from_secs(1), 1);
    // The budget's only token is taken: the first write must not need one.
    assert!(d.budget().take(Instant::now()));
    let mut obj = running("a", "1");
    obj.spec.metrics[0].initial_delay = None;
    let first = d.plan(Arc::new(obj.clone()), Timestamp::now());
    assert!(first.changed && first.plan.status.phase == Some(HookPhase::Running));
    assert_eq!(first.plan.start.len(), 1, "its first measurement is due");
    assert!(d.write_now(&first), "Running is written before the first measurement starts");
    assert!(d.budget().queue.is_empty(), "outside the progress budget");
}

/// A process that meets a running run whose next measurement was due (a restart, a takeover) takes that
/// measurement as a retake; a run never written `Running`, or not due yet, has none.
#[tokio::test]
async fn a_run_met_after_its_measurement_was_due_is_retaken() {
    let d = dispatcher();
    let mut due = running("a", "1");
    due.spec.metrics[0].initial_delay = None;
    due.status = Some(common::api::HookRunStatus {
        phase: Some(HookPhase::Running),
        started_at: Some(Time(
            schedule::after(Timestamp::now(), std::time::Duration::ZERO) - std::time::Duration::from_secs(5),
        )),
        ..Default::default()
    });
    let round = d.plan(Arc::new(due), Timestamp::now());
    assert_eq!(d.slots().get("uid-a").expect("tracked").retakes, ["m"]);
    d.commit(&round, None);
    let armed = d.slots().get("uid-a").expect("tracked").in_flight.contains_key("m");
    assert!(armed, "the retake starts at once");
    // Not written Running: never measured. Written Running but the first measurement an hour away: not taken.
    let _ = d.plan(Arc::new(running("b", "1")), Timestamp::now());
    assert!(d.slots().get("uid-b").expect("tracked").retakes.is_empty());
    let mut later = running("c", "1");
    later.status = Some(common::api::HookRunStatus {
        phase: Some(HookPhase::Running),
        started_at: Some(Time(Timestamp::now())),
        ..Default::default()
    });
    let _ = d.plan(Arc::new(later), Timestamp::now());
    assert!(d.slots().get("uid-c").expect("tracked").retakes.is_empty());
    d.forget("uid-a");
}

#[tokio::test]
async fn a_deferred_round_records_its_measurements_and_keeps_measuring() {
    let d = dispatcher().with_status_writes(std::time::Duration::from_secs(60), 0);
    let stored = Arc::new(first_write(&d, &running("a", "1"), "2"));
    for taken in 0..3 {
        finish(&d, "uid-a", 100 + taken as u64, taken);
        let mut round = d.plan(stored.clone(), Timestamp::now());
        assert_eq!(successful(&round), taken + 1, "planned from the unwritten status: nothing lost or counted twice");
        assert!(round.changed, "the stored status is still the first one");
        assert!(!d.write_now(&round));
        d.commit_unwritten(&mut round);
        assert!(d.slots()["uid-a"].finished.is_empty(), "recorded in memory");
    }
    assert_eq!(d.inner.metrics.status_writes_waiting.get(), 1);
    assert_eq!(d.inner.metrics.status_writes_deferred.get(), 3);
    // The measurement due now is started although the status is not written.
    let later = Timestamp::now() + std::time::Duration::from_secs(5);
    let mut round = d.plan(stored.clone(), later);
    assert_eq!(round.plan.start.len(), 1, "due measurements do not wait for the write");
    d.commit_unwritten(&mut round);
    assert!(d.slots()["uid-a"].in_flight.contains_key("m"));
    // Written at last: memory cleared, the write's age observed.
    let mut granted = d.plan(stored.clone(), later);
    d.slots().get_mut("uid-a").unwrap().granted = true;
    assert!(d.write_now(&granted) && successful(&granted) == 3);
    let w = written(&granted, "3");
    d.commit(&granted, Some(Arc::new(w.clone())));
    assert!(d.slots()["uid-a"].unwritten.is_none());
    assert_eq!(d.inner.metrics.status_writes_waiting.get(), 0);
    granted = d.plan(Arc::new(w), later);
    assert!(!granted.changed);
    d.forget("uid-a");
}

#[tokio::test]
async fn unwritten_progress_survives_a_spec_edit_but_not_someone_elses_status() {
    let d = dispatcher().with_status_writes(std::time::Duration::from_secs(60), 0);
    let stored = first_write(&d, &running("a", "1"), "2");
    finish(&d, "uid-a", 100, 0);
    let mut round = d.plan(Arc::new(stored.clone()), Timestamp::now());
    d.commit_unwritten(&mut round);
    // A label added by someone: a new resourceVersion, the same status. The progress stays.
    let mut labelled = stored.clone();
    labelled.metadata.resource_version = Some("3".into());
    labelled.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    let round = d.plan(Arc::new(labelled.clone()), Timestamp::now());
    assert_eq!(successful(&round), 1);
    assert_eq!(round.run.metadata.resource_version.as_deref(), Some("3"), "written on top of the new version");
    // Someone else wrote status (e.g. another replica): ours is dropped, theirs is used.
    let mut theirs = labelled.clone();
    theirs.metadata.resource_version = Some("4".into());
    theirs.status.as_mut().unwrap().message = Some("theirs".into());
    let round = d.plan(Arc::new(theirs), Timestamp::now());
    assert_eq!(successful(&round), 0);
    assert_eq!(d.inner.metrics.status_writes_waiting.get(), 0);
}

#[tokio::test]
async fn our_own_write_echoing_back_is_not_planned_again() {
    let d = dispatcher();
    let obj = running("a", "1");
    let round = d.plan(Arc::new(obj.clone()), Timestamp::now());
    assert_eq!(d.idle(&obj, Timestamp::now()), None, "never planned: plan");
    let w = written(&round, "2");
    d.commit(&round, Some(Arc::new(w.clone())));
    let now = Timestamp::now();
    let wake = d.idle(&w, now).expect("the echo of our write is idle");
    assert_eq!(wake, round.plan.wake_at);
    assert!(wake.is_some_and(|at| at > now + std::time::Duration::from_secs(3000)), "the first measurement is 1h away");
    assert_eq!(d.idle(&w, now + std::time::Duration::from_secs(3601)), None, "due: plan");
    let mut edited = w.clone();
    edited.metadata.resource_version = Some("3".into());
    assert_eq!(d.idle(&edited, now), None, "another version: plan");
    finish(&d, "uid-a", 100, 0);
    assert_eq!(d.idle(&w, now), None, "a measurement finished: plan");
    d.slots().get_mut("uid-a").unwrap().finished.clear();
    d.slots().get_mut("uid-a").unwrap().granted = true;
    assert_eq!(d.idle(&w, now), None, "granted a write: plan");
}

/// Defers one progress write for each of `names` (in this order); returns the stored objects.
fn defer_progress(d: &Dispatcher, names: &[String]) -> HashMap<String, HookRun> {
    let mut stored = HashMap::new();
    for name in names {
        let s = first_write(d, &running(name, "1"), "2");
        finish(d, &format!("uid-{name}"), 100, 0);
        let mut round = d.plan(Arc::new(s.clone()), Timestamp::now());
        if d.write_now(&round) {
            let w = written(&round, "3");
            d.commit(&round, Some(Arc::new(w.clone())));
            stored.insert(name.clone(), w);
        } else {
            d.commit_unwritten(&mut round);
            stored.insert(name.clone(), s);
        }
    }
    stored
}

#[tokio::test(start_paused = true)]
async fn progress_writes_share_one_budget_oldest_first() {
    let woken = Arc::new(Mutex::new(Vec::<String>::new()));
    let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
    let d = Dispatcher::new(providers, Arc::new(Metrics::default()), classic(), 10, {
        let woken = woken.clone();
        Arc::new(move |id: &RunId| woken.lock().unwrap().push(id.name.to_string()))
    })
    .with_status_writes(std::time::Duration::ZERO, 10);
    let flusher = d.start_status_writes();
    let names: Vec<String> = (0..40).map(|i| format!("r{i:02}")).collect();
    let stored = defer_progress(&d, &names);
    let immediate = names.iter().filter(|n| d.slots()[&format!("uid-{n}")].unwritten.is_none()).count();
    assert_eq!(immediate, 1, "the bucket holds one token at 10/s: the first write goes at once");
    // Two seconds: about 20 more grants, in the order the runs started waiting.
    tokio::time::sleep(std::time::Duration::from_millis(2050)).await;
    let grants = woken.lock().unwrap().clone();
    assert!((19..=21).contains(&grants.len()), "{} grants in 2 s at 10/s", grants.len());
    assert_eq!(grants, names[1..=grants.len()].to_vec(), "oldest unwritten first");
    // The granted runs write (their next round), the others still wait.
    for name in &grants {
        let round = d.plan(Arc::new(stored[name].clone()), Timestamp::now());
        assert!(d.write_now(&round), "{name} was granted its write");
        d.commit(&round, Some(Arc::new(written(&round, "3"))));
    }
    assert_eq!(d.inner.metrics.status_writes_waiting.get() as usize, 39 - grants.len());
    // A phase change never waits for the budget, even with every token taken.
    let late = &names[39];
    let mut round = d.plan(Arc::new(stored[late].clone()), Timestamp::now());
    assert!(!d.write_now(&round), "still in the queue");
    round.plan.status.phase = Some(HookPhase::Failed);
    assert!(d.write_now(&round));
    // Nobody starves: every run is granted within 40 / 10 s.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let grants = woken.lock().unwrap().clone();
    assert_eq!(grants, names[1..].to_vec());
    flusher.abort();
}

/// What a finished measurement adds to /metrics: its count by provider and phase, its duration by provider.
#[tokio::test]
async fn a_measurement_is_counted_by_provider_and_phase() {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
    let woken = Arc::new(AtomicU64::new(0));
    let d = Dispatcher::new(providers, metrics, classic(), 10, {
        let woken = woken.clone();
        Arc::new(move |_: &RunId| {
            woken.fetch_add(1, Ordering::SeqCst);
        })
    });
    let round = d.plan(Arc::new(run("1", "0s")), Timestamp::now());
    d.commit(&round, None);
    for _ in 0..2000 {
        if woken.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    // 127.0.0.1:1 refuses: one web measurement, an Error.
    assert!(text.contains("hook_operator_measurements_total{provider=\"web\",phase=\"Error\"} 1\n"), "{text}");
    assert!(text.contains("hook_operator_measurement_duration_seconds_count{provider=\"web\"} 1\n"), "{text}");
}

/// The precise finish time a round records is remembered by its commit: the next round (nothing new finished)
/// schedules the next measurement `interval` after that instant, not after the whole second status keeps.
#[tokio::test]
async fn the_next_round_plans_from_the_precise_finish_its_predecessor_committed() {
    let d = dispatcher();
    let stored = first_write(&d, &running("a", "1"), "2");
    let finished_at = Timestamp::from_nanosecond(Timestamp::now().as_nanosecond() / 1_000_000_000 * 1_000_000_000)
        .unwrap()
        + std::time::Duration::from_millis(1500);
    finish(&d, "uid-a", 100, 0);
    d.slots().get_mut("uid-a").unwrap().finished[0].finished_at = finished_at;
    let now = finished_at + std::time::Duration::from_millis(100);
    let recorded = d.plan(Arc::new(stored), now);
    assert_eq!(successful(&recorded), 1);
    let w = written(&recorded, "3");
    d.commit(&recorded, Some(Arc::new(w.clone())));
    let mut edited = w;
    edited.metadata.resource_version = Some("4".into());
    let next = d.plan(Arc::new(edited), now);
    assert!(next.plan.start.is_empty() && next.plan.arm.is_empty());
    assert_eq!(next.plan.wake_at, Some(finished_at + std::time::Duration::from_secs(1)), "interval 1s after it");
}

#[tokio::test]
async fn a_fenced_run_is_not_measured() {
    let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
    let woken = Arc::new(AtomicU64::new(0));
    let d = Dispatcher::new(providers, Arc::new(Metrics::default()), classic(), 10, {
        let woken = woken.clone();
        Arc::new(move |_: &RunId| {
            woken.fetch_add(1, Ordering::SeqCst);
        })
    })
    .with_fence(Arc::new(|id: &RunId| &*id.uid != "uid-r"));
    let round = d.plan(Arc::new(run("1", "0s")), Timestamp::now());
    assert_eq!(round.plan.start.len(), 1);
    d.commit(&round, None);
    for _ in 0..2000 {
        if woken.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let slots = d.slots();
    let slot = slots.get("uid-r").unwrap();
    assert!(slot.in_flight.is_empty() && slot.finished.is_empty(), "nothing measured, nothing recorded");
    assert_eq!(woken.load(Ordering::SeqCst), 1, "woken once: a round decides (a gone run is forgotten there)");
    assert!(slot.idle.is_none(), "and that round plans instead of taking the run for idle");
}

#[tokio::test]
async fn completed_runs_are_forgotten_and_their_measurements_cancelled() {
    let d = dispatcher();
    let round = d.plan(Arc::new(run("1", "0s")), Timestamp::now());
    assert_eq!(round.plan.start.len(), 1);
    d.commit(&round, None);
    assert_eq!(d.tracked_runs(), 1);
    let mut done = run("3", "0s");
    done.status = Some(common::api::HookRunStatus { phase: Some(HookPhase::Successful), ..Default::default() });
    let round = d.plan(Arc::new(done), Timestamp::now());
    assert!(round.plan.completed && !round.changed);
    d.commit(&round, None);
    assert_eq!(d.tracked_runs(), 0);
    d.retain(|_| false);
}

/// A dispatcher that arms measurements (the production setting), counting the wake-ups of its runs.
fn arming() -> (Dispatcher, Arc<AtomicU64>) {
    let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
    let woken = Arc::new(AtomicU64::new(0));
    let d = Dispatcher::new(providers, Arc::new(Metrics::default()), EngineSettings::default(), 10, {
        let woken = woken.clone();
        Arc::new(move |_: &RunId| {
            woken.fetch_add(1, Ordering::SeqCst);
        })
    });
    (d, woken)
}

#[tokio::test]
async fn an_armed_measurement_starts_when_due_without_another_round() {
    let (d, woken) = arming();
    // Every 3 s: the "not yet" check below has seconds of margin on a loaded machine.
    let mut every_3s = running("a", "1");
    every_3s.spec.metrics[0].interval = Some("3s".into());
    let stored = first_write(&d, &every_3s, "2");
    finish(&d, "uid-a", 100, 0);
    let round = d.plan(Arc::new(stored), Timestamp::now());
    assert!(round.plan.start.is_empty(), "the next measurement is 3 s away");
    assert_eq!(round.plan.arm.len(), 1);
    assert_eq!(round.plan.wake_at, None, "no round is needed to start it");
    d.commit(&round, Some(Arc::new(written(&round, "3"))));
    assert!(d.slots()["uid-a"].in_flight.contains_key("m"), "armed: counted as in flight, never started twice");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(woken.load(Ordering::SeqCst), 0, "not due yet: not measured");
    assert!(d.slots()["uid-a"].finished.is_empty());
    let mut waited = 0;
    while woken.load(Ordering::SeqCst) == 0 && waited < 300 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        waited += 1;
    }
    assert_eq!(woken.load(Ordering::SeqCst), 1, "measured once it was due, and the run woken to record it");
    let slots = d.slots();
    let slot = &slots["uid-a"];
    assert!(slot.in_flight.is_empty());
    assert_eq!(slot.finished.len(), 1);
    assert_eq!(slot.finished[0].taken_before, 1, "recorded on top of the measurement that armed it");
    // The endpoint (127.0.0.1:1) refuses: an Error measurement, taken no earlier than it was due.
    assert_eq!(slot.finished[0].measurement.phase, Some(HookPhase::Error));
    let started = slot.finished[0].measurement.started_at.as_ref().map(|t| t.0);
    assert!(started.is_some_and(|t| t >= round.plan.arm[0].due), "started {started:?}, due {}", round.plan.arm[0].due);
}

/// 10,000 runs keep 10,000 armed tasks asleep: each must stay small (the HTTP exchange's state, ~2.6 KiB, is
/// boxed and allocated only once the measurement runs).
#[tokio::test]
async fn an_armed_measurement_is_a_small_task() {
    let (d, _) = arming();
    let start = Armed { index: 0, due: Timestamp::now(), taken_before: 0, retake: false };
    let task = d.clone().measure(
        RunId::of(&running("a", "1")),
        start,
        Arc::new(running("a", "1").spec),
        1,
        Default::default(),
    );
    let size = std::mem::size_of_val(&task);
    assert!(size <= 1024, "the measurement task is {size} bytes");
}

/// Progress is not written when the measurement that completes the run is started or armed and due within
/// `min_interval`: the completion, written at once, carries it. An error (no count consumed) ends that.
#[tokio::test]
async fn progress_waits_for_a_completion_due_within_the_write_interval() {
    let (d, _) = arming();
    let d = d.with_status_writes(std::time::Duration::from_secs(60), 0);
    // `count: 2`, every 30 s: after the first measurement, the second completes the run and is due within 60 s.
    let progress_after_first = |count: i32, phase: HookPhase| {
        let name = format!("c{count}-{phase:?}");
        let uid = format!("uid-{name}");
        let mut obj = running(&name, "1");
        obj.spec.metrics[0].count = count;
        obj.spec.metrics[0].interval = Some("30s".into());
        let stored = first_write(&d, &obj, "2");
        finish(&d, &uid, 100, 0);
        d.slots().get_mut(&uid).unwrap().finished[0].measurement.phase = Some(phase);
        let mut round = d.plan(Arc::new(stored), Timestamp::now());
        assert_eq!(round.plan.arm.len(), 1, "{name}: the next measurement is armed");
        // The interval since the last write is over: only the coming completion can hold the progress back.
        d.slots().get_mut(&uid).unwrap().last_write_at = None;
        let now = d.write_now(&round);
        if !now {
            d.commit_unwritten(&mut round);
        }
        let queued = d.slots()[&uid].queued.is_some();
        d.forget(&uid);
        (now, queued)
    };
    assert_eq!(progress_after_first(2, HookPhase::Successful), (false, false), "held for the completion, not queued");
    assert_eq!(progress_after_first(3, HookPhase::Successful), (true, false), "two more to go: written");
    assert_eq!(progress_after_first(2, HookPhase::Error), (true, false), "an error consumed no count: written");
}

#[tokio::test]
async fn an_armed_measurement_is_called_off_when_the_spec_changes() {
    let (d, woken) = arming();
    let stored = first_write(&d, &running("a", "1"), "2");
    finish(&d, "uid-a", 100, 0);
    let round = d.plan(Arc::new(stored), Timestamp::now());
    let w = written(&round, "3");
    d.commit(&round, Some(Arc::new(w.clone())));
    let armed = d.slots()["uid-a"].in_flight["m"].token;
    // The interval is raised to 10 minutes (a new generation) while the measurement sleeps.
    let mut edited = w;
    edited.metadata.resource_version = Some("4".into());
    edited.metadata.generation = Some(2);
    edited.spec.metrics[0].interval = Some("10m".into());
    let replanned = d.plan(Arc::new(edited), Timestamp::now());
    assert!(!d.slots()["uid-a"].in_flight.contains_key("m"), "called off while it slept");
    assert!(replanned.plan.arm.is_empty() && replanned.plan.start.is_empty());
    assert!(replanned.plan.wake_at.is_some(), "due in 10 minutes (beyond arm_ahead): the run is woken then");
    d.commit(&replanned, None);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(woken.load(Ordering::SeqCst), 0, "the called-off measurement was never taken");
    assert!(d.slots()["uid-a"].in_flight.values().all(|f| f.token != armed));
}

/// `n` runs that each recorded a measurement finished at `at` (interval 1 s): each round arms the next measurement,
/// due at `at + 1 s` for all of them.
fn armed_together(d: &Dispatcher, n: usize, at: Timestamp) -> Vec<String> {
    (0..n)
        .map(|i| {
            let name = format!("t{i}");
            let uid = format!("uid-{name}");
            let stored = first_write(d, &running(&name, "1"), "2");
            d.slots().get_mut(&uid).expect("tracked").finished.push(Finished {
                id: 1000 + i as u64,
                metric: "m".into(),
                measurement: common::api::Measurement {
                    phase: Some(HookPhase::Successful),
                    started_at: Some(Time(at)),
                    finished_at: Some(Time(at)),
                    ..Default::default()
                },
                finished_at: at,
                taken_before: 0,
                lost: false,
            });
            let round = d.plan(Arc::new(stored), Timestamp::now());
            assert_eq!(round.plan.arm.len(), 1, "{name}: the next measurement is armed");
            d.commit(&round, Some(Arc::new(written(&round, "3"))));
            uid
        })
        .collect()
}

/// Measurements armed for one tick are started together: one wake-up of their shard's task starts all of them (one
/// timer for the shard, not one task and one timer per measurement), and until then an armed measurement has no
/// task.
#[tokio::test(start_paused = true)]
async fn a_ticks_due_measurements_start_from_one_wake_up_of_their_shard() {
    let (d, _) = arming();
    // Ticks of a second: the wall clock runs on while the test arms, the paused tokio clock does not, and every due
    // time (1 s after `at`, less the wall time spent arming) falls into the same tick.
    let d = d.with_ticks(1, std::time::Duration::from_secs(1));
    let uids = armed_together(&d, 20, Timestamp::now());
    for uid in &uids {
        let slots = d.slots();
        let armed = &slots[uid].in_flight["m"];
        assert!(armed.task.is_none(), "{uid}: armed, no task yet");
    }
    assert_eq!(d.tick_counts(), (0, 0));
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert_eq!(d.tick_counts(), (1, 20), "one batch started all 20");
}

/// A measurement called off while armed (its run forgotten) is dropped at its tick, not started.
#[tokio::test(start_paused = true)]
async fn an_armed_measurement_of_a_forgotten_run_is_not_started_at_its_tick() {
    let (d, woken) = arming();
    let d = d.with_ticks(1, std::time::Duration::from_secs(1));
    let uids = armed_together(&d, 3, Timestamp::now());
    d.forget(&uids[1]);
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert_eq!(d.tick_counts(), (1, 2), "the forgotten run's measurement was dropped");
    assert!(d.slots().get(&uids[1]).is_none());
    let _ = woken;
}
