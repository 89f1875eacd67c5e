//! The Kubernetes client, from `--kubeconfig` when given, otherwise the usual inference (in-cluster, then
//! `$KUBECONFIG`, then `~/.kube/config`).

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::{KubeFlags, RuntimeError};

/// The client configuration `flags` name (`--kubeconfig`), or the inferred one: for a binary that adds layers
/// to its client (the gamedeployment-operator counts its API requests) before building it.
pub async fn config(flags: &KubeFlags) -> Result<Config, RuntimeError> {
    match &flags.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|source| RuntimeError::Kubeconfig { path: path.display().to_string(), source })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| RuntimeError::Kubeconfig { path: path.display().to_string(), source })
        }
        None => Ok(Config::infer().await?),
    }
}

/// A client for the configuration [`config`] finds; the one client a binary shares among its parts.
pub async fn build(flags: &KubeFlags) -> Result<Client, RuntimeError> {
    let config = config(flags).await?;
    Client::try_from(config).map_err(RuntimeError::Client)
}
