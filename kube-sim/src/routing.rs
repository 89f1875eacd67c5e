//! Where kube-sim itself sends traffic for a Service (admission webhooks named by `clientConfig.service`): the
//! endpoints of its EndpointSlices, as kube-proxy routes. The endpoint controllers (`crate::workloads::endpoints`)
//! write the slices; this only reads them.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::Value;

use crate::meta;
use crate::store::{ListRequest, Store};

/// The label that ties an EndpointSlice to its Service.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Where traffic for the Service's port named `port_name` goes, as kube-proxy routes it: the
/// ready endpoints of its EndpointSlices, or, when none is ready, the serving terminating ones.
/// `None` when the Service has no EndpointSlice at all (the caller falls back to Endpoints, which a
/// Service without a selector may have by hand).
pub(crate) fn routable(store: &Store, ns: &str, name: &str, port_name: &str) -> Option<Vec<SocketAddr>> {
    let slices: Vec<Arc<Value>> = store
        .list(
            "endpointslices.discovery.k8s.io",
            &ListRequest { namespace: Some(ns), filter: None, limit: None, start_after: None, at: None },
        )
        .map(|p| p.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| meta::labels(s).and_then(|l| l.get(SERVICE_NAME_LABEL)).and_then(Value::as_str) == Some(name))
        .collect();
    if slices.is_empty() {
        return None;
    }
    let (mut ready, mut serving) = (Vec::new(), Vec::new());
    for slice in &slices {
        let Some(port) = slice.get("ports").and_then(Value::as_array).and_then(|ps| {
            ps.iter()
                .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
                .and_then(|p| p.get("port"))
                .and_then(Value::as_u64)
        }) else {
            continue;
        };
        for e in slice.get("endpoints").and_then(Value::as_array).into_iter().flatten() {
            let cond = |c: &str| e.get("conditions").and_then(|x| x.get(c)).and_then(Value::as_bool);
            let addrs = e.get("addresses").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
            for a in addrs {
                let Ok(addr) = format!("{a}:{port}").parse::<SocketAddr>() else { continue };
                // An absent `ready` means ready; `serving` falls back to `ready`.
                if cond("ready").unwrap_or(true) {
                    ready.push(addr);
                } else if cond("serving").unwrap_or(false) && cond("terminating").unwrap_or(false) {
                    serving.push(addr);
                }
            }
        }
    }
    Some(if ready.is_empty() { serving } else { ready })
}
