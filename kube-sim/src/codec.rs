//! Decoding of built-in kinds through their k8s-openapi types.
//!
//! The real apiserver decodes a request body into a Go struct and encodes it back; fields the
//! struct does not have disappear (or are reported under strict field validation) and values of
//! the wrong type are rejected. Doing the same round trip through the k8s-openapi types gives
//! kube-sim that behaviour for every built-in kind without a hand-written schema walker.

use std::marker::PhantomData;
use std::sync::OnceLock;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Result of a decode: the normalized object and the paths of fields the type does not know.
pub(crate) struct Decoded {
    pub object: Value,
    pub unknown_fields: Vec<String>,
}

pub(crate) trait Codec: Send + Sync {
    fn decode(&self, v: Value) -> Result<Decoded, String>;

    /// Whether the type decodes with any of its top-level fields left out (an empty object decodes): then a write
    /// may keep the sections it did not change out of the round trip (registry/unchanged.rs). A type that required a
    /// field would fail the decode of what is left.
    fn sections_optional(&self) -> bool;
}

pub(crate) struct Typed<T> {
    sections_optional: OnceLock<bool>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Typed<T> {
    pub(crate) fn new() -> Self {
        Self { sections_optional: OnceLock::new(), _type: PhantomData }
    }
}

impl<T> Default for Typed<T> {
    fn default() -> Self {
        Self::new()
    }
}

fn render_path(p: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match p {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", render_path(parent)),
        Path::Map { parent, key } => {
            let parent = render_path(parent);
            if parent.is_empty() { key.clone() } else { format!("{parent}.{key}") }
        }
        Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => render_path(parent),
    }
}

impl<T: DeserializeOwned + Serialize> Codec for Typed<T> {
    fn decode(&self, v: Value) -> Result<Decoded, String> {
        let mut unknown = Vec::new();
        let typed: T =
            serde_ignored::deserialize(v, |path| unknown.push(render_path(&path))).map_err(|e| e.to_string())?;
        let object = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
        Ok(Decoded { object, unknown_fields: unknown })
    }

    fn sections_optional(&self) -> bool {
        *self.sections_optional.get_or_init(|| serde_json::from_value::<T>(Value::Object(Default::default())).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_dropped_and_reported_with_paths() {
        let c = Typed::<k8s_openapi::api::core::v1::Pod>::new();
        let d = c
            .decode(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "bogus": 1},
                "spec": {"containers": [{"name": "c", "image": "nginx", "imagePolicy": "x"}], "foo": {"bar": 1}}
            }))
            .unwrap();
        assert_eq!(d.unknown_fields, vec!["metadata.bogus", "spec.containers[0].imagePolicy", "spec.foo"]);
        assert!(d.object["spec"].get("foo").is_none());
        assert_eq!(d.object["spec"]["containers"][0]["image"], "nginx");
    }

    /// k8s-openapi decodes a missing field as its default, required ones too (a Binding's `target`): every kind it
    /// has decodes from an empty object.
    #[test]
    fn kinds_that_decode_from_an_empty_object_may_keep_sections_out() {
        assert!(Typed::<k8s_openapi::api::core::v1::Pod>::new().sections_optional());
        assert!(Typed::<k8s_openapi::api::core::v1::ConfigMap>::new().sections_optional());
        assert!(Typed::<k8s_openapi::api::core::v1::Binding>::new().sections_optional());
    }

    #[test]
    fn wrong_types_are_rejected() {
        let c = Typed::<k8s_openapi::api::core::v1::ConfigMap>::new();
        assert!(
            c.decode(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": 1}}))
                .is_err()
        );
    }
}
