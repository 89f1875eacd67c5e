//! Where tenant input is evaluated, and how it is stopped at its bounds.
//!
//! Reading an answer (decoding JSON, the jsonPath) and judging it (the conditions) is work whose size the template
//! author chooses. Inside the operator's process it cannot be stopped once started: `expr-lang` and `jsonpath-rust`
//! are not interruptible, a thread cannot be killed, and a failed allocation aborts the whole process. So every
//! evaluation that is not cheap by construction runs in a separate **evaluation worker process**
//! ([`worker`]), where the operating system enforces the bounds while the work runs:
//!
//! - **memory**: the worker's allocator refuses any allocation past the budget (`--condition-memory-bytes`,
//!   counted from the job's start) and the worker aborts: nothing past the bound is ever allocated;
//! - **time**: the operator kills the worker when the job's deadline (`--condition-timeout`) passes;
//! - after either, a fresh worker takes the place of the old one at once; the measurement is an `Error` whose
//!   message names the bound; the namespace's evaluations move to the penalty lane ([`workers`]).
//!
//! Cheap by construction, and judged on the calling thread without a worker: an answer of at most
//! [`INLINE_BODY_BYTES`] read without a jsonPath or with a path of member names only (`{$.age}`), or a Prometheus
//! answer of that size, judged by conditions that [`crate::conditions::evaluate::inline_safe`] admits (no loops, no
//! ranges, a scalar result). That is every condition of the BCS and Argo documentation on their usual answers, and a
//! worker round trip would cost more than the evaluation itself.
//!
//! A worker is the `hook-operator` executable itself (`hook-operator evaluator`). Tests and embedders that have no
//! such executable use [`Evaluator::Threads`]: the same jobs on in-process threads, with checkpoints instead of hard
//! bounds (see [`crate::conditions::budget`]).

pub(crate) mod job;
pub(crate) mod judge;
pub mod worker;
pub mod workers;

use std::sync::Arc;
use std::time::Duration;

pub use job::{Job, Outcome, Reading, Verdict};

/// Largest answer read and judged on the calling thread (see the module docs).
pub const INLINE_BODY_BYTES: usize = 64 * 1024;

/// Why an evaluation gave no outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// It needed more memory than the budget.
    Memory,
    /// It ran past its deadline.
    Time,
    /// The worker ended otherwise (a stack overflow, a signal), or the evaluation panicked.
    Crashed(String),
    /// No worker could take it.
    Unavailable(String),
    /// It waited this long for a worker.
    Queued(Duration),
}

/// How conditions are evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// In-process threads: bounds checked at checkpoints only (tests, embedders).
    Threads,
    /// Worker processes running this executable.
    Processes(std::path::PathBuf),
}

/// The `hook-operator` executable to run workers from: this one, or a `hook-operator` next to it (`hook-bench`,
/// `hook-fuzz` and `kubectl-gd` are built into the same directory). `None` when there is neither (an embedder
/// installed alone, such as the `kubectl gd` plugin copied on its own).
pub fn default_binary() -> Option<std::path::PathBuf> {
    let current = std::env::current_exe().ok()?;
    if current.file_name().is_some_and(|n| n == "hook-operator") {
        return Some(current);
    }
    let sibling = current.with_file_name("hook-operator");
    sibling.is_file().then_some(sibling)
}

/// Worker processes from `binary`, else from [`default_binary`]; in-process threads when there is no worker
/// executable at all (an embedder on its own: `kubectl gd check` judges the user's own template on their machine).
pub fn processes_or_threads(binary: Option<std::path::PathBuf>) -> Isolation {
    match binary.or_else(default_binary) {
        Some(binary) => Isolation::Processes(binary),
        None => Isolation::Threads,
    }
}

/// Evaluates jobs: on worker processes (the operator) or in-process threads.
#[derive(Clone)]
pub enum Evaluator {
    /// In-process threads (`check`, tests, `--condition-isolation thread`): a budget overrun stops only the evaluation.
    Threads(Arc<crate::conditions::budget::Pool>),
    /// Worker processes (the operator's default): a crash or an allocation past the bound ends a worker, not the
    /// operator.
    Processes(Arc<workers::Workers>),
}

impl Evaluator {
    /// Registers the evaluation workers' metrics (nothing for in-process threads).
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        if let Self::Processes(workers) = self {
            workers.register(registry);
        }
    }

    /// The time and memory limits one evaluation runs under.
    pub fn limits(&self) -> crate::conditions::budget::Limits {
        match self {
            Self::Threads(pool) => pool.limits,
            Self::Processes(workers) => workers.limits(),
        }
    }

    /// Runs `job` on `body`, queued fairly with the other evaluations of `namespace`.
    pub async fn run(&self, namespace: &str, job: Job, body: Vec<u8>) -> Result<Outcome, Stopped> {
        match self {
            Self::Threads(pool) => {
                let limits = pool.limits;
                pool.run(namespace, move || {
                    let outcome = job.perform(&body);
                    drop(body);
                    outcome
                })
                .await
                .map_err(|stopped| match stopped {
                    crate::conditions::budget::Stopped::Panicked(message) => Stopped::Crashed(message),
                    crate::conditions::budget::Stopped::Late(_) => Stopped::Queued(limits.timeout),
                })
            }
            Self::Processes(workers) => workers.run(namespace, job, body).await,
        }
    }

    /// The message of a measurement whose evaluation was stopped: what was evaluated and which bound stopped it.
    pub fn explain(&self, job: &Job, stopped: &Stopped) -> String {
        let limits = self.limits();
        let (which, condition) = job.condition();
        let judged = if condition.is_empty() { String::new() } else { format!(" with {which} `{condition}`") };
        let what = format!("evaluating {}{judged}", job.source());
        match stopped {
            Stopped::Memory => format!(
                "{what} was stopped at the memory bound: it needed more than {} (--condition-memory-bytes)",
                crate::text::bytes(limits.memory)
            ),
            Stopped::Time => format!(
                "{what} was stopped at the time bound: no verdict within {} (--condition-timeout)",
                crate::text::seconds(limits.timeout)
            ),
            Stopped::Crashed(how) => format!("{what} failed inside its evaluation worker ({how})"),
            Stopped::Unavailable(why) => format!("{what} could not start: {why}"),
            Stopped::Queued(waited) => format!(
                "{what} waited {} for an evaluation worker without getting one: this namespace's evaluations were \
                 stopped at their bounds recently, so they run one at a time in the penalty lane",
                crate::text::seconds(*waited)
            ),
        }
    }
}
