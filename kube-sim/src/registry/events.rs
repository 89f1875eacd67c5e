//! `events.k8s.io/v1` Events are stored as core/v1 Events (one storage, two APIs), converted
//! field by field as in k8s.io/kubernetes/pkg/apis/events/v1.

use serde_json::{Map, Value, json};

const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

const SHARED: &[&str] =
    &["metadata", "eventTime", "series", "related", "action", "reason", "type", "reportingInstance"];

/// events.k8s.io/v1 -> core/v1
pub(crate) fn to_core(v: &Value) -> Value {
    convert(v, "v1", RENAMES.iter().copied())
}

/// core/v1 -> events.k8s.io/v1
pub(crate) fn from_core(v: &Value) -> Value {
    convert(v, "events.k8s.io/v1", RENAMES.iter().map(|(events, core)| (*core, *events)))
}

/// An Event in the other API: `api_version`'s, with the fields both versions share and the renamed ones, each
/// `(from, to)`.
fn convert<'a>(v: &Value, api_version: &str, renames: impl Iterator<Item = (&'a str, &'a str)>) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    if let Value::Object(m) = v {
        for k in SHARED {
            if let Some(x) = m.get(*k) {
                out.insert(k.to_string(), x.clone());
            }
        }
        for (from, to) in renames {
            if let Some(x) = m.get(from) {
                out.insert(to.to_string(), x.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let e = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x"}, "regarding": {"kind": "Pod", "name": "p"},
                       "note": "hello", "reason": "Started", "type": "Normal", "reportingController": "c", "eventTime": "2024-01-01T00:00:00.000000Z"});
        let core = to_core(&e);
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(from_core(&core), e);
    }
}
