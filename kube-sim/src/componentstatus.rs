//! `componentstatuses` (core/v1): the health of the control plane's components, as kube-apiserver 1.33 still
//! serves it (deprecated since 1.19; `kubectl get cs` and clients that attach Events to a cluster-scoped object,
//! such as kube-runtime's recorder tests, read it).
//!
//! kube-apiserver never stores these objects: every `get` and `list` probes the components and answers what it
//! found (`pkg/registry/core/componentstatus`), with no uid, resourceVersion or creationTimestamp, and there is no
//! watch. kube-sim's components live in its own process, so the probe is whether they run: the scheduler runs with
//! the kubelet simulator (it is `--no-kubelet`'s casualty), the controllers and the store always do.

use serde_json::{Value, json};

use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;

/// The warning kube-apiserver attaches to every ComponentStatus response.
pub(crate) const DEPRECATION_WARNING: &str = "v1 ComponentStatus is deprecated in v1.19+";

/// What the components' probes find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Components {
    /// Whether a scheduler runs (kube-sim's is part of the kubelet simulator).
    pub scheduler: bool,
}

/// kube-scheduler's secure port, which kube-apiserver's probe dials.
const SCHEDULER_HEALTHZ: &str = "https://127.0.0.1:10259/healthz";

impl Components {
    /// Every component's status, by name.
    pub(crate) fn all(&self) -> Vec<Value> {
        let scheduler = if self.scheduler {
            Ok("ok")
        } else {
            Err(format!("Get \"{SCHEDULER_HEALTHZ}\": dial tcp 127.0.0.1:10259: connect: connection refused"))
        };
        vec![
            status("controller-manager", Ok("ok")),
            status("etcd-0", Ok("ok")),
            status("scheduler", scheduler.as_deref().map_err(String::as_str)),
        ]
    }

    /// One component's status. An unknown name is the plain error kube-apiserver's storage returns (a 500 with
    /// reason Unknown), not a NotFound.
    pub(crate) fn get(&self, name: &str) -> Result<Value, ApiError> {
        self.all()
            .into_iter()
            .find(|s| crate::meta::name(s) == name)
            .ok_or_else(|| ApiError::new(500, "", format!("Component not found: {name}")))
    }

    /// The statuses a list with these selectors returns: they carry no labels, and only `metadata.name` is a
    /// field, so a label selector that requires a label matches none of them.
    pub(crate) fn list(&self, labels: &LabelSelector, fields: &FieldSelector) -> Vec<Value> {
        self.all()
            .into_iter()
            .filter(|s| labels.matches_object(s))
            .filter(|s| {
                let name = crate::meta::name(s).to_string();
                fields.matches(&[("metadata.name".to_string(), name)].into_iter().collect())
            })
            .collect()
    }
}

/// A ComponentStatus with its one `Healthy` condition: `True` with the probe's message, or `False` with the
/// probe's error.
fn status(name: &str, probe: Result<&str, &str>) -> Value {
    let condition = match probe {
        Ok(message) => json!({"type": "Healthy", "status": "True", "message": message}),
        Err(error) => json!({"type": "Healthy", "status": "False", "error": error}),
    };
    json!({
        "kind": "ComponentStatus",
        "apiVersion": "v1",
        "metadata": {"name": name, "creationTimestamp": null},
        "conditions": [condition],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_component_is_healthy_while_it_runs() {
        let all = Components { scheduler: true }.all();
        let names: Vec<&str> = all.iter().map(crate::meta::name).collect();
        assert_eq!(names, ["controller-manager", "etcd-0", "scheduler"]);
        for s in &all {
            assert_eq!(s["conditions"], json!([{"type": "Healthy", "status": "True", "message": "ok"}]));
            assert!(s["metadata"].get("uid").is_none() && s["metadata"].get("resourceVersion").is_none());
        }
    }

    #[test]
    fn a_missing_scheduler_is_unhealthy_with_the_probes_error() {
        let s = Components { scheduler: false }.get("scheduler").expect("the scheduler is a component");
        assert_eq!(s["conditions"][0]["status"], "False");
        assert!(s["conditions"][0]["error"].as_str().is_some_and(|e| e.contains("connection refused")));
    }

    #[test]
    fn an_unknown_component_is_an_error_not_a_not_found() {
        let e = Components { scheduler: true }.get("kube-dns").expect_err("no such component");
        assert_eq!((e.code, e.message.as_str()), (500, "Component not found: kube-dns"));
    }

    #[test]
    fn selectors_filter_the_list() {
        let c = Components { scheduler: true };
        let none = LabelSelector::default();
        let one = FieldSelector::parse("metadata.name=etcd-0").expect("valid selector");
        assert_eq!(c.list(&none, &one).len(), 1);
        let labelled = LabelSelector::parse("tier=control-plane").expect("valid selector");
        assert!(c.list(&labelled, &FieldSelector::default()).is_empty());
    }
}
