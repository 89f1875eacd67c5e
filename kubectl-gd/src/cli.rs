//! Command line of `kubectl gd` (the `kubectl-gd` binary found on the PATH by kubectl's plugin mechanism).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

const EXAMPLES: &str = "\
Examples:
  # What is the rollout waiting for? Pods, their revision, lifecycle state and the HookRun holding each one
  kubectl gd get test-gamedeployment
  kubectl gd get test-gamedeployment --watch
  kubectl gd get test-gamedeployment -o json | jq '.verdict'

  # Block until the rollout completes (exit 0) or a hook fails (exit 1, naming the pod and the HookRun); for CI
  kubectl gd status test-gamedeployment --timeout 10m

  # Before you apply a change: which pods it touches, in what order, through which hooks, and how long it takes
  kubectl gd plan test-gamedeployment --image python=python:3.5
  kubectl gd plan test-gamedeployment -f changed.yaml --assume-hooks fail -o json

  # Act on it
  kubectl gd retry test-gamedeployment                     # every failed hook (spec.*UpdateStrategy.retry)
  kubectl gd retry test-gamedeployment --pod test-gamedeployment-s9rbp
  kubectl gd pause test-gamedeployment
  kubectl gd resume test-gamedeployment                    # end a canary pause step
  kubectl gd promote test-gamedeployment                   # skip the remaining canary steps
  kubectl gd skip-hook test-gamedeployment-s9rbp           # terminate the pod's running HookRun
  kubectl gd restart test-gamedeployment                   # roll every pod through the gates

  # Try a HookTemplate locally, without a cluster
  kubectl gd check -f examples/hook-template-success.yaml --arg PodIP=127.0.0.1

  # Shell completion: `kubectl gd <TAB>` (kubectl 1.26+), or the kubectl-gd command itself
  ln -s $(command -v kubectl-gd) $(dirname $(command -v kubectl-gd))/kubectl_complete-gd
  source <(kubectl gd completion bash)

Exit codes: 0 success (status: rollout complete); 1 a hook failed or cannot start (status), or the check failed;
2 usage error; 3 the rollout is paused (status); 4 timed out (status); 5 not found, the API refused, or the action
does not apply (its message says what does); 6 past spec.progressDeadlineSeconds (status); 7 a failed canary was
rolled back (status).";

const STATUS_HELP: &str = "\
Examples:
  kubectl gd status test-gamedeployment --timeout 10m

Exit codes:
  0  complete: every desired pod exists, runs the update revision (all of them, or those beyond the partition) and
     is available, no pod waits on a gate, the canary steps are done
  1  a hook failed or cannot start (naming the pod and the HookRun), a canary step hook failed, or the spec is
     invalid
  2  usage error
  3  paused (spec.updateStrategy.paused, or a canary pause step without a duration)
  4  --timeout passed first
  5  not found, or the API refused
  6  no progress for spec.progressDeadlineSeconds (ProgressDeadlineExceeded)
  7  a failed canary step hook rolled the canary back (hookPolicy.onFailure: Rollback)";

/// The command line of `kubectl gd`.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl-gd",
    bin_name = "kubectl gd",
    version,
    about = "See which GameDeployment pod waits on which hook and why, and act on it",
    long_about = "kubectl gd: a kubectl plugin for tkex.tencent.com GameDeployments. It shows the rollout as a \
                  tree (revisions, pods, lifecycle states, the HookRun holding each pod and its last measurement), \
                  waits for a rollout in CI, and runs the documented actions (retry, pause, resume, skip a hook, \
                  restart).",
    after_help = EXAMPLES,
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Which cluster and namespace (as kubectl: `--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`, in-cluster).
#[derive(Args, Debug, Clone, Default)]
pub struct Conn {
    /// Path to the kubeconfig file.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// How `get` and `plan` print what they found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Output {
    /// The tree (colour and symbols on a terminal).
    #[default]
    Text,
    /// The tree as JSON (one document per line with --watch).
    Json,
}

/// When the tree uses colour and symbols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Color {
    /// Colour and symbols when stdout is a terminal and NO_COLOR is not set.
    #[default]
    Auto,
    /// Colour and symbols even when stdout is not a terminal.
    Always,
    /// Plain text.
    Never,
}

/// The commands of `kubectl gd`.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show a GameDeployment as a tree: revisions, pods (revision, ready, lifecycle state) and, for held pods,
    /// the HookRun with its phase, elapsed time, last measurement and the condition it is judged by.
    #[command(
        after_help = "Examples:\n  kubectl gd get test-gamedeployment\n  kubectl gd get test-gamedeployment -w\n  \
                            kubectl gd get test-gamedeployment -o json"
    )]
    Get {
        /// GameDeployment name.
        name: String,
        /// Keep watching and redraw on every change (in place on a terminal).
        #[arg(short, long)]
        watch: bool,
        /// Print the tree as text or as JSON.
        #[arg(short, long, value_enum, default_value_t)]
        output: Output,
        /// When to use colour and symbols.
        #[arg(long, value_enum, default_value_t)]
        color: Color,
        /// Which cluster and namespace.
        #[command(flatten)]
        conn: Conn,
    },
    /// Wait until the rollout completes, or stops for a person: exits with the verdict. While it waits it prints
    /// where the rollout stands with the time since it started, and what it waits for with the time that ends (a
    /// timed pause, a grace period, the progress deadline): one line redrawn in place on a terminal, one line per
    /// change elsewhere. For CI.
    #[command(after_help = STATUS_HELP)]
    Status {
        /// GameDeployment name.
        name: String,
        /// Give up after this long (exit 4), e.g. `90s`, `10m`. Default: wait forever.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        timeout: Option<Duration>,
        /// Print only the final verdict.
        #[arg(short, long)]
        quiet: bool,
        /// Which cluster and namespace.
        #[command(flatten)]
        conn: Conn,
    },
    /// Run failed hooks again: sets `spec.<gate>UpdateStrategy.retry: true` for every gate with a failed HookRun
    /// (the BCS mechanism; the operator sets it back to false); with --pod, deletes only that pod's failed HookRun
    /// so the operator starts a new one.
    Retry {
        /// GameDeployment name.
        name: String,
        /// Only this pod.
        #[arg(long, value_name = "POD")]
        pod: Option<String>,
        /// Which cluster and namespace.
        #[command(flatten)]
        conn: Conn,
    },
    /// Pause updates (`spec.updateStrategy.paused: true`); scaling goes on.
    Pause {
        /// GameDeployment name.
        name: String,
        /// Which cluster and namespace.
        #[command(flatten)]
        conn: Conn,
    },
    /// Resume updates (`spec.updateStrategy.paused: false`; GitOps-clean: the `resume-step` annotation): ends the
    /// canary step in progress (a pause, or a failed step hook).
    Resume {
        /// GameDeployment name.
        name: String,
        /// Which cluster and namespace.
        #[command(flatten)]
        conn: Conn,
    },
    /// Skip every remaining canary step of the update revision (the `promote: <update revision>` annotation, in
    /// either control mode); every pod still passes its own hooks.
    Promote {
        /// GameDeployment name.
        name: String,
        /// Which cluster and namespace.
        #[command(flatten)]
        conn: Conn,
    },
    /// Let a held pod go without its hook: terminates the pod's running HookRun (`spec.terminate: true`; the
    /// hook-operator completes it at once, Successful unless a metric already failed), or — when no run can be
    /// terminated (its HookTemplate is missing, or the spec is Git's) — sets the pod's `skip-hook` annotation, which
    /// the gate records as skipped. A failed run is refused with both ways out (exit 5).
    #[command(after_help = "Examples:\n  kubectl gd skip-hook test-gamedeployment-s9rbp\n\nExit codes: 0 the hold is \
                            skipped; 5 the pod is not held by a hook, its run already failed (the message names the \
                            commands that do apply), not found, or the API refused.")]
    SkipHook {
        /// The held pod.
        pod: String,
        /// Which cluster and namespace.
        #[command(flatten)]
        conn: Conn,
    },
    /// Roll every pod through the gates: annotates the pod template (`kubectl.kubernetes.io/restartedAt`, as
    /// `kubectl rollout restart` does), which makes a new revision.
    Restart {
        /// GameDeployment name.
        name: String,
        /// Which cluster and namespace.
        #[command(flatten)]
        conn: Conn,
    },
    /// Forecast a change before applying it: the operator's own planner, run pass after pass over a simulated copy
    /// of the GameDeployment's pods, revisions and HookRuns, prints the rollout as it would happen — batches in
    /// order, each pod's action and the hook it waits on with its probe schedule, where the rollout stops, and the
    /// estimated duration. Reads only (get and list); writes nothing.
    #[command(after_help = "Examples:\n  kubectl gd plan test-gamedeployment --image python=python:3.5\n  \
                            kubectl gd plan test-gamedeployment --replicas 3 --assume-hooks as-now\n  \
                            kubectl gd plan test-gamedeployment -f changed.yaml -o json")]
    Plan(Box<PlanFlags>),
    /// Run a HookTemplate (or HookRun) locally, without a cluster, and print every measurement: the
    /// hook-operator's own check. Exit 0 only when the run ends Successful.
    Check(Box<hook_operator::cli::CheckFlags>),
    /// Answer kubectl's plugin completion (`kubectl_complete-gd`): the words typed after `kubectl gd`.
    #[command(name = "__complete", hide = true)]
    Complete {
        /// The words typed after `kubectl gd`, the last one being completed.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        words: Vec<String>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) for the `kubectl-gd` command. For
    /// `kubectl gd <TAB>` (kubectl 1.26+), link the binary as `kubectl_complete-gd` next to it instead.
    #[command(
        after_help = "Examples:\n  source <(kubectl gd completion bash)\n  kubectl gd completion zsh > \"${fpath[1]}/_kubectl-gd\""
    )]
    Completion {
        /// The shell to print the script for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// What the measurements of hooks are assumed to read in a forecast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum AssumeHooks {
    /// Every hook succeeds after its configured measurements.
    #[default]
    Succeed,
    /// Every hook fails at its first measurement beyond its failureLimit: the rollout stops there.
    Fail,
    /// Runs go on as they are now (a running one's next measurements read as its last one did); new runs succeed.
    AsNow,
}

/// The flags of `kubectl gd plan`.
#[derive(Args, Debug, Clone)]
pub struct PlanFlags {
    /// GameDeployment name.
    pub name: String,
    /// The changed GameDeployment manifest: its spec replaces the live spec (its labels and annotations are added).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// New `spec.replicas`.
    #[arg(long, value_name = "N")]
    pub replicas: Option<i32>,
    /// New image of a container (repeatable).
    #[arg(long = "image", value_name = "CONTAINER=IMAGE", value_parser = parse_image)]
    pub images: Vec<(String, String)>,
    /// New `spec.updateStrategy.partition` (an integer or a percentage).
    #[arg(long, value_name = "P")]
    pub partition: Option<String>,
    /// Say per pod whether the operator would change it and why (a fleet another operator ran, about to be or
    /// just taken over); with no change given, the forecast is of the fleet as it is.
    #[arg(long)]
    pub takeover: bool,
    /// What hook measurements are assumed to read.
    #[arg(long, value_enum, default_value_t)]
    pub assume_hooks: AssumeHooks,
    /// The hook-operator's --interval-scale, if it runs with one (it multiplies every interval and initialDelay).
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR")]
    pub hook_interval_scale: f64,
    /// Print the forecast as text or as JSON.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    /// Which cluster and namespace.
    #[command(flatten)]
    pub conn: Conn,
}

fn parse_image(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((container, image)) if !container.is_empty() && !image.is_empty() => {
            Ok((container.to_string(), image.to_string()))
        }
        _ => Err(format!("{s:?} is not CONTAINER=IMAGE")),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration (e.g. 90s, 10m): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `kubectl gd status --help` lists every exit code the command uses (issue 49: it listed 0, 1 and 3).
    #[test]
    fn status_help_lists_every_exit_code() {
        use crate::rollout::{State, exit};
        let states = [State::Complete, State::Failed, State::Paused, State::Stalled, State::RolledBack];
        let codes = states.iter().filter_map(|s| s.exit_code()).chain([exit::TIMEOUT, exit::ERROR, 2]);
        for code in codes {
            assert!(STATUS_HELP.contains(&format!("\n  {code}  ")), "exit {code} is not in:\n{STATUS_HELP}");
        }
        assert_eq!(State::Progressing.exit_code(), None, "progress is waited for");
    }

    #[test]
    fn parses_each_command() {
        let cli = Cli::try_parse_from(["kubectl-gd", "get", "gd1", "-w", "-o", "json", "-n", "games"]).unwrap();
        let Command::Get { name, watch, output, conn, .. } = cli.command else { panic!("get") };
        assert_eq!((name.as_str(), watch, output), ("gd1", true, Output::Json));
        assert_eq!(conn.namespace.as_deref(), Some("games"));
        let cli = Cli::try_parse_from(["kubectl-gd", "status", "gd1", "--timeout", "2m"]).unwrap();
        let Command::Status { timeout, .. } = cli.command else { panic!("status") };
        assert_eq!(timeout, Some(Duration::from_secs(120)));
        let cli = Cli::try_parse_from(["kubectl-gd", "promote", "gd1"]).unwrap();
        assert!(matches!(cli.command, Command::Promote { .. }));
        let cli = Cli::try_parse_from(["kubectl-gd", "check", "-f", "t.yaml", "--arg", "PodIP=1.2.3.4"]).unwrap();
        let Command::Check(flags) = cli.command else { panic!("check") };
        assert_eq!(flags.args, vec![("PodIP".to_string(), "1.2.3.4".to_string())]);
        assert!(Cli::try_parse_from(["kubectl-gd", "status", "gd1", "--timeout", "soon"]).is_err());
        let cli = Cli::try_parse_from([
            "kubectl-gd",
            "plan",
            "gd1",
            "--image",
            "python=python:3.5",
            "--replicas",
            "3",
            "--assume-hooks",
            "as-now",
            "-o",
            "json",
        ])
        .unwrap();
        let Command::Plan(flags) = cli.command else { panic!("plan") };
        assert_eq!(flags.images, vec![("python".to_string(), "python:3.5".to_string())]);
        assert_eq!((flags.replicas, flags.assume_hooks, flags.output), (Some(3), AssumeHooks::AsNow, Output::Json));
        assert!(Cli::try_parse_from(["kubectl-gd", "plan", "gd1", "--image", "python"]).is_err());
    }
}
