//! Completion for `kubectl gd <TAB>`: kubectl (1.26+) runs `kubectl_complete-gd` from the PATH with the words
//! typed after `kubectl gd` and expects cobra's `__complete` answer: one candidate per line (`value\tdescription`),
//! then `:<directive>`. `kubectl-gd __complete …` answers it (and so does the binary itself when it is installed,
//! or symlinked, as `kubectl_complete-gd`). Subcommands, flags and flag values come from the clap definition;
//! GameDeployment names (and held pods for `skip-hook`) from the cluster.

use clap::CommandFactory;
use common::api::GameDeployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;

use crate::cli::Cli;
use crate::cluster::Target;

/// Cobra directives: 4 = no file completion, 0 = default (files).
const NO_FILES: u8 = 4;
const FILES: u8 = 0;

/// What to offer for the last word, decided from the words before it (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// Fixed candidates (`value`, `description`).
    Values(Vec<(String, String)>),
    /// The GameDeployments of the namespace (read from the cluster).
    GameDeployments,
    /// The pods a hook holds (for `skip-hook`).
    HeldPods,
    /// The namespace's pods.
    Pods,
    /// The cluster's namespaces (for `-n`).
    Namespaces,
    /// File names (the shell completes them: `plan -f`, `check -f`).
    Files,
}

/// The flags of the connection that completion itself must honour (`-n`, `--kubeconfig`, `--context`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Conn {
    /// `-n`/`--namespace`, if typed.
    pub namespace: Option<String>,
    /// `--kubeconfig`, if typed.
    pub kubeconfig: Option<String>,
    /// `--context`, if typed.
    pub context: Option<String>,
}

/// What to offer for the last of `words` (the words after `kubectl gd`), and the connection flags typed before it.
pub fn decide(words: &[String]) -> (Offer, Conn) {
    let root = Cli::command();
    let mut conn = Conn::default();
    let mut sub: Option<clap::Command> = None;
    let mut positionals = 0;
    let mut expecting: Option<clap::Arg> = None;
    for word in words {
        if let Some(arg) = expecting.take() {
            match arg.get_id().as_str() {
                "namespace" => conn.namespace = Some(word.clone()),
                "kubeconfig" => conn.kubeconfig = Some(word.clone()),
                "context" => conn.context = Some(word.clone()),
                _ => {}
            }
            continue;
        }
        let Some(cmd) = &sub else {
            if !word.starts_with('-') {
                sub = root.find_subcommand(word).cloned();
            }
            continue;
        };
        if let Some(flag) = word.strip_prefix('-') {
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (flag, None),
            };
            let arg = cmd.get_arguments().find(|a| match name.strip_prefix('-') {
                Some(long) => a.get_long() == Some(long),
                None => name.len() == 1 && a.get_short() == name.chars().next(),
            });
            if let Some(arg) = arg.filter(|a| a.get_action().takes_values()) {
                match inline {
                    Some(v) => match arg.get_id().as_str() {
                        "namespace" => conn.namespace = Some(v.to_string()),
                        "kubeconfig" => conn.kubeconfig = Some(v.to_string()),
                        "context" => conn.context = Some(v.to_string()),
                        _ => {}
                    },
                    None => expecting = Some(arg.clone()),
                }
            }
        } else {
            positionals += 1;
        }
    }
    let Some(cmd) = sub else {
        let subcommands = root
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| (c.get_name().to_string(), first_line(c.get_about())))
            .collect();
        return (Offer::Values(subcommands), conn);
    };
    if let Some(arg) = expecting {
        let offer = match arg.get_id().as_str() {
            "namespace" => Offer::Namespaces,
            "pod" => Offer::Pods,
            "kubeconfig" | "file" => Offer::Files,
            _ => Offer::Values(possible_values(&arg)),
        };
        return (offer, conn);
    }
    let positional = cmd.get_positionals().nth(positionals).cloned();
    let offer = match (cmd.get_name(), positional) {
        (_, None) => Offer::Values(Vec::new()),
        ("skip-hook", Some(_)) => Offer::HeldPods,
        (_, Some(arg)) if arg.get_id() == "name" => Offer::GameDeployments,
        (_, Some(arg)) => Offer::Values(possible_values(&arg)),
    };
    (offer, conn)
}

/// Flags of the subcommand named in `words` (for a partial word starting with `-`).
pub fn flags(words: &[String]) -> Vec<(String, String)> {
    let root = Cli::command();
    let cmd = words.iter().find_map(|w| root.find_subcommand(w));
    let args: Vec<&clap::Arg> = match cmd {
        Some(cmd) => cmd.get_arguments().collect(),
        None => root.get_arguments().collect(),
    };
    let mut out: Vec<(String, String)> = args
        .into_iter()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long().map(|l| (format!("--{l}"), first_line(a.get_help()))))
        .collect();
    out.push(("--help".into(), "Print help".into()));
    out
}

fn first_line(text: Option<&clap::builder::StyledStr>) -> String {
    text.map(|t| t.to_string().lines().next().unwrap_or("").to_string()).unwrap_or_default()
}

fn possible_values(arg: &clap::Arg) -> Vec<(String, String)> {
    arg.get_possible_values()
        .into_iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| (v.get_name().to_string(), first_line(v.get_help())))
        .collect()
}

/// Answers one completion request: `args` are the words after `kubectl gd`, the last one being completed.
pub async fn run(args: Vec<String>) -> std::process::ExitCode {
    let (words, partial) = match args.split_last() {
        Some((last, words)) => (words.to_vec(), last.clone()),
        None => (Vec::new(), String::new()),
    };
    let (mut candidates, directive) = if partial.starts_with('-') {
        (flags(&words), NO_FILES)
    } else {
        let (offer, conn) = decide(&words);
        match offer {
            Offer::Values(values) => (values, NO_FILES),
            Offer::Files => (Vec::new(), FILES),
            other => (lookup(other, &conn).await, NO_FILES),
        }
    };
    candidates.retain(|(v, _)| v.starts_with(&partial));
    for (value, description) in candidates {
        if description.is_empty() {
            println!("{value}");
        } else {
            println!("{value}\t{description}");
        }
    }
    println!(":{directive}");
    std::process::ExitCode::SUCCESS
}

/// Names from the cluster; nothing when it cannot be reached (completion must never print errors).
async fn lookup(offer: Offer, conn: &Conn) -> Vec<(String, String)> {
    let Ok(target) = Target::connect(
        conn.kubeconfig.as_deref().map(std::path::Path::new),
        conn.context.as_deref(),
        conn.namespace.as_deref(),
    )
    .await
    else {
        return Vec::new();
    };
    let names = |items: Vec<Option<String>>| -> Vec<(String, String)> {
        items.into_iter().flatten().map(|n| (n, String::new())).collect()
    };
    match offer {
        Offer::GameDeployments => match target.api::<GameDeployment>().list(&ListParams::default()).await {
            Ok(list) => names(list.items.into_iter().map(|g| g.metadata.name).collect()),
            Err(_) => Vec::new(),
        },
        Offer::HeldPods | Offer::Pods => {
            let params = match offer {
                Offer::HeldPods => ListParams::default()
                    .labels(&format!("{} in (PreparingDelete,PreparingUpdate)", common::keys::LIFECYCLE_STATE)),
                _ => ListParams::default().labels(common::keys::INSTANCE_ID),
            };
            match target.api::<Pod>().list(&params).await {
                Ok(list) => names(list.items.into_iter().map(|p| p.metadata.name).collect()),
                Err(_) => Vec::new(),
            }
        }
        Offer::Namespaces => {
            let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(target.client.clone());
            match api.list(&ListParams::default()).await {
                Ok(list) => names(list.items.into_iter().map(|n| n.metadata.name).collect()),
                Err(_) => Vec::new(),
            }
        }
        Offer::Values(v) => v,
        Offer::Files => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn offers_follow_the_command_line() {
        let (offer, _) = decide(&words(""));
        let Offer::Values(subcommands) = offer else { panic!("subcommands") };
        let names: Vec<&str> = subcommands.iter().map(|(n, _)| n.as_str()).collect();
        for name in [
            "get",
            "status",
            "plan",
            "retry",
            "pause",
            "resume",
            "promote",
            "skip-hook",
            "restart",
            "check",
            "completion",
        ] {
            assert!(names.contains(&name), "{names:?}");
        }
        assert_eq!(decide(&words("get")).0, Offer::GameDeployments);
        assert_eq!(decide(&words("status -n games")).0, Offer::GameDeployments);
        assert_eq!(decide(&words("status -n games")).1.namespace.as_deref(), Some("games"));
        assert_eq!(decide(&words("get gd1")).0, Offer::Values(Vec::new()), "one name only");
        assert_eq!(decide(&words("skip-hook")).0, Offer::HeldPods);
        assert_eq!(decide(&words("retry gd1 --pod")).0, Offer::Pods);
        assert_eq!(decide(&words("get gd1 --namespace")).0, Offer::Namespaces);
        assert_eq!(decide(&words("check -f")).0, Offer::Files);
        assert_eq!(decide(&words("plan")).0, Offer::GameDeployments);
        assert_eq!(decide(&words("plan gd1 -f")).0, Offer::Files);
        let Offer::Values(assume) = decide(&words("plan gd1 --assume-hooks")).0 else { panic!("values") };
        assert_eq!(assume.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["succeed", "fail", "as-now"]);
        let Offer::Values(outputs) = decide(&words("get gd1 -o")).0 else { panic!("values") };
        assert_eq!(outputs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["text", "json"]);
        let Offer::Values(shells) = decide(&words("completion")).0 else { panic!("shells") };
        assert!(shells.iter().any(|(n, _)| n == "bash"));
        assert!(flags(&words("get")).iter().any(|(f, _)| f == "--watch"));
    }
}
