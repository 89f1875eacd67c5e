//! Top-level sections a write left as stored, kept out of the decode round trip.
//!
//! A built-in kind is normalized by decoding it into its k8s-openapi type and encoding it back (`codec.rs`), as the
//! API server decodes into its Go struct: the largest single step of a pod patch in the benchmarks' profile of the
//! hooked roll. The stored object went through that round trip when it was written, so a section the write did not
//! change decodes to itself: a status patch leaves `metadata` and `spec` as stored, an image patch leaves `status`.
//! Those sections are taken out before the decode and put back after it, and only what changed goes through the
//! type. Only for kinds that decode with any top-level field missing ([`Codec::sections_optional`]); the others keep
//! the whole object in the round trip.
//!
//! The result is the full round trip's, key order included: k8s-openapi writes `apiVersion` and `kind` first and the
//! other fields by name, and the sections are merged back in that order (`a_write_decodes_as_the_full_round_trip`).

use serde_json::{Map, Value};

use crate::codec::Codec;
use crate::json;

/// The sections taken out of a write, to be put back into its decoded form.
#[derive(Default)]
pub(crate) struct Kept(Vec<(String, Value)>);

/// Takes out of `desired` every top-level section equal to the stored object's (never `apiVersion` or `kind`).
pub(crate) fn take(codec: &dyn Codec, current: &Value, desired: &mut Value) -> Kept {
    let (Some(stored), Value::Object(fields)) = (current.as_object(), desired) else {
        return Kept::default();
    };
    if !codec.sections_optional() {
        return Kept::default();
    }
    let same = |k: &str, v: &Value| k != "apiVersion" && k != "kind" && stored.get(k).is_some_and(|s| json::eq(s, v));
    let unchanged: Vec<bool> = fields.iter().map(|(k, v)| same(k, v)).collect();
    if !unchanged.contains(&true) {
        return Kept::default();
    }
    // Rebuilt rather than removed from: the map keeps the order of what is left either way (`preserve_order` or not).
    let mut kept = Vec::new();
    for ((k, v), unchanged) in std::mem::take(fields).into_iter().zip(unchanged) {
        if unchanged {
            kept.push((k, v));
        } else {
            fields.insert(k, v);
        }
    }
    Kept(kept)
}

/// Puts the kept sections back into the decoded object, in the order the type writes its fields.
pub(crate) fn restore(kept: Kept, decoded: &mut Value) {
    let Value::Object(fields) = decoded else { return };
    if kept.0.is_empty() {
        return;
    }
    let mut appended = false;
    for (k, v) in kept.0 {
        // A section the type always writes (a pod's `metadata`) is in the decoded object as its default: replaced in
        // place. One it writes only when set was left out: appended, then ordered below.
        appended |= fields.insert(k, v).is_none();
    }
    if appended {
        *fields = in_type_order(std::mem::take(fields));
    }
}

/// `apiVersion` and `kind` first, then the other fields by name: the order k8s-openapi serializes a kind in.
fn in_type_order(fields: Map<String, Value>) -> Map<String, Value> {
    let rank = |k: &str| match k {
        "apiVersion" => 0,
        "kind" => 1,
        _ => 2,
    };
    let mut entries: Vec<(String, Value)> = fields.into_iter().collect();
    entries.sort_by(|(a, _), (b, _)| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
    entries.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Binding, ConfigMap, Pod};
    use serde_json::json;

    use super::*;
    use crate::codec::Typed;

    fn stored_pod() -> Value {
        let codec = Typed::<Pod>::new();
        codec
            .decode(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}, "resourceVersion": "7"},
                "spec": {"containers": [{"name": "c", "image": "game:v1"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .unwrap()
            .object
    }

    /// Decodes `desired` with the unchanged sections kept out, as the registry does.
    fn decode_keeping(codec: &dyn Codec, current: &Value, mut desired: Value) -> (Value, usize) {
        let kept = take(codec, current, &mut desired);
        let n = kept.0.len();
        let mut decoded = codec.decode(desired).unwrap().object;
        restore(kept, &mut decoded);
        (decoded, n)
    }

    #[test]
    fn a_write_decodes_as_the_full_round_trip() {
        let codec = Typed::<Pod>::new();
        let current = stored_pod();
        let writes: [fn(&mut Value); 5] = [
            // a status write: metadata and spec kept
            |p: &mut Value| p["status"]["phase"] = json!("Succeeded"),
            // an image patch: metadata and status kept
            |p: &mut Value| p["spec"]["containers"][0]["image"] = json!("game:v2"),
            // a label patch: spec and status kept
            |p: &mut Value| p["metadata"]["labels"]["a"] = json!("c"),
            // the status removed: metadata and spec kept, status absent
            |p: &mut Value| {
                p.as_object_mut().unwrap().remove("status"); // the last key
            },
            // nothing changed
            |_: &mut Value| {},
        ];
        for (i, write) in writes.into_iter().enumerate() {
            let mut desired = current.clone();
            write(&mut desired);
            let full = codec.decode(desired.clone()).unwrap().object;
            let (partial, kept) = decode_keeping(&codec, &current, desired);
            assert!(kept >= 2, "write {i}: {kept} sections kept");
            assert_eq!(serde_json::to_string(&partial).unwrap(), serde_json::to_string(&full).unwrap(), "write {i}");
        }
    }

    #[test]
    fn a_changed_section_still_goes_through_the_type() {
        let codec = Typed::<Pod>::new();
        let current = stored_pod();
        let mut desired = current.clone();
        desired["spec"]["bogus"] = json!(1);
        let kept = take(&codec, &current, &mut desired);
        let d = codec.decode(desired).unwrap();
        assert_eq!(d.unknown_fields, vec!["spec.bogus"]);
        let mut object = d.object;
        restore(kept, &mut object);
        assert!(object["spec"].get("bogus").is_none());
        assert_eq!(object["status"]["phase"], "Running");

        let mut desired = current.clone();
        desired["status"]["phase"] = json!(3);
        take(&codec, &current, &mut desired);
        assert!(codec.decode(desired).is_err(), "a wrong type in the changed section is rejected");
    }

    #[test]
    fn sections_appended_back_follow_the_type_order() {
        let codec = Typed::<ConfigMap>::new();
        let current = codec
            .decode(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                "binaryData": {"b": "AA=="}, "data": {"k": "v"}, "immutable": false}))
            .unwrap()
            .object;
        let mut desired = current.clone();
        desired["data"]["k"] = json!("w");
        let full = codec.decode(desired.clone()).unwrap().object;
        let (partial, kept) = decode_keeping(&codec, &current, desired);
        assert_eq!(kept, 3, "binaryData, immutable and metadata kept");
        assert_eq!(serde_json::to_string(&partial).unwrap(), serde_json::to_string(&full).unwrap());
    }

    /// A codec whose type needs a field it would lose.
    struct Strict;
    impl Codec for Strict {
        fn decode(&self, v: Value) -> Result<crate::codec::Decoded, String> {
            Typed::<Binding>::new().decode(v)
        }
        fn sections_optional(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_kind_with_a_required_field_keeps_the_whole_object_in_the_round_trip() {
        let current = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
            "target": {"kind": "Node", "name": "n1"}});
        let mut desired = current.clone();
        assert_eq!(take(&Strict, &current, &mut desired).0.len(), 0);
        assert_eq!(desired, current);
        assert_eq!(take(&Typed::<Binding>::new(), &current, &mut desired).0.len(), 2, "metadata and target");
    }
}
