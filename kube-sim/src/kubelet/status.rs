//! The pod status a kubelet reports, computed from the simulated runtime.
//!
//! Phase, container statuses and the conditions follow the kubelet's own code
//! (`pkg/kubelet/kubelet_pods.go` `getPhase`, `pkg/kubelet/status/generate.go`), including the
//! exact reasons and messages, because controllers and people read them: `Ready` is the
//! containers' readiness AND every `spec.readinessGates` condition being `True`, evaluated against
//! the conditions controllers wrote into the pod status.

use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, HostIP,
    Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::behaviour::PodBehaviour;
use super::image;
use super::quantity;
use super::runtime::{ContainerRuntime, Kind, PodRuntime, State, Termination};

/// Condition types the kubelet owns (it overwrites them; every other condition belongs to
/// controllers and is left alone), in the order it writes them.
#[cfg(test)]
pub(crate) const KUBELET_CONDITIONS: [&str; 5] =
    ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"];

/// Everything the status depends on.
pub(super) struct StatusInput<'a> {
    pub pod: &'a Pod,
    pub runtime: &'a PodRuntime,
    pub behaviour: &'a PodBehaviour,
    pub ready_delay: Duration,
    pub now: Timestamp,
}

/// The part of the status the kubelet writes: every field it owns and only its own conditions.
pub(super) fn generate(input: &StatusInput<'_>) -> PodStatus {
    let runtime = input.runtime;
    let init_statuses: Vec<_> = runtime.init_containers.iter().map(|c| container_status(c, input)).collect();
    let statuses: Vec<_> = runtime.containers.iter().map(|c| container_status(c, input)).collect();
    let sidecar_statuses: Vec<_> = runtime
        .init_containers
        .iter()
        .zip(&init_statuses)
        .filter(|(c, _)| c.kind == Kind::Sidecar)
        .map(|(_, status)| status)
        .collect();
    let phase = phase(input.pod, &statuses, runtime.stopped);
    let generation = input.pod.metadata.generation;
    let ip = runtime.ip.to_string();
    let host_ip = runtime.host_ip.to_string();

    let sandbox_ready =
        !(runtime.stopped && runtime.all_containers().all(|c| !matches!(c.state, State::Running { .. })));
    let mut conditions = vec![
        condition("PodReadyToStartContainers", sandbox_ready, None, None),
        condition("Initialized", true, None, None),
    ];
    let containers_ready = containers_ready(input.pod, &statuses, &sidecar_statuses, phase);
    conditions.push(pod_ready(input.pod, &containers_ready));
    conditions.push(containers_ready);
    conditions.push(condition("PodScheduled", true, None, None));
    let observed = input.pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    for condition in &mut conditions {
        condition.observed_generation = generation;
        let previous = observed.into_iter().flatten().find(|c| c.type_ == condition.type_);
        let transition = match previous {
            Some(previous) if previous.status == condition.status => previous.last_transition_time.clone(),
            _ => None,
        };
        condition.last_transition_time = Some(transition.unwrap_or(Time(input.now)));
    }

    PodStatus {
        phase: Some(phase.to_owned()),
        conditions: Some(conditions),
        host_ip: Some(host_ip.clone()),
        host_ips: Some(vec![HostIP { ip: host_ip }]),
        pod_ip: Some(ip.clone()),
        pod_ips: Some(vec![PodIP { ip }]),
        start_time: Some(Time(runtime.start_time)),
        qos_class: Some(qos_class(input.pod).to_owned()),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        observed_generation: generation,
        ..Default::default()
    }
}

/// Whether the observed status differs from what the kubelet wants in any field it owns: every field `desired` sets
/// must be equal in `observed`, and each of the kubelet's conditions equal to the observed condition of its type
/// (controllers' conditions are theirs). The comparison is typed — it runs for every pod event, and serializing both
/// statuses to JSON for it was 4–5 % of the benchmark process's CPU at 5,000 pods — and agrees with comparing the
/// serialized statuses as long as `desired` holds whole seconds (the API's timestamps do; see [`whole_seconds`]):
/// `tests::typed_differs_agrees_with_the_json_comparison`.
pub(super) fn differs(observed: Option<&PodStatus>, desired: &PodStatus) -> bool {
    let absent = PodStatus::default();
    let have = observed.unwrap_or(&absent);
    fn set_and_unequal<T: PartialEq>(want: &Option<T>, have: &Option<T>) -> bool {
        want.is_some() && want != have
    }
    let PodStatus {
        conditions,
        container_statuses,
        ephemeral_container_statuses,
        extended_resource_claim_status,
        host_ip,
        host_ips,
        init_container_statuses,
        message,
        node_allocatable_resource_claim_statuses,
        nominated_node_name,
        observed_generation,
        phase,
        pod_ip,
        pod_ips,
        qos_class,
        reason,
        resize,
        resource_claim_statuses,
        resources,
        start_time,
        allocated_resources,
        volume_health,
    } = desired;
    let observed_conditions = have.conditions.as_deref().unwrap_or_default();
    let condition_differs =
        |want: &PodCondition| observed_conditions.iter().find(|c| c.type_ == want.type_) != Some(want);
    set_and_unequal(container_statuses, &have.container_statuses)
        || set_and_unequal(ephemeral_container_statuses, &have.ephemeral_container_statuses)
        || set_and_unequal(extended_resource_claim_status, &have.extended_resource_claim_status)
        || set_and_unequal(host_ip, &have.host_ip)
        || set_and_unequal(host_ips, &have.host_ips)
        || set_and_unequal(init_container_statuses, &have.init_container_statuses)
        || set_and_unequal(message, &have.message)
        || set_and_unequal(node_allocatable_resource_claim_statuses, &have.node_allocatable_resource_claim_statuses)
        || set_and_unequal(nominated_node_name, &have.nominated_node_name)
        || set_and_unequal(observed_generation, &have.observed_generation)
        || set_and_unequal(phase, &have.phase)
        || set_and_unequal(pod_ip, &have.pod_ip)
        || set_and_unequal(pod_ips, &have.pod_ips)
        || set_and_unequal(qos_class, &have.qos_class)
        || set_and_unequal(reason, &have.reason)
        || set_and_unequal(resize, &have.resize)
        || set_and_unequal(resource_claim_statuses, &have.resource_claim_statuses)
        || set_and_unequal(resources, &have.resources)
        || set_and_unequal(start_time, &have.start_time)
        || set_and_unequal(allocated_resources, &have.allocated_resources)
        || set_and_unequal(volume_health, &have.volume_health)
        || conditions.iter().flatten().any(condition_differs)
}

/// `status` with every timestamp cut to the whole second, as the API stores it: the kubelet's runtime keeps
/// sub-second times, which [`differs`] would otherwise see as unequal to the stored ones.
pub(super) fn whole_seconds(mut status: PodStatus) -> PodStatus {
    fn cut(time: &mut Option<Time>) {
        if let Some(Time(at)) = time {
            *at = Timestamp::from_second(at.as_second()).unwrap_or(*at);
        }
    }
    fn cut_state(state: &mut Option<ContainerState>) {
        let Some(state) = state else { return };
        if let Some(running) = &mut state.running {
            cut(&mut running.started_at);
        }
        if let Some(terminated) = &mut state.terminated {
            cut(&mut terminated.started_at);
            cut(&mut terminated.finished_at);
        }
    }
    cut(&mut status.start_time);
    for condition in status.conditions.iter_mut().flatten() {
        cut(&mut condition.last_probe_time);
        cut(&mut condition.last_transition_time);
    }
    let containers = [&mut status.container_statuses, &mut status.init_container_statuses];
    for container in containers.into_iter().flatten().flatten() {
        cut_state(&mut container.state);
        cut_state(&mut container.last_state);
    }
    status
}

/// The status patch the kubelet sends (a strategic merge patch of `pods/status`: conditions merge
/// by type, so controllers' conditions survive). `resourceVersion` makes it conditional on the
/// status it was computed from, so a Ready=True computed before a controller set a readiness gate
/// to False is rejected instead of written.
pub(super) fn patch(pod: &Pod, desired: &PodStatus) -> Value {
    let mut status = to_value(desired);
    // Merging a condition keeps the fields the patch leaves out, so a reason or message that no
    // longer applies must be removed explicitly, as the kubelet's generated patch does.
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
            for field in ["reason", "message", "lastProbeTime"] {
                condition.entry(field).or_insert(Value::Null);
            }
        }
    }
    json!({
        "metadata": {
            "uid": pod.metadata.uid,
            "resourceVersion": pod.metadata.resource_version,
        },
        "status": status,
    })
}

fn to_value(status: &PodStatus) -> Value {
    // Serializing plain data structures cannot fail.
    serde_json::to_value(status).unwrap_or(Value::Null)
}

fn condition(type_: &str, status: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        ..Default::default()
    }
}

fn container_status(container: &ContainerRuntime, input: &StatusInput<'_>) -> ContainerStatus {
    let behaviour = input.behaviour.container(&container.name, input.ready_delay);
    let terminated = |t: &Termination| ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: t.exit_code,
            reason: Some(t.reason.clone()),
            started_at: Some(Time(t.started_at)),
            finished_at: Some(Time(t.finished_at)),
            container_id: Some(t.container_id.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let waiting = |reason: &str, message: Option<String>| ContainerState {
        waiting: Some(ContainerStateWaiting { reason: Some(reason.to_owned()), message }),
        ..Default::default()
    };
    // The real API shows `lastState: {}` when there is none.
    let mut last_state = container.last_termination.as_ref().map(terminated).unwrap_or_default();
    let (state, ready, started) = match &container.state {
        State::Creating { .. } => (waiting("ContainerCreating", None), false, false),
        State::Running { started_at } => {
            let (ready, started) = match container.process {
                Some(probed) => (probed.ready, probed.started),
                None => (container.ready_at(behaviour.ready_after).is_some_and(|at| at <= input.now), true),
            };
            let running = ContainerStateRunning { started_at: Some(Time(*started_at)) };
            (ContainerState { running: Some(running), ..Default::default() }, ready, started)
        }
        State::Exited { termination, .. } => {
            // A completed init container stays ready, as on a kubelet.
            let ready = container.kind == Kind::Init && termination.exit_code == 0;
            (terminated(termination), ready, false)
        }
        State::BackOff { termination, delay, .. } => {
            last_state = terminated(termination);
            let pod = &input.pod.metadata;
            let message = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                go_duration(*delay),
                container.name,
                pod.name.as_deref().unwrap_or_default(),
                pod.namespace.as_deref().unwrap_or_default(),
                pod.uid.as_deref().unwrap_or_default(),
            );
            (waiting("CrashLoopBackOff", Some(message)), false, false)
        }
    };
    let never_created = container.container_id.is_none();
    ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone(),
        image_id: if never_created { String::new() } else { image::image_id(&container.image) },
        container_id: container.container_id.clone(),
        ready,
        started: Some(started),
        restart_count: container.restart_count,
        state: Some(state),
        last_state: Some(last_state),
        ..Default::default()
    }
}

/// `getPhase` of the kubelet, over the regular containers' statuses.
fn phase(pod: &Pod, statuses: &[ContainerStatus], terminal: bool) -> &'static str {
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for status in statuses {
        let state = status.state.as_ref();
        if let Some(terminated) = state.and_then(|s| s.terminated.as_ref()) {
            stopped += 1;
            if terminated.exit_code == 0 {
                succeeded += 1;
            }
        } else if state.is_some_and(|s| s.running.is_some()) {
            running += 1;
        } else if status.last_state.as_ref().is_some_and(|s| s.terminated.is_some()) {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    let restart_policy = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
    if terminal && waiting == 0 && running == 0 {
        return if stopped == succeeded { "Succeeded" } else { "Failed" };
    }
    if terminal && running == 0 {
        // Deleted before its containers ever started: it will never run.
        return "Failed";
    }
    match () {
        _ if waiting > 0 => "Pending",
        _ if running > 0 => "Running",
        _ if stopped > 0 => match restart_policy {
            None | Some("Always") => "Running",
            _ if stopped == succeeded => "Succeeded",
            Some("Never") => "Failed",
            _ => "Running",
        },
        _ => "Pending",
    }
}

/// `GenerateContainersReadyCondition` of the kubelet.
fn containers_ready(
    pod: &Pod,
    statuses: &[ContainerStatus],
    sidecars: &[&ContainerStatus],
    phase: &str,
) -> PodCondition {
    match phase {
        "Succeeded" => return condition("ContainersReady", false, Some("PodCompleted"), None),
        "Failed" => return condition("ContainersReady", false, Some("PodFailed"), None),
        _ => {}
    }
    let mut unknown = Vec::new();
    let mut unready = Vec::new();
    let spec_names = pod.spec.iter().flat_map(|spec| &spec.containers).map(|c| c.name.as_str());
    let sidecar_names = sidecars.iter().map(|s| s.name.as_str());
    for name in sidecar_names.chain(spec_names) {
        match statuses.iter().chain(sidecars.iter().copied()).find(|s| s.name == name) {
            Some(status) if !status.ready => unready.push(name),
            Some(_) => {}
            None => unknown.push(name),
        }
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!("containers with unknown status: [{}]", unknown.join(" ")));
    }
    if !unready.is_empty() {
        messages.push(format!("containers with unready status: [{}]", unready.join(" ")));
    }
    if messages.is_empty() {
        condition("ContainersReady", true, None, None)
    } else {
        condition("ContainersReady", false, Some("ContainersNotReady"), Some(messages.join(", ")))
    }
}

/// `GeneratePodReadyCondition` of the kubelet: containers ready AND every readiness gate True.
fn pod_ready(pod: &Pod, containers_ready: &PodCondition) -> PodCondition {
    if containers_ready.status != "True" {
        return PodCondition { type_: "Ready".into(), ..containers_ready.clone() };
    }
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref());
    let unready: Vec<String> = gates
        .into_iter()
        .flatten()
        .filter_map(|gate| {
            let gate_type = &gate.condition_type;
            match conditions.into_iter().flatten().find(|c| &c.type_ == gate_type) {
                None => Some(format!("corresponding condition of pod readiness gate {gate_type:?} does not exist.")),
                Some(c) if c.status != "True" => {
                    Some(format!("the status of pod readiness gate {gate_type:?} is not \"True\", but {}", c.status))
                }
                Some(_) => None,
            }
        })
        .collect();
    if unready.is_empty() {
        condition("Ready", true, None, None)
    } else {
        condition("Ready", false, Some("ReadinessGatesNotReady"), Some(unready.join(", ")))
    }
}

/// `GetPodQOS`: Guaranteed when every container has equal CPU and memory requests and limits,
/// BestEffort when none has any, Burstable otherwise.
pub(super) fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else {
        return "BestEffort";
    };
    let mut any = false;
    let mut guaranteed = true;
    for container in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
        let resources = container.resources.as_ref();
        let requests = resources.and_then(|r| r.requests.as_ref());
        let limits = resources.and_then(|r| r.limits.as_ref());
        any |= requests.is_some_and(|r| !r.is_empty()) || limits.is_some_and(|l| !l.is_empty());
        for resource in ["cpu", "memory"] {
            let limit = limits.and_then(|l| l.get(resource)).and_then(|q| quantity::parse(&q.0));
            // A request defaults to the limit when only the limit is set.
            let request = requests.and_then(|r| r.get(resource)).and_then(|q| quantity::parse(&q.0)).or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Formats a duration like Go's `time.Duration.String` (`10s`, `2m40s`, `5m0s`, `300ms`), which is
/// how kubelet messages show back-off delays.
pub(super) fn go_duration(duration: Duration) -> String {
    let total_ms = duration.as_millis();
    if total_ms < 1000 {
        return format!("{total_ms}ms");
    }
    let hours = total_ms / 3_600_000;
    let minutes = total_ms / 60_000 % 60;
    let millis = total_ms % 60_000;
    let seconds = if millis.is_multiple_of(1000) {
        format!("{}s", millis / 1000)
    } else {
        format!("{}s", (millis as f64 / 1000.0))
    };
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::runtime::PodInput;
    use crate::kubelet::runtime::fixtures::{TIMINGS, t};
    use k8s_openapi::api::core::v1::{Container, PodReadinessGate, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::net::Ipv4Addr;

    fn pod(containers: &[&str], gates: &[&str], annotations: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("default".into()),
                uid: Some("uid-1".into()),
                resource_version: Some("7".into()),
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: containers
                    .iter()
                    .map(|name| Container {
                        name: name.to_string(),
                        image: Some(format!("{name}:v1")),
                        ..Default::default()
                    })
                    .collect(),
                readiness_gates: (!gates.is_empty())
                    .then(|| gates.iter().map(|g| PodReadinessGate { condition_type: g.to_string() }).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Runs the pod to `now` and returns the status the kubelet would report.
    fn status_at(pod: &Pod, runtime: &mut PodRuntime, now: Timestamp) -> PodStatus {
        let behaviour = PodBehaviour::from_annotations(pod.metadata.annotations.as_ref()).0;
        runtime.advance(&PodInput { pod, behaviour: &behaviour, timings: &TIMINGS, now });
        let input = StatusInput { pod, runtime, behaviour: &behaviour, ready_delay: TIMINGS.ready_delay, now };
        generate(&input)
    }

    fn runtime(pod: &Pod) -> PodRuntime {
        let ip = Ipv4Addr::new(127, 1, 0, 1);
        let host = Ipv4Addr::new(127, 0, 100, 1);
        PodRuntime::start(pod, "node-1", ip, host, &TIMINGS, t(0))
    }

    fn cond<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
        status.conditions.iter().flatten().find(|c| c.type_ == type_).unwrap()
    }

    fn set_condition(pod: &mut Pod, type_: &str, value: &str) {
        let status = pod.status.get_or_insert_with(Default::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != type_);
        conditions.push(PodCondition { type_: type_.into(), status: value.into(), ..Default::default() });
    }

    #[test]
    fn pending_then_running_then_ready() {
        let pod = pod(&["app"], &[], &[]);
        let mut rt = runtime(&pod);

        let status = status_at(&pod, &mut rt, t(50));
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(app.image, "app:v1");
        assert_eq!(app.image_id, "");
        assert_eq!(app.container_id, None);
        let waiting = app.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
        assert_eq!(status.pod_ip.as_deref(), Some("127.1.0.1"));
        assert_eq!(status.host_ip.as_deref(), Some("127.0.100.1"));
        assert_eq!(cond(&status, "ContainersReady").status, "False");
        assert_eq!(cond(&status, "Ready").message.as_deref(), Some("containers with unready status: [app]"));

        let status = status_at(&pod, &mut rt, t(200));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert!(!app.ready);
        assert_eq!(app.started, Some(true));
        assert_eq!(app.image_id, image::image_id("app:v1"));
        assert!(app.container_id.as_deref().unwrap().starts_with("docker://"));

        let status = status_at(&pod, &mut rt, t(400));
        assert!(status.container_statuses.as_ref().unwrap()[0].ready);
        for type_ in KUBELET_CONDITIONS {
            assert_eq!(cond(&status, type_).status, "True", "{type_}");
        }
        assert_eq!(cond(&status, "Ready").last_transition_time, Some(Time(t(400))));
        let order: Vec<_> = status.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
        assert_eq!(order, KUBELET_CONDITIONS);
    }

    #[test]
    fn readiness_gates_must_all_be_true() {
        let mut pod = pod(&["app"], &["InPlaceUpdateReady", "other"], &[]);
        let mut rt = runtime(&pod);
        let status = status_at(&pod, &mut rt, t(1000));
        assert_eq!(cond(&status, "ContainersReady").status, "True");
        let ready = cond(&status, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "corresponding condition of pod readiness gate \"InPlaceUpdateReady\" does not \
                 exist., corresponding condition of pod readiness gate \"other\" does not exist."
            )
        );

        set_condition(&mut pod, "InPlaceUpdateReady", "True");
        set_condition(&mut pod, "other", "False");
        let status = status_at(&pod, &mut rt, t(1100));
        assert_eq!(
            cond(&status, "Ready").message.as_deref(),
            Some("the status of pod readiness gate \"other\" is not \"True\", but False")
        );

        set_condition(&mut pod, "other", "True");
        let status = status_at(&pod, &mut rt, t(1200));
        assert_eq!(cond(&status, "Ready").status, "True");
        assert!(
            status.conditions.iter().flatten().all(|c| KUBELET_CONDITIONS.contains(&&*c.type_)),
            "the kubelet never writes controllers' conditions"
        );

        // A controller flips the gate back (in-place update starting): Ready follows.
        set_condition(&mut pod, "InPlaceUpdateReady", "False");
        let status = status_at(&pod, &mut rt, t(1300));
        assert_eq!(cond(&status, "Ready").status, "False");
        assert_eq!(cond(&status, "ContainersReady").status, "True");
    }

    #[test]
    fn unready_containers_win_over_gates_in_the_ready_message() {
        let pod = pod(&["a", "b"], &["gate"], &[("kube-sim.kourse.dev/never-ready", "b")]);
        let mut rt = runtime(&pod);
        let status = status_at(&pod, &mut rt, t(5000));
        let ready = cond(&status, "Ready");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(ready.message.as_deref(), Some("containers with unready status: [b]"));
    }

    #[test]
    fn transition_times_are_kept_while_status_is_unchanged() {
        let mut pod = pod(&["app"], &[], &[]);
        let mut rt = runtime(&pod);
        let first = status_at(&pod, &mut rt, t(1000));
        pod.status = Some(first.clone());
        let later = status_at(&pod, &mut rt, t(60_000));
        assert_eq!(cond(&later, "Ready").last_transition_time, Some(Time(t(1000))));
        assert!(!differs(Some(&first), &later), "nothing changed");
    }

    #[test]
    fn image_update_shows_restart_and_new_image_id() {
        let mut pod = pod(&["app", "side"], &[], &[]);
        let mut rt = runtime(&pod);
        status_at(&pod, &mut rt, t(1000));
        pod.spec.as_mut().unwrap().containers[0].image = Some("app:v2".into());

        let status = status_at(&pod, &mut rt, t(2000));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert!(!app.ready);
        assert_eq!(app.image_id, image::image_id("app:v1"), "old instance until restart");
        assert!(app.state.as_ref().unwrap().terminated.is_some());
        assert_eq!(cond(&status, "Ready").message.as_deref(), Some("containers with unready status: [app]"));
        assert_eq!(status.phase.as_deref(), Some("Running"));

        let status = status_at(&pod, &mut rt, t(2250));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(app.restart_count, 1);
        assert_eq!(app.image, "app:v2");
        assert_eq!(app.image_id, image::image_id("app:v2"));
        assert!(!app.ready, "not ready until the ready delay passed");
        let last = app.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(last.exit_code, 0);
        assert_eq!(last.finished_at, Some(Time(t(2000))));

        let status = status_at(&pod, &mut rt, t(2600));
        let statuses = status.container_statuses.as_ref().unwrap();
        assert!(statuses[0].ready);
        assert_eq!((statuses[1].restart_count, statuses[1].ready), (0, true));
    }

    #[test]
    fn crash_loop_shows_back_off() {
        let pod = pod(&["app"], &[], &[("kube-sim.kourse.dev/crash-loop", "true")]);
        let mut rt = runtime(&pod);
        let status = status_at(&pod, &mut rt, t(2400));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        let waiting = app.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(
            waiting.message.as_deref(),
            Some("back-off 10s restarting failed container=app pod=web-0_default(uid-1)")
        );
        assert_eq!(app.restart_count, 1);
        assert_eq!(app.last_state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 1);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&status, "Ready").status, "False");
    }

    #[test]
    fn deleted_pod_ends_succeeded() {
        let mut pod = pod(&["app"], &[], &[]);
        let mut rt = runtime(&pod);
        status_at(&pod, &mut rt, t(1000));
        pod.metadata.deletion_timestamp = Some(Time(t(31_000)));
        pod.metadata.deletion_grace_period_seconds = Some(30);
        let status = status_at(&pod, &mut rt, t(1000));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.container_statuses.as_ref().unwrap()[0].ready, "ready while terminating");
        let status = status_at(&pod, &mut rt, t(5000));
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        assert_eq!(cond(&status, "Ready").reason.as_deref(), Some("PodCompleted"));
        assert_eq!(cond(&status, "PodReadyToStartContainers").status, "False");
    }

    #[test]
    fn restart_policy_never_fails_on_error_exit() {
        let mut pod =
            pod(&["job"], &[], &[("kube-sim.kourse.dev/exit-after", "1s"), ("kube-sim.kourse.dev/exit-code", "2")]);
        pod.spec.as_mut().unwrap().restart_policy = Some("Never".into());
        let mut rt = runtime(&pod);
        let status = status_at(&pod, &mut rt, t(5000));
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(cond(&status, "ContainersReady").reason.as_deref(), Some("PodFailed"));
    }

    #[test]
    fn differs_only_looks_at_kubelet_fields() {
        let mut pod = pod(&["app"], &[], &[]);
        let mut rt = runtime(&pod);
        let desired = status_at(&pod, &mut rt, t(1000));
        let mut observed = desired.clone();
        observed.conditions.as_mut().unwrap().push(PodCondition {
            type_: "InPlaceUpdateReady".into(),
            status: "True".into(),
            ..Default::default()
        });
        observed.nominated_node_name = Some("x".into());
        assert!(!differs(Some(&observed), &desired));
        observed.container_statuses.as_mut().unwrap()[0].ready = false;
        assert!(differs(Some(&observed), &desired));
        assert!(differs(None, &desired));
        pod.status = Some(desired.clone());
        let patch = patch(&pod, &desired);
        assert_eq!(patch["metadata"]["uid"], "uid-1");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(patch["status"]["podIP"], "127.1.0.1");
        assert_eq!(patch["status"]["podIPs"], json!([{"ip": "127.1.0.1"}]));
        let ready = &patch["status"]["conditions"][2];
        assert_eq!(ready["type"], "Ready");
        assert_eq!(ready["status"], "True");
        assert!(ready["message"].is_null() && ready.get("message").is_some(), "stale messages are removed");
        assert!(ready["reason"].is_null() && ready.get("reason").is_some());
    }

    /// What [`differs`] was before it compared typed fields: both statuses serialized, every field `desired` sets
    /// equal in `observed`, the kubelet's conditions matched by type.
    fn differs_through_json(observed: Option<&PodStatus>, desired: &PodStatus) -> bool {
        let observed = observed.map(to_value).unwrap_or(Value::Null);
        let Value::Object(desired) = to_value(desired) else { return true };
        desired.iter().any(|(key, want)| {
            if key != "conditions" {
                return observed.get(key) != Some(want);
            }
            let have = observed.get("conditions").and_then(Value::as_array);
            want.as_array().into_iter().flatten().any(|condition| {
                let same_type = |c: &&Value| c.get("type") == condition.get("type");
                have.and_then(|have| have.iter().find(same_type)) != Some(condition)
            })
        })
    }

    #[test]
    fn typed_differs_agrees_with_the_json_comparison() {
        // Statuses over two pods' lives, every 250 ms: created, running, ready, an image changed (restart), a
        // readiness gate flipped by a controller, a crash loop, deleted; as the API stores them (whole seconds).
        let mut statuses = Vec::new();
        let mut gated = pod(&["app", "side"], &["InPlaceUpdateReady"], &[]);
        let mut rt = runtime(&gated);
        for step in 0..40 {
            if step == 12 {
                gated.spec.as_mut().unwrap().containers[0].image = Some("app:v2".into());
            }
            set_condition(&mut gated, "InPlaceUpdateReady", if (8..20).contains(&step) { "False" } else { "True" });
            if step == 30 {
                gated.metadata.deletion_timestamp = Some(Time(t(step * 250)));
            }
            let status = whole_seconds(status_at(&gated, &mut rt, t(step * 250)));
            gated.status = Some(status.clone());
            set_condition(&mut gated, "InPlaceUpdateReady", "True");
            statuses.push(status);
        }
        let crashing =
            pod(&["job"], &[], &[("kube-sim.kourse.dev/exit-after", "1s"), ("kube-sim.kourse.dev/exit-code", "1")]);
        let mut rt = runtime(&crashing);
        for step in 0..30 {
            statuses.push(whole_seconds(status_at(&crashing, &mut rt, t(step * 700))));
        }
        // Observed statuses as controllers and other writers leave them: an extra condition, a condition of the
        // kubelet's changed, a field the kubelet does not set, a field it sets removed, an empty list of conditions.
        let mut observed: Vec<Option<PodStatus>> = vec![None, Some(PodStatus::default())];
        for status in &statuses {
            observed.push(Some(status.clone()));
            let mut other = status.clone();
            other.conditions.get_or_insert_with(Vec::new).push(condition("Custom", true, None, None));
            other.nominated_node_name = Some("node-2".into());
            observed.push(Some(other.clone()));
            if let Some(first) = other.conditions.as_mut().and_then(|c| c.first_mut()) {
                first.message = Some("changed".into());
            }
            observed.push(Some(other));
            let mut fewer = status.clone();
            fewer.conditions = Some(Vec::new());
            observed.push(Some(fewer));
            // Each field the kubelet sets, alone missing or changed.
            let Value::Object(fields) = to_value(status) else { unreachable!() };
            for key in fields.keys() {
                let mut without = fields.clone();
                without.remove(key);
                observed.push(Some(serde_json::from_value(Value::Object(without)).unwrap()));
            }
            let mut restarted = status.clone();
            restarted.container_statuses.iter_mut().flatten().for_each(|c| c.restart_count += 1);
            observed.push(Some(restarted));
        }
        let mut desired = statuses.clone();
        let mut no_conditions = statuses[0].clone();
        no_conditions.conditions = Some(Vec::new());
        desired.push(no_conditions);
        let (mut same, mut different) = (0, 0);
        for want in &desired {
            for have in &observed {
                let expected = differs_through_json(have.as_ref(), want);
                assert_eq!(differs(have.as_ref(), want), expected, "observed {have:?}\ndesired {want:?}");
                if expected { different += 1 } else { same += 1 }
            }
        }
        assert!(
            same > desired.len() && different > desired.len(),
            "both verdicts covered: {same} same, {different} different"
        );
    }

    #[test]
    fn whole_seconds_is_what_the_api_keeps() {
        let pod = pod(&["app"], &[], &[]);
        let mut rt = runtime(&pod);
        let status = status_at(&pod, &mut rt, t(1_750));
        let cut = whole_seconds(status.clone());
        assert_ne!(status, cut, "the runtime's times have milliseconds");
        assert_eq!(to_value(&status), to_value(&cut), "serialized, nothing changed");
        let running = cut.container_statuses.as_ref().unwrap()[0].state.as_ref().unwrap().running.as_ref().unwrap();
        assert_eq!(running.started_at, Some(Time(t(0))), "started at 100 ms, cut to the second");
        assert!(!differs(Some(&serde_json::from_value(to_value(&status)).unwrap()), &cut));
        assert!(differs(Some(&serde_json::from_value(to_value(&status)).unwrap()), &status), "why the cut is needed");
    }

    #[test]
    fn qos_classes() {
        let mut pod = pod(&["app"], &[], &[]);
        assert_eq!(qos_class(&pod), "BestEffort");
        let quantities = |cpu: &str, mem: &str| {
            Some(
                [("cpu", cpu), ("memory", mem)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect(),
            )
        };
        pod.spec.as_mut().unwrap().containers[0].resources =
            Some(ResourceRequirements { limits: quantities("1", "1Gi"), ..Default::default() });
        assert_eq!(qos_class(&pod), "Guaranteed");
        pod.spec.as_mut().unwrap().containers[0].resources = Some(ResourceRequirements {
            limits: quantities("1", "1Gi"),
            requests: quantities("500m", "1Gi"),
            ..Default::default()
        });
        assert_eq!(qos_class(&pod), "Burstable");
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(160)), "2m40s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_millis(200)), "200ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
    }
}
