//! The simulated container runtime: what each container of a pod is doing, as a pure state
//! machine driven by the pod spec, its annotations and the clock.
//!
//! `advance` replays every transition that is due (container created, exited, restarted after
//! back-off, stopped for deletion) at the instant it was due, not at the instant the kubelet
//! happens to look, so timestamps in the status are exact even on a loaded machine. Readiness is
//! not stored: it is derived from the start time and the current annotations when the status is
//! generated (see `status`).

use std::net::Ipv4Addr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

use super::behaviour::PodBehaviour;
use super::image;

/// Default `terminationGracePeriodSeconds` of a pod.
pub(super) const DEFAULT_GRACE_SECONDS: i64 = 30;
/// Upper bound of transitions replayed in one `advance` (a crash loop with tiny delays after a
/// long pause); the rest is replayed on the next call.
const MAX_TRANSITIONS_PER_ADVANCE: usize = 10_000;

/// Timings the runtime needs from the configuration.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timings {
    pub start_delay: Duration,
    pub ready_delay: Duration,
    pub restart_delay: Duration,
    pub crash_loop_backoff: Duration,
    pub grace_period_scale: f64,
}

impl Timings {
    pub(super) fn backoff_cap(&self) -> Duration {
        self.crash_loop_backoff.saturating_mul(30)
    }

    /// Kubelet back-off: the first exit restarts at once, then 1×, 2×, 4× … the base, capped.
    pub(super) fn backoff(&self, consecutive_exits: u32) -> Duration {
        if consecutive_exits <= 1 {
            return Duration::ZERO;
        }
        let factor = 2u32.saturating_pow(consecutive_exits.saturating_sub(2).min(31));
        self.crash_loop_backoff.saturating_mul(factor).min(self.backoff_cap())
    }

    pub(super) fn scaled_grace(&self, seconds: i64) -> Duration {
        let secs = seconds.max(0) as f64 * self.grace_period_scale;
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

/// `ts + duration`, saturating (only a `Span` with calendar units can make jiff fail, and a
/// `Duration` has none).
pub(super) fn after(ts: Timestamp, duration: Duration) -> Timestamp {
    ts.saturating_add(duration).unwrap_or(Timestamp::MAX)
}

/// Something the kubelet did that it reports as an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Transition {
    /// A container instance was created and started from `image`.
    Started { container: String, kind: Kind, image: String },
    /// A running container is being stopped.
    Killing { container: String, kind: Kind, reason: KillReason },
    /// A crashed container waits before its next restart.
    BackOff { container: String, kind: Kind },
}

/// Why the kubelet stops a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KillReason {
    /// Its image changed (in-place update).
    SpecChanged,
    /// Its pod is being deleted.
    PodDeleted,
}

/// How a container instance ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Termination {
    pub exit_code: i32,
    pub reason: String,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub container_id: String,
}

/// What a container is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Image pull and creation of the first instance; it starts at `at`.
    Creating { at: Timestamp },
    /// The current instance runs.
    Running { started_at: Timestamp },
    /// The current instance exited; the next one starts at `restart_at` (`None`: never, because
    /// of the restart policy or because the pod is stopping).
    Exited { termination: Termination, restart_at: Option<Timestamp> },
    /// Crash-loop back-off after `termination`; the next instance starts at `until`.
    BackOff { termination: Termination, until: Timestamp, delay: Duration },
}

/// Where a container is declared, which decides how it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Regular,
    /// A classic init container: runs to completion before the regular containers (the
    /// simulator completes it instantly).
    Init,
    /// An init container with `restartPolicy: Always`: runs for the pod's lifetime.
    Sidecar,
}

/// One container as the runtime sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ContainerRuntime {
    pub name: String,
    pub kind: Kind,
    /// Image of the current instance (the spec image until the first instance exists).
    pub image: String,
    pub restart_count: i32,
    /// ID of the current (or last) instance; `None` before the first one is created.
    pub container_id: Option<String>,
    pub state: State,
    /// The instance before the current one, shown as `lastState`.
    pub last_termination: Option<Termination>,
    /// Exits since the container last ran long enough to reset the back-off.
    pub consecutive_exits: u32,
    /// `Some` when the container runs as a real process (see `process`): its state is then what
    /// the process supervisor reports, not the simulation's, and its readiness is probed.
    pub process: Option<Probed>,
}

/// What the process supervisor knows about a container besides its state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Probed {
    /// The readiness probe's result (or started, without one).
    pub ready: bool,
    /// The startup probe passed (or there is none) and the container runs.
    pub started: bool,
    /// The supervisor ended: nothing of this container runs or will run again.
    pub finished: bool,
}

impl ContainerRuntime {
    fn new(name: &str, kind: Kind, image: &str, start_at: Timestamp) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            image: image.to_owned(),
            restart_count: 0,
            container_id: None,
            state: State::Creating { at: start_at },
            last_termination: None,
            consecutive_exits: 0,
            process: None,
        }
    }

    /// A classic init container, already completed at `at`.
    fn completed_init(pod_uid: &str, spec: &Container, at: Timestamp) -> Self {
        let container_id = image::container_id(pod_uid, &spec.name, 0);
        Self {
            name: spec.name.clone(),
            kind: Kind::Init,
            image: spec.image.clone().unwrap_or_default(),
            restart_count: 0,
            container_id: Some(container_id.clone()),
            state: State::Exited {
                termination: Termination {
                    exit_code: 0,
                    reason: "Completed".into(),
                    started_at: at,
                    finished_at: at,
                    container_id,
                },
                restart_at: None,
            },
            last_termination: None,
            consecutive_exits: 0,
            process: None,
        }
    }

    /// When the container becomes ready, if it runs and ever will.
    pub(super) fn ready_at(&self, ready_after: Option<Duration>) -> Option<Timestamp> {
        match (&self.state, ready_after) {
            (State::Running { started_at }, Some(delay)) => Some(after(*started_at, delay)),
            _ => None,
        }
    }

    /// Starts the next instance at `at` with the spec's image.
    fn start_instance(&mut self, pod_uid: &str, spec_image: &str, at: Timestamp) {
        if let State::Exited { termination, .. } | State::BackOff { termination, .. } = &self.state {
            self.last_termination = Some(termination.clone());
            self.restart_count = self.restart_count.saturating_add(1);
        }
        self.image = spec_image.to_owned();
        self.container_id = Some(image::container_id(pod_uid, &self.name, self.restart_count));
        self.state = State::Running { started_at: at };
    }

    fn terminate(&mut self, started_at: Timestamp, at: Timestamp, exit_code: i32) -> Termination {
        Termination {
            exit_code,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.into(),
            started_at,
            finished_at: at,
            container_id: self.container_id.clone().unwrap_or_default(),
        }
    }
}

/// Everything the runtime needs to know about a pod for one `advance`.
pub(super) struct PodInput<'a> {
    pub pod: &'a Pod,
    pub behaviour: &'a PodBehaviour,
    pub timings: &'a Timings,
    pub now: Timestamp,
}

impl PodInput<'_> {
    fn spec_container(&self, runtime: &ContainerRuntime) -> Option<&Container> {
        let spec = self.pod.spec.as_ref()?;
        match runtime.kind {
            Kind::Regular => spec.containers.iter().find(|c| c.name == runtime.name),
            Kind::Init | Kind::Sidecar => spec.init_containers.iter().flatten().find(|c| c.name == runtime.name),
        }
    }

    fn restart_policy(&self, kind: Kind) -> &str {
        if kind == Kind::Sidecar {
            return "Always";
        }
        self.pod.spec.as_ref().and_then(|spec| spec.restart_policy.as_deref()).unwrap_or("Always")
    }

    /// Grace period of the pending deletion, if the pod is being deleted.
    fn deletion_grace(&self) -> Option<i64> {
        self.pod.metadata.deletion_timestamp.as_ref()?;
        Some(
            self.pod
                .metadata
                .deletion_grace_period_seconds
                .or_else(|| self.pod.spec.as_ref()?.termination_grace_period_seconds)
                .unwrap_or(DEFAULT_GRACE_SECONDS),
        )
    }
}

/// The sandbox of one pod on one node and its containers.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct PodRuntime {
    pub uid: String,
    pub node: String,
    pub ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
    pub start_time: Timestamp,
    pub init_containers: Vec<ContainerRuntime>,
    pub containers: Vec<ContainerRuntime>,
    /// When the containers are stopped because the pod is being deleted.
    pub stop_at: Option<Timestamp>,
    /// The deletion grace period `stop_at` was computed from.
    stop_grace: Option<i64>,
    /// The containers have been stopped for deletion: nothing restarts any more.
    pub stopped: bool,
    /// What happened since the caller last drained this list (for Events).
    pub transitions: Vec<Transition>,
}

impl PodRuntime {
    /// Creates the sandbox of a pod just bound to `node`: init containers complete at once,
    /// the others start after the configured start delay.
    pub(super) fn start(
        pod: &Pod,
        node: &str,
        ip: Ipv4Addr,
        host_ip: Ipv4Addr,
        timings: &Timings,
        now: Timestamp,
    ) -> Self {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let start_at = after(now, timings.start_delay);
        let empty = Vec::new();
        let spec_init = pod.spec.as_ref().and_then(|s| s.init_containers.as_ref()).unwrap_or(&empty);
        let mut transitions = Vec::new();
        let init_containers = spec_init
            .iter()
            .map(|c| {
                let image = c.image.as_deref().unwrap_or_default();
                if c.restart_policy.as_deref() == Some("Always") {
                    ContainerRuntime::new(&c.name, Kind::Sidecar, image, start_at)
                } else {
                    transitions.push(Transition::Started {
                        container: c.name.clone(),
                        kind: Kind::Init,
                        image: image.to_owned(),
                    });
                    ContainerRuntime::completed_init(&uid, c, now)
                }
            })
            .collect();
        let containers = pod
            .spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .map(|c| {
                let image = c.image.as_deref().unwrap_or_default();
                ContainerRuntime::new(&c.name, Kind::Regular, image, start_at)
            })
            .collect();
        Self {
            uid,
            node: node.to_owned(),
            ip,
            host_ip,
            start_time: now,
            init_containers,
            containers,
            stop_at: None,
            stop_grace: None,
            stopped: false,
            transitions,
        }
    }

    /// Rebuilds the sandbox of a pod that already ran on `node` before this kubelet started
    /// (its status says what ran), so a restarted kubelet neither restarts containers nor
    /// changes the pod IP.
    pub(super) fn adopt(
        pod: &Pod,
        node: &str,
        ip: Ipv4Addr,
        host_ip: Ipv4Addr,
        timings: &Timings,
        now: Timestamp,
    ) -> Self {
        let mut runtime = Self::start(pod, node, ip, host_ip, timings, now);
        // What ran before this kubelet started was reported by its predecessor.
        runtime.transitions.clear();
        let status = pod.status.as_ref();
        if let Some(start) = status.and_then(|s| s.start_time.as_ref()) {
            runtime.start_time = start.0;
        }
        let empty = Vec::new();
        let statuses = status.and_then(|s| s.container_statuses.as_ref()).unwrap_or(&empty);
        for container in &mut runtime.containers {
            if let Some(observed) = statuses.iter().find(|s| s.name == container.name) {
                adopt_container(container, observed);
            }
        }
        runtime
    }

    /// All containers, init ones first.
    pub(super) fn all_containers(&self) -> impl Iterator<Item = &ContainerRuntime> {
        self.init_containers.iter().chain(&self.containers)
    }

    /// Replays every transition due at or before `input.now` and returns when the next one is due
    /// (including readiness, which changes the status without changing the state).
    pub(super) fn advance(&mut self, input: &PodInput<'_>) -> Option<Timestamp> {
        let now = input.now;
        if let Some(grace) = input.deletion_grace()
            && self.stop_grace != Some(grace)
        {
            // A second delete with a shorter grace period shortens the wait, as on a kubelet.
            let candidate = after(now, input.timings.scaled_grace(grace));
            if self.stop_at.is_none() {
                // SIGTERM goes out now; the containers exit when the grace period ends.
                let running = self.init_containers.iter().chain(&self.containers);
                for container in running.filter(|c| matches!(c.state, State::Running { .. })) {
                    self.transitions.push(Transition::Killing {
                        container: container.name.clone(),
                        kind: container.kind,
                        reason: KillReason::PodDeleted,
                    });
                }
            }
            self.stop_at = Some(self.stop_at.map_or(candidate, |current| current.min(candidate)));
            self.stop_grace = Some(grace);
        }
        let horizon = match self.stop_at {
            Some(stop_at) if stop_at <= now => stop_at,
            _ => now,
        };
        let uid = self.uid.clone();
        for container in self.init_containers.iter_mut().chain(self.containers.iter_mut()) {
            if !self.stopped {
                advance_container(container, &uid, input, horizon, &mut self.transitions);
            }
        }
        if let Some(stop_at) = self.stop_at
            && !self.stopped
        {
            // Simulated containers stop when the grace period ends; real processes when their
            // supervisor saw them exit (it sends SIGTERM, then SIGKILL at the end of the grace period).
            let simulated_due = stop_at <= now;
            let mut simulated = false;
            for container in self.init_containers.iter_mut().chain(self.containers.iter_mut()) {
                if container.process.is_none() {
                    simulated = true;
                    if simulated_due {
                        stop_container(container, stop_at);
                    }
                }
            }
            let processes_done = self.all_containers().all(|c| c.process.is_none_or(|p| p.finished));
            if (simulated_due || !simulated) && processes_done {
                self.stopped = true;
            }
        }
        self.next_wake(input)
    }

    fn next_wake(&self, input: &PodInput<'_>) -> Option<Timestamp> {
        if self.stopped {
            return None;
        }
        let mut wake = self.stop_at;
        let mut consider = |at: Option<Timestamp>| {
            if let Some(at) = at
                && at > input.now
            {
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
        };
        for container in self.all_containers().filter(|c| c.process.is_none()) {
            let behaviour = input.behaviour.container(&container.name, input.timings.ready_delay);
            match &container.state {
                State::Creating { at } => consider(Some(*at)),
                State::Running { started_at } => {
                    consider(container.ready_at(behaviour.ready_after));
                    consider(behaviour.exit.map(|(delay, _)| after(*started_at, delay)));
                }
                State::Exited { restart_at, .. } => consider(*restart_at),
                State::BackOff { until, .. } => consider(Some(*until)),
            }
        }
        wake
    }
}

fn adopt_container(container: &mut ContainerRuntime, observed: &ContainerStatus) {
    container.restart_count = observed.restart_count;
    container.last_termination =
        observed.last_state.as_ref().and_then(|state| state.terminated.as_ref()).map(|t| Termination {
            exit_code: t.exit_code,
            reason: t.reason.clone().unwrap_or_default(),
            started_at: t.started_at.as_ref().map_or(Timestamp::UNIX_EPOCH, |time| time.0),
            finished_at: t.finished_at.as_ref().map_or(Timestamp::UNIX_EPOCH, |time| time.0),
            container_id: t.container_id.clone().unwrap_or_default(),
        });
    let running = observed.state.as_ref().and_then(|state| state.running.as_ref());
    if let Some(running) = running
        && let Some(started_at) = &running.started_at
    {
        container.image = observed.image.clone();
        container.container_id = observed.container_id.clone();
        container.state = State::Running { started_at: started_at.0 };
    }
}

fn advance_container(
    container: &mut ContainerRuntime,
    pod_uid: &str,
    input: &PodInput<'_>,
    horizon: Timestamp,
    transitions: &mut Vec<Transition>,
) {
    if container.kind == Kind::Init || container.process.is_some() {
        return;
    }
    let Some(spec) = input.spec_container(container) else {
        return;
    };
    let spec_image = spec.image.as_deref().unwrap_or_default();
    let behaviour = input.behaviour.container(&container.name, input.timings.ready_delay);
    let restart_policy = input.restart_policy(container.kind);
    let timings = input.timings;
    for _ in 0..MAX_TRANSITIONS_PER_ADVANCE {
        match container.state.clone() {
            State::Creating { at } | State::Exited { restart_at: Some(at), .. } | State::BackOff { until: at, .. }
                if at <= horizon =>
            {
                container.start_instance(pod_uid, spec_image, at);
                transitions.push(Transition::Started {
                    container: container.name.clone(),
                    kind: container.kind,
                    image: spec_image.to_owned(),
                });
            }
            State::Running { started_at } => {
                let exit_at = behaviour.exit.map(|(delay, code)| (after(started_at, delay), code));
                if let Some((exit_at, code)) = exit_at
                    && exit_at <= horizon
                {
                    let termination = container.terminate(started_at, exit_at, code);
                    let ran_for = exit_at.duration_since(started_at).as_secs_f64();
                    let reset_after = timings.backoff_cap().saturating_mul(2).as_secs_f64();
                    container.consecutive_exits =
                        if ran_for >= reset_after { 1 } else { container.consecutive_exits.saturating_add(1) };
                    let restarts = match restart_policy {
                        "Never" => false,
                        "OnFailure" => code != 0,
                        _ => true,
                    };
                    let wait = timings.backoff(container.consecutive_exits);
                    container.state = if !restarts {
                        State::Exited { termination, restart_at: None }
                    } else if wait.is_zero() {
                        let restart_at = Some(after(exit_at, timings.restart_delay));
                        State::Exited { termination, restart_at }
                    } else {
                        transitions
                            .push(Transition::BackOff { container: container.name.clone(), kind: container.kind });
                        State::BackOff { termination, until: after(exit_at, wait), delay: wait }
                    };
                } else if container.image != spec_image {
                    if input.behaviour.hot_patch {
                        container.image = spec_image.to_owned();
                    } else {
                        // The kubelet kills a container whose spec changed and starts a new one
                        // from the new spec; this is not a failure, so no back-off.
                        transitions.push(Transition::Killing {
                            container: container.name.clone(),
                            kind: container.kind,
                            reason: KillReason::SpecChanged,
                        });
                        let termination = container.terminate(started_at, input.now, 0);
                        let restart_at = Some(after(input.now, timings.restart_delay));
                        container.state = State::Exited { termination, restart_at };
                    }
                } else {
                    return;
                }
            }
            _ => return,
        }
    }
}

/// Stops a container because its pod is being deleted: running instances exit cleanly (they got
/// SIGTERM and honoured it within the grace period), and nothing restarts any more.
fn stop_container(container: &mut ContainerRuntime, at: Timestamp) {
    container.state = match container.state.clone() {
        State::Running { started_at } => {
            State::Exited { termination: container.terminate(started_at, at, 0), restart_at: None }
        }
        State::Exited { termination, .. } | State::BackOff { termination, .. } => {
            State::Exited { termination, restart_at: None }
        }
        creating @ State::Creating { .. } => creating,
    };
}

/// The timings and the clock of the runtime's and the status's tests, one set so that their timelines agree.
#[cfg(test)]
pub(super) mod fixtures {
    use super::*;

    /// Short delays, so that a test's timeline reads in milliseconds.
    pub(in crate::kubelet) const TIMINGS: Timings = Timings {
        start_delay: Duration::from_millis(100),
        ready_delay: Duration::from_millis(300),
        restart_delay: Duration::from_millis(200),
        crash_loop_backoff: Duration::from_secs(10),
        grace_period_scale: 0.1,
    };

    /// `ms` milliseconds into a test's timeline.
    pub(in crate::kubelet) fn t(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{TIMINGS, t};
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(images: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                uid: Some("uid-1".into()),
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: images
                    .iter()
                    .map(|(name, image)| Container {
                        name: name.to_string(),
                        image: Some(image.to_string()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn advance(runtime: &mut PodRuntime, pod: &Pod, now: Timestamp) -> Option<Timestamp> {
        let behaviour = PodBehaviour::from_annotations(pod.metadata.annotations.as_ref()).0;
        runtime.advance(&PodInput { pod, behaviour: &behaviour, timings: &TIMINGS, now })
    }

    fn started(pod: &Pod) -> PodRuntime {
        let ip = Ipv4Addr::new(127, 1, 0, 1);
        let host = Ipv4Addr::new(127, 0, 100, 1);
        PodRuntime::start(pod, "node-1", ip, host, &TIMINGS, t(0))
    }

    #[test]
    fn containers_start_after_the_start_delay_and_wake_for_readiness() {
        let pod = pod(&[("app", "python:3.5")], &[]);
        let mut runtime = started(&pod);
        assert_eq!(runtime.containers[0].state, State::Creating { at: t(100) });
        assert_eq!(advance(&mut runtime, &pod, t(50)), Some(t(100)));
        assert_eq!(advance(&mut runtime, &pod, t(150)), Some(t(400)), "wake when ready");
        let app = &runtime.containers[0];
        assert_eq!(app.state, State::Running { started_at: t(100) });
        assert_eq!(app.restart_count, 0);
        assert_eq!(app.container_id, Some(image::container_id("uid-1", "app", 0)));
        assert_eq!(advance(&mut runtime, &pod, t(500)), None, "nothing more to do");
    }

    #[test]
    fn image_change_restarts_only_that_container() {
        let mut pod = pod(&[("app", "python:latest"), ("side", "busybox")], &[]);
        let mut runtime = started(&pod);
        advance(&mut runtime, &pod, t(1000));
        pod.spec.as_mut().unwrap().containers[0].image = Some("python:3.5".into());
        let wake = advance(&mut runtime, &pod, t(2000));
        assert_eq!(wake, Some(t(2200)));
        let app = &runtime.containers[0];
        let State::Exited { termination, restart_at } = &app.state else { panic!("{:?}", app.state) };
        assert_eq!(*restart_at, Some(t(2200)));
        assert_eq!(termination.exit_code, 0);
        assert_eq!(termination.finished_at, t(2000));
        assert_eq!(app.image, "python:latest", "the dead instance ran the old image");
        assert_eq!(runtime.containers[1].state, State::Running { started_at: t(100) });

        advance(&mut runtime, &pod, t(2300));
        let app = &runtime.containers[0];
        assert_eq!(app.state, State::Running { started_at: t(2200) });
        assert_eq!(app.image, "python:3.5");
        assert_eq!(app.restart_count, 1);
        assert_eq!(app.container_id, Some(image::container_id("uid-1", "app", 1)));
        assert_eq!(app.last_termination.as_ref().unwrap().finished_at, t(2000));
        assert_eq!(app.consecutive_exits, 0, "an update is not a crash");
        let side = &runtime.containers[1];
        assert_eq!((side.restart_count, &side.state), (0, &State::Running { started_at: t(100) }));
    }

    #[test]
    fn transitions_are_reported_once() {
        use KillReason::*;
        let mut pod = pod(&[("app", "app:v1")], &[]);
        let mut runtime = started(&pod);
        advance(&mut runtime, &pod, t(1000));
        let started_v1 = Transition::Started { container: "app".into(), kind: Kind::Regular, image: "app:v1".into() };
        assert_eq!(std::mem::take(&mut runtime.transitions), [started_v1]);
        advance(&mut runtime, &pod, t(1100));
        assert!(runtime.transitions.is_empty(), "nothing new happened");

        pod.spec.as_mut().unwrap().containers[0].image = Some("app:v2".into());
        advance(&mut runtime, &pod, t(2000));
        advance(&mut runtime, &pod, t(3000));
        let kinds: Vec<_> = std::mem::take(&mut runtime.transitions);
        assert_eq!(
            kinds,
            [
                Transition::Killing { container: "app".into(), kind: Kind::Regular, reason: SpecChanged },
                Transition::Started { container: "app".into(), kind: Kind::Regular, image: "app:v2".into() },
            ]
        );

        pod.metadata.deletion_timestamp = Some(Time(t(33_000)));
        pod.metadata.deletion_grace_period_seconds = Some(30);
        advance(&mut runtime, &pod, t(3000));
        advance(&mut runtime, &pod, t(3500));
        assert_eq!(
            runtime.transitions,
            [Transition::Killing { container: "app".into(), kind: Kind::Regular, reason: PodDeleted }],
            "one Killing when the deletion is first seen"
        );
    }

    #[test]
    fn hot_patch_swaps_the_image_without_restart() {
        let mut pod = pod(&[("main", "main:v1")], &[("io.kubernetes.hotpatch.container", "true")]);
        let mut runtime = started(&pod);
        advance(&mut runtime, &pod, t(1000));
        pod.spec.as_mut().unwrap().containers[0].image = Some("main:v2".into());
        advance(&mut runtime, &pod, t(2000));
        let main = &runtime.containers[0];
        assert_eq!(main.image, "main:v2");
        assert_eq!(main.restart_count, 0);
        assert_eq!(main.state, State::Running { started_at: t(100) });
    }

    #[test]
    fn crash_loop_backs_off_exponentially() {
        let pod = pod(&[("app", "app")], &[("kube-sim.kourse.dev/crash-loop", "true")]);
        let mut runtime = started(&pod);
        // start 100, exit 1100, immediate restart after the restart delay (1300), exit 2300,
        // back-off 10 s until 12300, exit 13300, back-off 20 s until 33300.
        advance(&mut runtime, &pod, t(1200));
        let app = &runtime.containers[0];
        assert!(matches!(&app.state, State::Exited { termination, restart_at: Some(at) }
            if termination.exit_code == 1 && termination.reason == "Error" && *at == t(1300)));
        assert_eq!(app.restart_count, 0);

        advance(&mut runtime, &pod, t(2400));
        let app = &runtime.containers[0];
        assert_eq!(app.restart_count, 1);
        assert!(matches!(&app.state, State::BackOff { until, delay, .. }
            if *until == t(12_300) && *delay == Duration::from_secs(10)));

        advance(&mut runtime, &pod, t(13_400));
        let app = &runtime.containers[0];
        assert_eq!(app.restart_count, 2);
        assert!(matches!(&app.state, State::BackOff { until, .. } if *until == t(33_300)));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let delays: Vec<_> = (1..=8).map(|n| TIMINGS.backoff(n).as_secs()).collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn restart_policy_never_leaves_the_container_exited() {
        let mut pod = pod(&[("job", "job")], &[("kube-sim.kourse.dev/exit-after", "1s")]);
        pod.spec.as_mut().unwrap().restart_policy = Some("Never".into());
        let mut runtime = started(&pod);
        assert_eq!(advance(&mut runtime, &pod, t(5000)), None);
        assert!(matches!(&runtime.containers[0].state,
            State::Exited { termination, restart_at: None } if termination.exit_code == 0));
    }

    #[test]
    fn deletion_stops_containers_after_the_scaled_grace_period() {
        let mut pod = pod(&[("app", "app")], &[]);
        let mut runtime = started(&pod);
        advance(&mut runtime, &pod, t(1000));
        pod.metadata.deletion_timestamp = Some(Time(t(31_000)));
        pod.metadata.deletion_grace_period_seconds = Some(30);
        // 30 s × 0.1 = 3 s after the kubelet saw the deletion.
        assert_eq!(advance(&mut runtime, &pod, t(1000)), Some(t(4000)));
        assert!(!runtime.stopped);
        // A second delete with a shorter grace period shortens the wait.
        pod.metadata.deletion_grace_period_seconds = Some(10);
        assert_eq!(advance(&mut runtime, &pod, t(2000)), Some(t(3000)));
        assert_eq!(advance(&mut runtime, &pod, t(3500)), None);
        assert!(runtime.stopped);
        assert!(matches!(&runtime.containers[0].state,
            State::Exited { termination, restart_at: None }
                if termination.finished_at == t(3000) && termination.exit_code == 0));
    }

    #[test]
    fn init_containers_complete_and_sidecars_run() {
        let mut pod = pod(&[("app", "app")], &[]);
        pod.spec.as_mut().unwrap().init_containers = Some(vec![
            Container { name: "setup".into(), image: Some("setup".into()), ..Default::default() },
            Container {
                name: "proxy".into(),
                image: Some("proxy".into()),
                restart_policy: Some("Always".into()),
                ..Default::default()
            },
        ]);
        let mut runtime = started(&pod);
        advance(&mut runtime, &pod, t(1000));
        assert_eq!(runtime.init_containers[0].kind, Kind::Init);
        assert!(matches!(&runtime.init_containers[0].state,
            State::Exited { termination, restart_at: None } if termination.reason == "Completed"));
        assert_eq!(runtime.init_containers[1].state, State::Running { started_at: t(100) });
    }

    #[test]
    fn adoption_keeps_running_containers() {
        use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, PodStatus};
        let mut pod = pod(&[("app", "app:v1")], &[]);
        pod.status = Some(PodStatus {
            start_time: Some(Time(t(-5000))),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                image: "app:v1".into(),
                image_id: image::image_id("app:v1"),
                container_id: Some("docker://abc".into()),
                restart_count: 4,
                ready: true,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning { started_at: Some(Time(t(-4000))) }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let ip = Ipv4Addr::new(127, 1, 0, 9);
        let host = Ipv4Addr::new(127, 0, 100, 1);
        let runtime = PodRuntime::adopt(&pod, "node-1", ip, host, &TIMINGS, t(0));
        assert_eq!(runtime.start_time, t(-5000));
        let app = &runtime.containers[0];
        assert_eq!(app.state, State::Running { started_at: t(-4000) });
        assert_eq!(app.restart_count, 4);
        assert_eq!(app.container_id.as_deref(), Some("docker://abc"));
    }
}
