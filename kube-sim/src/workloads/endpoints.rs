//! The endpoint controllers (`pkg/controller/endpoint`, `pkg/controller/endpointslice`): for a
//! Service with a selector, the matching pods that have an IP become its `Endpoints` (ready
//! pods in `addresses`, unready ones in `notReadyAddresses`, terminating ones left out) and its
//! `EndpointSlices` (every pod with its `ready`/`serving`/`terminating` conditions, as v1.26+
//! write them: a terminating pod is `ready: false, serving: <ready>, terminating: true`).
//! Services without a selector are left to their owners, as on a cluster (the controller's own
//! slices of a Service that lost its selector go, so routing follows hand-written Endpoints).
//!
//! The run loop ([`super`]) applies a pod's change to its Services only after the configured
//! propagation delay, so tests can model the moment a real cluster takes to withdraw an endpoint.
//! `crate::routing` reads the slices written here to reach a Service, as kube-proxy routes.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{io, pods};
use crate::meta;
use crate::registry::Registry;
use crate::store::object_key;

use crate::routing::SERVICE_NAME_LABEL;
pub(crate) const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub(crate) const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
const MANAGER: &str = "endpoint-controller";
const SLICE_MANAGER: &str = "endpointslice-controller";

/// One port of an endpoint: the Service port's name, the pod's port, the protocol.
pub(crate) type Port = (String, i64, String);

/// A pod behind a Service.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Member {
    pub ip: String,
    pub pod: String,
    pub uid: String,
    pub node: String,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// The Service's ports as this pod serves them.
    pub ports: Vec<Port>,
}

/// The Service's selector as labels (`None`: no selector, the controllers leave it alone).
pub(crate) fn selector(svc: &Value) -> Option<BTreeMap<String, String>> {
    if meta::lookup(svc, &["spec", "type"]).and_then(Value::as_str) == Some("ExternalName") {
        return None;
    }
    let sel = meta::lookup(svc, &["spec", "selector"])?.as_object()?;
    let map: BTreeMap<String, String> =
        sel.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect();
    (!map.is_empty()).then_some(map)
}

pub(crate) fn selects(selector: &BTreeMap<String, String>, pod: &Value) -> bool {
    let labels = meta::labels(pod);
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)).and_then(Value::as_str) == Some(v.as_str()))
}

/// `FindPort`: a numeric `targetPort` as is, a named one from the pod's container ports, none as
/// the Service port itself.
fn target_port(service_port: &Value, pod: &Value) -> Option<i64> {
    match service_port.get("targetPort") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(name)) => {
            if let Ok(n) = name.parse::<i64>() {
                return Some(n);
            }
            let protocol = service_port.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            meta::lookup(pod, &["spec", "containers"]).and_then(Value::as_array).into_iter().flatten().find_map(|c| {
                c.get("ports").and_then(Value::as_array).into_iter().flatten().find_map(|p| {
                    (p.get("name").and_then(Value::as_str) == Some(name)
                        && p.get("protocol").and_then(Value::as_str).unwrap_or("TCP") == protocol)
                        .then(|| p.get("containerPort").and_then(Value::as_i64))
                        .flatten()
                })
            })
        }
        _ => service_port.get("port").and_then(Value::as_i64),
    }
}

/// The pods behind the Service (`ShouldPodBeInEndpoints` with terminating pods included, and
/// `podToEndpoint`'s conditions).
pub(crate) fn members(svc: &Value, pods: &[Arc<Value>]) -> Vec<Member> {
    let Some(sel) = selector(svc) else { return vec![] };
    let publish_not_ready =
        meta::lookup(svc, &["spec", "publishNotReadyAddresses"]).and_then(Value::as_bool) == Some(true);
    let service_ports = meta::lookup(svc, &["spec", "ports"]).and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out: Vec<Member> = pods
        .iter()
        .filter(|p| meta::namespace(p) == meta::namespace(svc) && selects(&sel, p))
        .filter(|p| !matches!(pods::phase(p), "Succeeded" | "Failed"))
        .filter_map(|p| {
            let ip = pods::pod_ip(p)?.to_string();
            let serving = publish_not_ready || pods::is_ready(p);
            let terminating = meta::deletion_timestamp(p).is_some();
            let ports = service_ports
                .iter()
                .filter_map(|sp| {
                    let name = sp.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                    let protocol = sp.get("protocol").and_then(Value::as_str).unwrap_or("TCP").to_string();
                    target_port(sp, p).map(|port| (name, port, protocol))
                })
                .collect();
            Some(Member {
                ip,
                pod: meta::name(p).to_string(),
                uid: meta::uid(p).to_string(),
                node: pods::node_name(p).to_string(),
                ready: publish_not_ready || (serving && !terminating),
                serving,
                terminating,
                ports,
            })
        })
        .collect();
    out.sort_by(|a, b| a.ip.cmp(&b.ip).then_with(|| a.pod.cmp(&b.pod)));
    out
}

fn target_ref(m: &Member, ns: &str) -> Value {
    json!({"kind": "Pod", "namespace": ns, "name": m.pod, "uid": m.uid})
}

fn ports_json(ports: &[Port]) -> Value {
    Value::Array(
        ports.iter().map(|(name, port, protocol)| json!({"name": name, "port": port, "protocol": protocol})).collect(),
    )
}

/// Members grouped by the ports they serve (`RepackSubsets`, and one slice per port set).
fn by_ports(members: &[Member]) -> BTreeMap<Vec<Port>, Vec<&Member>> {
    let mut groups: BTreeMap<Vec<Port>, Vec<&Member>> = BTreeMap::new();
    for m in members {
        groups.entry(m.ports.clone()).or_default().push(m);
    }
    groups
}

/// The `subsets` of the Service's Endpoints: terminating pods are left out (unless the Service
/// publishes not-ready addresses), unready ones go to `notReadyAddresses`.
pub(crate) fn subsets(svc: &Value, members: &[Member]) -> Value {
    let ns = meta::namespace(svc);
    let publish_not_ready =
        meta::lookup(svc, &["spec", "publishNotReadyAddresses"]).and_then(Value::as_bool) == Some(true);
    let kept: Vec<Member> = members.iter().filter(|m| publish_not_ready || !m.terminating).cloned().collect();
    let mut out = Vec::new();
    for (ports, group) in by_ports(&kept) {
        if ports.is_empty() {
            continue;
        }
        let address = |m: &Member| {
            let mut a = json!({"ip": m.ip, "targetRef": target_ref(m, ns)});
            if !m.node.is_empty() {
                a["nodeName"] = json!(m.node);
            }
            a
        };
        let ready: Vec<Value> = group.iter().filter(|m| m.ready).map(|m| address(m)).collect();
        let not_ready: Vec<Value> = group.iter().filter(|m| !m.ready).map(|m| address(m)).collect();
        let mut subset = json!({"ports": ports_json(&ports)});
        if !ready.is_empty() {
            subset["addresses"] = Value::Array(ready);
        }
        if !not_ready.is_empty() {
            subset["notReadyAddresses"] = Value::Array(not_ready);
        }
        out.push(subset);
    }
    Value::Array(out)
}

/// The `(ports, endpoints)` of each EndpointSlice the Service should have; a Service with no
/// endpoints keeps one empty slice, as the controller's placeholder.
pub(crate) fn slices(svc: &Value, members: &[Member]) -> Vec<(Value, Value)> {
    let ns = meta::namespace(svc);
    let out: Vec<(Value, Value)> = by_ports(members)
        .into_iter()
        .map(|(ports, group)| {
            let endpoints = group
                .iter()
                .map(|m| {
                    let mut e = json!({"addresses": [m.ip],
                        "conditions": {"ready": m.ready, "serving": m.serving, "terminating": m.terminating},
                        "targetRef": target_ref(m, ns)});
                    if !m.node.is_empty() {
                        e["nodeName"] = json!(m.node);
                    }
                    e
                })
                .collect();
            (ports_json(&ports), Value::Array(endpoints))
        })
        .collect();
    if out.is_empty() { vec![(Value::Null, json!([]))] } else { out }
}

fn labels_for(svc: &Value, extra: &[(&str, &str)]) -> Value {
    let mut labels = meta::labels(svc).cloned().unwrap_or_default();
    for (k, v) in extra {
        labels.insert(k.to_string(), json!(v));
    }
    if meta::lookup(svc, &["spec", "clusterIP"]).and_then(Value::as_str) == Some("None") {
        labels.insert("service.kubernetes.io/headless".into(), json!(""));
    }
    Value::Object(labels)
}

/// Brings the Service's Endpoints and EndpointSlices in line with its pods.
/// `pods` are the namespace's pods as the controller sees them (after the propagation delay).
pub(crate) fn sync(registry: &Registry, ns: &str, name: &str, pods: &[Arc<Value>]) {
    let Some(slice_storage) =
        registry.catalog.get("discovery.k8s.io", "v1", "endpointslices").map(|d| d.storage.clone())
    else {
        return;
    };
    let Some(svc) = registry.store.get("services", &object_key(ns, name)) else {
        // The Service is gone: so is its Endpoints object (slices go with their owner).
        if registry.store.get("endpoints", &object_key(ns, name)).is_some() {
            io::delete(registry, "", "v1", "endpoints", ns, name, MANAGER);
        }
        return;
    };
    if meta::deletion_timestamp(&svc).is_some() {
        return;
    }
    let managed = |s: &Arc<Value>| {
        let l = meta::labels(s);
        let label = |k: &str| l.and_then(|l| l.get(k)).and_then(Value::as_str);
        label(SERVICE_NAME_LABEL) == Some(name) && label(MANAGED_BY_LABEL) == Some(MANAGED_BY)
    };
    if selector(&svc).is_none() {
        // Its endpoints are its owner's now: the controller's slices go, so routing follows the
        // Endpoints written by hand.
        for slice in io::list(registry, &slice_storage, ns).iter().filter(|s| managed(s)) {
            io::delete(registry, "discovery.k8s.io", "v1", "endpointslices", ns, meta::name(slice), SLICE_MANAGER);
        }
        return;
    }
    let members = members(&svc, pods);
    // Endpoints.
    let subsets = subsets(&svc, &members);
    let labels = labels_for(&svc, &[]);
    match registry.store.get("endpoints", &object_key(ns, name)) {
        None => {
            let mut body = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": ns, "labels": labels}});
            if subsets.as_array().is_some_and(|s| !s.is_empty()) {
                body["subsets"] = subsets;
            }
            if let Err(e) = io::create(registry, "", "v1", "endpoints", ns, body, MANAGER)
                && e.code != 409
            {
                tracing::warn!(service = %name, error = %e.message, "could not create Endpoints");
            }
        }
        Some(_) => {
            let _ = io::update(registry, "", "endpoints", ns, name, MANAGER, |cur| {
                let mut next = cur.clone();
                match subsets.as_array().filter(|s| !s.is_empty()) {
                    Some(_) => next["subsets"] = subsets.clone(),
                    None => {
                        if let Some(m) = next.as_object_mut() {
                            m.remove("subsets");
                        }
                    }
                }
                next["metadata"]["labels"] = labels.clone();
                (next != *cur).then_some(next)
            });
        }
    }
    // EndpointSlices.
    let slice_labels = labels_for(&svc, &[(SERVICE_NAME_LABEL, name), (MANAGED_BY_LABEL, MANAGED_BY)]);
    let mut existing: Vec<Arc<Value>> = io::list(registry, &slice_storage, ns).into_iter().filter(managed).collect();
    existing.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
    let mut existing = existing.into_iter();
    for (ports, endpoints) in slices(&svc, &members) {
        let fill = |obj: &mut Value| {
            obj["addressType"] = json!("IPv4");
            obj["endpoints"] = endpoints.clone();
            match &ports {
                Value::Null => {
                    if let Some(m) = obj.as_object_mut() {
                        m.remove("ports");
                    }
                }
                p => obj["ports"] = p.clone(),
            }
            obj["metadata"]["labels"] = slice_labels.clone();
        };
        match existing.next() {
            Some(slice) => {
                let _ = io::update(
                    registry,
                    "discovery.k8s.io",
                    "endpointslices",
                    ns,
                    meta::name(&slice),
                    SLICE_MANAGER,
                    |cur| {
                        let mut next = cur.clone();
                        fill(&mut next);
                        (next != *cur).then_some(next)
                    },
                );
            }
            None => {
                let mut body = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"generateName": format!("{name}-"), "namespace": ns,
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name, "uid": meta::uid(&svc),
                                                      "controller": true, "blockOwnerDeletion": true}]}});
                fill(&mut body);
                if let Err(e) =
                    io::create(registry, "discovery.k8s.io", "v1", "endpointslices", ns, body, SLICE_MANAGER)
                {
                    tracing::warn!(service = %name, error = %e.message, "could not create an EndpointSlice");
                }
            }
        }
    }
    for extra in existing {
        io::delete(registry, "discovery.k8s.io", "v1", "endpointslices", ns, meta::name(&extra), SLICE_MANAGER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> Value {
        json!({"metadata": {"name": "web", "namespace": "default", "uid": "svc-uid", "labels": {"team": "a"}},
               "spec": {"selector": {"app": "web"}, "ports": [{"name": "https", "port": 443, "targetPort": "https"}, {"name": "metrics", "port": 8080}]}})
    }

    fn pod(name: &str, ip: Option<&str>, ready: bool, deleting: bool) -> Arc<Value> {
        let mut p = json!({"metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"), "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"name": "https", "containerPort": 9443}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if let Some(ip) = ip {
            p["status"]["podIP"] = json!(ip);
        }
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(p)
    }

    #[test]
    fn conditions_follow_readiness_and_termination() {
        let pods = [
            pod("a", Some("127.0.0.2"), true, false),
            pod("b", Some("127.0.0.3"), false, false),
            pod("c", Some("127.0.0.4"), true, true),
            pod("d", Some("127.0.0.5"), false, true),
            pod("e", None, true, false),
        ];
        let m = members(&svc(), &pods);
        let cond = |i: usize| (m[i].ready, m[i].serving, m[i].terminating);
        assert_eq!(m.len(), 4, "a pod without an IP is not an endpoint");
        assert_eq!(cond(0), (true, true, false));
        assert_eq!(cond(1), (false, false, false));
        assert_eq!(cond(2), (false, true, true), "terminating: ready false, serving as its readiness");
        assert_eq!(cond(3), (false, false, true));
        assert_eq!(m[0].ports, vec![("https".into(), 9443, "TCP".into()), ("metrics".into(), 8080, "TCP".into())]);
    }

    #[test]
    fn endpoints_leave_terminating_pods_out_and_list_unready_apart() {
        let pods = [
            pod("a", Some("127.0.0.2"), true, false),
            pod("b", Some("127.0.0.3"), false, false),
            pod("c", Some("127.0.0.4"), true, true),
        ];
        let s = subsets(&svc(), &members(&svc(), &pods));
        assert_eq!(s.as_array().unwrap().len(), 1);
        assert_eq!(s[0]["addresses"][0]["ip"], "127.0.0.2");
        assert_eq!(s[0]["notReadyAddresses"][0]["ip"], "127.0.0.3");
        assert_eq!(s[0]["addresses"].as_array().unwrap().len(), 1);
        assert_eq!(s[0]["ports"][0], json!({"name": "https", "port": 9443, "protocol": "TCP"}));
    }

    #[test]
    fn slices_carry_every_pod_and_a_placeholder_when_empty() {
        let pods = [pod("a", Some("127.0.0.2"), true, false), pod("c", Some("127.0.0.4"), true, true)];
        let s = slices(&svc(), &members(&svc(), &pods));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].1[1]["conditions"], json!({"ready": false, "serving": true, "terminating": true}));
        assert_eq!(s[0].1[1]["targetRef"]["name"], "c");
        assert_eq!(slices(&svc(), &[]), vec![(Value::Null, json!([]))]);
    }

    #[test]
    fn services_without_a_selector_are_not_managed() {
        let mut s = svc();
        s["spec"].as_object_mut().unwrap().remove("selector");
        assert!(selector(&s).is_none());
        assert!(members(&s, &[pod("a", Some("127.0.0.2"), true, false)]).is_empty());
    }
}
