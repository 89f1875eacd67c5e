//! What the executor records about its writes besides sending them: the expectations the next pass waits for
//! ([`super::stale_cache`]), the metrics, the pods it deleted itself, whether the API serves `deletecollection`.
//! The controller lends its own ([`Ledger`] borrows the [`super::Context`]'s); a forecast or a unit test, which run
//! the same executor on a simulated cluster, keep theirs in a [`Standalone`].

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use common::api::HookRun;

use super::stale_cache::hookrun_expectations::HookRunExpectations;
use super::stale_cache::write_expectations::Expectations;
use crate::metrics::Metrics;

/// Where the pods whose deletion this operator sent are noted.
pub(crate) trait DeletionLog: Sync {
    fn deleting(&self, uid: &str);
}

pub(crate) struct Ledger<'a> {
    pub expectations: &'a Expectations,
    pub hook_runs: &'a HookRunExpectations,
    pub metrics: &'a Metrics,
    /// Told the UID of every pod deletion sent (so that it is not reported as someone else's).
    pub deleting: &'a dyn DeletionLog,
    /// Consumed HookRuns are deleted as collections until the API refuses `deletecollection` once.
    pub collection_deletes: &'a AtomicBool,
    /// Writes in flight at once.
    pub write_concurrency: usize,
    /// Whether the watch cache shows a created run already (its expectation can go); None: keep every one until the
    /// next pass.
    pub cached_run: Option<&'a (dyn Fn(&HookRun) -> bool + Sync)>,
}

/// A ledger of its own, for an executor that runs outside the controller (on a simulated cluster).
pub(crate) struct Standalone {
    pub expectations: Expectations,
    pub hook_runs: HookRunExpectations,
    pub metrics: Metrics,
    pub collection_deletes: AtomicBool,
    pub write_concurrency: usize,
    /// The UIDs of the pods whose deletion was sent.
    pub deleted: std::sync::Mutex<Vec<String>>,
}

impl Standalone {
    pub fn new(write_concurrency: usize) -> Self {
        let timeout = Duration::from_secs(30);
        Self {
            expectations: Expectations::new(timeout),
            hook_runs: HookRunExpectations::new(timeout),
            metrics: Metrics::register(&mut prometheus_client::registry::Registry::default()),
            collection_deletes: AtomicBool::new(true),
            write_concurrency,
            deleted: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Lends it to one executor run.
    pub fn lend(&self) -> Ledger<'_> {
        Ledger {
            expectations: &self.expectations,
            hook_runs: &self.hook_runs,
            metrics: &self.metrics,
            deleting: self,
            collection_deletes: &self.collection_deletes,
            write_concurrency: self.write_concurrency,
            cached_run: None,
        }
    }

    /// Forgets what a run recorded for the GameDeployment `key` (nothing waits on it: the next simulated pass reads
    /// the cluster itself), keeping the books' size that of one pass.
    pub fn forget(&mut self, key: &str) {
        self.expectations.forget(key);
        self.hook_runs = HookRunExpectations::new(Duration::from_secs(30));
        self.deleted.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }
}

impl DeletionLog for Standalone {
    fn deleting(&self, uid: &str) {
        self.deleted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(uid.to_string());
    }
}
