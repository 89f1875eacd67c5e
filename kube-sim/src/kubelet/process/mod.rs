//! The process runtime: a container whose image is mapped to a program on this host (see
//! [`images`]) runs as a real process instead of a simulated one; every other container keeps
//! the simulated runtime (`runtime`), so nothing changes for unmapped images.
//!
//! Both runtimes meet in the pod's [`PodRuntime`]: the simulated one advances its containers
//! from the clock, while a process container's state is whatever its supervisor
//! ([`supervisor`]) last published, copied in by [`PodProcesses::apply`] before the status is
//! generated. The status, Events and deletion flow are then the same for both.
//!
//! The pieces, each pure where it can be: [`images`] (image → program), [`env`](mod@env) (environment
//! and command line), [`volumes`] (volumes as files), [`spawn`] (process group, death signal,
//! mount namespace), [`mount_points`] (mount points missing on the host, removed after use), [`probes`] (probe actions and thresholds), [`supervisor`] (the loop).

mod env;
pub(super) mod images;
mod mount_points;
mod network;
mod probes;
mod spawn;
mod supervisor;
mod volumes;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};

use super::runtime::{ContainerRuntime, Kind, PodRuntime, Probed, State, Timings, Transition};
use crate::logs::PodLogs;
pub(super) use images::ImageMap;
use supervisor::{Control, Groups, PodTask, Shared, Snapshots};

/// The process runtime of one kubelet simulator.
pub(super) struct ProcessRuntime {
    shared: Arc<Shared>,
    _state_dir: StateDir,
}

/// The directory holding every pod's volumes and kubeconfig, removed with the runtime.
struct StateDir(PathBuf);

impl Drop for StateDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::debug!(dir = %self.0.display(), error = %e, "removing the process runtime's directory failed");
        }
    }
}

/// How the process runtime is set up.
pub(super) struct Settings {
    pub images: ImageMap,
    pub api_server: SocketAddr,
    pub timings: Timings,
    /// The nodes' allocatable CPU (cores) and memory (bytes): `limits.*` of containers without limits.
    pub node_allocatable: (f64, f64),
}

impl ProcessRuntime {
    /// Creates the runtime; `notify` receives the UID of each pod whose processes changed.
    pub(super) fn new(
        client: kube::Client,
        settings: Settings,
        logs: Arc<PodLogs>,
        notify: mpsc::UnboundedSender<String>,
    ) -> Result<Self, String> {
        let suffix: u64 = rand::random();
        let dir = std::env::temp_dir().join(format!("kube-sim-pods-{}-{suffix:x}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let prober = probes::client().map_err(|e| format!("building the prober's HTTP client: {e}"))?;
        let shared = Shared {
            client,
            images: settings.images,
            api_server: settings.api_server,
            state_dir: dir.clone(),
            logs,
            timings: settings.timings,
            node_allocatable: settings.node_allocatable,
            notify,
            prober,
        };
        Ok(Self { shared: Arc::new(shared), _state_dir: StateDir(dir) })
    }

    /// The regular containers of `pod` whose image is mapped to a program.
    pub(super) fn process_containers(&self, pod: &Pod) -> Vec<String> {
        let containers = pod.spec.iter().flat_map(|s| &s.containers);
        containers
            .filter(|c| c.image.as_deref().is_some_and(|image| self.shared.images.lookup(image).is_some()))
            .map(|c| c.name.clone())
            .collect()
    }

    /// Starts supervising the process containers `names` of a pod whose sandbox (`runtime`) was
    /// just created, marking them in it as process containers.
    pub(super) fn start(&self, pod: &Pod, runtime: &mut PodRuntime, names: Vec<String>) -> PodProcesses {
        let mut snapshots = BTreeMap::new();
        for container in runtime.containers.iter_mut().filter(|c| c.kind == Kind::Regular && names.contains(&c.name)) {
            container.process = Some(Probed::default());
            snapshots.insert(container.name.clone(), container.clone());
        }
        let snapshots: Snapshots = Arc::new(Mutex::new(snapshots));
        let uid = runtime.uid.clone();
        let dir = self.shared.state_dir.join(&uid);
        let (control_tx, control_rx) = watch::channel(Control { pod: pod.clone(), stop: None });
        let groups = Arc::new(Groups::default());
        let task = PodTask {
            shared: self.shared.clone(),
            uid,
            addresses: supervisor::addresses(runtime.ip, runtime.host_ip, self.shared.api_server),
            dir: dir.clone(),
            control: control_rx,
            snapshots: snapshots.clone(),
            groups: groups.clone(),
        };
        let handle = tokio::spawn(task.run(names));
        PodProcesses { snapshots, control: control_tx, task: handle, groups, dir }
    }
}

/// The supervised processes of one pod; dropping it kills them.
pub(super) struct PodProcesses {
    snapshots: Snapshots,
    control: watch::Sender<Control>,
    task: tokio::task::JoinHandle<()>,
    groups: Arc<Groups>,
    dir: PathBuf,
}

impl PodProcesses {
    /// Hands the supervisor the newest pod, and the (scaled) grace period once it is being deleted.
    pub(super) fn update(&self, pod: &Pod, stop: Option<Duration>) {
        self.control.send_if_modified(|current| {
            let changed = current.pod.metadata.resource_version != pod.metadata.resource_version
                || (current.stop.is_none() && stop.is_some());
            if changed {
                current.pod = pod.clone();
                current.stop = current.stop.or(stop);
            }
            changed
        });
    }

    /// Copies what the supervisor published into the pod's runtime, and says what happened since
    /// (new instances, back-offs) for the Events.
    pub(super) fn apply(&self, runtime: &mut PodRuntime) -> Vec<Transition> {
        let snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        let mut transitions = Vec::new();
        for container in runtime.containers.iter_mut() {
            let Some(published) = snapshots.get(&container.name) else { continue };
            transitions.extend(what_happened(container, published));
            *container = published.clone();
        }
        transitions
    }
}

/// The Events a kubelet records between two states of a container.
fn what_happened(before: &ContainerRuntime, after: &ContainerRuntime) -> Vec<Transition> {
    let mut out = Vec::new();
    if after.container_id != before.container_id && matches!(after.state, State::Running { .. }) {
        out.push(Transition::Started { container: after.name.clone(), kind: after.kind, image: after.image.clone() });
    }
    if matches!(after.state, State::BackOff { .. }) && !matches!(before.state, State::BackOff { .. }) {
        out.push(Transition::BackOff { container: after.name.clone(), kind: after.kind });
    }
    out
}

impl Drop for PodProcesses {
    fn drop(&mut self) {
        self.task.abort();
        self.groups.kill_all();
        if self.dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&self.dir)
        {
            tracing::debug!(dir = %self.dir.display(), error = %e, "removing a pod's directory failed");
        }
    }
}
