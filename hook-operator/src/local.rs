//! Running HookRuns without a cluster: the same dispatcher, engine and providers as the controller, with the
//! status kept in memory. Used by `hook-operator check` and by the benchmark.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::api::HookRun;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::Notify;

use crate::dispatch::{Dispatcher, Round, RunId, Wake};
use crate::schedule;

/// Routes "a measurement finished" to the task driving that run.
#[derive(Clone, Default)]
pub struct Wakers {
    by_uid: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl Wakers {
    pub fn wake(&self) -> Wake {
        let by_uid = self.by_uid.clone();
        Arc::new(move |id: &RunId| {
            let notify = by_uid.lock().ok().and_then(|m| m.get(&id.uid).cloned());
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
pub async fn drive(dispatcher: &Dispatcher, wakers: &Wakers, run: HookRun, mut observe: impl FnMut(&Round)) -> HookRun {
    let mut run = Arc::new(run);
    let uid = RunId::of(&run).uid;
    let notify = wakers.register(&uid);
    loop {
        let now = Timestamp::now();
        let round = dispatcher.plan(run, now);
        observe(&round);
        dispatcher.commit(&round, None);
        let Round { run: base, plan, changed, .. } = round;
        run = if changed {
            // Measurement tasks may still hold the previous object; clone only in that case.
            let mut updated = Arc::unwrap_or_clone(base);
            updated.status = Some(plan.status);
            Arc::new(updated)
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
