use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use common::api::{
    HookPhase, HookPolicy, HookRunSpec, HookRunStatus, Measurement, Metric, MetricProvider, MetricResult, WebMetric,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use HookPhase::{Error as E, Failed as F, Inconclusive as I, Running as R, Successful as S};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

fn web(name: &str) -> Metric {
    Metric {
        name: name.into(),
        provider: MetricProvider {
            web: Some(WebMetric { url: "http://127.0.0.1:9091".into(), ..WebMetric::default() }),
            ..MetricProvider::default()
        },
        ..Metric::default()
    }
}

fn measurement(phase: HookPhase) -> Measurement {
    Measurement { phase: Some(phase), ..Measurement::default() }
}

/// A successful measurement of the walkthrough's `webtest` metric, finished at `finished_at`.
fn webtest_success(id: u64, finished_at: Timestamp, taken_before: i32) -> Finished {
    Finished { id, metric: "webtest".into(), measurement: measurement(S), finished_at, taken_before, lost: false }
}

fn result_after(metric: &Metric, phases: &[HookPhase]) -> MetricResult {
    let mut result = MetricResult { name: metric.name.clone(), phase: Some(R), ..MetricResult::default() };
    for phase in phases {
        record(&mut result, measurement(*phase), 10);
    }
    result
}

#[test]
fn counters_per_measurement_phase() {
    let m = web("m");
    let r = result_after(&m, &[S, S, F, E, E, I, S]);
    assert_eq!((r.count, r.successful, r.failed, r.inconclusive, r.error), (5, 3, 1, 1, 2));
    assert_eq!((r.consecutive_error, r.consecutive_successful), (0, 1));
    let r = result_after(&m, &[S, S, E]);
    assert_eq!(
        (r.count, r.consecutive_error, r.consecutive_successful),
        (2, 1, 0),
        "errors reset the success streak and do not count"
    );
}

#[test]
fn history_is_bounded_but_counters_are_cumulative() {
    let m = web("m");
    let mut r = MetricResult::default();
    for _ in 0..25 {
        record(&mut r, measurement(S), 10);
    }
    assert_eq!(r.measurements.len(), 10);
    assert_eq!((r.count, r.successful), (25, 25));
    let mut r = MetricResult::default();
    for _ in 0..5 {
        record(&mut r, measurement(E), 3);
    }
    assert_eq!(r.measurements.len(), 3, "errors are trimmed too (BCS grew them without bound, BCS-H10)");
    // The oldest goes, the newest is last; a full history copied at its exact length (as each round copies the
    // status) takes the next measurement without growing.
    let mut full = MetricResult::default();
    for i in 0..10 {
        record(&mut full, Measurement { value: Some(i.to_string()), ..measurement(S) }, 10);
    }
    let mut copied = full.clone();
    let capacity = copied.measurements.capacity();
    record(&mut copied, Measurement { value: Some("10".into()), ..measurement(S) }, 10);
    let values: Vec<&str> = copied.measurements.iter().filter_map(|m| m.value.as_deref()).collect();
    assert_eq!(values, ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]);
    assert_eq!(copied.measurements.capacity(), capacity, "no reallocation per measurement");
    let _ = m;
}

/// How a metric's phase follows from its measurements and limits, case by case (the worked consequences of BCS's
/// rules, with the corrected outcomes of `BCS-H1` and `BCS-H2`, docs/src/compatibility/bcs-differences.md), plus the
/// BCS-only limits.
#[test]
fn metric_phase_rules() {
    let interval = |m: Metric| Metric { interval: Some("5s".into()), ..m };
    let cases: Vec<(&str, Metric, Vec<HookPhase>, Option<HookPhase>)> = vec![
        ("BCS-H1 single-shot, condition false: the first failure fails", web("m"), vec![F], Some(F)),
        ("single-shot success", web("m"), vec![S], Some(S)),
        ("BCS-H2 single-shot, unreachable: retried, not Successful", web("m"), vec![E], None),
        (
            "BCS-H2 default consecutiveErrorLimit is 4: the 5th consecutive error ends Error",
            web("m"),
            vec![E; 5],
            Some(E),
        ),
        ("four errors are still retried", web("m"), vec![E; 4], None),
        ("errors do not consume count", web("m"), vec![E, E, S], Some(S)),
        (
            "consecutiveErrorLimit 0 fails fast",
            Metric { consecutive_error_limit: Some(0), ..web("m") },
            vec![E],
            Some(E),
        ),
        (
            "count 3, failureLimit 0: Failed after the first failure",
            Metric { count: 3, ..interval(web("m")) },
            vec![F],
            Some(F),
        ),
        (
            "count 3, failureLimit 1: Failed after the second",
            Metric { count: 3, failure_limit: 1, ..interval(web("m")) },
            vec![F, F],
            Some(F),
        ),
        (
            "walkthrough fail: count 3, failureLimit 2, three failures",
            Metric { count: 3, failure_limit: 2, ..interval(web("m")) },
            vec![F, F, F],
            Some(F),
        ),
        (
            "walkthrough fail after two: still running",
            Metric { count: 3, failure_limit: 2, ..interval(web("m")) },
            vec![F, F],
            None,
        ),
        (
            "walkthrough success: count reached",
            Metric { count: 3, failure_limit: 2, ..interval(web("m")) },
            vec![S, S, S],
            Some(S),
        ),
        (
            "count reached with tolerated failures",
            Metric { count: 3, failure_limit: 2, ..interval(web("m")) },
            vec![F, S, F],
            Some(S),
        ),
        ("interval only, always failing: Failed after the first", interval(web("m")), vec![F], Some(F)),
        ("interval only, succeeding: runs on", interval(web("m")), vec![S, S, S, S], None),
        (
            "poll until success: failureLimit -1 + successfulLimit 1",
            Metric { failure_limit: -1, successful_limit: 1, ..interval(web("m")) },
            vec![F, F, F, S],
            Some(S),
        ),
        (
            "failureLimit -1 never fails on failures",
            Metric { failure_limit: -1, ..interval(web("m")) },
            vec![F; 20],
            None,
        ),
        ("one inconclusive is enough by default", web("m"), vec![I], Some(I)),
        (
            "inconclusiveLimit 1 tolerates one",
            Metric { inconclusive_limit: 1, count: 3, ..interval(web("m")) },
            vec![I],
            None,
        ),
        (
            "consecutiveSuccessfulLimit needs an unbroken streak",
            Metric { consecutive_successful_limit: Some(2), failure_limit: -1, ..interval(web("m")) },
            vec![S, F, S],
            None,
        ),
        (
            "consecutiveSuccessfulLimit reached",
            Metric { consecutive_successful_limit: Some(2), failure_limit: -1, ..interval(web("m")) },
            vec![S, F, S, S],
            Some(S),
        ),
        (
            "failures are checked before successfulLimit",
            Metric { successful_limit: 1, count: 2, ..interval(web("m")) },
            vec![F],
            Some(F),
        ),
    ];
    for (name, metric, phases, want) in cases {
        let result = result_after(&metric, &phases);
        assert_eq!(assess(&metric, &result).map(|(p, _)| p), want, "{name}");
    }
    let (_, why) =
        assess(&Metric { count: 3, failure_limit: 2, ..interval(web("m")) }, &result_after(&web("m"), &[F, F, F]))
            .unwrap();
    assert_eq!(why, "failed (3) > failureLimit (2)");
}

#[test]
fn worst_phase_order() {
    assert_eq!(worst([S, I, E]), E);
    assert_eq!(worst([S, F, E]), F);
    assert_eq!(worst([S, S]), S);
    assert_eq!(worst([]), S);
}

/// Drives a run through the engine like a controller would: measurements finish `latency` after they
/// start, with the phases given per metric, and the clock jumps to each wake-up.
struct Sim {
    spec: HookRunSpec,
    status: Option<HookRunStatus>,
    precise: Precise,
    now: Timestamp,
    settings: EngineSettings,
    outcomes: std::collections::HashMap<String, VecDeque<HookPhase>>,
    notes: Vec<Note>,
    taken_at: Vec<(String, Timestamp)>,
    next_id: u64,
    rounds: usize,
    /// The last round's plan: every round is also planned in its parts ([`plan_reusing`]), which must not change it.
    last: Option<Plan>,
}

/// A plan whose lists and map hold what no round of any test plans (ids, names, times), to build plans in.
fn stale_plan() -> Plan {
    let start = Start { index: 7, metric: "stale-metric-with-a-long-name".into(), due: at(1), taken_before: 99 };
    let mut precise = Precise { started_at: Some(at(2)), ..Precise::default() };
    precise.last_finish.insert("stale".into(), schedule::PreciseFinish { taken: 5, at: at(3) });
    Plan {
        consumed: vec![1_000_001, 1_000_002],
        precise,
        start: vec![start.clone(), start.clone(), start.clone()],
        arm: vec![start.clone(), start],
        ..plan(&Inputs {
            spec: &HookRunSpec::default(),
            status: None,
            invalid: None,
            finished: &[],
            in_flight: &HashSet::new(),
            precise: &Precise::default(),
            now: at(0),
            settings: &EngineSettings::default(),
        })
    }
}

impl Sim {
    fn new(spec: HookRunSpec, outcomes: &[(&str, &[HookPhase])]) -> Self {
        Self {
            spec,
            status: None,
            precise: Precise::default(),
            now: at(1_000),
            // Rounds at each due time (the path taken beyond `arm_ahead`); arming has its own tests.
            settings: EngineSettings { arm_ahead: Duration::ZERO, ..EngineSettings::default() },
            outcomes: outcomes.iter().map(|(n, p)| (n.to_string(), p.iter().copied().collect())).collect(),
            notes: Vec::new(),
            taken_at: Vec::new(),
            next_id: 0,
            rounds: 0,
            last: Some(stale_plan()),
        }
    }

    fn round(&mut self, finished: &[Finished]) -> Plan {
        let in_flight = HashSet::new();
        let invalid = crate::engine::validate::run(&self.spec).err();
        let inputs = Inputs {
            spec: &self.spec,
            status: self.status.as_ref(),
            invalid: invalid.as_deref(),
            finished,
            in_flight: &in_flight,
            precise: &self.precise,
            now: self.now,
            settings: &self.settings,
        };
        let plan = plan(&inputs);
        let last = Reuse::of(self.last.take().unwrap_or_else(stale_plan));
        let reused = plan_reusing(&inputs, self.status.clone(), last);
        assert_eq!(reused, plan, "a plan built in the last plan's parts is the plan built from nothing");
        self.last = Some(reused);
        self.status = Some(plan.status.clone());
        self.precise = plan.precise.clone();
        self.notes.extend(plan.notes.clone());
        self.rounds += 1;
        plan
    }

    /// Runs until completed or nothing more is scheduled; returns the final run phase. Started measurements
    /// finish 100 ms after they start (armed ones start at their `due`); the clock jumps to the next finish or
    /// wake-up, whichever comes first.
    fn run(&mut self) -> Option<HookPhase> {
        let mut pending: Vec<Finished> = Vec::new();
        let mut finished = Vec::new();
        for _ in 0..1_000 {
            let plan = self.round(&finished);
            finished.clear();
            if plan.completed {
                break;
            }
            let armed = plan.arm.iter().map(|s| (s, s.due));
            for (start, taken_at) in plan.start.iter().map(|s| (s, self.now)).chain(armed) {
                self.taken_at.push((start.metric.clone(), taken_at));
                let phase = self.outcomes.get_mut(&start.metric).and_then(VecDeque::pop_front).unwrap_or(S);
                self.next_id += 1;
                let finished_at = taken_at.checked_add(Duration::from_millis(100)).unwrap();
                pending.push(Finished {
                    id: self.next_id,
                    metric: start.metric.clone(),
                    measurement: Measurement {
                        phase: Some(phase),
                        started_at: Some(Time(taken_at)),
                        finished_at: Some(Time(finished_at)),
                        value: Some("45".into()),
                        ..Measurement::default()
                    },
                    finished_at,
                    taken_before: start.taken_before,
                    lost: false,
                });
            }
            let next_finish = pending.iter().map(|f| f.finished_at).min();
            self.now = match (next_finish, plan.wake_at) {
                (Some(f), Some(w)) => f.min(w),
                (Some(t), None) | (None, Some(t)) => t,
                (None, None) => break,
            };
            let now = self.now;
            let (done, waiting): (Vec<Finished>, Vec<Finished>) = pending.drain(..).partition(|f| f.finished_at <= now);
            finished = done;
            pending = waiting;
        }
        self.status.as_ref().and_then(|s| s.phase)
    }

    fn result(&self, name: &str) -> MetricResult {
        self.status.as_ref().unwrap().metric_results.iter().find(|r| r.name == name).cloned().unwrap()
    }
}

fn walkthrough(condition: &str) -> HookRunSpec {
    HookRunSpec {
        metrics: vec![Metric {
            count: 3,
            interval: Some("60s".into()),
            failure_limit: 2,
            success_condition: Some(condition.into()),
            ..web("webtest")
        }],
        ..HookRunSpec::default()
    }
}

#[test]
fn walkthrough_success_and_fail() {
    let mut sim = Sim::new(walkthrough("asInt(result) > 30"), &[("webtest", &[S, S, S])]);
    assert_eq!(sim.run(), Some(S));
    let r = sim.result("webtest");
    assert_eq!((r.count, r.successful, r.failed, r.phase), (3, 3, 0, Some(S)));
    // 60 s between the end of one measurement and the start of the next.
    let starts: Vec<i64> = sim.taken_at.iter().map(|(_, t)| t.as_millisecond()).collect();
    assert_eq!(starts.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(), vec![60_100, 60_100]);
    assert!(r.measurements.iter().all(|m| m.phase == Some(S)));
    assert_eq!(r.measurements.last().unwrap().resume_at, None, "no next measurement after completion");

    let mut sim = Sim::new(walkthrough("asInt(result) < 30"), &[("webtest", &[F, F, F])]);
    assert_eq!(sim.run(), Some(F));
    let r = sim.result("webtest");
    assert_eq!((r.count, r.successful, r.failed, r.phase), (3, 0, 3, Some(F)));
    assert!(sim.status.as_ref().unwrap().message.as_ref().unwrap().contains("failed (3) > failureLimit (2)"));
    assert!(
        sim.notes
            .contains(&Note::RunCompleted { phase: F, message: sim.status.as_ref().unwrap().message.clone().unwrap() })
    );
}

#[test]
fn first_round_starts_the_run_and_measures_at_once() {
    let mut sim = Sim::new(walkthrough("true"), &[]);
    let plan = sim.round(&[]);
    assert_eq!(plan.status.phase, Some(R));
    assert_eq!(plan.status.started_at, Some(Time(at(1_000))));
    assert_eq!(plan.start.len(), 1);
    assert_eq!(plan.start[0].due, at(1_000));
    assert_eq!(plan.wake_at, None);
}

#[test]
fn initial_delay_counts_from_started_at() {
    let spec = HookRunSpec {
        metrics: vec![Metric { initial_delay: Some("30s".into()), ..web("m") }],
        ..HookRunSpec::default()
    };
    let mut sim = Sim::new(spec, &[]);
    let plan = sim.round(&[]);
    assert!(plan.start.is_empty());
    assert_eq!(plan.wake_at, Some(at(1_030)));
    assert_eq!(sim.run(), Some(S));
    assert_eq!(sim.taken_at, vec![("m".to_string(), at(1_030))]);
}

#[test]
fn errors_are_retried_after_ten_seconds_without_an_interval() {
    let mut sim = Sim::new(HookRunSpec { metrics: vec![web("m")], ..HookRunSpec::default() }, &[("m", &[E, E, S])]);
    assert_eq!(sim.run(), Some(S));
    let starts: Vec<i64> = sim.taken_at.iter().map(|(_, t)| t.as_millisecond()).collect();
    assert_eq!(starts.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(), vec![10_100, 10_100]);
    let r = sim.result("m");
    assert_eq!((r.count, r.error, r.successful), (1, 2, 1));
}

#[test]
fn unreachable_endpoint_ends_error_not_successful() {
    let mut sim = Sim::new(HookRunSpec { metrics: vec![web("m")], ..HookRunSpec::default() }, &[("m", &[E; 10])]);
    assert_eq!(sim.run(), Some(E), "BCS-H2 made this Successful");
    assert_eq!(sim.result("m").error, 5);
}

#[test]
fn a_failing_metric_stops_a_metric_still_in_its_initial_delay() {
    // BCS-H3 (c): the run hung in Running forever.
    let spec = HookRunSpec {
        metrics: vec![web("fast"), Metric { initial_delay: Some("10m".into()), ..web("slow") }],
        ..HookRunSpec::default()
    };
    let mut sim = Sim::new(spec, &[("fast", &[F])]);
    assert_eq!(sim.run(), Some(F));
    assert_eq!(sim.rounds, 2, "the run completes in the round that records the failure");
    let slow = sim.result("slow");
    assert_eq!(slow.phase, Some(S));
    assert_eq!(slow.message.as_deref(), Some("stopped: metric \"fast\" completed Failed"));
    assert!(sim.taken_at.iter().all(|(m, _)| m == "fast"));
}

#[test]
fn ordered_starts_each_metric_after_the_previous_succeeded() {
    let spec = HookRunSpec {
        metrics: vec![Metric { count: 2, interval: Some("1s".into()), ..web("a") }, web("b"), web("c")],
        policy: Some(HookPolicy::Ordered),
        ..HookRunSpec::default()
    };
    let mut sim = Sim::new(spec, &[]);
    assert_eq!(sim.run(), Some(S));
    let order: Vec<&str> = sim.taken_at.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(order, vec!["a", "a", "b", "c"]);
}

#[test]
fn ordered_failure_completes_the_run_at_once() {
    // BCS-H3 (a): later metrics never got a result and the run stayed Running.
    let spec =
        HookRunSpec { metrics: vec![web("a"), web("b")], policy: Some(HookPolicy::Ordered), ..HookRunSpec::default() };
    let mut sim = Sim::new(spec, &[("a", &[F])]);
    assert_eq!(sim.run(), Some(F));
    assert_eq!(sim.result("b").phase, Some(S));
    assert!(sim.taken_at.iter().all(|(m, _)| m == "a"));
}

#[test]
fn terminate_completes_the_run_without_waiting() {
    // BCS-H3 (b): terminate during an initialDelay hung the run.
    let spec = HookRunSpec {
        metrics: vec![Metric { initial_delay: Some("1h".into()), ..web("m") }],
        ..HookRunSpec::default()
    };
    let mut sim = Sim::new(spec, &[]);
    sim.round(&[]);
    sim.spec.terminate = true;
    let plan = sim.round(&[]);
    assert!(plan.completed);
    assert_eq!(plan.status.phase, Some(S));
    assert_eq!(plan.status.message.as_deref(), Some("terminated (spec.terminate)"));
    assert!(plan.start.is_empty());
}

#[test]
fn terminate_keeps_a_worse_phase_already_reached() {
    let spec = HookRunSpec {
        metrics: vec![Metric { interval: Some("1s".into()), inconclusive_limit: 5, ..web("a") }],
        ..HookRunSpec::default()
    };
    let mut sim = Sim::new(spec, &[]);
    let status = HookRunStatus {
        phase: Some(R),
        started_at: Some(Time(at(1))),
        metric_results: vec![MetricResult { name: "a".into(), phase: Some(I), ..MetricResult::default() }],
        ..HookRunStatus::default()
    };
    sim.status = Some(status);
    sim.spec.terminate = true;
    assert_eq!(sim.round(&[]).status.phase, Some(I));
}

#[test]
fn completed_runs_are_frozen() {
    let mut sim = Sim::new(walkthrough("true"), &[("webtest", &[F])]);
    sim.spec.metrics[0].failure_limit = 0;
    assert_eq!(sim.run(), Some(F));
    let frozen = sim.status.clone();
    sim.spec.metrics[0].failure_limit = 5;
    sim.spec.terminate = true;
    let late = webtest_success(99, sim.now, 1);
    let plan = sim.round(&[late]);
    assert!(plan.completed && plan.start.is_empty() && plan.notes.is_empty());
    assert_eq!(Some(plan.status), frozen);
    assert_eq!(plan.consumed, vec![99], "late measurements are dropped, not kept forever");
}

#[test]
fn invalid_runs_end_error_with_the_reason() {
    let spec =
        HookRunSpec { metrics: vec![Metric { interval: Some("60".into()), ..web("m") }], ..HookRunSpec::default() };
    let mut sim = Sim::new(spec, &[]);
    let plan = sim.round(&[]);
    assert!(plan.completed);
    assert_eq!(plan.status.phase, Some(E));
    let message = plan.status.message.unwrap();
    assert!(message.starts_with("invalid HookRun: metrics[0] (m): interval: invalid duration \"60\""), "{message}");
    let spec = HookRunSpec {
        metrics: vec![Metric {
            provider: MetricProvider { exec: Some(Default::default()), ..MetricProvider::default() },
            ..web("m")
        }],
        ..HookRunSpec::default()
    };
    let plan = Sim::new(spec, &[]).round(&[]);
    assert_eq!(plan.status.phase, Some(E));
    assert!(plan.status.message.unwrap().contains("exec is not supported"));
}

#[test]
fn a_measurement_is_never_recorded_twice() {
    let mut sim = Sim::new(walkthrough("true"), &[]);
    sim.round(&[]);
    let f = webtest_success(1, at(1_001), 0);
    let plan = sim.round(std::slice::from_ref(&f));
    assert_eq!(sim.result("webtest").count, 1);
    assert_eq!(plan.wake_at, Some(at(1_061)));
    // The same measurement again (e.g. the write that recorded it was not acknowledged): ignored.
    sim.round(&[f]);
    assert_eq!(sim.result("webtest").count, 1);
}

#[test]
fn a_round_copies_what_it_recorded_only_when_asked_and_always_counts_it() {
    let f = webtest_success(1, at(1_001), 0);
    let mut kept = Sim::new(walkthrough("true"), &[]);
    let mut counted = Sim::new(walkthrough("true"), &[]);
    counted.settings.keep_recorded = false;
    kept.round(&[]);
    counted.round(&[]);
    let (with_copy, without) = (kept.round(std::slice::from_ref(&f)), counted.round(&[f]));
    assert_eq!(with_copy.recorded.len(), 1, "check prints these");
    assert!(without.recorded.is_empty(), "the operator and hook-bench read none");
    assert_eq!((with_copy.recorded_count, without.recorded_count), (1, 1));
    assert_eq!(with_copy.status, without.status);
    assert_eq!(with_copy.wake_at, without.wake_at);
}

#[test]
fn a_restart_resumes_from_status_never_early() {
    let mut sim = Sim::new(walkthrough("true"), &[]);
    sim.round(&[]);
    let finished_at = at(1_000).checked_add(Duration::from_millis(400)).unwrap();
    let f = webtest_success(1, finished_at, 0);
    let plan = sim.round(&[f]);
    let precise_due = finished_at.checked_add(Duration::from_secs(60)).unwrap();
    assert_eq!(plan.wake_at, Some(precise_due));
    // A new process: same status, nothing in memory.
    sim.precise = Precise::default();
    sim.now = precise_due;
    let plan = sim.round(&[]);
    assert!(plan.start.is_empty(), "not due before the stored resumeAt");
    assert_eq!(plan.wake_at, Some(at(1_061)));
    sim.now = at(1_061);
    assert_eq!(sim.round(&[]).start.len(), 1, "due at resumeAt: not skipped");
}

#[test]
fn in_flight_metrics_are_not_started_again_and_unchanged_rounds_change_nothing() {
    let spec = walkthrough("true");
    let status = Sim::new(spec.clone(), &[]).round(&[]).status;
    let in_flight: HashSet<String> = ["webtest".to_string()].into();
    let precise = Precise { started_at: Some(at(1_000)), ..Precise::default() };
    let settings = EngineSettings::default();
    let plan = plan(&Inputs {
        spec: &spec,
        status: Some(&status),
        invalid: None,
        finished: &[],
        in_flight: &in_flight,
        precise: &precise,
        now: at(1_005),
        settings: &settings,
    });
    assert!(plan.start.is_empty());
    assert_eq!(plan.wake_at, None);
    assert_eq!(plan.status, status, "nothing changed: nothing to write");
}

#[test]
fn interval_scale_compresses_time() {
    let mut sim = Sim::new(walkthrough("true"), &[]);
    sim.settings.interval_scale = 0.01;
    assert_eq!(sim.run(), Some(S));
    let starts: Vec<i64> = sim.taken_at.iter().map(|(_, t)| t.as_millisecond()).collect();
    assert_eq!(starts.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(), vec![700, 700]);
}

#[test]
fn the_round_that_records_a_measurement_arms_the_next() {
    let mut sim = Sim::new(walkthrough("true"), &[]);
    sim.settings.arm_ahead = crate::settings::DEFAULT_ARM_AHEAD;
    let first = sim.round(&[]);
    assert_eq!(first.start.len(), 1, "due now: started now");
    assert!(first.arm.is_empty());
    sim.now = at(1_000).checked_add(Duration::from_millis(100)).unwrap();
    let finished = Finished {
        id: 1,
        metric: "webtest".into(),
        measurement: Measurement {
            phase: Some(S),
            started_at: Some(Time(at(1_000))),
            finished_at: Some(Time(sim.now)),
            value: Some("45".into()),
            ..Measurement::default()
        },
        finished_at: sim.now,
        taken_before: 0,
        lost: false,
    };
    let second = sim.round(&[finished]);
    assert!(second.start.is_empty());
    assert_eq!(second.arm.len(), 1, "the next measurement (60 s later) is armed by the round that recorded the last");
    assert_eq!(second.arm[0].due, sim.now.checked_add(Duration::from_secs(60)).unwrap());
    assert_eq!(second.arm[0].taken_before, 1);
    assert_eq!(second.wake_at, None, "no round is needed before the armed measurement finishes");
}

#[test]
fn measurements_due_beyond_arm_ahead_wake_the_run_instead() {
    let spec = HookRunSpec {
        metrics: vec![Metric { initial_delay: Some("30s".into()), ..web("m") }],
        ..HookRunSpec::default()
    };
    let mut sim = Sim::new(spec, &[]);
    sim.settings.arm_ahead = Duration::from_secs(29);
    let plan = sim.round(&[]);
    assert!(plan.start.is_empty() && plan.arm.is_empty());
    assert_eq!(plan.wake_at, Some(at(1_030)));
    sim.settings.arm_ahead = Duration::from_secs(30);
    let plan = sim.round(&[]);
    assert_eq!(plan.arm.len(), 1);
    assert_eq!(plan.wake_at, None);
}

#[test]
fn arming_takes_the_same_measurements_at_the_same_times_in_half_the_rounds() {
    let spec = walkthrough("true");
    let outcomes: &[(&str, &[HookPhase])] = &[("webtest", &[S, F, S])];
    let mut classic = Sim::new(spec.clone(), outcomes);
    let mut armed = Sim::new(spec, outcomes);
    armed.settings.arm_ahead = crate::settings::DEFAULT_ARM_AHEAD;
    assert_eq!(classic.run(), Some(S));
    assert_eq!(armed.run(), Some(S));
    assert_eq!(armed.taken_at, classic.taken_at);
    assert_eq!(armed.status, classic.status);
    assert_eq!(armed.notes, classic.notes);
    assert!(armed.rounds < classic.rounds, "armed {} rounds, classic {}", armed.rounds, classic.rounds);
}

#[test]
fn a_run_whose_measurements_error_says_so_while_running() {
    let spec = HookRunSpec {
        metrics: vec![Metric { interval: Some("5s".into()), count: 3, ..web("probe") }],
        ..HookRunSpec::default()
    };
    let mut sim = Sim::new(spec, &[]);
    let first = sim.round(&[]);
    assert_eq!(first.status.message, None);
    let error = |id: u64, taken_before: i32, at: Timestamp| Finished {
        id,
        metric: "probe".into(),
        measurement: Measurement {
            phase: Some(E),
            message: Some(format!("GET http://x/: cannot connect ({id})")),
            finished_at: Some(Time(at)),
            ..Measurement::default()
        },
        finished_at: at,
        taken_before,
        lost: false,
    };
    let plan = sim.round(&[error(1, 0, sim.now)]);
    assert_eq!(plan.status.phase, Some(R));
    let message = plan.status.message.clone().unwrap();
    assert!(message.contains("metric \"probe\": 1 measurement error(s) in a row"), "{message}");
    assert!(message.contains("cannot connect (1)"), "{message}");
    assert_eq!(
        plan.notes,
        vec![Note::MeasurementError { metric: "probe".into(), message: "GET http://x/: cannot connect (1)".into() }]
    );
    // The second error in a row updates the message but is not a new Event.
    sim.now = sim.now.checked_add(Duration::from_secs(6)).unwrap();
    let plan = sim.round(&[error(2, 1, sim.now)]);
    assert!(plan.status.message.unwrap().contains("2 measurement error(s) in a row"));
    assert!(plan.notes.is_empty(), "{:?}", plan.notes);
    // A success clears it.
    sim.now = sim.now.checked_add(Duration::from_secs(6)).unwrap();
    let ok = Finished {
        id: 3,
        metric: "probe".into(),
        measurement: Measurement { phase: Some(S), finished_at: Some(Time(sim.now)), ..Measurement::default() },
        finished_at: sim.now,
        taken_before: 2,
        lost: false,
    };
    assert_eq!(sim.round(&[ok]).status.message, None);
}

#[test]
fn status_text_is_bounded() {
    let mut r = MetricResult::default();
    let huge = "x".repeat(100_000);
    record(
        &mut r,
        Measurement { phase: Some(E), message: Some(huge.clone()), value: Some(huge), ..Measurement::default() },
        10,
    );
    assert!(r.measurements[0].message.as_ref().unwrap().chars().count() < MAX_STATUS_TEXT + 40);
    assert!(r.measurements[0].value.as_ref().unwrap().chars().count() < MAX_STATUS_TEXT + 40);
}

#[test]
fn restarts_alone_never_end_a_run_by_consecutive_error_limit() {
    let spec = HookRunSpec {
        metrics: vec![Metric { interval: Some("5s".into()), count: 3, failure_limit: 1, ..web("probe") }],
        ..HookRunSpec::default()
    };
    let mut sim = Sim::new(spec, &[]);
    sim.round(&[]);
    let finished = |id: u64, phase: HookPhase, taken_before: i32, at: Timestamp, lost: bool| Finished {
        id,
        metric: "probe".into(),
        measurement: Measurement { phase: Some(phase), finished_at: Some(Time(at)), ..Measurement::default() },
        finished_at: at,
        taken_before,
        lost,
    };
    // Six restarts in a row at due times, each retake meeting a success: six lost outcomes, more than the default
    // consecutiveErrorLimit (4).
    for i in 0..6 {
        sim.now = sim.now.checked_add(Duration::from_secs(6)).unwrap();
        let plan = sim.round(&[finished(i + 1, E, i as i32, sim.now, true)]);
        assert_eq!(plan.status.phase, Some(R), "after {} lost outcomes: {:#?}", i + 1, plan.status);
        assert!(plan.notes.is_empty(), "a lost outcome is not the endpoint's error: {:?}", plan.notes);
    }
    // Then the endpoint's own F S F ends the run as without restarts.
    for (i, phase) in [F, S, F].into_iter().enumerate() {
        sim.now = sim.now.checked_add(Duration::from_secs(6)).unwrap();
        sim.round(&[finished(7 + i as u64, phase, 6 + i as i32, sim.now, false)]);
    }
    let status = sim.status.clone().unwrap();
    assert_eq!(status.phase, Some(F), "{status:#?}");
    assert_eq!((status.metric_results[0].error, status.metric_results[0].failed), (6, 2));
}
