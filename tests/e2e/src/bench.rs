//! Pieces the benchmark commands (`gamedeployment-bench`, `fleet-bench`) share: their arguments or a usage error,
//! an operator started as a child process with its metrics endpoint (optionally pinned to one CPU), polling with a
//! limit, and a process's CPU and memory from /proc.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The command's arguments, as `parsed` holds them; a usage error is printed and the command exits with status 1
/// (`ExitCode::FAILURE`) before anything starts.
pub fn args_or_exit<T>(parsed: Result<T, String>) -> T {
    parsed.unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    })
}

/// An operator binary running as a child process (killed when dropped).
pub struct OperatorProcess {
    pub child: tokio::process::Child,
    pub pid: u32,
    pub metrics: SocketAddr,
}

/// Starts `binary` against `kubeconfig` with its log in `log` and a free metrics port, and waits (30 s at most)
/// until the metrics endpoint accepts connections.
pub async fn start_operator_process(
    binary: &Path,
    kubeconfig: &Path,
    log: &Path,
    args: &[&str],
) -> Result<OperatorProcess, String> {
    start_operator_process_on(binary, kubeconfig, log, args, None).await
}

/// [`start_operator_process`] with the operator (and every process and thread it starts) pinned to `cpu` when it is
/// given: started through `taskset -c <cpu>`, which replaces itself with the operator (the child's pid is the
/// operator's).
pub async fn start_operator_process_on(
    binary: &Path,
    kubeconfig: &Path,
    log: &Path,
    args: &[&str],
    cpu: Option<usize>,
) -> Result<OperatorProcess, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let metrics = listener.local_addr().map_err(|e| e.to_string())?;
    drop(listener);
    let log = std::fs::File::create(log).map_err(|e| format!("log file {}: {e}", log.display()))?;
    let mut command = match cpu {
        Some(cpu) => {
            let mut command = tokio::process::Command::new("taskset");
            command.args(["-c", &cpu.to_string()]).arg(binary);
            command
        }
        None => tokio::process::Command::new(binary),
    };
    let child = command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--metrics-address", &metrics.to_string(), "--log-level", "warn"])
        .args(args)
        // As the chart runs them (templates/*-operator.yaml).
        .env("MIMALLOC_PURGE_DELAY", "0")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))?;
    let pid = child.id().ok_or_else(|| format!("{} exited at once", binary.display()))?;
    wait_until("the operator's metrics endpoint", Duration::from_secs(30), async || {
        tokio::net::TcpStream::connect(metrics).await.is_ok()
    })
    .await?;
    Ok(OperatorProcess { child, pid, metrics })
}

/// Polls `done` every 100 ms until it is true; an error naming `what` after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !done().await {
        if start.elapsed() > limit {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// CPU seconds (user + system) and current / peak resident memory (MiB) of a process, from /proc.
pub fn process_usage(pid: u32) -> Option<(f64, f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // Linux's USER_HZ is 100 on every supported platform (sysconf would need libc).
    let cpu = ticks / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
    };
    Some((cpu, kib("VmRSS:")? / 1024.0, kib("VmHWM:")? / 1024.0))
}

/// Pins every thread of process `pid` (and what they start later) to `cpu`, with `taskset -a -p`.
pub fn pin_process(pid: u32, cpu: usize) -> Result<(), String> {
    let output = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .output()
        .map_err(|e| format!("taskset: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("taskset: {}", String::from_utf8_lossy(&output.stderr).trim()))
    }
}
