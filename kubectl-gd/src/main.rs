//! `kubectl-gd`: run as `kubectl gd …` once the binary is on the PATH (kubectl's plugin mechanism).

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    // Installed (or symlinked) as `kubectl_complete-gd`, kubectl runs it to complete `kubectl gd <TAB>`.
    let mut args = std::env::args();
    let invoked_as = args.next().unwrap_or_default();
    if std::path::Path::new(&invoked_as).file_name().is_some_and(|n| n == "kubectl_complete-gd") {
        return kubectl_gd::complete::run(args.collect()).await;
    }
    let cli = kubectl_gd::cli::Cli::parse();
    kubectl_gd::commands::run(cli).await
}
