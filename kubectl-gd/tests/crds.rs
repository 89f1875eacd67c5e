//! The repository's CRDs (`crds/`) installed on a kube-sim API server, for the tests that drive the plugin against
//! one: they return once GameDeployments are served.

use std::time::{Duration, Instant};

use common::api::GameDeployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;

/// Creates every CRD of `crds/` and waits, at most `deadline`, until GameDeployments can be listed in `default`.
pub async fn install(client: &kube::Client, deadline: Duration) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds");
    for entry in std::fs::read_dir(dir).expect("crds/") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("CRD file");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
        crds.create(&PostParams::default(), &crd).await.expect("CRD created");
    }
    let gds: Api<GameDeployment> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    while gds.list(&Default::default()).await.is_err() {
        assert!(start.elapsed() < deadline, "GameDeployments are not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
