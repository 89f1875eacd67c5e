//! The authenticated user of a request: what authentication (`auth`) decides, and what the registry, admission
//! (`userInfo` of an AdmissionReview, `request.userInfo` of a policy) and authorization read.

use serde_json::{Value, json};

/// The authenticated user of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// `userInfo.extra`: what the authenticator knows beyond name and groups (a bound service-account token's
    /// `authentication.kubernetes.io/pod-name`, `pod-uid`, ...).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub(crate) fn admin() -> Self {
        Self {
            name: "kube-sim-admin".into(),
            uid: "kube-sim-admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            extra: Default::default(),
        }
    }

    pub(crate) fn is_admin(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

/// `userInfo.extra` as JSON.
pub(crate) fn extra_json(user: &UserInfo) -> Value {
    json!(user.extra)
}
