//! What `/readyz` says for the hook-operator: whether this replica can do its job **now**.
//!
//! A replica has one of two jobs, and is Ready exactly when it can do it:
//!
//! - **acting** (it leads, or runs without leader election, or with `--shards`): its HookRun cache has synced (the
//!   watch's initial list is in the store), so every run it may act on is known to it;
//! - **standing by** (leader election on, another replica holds the Lease): its last Lease attempt was answered by
//!   the API server (it read the Lease, or raced for it), so it can take over when the leader goes. A standby that
//!   cannot reach the API server, or may not read the Lease, is not Ready: it could not take over.
//!
//! A standby that takes over is not Ready again until its cache has synced (usually a fraction of a second). From
//! the moment the process is told to stop it is not Ready.
//!
//! Why a standby is Ready: the chart runs two replicas under a PodDisruptionBudget with `minAvailable: 1`. If only
//! the leader were Ready, a drain of the leader's node could never evict it (the budget would have no room), and a
//! drain of the standby's node would be refused while the standby is the one not counted. With both Ready one of
//! them may go at a time, and the one left can do the job: lead, or take over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::runtime::{Health, Leading, LeaseError, LeaseStore};
use k8s_openapi::api::coordination::v1::Lease;

/// The replica's role as far as readiness is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Runs the controller (leading, no leader election, or sharding).
    Acting,
    /// Waits for the Lease while another replica leads.
    Standby,
}

/// Whether a replica in `role` is Ready, given whether its HookRun cache has synced (acting) and whether its last
/// Lease attempt was answered (standing by). Stopping beats everything.
pub fn is_ready(role: Role, cache_synced: bool, lease_answered: bool, stopping: bool) -> bool {
    !stopping
        && match role {
            Role::Acting => cache_synced,
            Role::Standby => lease_answered,
        }
}

/// The inputs of [`is_ready`] as they change, written through to the server's [`Health`] on each change.
#[derive(Clone, Debug)]
pub struct Readiness {
    health: Health,
    /// None without leader election: the replica always acts.
    leading: Option<Leading>,
    cache_synced: Arc<AtomicBool>,
    lease_answered: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
}

impl Readiness {
    /// `leading`: the elector's handle when leader election is on (None: the replica always acts).
    pub fn new(health: Health, leading: Option<Leading>) -> Self {
        Self { health, leading, cache_synced: Arc::default(), lease_answered: Arc::default(), stopping: Arc::default() }
    }

    /// Always acting (no leader election, sharding, tests).
    pub fn acting(health: Health) -> Self {
        Self::new(health, None)
    }

    fn role(&self) -> Role {
        match &self.leading {
            Some(leading) if !leading.get() => Role::Standby,
            _ => Role::Acting,
        }
    }

    /// Recomputes readiness from the current inputs.
    pub fn update(&self) {
        let ready = is_ready(
            self.role(),
            self.cache_synced.load(Ordering::SeqCst),
            self.lease_answered.load(Ordering::SeqCst),
            self.stopping.load(Ordering::SeqCst),
        );
        self.health.set_ready(ready);
    }

    /// The HookRun cache has synced (true) or the controller stopped (false).
    pub fn cache_synced(&self, synced: bool) {
        self.cache_synced.store(synced, Ordering::SeqCst);
        self.update();
    }

    /// Whether the last Lease request was answered by the API server.
    pub fn lease_answered(&self, answered: bool) {
        self.lease_answered.store(answered, Ordering::SeqCst);
        self.update();
    }

    /// The process is stopping: not Ready from now on.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.update();
    }

    /// What `/readyz` answers now.
    pub fn is_ready(&self) -> bool {
        self.health.is_ready()
    }

    /// Whether the HookRun cache has synced since the controller started.
    pub fn has_synced(&self) -> bool {
        self.cache_synced.load(Ordering::SeqCst)
    }
}

/// A [`LeaseStore`] that tells [`Readiness`] whether the API server answered each Lease request: any answer
/// (the Lease, its absence, a conflict) means the replica reaches the API and may compete; an error means it cannot.
#[derive(Clone)]
pub struct AnsweredLeases<S> {
    /// The store the requests go to.
    pub inner: S,
    /// Told after each request whether it was answered.
    pub readiness: Readiness,
}

impl<S> AnsweredLeases<S> {
    fn note<T>(&self, result: Result<T, LeaseError>) -> Result<T, LeaseError> {
        self.readiness.lease_answered(!matches!(result, Err(LeaseError::Api(_))));
        result
    }
}

impl<S: LeaseStore> LeaseStore for AnsweredLeases<S> {
    async fn get(&self, name: &str) -> Result<Option<Lease>, LeaseError> {
        self.note(self.inner.get(name).await)
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.note(self.inner.create(lease).await)
    }

    async fn replace(&self, name: &str, lease: &Lease) -> Result<Lease, LeaseError> {
        self.note(self.inner.replace(name, lease).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acting_replica_is_ready_once_its_cache_synced_and_a_standby_once_the_api_answers() {
        assert!(!is_ready(Role::Acting, false, true, false), "acting before the cache synced");
        assert!(is_ready(Role::Acting, true, false, false), "acting with a synced cache");
        assert!(!is_ready(Role::Standby, false, false, false), "a standby that has not reached the Lease");
        assert!(is_ready(Role::Standby, false, true, false), "a standby that can take over");
        assert!(!is_ready(Role::Acting, true, true, true), "stopping");
        assert!(!is_ready(Role::Standby, true, true, true), "stopping");
    }
}
