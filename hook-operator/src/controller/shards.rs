//! Automatic sharding: N replicas split the HookRuns between them.
//!
//! A run belongs to shard `fnv1a(uid) % S` (`--shards S`). Each shard has a Lease `<base>-shard-<i>`, taken and
//! renewed with the leader-election rules of [`common::runtime::leader`] (expiry judged on our own clock,
//! resourceVersion-preconditioned writes). Each replica also renews a membership Lease `<base>-member-<identity>`;
//! the live members (renewed within a lease duration) give the fair share `ceil(S / members)`. A replica takes free
//! or expired shards up to its fair share and gives back (releases) the ones above it, so a new replica gets its
//! share within a few retry periods and a dead replica's shards are taken over once their leases expire (within
//! one lease duration of its last renewal, plus a retry period).
//!
//! **Fencing** (no measurement taken twice for the same slot): a replica measures a shard's runs only while
//! `now < sent + renewDeadline`, where `sent` is when its last successful write of that shard's Lease was sent.
//! Another replica can take the Lease only a full lease duration after it *observed* that write, so the holder
//! stops `leaseDuration - renewDeadline` before anyone else may start. The check is made by the dispatcher right
//! before each measurement starts and by every reconcile before it writes; when a shard is lost or given up, its
//! in-flight measurements are cancelled and its unwritten results dropped (the new owner takes them again).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::runtime::leader::{Held, LeaseObserver};
use common::runtime::{LeaderElection, Shutdown};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

/// Label on every Lease of one shard group (value: the base name), so members can be listed.
pub const GROUP_LABEL: &str = "hook-operator.tkex.tencent.com/shard-group";

/// The shard a run belongs to: FNV-1a of its uid (stable across processes and versions).
pub fn shard_of(uid: &str, shards: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in uid.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    u32::try_from(hash % u64::from(shards.max(1))).unwrap_or(0)
}

/// The shards this replica may act on right now, each until its fencing deadline. Shared by the dispatcher (before
/// every measurement), the reconciler (before every write) and the collector.
#[derive(Debug)]
pub struct Ownership {
    count: u32,
    /// Notified when a shard is acquired or dropped (the deadlines themselves pass silently).
    changed: tokio::sync::Notify,
    epoch: Instant,
    /// Per shard: nanoseconds after `epoch` until which we may act (0: not ours).
    until: Vec<AtomicU64>,
}

impl Ownership {
    /// `count` shards (at least one), none of them held yet.
    pub fn new(count: u32) -> Arc<Self> {
        Arc::new(Self {
            count: count.max(1),
            changed: tokio::sync::Notify::new(),
            epoch: Instant::now(),
            until: (0..count.max(1)).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// How many shards the runs are spread over.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The shard of the run with this UID (a stable hash, the same in every replica).
    pub fn shard_of(&self, uid: &str) -> u32 {
        shard_of(uid, self.count)
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether we may act on shard `shard` now.
    pub fn holds(&self, shard: u32) -> bool {
        let now = self.nanos(Instant::now());
        self.until.get(shard as usize).is_some_and(|until| now < until.load(Ordering::SeqCst))
    }

    /// Whether we may act on the run with this uid now.
    pub fn owns(&self, uid: &str) -> bool {
        self.holds(self.shard_of(uid))
    }

    /// We may act on `shard` until `deadline` (a renewal moves it forward).
    pub fn hold_until(&self, shard: u32, deadline: Instant) {
        let newly = !self.holds(shard);
        if let Some(until) = self.until.get(shard as usize) {
            until.store(self.nanos(deadline).max(1), Ordering::SeqCst);
        }
        if newly {
            self.changed.notify_waiters();
        }
    }

    /// Stop acting on `shard` now.
    pub fn drop_shard(&self, shard: u32) {
        if let Some(until) = self.until.get(shard as usize) {
            until.store(0, Ordering::SeqCst);
        }
        self.changed.notify_waiters();
    }

    /// The earliest fencing deadline of the shards held now.
    pub fn next_deadline(&self) -> Option<Instant> {
        let now = self.nanos(Instant::now());
        self.until
            .iter()
            .map(|u| u.load(Ordering::SeqCst))
            .filter(|&u| u > now)
            .min()
            .map(|u| self.epoch + Duration::from_nanos(u))
    }

    /// Waits until a shard is acquired or dropped, or the earliest deadline passes (at most a second, so a
    /// notification sent between two waits is picked up soon).
    pub async fn changed(&self) {
        let notified = self.changed.notified();
        let second = Instant::now() + Duration::from_secs(1);
        match self.next_deadline().map(|d| d.min(second)).or(Some(second)) {
            Some(at) => {
                tokio::select! {
                    _ = notified => {}
                    _ = tokio::time::sleep_until(at) => {}
                }
            }
            None => notified.await,
        }
    }

    /// The shards held now.
    pub fn held(&self) -> Vec<u32> {
        (0..self.count).filter(|s| self.holds(*s)).collect()
    }
}

/// Where the shard Leases live and how they are timed.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The namespace of the shard Leases (`--leader-elect-namespace`, else the client's default).
    pub namespace: String,
    /// `<base>-shard-<i>` and `<base>-member-<identity>`.
    pub base: String,
    /// This replica's identity, written as holder of the Leases it takes.
    pub identity: String,
    /// How long a shard Lease is valid without renewal (`--leader-elect-lease-duration`).
    pub lease_duration: Duration,
    /// A holder stops acting on a shard it could not renew within this, before the Lease can expire.
    pub renew_deadline: Duration,
    /// Time between attempts to take or renew a Lease.
    pub retry_period: Duration,
}

/// The fair share of `shards` among `members` live replicas.
pub fn fair_share(shards: u32, members: usize) -> u32 {
    let members = u32::try_from(members.max(1)).unwrap_or(u32::MAX);
    shards.div_ceil(members)
}

struct Shard {
    elector: LeaderElection<Api<Lease>>,
    observer: LeaseObserver,
    /// When our last successful write of this shard's Lease was sent (Some while we hold it).
    sent: Option<Instant>,
}

/// Runs the shard manager until `shutdown`: keeps this replica's membership, holds its fair share of shards,
/// and fences each at its renew deadline ([`Ownership`]). Releases every shard on shutdown.
pub async fn manage(
    client: Client,
    settings: Settings,
    ownership: Arc<Ownership>,
    shutdown: Shutdown,
) -> Result<(), String> {
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let mut shards = electors(&api, &settings, ownership.count())?;
    let member = format!("{}-member-{}", settings.base, sanitize(&settings.identity));
    tracing::info!(shards = shards.len(), identity = %settings.identity, namespace = %settings.namespace, "shard manager starting");
    loop {
        let tick = Instant::now() + settings.retry_period;
        let members = observe(&api, &settings, &member, &mut shards).await;
        let fair = fair_share(ownership.count(), members.max(1));
        renew(&mut shards, &settings, &ownership).await;
        let mut held = held(&shards);
        give_back(&mut shards, &mut held, (fair, members), &ownership).await;
        take(&mut shards, &mut held, (fair, members), &settings, &ownership, &shutdown).await;
        if !sleep_until_next(&shards, &settings, tick, &shutdown).await {
            break;
        }
        fence_expired(&mut shards, &settings, &ownership);
    }
    for (i, shard) in shards.iter_mut().enumerate() {
        if shard.sent.is_some() {
            lose(shard, u32::try_from(i).unwrap_or(u32::MAX), &ownership);
            shard.elector.give_up().await;
        }
    }
    let _ = api.delete(&member, &Default::default()).await;
    Ok(())
}

/// One elector per shard, holding nothing yet.
fn electors(api: &Api<Lease>, settings: &Settings, count: u32) -> Result<Vec<Shard>, String> {
    let mut shards = Vec::new();
    for i in 0..count {
        let elector = LeaderElection::new(
            api.clone(),
            &settings.namespace,
            &format!("{}-shard-{i}", settings.base),
            &settings.identity,
            settings.lease_duration,
            settings.renew_deadline,
            settings.retry_period,
        )
        .map_err(|e| e.to_string())?;
        shards.push(Shard { elector, observer: LeaseObserver::default(), sent: None });
    }
    Ok(shards)
}

/// Renews our membership and reads the group: returns the live members, and notes every shard's Lease record.
async fn observe(api: &Api<Lease>, settings: &Settings, member: &str, shards: &mut [Shard]) -> usize {
    if let Err(e) = renew_membership(api, settings, member).await {
        tracing::warn!(error = %e, "renewing the shard membership Lease failed");
    }
    let (members, seen) = read_group(api, settings).await;
    // Watch every shard's record on each tick, so an abandoned shard's expiry counts from when its holder
    // stopped renewing, not from when we first wanted it.
    for (i, shard) in shards.iter_mut().enumerate() {
        if let Some(spec) = seen.get(&format!("{}-shard-{i}", settings.base)) {
            shard.observer.note(spec, settings.lease_duration);
        }
    }
    members
}

/// Renews what we hold; a shard whose deadline passed or that someone else took is lost.
async fn renew(shards: &mut [Shard], settings: &Settings, ownership: &Ownership) {
    for (i, shard) in shards.iter_mut().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let Some(sent) = shard.sent else { continue };
        let deadline = sent + settings.renew_deadline;
        let outcome = if Instant::now() < deadline {
            shard.elector.try_hold(&mut shard.observer, deadline).await
        } else {
            Err(common::runtime::LeaseError::Api("renew deadline passed".into()))
        };
        match outcome {
            Ok(Held::Yes { sent }) => {
                shard.sent = Some(sent);
                ownership.hold_until(i, sent + settings.renew_deadline);
            }
            Ok(Held::Conflict) => {}
            Ok(Held::ByOther(holder)) => {
                tracing::warn!(shard = i, %holder, "lost a shard to another replica");
                lose(shard, i, ownership);
            }
            Err(e) => {
                if Instant::now() >= deadline {
                    tracing::warn!(shard = i, error = %e, "could not renew a shard's Lease in time; stopped on it");
                    lose(shard, i, ownership);
                } else {
                    tracing::debug!(shard = i, error = %e, "renewing a shard's Lease failed; retrying");
                }
            }
        }
    }
}

/// The shards we hold.
fn held(shards: &[Shard]) -> BTreeSet<u32> {
    shards
        .iter()
        .enumerate()
        .filter(|(_, s)| s.sent.is_some())
        .map(|(i, _)| u32::try_from(i).unwrap_or(u32::MAX))
        .collect()
}

/// Gives back what is above the fair share (the highest shards), fenced first.
async fn give_back(
    shards: &mut [Shard],
    held: &mut BTreeSet<u32>,
    (fair, members): (u32, usize),
    ownership: &Ownership,
) {
    while held.len() > fair as usize {
        let Some(i) = held.pop_last() else { break };
        if let Some(shard) = shards.get_mut(i as usize) {
            lose(shard, i, ownership);
            shard.elector.give_up().await;
            tracing::info!(shard = i, fair, members, "gave a shard back (above the fair share)");
        }
    }
}

/// Takes free or expired shards up to the fair share, starting after our identity's hash so replicas starting
/// together try different shards first.
async fn take(
    shards: &mut [Shard],
    held: &mut BTreeSet<u32>,
    (fair, members): (u32, usize),
    settings: &Settings,
    ownership: &Ownership,
    shutdown: &Shutdown,
) {
    let start = shard_of(&settings.identity, ownership.count());
    for k in 0..ownership.count() {
        if held.len() >= fair as usize || shutdown.is_triggered() {
            break;
        }
        let i = (start + k) % ownership.count();
        if held.contains(&i) {
            continue;
        }
        let Some(shard) = shards.get_mut(i as usize) else { continue };
        let deadline = Instant::now() + settings.renew_deadline;
        match shard.elector.try_hold(&mut shard.observer, deadline).await {
            Ok(Held::Yes { sent }) => {
                shard.sent = Some(sent);
                ownership.hold_until(i, sent + settings.renew_deadline);
                held.insert(i);
                tracing::info!(shard = i, fair, members, "acquired a shard");
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(shard = i, error = %e, "acquiring a shard failed"),
        }
    }
}

/// Sleeps until the next tick, waking at once for the earliest fencing deadline (a renew that keeps failing).
/// `false`: shutdown.
async fn sleep_until_next(shards: &[Shard], settings: &Settings, tick: Instant, shutdown: &Shutdown) -> bool {
    let next_fence = shards.iter().filter_map(|s| s.sent).map(|sent| sent + settings.renew_deadline).min();
    let wake = next_fence.map_or(tick, |f| f.min(tick));
    tokio::select! {
        _ = tokio::time::sleep_until(wake) => true,
        _ = shutdown.wait() => false,
    }
}

/// Stops on every shard whose renew deadline passed.
fn fence_expired(shards: &mut [Shard], settings: &Settings, ownership: &Ownership) {
    for (i, shard) in shards.iter_mut().enumerate() {
        if shard.sent.is_some_and(|sent| Instant::now() >= sent + settings.renew_deadline) {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            tracing::warn!(shard = i, "a shard's renew deadline passed; stopped on it");
            lose(shard, i, ownership);
        }
    }
}

fn lose(shard: &mut Shard, i: u32, ownership: &Ownership) {
    ownership.drop_shard(i);
    shard.sent = None;
}

/// A Lease name part from an identity (lowercase alphanumerics and `-`, at most 200 characters).
fn sanitize(identity: &str) -> String {
    let cleaned: String = identity
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .take(200)
        .collect();
    cleaned.trim_matches('-').to_string()
}

async fn renew_membership(api: &Api<Lease>, settings: &Settings, name: &str) -> Result<(), kube::Error> {
    let spec = LeaseSpec {
        holder_identity: Some(settings.identity.clone()),
        lease_duration_seconds: Some(i32::try_from(settings.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)),
        renew_time: Some(MicroTime(Timestamp::now())),
        ..LeaseSpec::default()
    };
    match api.get_opt(name).await? {
        Some(mut lease) => {
            lease.spec = Some(spec);
            api.replace(name, &PostParams::default(), &lease).await.map(|_| ())
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    labels: Some(BTreeMap::from([(GROUP_LABEL.to_string(), settings.base.clone())])),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease).await.map(|_| ())
        }
    }
}

/// One list of the namespace's Leases: the live members, renewed within their lease duration (by the renew time
/// they wrote: clock skew between replicas only skews the fair share, never safety, which rests on the shard
/// Leases; ourselves at least), and every Lease's spec by name.
async fn read_group(api: &Api<Lease>, settings: &Settings) -> (usize, BTreeMap<String, LeaseSpec>) {
    let prefix = format!("{}-member-", settings.base);
    let Ok(list) = api.list(&ListParams::default()).await else { return (1, BTreeMap::new()) };
    let now = Timestamp::now();
    let seen = list
        .items
        .iter()
        .filter_map(|l| Some((l.metadata.name.clone()?, l.spec.clone()?)))
        .filter(|(name, _)| name.starts_with(&settings.base))
        .collect();
    let live = list
        .items
        .iter()
        .filter(|l| l.metadata.name.as_deref().is_some_and(|n| n.starts_with(&prefix)))
        .filter(|l| {
            let Some(spec) = &l.spec else { return false };
            let (Some(renewed), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds) else { return false };
            renewed.0.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(i64::from(secs))).is_ok_and(|t| t > now)
        })
        .count();
    (live.max(1), seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_spread_over_the_shards_and_stay_on_theirs() {
        let mut counts = [0u32; 8];
        for i in 0..8000 {
            counts[shard_of(&format!("0b1d7f3e-uid-{i}"), 8) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
        assert_eq!(shard_of("abc", 8), shard_of("abc", 8));
        assert_eq!(shard_of("abc", 1), 0);
        assert_eq!(shard_of("abc", 0), 0, "zero shards behave as one");
    }

    #[test]
    fn fair_shares() {
        assert_eq!(fair_share(8, 3), 3);
        assert_eq!(fair_share(8, 1), 8);
        assert_eq!(fair_share(8, 0), 8);
        assert_eq!(fair_share(2, 5), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shard_is_ours_only_until_its_fencing_deadline() {
        let ownership = Ownership::new(4);
        let uid = (0..).map(|i| format!("uid-{i}")).find(|u| shard_of(u, 4) == 2).unwrap();
        assert!(!ownership.owns(&uid), "nothing is held at first");
        ownership.hold_until(2, Instant::now() + Duration::from_secs(2));
        assert!(ownership.owns(&uid));
        assert_eq!(ownership.held(), vec![2]);
        tokio::time::advance(Duration::from_millis(1999)).await;
        assert!(ownership.owns(&uid));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!ownership.owns(&uid), "at the deadline the shard is no longer ours, renewed or not");
        ownership.hold_until(2, Instant::now() + Duration::from_secs(2));
        ownership.drop_shard(2);
        assert!(!ownership.owns(&uid));
    }

    #[test]
    fn identities_become_lease_names() {
        assert_eq!(sanitize("hook-operator-7d9f_5:X"), "hook-operator-7d9f-5-x");
    }
}
