//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's rules: a Lease held by someone else
//! can only be taken once its record has not changed for `leaseDurationSeconds` *as observed on our own
//! clock* (so clock skew between replicas does not matter), every write carries the resourceVersion it was
//! based on (so two candidates cannot both win), and a leader that cannot renew within the renew deadline
//! stops leading: the work future is dropped and the caller is told, so the process exits instead of acting
//! without the lease.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

use super::{LeaderElectionFlags, Shutdown};

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lost the lease {namespace}/{name}: {reason}")]
    Lost { namespace: String, name: String, reason: String },
    #[error("invalid leader election settings: {0}")]
    Settings(String),
}

/// Who we are and which Lease we compete for.
#[derive(Clone, Debug)]
pub struct LeaderElection {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

/// What the last attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    /// We hold the lease now (acquired or renewed).
    Leading,
    /// Someone else holds a valid lease.
    HeldBy(String),
}

impl LeaderElection {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, LeaderError> {
        if renew_deadline >= lease_duration {
            return Err(LeaderError::Settings(format!(
                "the renew deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease_duration:?})"
            )));
        }
        if retry_period.is_zero() || retry_period >= renew_deadline {
            return Err(LeaderError::Settings(format!(
                "the retry period ({retry_period:?}) must be positive and shorter than the renew deadline \
                 ({renew_deadline:?})"
            )));
        }
        if identity.is_empty() {
            return Err(LeaderError::Settings("the identity must not be empty".into()));
        }
        Ok(Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }

    /// Lease name defaults to `component`; namespace to the client's default namespace; identity to
    /// `$POD_NAME`, else the hostname.
    pub fn from_flags(client: Client, flags: &LeaderElectionFlags, component: &str) -> Result<Self, LeaderError> {
        let namespace = flags.leader_elect_namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
        let name = flags.leader_elect_lease_name.clone().unwrap_or_else(|| component.to_string());
        let identity = flags.leader_elect_identity.clone().unwrap_or_else(default_identity);
        Self::new(
            client,
            &namespace,
            &name,
            &identity,
            flags.leader_elect_lease_duration,
            flags.leader_elect_renew_deadline,
            flags.leader_elect_retry_period,
        )
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits for the lease, runs `work` while holding it, and releases it when `work` finishes.
    ///
    /// Returns `Ok(None)` when `shutdown` fired before the lease was acquired, `Ok(Some(output))` when `work`
    /// finished, and [`LeaderError::Lost`] when the lease could not be renewed (the work is dropped first, and
    /// `shutdown` is triggered so the rest of the process stops too).
    pub async fn run_while_leading<F, Fut, T>(&self, shutdown: &Shutdown, work: F) -> Result<Option<T>, LeaderError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let mut observer = Observer::default();
        tracing::info!(lease = %self.name, namespace = %self.namespace, identity = %self.identity, "waiting for the lease");
        loop {
            if shutdown.is_triggered() {
                return Ok(None);
            }
            match self.attempt(&mut observer).await {
                Ok(Attempt::Leading) => break,
                Ok(Attempt::HeldBy(holder)) => tracing::debug!(%holder, "lease held by another replica"),
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.retry_period) => {}
                _ = shutdown.wait() => return Ok(None),
            }
        }
        tracing::info!(lease = %self.name, identity = %self.identity, "acquired the lease, leading");
        let outcome = tokio::select! {
            output = work() => Ok(Some(output)),
            lost = self.keep_renewing(&mut observer) => Err(lost),
        };
        match &outcome {
            Ok(_) => self.release().await,
            Err(e) => {
                tracing::error!(error = %e, "stopping: no longer the leader");
                shutdown.trigger();
            }
        }
        outcome
    }

    /// Renews every retry period; returns only when leadership is lost.
    async fn keep_renewing(&self, observer: &mut Observer) -> LeaderError {
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(self.retry_period).await;
            match self.attempt(observer).await {
                Ok(Attempt::Leading) => last_renewed = Instant::now(),
                Ok(Attempt::HeldBy(holder)) => return self.lost(format!("the lease is now held by {holder}")),
                Err(e) => {
                    if last_renewed.elapsed() >= self.renew_deadline {
                        return self.lost(format!("could not renew for {:?}: {e}", self.renew_deadline));
                    }
                    tracing::warn!(error = %e, "renewing the lease failed, retrying");
                }
            }
        }
    }

    fn lost(&self, reason: String) -> LeaderError {
        LeaderError::Lost { namespace: self.namespace.clone(), name: self.name.clone(), reason }
    }

    /// One get-then-write round, bounded by the renew deadline so a hung API call cannot outlive the lease.
    async fn attempt(&self, observer: &mut Observer) -> Result<Attempt, kube::Error> {
        match tokio::time::timeout(self.renew_deadline, self.attempt_unbounded(observer)).await {
            Ok(result) => result,
            Err(_) => {
                Err(kube::Error::Service(format!("lease request timed out after {:?}", self.renew_deadline).into()))
            }
        }
    }

    async fn attempt_unbounded(&self, observer: &mut Observer) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let duration_secs = i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: next_spec(None, &self.identity, now, duration_secs),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                // Another candidate created it between our get and create; it is theirs for now.
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::HeldBy("another candidate".into())),
                Err(e) => Err(e),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let expired = observer.observe(&spec, Instant::now(), self.lease_duration);
        match decide(&spec, &self.identity, expired) {
            Decision::Wait(holder) => Ok(Attempt::HeldBy(holder)),
            Decision::Take => {
                let mut lease = current;
                lease.spec = next_spec(Some(&spec), &self.identity, now, duration_secs);
                match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                    Ok(written) => {
                        observer.observe(&written.spec.unwrap_or_default(), Instant::now(), self.lease_duration);
                        Ok(Attempt::Leading)
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        Ok(Attempt::HeldBy("another candidate (write conflict)".into()))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Gives the lease up so a successor does not wait a full lease duration (client-go's ReleaseOnCancel).
    async fn release(&self) {
        let result = async {
            let Some(mut lease) = self.api.get_opt(&self.name).await? else { return Ok(()) };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            self.api.replace(&self.name, &PostParams::default(), &lease).await.map(|_| ())
        };
        match tokio::time::timeout(self.renew_deadline, result).await {
            Ok(Ok(())) => tracing::info!(lease = %self.name, "released the lease"),
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the lease failed; it will expire on its own"),
            Err(_) => tracing::warn!("releasing the lease timed out; it will expire on its own"),
        }
    }
}

fn default_identity() -> String {
    if let Ok(name) = std::env::var("POD_NAME")
        && !name.is_empty()
    {
        return name;
    }
    if let Ok(name) = std::env::var("HOSTNAME")
        && !name.is_empty()
    {
        return name;
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("pid-{}", std::process::id()))
}

#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Take,
    Wait(String),
}

/// Free, ours, or expired: take (or renew) it. Otherwise wait for the holder.
fn decide(spec: &LeaseSpec, identity: &str, expired: bool) -> Decision {
    match spec.holder_identity.as_deref() {
        None | Some("") => Decision::Take,
        Some(holder) if holder == identity => Decision::Take,
        Some(_) if expired => Decision::Take,
        Some(holder) => Decision::Wait(holder.to_string()),
    }
}

/// The spec we write when taking or renewing.
fn next_spec(previous: Option<&LeaseSpec>, identity: &str, now: Timestamp, duration_secs: i32) -> Option<LeaseSpec> {
    let previous = previous.cloned().unwrap_or_default();
    let renewing = previous.holder_identity.as_deref() == Some(identity);
    Some(LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(duration_secs),
        acquire_time: if renewing { previous.acquire_time.clone() } else { Some(MicroTime(now)) },
        renew_time: Some(MicroTime(now)),
        lease_transitions: if renewing || previous.holder_identity.is_none() && previous.lease_transitions.is_none() {
            previous.lease_transitions.or(Some(0))
        } else {
            Some(previous.lease_transitions.unwrap_or(0) + 1)
        },
        ..previous
    })
}

/// Remembers when the Lease record last changed, on our monotonic clock.
#[derive(Debug, Default)]
struct Observer {
    last: Option<(LeaseSpec, Instant)>,
}

impl Observer {
    /// Records `spec` and says whether the holder has let it go stale for longer than its lease duration.
    fn observe(&mut self, spec: &LeaseSpec, now: Instant, default_duration: Duration) -> bool {
        let changed_at = match &self.last {
            Some((seen, at)) if seen == spec => *at,
            _ => now,
        };
        self.last = Some((spec.clone(), changed_at));
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(default_duration);
        now.duration_since(changed_at) >= duration
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn decides_like_client_go() {
        assert_eq!(decide(&LeaseSpec::default(), "a", false), Decision::Take);
        assert_eq!(decide(&held_by("a"), "a", false), Decision::Take);
        assert_eq!(decide(&held_by("b"), "a", false), Decision::Wait("b".into()));
        assert_eq!(decide(&held_by("b"), "a", true), Decision::Take);
        let released = LeaseSpec { holder_identity: Some(String::new()), ..held_by("x") };
        assert_eq!(decide(&released, "a", false), Decision::Take);
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let now = Timestamp::UNIX_EPOCH + std::time::Duration::from_secs(100);
        let taken = next_spec(Some(&held_by("b")), "a", now, 15).unwrap();
        assert_eq!(taken.holder_identity.as_deref(), Some("a"));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        let later = now + std::time::Duration::from_secs(2);
        let renewed = next_spec(Some(&taken), "a", later, 15).unwrap();
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, Some(MicroTime(now)));
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));
        let fresh = next_spec(None, "a", now, 15).unwrap();
        assert_eq!(fresh.lease_transitions, Some(0));
    }

    #[test]
    fn expiry_is_measured_on_our_clock_from_the_last_change() {
        let mut observer = Observer::default();
        let start = Instant::now();
        let spec = held_by("b");
        assert!(!observer.observe(&spec, start, Duration::from_secs(15)));
        assert!(!observer.observe(&spec, start + Duration::from_secs(14), Duration::from_secs(15)));
        // The holder renewed: the clock restarts even though our observation is late.
        let renewed = LeaseSpec { renew_time: Some(MicroTime(Timestamp::now())), ..spec.clone() };
        assert!(!observer.observe(&renewed, start + Duration::from_secs(16), Duration::from_secs(15)));
        assert!(observer.observe(&renewed, start + Duration::from_secs(31), Duration::from_secs(15)));
    }
}
