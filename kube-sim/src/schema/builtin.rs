//! Schemas of the built-in kinds, derived from the k8s-openapi types through schemars and
//! completed with the merge metadata (`x-kubernetes-list-type`, `x-kubernetes-patch-merge-key`,
//! ...) and `x-kubernetes-group-version-kind` that the real apiserver publishes and kubectl reads.

use std::collections::HashMap;
use std::sync::Arc;

use schemars::SchemaGenerator;
use serde_json::{Map, Value, json};

use super::builtin_lists::BUILTIN_LIST_STRATEGIES;
use super::{Builder, MergeStrategy, NodeId, Schema, SchemaSet};

/// The definitions of every registered built-in type (keyed by OpenAPI name) and their nodes.
pub(crate) struct BuiltinSchemas {
    /// JSON schema definitions, `$ref`s pointing at `#/$defs/<name>`.
    pub defs: Map<String, Value>,
    set: Arc<SchemaSet>,
    roots: HashMap<String, NodeId>,
}

/// One group/version/kind a definition is served as.
pub(crate) struct Gvk {
    pub definition: String,
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl BuiltinSchemas {
    /// `register` adds the types to the generator; `gvks` tags the top-level kinds.
    pub(crate) fn build(register: &[fn(&mut SchemaGenerator)], gvks: &[Gvk]) -> Self {
        let mut generator = SchemaGenerator::default();
        for r in register {
            r(&mut generator);
        }
        let mut defs = generator.take_definitions(true);
        for (def, field, strategy) in BUILTIN_LIST_STRATEGIES {
            let Some(prop) = defs.get_mut(*def).and_then(|d| d.get_mut("properties")).and_then(|p| p.get_mut(*field))
            else {
                continue;
            };
            let Some(prop) = prop.as_object_mut() else { continue };
            match strategy {
                MergeStrategy::AtomicList => {
                    prop.insert("x-kubernetes-list-type".into(), json!("atomic"));
                }
                MergeStrategy::Set => {
                    prop.insert("x-kubernetes-list-type".into(), json!("set"));
                    prop.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
                }
                MergeStrategy::Map(keys) => {
                    prop.insert("x-kubernetes-list-type".into(), json!("map"));
                    prop.insert("x-kubernetes-list-map-keys".into(), json!(keys));
                    prop.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
                    if let Some(k) = keys.first() {
                        prop.insert("x-kubernetes-patch-merge-key".into(), json!(k));
                    }
                }
                MergeStrategy::AtomicMap => {
                    prop.insert("x-kubernetes-map-type".into(), json!("atomic"));
                }
            }
        }
        // Free-form values (RawExtension, apiextensions JSON, JSONSchemaPropsOrArray/OrBool,
        // FieldsV1) have no properties: structural pruning of applied configurations must keep
        // whatever they hold, as decoding into the Go types does.
        for def in defs.values_mut() {
            mark_free_form(def);
        }
        let mut by_def: HashMap<&str, Vec<Value>> = HashMap::new();
        for g in gvks {
            by_def
                .entry(g.definition.as_str())
                .or_default()
                .push(json!({"group": g.group, "version": g.version, "kind": g.kind}));
        }
        for (def, list) in by_def {
            if let Some(d) = defs.get_mut(def).and_then(Value::as_object_mut) {
                d.insert("x-kubernetes-group-version-kind".into(), Value::Array(list));
            }
        }
        let mut builder = Builder::new(&defs);
        let mut roots = HashMap::new();
        let names: Vec<String> = defs.keys().cloned().collect();
        for name in names {
            let id = builder.definition(&name);
            roots.insert(name, id);
        }
        let set = Arc::new(builder.into_set());
        Self { defs, set, roots }
    }

    pub(crate) fn schema(&self, definition: &str) -> Option<Schema> {
        self.roots.get(definition).map(|root| Schema { set: self.set.clone(), root: *root })
    }
}

/// Marks schema nodes without any structure (no properties, items or additionalProperties,
/// possibly with `oneOf`/`anyOf` alternatives) as preserving unknown fields.
fn mark_free_form(v: &mut Value) {
    let Value::Object(m) = v else { return };
    if m.contains_key("$ref") {
        return;
    }
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(props)) = m.get_mut(key) {
            for p in props.values_mut() {
                mark_free_form(p);
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child @ Value::Object(_)) = m.get_mut(key) {
            mark_free_form(child);
        }
    }
    let structured = m.contains_key("properties") || m.contains_key("items") || m.contains_key("additionalProperties");
    let object_like = match m.get("type") {
        None => true,
        Some(Value::String(t)) => t == "object",
        Some(_) => false,
    };
    let scalar_like = m.contains_key("x-kubernetes-int-or-string") || m.contains_key("format") && !object_like;
    if !structured && object_like && !scalar_like {
        m.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Cursor, ListType};

    #[test]
    fn pod_schema_carries_merge_keys() {
        let b = BuiltinSchemas::build(
            &[|g| {
                g.subschema_for::<k8s_openapi::api::core::v1::Pod>();
            }],
            &[Gvk {
                definition: "io.k8s.api.core.v1.Pod".into(),
                group: "".into(),
                version: "v1".into(),
                kind: "Pod".into(),
            }],
        );
        let s = b.schema("io.k8s.api.core.v1.Pod").unwrap();
        let c = Cursor::root(&s);
        let containers = c.field("spec").unwrap().field("containers").unwrap();
        assert_eq!(containers.list_type(), ListType::Map(vec!["name".into()]));
        let ports = containers.items().unwrap().field("ports").unwrap();
        assert_eq!(ports.list_type(), ListType::Map(vec!["containerPort".into()]));
        let conditions = c.field("status").unwrap().field("conditions").unwrap();
        assert_eq!(conditions.list_type(), ListType::Map(vec!["type".into()]));
        let finalizers = c.field("metadata").unwrap().field("finalizers").unwrap();
        assert_eq!(finalizers.list_type(), ListType::Set);
        assert_eq!(b.defs["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
    }

    #[test]
    fn free_form_values_keep_their_content_when_pruned() {
        let b = BuiltinSchemas::build(
            &[|g| {
                g.subschema_for::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>();
                g.subschema_for::<k8s_openapi::api::apps::v1::ControllerRevision>();
            }],
            &[],
        );
        let crd =
            b.schema("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition").unwrap();
        let mut obj = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "x"},
            "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "a": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "string"}}}},
                "m": {"type": "object", "additionalProperties": {"type": "string"}},
                "d": {"type": "object", "default": {"x": 1}}}}}}]}});
        let before = obj.clone();
        let unknown = crate::schema::pruning::prune_object(crate::schema::Cursor::root(&crd), &mut obj);
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(obj, before);
        let cr = b.schema("io.k8s.api.apps.v1.ControllerRevision").unwrap();
        let mut rev =
            json!({"metadata": {"name": "r"}, "revision": 1, "data": {"spec": {"template": {"anything": true}}}});
        assert!(crate::schema::pruning::prune_object(crate::schema::Cursor::root(&cr), &mut rev).is_empty());
    }
}
