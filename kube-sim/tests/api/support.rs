//! Shared helpers: a kube-sim without the kubelet, raw HTTP access, and a test CRD shaped like
//! the project's GameDeployment. Polling is `kube_sim::testing`'s, shared with the kubelet tests
//! and the end-to-end tests.

#![allow(dead_code)]

use std::time::Duration;

use anyhow::{Context, Result, bail};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube_sim::testing::DEADLINE;
use kube_sim::{SimConfig, SimHandle};
use serde_json::{Value, json};

pub async fn sim() -> Result<SimHandle> {
    sim_with(SimConfig { kubelet: None, ..SimConfig::default() }).await
}

pub async fn sim_with(config: SimConfig) -> Result<SimHandle> {
    kube_sim::start(config).await.context("starting kube-sim")
}

pub use kube_sim::testing::eventually;

/// The media type of aggregated discovery documents (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`).
pub const AGGREGATED_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The group `name` of an aggregated discovery document.
pub fn discovery_group<'a>(discovery: &'a Value, name: &str) -> Result<&'a Value> {
    discovery["items"]
        .as_array()
        .and_then(|groups| groups.iter().find(|g| g["metadata"]["name"] == name))
        .with_context(|| format!("{name} in aggregated discovery"))
}

/// A raw HTTP client for checks on bodies, headers and streams.
pub struct Raw {
    pub base: String,
    pub http: reqwest::Client,
}

pub struct RawResponse {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Raw {
    pub fn new(sim: &SimHandle) -> Self {
        Self { base: sim.url(), http: reqwest::Client::new() }
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<String>,
    ) -> Result<RawResponse> {
        self.send_with(method, path, content_type, body, &[]).await
    }

    pub async fn send_with(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> Result<RawResponse> {
        let m = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut req = self.http.request(m, format!("{}{path}", self.base));
        if let Some(ct) = content_type {
            req = req.header("Content-Type", ct);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req.send().await.with_context(|| format!("{method} {path}"))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(RawResponse { status, headers, body, text })
    }

    /// `method path` as the user of `token` (`Authorization: Bearer <token>`), with `body` as JSON if there is one.
    pub async fn send_as(&self, token: &str, method: &str, path: &str, body: Option<&Value>) -> Result<RawResponse> {
        let authorization = format!("Bearer {token}");
        let content_type = body.map(|_| "application/json");
        self.send_with(method, path, content_type, body.map(Value::to_string), &[("Authorization", &authorization)])
            .await
    }

    pub async fn get(&self, path: &str) -> Result<RawResponse> {
        self.send("GET", path, None, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<RawResponse> {
        self.send("POST", path, Some("application/json"), Some(body.to_string())).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<RawResponse> {
        self.send("PUT", path, Some("application/json"), Some(body.to_string())).await
    }

    pub async fn patch(&self, path: &str, content_type: &str, body: &Value) -> Result<RawResponse> {
        self.send("PATCH", path, Some(content_type), Some(body.to_string())).await
    }

    pub async fn delete(&self, path: &str, body: Option<&Value>) -> Result<RawResponse> {
        self.send("DELETE", path, body.map(|_| "application/json"), body.map(Value::to_string)).await
    }

    /// `GET /apis` as kubectl asks for discovery: aggregated discovery ([`AGGREGATED_DISCOVERY`]) first, plain JSON
    /// (`APIGroupList`) if the server has no aggregated discovery.
    pub async fn aggregated_discovery(&self) -> Result<RawResponse> {
        let accept = format!("{AGGREGATED_DISCOVERY},application/json");
        self.send_with("GET", "/apis", None, None, &[("Accept", &accept)]).await
    }

    /// The resourceVersion of the default namespace's ConfigMap list: a watch from it sees every change made after.
    pub async fn configmaps_version(&self) -> Result<String> {
        let list = self.get("/api/v1/namespaces/default/configmaps").await?;
        Ok(list.body["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string())
    }

    /// Opens a watch and returns its events as they arrive.
    pub async fn watch(&self, path: &str) -> Result<WatchStream> {
        self.watch_with(path, &[]).await
    }

    /// Opens a watch with extra request headers (e.g. `Authorization`).
    pub async fn watch_with(&self, path: &str, headers: &[(&str, &str)]) -> Result<WatchStream> {
        let mut req = self.http.get(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await?;
        Ok(WatchStream { resp, buf: Vec::new() })
    }
}

pub struct WatchStream {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl WatchStream {
    /// The next event, or `None` when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<Value>> {
        match self.next_line().await? {
            Some(line) => Ok(Some(serde_json::from_str(&line)?)),
            None => Ok(None),
        }
    }

    /// The next event's line as the server wrote it, or `None` when the server ended the stream.
    pub async fn next_line(&mut self) -> Result<Option<String>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Ok(Some(String::from_utf8(line)?));
            }
            let chunk = tokio::time::timeout(DEADLINE, self.resp.chunk()).await.context("watch stalled")??;
            match chunk {
                Some(c) => self.buf.extend_from_slice(&c),
                None => return Ok(None),
            }
        }
    }

    /// The next event, or `None` when nothing arrives within `wait` (or the stream ended).
    pub async fn next_with_timeout(&mut self, wait: Duration) -> Result<Option<Value>> {
        match tokio::time::timeout(wait, self.next()).await {
            Ok(r) => r,
            Err(_) => Ok(None),
        }
    }

    /// The next event that is not a bookmark.
    pub async fn next_event(&mut self) -> Result<Value> {
        loop {
            let e = self.next().await?.context("watch ended")?;
            if e["type"] != "BOOKMARK" {
                return Ok(e);
            }
        }
    }
}

/// A GameDeployment-shaped CRD (namespaced, status + scale subresources, printer columns,
/// defaults, validation, preserved and embedded fields) in group `sim.kube-sim.test`.
pub fn test_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gameservers.sim.kube-sim.test"},
        "spec": {
            "group": "sim.kube-sim.test",
            "names": {"kind": "GameServer", "plural": "gameservers", "singular": "gameserver", "shortNames": ["gs"], "listKind": "GameServerList", "categories": ["all"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}
                },
                "additionalPrinterColumns": [
                    {"name": "DESIRED", "type": "integer", "jsonPath": ".spec.replicas", "description": "desired pods"},
                    {"name": "READY", "type": "integer", "jsonPath": ".status.readyReplicas"},
                    {"name": "PHASE", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["template"],
                            "properties": {
                                "replicas": {"type": "integer", "format": "int32", "minimum": 0, "default": 1},
                                "partition": {"x-kubernetes-int-or-string": true},
                                "updateStrategy": {"type": "object", "default": {}, "properties": {
                                    "type": {"type": "string", "enum": ["RollingUpdate", "InplaceUpdate", "HotPatchUpdate"], "default": "RollingUpdate"},
                                    "maxUnavailable": {"x-kubernetes-int-or-string": true, "default": "20%"}
                                }},
                                "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "maxLength": 20},
                                "selector": {"type": "object", "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
                                "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "embedded": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
                                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                                          "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer", "maximum": 65535}}}}
                            }
                        },
                        "status": {"type": "object", "properties": {
                            "replicas": {"type": "integer"},
                            "readyReplicas": {"type": "integer"},
                            "phase": {"type": "string"},
                            "selector": {"type": "string"},
                            "observedGeneration": {"type": "integer"}
                        }}
                    }
                }}
            }]
        }
    })
}

pub fn gameserver_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sim.kube-sim.test", "v1alpha1", "GameServer"),
        "gameservers",
    )
}

pub async fn install_test_crd(client: &kube::Client) -> Result<Api<DynamicObject>> {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_json::from_value(test_crd())?).await.context("creating the test CRD")?;
    Ok(Api::namespaced_with(client.clone(), "default", &gameserver_resource()))
}

pub fn gameserver(name: &str) -> DynamicObject {
    let v = json!({
        "apiVersion": "sim.kube-sim.test/v1alpha1",
        "kind": "GameServer",
        "metadata": {"name": name},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "python:3.4"}]}}}
    });
    // Invariant: the literal above is a valid DynamicObject.
    serde_json::from_value(v).unwrap_or_else(|e| unreachable!("test object: {e}"))
}

/// The `kube::Error::Api` status of a failed call.
pub fn api_error<T: std::fmt::Debug>(r: kube::Result<T>) -> Result<kube::core::Status> {
    match r {
        Err(kube::Error::Api(s)) => Ok(*s),
        other => bail!("expected an API error, got {other:?}"),
    }
}
