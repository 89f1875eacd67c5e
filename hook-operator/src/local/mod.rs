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
        let Round { run: base, plan, changed, .. } = round;
        // Unchanged, the status may still be in the plan (moved there): put back in that case too.
        run = if changed || base.status.is_none() {
            let mut base = base;
            match Arc::get_mut(&mut base) {
                // Held only here: the status goes back into the same object (no new one per round).
                Some(owned) => owned.status = Some(plan.status),
                // Measurement tasks may still hold the previous object; clone only in that case.
                None => {
                    let mut updated = Arc::unwrap_or_clone(base);
                    updated.status = Some(plan.status);
                    base = Arc::new(updated);
                }
            }
            base
        } else {
            base
        };
        if plan.completed {
            wakers.unregister(&uid);
            return Arc::unwrap_or_clone(run);
        }
        match plan.wake_at {
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
}
