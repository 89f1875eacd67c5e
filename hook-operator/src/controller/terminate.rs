//! Who terminated a run. `spec.terminate: true` completes a run at once, Successful unless a metric already failed,
//! and a Successful gating run lets its pod go: anyone who may patch HookRuns can open a gate this way (it is
//! `kubectl gd skip-hook`'s mechanism). So the completion names who did it: the field manager and time of the
//! `managedFields` entry that owns `spec.terminate`, read once from the API when the run completes by it (the
//! operator's cache holds runs without `managedFields`). The field manager names the client (`kubectl-patch`,
//! `kubectl-gd`, a controller), not an authenticated user; the API server's audit log has the user.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

/// The `managedFields` entry that set `spec.terminate`, as "field manager `M` (operation at time)".
pub fn terminated_by(entries: &[ManagedFieldsEntry]) -> Option<String> {
    let entry = entries.iter().rev().find(|entry| {
        entry.subresource.as_deref().unwrap_or_default().is_empty()
            && entry
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .is_some_and(|spec| spec.get("f:terminate").is_some())
    })?;
    let manager = entry.manager.as_deref().unwrap_or("unknown");
    let operation = entry.operation.as_deref().unwrap_or("Update");
    Some(match &entry.time {
        Some(time) => format!("field manager {manager:?} ({operation} at {})", time.0),
        None => format!("field manager {manager:?} ({operation})"),
    })
}

/// `message` naming who terminated the run (unchanged without an answer).
pub fn name_in(message: &str, by: Option<&str>) -> String {
    match by {
        Some(by) => format!("{message} by {by}"),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, Time};
    use k8s_openapi::jiff::Timestamp;

    fn entry(manager: &str, subresource: Option<&str>, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            subresource: subresource.map(Into::into),
            fields_v1: Some(FieldsV1(fields)),
            time: Some(Time(Timestamp::from_second(1_700_000_000).unwrap())),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn the_entry_owning_spec_terminate_names_who_terminated() {
        let entries = [
            entry("gamedeployment-operator", None, serde_json::json!({"f:spec": {"f:metrics": {}}})),
            entry("hook-operator", Some("status"), serde_json::json!({"f:status": {"f:phase": {}}})),
            entry("kubectl-patch", None, serde_json::json!({"f:spec": {"f:terminate": {}}})),
        ];
        let by = terminated_by(&entries).unwrap();
        assert_eq!(by, "field manager \"kubectl-patch\" (Update at 2023-11-14T22:13:20Z)");
        assert_eq!(name_in("terminated (spec.terminate)", Some(&by)), format!("terminated (spec.terminate) by {by}"));
        assert_eq!(terminated_by(&entries[..2]), None);
    }
}
