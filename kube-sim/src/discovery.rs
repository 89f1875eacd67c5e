//! API discovery documents: legacy (`APIVersions`, `APIGroupList`, `APIGroup`,
//! `APIResourceList`) and aggregated (`apidiscovery.k8s.io/v2` and `v2beta1`
//! `APIGroupDiscoveryList`, which kubectl 1.32 asks for first).

use serde_json::{Map, Value, json};

use crate::resources::{Catalog, ResourceDef};

const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() { version.to_string() } else { format!("{group}/{version}") }
}

pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": group_version(name, v), "version": v})).collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

pub(crate) fn api_group_list(catalog: &Catalog) -> Value {
    let groups: Vec<Value> = catalog
        .groups()
        .into_iter()
        .filter(|g| !g.name.is_empty())
        .map(|g| group_entry(&g.name, &g.versions.iter().map(|(v, _)| v.clone()).collect::<Vec<_>>()))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn api_group(catalog: &Catalog, name: &str) -> Option<Value> {
    let g = catalog.groups().into_iter().find(|g| g.name == name && !name.is_empty())?;
    let mut v = group_entry(&g.name, &g.versions.iter().map(|(v, _)| v.clone()).collect::<Vec<_>>());
    if let Value::Object(m) = &mut v {
        m.insert("kind".into(), json!("APIGroup"));
        m.insert("apiVersion".into(), json!("v1"));
    }
    Some(v)
}

/// The aggregator's `groupPriorityMinimum` and `versionPriority` of a built-in group version (kube-apiserver's
/// `apiVersionPriorities`); `None` for group versions it registers no APIService for.
fn api_service_priority(group: &str, version: &str) -> Option<(i64, i64)> {
    Some(match (group, version) {
        ("", "v1") => (18000, 1),
        ("apps", "v1") => (17800, 15),
        ("events.k8s.io", "v1") => (17750, 15),
        ("authentication.k8s.io", "v1") => (17700, 15),
        ("authorization.k8s.io", "v1") => (17600, 15),
        ("autoscaling", "v1") => (17500, 15),
        ("autoscaling", "v2") => (17500, 30),
        ("batch", "v1") => (17400, 15),
        ("certificates.k8s.io", "v1") => (17300, 15),
        ("networking.k8s.io", "v1") => (17200, 15),
        ("policy", "v1") => (17100, 15),
        ("rbac.authorization.k8s.io", "v1") => (17000, 15),
        ("storage.k8s.io", "v1") => (16800, 15),
        ("apiextensions.k8s.io", "v1") | ("admissionregistration.k8s.io", "v1") => (16700, 15),
        ("scheduling.k8s.io", "v1") => (16600, 15),
        ("coordination.k8s.io", "v1") => (16500, 15),
        ("node.k8s.io", "v1") => (16300, 15),
        ("discovery.k8s.io", "v1") => (16200, 15),
        _ => return None,
    })
}

/// A local APIService (no `service`: served by kube-apiserver itself), `Available` as the availability controller
/// marks local ones; `automanaged` is `onstart` for built-in group versions, `true` for CRD ones.
fn local_api_service(group: &str, version: &str, priorities: (i64, i64), automanaged: &str) -> Value {
    let mut spec = Map::new();
    if !group.is_empty() {
        spec.insert("group".into(), json!(group));
    }
    spec.insert("version".into(), json!(version));
    spec.insert("groupPriorityMinimum".into(), json!(priorities.0));
    spec.insert("versionPriority".into(), json!(priorities.1));
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": format!("{version}.{group}"), "labels": {"kube-aggregator.kubernetes.io/automanaged": automanaged}},
        "spec": spec,
        "status": {"conditions": [{"type": "Available", "status": "True", "lastTransitionTime": crate::meta::now(),
            "reason": "Local", "message": "Local APIServices are always available"}]},
    })
}

/// The APIServices the aggregator registers at start for the group versions kube-apiserver serves itself
/// (`v1.`, `v1.apps`, ...), with its priorities. The aggregator's own group is not among them.
pub(crate) fn local_api_services(catalog: &Catalog) -> Vec<Value> {
    let mut out = Vec::new();
    for g in catalog.groups() {
        for (version, _) in &g.versions {
            if let Some(priorities) = api_service_priority(&g.name, version) {
                out.push(local_api_service(&g.name, version, priorities, "onstart"));
            }
        }
    }
    out
}

/// The APIServices the CRD registration controller keeps for the group versions custom resources are served at
/// (`groupPriorityMinimum` 1000, `versionPriority` 100).
pub(crate) fn crd_api_services(catalog: &Catalog) -> Vec<Value> {
    let mut out = Vec::new();
    for g in catalog.groups() {
        for (version, defs) in &g.versions {
            if defs.iter().any(|d| d.is_custom()) {
                out.push(local_api_service(&g.name, version, (1000, 100), "true"));
            }
        }
    }
    out
}

/// A stable hash of a resource's identity, as `storageVersionHash` (clients only compare it).
fn storage_version_hash(rd: &ResourceDef) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{}/{}/{}", rd.group, rd.storage_api_version, rd.kind).as_bytes());
    data_encoding::BASE64.encode(&digest[..8])
}

/// `(name, (group, version, kind) of its response if not the resource's own, verbs)`.
type Subresource = (String, Option<(String, String, String)>, Vec<&'static str>);

fn subresources(rd: &ResourceDef) -> Vec<Subresource> {
    let mut out = Vec::new();
    if rd.status_subresource {
        out.push(("status".to_string(), None, STATUS_VERBS.to_vec()));
    }
    if rd.scale.is_some() {
        out.push((
            "scale".to_string(),
            Some(("autoscaling".into(), "v1".into(), "Scale".into())),
            STATUS_VERBS.to_vec(),
        ));
    }
    for (name, verbs) in &rd.extra_subresources {
        let kind = match *name {
            "binding" => Some(("".into(), "v1".into(), "Binding".into())),
            "token" => Some(("authentication.k8s.io".into(), "v1".into(), "TokenRequest".into())),
            "eviction" => Some(("policy".into(), "v1".into(), "Eviction".into())),
            _ => None,
        };
        out.push((name.to_string(), kind, verbs.clone()));
    }
    out
}

pub(crate) fn api_resource_list(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    let g = catalog.groups().into_iter().find(|g| g.name == group)?;
    let (_, defs) = g.versions.into_iter().find(|(v, _)| v == version)?;
    let mut resources = Vec::new();
    for rd in defs {
        let mut m = Map::new();
        m.insert("name".into(), json!(rd.plural));
        m.insert("singularName".into(), json!(rd.singular));
        m.insert("namespaced".into(), json!(rd.namespaced));
        m.insert("kind".into(), json!(rd.kind));
        m.insert("verbs".into(), json!(rd.verbs));
        if !rd.short_names.is_empty() {
            m.insert("shortNames".into(), json!(rd.short_names));
        }
        if !rd.categories.is_empty() {
            m.insert("categories".into(), json!(rd.categories));
        }
        if rd.has_verb("list") {
            m.insert("storageVersionHash".into(), json!(storage_version_hash(&rd)));
        }
        resources.push(Value::Object(m));
        for (sub, kind, verbs) in subresources(&rd) {
            let mut s = Map::new();
            s.insert("name".into(), json!(format!("{}/{sub}", rd.plural)));
            s.insert("singularName".into(), json!(""));
            s.insert("namespaced".into(), json!(rd.namespaced));
            match kind {
                Some((g, v, k)) => {
                    if !g.is_empty() || g != rd.group {
                        s.insert("group".into(), json!(g));
                        s.insert("version".into(), json!(v));
                    }
                    s.insert("kind".into(), json!(k));
                }
                None => {
                    s.insert("kind".into(), json!(rd.kind));
                }
            }
            s.insert("verbs".into(), json!(verbs));
            resources.push(Value::Object(s));
        }
    }
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version(group, version), "resources": resources}),
    )
}

/// `APIGroupDiscoveryList` for `/api` (`core = true`) or `/apis`.
pub(crate) fn aggregated(catalog: &Catalog, core: bool, api_version: &str) -> Value {
    let items: Vec<Value> = catalog
        .groups()
        .into_iter()
        .filter(|g| g.name.is_empty() == core)
        .map(|g| {
            let versions: Vec<Value> = g
                .versions
                .iter()
                .map(|(v, defs)| {
                    let resources: Vec<Value> = defs
                        .iter()
                        .map(|rd| {
                            let mut m = Map::new();
                            m.insert("resource".into(), json!(rd.plural));
                            m.insert("responseKind".into(), json!({"group": rd.group, "version": rd.version, "kind": rd.kind}));
                            m.insert("scope".into(), json!(if rd.namespaced { "Namespaced" } else { "Cluster" }));
                            m.insert("singularResource".into(), json!(rd.singular));
                            m.insert("verbs".into(), json!(rd.verbs));
                            if !rd.short_names.is_empty() {
                                m.insert("shortNames".into(), json!(rd.short_names));
                            }
                            if !rd.categories.is_empty() {
                                m.insert("categories".into(), json!(rd.categories));
                            }
                            let subs: Vec<Value> = subresources(rd)
                                .into_iter()
                                .map(|(sub, kind, verbs)| {
                                    let (g2, v2, k2) = kind.unwrap_or((rd.group.clone(), rd.version.clone(), rd.kind.clone()));
                                    json!({"subresource": sub, "responseKind": {"group": g2, "version": v2, "kind": k2}, "verbs": verbs})
                                })
                                .collect();
                            if !subs.is_empty() {
                                m.insert("subresources".into(), Value::Array(subs));
                            }
                            Value::Object(m)
                        })
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g.name, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{api_version}"), "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_has_subresources() {
        let c = Catalog::new();
        let l = api_resource_list(&c, "", "v1").unwrap();
        let names: Vec<&str> = l["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"pods"));
        assert!(names.contains(&"pods/status"));
        assert!(names.contains(&"pods/binding"));
        assert!(names.contains(&"namespaces/finalize"));
        let apps = api_resource_list(&c, "apps", "v1").unwrap();
        let scale = apps["resources"].as_array().unwrap().iter().find(|r| r["name"] == "deployments/scale").unwrap();
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["group"], "autoscaling");
        let agg = aggregated(&c, false, "v2");
        assert!(agg["items"].as_array().unwrap().iter().any(|g| g["metadata"]["name"] == "apps"));
    }
}
