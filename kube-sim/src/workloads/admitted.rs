//! Writes by kube-sim's own controllers, through validating admission as kube-controller-manager's requests go
//! through kube-apiserver's: the ReplicaSet controller's pod creations and deletions reach the webhooks (and
//! ValidatingAdmissionPolicies) that match them, as the controller's ServiceAccount, and a refusal fails the
//! write (the controller records it and tries again later, as the real one does).
//!
//! The write runs as `crate::admission::gate` describes for an API request: a probe run stops at the commit point,
//! the matching webhooks are called with the objects it was about to write, and a commit run writes only what they
//! saw.

use std::sync::Arc;

use serde_json::Value;

use crate::admission::{Admission, Attempt, Cluster, Gate, Operation, Request};
use crate::registry::Registry;
use crate::resources::ResourceDef;
use crate::status::ApiError;
use crate::user::UserInfo;

/// How many times a write is admitted again when the object changed between the probe and the commit.
const ATTEMPTS: usize = 16;

/// The identity a kube-controller-manager controller writes as (its ServiceAccount in `kube-system`).
pub(super) fn controller_user(controller: &str) -> UserInfo {
    UserInfo {
        name: format!("system:serviceaccount:kube-system:{controller}"),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:kube-system".into(),
            "system:authenticated".into(),
        ],
        extra: Default::default(),
    }
}

/// Runs `write` (a registry write of `rd` in `ns` that can turn out as one of `ops`) through validating admission
/// as `user`. `write` gets the gate to put in its `WriteCtx`: none when nothing matches, so the write runs once.
pub(super) async fn run<T>(
    admission: &Admission,
    registry: &Registry,
    rd: &ResourceDef,
    ns: &str,
    user: &UserInfo,
    ops: &[Operation],
    write: impl Fn(Option<Gate>) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let cluster = Cluster { store: &registry.store, catalog: &registry.catalog };
    let req = Request { rd, subresource: "", namespace: ns, user, dry_run: false };
    let candidates = admission.candidates(cluster, &req, ops);
    if candidates.is_empty() {
        return write(None);
    }
    let mut name = String::new();
    for _ in 0..ATTEMPTS {
        let probe = Gate::probe();
        let outcome = write(Some(probe.clone()));
        let Some(probed) = probe.probed() else {
            // No write reached its commit point (an error, or nothing to write).
            return outcome;
        };
        let operation = Operation::of(&probed);
        let view = |o: &Option<Value>| o.as_ref().map(|v| (*registry.view(rd, &Arc::new(v.clone()))).clone());
        let (object, old_object) = (view(&probed.new), view(&probed.old));
        name = object.as_ref().or(old_object.as_ref()).map(|o| crate::meta::name(o).to_string()).unwrap_or_default();
        let attempt = Attempt {
            operation,
            kind: (rd.group.clone(), rd.version.clone(), rd.kind.clone()),
            name: name.clone(),
            object,
            old_object,
            // client-go's controllers send empty options.
            options: crate::admission::options(operation, false, None, None),
        };
        admission.admit(cluster, &candidates, &req, &attempt).await?;
        match write(Some(Gate::commit(probed))) {
            Err(e) if Gate::is_stale(&e) => continue,
            other => return other,
        }
    }
    Err(ApiError::modified(&rd.group_resource(), &name))
}
