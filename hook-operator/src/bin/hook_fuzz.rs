//! `hook-fuzz`: hostile inputs for everything a tenant controls (conditions, JSONPaths, templates, durations,
//! HookTemplate validation, web responses), many more cases than the property tests run. Prints the cases run,
//! the slowest case and every failure (a panic, or a case over the deadline); exits 1 when any failed.
//!
//! ```sh
//! cargo run --release -p hook-operator --bin hook-fuzz -- --cases 20000 --seed 1
//! ```

/// Counted like the operator, so conditions get the same memory budget.
#[global_allocator]
static ALLOCATOR: hook_operator::conditions::budget::Counting<std::alloc::System> =
    hook_operator::conditions::budget::Counting(std::alloc::System);

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use hook_operator::conditions::budget::Limits;
use hook_operator::isolation::{Evaluator, workers};
use hook_operator::testing::fuzz;

#[derive(Parser)]
#[command(name = "hook-fuzz", about = "Hostile inputs for the hook-operator's parsers, evaluators and validation")]
struct Flags {
    /// Cases per target.
    #[arg(long, default_value_t = 5000)]
    cases: u64,
    /// First seed (cases use seed, seed+1, ...); a failure prints its seed to reproduce it.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run the hostile corpus (testdata/hostile.yaml) instead: each case must end at its bound within
    /// `--case-deadline`, this process and its evaluation workers under `--max-rss-mib` throughout.
    #[arg(long)]
    corpus: bool,
    #[arg(long, default_value = "2s", value_parser = common::runtime::flags::parse_duration)]
    case_deadline: std::time::Duration,
    #[arg(long, default_value_t = 100)]
    max_rss_mib: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    // On the evaluation workers, as in the operator (the `hook-operator` executable next to this one).
    let pool = match workers::Workers::start(workers::Settings {
        binary: hook_operator::isolation::default_binary().unwrap_or_default(),
        workers: 2,
        limits: Limits::default(),
        max_body_bytes: 16 << 20,
        penalty: std::time::Duration::from_secs(300),
        queue_timeout: std::time::Duration::from_secs(30),
    }) {
        Ok(workers) => Evaluator::Processes(workers),
        Err(e) => {
            eprintln!("hook-fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    if flags.corpus {
        println!("hostile corpus: case, peak RSS of hook-fuzz and its workers, time, message");
        let report = fuzz::corpus(&pool, flags.case_deadline, flags.max_rss_mib << 20).await;
        println!("cases: {}; failures: {}; slowest: {:?}", report.cases, report.failures.len(), report.slowest);
        for failure in &report.failures {
            println!("FAILED {}: {}", failure.input, failure.problem);
        }
        return if report.failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    let report = fuzz::run(&pool, flags.cases, flags.seed).await;
    println!(
        "targets: {}; cases run: {}; failures: {}; slowest case: {:?}; total: {:?}",
        fuzz::TARGETS.join(", "),
        report.cases,
        report.failures.len(),
        report.slowest,
        start.elapsed()
    );
    for failure in &report.failures {
        println!("FAILED {} seed {}: {} — input: {}", failure.target, failure.seed, failure.problem, failure.input);
    }
    if report.failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
