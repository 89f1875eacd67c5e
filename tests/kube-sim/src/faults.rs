//! Fault injection for reliability tests: per-verb/per-resource error rates and latency, forced
//! optimistic-concurrency conflicts on writes, and watch connections that are cut after a while
//! (or on demand). Configured by flags at start and at runtime through `/kube-sim/faults`.

use std::sync::RwLock;
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
pub struct Decision {
    pub latency: Duration,
    pub error: Option<ApiError>,
    pub watch_drop_after: Option<Duration>,
}

#[derive(Default)]
pub struct Faults {
    config: RwLock<FaultConfig>,
}

impl FaultRule {
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
    pub fn new(config: FaultConfig) -> Self {
        Self { config: RwLock::new(config) }
    }

    pub fn get(&self) -> FaultConfig {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, config: FaultConfig) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
    }

    /// Decides the faults for a resource request. `resource` is `plural` or `plural.group`.
    pub fn decide(&self, verb: &str, gr: &GroupResource, subresource: Option<&str>, name: &str) -> Decision {
        let cfg = self.config.read().unwrap_or_else(|p| p.into_inner());
        let mut d = Decision::default();
        if cfg.rules.is_empty() {
            return d;
        }
        let resource = gr.to_string();
        let mut rng = rand::rng();
        for rule in cfg.rules.iter().filter(|r| r.matches(verb, &resource, subresource)) {
            d.latency += Duration::from_millis(rule.latency_ms);
            if let Some(ms) = rule.watch_drop_after_ms {
                let candidate = Duration::from_millis(ms);
                d.watch_drop_after = Some(d.watch_drop_after.map_or(candidate, |c: Duration| c.min(candidate)));
            }
            if d.error.is_none() && rule.error_rate > 0.0 && rng.random_bool(rule.error_rate.clamp(0.0, 1.0)) {
                d.error = Some(match rule.error_code.unwrap_or(500) {
                    503 => ApiError::service_unavailable(
                        "kube-sim injected fault: the server is currently unable to handle the request",
                    ),
                    429 => ApiError::too_many_requests(
                        "kube-sim injected fault: too many requests, please try again later",
                        1,
                    ),
                    504 => ApiError::timeout(
                        "kube-sim injected fault: the server was unable to return a response in the time allotted",
                    ),
                    _ => ApiError::internal("kube-sim injected fault"),
                });
            }
            if d.error.is_none()
                && (verb == "update" || verb == "patch")
                && rule.conflict_rate > 0.0
                && rng.random_bool(rule.conflict_rate.clamp(0.0, 1.0))
            {
                d.error = Some(ApiError::modified(gr, name));
            }
        }
        d
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
        let d = f.decide("update", &pods, None, "p");
        assert_eq!(d.error.unwrap().code, 409);
        assert_eq!(d.latency, Duration::from_millis(5));
        assert!(f.decide("get", &pods, None, "p").error.is_none());
        assert!(f.decide("update", &GroupResource::new("apps", "deployments"), None, "d").error.is_none());
        let all = Faults::new(FaultConfig {
            rules: vec![FaultRule { error_rate: 1.0, error_code: Some(503), ..Default::default() }],
        });
        assert_eq!(all.decide("list", &pods, None, "").error.unwrap().code, 503);
    }
}
