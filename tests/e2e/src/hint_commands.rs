//! Hints run as printed (issue 34: "every hint the code can print is run by a test"). The operator's conditions and
//! Events, the pod-gate webhook's answers and `kubectl gd` print commands for a person to paste; these helpers pull
//! the commands out of such a text and run each one through a shell, exactly as printed, with `kubectl gd` on the
//! PATH and a kubeconfig whose context selects another namespace (`elsewhere`): a hint that forgets `-n` fails.

use std::process::Stdio;

use crate::{Cluster, KubectlOutput};

/// The namespace the hint runner's kubeconfig context selects: no test object lives there.
pub const ELSEWHERE: &str = "elsewhere";

/// The commands a hint text names: each `kubectl …` up to the first backtick, `)`, `;`, `,` or ` (or: ` after it
/// (the shapes the hints are printed in: "…: kubectl gd retry web (or: kubectl patch …)", "run `kubectl gd …`").
pub fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("kubectl ") {
        let tail = &rest[start..];
        let mut end = tail.find(['`', ')', ';', ',']).unwrap_or(tail.len());
        if let Some(or) = tail.find(" (or: ") {
            end = end.min(or);
        }
        let command = tail[..end].trim_end_matches('.').trim();
        out.push(command.to_string());
        rest = &tail[end..];
    }
    out
}

/// Runs `command` through `sh -c` as printed: `kubectl-gd` first on the PATH, the cluster's credentials with the
/// context's namespace set to [`ELSEWHERE`].
pub async fn run(cluster: &Cluster, command: &str) -> KubectlOutput {
    let kubeconfig = cluster.dir().join("hints.kubeconfig");
    if !kubeconfig.exists() {
        std::fs::copy(cluster.kubeconfig(), &kubeconfig).expect("kubeconfig copied");
        let status = std::process::Command::new("kubectl")
            .args(["config", "set-context", "--current", "--namespace", ELSEWHERE])
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .status()
            .expect("kubectl runs");
        assert!(status.success(), "the hint kubeconfig selects {ELSEWHERE}");
    }
    let plugin = crate::binary("kubectl-gd", "kubectl-gd");
    let plugin_dir = plugin.parent().expect("the plugin has a directory").to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(plugin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH joins");
    let output = tokio::process::Command::new("sh")
        .args(["-c", command])
        .env("PATH", path)
        .env("KUBECONFIG", &kubeconfig)
        .env("KUBECACHEDIR", cluster.dir().join("kube-cache-hints"))
        .current_dir(crate::repo_root())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("sh runs");
    let out = KubectlOutput {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    println!("$ {command}\n{}{}", out.stdout, out.stderr);
    out
}

/// Runs `command` and fails the test when it does not succeed.
pub async fn run_ok(cluster: &Cluster, command: &str) -> String {
    let out = run(cluster, command).await;
    assert!(out.success, "the hint `{command}` failed as printed:\n{}{}", out.stderr, out.stdout);
    out.stdout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_end_where_the_hint_s_punctuation_says() {
        let text = "HookRun r ended Failed (x); fix the hook, then run it again: kubectl gd retry web -n games (or: \
                    kubectl patch gamedeployment web -n games --type=merge -p '{\"spec\":{\"a\":{\"retry\":true}}}')";
        assert_eq!(
            commands(text),
            vec![
                "kubectl gd retry web -n games".to_string(),
                "kubectl patch gamedeployment web -n games --type=merge -p '{\"spec\":{\"a\":{\"retry\":true}}}'"
                    .to_string()
            ]
        );
        let text = "run `kubectl gd retry web` once the cause is fixed; or `kubectl annotate pod p k=delete` lets";
        assert_eq!(commands(text), vec!["kubectl gd retry web", "kubectl annotate pod p k=delete"]);
        let text = "To skip the hook: kubectl annotate pod p k=true, then retry.";
        assert_eq!(commands(text), vec!["kubectl annotate pod p k=true"]);
    }
}
