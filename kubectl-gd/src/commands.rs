//! Each subcommand: read (once or by watching), decide with the pure modules, write, print.

use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use clap::CommandFactory;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;

use crate::actions::{self, Plan};
use crate::cli::{Cli, Color, Command, Conn, Output};
use crate::cluster::{Error, Target};
use crate::render::{self, Style};
use crate::rollout::{State, Verdict, exit};
use crate::snapshot::{Snapshot, gitops_clean};
use crate::tree;

/// A hook failed or cannot start, or the spec is invalid.
pub const EXIT_FAILED: u8 = exit::FAILED;
/// The rollout is paused with work left.
pub const EXIT_PAUSED: u8 = exit::PAUSED;
/// `--timeout` passed first.
pub const EXIT_TIMEOUT: u8 = exit::TIMEOUT;
/// `spec.progressDeadlineSeconds` passed without progress (`ProgressDeadlineExceeded`).
pub const EXIT_STALLED: u8 = exit::STALLED;
/// Not found, the API refused, or the command itself failed.
pub const EXIT_ERROR: u8 = exit::ERROR;
/// A failed canary was rolled back (`onFailure: Rollback`).
pub const EXIT_ROLLED_BACK: u8 = exit::ROLLED_BACK;

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(EXIT_ERROR)
}

async fn connect(conn: &Conn) -> Result<Target, Error> {
    Target::connect(conn.kubeconfig.as_deref(), conn.context.as_deref(), conn.namespace.as_deref()).await
}

/// Runs the command `cli` names; the exit code is the command's verdict (see the `EXIT_*` codes).
pub async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Get { name, watch, output, color, conn } => get(&name, watch, output, color, &conn).await,
        Command::Status { name, timeout, quiet, conn } => status(&name, timeout, quiet, &conn).await,
        Command::Retry { name, pod, conn } => act(&conn, &name, |s| actions::retry(s, pod.as_deref())).await,
        Command::Pause { name, conn } => act(&conn, &name, |s| Ok(actions::set_paused(s, true))).await,
        Command::Resume { name, conn } => act(&conn, &name, actions::resume).await,
        Command::Promote { name, conn } => act(&conn, &name, actions::promote).await,
        Command::Restart { name, conn } => {
            let now = Timestamp::now().to_string();
            act(&conn, &name, |s| Ok(actions::restart(s, &now))).await
        }
        Command::SkipHook { pod, conn } => skip_hook(&pod, &conn).await,
        Command::Plan(flags) => plan(*flags).await,
        Command::Check(flags) => hook_operator::local::check::run(*flags).await,
        Command::Complete { words } => crate::complete::run(words).await,
        Command::Completion { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "kubectl-gd", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
    }
}

/// Colour and symbols: `--color always`, or `auto` on a terminal without `NO_COLOR`.
fn style(color: Color) -> Style {
    let terminal = match color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    Style { terminal }
}

fn frame(snapshot: &Snapshot, output: Output, style: Style) -> String {
    let tree = tree::build(snapshot, Timestamp::now());
    match output {
        Output::Json => format!("{}\n", serde_json::to_string(&tree).unwrap_or_default()),
        Output::Text => render::render(&tree, style),
    }
}

async fn get(name: &str, watch: bool, output: Output, color: Color, conn: &Conn) -> ExitCode {
    let target = match connect(conn).await {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let style = style(color);
    if !watch {
        return match target.snapshot(name).await {
            Ok(snapshot) => {
                let text = match output {
                    Output::Json => {
                        serde_json::to_string_pretty(&tree::build(&snapshot, Timestamp::now())).unwrap_or_default()
                            + "\n"
                    }
                    Output::Text => frame(&snapshot, output, style),
                };
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        };
    }
    let stream = match target.watch(name).await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    watch_loop(stream, name, output, style).await
}

/// Redraws on every change; on a terminal also every second (elapsed times), in place: the cursor goes home and
/// each line overwrites the previous frame's (`ESC[K` clears the rest of a line, `ESC[J` what is left below), so
/// nothing flickers and nothing scrolls. Elsewhere each changed frame is appended, separated by a blank line.
async fn watch_loop(
    stream: impl futures::Stream<Item = Option<Snapshot>>,
    name: &str,
    output: Output,
    style: Style,
) -> ExitCode {
    let in_place = style.terminal && output == Output::Text;
    let mut stream = std::pin::pin!(stream);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut latest: Option<Option<Snapshot>> = None;
    let mut last = String::new();
    let mut stdout = std::io::stdout();
    if in_place {
        let _ = write!(stdout, "\x1b[2J");
    }
    loop {
        let changed = tokio::select! {
            next = stream.next() => match next {
                Some(s) => { latest = Some(s); true }
                None => return fail("the watch ended"),
            },
            _ = tick.tick(), if in_place => false,
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
        };
        // Take whatever else already arrived, so a burst of events draws once.
        while let Some(Some(s)) = futures::FutureExt::now_or_never(stream.next()) {
            latest = Some(s);
        }
        let Some(current) = &latest else { continue };
        let text = match current {
            Some(snapshot) => frame(snapshot, output, style),
            None => format!("gamedeployment {name} not found; waiting for it\n"),
        };
        if text == last || (!in_place && !changed) {
            continue;
        }
        if in_place {
            let body: String = text.lines().map(|l| format!("{l}\x1b[K\n")).collect();
            let _ = write!(stdout, "\x1b[H{body}\x1b[J");
        } else if output == Output::Json {
            let _ = write!(stdout, "{text}");
        } else {
            let separator = if last.is_empty() { "" } else { "\n" };
            let _ = write!(stdout, "{separator}{text}");
        }
        let _ = stdout.flush();
        last = text;
    }
}

/// Waits for a final verdict. While the rollout progresses it prints where it stands with the time since the
/// command started and what ends at a known time ([`status_line`]): on a terminal one line redrawn in place every
/// second (a new line when the verdict changes, as `kubectl rollout status` adds one); elsewhere one line per change.
/// The verdict is judged again every second, since time alone ends some waits (a pod's `minReadySeconds`).
async fn status(name: &str, timeout: Option<Duration>, quiet: bool, conn: &Conn) -> ExitCode {
    let target = match connect(conn).await {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let stream = match target.watch(name).await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut stream = std::pin::pin!(stream);
    let started = Timestamp::now();
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let in_place = !quiet && std::io::stdout().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut latest: Option<Snapshot> = None;
    let mut shown: Option<String> = None;
    let mut last_line = String::new();
    let mut stdout = std::io::stdout();
    loop {
        let timed_out = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            next = stream.next() => match next {
                // An error ends the line being redrawn first, so it is not written over it.
                None => {
                    end_line(in_place && shown.is_some());
                    return fail("the watch ended");
                }
                Some(None) => {
                    end_line(in_place && shown.is_some());
                    return fail(Error::NotFound { namespace: target.namespace.clone(), name: name.to_string() });
                }
                Some(Some(snapshot)) => latest = Some(snapshot),
            },
            _ = tick.tick() => {}
            () = timed_out => {
                end_line(in_place && shown.is_some());
                eprintln!(
                    "error: timed out after {}: {last_line}",
                    humantime::format_duration(timeout.unwrap_or_default())
                );
                return ExitCode::from(EXIT_TIMEOUT);
            }
        }
        let Some(snapshot) = &latest else { continue };
        let now = Timestamp::now();
        let verdict = crate::rollout::judge(snapshot, now);
        let line = status_line(&verdict, started, now);
        let key = verdict_key(&verdict);
        if verdict.state == State::Progressing && !quiet {
            if in_place {
                let newline = if shown.as_ref().is_some_and(|k| *k != key) { "\n" } else { "" };
                let _ = write!(stdout, "{newline}\r{line}\x1b[K");
                let _ = stdout.flush();
            } else if shown.as_ref() != Some(&key) {
                println!("{line}");
            }
            shown = Some(key);
        }
        last_line = line;
        end_line(in_place && shown.is_some() && verdict.state != State::Progressing);
        let namespace = snapshot.gd.metadata.namespace.as_deref();
        let next = crate::rollout::next_look(&verdict, name, namespace).map(|n| format!(" ({n})")).unwrap_or_default();
        match verdict.state {
            State::Progressing => continue,
            State::Complete => println!("gamedeployment {name}: rollout complete: {}", verdict.message),
            State::Failed => eprintln!("error: gamedeployment {name}: {}", verdict.message),
            State::RolledBack => eprintln!("error: gamedeployment {name}: {}", verdict.message),
            State::Paused => eprintln!("gamedeployment {name} is paused: {}", verdict.message),
            State::Stalled => {
                eprintln!("error: gamedeployment {name} exceeded its progress deadline: {}{next}", verdict.message)
            }
        }
        return ExitCode::from(verdict.state.exit_code().unwrap_or(EXIT_ERROR));
    }
}

/// Ends the progress line redrawn in place, when there is one.
fn end_line(redrawn: bool) {
    if redrawn {
        println!();
    }
}

/// What makes a progress line new: the verdict without the clock (elapsed and remaining times change every second).
fn verdict_key(verdict: &Verdict) -> String {
    let waits: Vec<String> = verdict.waits.iter().map(|w| format!("{} {}", w.what, w.until.0)).collect();
    format!("{:?} {} {}", verdict.state, verdict.message, waits.join(", "))
}

/// One progress line of `kubectl gd status`: the time since `started`, the verdict, and what it waits for with the
/// time that ends (`[1m05s] Progressing: …; waiting for the pause of canary step 2 of 3 (60s) until
/// 2024-05-01T10:11:00Z (in 25s)`).
pub fn status_line(verdict: &Verdict, started: Timestamp, now: Timestamp) -> String {
    let elapsed = render::human(now.as_second() - started.as_second());
    let waits: String = verdict.waits.iter().map(|w| format!("; waiting for {}", render::wait_text(w))).collect();
    format!("[{elapsed}] {:?}: {}{waits}", verdict.state, verdict.message)
}

async fn send(target: &Target, plan: Plan) -> ExitCode {
    for write in &plan.writes {
        if let Err(e) = target.send(write).await {
            return fail(e);
        }
    }
    for line in plan.summary {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

async fn act(conn: &Conn, name: &str, decide: impl FnOnce(&Snapshot) -> Result<Plan, String>) -> ExitCode {
    let target = match connect(conn).await {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let snapshot = match target.snapshot(name).await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    match decide(&snapshot) {
        Ok(plan) => send(&target, plan).await,
        Err(why) => fail(why),
    }
}

async fn skip_hook(pod_name: &str, conn: &Conn) -> ExitCode {
    let target = match connect(conn).await {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let pod = match target.pod(pod_name).await {
        Ok(Some(p)) => p,
        Ok(None) => return fail(format!("pod {}/{pod_name} not found", target.namespace)),
        Err(e) => return fail(e),
    };
    let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "GameDeployment")
        .map(|o| o.name.clone())
    else {
        return fail(format!("pod {pod_name} is not controlled by a GameDeployment"));
    };
    let snapshot = match target.snapshot(&owner).await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let plan = if gitops_clean(&snapshot.gd) {
        actions::skip_hook_by_annotation(&snapshot, &pod)
    } else {
        actions::skip_hook(&snapshot, &pod)
    };
    match plan {
        Ok(plan) => send(&target, plan).await,
        Err(why) => fail(why),
    }
}

async fn plan(flags: crate::cli::PlanFlags) -> ExitCode {
    use gamedeployment_operator::forecast::{self, Assume, Options, Timing};
    let manifest = match &flags.file {
        None => None,
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => match serde_yaml::from_str(&text) {
                Ok(gd) => Some(gd),
                Err(e) => return fail(format!("{}: not a GameDeployment manifest: {e}", path.display())),
            },
            Err(e) => return fail(format!("reading {}: {e}", path.display())),
        },
    };
    if !(flags.hook_interval_scale.is_finite() && flags.hook_interval_scale > 0.0) {
        return fail(format!("--hook-interval-scale must be a positive number, got {}", flags.hook_interval_scale));
    }
    let change = crate::plan::Change {
        manifest,
        replicas: flags.replicas,
        images: flags.images.clone(),
        partition: flags.partition.clone(),
    };
    let target = match connect(&flags.conn).await {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let mut live = match crate::plan::read(&target, &flags.name).await {
        Ok(live) => live,
        Err(e) => return fail(e),
    };
    let said = match crate::plan::apply(&mut live.gd, &change) {
        Ok(said) => said,
        Err(_) if flags.takeover && change == crate::plan::Change::default() => vec!["no change".to_string()],
        Err(why) => return fail(why),
    };
    // Per pod, whether the operator would change it (with the change made, if one was given).
    let takeover = flags.takeover.then(|| forecast::takeover::takeover(&live));
    let assume = match flags.assume_hooks {
        crate::cli::AssumeHooks::Succeed => Assume::Succeed,
        crate::cli::AssumeHooks::Fail => Assume::Fail,
        crate::cli::AssumeHooks::AsNow => Assume::AsNow,
    };
    let options =
        Options { assume, timing: Timing { interval_scale: flags.hook_interval_scale }, ..Options::default() };
    let timeline = match forecast::forecast(live, &options) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let takeover = takeover.map(|t| t.with_forecast(&timeline));
    match flags.output {
        Output::Json => {
            let mut json = crate::plan::json(&timeline);
            if let (Some(t), Some(map)) = (&takeover, json.as_object_mut()) {
                map.insert("takeover".into(), serde_json::to_value(t).unwrap_or_default());
            }
            println!("{}", serde_json::to_string_pretty(&json).unwrap_or_default());
        }
        Output::Text => {
            print!("{}", crate::plan::render(&timeline, &said));
            if let Some(t) = &takeover {
                print!("{}", crate::takeover::render(t));
            }
        }
    }
    ExitCode::SUCCESS
}
