//! Pods as the kubelet simulator reads them: decoded without `metadata.managedFields`.
//!
//! The simulator decodes every pod change it watches and the answer to each of its status patches — about fifteen
//! pods per pod of a rolling update — and nothing in it reads `managedFields`, the largest part of a pod's JSON,
//! whose entries k8s-openapi decodes into trees of JSON values (and drops again). In a `perf` profile of the
//! 5,000-pod `fleet-bench` roll, decoding pods was about a tenth of the benchmark process, nearly half of it those
//! entries. [`LeanPod`] decodes the same JSON with that one key skipped unread; everything else is k8s-openapi's own
//! decoding (`tests::a_lean_pod_is_the_pod_less_its_managed_fields`).

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, forward_to_deserialize_any};

/// A [`Pod`] decoded without `metadata.managedFields` (always `None`).
#[derive(Clone, Debug, Default)]
pub struct LeanPod(pub Pod);

impl<'de> Deserialize<'de> for LeanPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Repr {
            #[serde(default, deserialize_with = "meta_without_managed_fields")]
            metadata: ObjectMeta,
            spec: Option<PodSpec>,
            status: Option<PodStatus>,
        }
        let Repr { metadata, spec, status } = Repr::deserialize(d)?;
        Ok(Self(Pod { metadata, spec, status }))
    }
}

impl From<LeanPod> for Pod {
    fn from(lean: LeanPod) -> Self {
        lean.0
    }
}

impl kube::Resource for LeanPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// The key skipped.
const SKIPPED: &str = "managedFields";

/// `ObjectMeta`'s own decoding, with the `managedFields` key passed over unread.
fn meta_without_managed_fields<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    ObjectMeta::deserialize(SkipKey(d))
}

/// A deserializer that hands the visitor of a map (or struct) a map without the [`SKIPPED`] key.
struct SkipKey<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for SkipKey<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(SkipVisitor(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, SkipVisitor(visitor))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(SkipVisitor(visitor))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct enum identifier ignored_any
    }
}

struct SkipVisitor<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for SkipVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(SkipMap(map))
    }
}

struct SkipMap<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for SkipMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(key) = self.0.next_key::<Key<'de>>()? else { return Ok(None) };
            if key.as_str() == SKIPPED {
                self.0.next_value::<IgnoredAny>()?;
                continue;
            }
            return match key {
                Key::Borrowed(k) => seed.deserialize(de::value::BorrowedStrDeserializer::new(k)),
                Key::Owned(k) => seed.deserialize(de::value::StringDeserializer::new(k)),
            }
            .map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// A map key, borrowed from the input when the decoder can (no copy for plain keys).
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(k) => k,
            Key::Owned(k) => k,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, k: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(k))
            }
            fn visit_str<E: de::Error>(self, k: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(k.to_owned()))
            }
            fn visit_string<E: de::Error>(self, k: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(k))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "game-0", "namespace": "default", "uid": "u-1", "resourceVersion": "42",
                "generateName": "game-", "generation": 3,
                "creationTimestamp": "2026-11-24T10:00:00Z", "deletionTimestamp": "2026-11-24T10:05:00Z",
                "deletionGracePeriodSeconds": 30, "finalizers": ["f"],
                "labels": {"app": "game"}, "annotations": {"kube-sim.kourse.dev/http-delay": "100ms"},
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-11-24T10:00:01Z", "fieldsType": "FieldsV1", "subresource": "status",
                    "fieldsV1": {"f:status": {"f:conditions": {".": {}, "k:{\"type\":\"Ready\"}": {}}}}}],
                "ownerReferences": [{"apiVersion": "tkex.tencent.com/v1alpha1", "kind": "GameDeployment",
                    "name": "game", "uid": "gd-1", "controller": true}]
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "game", "image": "game:v1"}],
                "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]},
            "status": {"phase": "Running", "podIP": "127.1.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-24T10:00:02Z"}],
                "containerStatuses": [{"name": "game", "image": "game:v1", "imageID": "sha256:1", "ready": true,
                    "restartCount": 2, "started": true, "state": {"running": {"startedAt": "2026-11-24T10:00:02Z"}}}]}
        })
    }

    #[test]
    fn a_lean_pod_is_the_pod_less_its_managed_fields() {
        let text = pod_json().to_string();
        let mut full: Pod = serde_json::from_str(&text).unwrap();
        assert!(full.metadata.managed_fields.is_some(), "the fixture carries managedFields");
        full.metadata.managed_fields = None;
        // From text (watch events, answers: keys borrowed) and from a value (keys owned).
        assert_eq!(serde_json::from_str::<LeanPod>(&text).unwrap().0, full);
        assert_eq!(serde_json::from_value::<LeanPod>(pod_json()).unwrap().0, full);
        let event: kube::api::WatchEvent<LeanPod> =
            serde_json::from_value(json!({"type": "MODIFIED", "object": pod_json()})).unwrap();
        let kube::api::WatchEvent::Modified(pod) = event else { panic!("not a modification") };
        assert_eq!(Pod::from(pod), full);
    }

    #[test]
    fn a_lean_pod_still_rejects_what_the_pod_rejects() {
        for broken in [
            json!({"metadata": {"name": 5}}),
            json!({"metadata": "game-0"}),
            json!({"metadata": {"managedFields": [], "labels": ["not", "a", "map"]}}),
            json!({"metadata": {"name": "game-0"}, "spec": {"containers": "none"}}),
        ] {
            assert!(serde_json::from_value::<Pod>(broken.clone()).is_err(), "{broken}");
            assert!(serde_json::from_value::<LeanPod>(broken.clone()).is_err(), "{broken}");
        }
        let minimal = json!({"metadata": {"managedFields": "whatever is there is not read"}});
        assert_eq!(serde_json::from_value::<LeanPod>(minimal).unwrap().0, Pod::default());
    }
}
