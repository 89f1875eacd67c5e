//! OpenAPI v3 documents (`/openapi/v3` and `/openapi/v3/<group-version>`).
//!
//! kubectl reads them to decide whether the server does field validation (the `fieldValidation`
//! parameter of a kind's PATCH operation), which patch types a kind accepts (strategic merge
//! for built-ins, not for custom resources), and for `kubectl explain`. Built-in schemas come
//! from the k8s-openapi types, custom resource schemas from their CRDs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use crate::resources::{BUILTINS, Catalog, ResourceDef};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";
const BINDING: &str = "io.k8s.api.core.v1.Binding";
const TOKEN_REQUEST: &str = "io.k8s.api.authentication.v1.TokenRequest";

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Rewrites schemars `$ref`s to OpenAPI component refs (refs with siblings become `allOf`).
fn rewrite_refs(v: &mut Value, refs: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref").cloned() {
                let name = r.rsplit('/').next().unwrap_or(&r).to_string();
                refs.insert(name.clone());
                if m.len() == 1 {
                    m.insert("$ref".into(), json!(format!("#/components/schemas/{name}")));
                } else {
                    m.remove("$ref");
                    m.insert("allOf".into(), json!([schema_ref(&name)]));
                }
            }
            for (_, child) in m.iter_mut() {
                rewrite_refs(child, refs);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| rewrite_refs(c, refs)),
        _ => {}
    }
}

/// Component schemas for the built-in definitions reachable from `roots`.
fn builtin_closure(roots: &[String]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut todo: Vec<String> = roots.to_vec();
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(def) = BUILTINS.schemas.defs.get(&name) else { continue };
        let mut def = def.clone();
        let mut refs = BTreeSet::new();
        rewrite_refs(&mut def, &mut refs);
        out.insert(name, def);
        todo.extend(refs.into_iter().filter(|r| !out.contains_key(r)));
    }
    out
}

/// `com.tencent.tkex.v1alpha1.GameDeployment` for `tkex.tencent.com/v1alpha1`.
fn custom_schema_name(rd: &ResourceDef, kind: &str) -> String {
    let mut parts: Vec<&str> = rd.group.split('.').collect();
    parts.reverse();
    format!("{}.{}.{kind}", parts.join("."), rd.version)
}

fn kind_schema_name(rd: &ResourceDef) -> String {
    match &rd.definition {
        Some(d) => d.clone(),
        None => custom_schema_name(rd, &rd.kind),
    }
}

fn list_schema_name(rd: &ResourceDef) -> String {
    match &rd.definition {
        Some(d) => format!("{d}List"),
        None => custom_schema_name(rd, &rd.list_kind),
    }
}

fn custom_schema(rd: &ResourceDef) -> Value {
    let mut s = rd.custom.as_ref().map(|c| c.openapi_schema.clone()).unwrap_or_else(|| json!({"type": "object"}));
    if let Value::Object(m) = &mut s {
        let props = m.entry("properties").or_insert_with(|| json!({}));
        if let Value::Object(p) = props {
            p.insert(
                "apiVersion".into(),
                json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}),
            );
            p.insert(
                "kind".into(),
                json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}),
            );
            p.insert(
                "metadata".into(),
                json!({"allOf": [schema_ref(OBJECT_META)], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
            );
        }
        m.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": rd.group, "version": rd.version, "kind": rd.kind}]),
        );
    }
    s
}

fn list_schema(rd: &ResourceDef) -> Value {
    json!({
        "description": format!("{} is a list of {}", rd.list_kind, rd.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
            "items": {"type": "array", "items": {"allOf": [schema_ref(&kind_schema_name(rd))], "default": {}}, "description": format!("List of {}.", rd.plural)},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
            "metadata": {"allOf": [schema_ref(LIST_META)], "default": {}, "description": "Standard list metadata."},
        },
        "x-kubernetes-group-version-kind": [{"group": rd.group, "version": rd.version, "kind": rd.list_kind}],
    })
}

fn query_param(name: &str, description: &str, type_: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": type_, "uniqueItems": true}})
}

fn content(schema: Value) -> Value {
    json!({"application/json": {"schema": schema.clone()}, "application/yaml": {"schema": schema.clone()}, "application/vnd.kubernetes.protobuf": {"schema": schema}})
}

fn op_id(verb: &str, rd: &ResourceDef, namespaced: bool, suffix: &str) -> String {
    let group: String = rd
        .group
        .split(['.', '-'])
        .next()
        .map(|g| {
            let mut c = g.chars();
            c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
        })
        .unwrap_or_default();
    let version = {
        let mut c = rd.version.chars();
        c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
    };
    let core = if rd.group.is_empty() { "Core".to_string() } else { group };
    format!("{verb}{core}{version}{}{}{suffix}", if namespaced { "Namespaced" } else { "" }, rd.kind)
}

#[allow(clippy::too_many_arguments)] // mirrors the fields of an OpenAPI operation object
fn operation(
    action: &str,
    rd: &ResourceDef,
    gvk_kind: (&str, &str, &str),
    op_id: String,
    params: Vec<Value>,
    body: Option<Value>,
    response: Value,
    extra_codes: &[&str],
) -> Value {
    let mut m = Map::new();
    m.insert(
        "tags".into(),
        json!([if rd.group.is_empty() {
            "core_v1".to_string()
        } else {
            format!("{}_{}", rd.group.replace('.', "_"), rd.version)
        }]),
    );
    m.insert("description".into(), json!(format!("{action} {}", rd.kind)));
    m.insert("operationId".into(), json!(op_id));
    if !params.is_empty() {
        m.insert("parameters".into(), Value::Array(params));
    }
    if let Some(b) = body {
        m.insert("requestBody".into(), b);
    }
    let mut responses = Map::new();
    responses.insert("200".into(), json!({"description": "OK", "content": content(response.clone())}));
    for code in extra_codes {
        responses.insert(code.to_string(), json!({"description": if *code == "201" { "Created" } else { "Accepted" }, "content": content(response.clone())}));
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    m.insert("responses".into(), Value::Object(responses));
    m.insert("x-kubernetes-action".into(), json!(action));
    m.insert(
        "x-kubernetes-group-version-kind".into(),
        json!({"group": gvk_kind.0, "version": gvk_kind.1, "kind": gvk_kind.2}),
    );
    Value::Object(m)
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut p = vec![
        query_param("dryRun", "When present, indicates that modifications should not be persisted.", "string"),
        query_param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
            "string",
        ),
        query_param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
            "string",
        ),
    ];
    if patch {
        p.push(query_param("force", "Force is going to \"force\" Apply requests.", "boolean"));
    }
    p
}

fn patch_body(strategic: bool) -> Value {
    let mut c = Map::new();
    c.insert("application/apply-patch+yaml".into(), json!({"schema": schema_ref(PATCH)}));
    c.insert("application/json-patch+json".into(), json!({"schema": schema_ref(PATCH)}));
    c.insert("application/merge-patch+json".into(), json!({"schema": schema_ref(PATCH)}));
    if strategic {
        c.insert("application/strategic-merge-patch+json".into(), json!({"schema": schema_ref(PATCH)}));
    }
    json!({"content": Value::Object(c), "required": true})
}

fn add_resource_paths(rd: &ResourceDef, paths: &mut Map<String, Value>) {
    let base =
        if rd.group.is_empty() { format!("/api/{}", rd.version) } else { format!("/apis/{}/{}", rd.group, rd.version) };
    let kind_ref = schema_ref(&kind_schema_name(rd));
    let list_ref = schema_ref(&list_schema_name(rd));
    let gvk = (rd.group.as_str(), rd.version.as_str(), rd.kind.as_str());
    let strategic = !rd.is_custom();
    let ns_param = json!({"name": "namespace", "in": "path", "description": "object name and auth scope, such as for teams and projects", "required": true, "schema": {"type": "string", "uniqueItems": true}});
    let name_param = |what: &str| json!({"name": "name", "in": "path", "description": format!("name of the {what}"), "required": true, "schema": {"type": "string", "uniqueItems": true}});
    let prefix = if rd.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", rd.plural)
    } else {
        format!("{base}/{}", rd.plural)
    };
    let ns = rd.namespaced;
    let list_params = vec![
        query_param("labelSelector", "A selector to restrict the list of returned objects by their labels.", "string"),
        query_param("fieldSelector", "A selector to restrict the list of returned objects by their fields.", "string"),
        query_param("limit", "limit is a maximum number of responses to return for a list call.", "integer"),
        query_param(
            "continue",
            "The continue option should be set when retrieving more results from the server.",
            "string",
        ),
        query_param(
            "resourceVersion",
            "resourceVersion sets a constraint on what resource versions a request may be served from.",
            "string",
        ),
        query_param(
            "watch",
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
            "boolean",
        ),
    ];

    let mut collection = Map::new();
    if rd.has_verb("list") {
        collection.insert(
            "get".into(),
            operation("list", rd, gvk, op_id("list", rd, ns, ""), list_params.clone(), None, list_ref.clone(), &[]),
        );
    }
    if rd.has_verb("create") {
        collection.insert(
            "post".into(),
            operation(
                "post",
                rd,
                gvk,
                op_id("create", rd, ns, ""),
                write_params(false),
                Some(json!({"content": content(kind_ref.clone()), "required": true})),
                kind_ref.clone(),
                &["201", "202"],
            ),
        );
    }
    if rd.has_verb("deletecollection") {
        collection.insert(
            "delete".into(),
            operation(
                "deletecollection",
                rd,
                gvk,
                op_id("deletecollection", rd, ns, ""),
                list_params.clone(),
                Some(json!({"content": content(schema_ref(DELETE_OPTIONS))})),
                schema_ref(STATUS),
                &[],
            ),
        );
    }
    if !collection.is_empty() {
        if ns {
            collection.insert("parameters".into(), json!([ns_param.clone()]));
        }
        paths.insert(prefix.clone(), Value::Object(collection));
    }
    if ns && rd.has_verb("list") {
        paths.insert(
            format!("{base}/{}", rd.plural),
            json!({"get": operation("list", rd, gvk, format!("{}ForAllNamespaces", op_id("list", rd, false, "")), list_params, None, list_ref, &[])}),
        );
    }
    let mut item = Map::new();
    if rd.has_verb("get") {
        item.insert(
            "get".into(),
            operation("get", rd, gvk, op_id("read", rd, ns, ""), vec![], None, kind_ref.clone(), &[]),
        );
    }
    if rd.has_verb("update") {
        item.insert(
            "put".into(),
            operation(
                "put",
                rd,
                gvk,
                op_id("replace", rd, ns, ""),
                write_params(false),
                Some(json!({"content": content(kind_ref.clone()), "required": true})),
                kind_ref.clone(),
                &["201"],
            ),
        );
    }
    if rd.has_verb("patch") {
        item.insert(
            "patch".into(),
            operation(
                "patch",
                rd,
                gvk,
                op_id("patch", rd, ns, ""),
                write_params(true),
                Some(patch_body(strategic)),
                kind_ref.clone(),
                &["201"],
            ),
        );
    }
    if rd.has_verb("delete") {
        item.insert(
            "delete".into(),
            operation(
                "delete",
                rd,
                gvk,
                op_id("delete", rd, ns, ""),
                vec![
                    query_param(
                        "gracePeriodSeconds",
                        "The duration in seconds before the object should be deleted.",
                        "integer",
                    ),
                    query_param("propagationPolicy", "Whether and how garbage collection will be performed.", "string"),
                ],
                Some(json!({"content": content(schema_ref(DELETE_OPTIONS))})),
                schema_ref(STATUS),
                &["202"],
            ),
        );
    }
    let mut params = vec![name_param(&rd.kind)];
    if ns {
        params.push(ns_param.clone());
    }
    if !item.is_empty() {
        item.insert("parameters".into(), Value::Array(params.clone()));
        paths.insert(format!("{prefix}/{{name}}"), Value::Object(item));
    }
    let mut subresource = |sub: &str, response: Value, gvk_sub: (&str, &str, &str), verbs: &[&str], strategic: bool| {
        let mut m = Map::new();
        let suffix = {
            let mut c = sub.chars();
            c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
        };
        if verbs.contains(&"get") {
            m.insert(
                "get".into(),
                operation("get", rd, gvk_sub, op_id("read", rd, ns, &suffix), vec![], None, response.clone(), &[]),
            );
        }
        if verbs.contains(&"update") {
            m.insert(
                "put".into(),
                operation(
                    "put",
                    rd,
                    gvk_sub,
                    op_id("replace", rd, ns, &suffix),
                    write_params(false),
                    Some(json!({"content": content(response.clone()), "required": true})),
                    response.clone(),
                    &["201"],
                ),
            );
        }
        if verbs.contains(&"patch") {
            m.insert(
                "patch".into(),
                operation(
                    "patch",
                    rd,
                    gvk_sub,
                    op_id("patch", rd, ns, &suffix),
                    write_params(true),
                    Some(patch_body(strategic)),
                    response.clone(),
                    &["201"],
                ),
            );
        }
        if verbs.contains(&"create") {
            m.insert(
                "post".into(),
                operation(
                    "post",
                    rd,
                    gvk_sub,
                    op_id("create", rd, ns, &suffix),
                    write_params(false),
                    Some(json!({"content": content(response.clone()), "required": true})),
                    response.clone(),
                    &["201", "202"],
                ),
            );
        }
        m.insert("parameters".into(), Value::Array(params.clone()));
        paths.insert(format!("{prefix}/{{name}}/{sub}"), Value::Object(m));
    };
    if rd.status_subresource {
        subresource("status", kind_ref.clone(), gvk, &["get", "update", "patch"], strategic);
    }
    if rd.scale.is_some() {
        subresource("scale", schema_ref(SCALE), ("autoscaling", "v1", "Scale"), &["get", "update", "patch"], true);
    }
    for (sub, verbs) in &rd.extra_subresources {
        if *sub == "binding" {
            subresource("binding", schema_ref(BINDING), ("", "v1", "Binding"), verbs, true);
        }
        if *sub == "token" {
            subresource(
                "token",
                schema_ref(TOKEN_REQUEST),
                ("authentication.k8s.io", "v1", "TokenRequest"),
                verbs,
                true,
            );
        }
    }
}

/// A group-version document (`api/v1`, `apis/apps/v1`...).
pub(crate) fn group_version_doc(catalog: &Catalog, gv_path: &str) -> Option<Value> {
    let (group, version) = match gv_path.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let defs: Vec<Arc<ResourceDef>> =
        catalog.all().into_iter().filter(|d| d.group == group && d.version == version).collect();
    if defs.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut roots: Vec<String> = vec![OBJECT_META.into(), LIST_META.into(), STATUS.into(), DELETE_OPTIONS.into()];
    let mut schemas: BTreeMap<String, Value> = BTreeMap::new();
    let mut sorted = defs;
    sorted.sort_by(|a, b| a.plural.cmp(&b.plural));
    for rd in &sorted {
        add_resource_paths(rd, &mut paths);
        match &rd.definition {
            Some(d) => {
                roots.push(d.clone());
                if rd.has_verb("list") {
                    schemas.insert(list_schema_name(rd), list_schema(rd));
                }
            }
            None => {
                schemas.insert(kind_schema_name(rd), custom_schema(rd));
                schemas.insert(list_schema_name(rd), list_schema(rd));
            }
        }
        if rd.scale.is_some() {
            roots.push(SCALE.into());
        }
        if rd.extra_subresources.iter().any(|(s, _)| *s == "binding") {
            roots.push(BINDING.into());
        }
        if rd.extra_subresources.iter().any(|(s, _)| *s == "token") {
            roots.push(TOKEN_REQUEST.into());
        }
    }
    let mut components = builtin_closure(&roots);
    components.extend(schemas);
    components.insert(PATCH.into(), json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}));
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::version::GIT_VERSION},
        "paths": Value::Object(paths),
        "components": {
            "schemas": components,
            "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        },
    }))
}

fn hash_of(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02X}")).collect()
}

/// Caches serialized documents per catalog generation (they are large and kubectl fetches
/// them on every invocation).
/// Catalog generation and, per group-version path, the document's hash and bytes.
type Documents = (u64, HashMap<String, (String, Arc<Vec<u8>>)>);

#[derive(Default)]
pub(crate) struct OpenApiCache {
    inner: Mutex<Documents>,
}

impl OpenApiCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Documents> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The serialized document and its hash.
    pub(crate) fn document(&self, catalog: &Catalog, gv_path: &str) -> Option<(String, Arc<Vec<u8>>)> {
        let generation = catalog.generation();
        {
            let mut g = self.lock();
            if g.0 != generation {
                g.0 = generation;
                g.1.clear();
            }
            if let Some(hit) = g.1.get(gv_path) {
                return Some(hit.clone());
            }
        }
        let doc = group_version_doc(catalog, gv_path)?;
        let bytes = Arc::new(serde_json::to_vec(&doc).ok()?);
        let entry = (hash_of(&bytes), bytes);
        let mut g = self.lock();
        if g.0 == generation {
            g.1.insert(gv_path.to_string(), entry.clone());
        }
        Some(entry)
    }

    /// `/openapi/v3`: every group-version with its content hash.
    pub(crate) fn root(&self, catalog: &Catalog) -> Value {
        let mut paths = Map::new();
        let mut gvs: BTreeSet<String> = BTreeSet::new();
        for g in catalog.groups() {
            for (v, _) in &g.versions {
                gvs.insert(if g.name.is_empty() { format!("api/{v}") } else { format!("apis/{}/{v}", g.name) });
            }
        }
        for gv in gvs {
            if let Some((hash, _)) = self.document(catalog, &gv) {
                paths.insert(gv.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={hash}")}));
            }
        }
        json!({"paths": Value::Object(paths)})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_v1_document_advertises_field_validation_and_strategic_merge() {
        let c = Catalog::new();
        let doc = group_version_doc(&c, "apis/apps/v1").unwrap();
        let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Deployment");
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        assert!(patch["requestBody"]["content"].get("application/strategic-merge-patch+json").is_some());
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        assert!(schemas.contains_key("io.k8s.api.apps.v1.Deployment"));
        assert!(schemas.contains_key("io.k8s.api.core.v1.PodSpec"));
        let s = serde_json::to_string(&doc).unwrap();
        assert!(!s.contains("#/$defs/"));
    }
}
