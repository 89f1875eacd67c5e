//! `scripts/sandbox` as a user runs it, from tests: a sandbox on a free port range in its own process group, its
//! output in a file, `kubectl` against its kubeconfig, and the pids of its children.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Building nothing (`--no-build`), a sandbox starts in seconds; generous for a loaded 2-core machine.
pub const START: Duration = Duration::from_secs(240);

pub const READY: &str = "ready. In another terminal:";

pub fn ensure_binaries() {
    for (package, bin) in [
        ("kube-sim", "kube-sim"),
        ("hook-operator", "hook-operator"),
        ("gamedeployment-operator", "gamedeployment-operator"),
    ] {
        crate::binary(package, bin);
    }
}

pub fn bindable(addr: &str) -> bool {
    std::net::TcpListener::bind(addr).is_ok()
}

/// A base port P whose API port, both metrics ports, demo address (127.0.0.200:P+3) and webhook port (P+4) are
/// free, and that no other test of this process was given (they run in parallel and bind their ports only later).
pub fn free_base() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    let seed = (std::process::id() % 1200) as u16;
    let port = (0..2000u16)
        // Below Linux's ephemeral range (32768-60999), so no outgoing connection holds one of the ports.
        .map(|i| 20000 + ((seed + i * 37) % 1200) * 10)
        .find(|&p| {
            !given.contains(&p)
                && (0..3).all(|d| bindable(&format!("127.0.0.1:{}", p + d)))
                && bindable(&format!("127.0.0.200:{}", p + 3))
                && bindable(&format!("127.0.0.1:{}", p + 4))
        })
        .expect("a free port range");
    given.push(port);
    port
}

/// One `scripts/sandbox --debug --no-build --port P` in its own process group, its output in a file. Dropping it
/// stops it as Ctrl-C would (SIGTERM to the group; SIGKILL after 15 s).
pub struct Sandbox {
    pub port: u16,
    pub child: Child,
    output: PathBuf,
    /// Whether dropping it removes `.sandbox/PORT/` (not for a sandbox that was refused another one's port).
    pub owns_state: bool,
    _dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn start(port: u16) -> Self {
        Self::start_with(port, &[])
    }

    pub fn start_with(port: u16, flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let output = dir.path().join("sandbox.out");
        let file = std::fs::File::create(&output).expect("output file");
        let child = std::os::unix::process::CommandExt::process_group(
            Command::new("bash")
                .args(["scripts/sandbox", "--debug", "--no-build", "--port", &port.to_string()])
                .args(flags),
            0,
        )
        .current_dir(crate::repo_root())
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("output handle"))
        .stderr(file)
        .spawn()
        .expect("bash runs scripts/sandbox");
        Self { port, child, output, owns_state: true, _dir: dir }
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    pub fn state(&self) -> PathBuf {
        crate::repo_root().join(".sandbox").join(self.port.to_string())
    }

    pub fn pid_of(&self, name: &str) -> u32 {
        let text = std::fs::read_to_string(self.state().join(format!("{name}.pid"))).expect("pid file");
        text.trim().parse().expect("a pid")
    }

    /// A client of the sandbox's cluster as its admin (the kubeconfig the sandbox writes): for watches started before
    /// an action (`crate::observe`), which a `kubectl` poll of a transient state cannot replace.
    pub async fn client(&self) -> kube::Client {
        let path = self.state().join("kubeconfig");
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("the sandbox's kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a client configuration from the sandbox's kubeconfig");
        kube::Client::try_from(config).expect("a client of the sandbox")
    }

    /// Waits for the "ready" banner, failing with the output if the sandbox exits first.
    pub async fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if self.output().contains(READY) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("sandbox on port {} exited ({status}) before ready:\n{}", self.port, self.output());
            }
            assert!(start.elapsed() < START, "sandbox on port {} not ready:\n{}", self.port, self.output());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits for the sandbox to exit on its own; returns its exit code.
    pub async fn wait_exit(&mut self) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            assert!(start.elapsed() < START, "sandbox on port {} still running:\n{}", self.port, self.output());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The demo web server address the sandbox announced.
    pub fn demo_address(&self) -> String {
        let out = self.output();
        let line = out.lines().find(|l| l.contains("demo web server on")).expect("the demo server line");
        line.split("demo web server on ").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap().to_string()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // A sandbox that already exited has stopped its children itself; its process group id may be reused.
        if matches!(self.child.try_wait(), Ok(None)) {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(15) {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if matches!(self.child.try_wait(), Ok(None)) {
                let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
                let _ = self.child.wait();
            }
        }
        if std::thread::panicking() {
            eprintln!("--- sandbox on port {} ---\n{}", self.port, self.output());
        } else if self.owns_state {
            let _ = std::fs::remove_dir_all(self.state());
        }
    }
}

/// `kubectl` against a sandbox (its printed KUBECONFIG): (success, stdout, stderr).
pub fn kubectl(sandbox: &Sandbox, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", sandbox.state().join("kubeconfig"))
        .current_dir(crate::repo_root())
        .output()
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn kubectl_ok(sandbox: &Sandbox, args: &[&str]) -> String {
    let (ok, out, err) = kubectl(sandbox, args);
    assert!(ok, "kubectl {args:?}: {out}{err}");
    out
}
