//! The operator's side of the evaluation workers: a few `hook-operator evaluator` processes, the queues that feed
//! them, and what happens at a bound (the process is killed or has aborted; a fresh one takes its place at once).
//!
//! Fairness has two layers:
//!
//! - **Namespaces take turns**: each lane keeps one queue per namespace and serves them round-robin.
//! - **A namespace that hit a bound moves to the penalty lane**: when one of its evaluations is stopped (time,
//!   memory, crash), its evaluations are served for [`Settings::penalty`] (renewed by every further stop) by one
//!   worker of their own, run at the lowest CPU priority (`nice 19`). The normal workers never run them, so the
//!   worst a namespace's conditions can do to the others is one stopped evaluation per penalty period.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Notify, oneshot};

use super::Stopped;
use super::job::{self, Job, OVER_MEMORY, Outcome, READY};
use crate::conditions::budget::Turns;

/// Longest a new worker may take to say it is ready before it is killed and the job is answered `Unavailable`.
const WORKER_START_LIMIT: Duration = Duration::from_secs(30);

/// How the workers are started and bounded.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `hook-operator` executable (it serves jobs as `hook-operator evaluator`).
    pub binary: PathBuf,
    /// Workers for namespaces in good standing (at least 1).
    pub workers: usize,
    /// The limits of one evaluation, enforced in the worker.
    pub limits: crate::conditions::budget::Limits,
    /// The largest answer body sent to a worker (the providers' `--max-body-bytes`).
    pub max_body_bytes: usize,
    /// How long a namespace stays in the penalty lane after an evaluation of its was stopped.
    pub penalty: Duration,
    /// Longest wait for a worker (queueing) before the evaluation is given up.
    pub queue_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Normal,
    Penalty,
}

struct Pending {
    job: Job,
    body: Vec<u8>,
    reply: oneshot::Sender<Result<Outcome, Stopped>>,
}

#[derive(Default)]
struct Queues {
    normal: Turns<Pending>,
    penalty: Turns<Pending>,
    /// Namespaces in the penalty lane, until when.
    penalised: HashMap<String, Instant>,
}

/// The worker processes and their queues.
pub struct Workers {
    settings: Settings,
    queues: Mutex<Queues>,
    normal_ready: Notify,
    penalty_ready: Notify,
    metrics: WorkerMetrics,
}

/// How one evaluation on a worker ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndLabels {
    /// `verdict` (an outcome came back), `time`, `memory` (stopped at that bound) or `crashed`.
    pub end: &'static str,
}

/// The workers' Prometheus metrics (bounded labels: how an evaluation ended).
#[derive(Clone, Default)]
pub struct WorkerMetrics {
    /// `hook_operator_evaluations_total{end}`.
    pub evaluations: Family<EndLabels, Counter>,
    /// `hook_operator_evaluation_workers_started_total`: a rising count means workers keep being replaced.
    pub started: Counter,
    /// `hook_operator_penalised_namespaces`: namespaces in the penalty lane.
    pub penalised: Gauge,
}

/// Counters, as tests and benchmarks read them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Evaluations that came back with an outcome.
    pub evaluated: u64,
    /// Evaluations stopped at the time bound.
    pub stopped_time: u64,
    /// Evaluations stopped at the memory bound.
    pub stopped_memory: u64,
    /// Evaluations whose worker crashed.
    pub crashed: u64,
    /// Worker processes started.
    pub spawned: u64,
}

impl Workers {
    /// Starts the lanes on the current tokio runtime (a lane starts its process with its first job).
    pub fn start(settings: Settings) -> Result<Arc<Self>, String> {
        if !settings.binary.is_file() {
            return Err(format!(
                "the evaluation worker {} does not exist (it is the hook-operator executable; set \
                 --condition-worker-binary, or --condition-isolation thread)",
                settings.binary.display()
            ));
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "evaluation workers need a tokio runtime to be started from".to_string())?;
        let workers = Arc::new(Self {
            settings,
            queues: Mutex::default(),
            normal_ready: Notify::new(),
            penalty_ready: Notify::new(),
            metrics: WorkerMetrics::default(),
        });
        let lanes = std::iter::repeat_n(Lane::Normal, workers.settings.workers.max(1)).chain([Lane::Penalty]);
        for lane in lanes {
            runtime.spawn(serve(Arc::downgrade(&workers), lane));
        }
        Ok(workers)
    }

    /// The limits one evaluation runs under.
    pub fn limits(&self) -> crate::conditions::budget::Limits {
        self.settings.limits
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let ended = |end| self.metrics.evaluations.get_or_create(&EndLabels { end }).get();
        Stats {
            evaluated: ended("verdict"),
            stopped_time: ended("time"),
            stopped_memory: ended("memory"),
            crashed: ended("crashed"),
            spawned: self.metrics.started.get(),
        }
    }

    /// Registers the workers' metrics under `hook_operator_`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("hook_operator");
        r.register(
            "evaluations",
            "Evaluations on the worker processes, by how they ended (verdict, or stopped at the time or memory bound, \
             or crashed)",
            self.metrics.evaluations.clone(),
        );
        r.register("evaluation_workers_started", "Evaluation worker processes started", self.metrics.started.clone());
        r.register(
            "penalised_namespaces",
            "Namespaces whose evaluations run in the penalty lane (one of them was stopped at a bound recently)",
            self.metrics.penalised.clone(),
        );
    }

    /// Whether `namespace` is in the penalty lane now.
    pub fn penalised(&self, namespace: &str) -> bool {
        self.queues().penalised.get(namespace).is_some_and(|until| *until > Instant::now())
    }

    fn queues(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ended(&self, end: &'static str) {
        self.metrics.evaluations.get_or_create(&EndLabels { end }).inc();
    }

    /// Evaluates `job` on a worker, queued with the other evaluations of `namespace`.
    pub async fn run(&self, namespace: &str, job: Job, body: Vec<u8>) -> Result<Outcome, Stopped> {
        if body.len() > self.settings.max_body_bytes {
            return Err(Stopped::Memory);
        }
        let (reply, answer) = oneshot::channel();
        let lane = {
            let mut queues = self.queues();
            let lane = match queues.penalised.get(namespace) {
                Some(until) if *until > Instant::now() => Lane::Penalty,
                Some(_) => {
                    queues.penalised.remove(namespace);
                    self.metrics.penalised.set(queues.penalised.len() as i64);
                    Lane::Normal
                }
                None => Lane::Normal,
            };
            let pending = Pending { job, body, reply };
            match lane {
                Lane::Normal => queues.normal.push(namespace, pending),
                Lane::Penalty => queues.penalty.push(namespace, pending),
            }
            lane
        };
        self.ready(lane).notify_one();
        match tokio::time::timeout(self.settings.queue_timeout, answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(Stopped::Unavailable("the evaluation worker stopped".into())),
            Err(_) => Err(Stopped::Queued(self.settings.queue_timeout)),
        }
    }

    fn ready(&self, lane: Lane) -> &Notify {
        match lane {
            Lane::Normal => &self.normal_ready,
            Lane::Penalty => &self.penalty_ready,
        }
    }

    fn next(&self, lane: Lane) -> Option<(String, Pending)> {
        let mut queues = self.queues();
        // A caller that gave up waiting is skipped.
        let wanted = |pending: &Pending| !pending.reply.is_closed();
        match lane {
            Lane::Normal => queues.normal.pop(wanted),
            Lane::Penalty => queues.penalty.pop(wanted),
        }
    }

    /// `namespace`'s evaluation was stopped at a bound: its evaluations go to the penalty lane from now on (the
    /// ones already waiting included).
    fn penalise(&self, namespace: &str) {
        let moved = {
            let mut queues = self.queues();
            queues.penalised.insert(namespace.to_string(), Instant::now() + self.settings.penalty);
            let waiting = queues.normal.take_namespace(namespace);
            let moved = !waiting.is_empty();
            for pending in waiting {
                queues.penalty.push(namespace, pending);
            }
            // Forget namespaces whose penalty ended (bounded map, and the gauge counts only current penalties).
            let now = Instant::now();
            queues.penalised.retain(|_, until| *until > now);
            self.metrics.penalised.set(queues.penalised.len() as i64);
            moved
        };
        if moved {
            self.penalty_ready.notify_one();
        }
        tracing::warn!(namespace, penalty = ?self.settings.penalty, "an evaluation was stopped at its bound: this namespace's evaluations run in the penalty lane");
    }
}

/// One worker process and its pipes.
struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
}

/// Why an exchange with a worker ended without an outcome.
enum Failure {
    Time,
    Memory,
    Crashed(String),
}

impl Process {
    /// Spawned from a lane's task, that is from a runtime worker thread: `PR_SET_PDEATHSIG` fires when the
    /// spawning *thread* ends, and runtime worker threads live as long as the runtime (a blocking-pool thread would
    /// end after idling and take the worker with it).
    fn spawn(settings: &Settings, lane: Lane) -> Result<Self, String> {
        let mut child = Command::new(&settings.binary)
            .arg("evaluator")
            .arg("--memory-bytes")
            .arg(settings.limits.memory.to_string())
            .arg("--max-body-bytes")
            .arg(settings.max_body_bytes.min(u32::MAX as usize).to_string())
            .arg("--timeout")
            .arg(format!("{}ms", settings.limits.timeout.as_millis().max(1)))
            .env_clear()
            // Memory a job freed goes back to the system at once: the worker's resident size follows its live
            // bytes (mimalloc keeps freed pages 10 ms by default), so what it holds stays close to the budget.
            .env("MIMALLOC_PURGE_DELAY", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting the evaluation worker {}: {e}", settings.binary.display()))?;
        if lane == Lane::Penalty
            && let Some(pid) = child.id()
        {
            // SAFETY: a plain system call on our own child's pid.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, pid, 19);
            }
        }
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the evaluation worker has no pipes".into());
        };
        Ok(Self { child, stdin, stdout })
    }

    /// Waits for the worker's [`READY`]: the start of a process (exec, loading the binary) can take seconds on a
    /// busy node, and it is the operator's cost, not the job's.
    async fn ready(&mut self) -> Result<(), String> {
        let mut marker = [0u8; 4];
        match tokio::time::timeout(WORKER_START_LIMIT, self.stdout.read_exact(&mut marker)).await {
            Ok(Ok(_)) if u32::from_le_bytes(marker) == READY => Ok(()),
            Ok(Ok(_)) => Err("the evaluation worker did not start with its ready mark".into()),
            Ok(Err(e)) => Err(format!("the evaluation worker ended while starting: {e}")),
            Err(_) => Err(format!("the evaluation worker did not start within {WORKER_START_LIMIT:?}")),
        }
    }

    async fn exchange(&mut self, job: &Job, body: &[u8], timeout: Duration) -> Result<Outcome, Failure> {
        // The header framed here, the body written as it is (no copy of a large answer).
        let mut head = Vec::with_capacity(512);
        job::write_header(&mut head, job, body.len()).map_err(|e| Failure::Crashed(e.to_string()))?;
        let talk = async {
            self.stdin.write_all(&head).await?;
            self.stdin.write_all(body).await?;
            self.stdin.flush().await?;
            let mut len = [0u8; 4];
            self.stdout.read_exact(&mut len).await?;
            let len = u32::from_le_bytes(len);
            if len == OVER_MEMORY {
                return Ok(None);
            }
            if len > job::MAX_FRAME_BYTES {
                return Err(std::io::Error::other(format!("an outcome of {len} bytes")));
            }
            let mut bytes = vec![0u8; len as usize];
            self.stdout.read_exact(&mut bytes).await?;
            Ok(Some(bytes))
        };
        match tokio::time::timeout(timeout, talk).await {
            Err(_) => Err(Failure::Time),
            Ok(Ok(None)) => Err(Failure::Memory),
            Ok(Ok(Some(bytes))) => serde_json::from_slice(&bytes).map_err(|e| Failure::Crashed(e.to_string())),
            Ok(Err(e)) => {
                // The process died: say how.
                let status = tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await;
                Err(Failure::Crashed(match status {
                    Ok(Ok(status)) => status.to_string(),
                    _ => e.to_string(),
                }))
            }
        }
    }
}

/// Serves one lane with one process at a time, replacing it whenever a job stops it.
async fn serve(workers: std::sync::Weak<Workers>, lane: Lane) {
    let mut process: Option<Process> = None;
    loop {
        let Some(workers) = workers.upgrade() else { return };
        let Some((namespace, pending)) = workers.next(lane) else {
            let ready = workers.ready(lane);
            // Wake at least every second to notice that the pool was dropped.
            let _ = tokio::time::timeout(Duration::from_secs(1), ready.notified()).await;
            continue;
        };
        // Started on the lane's first job, and after a job stopped the previous one: an idle lane costs no memory.
        if process.is_none() {
            match Process::spawn(&workers.settings, lane) {
                Ok(mut p) => match p.ready().await {
                    Ok(()) => {
                        workers.metrics.started.inc();
                        process = Some(p);
                    }
                    Err(e) => tracing::error!(error = %e, "cannot start an evaluation worker"),
                },
                Err(e) => tracing::error!(error = %e, "cannot start an evaluation worker"),
            }
        }
        let Some(worker) = process.as_mut() else {
            let _ = pending.reply.send(Err(Stopped::Unavailable("no evaluation worker could be started".into())));
            continue;
        };
        let result = worker.exchange(&pending.job, &pending.body, workers.settings.limits.timeout).await;
        let answer = match result {
            Ok(outcome) => {
                workers.ended("verdict");
                Ok(outcome)
            }
            Err(failure) => {
                // Killed on drop (and reaped by tokio); a fresh process is started before the next job.
                process = None;
                workers.penalise(&namespace);
                Err(match failure {
                    Failure::Time => {
                        workers.ended("time");
                        Stopped::Time
                    }
                    Failure::Memory => {
                        workers.ended("memory");
                        Stopped::Memory
                    }
                    Failure::Crashed(how) => {
                        workers.ended("crashed");
                        Stopped::Crashed(how)
                    }
                })
            }
        };
        drop(pending.body);
        let _ = pending.reply.send(answer);
    }
}
