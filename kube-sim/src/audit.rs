//! An audit log of every write request (create, update, patch, delete, deletecollection, on
//! resources and their subresources): who sent it, when it was received and answered, what it
//! touched, the resourceVersion it produced and the HTTP code. It plays the part of
//! kube-apiserver's audit log at the `Metadata` level with a `ResponseComplete` stage, in a flat
//! form made for tests (e.g. proving that two operator replicas never wrote in overlapping
//! windows). Read it with [`crate::SimHandle::audit`] or `GET /kube-sim/audit`.

use std::collections::VecDeque;
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// One write request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// Position in the log (1, 2, …; never reused, also after eviction from the bounded log).
    pub id: u64,
    /// The `Audit-Id` header of the response.
    pub audit_id: String,
    /// When the request arrived (before authentication, faults and body reading).
    #[serde(with = "micro_time")]
    pub request_received_timestamp: Timestamp,
    /// When the response was ready (or the client went away: `code` 0).
    #[serde(with = "micro_time")]
    pub stage_timestamp: Timestamp,
    /// The user the request ran as (after impersonation); empty when authentication failed.
    pub user: String,
    pub groups: Vec<String>,
    /// The authenticated user when it impersonated `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonated_by: Option<String>,
    pub user_agent: String,
    /// `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// `METHOD path?query`
    pub request_uri: String,
    /// API group (empty for core).
    pub api_group: String,
    pub api_version: String,
    /// Plural resource name.
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
    pub namespace: String,
    /// Object name (for a create, the name the server gave it).
    pub name: String,
    /// `resourceVersion` of the object the request produced (absent for failed writes and for
    /// responses without an object version, e.g. `binding`, `eviction`, `deletecollection`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// HTTP status code of the response; 0 when the client went away before it was answered
    /// (e.g. a blackholed request the client gave up on: it changed nothing).
    pub code: u16,
    pub dry_run: bool,
}

impl AuditEvent {
    /// The write took effect (2xx and not a dry run).
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code) && !self.dry_run
    }
}

/// `{"items": [...], "dropped": N}` as served at `/kube-sim/audit`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditLog {
    pub items: Vec<AuditEvent>,
    /// Events evicted from the bounded log so far.
    pub dropped: u64,
}

/// What a handler learned about the object it wrote, attached to its response.
#[derive(Clone, Debug, Default)]
pub(crate) struct Written {
    pub name: String,
    pub resource_version: Option<String>,
}

/// The bounded in-memory log.
pub(crate) struct Audit {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    events: VecDeque<AuditEvent>,
    next_id: u64,
    dropped: u64,
}

impl Audit {
    pub(crate) fn new(capacity: usize) -> Self {
        Self { capacity, inner: Mutex::new(Inner { next_id: 1, ..Default::default() }) }
    }

    pub(crate) fn record(&self, mut event: AuditEvent) {
        if self.capacity == 0 {
            return;
        }
        // Microseconds, like `metav1.MicroTime` (so the JSON form reads back equal).
        let micro = |t: Timestamp| Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t);
        event.request_received_timestamp = micro(event.request_received_timestamp);
        event.stage_timestamp = micro(event.stage_timestamp);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        event.id = inner.next_id;
        inner.next_id += 1;
        if inner.events.len() >= self.capacity {
            inner.events.pop_front();
            inner.dropped += 1;
        }
        inner.events.push_back(event);
    }

    /// Events with `id > since`, oldest first.
    pub(crate) fn since(&self, since: u64) -> AuditLog {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        AuditLog { items: inner.events.iter().filter(|e| e.id > since).cloned().collect(), dropped: inner.dropped }
    }

    pub(crate) fn clear(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.events.clear();
    }
}

mod micro_time {
    use k8s_openapi::jiff::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    /// RFC 3339 with microseconds, like `metav1.MicroTime`.
    pub(super) fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{t:.6}"))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str) -> AuditEvent {
        AuditEvent {
            id: 0,
            audit_id: String::new(),
            request_received_timestamp: Timestamp::UNIX_EPOCH,
            stage_timestamp: Timestamp::UNIX_EPOCH,
            user: "u".into(),
            groups: vec![],
            impersonated_by: None,
            user_agent: String::new(),
            verb: "create".into(),
            request_uri: String::new(),
            api_group: String::new(),
            api_version: "v1".into(),
            resource: "pods".into(),
            subresource: None,
            namespace: "default".into(),
            name: name.into(),
            resource_version: Some("5".into()),
            code: 201,
            dry_run: false,
        }
    }

    #[test]
    fn bounded_with_stable_ids_and_micro_timestamps() {
        let a = Audit::new(2);
        for n in ["a", "b", "c"] {
            a.record(event(n));
        }
        let log = a.since(0);
        assert_eq!(log.dropped, 1);
        assert_eq!(log.items.iter().map(|e| (e.id, e.name.as_str())).collect::<Vec<_>>(), [(2, "b"), (3, "c")]);
        assert_eq!(a.since(2).items.len(), 1);
        let json = serde_json::to_value(&log.items[0]).unwrap();
        assert_eq!(json["requestReceivedTimestamp"], "1970-01-01T00:00:00.000000Z");
        let back: AuditEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, log.items[0]);
    }
}
