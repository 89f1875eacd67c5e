//! The pods as the endpoint controllers see them: each change becomes visible a fixed delay
//! after it was committed (`--endpoint-propagation-delay`), standing in for the time a real
//! cluster takes between a pod's change and its Services' endpoints following (informer lag,
//! `--endpoint-updates-batch-period`, kube-proxy's sync). With no delay the view is the store's.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// A pod's visible state before and after a change became visible (`None`: absent).
pub(super) type Change = (Option<Arc<Value>>, Option<Arc<Value>>);

pub(super) struct LaggedPods {
    delay: Duration,
    /// `namespace/name` -> the pod as last made visible.
    visible: BTreeMap<String, Arc<Value>>,
    /// Changes not visible yet, in commit order (their due times only grow).
    pending: VecDeque<(Instant, String, Option<Arc<Value>>)>,
}

impl LaggedPods {
    pub(super) fn new(delay: Duration) -> Self {
        Self { delay, visible: BTreeMap::new(), pending: VecDeque::new() }
    }

    /// Records a committed change of pod `key` (`None`: deleted).
    pub(super) fn observe(&mut self, key: String, pod: Option<Arc<Value>>, now: Instant) {
        self.pending.push_back((now + self.delay, key, pod));
    }

    /// Makes the changes that are due visible and returns them.
    pub(super) fn promote(&mut self, now: Instant) -> Vec<Change> {
        let mut out = Vec::new();
        while self.pending.front().is_some_and(|(due, _, _)| *due <= now) {
            let Some((_, key, pod)) = self.pending.pop_front() else { break };
            let before = match &pod {
                Some(p) => self.visible.insert(key, p.clone()),
                None => self.visible.remove(&key),
            };
            out.push((before, pod));
        }
        out
    }

    /// When the next change becomes visible.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.pending.front().map(|(due, _, _)| *due)
    }

    /// The visible pods of namespace `ns`.
    pub(super) fn in_namespace(&self, ns: &str) -> Vec<Arc<Value>> {
        let prefix = format!("{ns}/");
        self.visible
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_change_shows_only_after_the_delay() {
        let t0 = Instant::now();
        let mut pods = LaggedPods::new(Duration::from_secs(2));
        pods.observe("ns/a".into(), Some(Arc::new(json!({"v": 1}))), t0);
        assert!(pods.promote(t0 + Duration::from_secs(1)).is_empty());
        assert!(pods.in_namespace("ns").is_empty());
        assert_eq!(pods.next_due(), Some(t0 + Duration::from_secs(2)));
        let changes = pods.promote(t0 + Duration::from_secs(2));
        assert_eq!(changes.len(), 1);
        assert_eq!(pods.in_namespace("ns").len(), 1);
        assert!(pods.in_namespace("n").is_empty(), "a prefix of another namespace is not it");
        pods.observe("ns/a".into(), None, t0 + Duration::from_secs(3));
        assert_eq!(pods.in_namespace("ns").len(), 1, "a deletion is not seen at once either");
        pods.promote(t0 + Duration::from_secs(5));
        assert!(pods.in_namespace("ns").is_empty());
    }
}
