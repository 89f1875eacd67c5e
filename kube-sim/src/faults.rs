//! Fault injection for reliability tests: per-verb/per-resource error rates and latency, forced
//! optimistic-concurrency conflicts on writes, and watch connections that are cut after a while
//! (or on demand). Configured by flags at start and at runtime through `/kube-sim/faults`.
//!
//! Rules can be scoped to one client (`users`, `userAgents`), which partitions one process from
//! the API server while every other client keeps working: with `errorRate: 1` its requests fail
//! and its open watches are closed; with `blackhole` its requests hang (until the client gives up
//! or the rule is removed) and its open watches go silent, like a network partition.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::RngExt;
use serde::{Deserialize, Serialize};

use crate::status::{ApiError, GroupResource};

/// One rule; a request is subject to every rule that matches its verb and resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultRule {
    /// Verbs the rule applies to (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`); empty means all.
    pub verbs: Vec<String>,
    /// Resources (`pods`, `gamedeployments.tkex.tencent.com`, `pods/status`); empty means all.
    pub resources: Vec<String>,
    /// Probability (0..=1) that a matching request fails with `errorCode`.
    pub error_rate: f64,
    /// HTTP code of injected errors: 500 (default), 503, 429 or 504.
    pub error_code: Option<u16>,
    /// Latency added before a matching request is served.
    pub latency_ms: u64,
    /// Probability that a matching update/patch fails with `409 Conflict`.
    pub conflict_rate: f64,
    /// Matching watches are closed after this many milliseconds.
    pub watch_drop_after_ms: Option<u64>,
    /// Probability that a matching watch started from a resourceVersion is answered `410 Gone`
    /// (`Expired`), as when that version has left the watch cache: the client must relist.
    pub watch_expire_rate: f64,
    /// Probability that a matching write (create, update, patch, delete, deletecollection) is
    /// carried out but answered `504 Timeout`, as kube-apiserver's request timeout answers
    /// ("... but may still be processing the request"): the client cannot tell whether it
    /// happened and must find out (kube-rs retries 504 itself, so it sees `409`/`404` then).
    pub timeout_rate: f64,
    /// Authenticated user names the rule applies to (`system:serviceaccount:ns:name`, a token
    /// file user, `kube-sim-admin`; the impersonated user or the impersonator); empty means all.
    pub users: Vec<String>,
    /// Substrings of the `User-Agent` header the rule applies to; empty means all.
    pub user_agents: Vec<String>,
    /// Matching requests are never answered while the rule is in place (the client times out,
    /// or the request proceeds once the rule is removed), and matching open watches stop
    /// delivering events and bookmarks until then: a network partition.
    pub blackhole: bool,
}

/// Who sent a request, for rules scoped to a client.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Client<'a> {
    /// The user the request runs as (after impersonation).
    pub user: &'a str,
    /// The authenticated user that sent it (differs from `user` when impersonating).
    pub requester: &'a str,
    pub user_agent: &'a str,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultConfig {
    pub rules: Vec<FaultRule>,
}

impl FaultConfig {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// What the server must do to one request.
#[derive(Debug, Default)]
pub(crate) struct Decision {
    pub latency: Duration,
    pub error: Option<ApiError>,
    pub watch_drop_after: Option<Duration>,
    /// Hold the request until [`Faults::blackholed`] turns false (or the client goes away).
    pub blackhole: bool,
    /// Carry the write out, then answer `504 Timeout` instead of its result.
    pub timeout_after_write: bool,
}

/// How many faults were injected since the server started (for reports of fault runs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultCounts {
    /// Injected error answers by HTTP code (500, 503, 429, 504; conflicts are counted apart).
    pub errors: std::collections::BTreeMap<u16, u64>,
    /// Injected `409 Conflict` answers.
    pub conflicts: u64,
    /// Writes carried out but answered `504 Timeout`.
    pub timeouts_after_write: u64,
    /// Watches given a drop timer (`watchDropAfterMs`).
    pub watches_cut: u64,
    /// Watches answered `410 Gone`.
    pub watches_expired: u64,
    /// Resource requests each rule of the current configuration matched (by position; reset when the rules are
    /// replaced). A rule with no fault in it is a probe: it counts the requests of a user, verb and resource.
    pub matched: Vec<u64>,
}

/// What an open watch must do now, re-checked while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchFault {
    None,
    /// Deliver nothing (blackhole) until the rule goes.
    Freeze,
    /// Close the stream (a rule fails every matching request).
    Close,
}

#[derive(Default)]
pub(crate) struct Faults {
    config: RwLock<FaultConfig>,
    /// Bumped on every change, so open watches re-check only when something changed.
    generation: AtomicU64,
    counts: std::sync::Mutex<FaultCounts>,
}

impl FaultRule {
    fn matches_client(&self, client: &Client<'_>) -> bool {
        let user_ok = self.users.is_empty() || self.users.iter().any(|u| u == client.user || u == client.requester);
        let agent_ok =
            self.user_agents.is_empty() || self.user_agents.iter().any(|a| client.user_agent.contains(a.as_str()));
        user_ok && agent_ok
    }

    /// Whether the rule is scoped to a client (such rules also apply to non-resource requests).
    fn scoped(&self) -> bool {
        !self.users.is_empty() || !self.user_agents.is_empty()
    }

    fn matches(&self, verb: &str, resource: &str, subresource: Option<&str>) -> bool {
        let verb_ok = self.verbs.is_empty() || self.verbs.iter().any(|v| v == verb);
        let full = match subresource {
            Some(s) => format!("{resource}/{s}"),
            None => resource.to_string(),
        };
        let plural = resource.split('.').next().unwrap_or(resource);
        let res_ok = self.resources.is_empty()
            || self.resources.iter().any(|r| {
                r == resource
                    || r == &full
                    || (subresource.is_none() && r == plural)
                    || r == &format!("{plural}/{}", subresource.unwrap_or(""))
            });
        verb_ok && res_ok
    }
}

impl Faults {
    pub(crate) fn new(config: FaultConfig) -> Self {
        Self { config: RwLock::new(config), generation: AtomicU64::new(0), counts: Default::default() }
    }

    /// Faults injected so far.
    pub(crate) fn counts(&self) -> FaultCounts {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn count(&self, f: impl FnOnce(&mut FaultCounts)) {
        f(&mut self.counts.lock().unwrap_or_else(|p| p.into_inner()));
    }

    pub(crate) fn get(&self) -> FaultConfig {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set(&self, config: FaultConfig) {
        let mut cfg = self.config.write().unwrap_or_else(|p| p.into_inner());
        self.count(|c| c.matched = vec![0; config.rules.len()]);
        *cfg = config;
        drop(cfg);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// A counter that changes whenever the rules change.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Decides the faults for a resource request. `resource` is `plural` or `plural.group`.
    pub(crate) fn decide(
        &self,
        verb: &str,
        gr: &GroupResource,
        subresource: Option<&str>,
        name: &str,
        client: &Client<'_>,
    ) -> Decision {
        let cfg = self.config.read().unwrap_or_else(|p| p.into_inner());
        let mut d = Decision::default();
        if cfg.rules.is_empty() {
            return d;
        }
        let resource = gr.to_string();
        let mut rng = rand::rng();
        let mut matched = Vec::new();
        for (i, rule) in cfg.rules.iter().enumerate() {
            if !(rule.matches(verb, &resource, subresource) && rule.matches_client(client)) {
                continue;
            }
            matched.push(i);
            d.latency += Duration::from_millis(rule.latency_ms);
            d.blackhole |= rule.blackhole;
            if let Some(ms) = rule.watch_drop_after_ms {
                let candidate = Duration::from_millis(ms);
                d.watch_drop_after = Some(d.watch_drop_after.map_or(candidate, |c: Duration| c.min(candidate)));
            }
            if d.error.is_none() && rule.error_rate > 0.0 && rng.random_bool(rule.error_rate.clamp(0.0, 1.0)) {
                d.error = Some(injected_error(rule.error_code));
            }
            if d.error.is_none()
                && (verb == "update" || verb == "patch")
                && rule.conflict_rate > 0.0
                && rng.random_bool(rule.conflict_rate.clamp(0.0, 1.0))
            {
                d.error = Some(ApiError::modified(gr, name));
            }
            if matches!(verb, "create" | "update" | "patch" | "delete" | "deletecollection")
                && rule.timeout_rate > 0.0
                && rng.random_bool(rule.timeout_rate.clamp(0.0, 1.0))
            {
                d.timeout_after_write = true;
            }
        }
        if d.error.is_some() {
            d.timeout_after_write = false;
        }
        self.count(|c| {
            match &d.error {
                Some(e) if e.code == 409 => c.conflicts += 1,
                Some(e) => *c.errors.entry(e.code).or_default() += 1,
                None => {}
            }
            c.timeouts_after_write += u64::from(d.timeout_after_write);
            c.watches_cut += u64::from(verb == "watch" && d.watch_drop_after.is_some());
            if c.matched.len() < cfg.rules.len() {
                c.matched.resize(cfg.rules.len(), 0);
            }
            for i in matched {
                c.matched[i] += 1;
            }
        });
        d
    }

    /// Whether a watch of `gr` by `client` starting from a resourceVersion is answered
    /// `410 Gone` now (`watchExpireRate`), so the client has to relist.
    pub(crate) fn watch_expired(&self, gr: &GroupResource, client: &Client<'_>) -> bool {
        let cfg = self.config.read().unwrap_or_else(|p| p.into_inner());
        let resource = gr.to_string();
        let mut rng = rand::rng();
        let expired = cfg.rules.iter().any(|r| {
            r.watch_expire_rate > 0.0
                && r.matches("watch", &resource, None)
                && r.matches_client(client)
                && rng.random_bool(r.watch_expire_rate.clamp(0.0, 1.0))
        });
        if expired {
            self.count(|c| c.watches_expired += 1);
        }
        expired
    }

    /// The error a write carried out under [`Decision::timeout_after_write`] is answered with.
    pub(crate) fn timeout_error() -> ApiError {
        ApiError::timeout(
            "kube-sim injected fault: the server was unable to return a response in the time allotted, but may \
             still be processing the request",
        )
    }

    /// Decides the faults for a non-resource request (discovery, `/version`, OpenAPI): only
    /// rules scoped to a client and not to resources apply, so a partitioned process loses
    /// those too while global rules leave kubectl's discovery alone.
    pub(crate) fn decide_non_resource(&self, verb: &str, client: &Client<'_>) -> Decision {
        let cfg = self.config.read().unwrap_or_else(|p| p.into_inner());
        let mut d = Decision::default();
        let mut rng = rand::rng();
        for rule in cfg.rules.iter().filter(|r| {
            r.scoped()
                && r.resources.is_empty()
                && (r.verbs.is_empty() || r.verbs.iter().any(|v| v == verb))
                && r.matches_client(client)
        }) {
            d.latency += Duration::from_millis(rule.latency_ms);
            d.blackhole |= rule.blackhole;
            if d.error.is_none() && rule.error_rate > 0.0 && rng.random_bool(rule.error_rate.clamp(0.0, 1.0)) {
                d.error = Some(injected_error(rule.error_code));
            }
        }
        if let Some(e) = &d.error {
            self.count(|c| *c.errors.entry(e.code).or_default() += 1);
        }
        d
    }

    /// Whether a blackhole rule still holds this request.
    pub(crate) fn blackholed(
        &self,
        verb: &str,
        gr: Option<&GroupResource>,
        subresource: Option<&str>,
        client: &Client<'_>,
    ) -> bool {
        let cfg = self.config.read().unwrap_or_else(|p| p.into_inner());
        let resource = gr.map(ToString::to_string);
        cfg.rules.iter().any(|r| {
            r.blackhole
                && r.matches_client(client)
                && match &resource {
                    Some(res) => r.matches(verb, res, subresource),
                    None => {
                        r.scoped()
                            && r.resources.is_empty()
                            && (r.verbs.is_empty() || r.verbs.iter().any(|v| v == verb))
                    }
                }
        })
    }

    /// What an open watch of `gr` by `client` must do under the current rules: freeze while a
    /// blackhole rule matches, close when a matching rule fails every request (`errorRate: 1`).
    pub(crate) fn watch_fault(&self, gr: &GroupResource, client: &Client<'_>) -> WatchFault {
        let cfg = self.config.read().unwrap_or_else(|p| p.into_inner());
        let resource = gr.to_string();
        let mut out = WatchFault::None;
        for r in cfg.rules.iter().filter(|r| r.matches("watch", &resource, None) && r.matches_client(client)) {
            if r.blackhole {
                return WatchFault::Freeze;
            }
            if r.error_rate >= 1.0 {
                out = WatchFault::Close;
            }
        }
        out
    }
}

fn injected_error(code: Option<u16>) -> ApiError {
    match code.unwrap_or(500) {
        503 => ApiError::service_unavailable(
            "kube-sim injected fault: the server is currently unable to handle the request",
        ),
        429 => ApiError::too_many_requests("kube-sim injected fault: too many requests, please try again later", 1),
        504 => ApiError::timeout(
            "kube-sim injected fault: the server was unable to return a response in the time allotted",
        ),
        _ => ApiError::internal("kube-sim injected fault"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_verbs_and_resources() {
        let f = Faults::new(FaultConfig {
            rules: vec![FaultRule {
                verbs: vec!["update".into()],
                resources: vec!["pods".into()],
                conflict_rate: 1.0,
                latency_ms: 5,
                ..Default::default()
            }],
        });
        let pods = GroupResource::new("", "pods");
        let anyone = Client::default();
        let d = f.decide("update", &pods, None, "p", &anyone);
        assert_eq!(d.error.unwrap().code, 409);
        assert_eq!(d.latency, Duration::from_millis(5));
        assert!(f.decide("get", &pods, None, "p", &anyone).error.is_none());
        assert!(f.decide("update", &GroupResource::new("apps", "deployments"), None, "d", &anyone).error.is_none());
        let all = Faults::new(FaultConfig {
            rules: vec![FaultRule { error_rate: 1.0, error_code: Some(503), ..Default::default() }],
        });
        assert_eq!(all.decide("list", &pods, None, "", &anyone).error.unwrap().code, 503);
        assert!(all.decide_non_resource("get", &anyone).error.is_none(), "global rules leave discovery alone");
    }

    #[test]
    fn rules_scoped_to_a_client() {
        let f = Faults::new(FaultConfig {
            rules: vec![
                FaultRule { users: vec!["op-a".into()], error_rate: 1.0, error_code: Some(503), ..Default::default() },
                FaultRule { user_agents: vec!["hook-operator/".into()], blackhole: true, ..Default::default() },
            ],
        });
        let pods = GroupResource::new("", "pods");
        let a = Client { user: "op-a", requester: "op-a", user_agent: "gamedeployment-operator/0.1" };
        let b = Client { user: "op-b", requester: "op-b", user_agent: "gamedeployment-operator/0.1" };
        let impersonating_a = Client { user: "someone", requester: "op-a", user_agent: "kubectl" };
        let hooks = Client { user: "op-c", requester: "op-c", user_agent: "hook-operator/0.1 (linux)" };
        assert_eq!(f.decide("get", &pods, None, "p", &a).error.map(|e| e.code), Some(503));
        assert_eq!(f.decide("get", &pods, None, "p", &impersonating_a).error.map(|e| e.code), Some(503));
        assert!(f.decide("get", &pods, None, "p", &b).error.is_none());
        assert!(!f.decide("get", &pods, None, "p", &b).blackhole);
        assert!(f.decide("get", &pods, None, "p", &hooks).blackhole);
        assert!(f.blackholed("get", Some(&pods), None, &hooks));
        assert!(f.blackholed("get", None, None, &hooks), "non-resource requests of that client too");
        assert_eq!(f.decide_non_resource("get", &a).error.map(|e| e.code), Some(503));
        assert_eq!(f.watch_fault(&pods, &a), WatchFault::Close);
        assert_eq!(f.watch_fault(&pods, &hooks), WatchFault::Freeze);
        assert_eq!(f.watch_fault(&pods, &b), WatchFault::None);
        let g = f.generation();
        f.set(FaultConfig::default());
        assert_ne!(f.generation(), g);
        assert!(!f.blackholed("get", Some(&pods), None, &hooks));
    }

    #[test]
    fn expired_watches_timeouts_after_writes_and_counts() {
        let f = Faults::new(FaultConfig {
            rules: vec![
                FaultRule { users: vec!["op".into()], watch_expire_rate: 1.0, timeout_rate: 1.0, ..Default::default() },
                FaultRule {
                    users: vec!["op".into()],
                    verbs: vec!["watch".into()],
                    watch_drop_after_ms: Some(100),
                    ..Default::default()
                },
            ],
        });
        let pods = GroupResource::new("", "pods");
        let op = Client { user: "op", requester: "op", user_agent: "" };
        let other = Client { user: "other", requester: "other", user_agent: "" };
        assert!(f.watch_expired(&pods, &op));
        assert!(!f.watch_expired(&pods, &other));
        assert!(f.decide("create", &pods, None, "p", &op).timeout_after_write);
        assert!(f.decide("delete", &pods, None, "p", &op).timeout_after_write);
        assert!(!f.decide("get", &pods, None, "p", &op).timeout_after_write, "reads are never timed out");
        assert!(!f.decide("create", &pods, None, "p", &other).timeout_after_write);
        assert!(f.decide("watch", &pods, None, "", &op).watch_drop_after.is_some());
        assert_eq!(Faults::timeout_error().code, 504);
        let errors = Faults::new(FaultConfig {
            rules: vec![
                FaultRule { verbs: vec!["get".into()], error_rate: 1.0, error_code: Some(429), ..Default::default() },
                FaultRule { verbs: vec!["patch".into()], conflict_rate: 1.0, timeout_rate: 1.0, ..Default::default() },
            ],
        });
        errors.decide("get", &pods, None, "p", &op);
        let conflict = errors.decide("patch", &pods, None, "p", &op);
        assert!(!conflict.timeout_after_write, "a refused write is not also carried out");
        let counts = f.counts();
        assert_eq!((counts.watches_expired, counts.timeouts_after_write, counts.watches_cut), (1, 2, 1));
        assert_eq!(counts.matched, [4, 1], "requests each rule matched (a rule without faults is a probe)");
        f.set(FaultConfig { rules: vec![FaultRule::default()] });
        assert_eq!(f.counts().matched, [0], "replacing the rules resets what they matched");
        let counts = errors.counts();
        assert_eq!((counts.errors.get(&429).copied(), counts.conflicts), (Some(1), 1));
    }
}
