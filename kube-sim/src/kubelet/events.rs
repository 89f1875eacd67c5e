//! The Events a scheduler and kubelet record, so `kubectl describe pod` and `kubectl get events`
//! tell the same story as on a real cluster (`Scheduled`, `Pulled`, `Created`, `Started`,
//! `Killing`, `BackOff`, `FailedScheduling`), with the real components' reasons and wording.
//!
//! They are written as core/v1 Events, which is what `kubectl describe` reads.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::runtime::{KillReason, Kind, Transition};

/// Distinguishes events created within the same nanosecond.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Who reports an event.
#[derive(Clone, Copy, Debug)]
enum Reporter<'a> {
    Scheduler,
    Kubelet { node: &'a str },
}

fn event(
    pod: &Pod,
    reporter: Reporter<'_>,
    field_path: Option<String>,
    type_: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> Event {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    // client-go names events `<object>.<hex nanoseconds>`; the sequence keeps them unique here.
    let nanos = now.as_nanosecond() as u128 + u128::from(SEQUENCE.fetch_add(1, Ordering::Relaxed));
    let (component, host) = match reporter {
        Reporter::Scheduler => ("default-scheduler", None),
        Reporter::Kubelet { node } => ("kubelet", Some(node.to_owned())),
    };
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{nanos:x}")),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: Some(namespace),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            field_path,
        },
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some(type_.into()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        source: Some(EventSource { component: Some(component.into()), host: host.clone() }),
        reporting_component: Some(component.into()),
        reporting_instance: Some(host.unwrap_or_else(|| component.into())),
        ..Default::default()
    }
}

/// `Scheduled`, from the scheduler, once the pod is bound.
pub(super) fn scheduled(pod: &Pod, node: &str, now: Timestamp) -> Event {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let message = format!("Successfully assigned {namespace}/{name} to {node}");
    event(pod, Reporter::Scheduler, None, "Normal", "Scheduled", message, now)
}

/// `FailedScheduling`, from the scheduler, with its explanation.
pub(super) fn failed_scheduling(pod: &Pod, message: &str, now: Timestamp) -> Event {
    event(pod, Reporter::Scheduler, None, "Warning", "FailedScheduling", message.to_owned(), now)
}

/// The kubelet's events for one runtime transition.
pub(super) fn for_transition(pod: &Pod, node: &str, transition: &Transition, now: Timestamp) -> Vec<Event> {
    let reporter = Reporter::Kubelet { node };
    let field_path = |kind: Kind, container: &str| {
        let list = if kind == Kind::Regular { "containers" } else { "initContainers" };
        Some(format!("spec.{list}{{{container}}}"))
    };
    let kubelet = |kind: Kind, container: &str, type_: &str, reason: &str, message: String| {
        event(pod, reporter, field_path(kind, container), type_, reason, message, now)
    };
    match transition {
        Transition::Started { container, kind, image } => {
            let mut events = Vec::new();
            if pulls_always(pod, container, image) {
                events.push(kubelet(*kind, container, "Normal", "Pulling", format!("Pulling image {image:?}")));
                let message = format!("Successfully pulled image {image:?} in 0s (0s including waiting)");
                events.push(kubelet(*kind, container, "Normal", "Pulled", message));
            } else {
                let message = format!("Container image {image:?} already present on machine");
                events.push(kubelet(*kind, container, "Normal", "Pulled", message));
            }
            events.push(kubelet(*kind, container, "Normal", "Created", format!("Created container: {container}")));
            events.push(kubelet(*kind, container, "Normal", "Started", format!("Started container {container}")));
            events
        }
        Transition::Killing { container, kind, reason } => {
            let message = match reason {
                KillReason::PodDeleted => format!("Stopping container {container}"),
                KillReason::SpecChanged => format!("Container {container} definition changed, will be restarted"),
            };
            vec![kubelet(*kind, container, "Normal", "Killing", message)]
        }
        Transition::BackOff { container, kind } => {
            let meta = &pod.metadata;
            let message = format!(
                "Back-off restarting failed container {container} in pod {}_{}({})",
                meta.name.as_deref().unwrap_or_default(),
                meta.namespace.as_deref().unwrap_or_default(),
                meta.uid.as_deref().unwrap_or_default(),
            );
            vec![kubelet(*kind, container, "Warning", "BackOff", message)]
        }
    }
}

/// Whether the container's pull policy (or the API server's default for it) is `Always`.
fn pulls_always(pod: &Pod, container: &str, image: &str) -> bool {
    let spec = pod.spec.as_ref();
    let declared = spec
        .into_iter()
        .flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()))
        .find(|c| c.name == container);
    match declared.and_then(|c| c.image_pull_policy.as_deref()) {
        Some(policy) => policy == "Always",
        // Defaulting: `Always` for `:latest` or an untagged image, `IfNotPresent` otherwise.
        None => {
            let without_digest = image.split('@').next().unwrap_or(image);
            let tag = without_digest.rsplit('/').next().and_then(|last| last.split_once(':')).map(|(_, tag)| tag);
            !image.contains('@') && tag.is_none_or(|tag| tag == "latest")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn pod(policy: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("games".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    image: Some("python:3.5".into()),
                    image_pull_policy: policy.map(str::to_owned),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    #[test]
    fn container_start_reads_like_a_kubelet() {
        let started = Transition::Started { container: "app".into(), kind: Kind::Regular, image: "python:3.5".into() };
        let events = for_transition(&pod(Some("IfNotPresent")), "node-1", &started, now());
        let lines: Vec<_> = events
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}",
                    e.type_.as_deref().unwrap(),
                    e.reason.as_deref().unwrap(),
                    e.message.as_deref().unwrap()
                )
            })
            .collect();
        assert_eq!(
            lines,
            [
                "Normal Pulled Container image \"python:3.5\" already present on machine",
                "Normal Created Created container: app",
                "Normal Started Started container app",
            ]
        );
        let first = &events[0];
        assert_eq!(first.involved_object.field_path.as_deref(), Some("spec.containers{app}"));
        assert_eq!(first.involved_object.uid.as_deref(), Some("u-1"));
        assert_eq!(first.source.as_ref().unwrap().host.as_deref(), Some("node-1"));
        assert_eq!(first.metadata.namespace.as_deref(), Some("games"));
        let names: std::collections::HashSet<_> = events.iter().map(|e| e.metadata.name.clone()).collect();
        assert_eq!(names.len(), 3, "unique names");
    }

    #[test]
    fn always_pull_reports_pulling() {
        let started = Transition::Started { container: "app".into(), kind: Kind::Regular, image: "python:3.5".into() };
        let events = for_transition(&pod(Some("Always")), "n", &started, now());
        assert_eq!(events[0].reason.as_deref(), Some("Pulling"));
        assert!(pulls_always(&pod(None), "app", "python"), "untagged defaults to Always");
        assert!(pulls_always(&pod(None), "app", "python:latest"));
        assert!(!pulls_always(&pod(None), "app", "registry:5000/python:3.5"));
    }

    #[test]
    fn killing_backoff_and_scheduler_events() {
        let p = pod(None);
        let kill =
            Transition::Killing { container: "app".into(), kind: Kind::Regular, reason: KillReason::SpecChanged };
        assert_eq!(
            for_transition(&p, "n", &kill, now())[0].message.as_deref(),
            Some("Container app definition changed, will be restarted")
        );
        let back_off = Transition::BackOff { container: "app".into(), kind: Kind::Regular };
        let event = &for_transition(&p, "n", &back_off, now())[0];
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.message.as_deref(), Some("Back-off restarting failed container app in pod web-0_games(u-1)"));
        let scheduled = scheduled(&p, "kube-sim-node-2", now());
        assert_eq!(scheduled.message.as_deref(), Some("Successfully assigned games/web-0 to kube-sim-node-2"));
        assert_eq!(scheduled.source.as_ref().unwrap().component.as_deref(), Some("default-scheduler"));
        assert_eq!(
            failed_scheduling(&p, "0/3 nodes are available.", now()).reason.as_deref(),
            Some("FailedScheduling")
        );
    }
}
