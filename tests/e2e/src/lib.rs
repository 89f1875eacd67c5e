//! Harness for the end-to-end tests: a kube-sim cluster in the test process, the real operator binaries as
//! child processes, and the real `kubectl` pointed at it. Every test replays a user story through the same
//! interfaces a user has.
//!
//! Rules the harness enforces so tests never depend on timing luck: a wait for a settled state is [`wait_for`]
//! with a generous deadline; a state that something later removes (a HookRun's phase before it is collected, a pod
//! before its deletion) is observed on a watch started before the action ([`observe::Observer`]), never polled
//! for; and a failing test prints the operator logs.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use kube_sim::{SimConfig, SimHandle};

pub mod bench;
pub mod book;
pub mod chart_pods;
pub mod faults;
pub mod gamedeployment;
pub mod gate;
pub mod hint_commands;
pub mod hook;
pub mod manifests;
pub mod observe;
pub mod players;
pub mod sandbox;

/// Deadline for conditions that normally take well under a second; generous for a loaded 2-core CI machine.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// The repository root (where `crds/` and `examples/` are).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root exists")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo_root().join("target"))
}

/// Path of a workspace binary, brought up to date once per test process: `cargo build --workspace --bins` is a
/// no-op when the binaries are current (`scripts/test` builds them first), and a test never runs a stale operator.
/// The whole workspace, not the one package: Cargo unifies features over what it builds, so `-p <package>` alone
/// built each binary a second time with other features (serde_json without `preserve_order`, and every crate above
/// it) — minutes of CPU during the tests on a fresh clone, and binaries unlike the ones the sandbox and chart run.
///
/// `E2E_BIN_<BIN>` (upper case, `-` as `_`: `E2E_BIN_GAMEDEPLOYMENT_OPERATOR=/path`) runs another build of that
/// binary instead, e.g. the code before a fix, to see a new test fail on it.
pub fn binary(package: &str, bin: &str) -> PathBuf {
    if let Some(other) = std::env::var_os(format!("E2E_BIN_{}", bin.replace('-', "_").to_uppercase())) {
        return PathBuf::from(other);
    }
    static BUILT: OnceLock<Mutex<bool>> = OnceLock::new();
    let path = target_dir().join("debug").join(bin);
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if !*built {
        let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "-q", "--workspace", "--bins"])
            .current_dir(repo_root())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the workspace's binaries (for {package}'s {bin}) failed");
        *built = true;
    }
    path
}

/// Polls `probe` until it returns `Some`, failing the test with `what` after `timeout`: the one polling helper
/// kube-sim's own tests use too.
pub use kube_sim::testing::wait_for;

/// Short Lease timings (lease 3 s, renew deadline 2 s, retry 500 ms) so a takeover happens within seconds; the
/// Leases live in `default`. Without `--leader-elect`: sharded hook-operator replicas take Leases of their own.
pub const FAST_LEASES: &[&str] = &[
    "--leader-elect-namespace",
    "default",
    "--leader-elect-lease-duration",
    "3s",
    "--leader-elect-renew-deadline",
    "2s",
    "--leader-elect-retry-period",
    "500ms",
];

/// Leader election on, with the [`FAST_LEASES`] timings.
pub const FAST_ELECTION: &[&str] = &{
    let mut args = [""; FAST_LEASES.len() + 1];
    args[0] = "--leader-elect";
    let mut i = 0;
    while i < FAST_LEASES.len() {
        args[i + 1] = FAST_LEASES[i];
        i += 1;
    }
    args
};

/// Output of one `kubectl` invocation.
#[derive(Debug, Clone)]
pub struct KubectlOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// A kube-sim cluster (API server + kubelet simulator) with a kubeconfig on disk.
pub struct Cluster {
    sim: Option<SimHandle>,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    client: kube::Client,
}

impl Cluster {
    /// kube-sim with its kubelet, graceful deletion shortened 100x so terminating pods go quickly.
    pub async fn start() -> Self {
        let mut config = SimConfig::default();
        if let Some(kubelet) = config.kubelet.as_mut() {
            kubelet.grace_period_scale = 0.01;
        }
        Self::start_with(config).await
    }

    pub async fn start_with(config: SimConfig) -> Self {
        let sim = kube_sim::start(config).await.expect("kube-sim starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).expect("kubeconfig written");
        let client = sim.client().await;
        Self { sim: Some(sim), dir, kubeconfig, client }
    }

    pub fn sim(&self) -> &SimHandle {
        self.sim.as_ref().expect("cluster is running")
    }

    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A scratch directory that lives as long as the cluster (logs, generated manifests).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs the real `kubectl` against this cluster.
    pub async fn kubectl(&self, args: &[&str]) -> KubectlOutput {
        let output = tokio::process::Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            // A per-cluster discovery cache: a later cluster on a reused port must not see this one's.
            .env("KUBECACHEDIR", self.dir.path().join("kube-cache"))
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .output()
            .await
            .expect("kubectl runs");
        KubectlOutput {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs `kubectl` and fails the test, showing stderr, when it does not succeed.
    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args).await;
        assert!(out.success, "kubectl {} failed:\n{}{}", args.join(" "), out.stderr, out.stdout);
        out.stdout
    }

    /// `kubectl apply -f crds/` and waits until the three kinds are served.
    pub async fn install_crds(&self) {
        self.kubectl_ok(&["apply", "-f", "crds/"]).await;
        for resource in ["gamedeployments", "hooktemplates", "hookruns"] {
            wait_for(&format!("{resource} to be served"), DEADLINE, || async move {
                self.kubectl(&["get", resource]).await.success.then_some(())
            })
            .await;
        }
    }

    /// Starts an operator binary against this cluster; extra `args` come after the common ones.
    pub fn operator(&self, package: &str, bin: &str, args: &[&str]) -> Operator {
        Operator::spawn(binary(package, bin), self.kubeconfig.clone(), self.dir.path().join(format!("{bin}.log")), args)
    }

    /// [`Cluster::operator`] with its own log file `<log>.log` (several replicas of one binary, each with its log).
    pub fn operator_named(&self, package: &str, bin: &str, log: &str, args: &[&str]) -> Operator {
        Operator::spawn(binary(package, bin), self.kubeconfig.clone(), self.dir.path().join(format!("{log}.log")), args)
    }

    /// Starts an operator binary with another user's kubeconfig (e.g. a ServiceAccount token from
    /// [`SimHandle::write_kubeconfig_for_token`]), so its requests are authorized by RBAC.
    pub fn operator_with_kubeconfig(&self, package: &str, bin: &str, kubeconfig: &Path, args: &[&str]) -> Operator {
        let log = self.dir.path().join(format!("{bin}.log"));
        Operator::spawn(binary(package, bin), kubeconfig.to_path_buf(), log, args)
    }

    /// [`Cluster::operator_with_kubeconfig`] run with its descriptor limit (soft and hard `RLIMIT_NOFILE`) set to
    /// `descriptors` (util-linux `prlimit`, which execs the binary: the process is still the operator): a scaled-down
    /// stand-in for a process whose descriptors a client could exhaust.
    pub fn operator_with_descriptor_limit(
        &self,
        package: &str,
        bin: &str,
        kubeconfig: &Path,
        descriptors: u64,
        args: &[&str],
    ) -> Operator {
        let log = self.dir.path().join(format!("{bin}.log"));
        let mut op = Operator {
            binary: binary(package, bin),
            kubeconfig: kubeconfig.to_path_buf(),
            log,
            args: args.iter().map(|a| a.to_string()).collect(),
            descriptors: Some(descriptors),
            child: None,
        };
        op.start();
        op
    }

    pub async fn shutdown(mut self) {
        if let Some(sim) = self.sim.take() {
            sim.shutdown().await;
        }
    }
}

/// An operator running as a child process; killed when dropped. Its log is printed if the test fails.
pub struct Operator {
    binary: PathBuf,
    kubeconfig: PathBuf,
    log: PathBuf,
    args: Vec<String>,
    /// The descriptor limit it runs with (`prlimit --nofile`), or the test process's.
    descriptors: Option<u64>,
    child: Option<tokio::process::Child>,
}

impl Operator {
    fn spawn(binary: PathBuf, kubeconfig: PathBuf, log: PathBuf, args: &[&str]) -> Self {
        let args = args.iter().map(|a| a.to_string()).collect();
        let mut op = Self { binary, kubeconfig, log, args, descriptors: None, child: None };
        op.start();
        op
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("log file opens");
        let mut command = match self.descriptors {
            Some(n) => {
                let mut prlimit = tokio::process::Command::new("prlimit");
                prlimit.arg(format!("--nofile={n}:{n}")).arg("--").arg(&self.binary);
                prlimit
            }
            None => tokio::process::Command::new(&self.binary),
        };
        let child = command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--metrics-address", "127.0.0.1:0"])
            .args(&self.args)
            .env("RUST_LOG", std::env::var("E2E_OPERATOR_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        self.child = Some(child);
    }

    /// Stops the process (SIGKILL: the harshest restart, to prove crash safety).
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Kills and starts the operator again with the same arguments.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.start();
    }

    /// Whether the process is still running (an operator must never exit on its own).
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log_tail(&self.log, 80);
        }
    }
}

/// Prints the last `lines` lines of the log file at `path` to stderr, under a header naming it.
pub fn print_log_tail(path: &Path, lines: usize) {
    let logs = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = logs.lines().rev().take(lines).collect();
    eprintln!("--- last lines of {} ---", path.display());
    for line in tail.iter().rev() {
        eprintln!("{line}");
    }
}

/// The Python interpreter with Helm's SDK (`helm-python-sdk`), as set up by `scripts/test`
/// (`$KOURSE_PYTHON`, else `.venv/bin/python`). Checked once per test process: the check is a Python start that
/// loads Helm's Go library, as much CPU as the Helm call it would precede.
pub fn helm_python() -> PathBuf {
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let python = std::env::var_os("KOURSE_PYTHON")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo_root().join(".venv/bin/python"));
            let ok = std::process::Command::new(&python)
                .args(["-c", "import helm_python, yaml"])
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(
                ok,
                "{} cannot import helm_python: run scripts/test (it creates .venv with `pip install helm-python-sdk \
                 pyyaml`) or set KOURSE_PYTHON",
                python.display()
            );
            python
        })
        .clone()
}

/// Runs `tests/e2e/helm/chart.py` with `args`; returns stdout, failing the test with Helm's error otherwise.
pub async fn helm(args: &[&str]) -> String {
    let (success, stdout, stderr) = helm_outcome(args).await;
    assert!(success, "helm {} failed:\n{stderr}{stdout}", args.join(" "));
    stdout
}

/// Runs `tests/e2e/helm/chart.py` with `args`, expecting it to fail; returns Helm's error and output.
pub async fn helm_fails(args: &[&str]) -> String {
    let (success, stdout, stderr) = helm_outcome(args).await;
    assert!(!success, "helm {} succeeded:\n{stdout}", args.join(" "));
    format!("{stderr}{stdout}")
}

async fn helm_outcome(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(helm_python())
        .arg(repo_root().join("tests/e2e/helm/chart.py"))
        .args(args)
        .current_dir(repo_root())
        .output()
        .await
        .expect("python runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}
