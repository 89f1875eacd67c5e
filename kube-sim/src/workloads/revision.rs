//! A Deployment's revisions (`pkg/controller/deployment/util`): the `pod-template-hash` that
//! names each ReplicaSet and labels its pods, which ReplicaSet holds the current template, the
//! `deployment.kubernetes.io/revision` numbers, and which old ReplicaSets the history limit lets go.

use serde_json::{Value, json};

use crate::meta;

pub(super) const HASH_LABEL: &str = "pod-template-hash";
pub(super) const REVISION: &str = "deployment.kubernetes.io/revision";
pub(super) const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub(super) const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub(super) const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// Deployment annotations a ReplicaSet does not inherit (`skipCopyAnnotation`).
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// `rand.SafeEncodeString`'s alphabet: no vowels, no look-alikes.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `ComputeHash`: FNV-1a (32 bit) of the template (and the collision count), its decimal digits
/// spelled in the safe alphabet. kube-sim hashes the template's JSON where Go hashes its
/// printed struct, so the names differ from a real cluster's but follow the same rules.
pub(super) fn template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(without_hash(template).to_string().as_bytes());
    if let Some(c) = collision_count {
        feed(&(c as u32).to_le_bytes());
    }
    h.to_string().bytes().map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char).collect()
}

/// The template without the `pod-template-hash` label (`EqualIgnoreHash`).
pub(super) fn without_hash(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.remove(HASH_LABEL);
        if labels.is_empty()
            && let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut)
        {
            m.remove("labels");
        }
    }
    t
}

/// Whether the ReplicaSet runs the Deployment's current template.
pub(super) fn same_template(rs: &Value, deployment: &Value) -> bool {
    let a = meta::lookup(rs, &["spec", "template"]).map(without_hash);
    let b = meta::lookup(deployment, &["spec", "template"]).map(without_hash);
    a == b
}

/// A ReplicaSet's revision number (0 when absent or unreadable).
pub(super) fn revision(obj: &Value) -> i64 {
    meta::annotations(obj)
        .and_then(|a| a.get(REVISION))
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The annotations a new or current ReplicaSet carries: the Deployment's (minus the skipped
/// ones), its revision, desired and maximum replicas.
pub(super) fn replica_set_annotations(
    deployment: &Value,
    current: Option<&Value>,
    revision: i64,
    desired: i64,
    max: i64,
) -> Value {
    let mut out = current.cloned().unwrap_or(json!({}));
    if let (Some(m), Some(from)) = (out.as_object_mut(), meta::annotations(deployment)) {
        for (k, v) in from {
            if !NOT_COPIED.contains(&k.as_str()) {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(m) = out.as_object_mut() {
        m.insert(REVISION.into(), json!(revision.to_string()));
        m.insert(DESIRED_REPLICAS.into(), json!(desired.to_string()));
        m.insert(MAX_REPLICAS.into(), json!(max.to_string()));
    }
    out
}

/// Old ReplicaSets past `revisionHistoryLimit` (`cleanupDeployment`): only empty ones that are not
/// being deleted, lowest revision first.
pub(super) fn history_to_delete(old: &[&Value], limit: i64) -> Vec<String> {
    let mut idle: Vec<&Value> = old
        .iter()
        .copied()
        .filter(|rs| {
            meta::deletion_timestamp(rs).is_none()
                && meta::lookup(rs, &["spec", "replicas"]).and_then(Value::as_i64).unwrap_or(0) == 0
                && meta::lookup(rs, &["status", "replicas"]).and_then(Value::as_i64).unwrap_or(0) == 0
        })
        .collect();
    let excess = idle.len() as i64 - limit.max(0);
    if excess <= 0 {
        return vec![];
    }
    idle.sort_by(|a, b| {
        revision(a)
            .cmp(&revision(b))
            .then_with(|| meta::meta_str(a, "creationTimestamp").cmp(&meta::meta_str(b, "creationTimestamp")))
    });
    idle.into_iter().take(excess as usize).map(|rs| meta::name(rs).to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_ignores_its_own_label_and_changes_with_the_template() {
        let t = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "a"}]}});
        let mut labelled = t.clone();
        labelled["metadata"]["labels"][HASH_LABEL] = json!("x");
        let h = template_hash(&t, None);
        assert_eq!(h, template_hash(&labelled, None));
        assert!(h.bytes().all(|b| ALPHANUMS.contains(&b)), "{h}");
        let mut other = t.clone();
        other["spec"]["containers"][0]["image"] = json!("b");
        assert_ne!(h, template_hash(&other, None));
        assert_ne!(h, template_hash(&t, Some(1)));
    }

    #[test]
    fn history_keeps_the_newest_idle_sets() {
        let rs = |name: &str, rev: i64, replicas: i64| json!({"metadata": {"name": name, "annotations": {REVISION: rev.to_string()}}, "spec": {"replicas": replicas}, "status": {"replicas": replicas}});
        let (a, b, c, busy) = (rs("a", 1, 0), rs("b", 2, 0), rs("c", 3, 0), rs("busy", 0, 2));
        assert_eq!(history_to_delete(&[&c, &a, &busy, &b], 1), vec!["a", "b"]);
        assert!(history_to_delete(&[&a, &b], 2).is_empty());
    }

    #[test]
    fn replica_sets_inherit_the_deployments_annotations_but_not_its_revision() {
        let d = json!({"metadata": {"annotations": {"team": "games", REVISION: "7", "kubectl.kubernetes.io/last-applied-configuration": "{}"}}});
        let a = replica_set_annotations(&d, None, 3, 4, 5);
        assert_eq!(a, json!({"team": "games", REVISION: "3", DESIRED_REPLICAS: "4", MAX_REPLICAS: "5"}));
    }
}
