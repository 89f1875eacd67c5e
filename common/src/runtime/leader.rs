//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's rules:
//!
//! - a Lease held by someone else can only be taken once its record has not changed for
//!   `leaseDurationSeconds` *as observed on our own clock* (so clock skew between replicas does not matter);
//! - every write carries the resourceVersion it was based on (so two candidates cannot both win); a `409` means
//!   "re-read and decide again", never "give up";
//! - the renew deadline is measured from the moment the last *successful* write was **sent** (not from when its
//!   response arrived), and each attempt is bounded by the time left until that deadline.
//!
//! Why that is enough for zero overlap: a standby may take the lease only `leaseDuration` after it *observed* the
//! record change, and it cannot observe a write before the write was sent. The leader stops acting (its work
//! future is dropped and the process is told to stop) at `sent + renewDeadline`, which is earlier than
//! `sent + leaseDuration` by `leaseDuration - renewDeadline` (5 s with the defaults): the margin left for a write
//! that was already on the wire. `tests::a_partitioned_leader_stops_before_a_standby_starts` plays this in
//! virtual time.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

use super::{LeaderElectionFlags, Shutdown};

/// Why leading ended, or could not start.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The lease could not be renewed before the renew deadline: the replica stopped acting and must exit, so
    /// that it never acts beside a new leader.
    #[error("lost the lease {namespace}/{name}: {reason}")]
    Lost {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
        /// What the last renewals ran into.
        reason: String,
    },
    /// Durations or identity that cannot give client-go's guarantee (a renew deadline not shorter than the lease).
    #[error("invalid leader election settings: {0}")]
    Settings(String),
}

/// Why a Lease request did not go through.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The Lease changed since we read it (`409`): re-read and decide again.
    #[error("the lease was changed by someone else")]
    Conflict,
    /// Any other failure of the request (network, authorization, server error), as the client reported it.
    #[error("{0}")]
    Api(String),
}

/// The three Lease calls an elector makes. [`Api<Lease>`] implements it; tests use an in-memory store.
pub trait LeaseStore: Send + Sync {
    /// Reads the Lease; `None` when it does not exist yet.
    fn get(&self, name: &str) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send;
    /// Creates the Lease; [`LeaseError::Conflict`] when it already exists.
    fn create(&self, lease: &Lease) -> impl Future<Output = Result<Lease, LeaseError>> + Send;
    /// Replaces the Lease with a resourceVersion precondition; [`LeaseError::Conflict`] when it is stale.
    fn replace(&self, name: &str, lease: &Lease) -> impl Future<Output = Result<Lease, LeaseError>> + Send;
}

fn lease_error(e: kube::Error) -> LeaseError {
    match e {
        // 409 on create (AlreadyExists) and on replace (stale resourceVersion) both mean "re-read".
        kube::Error::Api(status) if status.code == 409 => LeaseError::Conflict,
        e => LeaseError::Api(e.to_string()),
    }
}

impl LeaseStore for Api<Lease> {
    async fn get(&self, name: &str) -> Result<Option<Lease>, LeaseError> {
        self.get_opt(name).await.map_err(lease_error)
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        Api::create(self, &PostParams::default(), lease).await.map_err(lease_error)
    }

    async fn replace(&self, name: &str, lease: &Lease) -> Result<Lease, LeaseError> {
        Api::replace(self, name, &PostParams::default(), lease).await.map_err(lease_error)
    }
}

/// Whether this replica currently leads; shared with metrics (`*_leader` gauges) and health endpoints.
#[derive(Clone, Debug, Default)]
pub struct Leading(Arc<AtomicBool>);

impl Leading {
    /// Whether this replica leads right now (false as soon as it stopped renewing, before the lease expires).
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn set(&self, leading: bool) {
        self.0.store(leading, Ordering::SeqCst);
    }
}

/// Who we are and which Lease we compete for.
#[derive(Clone, Debug)]
pub struct LeaderElection<S = Api<Lease>> {
    store: S,
    namespace: String,
    name: String,
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    leading: Leading,
}

/// What the last attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    /// We hold the lease now (acquired or renewed); the write that made it so was sent at this instant.
    Leading { sent: Instant },
    /// Someone else holds a valid lease.
    HeldBy(String),
    /// Our write raced with another one: re-read at once.
    Conflict,
}

impl LeaderElection<Api<Lease>> {
    /// Lease name defaults to `component`; namespace to the client's default namespace; identity to
    /// `$POD_NAME`, else the hostname.
    pub fn from_flags(client: Client, flags: &LeaderElectionFlags, component: &str) -> Result<Self, LeaderError> {
        let namespace = flags.leader_elect_namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
        let name = flags.leader_elect_lease_name.clone().unwrap_or_else(|| component.to_string());
        let identity = flags.leader_elect_identity.clone().unwrap_or_else(default_identity);
        Self::new(
            Api::namespaced(client, &namespace),
            &namespace,
            &name,
            &identity,
            flags.leader_elect_lease_duration,
            flags.leader_elect_renew_deadline,
            flags.leader_elect_retry_period,
        )
    }
}

impl<S: LeaseStore> LeaderElection<S> {
    /// An elector for the Lease `namespace/name` as `identity`, with client-go's three durations; refuses settings
    /// under which a replica could still act after its lease expired (renew deadline not shorter than the lease,
    /// retry period not shorter than the renew deadline) and an empty identity.
    pub fn new(
        store: S,
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
            store,
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration,
            renew_deadline,
            retry_period,
            leading: Leading::default(),
        })
    }

    /// The holder identity written into the Lease (`$POD_NAME` or the hostname unless set).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The same elector talking to the API through `wrap(store)` (e.g. a store that reports whether each Lease
    /// request was answered, for a standby's readiness).
    pub fn map_store<T: LeaseStore>(self, wrap: impl FnOnce(S) -> T) -> LeaderElection<T> {
        LeaderElection {
            store: wrap(self.store),
            namespace: self.namespace,
            name: self.name,
            identity: self.identity,
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            leading: self.leading,
        }
    }

    /// A handle that says whether this replica leads right now.
    pub fn leading(&self) -> Leading {
        self.leading.clone()
    }

    /// Waits for the lease, runs `work` while holding it, and releases it when `work` finishes.
    ///
    /// Returns `Ok(None)` when `shutdown` fired before the lease was acquired, `Ok(Some(output))` when `work`
    /// finished, and [`LeaderError::Lost`] when the lease could not be renewed in time (the work is dropped at
    /// the renew deadline, before the lease can expire for anyone else, and `shutdown` is triggered so the rest
    /// of the process stops too).
    pub async fn run_while_leading<F, Fut, T>(&self, shutdown: &Shutdown, work: F) -> Result<Option<T>, LeaderError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let mut observer = Observer::default();
        tracing::info!(lease = %self.name, namespace = %self.namespace, identity = %self.identity, "waiting for the lease");
        let sent = loop {
            if shutdown.is_triggered() {
                return Ok(None);
            }
            // While waiting, an attempt may take up to a renew deadline (nothing is at stake yet).
            let deadline = Instant::now() + self.renew_deadline;
            match self.attempt(&mut observer, deadline).await {
                Ok(Attempt::Leading { sent }) => break sent,
                Ok(Attempt::Conflict) => tracing::debug!("lease write conflict; re-reading after the retry period"),
                Ok(Attempt::HeldBy(holder)) => tracing::debug!(%holder, "lease held by another replica"),
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.retry_period) => {}
                _ = shutdown.wait() => return Ok(None),
            }
        };
        tracing::info!(lease = %self.name, identity = %self.identity, "acquired the lease, leading");
        self.leading.set(true);
        let outcome = tokio::select! {
            output = work() => Ok(Some(output)),
            lost = self.keep_renewing(&mut observer, sent) => Err(lost),
        };
        self.leading.set(false);
        match &outcome {
            Ok(_) => self.release().await,
            Err(e) => {
                tracing::error!(error = %e, "stopping: no longer the leader");
                shutdown.trigger();
            }
        }
        outcome
    }

    /// Renews every retry period; returns only when leadership is lost, at the latest at the renew deadline
    /// counted from the send time of the last successful renew.
    async fn keep_renewing(&self, observer: &mut Observer, mut last_sent: Instant) -> LeaderError {
        let mut last_error: Option<LeaseError> = None;
        loop {
            let deadline = last_sent + self.renew_deadline;
            tokio::time::sleep_until((Instant::now() + self.retry_period).min(deadline)).await;
            // Conflicts are retried at once (the Lease is re-read); anything else waits a retry period.
            loop {
                if Instant::now() >= deadline {
                    let why = last_error.map(|e| format!(" (last error: {e})")).unwrap_or_default();
                    return self.lost(format!("could not renew within {:?}{why}", self.renew_deadline));
                }
                match self.attempt(observer, deadline).await {
                    Ok(Attempt::Leading { sent }) => {
                        last_sent = sent;
                        last_error = None;
                        break;
                    }
                    Ok(Attempt::Conflict) => {
                        // Re-read soon (a conflict means the record moved), but never spin on a server that
                        // answers every write with 409.
                        tokio::time::sleep_until((Instant::now() + self.retry_period / 10).min(deadline)).await;
                        continue;
                    }
                    Ok(Attempt::HeldBy(holder)) => return self.lost(format!("the lease is now held by {holder}")),
                    Err(e) => {
                        tracing::warn!(error = %e, "renewing the lease failed, retrying");
                        last_error = Some(e);
                        break;
                    }
                }
            }
        }
    }

    fn lost(&self, reason: String) -> LeaderError {
        LeaderError::Lost { namespace: self.namespace.clone(), name: self.name.clone(), reason }
    }

    /// One get-then-write round, abandoned at `deadline` so a hung API call cannot outlive the lease.
    async fn attempt(&self, observer: &mut Observer, deadline: Instant) -> Result<Attempt, LeaseError> {
        match tokio::time::timeout_at(deadline, self.attempt_unbounded(observer)).await {
            Ok(result) => result,
            Err(_) => Err(LeaseError::Api("lease request timed out at the renew deadline".into())),
        }
    }

    async fn attempt_unbounded(&self, observer: &mut Observer) -> Result<Attempt, LeaseError> {
        let now = Timestamp::now();
        let duration_secs = i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let Some(current) = self.store.get(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: next_spec(None, &self.identity, now, duration_secs),
            };
            let sent = Instant::now();
            return match self.store.create(&lease).await {
                Ok(written) => {
                    observer.observe(&written.spec.unwrap_or_default(), Instant::now(), self.lease_duration);
                    Ok(Attempt::Leading { sent })
                }
                // Another candidate created it between our get and create: read it and decide again.
                Err(LeaseError::Conflict) => Ok(Attempt::Conflict),
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
                let sent = Instant::now();
                match self.store.replace(&self.name, &lease).await {
                    Ok(written) => {
                        observer.observe(&written.spec.unwrap_or_default(), Instant::now(), self.lease_duration);
                        Ok(Attempt::Leading { sent })
                    }
                    Err(LeaseError::Conflict) => Ok(Attempt::Conflict),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// The lease duration, renew deadline and retry period this elector was built with.
    pub fn timings(&self) -> (Duration, Duration, Duration) {
        (self.lease_duration, self.renew_deadline, self.retry_period)
    }

    /// One get-then-write round for callers that hold several leases at once (e.g. one per shard) and decide
    /// themselves what to do on loss, abandoned at `deadline`. Same rules as [`LeaderElection::run_while_leading`]:
    /// an expired lease is judged on our own clock by `observer`, every write is resourceVersion-preconditioned.
    /// [`Held::Yes`] carries the instant the successful write was **sent**: the holder must stop acting at
    /// `sent + renew_deadline` unless a later attempt succeeds, which is before anyone else may take the lease.
    pub async fn try_hold(&self, observer: &mut LeaseObserver, deadline: Instant) -> Result<Held, LeaseError> {
        Ok(match self.attempt(&mut observer.0, deadline).await? {
            Attempt::Leading { sent } => Held::Yes { sent },
            Attempt::HeldBy(holder) => Held::ByOther(holder),
            Attempt::Conflict => Held::Conflict,
        })
    }

    /// Gives the lease up if we hold it (a successor need not wait for it to expire). Call only after acting on
    /// it has stopped.
    pub async fn give_up(&self) {
        self.release().await;
    }

    /// Gives the lease up so a successor does not wait a full lease duration (client-go's ReleaseOnCancel).
    async fn release(&self) {
        let result = async {
            let Some(mut lease) = self.store.get(&self.name).await? else { return Ok(()) };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            self.store.replace(&self.name, &lease).await.map(|_| ())
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

/// The outcome of [`LeaderElection::try_hold`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// We hold the lease; the write that made it so was sent at `sent`.
    Yes {
        /// When the winning write was sent: the lease counts from then, never from its answer.
        sent: Instant,
    },
    /// Someone else holds a valid lease.
    ByOther(String),
    /// Our write raced with another one: re-read and decide again.
    Conflict,
}

/// What [`LeaderElection::try_hold`] remembers between attempts on one lease: when its record last changed, on
/// our monotonic clock (so a holder's lease expires by our clock, never by comparing clocks).
#[derive(Debug, Default)]
pub struct LeaseObserver(Observer);

impl LeaseObserver {
    /// Records a Lease record read elsewhere (e.g. from a list), so its expiry is judged from when it was first
    /// seen in this version, not from the next [`LeaderElection::try_hold`].
    pub fn note(&mut self, spec: &LeaseSpec, default_duration: Duration) {
        self.0.observe(spec, Instant::now(), default_duration);
    }
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

    mod store {
        //! An in-memory Lease with resourceVersion preconditions, shared by several electors, each of which can
        //! be cut off from it (its requests fail at once, or hang).

        use std::sync::{Arc, Mutex};

        use super::*;

        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub enum Link {
            #[default]
            Up,
            /// Every request fails fast with a 500-like error.
            Failing,
            /// Every request hangs (a black-holed connection).
            Hanging,
        }

        #[derive(Default)]
        pub struct Server {
            lease: Option<Lease>,
            version: u64,
        }

        #[derive(Clone)]
        pub struct Conn {
            pub server: Arc<Mutex<Server>>,
            pub link: Arc<Mutex<Link>>,
            /// How many of the next replaces race with someone else's write (and get a 409).
            pub conflicts: Arc<Mutex<u32>>,
            /// One-way delay: a write lands this long after it is sent, and the answer takes as long again.
            pub delay: Duration,
        }

        impl Conn {
            pub fn new(server: &Arc<Mutex<Server>>, delay: Duration) -> Self {
                Self { server: server.clone(), link: Arc::default(), conflicts: Arc::default(), delay }
            }

            pub fn set(&self, link: Link) {
                *self.link.lock().unwrap() = link;
            }

            async fn reach(&self) -> Result<(), LeaseError> {
                let link = *self.link.lock().unwrap();
                match link {
                    Link::Up => {
                        tokio::time::sleep(self.delay).await;
                        Ok(())
                    }
                    Link::Failing => Err(LeaseError::Api("injected 500".into())),
                    Link::Hanging => std::future::pending().await,
                }
            }

            async fn answer<T>(&self, value: T) -> T {
                tokio::time::sleep(self.delay).await;
                value
            }
        }

        impl Server {
            /// Stores `lease` under the next resourceVersion and returns what was stored.
            fn store(&mut self, lease: &Lease) -> Lease {
                self.version += 1;
                let mut stored = lease.clone();
                stored.metadata.resource_version = Some(self.version.to_string());
                self.lease = Some(stored.clone());
                stored
            }
        }

        /// A write that bumps the resourceVersion without changing the spec (`kubectl annotate lease …`).
        fn touch(server: &mut Server) {
            server.version += 1;
            let version = server.version.to_string();
            if let Some(lease) = server.lease.as_mut() {
                lease.metadata.resource_version = Some(version);
            }
        }

        impl LeaseStore for Conn {
            async fn get(&self, _name: &str) -> Result<Option<Lease>, LeaseError> {
                self.reach().await?;
                let lease = self.server.lock().unwrap().lease.clone();
                Ok(self.answer(lease).await)
            }

            async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
                self.reach().await?;
                let result = {
                    let mut server = self.server.lock().unwrap();
                    if server.lease.is_some() { Err(LeaseError::Conflict) } else { Ok(server.store(lease)) }
                };
                self.answer(result).await
            }

            async fn replace(&self, _name: &str, lease: &Lease) -> Result<Lease, LeaseError> {
                self.reach().await?;
                let result = {
                    let mut server = self.server.lock().unwrap();
                    let mut conflicts = self.conflicts.lock().unwrap();
                    if *conflicts > 0 {
                        *conflicts -= 1;
                        touch(&mut server);
                    }
                    let current = server.lease.as_ref().and_then(|l| l.metadata.resource_version.clone());
                    if current != lease.metadata.resource_version {
                        Err(LeaseError::Conflict)
                    } else {
                        Ok(server.store(lease))
                    }
                };
                self.answer(result).await
            }
        }
    }

    use std::sync::{Arc, Mutex};

    use store::{Conn, Link, Server};

    const LEASE: Duration = Duration::from_secs(15);
    const RENEW: Duration = Duration::from_secs(10);
    const RETRY: Duration = Duration::from_secs(2);

    type Log = Arc<Mutex<Vec<(&'static str, Instant)>>>;

    fn elector(conn: &Conn, identity: &str) -> LeaderElection<Conn> {
        LeaderElection::new(conn.clone(), "default", "op", identity, LEASE, RENEW, RETRY).unwrap()
    }

    /// A leader's work: act every 100 ms, recording when.
    async fn act_forever(who: &'static str, log: Log) {
        loop {
            log.lock().unwrap().push((who, Instant::now()));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts `a` alone, lets it lead, then starts `b` and cuts `a` off with `links` (each applied in turn,
    /// after its delay). Returns the last action of `a`, the first of `b`, and how `a`'s election ended.
    async fn partition(delay: Duration, links: &[(Duration, Link)]) -> (Instant, Instant, Result<(), String>) {
        let server = Arc::new(Mutex::new(Server::default()));
        let (conn_a, conn_b) = (Conn::new(&server, delay), Conn::new(&server, delay));
        let log: Log = Arc::default();
        let (a, b) = (elector(&conn_a, "a"), elector(&conn_b, "b"));
        let (shutdown_a, shutdown_b) = (Shutdown::default(), Shutdown::default());
        let log_a = log.clone();
        let run_a = tokio::spawn(async move {
            a.run_while_leading(&shutdown_a, || act_forever("a", log_a)).await.map(|_| ()).map_err(|e| e.to_string())
        });
        // A get and a create, each a round trip.
        tokio::time::sleep(Duration::from_secs(5) + delay * 4).await;
        assert!(log.lock().unwrap().iter().any(|(who, _)| *who == "a"), "a leads first");
        let log_b = log.clone();
        let run_b = tokio::spawn(async move { b.run_while_leading(&shutdown_b, || act_forever("b", log_b)).await });
        for (after, link) in links {
            tokio::time::sleep(*after).await;
            conn_a.set(*link);
        }
        let outcome_a = run_a.await.unwrap();
        // Let b act for a while, then stop it.
        tokio::time::sleep(Duration::from_secs(30)).await;
        run_b.abort();
        let log = log.lock().unwrap();
        let last_a = log.iter().filter(|(who, _)| *who == "a").map(|(_, at)| *at).max().unwrap();
        let first_b = log.iter().filter(|(who, _)| *who == "b").map(|(_, at)| *at).min().expect("b took over");
        (last_a, first_b, outcome_a)
    }

    #[tokio::test(start_paused = true)]
    async fn a_partitioned_leader_stops_before_a_standby_starts() {
        // Fast failures for most of the renew deadline, then a request that hangs: the case where a leader that
        // gives every attempt the full deadline kept acting for ~20 s after its last renew.
        for delay in [Duration::ZERO, Duration::from_millis(300), Duration::from_secs(2)] {
            let links = [(Duration::from_millis(100), Link::Failing), (Duration::from_secs(7), Link::Hanging)];
            let (last_a, first_b, outcome) = partition(delay, &links).await;
            assert!(outcome.as_ref().is_err_and(|e| e.contains("could not renew")), "{outcome:?}");
            assert!(last_a < first_b, "delay {delay:?}: a acted until {last_a:?}, b started at {first_b:?}");
            // The margin is the lease duration minus the renew deadline, less the request delays.
            let gap = first_b - last_a;
            assert!(gap >= LEASE - RENEW - delay * 2, "delay {delay:?}: gap {gap:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_renew_is_abandoned_at_the_deadline_from_its_send_time() {
        let (last_a, first_b, outcome) = partition(Duration::ZERO, &[(Duration::from_millis(50), Link::Hanging)]).await;
        assert!(outcome.is_err());
        assert!(last_a < first_b);
        assert!(first_b - last_a >= LEASE - RENEW, "gap {:?}", first_b - last_a);
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_on_renew_rereads_instead_of_giving_up() {
        let server = Arc::new(Mutex::new(Server::default()));
        let conn = Conn::new(&server, Duration::from_millis(10));
        let a = elector(&conn, "a");
        let shutdown = Shutdown::default();
        let leading = a.leading();
        let run = tokio::spawn(async move {
            a.run_while_leading(&shutdown, || tokio::time::sleep(Duration::from_secs(60)))
                .await
                .map_err(|e| e.to_string())
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(leading.get());
        // Someone else writes the Lease (an annotation) between our read and our write, five times in a row.
        *conn.conflicts.lock().unwrap() = 5;
        tokio::time::sleep(RETRY * 4).await;
        assert_eq!(*conn.conflicts.lock().unwrap(), 0, "the renews met the conflicts");
        assert!(leading.get(), "still leading after conflicting writes");
        let outcome = run.await.unwrap();
        assert!(matches!(outcome, Ok(Some(()))), "{outcome:?}");
        assert!(!leading.get());
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
