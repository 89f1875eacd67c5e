//! Calling one webhook: where it is (URL, or a Service resolved to a local address), the HTTPS
//! connection verified against `caBundle` for the name kube-apiserver verifies
//! (`NAME.NAMESPACE.svc` for services), the client certificate kube-apiserver would present for
//! that host (`auth`, from `--admission-control-config-file`), the AdmissionReview POST with its `?timeout=` and the
//! checks kube-apiserver makes on the answer. Errors read like kube-apiserver's
//! (`Post "https://…?timeout=10s": dial tcp 127.0.0.1:1: connect: connection refused`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::auth::ClientAuth;
use super::config::{Target, Webhook};
use crate::store::{Store, object_key};

/// An explicit address for a Service, set by tests and the sandbox (`--service-address`,
/// `SimHandle::set_service_address`, `POST /kube-sim/service-addresses`): kube-sim runs no
/// pods behind Services, so this says where the process standing in for them listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAddress {
    /// `NAMESPACE/NAME`.
    pub service: String,
    /// The Service port this applies to; `None` for every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Where to connect, e.g. `127.0.0.1:9443`.
    pub address: SocketAddr,
}

impl std::str::FromStr for ServiceAddress {
    type Err = String;

    /// `NAMESPACE/NAME[:PORT]=HOST:PORT`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (svc, addr) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected NAMESPACE/NAME[:PORT]=IP:PORT"))?;
        let address: SocketAddr = addr.parse().map_err(|e| format!("{addr:?}: {e}"))?;
        let (service, port) = match svc.rsplit_once(':') {
            Some((n, p)) => (n, Some(p.parse::<u16>().map_err(|e| format!("port {p:?}: {e}"))?)),
            None => (svc, None),
        };
        match service.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {}
            _ => return Err(format!("{service:?}: expected NAMESPACE/NAME")),
        }
        Ok(ServiceAddress { service: service.to_string(), port, address })
    }
}

/// Why a call failed (before any admission decision): the failure policy decides.
#[derive(Debug)]
pub(crate) struct CallError(pub String);

/// What an HTTPS client is built for: CA bundle, host name, address it resolves to, client
/// certificate and key it presents.
type ClientKey = (Option<Vec<u8>>, String, Option<SocketAddr>, Option<Vec<u8>>);

/// Resolves services and keeps one HTTPS client per (CA bundle, host, address, identity).
#[derive(Default)]
pub(crate) struct Caller {
    services: RwLock<Vec<ServiceAddress>>,
    clients: Mutex<HashMap<ClientKey, reqwest::Client>>,
    auth: RwLock<ClientAuth>,
}

impl Caller {
    /// Replaces the client certificates presented to webhooks (by webhook host).
    pub(crate) fn set_client_auth(&self, auth: ClientAuth) {
        *self.auth.write().unwrap_or_else(|p| p.into_inner()) = auth;
    }

    pub(crate) fn set_service_address(&self, a: ServiceAddress) {
        let mut s = self.services.write().unwrap_or_else(|p| p.into_inner());
        s.retain(|x| !(x.service == a.service && x.port == a.port));
        s.push(a);
    }

    pub(crate) fn service_addresses(&self) -> Vec<ServiceAddress> {
        self.services.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn clear_service_addresses(&self) {
        self.services.write().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// A Service's address for `port`: an explicit [`ServiceAddress`], else one of its ready
    /// endpoints, picked at random as kube-apiserver's `ResolveEndpoint` does: from its
    /// EndpointSlices (the serving terminating ones when none is ready, as kube-proxy routes), or,
    /// for a Service without slices, from its Endpoints. The Service itself must exist and expose
    /// `port`, as for kube-apiserver.
    fn resolve(&self, store: &Store, namespace: &str, name: &str, port: u16) -> Result<SocketAddr, String> {
        let svc =
            store.get("services", &object_key(namespace, name)).ok_or_else(|| format!("service {name:?} not found"))?;
        let ports = svc.get("spec").and_then(|s| s.get("ports")).and_then(Value::as_array).cloned().unwrap_or_default();
        let svc_port = ports
            .iter()
            .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
            .ok_or_else(|| format!("no service port {port} found for service {name:?}"))?;
        let key = format!("{namespace}/{name}");
        {
            let s = self.services.read().unwrap_or_else(|p| p.into_inner());
            let exact = s.iter().find(|a| a.service == key && a.port == Some(port));
            if let Some(a) = exact.or_else(|| s.iter().find(|a| a.service == key && a.port.is_none())) {
                return Ok(a.address);
            }
        }
        let port_name = svc_port.get("name").and_then(Value::as_str).unwrap_or("");
        let none = || format!("no endpoints available for service {name:?}");
        let pick = |addrs: Vec<SocketAddr>| addrs.get(rand::random_range(0..addrs.len().max(1))).copied();
        if let Some(addrs) = crate::routing::routable(store, namespace, name, port_name) {
            return pick(addrs).ok_or_else(none);
        }
        let endpoints = store.get("endpoints", &object_key(namespace, name)).ok_or_else(none)?;
        let mut addrs = Vec::new();
        for subset in endpoints.get("subsets").and_then(Value::as_array).into_iter().flatten() {
            let ep_port = subset.get("ports").and_then(Value::as_array).and_then(|ps| {
                ps.iter()
                    .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
                    .and_then(|p| p.get("port"))
                    .and_then(Value::as_u64)
            });
            let Some(p) = ep_port else { continue };
            for a in subset.get("addresses").and_then(Value::as_array).into_iter().flatten() {
                if let Some(ip) = a.get("ip").and_then(Value::as_str)
                    && let Ok(addr) = format!("{ip}:{p}").parse::<SocketAddr>()
                {
                    addrs.push(addr);
                }
            }
        }
        pick(addrs).ok_or_else(none)
    }

    fn client(
        &self,
        ca: Option<&[u8]>,
        host: &str,
        addr: Option<SocketAddr>,
        identity: Option<Vec<u8>>,
    ) -> Result<reqwest::Client, String> {
        let key = (ca.map(<[u8]>::to_vec), host.to_string(), addr, identity.clone());
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        // No pooled connections: a webhook server restarted by a test must not meet a dead one.
        let mut b = reqwest::Client::builder().pool_max_idle_per_host(0).user_agent("kube-apiserver-admission");
        if let Some(ca) = ca {
            let certs = reqwest::Certificate::from_pem_bundle(ca).map_err(|e| format!("invalid caBundle: {e}"))?;
            if certs.is_empty() {
                return Err("invalid caBundle: no PEM certificates".into());
            }
            b = b.tls_certs_only(certs);
        }
        if let Some(a) = addr {
            b = b.resolve(host, a);
        }
        if let Some(pem) = identity {
            let id = reqwest::Identity::from_pem(&pem).map_err(|e| format!("invalid client certificate: {e}"))?;
            b = b.identity(id);
        }
        let c = b.build().map_err(|e| format!("building the webhook client: {e}"))?;
        clients.insert(key, c.clone());
        Ok(c)
    }

    /// POSTs `review` to the webhook and returns its `response`, checked as kube-apiserver
    /// checks it.
    pub(crate) async fn call(&self, store: &Store, hook: &Webhook, review: &Value) -> Result<Value, CallError> {
        let timeout_param = format!("timeout={}s", hook.timeout.as_secs());
        let (url, host, addr, target) = match &hook.target {
            Target::Url(u) => {
                let sep = if u.contains('?') { '&' } else { '?' };
                (format!("{u}{sep}{timeout_param}"), url_authority(u), None, url_authority(u))
            }
            Target::Service { namespace, name, path, port } => {
                let host = format!("{name}.{namespace}.svc");
                let url = format!("https://{host}:{port}{path}?{timeout_param}");
                let target = format!("{host}:{port}");
                match self.resolve(store, namespace, name, *port) {
                    Ok(a) => (url, host, Some(a), target),
                    Err(e) => return Err(CallError(format!("failed to call webhook: Post {url:?}: {e}"))),
                }
            }
        };
        let identity = self.auth.read().unwrap_or_else(|p| p.into_inner()).for_target(&target).map(<[u8]>::to_vec);
        let client = self
            .client(hook.ca_bundle.as_deref(), &host, addr, identity)
            .map_err(|e| CallError(format!("failed to call webhook: {e}")))?;
        let sent =
            client.post(&url).header("Accept", "application/json, */*").json(review).timeout(hook.timeout).send().await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                let dial = addr.map_or_else(|| host.clone(), |a| a.to_string());
                return Err(CallError(format!("failed to call webhook: Post {url:?}: {}", transport_error(&e, &dial))));
            }
        };
        let status = resp.status();
        let body = match tokio::time::timeout(hook.timeout, resp.bytes()).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                let dial = addr.map_or_else(|| host.clone(), |a| a.to_string());
                return Err(CallError(format!("failed to call webhook: Post {url:?}: {}", transport_error(&e, &dial))));
            }
            Err(_) => {
                return Err(CallError(format!("failed to call webhook: Post {url:?}: context deadline exceeded")));
            }
        };
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let text: String = text.chars().take(200).collect();
            let reason = if status.is_server_error() {
                format!("an error on the server ({text:?}) has prevented the request from succeeding")
            } else {
                format!(
                    "the server responded with the status code {} but did not return more information",
                    status.as_u16()
                )
            };
            return Err(CallError(format!("failed to call webhook: {reason}")));
        }
        let answer: Value = serde_json::from_slice(&body).map_err(|e| {
            CallError(format!("failed to call webhook: couldn't get version/kind; json parse error: {e}"))
        })?;
        verify(review, &answer).map_err(|e| CallError(format!("received invalid webhook response: {e}")))
    }
}

/// `VerifyAdmissionResponse` for v1.
fn verify(review: &Value, answer: &Value) -> Result<Value, String> {
    let api_version = answer.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = answer.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        ));
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("webhook response was absent".into());
    };
    let want = review.get("request").and_then(|r| r.get("uid")).and_then(Value::as_str).unwrap_or("");
    let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if want != got {
        return Err(format!("expected response.uid={want:?}, got {got:?}"));
    }
    if let Some(pt) = response.get("patchType").filter(|p| !p.is_null()) {
        return Err(format!("validating webhooks may not return patches, got patchType {pt}"));
    }
    Ok(response.clone())
}

/// `host:port` of an https URL (port 443 when absent), as Go's dialer names it.
fn url_authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let has_port = if authority.starts_with('[') { authority.contains("]:") } else { authority.contains(':') };
    if has_port { authority.to_string() } else { format!("{authority}:443") }
}

/// Words a transport failure as Go's net/http does; `dial` is the address connected to.
fn transport_error(e: &reqwest::Error, dial: &str) -> String {
    if e.is_timeout() {
        return "context deadline exceeded".into();
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut chain = Vec::new();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return format!("dial tcp {dial}: connect: connection refused");
        }
        chain.push(s.to_string());
        source = s.source();
    }
    let text = chain.last().cloned().unwrap_or_else(|| e.to_string());
    if text.contains("certificate") || text.contains("UnknownIssuer") || text.contains("NotValidForName") {
        return format!("tls: failed to verify certificate: {text}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dial_addresses_come_from_the_url() {
        assert_eq!(url_authority("https://127.0.0.1:8443/validate?x"), "127.0.0.1:8443");
        assert_eq!(url_authority("https://hooks.example.com/v"), "hooks.example.com:443");
    }

    #[test]
    fn service_addresses_parse() {
        let a: ServiceAddress = "kourse-system/gdo-webhook=127.0.0.1:9443".parse().unwrap();
        assert_eq!((a.service.as_str(), a.port, a.address.port()), ("kourse-system/gdo-webhook", None, 9443));
        let a: ServiceAddress = "ns/svc:443=127.0.0.1:1".parse().unwrap();
        assert_eq!(a.port, Some(443));
        assert!("svc=127.0.0.1:1".parse::<ServiceAddress>().is_err());
        assert!("ns/svc=localhost".parse::<ServiceAddress>().is_err());
    }

    #[test]
    fn responses_are_verified_like_kube_apiserver() {
        let review = json!({"request": {"uid": "u1"}});
        let ok = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u1", "allowed": true}});
        assert!(verify(&review, &ok).is_ok());
        let wrong_uid = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x", "allowed": true}});
        assert_eq!(verify(&review, &wrong_uid).unwrap_err(), "expected response.uid=\"u1\", got \"x\"");
        let v1beta1 =
            json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "response": {"uid": "u1"}});
        assert!(verify(&review, &v1beta1).unwrap_err().starts_with("expected webhook response of admission.k8s.io/v1"));
        let absent = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
        assert_eq!(verify(&review, &absent).unwrap_err(), "webhook response was absent");
    }
}
