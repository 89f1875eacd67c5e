//! The bridge between the synchronous registry and the asynchronous webhook calls.
//!
//! kube-apiserver calls validating webhooks inside the storage update, right before the write
//! is committed, with the final object, and calls them again when the update is retried after
//! a conflict. kube-sim's registry runs under no `await`, so a write runs twice instead: a
//! *probe* run stops at the commit point and hands the old and new objects out (the webhooks
//! are then called with them), and a *commit* run performs the write only if the stored object
//! is still the one the webhooks saw — otherwise it stops as *stale* and the caller probes again,
//! as the real server re-admits a retried update.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::meta;
use crate::status::ApiError;

const PROBED: &str = "kube-sim:AdmissionProbed";
const STALE: &str = "kube-sim:AdmissionStale";

/// What a probe run was about to write: `old` is the stored object (None on create), `new`
/// the object to store (None on delete), both in storage form.
#[derive(Clone, Debug, Default)]
pub(crate) struct Probed {
    pub old: Option<Value>,
    pub new: Option<Value>,
}

#[derive(Debug)]
enum State {
    Probe(Option<Probed>),
    Commit(Probed),
}

/// Carried in `WriteCtx::admission`; the registry calls [`Gate::check`] at every commit point.
#[derive(Clone, Debug)]
pub(crate) struct Gate(Arc<Mutex<State>>);

impl Gate {
    pub(crate) fn probe() -> Self {
        Gate(Arc::new(Mutex::new(State::Probe(None))))
    }

    /// A gate that lets through the write the webhooks admitted.
    pub(crate) fn commit(admitted: Probed) -> Self {
        Gate(Arc::new(Mutex::new(State::Commit(admitted))))
    }

    /// What the probe run reached, if it reached a commit point.
    pub(crate) fn probed(&self) -> Option<Probed> {
        match &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            State::Probe(p) => p.clone(),
            State::Commit(_) => None,
        }
    }

    pub(crate) fn is_stale(e: &ApiError) -> bool {
        e.reason == STALE
    }

    /// Called by the registry right before it commits a write of `new` over `old`. A probe
    /// records both and stops the write; a commit lets it through when `old` is the object
    /// the webhooks saw, and keeps what a create generated (name, uid, creation time) as the
    /// webhooks saw it.
    pub(crate) fn check(&self, old: Option<&Value>, new: Option<&mut Value>) -> Result<(), ApiError> {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *state {
            State::Probe(slot) => {
                *slot = Some(Probed { old: old.cloned(), new: new.map(|n| n.clone()) });
                Err(ApiError::new(500, PROBED, "admission probe"))
            }
            State::Commit(admitted) => {
                let same_old = match (old, &admitted.old) {
                    (None, None) => true,
                    (Some(o), Some(a)) => {
                        meta::uid(o) == meta::uid(a) && meta::resource_version(o) == meta::resource_version(a)
                    }
                    _ => false,
                };
                if !same_old || new.is_some() != admitted.new.is_some() {
                    return Err(ApiError::new(500, STALE, "admission raced with another write"));
                }
                if let (None, Some(new), Some(seen)) = (old, new, admitted.new.as_ref()) {
                    let m = meta::metadata_mut(new);
                    for key in ["name", "uid", "creationTimestamp"] {
                        if let Some(v) = seen.get("metadata").and_then(|sm| sm.get(key)) {
                            m.insert(key.to_string(), v.clone());
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_probe_stops_the_write_and_a_commit_needs_the_same_old_object() {
        let old = json!({"metadata": {"name": "a", "uid": "u1", "resourceVersion": "5"}});
        let mut new = json!({"metadata": {"name": "a", "uid": "u1"}, "data": {"k": "v"}});
        let probe = Gate::probe();
        let e = probe.check(Some(&old), Some(&mut new)).unwrap_err();
        assert_eq!(e.reason, PROBED);
        let seen = probe.probed().unwrap();
        assert_eq!(seen.new.as_ref().unwrap()["data"]["k"], "v");

        let commit = Gate::commit(seen.clone());
        assert!(commit.check(Some(&old), Some(&mut new)).is_ok());
        let moved = json!({"metadata": {"name": "a", "uid": "u1", "resourceVersion": "6"}});
        assert!(Gate::is_stale(&commit.check(Some(&moved), Some(&mut new)).unwrap_err()));
        // A delete admitted is not an update.
        assert!(Gate::is_stale(&commit.check(Some(&old), None).unwrap_err()));
    }

    #[test]
    fn a_committed_create_keeps_the_generated_name_and_uid_the_webhooks_saw() {
        let probe = Gate::probe();
        let mut first =
            json!({"metadata": {"name": "web-abcde", "generateName": "web-", "uid": "u1", "creationTimestamp": "t1"}});
        let _ = probe.check(None, Some(&mut first));
        let commit = Gate::commit(probe.probed().unwrap());
        let mut second =
            json!({"metadata": {"name": "web-zzzzz", "generateName": "web-", "uid": "u2", "creationTimestamp": "t2"}});
        commit.check(None, Some(&mut second)).unwrap();
        assert_eq!(second["metadata"]["name"], "web-abcde");
        assert_eq!(second["metadata"]["uid"], "u1");
        assert_eq!(second["metadata"]["creationTimestamp"], "t1");
    }
}
