//! Expectations: what the operator has just written and its cache must show before the next pass may plan.
//!
//! Watch caches lag behind writes. Without this, a pass right after creating a pod would not see it and create
//! another; a pass right after deleting one would delete a second; a pass right after patching a pod would plan
//! from its old labels. So each write is recorded (pod created by name, pod deleted by UID, pod patched with the
//! resourceVersion the server returned, revision created by name) and a GameDeployment is not planned until its
//! cache has caught up.
//!
//! Unlike BCS's (BCS-G6) an expectation expires: if the cache has not shown it within the timeout (a lost
//! watch event, an object deleted behind our back), it is dropped, counted and logged, and planning resumes —
//! a stuck expectation never freezes a GameDeployment. Expectations live in memory only; after a restart the
//! cache is freshly listed, so there is nothing to wait for.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::cached_pod::Pod;
use k8s_openapi::api::apps::v1::ControllerRevision;

#[derive(Debug, Default)]
struct Pending {
    /// Pod name → when it was created.
    creates: HashMap<String, Instant>,
    /// Pod UID → when it was deleted.
    deletes: HashMap<String, Instant>,
    /// Pod name → (resourceVersion returned by the patch, when).
    patches: HashMap<String, (String, Instant)>,
    /// Revision name → when it was created.
    revisions: HashMap<String, Instant>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.creates.is_empty() && self.deletes.is_empty() && self.patches.is_empty() && self.revisions.is_empty()
    }
}

/// The answer of [`Expectations::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The cache shows every write: plan.
    Satisfied { expired: usize },
    /// Some writes are not visible yet: wait for the watch event (or this long at most).
    Waiting { outstanding: usize, retry_after: Duration },
}

/// Expectations of every GameDeployment, keyed by `namespace/name`.
#[derive(Debug)]
pub struct Expectations {
    timeout: Duration,
    pending: Mutex<HashMap<String, Pending>>,
}

/// Whether the cached resourceVersion is at least the one we wrote. Resource versions are opaque, but every
/// server in practice (etcd, kube-sim) uses increasing integers; for anything else only equality counts.
fn caught_up(cached: &str, written: &str) -> bool {
    match (cached.parse::<u64>(), written.parse::<u64>()) {
        (Ok(c), Ok(w)) => c >= w,
        _ => cached == written,
    }
}

impl Expectations {
    pub fn new(timeout: Duration) -> Self {
        Self { timeout, pending: Mutex::new(HashMap::new()) }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Pending>) -> T) -> T {
        // A poisoned lock only means another reconcile panicked mid-update; the map itself is still usable.
        let mut guard = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }

    pub fn expect_create(&self, key: &str, pod: &str, now: Instant) {
        self.with(|m| m.entry(key.to_string()).or_default().creates.insert(pod.to_string(), now));
    }

    pub fn create_failed(&self, key: &str, pod: &str) {
        self.with(|m| m.get_mut(key).map(|p| p.creates.remove(pod)));
    }

    pub fn expect_delete(&self, key: &str, uid: &str, now: Instant) {
        self.with(|m| m.entry(key.to_string()).or_default().deletes.insert(uid.to_string(), now));
    }

    pub fn delete_failed(&self, key: &str, uid: &str) {
        self.with(|m| m.get_mut(key).map(|p| p.deletes.remove(uid)));
    }

    pub fn expect_patch(&self, key: &str, pod: &str, resource_version: &str, now: Instant) {
        self.with(|m| {
            m.entry(key.to_string()).or_default().patches.insert(pod.to_string(), (resource_version.to_string(), now))
        });
    }

    pub fn expect_revision(&self, key: &str, name: &str, now: Instant) {
        self.with(|m| m.entry(key.to_string()).or_default().revisions.insert(name.to_string(), now));
    }

    /// Drops everything about a GameDeployment (it was deleted).
    pub fn forget(&self, key: &str) {
        self.with(|m| m.remove(key));
    }

    /// Compares the expectations of `key` with the cache (`pods` of its namespace, its `revisions`), removing
    /// those observed and those older than the timeout.
    pub fn check(&self, key: &str, pods: &[&Pod], revisions: &[&ControllerRevision], now: Instant) -> Check {
        let timeout = self.timeout;
        self.with(|m| {
            let Some(pending) = m.get_mut(key) else { return Check::Satisfied { expired: 0 } };
            let mut expired = 0;
            let mut keep = |since: &Instant, observed: bool| {
                if observed {
                    false
                } else if now.duration_since(*since) >= timeout {
                    expired += 1;
                    false
                } else {
                    true
                }
            };
            // Indexes of the pods (the first of each name / UID, as a scan finds it), built only when something is
            // pending: a pass of a roll waits for up to thousands of writes among thousands of pods.
            let mut names: HashMap<&str, &Pod> = HashMap::new();
            let mut uids: HashMap<&str, &Pod> = HashMap::new();
            if !pending.creates.is_empty() || !pending.patches.is_empty() {
                names.reserve(pods.len());
                for pod in pods {
                    if let Some(name) = pod.metadata.name.as_deref() {
                        names.entry(name).or_insert(pod);
                    }
                }
            }
            if !pending.deletes.is_empty() {
                uids.reserve(pods.len());
                for pod in pods {
                    if let Some(uid) = pod.metadata.uid.as_deref() {
                        uids.entry(uid).or_insert(pod);
                    }
                }
            }
            let by_name = |name: &str| names.get(name).copied();
            pending.creates.retain(|name, since| keep(since, by_name(name).is_some()));
            pending.deletes.retain(|uid, since| {
                let pod = uids.get(uid.as_str()).copied();
                keep(since, pod.is_none_or(|p| p.metadata.deletion_timestamp.is_some()))
            });
            pending.patches.retain(|name, (rv, since)| {
                let observed = by_name(name)
                    .is_none_or(|p| p.metadata.resource_version.as_deref().is_some_and(|cached| caught_up(cached, rv)));
                keep(since, observed)
            });
            pending.revisions.retain(|name, since| {
                keep(since, revisions.iter().any(|r| r.metadata.name.as_deref() == Some(name.as_str())))
            });
            if pending.is_empty() {
                m.remove(key);
                return Check::Satisfied { expired };
            }
            let oldest = pending
                .creates
                .values()
                .chain(pending.deletes.values())
                .chain(pending.patches.values().map(|(_, t)| t))
                .chain(pending.revisions.values())
                .min()
                .copied()
                .unwrap_or(now);
            let outstanding =
                pending.creates.len() + pending.deletes.len() + pending.patches.len() + pending.revisions.len();
            let retry_after = timeout.saturating_sub(now.duration_since(oldest)).max(Duration::from_millis(100));
            Check::Waiting { outstanding, retry_after }
        })
    }

    /// Drops expired expectations of every GameDeployment (including deleted ones that will never be checked
    /// again). Returns how many were dropped.
    pub fn expire(&self, now: Instant) -> usize {
        let timeout = self.timeout;
        self.with(|m| {
            let mut dropped = 0;
            for pending in m.values_mut() {
                let mut fresh = |since: &Instant| {
                    let keep = now.duration_since(*since) < timeout;
                    dropped += usize::from(!keep);
                    keep
                };
                pending.creates.retain(|_, t| fresh(t));
                pending.deletes.retain(|_, t| fresh(t));
                pending.patches.retain(|_, (_, t)| fresh(t));
                pending.revisions.retain(|_, t| fresh(t));
            }
            m.retain(|_, p| !p.is_empty());
            dropped
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    #[test]
    fn waits_until_the_cache_shows_each_write() {
        let e = Expectations::new(Duration::from_secs(30));
        let t0 = Instant::now();
        e.expect_create("ns/gd", "gd-a", t0);
        e.expect_delete("ns/gd", "uid-b", t0);
        e.expect_patch("ns/gd", "gd-c", "105", t0);
        e.expect_revision("ns/gd", "gd-123", t0);
        let b = pod("gd-b").uid("uid-b").resource_version("90").build();
        let c_old = pod("gd-c").uid("uid-c").resource_version("100").build();
        assert!(matches!(e.check("ns/gd", &[&b, &c_old], &[], t0), Check::Waiting { outstanding: 4, .. }));
        // Other GameDeployments are not affected.
        assert_eq!(e.check("ns/other", &[], &[], t0), Check::Satisfied { expired: 0 });

        let a = pod("gd-a").uid("uid-a").resource_version("101").build();
        let mut b_leaving = b.clone();
        b_leaving.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let c_new = pod("gd-c").uid("uid-c").resource_version("106").build();
        let revision = ControllerRevision {
            metadata: ObjectMeta { name: Some("gd-123".into()), ..Default::default() },
            ..Default::default()
        };
        assert!(matches!(
            e.check("ns/gd", &[&a, &b_leaving, &c_old], &[&revision], t0),
            Check::Waiting { outstanding: 1, .. }
        ));
        assert_eq!(e.check("ns/gd", &[&a, &c_new], &[&revision], t0), Check::Satisfied { expired: 0 });
    }

    #[test]
    fn failed_writes_are_not_waited_for() {
        let e = Expectations::new(Duration::from_secs(30));
        let t0 = Instant::now();
        e.expect_create("k", "p", t0);
        e.create_failed("k", "p");
        e.expect_delete("k", "u", t0);
        e.delete_failed("k", "u");
        assert_eq!(e.check("k", &[], &[], t0), Check::Satisfied { expired: 0 });
    }

    #[test]
    fn expectations_expire() {
        let e = Expectations::new(Duration::from_secs(30));
        let t0 = Instant::now();
        e.expect_create("k", "never-seen", t0);
        let Check::Waiting { retry_after, .. } = e.check("k", &[], &[], t0 + Duration::from_secs(10)) else { panic!() };
        assert_eq!(retry_after, Duration::from_secs(20));
        assert_eq!(e.check("k", &[], &[], t0 + Duration::from_secs(31)), Check::Satisfied { expired: 1 });
        e.expect_create("gone", "x", t0);
        assert_eq!(e.expire(t0 + Duration::from_secs(31)), 1);
        assert_eq!(e.check("gone", &[], &[], t0), Check::Satisfied { expired: 0 });
    }

    #[test]
    fn resource_versions_compare_as_numbers() {
        assert!(caught_up("10", "9"));
        assert!(caught_up("10", "10"));
        assert!(!caught_up("9", "10"));
        assert!(caught_up("abc", "abc"));
        assert!(!caught_up("abd", "abc"));
    }
}
