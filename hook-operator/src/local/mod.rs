//! Running HookRuns without a cluster: the same dispatcher, engine and providers as the controller, with the
//! status kept in memory. Used by `hook-operator check` and by the benchmark.

pub mod check;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::api::HookRun;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::Notify;

use crate::dispatch::{Dispatcher, Round, RunId, Wake};
use crate::engine::schedule;

/// Routes "a measurement finished" to the task driving that run.
#[derive(Clone, Default)]
pub struct Wakers {
    by_uid: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl Wakers {
    /// The [`Wake`] to give a dispatcher: wakes the task driving the finished measurement's run.
    pub fn wake(&self) -> Wake {
        let by_uid = self.by_uid.clone();
        Arc::new(move |id: &RunId| {
            let notify = by_uid.lock().ok().and_then(|m| m.get(&*id.uid).cloned());
            if let Some(notify) = notify {
                // notify_one keeps a permit when nobody waits yet, so a wake-up is never lost.
                notify.notify_one();
            }
        })
    }

    fn register(&self, uid: &str) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        if let Ok(mut map) = self.by_uid.lock() {
            map.insert(uid.to_string(), notify.clone());
        }
        notify
    }

    fn unregister(&self, uid: &str) {
        if let Ok(mut map) = self.by_uid.lock() {
            map.remove(uid);
        }
    }
}

/// Drives one run to completion, calling `observe` after every round.
pub async fn drive(dispatcher: &Dispatcher, wakers: &Wakers, run: HookRun, observe: impl FnMut(&Round)) -> HookRun {
    drive_with(dispatcher, wakers, run, observe, true).await
}

/// [`drive`]; `move_status: false` plans every round on a copy of the status ([`Dispatcher::plan`], as before
/// `plan_owned`), for the benchmark's comparison.
pub async fn drive_with(
    dispatcher: &Dispatcher,
    wakers: &Wakers,
    run: HookRun,
    mut observe: impl FnMut(&Round),
    move_status: bool,
) -> HookRun {
    let mut run = Arc::new(run);
    let uid = RunId::of(&run).uid;
    let notify = wakers.register(&uid);
    loop {
        let now = Timestamp::now();
        // The status lives here only: moved into the round and back, its history never copied.
        let round = if move_status { dispatcher.plan_owned(run, now) } else { dispatcher.plan(run, now) };
        observe(&round);
        dispatcher.commit(&round, None);
        let Round { id, run: base, mut plan, changed } = round;
        let status = std::mem::take(&mut plan.status);
        // Unchanged, the status may still be in the plan (moved there): put back in that case too.
        run = if changed || base.status.is_none() {
            let mut base = base;
            match Arc::get_mut(&mut base) {
                // Held only here: the status goes back into the same object (no new one per round).
                Some(owned) => owned.status = Some(status),
                // Measurement tasks may still hold the previous object; clone only in that case.
                None => {
                    let mut updated = Arc::unwrap_or_clone(base);
                    updated.status = Some(status);
                    base = Arc::new(updated);
                }
            }
            base
        } else {
            base
        };
        let (completed, wake_at) = (plan.completed, plan.wake_at);
        dispatcher.recycle(&id, plan);
        if completed {
            wakers.unregister(&uid);
            return Arc::unwrap_or_clone(run);
        }
        match wake_at {
            Some(at) => {
                let delay = schedule::until(Timestamp::now(), at);
                tokio::select! {
                    _ = notify.notified() => {}
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            None => notify.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use common::api::{HookPhase, HookRunStatus};

    use super::*;
    use crate::metrics::Metrics;
    use crate::providers::{ProviderSettings, Providers};
    use crate::settings::EngineSettings;

    /// The status is moved into each round (`Dispatcher::plan_owned`): a round that changes nothing must hand it back
    /// too, e.g. for a run that is already completed.
    #[tokio::test]
    async fn a_run_driven_to_its_end_keeps_its_status_when_the_last_round_changed_nothing() {
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        let wakers = Wakers::default();
        let dispatcher =
            Dispatcher::new(providers, Arc::new(Metrics::default()), EngineSettings::default(), 10, wakers.wake());
        let mut run = HookRun::new("done", common::api::HookRunSpec::default());
        run.metadata.uid = Some("uid-done".into());
        let status = HookRunStatus {
            phase: Some(HookPhase::Successful),
            message: Some("all metrics completed".into()),
            ..HookRunStatus::default()
        };
        run.status = Some(status.clone());
        let mut rounds = 0;
        let finished = drive(&dispatcher, &wakers, run, |round| {
            rounds += 1;
            assert!(round.plan.completed && !round.changed);
        })
        .await;
        assert_eq!(rounds, 1);
        assert_eq!(finished.status, Some(status));
    }

    /// A keep-alive HTTP server answering `{"age":45}` to every request, on threads of its own (its allocations are
    /// not the test thread's).
    fn serve_age() -> std::net::SocketAddr {
        serve(|_| r#"{"age":45}"#.to_string())
    }

    /// A keep-alive HTTP server answering the `n`th request (from 0, over all connections) with `body(n)`.
    fn serve(body: fn(usize) -> String) -> std::net::SocketAddr {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let served = served.clone();
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 4096];
                    let mut filled = 0;
                    loop {
                        match stream.read(&mut buffer[filled..]) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => filled += n,
                        }
                        while let Some(end) = buffer[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                            buffer.copy_within(end + 4..filled, 0);
                            filled -= end + 4;
                            let body = body(served.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
                            let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
                            if stream.write_all(answer.as_bytes()).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// A run of `count` web measurements 1 ms apart against `url`: the benchmark's metric (jsonPath, condition).
    fn measured(name: &str, url: &str, count: i32) -> HookRun {
        let metric = common::api::Metric {
            name: "webtest".into(),
            interval: Some("1ms".into()),
            count,
            success_condition: Some("asInt(result) > 30".into()),
            provider: common::api::MetricProvider {
                web: Some(common::api::WebMetric {
                    url: url.into(),
                    json_path: Some("{$.age}".into()),
                    ..common::api::WebMetric::default()
                }),
                ..common::api::MetricProvider::default()
            },
            ..common::api::Metric::default()
        };
        let mut run = HookRun::new(name, common::api::HookRunSpec { metrics: vec![metric], ..Default::default() });
        run.metadata.namespace = Some("ns".into());
        run.metadata.uid = Some(format!("uid-{name}"));
        run.metadata.generation = Some(1);
        run
    }

    /// What a measurement allocates on the engine's side, from its start to its record in the run's status (the
    /// task, the HTTP exchange, the reading and judging, the round): the runs keep their rendered request, answer
    /// buffer and measurement record between measurements, so this stays small. Counted exactly on this thread (the
    /// runtime is single-threaded, the server runs on threads of its own), as the difference between a run of 25
    /// measurements and one of 5, so what every run pays once (its first round, its connection) cancels out.
    #[tokio::test]
    async fn a_measurement_allocates_little_once_its_run_is_under_way() {
        let url = format!("http://{}/age", serve_age());
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        let wakers = Wakers::default();
        let settings = EngineSettings {
            min_interval: std::time::Duration::ZERO,
            keep_recorded: false,
            ..EngineSettings::default()
        };
        let dispatcher = Dispatcher::new(providers, Arc::new(Metrics::default()), settings, 10, wakers.wake());
        let mut allocations = Vec::new();
        for (name, count) in [("warm-up", 3), ("short", 5), ("long", 25)] {
            let before = crate::conditions::budget::allocations();
            let done = drive(&dispatcher, &wakers, measured(name, &url, count), |_| {}).await;
            allocations.push(crate::conditions::budget::allocations() - before);
            let status = done.status.unwrap();
            assert_eq!(status.phase, Some(HookPhase::Successful), "{status:?}");
            assert_eq!(status.metric_results[0].successful, count);
        }
        let per_measurement = (allocations[2] - allocations[1]) as f64 / 20.0;
        println!("allocations per measurement: {per_measurement:.2} ({allocations:?})");
        assert!(per_measurement <= LIMIT, "{per_measurement:.2} allocations per measurement (at most {LIMIT})");
    }

    /// A run's web request is rendered by its first measurement and reused by the next ones (the same one, not
    /// rendered again); the buffers it keeps stay small, also after a large answer.
    #[tokio::test]
    async fn a_run_renders_its_request_once_and_keeps_only_small_buffers() {
        let addr = serve(|n| match n {
            2 => format!(r#"{{"age":45,"pad":"{}"}}"#, "x".repeat(10_000)),
            _ => r#"{"age":45}"#.to_string(),
        });
        let providers = Providers::new(&ProviderSettings::default(), None).unwrap();
        let run = measured("kept", "http://{{args.addr}}/age", 1);
        let metric = &run.spec.metrics[0];
        let args = [common::api::Argument::new("addr", addr.to_string())];
        let mut kept = crate::providers::Kept::default();
        let mut first = None;
        for n in 0..4 {
            let taken = crate::measure::take_kept(&providers, "ns", metric, &args, &mut kept).await;
            let measurement = taken.measurement;
            assert_eq!((measurement.phase, measurement.value.as_deref()), (Some(HookPhase::Successful), Some("45")));
            let request = kept.request().expect("the rendered request is kept").clone();
            assert_eq!(request.url, format!("http://{addr}/age"));
            let first = first.get_or_insert_with(|| request.clone());
            assert!(Arc::ptr_eq(first, &request), "measurement {n} rendered the request again");
            let bytes = kept.buffer_bytes();
            assert!(bytes <= 2 * crate::providers::KEPT_BUFFER_BYTES, "measurement {n}: {bytes} bytes kept");
        }
    }

    /// See [`a_measurement_allocates_little_once_its_run_is_under_way`].
    const LIMIT: f64 = 6.0;
}
