//! The one Kubernetes release kube-sim reports. `/version` (`gitVersion`, `major`, `minor`, the emulation and
//! compatibility versions), the OpenAPI documents' `info.version`, the fake nodes' `nodeInfo.kubeletVersion` and
//! the kubelet prober's `User-Agent` are all spelled here, from the three numbers given to `release!` below; the
//! unit tests read each of them back from where it is served.
//!
//! Why 1.33: kubectl supports one minor version of skew with its server, the newest kubectl on these machines is
//! 1.33, and the gcloud dispatcher at `/usr/bin/kubectl` runs the client matching the server's minor (for a newer
//! server it falls back to its 1.32 and `kubectl version` warns that the skew is exceeded). A kubelet never reports
//! a newer release than its API server (the version-skew policy), so the fake nodes report the same one.
//!
//! The built-in kinds' types, and with them their OpenAPI schemas, strategic-merge keys and protobuf fields, are
//! k8s-openapi's, whose Kubernetes version is a Cargo feature chosen once for the whole workspace (`latest`), not
//! by kube-sim. [`SCHEMAS_MINOR`] reads that choice; a compile-time check keeps it at or above the reported minor,
//! so every field of the reported release is known (the newer fields it also knows are a listed difference).

use serde_json::{Value, json};

/// Declares the reported release once: every version string is a `concat!` of these literals.
macro_rules! release {
    ($major:literal, $minor:literal, $patch:literal) => {
        /// The reported major version.
        pub(crate) const MAJOR: u32 = $major;
        /// The reported minor version.
        pub(crate) const MINOR: u32 = $minor;
        /// `/version`'s `gitVersion`, also the OpenAPI documents' `info.version`.
        pub const GIT_VERSION: &str = concat!("v", $major, ".", $minor, ".", $patch);
        /// What the fake nodes report as `nodeInfo.kubeletVersion`: the API server's release, marked as simulated.
        pub const KUBELET_VERSION: &str = concat!("v", $major, ".", $minor, ".", $patch, "-kube-sim");
        /// The kubelet prober's `User-Agent`: `kube-probe/MAJOR.MINOR`, as a real kubelet sends.
        pub(crate) const PROBE_USER_AGENT: &str = concat!("kube-probe/", $major, ".", $minor);
    };
}

release!(1, 33, 0);

// The Kubernetes minor of the k8s-openapi types in use (the workspace's `v1_*` feature of k8s-openapi): exactly
// one of these expands. A k8s-openapi release that adds a version leaves `SCHEMAS_MINOR` undefined under it, which
// is the moment to look at the reported release again.
k8s_openapi::k8s_if_1_33! { pub(crate) const SCHEMAS_MINOR: u32 = 33; }
k8s_openapi::k8s_if_1_34! { pub(crate) const SCHEMAS_MINOR: u32 = 34; }
k8s_openapi::k8s_if_1_35! { pub(crate) const SCHEMAS_MINOR: u32 = 35; }
k8s_openapi::k8s_if_1_36! { pub(crate) const SCHEMAS_MINOR: u32 = 36; }
k8s_openapi::k8s_if_1_37! { pub(crate) const SCHEMAS_MINOR: u32 = 37; }

// The types know every field of the reported release (the fields they know beyond it are a listed difference).
const _: () = assert!(
    MAJOR == 1 && SCHEMAS_MINOR >= MINOR,
    "the k8s-openapi types must know every field of the reported Kubernetes release"
);

/// The `/version` document, as kube-apiserver serves it (`k8s.io/apimachinery/pkg/version.Info`): it emulates its
/// own release and is compatible with the previous minor.
pub(crate) fn info() -> Value {
    json!({
        "major": MAJOR.to_string(),
        "minor": MINOR.to_string(),
        "emulationMajor": MAJOR.to_string(),
        "emulationMinor": MINOR.to_string(),
        "minCompatibilityMajor": MAJOR.to_string(),
        "minCompatibilityMinor": MINOR.saturating_sub(1).to_string(),
        "gitVersion": GIT_VERSION,
        "gitCommit": "kube-sim",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24 (kube-sim, Rust)",
        "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::resources::Catalog;

    /// `vMAJOR.MINOR.PATCH` (with an optional `-suffix`) split into its numbers.
    pub(crate) fn numbers(version: &str) -> (u32, u32, u32) {
        let core = version.strip_prefix('v').unwrap().split('-').next().unwrap();
        let parts: Vec<u32> = core.split('.').map(|n| n.parse().unwrap()).collect();
        assert_eq!(parts.len(), 3, "{version}");
        (parts[0], parts[1], parts[2])
    }

    #[test]
    fn the_server_and_its_documents_report_one_release() {
        let info = info();
        let git = info["gitVersion"].as_str().unwrap();
        assert_eq!(git, GIT_VERSION);
        let (major, minor, _) = numbers(git);
        assert_eq!((major, minor), (MAJOR, MINOR));
        assert_eq!(info["major"], major.to_string());
        assert_eq!(info["minor"], minor.to_string());
        assert_eq!(info["emulationMajor"], major.to_string());
        assert_eq!(info["emulationMinor"], minor.to_string());
        assert_eq!(info["minCompatibilityMajor"], major.to_string());
        assert_eq!(info["minCompatibilityMinor"], (minor - 1).to_string());
        for gv in ["api/v1", "apis/apps/v1"] {
            let doc = crate::openapi::group_version_doc(&Catalog::new(), gv).unwrap();
            assert_eq!(doc["info"]["version"], git, "{gv}");
        }
        assert_eq!(numbers(KUBELET_VERSION), numbers(git), "a kubelet reports its API server's release");
        assert_eq!(PROBE_USER_AGENT, format!("kube-probe/{major}.{minor}"));
    }
}
