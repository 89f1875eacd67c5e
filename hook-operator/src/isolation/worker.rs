//! The evaluation worker: `hook-operator evaluator`, started by the operator (never by a user). It reads jobs from
//! stdin and writes outcomes to stdout, one at a time, and holds nothing else: no client, no credentials, no
//! sockets. Its bounds are the operating system's, so they hold in the middle of any step:
//!
//! - memory: the global allocator refuses any allocation that would take the process more than the budget above
//!   what it held when the job arrived ([`crate::conditions::budget::cap_process`]); the refusal writes
//!   `OVER_MEMORY` to stdout and the process aborts;
//! - time: the operator kills the process when the job's deadline passes, counted from when the job is sent (the
//!   worker says `READY` once it has started, so its start is not counted against the first job);
//! - the process dies with the operator (`PR_SET_PDEATHSIG`), writes no core file, and runs the job on a thread
//!   with a large stack (evaluation recurses; [`crate::conditions::syntax`] bounds the depth).

use std::io::{BufReader, BufWriter};
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::job::{self, OVER_MEMORY, Outcome, READY, Verdict};

/// Flags of the `evaluator` subcommand (set by the operator when it starts a worker).
#[derive(clap::Args, Debug, Clone)]
pub struct WorkerFlags {
    /// Memory one job may add, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub memory_bytes: usize,
    /// Largest answer body a job may carry, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_body_bytes: u32,
    /// The job's deadline, also checked inside the evaluation (the operator kills the process at the same bound).
    #[arg(long, value_parser = common::runtime::flags::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// Written, without allocating, by the allocator when it refuses an allocation; the process then aborts.
fn over_memory() {
    let marker = OVER_MEMORY.to_le_bytes();
    // SAFETY: writes 4 bytes from a live stack buffer to fd 1; no allocation, async-signal-safe.
    unsafe {
        libc::write(1, marker.as_ptr().cast(), marker.len());
    }
}

/// Ties this process' life to its parent's and turns off core files (an abort at the memory cap is expected).
fn detach_from_failures(parent: u32) {
    // SAFETY: plain system calls with valid arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
    }
    // The parent may have died before PR_SET_PDEATHSIG took effect.
    if std::os::unix::process::parent_id() != parent {
        std::process::exit(0);
    }
}

/// Serves jobs until stdin closes. Exit code 0 at a clean end, 2 when the input is not a job stream.
pub fn serve(flags: WorkerFlags) -> ExitCode {
    detach_from_failures(std::os::unix::process::parent_id());
    let spawned = std::thread::Builder::new()
        .name("evaluator".into())
        .stack_size(crate::conditions::budget::STACK_BYTES)
        .spawn(move || serve_on_this_thread(&flags));
    match spawned.map(|t| t.join()) {
        Ok(Ok(code)) => code,
        _ => ExitCode::from(2),
    }
}

fn serve_on_this_thread(flags: &WorkerFlags) -> ExitCode {
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    // Reading a job may take its body's size; evaluating it, the budget on top.
    let reading_room = flags.max_body_bytes as usize + (job::MAX_FRAME_BYTES as usize) * 2;
    crate::conditions::budget::cap_process(reading_room, over_memory);
    if std::io::Write::write_all(&mut output, &READY.to_le_bytes())
        .and_then(|()| std::io::Write::flush(&mut output))
        .is_err()
    {
        return ExitCode::from(2);
    }
    loop {
        crate::conditions::budget::recap_process(reading_room);
        let (job, body) = match job::read_job(&mut input, flags.max_body_bytes) {
            Ok(Some(job)) => job,
            Ok(None) => return ExitCode::SUCCESS,
            Err(_) => return ExitCode::from(2),
        };
        crate::conditions::budget::recap_process(flags.memory_bytes);
        let deadline = Instant::now() + flags.timeout;
        let outcome = crate::conditions::budget::metered(flags.memory_bytes, deadline, || {
            std::panic::catch_unwind(AssertUnwindSafe(|| job.perform(&body)))
        });
        let outcome = outcome.unwrap_or_else(|panic| Outcome {
            display: None,
            verdict: Verdict::Error(format!(
                "the evaluation failed inside the operator ({})",
                crate::conditions::budget::panic_message(panic.as_ref())
            )),
        });
        drop((job, body));
        if job::write_outcome(&mut output, &outcome).is_err() {
            return ExitCode::from(2);
        }
    }
}
