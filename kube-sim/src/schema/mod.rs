//! Structural schemas: the one representation every schema-driven behaviour works on.
//!
//! Custom resources get theirs from the CRD's `openAPIV3Schema`; built-in kinds get theirs from
//! the k8s-openapi schemars output plus the list/map merge metadata of [`builtin_lists`]. Pruning,
//! defaulting and validation (for custom resources) and strategic merge / server-side apply list
//! semantics (for everything) walk these nodes.

pub(crate) mod builtin;
mod builtin_lists;
pub(crate) mod defaulting;
pub mod pruning;
pub(crate) mod transition;
pub mod validate;

use std::collections::{BTreeMap, HashMap};

use regex::Regex;
use serde_json::{Map, Value};

/// Merge metadata of the generated table (static keys).
#[derive(Clone, Copy, Debug)]
pub(crate) enum MergeStrategy {
    AtomicList,
    Set,
    Map(&'static [&'static str]),
    AtomicMap,
}

/// How a list merges in strategic merge patch and server-side apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

pub(crate) type NodeId = usize;

#[derive(Clone, Debug, Default)]
pub(crate) struct Node {
    pub type_: Option<String>,
    pub format: Option<String>,
    pub properties: BTreeMap<String, NodeId>,
    /// `additionalProperties`: a map's value schema.
    pub additional: Option<NodeId>,
    /// `additionalProperties: true` without a schema (keeps any field).
    pub additional_any: bool,
    pub items: Option<NodeId>,
    pub required: Vec<String>,
    pub enum_values: Vec<Value>,
    pub default: Option<Value>,
    pub nullable: bool,
    pub preserve_unknown: bool,
    pub embedded_resource: bool,
    pub int_or_string: bool,
    pub list_type: Option<ListType>,
    pub map_atomic: bool,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: bool,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub pattern: Option<(String, Option<Regex>)>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub unique_items: bool,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub all_of: Vec<NodeId>,
    pub any_of: Vec<NodeId>,
    pub one_of: Vec<NodeId>,
    pub not: Option<NodeId>,
    /// Recognised `self == oldSelf` rules of `x-kubernetes-validations` (see [`transition`]).
    pub transition_rules: Vec<transition::TransitionRule>,
    /// Recognised `has(self.f)` / `!has(self.f)` rules (see [`transition`]).
    pub presence_rules: Vec<transition::PresenceRule>,
    /// The node declares `x-kubernetes-validations` (recognised or not).
    pub has_cel_rules: bool,
}

/// An arena of schema nodes; cycles (JSONSchemaProps) are fine because nodes refer by index.
#[derive(Clone, Debug, Default)]
pub(crate) struct SchemaSet {
    nodes: Vec<Node>,
    /// Some node declares `x-kubernetes-validations` (the CRD then has a CEL validator).
    pub has_cel_rules: bool,
}

/// A schema and its root (public for the CRD schema checks of `common/tests/examples.rs`, with
/// [`from_crd_schema`], [`Cursor::root`], [`pruning::prune_object`] and [`validate::validate_object`]).
#[derive(Clone, Debug)]
pub struct Schema {
    pub(crate) set: std::sync::Arc<SchemaSet>,
    pub(crate) root: NodeId,
}

impl SchemaSet {
    pub(crate) fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    fn alloc(&mut self) -> NodeId {
        self.nodes.push(Node::default());
        self.nodes.len() - 1
    }

    /// Property lookup that also follows `additionalProperties`.
    pub(crate) fn child(&self, id: NodeId, field: &str) -> Option<NodeId> {
        let n = self.node(id);
        n.properties.get(field).copied().or(n.additional)
    }
}

/// Builds nodes from JSON schema documents, resolving `$ref`s into a definitions map.
pub(crate) struct Builder<'a> {
    pub set: SchemaSet,
    defs: &'a Map<String, Value>,
    built: HashMap<String, NodeId>,
}

fn list_type_of(v: &Value) -> Option<ListType> {
    match v.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => Some(ListType::Set),
        Some("map") => Some(ListType::Map(
            v.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
                .unwrap_or_default(),
        )),
        Some("atomic") => Some(ListType::Atomic),
        _ => match (
            v.get("x-kubernetes-patch-strategy").and_then(Value::as_str),
            v.get("x-kubernetes-patch-merge-key").and_then(Value::as_str),
        ) {
            (Some(s), Some(k)) if s.split(',').any(|p| p == "merge") => Some(ListType::Map(vec![k.to_string()])),
            (Some(s), None) if s.split(',').any(|p| p == "merge") => Some(ListType::Set),
            _ => None,
        },
    }
}

impl<'a> Builder<'a> {
    pub(crate) fn new(defs: &'a Map<String, Value>) -> Self {
        Self { set: SchemaSet::default(), defs, built: HashMap::new() }
    }

    fn resolve_ref(&mut self, r: &str) -> NodeId {
        let name = r.rsplit('/').next().unwrap_or(r).to_string();
        if let Some(id) = self.built.get(&name) {
            return *id;
        }
        let id = self.set.alloc();
        self.built.insert(name.clone(), id);
        let def = self.defs.get(&name).cloned().unwrap_or(Value::Object(Map::new()));
        self.fill(id, &def);
        id
    }

    /// Builds (or reuses) the node for a schema value. A `$ref` with list/map merge metadata as
    /// siblings gets its own copy of the referenced node, so the shared definition stays intact.
    pub(crate) fn build(&mut self, v: &Value) -> NodeId {
        if let Some(r) = v.get("$ref").and_then(Value::as_str) {
            let target = self.resolve_ref(r);
            let lt = list_type_of(v);
            let map_atomic = v.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
            if lt.is_none() && !map_atomic {
                return target;
            }
            let mut copy = self.set.node(target).clone();
            if lt.is_some() {
                copy.list_type = lt;
            }
            copy.map_atomic |= map_atomic;
            self.set.nodes.push(copy);
            return self.set.nodes.len() - 1;
        }
        let id = self.set.alloc();
        self.fill(id, v);
        id
    }

    fn fill(&mut self, id: NodeId, v: &Value) {
        let mut n = Node::default();
        let get_u = |k: &str| v.get(k).and_then(Value::as_u64);
        let get_b = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
        n.type_ = match v.get("type") {
            Some(Value::String(s)) => Some(s.clone()),
            // schemars emits ["string","null"] for nullable fields of hand-written types
            Some(Value::Array(types)) => {
                if types.iter().any(|t| t == "null") {
                    n.nullable = true;
                }
                types.iter().filter_map(Value::as_str).find(|t| *t != "null").map(str::to_string)
            }
            _ => None,
        };
        n.format = v.get("format").and_then(Value::as_str).map(str::to_string);
        n.required = v
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        n.enum_values = v.get("enum").and_then(Value::as_array).cloned().unwrap_or_default();
        n.default = v.get("default").cloned();
        n.nullable |= get_b("nullable");
        n.preserve_unknown = get_b("x-kubernetes-preserve-unknown-fields");
        n.embedded_resource = get_b("x-kubernetes-embedded-resource");
        n.int_or_string = get_b("x-kubernetes-int-or-string");
        n.map_atomic = v.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
        n.list_type = list_type_of(v);
        n.minimum = v.get("minimum").and_then(Value::as_f64);
        n.maximum = v.get("maximum").and_then(Value::as_f64);
        n.exclusive_minimum = get_b("exclusiveMinimum");
        n.exclusive_maximum = get_b("exclusiveMaximum");
        n.multiple_of = v.get("multipleOf").and_then(Value::as_f64);
        n.min_length = get_u("minLength");
        n.max_length = get_u("maxLength");
        n.pattern = v.get("pattern").and_then(Value::as_str).map(|p| (p.to_string(), Regex::new(p).ok()));
        n.min_items = get_u("minItems");
        n.max_items = get_u("maxItems");
        n.unique_items = get_b("uniqueItems");
        n.min_properties = get_u("minProperties");
        n.max_properties = get_u("maxProperties");
        n.additional_any = matches!(v.get("additionalProperties"), Some(Value::Bool(true)));
        let rules = transition::parse_rules(v);
        (n.transition_rules, n.presence_rules, n.has_cel_rules) = (rules.transition, rules.presence, rules.any);
        self.set.has_cel_rules |= n.has_cel_rules;
        // Store the node before recursing so that self-references resolve to it.
        self.set.nodes[id] = n;
        let mut props = BTreeMap::new();
        if let Some(p) = v.get("properties").and_then(Value::as_object) {
            for (k, pv) in p {
                props.insert(k.clone(), self.build(pv));
            }
        }
        let additional = match v.get("additionalProperties") {
            Some(a @ Value::Object(_)) => Some(self.build(a)),
            _ => None,
        };
        let items = match v.get("items") {
            Some(Value::Array(a)) => a.first().map(|i| self.build(i)),
            Some(i @ Value::Object(_)) => Some(self.build(i)),
            _ => None,
        };
        let mut junctor = |key: &str| -> Vec<NodeId> {
            v.get(key).and_then(Value::as_array).map(|a| a.iter().map(|s| self.build(s)).collect()).unwrap_or_default()
        };
        let all_of = junctor("allOf");
        let any_of = junctor("anyOf");
        let one_of = junctor("oneOf");
        let not = v.get("not").map(|s| self.build(s));
        let n = &mut self.set.nodes[id];
        n.properties = props;
        n.additional = additional;
        n.items = items;
        n.all_of = all_of;
        n.any_of = any_of;
        n.one_of = one_of;
        n.not = not;
    }

    /// The node of a named definition (built on first use).
    pub(crate) fn definition(&mut self, name: &str) -> NodeId {
        self.resolve_ref(name)
    }

    pub(crate) fn finish(self, root: NodeId) -> Schema {
        Schema { set: std::sync::Arc::new(self.set), root }
    }

    pub(crate) fn into_set(self) -> SchemaSet {
        self.set
    }
}

/// Builds the structural schema of a CRD version from its `openAPIV3Schema`.
pub fn from_crd_schema(schema: &Value) -> Schema {
    let defs = Map::new();
    let mut b = Builder::new(&defs);
    let root = b.build(schema);
    b.finish(root)
}

/// A schema-walking cursor for code that walks objects and schemas in step.
#[derive(Clone, Copy)]
pub struct Cursor<'a> {
    pub(crate) schema: &'a Schema,
    pub(crate) id: NodeId,
}

impl<'a> Cursor<'a> {
    pub fn root(schema: &'a Schema) -> Self {
        Self { schema, id: schema.root }
    }
    pub(crate) fn node(&self) -> &'a Node {
        self.schema.set.node(self.id)
    }
    pub(crate) fn field(&self, name: &str) -> Option<Cursor<'a>> {
        self.schema.set.child(self.id, name).map(|id| Cursor { schema: self.schema, id })
    }
    pub(crate) fn items(&self) -> Option<Cursor<'a>> {
        self.node().items.map(|id| Cursor { schema: self.schema, id })
    }
    pub(crate) fn list_type(&self) -> ListType {
        self.node().list_type.clone().unwrap_or(ListType::Atomic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_schema_builds_list_types() {
        let s = from_crd_schema(&json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                              "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
                }}
            }
        }));
        let c = Cursor::root(&s);
        let spec = c.field("spec").unwrap();
        assert_eq!(spec.field("ports").unwrap().list_type(), ListType::Map(vec!["name".into()]));
        assert_eq!(spec.field("tags").unwrap().list_type(), ListType::Set);
    }
}
