//! Pod predicates both operators need, with the Kubernetes meanings (`podutil.IsPodReady`,
//! `IsPodAvailable`, `controller.IsPodActive`).

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use crate::cached_pod;

/// What the predicates read of a pod: k8s-openapi's [`Pod`] (admission requests, `kubectl gd`) and the
/// operator's [`cached_pod::Pod`] alike.
pub trait PodFields {
    /// A condition as the type holds it (k8s-openapi's, or the cached pod's with shared strings).
    type Condition: ConditionFields;
    /// The pod's metadata.
    fn meta(&self) -> &ObjectMeta;
    /// `status.phase`.
    fn phase(&self) -> Option<&str>;
    /// `status.conditions`, empty when the status has none.
    fn conditions(&self) -> &[Self::Condition];
    /// `status.podIP`.
    fn pod_ip(&self) -> Option<&str>;
    /// `status.hostIP`.
    fn host_ip(&self) -> Option<&str>;
    /// Sum of the container statuses' restart counts.
    fn restarts(&self) -> i32;
}

/// What the predicates read of a pod condition.
pub trait ConditionFields {
    /// `type`.
    fn type_(&self) -> &str;
    /// `status`: `True`, `False`, `Unknown`.
    fn status(&self) -> &str;
    /// `lastTransitionTime`.
    fn last_transition_time(&self) -> Option<&Time>;
}

/// Both condition types have the same field paths.
macro_rules! condition_fields {
    ($condition:ty) => {
        impl ConditionFields for $condition {
            fn type_(&self) -> &str {
                &self.type_
            }
            fn status(&self) -> &str {
                &self.status
            }
            fn last_transition_time(&self) -> Option<&Time> {
                self.last_transition_time.as_ref()
            }
        }
    };
}
condition_fields!(PodCondition);
condition_fields!(cached_pod::PodCondition);

/// Both types have the same field paths.
macro_rules! pod_fields {
    ($pod:ty, $condition:ty) => {
        impl PodFields for $pod {
            type Condition = $condition;
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn phase(&self) -> Option<&str> {
                self.status.as_ref()?.phase.as_deref()
            }
            fn conditions(&self) -> &[$condition] {
                self.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default()
            }
            fn pod_ip(&self) -> Option<&str> {
                self.status.as_ref()?.pod_ip.as_deref()
            }
            fn host_ip(&self) -> Option<&str> {
                self.status.as_ref()?.host_ip.as_deref()
            }
            fn restarts(&self) -> i32 {
                let statuses = self.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
                statuses.iter().map(|c| c.restart_count).sum()
            }
        }
    };
}
pod_fields!(Pod, PodCondition);
pod_fields!(cached_pod::Pod, cached_pod::PodCondition);

impl<T: PodFields + ?Sized> PodFields for &T {
    type Condition = T::Condition;
    fn meta(&self) -> &ObjectMeta {
        (**self).meta()
    }
    fn phase(&self) -> Option<&str> {
        (**self).phase()
    }
    fn conditions(&self) -> &[T::Condition] {
        (**self).conditions()
    }
    fn pod_ip(&self) -> Option<&str> {
        (**self).pod_ip()
    }
    fn host_ip(&self) -> Option<&str> {
        (**self).host_ip()
    }
    fn restarts(&self) -> i32 {
        (**self).restarts()
    }
}

/// Phase `Running` (the phase BCS requires before it runs a hook).
pub fn is_running(pod: &impl PodFields) -> bool {
    phase(pod) == Some("Running")
}

/// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`), unset before the kubelet reports.
pub fn phase(pod: &impl PodFields) -> Option<&str> {
    pod.phase()
}

/// The deletion has started (graceful termination); the pod is on its way out.
pub fn is_terminating(pod: &impl PodFields) -> bool {
    pod.meta().deletion_timestamp.is_some()
}

/// Counts towards replicas: not terminating and not finished (`Succeeded`/`Failed`).
pub fn is_active(pod: &impl PodFields) -> bool {
    !is_terminating(pod) && !matches!(phase(pod), Some("Succeeded" | "Failed"))
}

/// The pod condition of type `type_` (`Ready`, a readiness gate's), if the kubelet or the operator set it.
pub fn condition<'a, P: PodFields>(pod: &'a P, type_: &str) -> Option<&'a P::Condition> {
    pod.conditions().iter().find(|c| c.type_() == type_)
}

/// The `Ready` condition is True (which includes every readiness gate).
pub fn is_ready(pod: &impl PodFields) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status() == "True")
}

/// Running and Ready.
pub fn is_running_and_ready(pod: &impl PodFields) -> bool {
    is_running(pod) && is_ready(pod)
}

/// Ready for at least `min_ready_seconds` at `now`. A Ready condition without a transition time counts as
/// available only when `min_ready_seconds` is 0, as in Kubernetes.
pub fn is_available(pod: &impl PodFields, min_ready_seconds: i32, now: Timestamp) -> bool {
    let Some(ready) = condition(pod, "Ready").filter(|c| c.status() == "True") else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    ready.last_transition_time().is_some_and(|t| t.0.as_second() + i64::from(min_ready_seconds) <= now.as_second())
}

/// When the pod will become available, if it is ready but not yet for `min_ready_seconds`: the time to
/// requeue at.
pub fn available_at(pod: &impl PodFields, min_ready_seconds: i32) -> Option<Timestamp> {
    let ready = condition(pod, "Ready").filter(|c| c.status() == "True")?;
    let since = ready.last_transition_time()?.0;
    Timestamp::from_second(since.as_second() + i64::from(min_ready_seconds)).ok()
}

/// Sum of container restart counts (used to order pods on scale-in).
pub fn restart_count(pod: &impl PodFields) -> i32 {
    pod.restarts()
}

/// `status.podIP`, empty when not assigned yet.
pub fn pod_ip(pod: &impl PodFields) -> &str {
    pod.pod_ip().unwrap_or("")
}

/// `status.hostIP`, empty when not assigned yet.
pub fn host_ip(pod: &impl PodFields) -> &str {
    pod.host_ip().unwrap_or("")
}

/// A label of the pod.
pub fn label<'a>(pod: &'a impl PodFields, key: &str) -> Option<&'a str> {
    pod.meta().labels.as_ref()?.get(key).map(String::as_str)
}

/// An annotation of the pod.
pub fn annotation<'a>(pod: &'a impl PodFields, key: &str) -> Option<&'a str> {
    pod.meta().annotations.as_ref()?.get(key).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(phase: &str, ready: Option<(&str, i64)>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: ready.map(|(status, at)| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: status.into(),
                        last_transition_time: Some(Time(Timestamp::from_second(at).unwrap())),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn readiness_and_availability() {
        let now = Timestamp::from_second(1_000).unwrap();
        let p = pod("Running", Some(("True", 980)));
        assert!(is_running_and_ready(&p));
        assert!(is_available(&p, 0, now));
        assert!(is_available(&p, 20, now));
        assert!(!is_available(&p, 21, now));
        assert_eq!(available_at(&p, 30), Some(Timestamp::from_second(1010).unwrap()));
        let not_ready = pod("Running", Some(("False", 900)));
        assert!(!is_ready(&not_ready) && !is_available(&not_ready, 0, now));
        assert!(!is_running(&pod("Pending", None)));
    }

    #[test]
    fn activity() {
        let mut p = pod("Running", None);
        assert!(is_active(&p));
        p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(is_terminating(&p) && !is_active(&p));
        assert!(!is_active(&pod("Succeeded", None)));
        assert!(!is_active(&pod("Failed", None)));
    }

    #[test]
    fn restarts_sum_over_containers() {
        let mut p = pod("Running", None);
        if let Some(status) = p.status.as_mut() {
            status.container_statuses = Some(vec![
                ContainerStatus { restart_count: 2, ..Default::default() },
                ContainerStatus { restart_count: 3, ..Default::default() },
            ]);
        }
        assert_eq!(restart_count(&p), 5);
    }
}
