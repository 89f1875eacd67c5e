//! The checked-in `crds/` must be exactly what the Rust types generate, or users would install a schema
//! that differs from what the operators read.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion;

#[test]
fn checked_in_crds_match_the_rust_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut stale = Vec::new();
    for dir in common::crd::OUTPUT_DIRS {
        for (file, crd) in common::crd::all() {
            let want = common::crd::to_yaml(&crd).expect("CRD serialises");
            let have = std::fs::read_to_string(root.join(dir).join(file)).unwrap_or_default();
            if have != want {
                stale.push(format!("{dir}/{file}"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} are stale: the API types in common/src/api changed. \
         Run `cargo run -p common --bin crdgen` and commit the result."
    );
}

#[test]
fn crds_fit_in_kubectl_apply_annotation() {
    // `kubectl apply` stores the whole object in the last-applied-configuration annotation, limited to
    // 256 KiB; a larger CRD would need `--server-side` and surprise users.
    for (file, crd) in common::crd::all() {
        let size = serde_json::to_vec(&crd).expect("CRD serialises").len();
        assert!(size < 256 * 1024 - 4096, "{file} is {size} bytes as JSON; kubectl apply would reject it");
    }
}

/// The printer columns of the default view, as (name, JSONPath): priority 0 is BCS's view; `-o wide` columns
/// (priority 1) are additions.
fn default_columns(version: &CustomResourceDefinitionVersion) -> Vec<(&str, &str)> {
    version
        .additional_printer_columns
        .iter()
        .flatten()
        .filter(|c| c.priority.unwrap_or(0) == 0)
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect()
}

#[test]
fn crd_metadata_matches_bcs() {
    let crds = common::crd::all();
    let by_name = |name: &str| {
        crds.iter().find(|(_, c)| c.metadata.name.as_deref() == Some(name)).map(|(_, c)| c.clone()).unwrap()
    };
    let gd = by_name("gamedeployments.tkex.tencent.com");
    let version = &gd.spec.versions[0];
    let columns = default_columns(version);
    assert_eq!(
        columns,
        [
            ("DESIRED", ".spec.replicas"),
            ("UPDATED", ".status.updatedReplicas"),
            ("UPDATED_READY", ".status.updatedReadyReplicas"),
            ("READY", ".status.readyReplicas"),
            ("TOTAL", ".status.replicas"),
            ("AGE", ".metadata.creationTimestamp"),
        ]
    );
    let sub = version.subresources.as_ref().expect("subresources");
    assert!(sub.status.is_some());
    let scale = sub.scale.as_ref().expect("scale subresource");
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.replicas");
    assert_eq!(scale.label_selector_path.as_deref(), Some(".status.labelSelector"));
    assert_eq!(gd.spec.scope, "Namespaced");

    let hr = by_name("hookruns.tkex.tencent.com");
    let version = &hr.spec.versions[0];
    let columns = default_columns(version);
    assert_eq!(columns, [("PHASE", ".status.phase"), ("AGE", ".metadata.creationTimestamp")]);
    assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
    let ht = by_name("hooktemplates.tkex.tencent.com");
    assert_eq!(ht.spec.names.kind, "HookTemplate");
}
