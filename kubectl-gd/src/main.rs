//! `kubectl-gd`: run as `kubectl gd …` once the binary is on the PATH (kubectl's plugin mechanism).

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = kubectl_gd::cli::Cli::parse();
    kubectl_gd::commands::run(cli).await
}
