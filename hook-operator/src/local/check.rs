//! `hook-operator check`: runs a HookTemplate once, locally, with the real providers and the same engine as
//! the controller, printing every measurement as it is recorded.

use std::process::ExitCode;
use std::sync::Arc;

/// `println!` that ends the command quietly when its reader went away (`hook-operator check … | head -3`):
/// `println!` panics on a closed pipe. Exits with 141 (128 + SIGPIPE), as a command killed by it would.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        if let Err(e) = writeln!(out, $($arg)*).and_then(|()| out.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(141);
            }
        }
    }};
}

use common::api::{Argument, HookPhase, HookRun, HookRunSpec, HookTemplate};
use kube::api::ObjectMeta;

use crate::cli::CheckFlags;
use crate::dispatch::Dispatcher;
use crate::engine::Note;
use crate::local::{self, Wakers};
use crate::metrics::Metrics;
use crate::providers::Providers;

/// Exit codes: 0 Successful, 1 Failed/Error/Inconclusive, 2 the check itself could not run (an unreadable file, an
/// invalid template or run, an argument without a value, a bad flag).
pub const EXIT_NOT_SUCCESSFUL: u8 = 1;
/// See [`EXIT_NOT_SUCCESSFUL`]: the check could not run.
pub const EXIT_USAGE: u8 = 2;

/// The first HookTemplate or HookRun of a YAML file.
enum Loaded {
    Template(Box<HookTemplate>),
    Run(Box<HookRun>),
}

fn first_object(text: &str) -> Result<Loaded, String> {
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = serde_yaml::Value::deserialize_from(document)?;
        match value.get("kind").and_then(|k| k.as_str()).unwrap_or_default() {
            "HookTemplate" => {
                return serde_yaml::from_value(value)
                    .map(|t| Loaded::Template(Box::new(t)))
                    .map_err(|e| format!("the HookTemplate does not match the API: {e}"));
            }
            "HookRun" => {
                return serde_yaml::from_value(value)
                    .map(|r| Loaded::Run(Box::new(r)))
                    .map_err(|e| format!("the HookRun does not match the API: {e}"));
            }
            _ => continue,
        }
    }
    Err("the file holds no HookTemplate or HookRun".into())
}

/// Checks the file's HookTemplate or HookRun as the admission webhook does (`kubectl apply` is refused with the same
/// words): `Err` says why it is invalid. A run is checked with the `--arg` overrides applied.
pub fn refusal(text: &str, overrides: &[(String, String)]) -> Result<(), String> {
    let problem = match first_object(text)? {
        Loaded::Template(t) => {
            crate::engine::validate::template_refusal(t.metadata.name.as_deref().unwrap_or("template"), &t.spec)
        }
        Loaded::Run(r) => {
            let spec = load(text, overrides)?.spec;
            crate::engine::validate::run_refusal(r.metadata.name.as_deref().unwrap_or("run"), &spec)
        }
    };
    problem.map_or(Ok(()), Err)
}

/// Builds the run to check from a YAML file holding a HookTemplate or a HookRun.
pub fn load(text: &str, overrides: &[(String, String)]) -> Result<HookRun, String> {
    let (name, mut spec) = match first_object(text)? {
        Loaded::Template(template) => {
            let template = *template;
            let spec = HookRunSpec {
                metrics: template.spec.metrics,
                args: template.spec.args,
                terminate: false,
                policy: template.spec.policy,
            };
            (template.metadata.name.unwrap_or_else(|| "template".into()), spec)
        }
        Loaded::Run(run) => (run.metadata.name.unwrap_or_else(|| "run".into()), run.spec),
    };
    for (arg, value) in overrides {
        match spec.args.iter_mut().find(|a| &a.name == arg) {
            Some(existing) => existing.value = Some(value.clone()),
            None => spec.args.push(Argument::new(arg, value)),
        }
    }
    Ok(HookRun {
        metadata: ObjectMeta {
            name: Some(format!("{name}-check")),
            namespace: Some("local".into()),
            uid: Some(format!("check-{name}")),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

trait DeserializeFrom {
    fn deserialize_from(document: serde_yaml::Deserializer<'_>) -> Result<serde_yaml::Value, String>;
}

impl DeserializeFrom for serde_yaml::Value {
    fn deserialize_from(document: serde_yaml::Deserializer<'_>) -> Result<serde_yaml::Value, String> {
        serde::Deserialize::deserialize(document).map_err(|e| format!("not YAML: {e}"))
    }
}

fn uses_kubernetes(run: &HookRun) -> bool {
    run.spec.metrics.iter().any(|m| m.provider.kubernetes.is_some())
}

/// `hook-operator check`: runs the template or run of `flags.file` once and prints every measurement; the exit code
/// says how it ended.
pub async fn run(flags: CheckFlags) -> ExitCode {
    let usage = |message: String| {
        eprintln!("hook-operator check: {message}");
        ExitCode::from(EXIT_USAGE)
    };
    let text = match std::fs::read_to_string(&flags.file) {
        Ok(text) => text,
        Err(e) => return usage(format!("reading {}: {e}", flags.file.display())),
    };
    if let Err(e) = refusal(&text, &flags.args) {
        return usage(format!("{}: {e}", flags.file.display()));
    }
    let run = match load(&text, &flags.args) {
        Ok(run) => run,
        Err(e) => return usage(format!("{}: {e}", flags.file.display())),
    };
    // Valid, but not runnable as given: an argument the creator of a run supplies has no value here.
    if let Err(problem) = crate::engine::validate::run(&run.spec) {
        return usage(format!("{}: {problem}: give it a value with --arg NAME=VALUE", flags.file.display()));
    }
    let engine = match flags.engine.engine() {
        Ok(engine) => engine,
        Err(e) => return usage(e),
    };
    let kube = if uses_kubernetes(&run) {
        let kube_flags = common::runtime::KubeFlags { kubeconfig: flags.kubeconfig.clone(), namespace: None };
        match common::runtime::client::build(&kube_flags).await {
            Ok(client) => Some(client),
            Err(e) => {
                eprintln!("note: no cluster for the kubernetes provider ({e}); its measurements will be Errors");
                None
            }
        }
    } else {
        None
    };
    let providers = match Providers::new(&flags.engine.providers(), kube) {
        Ok(p) => p,
        Err(e) => return usage(e.0),
    };
    let wakers = Wakers::default();
    let dispatcher = Dispatcher::new(providers, Arc::new(Metrics::default()), engine, 64, wakers.wake());
    let json = flags.json;
    let args_text = run
        .spec
        .args
        .iter()
        .map(|a| format!("{}={}", a.name, a.value.as_deref().unwrap_or("<unset>")))
        .collect::<Vec<_>>()
        .join(" ");
    if !json {
        say!(
            "checking {} ({} metric(s); args: {})",
            flags.file.display(),
            run.spec.metrics.len(),
            if args_text.is_empty() { "none" } else { &args_text }
        );
    }
    let mut counts = std::collections::HashMap::<String, usize>::new();
    let finished = local::drive(&dispatcher, &wakers, run, |round| {
        for (metric, m) in &round.plan.recorded {
            let n = counts.entry(metric.clone()).or_default();
            *n += 1;
            let phase = m.phase.map(HookPhase::as_str).unwrap_or("?");
            if json {
                say!("{}", serde_json::json!({"metric": metric, "measurement": *n, "phase": phase, "value": m.value, "message": m.message}));
            } else {
                let value = m.value.as_deref().map(|v| format!("  value={v}")).unwrap_or_default();
                let message = m.message.as_deref().map(|v| format!("  ({v})")).unwrap_or_default();
                say!("  {metric} #{n}: {phase}{value}{message}");
            }
        }
        for note in &round.plan.notes {
            match note {
                Note::MetricCompleted { metric, phase, message } if !json => say!("  {metric}: {phase} — {message}"),
                Note::RunCompleted { phase, message } if !json => say!("result: {phase} — {message}"),
                _ => {}
            }
        }
    })
    .await;
    let phase = finished.status.as_ref().and_then(|s| s.phase);
    if json {
        say!("{}", serde_json::json!({"result": phase.map(HookPhase::as_str), "status": finished.status}));
    }
    if phase == Some(HookPhase::Successful) { ExitCode::SUCCESS } else { ExitCode::from(EXIT_NOT_SUCCESSFUL) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_templates_and_applies_arg_overrides() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/hook-template-args.yaml"))
            .unwrap();
        let run = load(&text, &[("PodIP".into(), "127.0.0.1".into()), ("extra".into(), "1".into())]).unwrap();
        assert_eq!(run.metadata.name.as_deref(), Some("test-check"));
        let pod_ip = run.spec.args.iter().find(|a| a.name == "PodIP").unwrap();
        assert_eq!(pod_ip.value.as_deref(), Some("127.0.0.1"));
        assert!(run.spec.args.iter().any(|a| a.name == "extra"));
        assert_eq!(run.spec.metrics[0].name, "webtest");
        assert!(load("kind: ConfigMap\n", &[]).is_err());
        assert!(load("---\nkind: Other\n---\napiVersion: tkex.tencent.com/v1alpha1\nkind: HookRun\nmetadata: {name: r}\nspec: {metrics: []}\n", &[]).is_ok());
    }
}
