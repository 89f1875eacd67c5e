//! Expectations for HookRuns: runs we created or deleted that the watch cache does not show yet. Planning from
//! the cache alone would create a run twice (harmless, the name is deterministic) or — worse — read a run we
//! just deleted for a retry as still failed, or miss that a new one exists. The overlay adds our own creations
//! and hides our own deletions until the cache agrees, or until `timeout` says the cache will not catch up.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::api::HookRun;

#[derive(Debug)]
pub struct HookRunExpectations {
    timeout: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// By UID: runs we created.
    created: HashMap<String, (Arc<HookRun>, Instant)>,
    /// UIDs of runs we deleted.
    deleted: HashMap<String, Instant>,
}

fn uid(run: &HookRun) -> &str {
    run.metadata.uid.as_deref().unwrap_or("")
}

impl HookRunExpectations {
    pub fn new(timeout: Duration) -> Self {
        Self { timeout, inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Poisoning only means a pass panicked mid-update; the maps stay usable.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn created(&self, run: HookRun) {
        let key = uid(&run).to_string();
        self.lock().created.insert(key, (Arc::new(run), Instant::now()));
    }

    pub fn deleted(&self, uid: &str) {
        let mut inner = self.lock();
        inner.created.remove(uid);
        inner.deleted.insert(uid.to_string(), Instant::now());
    }

    /// Forgets the created runs the cache already `shows`: a pass that creates thousands of runs calls it as the
    /// answers come in, so the expectations hold the answers the watch has not caught up with, not the whole batch
    /// until the next pass ([`Self::apply`] forgets them by the same rule).
    pub fn settle(&self, shows: impl Fn(&HookRun) -> bool) {
        self.lock().created.retain(|_, (run, _)| !shows(run));
    }

    /// Created runs not shown by the cache yet (tests, diagnostics).
    #[cfg(test)]
    pub fn created_count(&self) -> usize {
        self.lock().created.len()
    }

    /// The runs of `namespace` as the planner should see them.
    pub fn apply(&self, namespace: &str, cached: Vec<Arc<HookRun>>) -> Vec<Arc<HookRun>> {
        let now = Instant::now();
        let mut inner = self.lock();
        let timeout = self.timeout;
        if !inner.created.is_empty() {
            // Sets, not a scan of the cache per entry: a batch creates up to thousands of runs at once.
            let in_cache: HashSet<&str> = cached.iter().map(|r| uid(r)).collect();
            inner.created.retain(|u, (_, at)| now.duration_since(*at) < timeout && !in_cache.contains(u.as_str()));
        }
        // A deletion is done once the cache no longer has the object; only entries of this namespace can be
        // judged against this namespace's cache, the rest expire by time.
        inner.deleted.retain(|_, at| now.duration_since(*at) < timeout);
        let mut runs: Vec<Arc<HookRun>> = if inner.deleted.is_empty() {
            cached
        } else {
            cached.into_iter().filter(|r| !inner.deleted.contains_key(uid(r))).collect()
        };
        if !inner.created.is_empty() {
            let mut names: HashSet<String> = runs.iter().filter_map(|r| r.metadata.name.clone()).collect();
            for (run, _) in inner.created.values() {
                if run.metadata.namespace.as_deref() == Some(namespace)
                    && run.metadata.name.as_ref().is_none_or(|n| !names.contains(n))
                {
                    names.extend(run.metadata.name.clone());
                    runs.push(Arc::clone(run));
                }
            }
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, uid: &str) -> Arc<HookRun> {
        let mut run = HookRun::new(name, Default::default());
        run.metadata.namespace = Some("default".into());
        run.metadata.uid = Some(uid.into());
        Arc::new(run)
    }

    #[test]
    fn created_runs_show_until_the_cache_has_them_and_deleted_ones_stay_hidden() {
        let overlay = HookRunExpectations::new(Duration::from_secs(30));
        overlay.created(HookRun::clone(&run("a", "1")));
        assert_eq!(overlay.apply("default", vec![]).len(), 1);
        assert!(overlay.apply("other", vec![]).is_empty());
        assert_eq!(overlay.apply("default", vec![run("a", "1")]).len(), 1);
        // The cache showed it once: the entry is gone, the cache decides from now on.
        assert!(overlay.apply("default", vec![]).is_empty());
        overlay.deleted("2");
        assert!(overlay.apply("default", vec![run("b", "2")]).is_empty());
        // A new run under the same name (a retry) is not hidden: the UID differs.
        assert_eq!(overlay.apply("default", vec![run("b", "3")]).len(), 1);
    }

    #[test]
    fn entries_expire() {
        let overlay = HookRunExpectations::new(Duration::ZERO);
        overlay.created(HookRun::clone(&run("a", "1")));
        overlay.deleted("2");
        assert!(overlay.apply("default", vec![]).is_empty());
        assert_eq!(overlay.apply("default", vec![run("b", "2")]).len(), 1);
    }

    #[test]
    fn runs_the_cache_shows_are_forgotten_as_soon_as_a_pass_settles() {
        let overlay = HookRunExpectations::new(Duration::from_secs(30));
        overlay.created(HookRun::clone(&run("a", "1")));
        overlay.created(HookRun::clone(&run("b", "2")));
        // The cache shows `a` (same UID) and a `b` of another UID: only `a` is forgotten.
        let cache = [run("a", "1"), run("b", "other")];
        overlay
            .settle(|r| cache.iter().any(|c| c.metadata.name == r.metadata.name && c.metadata.uid == r.metadata.uid));
        assert_eq!(overlay.created_count(), 1);
        let shown = overlay.apply("default", vec![]);
        assert_eq!(shown.iter().map(|r| r.metadata.name.as_deref()).collect::<Vec<_>>(), vec![Some("b")]);
    }
}
