//! One pod's real processes, supervised as a kubelet supervises containers: prepare the pod
//! (fetch what its env and volumes read, request its service-account token, write its volumes),
//! then for each process container start the program, probe it, stop it gracefully (`preStop`,
//! SIGTERM, SIGKILL after the grace period) when the pod is deleted, its image changes or its
//! liveness or startup probe fails, and restart it as `restartPolicy` says with the kubelet's
//! back-off. What it does is published as the container's [`ContainerRuntime`], which the agent
//! copies into the pod's runtime before generating the status.

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, LifecycleHandler, Pod, Secret, ServiceAccount};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::super::image;
use super::super::runtime::{ContainerRuntime, Probed, State, Termination, Timings};
use super::env::{self, PodAddresses, Sources};
use super::images::ImageMap;
use super::mount_points;
use super::probes::{self, Action, ProbeSpec, Tracker};
use super::spawn::{self, GroupGuard, Launch, Mount, Namespace};
use super::volumes;
use crate::logs::PodLogs;

/// How soon a pod whose preparation failed (a missing Secret, an API error) is tried again.
const PREPARE_RETRY: Duration = Duration::from_secs(2);
/// The kubelet's `minimumGracePeriodInSeconds`: what a container gets after its `preStop` hook
/// used up the grace period.
const MINIMUM_GRACE_SECONDS: i64 = 2;
/// Where a service-account token volume is mounted.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What every supervisor shares.
pub(super) struct Shared {
    pub client: kube::Client,
    pub images: ImageMap,
    pub api_server: SocketAddr,
    pub state_dir: PathBuf,
    pub logs: Arc<PodLogs>,
    pub timings: Timings,
    pub node_allocatable: (f64, f64),
    /// Tells the agent which pod's processes changed.
    pub notify: mpsc::UnboundedSender<String>,
    pub prober: reqwest::Client,
}

/// What the agent tells a pod's supervisor.
#[derive(Clone, Debug)]
pub(super) struct Control {
    /// The newest pod object.
    pub pod: Pod,
    /// Stop everything with this (scaled) grace period: the pod is being deleted.
    pub stop: Option<Duration>,
}

/// The process groups of a pod, killed outright when the pod's supervisor is dropped.
#[derive(Debug, Default)]
pub(super) struct Groups(Mutex<HashSet<u32>>);

impl Groups {
    fn insert(&self, pgid: u32) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(pgid);
    }

    fn remove(&self, pgid: u32) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&pgid);
    }

    pub(super) fn kill_all(&self) {
        for pgid in self.0.lock().unwrap_or_else(|p| p.into_inner()).drain() {
            spawn::signal_group(pgid, Signal::SIGKILL);
        }
    }
}

/// The published state of a pod's process containers, by container name.
pub(super) type Snapshots = Arc<Mutex<BTreeMap<String, ContainerRuntime>>>;

/// Everything one pod's supervision task needs.
pub(super) struct PodTask {
    pub shared: Arc<Shared>,
    pub uid: String,
    pub addresses: PodAddresses,
    pub dir: PathBuf,
    pub control: watch::Receiver<Control>,
    pub snapshots: Snapshots,
    pub groups: Arc<Groups>,
}

/// The pod's prepared volumes and API access.
#[derive(Default)]
struct Prepared {
    sources: Sources,
    volumes: BTreeMap<String, PathBuf>,
    kubeconfig: Option<PathBuf>,
}

impl PodTask {
    fn publish(&self, name: &str, update: impl FnOnce(&mut ContainerRuntime)) {
        if let Some(container) = self.snapshots.lock().unwrap_or_else(|p| p.into_inner()).get_mut(name) {
            update(container);
        }
        // The agent may be gone (kube-sim stopping); then nobody needs to know.
        let _ = self.shared.notify.send(self.uid.clone());
    }

    fn pod(&self) -> Pod {
        self.control.borrow().pod.clone()
    }

    fn stopping(&self) -> Option<Duration> {
        self.control.borrow().stop
    }

    fn finish_all(&self, names: &[String]) {
        for name in names {
            self.publish(name, |c| c.process.get_or_insert_with(Probed::default).finished = true);
        }
    }

    /// Runs the pod's process containers until they are all done (deleted, or exited for good).
    pub(super) async fn run(mut self, names: Vec<String>) {
        let prepared = loop {
            let pod = self.pod();
            match self.prepare(&pod).await {
                Ok(prepared) => break prepared,
                Err(e) => {
                    tracing::warn!(
                        pod = pod.metadata.name.as_deref().unwrap_or_default(),
                        "preparing the pod's processes failed: {e}"
                    );
                    let changed = tokio::time::timeout(PREPARE_RETRY, self.control.changed()).await;
                    if matches!(changed, Ok(Err(_))) || self.stopping().is_some() {
                        self.finish_all(&names);
                        return;
                    }
                }
            }
        };
        let prepared = Arc::new(prepared);
        let this = Arc::new(self);
        let runs = names.iter().map(|name| {
            let this = this.clone();
            let prepared = prepared.clone();
            async move { ContainerTask { pod: this, name: name.clone(), prepared }.run().await }
        });
        futures::future::join_all(runs).await;
    }

    async fn prepare(&self, pod: &Pod) -> Result<Prepared, String> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let client = &self.shared.client;
        let (config_maps, secrets) = env::referenced(pod);
        let mut sources = Sources::default();
        for name in config_maps.keys() {
            let api = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
            if let Some(found) = api.get_opt(name).await.map_err(|e| format!("reading configmap {name}: {e}"))? {
                sources.config_maps.insert(name.clone(), found);
            }
        }
        for name in secrets.keys() {
            let api = Api::<Secret>::namespaced(client.clone(), &namespace);
            if let Some(found) = api.get_opt(name).await.map_err(|e| format!("reading secret {name}: {e}"))? {
                sources.secrets.insert(name.clone(), found);
            }
        }
        let spec = pod.spec.clone().unwrap_or_default();
        let volumes_dir = self.dir.join("volumes");
        let mut prepared = Prepared::default();
        let mut token_file = None;
        for volume in spec.volumes.iter().flatten() {
            let token = match volumes::wants_token(volume) {
                Some(seconds) => Some(self.request_token(pod, &namespace, seconds).await?),
                None => None,
            };
            let content = volumes::volume_files(pod, volume, &sources, token.as_deref(), &self.addresses)
                .map_err(|e| format!("MountVolume.SetUp failed for volume {:?}: {e}", volume.name))?;
            let dir = volumes_dir.join(&volume.name);
            let path = tokio::task::spawn_blocking(move || volumes::materialize(&dir, &content))
                .await
                .map_err(|e| format!("writing volume {:?}: {e}", volume.name))?
                .map_err(|e| format!("writing volume {:?}: {e}", volume.name))?;
            if token.is_some() {
                let projected = volume.projected.iter().flat_map(|p| p.sources.iter().flatten());
                let file =
                    projected.filter_map(|s| s.service_account_token.as_ref()).map(|t| path.join(&t.path)).next();
                token_file = token_file.or(file);
            }
            prepared.volumes.insert(volume.name.clone(), path);
        }
        if let Some(token_file) = token_file {
            let kubeconfig = self.dir.join("kubeconfig");
            let text = kubeconfig_text(self.shared.api_server, &token_file, &namespace);
            tokio::fs::write(&kubeconfig, text).await.map_err(|e| format!("writing the pod's kubeconfig: {e}"))?;
            prepared.kubeconfig = Some(kubeconfig);
        }
        prepared.sources = sources;
        Ok(prepared)
    }

    /// A token bound to the pod, requested as the kubelet requests it (`serviceaccounts/token`
    /// with a `boundObjectRef`), so the pod's requests authenticate as its ServiceAccount.
    async fn request_token(&self, pod: &Pod, namespace: &str, seconds: i64) -> Result<String, String> {
        let account =
            pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_else(|| "default".into());
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(seconds.max(600)),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let api = Api::<ServiceAccount>::namespaced(self.shared.client.clone(), namespace);
        let issued = api
            .create_token_request(&account, &PostParams::default(), &request)
            .await
            .map_err(|e| format!("requesting a token of serviceaccount {account}: {e}"))?;
        issued.status.and_then(|s| s.token).ok_or_else(|| "the TokenRequest was answered without a token".into())
    }
}

/// A kubeconfig for the pod: kube-sim's address (plain HTTP, so in-cluster configuration, which
/// insists on HTTPS, cannot be used) and the projected token file, re-read by clients as it is.
fn kubeconfig_text(api: SocketAddr, token_file: &Path, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: in-cluster\n  cluster:\n    server: http://{api}\ncontexts:\n- name: in-cluster\n  context:\n    cluster: in-cluster\n    user: service-account\n    namespace: {namespace}\ncurrent-context: in-cluster\nusers:\n- name: service-account\n  user:\n    tokenFile: {}\n",
        token_file.display()
    )
}

/// Why a container instance ended.
enum Ended {
    /// It exited by itself.
    Exited,
    /// The kubelet killed it: the pod is being deleted.
    Deleted,
    /// The kubelet killed it to restart it from a changed spec.
    SpecChanged,
    /// The kubelet killed it because its liveness or startup probe failed.
    Unhealthy,
}

struct ContainerTask {
    pod: Arc<PodTask>,
    name: String,
    prepared: Arc<Prepared>,
}

/// The exit code a container runtime reports for a process's wait status.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(-1)
}

impl ContainerTask {
    fn spec(&self, pod: &Pod) -> Option<Container> {
        pod.spec.as_ref()?.containers.iter().find(|c| c.name == self.name).cloned()
    }

    fn publish(&self, update: impl FnOnce(&mut ContainerRuntime)) {
        self.pod.publish(&self.name, update);
    }

    fn launch(&self, pod: &Pod, spec: &Container) -> Result<Launch, String> {
        let shared = &self.pod.shared;
        let mut env =
            env::container_env(pod, spec, &self.prepared.sources, &self.pod.addresses, shared.node_allocatable)?;
        let mounts: Vec<Mount> = spec
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| {
                let source = self
                    .prepared
                    .volumes
                    .get(&m.name)
                    .ok_or_else(|| format!("volume {:?} is not declared by the pod", m.name))?;
                let sub_path = m.sub_path.as_deref().filter(|s| !s.is_empty());
                Ok(Mount {
                    source: sub_path.map_or_else(|| source.clone(), |s| source.join(s)),
                    target: PathBuf::from(&m.mount_path),
                    read_only: m.read_only.unwrap_or(false),
                })
            })
            .collect::<Result<_, String>>()?;
        if let Some(kubeconfig) = &self.prepared.kubeconfig
            && mounts.iter().any(|m| m.target == Path::new(SERVICE_ACCOUNT_DIR))
            && !env.iter().any(|(k, _)| k == "KUBECONFIG")
        {
            env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
        }
        let (command, args) = env::expand_command(spec, &env);
        // Pods share this host's network: a wildcard listen address is the pod's IP (see `network`).
        let pod_ip = self.pod.addresses.pod_ip;
        let bind = |list: Vec<String>| list.iter().map(|a| super::network::bind_pod_ip(a, pod_ip)).collect::<Vec<_>>();
        let (command, args) = (bind(command), bind(args));
        let image = spec.image.as_deref().unwrap_or_default();
        let program = shared.images.program(image, &command, &args)?;
        let working_dir = spec.working_dir.as_ref().filter(|d| !d.is_empty()).map(PathBuf::from);
        Ok(Launch { program, env, working_dir, mounts })
    }

    async fn run(self) {
        loop {
            let pod = self.pod.pod();
            let Some(spec) = self.spec(&pod) else {
                self.publish(|c| c.process.get_or_insert_with(Probed::default).finished = true);
                return;
            };
            if self.pod.stopping().is_some() {
                self.finish_stopped();
                return;
            }
            let image = spec.image.clone().unwrap_or_default();
            let started_at = Timestamp::now();
            let (ended, code, reason, finished_at) = match self.start(&pod, &spec) {
                Err(message) => {
                    // As a runtime that could not start the program: exit code 128, `StartError`.
                    tracing::warn!(container = %self.name, "{message}");
                    self.begin_instance(&image, started_at, &spec);
                    self.pod.shared.logs.line(&self.pod.uid, &self.name, started_at, message);
                    self.pod.shared.logs.end(&self.pod.uid, &self.name);
                    (Ended::Exited, 128, "StartError".to_owned(), Timestamp::now())
                }
                Ok((child, launch, mount_points)) => {
                    self.begin_instance(&image, started_at, &spec);
                    let (ended, code) = self.supervise(child, &launch, &spec).await;
                    drop(mount_points);
                    let reason = if code == 0 { "Completed" } else { "Error" };
                    (ended, code, reason.to_owned(), Timestamp::now())
                }
            };
            let termination = Termination {
                exit_code: code,
                reason,
                started_at,
                finished_at,
                container_id: image::container_id(&self.pod.uid, &self.name, self.restart_count()),
            };
            if !self.after_exit(ended, termination, &pod).await {
                return;
            }
        }
    }

    fn restart_count(&self) -> i32 {
        let snapshots = self.pod.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        snapshots.get(&self.name).map_or(0, |c| c.restart_count)
    }

    fn finish_stopped(&self) {
        self.publish(|c| {
            if let State::Exited { restart_at, .. } = &mut c.state {
                *restart_at = None;
            } else if let State::BackOff { termination, .. } = &c.state {
                c.state = State::Exited { termination: termination.clone(), restart_at: None };
            }
            c.process.get_or_insert_with(Probed::default).finished = true;
        });
    }

    /// Decides what follows an instance's end; `false` when nothing will run again.
    async fn after_exit(&self, ended: Ended, termination: Termination, pod: &Pod) -> bool {
        let timings = self.pod.shared.timings;
        let ran_for = termination.finished_at.duration_since(termination.started_at).as_secs_f64();
        let code = termination.exit_code;
        let policy = pod.spec.as_ref().and_then(|s| s.restart_policy.clone()).unwrap_or_else(|| "Always".into());
        let restarts = match ended {
            Ended::Deleted => false,
            Ended::SpecChanged => true,
            Ended::Exited | Ended::Unhealthy => match policy.as_str() {
                "Never" => false,
                "OnFailure" => code != 0,
                _ => true,
            },
        };
        if !restarts || self.pod.stopping().is_some() {
            self.publish(|c| {
                c.state = State::Exited { termination, restart_at: None };
                let probed = c.process.get_or_insert_with(Probed::default);
                probed.ready = false;
                probed.finished = true;
            });
            return false;
        }
        let wait = if matches!(ended, Ended::SpecChanged) {
            Duration::ZERO
        } else {
            let mut consecutive = 0;
            self.publish(|c| {
                let reset_after = timings.backoff_cap().saturating_mul(2).as_secs_f64();
                c.consecutive_exits = if ran_for >= reset_after { 1 } else { c.consecutive_exits.saturating_add(1) };
                consecutive = c.consecutive_exits;
            });
            timings.backoff(consecutive)
        };
        let (pause, until) = if wait.is_zero() {
            let restart_at = super::super::runtime::after(termination.finished_at, timings.restart_delay);
            let pause = timings.restart_delay;
            self.publish(|c| {
                c.state = State::Exited { termination: termination.clone(), restart_at: Some(restart_at) };
                c.process.get_or_insert_with(Probed::default).ready = false;
            });
            (pause, restart_at)
        } else {
            let until = super::super::runtime::after(termination.finished_at, wait);
            self.publish(|c| {
                c.state = State::BackOff { termination: termination.clone(), until, delay: wait };
                c.process.get_or_insert_with(Probed::default).ready = false;
            });
            (wait, until)
        };
        let _ = until;
        let mut control = self.pod.control.clone();
        let deadline = Instant::now() + pause;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return true,
                changed = control.changed() => {
                    if changed.is_err() || control.borrow().stop.is_some() {
                        self.finish_stopped();
                        return false;
                    }
                }
            }
        }
    }

    fn begin_instance(&self, image: &str, started_at: Timestamp, spec: &Container) {
        self.pod.shared.logs.begin_live(&self.pod.uid, &self.name);
        let uid = self.pod.uid.clone();
        let has_startup = spec.startup_probe.is_some();
        let has_readiness = spec.readiness_probe.is_some();
        self.publish(|c| {
            if let State::Exited { termination, .. } | State::BackOff { termination, .. } = &c.state {
                c.last_termination = Some(termination.clone());
                c.restart_count = c.restart_count.saturating_add(1);
            }
            c.image = image.to_owned();
            c.container_id = Some(image::container_id(&uid, &c.name, c.restart_count));
            c.state = State::Running { started_at };
            let started = !has_startup;
            c.process = Some(Probed { ready: started && !has_readiness, started, finished: false });
        });
    }

    /// Starts one instance; the mount points it holds are removed when it ends (see `mount_points`).
    fn start(
        &self,
        pod: &Pod,
        spec: &Container,
    ) -> Result<(tokio::process::Child, Launch, mount_points::MountPoints), String> {
        let launch = self.launch(pod, spec)?;
        let held = mount_points::acquire(&launch.mounts).map_err(|e| format!("creating mount points: {e}"))?;
        let mut command = spawn::command(&launch, Namespace::New).map_err(|e| format!("preparing the command: {e}"))?;
        let child = command.spawn().map_err(|e| {
            format!("failed to start container {:?} ({}): {e}", self.name, launch.program.executable.display())
        })?;
        Ok((child, launch, held))
    }

    /// Runs one instance until it ends; returns why and its exit code.
    async fn supervise(&self, mut child: tokio::process::Child, launch: &Launch, spec: &Container) -> (Ended, i32) {
        let Some(pid) = child.id() else {
            return (Ended::Exited, -1);
        };
        self.pod.groups.insert(pid);
        let guard = GroupGuard(pid);
        let pumps = [child.stdout.take().map(|out| self.pump(out)), child.stderr.take().map(|err| self.pump(err))];
        let ip = self.pod.addresses.pod_ip;
        let probe = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            p.as_ref().and_then(|p| match ProbeSpec::from_probe(p, spec, ip) {
                Ok(spec) => Some(spec),
                Err(e) => {
                    tracing::warn!(container = %self.name, "ignoring a probe: {e}");
                    None
                }
            })
        };
        let started = Instant::now();
        let mut startup = probe(&spec.startup_probe).map(|s| Scheduled::new(s, started, false));
        let mut liveness = probe(&spec.liveness_probe).map(|s| Scheduled::new(s, started, true));
        let mut readiness = probe(&spec.readiness_probe).map(|s| Scheduled::new(s, started, false));
        let mut control = self.pod.control.clone();
        let image = spec.image.clone();
        let grace_of = |pod: &Pod, probe_grace: Option<i64>| {
            let seconds = probe_grace
                .or_else(|| pod.spec.as_ref()?.termination_grace_period_seconds)
                .unwrap_or(super::super::runtime::DEFAULT_GRACE_SECONDS);
            self.pod.shared.timings.scaled_grace(seconds)
        };
        let outcome = loop {
            let is_started = startup.as_ref().is_none_or(|s| s.tracker.result);
            let next = [
                startup.as_ref().filter(|_| !is_started),
                liveness.as_ref().filter(|_| is_started),
                readiness.as_ref().filter(|_| is_started),
            ]
            .into_iter()
            .flatten()
            .map(|s| s.next)
            .min();
            tokio::select! {
                status = child.wait() => {
                    break (Ended::Exited, status.map(exit_code).unwrap_or(-1));
                }
                changed = control.changed() => {
                    let (stop, pod) = {
                        let current = control.borrow();
                        (current.stop.or(changed.is_err().then_some(Duration::ZERO)), current.pod.clone())
                    };
                    if let Some(grace) = stop {
                        let code = self.kill(&mut child, pid, launch, spec, grace).await;
                        break (Ended::Deleted, code);
                    }
                    let new_image = self.spec(&pod).and_then(|c| c.image);
                    if new_image != image {
                        let code = self.kill(&mut child, pid, launch, spec, grace_of(&pod, None)).await;
                        break (Ended::SpecChanged, code);
                    }
                }
                _ = sleep_until(next), if next.is_some() => {
                    let now = Instant::now();
                    if let Some(s) = startup.as_mut().filter(|s| !is_started && s.next <= now) {
                        let ok = self.attempt(&s.spec, launch, pid).await;
                        let before = s.tracker.result;
                        let passed = s.tracker.record(ok, &s.spec);
                        s.next = Instant::now() + s.spec.period;
                        if passed && !before {
                            let has_readiness = readiness.is_some();
                            self.publish(|c| {
                                let probed = c.process.get_or_insert_with(Probed::default);
                                probed.started = true;
                                probed.ready = !has_readiness;
                            });
                            let now = Instant::now();
                            for p in [liveness.as_mut(), readiness.as_mut()].into_iter().flatten() {
                                p.next = now + p.spec.initial_delay;
                            }
                        } else if !ok && s.failures_exhausted() {
                            self.log_probe("Startup", &s.spec);
                            let grace = grace_of(&self.pod.pod(), spec.startup_probe.as_ref().and_then(|p| p.termination_grace_period_seconds));
                            break (Ended::Unhealthy, self.kill(&mut child, pid, launch, spec, grace).await);
                        }
                    }
                    if let Some(s) = liveness.as_mut().filter(|s| is_started && s.next <= now) {
                        let ok = self.attempt(&s.spec, launch, pid).await;
                        let alive = s.tracker.record(ok, &s.spec);
                        s.next = Instant::now() + s.spec.period;
                        if !alive {
                            self.log_probe("Liveness", &s.spec);
                            let grace = grace_of(&self.pod.pod(), spec.liveness_probe.as_ref().and_then(|p| p.termination_grace_period_seconds));
                            break (Ended::Unhealthy, self.kill(&mut child, pid, launch, spec, grace).await);
                        }
                    }
                    if let Some(s) = readiness.as_mut().filter(|s| is_started && s.next <= now) {
                        let ok = self.attempt(&s.spec, launch, pid).await;
                        let before = s.tracker.result;
                        let ready = s.tracker.record(ok, &s.spec);
                        s.next = Instant::now() + s.spec.period;
                        if ready != before {
                            self.publish(|c| c.process.get_or_insert_with(Probed::default).ready = ready);
                        }
                    }
                }
            }
        };
        self.pod.groups.remove(pid);
        // Whatever the program left behind in its group goes with it, as with a container's cgroup.
        drop(guard);
        for pump in pumps.into_iter().flatten() {
            // What was printed before the end is read; a descendant holding the pipe open cannot
            // keep the pump alive.
            if tokio::time::timeout(Duration::from_secs(1), pump).await.is_err() {
                tracing::debug!(container = %self.name, "a log pipe stayed open after the container ended");
            }
        }
        self.pod.shared.logs.end(&self.pod.uid, &self.name);
        outcome
    }

    fn log_probe(&self, kind: &str, spec: &ProbeSpec) {
        tracing::info!(pod_uid = %self.pod.uid, container = %self.name, "{kind} probe failed {} times in a row; killing the container", spec.failure_threshold);
    }

    /// The kubelet's `killContainer`: the `preStop` hook within the grace period, then SIGTERM to
    /// the process group, SIGKILL once the rest of the grace period (at least the kubelet's
    /// two-second minimum, scaled) is over. Returns the exit code.
    async fn kill(
        &self,
        child: &mut tokio::process::Child,
        pid: u32,
        launch: &Launch,
        spec: &Container,
        grace: Duration,
    ) -> i32 {
        let begin = Instant::now();
        let pre_stop = spec.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref());
        if let Some(hook) = pre_stop {
            tokio::select! {
                _ = self.run_hook(hook, launch, spec, pid, grace) => {}
                status = child.wait() => return status.map(exit_code).unwrap_or(-1),
            }
        }
        let minimum = self.pod.shared.timings.scaled_grace(MINIMUM_GRACE_SECONDS);
        let remaining =
            grace.saturating_sub(begin.elapsed()).max(if pre_stop.is_some() { minimum } else { Duration::ZERO });
        spawn::signal_group(pid, Signal::SIGTERM);
        match tokio::time::timeout(remaining, child.wait()).await {
            Ok(status) => status.map(exit_code).unwrap_or(-1),
            Err(_) => {
                spawn::signal_group(pid, Signal::SIGKILL);
                child.wait().await.map(exit_code).unwrap_or(-1)
            }
        }
    }

    async fn run_hook(&self, hook: &LifecycleHandler, launch: &Launch, spec: &Container, pid: u32, grace: Duration) {
        let result = if let Some(exec) = &hook.exec {
            self.exec(exec.command.as_deref().unwrap_or_default(), launch, pid, grace).await
        } else if let Some(http) = &hook.http_get {
            match probes::resolve_port(&http.port, spec) {
                Ok(port) => {
                    let host = http
                        .host
                        .clone()
                        .filter(|h| !h.is_empty())
                        .unwrap_or_else(|| self.pod.addresses.pod_ip.to_string());
                    let https = http.scheme.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"));
                    let headers: Vec<_> =
                        http.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect();
                    let path = http.path.clone().unwrap_or_else(|| "/".into());
                    probes::http(&self.pod.shared.prober, https, &host, port, &path, &headers, grace).await
                }
                Err(_) => false,
            }
        } else if let Some(sleep) = &hook.sleep {
            tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64).min(grace)).await;
            true
        } else {
            true
        };
        if !result {
            tracing::info!(pod_uid = %self.pod.uid, container = %self.name, "PreStopHook failed");
        }
    }

    async fn attempt(&self, spec: &ProbeSpec, launch: &Launch, pid: u32) -> bool {
        match &spec.action {
            Action::Http { https, host, port, path, headers } => {
                probes::http(&self.pod.shared.prober, *https, host, *port, path, headers, spec.timeout).await
            }
            Action::Tcp { host, port } => probes::tcp(host, *port, spec.timeout).await,
            Action::Exec { command } => self.exec(command, launch, pid, spec.timeout).await,
        }
    }

    /// Runs `command` inside the container (its mount namespace, environment and working
    /// directory); `true` when it exits 0 within `timeout`.
    async fn exec(&self, command: &[String], launch: &Launch, pid: u32, timeout: Duration) -> bool {
        let Some(name) = command.first() else { return false };
        let images = &self.pod.shared.images;
        let image = self.spec(&self.pod.pod()).and_then(|c| c.image).unwrap_or_default();
        let image_dir = images.lookup(&image).filter(|p| p.is_dir());
        let path_env =
            launch.env.iter().rev().find(|(k, _)| k == "PATH").map_or(env::DEFAULT_PATH, |(_, v)| v.as_str());
        let Some(executable) = spawn::resolve_exec(name, image_dir, path_env) else {
            tracing::debug!(container = %self.name, "exec: {name:?}: executable file not found");
            return false;
        };
        let Ok(namespace) = spawn::mount_namespace_of(pid) else { return false };
        let exec = Launch {
            program: super::images::Program { executable, argv: command.to_vec() },
            env: launch.env.clone(),
            working_dir: launch.working_dir.clone(),
            mounts: Vec::new(),
        };
        let Ok(mut cmd) = spawn::command(&exec, Namespace::Join(namespace)) else { return false };
        cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        let Ok(mut child) = cmd.spawn() else { return false };
        let Some(exec_pid) = child.id() else { return false };
        let _guard = GroupGuard(exec_pid);
        matches!(tokio::time::timeout(timeout, child.wait()).await, Ok(Ok(status)) if status.success())
    }

    /// Copies what the process prints, line by line, into the container's current log.
    fn pump(&self, stream: impl AsyncRead + Unpin + Send + 'static) -> tokio::task::JoinHandle<()> {
        let logs = self.pod.shared.logs.clone();
        let (uid, name) = (self.pod.uid.clone(), self.name.clone());
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line);
                        let text = text.strip_suffix('\n').unwrap_or(&text);
                        logs.line(&uid, &name, Timestamp::now(), text.strip_suffix('\r').unwrap_or(text).to_owned());
                    }
                }
            }
        })
    }
}

/// A probe and when it runs next.
struct Scheduled {
    spec: ProbeSpec,
    tracker: Tracker,
    next: Instant,
    failures: u32,
}

impl Scheduled {
    fn new(spec: ProbeSpec, started: Instant, initial: bool) -> Self {
        let next = started + spec.initial_delay;
        Self { spec, tracker: Tracker::new(initial), next, failures: 0 }
    }

    /// For the startup probe: it failed `failureThreshold` times in a row.
    fn failures_exhausted(&mut self) -> bool {
        self.failures += 1;
        self.failures >= self.spec.failure_threshold
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The pod's addresses as the supervisor needs them.
pub(super) fn addresses(pod_ip: Ipv4Addr, host_ip: Ipv4Addr, api_server: SocketAddr) -> PodAddresses {
    PodAddresses { pod_ip, host_ip, api_server }
}
