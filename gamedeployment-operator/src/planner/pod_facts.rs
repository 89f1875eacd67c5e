//! What a pass derives from one pod alone — its lifecycle state, readiness, the in-place progress it records, its
//! quarantine and its `specified-delete` label — kept between passes ([`FactsCache`]) and derived again only for
//! the pods whose resourceVersion changed, that is, for the pods whose watch events arrived.
//!
//! [`derive()`] is a pure function of the pod; the cache only remembers its result under the pod's UID and
//! resourceVersion (every change to a stored pod gives it a new resourceVersion). Nothing here reads the
//! GameDeployment's spec or the clock: what depends on them (whether the pod runs the update revision, is
//! available after `minReadySeconds`, is named in `podsToDelete`, waits for an in-place handler, has a hot patch
//! past its settle deadline) is worked out from these facts in each pass ([`super::settings::pod_infos`]), so a
//! spec change or the clock moving can never leave a stale fact behind.
//!
//! `incremental_properties` checks that a pass planned from the facts of earlier passes plans exactly what a pass
//! from an empty cache plans.

use std::sync::{Arc, LazyLock};

use common::cached_pod::Pod;
use common::keys;
use k8s_openapi::jiff::Timestamp;

use super::pod_progress::{self, Recorded};
use crate::lifecycle::{self, LifecycleState};
use crate::memo::UidMemo;

/// What one pod, as stored at one resourceVersion, says about itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodFacts {
    /// The resourceVersion these facts were derived from.
    resource_version: String,
    pub state: LifecycleState,
    /// The `lifecycle-state` label is absent or `Normal` (Kruise's `IsPodAvailable` reads the label itself: a
    /// foreign value counts as not available although [`lifecycle::state_of`] reads it as `Normal`).
    pub state_label_normal: bool,
    /// `Running` and `Ready`.
    pub ready: bool,
    /// `Running`.
    pub running: bool,
    /// The `Ready` condition is True: `Some(since)` with its transition time in seconds (`None` inside when it has
    /// none); `None` when it is not True.
    pub ready_since: Option<Option<i64>>,
    /// The server declares `Maintaining` ([`common::server_state`]).
    pub quarantined: bool,
    /// The server state the pod declares, as `status.serverStates` counts it
    /// ([`common::server_state::ServerState::declared`]).
    pub declared_state: Option<&'static str>,
    /// Marked skipped by a race to empty ([`keys::RACE_SKIPPED`]).
    pub race_skipped: bool,
    /// `apps.kruise.io/specified-delete: "true"` ([`lifecycle::specified_delete`]).
    pub specified_delete: bool,
    /// The in-place or hot-patch update the pod records, before the clock is looked at.
    pub recorded: Recorded,
    /// A readiness gate of the pod (`InPlaceUpdateReady`, `KruisePodReady`) has its condition not True: putting
    /// the pod back in service may take a write ([`super::refresh`] looks closer only then).
    pub gate_not_true: bool,
}

impl PodFacts {
    /// Ready for at least `min_ready_seconds` at `now` ([`common::pod::is_available`] on these facts).
    pub fn available(&self, min_ready_seconds: i32, now: Timestamp) -> bool {
        match self.ready_since {
            None => false,
            Some(_) if min_ready_seconds <= 0 => true,
            Some(since) => since.is_some_and(|t| t + i64::from(min_ready_seconds) <= now.as_second()),
        }
    }

    /// The pod's in-place progress at `now` (`pod_progress::progress`, read from these facts).
    pub fn progress(&self, now: Timestamp) -> pod_progress::Progress {
        self.recorded.at(now)
    }
}

/// The facts of `pod`: a pure function of the pod.
pub(crate) fn derive(pod: &Pod) -> PodFacts {
    let ready_condition = common::pod::condition(pod, "Ready").filter(|c| c.status == "True");
    let running = common::pod::is_running(pod);
    PodFacts {
        resource_version: pod.metadata.resource_version.clone().unwrap_or_default(),
        state: lifecycle::state_of(pod),
        state_label_normal: common::pod::label(pod, keys::LIFECYCLE_STATE)
            .is_none_or(|s| s == LifecycleState::Normal.as_str()),
        ready: running && ready_condition.is_some(),
        running,
        ready_since: ready_condition.map(|c| c.last_transition_time.as_ref().map(|t| t.0.as_second())),
        quarantined: common::server_state::ServerState::quarantined(pod),
        declared_state: common::server_state::ServerState::declared(pod),
        race_skipped: common::pod::annotation(pod, keys::RACE_SKIPPED).is_some(),
        specified_delete: lifecycle::specified_delete(pod),
        recorded: pod_progress::recorded(pod),
        gate_not_true: [keys::IN_PLACE_UPDATE_READY, lifecycle::KRUISE_POD_READY].into_iter().any(|gate| {
            let gated = pod
                .spec
                .as_ref()
                .and_then(|s| s.readiness_gates.as_ref())
                .is_some_and(|gates| gates.iter().any(|g| g.condition_type == gate));
            gated && common::pod::condition(pod, gate).is_none_or(|c| c.status != "True")
        }),
    }
}

/// The facts of the pods planned so far, by UID, each with the resourceVersion it was derived from (see the
/// module docs). Entries of pods gone are forgotten ([`crate::memo`]).
#[derive(Debug, Default)]
pub struct FactsCache {
    memo: UidMemo<Arc<PodFacts>>,
}

impl FactsCache {
    /// The cache every pass of this process shares ([`super::plan`]): keyed by UID, so GameDeployments never see
    /// each other's entries.
    pub fn shared() -> &'static FactsCache {
        static SHARED: LazyLock<FactsCache> = LazyLock::new(FactsCache::default);
        &SHARED
    }

    /// The cache locked for one pass's look-ups ([`FactsPass::of`]).
    pub(crate) fn pass(&self) -> FactsPass<'_> {
        FactsPass { memo: self.memo.batch() }
    }
}

/// [`FactsCache::pass`]: the cache locked while a pass reads its pods' facts (one lock per pass, not per pod).
pub(crate) struct FactsPass<'c> {
    memo: crate::memo::Batch<'c, Arc<PodFacts>>,
}

impl FactsPass<'_> {
    /// The facts of `pod`: the remembered ones if they were derived from its current resourceVersion, else
    /// derived now (and remembered). A pod without a UID or resourceVersion (built in memory, never stored) is
    /// derived every time.
    pub(crate) fn of(&mut self, pod: &Pod) -> Arc<PodFacts> {
        let (Some(uid), Some(rv)) = (pod.metadata.uid.as_deref(), pod.metadata.resource_version.as_deref()) else {
            return Arc::new(derive(pod));
        };
        if let Some(facts) = self.memo.get(uid, |facts| (facts.resource_version == rv).then(|| facts.clone())) {
            return facts;
        }
        let facts = Arc::new(derive(pod));
        self.memo.insert(uid, facts.clone());
        facts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn stored(name: &str, rv: &str) -> Pod {
        let mut pod = fixtures::pod(name).serving("r1", "game:1", 10).build();
        pod.metadata.uid = Some(format!("{name}-uid"));
        pod.metadata.resource_version = Some(rv.into());
        pod
    }

    #[test]
    fn facts_are_derived_again_only_when_the_resource_version_changes() {
        let cache = FactsCache::default();
        let pod = stored("game-0", "1");
        let first = cache.pass().of(&pod);
        assert!(Arc::ptr_eq(&first, &cache.pass().of(&pod)), "same resourceVersion: the remembered facts");
        let mut changed = pod.clone();
        changed
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(keys::SPECIFIED_DELETE.into(), "true".into());
        changed.metadata.resource_version = Some("2".into());
        let second = cache.pass().of(&changed);
        assert!(second.specified_delete && !first.specified_delete);
        assert_eq!(*second, derive(&changed));
    }

    #[test]
    fn availability_follows_the_clock_and_min_ready_seconds() {
        let pod = stored("game-0", "1");
        let facts = derive(&pod);
        let since = facts.ready_since.flatten().expect("a serving pod is ready with a transition time");
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        for (min_ready, now) in [(0, since), (5, since + 4), (5, since + 5), (5, since + 60)] {
            assert_eq!(
                facts.available(min_ready, at(now)),
                common::pod::is_available(&pod, min_ready, at(now)),
                "minReadySeconds {min_ready} at {now}"
            );
        }
    }
}
