//! `fault-soak`: the fault round of `tests/e2e/tests/faults.rs` (see `e2e::faults`) again and again, for a
//! while, printing per round the injected errors, the operators' failed and retried writes, the SIGKILLs and the
//! convergence time, and totals at the end.
//!
//! ```text
//! scripts/soak [--duration 10m] [--seed N] [--error-rate 0.03]
//! cargo run -p e2e --bin fault-soak -- [--duration 10m] [--seed N] [--error-rate 0.03]
//! ```
//!
//! Each round runs in a child process (`fault-soak --round --seed S`) on its own kube-sim, so a round that
//! panics (a phase that does not converge) cannot leave operators or watches behind. Round `i` uses seed
//! `seed + i`. No new round starts once `--duration` has passed. The exit code is 1 when any round found a
//! problem (gate violation, lost state, no convergence), and the failing seeds are printed.

use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use e2e::faults::{Settings, fresh_seed, run_round};
use tokio::io::AsyncBufReadExt;

const USAGE: &str = "usage: fault-soak [--duration 10m] [--seed N] [--error-rate 0.03]";

struct Args {
    duration: Duration,
    seed: u64,
    error_rate: f64,
    round: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args { duration: Duration::from_secs(600), seed: fresh_seed(), error_rate: 0.03, round: false };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--duration" => {
                let v = value()?;
                // humantime's forms (`10m`, `1h 30m`) and bare seconds (`600`), as kube-sim's flags.
                args.duration =
                    kube_sim::parse_duration(&v).map_err(|e| format!("bad duration {e} (10m, 600s, 1h)"))?;
            }
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--error-rate" => {
                args.error_rate = value()?.parse().map_err(|e| format!("--error-rate: {e}"))?;
                if !(0.0..=0.3).contains(&args.error_rate) {
                    return Err("--error-rate must be within 0..=0.3".into());
                }
            }
            "--round" => args.round = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// One round in this process: prints the summary and a machine-readable `ROUND` line for the parent.
async fn one_round(args: &Args) -> ExitCode {
    let settings = Settings { error_rate: args.error_rate, ..Settings::ci(args.seed) };
    let report = run_round(settings).await;
    println!("{}", report.summary());
    let problems = report.problems();
    for p in &problems {
        println!("  PROBLEM {p}");
    }
    let errors: u64 = report.faults.errors.values().sum::<u64>() + report.faults.conflicts;
    let failed_writes: u64 = report.writes_by_code.iter().filter(|(c, _)| **c >= 400).map(|(_, n)| *n).sum();
    let kills: u32 = report.kills.values().sum();
    println!(
        "ROUND seed={} ok={} converge_ms={} injected_errors={} timeouts={} watches_cut={} watches_expired={} \
         failed_writes={} retried_writes={} kills={}",
        report.seed,
        problems.is_empty(),
        report.total.as_millis(),
        errors,
        report.faults.timeouts_after_write,
        report.faults.watches_cut,
        report.faults.watches_expired,
        failed_writes,
        report.retried_writes,
        kills
    );
    if problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

#[derive(Default)]
struct Totals {
    rounds: u64,
    failed: Vec<u64>,
    converge: Vec<Duration>,
    figures: std::collections::BTreeMap<String, u64>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.round {
        return one_round(&args).await;
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot find this executable: {e}");
            return ExitCode::from(2);
        }
    };
    // Build the operators once, before the clock starts.
    e2e::binary("gamedeployment-operator", "gamedeployment-operator");
    e2e::binary("hook-operator", "hook-operator");
    println!(
        "fault soak: rounds for {}s from seed {} (round i uses seed {} + i), error rate {}",
        args.duration.as_secs(),
        args.seed,
        args.seed,
        args.error_rate
    );
    let started = Instant::now();
    let mut totals = Totals::default();
    let mut i = 0u64;
    while started.elapsed() < args.duration {
        let seed = args.seed.wrapping_add(i);
        i += 1;
        println!("\n--- round {i} (seed {seed}, {:.0}s elapsed) ---", started.elapsed().as_secs_f64());
        let child = tokio::process::Command::new(&exe)
            .args(["--round", "--seed", &seed.to_string(), "--error-rate", &args.error_rate.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                eprintln!("cannot start a round: {e}");
                return ExitCode::from(2);
            }
        };
        let mut round_line = None;
        if let Some(out) = child.stdout.take() {
            let mut lines = tokio::io::BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("ROUND ") {
                    round_line = Some(line);
                } else {
                    println!("{line}");
                }
            }
        }
        let ok = child.wait().await.is_ok_and(|s| s.success());
        totals.rounds += 1;
        if !ok {
            totals.failed.push(seed);
            println!(
                "round {i} FAILED (seed {seed}); replay its kill schedule: FAULT_SEED={seed} cargo test -p e2e --test suites -- faults::"
            );
        }
        if let Some(line) = round_line {
            for pair in line.split_whitespace().skip(1) {
                let Some((key, value)) = pair.split_once('=') else { continue };
                match (key, value.parse::<u64>()) {
                    ("converge_ms", Ok(ms)) if ok => totals.converge.push(Duration::from_millis(ms)),
                    ("seed", _) | ("converge_ms", _) => {}
                    (key, Ok(n)) => *totals.figures.entry(key.to_string()).or_default() += n,
                    _ => {}
                }
            }
        }
    }
    let mut converge = totals.converge.clone();
    converge.sort();
    let pick = |q: f64| converge.get(((converge.len() as f64 - 1.0) * q).round() as usize).map(|d| d.as_secs_f64());
    println!("\n=== fault soak: {} rounds in {:.0}s ===", totals.rounds, started.elapsed().as_secs_f64());
    for (key, n) in &totals.figures {
        println!("{key:>16}: {n}");
    }
    if let (Some(min), Some(median), Some(max)) = (pick(0.0), pick(0.5), pick(1.0)) {
        println!(
            "convergence (faults on until the last phase settled): min {min:.1}s, median {median:.1}s, max {max:.1}s"
        );
    }
    if totals.failed.is_empty() {
        println!("every round held the gate invariant, lost nothing and converged");
        ExitCode::SUCCESS
    } else {
        println!("FAILED rounds, seeds: {:?}", totals.failed);
        ExitCode::FAILURE
    }
}
