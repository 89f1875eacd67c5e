//! A run's status apart from its measurement histories: what the dispatcher keeps per run (in its slot) to tell
//! whether a round changed the status without copying the histories.

/// A status apart from its measurement histories, to tell whether a plan changed it without copying the histories.
/// Kept per run and overwritten in place: after a run's first rounds, taking it allocates nothing.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Outline {
    phase: Option<common::api::HookPhase>,
    message: Option<String>,
    started_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    metrics: Vec<MetricOutline>,
}

/// A metric result apart from its history.
#[derive(Debug, Default, PartialEq)]
struct MetricOutline {
    name: String,
    phase: Option<common::api::HookPhase>,
    message: Option<String>,
    /// count, successful, failed, inconclusive, error, consecutiveError, consecutiveSuccessful.
    counters: [i32; 7],
}

impl MetricOutline {
    /// Every field of `result` but its history (destructured: a new field must be placed here or ignored here).
    fn parts(result: &common::api::MetricResult) -> (&str, Option<common::api::HookPhase>, &Option<String>, [i32; 7]) {
        let common::api::MetricResult {
            name,
            phase,
            measurements: _,
            message,
            count,
            successful,
            failed,
            inconclusive,
            error,
            consecutive_error,
            consecutive_successful,
        } = result;
        let counters =
            [*count, *successful, *failed, *inconclusive, *error, *consecutive_error, *consecutive_successful];
        (name, *phase, message, counters)
    }
}

impl Outline {
    /// Becomes the outline of `status`, reusing its own strings and list.
    pub(super) fn take(&mut self, status: &common::api::HookRunStatus) {
        let common::api::HookRunStatus { phase, message, started_at, metric_results } = status;
        self.phase = *phase;
        self.message.clone_from(message);
        self.started_at.clone_from(started_at);
        self.metrics.truncate(metric_results.len());
        for (i, result) in metric_results.iter().enumerate() {
            let (name, phase, message, counters) = MetricOutline::parts(result);
            if i == self.metrics.len() {
                self.metrics.push(MetricOutline::default());
            }
            let outline = &mut self.metrics[i];
            outline.name.clear();
            outline.name.push_str(name);
            outline.phase = phase;
            outline.message.clone_from(message);
            outline.counters = counters;
        }
    }

    /// Whether `status` equals the status this outline was taken of, apart from the histories. For a status the
    /// engine planned on top of that one this is exactly "unchanged": the engine changes a history only when it
    /// records a measurement (which also counts it) or completes a metric (which also sets its phase).
    pub(super) fn is_of(&self, status: &common::api::HookRunStatus) -> bool {
        let common::api::HookRunStatus { phase, message, started_at, metric_results } = status;
        self.phase == *phase
            && self.message == *message
            && self.started_at == *started_at
            && self.metrics.len() == metric_results.len()
            && self.metrics.iter().zip(metric_results).all(|(outline, result)| {
                let (name, phase, message, counters) = MetricOutline::parts(result);
                outline.name == name
                    && outline.phase == phase
                    && outline.message == *message
                    && outline.counters == counters
            })
    }
}

#[cfg(test)]
mod tests {
    use common::api::{HookPhase, HookRunStatus, MetricResult};

    use super::Outline;

    /// The outline tells every change of a status but its histories, and taking it again reuses its buffers.
    #[test]
    fn an_outline_sees_every_change_but_the_histories() {
        let status = HookRunStatus {
            phase: Some(HookPhase::Running),
            metric_results: vec![MetricResult { name: "m".into(), count: 1, ..MetricResult::default() }],
            ..HookRunStatus::default()
        };
        let mut outline = Outline::default();
        outline.take(&status);
        assert!(outline.is_of(&status));
        let mut longer = status.clone();
        longer.metric_results[0].measurements.push(common::api::Measurement::default());
        assert!(outline.is_of(&longer), "histories are not compared");
        let changes: [fn(&mut HookRunStatus); 6] = [
            |s| s.phase = Some(HookPhase::Successful),
            |s| s.message = Some("m".into()),
            |s| s.metric_results[0].consecutive_successful = 1,
            |s| s.metric_results[0].message = Some("done".into()),
            |s| s.metric_results[0].name = "n".into(),
            |s| s.metric_results.push(MetricResult::default()),
        ];
        for change in changes {
            let mut changed = status.clone();
            change(&mut changed);
            assert!(!outline.is_of(&changed), "{changed:?}");
        }
        let name = outline.metrics[0].name.as_ptr();
        outline.take(&status);
        assert_eq!(outline.metrics[0].name.as_ptr(), name, "the metric's name is reused, not copied again");
    }
}
