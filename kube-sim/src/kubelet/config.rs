//! Settings of the simulated kubelet and scheduler.
//!
//! Every delay is configurable because the same simulator serves two audiences: the sandbox wants
//! realistic timings (30 s grace periods, 10 s crash-loop back-off) so people see what a cluster
//! does, while tests want everything scaled down so a story replays in seconds.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::Error;
use super::duration::parse_duration;
use super::process::images::{self, ImageMap, ImageRule};
use super::quantity;

/// Flags of the kubelet simulator; the `kube-sim` binary flattens them into its own.
#[derive(Clone, Debug, clap::Args)]
pub struct KubeletConfig {
    /// Number of fake nodes to register (named `<node-name-prefix>-1` … `-N`).
    #[arg(long = "nodes", default_value_t = DEFAULT_NODES)]
    pub nodes: u32,

    /// Prefix of the fake node names.
    #[arg(long = "node-name-prefix", default_value = DEFAULT_NODE_NAME_PREFIX)]
    pub node_name_prefix: String,

    /// How long a freshly scheduled pod shows `ContainerCreating` before its containers run.
    #[arg(long = "start-delay", default_value = "100ms", value_parser = parse_duration)]
    pub start_delay: Duration,

    /// How long a running container takes to become ready (default for pods without the
    /// `kube-sim.kourse.dev/ready-after` annotation).
    #[arg(long = "ready-delay", default_value = "300ms", value_parser = parse_duration)]
    pub ready_delay: Duration,

    /// Gap between a container being stopped and its replacement starting (image change,
    /// crash restart): the container is not ready during the gap.
    #[arg(long = "container-restart-delay", default_value = "300ms", value_parser = parse_duration)]
    pub container_restart_delay: Duration,

    /// Multiplier applied to `deletionGracePeriodSeconds` before a deleted pod's containers are
    /// stopped (1.0 = real time; tests use e.g. 0.01).
    #[arg(long = "grace-period-scale", default_value_t = 1.0)]
    pub grace_period_scale: f64,

    /// First crash-loop back-off delay; it doubles on every crash up to 30 times this value
    /// (10 s and 5 min on a real kubelet).
    #[arg(long = "crash-loop-backoff", default_value = "10s", value_parser = parse_duration)]
    pub crash_loop_backoff: Duration,

    /// Allocatable `pods` of every node.
    #[arg(long = "max-pods-per-node", default_value_t = DEFAULT_MAX_PODS_PER_NODE)]
    pub max_pods_per_node: u32,

    /// Allocatable CPU of every node (a Kubernetes quantity).
    #[arg(long = "node-cpu", default_value = DEFAULT_NODE_CPU)]
    pub node_cpu: String,

    /// Allocatable memory of every node (a Kubernetes quantity).
    #[arg(long = "node-memory", default_value = DEFAULT_NODE_MEMORY)]
    pub node_memory: String,

    /// First pod IP to hand out (a 127.x.y.z address outside 127.0.0.0/16). By default a random
    /// 127.N.0.1 so several simulators on one machine do not hand out the same addresses.
    #[arg(long = "pod-ip-start")]
    pub pod_ip_start: Option<Ipv4Addr>,

    /// How often each node re-posts its full status (a kubelet's `nodeStatusReportFrequency`).
    #[arg(long = "node-status-interval", default_value = "5m", value_parser = parse_duration)]
    pub node_status_interval: Duration,

    /// How often each node renews its Lease in `kube-node-lease` (the kubelet's heartbeat).
    #[arg(long = "node-lease-interval", default_value = "10s", value_parser = parse_duration)]
    pub node_lease_interval: Duration,

    /// Maximum number of concurrent API writes (bindings, status patches, deletions).
    #[arg(long = "kubelet-api-concurrency", default_value_t = DEFAULT_API_CONCURRENCY)]
    pub api_concurrency: usize,

    /// Record Events like the real scheduler and kubelet (`Scheduled`, `Pulled`, `Created`,
    /// `Started`, `Killing`, `BackOff`, `FailedScheduling`); `--kubelet-events=false` saves the
    /// writes in load tests.
    #[arg(long = "kubelet-events", default_value_t = true, action = clap::ArgAction::Set)]
    pub events: bool,

    /// Run containers of IMAGE as real processes (repeatable): PATH a directory holds the image's
    /// programs (`command[0]` is looked up there by file name), PATH a file is the program the image
    /// runs. An image without a tag matches every tag. Containers of other images stay simulated.
    #[arg(long = "image-map", value_name = "IMAGE=PATH")]
    pub image_map: Vec<ImageRule>,

    /// Run `busybox` and `alpine` containers with this host's tools and `python` ones with its
    /// Python 3, as real processes.
    #[arg(long = "host-images")]
    pub host_images: bool,

    /// Run the Helm chart's image (`ghcr.io/kourse-rs/gamedeployment-operators`) as real processes
    /// of the operator binaries built next to this kube-sim binary (`target/debug` or `target/release`).
    #[arg(long = "chart-images")]
    pub chart_images: bool,

    /// Where containers running as processes reach the API server (kube-sim sets it to its own address).
    #[arg(skip)]
    pub api_server: Option<std::net::SocketAddr>,
}

/// The repository of the Helm chart's image (`charts/gamedeployment-operators/values.yaml`).
pub(super) const CHART_IMAGE: &str = "ghcr.io/kourse-rs/gamedeployment-operators";

const DEFAULT_NODES: u32 = 3;
const DEFAULT_NODE_NAME_PREFIX: &str = "kube-sim-node";
const DEFAULT_MAX_PODS_PER_NODE: u32 = 1000;
const DEFAULT_NODE_CPU: &str = "32";
const DEFAULT_NODE_MEMORY: &str = "128Gi";
const DEFAULT_API_CONCURRENCY: usize = 32;

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            nodes: DEFAULT_NODES,
            node_name_prefix: DEFAULT_NODE_NAME_PREFIX.to_owned(),
            start_delay: Duration::from_millis(100),
            ready_delay: Duration::from_millis(300),
            container_restart_delay: Duration::from_millis(300),
            grace_period_scale: 1.0,
            crash_loop_backoff: Duration::from_secs(10),
            max_pods_per_node: DEFAULT_MAX_PODS_PER_NODE,
            node_cpu: DEFAULT_NODE_CPU.to_owned(),
            node_memory: DEFAULT_NODE_MEMORY.to_owned(),
            pod_ip_start: None,
            node_status_interval: Duration::from_secs(300),
            node_lease_interval: Duration::from_secs(10),
            api_concurrency: DEFAULT_API_CONCURRENCY,
            events: true,
            image_map: Vec::new(),
            host_images: false,
            chart_images: false,
            api_server: None,
        }
    }
}

impl KubeletConfig {
    /// A configuration with every delay scaled down for tests: pods become ready within about
    /// 100 ms, grace periods last 1 % of their nominal value, crash loops back off from 200 ms.
    pub fn fast() -> Self {
        Self {
            start_delay: Duration::from_millis(20),
            ready_delay: Duration::from_millis(50),
            container_restart_delay: Duration::from_millis(50),
            grace_period_scale: 0.01,
            crash_loop_backoff: Duration::from_millis(200),
            ..Self::default()
        }
    }

    /// Rejects settings that would make the simulation meaningless instead of failing later.
    pub(crate) fn validate(&self) -> Result<ValidConfig, Error> {
        let invalid = |field: &'static str, reason: String| Error::InvalidConfig { field, reason };
        if self.nodes == 0 {
            return Err(invalid("nodes", "at least one node is needed".into()));
        }
        if self.node_name_prefix.is_empty() {
            return Err(invalid("node_name_prefix", "must not be empty".into()));
        }
        if !self.grace_period_scale.is_finite() || self.grace_period_scale < 0.0 {
            return Err(invalid(
                "grace_period_scale",
                format!("{} is not a finite, non-negative number", self.grace_period_scale),
            ));
        }
        if quantity::parse(&self.node_cpu).is_none() {
            return Err(invalid("node_cpu", format!("{:?} is not a quantity", self.node_cpu)));
        }
        if quantity::parse(&self.node_memory).is_none() {
            return Err(invalid("node_memory", format!("{:?} is not a quantity", self.node_memory)));
        }
        if let Some(ip) = self.pod_ip_start {
            let [a, b, ..] = ip.octets();
            if a != 127 || b == 0 {
                return Err(invalid("pod_ip_start", format!("{ip} is not a loopback address outside 127.0.0.0/16")));
            }
        }
        for (field, interval) in
            [("node_status_interval", self.node_status_interval), ("node_lease_interval", self.node_lease_interval)]
        {
            if interval.is_zero() {
                return Err(invalid(field, "must be longer than zero".into()));
            }
        }
        if self.api_concurrency == 0 {
            return Err(invalid("api_concurrency", "must be at least 1".into()));
        }
        Ok(ValidConfig { raw: self.clone() })
    }
}

/// A configuration that passed validation.
#[derive(Clone, Debug)]
pub(crate) struct ValidConfig {
    pub raw: KubeletConfig,
}

impl ValidConfig {
    /// The images that run as processes: `--image-map` rules first, then the chart's and the host's.
    pub(crate) fn image_map(&self) -> ImageMap {
        let mut rules = self.raw.image_map.clone();
        if self.raw.chart_images
            && let Some(dir) = binaries_dir()
        {
            rules.push(ImageRule { image: CHART_IMAGE.into(), path: dir });
        }
        if self.raw.host_images {
            rules.extend(images::host_rules());
        }
        ImageMap::new(rules)
    }

    /// Names of the fake nodes, in registration order.
    pub(crate) fn node_names(&self) -> Vec<String> {
        (1..=self.raw.nodes).map(|i| format!("{}-{i}", self.raw.node_name_prefix)).collect()
    }
}

/// The directory of the workspace's binaries: this executable's (`target/debug`), or its parent for a
/// test binary (`target/debug/deps`).
fn binaries_dir() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    Some(if dir.ends_with("deps") { dir.parent()?.to_path_buf() } else { dir.to_path_buf() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        kubelet: KubeletConfig,
    }

    #[test]
    fn clap_defaults_match_default_impl() {
        let parsed = Cli::try_parse_from(["kube-sim"]).unwrap().kubelet;
        assert_eq!(format!("{parsed:?}"), format!("{:?}", KubeletConfig::default()));
    }

    #[test]
    fn flags_parse() {
        let parsed = Cli::try_parse_from([
            "kube-sim",
            "--nodes",
            "5",
            "--ready-delay",
            "2s",
            "--grace-period-scale",
            "0.01",
            "--pod-ip-start",
            "127.9.0.1",
            "--kubelet-events=false",
        ])
        .unwrap()
        .kubelet;
        assert_eq!(parsed.nodes, 5);
        assert_eq!(parsed.ready_delay, Duration::from_secs(2));
        assert_eq!(parsed.grace_period_scale, 0.01);
        assert_eq!(parsed.pod_ip_start, Some(Ipv4Addr::new(127, 9, 0, 1)));
        assert!(!parsed.events);
    }

    #[test]
    fn validation_rejects_nonsense() {
        let bad = [
            KubeletConfig { nodes: 0, ..Default::default() },
            KubeletConfig { grace_period_scale: f64::NAN, ..Default::default() },
            KubeletConfig { grace_period_scale: -1.0, ..Default::default() },
            KubeletConfig { node_cpu: "lots".into(), ..Default::default() },
            KubeletConfig { pod_ip_start: Some(Ipv4Addr::new(10, 0, 0, 1)), ..Default::default() },
            KubeletConfig { pod_ip_start: Some(Ipv4Addr::new(127, 0, 0, 2)), ..Default::default() },
            KubeletConfig { api_concurrency: 0, ..Default::default() },
            KubeletConfig { node_lease_interval: Duration::ZERO, ..Default::default() },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?} should be rejected");
        }
        let valid = KubeletConfig::default().validate().unwrap();
        assert_eq!(valid.node_names(), ["kube-sim-node-1", "kube-sim-node-2", "kube-sim-node-3"]);
    }
}
