//! Garbage collection of finished HookRuns nobody owns.
//!
//! Workload operators set an ownerReference (to the pod or the GameDeployment), so their runs go with the owner
//! through Kubernetes' own garbage collector. A run created by hand, by a script or by another tool has no owner
//! and would stay forever: thousands of finished runs cost the API server storage and every watcher memory
//! (Argo Rollouts' finished AnalysisRuns did, argo-rollouts#2166). This operator deletes a finished,
//! ownerless run `--finished-run-ttl` after it finished, at most `--gc-deletes-per-second` deletes per second.
//!
//! When a run finished is derived from what is stored (crash-safe, no extra field): the end of its latest
//! measurement, else `status.startedAt` (a run that ended before measuring: invalid, terminated), else its
//! creation. A run terminated (`spec.terminate`) after measurements therefore counts from its last measurement.

use std::time::Duration;

use common::api::HookRun;
use k8s_openapi::jiff::Timestamp;

/// A run to delete: name, namespace and the uid the delete is preconditioned on (a run deleted and created
/// again under the same name in between is not touched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// When a finished run finished, as far as its stored state tells; `None` while it has not finished.
pub fn finished_at(run: &HookRun) -> Option<Timestamp> {
    let status = run.status.as_ref()?;
    if !status.phase.is_some_and(|p| p.is_completed()) {
        return None;
    }
    let last_measurement = status
        .metric_results
        .iter()
        .flat_map(|r| r.measurements.iter())
        .filter_map(|m| m.finished_at.as_ref().or(m.started_at.as_ref()).map(|t| t.0))
        .max();
    last_measurement
        .or_else(|| status.started_at.as_ref().map(|t| t.0))
        .or_else(|| run.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The finished, ownerless, not yet deleted runs whose TTL has passed at `now`, oldest first. `ttl` zero: none.
pub fn expired<'a>(runs: impl IntoIterator<Item = &'a HookRun>, now: Timestamp, ttl: Duration) -> Vec<Expired> {
    if ttl.is_zero() {
        return Vec::new();
    }
    let Ok(ttl) = k8s_openapi::jiff::SignedDuration::try_from(ttl) else { return Vec::new() };
    let mut found: Vec<(Timestamp, Expired)> = runs
        .into_iter()
        .filter(|run| run.metadata.deletion_timestamp.is_none())
        .filter(|run| run.metadata.owner_references.as_ref().is_none_or(Vec::is_empty))
        .filter_map(|run| {
            let finished = finished_at(run)?;
            let due = finished.checked_add(ttl).ok()?;
            (due <= now).then(|| {
                let meta = &run.metadata;
                (
                    finished,
                    Expired {
                        namespace: meta.namespace.clone().unwrap_or_default(),
                        name: meta.name.clone().unwrap_or_default(),
                        uid: meta.uid.clone().unwrap_or_default(),
                    },
                )
            })
        })
        .collect();
    found.sort_by_key(|(finished, _)| *finished);
    found.into_iter().map(|(_, expired)| expired).collect()
}

/// How often the collector looks for expired runs: often enough that a run goes within a tenth of its TTL (at
/// least every second, at most every minute).
pub fn scan_period(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::api::{HookPhase, HookRunStatus, Measurement, MetricResult};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use kube::api::ObjectMeta;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn run(name: &str, phase: Option<HookPhase>, last_measurement: Option<i64>) -> HookRun {
        HookRun {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                creation_timestamp: Some(Time(at(0))),
                ..ObjectMeta::default()
            },
            spec: Default::default(),
            status: Some(HookRunStatus {
                phase,
                started_at: Some(Time(at(1))),
                metric_results: vec![MetricResult {
                    name: "m".into(),
                    measurements: last_measurement
                        .map(|s| {
                            vec![
                                Measurement {
                                    started_at: Some(Time(at(s - 5))),
                                    finished_at: Some(Time(at(s - 4))),
                                    ..Measurement::default()
                                },
                                Measurement {
                                    started_at: Some(Time(at(s - 1))),
                                    finished_at: Some(Time(at(s))),
                                    ..Measurement::default()
                                },
                            ]
                        })
                        .unwrap_or_default(),
                    ..MetricResult::default()
                }],
                ..HookRunStatus::default()
            }),
        }
    }

    #[test]
    fn a_finished_run_finished_with_its_last_measurement_else_when_it_started() {
        assert_eq!(finished_at(&run("a", Some(HookPhase::Successful), Some(50))), Some(at(50)));
        assert_eq!(finished_at(&run("b", Some(HookPhase::Error), None)), Some(at(1)), "no measurement: startedAt");
        let mut bare = run("c", Some(HookPhase::Failed), None);
        bare.status.as_mut().unwrap().started_at = None;
        assert_eq!(finished_at(&bare), Some(at(0)), "nothing else: creation");
        assert_eq!(finished_at(&run("d", Some(HookPhase::Running), Some(50))), None);
        assert_eq!(finished_at(&run("e", None, None)), None);
    }

    #[test]
    fn only_finished_ownerless_runs_past_their_ttl_expire_oldest_first() {
        let ttl = Duration::from_secs(100);
        let mut owned = run("owned", Some(HookPhase::Successful), Some(10));
        owned.metadata.owner_references = Some(vec![OwnerReference { name: "pod".into(), ..Default::default() }]);
        let mut deleting = run("deleting", Some(HookPhase::Successful), Some(10));
        deleting.metadata.deletion_timestamp = Some(Time(at(20)));
        let runs = [
            run("young", Some(HookPhase::Successful), Some(60)),
            run("failed", Some(HookPhase::Failed), Some(20)),
            run("old", Some(HookPhase::Successful), Some(10)),
            run("inconclusive", Some(HookPhase::Inconclusive), Some(30)),
            run("running", Some(HookPhase::Running), Some(0)),
            owned,
            deleting,
        ];
        let names: Vec<String> = expired(&runs, at(140), ttl).into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["old", "failed", "inconclusive"]);
        assert_eq!(expired(&runs, at(109), ttl), vec![], "nothing is due before its ttl");
        assert_eq!(expired(&runs, at(110), ttl)[0].uid, "uid-old", "due exactly at finish + ttl");
        assert_eq!(expired(&runs, at(1_000_000), Duration::ZERO), vec![], "ttl 0 never collects");
    }

    #[test]
    fn the_scan_period_follows_the_ttl_within_bounds() {
        assert_eq!(scan_period(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(scan_period(Duration::from_secs(300)), Duration::from_secs(30));
        assert_eq!(scan_period(Duration::from_secs(86_400)), Duration::from_secs(60));
    }
}
