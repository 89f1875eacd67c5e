//! Which addresses web and Prometheus measurements may reach.
//!
//! A template author chooses the URL, and the hook-operator runs with its own network identity, so without a
//! policy a template could read the node's cloud metadata endpoint (`169.254.169.254`, with the right header)
//! and publish what it got in its HookRun's status. By default every link-local address (IPv4 169.254.0.0/16,
//! IPv6 fe80::/10) and the known cloud metadata addresses are refused; `--web-deny-cidr` adds denials and
//! `--web-allow-cidr` makes exceptions. The check applies to the address actually connected to: IP literals
//! before the request, host names after DNS resolution (a name that resolves to a refused address is refused),
//! and redirects are followed only within the same origin (scheme, host, port).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// An IPv4 or IPv6 network, `10.0.0.0/8`, `fd00::/8`, or a single address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || format!("{s:?} is not a CIDR such as 10.0.0.0/8 or fd00::/8");
        let (address, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let network: IpAddr = address.parse().map_err(|_| usage())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(usage)?,
            None => max,
        };
        Ok(Self { network, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(self.prefix)) };
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(self.prefix)) };
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// IPv4-mapped IPv6 addresses (`::ffff:169.254.169.254`) are judged as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Refused unless `--web-allow-cidr` says otherwise: link-local networks (where every cloud's instance metadata
/// service lives) and the metadata addresses outside them.
pub fn built_in_denials() -> Vec<(Cidr, &'static str)> {
    let cidr = |network: IpAddr, prefix| Cidr { network, prefix };
    vec![
        (cidr(IpAddr::V4(Ipv4Addr::new(169, 254, 0, 0)), 16), "link-local (cloud instance metadata)"),
        (cidr(IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0)), 10), "IPv6 link-local"),
        (cidr(IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)), 128), "AWS instance metadata (IPv6)"),
        (cidr(IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)), 32), "Alibaba Cloud instance metadata"),
        (cidr(IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)), 32), "Azure host wire server"),
    ]
}

/// The egress policy of the web and Prometheus providers.
#[derive(Debug, Clone)]
pub struct Policy {
    deny: Vec<(Cidr, String)>,
    allow: Vec<Cidr>,
}

impl Default for Policy {
    fn default() -> Self {
        Self::new(Vec::new(), Vec::new())
    }
}

impl Policy {
    /// The built-in denials plus `deny`, with `allow` as exceptions.
    pub fn new(deny: Vec<Cidr>, allow: Vec<Cidr>) -> Self {
        let mut rules: Vec<(Cidr, String)> =
            built_in_denials().into_iter().map(|(c, why)| (c, why.to_string())).collect();
        rules.extend(deny.into_iter().map(|c| (c, "--web-deny-cidr".to_string())));
        Self { deny: rules, allow }
    }

    /// Why `ip` is refused, or `None` when it may be reached.
    pub fn refuses(&self, ip: IpAddr) -> Option<String> {
        if self.allow.iter().any(|c| c.contains(ip)) {
            return None;
        }
        self.deny.iter().find(|(c, _)| c.contains(ip)).map(|(c, why)| format!("{} is in {c} ({why})", canonical(ip)))
    }

    /// The refusal message for a request to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), String> {
        match self.refuses(ip) {
            Some(why) => Err(format!("refused by the egress policy: {why}; see --web-allow-cidr")),
            None => Ok(()),
        }
    }
}

/// reqwest's DNS resolver with the policy applied to every resolved address.
pub struct Resolver {
    /// The egress policy every resolved address is checked against.
    pub policy: Arc<Policy>,
}

/// Host-name look-ups in flight at once, in the whole process. A look-up is a blocking `getaddrinfo` call on
/// tokio's blocking pool that no timeout can cancel: the permit is held by the blocking call itself, so slow or
/// hanging resolvers can occupy at most this many blocking threads.
pub const MAX_LOOKUPS: usize = 32;
/// Look-ups in flight at once for the runs of one namespace (see [`NAMESPACE`]).
pub const MAX_LOOKUPS_PER_NAMESPACE: usize = 4;
/// How long a measurement waits for a look-up.
pub const LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

tokio::task_local! {
    /// The namespace of the run whose measurement is running in this task (set by the measurement), so that
    /// look-ups are counted per namespace.
    pub static NAMESPACE: Arc<str>;
}

static LOOKUPS: std::sync::LazyLock<Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| Arc::new(tokio::sync::Semaphore::new(MAX_LOOKUPS)));
static BY_NAMESPACE: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<Arc<str>, usize>>> =
    std::sync::LazyLock::new(Default::default);

/// A namespace's share of the look-ups, released when the blocking call ends.
struct NamespaceShare(Option<Arc<str>>);

impl NamespaceShare {
    fn take() -> Result<Self, String> {
        let Ok(namespace) = NAMESPACE.try_with(Arc::clone) else { return Ok(Self(None)) };
        let mut counts = BY_NAMESPACE.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(namespace.clone()).or_default();
        if *count >= MAX_LOOKUPS_PER_NAMESPACE {
            return Err(format!(
                "{MAX_LOOKUPS_PER_NAMESPACE} host-name look-ups of namespace {namespace:?} are already in flight \
                 (the DNS bound per namespace)"
            ));
        }
        *count += 1;
        Ok(Self(Some(namespace)))
    }
}

impl Drop for NamespaceShare {
    fn drop(&mut self) {
        if let Some(namespace) = self.0.take() {
            let mut counts = BY_NAMESPACE.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(count) = counts.get_mut(&namespace) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.remove(&namespace);
                }
            }
        }
    }
}

/// Whether a request to `url` may need a host-name look-up (its host is not an IP literal).
pub fn names_a_host(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if host.starts_with('[') {
        return false;
    }
    let host = host.rsplit_once(':').map_or(host, |(host, _)| host);
    host.parse::<std::net::IpAddr>().is_err()
}

/// Runs `request` with its host-name look-ups counted for `namespace` (a measurement's request to a host name).
pub async fn in_namespace<T>(namespace: &str, url: &str, request: impl std::future::Future<Output = T>) -> T {
    if names_a_host(url) { NAMESPACE.scope(Arc::from(namespace), request).await } else { request.await }
}

/// Resolves `host` within the look-up bounds (in flight per process and per namespace, and in time).
pub async fn lookup(host: &str) -> Result<Vec<SocketAddr>, String> {
    let share = NamespaceShare::take()?;
    let permit = LOOKUPS.clone().try_acquire_owned().map_err(|_| {
        format!("{MAX_LOOKUPS} host-name look-ups are already in flight (the operator's DNS bound); try again later")
    })?;
    let name = host.to_string();
    let blocking = tokio::task::spawn_blocking(move || {
        let _held = (permit, share);
        std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), 0)).map(|a| a.collect::<Vec<_>>())
    });
    match tokio::time::timeout(LOOKUP_TIMEOUT, blocking).await {
        Ok(Ok(Ok(addrs))) => Ok(addrs),
        Ok(Ok(Err(e))) => Err(format!("looking up {host}: {e}")),
        Ok(Err(e)) => Err(format!("looking up {host}: {e}")),
        Err(_) => Err(format!("looking up {host}: no answer within {}", crate::text::seconds(LOOKUP_TIMEOUT))),
    }
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let resolved = lookup(&host).await?;
            let mut refused = Vec::new();
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|a| match policy.refuses(a.ip()) {
                    Some(why) => {
                        refused.push(why);
                        false
                    }
                    None => true,
                })
                .collect();
            if allowed.is_empty() && !refused.is_empty() {
                let message =
                    format!("{host} resolves to refused addresses: {} (see --web-allow-cidr)", refused.join("; "));
                return Err(message.into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// Follows redirects only to the same origin, at most 5 times.
pub fn redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().cloned();
        let next = attempt.url().clone();
        match first {
            _ if attempt.previous().len() > 5 => attempt.error("more than 5 redirects"),
            Some(first) if first.origin() == next.origin() => attempt.follow(),
            Some(first) => {
                let message = format!(
                    "redirect from {} to another origin ({}) refused",
                    first.origin().ascii_serialization(),
                    next.origin().ascii_serialization()
                );
                attempt.error(message)
            }
            None => attempt.follow(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_matches_networks() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains(ip("10.1.2.3")) && !c.contains(ip("11.0.0.1")));
        let c: Cidr = "fd00::/8".parse().unwrap();
        assert!(c.contains(ip("fd12::1")) && !c.contains(ip("10.0.0.1")));
        let one: Cidr = "127.0.0.7".parse().unwrap();
        assert!(one.contains(ip("127.0.0.7")) && !one.contains(ip("127.0.0.8")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("8.8.8.8")));
        for bad in ["10.0.0.0/33", "x/8", "10.0.0.0/", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn metadata_and_link_local_are_refused_by_default() {
        let policy = Policy::default();
        for refused in ["169.254.169.254", "::ffff:169.254.169.254", "fe80::1", "fd00:ec2::254", "100.100.100.200"] {
            assert!(policy.check(ip(refused)).is_err(), "{refused}");
        }
        assert!(policy.check(ip("169.254.169.254")).unwrap_err().contains("cloud instance metadata"));
        for allowed in ["127.0.0.1", "10.0.0.1", "::1", "1.1.1.1"] {
            assert_eq!(policy.check(ip(allowed)), Ok(()), "{allowed}");
        }
        let custom = Policy::new(vec!["127.0.0.0/8".parse().unwrap()], vec!["169.254.10.0/24".parse().unwrap()]);
        assert!(custom.check(ip("127.0.0.1")).unwrap_err().contains("--web-deny-cidr"));
        assert_eq!(custom.check(ip("169.254.10.5")), Ok(()));
        assert!(custom.check(ip("169.254.169.254")).is_err());
    }
}

#[cfg(test)]
mod lookup_tests {
    use super::*;

    #[tokio::test]
    async fn a_namespace_holds_at_most_its_share_of_look_ups() {
        let namespace: Arc<str> = Arc::from("greedy");
        let refused = NAMESPACE
            .scope(namespace, async {
                let held: Vec<NamespaceShare> =
                    (0..MAX_LOOKUPS_PER_NAMESPACE).map(|_| NamespaceShare::take().unwrap()).collect();
                let refused = NamespaceShare::take().err();
                drop(held);
                assert!(NamespaceShare::take().is_ok(), "shares come back when the look-ups end");
                refused
            })
            .await;
        assert!(refused.is_some_and(|m| m.contains("DNS bound per namespace")));
        // Another namespace is not affected, and a look-up outside any run is not counted.
        NAMESPACE.scope(Arc::from("other"), async { assert!(NamespaceShare::take().is_ok()) }).await;
        assert!(lookup("localhost").await.is_ok_and(|addrs| !addrs.is_empty()));
    }

    #[test]
    fn only_host_names_need_a_look_up() {
        for url in ["http://localhost:9091/", "https://svc.ns.svc.cluster.local/x", "http://user:pw@host/"] {
            assert!(names_a_host(url), "{url}");
        }
        for url in ["http://127.0.0.1:9091/age", "http://[::1]:80/", "http://10.0.0.1", "http://u@10.0.0.1:1/?a"] {
            assert!(!names_a_host(url), "{url}");
        }
    }
}
