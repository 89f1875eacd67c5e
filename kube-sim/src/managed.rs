//! Field ownership (`metadata.managedFields`) and server-side apply.
//!
//! This follows structured-merge-diff's model at the level clients observe: every write records
//! which fields its manager set (`Update` entries from diffs, `Apply` entries from the applied
//! configuration), an apply merges the configuration into the live object by the schema's list
//! semantics, removes fields the manager applied before but no longer does (unless someone else
//! owns them), and reports conflicts with other managers unless forced.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::schema::{Cursor, ListType};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum PathElement {
    Field(String),
    /// A list-map item, identified by its key fields (canonical JSON object).
    Key(String),
    /// A set item, identified by its JSON value.
    Value(String),
}

impl PathElement {
    fn encode(&self) -> String {
        match self {
            PathElement::Field(f) => format!("f:{f}"),
            PathElement::Key(k) => format!("k:{k}"),
            PathElement::Value(v) => format!("v:{v}"),
        }
    }

    fn decode(s: &str) -> Option<Self> {
        let (prefix, rest) = s.split_at_checked(2)?;
        match prefix {
            "f:" => Some(PathElement::Field(rest.to_string())),
            "k:" => Some(PathElement::Key(rest.to_string())),
            "v:" => Some(PathElement::Value(rest.to_string())),
            _ => None,
        }
    }
}

pub(crate) type FieldPath = Vec<PathElement>;
pub(crate) type FieldSet = BTreeSet<FieldPath>;

/// Renders a path like the apiserver's conflict messages (`.spec.containers[name="c"].image`).
pub(crate) fn render_path(p: &FieldPath) -> String {
    let mut s = String::new();
    for e in p {
        match e {
            PathElement::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            PathElement::Key(k) => {
                let parsed: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let parts: Vec<String> = parsed.iter().map(|(k, v)| format!("{k}={v}")).collect();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            PathElement::Value(v) => s.push_str(&format!("[={v}]")),
        }
    }
    s
}

/// `metadata` fields the field manager never tracks.
const META_IGNORED: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
];

/// Paths the field manager never tracks (identity and system fields).
fn ignored_root(path: &[PathElement]) -> bool {
    match path {
        [PathElement::Field(f)] if f == "apiVersion" || f == "kind" => true,
        [PathElement::Field(m), PathElement::Field(f), ..] if m == "metadata" && META_IGNORED.contains(&f.as_str()) => {
            true
        }
        _ => false,
    }
}

fn key_of(item: &Value, keys: &[String]) -> String {
    let mut m = BTreeMap::new();
    for k in keys {
        if let Some(v) = item.get(k) {
            m.insert(k.clone(), v.clone());
        }
    }
    serde_json::to_string(&m).unwrap_or_default()
}

static OBJECT_META: std::sync::LazyLock<Option<crate::schema::Schema>> = std::sync::LazyLock::new(|| {
    crate::resources::BUILTINS.schemas.schema("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
});

/// The schema of a top-level field: `metadata` is always `ObjectMeta`, whatever a CRD says.
fn root_child<'a>(c: Option<Cursor<'a>>, key: &str) -> Option<Cursor<'a>> {
    if key == "metadata"
        && let Some(s) = OBJECT_META.as_ref()
    {
        return Some(Cursor::root(s));
    }
    c.and_then(|c| c.field(key))
}

/// The set of fields a value sets (structured-merge-diff's `ToFieldSet`; maps are members
/// themselves, as in the sets `Update` operations record).
pub(crate) fn field_set(value: &Value, schema: Option<Cursor<'_>>) -> FieldSet {
    let mut set = FieldSet::new();
    if let Value::Object(map) = value {
        for (k, v) in map {
            field_set_entry(k, v, schema, &mut set);
        }
    } else {
        walk(value, schema, &mut Vec::new(), &mut set);
    }
    set.retain(|p| !ignored_root(p) && !p.is_empty());
    set
}

/// The fields of one top-level entry of an object.
fn field_set_entry(k: &str, v: &Value, schema: Option<Cursor<'_>>, set: &mut FieldSet) {
    let mut path = vec![PathElement::Field(k.to_string())];
    let cc = root_child(schema, k);
    walk(v, cc, &mut path, set);
    let declared = k == "metadata" || schema.is_some_and(|c| c.node().properties.contains_key(k));
    if v.is_null() || v.as_object().is_some_and(Map::is_empty) || !declared {
        set.insert(path);
    }
}

fn walk(v: &Value, c: Option<Cursor<'_>>, path: &mut FieldPath, set: &mut FieldSet) {
    match v {
        Value::Object(map) => {
            if c.is_some_and(|c| c.node().map_atomic) {
                set.insert(path.clone());
                return;
            }
            let is_map = c.is_some_and(|c| c.node().additional.is_some() && c.node().properties.is_empty());
            if is_map && !map.is_empty() {
                set.insert(path.clone());
            }
            for (k, val) in map {
                let declared = c.is_some_and(|c| c.node().properties.contains_key(k));
                let cc = c.and_then(|c| c.field(k));
                path.push(PathElement::Field(k.clone()));
                walk(val, cc, path, set);
                let empty_map = val.as_object().is_some_and(Map::is_empty);
                if val.is_null() || empty_map || !declared {
                    set.insert(path.clone());
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            let lt = c.map(|c| c.list_type()).unwrap_or(ListType::Atomic);
            let ic = c.and_then(|c| c.items());
            match lt {
                ListType::Atomic => {
                    set.insert(path.clone());
                }
                ListType::Set => {
                    for it in items {
                        path.push(PathElement::Value(serde_json::to_string(it).unwrap_or_default()));
                        set.insert(path.clone());
                        path.pop();
                    }
                }
                ListType::Map(keys) => {
                    for it in items {
                        path.push(PathElement::Key(key_of(it, &keys)));
                        walk(it, ic, path, set);
                        set.insert(path.clone());
                        path.pop();
                    }
                }
            }
        }
        _ => {
            set.insert(path.clone());
        }
    }
}

/// The value at a field path, if present.
pub(crate) fn value_at<'a>(v: &'a Value, path: &[PathElement]) -> Option<&'a Value> {
    let mut cur = v;
    for e in path {
        cur = match e {
            PathElement::Field(f) => cur.get(f)?,
            PathElement::Key(k) => {
                let want: Map<String, Value> = serde_json::from_str(k).ok()?;
                cur.as_array()?.iter().find(|it| want.iter().all(|(wk, wv)| it.get(wk) == Some(wv)))?
            }
            PathElement::Value(j) => {
                let want: Value = serde_json::from_str(j).ok()?;
                cur.as_array()?.iter().find(|it| **it == want)?
            }
        };
    }
    Some(cur)
}

fn remove_at(v: &mut Value, path: &[PathElement]) {
    let Some((last, parent_path)) = path.split_last() else { return };
    let mut cur = v;
    for e in parent_path {
        let next = match e {
            PathElement::Field(f) => cur.get_mut(f),
            PathElement::Key(k) => {
                let want: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                cur.as_array_mut()
                    .and_then(|a| a.iter_mut().find(|it| want.iter().all(|(wk, wv)| it.get(wk) == Some(wv))))
            }
            PathElement::Value(j) => {
                let want: Value = serde_json::from_str(j).unwrap_or(Value::Null);
                cur.as_array_mut().and_then(|a| a.iter_mut().find(|it| **it == want))
            }
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        PathElement::Field(f) => {
            if let Value::Object(m) = cur {
                m.remove(f);
            }
        }
        PathElement::Key(k) => {
            let want: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            if let Value::Array(a) = cur {
                a.retain(|it| !want.iter().all(|(wk, wv)| it.get(wk) == Some(wv)));
            }
        }
        PathElement::Value(j) => {
            let want: Value = serde_json::from_str(j).unwrap_or(Value::Null);
            if let Value::Array(a) = cur {
                a.retain(|it| *it != want);
            }
        }
    }
}

/// Encodes a field set as `FieldsV1`: one pass over the sorted set, each node's key encoded once (the paths under a
/// node are contiguous in the set); a member with children gets its `"."` after them. The result is
/// `to_fields_v1_reference`'s byte for byte (`to_fields_v1_matches_the_reference`).
pub(crate) fn to_fields_v1(set: &FieldSet) -> Value {
    /// The node of the paths in `paths` (all sharing their first `depth` elements, each longer than `depth`).
    fn node(paths: &[&FieldPath], depth: usize) -> Map<String, Value> {
        let mut out = Map::new();
        let mut i = 0;
        while i < paths.len() {
            let e = &paths[i][depth];
            let mut j = i + 1;
            while j < paths.len() && paths[j][depth] == *e {
                j += 1;
            }
            let group = &paths[i..j];
            let member = group.iter().any(|p| p.len() == depth + 1);
            let deeper: Vec<&FieldPath> = group.iter().copied().filter(|p| p.len() > depth + 1).collect();
            let mut child = node(&deeper, depth + 1);
            if member && !child.is_empty() {
                child.insert(".".into(), json!({}));
            }
            out.insert(e.encode(), Value::Object(child));
            i = j;
        }
        out
    }
    let paths: Vec<&FieldPath> = set.iter().filter(|p| !p.is_empty()).collect();
    Value::Object(node(&paths, 0))
}

/// The straightforward encoding [`to_fields_v1`] must agree with.
#[cfg(test)]
fn to_fields_v1_reference(set: &FieldSet) -> Value {
    fn insert(node: &mut Map<String, Value>, path: &[PathElement], set_member: bool) {
        let Some((first, rest)) = path.split_first() else { return };
        let entry = node.entry(first.encode()).or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(child) = entry else { return };
        if rest.is_empty() {
            if set_member && !child.is_empty() {
                child.insert(".".into(), json!({}));
            }
        } else {
            insert(child, rest, set_member);
        }
    }
    let mut root = Map::new();
    for p in set {
        insert(&mut root, p, true);
    }
    // A member that later gained children needs its "." marker.
    fn mark(node: &mut Map<String, Value>, path: &mut FieldPath, set: &FieldSet) {
        for (k, v) in node.iter_mut() {
            if k == "." {
                continue;
            }
            let Some(e) = PathElement::decode(k) else { continue };
            path.push(e);
            if let Value::Object(child) = v {
                if !child.is_empty() && set.contains(path) && !child.contains_key(".") {
                    child.insert(".".into(), json!({}));
                }
                mark(child, path, set);
            }
            path.pop();
        }
    }
    mark(&mut root, &mut Vec::new(), set);
    Value::Object(root)
}

pub(crate) fn from_fields_v1(v: &Value) -> FieldSet {
    fn walk(node: &Map<String, Value>, path: &mut FieldPath, set: &mut FieldSet) {
        for (k, child) in node {
            if k == "." {
                set.insert(path.clone());
                continue;
            }
            let Some(e) = PathElement::decode(k) else { continue };
            path.push(e);
            match child.as_object() {
                Some(c) if !c.is_empty() => walk(c, path, set),
                _ => {
                    set.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut set = FieldSet::new();
    if let Some(m) = v.as_object() {
        walk(m, &mut Vec::new(), &mut set);
    }
    set
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// A manager's first entry in its slot (manager, operation, subresource): written at `time`, owning `fields`.
    fn new_in_slot(
        manager: &str,
        operation: &str,
        subresource: &str,
        api_version: &str,
        time: String,
        fields: FieldSet,
    ) -> Self {
        Entry {
            manager: manager.to_string(),
            operation: operation.to_string(),
            api_version: api_version.to_string(),
            time,
            subresource: subresource.to_string(),
            fields,
        }
    }

    fn same_slot(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }
}

pub(crate) fn read_entries(obj: &Value) -> Vec<Entry> {
    crate::meta::metadata(obj)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: e.get("manager").and_then(Value::as_str).unwrap_or_default().to_string(),
                    operation: e.get("operation").and_then(Value::as_str).unwrap_or_default().to_string(),
                    api_version: e.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string(),
                    time: e.get("time").and_then(Value::as_str).unwrap_or_default().to_string(),
                    subresource: e.get("subresource").and_then(Value::as_str).unwrap_or_default().to_string(),
                    fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn encode_entry(e: &Entry) -> Value {
    encode_entry_with(e, to_fields_v1(&e.fields))
}

/// An entry with its `fieldsV1` already encoded.
fn encode_entry_with(e: &Entry, fields_v1: Value) -> Value {
    let mut m = Map::new();
    m.insert("manager".into(), json!(e.manager));
    m.insert("operation".into(), json!(e.operation));
    m.insert("apiVersion".into(), json!(e.api_version));
    m.insert("time".into(), json!(e.time));
    m.insert("fieldsType".into(), json!("FieldsV1"));
    m.insert("fieldsV1".into(), fields_v1);
    if !e.subresource.is_empty() {
        m.insert("subresource".into(), json!(e.subresource));
    }
    Value::Object(m)
}

pub(crate) fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries.iter().filter(|e| !e.fields.is_empty()).map(encode_entry).collect();
    let meta = crate::meta::metadata_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Which part of the object a write may touch, for restricting tracked fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The main resource: `status` is not tracked when a status subresource exists.
    Main { status_subresource: bool },
    /// The status subresource: only `status` (and metadata) is tracked.
    Status,
}

fn in_scope(p: &FieldPath, scope: Scope) -> bool {
    match p.first() {
        Some(PathElement::Field(f)) => top_in_scope(f, scope),
        _ => true,
    }
}

fn top_in_scope(top: &str, scope: Scope) -> bool {
    match scope {
        Scope::Main { status_subresource } => !(status_subresource && top == "status"),
        Scope::Status => top == "status",
    }
}

/// No member of `set` (which holds `p`) lies under `p`.
fn is_leaf(p: &FieldPath, set: &FieldSet) -> bool {
    use std::ops::Bound::{Excluded, Unbounded};
    set.range::<[PathElement], _>((Excluded(p.as_slice()), Unbounded)).next().is_none_or(|next| !next.starts_with(p))
}

/// Records an `Update` by `manager`: it takes ownership of what it changed.
///
/// The result is `record_update_reference`'s (`record_update_matches_the_reference`), computed for less: the
/// changed fields come from one walk of the new and the stored object side by side over the write's scope
/// ([`changed_fields`]; the stored `managedFields` are not walked), built as a tree and encoded from it, and each
/// stored entry's `fieldsV1` is walked as it is stored, against the new object and the changed fields, without
/// parsing it into a set ([`Pruner`]): an entry that loses nothing is kept as stored, the writer's own entry keeps
/// its stored `fieldsV1` when the write changed only fields it already owned and has the changed fields merged into
/// it ([`merge_fields_v1`]) when it gained some and lost none, and only an entry that loses fields is parsed and
/// re-encoded.
pub(crate) fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    schema: Option<Cursor<'_>>,
    manager: &str,
    api_version: &str,
    scope: Scope,
) {
    let Some(changed) = changed_fields(old, new, schema, scope) else {
        return record_update_general(old, new, schema, manager, api_version, scope);
    };
    let raw = stored_entries(old);
    let subresource = if scope == Scope::Status { "status" } else { "" };
    let n_changed = changed.members;
    let changed_tree = (n_changed > 0).then(|| changed.into_fields_v1());
    let slot = if n_changed == 0 {
        None
    } else {
        raw.iter().position(|e| {
            str_field(e, "manager") == manager
                && str_field(e, "operation") == "Update"
                && str_field(e, "subresource") == subresource
        })
    };
    enum Fate {
        Keep,
        Drop,
        Encode(FieldSet),
        /// The writer's entry, its fields as stored: a new time and apiVersion around the stored `fieldsV1`.
        Renew,
        /// The writer's entry, which lost no field: a new time and apiVersion around its stored `fieldsV1` merged
        /// with the changed fields.
        Gain,
    }
    let fates: Vec<Fate> = raw
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let fields = e.get("fieldsV1").and_then(Value::as_object);
            let mut p = Pruner::default();
            if let Some(f) = fields {
                p.visit(f, Some(&*new), changed_tree.as_ref());
            }
            if slot == Some(i) {
                if p.gone == 0 && p.changed == n_changed {
                    return Fate::Renew;
                }
                if p.gone == 0 {
                    return Fate::Gain;
                }
                let mut set = Pruner::kept(fields, &*new, changed_tree.as_ref());
                set.extend(changed_tree.as_ref().map(from_fields_v1).unwrap_or_default());
                return Fate::Encode(set);
            }
            if p.gone == 0 && p.changed == 0 {
                return if p.kept == 0 { Fate::Drop } else { Fate::Keep };
            }
            let set = Pruner::kept(fields, &*new, changed_tree.as_ref());
            if set.is_empty() { Fate::Drop } else { Fate::Encode(set) }
        })
        .collect();
    let mut time = None;
    let mut now = || time.get_or_insert_with(crate::meta::now).clone();
    // Stored entries were written by `write_entries`, so an untouched one encodes to what is stored; when the write
    // carries the stored entries (a patch starts from a copy of the stored object), that copy is reused.
    let mut carried = match crate::meta::metadata_mut(new).get_mut("managedFields") {
        Some(Value::Array(list)) => std::mem::take(list),
        _ => Vec::new(),
    };
    let mut list: Vec<Value> = Vec::with_capacity(raw.len() + 1);
    for (i, (stored, fate)) in raw.iter().zip(fates).enumerate() {
        match fate {
            Fate::Drop => {}
            Fate::Keep => list.push(match carried.get_mut(i) {
                Some(copy) if crate::json::eq(copy, stored) => std::mem::take(copy),
                _ => stored.clone(),
            }),
            Fate::Encode(fields) => {
                let mut e = entry_of(stored);
                if slot == Some(i) {
                    e.time = now();
                    e.api_version = api_version.to_string();
                }
                e.fields = fields;
                list.push(encode_entry(&e));
            }
            fate @ (Fate::Renew | Fate::Gain) => {
                let mut e = entry_of(stored);
                e.time = now();
                e.api_version = api_version.to_string();
                let stored_v1 = stored.get("fieldsV1").unwrap_or(&Value::Null);
                let v1 = match carried.get_mut(i).and_then(|c| c.get_mut("fieldsV1")) {
                    Some(copy) if crate::json::eq(copy, stored_v1) => std::mem::take(copy),
                    _ => stored_v1.clone(),
                };
                let v1 = match (fate, v1) {
                    (Fate::Gain, v1) => {
                        let stored = match v1 {
                            Value::Object(m) => m,
                            _ => Map::new(),
                        };
                        let changed = changed_tree.as_ref().and_then(Value::as_object);
                        Value::Object(merge_fields_v1(stored, changed.unwrap_or(&Map::new())))
                    }
                    (_, v1) => v1,
                };
                list.push(encode_entry_with(&e, v1));
            }
        }
    }
    if n_changed > 0 && slot.is_none() {
        // The writer's new entry holds exactly the changed fields: their encoding is `changed_tree`.
        let entry = Entry::new_in_slot(manager, "Update", subresource, api_version, now(), FieldSet::new());
        list.push(encode_entry_with(&entry, changed_tree.unwrap_or_else(|| json!({}))));
    }
    let meta = crate::meta::metadata_mut(new);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

fn str_field<'a>(e: &'a Value, key: &str) -> &'a str {
    e.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A stored entry as [`read_entries`] reads it, without its fields.
fn entry_of(e: &Value) -> Entry {
    Entry {
        manager: str_field(e, "manager").to_string(),
        operation: str_field(e, "operation").to_string(),
        api_version: str_field(e, "apiVersion").to_string(),
        time: str_field(e, "time").to_string(),
        subresource: str_field(e, "subresource").to_string(),
        fields: FieldSet::new(),
    }
}

/// An object [`changed_fields`] cannot walk side by side; [`record_update_general`] handles it.
struct Irregular;

/// One step of a path in the new object, borrowed from it; made a [`PathElement`] only for a changed field.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Field(&'a str),
    /// A list-map item and the list's keys.
    Key(&'a Value, &'a [String]),
    /// A set item.
    Value(&'a Value),
}

/// Walks the new object and the stored one side by side and collects the changed fields: the members of the new
/// field set ([`field_set`] within the scope) that the stored object lacks, and the leaves among them whose value
/// differs. `None` when a list-map item does not find itself by its keys (duplicate or missing keys, a non-object
/// item) or a key or set value holds a floating-point number (its JSON form may not parse back to it): there the
/// reference's lookups by encoded path can land elsewhere than the walk, and [`record_update_general`] follows them.
fn changed_fields(old: Option<&Value>, new: &Value, schema: Option<Cursor<'_>>, scope: Scope) -> Option<FieldTree> {
    let Value::Object(map) = new else { return None };
    let mut w = ChangeWalk { segs: Vec::new(), nodes: Vec::new(), changed: FieldTree::default() };
    for (k, v) in map {
        if !top_in_scope(k, scope) {
            continue;
        }
        let ov = old.and_then(|o| o.get(k.as_str()));
        w.push(Seg::Field(k));
        let (strict, _) = w.walk(v, ov, root_child(schema, k)).ok()?;
        let declared = k == "metadata" || schema.is_some_and(|c| c.node().properties.contains_key(k));
        if v.is_null() || v.as_object().is_some_and(Map::is_empty) || !declared {
            w.member(v, ov, !strict);
        }
        w.pop();
    }
    Some(w.changed)
}

/// A field set as a tree of encoded path elements, built member by member: each element is encoded once, however
/// many members lie under it, and the set's `fieldsV1` is read off the tree in order, the bytes [`to_fields_v1`]
/// gives for the same set (`field_tree_encodes_as_to_fields_v1`). The children of a node are ordered by their
/// encoded keys, which is [`PathElement`]'s order (`f:` < `k:` < `v:`, then the rest).
struct FieldTree {
    /// `nodes[0]` is the root (the empty path, never a member).
    nodes: Vec<TreeNode>,
    /// Members in the set.
    members: usize,
}

#[derive(Default)]
struct TreeNode {
    children: BTreeMap<String, usize>,
    member: bool,
}

impl Default for FieldTree {
    fn default() -> Self {
        Self { nodes: vec![TreeNode::default()], members: 0 }
    }
}

impl FieldTree {
    /// The child of `parent` at the encoded element `key`, made if missing.
    fn child(&mut self, parent: usize, key: String) -> usize {
        if let Some(&id) = self.nodes[parent].children.get(&key) {
            return id;
        }
        let id = self.nodes.len();
        self.nodes.push(TreeNode::default());
        self.nodes[parent].children.insert(key, id);
        id
    }

    fn mark(&mut self, id: usize) {
        if !std::mem::replace(&mut self.nodes[id].member, true) {
            self.members += 1;
        }
    }

    /// The set's `fieldsV1`.
    fn into_fields_v1(mut self) -> Value {
        fn node(nodes: &mut [TreeNode], id: usize) -> Map<String, Value> {
            let children = std::mem::take(&mut nodes[id].children);
            let mut out = Map::new();
            for (k, c) in children {
                let mut child = node(nodes, c);
                if nodes[c].member && !child.is_empty() {
                    child.insert(".".into(), json!({}));
                }
                out.insert(k, Value::Object(child));
            }
            out
        }
        Value::Object(node(&mut self.nodes, 0))
    }
}

/// The `fieldsV1` of the union of the set `a` holds (read as [`from_fields_v1`] reads it, so any encoding) and the
/// set `b` holds, encoded as [`to_fields_v1`] encodes it (`merge_fields_v1_encodes_the_union`): a writer's entry
/// that gains fields and loses none, without parsing its stored fields into a set and encoding them again.
fn merge_fields_v1(a: Map<String, Value>, b: &Map<String, Value>) -> Map<String, Value> {
    /// A node's members as its parent's value holds them: whether the node is a member, and its children.
    fn split(v: Option<Value>) -> (bool, Map<String, Value>) {
        match v {
            None => (false, Map::new()),
            Some(Value::Object(m)) if !m.is_empty() => (m.contains_key("."), m),
            Some(_) => (true, Map::new()),
        }
    }
    fn valid(k: &str) -> bool {
        k.split_at_checked(2).is_some_and(|(prefix, _)| matches!(prefix, "f:" | "k:" | "v:"))
    }
    let mut keys: BTreeMap<String, (Option<Value>, Option<&Value>)> = BTreeMap::new();
    for (k, v) in a {
        if valid(&k) {
            keys.insert(k, (Some(v), None));
        }
    }
    for (k, v) in b {
        if valid(k) {
            match keys.get_mut(k.as_str()) {
                Some(e) => e.1 = Some(v),
                None => {
                    keys.insert(k.clone(), (None, Some(v)));
                }
            }
        }
    }
    let mut out = Map::new();
    for (k, (av, bv)) in keys {
        let (a_member, a_children) = split(av);
        let (b_member, b_children) = split(bv.cloned());
        let mut children = merge_fields_v1(a_children, &b_children);
        let member = a_member || b_member;
        if !member && children.is_empty() {
            continue;
        }
        if member && !children.is_empty() {
            children.insert(".".into(), json!({}));
        }
        out.insert(k, Value::Object(children));
    }
    out
}

struct ChangeWalk<'a> {
    segs: Vec<Seg<'a>>,
    /// The tree nodes of the paths `segs` leads along, made so far (`None`: not yet); kept in step by
    /// [`Self::push`] and [`Self::pop`].
    nodes: Vec<Option<usize>>,
    changed: FieldTree,
}

impl<'a> ChangeWalk<'a> {
    fn push(&mut self, seg: Seg<'a>) {
        self.nodes.truncate(self.segs.len());
        self.segs.push(seg);
    }

    fn pop(&mut self) {
        self.segs.pop();
        self.nodes.truncate(self.segs.len());
    }

    /// The current path is a member of the new field set with value `nv` (`ov` in the stored object): it changed
    /// when the stored object lacks it or, as a leaf, holds another value. Returns whether it counts (is tracked).
    fn member(&mut self, nv: &Value, ov: Option<&Value>, leaf: bool) -> bool {
        let ignored = match self.segs.as_slice() {
            [Seg::Field(f)] => *f == "apiVersion" || *f == "kind",
            [Seg::Field("metadata"), Seg::Field(f), ..] => META_IGNORED.contains(f),
            _ => false,
        };
        if ignored {
            return false;
        }
        let changed = match ov {
            None => true,
            Some(ov) => leaf && !crate::json::eq(nv, ov),
        };
        if changed {
            // Each step is encoded (and its node made) once however many changed members lie under it (a new
            // list-map item's key).
            self.nodes.resize(self.segs.len(), None);
            let mut parent = 0;
            for (seg, node) in self.segs.iter().zip(self.nodes.iter_mut()) {
                parent = match *node {
                    Some(id) => id,
                    None => {
                        let key = match *seg {
                            Seg::Field(f) => format!("f:{f}"),
                            Seg::Key(item, keys) => format!("k:{}", key_of(item, keys)),
                            Seg::Value(v) => format!("v:{}", serde_json::to_string(v).unwrap_or_default()),
                        };
                        let id = self.changed.child(parent, key);
                        *node = Some(id);
                        id
                    }
                };
            }
            self.changed.mark(parent);
        }
        true
    }

    /// [`walk`] at the current path, `ov` the stored object's value there. Returns whether a member lies strictly
    /// under the path, and whether one lies at or under it.
    fn walk(&mut self, v: &'a Value, ov: Option<&Value>, c: Option<Cursor<'a>>) -> Result<(bool, bool), Irregular> {
        match v {
            Value::Object(map) => {
                if c.is_some_and(|c| c.node().map_atomic) {
                    let at = self.member(v, ov, true);
                    return Ok((false, at));
                }
                let is_map = c.is_some_and(|c| c.node().additional.is_some() && c.node().properties.is_empty());
                let in_metadata = matches!(self.segs.as_slice(), [Seg::Field("metadata")]);
                let mut under = false;
                for (k, val) in map {
                    if in_metadata && META_IGNORED.contains(&k.as_str()) {
                        continue;
                    }
                    let declared = c.is_some_and(|c| c.node().properties.contains_key(k));
                    let ochild = ov.and_then(|o| o.get(k.as_str()));
                    self.push(Seg::Field(k));
                    let (strict, at) = self.walk(val, ochild, c.and_then(|c| c.field(k)))?;
                    under |= at;
                    if val.is_null() || val.as_object().is_some_and(Map::is_empty) || !declared {
                        under |= self.member(val, ochild, !strict);
                    }
                    self.pop();
                }
                let at = is_map && !map.is_empty() && self.member(v, ov, !under);
                Ok((under, under || at))
            }
            Value::Array(items) => {
                let ic = c.and_then(|c| c.items());
                match c.and_then(|c| c.node().list_type.as_ref()) {
                    None | Some(ListType::Atomic) => {
                        let at = self.member(v, ov, true);
                        Ok((false, at))
                    }
                    Some(ListType::Set) => {
                        let old_items = ov.and_then(Value::as_array);
                        let mut any = false;
                        for it in items {
                            if has_float(it) {
                                return Err(Irregular);
                            }
                            let oit = old_items.and_then(|a| a.iter().find(|o| crate::json::eq(o, it)));
                            self.push(Seg::Value(it));
                            any |= self.member(it, oit, true);
                            self.pop();
                        }
                        Ok((any, any))
                    }
                    Some(ListType::Map(keys)) => {
                        let old_items = ov.and_then(Value::as_array);
                        let mut any = false;
                        for (i, it) in items.iter().enumerate() {
                            // The reference finds an item by the key fields it has: the first item with those values.
                            let want: Vec<(&str, &Value)> =
                                keys.iter().filter_map(|k| it.get(k.as_str()).map(|v| (k.as_str(), v))).collect();
                            if want.iter().any(|(_, v)| has_float(v)) {
                                return Err(Irregular);
                            }
                            let matches = |o: &&Value| want.iter().all(|(k, v)| o.get(*k) == Some(*v));
                            if items.iter().position(|o| matches(&o)) != Some(i) {
                                return Err(Irregular);
                            }
                            let oit = old_items.and_then(|a| a.iter().find(matches));
                            self.push(Seg::Key(it, keys));
                            let (strict, at) = self.walk(it, oit, ic)?;
                            let counted = self.member(it, oit, !strict);
                            self.pop();
                            any |= at || counted;
                        }
                        Ok((any, any))
                    }
                }
            }
            _ => {
                let at = self.member(v, ov, true);
                Ok((false, at))
            }
        }
    }
}

fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(a) => a.iter().any(has_float),
        Value::Object(m) => m.values().any(has_float),
        _ => false,
    }
}

/// Walks a stored entry's `fieldsV1` as stored (the members [`from_fields_v1`] would read) against the new object
/// and the changed fields (as `fieldsV1`): a member is kept when the new object has it ([`value_at`]) and the write
/// did not change it.
#[derive(Default)]
struct Pruner {
    kept: usize,
    /// Members the new object lacks (a subtree the new object lacks counts once).
    gone: usize,
    /// Members the write changed.
    changed: usize,
    /// When set, the kept members are collected here.
    collect: Option<(FieldPath, FieldSet)>,
}

impl Pruner {
    /// The kept members of `fields`.
    fn kept(fields: Option<&Map<String, Value>>, new: &Value, changed: Option<&Value>) -> FieldSet {
        let mut p = Pruner { collect: Some((Vec::new(), FieldSet::new())), ..Pruner::default() };
        if let Some(f) = fields {
            p.visit(f, Some(new), changed);
        }
        p.collect.map(|(_, set)| set).unwrap_or_default()
    }

    fn visit(&mut self, node: &Map<String, Value>, n: Option<&Value>, c: Option<&Value>) {
        for (k, child) in node {
            if k == "." {
                self.member(n, c);
                continue;
            }
            let Some((prefix, rest)) = k.split_at_checked(2) else { continue };
            let next = match prefix {
                "f:" => n.and_then(|n| n.get(rest)),
                "k:" => n.and_then(|n| {
                    let want: Map<String, Value> = serde_json::from_str(rest).ok()?;
                    n.as_array()?.iter().find(|it| want.iter().all(|(wk, wv)| it.get(wk) == Some(wv)))
                }),
                "v:" => n.and_then(|n| {
                    let want: Value = serde_json::from_str(rest).ok()?;
                    n.as_array()?.iter().find(|it| **it == want)
                }),
                _ => continue,
            };
            let cc = c.and_then(Value::as_object).and_then(|m| m.get(k));
            if let Some((path, _)) = &mut self.collect {
                path.extend(PathElement::decode(k));
            }
            match child.as_object() {
                // Nothing under a field the new object lacks is kept.
                Some(m) if !m.is_empty() && next.is_none() => self.gone += 1,
                Some(m) if !m.is_empty() => self.visit(m, next, cc),
                _ => self.member(next, cc),
            }
            if let Some((path, _)) = &mut self.collect {
                path.pop();
            }
        }
    }

    fn member(&mut self, n: Option<&Value>, c: Option<&Value>) {
        let changed = c.is_some_and(|c| c.as_object().is_none_or(|m| m.is_empty() || m.contains_key(".")));
        if n.is_none() {
            self.gone += 1;
        } else if changed {
            self.changed += 1;
        } else {
            self.kept += 1;
            if let Some((path, set)) = &mut self.collect {
                set.insert(path.clone());
            }
        }
    }
}

/// The stored object's `managedFields` entries, as stored.
fn stored_entries(old: Option<&Value>) -> &[Value] {
    old.and_then(crate::meta::metadata)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// [`record_update`] for objects [`changed_fields`] cannot walk side by side (a list-map whose items do not each
/// find themselves by their keys, floating-point set values or keys): the result is `record_update_reference`'s,
/// computed with the new object's whole field set and per-path lookups.
fn record_update_general(
    old: Option<&Value>,
    new: &mut Value,
    schema: Option<Cursor<'_>>,
    manager: &str,
    api_version: &str,
    scope: Scope,
) {
    let raw = stored_entries(old);
    let mut entries: Vec<(Entry, bool)> =
        old.map(read_entries).unwrap_or_default().into_iter().map(|e| (e, false)).collect();
    let new_set: FieldSet = field_set_in_scope(new, schema, scope);
    let mut lookup = Lookup::default();
    let changed: FieldSet = match old {
        None => new_set.clone(),
        Some(old) => new_set
            .iter()
            .filter(|p| match lookup.value_at(old, p) {
                None => true,
                Some(ov) => is_leaf(p, &new_set) && !crate::json::opt_eq(lookup.value_at(new, p), Some(ov)),
            })
            .cloned()
            .collect(),
    };
    // Fields that no longer exist are owned by nobody (a field `new` sets exists in it).
    for (e, dirty) in entries.iter_mut() {
        let before = e.fields.len();
        e.fields.retain(|p| !changed.contains(p) && (new_set.contains(p) || lookup.value_at(new, p).is_some()));
        *dirty = e.fields.len() != before;
    }
    let subresource = if scope == Scope::Status { "status" } else { "" };
    if !changed.is_empty() {
        let now = crate::meta::now();
        match entries.iter_mut().find(|(e, _)| e.same_slot(manager, "Update", subresource)) {
            Some((e, dirty)) => {
                e.fields.extend(changed);
                e.time = now;
                e.api_version = api_version.to_string();
                *dirty = true;
            }
            None => {
                entries.push((Entry::new_in_slot(manager, "Update", subresource, api_version, now, changed), true));
            }
        }
    }
    // Stored entries were written by `write_entries`, so an untouched one encodes to what is stored; when the write
    // carries the stored entries (a patch starts from a copy of the stored object), that copy is reused.
    let mut carried = match crate::meta::metadata_mut(new).get_mut("managedFields") {
        Some(Value::Array(list)) => std::mem::take(list),
        _ => Vec::new(),
    };
    let list: Vec<Value> = entries
        .iter()
        .enumerate()
        .filter(|(_, (e, _))| !e.fields.is_empty())
        .map(|(i, (e, dirty))| match raw.get(i) {
            Some(stored) if !*dirty => match carried.get_mut(i) {
                Some(copy) if crate::json::eq(copy, stored) => std::mem::take(copy),
                _ => stored.clone(),
            },
            _ => encode_entry(e),
        })
        .collect();
    let meta = crate::meta::metadata_mut(new);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// [`field_set`] restricted to a write's scope, without walking the parts outside it.
fn field_set_in_scope(value: &Value, schema: Option<Cursor<'_>>, scope: Scope) -> FieldSet {
    let Value::Object(map) = value else {
        return field_set(value, schema).into_iter().filter(|p| in_scope(p, scope)).collect();
    };
    let mut set = FieldSet::new();
    for (k, v) in map {
        if !top_in_scope(k, scope) {
            continue;
        }
        field_set_entry(k, v, schema, &mut set);
    }
    set.retain(|p| !ignored_root(p) && !p.is_empty());
    set
}

/// [`value_at`] with each list-map key and set value parsed once.
#[derive(Default)]
struct Lookup {
    keys: std::collections::HashMap<String, Map<String, Value>>,
    values: std::collections::HashMap<String, Value>,
}

impl Lookup {
    fn value_at<'a>(&mut self, v: &'a Value, path: &[PathElement]) -> Option<&'a Value> {
        let mut cur = v;
        for e in path {
            cur = match e {
                PathElement::Field(f) => cur.get(f)?,
                PathElement::Key(k) => {
                    if !self.keys.contains_key(k.as_str()) {
                        self.keys.insert(k.clone(), serde_json::from_str(k).ok()?);
                    }
                    let want = self.keys.get(k.as_str())?;
                    cur.as_array()?.iter().find(|it| want.iter().all(|(wk, wv)| it.get(wk) == Some(wv)))?
                }
                PathElement::Value(j) => {
                    if !self.values.contains_key(j.as_str()) {
                        self.values.insert(j.clone(), serde_json::from_str(j).ok()?);
                    }
                    let want = self.values.get(j.as_str())?;
                    cur.as_array()?.iter().find(|it| *it == want)?
                }
            };
        }
        Some(cur)
    }
}

#[cfg(test)]
/// The straightforward definition [`record_update`] must agree with.
pub(crate) fn record_update_reference(
    old: Option<&Value>,
    new: &mut Value,
    schema: Option<Cursor<'_>>,
    manager: &str,
    api_version: &str,
    scope: Scope,
) {
    let mut entries = old.map(read_entries).unwrap_or_default();
    let new_set: FieldSet = field_set(new, schema).into_iter().filter(|p| in_scope(p, scope)).collect();
    let changed: FieldSet = match old {
        None => new_set.clone(),
        Some(old) => new_set
            .iter()
            .filter(|p| match value_at(old, p) {
                None => true,
                Some(ov) => is_leaf(p, &new_set) && value_at(new, p) != Some(ov),
            })
            .cloned()
            .collect(),
    };
    // Fields that no longer exist are owned by nobody.
    for e in entries.iter_mut() {
        e.fields.retain(|p| value_at(new, p).is_some());
        e.fields.retain(|p| !changed.contains(p));
    }
    let subresource = if scope == Scope::Status { "status" } else { "" };
    if !changed.is_empty() {
        let now = crate::meta::now();
        match entries.iter_mut().find(|e| e.same_slot(manager, "Update", subresource)) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now;
                e.api_version = api_version.to_string();
            }
            None => entries.push(Entry::new_in_slot(manager, "Update", subresource, api_version, now, changed)),
        }
    }
    entries.retain(|e| !e.fields.is_empty());
    write_entries(new, &entries);
}

/// A field another manager owns with a different value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Conflict {
    pub manager: String,
    pub api_version: String,
    pub path: String,
}

/// Merges an applied configuration into the live object (structured-merge-diff semantics).
pub(crate) fn merge_applied(live: &mut Value, applied: &Value, c: Option<Cursor<'_>>) {
    if let (Value::Object(lm), Value::Object(am)) = (&mut *live, applied) {
        for (k, av) in am {
            if av.is_null() {
                lm.remove(k);
                continue;
            }
            let cc = root_child(c, k);
            match lm.get_mut(k) {
                Some(lv) => merge_value(lv, av, cc),
                None => {
                    lm.insert(k.clone(), av.clone());
                }
            }
        }
        return;
    }
    merge_value(live, applied, c);
}

fn merge_value(live: &mut Value, applied: &Value, c: Option<Cursor<'_>>) {
    match (live, applied) {
        (Value::Object(lm), Value::Object(am)) if !c.is_some_and(|c| c.node().map_atomic) => {
            for (k, av) in am {
                if av.is_null() {
                    lm.remove(k);
                    continue;
                }
                let cc = c.and_then(|c| c.field(k));
                match lm.get_mut(k) {
                    Some(lv) => merge_value(lv, av, cc),
                    None => {
                        lm.insert(k.clone(), av.clone());
                    }
                }
            }
        }
        (live @ Value::Array(_), Value::Array(items)) => {
            let lt = c.map(|c| c.list_type()).unwrap_or(ListType::Atomic);
            let ic = c.and_then(|c| c.items());
            let Value::Array(litems) = live else { return };
            match lt {
                ListType::Atomic => *litems = items.clone(),
                ListType::Set => {
                    for it in items {
                        if !litems.contains(it) {
                            litems.push(it.clone());
                        }
                    }
                }
                ListType::Map(keys) => {
                    for it in items {
                        let k = key_of(it, &keys);
                        match litems.iter_mut().find(|l| key_of(l, &keys) == k) {
                            Some(l) => merge_value(l, it, ic),
                            None => litems.push(it.clone()),
                        }
                    }
                }
            }
        }
        (live, applied) => *live = applied.clone(),
    }
}

/// Server-side apply of `applied` by `manager`. Returns the merged object (with updated
/// managedFields) or the conflicts that block it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    live: Option<&Value>,
    applied: &Value,
    schema: Option<Cursor<'_>>,
    manager: &str,
    api_version: &str,
    force: bool,
    scope: Scope,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = live.map(read_entries).unwrap_or_default();
    let subresource = if scope == Scope::Status { "status" } else { "" };
    let applied_set: FieldSet = field_set(applied, schema).into_iter().filter(|p| in_scope(p, scope)).collect();
    let mut merged = live.cloned().unwrap_or_else(|| Value::Object(Map::new()));
    let mut applied_scoped = applied.clone();
    if let Value::Object(m) = &mut applied_scoped {
        match scope {
            Scope::Main { status_subresource: true } => {
                m.remove("status");
            }
            Scope::Status => {
                let status = m.remove("status");
                let meta = m.remove("metadata");
                m.clear();
                if let Some(s) = status {
                    m.insert("status".into(), s);
                }
                if let Some(md) = meta {
                    m.insert("metadata".into(), md);
                }
            }
            _ => {}
        }
    }
    merge_applied(&mut merged, &applied_scoped, schema);

    let mut conflicts = Vec::new();
    if let Some(live) = live {
        for e in entries.iter().filter(|e| !e.same_slot(manager, "Apply", subresource)) {
            for p in e.fields.intersection(&applied_set) {
                if !is_leaf(p, &applied_set) {
                    continue;
                }
                if let (Some(lv), Some(mv)) = (value_at(live, p), value_at(&merged, p))
                    && lv != mv
                {
                    conflicts.push(Conflict {
                        manager: e.manager.clone(),
                        api_version: e.api_version.clone(),
                        path: render_path(p),
                    });
                }
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    // Forced (or unchanged) fields now belong to this manager alone.
    for e in entries.iter_mut().filter(|e| !e.same_slot(manager, "Apply", subresource)) {
        if force {
            e.fields.retain(|p| !applied_set.contains(p) || value_at(&merged, p) == live.and_then(|l| value_at(l, p)));
        }
    }
    // Fields this manager applied before and no longer applies are removed unless owned elsewhere.
    let previous = entries
        .iter()
        .find(|e| e.same_slot(manager, "Apply", subresource))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: FieldSet = entries
        .iter()
        .filter(|e| !e.same_slot(manager, "Apply", subresource))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let mut dropped: Vec<&FieldPath> = previous
        .iter()
        .filter(|p| !applied_set.contains(*p))
        .filter(|p| !others.iter().any(|o| o.starts_with(p) || p.starts_with(o)))
        .collect();
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in &dropped {
        remove_at(&mut merged, p);
    }
    // Parents left empty by the removal go too, unless someone sets them.
    for p in &dropped {
        let mut parent: FieldPath = p.to_vec();
        while parent.len() > 1 {
            parent.pop();
            let owned = applied_set.iter().chain(others.iter()).any(|o| o.starts_with(&parent));
            let empty = value_at(&merged, &parent)
                .is_some_and(|v| v.as_object().is_some_and(Map::is_empty) || v.as_array().is_some_and(Vec::is_empty));
            if owned || !empty {
                break;
            }
            remove_at(&mut merged, &parent);
        }
    }
    let now = crate::meta::now();
    match entries.iter_mut().find(|e| e.same_slot(manager, "Apply", subresource)) {
        Some(e) => {
            if e.fields != applied_set {
                e.time = now;
            }
            e.fields = applied_set;
            e.api_version = api_version.to_string();
        }
        None => entries.push(Entry::new_in_slot(manager, "Apply", subresource, api_version, now, applied_set)),
    }
    for e in entries.iter_mut() {
        e.fields.retain(|p| value_at(&merged, p).is_some());
    }
    entries.retain(|e| !e.fields.is_empty());
    write_entries(&mut merged, &entries);
    Ok(merged)
}

/// The apiserver's conflict message for a failed apply.
pub(crate) fn conflict_message(conflicts: &[Conflict]) -> String {
    let mut by_manager: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for c in conflicts {
        by_manager.entry((c.manager.clone(), c.api_version.clone())).or_default().push(c.path.clone());
    }
    let n = conflicts.len();
    if n == 1 {
        let c = &conflicts[0];
        return format!(
            "Apply failed with 1 conflict: conflict with {:?} using {}: {}",
            c.manager, c.api_version, c.path
        );
    }
    let mut s = format!("Apply failed with {n} conflicts: ");
    let parts: Vec<String> = by_manager
        .iter()
        .map(|((m, v), paths)| {
            let lines: Vec<String> = paths.iter().map(|p| format!("- {p}")).collect();
            format!("conflicts with {m:?} using {v}:\n{}", lines.join("\n"))
        })
        .collect();
    s.push_str(&parts.join("\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::from_crd_schema;

    fn schema() -> crate::schema::Schema {
        from_crd_schema(&json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "containers": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}, "image": {"type": "string"}}}}
            }}
        }}))
    }

    #[test]
    fn fields_v1_roundtrip() {
        let s = schema();
        let obj = json!({"metadata": {"name": "x", "labels": {"app": "a"}}, "spec": {"replicas": 1, "containers": [{"name": "c", "image": "i"}]}});
        let set = field_set(&obj, Some(Cursor::root(&s)));
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {"f:replicas": {}, "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {}}}}})
        );
        assert_eq!(from_fields_v1(&v1), set);
    }

    /// The one-pass encoding against the reference (which inserts path by path and marks members afterwards), byte for
    /// byte, over the field sets of a pod and of records made by updates (members with children, list-map keys, set
    /// values, the empty path).
    #[test]
    fn to_fields_v1_matches_the_reference() {
        let mut sets = sample_sets();
        // The empty path too, beside members with children (`sample_sets()[3]`).
        let mut with_root = sets[3].clone();
        with_root.insert(Vec::new());
        sets.push(with_root);
        for set in &sets {
            let fast = to_fields_v1(set);
            let reference = to_fields_v1_reference(set);
            assert_eq!(serde_json::to_string(&fast).unwrap(), serde_json::to_string(&reference).unwrap());
        }
    }

    fn tree_of(set: &FieldSet) -> FieldTree {
        let mut tree = FieldTree::default();
        for path in set.iter().filter(|p| !p.is_empty()) {
            let mut id = 0;
            for e in path {
                id = tree.child(id, e.encode());
            }
            tree.mark(id);
        }
        tree
    }

    fn sample_sets() -> Vec<FieldSet> {
        let pods = BUILTINS_POD.as_ref().expect("pod schema");
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y"], "annotations": {}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"}]}], "tolerations": [{"key": "k"}], "nodeName": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}});
        let other = json!({"metadata": {"labels": {"c": "3"}, "finalizers": ["z"]},
            "spec": {"containers": [{"name": "c", "image": "j", "ports": [{"containerPort": 81, "protocol": "UDP"}]},
                {"name": "d", "args": ["1"]}]},
            "status": {"conditions": [{"type": "Scheduled", "status": "True"}]}});
        let full = field_set(&pod, Some(Cursor::root(pods)));
        let mut with_parents = full.clone();
        with_parents.insert(vec![PathElement::Field("spec".into())]);
        with_parents.insert(vec![PathElement::Field("spec".into()), PathElement::Field("containers".into())]);
        let mut small = FieldSet::new();
        small.insert(vec![PathElement::Field("status".into()), PathElement::Field("phase".into())]);
        small.insert(vec![PathElement::Field("a".into()), PathElement::Value("1.5".into())]);
        small.insert(vec![PathElement::Field("a".into()), PathElement::Key("{\"k\":1}".into())]);
        small.insert(vec![
            PathElement::Field("a".into()),
            PathElement::Key("{\"k\":1}".into()),
            PathElement::Field("x".into()),
        ]);
        let labels: FieldSet =
            full.iter().filter(|p| p.len() > 1 && p[1] == PathElement::Field("labels".into())).cloned().collect();
        vec![
            full,
            field_set(&pod, None),
            FieldSet::new(),
            with_parents,
            small,
            field_set(&other, Some(Cursor::root(pods))),
            labels,
        ]
    }

    /// The tree the side-by-side walk builds encodes as `to_fields_v1` encodes the same set, byte for byte: sets built
    /// path by path, and a new object's whole field set (a create).
    #[test]
    fn field_tree_encodes_as_to_fields_v1() {
        for set in &sample_sets() {
            let tree = tree_of(set);
            assert_eq!(tree.members, set.iter().filter(|p| !p.is_empty()).count());
            let bytes = serde_json::to_string(&tree.into_fields_v1()).unwrap();
            assert_eq!(bytes, serde_json::to_string(&to_fields_v1(set)).unwrap());
        }
        let pods = BUILTINS_POD.as_ref().expect("pod schema");
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "labels": {"b": "2", "a": "1"}, "ownerReferences": [{"uid": "u", "name": "o"}]},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 81, "protocol": "UDP"}],
                "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}], "resources": {}}],
                "readinessGates": [{"conditionType": "X"}], "securityContext": {}},
            "status": {"phase": "Pending"}});
        for scope in
            [Scope::Main { status_subresource: true }, Scope::Status, Scope::Main { status_subresource: false }]
        {
            let tree = changed_fields(None, &pod, Some(Cursor::root(pods)), scope).expect("walked");
            let bytes = serde_json::to_string(&tree.into_fields_v1()).unwrap();
            let set = field_set_in_scope(&pod, Some(Cursor::root(pods)), scope);
            assert_eq!(bytes, serde_json::to_string(&to_fields_v1(&set)).unwrap(), "{scope:?}");
        }
    }

    /// Merging two encodings gives the encoding of the union, byte for byte; the first encoding is read as
    /// `from_fields_v1` reads it, whatever its form (keys out of order, a lone ".", keys of no path element, a
    /// subtree holding no member, a member that is not an object).
    #[test]
    fn merge_fields_v1_encodes_the_union() {
        let sets = sample_sets();
        for a in &sets {
            for b in &sets {
                let Value::Object(av) = to_fields_v1(a) else { panic!() };
                let Value::Object(bv) = to_fields_v1(b) else { panic!() };
                let merged = Value::Object(merge_fields_v1(av, &bv));
                let union: FieldSet = a.union(b).cloned().collect();
                assert_eq!(
                    serde_json::to_string(&merged).unwrap(),
                    serde_json::to_string(&to_fields_v1(&union)).unwrap()
                );
            }
        }
        let odd = json!({"f:z": {}, "f:spec": {"f:b": {".": {}}, "f:a": {"f:x": {}, ".": {"junk": 1}}, "bad": {}},
            "x:y": {}, "f:empty": {"nope": {}}, "f:leaf": 1, ".": {}, "f:status": {".": {}, "f:phase": {}}});
        for b in &sets {
            let Value::Object(av) = odd.clone() else { panic!() };
            let Value::Object(bv) = to_fields_v1(b) else { panic!() };
            let merged = Value::Object(merge_fields_v1(av, &bv));
            let union: FieldSet = from_fields_v1(&odd).union(b).filter(|p| !p.is_empty()).cloned().collect();
            assert_eq!(serde_json::to_string(&merged).unwrap(), serde_json::to_string(&to_fields_v1(&union)).unwrap());
        }
    }

    /// `record_update` against its straightforward definition, over a pod's life (built-in schema: list maps, sets,
    /// atomic lists, the status scope), custom resources' (atomic maps, string maps, sets, list maps with two keys,
    /// nulls, no schema at all), each step starting from what the previous stored: fields removed, changed back,
    /// taken over from another manager, and objects the side-by-side walk leaves to `record_update_general`
    /// (`irregular`: duplicate or missing list-map keys, floating-point set values).
    #[test]
    fn record_update_matches_the_reference() {
        fn check(steps: &[(&str, Scope, Value)], schema: Option<Cursor<'_>>) {
            check_with(steps, schema, &[]);
        }
        fn check_with(steps: &[(&str, Scope, Value)], schema: Option<Cursor<'_>>, irregular: &[usize]) {
            let mut stored: Option<Value> = None;
            for (i, (manager, scope, desired)) in steps.iter().enumerate() {
                let mut fast = desired.clone();
                let mut reference = desired.clone();
                if let Some(old) = &stored {
                    // The registry carries the stored entries over before recording (carry_system_metadata).
                    for v in [&mut fast, &mut reference] {
                        if let Some(mf) = old["metadata"].get("managedFields") {
                            v["metadata"]["managedFields"] = mf.clone();
                        }
                    }
                }
                assert_eq!(
                    changed_fields(stored.as_ref(), &fast, schema, *scope).is_some(),
                    !irregular.contains(&i),
                    "step {i}: walked side by side"
                );
                record_update(stored.as_ref(), &mut fast, schema, manager, "v1", *scope);
                record_update_reference(stored.as_ref(), &mut reference, schema, manager, "v1", *scope);
                // Entries written in this step carry the current time: compare without it.
                let strip = |v: &Value| {
                    let mut v = v.clone();
                    if let Some(Value::Array(list)) = v["metadata"].get_mut("managedFields") {
                        for e in list {
                            e.as_object_mut().unwrap().remove("time");
                        }
                    }
                    v
                };
                assert_eq!(strip(&fast), strip(&reference), "step {i} ({manager})");
                assert_eq!(
                    serde_json::to_string(&strip(&fast)).unwrap(),
                    serde_json::to_string(&strip(&reference)).unwrap(),
                    "step {i}: same order"
                );
                stored = Some(fast);
            }
        }
        let main = Scope::Main { status_subresource: true };
        let status = Scope::Status;
        let pod = |labels: Value, containers: Value, finalizers: Value, status: Value| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default", "labels": labels, "finalizers": finalizers,
                    "annotations": {"a": "1"}},
                "spec": {"containers": containers, "tolerations": [{"key": "k", "operator": "Exists"}],
                    "readinessGates": [{"conditionType": "InPlaceUpdateReady"}], "nodeName": "n"},
                "status": status})
        };
        let c = |image: &str| {
            json!([{"name": "game", "image": image, "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "env": [{"name": "A", "value": "1"}]}])
        };
        let two = json!([{"name": "game", "image": "v1"}, {"name": "side", "image": "s", "args": ["x", "y"]}]);
        let st = |ready: &str, image: &str| {
            json!({"phase": "Running", "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": ready}, {"type": "InPlaceUpdateReady", "status": "True"}],
            "containerStatuses": [{"name": "game", "image": image, "ready": ready == "True"}]})
        };
        let pods = BUILTINS_POD.as_ref().expect("pod schema");
        check(
            &[
                ("gd", main, pod(json!({"app": "a"}), c("v1"), json!(["f/one"]), json!({}))),
                ("kubelet", status, pod(json!({"app": "a"}), c("v1"), json!(["f/one"]), st("False", "v1"))),
                ("kubelet", status, pod(json!({"app": "a"}), c("v1"), json!(["f/one"]), st("True", "v1"))),
                // A no-op write, then labels and finalizers (a set) changed by another manager.
                ("gd", main, pod(json!({"app": "a"}), c("v1"), json!(["f/one"]), st("True", "v1"))),
                (
                    "other",
                    main,
                    pod(json!({"app": "a", "x": "y"}), c("v1"), json!(["f/one", "f/two"]), st("True", "v1")),
                ),
                // The image changes (a list-map item's leaf), then a container appears and a label goes.
                ("gd", main, pod(json!({"app": "a", "x": "y"}), c("v2"), json!(["f/two"]), st("True", "v1"))),
                ("kubelet", status, pod(json!({"app": "a", "x": "y"}), c("v2"), json!(["f/two"]), st("True", "v2"))),
                ("gd", main, pod(json!({"app": "a"}), two.clone(), json!(["f/two"]), st("True", "v2"))),
                ("gd", main, pod(json!({}), c("v3"), json!([]), st("False", "v2"))),
                // The writer gains fields and loses none: a label, then a port and an env entry (list-map items
                // under an item it owns), then a label another manager set before it.
                ("gd", main, pod(json!({"z": "1"}), c("v3"), json!([]), st("False", "v2"))),
                (
                    "gd",
                    main,
                    pod(
                        json!({"z": "1"}),
                        json!([{"name": "game", "image": "v3",
                            "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 7777, "protocol": "UDP"}],
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}]),
                        json!(["f/three"]),
                        st("False", "v2"),
                    ),
                ),
                ("other", main, pod(json!({"z": "1", "o": "1"}), c("v3"), json!(["f/three"]), st("False", "v2"))),
                ("gd", main, pod(json!({"z": "1", "o": "2"}), c("v3"), json!(["f/three"]), st("False", "v2"))),
                ("kubelet", status, pod(json!({"z": "1", "o": "2"}), c("v3"), json!(["f/three"]), st("True", "v3"))),
            ],
            Some(Cursor::root(pods)),
        );
        let s = schema();
        let cr = |replicas: i64, image: &str, st: Value| {
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "x", "labels": {"a": "1"}},
                "spec": {"replicas": replicas, "containers": [{"name": "c", "image": image}], "extra": {"u": 1}},
                "status": st})
        };
        check(
            &[
                ("op", main, cr(1, "i", json!({}))),
                ("op", status, cr(1, "i", json!({"phase": "Running", "n": [1, 2]}))),
                ("user", main, cr(3, "i", json!({"phase": "Running", "n": [1, 2]}))),
                ("op", main, cr(3, "j", json!({"phase": "Running", "n": [1, 2]}))),
                ("op", status, cr(3, "j", json!({"phase": "Done"}))),
            ],
            Some(Cursor::root(&s)),
        );

        // A pod's fields changed back and forth, taken over and given back, removed under other managers.
        let pod2 = |labels: Value, containers: Value, conditions: Value| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default", "labels": labels},
                "spec": {"containers": containers, "nodeName": "n"},
                "status": {"phase": "Running", "conditions": conditions}})
        };
        let ctr = |image: &str, ports: Value, env: Value| json!([{"name": "game", "image": image, "ports": ports, "env": env}]);
        let p80 = json!([{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 81, "protocol": "UDP"}]);
        let env = json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
        let conds =
            |ready: &str| json!([{"type": "Ready", "status": ready}, {"type": "PodScheduled", "status": "True"}]);
        check_with(
            &[
                ("gd", main, pod2(json!({"app": "a"}), ctr("v1", p80.clone(), env.clone()), json!([]))),
                ("kubelet", status, pod2(json!({"app": "a"}), ctr("v1", p80.clone(), env.clone()), conds("False"))),
                // Another manager takes the image, the owner takes it back (the other's entry empties), then changes
                // only what it owns.
                ("other", main, pod2(json!({"app": "a"}), ctr("v2", p80.clone(), env.clone()), conds("False"))),
                ("gd", main, pod2(json!({"app": "a"}), ctr("v1", p80.clone(), env.clone()), conds("False"))),
                ("gd", main, pod2(json!({"app": "a"}), ctr("v3", p80.clone(), env.clone()), conds("False"))),
                // Status flips and flips back; a no-op status write.
                ("kubelet", status, pod2(json!({"app": "a"}), ctr("v3", p80.clone(), env.clone()), conds("True"))),
                ("kubelet", status, pod2(json!({"app": "a"}), ctr("v3", p80.clone(), env.clone()), conds("False"))),
                ("kubelet", status, pod2(json!({"app": "a"}), ctr("v3", p80.clone(), env.clone()), conds("False"))),
                // A main write drops a port, an env entry and a condition another manager owns; labels become empty.
                (
                    "gd",
                    main,
                    pod2(
                        json!({}),
                        ctr(
                            "v3",
                            json!([{"containerPort": 81, "protocol": "UDP"}]),
                            json!([{"name": "B", "value": "2"}]),
                        ),
                        json!([{"type": "PodScheduled", "status": "True"}]),
                    ),
                ),
                // The port comes back by another manager; the labels go altogether.
                (
                    "other",
                    main,
                    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                        "spec": {"containers": ctr("v3", p80.clone(), json!([{"name": "B", "value": "2"}])), "nodeName": "n"},
                        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}}),
                ),
                // Duplicate container names and a port without its protocol next to one with it: left to the general
                // path.
                (
                    "gd",
                    main,
                    pod2(
                        json!({}),
                        json!([{"name": "game", "image": "v4"}, {"name": "game", "image": "v5"}]),
                        json!([]),
                    ),
                ),
                (
                    "gd",
                    main,
                    pod2(
                        json!({}),
                        ctr("v4", json!([{"containerPort": 80, "protocol": "UDP"}, {"containerPort": 80}]), json!([])),
                        json!([]),
                    ),
                ),
                ("gd", main, pod2(json!({"app": "b"}), ctr("v4", p80.clone(), env.clone()), json!([]))),
            ],
            Some(Cursor::root(pods)),
            &[10, 11],
        );

        let s2 = from_crd_schema(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "sel": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}},
                "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                "nums": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "number"}},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {"type": "object", "properties": {"port": {"type": "integer"}, "protocol": {"type": "string"}, "name": {"type": "string"}}}},
                "opt": {"type": "string", "nullable": true}
            }},
            "status": {"type": "object", "properties": {"phase": {"type": "string"},
                "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                    "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}}}
        }}));
        let cr2 = |spec: Value, status: Value| json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "x", "annotations": {"n": "1"}}, "spec": spec, "status": status});
        let spec = |a: &str, tags: Value, nums: Value, ports: Value| json!({"sel": {"a": a, "b": "b"}, "tags": tags, "nums": nums, "ports": ports, "opt": null, "extra": {"deep": {"x": 1}}});
        let ports = json!([{"port": 80, "protocol": "TCP", "name": "http"}, {"port": 80, "protocol": "UDP"}]);
        let st2 = |ready: &str| json!({"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]});
        check_with(
            &[
                ("op", main, cr2(spec("1", json!({"t": "1"}), json!([1, 2]), ports.clone()), json!({}))),
                ("op", status, cr2(spec("1", json!({"t": "1"}), json!([1, 2]), ports.clone()), st2("False"))),
                // A leaf of an atomic map, a string map's entry, a set's member, a list-map item's field.
                ("user", main, cr2(spec("2", json!({"t": "1", "u": "2"}), json!([2, 3]), ports.clone()), st2("False"))),
                (
                    "op",
                    main,
                    cr2(
                        spec("1", json!({}), json!([2, 3]), json!([{"port": 80, "protocol": "TCP", "name": "web"}])),
                        st2("False"),
                    ),
                ),
                ("op", status, cr2(spec("1", json!({}), json!([2, 3]), ports.clone()), st2("True"))),
                ("op", status, cr2(spec("1", json!({}), json!([2, 3]), ports.clone()), json!({"phase": "Done"}))),
                // A port without its protocol (unique: walked), a set with a floating-point member (not walked).
                ("user", main, cr2(spec("1", json!({}), json!([2]), json!([{"port": 81}])), json!({"phase": "Done"}))),
                (
                    "user",
                    main,
                    cr2(spec("1", json!({}), json!([2.5]), json!([{"port": 81}])), json!({"phase": "Done"})),
                ),
                ("op", main, cr2(spec("1", json!({"t": "1"}), json!([2]), ports.clone()), json!({"phase": "Done"}))),
                // `spec` goes, then comes back as null.
                (
                    "op",
                    main,
                    json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "x"}, "status": {"phase": "Done"}}),
                ),
                ("op", main, json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "x"}, "spec": null})),
            ],
            Some(Cursor::root(&s2)),
            &[7],
        );
        // No schema: every field is its own member, every list atomic.
        let raw = |v: Value| json!({"apiVersion": "y/v1", "kind": "Y", "metadata": {"name": "y"}, "data": v});
        check(
            &[
                ("a", main, raw(json!({"l": [1, 2], "m": {"k": "v"}, "e": {}}))),
                ("b", main, raw(json!({"l": [1, 3], "m": {"k": "v", "j": null}, "e": {}}))),
                ("a", main, raw(json!({"l": [1, 2], "m": {}}))),
                ("b", Scope::Main { status_subresource: false }, raw(json!([{"x": 1}]))),
            ],
            None,
        );
    }

    static BUILTINS_POD: std::sync::LazyLock<Option<crate::schema::Schema>> =
        std::sync::LazyLock::new(|| crate::resources::BUILTINS.schemas.schema("io.k8s.api.core.v1.Pod"));

    #[test]
    fn apply_merges_removes_and_conflicts() {
        let s = schema();
        let c = Some(Cursor::root(&s));
        let first = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 1}});
        let live = apply(None, &first, c, "helm", "x/v1", false, Scope::Main { status_subresource: true }).unwrap();
        assert_eq!(live["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        // Another manager changes replicas through an update.
        let mut updated = live.clone();
        updated["spec"]["replicas"] = json!(5);
        record_update(Some(&live), &mut updated, c, "kubectl", "x/v1", Scope::Main { status_subresource: true });
        // Re-applying without label b removes it; re-applying replicas=1 conflicts.
        let second = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "x", "labels": {"a": "1"}}, "spec": {"replicas": 1}});
        let err = apply(Some(&updated), &second, c, "helm", "x/v1", false, Scope::Main { status_subresource: true })
            .unwrap_err();
        assert_eq!(
            conflict_message(&err),
            "Apply failed with 1 conflict: conflict with \"kubectl\" using x/v1: .spec.replicas"
        );
        let forced =
            apply(Some(&updated), &second, c, "helm", "x/v1", true, Scope::Main { status_subresource: true }).unwrap();
        assert_eq!(forced["spec"]["replicas"], 1);
        assert_eq!(forced["metadata"]["labels"], json!({"a": "1"}));
        let managers: Vec<String> = read_entries(&forced).iter().map(|e| e.manager.clone()).collect();
        assert_eq!(managers, vec!["helm"]);
        // Without replicas in the config, the field stays (kubectl still owned it before force).
        let third = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let after =
            apply(Some(&updated), &third, c, "helm", "x/v1", false, Scope::Main { status_subresource: true }).unwrap();
        assert_eq!(after["spec"]["replicas"], 5);
        assert!(after["metadata"].get("labels").is_none_or(|l| l.get("b").is_none()));
    }
}
