//! Request parsing: the path grammar of `k8s.io/apiserver/pkg/endpoints/request.RequestInfoFactory`,
//! query parameters, and content negotiation (JSON, YAML, Table, PartialObjectMetadata,
//! aggregated discovery).

use hyper::Method;

/// A request for a resource (as opposed to discovery, health, OpenAPI...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResourceRequest {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// `/api/v1/watch/...` (deprecated path form of `?watch=true`).
    pub legacy_watch: bool,
}

/// Splits a resource path, or returns `None` when the path is not under `/api/v1` or `/apis/g/v`
/// with at least a resource segment.
pub(crate) fn parse_resource_path(path: &str) -> Option<ResourceRequest> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    let (group, version, mut rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest.to_vec()),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest.to_vec()),
        _ => return None,
    };
    if rest.is_empty() {
        return None;
    }
    let mut legacy_watch = false;
    if rest[0] == "watch" {
        legacy_watch = true;
        rest.remove(0);
        if rest.is_empty() {
            return None;
        }
    }
    let mut namespace = None;
    if rest[0] == "namespaces" && rest.len() > 1 {
        namespace = Some(rest[1].to_string());
        if rest.len() > 2 && rest[2] != "status" && rest[2] != "finalize" {
            rest = rest[2..].to_vec();
        }
    }
    let resource = rest[0].to_string();
    let name = rest.get(1).map(|s| s.to_string());
    let subresource = rest.get(2).map(|s| s.to_string());
    if rest.len() > 3 {
        return None;
    }
    // `/api/v1/namespaces/foo` names the namespace object itself (cluster scoped).
    if resource == "namespaces" {
        namespace = None;
    }
    Some(ResourceRequest { group, version, namespace, resource, name, subresource, legacy_watch })
}

/// Decodes `application/x-www-form-urlencoded` query strings.
pub(crate) fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Query parameters with typed accessors.
#[derive(Clone, Debug, Default)]
pub(crate) struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub(crate) fn parse(q: Option<&str>) -> Self {
        Self { pairs: q.map(parse_query).unwrap_or_default() }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub(crate) fn all(&self, key: &str) -> Vec<&str> {
        self.pairs.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect()
    }

    pub(crate) fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | "True"))
    }

    pub(crate) fn int(&self, key: &str) -> Result<Option<i64>, String> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| format!("invalid value {v:?} for {key}")),
        }
    }
}

/// The representation a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Representation {
    Json,
    Yaml,
    Table,
    PartialObjectMetadata,
    PartialObjectMetadataList,
    /// Aggregated discovery, with the apidiscovery version (`v2` or `v2beta1`).
    Discovery(String),
    Protobuf,
}

#[derive(Clone, Debug)]
struct MediaType {
    base: String,
    params: Vec<(String, String)>,
}

fn parse_media_types(accept: &str) -> Vec<MediaType> {
    accept
        .split(',')
        .map(|m| {
            let mut parts = m.split(';');
            let base = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let params = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_string()))
                .collect();
            MediaType { base, params }
        })
        .collect()
}

/// Picks the first representation of the `Accept` header kube-sim can produce.
pub(crate) fn negotiate(accept: Option<&str>) -> Option<Representation> {
    let accept = accept.unwrap_or("application/json");
    if accept.trim().is_empty() {
        return Some(Representation::Json);
    }
    for mt in parse_media_types(accept) {
        let param = |k: &str| mt.params.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.as_str());
        let json_like = mt.base == "application/json" || mt.base == "*/*" || mt.base == "application/*";
        match (json_like || mt.base == "application/yaml", param("as")) {
            (true, Some("Table"))
                if param("g") == Some("meta.k8s.io") && matches!(param("v"), Some("v1" | "v1beta1")) =>
            {
                return Some(Representation::Table);
            }
            (true, Some("PartialObjectMetadata")) if param("g") == Some("meta.k8s.io") => {
                return Some(Representation::PartialObjectMetadata);
            }
            (true, Some("PartialObjectMetadataList")) if param("g") == Some("meta.k8s.io") => {
                return Some(Representation::PartialObjectMetadataList);
            }
            (true, Some("APIGroupDiscoveryList")) if param("g") == Some("apidiscovery.k8s.io") => {
                if let Some(v @ ("v2" | "v2beta1")) = param("v") {
                    return Some(Representation::Discovery(v.to_string()));
                }
            }
            (true, Some(_)) => continue,
            (true, None) if mt.base == "application/yaml" => return Some(Representation::Yaml),
            (true, None) => return Some(Representation::Json),
            _ => {}
        }
        if mt.base == "application/vnd.kubernetes.protobuf" && param("as").is_none() {
            // Only acceptable when nothing else is offered; kube-sim answers JSON otherwise.
            continue;
        }
    }
    let only_protobuf = parse_media_types(accept).iter().all(|m| m.base.contains("protobuf"));
    if only_protobuf { Some(Representation::Protobuf) } else { None }
}

/// The verb of a resource request, as authorization and fault injection see it.
pub(crate) fn verb_for(method: &Method, has_name: bool, watch: bool) -> &'static str {
    match *method {
        Method::GET | Method::HEAD => {
            if watch {
                "watch"
            } else if has_name {
                "get"
            } else {
                "list"
            }
        }
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => {
            if has_name {
                "delete"
            } else {
                "deletecollection"
            }
        }
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let r = parse_resource_path("/api/v1/namespaces/default/pods/web-1/status").unwrap();
        assert_eq!(
            (r.namespace.as_deref(), r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            (Some("default"), "pods", Some("web-1"), Some("status"))
        );
        let r = parse_resource_path("/api/v1/namespaces/default").unwrap();
        assert_eq!((r.namespace, r.resource.as_str(), r.name.as_deref()), (None, "namespaces", Some("default")));
        let r = parse_resource_path("/api/v1/namespaces/default/finalize").unwrap();
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            ("namespaces", Some("default"), Some("finalize"))
        );
        let r = parse_resource_path("/apis/apps/v1/deployments").unwrap();
        assert_eq!((r.group.as_str(), r.namespace, r.name), ("apps", None, None));
        let r = parse_resource_path("/api/v1/watch/namespaces/x/pods").unwrap();
        assert!(r.legacy_watch);
        assert_eq!(r.namespace.as_deref(), Some("x"));
        assert!(parse_resource_path("/apis/apps/v1").is_none());
    }

    #[test]
    fn negotiation() {
        assert_eq!(
            negotiate(Some(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            )),
            Some(Representation::Table)
        );
        assert_eq!(
            negotiate(Some(
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
            )),
            Some(Representation::Discovery("v2".into()))
        );
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf, */*")), Some(Representation::Json));
        assert_eq!(negotiate(Some("application/yaml")), Some(Representation::Yaml));
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf")), Some(Representation::Protobuf));
        assert_eq!(negotiate(Some("text/html")), None);
    }

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&watch=1&limit=5"));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a)"));
        assert!(q.flag("watch"));
        assert_eq!(q.int("limit").unwrap(), Some(5));
    }
}
