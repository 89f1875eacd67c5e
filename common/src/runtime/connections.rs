//! How many connections a server holds, overall and per client address, so that no client can take the
//! descriptors the API server's calls need.
//!
//! Every connection counts as **unverified** from the moment it is accepted: while its TLS handshake runs, and after
//! it when it presented no certificate the server verifies. Unverified connections are capped overall and per client
//! address ([`ConnectionLimits`]). A connection whose handshake proved the API server's client certificate becomes
//! **verified**: it leaves those counts and is never refused or closed to make room. Verified connections have the
//! descriptors the caps leave free. Since every connection starts unverified, a new one is admitted whenever its own
//! address holds less than its share ([`admit`]): when the overall cap is reached, an open unverified connection makes
//! room — the oldest of the address holding the most, or, when no address holds more than the newcomer's would, the
//! oldest of all — so neither one client nor clients at many addresses can shut out the API server's next call (which
//! stays unverified only for the milliseconds of its handshake).
//!
//! The caps are derived from the process's descriptor limit ([`ConnectionLimits::webhook`],
//! [`ConnectionLimits::metrics`]): [`RESERVED_DESCRIPTORS`] stay for the process's own API connections, watches and
//! files, and the servers' unverified connections together take at most a third of the rest.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::Notify;

/// Descriptors left for everything but the servers' connections: the API client's connections and watches, the
/// runtime's, log and certificate files.
pub const RESERVED_DESCRIPTORS: u64 = 128;

/// The caps on one server's unverified connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Unverified connections open at once.
    pub unverified: usize,
    /// Unverified connections open at once from one client address.
    pub per_address: usize,
}

fn clamp(value: u64, min: usize, max: usize) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX).clamp(min, max)
}

impl ConnectionLimits {
    /// The webhook server's caps for a process with `descriptors`: a quarter of what [`RESERVED_DESCRIPTORS`] leaves
    /// (8 to 1024), a quarter of that per address (2 to 128).
    pub fn webhook(descriptors: u64) -> Self {
        let unverified = clamp(descriptors.saturating_sub(RESERVED_DESCRIPTORS) / 4, 8, 1024);
        Self { unverified, per_address: clamp(unverified as u64 / 4, 2, 128) }
    }

    /// The metrics/health server's caps: a sixteenth of what [`RESERVED_DESCRIPTORS`] leaves (4 to 64), a quarter of
    /// that per address (2 to 16). Prometheus and the kubelet's probes need a few.
    pub fn metrics(descriptors: u64) -> Self {
        let unverified = clamp(descriptors.saturating_sub(RESERVED_DESCRIPTORS) / 16, 4, 64);
        Self { unverified, per_address: clamp(unverified as u64 / 4, 2, 16) }
    }
}

/// What to do with a new unverified connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// There is room: admit it.
    Admit,
    /// Admit it, closing an open unverified connection to make room.
    AdmitEvicting(Victim),
    /// Close it at once: its address holds [`ConnectionLimits::per_address`] unverified connections.
    Refuse,
}

/// Which open connection makes room for a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victim {
    /// The oldest unverified connection of this address (the one holding the most).
    OldestOf(IpAddr),
    /// The oldest unverified connection of all (no address holds more than the newcomer's would).
    Oldest,
}

/// The decision for a new connection from `peer`, given the unverified connections open per address (`open`).
/// Pure: the server's accounting ([`Limiter`]) applies it.
pub fn admit(limits: ConnectionLimits, open: &BTreeMap<IpAddr, usize>, peer: IpAddr) -> Admission {
    let mine = open.get(&peer).copied().unwrap_or(0);
    if mine >= limits.per_address {
        return Admission::Refuse;
    }
    if open.values().sum::<usize>() < limits.unverified {
        return Admission::Admit;
    }
    // Full: room is made at an address that, after it, still holds at least as many as the newcomer's; failing that
    // (many addresses holding a few each), by the connection that has had the longest time.
    match open.iter().filter(|(address, _)| **address != peer).max_by_key(|(_, n)| **n) {
        Some((heaviest, n)) if *n > mine + 1 => Admission::AdmitEvicting(Victim::OldestOf(*heaviest)),
        _ => Admission::AdmitEvicting(Victim::Oldest),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpenLabels {
    /// `webhook` or `metrics`.
    server: String,
    /// `verified` (the API server's client certificate) or `unverified`.
    caller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    server: String,
    /// `per_address` (closed at once), `evicted` (an open unverified connection closed to make room for a newcomer)
    /// or `descriptors` (an accept failed).
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TimedOutLabels {
    server: String,
    /// `handshake`, `request_head` (the head of a request, or the next one on an idle keep-alive connection) or
    /// `body`.
    phase: String,
}

crate::metric_set! {
    /// `<prefix>_server_connections{server,caller}`, `<prefix>_server_connections_refused_total{server,reason}` and
    /// `<prefix>_server_connections_timed_out_total{server,phase}`.
    #[derive(Clone, Debug)]
    pub struct ConnectionMetrics {
        open: Family<OpenLabels, Gauge> = Family::default()
            => ("server_connections", "Connections open to the process's servers, by server and caller (verified: \
               the API server's client certificate)"),
        refused: Family<RefusedLabels, Counter> = Family::default()
            => ("server_connections_refused", "Connections closed by the servers' connection caps, by server and \
               reason"),
        timed_out: Family<TimedOutLabels, Counter> = Family::default()
            => ("server_connections_timed_out", "Connections closed because the client was too slow, by server and \
               phase"),
    }
}

impl ConnectionMetrics {
    /// Registers the three families under `prefix` (`gamedeployment`, `hook_operator`) and returns handles to them.
    pub fn register(registry: &mut Registry, prefix: &str) -> Self {
        let metrics = Self::default();
        metrics.register_into(registry.sub_registry_with_prefix(prefix));
        metrics
    }

    fn open(&self, server: &str, verified: bool) -> Gauge {
        let caller = if verified { "verified" } else { "unverified" };
        self.open.get_or_create(&OpenLabels { server: server.into(), caller: caller.into() }).clone()
    }

    fn refused(&self, server: &str, reason: &str) {
        self.refused.get_or_create(&RefusedLabels { server: server.into(), reason: reason.into() }).inc();
    }

    fn timed_out(&self, server: &str, phase: &str) {
        self.timed_out.get_or_create(&TimedOutLabels { server: server.into(), phase: phase.into() }).inc();
    }
}

/// One server's connection accounting: applies [`admit`] and keeps the counts (and the metrics) as connections come,
/// prove themselves and go.
#[derive(Debug)]
pub struct Limiter {
    server: &'static str,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// The unverified connections of each address, oldest first, each with its eviction signal.
    unverified: BTreeMap<IpAddr, VecDeque<(u64, Arc<Notify>)>>,
}

impl State {
    fn counts(&self) -> BTreeMap<IpAddr, usize> {
        self.unverified.iter().map(|(address, open)| (*address, open.len())).collect()
    }

    /// Takes `victim` out of the unverified connections; its eviction signal.
    fn evict(&mut self, victim: Victim) -> Option<Arc<Notify>> {
        let address = match victim {
            Victim::OldestOf(address) => address,
            // Ids grow with time: the oldest connection is the smallest id at the front of a queue.
            Victim::Oldest => {
                *self.unverified.iter().filter_map(|(a, open)| Some((a, open.front()?.0))).min_by_key(|(_, id)| *id)?.0
            }
        };
        let open = self.unverified.get_mut(&address)?;
        let (_, signal) = open.pop_front()?;
        if open.is_empty() {
            self.unverified.remove(&address);
        }
        Some(signal)
    }

    /// Removes connection `id` of `address` from the unverified ones; false when it is not there (it was evicted).
    fn remove(&mut self, address: IpAddr, id: u64) -> bool {
        let Some(open) = self.unverified.get_mut(&address) else { return false };
        let Some(at) = open.iter().position(|(other, _)| *other == id) else { return false };
        open.remove(at);
        if open.is_empty() {
            self.unverified.remove(&address);
        }
        true
    }
}

impl Limiter {
    /// `server` names it in the metrics (`webhook`, `metrics`).
    pub fn new(server: &'static str, limits: ConnectionLimits, metrics: ConnectionMetrics) -> Arc<Self> {
        Arc::new(Self { server, limits, metrics, state: Mutex::new(State::default()) })
    }

    /// A limiter for the server just bound at `address`, its caps logged with what it serves (`endpoints`): one line
    /// per server at start, `serving <endpoints>` with `address=`, `unverified_connections=` and `per_client=`, from
    /// which operators see the caps and tools and tests find a port 0 server's address.
    pub fn serving(
        server: &'static str,
        address: std::net::SocketAddr,
        limits: ConnectionLimits,
        metrics: ConnectionMetrics,
        endpoints: &str,
    ) -> Arc<Self> {
        tracing::info!(
            %address,
            unverified_connections = limits.unverified,
            per_client = limits.per_address,
            "serving {endpoints}"
        );
        Self::new(server, limits, metrics)
    }

    /// The limits this limiter enforces, as sized at start from the process's descriptor limit.
    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new connection from `peer`: its slot (held while it is open), or `None` when it is to be closed at once (its
    /// address holds its share).
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Slot> {
        let mut state = self.state();
        match admit(self.limits, &state.counts(), peer) {
            Admission::Refuse => {
                drop(state);
                self.metrics.refused(self.server, "per_address");
                return None;
            }
            Admission::AdmitEvicting(victim) => {
                if let Some(signal) = state.evict(victim) {
                    signal.notify_one();
                    self.metrics.open(self.server, false).dec();
                    self.metrics.refused(self.server, "evicted");
                }
            }
            Admission::Admit => {}
        }
        let id = state.next;
        state.next += 1;
        let evicted = Arc::new(Notify::new());
        state.unverified.entry(peer).or_default().push_back((id, evicted.clone()));
        drop(state);
        self.metrics.open(self.server, false).inc();
        Some(Slot { limiter: self.clone(), id, peer, evicted, verified: false })
    }

    /// An accept that failed (out of descriptors, or the connection was gone before it was accepted).
    pub fn accept_failed(&self) {
        self.metrics.refused(self.server, "descriptors");
    }

    /// A connection closed because its client was too slow in `phase`.
    pub fn timed_out(&self, phase: &str) {
        self.metrics.timed_out(self.server, phase);
    }
}

/// An open connection's place in its server's counts; released when dropped.
#[derive(Debug)]
pub struct Slot {
    limiter: Arc<Limiter>,
    id: u64,
    peer: IpAddr,
    evicted: Arc<Notify>,
    verified: bool,
}

impl Slot {
    /// Signalled when the connection must close to make room for a newcomer (only while it is unverified).
    pub fn eviction(&self) -> Arc<Notify> {
        self.evicted.clone()
    }

    /// The connection proved the API server's client certificate: it leaves the unverified counts and is never
    /// evicted. False when it was evicted meanwhile (it closes).
    pub fn verify(&mut self) -> bool {
        if self.verified {
            return true;
        }
        if !self.limiter.state().remove(self.peer, self.id) {
            return false;
        }
        self.verified = true;
        let metrics = &self.limiter.metrics;
        metrics.open(self.limiter.server, false).dec();
        metrics.open(self.limiter.server, true).inc();
        true
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let server = self.limiter.server;
        if self.verified {
            self.limiter.metrics.open(server, true).dec();
        } else if self.limiter.state().remove(self.peer, self.id) {
            self.limiter.metrics.open(server, false).dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    const LIMITS: ConnectionLimits = ConnectionLimits { unverified: 6, per_address: 4 };

    #[test]
    fn the_caps_follow_the_descriptor_limit_within_bounds() {
        assert_eq!(ConnectionLimits::webhook(256), ConnectionLimits { unverified: 32, per_address: 8 });
        assert_eq!(ConnectionLimits::webhook(1024), ConnectionLimits { unverified: 224, per_address: 56 });
        assert_eq!(ConnectionLimits::webhook(1_048_576), ConnectionLimits { unverified: 1024, per_address: 128 });
        assert_eq!(ConnectionLimits::webhook(64), ConnectionLimits { unverified: 8, per_address: 2 });
        assert_eq!(ConnectionLimits::metrics(256), ConnectionLimits { unverified: 8, per_address: 2 });
        assert_eq!(ConnectionLimits::metrics(1_048_576), ConnectionLimits { unverified: 64, per_address: 16 });
        // Below the limit with room to spare: the reserve, then both servers' unverified caps.
        for descriptors in [256, 512, 1024, 4096, 65_536, 1_048_576] {
            let servers =
                ConnectionLimits::webhook(descriptors).unverified + ConnectionLimits::metrics(descriptors).unverified;
            let left = descriptors - RESERVED_DESCRIPTORS;
            assert!(servers as u64 * 3 <= left, "{descriptors}: {servers} of {left}");
        }
    }

    #[test]
    fn one_address_gets_its_share_and_no_more() {
        let open = BTreeMap::from([(ip(5), 4)]);
        assert_eq!(admit(LIMITS, &open, ip(5)), Admission::Refuse);
        assert_eq!(admit(LIMITS, &open, ip(1)), Admission::Admit);
    }

    #[test]
    fn when_full_the_heaviest_address_makes_room_but_never_below_the_newcomer() {
        let open = BTreeMap::from([(ip(5), 4), (ip(6), 2)]);
        let heaviest = Admission::AdmitEvicting(Victim::OldestOf(ip(5)));
        assert_eq!(admit(LIMITS, &open, ip(1)), heaviest, "the API server's next call gets in");
        assert_eq!(admit(LIMITS, &open, ip(6)), heaviest, "4 > 2 + 1");
        let even = BTreeMap::from([(ip(5), 3), (ip(6), 3)]);
        assert_eq!(admit(LIMITS, &even, ip(1)), Admission::AdmitEvicting(Victim::OldestOf(ip(6))));
        // No address holds more than the newcomer's would: the oldest connection of all makes room.
        assert_eq!(admit(LIMITS, &even, ip(6)), Admission::AdmitEvicting(Victim::Oldest), "3 is not more than 3 + 1");
        let thin: BTreeMap<IpAddr, usize> = (10..16).map(|last| (ip(last), 1)).collect();
        assert_eq!(admit(LIMITS, &thin, ip(1)), Admission::AdmitEvicting(Victim::Oldest), "clients at many addresses");
    }

    #[tokio::test]
    async fn slots_count_until_dropped_and_verified_ones_are_never_evicted() {
        let mut registry = Registry::default();
        let limiter = Limiter::new("webhook", LIMITS, ConnectionMetrics::register(&mut registry, "test"));
        let mut api_server = limiter.admit(ip(1)).unwrap();
        assert!(api_server.verify());
        let attacker: Vec<Slot> = (0..4).map(|_| limiter.admit(ip(5)).unwrap()).collect();
        assert!(limiter.admit(ip(5)).is_none(), "the attacker's address holds its share");
        let others: Vec<Slot> = (0..2).map(|_| limiter.admit(ip(6)).unwrap()).collect();
        // Full (6 unverified): a newcomer evicts the attacker's oldest, never the verified connection.
        let newcomer = limiter.admit(ip(1)).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), attacker[0].eviction().notified())
            .await
            .expect("the oldest connection of the heaviest address is told to close");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"test_server_connections{server="webhook",caller="verified"} 1"#,
            r#"test_server_connections{server="webhook",caller="unverified"} 6"#,
            r#"test_server_connections_refused_total{server="webhook",reason="per_address"} 1"#,
            r#"test_server_connections_refused_total{server="webhook",reason="evicted"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        drop(attacker);
        drop(others);
        drop(newcomer);
        drop(api_server);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains(r#"test_server_connections{server="webhook",caller="unverified"} 0"#), "{text}");
        assert!(text.contains(r#"test_server_connections{server="webhook",caller="verified"} 0"#), "{text}");
        assert!(limiter.state().unverified.is_empty());
    }

    #[test]
    fn among_many_thin_addresses_the_oldest_connection_makes_room() {
        let mut registry = Registry::default();
        let limits = ConnectionLimits { unverified: 3, per_address: 2 };
        let limiter = Limiter::new("webhook", limits, ConnectionMetrics::register(&mut registry, "test"));
        let slots: Vec<Slot> = (10..13).map(|last| limiter.admit(ip(last)).unwrap()).collect();
        let _newcomer = limiter.admit(ip(1)).unwrap();
        let counts = limiter.state().counts();
        assert_eq!(counts.get(&ip(10)), None, "the first connection made room: {counts:?}");
        assert_eq!(counts.len(), 3);
        drop(slots);
        assert_eq!(limiter.state().counts(), BTreeMap::from([(ip(1), 1)]));
    }

    #[test]
    fn an_evicted_connection_cannot_become_verified() {
        let mut registry = Registry::default();
        let limits = ConnectionLimits { unverified: 2, per_address: 2 };
        let limiter = Limiter::new("webhook", limits, ConnectionMetrics::register(&mut registry, "test"));
        let mut first = limiter.admit(ip(5)).unwrap();
        let _second = limiter.admit(ip(5)).unwrap();
        let _newcomer = limiter.admit(ip(1)).unwrap();
        assert!(!first.verify(), "evicted meanwhile: it closes");
    }
}
